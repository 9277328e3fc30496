//! Space allocation: the free extents of every top-level vdev, and the space log that
//! makes them persistent.
//!
//! In memory each top-level vdev keeps its free space as a map of extents
//! (start -> end, logical bytes, sector aligned). Allocation is next-fit from a cursor so
//! streaming writes land contiguously, and rotates between top-level vdevs every
//! `ROTOR_BYTES` so load spreads over all of them.
//!
//! Frees are deferred: a block freed in txg `t` is reusable only after txg
//! `t + DEFER_TXGS` has committed, so the trees of the previous uberblocks stay intact
//! and import can fall back to one of them if the newest fails to verify.
//!
//! Persistence (see `spacelog.rs`): every allocation and free of a txg is appended to a
//! per-txg log block, except the blocks of the log chain itself, which import marks
//! allocated by walking the chain. Nothing here is ever written in place, so a crash at
//! any instant leaves the log of the last committed txg consistent with its tree.

use std::collections::{BTreeMap, VecDeque};

pub const DEFER_TXGS: u64 = 2;
pub const ROTOR_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Extent {
    pub vdev: u32,
    pub offset: u64,
    pub len: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceEntry {
    pub extent: Extent,
    pub alloc: bool,
}

#[derive(Debug, Clone)]
pub struct VdevSpace {
    pub capacity: u64,
    /// Free extents: start -> end (exclusive).
    free: BTreeMap<u64, u64>,
    free_bytes: u64,
    cursor: u64,
    /// False for a faulted vdev: nothing new goes there.
    pub writable: bool,
}

impl VdevSpace {
    pub fn new(capacity: u64) -> VdevSpace {
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        VdevSpace {
            capacity,
            free,
            free_bytes: capacity,
            cursor: 0,
            writable: true,
        }
    }

    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    pub fn extent_count(&self) -> usize {
        self.free.len()
    }

    fn take(&mut self, start: u64, len: u64) {
        let (&fs, &fe) = self
            .free
            .range(..=start)
            .next_back()
            .expect("take from free extent");
        assert!(
            fs <= start && start + len <= fe,
            "allocating space that is not free"
        );
        self.free.remove(&fs);
        if fs < start {
            self.free.insert(fs, start);
        }
        if start + len < fe {
            self.free.insert(start + len, fe);
        }
        self.free_bytes -= len;
    }

    /// Marks `[start, start+len)` allocated; false if any part was not free.
    pub fn mark_allocated(&mut self, start: u64, len: u64) -> bool {
        match self.free.range(..=start).next_back() {
            Some((&fs, &fe)) if fs <= start && start + len <= fe => {
                self.take(start, len);
                true
            }
            _ => false,
        }
    }

    /// Returns `[start, start+len)` to the free map; false if part of it was free already.
    pub fn release(&mut self, start: u64, len: u64) -> bool {
        assert!(start + len <= self.capacity, "release past capacity");
        let end = start + len;
        if let Some((_, &pe)) = self.free.range(..end).next_back() {
            if pe > start {
                return false;
            }
        }
        let mut new_start = start;
        let mut new_end = end;
        if let Some((&ps, &pe)) = self.free.range(..start).next_back() {
            if pe == start {
                self.free.remove(&ps);
                new_start = ps;
            }
        }
        if let Some(&ne) = self.free.get(&end) {
            self.free.remove(&end);
            new_end = ne;
        }
        self.free.insert(new_start, new_end);
        self.free_bytes += len;
        true
    }

    fn allocate(&mut self, len: u64) -> Option<u64> {
        let found = self
            .free
            .range(self.cursor..)
            .chain(self.free.range(..self.cursor))
            .find(|(&s, &e)| e - s >= len)
            .map(|(&s, _)| s)
            .or_else(|| {
                // The cursor may sit inside an extent that starts before it.
                self.free
                    .range(..self.cursor)
                    .next_back()
                    .filter(|(_, &e)| e >= self.cursor + len)
                    .map(|_| self.cursor)
            })?;
        self.take(found, len);
        self.cursor = found + len;
        Some(found)
    }

    /// True if any byte of `[start, start+len)` is free.
    pub fn overlaps_free(&self, start: u64, len: u64) -> bool {
        let end = start + len;
        if end > self.capacity {
            return true;
        }
        match self.free.range(..end).next_back() {
            Some((_, &fe)) => fe > start,
            None => false,
        }
    }

    /// True if any byte of `[start, start+len)` is allocated (free extents are kept
    /// merged, so a wholly free range lies inside one of them).
    pub fn overlaps_allocated(&self, start: u64, len: u64) -> bool {
        let end = start + len;
        if end > self.capacity {
            return true;
        }
        !matches!(self.free.range(..=start).next_back(), Some((_, &fe)) if fe >= end)
    }

    /// Allocated extents (the complement of the free map).
    pub fn allocated_extents(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut pos = 0;
        for (&s, &e) in &self.free {
            if s > pos {
                out.push((pos, s - pos));
            }
            pos = e;
        }
        if pos < self.capacity {
            out.push((pos, self.capacity - pos));
        }
        out
    }
}

/// The pool's allocator.
#[derive(Debug)]
pub struct Allocator {
    pub vdevs: Vec<VdevSpace>,
    rotor: usize,
    rotor_bytes: u64,
    /// Entries of the open txg's space log.
    pending_log: Vec<SpaceEntry>,
    /// Frees waiting for their txg + DEFER_TXGS to commit.
    deferred: VecDeque<(u64, Vec<Extent>)>,
    /// Walks in progress that need freed space kept (see `hold_frees`).
    holds: u32,
}

impl Allocator {
    pub fn new(capacities: &[u64]) -> Allocator {
        Allocator {
            vdevs: capacities.iter().map(|&c| VdevSpace::new(c)).collect(),
            rotor: 0,
            rotor_bytes: 0,
            pending_log: Vec::new(),
            deferred: VecDeque::new(),
            holds: 0,
        }
    }

    /// A top-level vdev added to the pool: all of it free. Its space joins the space
    /// log only as blocks are allocated there, so an import that finds the vdev and
    /// no entry for it sees it empty, which it is.
    pub fn add_vdev(&mut self, capacity: u64) {
        self.vdevs.push(VdevSpace::new(capacity));
    }

    pub fn free_bytes(&self) -> u64 {
        self.vdevs.iter().map(|v| v.free_bytes()).sum()
    }

    pub fn capacity(&self) -> u64 {
        self.vdevs.iter().map(|v| v.capacity).sum()
    }

    /// Bytes freed but not yet reusable.
    pub fn deferred_bytes(&self) -> u64 {
        self.deferred
            .iter()
            .flat_map(|(_, v)| v.iter())
            .map(|e| e.len)
            .sum()
    }

    /// Allocates `copies` extents, each on a different vdev when there are enough of
    /// them. `asize_of(vdev)` gives the size a block needs on that vdev. `logged`
    /// is false only for the space log's own blocks.
    pub fn allocate(
        &mut self,
        copies: usize,
        asize_of: &dyn Fn(usize) -> u64,
        logged: bool,
    ) -> Option<Vec<Extent>> {
        let n = self.vdevs.len();
        let mut out: Vec<Extent> = Vec::with_capacity(copies);
        for copy in 0..copies {
            let mut placed = false;
            for k in 0..n {
                let v = (self.rotor + k) % n;
                if !self.vdevs[v].writable {
                    continue;
                }
                // Later copies prefer vdevs not used yet.
                if out.iter().any(|e| e.vdev as usize == v) && n > out.len() {
                    continue;
                }
                let len = asize_of(v);
                if let Some(off) = self.vdevs[v].allocate(len) {
                    out.push(Extent {
                        vdev: v as u32,
                        offset: off,
                        len,
                    });
                    placed = true;
                    if copy == 0 {
                        self.rotor_bytes += len;
                        if self.rotor_bytes >= ROTOR_BYTES {
                            self.rotor = (v + 1) % n;
                            self.rotor_bytes = 0;
                        } else {
                            self.rotor = v;
                        }
                    }
                    break;
                }
            }
            if !placed {
                // Same-vdev fallback for extra copies on a single-vdev pool.
                let v = out.first().map(|e| e.vdev as usize);
                let fallback = v.and_then(|v| {
                    let len = asize_of(v);
                    self.vdevs[v].allocate(len).map(|off| Extent {
                        vdev: v as u32,
                        offset: off,
                        len,
                    })
                });
                match fallback {
                    Some(e) => out.push(e),
                    None => {
                        for e in out {
                            self.vdevs[e.vdev as usize].release(e.offset, e.len);
                        }
                        return None;
                    }
                }
            }
        }
        if logged {
            self.pending_log
                .extend(out.iter().map(|&extent| SpaceEntry {
                    extent,
                    alloc: true,
                }));
        }
        Some(out)
    }

    /// Allocates `len` bytes on one given vdev (a fixed reservation such as the intent
    /// log's area), logged like any allocation.
    pub fn allocate_on(&mut self, vdev: usize, len: u64) -> Option<Extent> {
        let offset = self.vdevs.get_mut(vdev)?.allocate(len)?;
        let extent = Extent {
            vdev: vdev as u32,
            offset,
            len,
        };
        self.pending_log.push(SpaceEntry {
            extent,
            alloc: true,
        });
        Some(extent)
    }

    /// Records in the open txg's space log an extent allocated earlier without logging
    /// (a block the intent log placed, adopted by the txg that syncs it).
    pub fn log_allocated(&mut self, extent: Extent) {
        self.pending_log.push(SpaceEntry {
            extent,
            alloc: true,
        });
    }

    /// Intent log replay: takes an extent a placed block occupies, unlogged (its txg
    /// logs it when it adopts the block). False if any part of it is not free.
    pub fn claim(&mut self, extent: Extent) -> bool {
        self.vdevs.get_mut(extent.vdev as usize).is_some_and(|v| {
            extent.offset + extent.len <= v.capacity && v.mark_allocated(extent.offset, extent.len)
        })
    }

    /// Undoes a `claim` of the same replay (nothing else saw the extent).
    pub fn unclaim(&mut self, extent: Extent) {
        let ok = self.vdevs[extent.vdev as usize].release(extent.offset, extent.len);
        assert!(ok, "unclaiming free space {extent:?}");
    }

    /// Frees an extent in `txg`; it becomes reusable after `txg + DEFER_TXGS` commits.
    pub fn free(&mut self, extent: Extent, txg: u64, logged: bool) {
        if logged {
            self.pending_log.push(SpaceEntry {
                extent,
                alloc: false,
            });
        }
        match self.deferred.back_mut() {
            Some((t, v)) if *t == txg => v.push(extent),
            _ => self.deferred.push_back((txg, vec![extent])),
        }
    }

    /// While held (a scrub or resilver walks a list of blocks taken earlier), freed
    /// space stays deferred, so no listed block is overwritten under the walk.
    pub fn hold_frees(&mut self) {
        self.holds += 1;
    }

    pub fn release_frees(&mut self) {
        assert!(self.holds > 0, "release without hold");
        self.holds -= 1;
    }

    /// Called after `txg` committed: frees of `txg - DEFER_TXGS` and older become usable,
    /// except those of txgs after `oldest_pin`, the committed txg when the oldest reader
    /// still running began (`Storage::pin_reads`): that reader may hold a pointer to a
    /// block freed in any later txg, and is about to read it or repair a copy of it.
    pub fn txg_committed(&mut self, txg: u64, oldest_pin: Option<u64>) {
        if let Some(upto) = txg.checked_sub(DEFER_TXGS) {
            self.release_frees_upto(upto, oldest_pin);
        }
    }

    /// Every vdev's next allocation starts from its lowest free space again, so freed
    /// space is reused at once: for crash tests, whose short workloads would otherwise
    /// never come back to it.
    pub fn rewind_cursors(&mut self) {
        for v in &mut self.vdevs {
            v.cursor = 0;
        }
    }

    /// Frees of `upto` and older become usable (pins and holds permitting).
    pub fn release_frees_upto(&mut self, upto: u64, oldest_pin: Option<u64>) {
        if self.holds > 0 {
            return;
        }
        while let Some((t, _)) = self.deferred.front() {
            if *t > upto || oldest_pin.is_some_and(|pin| *t > pin) {
                break;
            }
            let (_, extents) = self.deferred.pop_front().unwrap();
            for e in extents {
                let ok = self.vdevs[e.vdev as usize].release(e.offset, e.len);
                assert!(ok, "double free of {e:?}");
            }
        }
    }

    pub fn take_pending_log(&mut self) -> Vec<SpaceEntry> {
        std::mem::take(&mut self.pending_log)
    }

    /// Allocated extents as the log's base records them: allocated minus deferred frees.
    pub fn base_extents(&self) -> Vec<Extent> {
        let mut spaces = self.vdevs.clone();
        for (_, extents) in &self.deferred {
            for e in extents {
                spaces[e.vdev as usize].release(e.offset, e.len);
            }
        }
        let mut out = Vec::new();
        for (v, space) in spaces.iter().enumerate() {
            for (offset, len) in space.allocated_extents() {
                out.push(Extent {
                    vdev: v as u32,
                    offset,
                    len,
                });
            }
        }
        out
    }

    /// Import: replays one entry. False if the log contradicts itself.
    pub fn replay(&mut self, entry: SpaceEntry) -> bool {
        let e = entry.extent;
        let Some(space) = self.vdevs.get_mut(e.vdev as usize) else {
            return false;
        };
        if e.offset + e.len > space.capacity {
            return false;
        }
        if entry.alloc {
            space.mark_allocated(e.offset, e.len)
        } else {
            space.release(e.offset, e.len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn next_fit_is_contiguous_and_rotates() {
        let mut a = Allocator::new(&[64 << 20, 64 << 20]);
        let size = |_| 128 * 1024;
        let first = a.allocate(1, &size, true).unwrap()[0];
        let second = a.allocate(1, &size, true).unwrap()[0];
        assert_eq!(second.vdev, first.vdev);
        assert_eq!(second.offset, first.offset + 128 * 1024);
        let mut vdevs = std::collections::HashSet::new();
        for _ in 0..64 {
            vdevs.insert(a.allocate(1, &size, true).unwrap()[0].vdev);
        }
        assert_eq!(vdevs.len(), 2);
    }

    #[test]
    fn copies_go_to_different_vdevs_and_frees_are_deferred() {
        let mut a = Allocator::new(&[1 << 20, 1 << 20]);
        let ex = a.allocate(2, &|_| 4096, true).unwrap();
        assert_ne!(ex[0].vdev, ex[1].vdev);
        let before = a.free_bytes();
        a.free(ex[0], 5, true);
        a.txg_committed(6, None);
        assert_eq!(a.free_bytes(), before);
        a.txg_committed(7, None);
        assert_eq!(a.free_bytes(), before + 4096);
    }

    #[test]
    fn a_reader_pinned_before_a_free_keeps_its_space_from_reuse() {
        let mut a = Allocator::new(&[1 << 20]);
        let ex = a.allocate(1, &|_| 4096, true).unwrap();
        let before = a.free_bytes();
        a.free(ex[0], 5, true);
        // A reader began when txg 4 was the last committed: it may hold the pointer.
        a.txg_committed(7, Some(4));
        a.txg_committed(8, Some(4));
        assert_eq!(a.free_bytes(), before);
        // A reader that began after txg 5 committed cannot have taken it.
        a.txg_committed(9, Some(5));
        assert_eq!(a.free_bytes(), before + 4096);
    }

    #[test]
    fn full_vdev_reports_none_and_leaks_nothing() {
        let mut a = Allocator::new(&[16 * 4096]);
        for _ in 0..16 {
            a.allocate(1, &|_| 4096, true).unwrap();
        }
        assert!(a.allocate(1, &|_| 4096, true).is_none());
        assert_eq!(a.free_bytes(), 0);
    }

    proptest! {
        #[test]
        fn alloc_free_keeps_accounting(ops in proptest::collection::vec((1u64..8, any::<bool>()), 1..200)) {
            let cap = 256 * 4096;
            let mut a = Allocator::new(&[cap]);
            let mut live: Vec<Extent> = Vec::new();
            let mut txg = 1;
            for (sectors, free) in ops {
                if free && !live.is_empty() {
                    let e = live.remove(0);
                    a.free(e, txg, true);
                } else if let Some(ex) = a.allocate(1, &|_| sectors * 4096, true) {
                    live.push(ex[0]);
                }
                txg += 1;
                a.txg_committed(txg, None);
                let used: u64 = live.iter().map(|e| e.len).sum();
                prop_assert_eq!(a.free_bytes() + used + a.deferred_bytes(), cap);
            }
            // Replaying the log from scratch gives the same free map.
            let log = a.take_pending_log();
            let mut b = Allocator::new(&[cap]);
            for e in log { prop_assert!(b.replay(e)); }
            let base_a: Vec<_> = a.base_extents();
            let base_b: Vec<_> = b.base_extents();
            prop_assert_eq!(base_a, base_b);
        }
    }
}
