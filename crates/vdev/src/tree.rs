//! The vdev tree: leaf devices grouped into top-level vdevs (a single disk, an N-way
//! mirror, or a RAID-Z1/2/3 group), and the block I/O that runs over them.
//!
//! This layer knows sectors and copies, never files or datasets. It does not know the
//! checksum format either: every read takes a `verify` closure from the pool layer,
//! which holds the checksum in the parent block pointer. That closure is what drives
//! self-healing: a copy or a stripe reconstruction is accepted only when it verifies,
//! and any copy or column that turns out to be wrong is rewritten with the good data
//! and counted against its leaf.
//!
//! Invariants:
//! - A write is acknowledged only if the block stays readable: a mirror needs one
//!   child written, RAID-Z needs at most `nparity` columns missing.
//! - Reads never return data that failed `verify`.
//! - Leaves (`leaf.rs`) refuse I/O while not usable; a failed write faults one.
//! - Offsets given to a top-level vdev are logical byte offsets within its data space
//!   (see `raidz_map` for RAID-Z); leaves add their data-area start.

use crate::aligned::AlignedBuf;
use crate::device::SECTOR_SIZE;
pub use crate::leaf::{Health, Leaf, LeafCounters, LeafCountersSnapshot, LEAF_ERROR_LIMIT};
use crate::raidz_map::{raidz_asize, raidz_map};
use crate::raidz_math;
use std::sync::Arc;

/// Largest I/O a batch of adjacent writes is merged into.
pub const MAX_AGGREGATE_BYTES: usize = 1 << 20;
/// Largest I/O adjacent reads of a batch are merged into: a whole read-ahead job (4 MiB
/// on disks) on one leaf, one request rather than four 1 MiB reads one after another
/// (which held a one-disk pool's read-ahead to a quarter of its window in flight). A
/// disk streams about as fast with its bytes in flight in fewer, larger requests (fio
/// on this VM's disk: 4 MiB x 8 and 1 MiB x 32 within its run-to-run drift).
pub const MAX_READ_AGGREGATE_BYTES: usize = 4 << 20;

/// One leaf write of a batch: `buf[range]` goes to `leaf` at `offset`.
#[derive(Debug, Clone)]
pub struct PlannedWrite {
    pub leaf: usize,
    pub offset: u64,
    pub buf: Arc<AlignedBuf>,
    pub range: std::ops::Range<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Disk,
    Mirror,
    RaidZ { nparity: usize },
}

impl Layout {
    pub fn name(self) -> String {
        match self {
            Layout::Disk => "disk".into(),
            Layout::Mirror => "mirror".into(),
            Layout::RaidZ { nparity } => format!("raidz{nparity}"),
        }
    }
    /// How many leaves may be lost while every block stays readable.
    pub fn tolerance(self, leaves: usize) -> usize {
        match self {
            Layout::Disk => 0,
            Layout::Mirror => leaves - 1,
            Layout::RaidZ { nparity } => nparity,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// Read the cheapest copy; fall back to redundancy only on failure.
    Normal,
    /// Read and verify every copy and every parity column; repair what is wrong.
    Scrub,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RepairReport {
    /// Copies or columns found bad (read error or wrong contents).
    pub bad_copies: u64,
    pub repaired_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum VdevError {
    #[error("vdev {vdev}: no copy of the block at offset {offset} verifies ({detail})")]
    Unrecoverable {
        vdev: u32,
        offset: u64,
        detail: String,
    },
    #[error("vdev {vdev}: write at offset {offset} failed on too many devices")]
    WriteFailed { vdev: u32, offset: u64 },
}

/// A top-level vdev: the unit the allocator stripes across.
#[derive(Debug)]
pub struct TopVdev {
    pub id: u32,
    pub layout: Layout,
    pub leaves: Vec<Arc<Leaf>>,
    /// Usable bytes of each child's data area (the smallest child decides).
    child_bytes: u64,
}

fn sector_round(n: u64) -> u64 {
    n.div_ceil(SECTOR_SIZE as u64) * SECTOR_SIZE as u64
}

impl TopVdev {
    pub fn new(id: u32, layout: Layout, leaves: Vec<Arc<Leaf>>) -> TopVdev {
        assert!(!leaves.is_empty());
        match layout {
            Layout::Disk => assert_eq!(leaves.len(), 1),
            Layout::Mirror => assert!(leaves.len() >= 2),
            Layout::RaidZ { nparity } => {
                assert!((1..=3).contains(&nparity) && leaves.len() > nparity)
            }
        }
        let child_bytes = leaves.iter().map(|l| l.data_len()).min().unwrap();
        let child_bytes = child_bytes / SECTOR_SIZE as u64 * SECTOR_SIZE as u64;
        TopVdev {
            id,
            layout,
            leaves,
            child_bytes,
        }
    }

    /// The same vdev (id, and each child's usable size, which the allocator's map
    /// was made for) with other leaves: a mirror side attached or detached, a plain
    /// disk becoming a mirror and back. Every present leaf must be as large.
    pub fn with_leaves(&self, layout: Layout, leaves: Vec<Arc<Leaf>>) -> TopVdev {
        assert!(
            matches!(
                (self.layout, layout),
                (Layout::Disk | Layout::Mirror, Layout::Disk | Layout::Mirror)
            ),
            "only plain disks and mirrors change their children"
        );
        let mut top = TopVdev::new(self.id, layout, leaves);
        assert!(
            top.leaves
                .iter()
                .filter(|l| l.device().is_some())
                .all(|l| l.data_len() >= self.child_bytes),
            "a child smaller than its vdev"
        );
        top.child_bytes = self.child_bytes;
        top
    }

    /// Usable bytes of each child's data area.
    pub fn child_bytes(&self) -> u64 {
        self.child_bytes
    }

    /// Logical bytes the allocator may hand out.
    pub fn capacity_bytes(&self) -> u64 {
        match self.layout {
            Layout::Disk | Layout::Mirror => self.child_bytes,
            Layout::RaidZ { .. } => self.child_bytes * self.leaves.len() as u64,
        }
    }

    /// Allocated (logical) size of a block of `io_size` bytes.
    pub fn asize(&self, io_size: u64) -> u64 {
        let io_size = sector_round(io_size);
        match self.layout {
            Layout::Disk | Layout::Mirror => io_size,
            Layout::RaidZ { nparity } => raidz_asize(self.leaves.len(), nparity, io_size),
        }
    }

    pub fn health(&self) -> Health {
        let down = self.leaves.iter().filter(|l| !l.is_usable()).count();
        if down == 0 {
            Health::Online
        } else if down <= self.layout.tolerance(self.leaves.len()) {
            Health::Degraded
        } else {
            Health::Faulted
        }
    }

    /// Writes one block (`data.len()` a sector multiple) at logical `offset`, leaf by
    /// leaf in the calling thread (repairs; the sync path batches `plan_write`s).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), VdevError> {
        let planned = self.plan_write(offset, Arc::new(AlignedBuf::from_slice(data)));
        self.write_planned(planned, false)
    }

    /// The leaf writes that store one block (`data` is the whole sector-rounded block):
    /// every mirror side, or every RAID-Z column with freshly generated parity. Nothing
    /// is written yet; `write_planned` issues a batch of them.
    pub fn plan_write(&self, offset: u64, data: Arc<AlignedBuf>) -> Vec<PlannedWrite> {
        let len = data.len();
        assert!(len.is_multiple_of(SECTOR_SIZE) && len > 0);
        assert!(offset + self.asize(len as u64) <= self.capacity_bytes());
        match self.layout {
            Layout::Disk | Layout::Mirror => (0..self.leaves.len())
                .map(|leaf| PlannedWrite {
                    leaf,
                    offset,
                    buf: data.clone(),
                    range: 0..len,
                })
                .collect(),
            Layout::RaidZ { nparity } => {
                let map = raidz_map(self.leaves.len(), nparity, offset, len as u64);
                let parity_len = map.columns[0].size;
                let mut parity: Vec<AlignedBuf> = (0..nparity)
                    .map(|_| AlignedBuf::for_overwrite(parity_len))
                    .collect();
                let mut ranges = Vec::with_capacity(map.columns.len() - nparity);
                let mut pos = 0;
                for col in map.data_columns() {
                    ranges.push(pos..pos + col.size);
                    pos += col.size;
                }
                {
                    let chunks: Vec<&[u8]> = ranges.iter().map(|r| &data[r.clone()]).collect();
                    let mut prefs: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
                    raidz_math::generate_parity(nparity, &chunks, &mut prefs);
                }
                let mut out = Vec::with_capacity(map.columns.len());
                for (i, p) in parity.into_iter().enumerate() {
                    let col = map.columns[i];
                    out.push(PlannedWrite {
                        leaf: col.child,
                        offset: col.child_offset,
                        buf: Arc::new(p),
                        range: 0..col.size,
                    });
                }
                for (i, col) in map.data_columns().iter().enumerate() {
                    out.push(PlannedWrite {
                        leaf: col.child,
                        offset: col.child_offset,
                        buf: data.clone(),
                        range: ranges[i].clone(),
                    });
                }
                out
            }
        }
    }

    /// Issues a batch of planned writes: per leaf, sorted by offset, adjacent writes
    /// merged into I/Os of up to `MAX_AGGREGATE_BYTES`, all leaves in parallel. Fails
    /// if more leaves failed than the layout tolerates (the failed leaves are FAULTED).
    /// With `parallel` false the leaves are written one after another, so the order of
    /// device operations is deterministic (crash tests replay from a seed).
    pub fn write_planned(
        &self,
        writes: Vec<PlannedWrite>,
        parallel: bool,
    ) -> Result<(), VdevError> {
        if writes.is_empty() {
            return Ok(());
        }
        let first_offset = writes[0].offset;
        let mut per_leaf: Vec<Vec<PlannedWrite>> =
            (0..self.leaves.len()).map(|_| Vec::new()).collect();
        for w in writes {
            per_leaf[w.leaf].push(w);
        }
        // One leaf's share of the batch: sorted, adjacent pieces merged into one I/O.
        let write_leaf = |leaf: usize, mut ws: Vec<PlannedWrite>| -> bool {
            let leaf_ref = &self.leaves[leaf];
            ws.sort_by_key(|w| w.offset);
            let mut ok = true;
            let mut i = 0;
            while i < ws.len() {
                let mut j = i + 1;
                let mut run_len = ws[i].range.len();
                while j < ws.len()
                    && ws[j].offset == ws[i].offset + run_len as u64
                    && run_len + ws[j].range.len() <= MAX_AGGREGATE_BYTES
                {
                    run_len += ws[j].range.len();
                    j += 1;
                }
                let pieces: Vec<&[u8]> = ws[i..j].iter().map(|w| &w.buf[w.range.clone()]).collect();
                ok &= leaf_ref.write_vectored(ws[i].offset, &pieces);
                i = j;
            }
            ok
        };
        let work: Vec<(usize, Vec<PlannedWrite>)> = per_leaf
            .into_iter()
            .enumerate()
            .filter(|(_, ws)| !ws.is_empty())
            .collect();
        let mut failed = vec![false; self.leaves.len()];
        if parallel {
            std::thread::scope(|s| {
                let handles: Vec<_> = work
                    .into_iter()
                    .map(|(leaf, ws)| {
                        let turn = move || {
                            let _turn = self.leaves[leaf].batch_turn();
                            write_leaf(leaf, ws)
                        };
                        (leaf, s.spawn(turn))
                    })
                    .collect();
                for (leaf, h) in handles {
                    failed[leaf] = !h.join().expect("leaf writer panicked");
                }
            });
        } else {
            for (leaf, ws) in work {
                failed[leaf] = !write_leaf(leaf, ws);
            }
        }
        let down = self
            .leaves
            .iter()
            .enumerate()
            .filter(|(i, l)| failed[*i] || !l.is_usable())
            .count();
        let survivors = self.leaves.len() - down;
        let ok = match self.layout {
            Layout::Disk => down == 0,
            Layout::Mirror => survivors > 0,
            Layout::RaidZ { nparity } => down <= nparity,
        };
        if ok {
            Ok(())
        } else {
            Err(VdevError::WriteFailed {
                vdev: self.id,
                offset: first_offset,
            })
        }
    }

    /// Reads many blocks with as few device I/Os as possible: data columns (or one mirror
    /// side) per leaf, sorted, adjacent pieces merged into reads of up to
    /// `MAX_READ_AGGREGATE_BYTES`. Nothing is verified here: a `None` (a piece failed to
    /// read) or a block that fails its checksum must go through `read`, which
    /// reconstructs and heals.
    ///
    /// Leaves without a head are read one after another in the calling thread: callers
    /// (read-ahead workers, client threads) already provide the parallelism, and a
    /// thread per leaf cost more (stack maps, TLB shootdowns) than it saved. Disks
    /// (`Device::rotational`) are read all at once, a task a leaf on the disk reader
    /// threads (`disk_readers`): a batch then reaches every disk together, so batches
    /// taken in order by several read-ahead workers arrive at each disk in offset
    /// order, rather than in whatever order the workers reach it on their way through
    /// the leaves (which cost a seek back for each piece that came late), and no disk
    /// idles while a batch waits on the others one by one. The hand-off is
    /// microseconds; a disk read is milliseconds. `parallel` false (deterministic
    /// pools: simulations that replay one I/O order) reads every leaf in the calling
    /// thread.
    pub fn read_many(&self, reqs: &[(u64, u64)], parallel: bool) -> Vec<Option<AlignedBuf>> {
        let n = self.leaves.len();
        // A mirror's batch comes from one side, chosen by its first block.
        let side = match self.layout {
            Layout::RaidZ { .. } => 0,
            Layout::Disk | Layout::Mirror => {
                let first = reqs.first().map_or(0, |r| r.0);
                let Some(&side) = self.read_order(first).first() else {
                    return reqs.iter().map(|_| None).collect();
                };
                side
            }
        };
        let mut outs: Vec<AlignedBuf> = reqs
            .iter()
            .map(|&(_, size)| AlignedBuf::for_overwrite(size as usize))
            .collect();
        // Each request's buffer cut into its pieces (one mirror side, or RAID-Z's data
        // columns in buffer order), handed to their leaves.
        let mut per_leaf: Vec<Vec<LeafPiece<'_>>> = (0..n).map(|_| Vec::new()).collect();
        for (request, (out, &(offset, size))) in outs.iter_mut().zip(reqs).enumerate() {
            match self.layout {
                Layout::Disk | Layout::Mirror => per_leaf[side].push(LeafPiece {
                    offset,
                    buf: &mut out[..],
                    request,
                }),
                Layout::RaidZ { nparity } => {
                    let map = raidz_map(n, nparity, offset, size);
                    let mut rest: &mut [u8] = &mut out[..];
                    for col in map.data_columns() {
                        let (buf, tail) = std::mem::take(&mut rest).split_at_mut(col.size);
                        per_leaf[col.child].push(LeafPiece {
                            offset: col.child_offset,
                            buf,
                            request,
                        });
                        rest = tail;
                    }
                    assert!(rest.is_empty(), "data columns cover the request's buffer");
                }
            }
        }
        let busy = per_leaf.iter().filter(|p| !p.is_empty()).count();
        let parallel = parallel && busy > 1 && self.leaves.iter().all(|l| l.is_rotational());
        let failed: Vec<usize> = if parallel {
            let failed = std::sync::Mutex::new(Vec::new());
            let tasks: Vec<Box<dyn FnOnce() + Send + '_>> = per_leaf
                .into_iter()
                .enumerate()
                .filter(|(_, p)| !p.is_empty())
                .map(|(leaf, p)| {
                    let (leaf, failed) = (&self.leaves[leaf], &failed);
                    Box::new(move || {
                        let lost = read_leaf_pieces(leaf, p);
                        if !lost.is_empty() {
                            failed.lock().unwrap().extend(lost);
                        }
                    }) as Box<dyn FnOnce() + Send + '_>
                })
                .collect();
            crate::disk_readers::run_all(tasks);
            failed.into_inner().unwrap()
        } else {
            per_leaf
                .into_iter()
                .enumerate()
                .flat_map(|(leaf, p)| read_leaf_pieces(&self.leaves[leaf], p))
                .collect()
        };
        let mut ok = vec![true; reqs.len()];
        for request in failed {
            ok[request] = false;
        }
        outs.into_iter()
            .zip(ok)
            .map(|(out, ok)| ok.then_some(out))
            .collect()
    }

    /// Reads the block of `io_size` bytes at logical `offset`, accepting only data for
    /// which `verify` returns true, repairing bad copies on the way.
    pub fn read(
        &self,
        offset: u64,
        io_size: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        mode: ReadMode,
    ) -> Result<(AlignedBuf, RepairReport), VdevError> {
        assert!(io_size.is_multiple_of(SECTOR_SIZE as u64) && io_size > 0);
        assert!(offset + self.asize(io_size) <= self.capacity_bytes());
        match self.layout {
            Layout::Disk | Layout::Mirror => self.read_copies(offset, io_size, verify, mode),
            Layout::RaidZ { nparity } => self.read_raidz(nparity, offset, io_size, verify, mode),
        }
    }

    /// The usable sides of a mirror (or the one disk) in the order a read at `offset`
    /// tries them: cheapest first by `Leaf::read_cost` (bytes queued, and whether the
    /// head must seek), so a stream keeps to the side whose head is there until that
    /// side is a seek's worth busier, then streams on from the other side; as OpenZFS's
    /// mirror chooses, but weighing queues in bytes. Equal costs go by 1 MiB region of
    /// the offset, so reads on idle sides still spread.
    pub fn read_order(&self, offset: u64) -> Vec<usize> {
        let n = self.leaves.len();
        let region = ((offset >> 20) as usize) % n;
        let mut order: Vec<(u64, usize, usize)> = (0..n)
            .filter(|&i| self.leaves[i].is_usable())
            .map(|i| (self.leaves[i].read_cost(offset), (i + n - region) % n, i))
            .collect();
        order.sort_unstable();
        order.into_iter().map(|(_, _, i)| i).collect()
    }

    fn unrecoverable(&self, offset: u64, detail: impl Into<String>) -> VdevError {
        VdevError::Unrecoverable {
            vdev: self.id,
            offset,
            detail: detail.into(),
        }
    }

    fn read_copies(
        &self,
        offset: u64,
        io_size: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        mode: ReadMode,
    ) -> Result<(AlignedBuf, RepairReport), VdevError> {
        let mut report = RepairReport::default();
        let mut good: Option<AlignedBuf> = None;
        let mut bad: Vec<usize> = Vec::new();
        for i in self.read_order(offset) {
            let leaf = &self.leaves[i];
            let mut buf = AlignedBuf::for_overwrite(io_size as usize);
            if !leaf.read(offset, &mut buf) {
                bad.push(i);
                continue;
            }
            if verify(&buf) {
                if good.is_none() {
                    good = Some(buf);
                }
                if mode == ReadMode::Normal {
                    break;
                }
            } else {
                leaf.count_cksum();
                bad.push(i);
            }
        }
        let Some(good) = good else {
            return Err(self.unrecoverable(offset, format!("{} copies bad", bad.len())));
        };
        report.bad_copies = bad.len() as u64;
        for i in bad {
            let leaf = &self.leaves[i];
            if leaf.is_usable() {
                leaf.repair(offset, &good);
                report.repaired_bytes += io_size;
            }
        }
        Ok((good, report))
    }

    fn read_raidz(
        &self,
        nparity: usize,
        offset: u64,
        io_size: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        mode: ReadMode,
    ) -> Result<(AlignedBuf, RepairReport), VdevError> {
        let map = raidz_map(self.leaves.len(), nparity, offset, io_size);
        let ncols = map.columns.len();
        let mut report = RepairReport::default();

        // Fast path: data columns straight into the output buffer.
        let mut out = AlignedBuf::for_overwrite(io_size as usize);
        let mut data_ok = vec![true; ncols];
        {
            let mut pos = 0;
            for (i, col) in map.columns.iter().enumerate().skip(nparity) {
                data_ok[i] =
                    self.leaves[col.child].read(col.child_offset, &mut out[pos..pos + col.size]);
                pos += col.size;
            }
        }
        let all_data_read = data_ok.iter().all(|&ok| ok);
        if all_data_read && mode == ReadMode::Normal && verify(&out) {
            return Ok((out, report));
        }

        // Slow path: every column in its own buffer.
        let mut cols: Vec<Vec<u8>> = Vec::with_capacity(ncols);
        let mut errored: Vec<usize> = Vec::new();
        {
            let mut pos = 0;
            for (i, col) in map.columns.iter().enumerate() {
                if i >= nparity {
                    cols.push(out[pos..pos + col.size].to_vec());
                    pos += col.size;
                    if !data_ok[i] {
                        errored.push(i);
                    }
                } else {
                    let mut buf = vec![0u8; col.size];
                    if !self.leaves[col.child].read(col.child_offset, &mut buf) {
                        errored.push(i);
                    }
                    cols.push(buf);
                }
            }
        }
        if errored.len() > nparity {
            return Err(self.unrecoverable(offset, format!("{} columns unreadable", errored.len())));
        }
        let assemble = |cols: &[Vec<u8>]| -> Vec<u8> {
            let mut v = Vec::with_capacity(io_size as usize);
            for c in &cols[nparity..] {
                v.extend_from_slice(c);
            }
            v
        };
        let rebuild = |cols: &[Vec<u8>], missing: &[usize]| -> Vec<Vec<u8>> {
            let mut work = cols.to_vec();
            if !missing.is_empty() {
                let mut refs: Vec<&mut [u8]> = work.iter_mut().map(|c| &mut c[..]).collect();
                raidz_math::reconstruct(nparity, &mut refs, missing)
                    .expect("missing columns within parity");
            }
            work
        };

        // Try the known-bad columns first, then widen the guess one column at a time.
        let others: Vec<usize> = (0..ncols).filter(|i| !errored.contains(i)).collect();
        let mut found: Option<(Vec<Vec<u8>>, Vec<usize>)> = None;
        'search: for extra in 0..=(nparity - errored.len()) {
            for combo in combinations(&others, extra) {
                let mut missing = errored.clone();
                missing.extend_from_slice(&combo);
                if missing.iter().all(|&m| m < nparity) && !missing.is_empty() && extra > 0 {
                    // Only parity guessed wrong: data unchanged, tried already at extra = 0.
                    continue;
                }
                let work = rebuild(&cols, &missing);
                if verify(&assemble(&work)) {
                    found = Some((work, missing));
                    break 'search;
                }
            }
        }
        let Some((mut good, missing)) = found else {
            return Err(self.unrecoverable(offset, "no column combination verifies"));
        };
        // Parity columns not already rebuilt are checked against the good data in a
        // scrub, or whenever the data needed repair (so repaired stripes are whole).
        let mut wrong: Vec<usize> = missing
            .iter()
            .copied()
            .filter(|&i| errored.contains(&i) || good[i] != cols[i])
            .collect();
        if mode == ReadMode::Scrub || !wrong.is_empty() {
            let all_parity: Vec<usize> = (0..nparity).collect();
            let regenerated = rebuild(&good, &all_parity);
            for p in 0..nparity {
                if !missing.contains(&p) && regenerated[p] != cols[p] {
                    wrong.push(p);
                    good[p] = regenerated[p].clone();
                }
            }
        }
        for &i in &wrong {
            let col = map.columns[i];
            let leaf = &self.leaves[col.child];
            report.bad_copies += 1;
            if !errored.contains(&i) {
                leaf.count_cksum();
            }
            if leaf.is_usable() {
                leaf.repair(col.child_offset, &good[i]);
                report.repaired_bytes += col.size as u64;
            }
        }
        let mut pos = 0;
        for c in &good[nparity..] {
            out[pos..pos + c.len()].copy_from_slice(c);
            pos += c.len();
        }
        Ok((out, report))
    }

    /// Writes the parts of a block that belong to `leaf_index` (resilver), reading the
    /// block through redundancy first. Returns bytes written.
    pub fn resilver_block(
        &self,
        offset: u64,
        io_size: u64,
        leaf_index: usize,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<u64, VdevError> {
        let (data, _) = self.read(offset, io_size, verify, ReadMode::Normal)?;
        let leaf = &self.leaves[leaf_index];
        let mut written = 0;
        for w in self
            .plan_write(offset, Arc::new(data))
            .into_iter()
            .filter(|w| w.leaf == leaf_index)
        {
            leaf.write(w.offset, &w.buf[w.range.clone()]);
            written += w.range.len() as u64;
        }
        Ok(written)
    }

    /// Flushes every usable child; `parallel`: all at once, one thread each (a flush is
    /// mostly waiting, and the children are separate disks). True if the vdev's data
    /// survives the children that failed.
    pub fn flush(&self, parallel: bool) -> bool {
        let usable: Vec<&Arc<Leaf>> = self.leaves.iter().filter(|l| l.is_usable()).collect();
        let failed = if parallel && usable.len() > 1 {
            std::thread::scope(|s| {
                let handles: Vec<_> = usable.iter().map(|l| s.spawn(|| l.flush())).collect();
                handles
                    .into_iter()
                    .map(|h| h.join())
                    .filter(|r| !matches!(r, Ok(true)))
                    .count()
            })
        } else {
            usable.iter().filter(|l| !l.flush()).count()
        };
        let down = self.leaves.iter().filter(|l| !l.is_usable()).count();
        failed == 0 || down <= self.layout.tolerance(self.leaves.len())
    }
}

/// One piece of a `read_many` request on one leaf: where on the leaf, and the part of
/// the request's buffer it fills.
struct LeafPiece<'a> {
    offset: u64,
    buf: &'a mut [u8],
    request: usize,
}

/// Reads one leaf's pieces in offset order, adjacent ones merged into reads of up to
/// `MAX_READ_AGGREGATE_BYTES`; returns the requests whose pieces failed.
fn read_leaf_pieces(leaf: &Leaf, mut pieces: Vec<LeafPiece<'_>>) -> Vec<usize> {
    pieces.sort_by_key(|p| p.offset);
    let mut failed = Vec::new();
    let mut rest: &mut [LeafPiece<'_>] = &mut pieces;
    while !rest.is_empty() {
        let mut j = 1;
        let mut run = rest[0].buf.len();
        while j < rest.len()
            && rest[j].offset == rest[0].offset + run as u64
            && run + rest[j].buf.len() <= MAX_READ_AGGREGATE_BYTES
        {
            run += rest[j].buf.len();
            j += 1;
        }
        let (batch, tail) = std::mem::take(&mut rest).split_at_mut(j);
        let offset = batch[0].offset;
        let mut targets: Vec<&mut [u8]> = batch.iter_mut().map(|p| &mut *p.buf).collect();
        if !leaf.read_vectored(offset, &mut targets) {
            failed.extend(batch.iter().map(|p| p.request));
        }
        rest = tail;
    }
    failed
}

/// Every `k`-element subset of `items`, in lexicographic order.
fn combinations(items: &[usize], k: usize) -> Vec<Vec<usize>> {
    fn go(
        items: &[usize],
        k: usize,
        start: usize,
        cur: &mut Vec<usize>,
        out: &mut Vec<Vec<usize>>,
    ) {
        if cur.len() == k {
            out.push(cur.clone());
            return;
        }
        for i in start..items.len() {
            cur.push(items[i]);
            go(items, k, i + 1, cur, out);
            cur.pop();
        }
    }
    let mut out = Vec::new();
    go(items, k, 0, &mut Vec::new(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::label;
    use crate::sim_device::{Fault, SimDevice};

    /// Six simulated devices; `rotational` gives them a (1 us) seek, so they count as
    /// disks and `read_many` reads their leaves in parallel.
    fn raidz2_of_six(rotational: bool) -> (TopVdev, Vec<Arc<SimDevice>>) {
        let devs: Vec<Arc<SimDevice>> = (0..6)
            .map(|i| {
                let d = SimDevice::new(label::MIN_DEVICE_BYTES, i);
                if rotational {
                    d.set_speed(Some(crate::sim_device::SpeedLimit {
                        bytes_per_sec: None,
                        iops: None,
                        seek: std::time::Duration::from_micros(1),
                    }));
                }
                d
            })
            .collect();
        let leaves = devs
            .iter()
            .enumerate()
            .map(|(i, d)| Arc::new(Leaf::new(i as u64 + 1, format!("sim{i}"), d.clone())))
            .collect();
        (TopVdev::new(0, Layout::RaidZ { nparity: 2 }, leaves), devs)
    }

    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    #[test]
    fn read_many_lands_aggregated_runs_in_each_blocks_buffer() {
        read_many_lands_pieces(false);
    }

    /// The same on disks, whose leaves `read_many` reads all at once.
    #[test]
    fn read_many_on_disks_reads_leaves_in_parallel_into_the_same_buffers() {
        read_many_lands_pieces(true);
    }

    fn read_many_lands_pieces(rotational: bool) {
        let (top, devs) = raidz2_of_six(rotational);
        assert_eq!(top.leaves[0].is_rotational(), rotational);
        // Back-to-back blocks of mixed sizes, so each leaf's pieces form runs that
        // span several blocks, in an order unlike the leaves' own.
        let sizes = [
            128 << 10,
            4096,
            64 << 10,
            128 << 10,
            12288,
            128 << 10,
            32768,
        ];
        let mut reqs = Vec::new();
        let mut offset = 0u64;
        for (i, &size) in sizes.iter().enumerate() {
            top.write(offset, &pattern(i as u8, size)).unwrap();
            reqs.push((offset, size as u64));
            offset += top.asize(size as u64);
        }
        reqs.reverse();
        let outs = top.read_many(&reqs, true);
        for (k, (&(_, size), out)) in reqs.iter().zip(&outs).enumerate() {
            let i = sizes.len() - 1 - k;
            let out = out.as_ref().expect("every leaf is healthy");
            assert_eq!(&out[..], &pattern(i as u8, size as usize)[..], "block {i}");
        }

        // A leaf that fails its read loses exactly the blocks with data on it; the
        // others still arrive whole.
        devs[0].inject(Fault::Dead);
        let outs = top.read_many(&reqs, true);
        for (k, (&(off, size), out)) in reqs.iter().zip(&outs).enumerate() {
            let i = sizes.len() - 1 - k;
            let map = raidz_map(6, 2, off, size);
            let on_dead_leaf = map.data_columns().iter().any(|c| c.child == 0);
            match out {
                Some(out) => {
                    assert!(!on_dead_leaf, "block {i} read from a dead leaf");
                    assert_eq!(&out[..], &pattern(i as u8, size as usize)[..]);
                }
                None => assert!(on_dead_leaf, "block {i} lost without cause"),
            }
        }
        assert!(outs.iter().any(|o| o.is_none()) && outs.iter().any(|o| o.is_some()));
    }

    /// A mirror read goes where the head is: one stream keeps to one side (the old
    /// rule alternated sides by 1 MiB region, a seek per read on disks), a side with
    /// a queue a seek's worth longer loses the read, and a stream that moved to the
    /// other side stays there.
    #[test]
    fn mirror_reads_follow_the_head_and_spread_by_queue() {
        const MIB: usize = 1 << 20;
        let devs: Vec<Arc<SimDevice>> = (0..2)
            .map(|i| {
                let d = SimDevice::new(64 << 20, 90 + i);
                d.set_speed(Some(crate::sim_device::SpeedLimit {
                    bytes_per_sec: None,
                    iops: None,
                    seek: std::time::Duration::from_micros(1),
                }));
                d
            })
            .collect();
        let leaves: Vec<Arc<Leaf>> = devs
            .iter()
            .enumerate()
            .map(|(i, d)| Arc::new(Leaf::new(i as u64 + 1, format!("sim{i}"), d.clone())))
            .collect();
        let top = TopVdev::new(0, Layout::Mirror, leaves.clone());
        assert!(crate::device::Device::rotational(&*devs[0]));
        let data = pattern(3, 12 * MIB);
        top.write(0, &data).unwrap();
        let reads = |i: usize| leaves[i].counters().read_ops;
        let read = |mib: usize| {
            let (buf, _) = top
                .read(
                    (mib * MIB) as u64,
                    MIB as u64,
                    &|b| b == &data[mib * MIB..(mib + 1) * MIB],
                    ReadMode::Normal,
                )
                .unwrap();
            assert_eq!(buf.len(), MIB);
        };
        for l in &leaves {
            l.clear_counters();
        }
        // Both heads ended the write at 12 MiB; a read at 0 is far from both, so the
        // region rule picks side 0, and the stream then follows its head.
        for mib in 0..8 {
            read(mib);
        }
        assert_eq!((reads(0), reads(1)), (8, 0), "one stream, one side");
        // Side 0 now has more queued than a seek is worth: the next read goes to
        // side 1 although side 0's head is at its offset.
        leaves[0].pretend_queued(crate::leaf::SEEK_BYTES + 1);
        read(8);
        assert_eq!((reads(0), reads(1)), (8, 1));
        // With the queue gone, the stream stays on side 1, where its head now is.
        leaves[0].pretend_queued(0);
        read(9);
        read(10);
        assert_eq!((reads(0), reads(1)), (8, 3));
        // A read that continues neither side's last I/O but lies within 1 MiB of one
        // head costs half a seek there: side 1's head is at 11 MiB, side 0's at 8.
        let (buf, _) = top
            .read((11 * MIB + 4096) as u64, 4096, &|_| true, ReadMode::Normal)
            .unwrap();
        assert_eq!(&buf[..], &data[11 * MIB + 4096..11 * MIB + 8192]);
        assert_eq!((reads(0), reads(1)), (8, 4));
    }
}
