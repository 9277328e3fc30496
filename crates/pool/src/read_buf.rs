//! The result of a read as a list of slices of shared buffers, so the bytes of a read
//! can go from the ARC (or from a dirty buffer not yet synced) to a socket in one
//! `writev` without being copied into a reply buffer first.
//!
//! Invariants: every part holds a reference (`Arc`) to the buffer it slices, so the
//! buffer outlives the reply even if the ARC evicts it or a later write replaces the
//! dirty block (writers never mutate a buffer someone else holds: the ARC's blocks
//! are immutable and dirty blocks are replaced, not edited, once shared). A part's
//! range lies inside its buffer; `len` is the sum of the parts' lengths. Holes read
//! as zeros from one static page of zeros, never from an allocation.

use crate::storage::CachedBlock;
use std::ops::Range;
use std::sync::Arc;
use vdev::AlignedBuf;

/// Zeros for holes; a hole longer than this is sent as several slices of it.
static ZEROS: [u8; 128 << 10] = [0u8; 128 << 10];

#[derive(Debug, Clone)]
enum Part {
    /// A verified block, as the ARC holds it.
    Block(CachedBlock, Range<usize>),
    /// A block written in the open transaction group, not yet on disk.
    Dirty(Arc<AlignedBuf>, Range<usize>),
    Zeros(usize),
}

impl Part {
    fn len(&self) -> usize {
        match self {
            Part::Block(_, r) | Part::Dirty(_, r) => r.len(),
            Part::Zeros(n) => *n,
        }
    }
}

/// The bytes of one read, borrowed from the buffers that hold them.
#[derive(Debug, Clone, Default)]
pub struct ReadBuf {
    parts: Vec<Part>,
    len: usize,
}

impl ReadBuf {
    pub fn new() -> ReadBuf {
        ReadBuf::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn push_block(&mut self, block: CachedBlock, range: Range<usize>) {
        assert!(range.start <= range.end && range.end <= block.bytes().len());
        self.len += range.len();
        self.parts.push(Part::Block(block, range));
    }

    pub(crate) fn push_dirty(&mut self, buf: Arc<AlignedBuf>, range: Range<usize>) {
        assert!(range.start <= range.end && range.end <= buf.len());
        self.len += range.len();
        self.parts.push(Part::Dirty(buf, range));
    }

    pub(crate) fn push_zeros(&mut self, n: usize) {
        self.len += n;
        match self.parts.last_mut() {
            Some(Part::Zeros(m)) => *m += n,
            _ => self.parts.push(Part::Zeros(n)),
        }
    }

    /// The bytes as slices in order, ready for `writev`.
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.parts.iter().flat_map(|p| {
            let (one, zeros): (Option<&[u8]>, usize) = match p {
                Part::Block(b, r) => (Some(&b.bytes()[r.clone()]), 0),
                Part::Dirty(b, r) => (Some(&b[r.clone()]), 0),
                Part::Zeros(n) => (None, *n),
            };
            let zero_chunks = (0..zeros.div_ceil(ZEROS.len()))
                .map(move |i| &ZEROS[..(zeros - i * ZEROS.len()).min(ZEROS.len())]);
            one.into_iter().chain(zero_chunks)
        })
    }

    /// Copies the bytes into `out`, which must be exactly `len()` long.
    pub fn copy_to(&self, out: &mut [u8]) {
        assert_eq!(
            out.len(),
            self.len,
            "copy_to needs a buffer of the read's length"
        );
        let mut at = 0;
        for s in self.slices() {
            out[at..at + s.len()].copy_from_slice(s);
            at += s.len();
        }
        debug_assert_eq!(at, self.len);
        debug_assert_eq!(self.parts.iter().map(Part::len).sum::<usize>(), self.len);
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.copy_to(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_follow_the_parts_in_order_and_split_long_holes() {
        let mut r = ReadBuf::new();
        r.push_block(CachedBlock::from_vec((0..10u8).collect()), 2..5);
        r.push_zeros(3);
        r.push_zeros(ZEROS.len()); // merges with the previous hole
        let mut dirty = AlignedBuf::zeroed(4096);
        dirty[..4].copy_from_slice(b"abcd");
        r.push_dirty(Arc::new(dirty), 1..4);
        assert_eq!(r.len(), 3 + 3 + ZEROS.len() + 3);
        let lens: Vec<usize> = r.slices().map(|s| s.len()).collect();
        assert_eq!(lens, vec![3, ZEROS.len(), 3, 3]);
        let v = r.to_vec();
        assert_eq!(&v[..3], &[2, 3, 4]);
        assert!(v[3..3 + 3 + ZEROS.len()].iter().all(|&b| b == 0));
        assert_eq!(&v[v.len() - 3..], b"bcd");
    }
}
