//! A pool: create, import, export and destroy; the transaction group pipeline; the
//! directory of object sets; status, scrub and check.
//!
//! Transaction groups: every change joins the *open* txg while holding the txg gate
//! shared. The sync thread (every `txg_interval`, when dirty data passes
//! `dirty_sync_bytes`, or on request) takes the gate exclusively for an instant to
//! *quiesce* (the open changes become the syncing set, a new txg opens), then *syncs*
//! without blocking writers: object sets, the directory block, the space log, a flush of
//! every device, the uberblock into every label, a second flush. Writers wait only when
//! the open txg holds `dirty_max_bytes`.
//!
//! Crash safety: see `uberblock.rs` for the commit order and `alloc.rs` for why the
//! previous trees stay intact. After a crash, import finds the newest uberblock whose
//! directory, object sets and space log all verify, and is exactly that txg.
//!
//! Directory block (logical, little-endian): 0..8 magic `SHOALDIR`; 8..12 version (2;
//! 1 is read too); 12..16 entry count u32; 16..24 next object set id u64; then per
//! entry: id u64, root block pointer (128), name length u16, name (UTF-8), properties
//! length u32, properties (UTF-8 JSON, owned by the file system layer); version 2 adds
//! kind u8 (0 dataset, 1 snapshot), origin u64 (a snapshot's dataset id, else 0),
//! snapshot txg u64 (a snapshot's own txg, or a dataset's latest snapshot txg, 0 for
//! none), dead list head block pointer (128) and dead list entry count u64.
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
const DIR_VERSION: u32 = 3;
const DIR_MAX_BYTES: usize = 1024 * 1024;
/// Read-ahead threads. Each runs one job (one aggregated read per leaf) at a time, so
/// this is also the device queue depth read-ahead can reach: 16 keeps a 32 MiB window
/// in flight for two streams (8 left the reader waiting on in-flight blocks twice as
/// often on one stream).
const PREFETCH_WORKERS: usize = 16;
const PREFETCH_QUEUE: usize = 1024;

/// (object set, object, block range)
type PrefetchJob = (Arc<Objset>, u64, std::ops::Range<u64>);
/// Bytes per read-ahead job: one aggregated batch each, a read of a quarter of it per
/// data leaf of a raidz2 of 6. Smaller jobs keep more workers (so more device reads) in
/// flight per stream: on one stream of a 32 MiB window, 1 MiB jobs read from disk at a
/// median 1,684 MB/s where 4 MiB jobs reached 1,539 (and 1,678 against 1,367 on eight
/// streams); a read-ahead block per job (32K per leaf) had reached 1,200.
const PREFETCH_JOB_BYTES: u64 = 1 << 20;

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
        }
    }
}

/// Physical memory in bytes (from /proc/meminfo), with a safe fallback.
pub fn physical_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| {
                    l.split_whitespace()
                        .nth(1)
                        .and_then(|kb| kb.parse::<u64>().ok())
                })
        })
        .map(|kb| kb * 1024)
        .unwrap_or(4 << 30)
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
}

/// Snapshot work done in syncing context; the caller waits for the sync and reads the
/// outcome from the slot.
#[derive(Debug)]
enum SnapOp {
    Create { dataset: u64, name: String },
    Destroy { id: u64 },
    Rollback { id: u64 },
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
}

#[derive(Debug)]
struct TxgState {
    open_txg: u64,
    synced_txg: u64,
    dirty_bytes: u64,
    requested_txg: u64,
    shutdown: bool,
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
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ResilverSummary {
    pub blocks: u64,
    pub bytes_written: u64,
    pub errors: u64,
    pub seconds: f64,
}

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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
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
        }
    }
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
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
    log_leaves: Vec<Arc<Leaf>>,
    cache_leaves: Vec<Arc<Leaf>>,
    datasets: RwLock<BTreeMap<u64, DatasetEntry>>,
    next_objset_id: Mutex<u64>,
    pending_destroy: Mutex<Vec<(BlockPointer, Deadlist)>>,
    snap_ops: Mutex<Vec<(SnapOp, SnapSlot)>>,
    directory_dirty: AtomicBool,
    committed: Mutex<Committed>,
    txg: Mutex<TxgState>,
    txg_cv: Condvar,
    gate: RwLock<()>,
    sync_lock: Mutex<()>,
    suspended: Mutex<Option<String>>,
    sync_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    scrub_running: AtomicBool,
    last_scrub: Mutex<Option<ScrubSummary>>,
    /// The intent log and the pool's own log area (logical offset, length on top-level
    /// vdev 0; length 0 = none).
    intent_log: IntentLog,
    log_area: Mutex<(u64, u64)>,
    /// The read-ahead workers' queue, made (and the workers started) on first use.
    prefetch_tx: std::sync::OnceLock<crossbeam_channel::Sender<PrefetchJob>>,
    opts: PoolOptions,
    /// Where intent-log commits and txg syncs are reported, with this pool's number.
    analytics: std::sync::OnceLock<(Arc<analytics::Analytics>, u32)>,
    /// The scrub or resilver in progress.
    pub repair: RepairProgress,
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

impl Pool {
    /// Creates a new pool on the given devices and commits its first txg.
    pub fn create(
        name: &str,
        tops: Vec<TopArg>,
        log: Vec<DeviceArg>,
        cache: Vec<DeviceArg>,
        opts: PoolOptions,
    ) -> Result<Arc<Pool>, PoolError> {
        valid_pool_name(name)?;
        if tops.is_empty() {
            return Err(PoolError::InvalidArgument(
                "a pool needs at least one data vdev".into(),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for t in &tops {
            match t.layout {
                Layout::Disk if t.devices.len() != 1 => {
                    return Err(PoolError::InvalidArgument(
                        "a plain disk vdev has exactly one device".into(),
                    ))
                }
                Layout::Mirror if t.devices.len() < 2 => {
                    return Err(PoolError::InvalidArgument(
                        "a mirror needs at least 2 devices".into(),
                    ))
                }
                Layout::RaidZ { nparity }
                    if t.devices.len() < nparity + 2 || t.devices.len() > 255 =>
                {
                    return Err(PoolError::InvalidArgument(format!(
                        "raidz{nparity} needs at least {} devices",
                        nparity + 2
                    )))
                }
                _ => {}
            }
        }
        for d in tops
            .iter()
            .flat_map(|t| t.devices.iter())
            .chain(log.iter())
            .chain(cache.iter())
        {
            if !seen.insert(d.path.clone()) {
                return Err(PoolError::InvalidArgument(format!(
                    "device {} named twice",
                    d.path
                )));
            }
            check_device_free(d)?;
        }
        let guid = new_guid();
        let mk_leaf = |d: &DeviceArg| -> Arc<Leaf> {
            Arc::new(Leaf::new(new_guid(), d.path.clone(), d.device.clone()))
        };
        let mut top_vdevs = Vec::new();
        let mut top_cfgs = Vec::new();
        for (i, t) in tops.iter().enumerate() {
            let leaves: Vec<Arc<Leaf>> = t.devices.iter().map(mk_leaf).collect();
            top_cfgs.push(TopConfig {
                id: i as u32,
                layout: t.layout.name(),
                children: leaves
                    .iter()
                    .map(|l| LeafConfig {
                        guid: l.guid(),
                        path: l.path(),
                    })
                    .collect(),
            });
            top_vdevs.push(Arc::new(TopVdev::new(i as u32, t.layout, leaves)));
        }
        let log_leaves: Vec<Arc<Leaf>> = log.iter().map(mk_leaf).collect();
        let cache_leaves: Vec<Arc<Leaf>> = cache.iter().map(mk_leaf).collect();
        let config = PoolConfig {
            version: CONFIG_VERSION,
            name: name.to_string(),
            guid,
            state: PoolState::Active,
            config_txg: 1,
            vdevs: top_cfgs,
            log: log_leaves
                .iter()
                .map(|l| LeafConfig {
                    guid: l.guid(),
                    path: l.path(),
                })
                .collect(),
            cache: cache_leaves
                .iter()
                .map(|l| LeafConfig {
                    guid: l.guid(),
                    path: l.path(),
                })
                .collect(),
            this_guid: 0,
        };
        let capacities: Vec<u64> = top_vdevs.iter().map(|t| t.capacity_bytes()).collect();
        let arc_max = opts.arc_max_bytes.unwrap_or(physical_memory_bytes() / 4);
        let storage = Arc::new(Storage::new(
            top_vdevs,
            Allocator::new(&capacities),
            arc_max,
        ));
        let l2_devices: Vec<Arc<dyn Device>> =
            cache_leaves.iter().filter_map(|l| l.device()).collect();
        if let Some(l2) = crate::l2arc::L2Arc::start(l2_devices) {
            let _ = storage.l2.set(l2);
        }
        let pool = Arc::new(Pool::assemble(
            name,
            guid,
            config,
            storage,
            log_leaves,
            cache_leaves,
            opts,
        ));
        // Wipe stale uberblocks (a destroyed pool's) before the first label goes down.
        for leaf in pool.all_leaves() {
            if let Some(dev) = leaf.device() {
                label::clear_labels(&*dev)?;
            }
        }
        pool.write_labels()?;
        pool.reserve_log_area();
        pool.intent_log
            .preallocate_rings()
            .map_err(|e| PoolError::Io(format!("preparing the intent log's space on {e}")))?;
        pool.intent_log.start_chain(0);
        pool.directory_dirty.store(true, Ordering::SeqCst);
        pool.sync()?;
        pool.start_sync_thread();
        Ok(pool)
    }

    fn assemble(
        name: &str,
        guid: u64,
        config: PoolConfig,
        storage: Arc<Storage>,
        log_leaves: Vec<Arc<Leaf>>,
        cache_leaves: Vec<Arc<Leaf>>,
        opts: PoolOptions,
    ) -> Pool {
        storage
            .deterministic
            .store(opts.deterministic_io, Ordering::Relaxed);
        let log_device_ring = device_ring(&log_leaves);
        Pool {
            name: name.to_string(),
            guid,
            config: Mutex::new(config),
            storage,
            log_leaves,
            cache_leaves,
            datasets: RwLock::new(BTreeMap::new()),
            next_objset_id: Mutex::new(1),
            pending_destroy: Mutex::new(Vec::new()),
            snap_ops: Mutex::new(Vec::new()),
            directory_dirty: AtomicBool::new(false),
            committed: Mutex::new(Committed {
                txg: 0,
                directory: BlockPointer::HOLE,
                spacelog_head: BlockPointer::HOLE,
                spacelog_len: 0,
                log: LogHeader::default(),
            }),
            txg: Mutex::new(TxgState {
                open_txg: 1,
                synced_txg: 0,
                dirty_bytes: 0,
                requested_txg: 0,
                shutdown: false,
            }),
            txg_cv: Condvar::new(),
            gate: RwLock::new(()),
            sync_lock: Mutex::new(()),
            suspended: Mutex::new(None),
            sync_thread: Mutex::new(None),
            scrub_running: AtomicBool::new(false),
            last_scrub: Mutex::new(None),
            intent_log: IntentLog::new(log_device_ring, !opts.deterministic_io),
            log_area: Mutex::new((0, 0)),
            prefetch_tx: std::sync::OnceLock::new(),
            opts,
            analytics: std::sync::OnceLock::new(),
            repair: RepairProgress::default(),
        }
    }

    /// Reports every device I/O of this pool to `analytics` from now on.
    pub fn attach_analytics(&self, analytics: &Arc<analytics::Analytics>) {
        for leaf in self.all_leaves() {
            leaf.attach_analytics(analytics, &self.name);
        }
        let id = analytics.register_pool(&self.name);
        let _ = self.analytics.set((analytics.clone(), id));
    }

    /// Reports one intent-log commit or txg sync that took from `started` to now.
    fn report(&self, meter: analytics::Meter, started: Instant) {
        if let Some((a, id)) = self.analytics.get() {
            let at = Instant::now();
            a.record(analytics::Event::Meter(analytics::MeterEvent {
                meter,
                subject: *id,
                labels: ["", "", ""],
                value: 1,
                latency_ns: at.saturating_duration_since(started).as_nanos() as u64,
                at,
            }));
        }
    }

    /// Every leaf of the pool: data, log and cache devices.
    pub fn leaves(&self) -> Vec<Arc<Leaf>> {
        self.all_leaves()
    }

    /// Dirty bytes of the open transaction group.
    pub fn dirty_bytes(&self) -> u64 {
        self.txg.lock().unwrap().dirty_bytes
    }

    fn all_leaves(&self) -> Vec<Arc<Leaf>> {
        let mut v: Vec<Arc<Leaf>> = self
            .storage
            .tops
            .iter()
            .flat_map(|t| t.leaves.iter().cloned())
            .collect();
        v.extend(self.log_leaves.iter().cloned());
        v.extend(self.cache_leaves.iter().cloned());
        v
    }

    fn write_labels(&self) -> Result<(), PoolError> {
        self.write_labels_first(None)
    }

    /// Writes every usable leaf's labels, `first`'s before any other's. A config that
    /// names a new device must be durable on that device before any other label names
    /// it: a crash in between would otherwise leave labels that name a device import
    /// cannot find, while the device it replaced no longer belongs to the pool.
    /// (`write_config` flushes each device before returning.)
    fn write_labels_first(&self, first: Option<&Arc<Leaf>>) -> Result<(), PoolError> {
        let cfg = self.config.lock().unwrap().clone();
        let mut leaves = self.all_leaves();
        if let Some(first) = first {
            leaves.retain(|l| !Arc::ptr_eq(l, first));
            leaves.insert(0, first.clone());
        }
        for leaf in leaves {
            if !leaf.is_usable() {
                continue;
            }
            let mut c = cfg.clone();
            c.this_guid = leaf.guid();
            label::write_config(&*leaf.device().unwrap(), &c.to_bytes())?;
        }
        Ok(())
    }

    /// Imports a pool from a set of candidate devices (all devices of a directory, say).
    /// With `name`, picks that pool; without, there must be exactly one.
    pub fn import(
        devices: Vec<DeviceArg>,
        name: Option<&str>,
        opts: PoolOptions,
    ) -> Result<Arc<Pool>, PoolError> {
        // Read every label; remember which device claims which leaf guid.
        let mut configs: HashMap<u64, PoolConfig> = HashMap::new();
        let mut by_leaf: HashMap<u64, DeviceArg> = HashMap::new();
        for d in devices {
            if d.device.size_bytes() < label::MIN_DEVICE_BYTES {
                continue;
            }
            let Ok(Some(bytes)) = label::read_any_config(&*d.device) else {
                continue;
            };
            let Some(cfg) = PoolConfig::from_bytes(&bytes) else {
                continue;
            };
            if cfg.state == PoolState::Destroyed {
                continue;
            }
            by_leaf.insert(cfg.this_guid, d);
            let keep = configs
                .get(&cfg.guid)
                .is_none_or(|c| c.config_txg < cfg.config_txg);
            if keep {
                configs.insert(cfg.guid, cfg);
            }
        }
        let mut matching: Vec<PoolConfig> = configs
            .into_values()
            .filter(|c| name.is_none_or(|n| n == c.name))
            .collect();
        let config = match matching.len() {
            0 => {
                return Err(PoolError::NotFound(match name {
                    Some(n) => format!("no pool named '{n}' on the given devices"),
                    None => "no pool found on the given devices".into(),
                }))
            }
            1 => matching.pop().unwrap(),
            _ => {
                let names: Vec<String> = matching.iter().map(|c| c.name.clone()).collect();
                return Err(PoolError::InvalidArgument(format!(
                    "several pools found ({}); name the one to import",
                    names.join(", ")
                )));
            }
        };
        let leaf_of = |lc: &LeafConfig, data_len: u64| -> Arc<Leaf> {
            match by_leaf.get(&lc.guid) {
                Some(d) => Arc::new(Leaf::new(lc.guid, d.path.clone(), d.device.clone())),
                None => Arc::new(Leaf::missing(lc.guid, lc.path.clone(), data_len)),
            }
        };
        let mut tops = Vec::new();
        for t in &config.vdevs {
            let layout = layout_from_name(&t.layout)
                .ok_or_else(|| PoolError::Corrupt(format!("unknown vdev layout '{}'", t.layout)))?;
            let present_len = t
                .children
                .iter()
                .filter_map(|c| by_leaf.get(&c.guid))
                .map(|d| label::data_area(d.device.size_bytes()).1)
                .min()
                .unwrap_or(0);
            let leaves: Vec<Arc<Leaf>> =
                t.children.iter().map(|c| leaf_of(c, present_len)).collect();
            let top = TopVdev::new(t.id, layout, leaves);
            if top.health() == Health::Faulted {
                let missing: Vec<String> = top
                    .leaves
                    .iter()
                    .filter(|l| !l.is_usable())
                    .map(|l| l.path())
                    .collect();
                return Err(PoolError::Io(format!(
                    "cannot import '{}': {} vdev {} is missing too many devices ({})",
                    config.name,
                    t.layout,
                    t.id,
                    missing.join(", ")
                )));
            }
            tops.push(Arc::new(top));
        }
        let log_leaves: Vec<Arc<Leaf>> = config.log.iter().map(|l| leaf_of(l, 0)).collect();
        let cache_leaves: Vec<Arc<Leaf>> = config.cache.iter().map(|l| leaf_of(l, 0)).collect();

        let mut slots = Vec::new();
        for t in &tops {
            for l in &t.leaves {
                if let Some(dev) = l.device() {
                    slots.extend(label::read_uberblock_slots(&*dev));
                }
            }
        }
        let candidates = uberblock::candidates(&slots, config.guid);
        if candidates.is_empty() {
            return Err(PoolError::Corrupt(format!(
                "pool '{}' has no valid uberblock",
                config.name
            )));
        }
        let capacities: Vec<u64> = tops.iter().map(|t| t.capacity_bytes()).collect();
        let arc_max = opts.arc_max_bytes.unwrap_or(physical_memory_bytes() / 4);
        let mut last_err = None;
        for ub in candidates {
            let storage = Arc::new(Storage::new(
                tops.clone(),
                Allocator::new(&capacities),
                arc_max,
            ));
            let mut cfg = config.clone();
            cfg.state = PoolState::Active;
            cfg.config_txg += 1;
            let pool = Pool::assemble(
                &config.name,
                config.guid,
                cfg,
                storage,
                log_leaves.clone(),
                cache_leaves.clone(),
                opts.clone(),
            );
            match pool.load(&ub) {
                Ok(()) => {
                    let l2_devices: Vec<Arc<dyn Device>> = pool
                        .cache_leaves
                        .iter()
                        .filter(|l| l.is_usable())
                        .filter_map(|l| l.device())
                        .collect();
                    if let Some(l2) = crate::l2arc::L2Arc::start(l2_devices) {
                        let _ = pool.storage.l2.set(l2);
                    }
                    let pool = Arc::new(pool);
                    pool.write_labels()?;
                    pool.replay_intent_log(&ub.log)?;
                    pool.start_sync_thread();
                    return Ok(pool);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap())
    }

    /// Loads the state named by one uberblock; fails if anything does not verify.
    fn load(&self, ub: &Uberblock) -> Result<(), PoolError> {
        let st = &self.storage;
        let mut datasets = BTreeMap::new();
        let mut next_id = 1;
        if !ub.directory.is_hole() {
            let block = st.read_block(&ub.directory)?;
            let (entries, next, sizes_stored) = decode_directory(block.bytes())?;
            next_id = next;
            for mut r in entries {
                if !sizes_stored {
                    r.deadlist.bytes = deadlist::count_bytes(st, r.deadlist)?;
                }
                let objset = Arc::new(Objset::open(st, r.id, r.root)?);
                if r.snapshot_of.is_none() {
                    objset.set_keep_upto(r.snap_txg);
                }
                datasets.insert(
                    r.id,
                    DatasetEntry {
                        name: r.name,
                        props: r.props,
                        objset,
                        snapshot_of: r.snapshot_of,
                        snap_txg: r.snap_txg,
                        deadlist: r.deadlist,
                    },
                );
            }
        }
        {
            let mut alloc = st.alloc.lock().unwrap();
            spacelog::replay(st, ub.spacelog_head, &mut alloc)?;
            // The directory and object set trees must be allocated space.
        }
        *self.datasets.write().unwrap() = datasets;
        *self.next_objset_id.lock().unwrap() = next_id;
        *self.log_area.lock().unwrap() = (ub.log.area_offset, ub.log.area_len);
        self.intent_log.set_pool_ring(pool_ring(
            &self.storage.tops[0],
            ub.log.area_offset,
            ub.log.area_len,
        ));
        *self.committed.lock().unwrap() = Committed {
            txg: ub.txg,
            directory: ub.directory,
            spacelog_head: ub.spacelog_head,
            spacelog_len: ub.spacelog_len,
            log: ub.log,
        };
        let mut t = self.txg.lock().unwrap();
        t.open_txg = ub.txg + 1;
        t.synced_txg = ub.txg;
        drop(t);
        // A full structural check would be costly for large pools; verify the allocator
        // agrees with the directory's own blocks at least.
        let dir = ub.directory;
        let alloc = st.alloc.lock().unwrap();
        for d in dir.copies() {
            if alloc
                .vdevs
                .get(d.vdev as usize)
                .is_none_or(|v| v.overlaps_free(d.offset, d.asize()))
            {
                return Err(PoolError::Corrupt(
                    "directory block lies in free space".into(),
                ));
            }
        }
        Ok(())
    }

    fn start_sync_thread(self: &Arc<Self>) {
        if !self.opts.sync_thread {
            return;
        }
        let weak = Arc::downgrade(self);
        let interval = self.opts.txg_interval;
        let handle = std::thread::Builder::new()
            .name(format!("txg-sync-{}", self.name))
            .spawn(move || loop {
                let Some(pool) = weak.upgrade() else { return };
                let mut t = pool.txg.lock().unwrap();
                let deadline = Instant::now() + interval;
                loop {
                    if t.shutdown {
                        return;
                    }
                    if t.dirty_bytes >= pool.opts.dirty_sync_bytes || t.requested_txg >= t.open_txg
                    {
                        break;
                    }
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    let (g, _) = pool
                        .txg_cv
                        .wait_timeout(t, (deadline - now).min(Duration::from_millis(500)))
                        .unwrap();
                    t = g;
                }
                drop(t);
                if pool.is_suspended() {
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
                let _ = pool.sync_once();
            })
            .expect("spawn sync thread");
        *self.sync_thread.lock().unwrap() = Some(handle);
    }

    pub fn is_suspended(&self) -> bool {
        self.suspended.lock().unwrap().is_some()
    }

    fn check_writable(&self) -> Result<(), PoolError> {
        if let Some(reason) = self.suspended.lock().unwrap().clone() {
            return Err(PoolError::Suspended(reason));
        }
        Ok(())
    }

    /// Bytes the pool keeps back so syncs and frees always have room.
    pub fn slop_bytes(&self) -> u64 {
        let cap = self.storage.alloc.lock().unwrap().capacity();
        (cap / 32).max(32 << 20).min(cap / 2)
    }

    /// Logical bytes the pool can hold in all and can still take now, after slop,
    /// dirty data not yet allocated, and worst-case parity and rounding: what a
    /// filesystem reports to `statfs`.
    pub fn usable_space(&self) -> (u64, u64) {
        let (cap, free) = {
            let a = self.storage.alloc.lock().unwrap();
            (a.capacity(), a.free_bytes())
        };
        let dirty = self.txg.lock().unwrap().dirty_bytes;
        let inflation = self.inflation();
        let slop = self.slop_bytes();
        let total = (cap.saturating_sub(slop) as f64 / inflation) as u64;
        let avail = (free.saturating_sub(slop) as f64 / inflation) as u64;
        (total, avail.saturating_sub(dirty))
    }

    /// Worst-case allocated bytes per logical byte (parity, rounding, metadata).
    fn inflation(&self) -> f64 {
        let worst = self
            .storage
            .tops
            .iter()
            .map(|t| t.asize(128 * 1024) as f64 / (128.0 * 1024.0))
            .fold(1.0, f64::max);
        worst * 1.05
    }

    /// Admission for a change of about `bytes`: suspension, space, write throttle.
    fn admit(&self, bytes: u64) -> Result<(), PoolError> {
        self.check_writable()?;
        let mut waited_for_space = false;
        loop {
            let dirty = self.txg.lock().unwrap().dirty_bytes;
            let (used, cap) = {
                let a = self.storage.alloc.lock().unwrap();
                (a.capacity() - a.free_bytes(), a.capacity())
            };
            let need = ((dirty + bytes) as f64 * self.inflation()) as u64;
            // A change that only frees (bytes == 0) may use the slop: deleting must work
            // on a full pool, which is what the slop is kept for.
            if bytes == 0 || used + need + self.slop_bytes() <= cap {
                break;
            }
            if waited_for_space {
                return Err(PoolError::NoSpace);
            }
            // Pending frees may make room once they pass their deferral.
            waited_for_space = true;
            for _ in 0..=crate::alloc::DEFER_TXGS {
                self.sync()?;
            }
        }
        let mut t = self.txg.lock().unwrap();
        while t.dirty_bytes >= self.opts.dirty_max_bytes && !t.shutdown {
            t.requested_txg = t.requested_txg.max(t.open_txg);
            self.txg_cv.notify_all();
            if !self.opts.sync_thread {
                drop(t);
                self.sync_once()?;
                t = self.txg.lock().unwrap();
                continue;
            }
            t = self
                .txg_cv
                .wait_timeout(t, Duration::from_millis(100))
                .unwrap()
                .0;
            if let Some(r) = self.suspended.lock().unwrap().clone() {
                return Err(PoolError::Suspended(r));
            }
        }
        Ok(())
    }

    /// Counts `bytes` newly dirtied in `objset`: towards the txg's dirty data (the
    /// write throttle) and the object set's space charge (quotas).
    fn account_dirty(&self, objset: &Objset, bytes: u64) {
        objset.charge(bytes);
        self.account_dirty_bytes(bytes);
    }

    fn account_dirty_bytes(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut t = self.txg.lock().unwrap();
        t.dirty_bytes += bytes;
        if t.dirty_bytes >= self.opts.dirty_sync_bytes {
            self.txg_cv.notify_all();
        }
    }

    // ---- intent log ----

    /// Makes every change made so far durable through the intent log, without waiting
    /// for a txg (fsync, O_SYNC writes, `sync=always`). Concurrent callers share one
    /// log write.
    pub fn log_commit(&self) -> Result<(), PoolError> {
        self.check_writable()?;
        let started = Instant::now();
        let r = self.intent_log.commit(self);
        if r.is_ok() {
            self.report(analytics::Meter::LogCommit, started);
        }
        r
    }

    pub fn intent_log_stats(&self) -> IntentLogStats {
        self.intent_log.stats()
    }

    /// Reserves the pool's log area on top-level vdev 0 (at creation, or on import of a
    /// pool that has none): 1/32 of each child, at most `AREA_MAX_BYTES_PER_CHILD`.
    /// Committed by the next txg like any allocation.
    fn reserve_log_area(&self) {
        let top = &self.storage.tops[0];
        let sector = vdev::SECTOR_SIZE as u64;
        // Bytes of each child's data area the layout uses.
        let child = match top.layout {
            Layout::RaidZ { .. } => top.capacity_bytes() / top.leaves.len() as u64,
            _ => top.capacity_bytes(),
        };
        let ring = (child / 32).min(crate::intent_log::AREA_MAX_BYTES_PER_CHILD) / sector * sector;
        if ring < crate::intent_log::RING_MIN_BYTES {
            return;
        }
        let len = match top.layout {
            Layout::RaidZ { nparity } => {
                let ncols = top.leaves.len() as u64;
                // Room to align the start to a whole row, rounded like any RAID-Z
                // allocation so the gaps around it stay usable.
                let raw = ring * ncols + (ncols - 1) * sector;
                raw.div_ceil((nparity as u64 + 1) * sector) * (nparity as u64 + 1) * sector
            }
            _ => ring,
        };
        let Some(extent) = self.storage.alloc.lock().unwrap().allocate_on(0, len) else {
            return;
        };
        *self.log_area.lock().unwrap() = (extent.offset, extent.len);
        self.intent_log
            .set_pool_ring(pool_ring(top, extent.offset, extent.len));
    }

    /// Replays the chain named by the imported uberblock in one txg of its own, whose
    /// commit also starts a fresh chain. With nothing to replay the chain carries on
    /// and no txg is needed (unless the log must move to another ring).
    fn replay_intent_log(&self, header: &LogHeader) -> Result<(), PoolError> {
        // Rings of pools made before rings were preallocated, or sparse again after a
        // device was replaced. Nothing writes them before this function returns. Only an
        // optimization (see `Device::preallocate`), so an error is left to the log's own
        // writes to report, where it belongs.
        let _ = self.intent_log.preallocate_rings();
        let committed_txg = self.synced_txg();
        let ring = self.intent_log.ring(header.kind);
        let mut read = match &ring {
            Some(ring) => crate::intent_log::read_chain(ring, header),
            None => Default::default(),
        };
        let records: Vec<LogOp> = std::mem::take(&mut read.records)
            .into_iter()
            .filter(|(txg, _)| *txg > committed_txg)
            .map(|(_, op)| op)
            .collect();
        let replayed = records.len() as u64;
        let same_ring = ring.is_some() && self.intent_log.preferred_kind() == header.kind;
        // After an interrupted commit the chain starts over: carrying on would let the
        // next commit's end seem to complete the interrupted one.
        if replayed == 0 && same_ring && !read.incomplete_tail {
            self.intent_log.continue_chain(header, &read);
            return Ok(());
        }
        let mut failures = 0u64;
        self.intent_log.set_replaying(true);
        for op in records {
            let r = match op {
                LogOp::DestroyObjset { id } => self.destroy_objset(id),
                op => self.begin_admitted().replay(op),
            };
            if r.is_err() {
                failures += 1;
            }
        }
        self.intent_log.set_replaying(false);
        self.intent_log.note_replay(replayed, failures);
        if self.log_area.lock().unwrap().1 == 0 {
            self.reserve_log_area();
            // The area just reserved (see the top of this function).
            let _ = self.intent_log.preallocate_rings();
        }
        // The new chain starts after the old one, which stays readable until the
        // commit below names the new one.
        self.intent_log
            .start_chain(if same_ring { read.end } else { 0 });
        self.directory_dirty.store(true, Ordering::SeqCst);
        self.sync().map(|_| ())
    }

    // ---- snapshots ----

    /// Takes snapshot `name` of dataset `dataset`: everything changed before this call
    /// is in it. O(1): one directory entry naming the root the dataset's sync wrote.
    pub fn snapshot_create(&self, dataset: u64, name: &str) -> Result<u64, PoolError> {
        Self::validate_objset_name(name)?;
        if name.contains('/') {
            return Err(PoolError::InvalidArgument(format!(
                "invalid snapshot name '{name}'"
            )));
        }
        self.run_snapshot_op(SnapOp::Create {
            dataset,
            name: name.to_string(),
        })
    }

    /// Destroys a snapshot, freeing the blocks only it held.
    pub fn snapshot_destroy(&self, id: u64) -> Result<(), PoolError> {
        self.run_snapshot_op(SnapOp::Destroy { id }).map(|_| ())
    }

    /// Rolls a dataset back to its latest snapshot `id`: later changes are discarded
    /// and their blocks freed. The dataset must not be in use (mounted or shared).
    pub fn snapshot_rollback(&self, id: u64) -> Result<(), PoolError> {
        self.run_snapshot_op(SnapOp::Rollback { id }).map(|_| ())
    }

    fn run_snapshot_op(&self, op: SnapOp) -> Result<u64, PoolError> {
        self.check_writable()?;
        let slot: SnapSlot = Arc::new(Mutex::new(None));
        self.snap_ops.lock().unwrap().push((op, slot.clone()));
        self.directory_dirty.store(true, Ordering::SeqCst);
        self.sync()?;
        let outcome = slot.lock().unwrap().take();
        outcome.unwrap_or_else(|| Err(PoolError::Io("snapshot operation did not run".into())))
    }

    /// (id, `dataset@name`) of a dataset's snapshots, oldest first: the cheap listing
    /// (no dead list is read) for lookups.
    pub fn snapshot_names(&self, dataset: u64) -> Vec<(u64, String)> {
        let ds = self.datasets.read().unwrap();
        let mut v: Vec<(u64, u64, String)> = ds
            .iter()
            .filter(|(_, d)| d.snapshot_of == Some(dataset))
            .map(|(id, d)| (d.snap_txg, *id, d.name.clone()))
            .collect();
        v.sort();
        v.into_iter().map(|(_, id, name)| (id, name)).collect()
    }

    /// Snapshots, oldest first, with the space each alone holds (reads dead lists);
    /// of one dataset when given.
    pub fn list_snapshots(&self, dataset: Option<u64>) -> Result<Vec<SnapshotInfo>, PoolError> {
        let ds = self.datasets.read().unwrap();
        let mut snaps: Vec<(u64, &DatasetEntry)> = ds
            .iter()
            .filter(|(_, d)| d.snapshot_of.is_some())
            .filter(|(_, d)| dataset.is_none_or(|want| d.snapshot_of == Some(want)))
            .map(|(id, d)| (*id, d))
            .collect();
        snaps.sort_by_key(|(_, d)| (d.snapshot_of, d.snap_txg));
        let mut out = Vec::with_capacity(snaps.len());
        for (id, d) in snaps {
            let origin = d.snapshot_of.unwrap();
            let (prev, next) = Self::neighbours(&ds, origin, d.snap_txg);
            let next_list = ds[&next].deadlist;
            let unique = deadlist::entries(&self.storage, next_list)?
                .iter()
                .filter(|bp| bp.birth_txg > prev && bp.birth_txg <= d.snap_txg)
                .map(|bp| self.storage.dsize(bp))
                .sum();
            out.push(SnapshotInfo {
                id,
                name: d.name.clone(),
                dataset: origin,
                txg: d.snap_txg,
                unique_bytes: unique,
            });
        }
        Ok(out)
    }

    /// (id, name, space) of every dataset (snapshots are counted in their dataset).
    pub fn dataset_spaces(&self) -> Vec<(u64, String, DatasetSpace)> {
        let ds = self.datasets.read().unwrap();
        let mut out: BTreeMap<u64, (String, DatasetSpace)> = BTreeMap::new();
        for (id, d) in ds.iter().filter(|(_, d)| d.snapshot_of.is_none()) {
            let c = d.objset.space();
            let space = DatasetSpace {
                referenced: c.referenced,
                pending: c.open_charge + c.syncing_charge,
                snapshots: d.deadlist.bytes,
            };
            out.insert(*id, (d.name.clone(), space));
        }
        for d in ds.values() {
            if let Some(origin) = d.snapshot_of {
                if let Some((_, space)) = out.get_mut(&origin) {
                    space.snapshots += d.deadlist.bytes;
                }
            }
        }
        out.into_iter().map(|(id, (n, s))| (id, n, s)).collect()
    }

    /// For a snapshot of `origin` at `txg`: the previous snapshot's txg (0 if none) and
    /// the id of the next snapshot, or of the dataset itself when it is the newest.
    fn neighbours(ds: &BTreeMap<u64, DatasetEntry>, origin: u64, txg: u64) -> (u64, u64) {
        let of_origin = || {
            ds.iter()
                .filter(move |(_, d)| d.snapshot_of == Some(origin))
        };
        let prev = of_origin()
            .map(|(_, d)| d.snap_txg)
            .filter(|&t| t < txg)
            .max()
            .unwrap_or(0);
        let next = of_origin()
            .filter(|(_, d)| d.snap_txg > txg)
            .min_by_key(|(_, d)| d.snap_txg)
            .map_or(origin, |(id, _)| *id);
        (prev, next)
    }

    /// Runs queued snapshot operations in syncing context (after every object set of
    /// `txg` synced and dead lists were appended).
    fn apply_snapshot_ops(&self, txg: u64) -> Result<(), PoolError> {
        let ops = std::mem::take(&mut *self.snap_ops.lock().unwrap());
        for (op, slot) in ops {
            let r = match op {
                SnapOp::Create { dataset, name } => self.snapshot_in_sync(txg, dataset, &name),
                SnapOp::Destroy { id } => self.destroy_snapshot_in_sync(txg, id).map(|_| id),
                SnapOp::Rollback { id } => self.rollback_in_sync(txg, id).map(|_| id),
            };
            // I/O failures fail the txg; a refused request only fails its caller.
            let r = match r {
                Err(e @ (PoolError::Io(_) | PoolError::Checksum(_) | PoolError::Corrupt(_))) => {
                    *slot.lock().unwrap() = Some(Err(PoolError::Io(e.to_string())));
                    return Err(e);
                }
                r => r,
            };
            *slot.lock().unwrap() = Some(r);
        }
        Ok(())
    }

    fn snapshot_in_sync(&self, txg: u64, dataset: u64, name: &str) -> Result<u64, PoolError> {
        let st = &self.storage;
        let mut ds = self.datasets.write().unwrap();
        let d = ds
            .get(&dataset)
            .ok_or_else(|| PoolError::NotFound(format!("dataset {dataset}")))?;
        if d.snapshot_of.is_some() {
            return Err(PoolError::InvalidArgument(
                "cannot snapshot a snapshot".into(),
            ));
        }
        let full = format!("{}@{name}", d.name);
        if ds.values().any(|e| e.name == full) {
            return Err(PoolError::Exists(format!("snapshot '{full}'")));
        }
        let root = d.objset.root_bp();
        let props = d.props.clone();
        let handed_over = d.deadlist;
        let mut next = self.next_objset_id.lock().unwrap();
        let id = *next;
        *next += 1;
        drop(next);
        let objset = Arc::new(Objset::open(st, id, root)?);
        let d = ds.get_mut(&dataset).unwrap();
        // From now on blocks born up to this txg are shared with the snapshot.
        d.objset.set_keep_upto(txg);
        d.snap_txg = txg;
        d.deadlist = Deadlist::EMPTY;
        ds.insert(
            id,
            DatasetEntry {
                name: full,
                props,
                objset,
                snapshot_of: Some(dataset),
                snap_txg: txg,
                deadlist: handed_over,
            },
        );
        Ok(id)
    }

    /// Snapshot `id` and the dataset it was taken of.
    fn snapshot_entry(
        ds: &BTreeMap<u64, DatasetEntry>,
        id: u64,
    ) -> Result<(&DatasetEntry, u64), PoolError> {
        let s = ds
            .get(&id)
            .ok_or_else(|| PoolError::NotFound(format!("snapshot {id}")))?;
        match s.snapshot_of {
            Some(origin) => Ok((s, origin)),
            None => Err(PoolError::InvalidArgument(format!(
                "'{}' is not a snapshot",
                s.name
            ))),
        }
    }

    fn destroy_snapshot_in_sync(&self, txg: u64, id: u64) -> Result<(), PoolError> {
        let st = &self.storage;
        let mut ds = self.datasets.write().unwrap();
        let (s, origin) = Self::snapshot_entry(&ds, id)?;
        let s_txg = s.snap_txg;
        let s_list = s.deadlist;
        let (prev, next) = Self::neighbours(&ds, origin, s_txg);
        let n_list = ds[&next].deadlist;
        let mut keep = Vec::new();
        for bp in deadlist::entries(st, n_list)? {
            if bp.birth_txg > prev && bp.birth_txg <= s_txg {
                st.free_block(&bp, txg); // only this snapshot held it
            } else {
                keep.push(bp);
            }
        }
        keep.extend(deadlist::entries(st, s_list)?);
        deadlist::free_chain(st, n_list, txg)?;
        deadlist::free_chain(st, s_list, txg)?;
        let merged = deadlist::append(st, txg, Deadlist::EMPTY, &keep)?;
        ds.get_mut(&next).unwrap().deadlist = merged;
        if next == origin {
            // It was the newest: the dataset now shares only with the one before.
            let d = ds.get_mut(&origin).unwrap();
            d.snap_txg = prev;
            d.objset.set_keep_upto(prev);
        }
        ds.remove(&id);
        Ok(())
    }

    fn rollback_in_sync(&self, txg: u64, id: u64) -> Result<(), PoolError> {
        let st = &self.storage;
        let mut ds = self.datasets.write().unwrap();
        let (s, origin) = Self::snapshot_entry(&ds, id)?;
        let (s_txg, s_root) = (s.snap_txg, s.objset.root_bp());
        if Self::neighbours(&ds, origin, s_txg).1 != origin {
            return Err(PoolError::InvalidArgument(format!(
                "'{}' is not the latest snapshot: destroy the later ones first",
                s.name
            )));
        }
        let d = &ds[&origin];
        // Everything born after the snapshot is the dataset's alone; what died since
        // is still the snapshot's, so the dead list is dropped, not freed.
        let mut doomed = Vec::new();
        visit_objset(st, d.objset.root_bp(), &mut |bp| {
            if bp.birth_txg > s_txg {
                doomed.push(*bp);
            }
            Ok(())
        })?;
        for bp in doomed {
            st.free_block(&bp, txg);
        }
        deadlist::free_chain(st, d.deadlist, txg)?;
        let objset = Arc::new(Objset::open(st, origin, s_root)?);
        objset.set_keep_upto(s_txg);
        let d = ds.get_mut(&origin).unwrap();
        d.objset = objset;
        d.deadlist = Deadlist::EMPTY;
        Ok(())
    }

    // ---- object sets ----

    fn validate_objset_name(name: &str) -> Result<(), PoolError> {
        let ok = !name.is_empty()
            && name.len() <= 255
            && name.split('/').all(|c| {
                !c.is_empty()
                    && c.chars()
                        .all(|ch| ch.is_ascii_alphanumeric() || "_-.:".contains(ch))
            });
        if ok {
            Ok(())
        } else {
            Err(PoolError::InvalidArgument(format!(
                "invalid object set name '{name}'"
            )))
        }
    }

    pub fn create_objset(&self, name: &str, props: &str) -> Result<u64, PoolError> {
        self.begin(0)?.create_objset(name, props)
    }

    pub fn destroy_objset(&self, id: u64) -> Result<(), PoolError> {
        self.admit(0)?;
        // No sync may be writing this object set while it goes away.
        let _no_sync = self.sync_lock.lock().unwrap();
        let _g = self.gate.read().unwrap();
        let entry = {
            let mut ds = self.datasets.write().unwrap();
            match ds.get(&id) {
                None => return Err(PoolError::NotFound(format!("object set {id}"))),
                Some(d) if d.snapshot_of.is_some() => {
                    return Err(PoolError::InvalidArgument(format!(
                        "'{}' is a snapshot: destroy it as one",
                        d.name
                    )))
                }
                Some(d) if ds.values().any(|s| s.snapshot_of == Some(id)) => {
                    return Err(PoolError::InvalidArgument(format!(
                        "'{}' has snapshots: destroy them first",
                        d.name
                    )))
                }
                Some(_) => ds.remove(&id).unwrap(),
            }
        };
        // Its committed blocks are freed by the sync that commits the removal; changes
        // still open in it never got space and are dropped with it.
        self.pending_destroy
            .lock()
            .unwrap()
            .push((entry.objset.root_bp(), entry.deadlist));
        self.directory_dirty.store(true, Ordering::SeqCst);
        let txg = self.txg.lock().unwrap().open_txg;
        self.intent_log
            .append(txg, vec![LogOp::DestroyObjset { id }]);
        Ok(())
    }

    /// Datasets (not snapshots): (id, name, properties).
    pub fn list_objsets(&self) -> Vec<(u64, String, String)> {
        self.datasets
            .read()
            .unwrap()
            .iter()
            .filter(|(_, d)| d.snapshot_of.is_none())
            .map(|(id, d)| (*id, d.name.clone(), d.props.clone()))
            .collect()
    }

    pub fn objset_id(&self, name: &str) -> Option<u64> {
        self.datasets
            .read()
            .unwrap()
            .iter()
            .find(|(_, d)| d.name == name)
            .map(|(id, _)| *id)
    }

    pub fn set_objset_props(&self, id: u64, props: &str) -> Result<(), PoolError> {
        self.begin(0)?.set_objset_props(id, props)
    }

    /// An object set that changes may go to: not a snapshot.
    fn writable_objset(&self, id: u64) -> Result<Arc<Objset>, PoolError> {
        let ds = self.datasets.read().unwrap();
        let d = ds
            .get(&id)
            .ok_or_else(|| PoolError::NotFound(format!("object set {id}")))?;
        if d.snapshot_of.is_some() {
            return Err(PoolError::ReadOnly(d.name.clone()));
        }
        Ok(d.objset.clone())
    }

    fn objset(&self, id: u64) -> Result<Arc<Objset>, PoolError> {
        self.datasets
            .read()
            .unwrap()
            .get(&id)
            .map(|d| d.objset.clone())
            .ok_or_else(|| PoolError::NotFound(format!("object set {id}")))
    }

    // ---- objects ----

    pub fn create_object(
        &self,
        os: u64,
        object_type: u8,
        block_size: u32,
        compression: Compression,
        checksum: ChecksumKind,
    ) -> Result<u64, PoolError> {
        self.begin(crate::dnode::DNODE_SIZE as u64)?.create_object(
            os,
            object_type,
            block_size,
            compression,
            checksum,
        )
    }

    pub fn write(&self, os: u64, obj: u64, offset: u64, data: &[u8]) -> Result<(), PoolError> {
        self.begin(data.len() as u64)?.write(os, obj, offset, data)
    }

    /// Starts a group of changes that land in one transaction group, so a crash keeps
    /// all of them or none. `bytes` is about how much the changes add (0 for changes
    /// that only free or rename); the write throttle and the space check run here,
    /// before the group holds the txg open. Keep a `Tx` short and never call the
    /// pool's own change methods while holding one: a sync waits for every open `Tx`.
    pub fn begin(&self, bytes: u64) -> Result<Tx<'_>, PoolError> {
        self.admit(bytes)?;
        Ok(self.begin_admitted())
    }

    /// A `Tx` without admission (replay: its changes were admitted before the crash).
    fn begin_admitted(&self) -> Tx<'_> {
        let gate = self.gate.read().unwrap();
        let txg = self.txg.lock().unwrap().open_txg;
        Tx {
            pool: self,
            txg,
            log: Mutex::new(Vec::new()),
            _gate: gate,
        }
    }

    pub fn read(&self, os: u64, obj: u64, offset: u64, len: usize) -> Result<Vec<u8>, PoolError> {
        Ok(self.read_parts(os, obj, offset, len)?.to_vec())
    }

    /// Reads into a caller's buffer (holes as zeros), feeding read-ahead.
    pub fn read_into(
        &self,
        os: u64,
        obj: u64,
        offset: u64,
        data: &mut [u8],
    ) -> Result<(), PoolError> {
        self.read_parts(os, obj, offset, data.len())?.copy_to(data);
        Ok(())
    }

    /// Reads `len` bytes at `offset` as slices of the cache's own buffers (holes as
    /// zeros), feeding read-ahead: what a server sends without copying.
    pub fn read_parts(
        &self,
        os: u64,
        obj: u64,
        offset: u64,
        len: usize,
    ) -> Result<ReadBuf, PoolError> {
        let read = self.read_parts_with(os, obj, offset, len, Fetch::Any)?;
        Ok(read.expect("Fetch::Any always reads"))
    }

    /// `read_parts` answered from memory alone (the ARC, dirty data, cached dnodes):
    /// `None`, having read nothing from the devices and counted nothing, when any part
    /// of it is not there. For a server thread that must not wait on a disk.
    pub fn read_parts_cached(
        &self,
        os: u64,
        obj: u64,
        offset: u64,
        len: usize,
    ) -> Result<Option<ReadBuf>, PoolError> {
        self.read_parts_with(os, obj, offset, len, Fetch::CachedOnly)
    }

    fn read_parts_with(
        &self,
        os: u64,
        obj: u64,
        offset: u64,
        len: usize,
        fetch: Fetch,
    ) -> Result<Option<ReadBuf>, PoolError> {
        if len > 64 << 20 {
            return Err(PoolError::InvalidArgument(
                "read of more than 64 MiB at once".into(),
            ));
        }
        let objset = self.objset(os)?;
        let Some((bs, bytes)) = objset.read_parts(&self.storage, obj, offset, len, fetch)? else {
            return Ok(None);
        };
        if self.opts.prefetch {
            let ahead = objset.note_read(obj, offset, len as u64, bs);
            let ahead = if ahead.is_empty() {
                ahead
            } else {
                objset.uncached_part(&self.storage, obj, ahead)
            };
            if !ahead.is_empty() {
                let tx = self.prefetcher();
                let job_blocks = (PREFETCH_JOB_BYTES / bs.max(1)).max(1);
                let mut start = ahead.start;
                while start < ahead.end {
                    let end = (start + job_blocks).min(ahead.end);
                    // A full queue drops read-ahead, never blocks a reader.
                    if tx.try_send((objset.clone(), obj, start..end)).is_err() {
                        break;
                    }
                    start = end;
                }
            }
        }
        Ok(Some(bytes))
    }

    /// The read-ahead workers' queue; the workers start on first use and end when the
    /// pool (and so the queue's sender) is dropped.
    fn prefetcher(&self) -> &crossbeam_channel::Sender<PrefetchJob> {
        self.prefetch_tx.get_or_init(|| self.start_prefetchers())
    }

    fn start_prefetchers(&self) -> crossbeam_channel::Sender<PrefetchJob> {
        // A multi-consumer channel: the workers take jobs without sharing a lock.
        let (tx, rx) = crossbeam_channel::bounded::<PrefetchJob>(PREFETCH_QUEUE);
        for i in 0..PREFETCH_WORKERS {
            let rx = rx.clone();
            let storage = self.storage.clone();
            std::thread::Builder::new()
                .name(format!("prefetch-{i}"))
                .spawn(move || loop {
                    match rx.recv() {
                        Ok((objset, obj, range)) => objset.prefetch_range(&storage, obj, range),
                        Err(_) => return, // the pool is gone
                    }
                })
                .expect("spawn prefetch worker");
        }
        tx
    }

    pub fn free_range(&self, os: u64, obj: u64, offset: u64, len: u64) -> Result<(), PoolError> {
        self.begin(0)?.free_range(os, obj, offset, len)
    }

    pub fn free_object(&self, os: u64, obj: u64) -> Result<(), PoolError> {
        self.begin(0)?.free_object(os, obj)
    }

    pub fn set_bonus(
        &self,
        os: u64,
        obj: u64,
        bonus: &[u8],
        generation: Option<u64>,
    ) -> Result<(), PoolError> {
        self.begin(bonus.len() as u64)?
            .set_bonus(os, obj, bonus, generation)
    }

    pub fn object_info(&self, os: u64, obj: u64) -> Result<ObjectInfo, PoolError> {
        self.objset(os)?.info(&self.storage, obj)
    }

    // ---- transaction groups ----

    /// Commits everything changed so far; returns the txg that holds it.
    pub fn sync(&self) -> Result<u64, PoolError> {
        self.check_writable()?;
        let target = {
            let mut t = self.txg.lock().unwrap();
            t.requested_txg = t.requested_txg.max(t.open_txg);
            self.txg_cv.notify_all();
            t.open_txg
        };
        if !self.opts.sync_thread || self.sync_thread.lock().unwrap().is_none() {
            while self.txg.lock().unwrap().synced_txg < target {
                self.sync_once()?;
            }
            return Ok(target);
        }
        let mut t = self.txg.lock().unwrap();
        while t.synced_txg < target {
            if let Some(r) = self.suspended.lock().unwrap().clone() {
                return Err(PoolError::Suspended(r));
            }
            t = self
                .txg_cv
                .wait_timeout(t, Duration::from_millis(100))
                .unwrap()
                .0;
        }
        Ok(target)
    }

    pub fn synced_txg(&self) -> u64 {
        self.txg.lock().unwrap().synced_txg
    }

    /// One quiesce + sync + commit.
    fn sync_once(&self) -> Result<(), PoolError> {
        let _one_at_a_time = self.sync_lock.lock().unwrap();
        self.check_writable()?;
        let (txg, objsets, changed) = {
            let _quiesce = self.gate.write().unwrap();
            let mut t = self.txg.lock().unwrap();
            let txg = t.open_txg;
            t.open_txg += 1;
            t.dirty_bytes = 0;
            self.txg_cv.notify_all();
            drop(t);
            let objsets = self.all_objsets();
            let mut changed = self.directory_dirty.swap(false, Ordering::SeqCst);
            let mut dirty_sets = Vec::new();
            for os in objsets {
                if os.quiesce() {
                    changed = true;
                    dirty_sets.push(os);
                }
            }
            (txg, dirty_sets, changed)
        };
        let result = if changed {
            let started = Instant::now();
            let r = self.sync_txg(txg, &objsets);
            if r.is_ok() {
                self.report(analytics::Meter::TxgSync, started);
            }
            r
        } else {
            // Nothing changed, so no record of this txg changes anything: they are moot,
            // though the ring's tail stays where the durable header left it.
            self.intent_log.committed(txg, None);
            Ok(())
        };
        let mut t = self.txg.lock().unwrap();
        match &result {
            Ok(()) => {
                t.synced_txg = txg;
                drop(t);
                self.storage.alloc.lock().unwrap().txg_committed(txg);
            }
            Err(e) => {
                drop(t);
                *self.suspended.lock().unwrap() = Some(format!("txg {txg}: {e}"));
            }
        }
        self.txg_cv.notify_all();
        if result.is_ok() {
            // After the waiters are woken: they need not wait for the scan.
            self.evict_clean_objects();
        }
        result
    }

    /// Every dataset's and snapshot's object set.
    fn all_objsets(&self) -> Vec<Arc<Objset>> {
        self.datasets
            .read()
            .unwrap()
            .values()
            .map(|d| d.objset.clone())
            .collect()
    }

    /// Keeps the loaded objects of all object sets within `object_cache_max` (after
    /// each txg, read-only sets included: reads alone load objects too).
    fn evict_clean_objects(&self) {
        let sets = self.all_objsets();
        let loaded: Vec<usize> = sets.iter().map(|os| os.loaded_objects()).collect();
        let max = self.opts.object_cache_max;
        let shares = fair_shares(&loaded, max, MIN_OBJECTS_PER_SET.min(max));
        for (os, share) in sets.iter().zip(shares) {
            os.evict_clean_objects(share);
        }
    }

    /// Objects of object set `os` held in memory (see `PoolOptions::object_cache_max`).
    pub fn loaded_objects(&self, os: u64) -> Result<usize, PoolError> {
        Ok(self.objset(os)?.loaded_objects())
    }

    fn sync_txg(&self, txg: u64, objsets: &[Arc<Objset>]) -> Result<(), PoolError> {
        let st = &self.storage;
        for os in objsets {
            os.sync(st, txg)?;
        }
        for (root, dead) in std::mem::take(&mut *self.pending_destroy.lock().unwrap()) {
            let mut doomed = Vec::new();
            visit_objset(st, root, &mut |bp| {
                doomed.push(*bp);
                Ok(())
            })?;
            for bp in doomed {
                st.free_block(&bp, txg);
            }
            deadlist::free_chain(st, dead, txg)?;
        }
        // Dead lists: what the syncs above released that a snapshot still holds.
        let released: Vec<(u64, Vec<BlockPointer>)> = self
            .datasets
            .read()
            .unwrap()
            .iter()
            .map(|(id, d)| (*id, d.objset.take_dead()))
            .filter(|(_, dead)| !dead.is_empty())
            .collect();
        for (id, dead) in released {
            let list = self.datasets.read().unwrap()[&id].deadlist;
            let list = deadlist::append(st, txg, list, &dead)?;
            self.datasets
                .write()
                .unwrap()
                .get_mut(&id)
                .unwrap()
                .deadlist = list;
        }
        self.apply_snapshot_ops(txg)?;
        // Directory.
        let entries: Vec<DirRecord> = self
            .datasets
            .read()
            .unwrap()
            .iter()
            .map(|(id, d)| DirRecord {
                id: *id,
                name: d.name.clone(),
                root: d.objset.root_bp(),
                props: d.props.clone(),
                snapshot_of: d.snapshot_of,
                snap_txg: d.snap_txg,
                deadlist: d.deadlist,
            })
            .collect();
        let next_id = *self.next_objset_id.lock().unwrap();
        let dir_bytes = encode_directory(&entries, next_id)?;
        let old = *self.committed.lock().unwrap();
        let directory = st.write_block(
            &dir_bytes,
            BlockSpec::metadata(BlockType::Directory, 0),
            txg,
            true,
        )?;
        st.free_block(&old.directory, txg);
        let (spacelog_head, spacelog_len) =
            spacelog::write_txg(st, txg, old.spacelog_head, old.spacelog_len)?;
        if !st.flush_all() {
            return Err(PoolError::Io("flush failed on too many devices".into()));
        }
        let area = *self.log_area.lock().unwrap();
        let (log, log_tail) = self.intent_log.header_for(txg, area);
        let ub = Uberblock {
            txg,
            pool_guid: self.guid,
            time_ns: uberblock::now_ns(),
            directory,
            spacelog_head,
            spacelog_len,
            log,
        };
        let image = ub.encode();
        for top in &st.tops {
            let mut written = 0;
            for leaf in &top.leaves {
                if let Some(dev) = leaf.device().filter(|_| leaf.is_usable()) {
                    if label::write_uberblock(&*dev, &[0, 1, 2, 3], txg, &image).is_ok() {
                        written += 1;
                    }
                }
            }
            if written == 0 {
                return Err(PoolError::Io(format!(
                    "no device of vdev {} took the uberblock",
                    top.id
                )));
            }
        }
        if !st.flush_all() {
            return Err(PoolError::Io("flush failed on too many devices".into()));
        }
        *self.committed.lock().unwrap() = Committed {
            txg,
            directory,
            spacelog_head,
            spacelog_len,
            log,
        };
        self.intent_log.committed(txg, Some(log_tail));
        Ok(())
    }

    /// Stops the sync thread after committing everything; labels say "exported".
    pub fn export(&self) -> Result<(), PoolError> {
        let synced = self.sync();
        self.stop_sync_thread();
        synced?;
        self.config.lock().unwrap().state = PoolState::Exported;
        self.config.lock().unwrap().config_txg += 1;
        self.write_labels()
    }

    /// Destroys the pool: its labels are wiped so the devices can be reused.
    pub fn destroy(&self) -> Result<(), PoolError> {
        self.stop_sync_thread();
        for leaf in self.all_leaves() {
            if let Some(dev) = leaf.device() {
                let _ = label::clear_labels(&*dev);
            }
        }
        Ok(())
    }

    fn stop_sync_thread(&self) {
        if let Some(l2) = self.storage.l2.get() {
            l2.stop();
        }
        {
            let mut t = self.txg.lock().unwrap();
            t.shutdown = true;
            self.txg_cv.notify_all();
        }
        if let Some(h) = self.sync_thread.lock().unwrap().take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    // ---- status, scrub, check ----

    pub fn health(&self) -> Health {
        let mut worst = Health::Online;
        for t in &self.storage.tops {
            match t.health() {
                Health::Faulted | Health::Unavail => return Health::Faulted,
                Health::Degraded | Health::Resilvering => worst = Health::Degraded,
                Health::Online => {}
            }
        }
        if self.is_suspended() {
            return Health::Faulted;
        }
        worst
    }

    pub fn status(&self) -> PoolStatus {
        let (capacity, free, per_vdev_free) = {
            let a = self.storage.alloc.lock().unwrap();
            (
                a.capacity(),
                a.free_bytes(),
                a.vdevs.iter().map(|v| v.free_bytes()).collect::<Vec<_>>(),
            )
        };
        PoolStatus {
            name: self.name.clone(),
            guid: self.guid,
            health: self.health().name().into(),
            txg: self.synced_txg(),
            capacity_bytes: capacity,
            allocated_bytes: capacity - free,
            free_bytes: free,
            vdevs: self
                .storage
                .tops
                .iter()
                .map(|t| TopStatus {
                    id: t.id,
                    layout: t.layout.name(),
                    health: t.health().name().into(),
                    capacity_bytes: t.capacity_bytes(),
                    free_bytes: per_vdev_free[t.id as usize],
                    children: t.leaves.iter().map(|l| leaf_status(l)).collect(),
                })
                .collect(),
            intent_log: self.intent_log.stats(),
            log: self.log_leaves.iter().map(|l| leaf_status(l)).collect(),
            cache: self.cache_leaves.iter().map(|l| leaf_status(l)).collect(),
            arc: self.storage.arc.stats().into(),
            l2arc: self.storage.l2.get().map(|l| l.stats()),
            suspended: self.suspended.lock().unwrap().clone(),
            last_scrub: self.last_scrub.lock().unwrap().clone(),
            unrecoverable_reads: self
                .storage
                .counters
                .unrecoverable_reads
                .load(Ordering::Relaxed),
        }
    }

    /// Every block pointer of the committed state: directory, space log, object sets
    /// (for scrub, check, and tests that aim faults at real blocks).
    pub fn committed_blocks(&self) -> Result<Vec<BlockPointer>, PoolError> {
        let st = &self.storage;
        let c = *self.committed.lock().unwrap();
        let mut out = Vec::new();
        if !c.directory.is_hole() {
            out.push(c.directory);
            let block = st.read_block(&c.directory)?;
            let (entries, _, _) = decode_directory(block.bytes())?;
            // Snapshots share blocks with their dataset and each other: list each once.
            let mut seen = std::collections::HashSet::new();
            for r in entries {
                visit_objset(st, r.root, &mut |bp| {
                    if seen.insert(*bp) {
                        out.push(*bp);
                    }
                    Ok(())
                })?;
                out.extend(deadlist::chain_blocks(st, r.deadlist)?);
            }
        }
        out.extend(spacelog::chain_blocks(st, c.spacelog_head)?);
        Ok(out)
    }

    /// Compares each committed object set's stored referenced bytes and each dead
    /// list's stored size with a count of the blocks themselves.
    fn check_space_figures(&self, problems: &mut Vec<String>) -> Result<(), PoolError> {
        let st = &self.storage;
        let c = *self.committed.lock().unwrap();
        if c.directory.is_hole() {
            return Ok(());
        }
        let block = st.read_block(&c.directory)?;
        let (entries, _, sizes_stored) = decode_directory(block.bytes())?;
        for r in entries {
            if let Some(stored) = crate::objset::stored_referenced(st, r.root)? {
                let mut counted = 0u64;
                visit_objset(st, r.root, &mut |bp| {
                    counted += st.dsize(bp);
                    Ok(())
                })?;
                counted -= st.dsize(&r.root);
                if stored != counted {
                    problems.push(format!(
                        "object set '{}': root says {stored} bytes referenced, its tree holds {counted}",
                        r.name
                    ));
                }
            }
            if sizes_stored {
                let counted = deadlist::count_bytes(st, r.deadlist)?;
                if counted != r.deadlist.bytes {
                    problems.push(format!(
                        "dead list of '{}': directory says {} bytes, the list holds {counted}",
                        r.name, r.deadlist.bytes
                    ));
                }
            }
        }
        Ok(())
    }

    /// Reads and verifies every copy of every allocated block, repairing what is bad;
    /// the repairs are flushed (durable) before it returns.
    pub fn scrub(&self, progress: &dyn Fn(ScrubProgress)) -> Result<ScrubSummary, PoolError> {
        if self.scrub_running.swap(true, Ordering::SeqCst) {
            return Err(PoolError::InvalidArgument(
                "a scrub is already running".into(),
            ));
        }
        let started = Instant::now();
        // The block list is taken under the sync lock, so it names one committed txg;
        // the walk then runs while syncs go on, and holding frees keeps every listed
        // block's space from being reused until it ends.
        let (listed, _frees) = {
            let _one_txg = self.sync_lock.lock().unwrap();
            (self.committed_blocks(), FreeHold::new(&self.storage))
        };
        let result = (|| {
            let blocks = listed?;
            let total: u64 = blocks.iter().map(|b| b.asize_total()).sum();
            let mut summary = ScrubSummary::default();
            let mut done = 0u64;
            let mut ticker = Ticker::new(progress, total, &self.repair, SCRUB);
            for bp in &blocks {
                match self.storage.read_uncached(bp, ReadMode::Scrub) {
                    Ok((_, report)) => {
                        summary.repaired_bytes += report.repaired_bytes;
                        summary.bad_copies += report.bad_copies;
                    }
                    Err(_) => summary.errors += 1,
                }
                summary.blocks += 1;
                summary.bytes += bp.lsize as u64;
                done += bp.asize_total();
                ticker.tick(done);
            }
            ticker.finish();
            // Repairs are writes like any other: until flushed they may vanish with
            // the power, and the damage with them would come back unseen after the
            // scrub said it was repaired.
            if summary.repaired_bytes > 0 && !self.storage.flush_all() {
                return Err(PoolError::Io(
                    "flushing the scrub's repairs failed on too many devices".into(),
                ));
            }
            summary.seconds = started.elapsed().as_secs_f64();
            summary.finished_at_txg = self.committed.lock().unwrap().txg;
            Ok(summary)
        })();
        self.scrub_running.store(false, Ordering::SeqCst);
        if let Ok(s) = &result {
            *self.last_scrub.lock().unwrap() = Some(s.clone());
        }
        result
    }

    /// Replaces the data device `old` (its path or guid) with `new`, then resilvers:
    /// every allocated block touching that vdev is read through redundancy and the
    /// replaced device's part of it written. Only allocated space is copied.
    pub fn replace(
        &self,
        old: &str,
        new: DeviceArg,
        progress: &dyn Fn(ScrubProgress),
    ) -> Result<ResilverSummary, PoolError> {
        self.check_writable()?;
        check_device_free(&new)?;
        let (top_index, leaf_index) = self
            .storage
            .tops
            .iter()
            .enumerate()
            .find_map(|(t, top)| {
                top.leaves
                    .iter()
                    .position(|l| l.path() == old || l.guid().to_string() == old)
                    .map(|i| (t, i))
            })
            .ok_or_else(|| {
                PoolError::NotFound(format!("no data device '{old}' in pool '{}'", self.name))
            })?;
        let top = self.storage.tops[top_index].clone();
        if top.layout == Layout::Disk {
            return Err(PoolError::InvalidArgument(
                "a plain disk has no redundancy to resilver from; use a mirror or raidz".into(),
            ));
        }
        let (_, new_len) = label::data_area(new.device.size_bytes());
        let per_child = match top.layout {
            Layout::RaidZ { .. } => top.capacity_bytes() / top.leaves.len() as u64,
            _ => top.capacity_bytes(),
        };
        if new_len < per_child {
            return Err(PoolError::InvalidArgument(format!(
                "device {} is too small: its data area is {new_len} bytes, the vdev needs {per_child}",
                new.path
            )));
        }
        let started = Instant::now();
        // Swap the device and list the blocks under the sync lock (no sync is writing
        // meanwhile, and the list names one committed txg); then walk while syncs go
        // on: the new device takes their writes, and held frees keep listed blocks.
        let hold = self.sync_lock.lock().unwrap();
        let leaf = top.leaves[leaf_index].clone();
        let old_device = leaf.device();
        let old_path = leaf.path();
        let guid = new_guid();
        leaf.replace_device(guid, new.path.clone(), new.device.clone());
        {
            let mut cfg = self.config.lock().unwrap();
            let child = &mut cfg.vdevs[top_index].children[leaf_index];
            child.guid = guid;
            child.path = new.path.clone();
            cfg.config_txg += 1;
        }
        let blocks = self.committed_blocks()?;
        let _frees = FreeHold::new(&self.storage);
        drop(hold);
        let total: u64 = blocks
            .iter()
            .flat_map(|b| {
                b.copies()
                    .filter(|d| d.vdev as usize == top_index)
                    .map(|d| d.asize())
            })
            .sum();
        let mut summary = ResilverSummary::default();
        let mut done = 0;
        let mut ticker = Ticker::new(progress, total, &self.repair, RESILVER);
        for bp in &blocks {
            let verify = |buf: &[u8]| bp.verifies(buf);
            for d in bp.copies().filter(|d| d.vdev as usize == top_index) {
                match top.resilver_block(d.offset, bp.io_size(), leaf_index, &verify) {
                    Ok(bytes) => summary.bytes_written += bytes,
                    Err(_) => summary.errors += 1,
                }
                summary.blocks += 1;
                done += d.asize();
            }
            ticker.tick(done);
        }
        ticker.finish();
        if !leaf.flush() {
            return Err(PoolError::Io(format!("flushing {} failed", new.path)));
        }
        leaf.finish_resilver();
        self.write_labels_first(Some(&leaf))?;
        // The old device no longer belongs to the pool.
        if let Some(dev) = old_device {
            if old_path != new.path {
                let _ = label::clear_labels(&*dev);
            }
        }
        // Commit a txg so the new device carries a current uberblock in its labels.
        self.directory_dirty.store(true, Ordering::SeqCst);
        self.sync()?;
        summary.seconds = started.elapsed().as_secs_f64();
        Ok(summary)
    }

    /// Walks every block of the committed state: each must verify, lie in allocated
    /// space, and not overlap another; allocated space nobody references is a leak.
    pub fn check(&self) -> Result<CheckReport, PoolError> {
        // Before the sync lock: waiting for a log batch under it could deadlock.
        let acknowledged = self.intent_log.acknowledged_blocks();
        let _hold = self.sync_lock.lock().unwrap();
        let mut report = CheckReport::default();
        let blocks = match self.committed_blocks() {
            Ok(b) => b,
            Err(e) => {
                report
                    .problems
                    .push(format!("cannot walk the block tree: {e}"));
                return Ok(report);
            }
        };
        let mut extents: Vec<Extent> = Vec::new();
        for bp in &blocks {
            report.blocks += 1;
            if let Err(e) = self.storage.read_uncached(bp, ReadMode::Normal) {
                report
                    .problems
                    .push(format!("block of txg {}: {e}", bp.birth_txg));
            }
            for d in bp.copies() {
                extents.push(d.extent());
            }
        }
        let (area_offset, area_len) = *self.log_area.lock().unwrap();
        if area_len > 0 {
            extents.push(Extent {
                vdev: 0,
                offset: area_offset,
                len: area_len,
            });
        }
        extents.sort();
        for w in extents.windows(2) {
            if w[0].vdev == w[1].vdev && w[0].offset + w[0].len > w[1].offset {
                report
                    .problems
                    .push(format!("blocks overlap: {:?} and {:?}", w[0], w[1]));
            }
        }
        let alloc = self.storage.alloc.lock().unwrap();
        for e in &extents {
            match alloc.vdevs.get(e.vdev as usize) {
                None => report
                    .problems
                    .push(format!("block on missing vdev {}", e.vdev)),
                Some(v) if v.overlaps_free(e.offset, e.len) => report
                    .problems
                    .push(format!("block {e:?} lies in free space")),
                _ => {}
            }
        }
        drop(alloc);
        if let Err(e) = self.check_space_figures(&mut report.problems) {
            report
                .problems
                .push(format!("cannot check space figures: {e}"));
        }
        let c = *self.committed.lock().unwrap();
        let on_disk = match self.check_space_maps(&c, &extents, &mut report) {
            Ok(map) => Some(map),
            Err(e) => {
                report
                    .problems
                    .push(format!("cannot replay the space maps: {e}"));
                None
            }
        };
        self.check_intent_log(&c, &acknowledged, on_disk.as_ref(), &mut report);
        report.datasets = self.datasets.read().unwrap().len() as u64;
        let alloc = self.storage.alloc.lock().unwrap();
        report.referenced_bytes = extents.iter().map(|e| e.len).sum();
        report.allocated_bytes = alloc.capacity() - alloc.free_bytes();
        report.deferred_bytes = alloc.deferred_bytes();
        if report.referenced_bytes + report.deferred_bytes != report.allocated_bytes {
            report.problems.push(format!(
                "space accounting: {} referenced + {} awaiting free != {} allocated",
                report.referenced_bytes, report.deferred_bytes, report.allocated_bytes
            ));
        }
        Ok(report)
    }
}

/// Sorted extents of one vdev merged where they touch: a set of byte ranges.
fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (offset, len) in ranges {
        match out.last_mut() {
            Some((o, l)) if *o + *l >= offset => *l = (*l).max(offset + len - *o),
            _ => out.push((offset, len)),
        }
    }
    out
}

/// The first byte range in exactly one of two merged range sets, for a report.
fn first_difference(a: &[(u64, u64)], b: &[(u64, u64)]) -> Option<(u64, u64, bool)> {
    let mut i = 0;
    while i < a.len() && i < b.len() && a[i] == b[i] {
        i += 1;
    }
    match (a.get(i), b.get(i)) {
        (None, None) => None,
        (Some(&(o, l)), None) => Some((o, l, true)),
        (None, Some(&(o, l))) => Some((o, l, false)),
        (Some(&(ao, al)), Some(&(bo, bl))) => Some(if ao < bo || (ao == bo && al > bl) {
            (ao, al, true)
        } else {
            (bo, bl, false)
        }),
    }
}

impl Pool {
    /// Replays the committed space maps (the space log chain) into a fresh allocator,
    /// as import would, and compares what they call allocated with what the committed
    /// block tree and the log area occupy, vdev by vdev: space allocated on disk that
    /// nothing references leaks after the next import; referenced space the maps call
    /// free would be handed out again and overwritten. Returns the replayed maps.
    fn check_space_maps(
        &self,
        c: &Committed,
        referenced: &[Extent],
        report: &mut CheckReport,
    ) -> Result<Allocator, PoolError> {
        let capacities: Vec<u64> = self
            .storage
            .alloc
            .lock()
            .unwrap()
            .vdevs
            .iter()
            .map(|v| v.capacity)
            .collect();
        let mut maps = Allocator::new(&capacities);
        spacelog::replay(&self.storage, c.spacelog_head, &mut maps)?;
        report.space_map_blocks =
            spacelog::chain_blocks(&self.storage, c.spacelog_head)?.len() as u64;
        for (v, space) in maps.vdevs.iter().enumerate() {
            let on_disk = merged(space.allocated_extents());
            let in_tree = merged(
                referenced
                    .iter()
                    .filter(|e| e.vdev as usize == v)
                    .map(|e| (e.offset, e.len))
                    .collect(),
            );
            report.space_map_bytes += on_disk.iter().map(|r| r.1).sum::<u64>();
            if let Some((offset, len, only_on_disk)) = first_difference(&on_disk, &in_tree) {
                report.problems.push(if only_on_disk {
                    format!(
                        "space maps of vdev {v}: {len} bytes at {offset} allocated that no \
                         block references"
                    )
                } else {
                    format!(
                        "space maps of vdev {v}: {len} bytes at {offset} referenced but free \
                         in the maps"
                    )
                });
            }
        }
        Ok(maps)
    }

    /// Reads the committed intent log chain as import would: every block the log
    /// acknowledged that still holds records newer than the committed txg must be on
    /// the chain (same position, same sequence number, verified), the records must
    /// parse and come in txg order, and every block written ahead of its txg that a
    /// record to replay names must verify and lie where the space maps leave room for
    /// replay to claim it.
    fn check_intent_log(
        &self,
        c: &Committed,
        acknowledged: &(u64, RingKind, Vec<(u64, u64, u64)>),
        maps: Option<&Allocator>,
        report: &mut CheckReport,
    ) {
        let Some(ring) = self.intent_log.ring(c.log.kind) else {
            return;
        };
        let read = crate::intent_log::read_chain(&ring, &c.log);
        report.log_blocks = read.blocks.len() as u64;
        report.log_records = read.records.len() as u64;
        let (guid, kind, blocks) = acknowledged;
        if *guid == c.log.guid && *kind == c.log.kind {
            for &(pos, seq, max_txg) in blocks.iter().filter(|b| b.2 > c.txg) {
                let index = seq.checked_sub(c.log.seq).map(|i| i as usize);
                let on_chain = index
                    .and_then(|i| read.blocks.get(i))
                    .is_some_and(|b| b.0 == pos && b.2 == max_txg);
                if !on_chain {
                    report.problems.push(format!(
                        "intent log: acknowledged block {seq} at ring position {pos} is not \
                         on the chain import reads ({} blocks from {})",
                        read.blocks.len(),
                        c.log.start
                    ));
                    break;
                }
            }
        }
        let mut last_txg = 0;
        for (txg, op) in &read.records {
            if *txg < last_txg {
                report.problems.push(format!(
                    "intent log: record of txg {txg} after txg {last_txg}"
                ));
                break;
            }
            last_txg = *txg;
            if *txg <= c.txg {
                continue;
            }
            report.log_records_to_replay += 1;
            if let LogOp::WriteBlock { bp, .. } = op {
                if let Err(e) = self.storage.read_uncached(bp, ReadMode::Normal) {
                    report.problems.push(format!(
                        "intent log: block written ahead of txg {txg} does not verify: {e}"
                    ));
                }
                if let Some(maps) = maps {
                    for d in bp.copies() {
                        let e = d.extent();
                        let free = maps
                            .vdevs
                            .get(e.vdev as usize)
                            .is_some_and(|v| !v.overlaps_allocated(e.offset, e.len));
                        if !free {
                            report.problems.push(format!(
                                "intent log: block written ahead of txg {txg} at {e:?} \
                                 overlaps space the maps call allocated"
                            ));
                        }
                    }
                }
            }
        }
    }
}

/// Reports a walk's progress at most every 200 ms, and once more at the end.
struct Ticker<'a> {
    progress: &'a dyn Fn(ScrubProgress),
    total: u64,
    last: Instant,
    shared: &'a RepairProgress,
}

impl<'a> Ticker<'a> {
    /// `kind`: `SCRUB` or `RESILVER` (as `RepairProgress` shows it until dropped).
    fn new(
        progress: &'a dyn Fn(ScrubProgress),
        total: u64,
        shared: &'a RepairProgress,
        kind: u8,
    ) -> Ticker<'a> {
        shared.done.store(0, Ordering::Relaxed);
        shared.total.store(total, Ordering::Relaxed);
        shared.kind.store(kind, Ordering::Release);
        Ticker {
            progress,
            total,
            last: Instant::now(),
            shared,
        }
    }

    fn tick(&mut self, done: u64) {
        self.shared.done.store(done, Ordering::Relaxed);
        if self.last.elapsed() > Duration::from_millis(200) {
            (self.progress)(ScrubProgress {
                bytes_done: done,
                bytes_total: self.total,
            });
            self.last = Instant::now();
        }
    }

    fn finish(&self) {
        (self.progress)(ScrubProgress {
            bytes_done: self.total,
            bytes_total: self.total,
        });
    }
}

impl Drop for Ticker<'_> {
    fn drop(&mut self) {
        self.shared.kind.store(NO_REPAIR, Ordering::Release);
    }
}

/// Keeps freed space deferred for as long as it lives (see `Allocator::hold_frees`).
struct FreeHold<'a>(&'a Storage);

impl<'a> FreeHold<'a> {
    fn new(st: &'a Storage) -> FreeHold<'a> {
        st.alloc.lock().unwrap().hold_frees();
        FreeHold(st)
    }
}

impl Drop for FreeHold<'_> {
    fn drop(&mut self) {
        self.0.alloc.lock().unwrap().release_frees();
    }
}

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
fn pool_ring(top: &TopVdev, offset: u64, len: u64) -> Option<Ring> {
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
fn device_ring(log_leaves: &[Arc<Leaf>]) -> Option<Ring> {
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
fn fair_shares(loaded: &[usize], max: usize, floor: usize) -> Vec<usize> {
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

impl LogSource for Pool {
    fn read_for_log(&self, os: u64, obj: u64, offset: u64, len: usize) -> Option<Vec<u8>> {
        let objset = self.objset(os).ok()?;
        let (_, bytes) = objset
            .read_parts(&self.storage, obj, offset, len, Fetch::Any)
            .ok()??;
        Some(bytes.to_vec())
    }

    fn commit_txg(&self) -> Result<(), PoolError> {
        self.sync().map(|_| ())
    }

    fn place_for_log(
        &self,
        os: u64,
        obj: u64,
        offset: u64,
        len: u64,
        txg: u64,
    ) -> Vec<(u64, u64, BlockPointer)> {
        // The gate keeps `txg` open while its blocks are placed, so its sync sees
        // every placement or none.
        let _gate = self.gate.read().unwrap();
        if self.txg.lock().unwrap().open_txg != txg {
            return Vec::new();
        }
        let Ok(objset) = self.objset(os) else {
            return Vec::new();
        };
        // Out of space or a device error: the data is copied into the log instead.
        objset
            .place_blocks(&self.storage, obj, offset, len, txg)
            .unwrap_or_default()
    }

    fn flush_placed(&self) -> bool {
        self.storage.flush_placed()
    }
}

fn encode_directory(entries: &[DirRecord], next_id: u64) -> Result<Vec<u8>, PoolError> {
    let mut b = Vec::with_capacity(4096);
    b.extend_from_slice(DIR_MAGIC);
    b.extend_from_slice(&DIR_VERSION.to_le_bytes());
    b.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    b.extend_from_slice(&next_id.to_le_bytes());
    for r in entries {
        b.extend_from_slice(&r.id.to_le_bytes());
        b.extend_from_slice(&r.root.to_bytes());
        b.extend_from_slice(&(r.name.len() as u16).to_le_bytes());
        b.extend_from_slice(r.name.as_bytes());
        b.extend_from_slice(&(r.props.len() as u32).to_le_bytes());
        b.extend_from_slice(r.props.as_bytes());
        b.push(r.snapshot_of.is_some() as u8);
        b.extend_from_slice(&r.snapshot_of.unwrap_or(0).to_le_bytes());
        b.extend_from_slice(&r.snap_txg.to_le_bytes());
        b.extend_from_slice(&r.deadlist.head.to_bytes());
        b.extend_from_slice(&r.deadlist.count.to_le_bytes());
        b.extend_from_slice(&r.deadlist.bytes.to_le_bytes());
    }
    if b.len() > DIR_MAX_BYTES {
        return Err(PoolError::NoSpace);
    }
    Ok(b)
}

/// Decodes a directory block: its entries, the next object set id, and whether the
/// entries carry their dead lists' sizes (version 3 on).
fn decode_directory(b: &[u8]) -> Result<(Vec<DirRecord>, u64, bool), PoolError> {
    let bad = |w: &str| PoolError::Corrupt(format!("directory: {w}"));
    if b.len() < 24 || &b[0..8] != DIR_MAGIC {
        return Err(bad("magic"));
    }
    let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
    if !(1..=DIR_VERSION).contains(&version) {
        return Err(bad("version"));
    }
    let count = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
    let next = u64::from_le_bytes(b[16..24].try_into().unwrap());
    let mut pos = 24;
    let mut take = |n: usize| -> Result<&[u8], PoolError> {
        if pos + n > b.len() {
            return Err(bad("truncated"));
        }
        pos += n;
        Ok(&b[pos - n..pos])
    };
    let mut out = Vec::with_capacity(count.min(10_000));
    for _ in 0..count {
        let id = u64::from_le_bytes(take(8)?.try_into().unwrap());
        let root = BlockPointer::decode(take(BLKPTR_SIZE)?)?;
        let nlen = u16::from_le_bytes(take(2)?.try_into().unwrap()) as usize;
        let name = String::from_utf8(take(nlen)?.to_vec()).map_err(|_| bad("name"))?;
        let plen = u32::from_le_bytes(take(4)?.try_into().unwrap()) as usize;
        let props = String::from_utf8(take(plen)?.to_vec()).map_err(|_| bad("props"))?;
        if id >= next {
            return Err(bad("object set id beyond next id"));
        }
        let mut r = DirRecord {
            id,
            name,
            root,
            props,
            snapshot_of: None,
            snap_txg: 0,
            deadlist: Deadlist::EMPTY,
        };
        if version >= 2 {
            let kind = take(1)?[0];
            let origin = u64::from_le_bytes(take(8)?.try_into().unwrap());
            r.snapshot_of = match kind {
                0 => None,
                1 => Some(origin),
                _ => return Err(bad("entry kind")),
            };
            r.snap_txg = u64::from_le_bytes(take(8)?.try_into().unwrap());
            r.deadlist.head = BlockPointer::decode(take(BLKPTR_SIZE)?)?;
            r.deadlist.count = u64::from_le_bytes(take(8)?.try_into().unwrap());
        }
        if version >= 3 {
            r.deadlist.bytes = u64::from_le_bytes(take(8)?.try_into().unwrap());
        }
        out.push(r);
    }
    Ok((out, next, version >= 3))
}

/// A group of changes that commit in the same transaction group (see [`Pool::begin`]).
/// While it lives the txg it names cannot quiesce, so everything done through it is in
/// that txg's on-disk state or, after a crash before that txg commits, none of it is.
pub struct Tx<'a> {
    pool: &'a Pool,
    txg: u64,
    /// Intent log records of this transaction, appended as one when it ends.
    log: Mutex<Vec<LogOp>>,
    _gate: std::sync::RwLockReadGuard<'a, ()>,
}

impl Drop for Tx<'_> {
    /// Runs before the gate guard is released, so the records join the log inside
    /// this txg and in txg order.
    fn drop(&mut self) {
        let ops = std::mem::take(&mut *self.log.lock().unwrap());
        self.pool.intent_log.append(self.txg, ops);
    }
}

impl Tx<'_> {
    /// The transaction group these changes belong to.
    pub fn txg(&self) -> u64 {
        self.txg
    }

    fn record(&self, op: LogOp) {
        self.log.lock().unwrap().push(op);
    }

    pub fn create_objset(&self, name: &str, props: &str) -> Result<u64, PoolError> {
        self.create_objset_as(name, props, None)
    }

    /// `id` is given only when replaying the intent log.
    fn create_objset_as(&self, name: &str, props: &str, id: Option<u64>) -> Result<u64, PoolError> {
        let p = self.pool;
        Pool::validate_objset_name(name)?;
        let mut ds = p.datasets.write().unwrap();
        if ds.values().any(|d| d.name == name) {
            return Err(PoolError::Exists(format!("object set '{name}'")));
        }
        let mut next = p.next_objset_id.lock().unwrap();
        let id = match id {
            Some(id) if id < *next || ds.contains_key(&id) => {
                return Err(PoolError::Exists(format!("object set {id}")))
            }
            Some(id) => id,
            None => *next,
        };
        *next = id + 1;
        ds.insert(
            id,
            DatasetEntry::dataset(
                name.to_string(),
                props.to_string(),
                Arc::new(Objset::new_empty(id)),
            ),
        );
        p.directory_dirty.store(true, Ordering::SeqCst);
        self.record(LogOp::CreateObjset {
            id,
            name: name.to_string(),
            props: props.to_string(),
        });
        Ok(id)
    }

    pub fn set_objset_props(&self, id: u64, props: &str) -> Result<(), PoolError> {
        let p = self.pool;
        let mut ds = p.datasets.write().unwrap();
        let d = ds
            .get_mut(&id)
            .ok_or_else(|| PoolError::NotFound(format!("object set {id}")))?;
        d.props = props.to_string();
        p.directory_dirty.store(true, Ordering::SeqCst);
        self.record(LogOp::SetObjsetProps {
            id,
            props: props.to_string(),
        });
        Ok(())
    }

    pub fn create_object(
        &self,
        os: u64,
        object_type: u8,
        block_size: u32,
        compression: Compression,
        checksum: ChecksumKind,
    ) -> Result<u64, PoolError> {
        self.create_object_as(os, None, object_type, block_size, compression, checksum)
    }

    /// `obj` is given only when replaying the intent log.
    fn create_object_as(
        &self,
        os: u64,
        obj: Option<u64>,
        object_type: u8,
        block_size: u32,
        compression: Compression,
        checksum: ChecksumKind,
    ) -> Result<u64, PoolError> {
        let obj = self.pool.writable_objset(os)?.create_object_as(
            obj,
            object_type,
            block_size,
            compression,
            checksum,
        )?;
        self.pool
            .account_dirty_bytes(crate::dnode::DNODE_SIZE as u64);
        self.record(LogOp::CreateObject {
            os,
            obj,
            object_type,
            block_size,
            compression,
            checksum,
        });
        Ok(obj)
    }

    pub fn write(&self, os: u64, obj: u64, offset: u64, data: &[u8]) -> Result<(), PoolError> {
        let p = self.pool;
        let objset = p.writable_objset(os)?;
        let dirtied = objset.write(&p.storage, obj, offset, data)?;
        p.account_dirty(&objset, dirtied);
        self.record(LogOp::Write {
            os,
            obj,
            offset,
            len: data.len() as u64,
            data: Vec::new(),
        });
        Ok(())
    }

    pub fn free_range(&self, os: u64, obj: u64, offset: u64, len: u64) -> Result<(), PoolError> {
        let p = self.pool;
        p.writable_objset(os)?
            .free_range(&p.storage, obj, offset, len)?;
        self.record(LogOp::FreeRange {
            os,
            obj,
            offset,
            len,
        });
        Ok(())
    }

    pub fn free_object(&self, os: u64, obj: u64) -> Result<(), PoolError> {
        let p = self.pool;
        p.writable_objset(os)?.free_object(&p.storage, obj)?;
        self.record(LogOp::FreeObject { os, obj });
        Ok(())
    }

    pub fn set_bonus(
        &self,
        os: u64,
        obj: u64,
        bonus: &[u8],
        generation: Option<u64>,
    ) -> Result<(), PoolError> {
        let p = self.pool;
        p.writable_objset(os)?
            .set_bonus(&p.storage, obj, bonus, generation)?;
        p.account_dirty_bytes(bonus.len() as u64);
        self.record(LogOp::SetBonus {
            os,
            obj,
            bonus: bonus.to_vec(),
            generation,
        });
        Ok(())
    }

    /// Grows the block size of an object that has at most one block (a small file
    /// growing towards its recordsize); its contents are kept.
    pub fn grow_block_size(&self, os: u64, obj: u64, block_size: u32) -> Result<(), PoolError> {
        let p = self.pool;
        let objset = p.writable_objset(os)?;
        let dirtied = objset.grow_block_size(&p.storage, obj, block_size)?;
        p.account_dirty(&objset, dirtied);
        self.record(LogOp::GrowBlockSize {
            os,
            obj,
            block_size,
        });
        Ok(())
    }

    /// Applies one replayed record (records are not logged again while replaying).
    fn replay(&self, op: LogOp) -> Result<(), PoolError> {
        match op {
            LogOp::CreateObjset { id, name, props } => {
                self.create_objset_as(&name, &props, Some(id)).map(|_| ())
            }
            LogOp::SetObjsetProps { id, props } => self.set_objset_props(id, &props),
            LogOp::DestroyObjset { .. } => unreachable!("applied by the pool, outside a Tx"),
            LogOp::CreateObject {
                os,
                obj,
                object_type,
                block_size,
                compression,
                checksum,
            } => self
                .create_object_as(
                    os,
                    Some(obj),
                    object_type,
                    block_size,
                    compression,
                    checksum,
                )
                .map(|_| ()),
            LogOp::Write {
                os,
                obj,
                offset,
                data,
                ..
            } => self.write(os, obj, offset, &data),
            LogOp::FreeRange {
                os,
                obj,
                offset,
                len,
            } => self.free_range(os, obj, offset, len),
            LogOp::FreeObject { os, obj } => self.free_object(os, obj),
            LogOp::SetBonus {
                os,
                obj,
                bonus,
                generation,
            } => self.set_bonus(os, obj, &bonus, generation),
            LogOp::GrowBlockSize {
                os,
                obj,
                block_size,
            } => self.grow_block_size(os, obj, block_size),
            LogOp::WriteBlock {
                os,
                obj,
                offset,
                bp,
            } => self.adopt_logged_block(os, obj, offset, bp),
        }
    }

    /// Replay of a pointer record: the block was written to its final place before
    /// the record, and its space was never logged, so it is claimed here and the
    /// replay txg logs it when it adopts the block.
    fn adopt_logged_block(
        &self,
        os: u64,
        obj: u64,
        offset: u64,
        bp: BlockPointer,
    ) -> Result<(), PoolError> {
        let p = self.pool;
        let objset = p.writable_objset(os)?;
        let bs = objset.block_size(&p.storage, obj)? as u64;
        if !offset.is_multiple_of(bs) {
            return Err(PoolError::Corrupt(format!(
                "log pointer record at offset {offset} of object {obj} is not block aligned"
            )));
        }
        let blkid = offset / bs;
        if objset.is_placed(obj, blkid, &bp) {
            return Ok(());
        }
        if !p.storage.claim_placed(&bp) {
            return Err(PoolError::Corrupt(format!(
                "log pointer record for object {obj}: its block's space is in use"
            )));
        }
        if let Err(e) = objset.adopt_replayed(&p.storage, obj, blkid, bp, self.txg) {
            p.storage.release_placed(&bp, self.txg);
            return Err(e);
        }
        p.account_dirty(&objset, bs);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{first_difference, merged};

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
