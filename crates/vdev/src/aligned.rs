//! Sector-aligned buffers for O_DIRECT, built without `unsafe`. Block-sized ones
//! (above 32 KiB, up to 4 MiB) are slots of huge pages from `huge_slab`, so a disk
//! transfer into them is few segments and reaches the disk whole; the others, and all
//! of them when the slab has nothing to give, are a `Vec<u8>` over-allocated by one
//! sector, used from its first aligned byte. The backing vector is never resized
//! after creation, so the aligned start never moves.
//!
//! Buffers are recycled: block-sized buffers are allocated and freed at device speed,
//! and fresh memory costs a page fault and a kernel zeroing per 4 KiB, which dominated
//! the write path. Dropped buffers go back to a free list per size (bounded to
//! `RECYCLE_MAX_BYTES` in all), and `for_overwrite` hands one out without zeroing it.

use crate::device::SECTOR_SIZE;
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

/// Bytes kept on the free lists at most.
pub const RECYCLE_MAX_BYTES: usize = 1 << 30;
/// Buffers smaller than this are not worth recycling.
const RECYCLE_MIN_BYTES: usize = 16 << 10;

struct Recycler {
    lists: HashMap<usize, Vec<Vec<u8>>>,
    bytes: usize,
}

static RECYCLER: Mutex<Option<Recycler>> = Mutex::new(None);

/// Backing capacity for a buffer of `len` bytes: recyclable sizes are rounded up to a
/// power of two so buffers of nearby sizes share a free list.
fn class_capacity(len: usize) -> usize {
    if len + SECTOR_SIZE >= RECYCLE_MIN_BYTES {
        len.next_power_of_two() + SECTOR_SIZE
    } else {
        len + SECTOR_SIZE
    }
}

fn take_storage(capacity: usize) -> Option<Vec<u8>> {
    if capacity < RECYCLE_MIN_BYTES {
        return None;
    }
    let mut guard = RECYCLER.lock().unwrap();
    let r = guard.as_mut()?;
    let v = r.lists.get_mut(&capacity)?.pop()?;
    r.bytes -= capacity;
    Some(v)
}

fn give_storage(v: Vec<u8>) {
    let capacity = v.len();
    if capacity < RECYCLE_MIN_BYTES {
        return;
    }
    let mut guard = RECYCLER.lock().unwrap();
    let r = guard.get_or_insert_with(|| Recycler {
        lists: HashMap::new(),
        bytes: 0,
    });
    // Each size class gets at most half of the bound, so one size cannot starve
    // the others.
    let list = r.lists.entry(capacity).or_default();
    if r.bytes + capacity <= RECYCLE_MAX_BYTES
        && (list.len() + 1) * capacity <= RECYCLE_MAX_BYTES / 2
    {
        list.push(v);
        r.bytes += capacity;
    }
}

pub struct AlignedBuf {
    storage: Storage,
    len: usize,
}

enum Storage {
    /// A heap vector, used from byte `start` (its first sector-aligned one).
    Heap { vec: Vec<u8>, start: usize },
    /// A slot of `huge_slab`, aligned to its size; used from its start.
    Huge(&'static mut [u8]),
}

impl AlignedBuf {
    fn wrap(vec: Vec<u8>, len: usize) -> AlignedBuf {
        let addr = vec.as_ptr() as usize;
        let start = (SECTOR_SIZE - addr % SECTOR_SIZE) % SECTOR_SIZE;
        assert!(start + len <= vec.len(), "aligned window in bounds");
        let buf = AlignedBuf {
            storage: Storage::Heap { vec, start },
            len,
        };
        debug_assert_eq!(buf.as_ptr() as usize % SECTOR_SIZE, 0);
        buf
    }

    /// A buffer in huge pages (a `huge_slab` slot), contents unspecified; None if the
    /// slab has none to give for `len`.
    pub fn in_huge_pages(len: usize) -> Option<AlignedBuf> {
        let slot = crate::huge_slab::take(len)?;
        assert!(len <= slot.len() && (slot.as_ptr() as usize).is_multiple_of(SECTOR_SIZE));
        Some(AlignedBuf {
            storage: Storage::Huge(slot),
            len,
        })
    }

    pub fn zeroed(len: usize) -> AlignedBuf {
        if let Some(mut b) = Self::in_huge_pages(len) {
            b.fill(0);
            return b;
        }
        Self::zeroed_on_heap(len)
    }

    /// A zeroed buffer on the heap, never in huge pages.
    pub fn zeroed_on_heap(len: usize) -> AlignedBuf {
        match take_storage(class_capacity(len)) {
            Some(mut v) => {
                v.fill(0);
                Self::wrap(v, len)
            }
            None => Self::wrap(vec![0u8; class_capacity(len)], len),
        }
    }

    /// A buffer whose contents are unspecified (old data of a recycled buffer, or
    /// zeros): for callers that overwrite all of it.
    pub fn for_overwrite(len: usize) -> AlignedBuf {
        if let Some(b) = Self::in_huge_pages(len) {
            return b;
        }
        match take_storage(class_capacity(len)) {
            Some(v) => Self::wrap(v, len),
            None => Self::wrap(vec![0u8; class_capacity(len)], len),
        }
    }

    pub fn from_slice(data: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::for_overwrite(data.len());
        b.copy_from_slice(data);
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.storage {
            Storage::Heap { vec, start } => &vec[*start..*start + self.len],
            Storage::Huge(slot) => &slot[..self.len],
        }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.storage {
            Storage::Heap { vec, start } => &mut vec[*start..*start + self.len],
            Storage::Huge(slot) => &mut slot[..self.len],
        }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // Each backing is swapped for an empty one (which owns nothing) and handed back.
        match &mut self.storage {
            Storage::Heap { vec, .. } => give_storage(std::mem::take(vec)),
            Storage::Huge(slot) => crate::huge_slab::give(std::mem::take(slot)),
        }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        AlignedBuf::from_slice(self)
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn always_aligned() {
        for len in [0usize, 1, 511, 4096, 4097, 131072, 1 << 20] {
            let b = AlignedBuf::zeroed(len);
            assert_eq!(b.len(), len);
            if len > 0 {
                assert_eq!(b.as_ptr() as usize % SECTOR_SIZE, 0);
            }
            assert!(b.iter().all(|&x| x == 0));
            let c = b.clone();
            if len > 0 {
                assert_eq!(c.as_ptr() as usize % SECTOR_SIZE, 0);
            }
        }
    }

    #[test]
    fn recycled_buffers_are_aligned_and_zeroed_on_request() {
        for _ in 0..4 {
            let mut b = AlignedBuf::for_overwrite(128 * 1024);
            b.fill(0xAB);
            drop(b);
            let z = AlignedBuf::zeroed(128 * 1024);
            assert_eq!(z.as_ptr() as usize % SECTOR_SIZE, 0);
            assert!(z.iter().all(|&x| x == 0));
            let o = AlignedBuf::for_overwrite(128 * 1024);
            assert_eq!(o.len(), 128 * 1024);
            assert_eq!(o.as_ptr() as usize % SECTOR_SIZE, 0);
        }
    }
}
