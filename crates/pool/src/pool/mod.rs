//! A pool: create, import, export and destroy; the transaction group pipeline; the
//! directory of object sets; status, scrub and check. One job a file: `lifecycle.rs`
//! (create, import with log replay, export, destroy, labels, admission of dirty data),
//! `txg.rs` (quiesce and sync, the sync thread), `tx.rs` (`Tx`), `objects.rs` (object
//! sets and objects), `snapshots.rs`, `directory.rs` (the directory block's encoding),
//! `repair.rs` (status, scrub, resilver, check), `topology.rs` (vdevs added, mirror
//! sides attached and detached, log and cache devices added and removed, devices
//! taken offline and online, all while imported), `spares.rs`, `streams.rs` (what
//! snapshot streams, `crate::send`, need of the pool). This file keeps the types they share.
//!
//! Transaction groups: every change joins the *open* txg while holding the txg gate
//! shared. The sync thread (every `txg_interval`, when dirty data passes
//! `dirty_sync_bytes`, or on request) takes the gate exclusively for an instant to
//! *quiesce* (the open changes become the syncing set, a new txg opens), then *syncs*
//! without blocking writers: object sets, the directory block, the space log (*prepare*),
//! then a flush of every device, the uberblock into every label, a second flush
//! (*commit*). Under steady load the sync thread pipelines them: the next txg is
//! quiesced and prepared while the previous one commits; commits stay in txg order
//! (`txg.rs`, `sync_txgs`). Writers wait only when the open txg holds `dirty_max_bytes`.
//!
//! Crash safety: see `uberblock.rs` for the commit order and `alloc.rs` for why the
//! previous trees stay intact. After a crash, import finds the newest uberblock whose
//! directory, object sets and space log all verify, and is exactly that txg.
//!
//! Directory block (logical, little-endian): 0..8 magic `SHOALDIR`; 8..12 version (5;
//! 1 to 4 are read too); 12..16 entry count u32; 16..24 next object set id u64; then per
//! entry: id u64, root block pointer (128), name length u16, name (UTF-8), properties
//! length u32, properties (UTF-8 JSON, owned by the file system layer); version 2 adds
//! kind u8 (0 dataset, 1 snapshot), origin u64 (a snapshot's dataset id, else 0),
//! snapshot txg u64 (a snapshot's own txg, or a dataset's latest snapshot txg, 0 for
//! none), dead list head block pointer (128) and dead list entry count u64; version 3
//! the dead list's size u64; version 4 a snapshot's guid u64; version 5 a snapshot's
//! holds: count u16, then per hold tag length u8, tag (UTF-8), placed at u64 unix
//! seconds (see `docs/format.md`).
//!
//! Snapshots (see `deadlist.rs`): taking one costs a directory entry naming the root the
//! dataset's sync just wrote; blocks born at or before it are then released to the
//! dataset's dead list instead of the allocator. Snapshot operations run in syncing
//! context, after every object set of the txg has synced, so they see exactly the
//! state the txg commits.

use crate::alloc::{Allocator, Extent};
use crate::arc::ArcStats;
use crate::blkptr::{BlockPointer, BlockType, BLKPTR_SIZE};
use crate::checksum::ChecksumKind;
use crate::compress::Compression;
use crate::config::{new_guid, LeafConfig, PoolConfig, PoolState, TopConfig, CONFIG_VERSION};
use crate::deadlist::{self, Deadlist};
use crate::intent_log::{IntentLog, IntentLogStats, LogHeader, LogOp, LogSource, Ring, RingKind};
use crate::objset::{visit_objset, ObjectInfo, Objset};
use crate::read_buf::ReadBuf;
use crate::spacelog;
use crate::storage::{BlockSpec, Fetch, Storage};
use crate::uberblock::{self, Uberblock};
use crate::PoolError;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};
use vdev::label;
use vdev::{Device, Health, Layout, Leaf, ReadMode, TopVdev};

const DIR_MAGIC: &[u8; 8] = b"SHOALDIR";
const DIR_VERSION: u32 = 5;
const DIR_MAX_BYTES: usize = 1024 * 1024;
/// The longest hold tag, in bytes (the directory stores its length in one byte).
pub const HOLD_TAG_MAX_BYTES: usize = 64;
/// The most holds one snapshot carries (the directory stores the count in two bytes;
/// the bound keeps one snapshot from filling the directory block).
pub const HOLDS_PER_SNAPSHOT_MAX: usize = 256;
/// Read-ahead threads. Each runs one job (one aggregated read per leaf) at a time, so
/// this is also the device queue depth read-ahead can reach for all streams together:
/// 16 keeps a 32 MiB window in flight for two streams (8 left the reader waiting on
/// in-flight blocks twice as often on one stream). One stream alone is bounded
/// further, by `READ_AHEAD_PER_STREAM_BYTES`.
const PREFETCH_WORKERS: usize = 16;
const PREFETCH_QUEUE: usize = 1024;

/// A read-ahead job: blocks of one object for one stream.
struct PrefetchJob {
    objset: Arc<Objset>,
    obj: u64,
    blocks: std::ops::Range<u64>,
    bytes: u64,
    /// The stream that asked for it, whose bound (`read_ahead_gate`) it counts in.
    stream: crate::prefetch::StreamId,
}
/// Bytes per read-ahead job: one aggregated batch each, a read of a quarter of it per
/// data leaf of a raidz2 of 6. Smaller jobs keep more workers (so more device reads) in
/// flight per stream: on one stream of a 32 MiB window, 1 MiB jobs read from disk at a
/// median 1,684 MB/s where 4 MiB jobs reached 1,539 (and 1,678 against 1,367 on eight
/// streams); a read-ahead block per job (32K per leaf) had reached 1,200.
const PREFETCH_JOB_BYTES: u64 = 1 << 20;
/// ...and on disks with a head: a whole read-ahead batch (an eighth of the 32 MiB
/// window) as one job, so each disk reads a stream's share of it in one piece. Eight
/// streams on 15 simulated 72 MB/s disks (3x(4+1)) read 202-207 MB/s from disk with
/// 1 MiB jobs, 122 KiB a device read and 60% of the time seeking, and 300-305 MB/s
/// with 4 MiB jobs (240 KiB a read, 51% seeking). On this VM's disk (which reports
/// itself rotational) a raidz2 of 6 files read at medians of 840 / 855 MB/s (1 / 8
/// streams) with 1 MiB jobs and 887 / 811 with 4 MiB, within the disk's drift, at
/// about 20% less CPU.
const PREFETCH_JOB_BYTES_ROTATIONAL: u64 = 4 << 20;
/// Read-ahead one stream may have at the devices at once (`read_ahead_gate`): six 4 MiB
/// jobs. With all 16 workers on one stream's window, the job its reader needed next
/// came back as late as the whole window. Bounded, one stream from this VM's disk read
/// 1.00-1.08x (`d1`) and 1.05-1.10x (`dz`) as fast (paired medians of three sets of
/// alternating runs), four streams as before; the disk streams at its best with 4 MiB
/// in flight. 1 MiB jobs are bounded by the worker count (16) first.
pub const READ_AHEAD_PER_STREAM_BYTES: u64 = 24 << 20;

#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// ARC bound; `None` = a quarter of physical memory.
    pub arc_max_bytes: Option<u64>,
    pub txg_interval: Duration,
    /// Start a sync when the open txg holds this much dirty data.
    pub dirty_sync_bytes: u64,
    /// Writers wait when the open txg holds this much.
    pub dirty_max_bytes: u64,
    /// Run the background sync thread (tests may drive syncs by hand).
    pub sync_thread: bool,
    /// Detect sequential streams and read ahead.
    pub prefetch: bool,
    /// Issue a sync's device operations from one thread in a fixed order, so a crash
    /// test replays exactly from its seed. Slower; for tests.
    pub deterministic_io: bool,
    /// Clean objects (dnodes) kept in memory across all object sets, about 0.9 KiB
    /// each (the default is about 115 MiB), shared max-min fairly (`fair_shares`), at
    /// least `MIN_OBJECTS_PER_SET` a set (or all of a smaller bound); objects with
    /// changes are always kept.
    pub object_cache_max: usize,
    /// Readers pin freed space until they finish (`Storage::pin_reads`). Off only in
    /// the test that shows the damage a read repair does without it.
    pub pin_reads: bool,
    /// A device that faults is recorded as faulted in the labels, so import does not
    /// trust it (`Pool::record_faults`). Off only in the test that shows what a stale
    /// device does without it.
    pub record_faults: bool,
    /// A change of the log devices first moves the intent log's chain off them
    /// (`topology.rs`). Off only in the test that shows the acknowledged writes a
    /// removed log device takes with it otherwise.
    pub move_log_chain: bool,
    /// Freed space becomes reusable only `DEFER_TXGS` txgs after its txg is durable.
    /// Off only in the test that shows what a txg prepared ahead of the previous commit
    /// destroys without it: frees are then reusable as soon as their txg is prepared.
    pub release_frees_when_durable: bool,
    /// Read-ahead one stream may have at the devices at once
    /// (`READ_AHEAD_PER_STREAM_BYTES`; `u64::MAX`: as many jobs as there are workers,
    /// for the test that shows the bound).
    pub read_ahead_per_stream_bytes: u64,
}

/// The smallest share of `object_cache_max` an object set gets.
const MIN_OBJECTS_PER_SET: usize = 1024;

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            arc_max_bytes: None,
            txg_interval: Duration::from_secs(5),
            dirty_sync_bytes: 64 << 20,
            dirty_max_bytes: 256 << 20,
            sync_thread: true,
            prefetch: true,
            deterministic_io: false,
            object_cache_max: 128 * 1024,
            pin_reads: true,
            record_faults: true,
            move_log_chain: true,
            release_frees_when_durable: true,
            read_ahead_per_stream_bytes: READ_AHEAD_PER_STREAM_BYTES,
        }
    }
}

/// Physical memory in bytes (from /proc/meminfo), with a safe fallback.
pub fn physical_memory_bytes() -> u64 {
    vdev::huge_slab::physical_memory_bytes().map_or(4 << 30, |b| b as u64)
}

/// A device handed to create or import.
#[derive(Debug, Clone)]
pub struct DeviceArg {
    pub path: String,
    pub device: Arc<dyn Device>,
}

#[derive(Debug, Clone)]
pub struct TopArg {
    pub layout: Layout,
    pub devices: Vec<DeviceArg>,
}

#[derive(Debug)]
struct DatasetEntry {
    name: String,
    props: String,
    objset: Arc<Objset>,
    /// The dataset a snapshot was taken of; `None` for a dataset.
    snapshot_of: Option<u64>,
    /// A snapshot's txg, or a dataset's latest snapshot's txg (0: none).
    snap_txg: u64,
    deadlist: Deadlist,
    /// A snapshot's identity, the same in every pool a stream carries it to (0 for a
    /// dataset): an incremental stream names the snapshot it applies on top of by it.
    guid: u64,
    /// A snapshot's holds: tag -> when it was placed (unix seconds). A held snapshot
    /// is never destroyed (empty for a dataset).
    holds: BTreeMap<String, u64>,
}

impl DatasetEntry {
    fn dataset(name: String, props: String, objset: Arc<Objset>) -> DatasetEntry {
        DatasetEntry {
            name,
            props,
            objset,
            snapshot_of: None,
            snap_txg: 0,
            deadlist: Deadlist::EMPTY,
            guid: 0,
            holds: BTreeMap::new(),
        }
    }
}

/// One directory entry as stored.
#[derive(Debug, Clone)]
struct DirRecord {
    id: u64,
    name: String,
    root: BlockPointer,
    props: String,
    snapshot_of: Option<u64>,
    snap_txg: u64,
    deadlist: Deadlist,
    guid: u64,
    holds: BTreeMap<String, u64>,
}

/// Snapshot work done in syncing context; the caller waits for the sync and reads the
/// outcome from the slot.
#[derive(Debug)]
enum SnapOp {
    /// `guid`: the snapshot's identity when a received stream gives it.
    Create {
        dataset: u64,
        name: String,
        guid: Option<u64>,
    },
    Destroy {
        id: u64,
    },
    /// `destroy_newer`: the snapshots taken after `id` are destroyed with the changes
    /// (refused when one is held); without it they make the rollback refused.
    /// `keep_ids`: object ids made after the snapshot stay unused
    /// (`Pool::snapshot_rollback_in_place`).
    Rollback {
        id: u64,
        destroy_newer: bool,
        keep_ids: bool,
    },
    Hold {
        id: u64,
        tag: String,
        unix: u64,
    },
    Release {
        id: u64,
        tag: String,
    },
}

type SnapSlot = Arc<Mutex<Option<Result<u64, PoolError>>>>;

/// One dataset's space (deflated bytes, see `Storage::dsize`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DatasetSpace {
    /// What the dataset's tree references as of the last sync.
    pub referenced: u64,
    /// Estimated bytes its unsynced changes add.
    pub pending: u64,
    /// What its snapshots hold beyond the dataset: the sum of the dead lists of the
    /// dataset and of its snapshots (destroying every snapshot frees this).
    pub snapshots: u64,
    /// What the dataset references that its latest snapshot does not (all of
    /// `referenced` when it has none), as of the last sync: what a snapshot taken now
    /// would hand over to the snapshots, and so the part of a refreservation in use
    /// (zfs's "unique" bytes).
    pub unique: u64,
}

impl DatasetSpace {
    /// Everything charged to the dataset itself, children not included.
    pub fn used(&self) -> u64 {
        self.referenced + self.pending + self.snapshots
    }
}

/// A snapshot as listed.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SnapshotInfo {
    pub id: u64,
    /// `dataset@snapshot`
    pub name: String,
    pub dataset: u64,
    pub txg: u64,
    /// Bytes only this snapshot holds: what destroying it frees (deflated size).
    pub unique_bytes: u64,
    /// The tags of its holds (`Pool::snapshot_hold`); a held snapshot cannot be
    /// destroyed.
    #[serde(default)]
    pub holds: Vec<String>,
}

#[derive(Debug)]
struct TxgState {
    open_txg: u64,
    synced_txg: u64,
    dirty_bytes: u64,
    requested_txg: u64,
    shutdown: bool,
    /// Times a writer held at `dirty_max_bytes` woke up (`throttle_wakeups`).
    throttle_wakeups: u64,
}

#[derive(Debug, Clone, Copy)]
struct Committed {
    txg: u64,
    directory: BlockPointer,
    spacelog_head: BlockPointer,
    spacelog_len: u64,
    /// The intent log header the committed uberblock carries: what import would read.
    log: LogHeader,
}

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct ScrubSummary {
    pub blocks: u64,
    pub bytes: u64,
    pub repaired_bytes: u64,
    pub bad_copies: u64,
    pub errors: u64,
    pub seconds: f64,
    pub finished_at_txg: u64,
    /// (vdev, offset) of the first copy of the first `MAX_LISTED_ERRORS` blocks no copy
    /// of which verified.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<(u32, u64)>,
}

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct ResilverSummary {
    pub blocks: u64,
    pub bytes_written: u64,
    pub errors: u64,
    pub seconds: f64,
    /// (vdev, offset) of the first `MAX_LISTED_ERRORS` blocks that could not be rebuilt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<(u32, u64)>,
}

/// How many unreadable blocks a resilver lists by location.
pub const MAX_LISTED_ERRORS: usize = 32;

#[derive(Debug, Clone, Serialize)]
pub struct ScrubProgress {
    pub bytes_done: u64,
    pub bytes_total: u64,
}

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct CheckReport {
    /// Blocks of the committed tree read and verified (checksum, allocated space, no
    /// overlap).
    pub blocks: u64,
    pub referenced_bytes: u64,
    pub allocated_bytes: u64,
    pub deferred_bytes: u64,
    /// Datasets and snapshots whose referenced bytes and dead lists were recounted.
    #[serde(default)]
    pub datasets: u64,
    /// Space log blocks replayed; the bytes they call allocated, compared range by
    /// range with the block tree.
    #[serde(default)]
    pub space_map_blocks: u64,
    #[serde(default)]
    pub space_map_bytes: u64,
    /// Intent log blocks and records on the committed chain, and the records newer
    /// than the committed txg (what an import now would replay).
    #[serde(default)]
    pub log_blocks: u64,
    #[serde(default)]
    pub log_records: u64,
    #[serde(default)]
    pub log_records_to_replay: u64,
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct LeafStatus {
    pub path: String,
    pub guid: u64,
    pub health: String,
    pub io_mode: String,
    pub read_errors: u64,
    pub write_errors: u64,
    pub cksum_errors: u64,
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub repaired_bytes: u64,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct TopStatus {
    pub id: u32,
    pub layout: String,
    pub health: String,
    pub capacity_bytes: u64,
    pub free_bytes: u64,
    pub children: Vec<LeafStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ArcStatus {
    pub size_bytes: u64,
    pub max_bytes: u64,
    pub mru_bytes: u64,
    pub mfu_bytes: u64,
    pub target_mru_bytes: u64,
    pub demand_hits: u64,
    pub demand_misses: u64,
    pub prefetch_hits: u64,
    pub prefetch_misses: u64,
    /// Bytes read ahead into the ARC that no reader has asked for yet.
    #[serde(default)]
    pub prefetch_unread_bytes: u64,
}

impl From<ArcStats> for ArcStatus {
    fn from(s: ArcStats) -> Self {
        ArcStatus {
            size_bytes: s.size_bytes,
            max_bytes: s.max_bytes,
            mru_bytes: s.mru_bytes,
            mfu_bytes: s.mfu_bytes,
            target_mru_bytes: s.target_mru_bytes,
            demand_hits: s.demand_hits,
            demand_misses: s.demand_misses,
            prefetch_hits: s.prefetch_hits,
            prefetch_misses: s.prefetch_misses,
            prefetch_unread_bytes: s.prefetch_unread_bytes,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct PoolStatus {
    pub name: String,
    pub guid: u64,
    pub health: String,
    pub txg: u64,
    pub capacity_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    pub vdevs: Vec<TopStatus>,
    pub log: Vec<LeafStatus>,
    pub cache: Vec<LeafStatus>,
    #[serde(default)]
    pub spares: Vec<LeafStatus>,
    pub arc: ArcStatus,
    pub l2arc: Option<crate::l2arc::L2Stats>,
    pub suspended: Option<String>,
    pub last_scrub: Option<ScrubSummary>,
    pub unrecoverable_reads: u64,
    pub intent_log: IntentLogStats,
}

pub struct Pool {
    pub name: String,
    pub guid: u64,
    config: Mutex<PoolConfig>,
    pub storage: Arc<Storage>,
    /// Log and cache devices; they change while the pool is imported (`topology.rs`),
    /// under the sync lock, in step with the config.
    log_leaves: RwLock<Vec<Arc<Leaf>>>,
    cache_leaves: RwLock<Vec<Arc<Leaf>>>,
    /// Hot spares (see `spares.rs`); they change while the pool is imported.
    spare_leaves: Mutex<Vec<Arc<Leaf>>>,
    datasets: RwLock<BTreeMap<u64, DatasetEntry>>,
    next_objset_id: Mutex<u64>,
    pending_destroy: Mutex<Vec<(BlockPointer, Deadlist)>>,
    snap_ops: Mutex<Vec<(SnapOp, SnapSlot)>>,
    /// Snapshots being sent (`streams.rs`), which cannot be destroyed meanwhile.
    sending: Mutex<std::collections::HashMap<u64, usize>>,
    directory_dirty: AtomicBool,
    committed: Mutex<Committed>,
    txg: Mutex<TxgState>,
    txg_cv: Condvar,
    gate: RwLock<()>,
    sync_lock: Mutex<()>,
    /// A txg prepared and not yet committed (`prepare_ahead_for_crash_tests`).
    deferred_commit: Mutex<Option<(txg::Prepared, Instant)>>,
    suspended: Mutex<Option<String>>,
    sync_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    scrub_running: AtomicBool,
    last_scrub: Mutex<Option<ScrubSummary>>,
    /// The intent log and the pool's own log area (logical offset, length on top-level
    /// vdev 0; length 0 = none).
    intent_log: IntentLog,
    log_area: Mutex<(u64, u64)>,
    /// The read-ahead workers' queue, made (and the workers started) on first use.
    prefetch_tx: std::sync::OnceLock<vdev::work_queue::QueueSender<PrefetchJob>>,
    /// Bytes of read-ahead jobs queued or being read: with the ARC's unread read-ahead,
    /// what the pool's streams have asked for and not yet read (`read_ahead`).
    read_ahead_pending: Arc<std::sync::atomic::AtomicU64>,
    /// Which read-ahead jobs may be at the devices now, per stream.
    read_ahead_gate: Arc<read_ahead_gate::StreamGate<PrefetchJob>>,
    opts: PoolOptions,
    /// Where intent-log commits and txg syncs are reported, with this pool's number.
    analytics: std::sync::OnceLock<(Arc<analytics::Analytics>, u32)>,
    /// The scrub or resilver in progress.
    pub repair: RepairProgress,
    /// Held by every change of the devices (`topology.rs`, replace, clear, spares)
    /// for its whole run, resilver included: one at a time, so none finds the vdev
    /// it works on changed under it.
    topology: Mutex<()>,
}

/// A scrub or resilver in progress, readable at any time without a lock.
#[derive(Debug, Default)]
pub struct RepairProgress {
    /// `NO_REPAIR`, `SCRUB` or `RESILVER`.
    kind: std::sync::atomic::AtomicU8,
    done: std::sync::atomic::AtomicU64,
    total: std::sync::atomic::AtomicU64,
}

const NO_REPAIR: u8 = 0;
const SCRUB: u8 = 1;
const RESILVER: u8 = 2;

impl RepairProgress {
    /// ("scrub" or "resilver", bytes done, bytes in all) while one runs.
    pub fn get(&self) -> Option<(&'static str, u64, u64)> {
        let kind = match self.kind.load(Ordering::Acquire) {
            SCRUB => "scrub",
            RESILVER => "resilver",
            _ => return None,
        };
        Some((
            kind,
            self.done.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
        ))
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("name", &self.name)
            .field("guid", &self.guid)
            .finish()
    }
}

impl Pool {
    /// Checks a name for a new pool.
    pub fn validate_pool_name(name: &str) -> Result<(), PoolError> {
        valid_pool_name(name)
    }
}

fn valid_pool_name(name: &str) -> Result<(), PoolError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c));
    if ok {
        Ok(())
    } else {
        Err(PoolError::InvalidArgument(format!(
            "pool name '{name}' must start with a letter and use only letters, digits, _ - . : (at most 64)"
        )))
    }
}

fn layout_from_name(name: &str) -> Option<Layout> {
    Some(match name {
        "disk" => Layout::Disk,
        "mirror" => Layout::Mirror,
        "raidz1" | "raidz" => Layout::RaidZ { nparity: 1 },
        "raidz2" => Layout::RaidZ { nparity: 2 },
        "raidz3" => Layout::RaidZ { nparity: 3 },
        _ => return None,
    })
}

fn leaf_status(l: &Leaf) -> LeafStatus {
    let c = l.counters();
    LeafStatus {
        path: l.path(),
        guid: l.guid(),
        health: l.health().name().into(),
        io_mode: l
            .io_mode()
            .map(|m| m.name().to_string())
            .unwrap_or_else(|| "-".into()),
        read_errors: c.read_errors,
        write_errors: c.write_errors,
        cksum_errors: c.cksum_errors,
        read_ops: c.read_ops,
        write_ops: c.write_ops,
        read_bytes: c.read_bytes,
        write_bytes: c.write_bytes,
        repaired_bytes: c.repaired_bytes,
    }
}

/// Devices already carrying a live pool's label are refused.
fn check_device_free(arg: &DeviceArg) -> Result<(), PoolError> {
    if arg.device.size_bytes() < label::MIN_DEVICE_BYTES {
        return Err(PoolError::InvalidArgument(format!(
            "device {} is {} bytes; the minimum is {} (64 MiB)",
            arg.path,
            arg.device.size_bytes(),
            label::MIN_DEVICE_BYTES
        )));
    }
    if let Ok(Some(bytes)) = label::read_any_config(&*arg.device) {
        if let Some(cfg) = PoolConfig::from_bytes(&bytes) {
            if cfg.state != PoolState::Destroyed {
                return Err(PoolError::Exists(format!(
                    "device {} belongs to pool '{}' ({:?}); destroy that pool first",
                    arg.path, cfg.name, cfg.state
                )));
            }
        }
    }
    Ok(())
}

mod directory;
mod lifecycle;
mod objects;
mod read_ahead_gate;
mod repair;
mod snapshots;
mod spares;
mod streams;
mod topology;
mod tx;
mod txg;

use directory::{decode_directory, encode_directory};
pub use streams::{SnapshotHold, SnapshotSource};
pub use tx::Tx;

impl Drop for Pool {
    fn drop(&mut self) {
        let mut t = self.txg.lock().unwrap();
        t.shutdown = true;
        self.txg_cv.notify_all();
    }
}

/// The pool's log area as a ring: for RAID-Z, whole rows, so child `c` owns the same
/// contiguous range of its data area; the first `nparity + 1` children hold copies. For
/// a mirror or a disk the area is the same range on every child.
pub(super) fn pool_ring(top: &TopVdev, offset: u64, len: u64) -> Option<Ring> {
    if len == 0 {
        return None;
    }
    let sector = vdev::SECTOR_SIZE as u64;
    let (base, ring_len, copies) = match top.layout {
        Layout::RaidZ { nparity } => {
            let ncols = top.leaves.len() as u64;
            let first_row = (offset / sector).div_ceil(ncols);
            let rows = ((offset + len) / sector).saturating_sub(first_row * ncols) / ncols;
            (first_row * sector, rows * sector, nparity + 1)
        }
        _ => (offset, len, top.leaves.len()),
    };
    Some(Ring {
        kind: RingKind::Pool,
        replicas: top
            .leaves
            .iter()
            .take(copies)
            .map(|l| (l.clone(), base))
            .collect(),
        len: ring_len,
        workers: Mutex::new(Vec::new()),
    })
}

/// The log devices as one ring, mirrored on all of them.
pub(super) fn device_ring(log_leaves: &[Arc<Leaf>]) -> Option<Ring> {
    let sector = vdev::SECTOR_SIZE as u64;
    let len = log_leaves
        .iter()
        .filter(|l| l.device().is_some())
        .map(|l| l.data_len())
        .min()?
        / sector
        * sector;
    Some(Ring {
        kind: RingKind::LogDevices,
        replicas: log_leaves.iter().map(|l| (l.clone(), 0)).collect(),
        len,
        workers: Mutex::new(Vec::new()),
    })
}

/// Each object set's share of `max` loaded objects, max-min fair: sets that use less
/// than an equal split keep what they use (idle snapshots cost the busy filesystem
/// nothing), and the rest split what is left equally; never below `floor`.
pub(super) fn fair_shares(loaded: &[usize], max: usize, floor: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..loaded.len()).collect();
    order.sort_by_key(|&i| loaded[i]);
    let mut shares = vec![0; loaded.len()];
    let mut left = max;
    for (k, &i) in order.iter().enumerate() {
        let equal = left / (loaded.len() - k);
        let share = loaded[i].min(equal);
        left -= share;
        shares[i] = share.max(floor);
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::repair::{first_difference, merged};

    #[test]
    fn range_sets_merge_and_compare() {
        assert_eq!(
            merged(vec![(10, 5), (0, 4), (4, 2), (15, 1), (30, 2)]),
            vec![(0, 6), (10, 6), (30, 2)]
        );
        let a = merged(vec![(0, 8), (16, 8)]);
        assert_eq!(first_difference(&a, &a), None);
        assert_eq!(
            first_difference(&a, &[(0, 8)]),
            Some((16, 8, true)),
            "allocated on disk only"
        );
        assert_eq!(
            first_difference(&[(0, 8)], &a),
            Some((16, 8, false)),
            "referenced only"
        );
        assert_eq!(first_difference(&[(0, 4)], &[(0, 8)]), Some((0, 8, false)));
    }
    use super::fair_shares;

    #[test]
    fn object_cache_shares_are_max_min_fair() {
        // Idle sets keep what they use; the busy ones split the rest.
        assert_eq!(
            fair_shares(&[10, 0, 5000, 3000], 4000, 0),
            vec![10, 0, 1995, 1995]
        );
        // Under the bound nobody gives anything up.
        assert_eq!(fair_shares(&[10, 20], 100, 0), vec![10, 20]);
        // 200 idle snapshots do not shrink the one busy filesystem to a sliver.
        let mut loaded = vec![0; 200];
        loaded.push(100_000);
        let shares = fair_shares(&loaded, 50_000, 1024);
        assert_eq!(shares[200], 50_000);
        assert!(shares[..200].iter().all(|&s| s == 1024), "the floor");
    }
}
