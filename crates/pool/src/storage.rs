//! Block I/O of the pool: compress, checksum, allocate and write a block; read a block
//! through the ARC, verify it against its pointer, heal bad copies, decompress.
//!
//! Invariants:
//! - A block is written only to freshly allocated space (copy-on-write); nothing
//!   written here overwrites live data. The only writes in place are a read's repair
//!   of a bad copy with the block's own verified bytes, and those land in space that
//!   still belongs to that block: a reader pins freed space before it takes pointers
//!   from a tree (`pin_reads`), so the block cannot have been freed and its space
//!   reused under the repair. (Labels and the intent log's rings write in place too,
//!   in areas of their own.)
//! - Every read is verified against the checksum in its pointer before anything
//!   else looks at it; data that fails is never returned (the vdev layer tries every
//!   copy and RAID-Z combination, then the next DVA is tried).
//! - A stored block is compressed only when that saves at least one sector (a
//!   received block is written as its sender stored it, which kept the same rule).
//! - The ARC holds verified, decompressed blocks keyed by (first DVA, birth txg), which
//!   names one immutable block version: a key never maps to different contents.

use crate::alloc::Allocator;
use crate::arc::{AccessKind, AdaptiveCache, Weighted};
use crate::blkptr::{BlockPointer, BlockType, Dva, MAX_DVAS};
use crate::checksum::{self, ChecksumKind};
use crate::compress::{self, Compression};
use crate::PoolError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use vdev::{AlignedBuf, ReadMode, RepairReport, TopVdev, SECTOR_SIZE};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockKey {
    pub vdev: u32,
    pub offset: u64,
    pub birth: u64,
}

impl BlockKey {
    pub fn of(bp: &BlockPointer) -> BlockKey {
        BlockKey {
            vdev: bp.dvas[0].vdev,
            offset: bp.dvas[0].offset,
            birth: bp.birth_txg,
        }
    }
}

/// A verified, decompressed block, shared between the ARC and readers without copying.
#[derive(Debug)]
pub enum BlockBytes {
    Aligned(AlignedBuf, usize),
    /// The dirty buffer a block was written from, shared with the ARC.
    Shared(Arc<AlignedBuf>, usize),
    Owned(Vec<u8>),
}

impl BlockBytes {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            BlockBytes::Aligned(b, len) => &b[..*len],
            BlockBytes::Shared(b, len) => &b[..*len],
            BlockBytes::Owned(v) => v,
        }
    }
}

#[derive(Debug, Clone)]
pub struct CachedBlock(pub Arc<BlockBytes>);

impl CachedBlock {
    pub fn from_vec(v: Vec<u8>) -> CachedBlock {
        CachedBlock(Arc::new(BlockBytes::Owned(v)))
    }
    pub fn bytes(&self) -> &[u8] {
        self.0.as_slice()
    }
}

impl Weighted for CachedBlock {
    fn weight_bytes(&self) -> usize {
        self.bytes().len() + 128
    }
}

/// A data block as another pool stored it (a received stream's block): its bytes
/// already in their stored compression, padded with zeros to whole sectors, so it
/// is written as it came, without a decompress and compress on the way.
#[derive(Debug)]
pub struct StoredBlock {
    pub compression: Compression,
    /// Bytes once decompressed.
    pub lsize: u32,
    /// Stored bytes (before the sector padding of `io`).
    pub psize: u32,
    io: Arc<AlignedBuf>,
}

impl StoredBlock {
    /// Checks what can be checked without decompressing: sizes in range, and an
    /// uncompressed block exactly `lsize` long.
    pub fn new(compression: Compression, lsize: u32, stored: &[u8]) -> Result<Self, PoolError> {
        let mut io = AlignedBuf::zeroed(sector_round(stored.len() as u64) as usize);
        io[..stored.len()].copy_from_slice(stored);
        Self::from_padded(compression, lsize, stored.len(), io)
    }

    /// `new` of the first `psize` bytes of `io`, which is already `psize` rounded up to
    /// whole sectors with zeros after `psize` (a received payload read straight into
    /// it): no copy.
    pub fn from_padded(
        compression: Compression,
        lsize: u32,
        psize: usize,
        io: AlignedBuf,
    ) -> Result<Self, PoolError> {
        if lsize == 0
            || lsize > crate::dnode::MAX_BLOCK_SIZE
            || psize == 0
            || psize > lsize as usize
            || (compression == Compression::Off && psize != lsize as usize)
        {
            return Err(PoolError::InvalidArgument(format!(
                "stored block of {psize} bytes for {lsize} in {compression:?}"
            )));
        }
        if io.len() as u64 != sector_round(psize as u64) || io[psize..].iter().any(|&b| b != 0) {
            return Err(PoolError::InvalidArgument(format!(
                "stored block of {psize} bytes in a buffer of {} not zero-padded to a sector",
                io.len()
            )));
        }
        Ok(StoredBlock {
            compression,
            lsize,
            psize: psize as u32,
            io: Arc::new(io),
        })
    }

    pub fn stored(&self) -> &[u8] {
        &self.io[..self.psize as usize]
    }

    /// The logical bytes (for reads of a block not yet synced).
    pub fn decompress(&self) -> Result<AlignedBuf, PoolError> {
        let mut out = AlignedBuf::zeroed(self.lsize as usize);
        compress::decompress(self.compression, self.stored(), &mut out).map_err(|e| {
            PoolError::Corrupt(format!("a received block does not decompress: {e}"))
        })?;
        Ok(out)
    }
}

/// What a data block write starts from.
#[derive(Clone, Copy)]
enum Payload<'a> {
    /// Logical bytes, compressed here per the spec; `shared` when they are a buffer
    /// the ARC may keep.
    Logical(&'a [u8], Option<&'a Arc<AlignedBuf>>),
    /// Bytes already stored elsewhere in their compression (the spec's is ignored).
    Stored(&'a StoredBlock),
}

/// How to write one block.
#[derive(Debug, Clone, Copy)]
pub struct BlockSpec {
    pub block_type: BlockType,
    pub level: u8,
    pub compression: Compression,
    pub checksum: ChecksumKind,
    pub copies: usize,
    pub fill: u64,
}

impl BlockSpec {
    pub fn metadata(block_type: BlockType, level: u8) -> BlockSpec {
        BlockSpec {
            block_type,
            level,
            compression: Compression::Lz4,
            checksum: ChecksumKind::Fletcher4,
            copies: 2,
            fill: 0,
        }
    }
}

#[derive(Debug, Default)]
pub struct PoolCounters {
    pub blocks_written: AtomicU64,
    pub blocks_read: AtomicU64,
    pub logical_bytes_written: AtomicU64,
    pub physical_bytes_written: AtomicU64,
    pub healed_copies: AtomicU64,
    pub unrecoverable_reads: AtomicU64,
    /// ARC lookups, at `access_index(hit, kind, metadata)`.
    pub arc_accesses: [AtomicU64; 8],
}

/// Where an ARC lookup is counted in `PoolCounters::arc_accesses`.
pub fn access_index(hit: bool, kind: AccessKind, metadata: bool) -> usize {
    (hit as usize) << 2 | ((kind == AccessKind::Prefetch) as usize) << 1 | metadata as usize
}

/// Whether a read may go to the devices (`Any`) or must be answered from the ARC and
/// in-memory state alone (`CachedOnly`, for a server thread that must not block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetch {
    Any,
    CachedOnly,
}

/// What `access_index` counted at `i`: (hit, kind, metadata).
pub fn access_of(i: usize) -> (bool, AccessKind, bool) {
    let kind = if i & 2 != 0 {
        AccessKind::Prefetch
    } else {
        AccessKind::Demand
    };
    (i & 4 != 0, kind, i & 1 != 0)
}

/// Writes of one sync phase collected per top-level vdev, issued together so adjacent
/// writes merge into large I/Os. Blocks in a batch are on disk only after
/// `submit_batch`; until then they are reachable only through the syncing dirty state
/// that holds their data, never through a committed tree.
pub struct WriteBatch {
    per_top: Vec<Mutex<Vec<vdev::tree::PlannedWrite>>>,
}

/// Blocks being read from the devices, so that a block is read once however many
/// readers want it at the same moment. Each read in flight has its own signal: a
/// finished read wakes only the readers waiting for that block (one shared condition
/// variable woke every waiting reader at every block, a storm of context switches
/// under a streaming read).
#[derive(Default)]
struct InFlight {
    reads: Mutex<HashMap<BlockKey, Arc<ReadDone>>>,
}

/// The end of one block's device read, for readers that found it in flight. Finish
/// wakes only when someone sleeps on it: std's condvar makes a futex call per notify
/// even with no waiter, and read-ahead finishes a block at a time, thousands a second,
/// almost always with nobody waiting.
#[derive(Default)]
struct ReadDone {
    /// (done, readers asleep on `cv`)
    state: Mutex<(bool, usize)>,
    cv: Condvar,
}

impl ReadDone {
    fn wait(&self) {
        let mut st = self.state.lock().unwrap();
        while !st.0 {
            st.1 += 1;
            st = self.cv.wait(st).unwrap();
            st.1 -= 1;
        }
    }
}

impl InFlight {
    /// Ends the reads of `keys`: wakes their waiters.
    fn finish<'a>(&self, keys: impl IntoIterator<Item = &'a BlockKey>) {
        let signals: Vec<Arc<ReadDone>> = {
            let mut reads = self.reads.lock().unwrap();
            keys.into_iter().filter_map(|k| reads.remove(k)).collect()
        };
        for signal in signals {
            let waiters = {
                let mut st = signal.state.lock().unwrap();
                st.0 = true;
                st.1
            };
            if waiters > 0 {
                signal.cv.notify_all();
            }
        }
    }
}

/// The vdevs, allocator and ARC of one pool.
pub struct Storage {
    /// The top-level vdevs, indexed by id. Replaced whole (`set_tops`) when the
    /// topology changes while the pool is imported (a vdev added, a mirror side
    /// attached or detached); readers load the current set once per operation, and a
    /// vdev, once added, keeps its index for the life of the pool.
    tops: arc_swap::ArcSwap<Vec<Arc<TopVdev>>>,
    pub alloc: Mutex<Allocator>,
    pub arc: AdaptiveCache<BlockKey, CachedBlock>,
    pub counters: PoolCounters,
    inflight: InFlight,
    /// The second-level cache on cache devices, if the pool has any.
    pub l2: std::sync::OnceLock<Arc<crate::l2arc::L2Arc>>,
    /// Top-level vdevs that placed blocks went to since `flush_placed` last ran.
    placed_tops: Mutex<std::collections::BTreeSet<u32>>,
    /// One thread issues every device operation of a sync in a fixed order (tests that
    /// replay crashes from a seed); otherwise syncs use several threads.
    pub deterministic: std::sync::atomic::AtomicBool,
    read_pins: Mutex<ReadPins>,
    /// Off only in the test that shows what pins prevent (`PoolOptions::pin_reads`).
    pub pins_enabled: std::sync::atomic::AtomicBool,
}

/// Readers that may go to the devices with block pointers taken from a tree without
/// holding a lock the sync needs (`Storage::pin_reads`), by the committed txg when
/// each began.
#[derive(Default)]
struct ReadPins {
    committed: u64,
    running: std::collections::BTreeMap<u64, usize>,
    /// A commit found a reader running, so frees it would have released may still
    /// wait: the oldest reader's end releases them (`ReadPin::drop`) instead of the
    /// next commit, which may be long coming on an idle pool (or never, for a writer
    /// waiting for that space before it dirties anything).
    held_back: bool,
}

/// A reader's pin; see `Storage::pin_reads`.
pub struct ReadPin<'a> {
    st: &'a Storage,
    since: Option<u64>,
}

impl Drop for ReadPin<'_> {
    fn drop(&mut self) {
        let Some(since) = self.since else { return };
        let mut pins = self.st.read_pins.lock().unwrap();
        let n = pins.running.get_mut(&since).expect("pin registered");
        *n -= 1;
        if *n > 0 {
            return;
        }
        let was_oldest = pins.running.keys().next() == Some(&since);
        pins.running.remove(&since);
        if !(was_oldest && pins.held_back) {
            return;
        }
        let oldest_pin = pins.running.keys().next().copied();
        pins.held_back = oldest_pin.is_some();
        let committed = pins.committed;
        // The pins' lock first, then the allocator's, never both: as `txg_committed`.
        // A reader pinning meanwhile pins at `committed` or later, which keeps only
        // frees after it; a commit meanwhile releases at least as much itself.
        drop(pins);
        self.st.release_eligible_frees(committed, oldest_pin);
    }
}

pub(crate) fn sector_round(n: u64) -> u64 {
    n.div_ceil(SECTOR_SIZE as u64) * SECTOR_SIZE as u64
}

impl Storage {
    pub fn new(tops: Vec<Arc<TopVdev>>, alloc: Allocator, arc_max_bytes: u64) -> Storage {
        Storage {
            tops: arc_swap::ArcSwap::from_pointee(tops),
            alloc: Mutex::new(alloc),
            arc: AdaptiveCache::new(arc_max_bytes),
            counters: PoolCounters::default(),
            inflight: InFlight::default(),
            placed_tops: Mutex::new(Default::default()),
            l2: std::sync::OnceLock::new(),
            deterministic: std::sync::atomic::AtomicBool::new(false),
            read_pins: Mutex::new(ReadPins::default()),
            pins_enabled: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// The current top-level vdevs.
    pub fn tops(&self) -> arc_swap::Guard<Arc<Vec<Arc<TopVdev>>>> {
        self.tops.load()
    }

    /// Installs a new set of top-level vdevs: the same vdevs at the same indexes, one
    /// of them possibly rebuilt with other leaves, or one more at the end. The caller
    /// holds the pool's sync lock, so no sync is writing meanwhile.
    pub(crate) fn set_tops(&self, tops: Vec<Arc<TopVdev>>) {
        let old = self.tops.load();
        assert!(tops.len() >= old.len(), "a top-level vdev cannot go away");
        for (i, t) in tops.iter().enumerate() {
            assert_eq!(t.id as usize, i, "top-level vdev out of place");
        }
        self.tops.store(Arc::new(tops));
    }

    /// Pins freed space for a reader that takes block pointers from a tree and then
    /// reads them with no lock the sync needs: a read that finds a bad copy writes the
    /// good data over it, and if the block had been freed and its space reused in the
    /// meantime (a reader stalled across a few quick txgs, a slow disk), that repair
    /// would overwrite the new block's copy: damage the pool made itself. While the
    /// pin lives, no space freed after the txg committed when it began returns to the
    /// allocator (see `Allocator::txg_committed`), so every pointer the reader takes
    /// names its own block until the reader is done. Take it before the pointers.
    pub fn pin_reads(&self) -> ReadPin<'_> {
        if !self.pins_enabled.load(Ordering::Relaxed) {
            return ReadPin {
                st: self,
                since: None,
            };
        }
        let mut pins = self.read_pins.lock().unwrap();
        let since = pins.committed;
        *pins.running.entry(since).or_default() += 1;
        ReadPin {
            st: self,
            since: Some(since),
        }
    }

    /// `txg` committed: deferred frees become usable that no running reader can name.
    pub fn txg_committed(&self, txg: u64) {
        let oldest_pin = {
            let mut pins = self.read_pins.lock().unwrap();
            pins.committed = pins.committed.max(txg);
            let oldest = pins.running.keys().next().copied();
            pins.held_back |= oldest.is_some();
            oldest
        };
        self.alloc.lock().unwrap().txg_committed(txg, oldest_pin);
    }

    /// Releases what `txg_committed(committed)` would have, for a reader that held it
    /// back and is done, or a hold that ended.
    fn release_eligible_frees(&self, committed: u64, oldest_pin: Option<u64>) {
        if let Some(upto) = committed.checked_sub(crate::alloc::DEFER_TXGS) {
            self.alloc
                .lock()
                .unwrap()
                .release_frees_upto(upto, oldest_pin);
        }
    }

    /// After a walk's hold on freed space (`Allocator::hold_frees`) ended: what the
    /// commits meanwhile could not release becomes usable now.
    pub(crate) fn hold_ended(&self) {
        let (committed, oldest_pin) = {
            let pins = self.read_pins.lock().unwrap();
            (pins.committed, pins.running.keys().next().copied())
        };
        self.release_eligible_frees(committed, oldest_pin);
    }

    /// See `Allocator::rewind_cursors`; for crash tests.
    pub fn rewind_allocator(&self) {
        self.alloc.lock().unwrap().rewind_cursors();
    }

    /// Frees of `txg` and older usable at once: the damage `release_frees_when_durable`
    /// prevents, for its negative-control test only.
    pub fn release_frees_now(&self, txg: u64) {
        let oldest_pin = self
            .read_pins
            .lock()
            .unwrap()
            .running
            .keys()
            .next()
            .copied();
        self.alloc
            .lock()
            .unwrap()
            .release_frees_upto(txg, oldest_pin);
    }

    /// The committed txg at import, before any reader pins.
    pub fn set_committed_txg(&self, txg: u64) {
        let mut pins = self.read_pins.lock().unwrap();
        pins.committed = pins.committed.max(txg);
    }

    /// Compresses, checksums, allocates and writes `data` as one block of `txg`.
    /// `logged` is false only for the space log's own blocks.
    pub fn write_block(
        &self,
        data: &[u8],
        spec: BlockSpec,
        txg: u64,
        logged: bool,
    ) -> Result<BlockPointer, PoolError> {
        self.write_block_inner(Payload::Logical(data, None), spec, txg, logged, None)
    }

    /// The space a block counts for in dataset accounting: each copy's allocated size
    /// scaled by its vdev's ratio of data to allocation for a 128 KiB block, so RAID-Z
    /// parity is not charged to users (a 128 KiB record counts 128 KiB on any layout)
    /// while padding of small blocks and extra metadata copies still count.
    pub fn dsize(&self, bp: &BlockPointer) -> u64 {
        const REF: u64 = 128 * 1024;
        let tops = self.tops.load();
        bp.copies()
            .map(|d| {
                let top = &tops[d.vdev as usize];
                (d.asize() as u128 * REF as u128 / top.asize(REF) as u128) as u64
            })
            .sum()
    }

    pub fn is_deterministic(&self) -> bool {
        self.deterministic.load(Ordering::Relaxed)
    }

    pub fn new_batch(&self) -> WriteBatch {
        WriteBatch {
            per_top: self
                .tops
                .load()
                .iter()
                .map(|_| Mutex::new(Vec::new()))
                .collect(),
        }
    }

    /// Issues a batch: each top-level vdev merges adjacent writes per leaf. Top-level
    /// vdevs are written at the same time (one thread each), as their leaves are, so a
    /// txg streams to every disk of the pool at once; with `deterministic` I/O (crash
    /// tests) everything is written in one order on the calling thread.
    pub fn submit_batch(&self, batch: WriteBatch) -> Result<(), PoolError> {
        let parallel = !self.is_deterministic();
        let tops = self.tops.load();
        let work: Vec<_> = tops
            .iter()
            .zip(batch.per_top)
            .map(|(top, writes)| (top, writes.into_inner().unwrap()))
            .filter(|(_, writes)| !writes.is_empty())
            .collect();
        let results: Vec<Result<(), String>> = if parallel && work.len() > 1 {
            std::thread::scope(|s| {
                let handles: Vec<_> = work
                    .into_iter()
                    .map(|(top, writes)| {
                        s.spawn(move || top.write_planned(writes, true).map_err(|e| e.to_string()))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("top-level vdev writer panicked"))
                    .collect()
            })
        } else {
            work.into_iter()
                .map(|(top, writes)| {
                    top.write_planned(writes, parallel)
                        .map_err(|e| e.to_string())
                })
                .collect()
        };
        results
            .into_iter()
            .collect::<Result<(), String>>()
            .map_err(PoolError::Io)
    }

    fn write_block_inner(
        &self,
        payload: Payload<'_>,
        spec: BlockSpec,
        txg: u64,
        logged: bool,
        batch: Option<&WriteBatch>,
    ) -> Result<BlockPointer, PoolError> {
        assert!(txg > 0);
        let mut compressed = None;
        // (logical size, stored bytes, their compression, the buffer the devices get)
        let (lsize, stored, compression, io): (usize, &[u8], Compression, Arc<AlignedBuf>) =
            match payload {
                Payload::Logical(data, shared) => {
                    assert!(
                        !data.is_empty() && data.len() <= crate::dnode::MAX_BLOCK_SIZE as usize
                    );
                    let rounded = sector_round(data.len() as u64) as usize;
                    if spec.compression != Compression::Off && rounded > SECTOR_SIZE {
                        compressed =
                            compress::compress(spec.compression, data, rounded - SECTOR_SIZE + 1);
                    }
                    let (stored, compression): (&[u8], Compression) = match &compressed {
                        Some(c) => (c, spec.compression),
                        None => (data, Compression::Off),
                    };
                    let io_size = sector_round(stored.len() as u64) as usize;
                    // The caller's own buffer when it is stored as is and already sector
                    // sized, else the stored bytes zero-padded to whole sectors.
                    let io = match shared {
                        Some(buf) if compressed.is_none() && stored.len() == io_size => buf.clone(),
                        _ => {
                            let mut io = AlignedBuf::zeroed(io_size);
                            io[..stored.len()].copy_from_slice(stored);
                            Arc::new(io)
                        }
                    };
                    (data.len(), stored, compression, io)
                }
                Payload::Stored(b) => (b.lsize as usize, b.stored(), b.compression, b.io.clone()),
            };
        let psize = stored.len();
        let io_size = io.len();
        assert_eq!(io_size as u64, sector_round(psize as u64));
        let cksum = checksum::compute(spec.checksum, &io[..psize]);

        let copies = spec.copies.clamp(1, MAX_DVAS);
        // Loaded before the allocator: a vdev the allocator knows is in this set
        // (`Pool::add_vdev` installs the vdev before its space).
        let tops = self.tops.load();
        let extents = {
            let mut alloc = self.alloc.lock().unwrap();
            alloc
                .allocate(copies, &|v| tops[v].asize(io_size as u64), logged)
                .ok_or(PoolError::NoSpace)?
        };
        let mut dvas = [Dva::default(); MAX_DVAS];
        let mut result = Ok(());
        for (i, e) in extents.iter().enumerate() {
            dvas[i] = Dva {
                vdev: e.vdev,
                asize_sectors: (e.len / SECTOR_SIZE as u64) as u32,
                offset: e.offset,
            };
            let top = &tops[e.vdev as usize];
            let planned = top.plan_write(e.offset, io.clone());
            match batch.and_then(|b| b.per_top.get(e.vdev as usize)) {
                Some(writes) => writes.lock().unwrap().extend(planned),
                // Single metadata blocks (and a vdev added since the batch began):
                // leaf by leaf, no threads to spawn for them.
                None => {
                    if let Err(err) = top.write_planned(planned, false) {
                        result = Err(PoolError::Io(err.to_string()));
                    }
                }
            }
        }
        if let Err(e) = result {
            let mut alloc = self.alloc.lock().unwrap();
            for ex in extents {
                alloc.free(ex, txg, logged);
            }
            return Err(e);
        }
        let bp = BlockPointer {
            dvas,
            lsize: lsize as u32,
            psize: psize as u32,
            compression,
            checksum_kind: spec.checksum,
            level: spec.level,
            block_type: spec.block_type,
            birth_txg: txg,
            fill: spec.fill,
            checksum: cksum,
        };
        self.counters.blocks_written.fetch_add(1, Ordering::Relaxed);
        self.counters
            .logical_bytes_written
            .fetch_add(lsize as u64, Ordering::Relaxed);
        self.counters
            .physical_bytes_written
            .fetch_add(bp.asize_total(), Ordering::Relaxed);
        // The ARC keeps the logical bytes: the written buffer itself when uncompressed.
        // A stored compressed block has none at hand; its first read decompresses it.
        let cached = match payload {
            Payload::Logical(_, Some(buf)) => Some(CachedBlock(Arc::new(BlockBytes::Shared(
                buf.clone(),
                lsize,
            )))),
            _ if compression == Compression::Off => {
                Some(CachedBlock(Arc::new(BlockBytes::Shared(io, lsize))))
            }
            Payload::Logical(data, None) => Some(CachedBlock::from_vec(data.to_vec())),
            Payload::Stored(_) => None,
        };
        if let Some(cached) = cached {
            self.arc_insert(BlockKey::of(&bp), cached, AccessKind::Demand);
        }
        Ok(bp)
    }

    /// Inserts into the ARC and hands what it evicts to the L2ARC.
    fn arc_insert(&self, key: BlockKey, block: CachedBlock, kind: AccessKind) {
        let evicted = self.arc.insert(key, block, kind);
        if let Some(l2) = self.l2.get() {
            l2.feed(evicted);
        }
    }

    /// Like `write_block`, but the device writes go into `batch` (metadata of a sync,
    /// written together by `submit_batch`). The block is in the ARC at once; nothing
    /// may lead a reader to it before the batch is written.
    pub fn write_block_into(
        &self,
        data: &[u8],
        spec: BlockSpec,
        txg: u64,
        batch: &WriteBatch,
    ) -> Result<BlockPointer, PoolError> {
        self.write_block_inner(Payload::Logical(data, None), spec, txg, true, Some(batch))
    }

    /// Writes a data block from a shared buffer into a batch. `placed`: a block the
    /// intent log writes ahead of its txg. Its space is allocated but not logged, so
    /// until the txg that syncs its object adopts it (`adopt_placed`) or lets it go
    /// (`release_placed`), a crash leaves that space free on disk and only a log
    /// record names it. Placed blocks are not flushed here: see `flush_placed`.
    pub fn write_block_batched(
        &self,
        data: &Arc<AlignedBuf>,
        spec: BlockSpec,
        txg: u64,
        batch: &WriteBatch,
        placed: bool,
    ) -> Result<BlockPointer, PoolError> {
        let bp = self.write_block_inner(
            Payload::Logical(&data[..], Some(data)),
            spec,
            txg,
            !placed,
            Some(batch),
        )?;
        if placed {
            let mut tops = self.placed_tops.lock().unwrap();
            for d in bp.copies() {
                tops.insert(d.vdev);
            }
        }
        Ok(bp)
    }

    /// Writes a received block as it was stored into a batch (checksummed with the
    /// spec's checksum; its compression is the block's own).
    pub fn write_stored_batched(
        &self,
        block: &StoredBlock,
        spec: BlockSpec,
        txg: u64,
        batch: &WriteBatch,
    ) -> Result<BlockPointer, PoolError> {
        self.write_block_inner(Payload::Stored(block), spec, txg, true, Some(batch))
    }

    /// Flushes the top-level vdevs placed blocks went to since the last call; the log
    /// block naming them is written only after this returns true.
    pub fn flush_placed(&self) -> bool {
        let tops: Vec<u32> = std::mem::take(&mut *self.placed_tops.lock().unwrap())
            .into_iter()
            .collect();
        let parallel = !self.is_deterministic();
        let all = self.tops.load();
        tops.into_iter().all(|v| all[v as usize].flush(parallel))
    }

    /// The syncing txg keeps a placed block: its allocation joins this txg's space log.
    pub fn adopt_placed(&self, bp: &BlockPointer) {
        let mut alloc = self.alloc.lock().unwrap();
        for d in bp.copies() {
            alloc.log_allocated(d.extent());
        }
    }

    /// A placed block its txg did not keep (rewritten or freed before the sync): its
    /// space returns after `txg + DEFER_TXGS` commits, by which time no log record
    /// that names it can be replayed. Never logged, as its allocation never was.
    pub fn release_placed(&self, bp: &BlockPointer, txg: u64) {
        self.arc.remove(&BlockKey::of(bp));
        let mut alloc = self.alloc.lock().unwrap();
        for d in bp.copies() {
            alloc.free(d.extent(), txg, false);
        }
    }

    /// Replay: takes the space of a placed block named by a log record (free on disk,
    /// since its allocation was never logged). False if any copy's space is taken.
    pub fn claim_placed(&self, bp: &BlockPointer) -> bool {
        let mut alloc = self.alloc.lock().unwrap();
        let mut claimed = Vec::new();
        for d in bp.copies() {
            let e = d.extent();
            if !alloc.claim(e) {
                for c in claimed {
                    alloc.unclaim(c);
                }
                return false;
            }
            claimed.push(e);
        }
        true
    }

    /// Frees every copy of `bp` in `txg` (deferred) and drops it from the ARC.
    pub fn free_block(&self, bp: &BlockPointer, txg: u64) {
        if bp.is_hole() {
            return;
        }
        self.arc.remove(&BlockKey::of(bp));
        if let Some(l2) = self.l2.get() {
            l2.forget(&BlockKey::of(bp));
        }
        let mut alloc = self.alloc.lock().unwrap();
        for d in bp.copies() {
            alloc.free(d.extent(), txg, true);
        }
    }

    pub fn read_block(&self, bp: &BlockPointer) -> Result<CachedBlock, PoolError> {
        self.read_block_as(bp, AccessKind::Demand)
    }

    /// Every block, when the ARC holds them all: no device I/O and no wait. Then each
    /// counts as a demand hit; otherwise nothing is counted, and the caller reads them
    /// with `read_block_as`, which counts each miss once.
    pub fn cached_blocks(&self, bps: &[BlockPointer]) -> Option<Vec<CachedBlock>> {
        let keys: Vec<BlockKey> = bps.iter().map(BlockKey::of).collect();
        let found = self.arc.get_all_if_cached(&keys, AccessKind::Demand)?;
        for bp in bps {
            let counted = access_index(true, AccessKind::Demand, bp.block_type.is_metadata());
            self.counters.arc_accesses[counted].fetch_add(1, Ordering::Relaxed);
        }
        Some(found)
    }

    /// Whether the ARC holds the block now (counts nothing).
    pub fn is_cached(&self, bp: &BlockPointer) -> bool {
        self.arc.contains(&BlockKey::of(bp))
    }

    /// The block if the ARC holds it, counting nothing and leaving its place in the
    /// lists: a look that may be taken back (see `cached_blocks` for one that counts).
    pub fn peek_block(&self, bp: &BlockPointer) -> Option<CachedBlock> {
        assert!(!bp.is_hole(), "reading a hole");
        self.arc.peek(&BlockKey::of(bp))
    }

    /// Reads a block through the ARC.
    pub fn read_block_as(
        &self,
        bp: &BlockPointer,
        kind: AccessKind,
    ) -> Result<CachedBlock, PoolError> {
        assert!(!bp.is_hole(), "reading a hole");
        let key = BlockKey::of(bp);
        let mut found = self.arc.get(&key, kind);
        // A reader that waits for a block in flight looks again below: still one access.
        let counted = access_index(found.is_some(), kind, bp.block_type.is_metadata());
        self.counters.arc_accesses[counted].fetch_add(1, Ordering::Relaxed);
        loop {
            if let Some(b) = found {
                return Ok(b);
            }
            // One device read per block at a time: a reader that finds the block in
            // flight (a prefetch, or another client) waits for it instead of reading again.
            let waiting = {
                let mut reads = self.inflight.reads.lock().unwrap();
                match reads.get(&key) {
                    Some(signal) => Some(signal.clone()),
                    None => {
                        reads.insert(key, Arc::default());
                        None
                    }
                }
            };
            match waiting {
                Some(signal) => signal.wait(),
                None => break,
            }
            found = self.arc.get(&key, kind);
        }
        let l2_hit = self.l2.get().and_then(|l2| l2.read(&key));
        let result = match l2_hit {
            Some(block) => Ok((block, RepairReport::default())),
            None => self.read_uncached(bp, ReadMode::Normal),
        };
        if let Ok((block, _)) = &result {
            self.arc_insert(key, block.clone(), kind);
        }
        self.inflight.finish([&key]);
        result.map(|(b, _)| b)
    }

    /// Reads many blocks through the ARC with aggregated device I/O (read-ahead and
    /// multi-block reads). Blocks another reader already has in flight, and blocks whose
    /// fast read fails or does not verify, go through `read_block_as` one by one.
    pub fn read_batch(
        &self,
        bps: &[BlockPointer],
        kind: AccessKind,
    ) -> Vec<Result<CachedBlock, PoolError>> {
        let mut results: Vec<Option<Result<CachedBlock, PoolError>>> =
            bps.iter().map(|_| None).collect();
        let mut claimed: Vec<usize> = Vec::new();
        {
            let mut reads = self.inflight.reads.lock().unwrap();
            for (i, bp) in bps.iter().enumerate() {
                let key = BlockKey::of(bp);
                let metadata = bp.block_type.is_metadata();
                if let Some(b) = self.arc.get(&key, kind) {
                    self.counters.arc_accesses[access_index(true, kind, metadata)]
                        .fetch_add(1, Ordering::Relaxed);
                    results[i] = Some(Ok(b));
                } else if !reads.contains_key(&key) && self.l2.get().is_none() {
                    // Counted here; the others are counted by `read_block_as`.
                    self.counters.arc_accesses[access_index(false, kind, metadata)]
                        .fetch_add(1, Ordering::Relaxed);
                    reads.insert(key, Arc::default());
                    claimed.push(i);
                }
            }
        }
        for (i, io) in self.read_first_copies(bps, &claimed) {
            let bp = &bps[i];
            if !bp.verifies(&io) {
                continue;
            }
            let psize = bp.psize as usize;
            self.counters.blocks_read.fetch_add(1, Ordering::Relaxed);
            let block = if bp.compression == Compression::Off {
                CachedBlock(Arc::new(BlockBytes::Aligned(io, bp.lsize as usize)))
            } else {
                let mut out = vec![0u8; bp.lsize as usize];
                if compress::decompress(bp.compression, &io[..psize], &mut out).is_err() {
                    continue;
                }
                CachedBlock::from_vec(out)
            };
            self.arc_insert(BlockKey::of(bp), block.clone(), kind);
            results[i] = Some(Ok(block));
        }
        let keys: Vec<BlockKey> = claimed.iter().map(|&i| BlockKey::of(&bps[i])).collect();
        self.inflight.finish(&keys);
        results
            .into_iter()
            .zip(bps)
            .map(|(r, bp)| r.unwrap_or_else(|| self.read_block_as(bp, kind)))
            .collect()
    }

    /// Reads every copy (scrub) or the first good one (normal), verifying and healing.
    pub fn read_uncached(
        &self,
        bp: &BlockPointer,
        mode: ReadMode,
    ) -> Result<(CachedBlock, RepairReport), PoolError> {
        let (io, report) = self.read_stored(bp, mode)?;
        let psize = bp.psize as usize;
        let lsize = bp.lsize as usize;
        let block = if bp.compression == Compression::Off {
            CachedBlock(Arc::new(BlockBytes::Aligned(io, lsize)))
        } else {
            let mut out = vec![0u8; lsize];
            compress::decompress(bp.compression, &io[..psize], &mut out).map_err(|e| {
                PoolError::Corrupt(format!("block verified but does not decompress: {e}"))
            })?;
            CachedBlock::from_vec(out)
        };
        Ok((block, report))
    }

    /// The block as stored (compressed, sector-rounded: its first `psize` bytes are the
    /// payload), verified against its pointer, bad copies healed; not through the ARC.
    pub fn read_stored(
        &self,
        bp: &BlockPointer,
        mode: ReadMode,
    ) -> Result<(AlignedBuf, RepairReport), PoolError> {
        self.counters.blocks_read.fetch_add(1, Ordering::Relaxed);
        let io_size = bp.io_size();
        let verify = |buf: &[u8]| bp.verifies(buf);
        let mut report = RepairReport::default();
        let mut good: Option<AlignedBuf> = None;
        let mut bad_dvas: Vec<Dva> = Vec::new();
        let mut last_err = String::new();
        let tops = self.tops.load();
        for dva in bp.copies() {
            let Some(top) = tops.get(dva.vdev as usize) else {
                last_err = format!("pointer names vdev {} which does not exist", dva.vdev);
                continue;
            };
            if dva.offset + top.asize(io_size) > top.capacity_bytes() {
                last_err = "pointer past the end of its vdev".into();
                continue;
            }
            match top.read(dva.offset, io_size, &verify, mode) {
                Ok((buf, r)) => {
                    report.bad_copies += r.bad_copies;
                    report.repaired_bytes += r.repaired_bytes;
                    if good.is_none() {
                        good = Some(buf);
                    }
                    if mode == ReadMode::Normal {
                        break;
                    }
                }
                Err(e) => {
                    last_err = e.to_string();
                    bad_dvas.push(*dva);
                }
            }
        }
        let Some(io) = good else {
            self.counters
                .unrecoverable_reads
                .fetch_add(1, Ordering::Relaxed);
            return Err(PoolError::Checksum(format!(
                "block of birth txg {} unreadable: {last_err}",
                bp.birth_txg
            )));
        };
        // A whole DVA was lost but another copy was good: rewrite it in place of the bad
        // one (its space is still allocated to this block).
        for dva in bad_dvas {
            if tops[dva.vdev as usize].write(dva.offset, &io).is_ok() {
                report.bad_copies += 1;
                report.repaired_bytes += io_size;
            }
        }
        if report.repaired_bytes > 0 {
            self.counters
                .healed_copies
                .fetch_add(report.bad_copies, Ordering::Relaxed);
        }
        Ok((io, report))
    }

    /// The first copy of each block of `bps` that `idxs` names, read with aggregated
    /// device I/O per vdev (`TopVdev::read_many`), unverified: (index, bytes) of each
    /// that read. A group with a pointer past its vdev is left out, for the careful
    /// path (`read_stored`) to report.
    fn read_first_copies(&self, bps: &[BlockPointer], idxs: &[usize]) -> Vec<(usize, AlignedBuf)> {
        let mut by_top: std::collections::BTreeMap<u32, Vec<usize>> =
            std::collections::BTreeMap::new();
        for &i in idxs {
            by_top.entry(bps[i].dvas[0].vdev).or_default().push(i);
        }
        let mut out = Vec::with_capacity(idxs.len());
        let tops = self.tops.load();
        for (vdev, idxs) in by_top {
            let Some(top) = tops.get(vdev as usize) else {
                continue;
            };
            let reqs: Vec<(u64, u64)> = idxs
                .iter()
                .map(|&i| (bps[i].dvas[0].offset, bps[i].io_size()))
                .collect();
            if reqs
                .iter()
                .any(|&(off, size)| off + top.asize(size) > top.capacity_bytes())
            {
                continue;
            }
            for (&i, buf) in idxs
                .iter()
                .zip(top.read_many(&reqs, !self.is_deterministic()))
            {
                if let Some(io) = buf {
                    out.push((i, io));
                }
            }
        }
        out
    }

    /// `read_stored` of many blocks, not through the ARC (a stream reads each block
    /// once): adjacent blocks of one vdev come in aggregated device I/Os
    /// (`TopVdev::read_many`); a block whose fast read fails or does not verify goes
    /// through `read_stored`, which tries every copy and heals.
    pub fn read_stored_batch(&self, bps: &[BlockPointer]) -> Vec<Result<AlignedBuf, PoolError>> {
        let mut out: Vec<Option<Result<AlignedBuf, PoolError>>> =
            bps.iter().map(|_| None).collect();
        let all: Vec<usize> = (0..bps.len()).collect();
        for (i, io) in self.read_first_copies(bps, &all) {
            if bps[i].verifies(&io) {
                self.counters.blocks_read.fetch_add(1, Ordering::Relaxed);
                out[i] = Some(Ok(io));
            }
        }
        out.into_iter()
            .zip(bps)
            .map(|(r, bp)| {
                r.unwrap_or_else(|| self.read_stored(bp, ReadMode::Normal).map(|(io, _)| io))
            })
            .collect()
    }

    /// Flushes every top-level vdev; false if one lost more leaves than it tolerates.
    pub fn flush_all(&self) -> bool {
        let parallel = !self.is_deterministic();
        let tops = self.tops.load();
        if parallel && tops.len() > 1 {
            // Top-level vdevs flush at once, as their writes were issued.
            return std::thread::scope(|s| {
                let handles: Vec<_> = tops.iter().map(|t| s.spawn(|| t.flush(true))).collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("flush thread panicked"))
                    .fold(true, |ok, one| ok & one)
            });
        }
        let mut ok = true;
        for t in tops.iter() {
            ok &= t.flush(parallel);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_indexes_are_distinct_and_read_back() {
        let mut seen = std::collections::BTreeSet::new();
        for hit in [false, true] {
            for kind in [AccessKind::Demand, AccessKind::Prefetch] {
                for metadata in [false, true] {
                    let i = access_index(hit, kind, metadata);
                    assert!(i < 8 && seen.insert(i));
                    assert_eq!(access_of(i), (hit, kind, metadata));
                }
            }
        }
    }
}
