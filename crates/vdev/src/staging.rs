//! Staging buffers in huge pages, so a large O_DIRECT read into scattered memory
//! reaches the disk as one request rather than many.
//!
//! Why: the block layer cuts a request at the device's segment limit (`max_segments`,
//! 254 on virtio disks), and a segment is a physically contiguous run of memory. Block
//! buffers from `huge_slab` are few runs already and are read into directly; a read
//! into other memory (the slab full, or pieces smaller than its slots) whose pages
//! could exceed the limit goes into a stage instead, one slot of `huge_slab` of the
//! read's size, and its bytes are then copied into the caller's buffers (a copy
//! costs about a tenth of a CPU-second per GB and leaves the data warm in cache for
//! the checksum that follows). fio, 8 x 4 MiB in flight on one file, read a median
//! 1,235 MB/s into heap buffers (1.6 MiB a request) and 2,206 into huge-page buffers
//! (4 MiB a request), rounds interleaved (`bench/disk-submission.sh`).
//!
//! A read into many small pieces is staged too, even when it fits one request
//! (`file_device`'s `SMALL_PIECE_BYTES`): the disk pays for every segment. On this
//! VM, shoal's own leaf reads of a raidz2 stream (1 MiB runs of 32 KiB columns, each
//! into its own record buffer) replayed by a script read 1,948-1,987 MB/s into the
//! pieces and 2,270-2,348 into one buffer (three rounds alternating).
//!
//! Invariants: a stage is lent to one reader at a time (an `AlignedBuf` in a slab
//! slot, given back on drop); without huge pages there are no stages (`take` answers
//! None) and reads go straight to their buffers.

use crate::aligned::AlignedBuf;
use crate::huge_slab;

/// The largest read that is staged: the largest aggregated leaf read (`tree`'s
/// `MAX_READ_AGGREGATE_BYTES`), and the slab's largest slot.
pub const STAGE_BYTES: usize = huge_slab::MAX_SLOT;

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

/// A buffer of `len` bytes (at most `STAGE_BYTES`) in huge pages for one read, from
/// the slab class that fits it, or None if the slab has no slot of that class free.
pub fn take(len: usize) -> Option<AlignedBuf> {
    assert!(len <= STAGE_BYTES, "a stage of {len} bytes");
    let stage = AlignedBuf::in_huge_pages(len)?;
    #[cfg(test)]
    TAKEN.with(|t| t.set(t.get() + 1));
    Some(stage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_is_a_huge_page_aligned_window_that_keeps_its_place() {
        assert!(huge_slab::reserve(STAGE_BYTES, 2), "huge pages for stages");
        let mut s = take(STAGE_BYTES).expect("huge pages for stages on this machine");
        assert_eq!(s.as_ptr() as usize % huge_slab::HUGE_PAGE, 0);
        assert_eq!(s.len(), STAGE_BYTES);
        let at = s.as_ptr();
        s[STAGE_BYTES - 1] = 7;
        assert_eq!(s.as_ptr(), at);
        drop(s);
        assert!(huge_slab::reserve(STAGE_BYTES, 1));
        let s = take(STAGE_BYTES).unwrap();
        assert_eq!(s.as_ptr() as usize % huge_slab::HUGE_PAGE, 0);
        // A smaller read takes a stage of its own size, from a smaller class.
        assert!(huge_slab::reserve(1 << 20, 1));
        let small = take(1 << 20).unwrap();
        assert_eq!(small.len(), 1 << 20);
        assert_eq!(
            small.as_ptr() as usize % (1 << 20),
            0,
            "aligned to its class"
        );
    }
}
