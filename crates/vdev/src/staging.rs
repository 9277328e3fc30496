//! Staging buffers backed by huge pages, so a large O_DIRECT read reaches the disk as
//! one request rather than many.
//!
//! Why: the block layer cuts a request at the device's segment limit (`max_segments`,
//! 254 on virtio disks), and a segment is a physically contiguous run of memory. A
//! 4 MiB read into block buffers made of scattered 4 KiB pages is up to 1,024 segments:
//! split into several requests. This VM's disk serves few large runs much faster than
//! many small ones: fio, 8 x 4 MiB in flight on one file, read a median 1,235 MB/s
//! into heap buffers (1.6 MiB a request) and 2,206 into huge-page buffers (4 MiB a
//! request), rounds interleaved (`bench/disk-submission.sh`). A 2 MiB huge page is one
//! segment, so a staged read of up to `STAGE_BYTES` is at most a few segments and one
//! request; its bytes are then copied into the caller's buffers (a copy costs about a
//! tenth of a CPU-second per GB and leaves the data warm in cache for the checksum
//! that follows).
//!
//! Invariants: a stage is lent to one reader at a time (taken from the free list,
//! given back on drop); its aligned window never moves (the backing vector is never
//! resized after creation). Huge pages are advice: if the kernel has none to give, a
//! stage is ordinary memory and reads through it are as correct, just no faster.
//!
//! Memory: a stage is 6 MiB (a 4 MiB window plus room to align it), one per large read
//! in flight; up to `KEEP` stay for reuse (about 100 MiB for a one-disk pool's 16
//! read-ahead workers, more on wide RAID-Z groups, whose leaves read in parallel).

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

/// The largest read that is staged: the largest aggregated leaf read (`tree`'s
/// `MAX_READ_AGGREGATE_BYTES`).
pub const STAGE_BYTES: usize = 4 << 20;
/// Reads smaller than this fit the segment limit anyway (a 512 KiB read is at most
/// 128 pages) and go straight to their buffers.
pub const STAGE_MIN_BYTES: usize = 512 << 10;
const HUGE_PAGE: usize = 2 << 20;
/// Stages kept for reuse; more readers than this at once allocate (and free) their own.
const KEEP: usize = 64;

static FREE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

#[cfg(test)]
thread_local! {
    /// Stages this thread has taken: lets a test see that a read went through one.
    static TAKEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many stages the calling thread has taken so far.
#[cfg(test)]
pub fn taken_on_this_thread() -> u64 {
    TAKEN.with(|t| t.get())
}

/// A `STAGE_BYTES` buffer aligned to a huge page, lent to one read.
pub struct Stage {
    storage: Vec<u8>,
    start: usize,
}

impl Stage {
    /// A stage from the free list, or a new one.
    pub fn take() -> Stage {
        let storage = FREE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_else(new_storage);
        #[cfg(test)]
        TAKEN.with(|t| t.set(t.get() + 1));
        let start = aligned_offset(storage.as_ptr() as usize);
        assert!(
            start + STAGE_BYTES <= storage.len(),
            "stage window in bounds"
        );
        Stage { storage, start }
    }
}

/// Bytes from `addr` to the next huge-page boundary (0 if it is one).
fn aligned_offset(addr: usize) -> usize {
    (HUGE_PAGE - addr % HUGE_PAGE) % HUGE_PAGE
}

fn new_storage() -> Vec<u8> {
    // Room to place a huge-page-aligned window of STAGE_BYTES anywhere in it.
    let mut storage: Vec<u8> = Vec::with_capacity(STAGE_BYTES + HUGE_PAGE);
    let addr = storage.as_ptr() as usize;
    let start = aligned_offset(addr);
    // SAFETY: madvise only advises the kernel how to back `[addr + start, +
    // STAGE_BYTES)`, which lies inside this vector's allocation (capacity STAGE_BYTES +
    // HUGE_PAGE, start < HUGE_PAGE) and is owned by it; it reads and writes no memory
    // and cannot invalidate the allocation. MADV_HUGEPAGE before the first touch lets
    // the faults below take huge pages. An error (no THP support) is only lost advice.
    unsafe {
        libc::madvise(
            (addr + start) as *mut libc::c_void,
            STAGE_BYTES,
            libc::MADV_HUGEPAGE,
        );
    }
    storage.resize(STAGE_BYTES + HUGE_PAGE, 0);
    // Memory the allocator had touched before keeps its small pages; MADV_COLLAPSE
    // (Linux 6.1) rebuilds them as huge pages now, keeping the contents.
    // SAFETY: as above; the range is inside the (now initialised) vector, and collapse
    // preserves every byte of it.
    unsafe {
        libc::madvise(
            (storage.as_mut_ptr() as usize + start) as *mut libc::c_void,
            STAGE_BYTES,
            libc::MADV_COLLAPSE,
        );
    }
    storage
}

impl Deref for Stage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[self.start..self.start + STAGE_BYTES]
    }
}

impl DerefMut for Stage {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + STAGE_BYTES]
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < KEEP {
            free.push(std::mem::take(&mut self.storage));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_is_a_huge_page_aligned_window_that_keeps_its_place() {
        let mut s = Stage::take();
        assert_eq!(s.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(s.len(), STAGE_BYTES);
        let at = s.as_ptr();
        s[STAGE_BYTES - 1] = 7;
        assert_eq!(s.as_ptr(), at);
        drop(s);
        // A recycled stage is aligned too (its window is found again).
        let s = Stage::take();
        assert_eq!(s.as_ptr() as usize % HUGE_PAGE, 0);
    }
}
