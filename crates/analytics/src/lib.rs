//! shoal's analytics: every layer reports events, and statistics with drill-down
//! breakdowns, heatmaps and history are computed from them away from the I/O path.
//!
//! What it owns:
//! - the hot path, `Analytics::record`: an event is copied into the recording
//!   thread's own buffer (`recording`), so threads do not share a cache line. A full
//!   buffer drops the event and counts the drop (shown in status and `/metrics`); it
//!   never blocks I/O.
//! - the collector thread, which takes the buffers' events every `TICK`, assigns each event
//!   to its second (from the event's own timestamp), adds it to every enabled
//!   dataset, and seals a second once it is `SEAL_DELAY_S` old, appending it to the
//!   dataset's history rings (how a dataset counts and seals: `counting`). Ids
//!   become names here (shares, files, devices), once per distinct value and cached
//!   for `NAME_CACHE_S`.
//! - the Prometheus counters (cumulative, low-cardinality labels only).
//!
//! Invariants: a sealed second never changes (an event arriving after its second
//! was sealed is counted as late and dropped from the datasets, not added to a later
//! second); every sample of a dataset adds to its total and to exactly one value of
//! its breakdown (`(none)` when the event has no value for that dimension), so a
//! breakdown always sums to its total.

pub mod archive;
pub mod buckets;
pub mod catalog;
pub mod clock;
mod counting;
pub mod cpu;
pub mod event;
pub mod fasthash;
pub mod history;
pub mod host;
pub mod prometheus;
pub mod recording;

pub use catalog::{Dim, Spec, SpecError, Statistic, BUILTIN_DATASETS, STATISTICS};
pub use clock::Ticks;
pub use event::{Event, IoEvent, IscsiEvent, Meter, MeterEvent, NfsEvent, RefusalEvent};
pub use history::{BucketCount, History, KeyCount, Point, Resolution};

use catalog::RawKey;
use counting::{ChunkPlan, DatasetState, SecondOf};
use fasthash::FastMap;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Names interned for events at most (`intern`); later ones share one name.
pub const MAX_INTERNED: usize = 4096;
/// What a name interned past `MAX_INTERNED` is counted as.
pub const OTHER_NAME: &str = "(other)";

/// A name that lives as long as the process, for events, which carry no heap data:
/// the same text gives the same `&'static str`. Used for names an event's source
/// sees once per session (an iSCSI initiator and target), not per event. At most
/// `MAX_INTERNED` names are kept (each is leaked once); past that every new name
/// is `OTHER_NAME`, so a stream of made-up names cannot grow memory without bound.
pub fn intern(name: &str) -> &'static str {
    static NAMES: std::sync::OnceLock<Interner> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| Interner::new(MAX_INTERNED)).get(name)
}

/// A set of at most `max` names kept for the life of the process (see `intern`).
struct Interner {
    names: Mutex<std::collections::HashSet<&'static str>>,
    max: usize,
}

impl Interner {
    fn new(max: usize) -> Interner {
        Interner {
            names: Mutex::default(),
            max,
        }
    }

    fn get(&self, name: &str) -> &'static str {
        let mut names = self.names.lock().unwrap();
        if let Some(n) = names.get(name) {
            return n;
        }
        if names.len() >= self.max {
            return OTHER_NAME;
        }
        let n: &'static str = Box::leak(name.to_string().into_boxed_str());
        names.insert(n);
        n
    }
}

/// How often the collector takes the recorded events.
pub const TICK: Duration = Duration::from_millis(100);
/// A second is sealed once it ended this many seconds ago.
pub const SEAL_DELAY_S: u64 = 2;
/// How far after now restored history may be dated and still be kept (see
/// `Analytics::open_history`).
const FUTURE_HISTORY_KEPT_S: u64 = 60;
/// Datasets beyond the built-in ones that may be enabled at once.
pub const MAX_USER_DATASETS: usize = 64;
/// How long a resolved share or file name is reused before it is looked up again.
const NAME_CACHE_S: u64 = 10;
/// The memory all datasets' in-memory history may take unless told otherwise
/// (`set_memory_limit`).
pub const DEFAULT_MEMORY_BYTES: u64 = 256 << 20;
/// The breakdown value of a sample that has no value for the dimension.
pub const NONE_KEY: &str = "(none)";

/// Something read once a second on the collector thread (counters turned into
/// per-second deltas, levels such as the ARC's size); the daemon provides them.
pub trait Sampler: Send + Sync {
    /// Pushes this second's readings, stamped `at`.
    fn sample(&self, at: Instant, out: &mut Vec<Event>);
}

/// Turns ids into names for breakdowns; the daemon provides it.
pub trait Names: Send + Sync {
    /// The dataset name of the share with this file-system id.
    fn share(&self, fsid: u64) -> Option<String>;
    /// A path for an object of a share (`/pool/fs/dir/file`).
    fn file(&self, fsid: u64, ino: u64) -> Option<String>;
}

#[derive(Debug, thiserror::Error)]
pub enum AnalyticsError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("dataset '{0}' is not enabled")]
    NotEnabled(String),
    #[error("dataset '{0}' is built in and cannot be removed")]
    BuiltIn(String),
    #[error("at most {MAX_USER_DATASETS} datasets can be enabled besides the built-in ones")]
    TooMany,
    #[error("{0}")]
    BadRange(String),
}

#[derive(Default, Clone)]
struct Registry {
    pools: Vec<String>,
    devices: Vec<RegisteredDevice>,
}

/// A device as `register_device` numbered it.
#[derive(Clone)]
pub(crate) struct RegisteredDevice {
    /// Index in `Registry::pools`.
    pub pool: usize,
    pub path: String,
    /// What the pool uses it for: data, log, cache or spare (the latest registration's).
    pub role: &'static str,
}

#[derive(Default)]
struct Engine {
    datasets: BTreeMap<String, DatasetState>,
    /// Seconds up to this one are sealed.
    sealed_upto: Option<u64>,
    names: FastMap<(Dim, RawKey), String>,
    names_at: u64,
    late: u64,
    totals: prometheus::Totals,
    /// The bound on every dataset's in-memory history together, in bytes.
    memory_limit: u64,
    /// Points dropped from memory to stay within `memory_limit`.
    trimmed: u64,
    /// Set by tests only: count event by event, each offered to every dataset of its
    /// route, as the reference the chunked counting must agree with.
    per_event_reference: bool,
    /// The vector `tick` gives a recording thread for the one it takes (see
    /// `recording::Recorder::drain`), kept between ticks with its capacity.
    spare: Vec<Event>,
}

/// Everything about one dataset but its points.
#[derive(Debug, Clone, Serialize)]
pub struct DatasetInfo {
    pub name: String,
    pub statistic: &'static str,
    pub description: &'static str,
    pub unit: &'static str,
    /// A level read each second (shown as is) rather than a count (shown per second).
    pub gauge: bool,
    /// Shown value = total / seconds / divisor.
    pub divisor: u64,
    pub breakdown: Option<&'static str>,
    /// Unit of the heatmap buckets' bounds when the breakdown is numeric.
    pub breakdown_unit: Option<&'static str>,
    pub filters: Vec<(String, String)>,
    pub builtin: bool,
    /// Unix second from which the dataset counts.
    pub since: u64,
}

/// A summary of a range: the average, smallest and largest per-second rate.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub seconds: u64,
    pub total: u64,
    pub average: f64,
    pub min: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Series {
    #[serde(flatten)]
    pub dataset: DatasetInfo,
    pub resolution: Resolution,
    pub start: u64,
    pub end: u64,
    pub points: Vec<Point>,
    pub summary: Summary,
}

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub events_dropped: u64,
    pub events_late: u64,
    /// The newest sealed second.
    pub sealed_upto: Option<u64>,
    pub datasets: usize,
    /// About how many bytes the datasets' in-memory history takes, and its bound.
    pub memory_bytes: u64,
    pub memory_limit_bytes: u64,
    /// Oldest points dropped from memory to stay within the bound (the archive on
    /// disk keeps them).
    pub points_trimmed: u64,
}

pub struct Analytics {
    recorder: recording::Recorder,
    epoch: Instant,
    /// The wall-clock time at `epoch`, since the Unix epoch.
    epoch_unix: Duration,
    registry: RwLock<Registry>,
    resolver: RwLock<Option<Arc<dyn Names>>>,
    samplers: RwLock<Vec<Arc<dyn Sampler>>>,
    engine: Mutex<Engine>,
    /// History on disk, once `open_history` ran; taken after `engine`, never before.
    archive: Mutex<Option<archive::Archive>>,
}

/// `datasets.json` in the history directory: the datasets users enabled.
#[derive(serde::Serialize, serde::Deserialize)]
struct SavedDataset {
    name: String,
    since: u64,
}

impl std::fmt::Debug for Analytics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analytics").finish_non_exhaustive()
    }
}

impl Analytics {
    /// A new instance with the built-in datasets enabled; `start_collector` makes it live.
    pub fn new() -> Arc<Analytics> {
        // The counter's rate is measured here, once, not on the first call's path.
        Ticks::calibrate();
        let epoch = Instant::now();
        let epoch_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let a = Arc::new(Analytics {
            recorder: recording::Recorder::new(),
            epoch,
            epoch_unix,
            registry: RwLock::default(),
            resolver: RwLock::default(),
            samplers: RwLock::default(),
            engine: Mutex::default(),
            archive: Mutex::default(),
        });
        // Built-ins count from the instance's first second, not from whatever
        // second the wall clock reached while it was being built.
        let now = a.unix_second(epoch);
        {
            let mut engine = a.engine.lock().unwrap();
            engine.memory_limit = DEFAULT_MEMORY_BYTES;
            for name in BUILTIN_DATASETS {
                let spec = Spec::parse(name).expect("built-in dataset names parse");
                engine
                    .datasets
                    .insert(name.to_string(), DatasetState::new(spec, true, now));
            }
        }
        a
    }

    /// Records one event. Never blocks on the collector (a full buffer drops and
    /// counts).
    #[inline]
    pub fn record(&self, event: Event) {
        self.recorder.record(std::iter::once(event));
    }

    /// Records the NFS events of one request (an NFSv4 COMPOUND's operations) as
    /// `record` would each, taking the thread's buffer once.
    pub fn record_nfs(&self, events: &[NfsEvent]) {
        self.recorder.record(events.iter().copied().map(Event::Nfs));
    }

    /// A number for a device, for its `IoEvent`s; the same (pool, path) gets the same
    /// number again (a pool imported twice in one process), with its role updated
    /// (a spare that replaced a data device is data from then on). `role` is what
    /// the pool uses the device for: data, log, cache or spare.
    pub fn register_device(&self, pool: &str, path: &str, role: &'static str) -> u32 {
        let mut r = self.registry.write().unwrap();
        let pool_ix = match r.pools.iter().position(|p| p == pool) {
            Some(i) => i,
            None => {
                r.pools.push(pool.to_string());
                r.pools.len() - 1
            }
        };
        if let Some(i) = r
            .devices
            .iter()
            .position(|d| d.pool == pool_ix && d.path == path)
        {
            r.devices[i].role = role;
            return i as u32;
        }
        r.devices.push(RegisteredDevice {
            pool: pool_ix,
            path: path.to_string(),
            role,
        });
        (r.devices.len() - 1) as u32
    }

    /// A number for a pool, for the meter readings about it.
    pub fn register_pool(&self, pool: &str) -> u32 {
        let mut r = self.registry.write().unwrap();
        match r.pools.iter().position(|p| p == pool) {
            Some(i) => i as u32,
            None => {
                r.pools.push(pool.to_string());
                (r.pools.len() - 1) as u32
            }
        }
    }

    /// Bounds the memory of every dataset's in-memory history together: beyond it,
    /// the oldest points of the largest histories are dropped (down to a minute of
    /// seconds, an hour of minutes and a day of hours each).
    pub fn set_memory_limit(&self, bytes: u64) {
        self.engine.lock().unwrap().memory_limit = bytes;
    }

    /// Adds a sampler; the collector reads it once a second from now on.
    pub fn add_sampler(&self, sampler: Arc<dyn Sampler>) {
        self.samplers.write().unwrap().push(sampler);
    }

    /// Reads every sampler into the recorded events.
    pub fn sample_now(&self) {
        let samplers = self.samplers.read().unwrap().clone();
        let mut events = Vec::new();
        let at = Instant::now();
        for s in &samplers {
            s.sample(at, &mut events);
        }
        for e in events {
            self.record(e);
        }
    }

    pub fn set_names(&self, names: Arc<dyn Names>) {
        *self.resolver.write().unwrap() = Some(names);
    }

    /// Starts the collector thread; it ends when the last `Arc` is dropped.
    pub fn start_collector(self: &Arc<Self>) {
        let weak: Weak<Analytics> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("analytics".into())
            .spawn(move || {
                let mut sampled = 0;
                loop {
                    std::thread::sleep(TICK);
                    let Some(a) = weak.upgrade() else { return };
                    let now = a.unix_now();
                    // Samplers once per second, early in it, so the reading lands in
                    // that second whatever the tick's phase.
                    if now != sampled {
                        sampled = now;
                        a.sample_now();
                    }
                    a.tick(now);
                }
            })
            .expect("spawn the analytics collector");
    }

    /// The instant this instance's clock counts from.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// The current Unix second by this instance's clock.
    pub fn unix_now(&self) -> u64 {
        self.unix_second(Instant::now())
    }

    fn unix_second(&self, at: Instant) -> u64 {
        // A `Duration` sum, not nanoseconds: a u128 division per event showed in the
        // collector's profile.
        (self.epoch_unix + at.saturating_duration_since(self.epoch)).as_secs()
    }

    /// Takes the recorded events and seals every second that ended `SEAL_DELAY_S` before `now`.
    /// The collector calls it every `TICK`; tests call it to step time.
    pub fn tick(&self, now: u64) {
        let resolver = self.resolver.read().unwrap().clone();
        // A copy: names are resolved through the file systems below, which may wait
        // for a pool's sync, and a device change during a sync registers devices.
        let registry = self.registry.read().unwrap().clone();
        let mut engine = self.engine.lock().unwrap();
        let engine = &mut *engine;
        let per_event = engine.per_event_reference;
        if now >= engine.names_at + NAME_CACHE_S {
            // Names change (rename, a share re-created): look them up afresh.
            engine.names.clear();
            engine.names_at = now;
            for ds in engine.datasets.values_mut() {
                ds.filter_memo.clear();
            }
        }
        let mut namer = Namer {
            cache: &mut engine.names,
            registry: &registry,
            resolver: resolver.as_deref(),
        };
        // Each event is offered only to the datasets of statistics it can count
        // towards (an I/O event to the io.* datasets, a meter reading to its meter's):
        // offering every event to every dataset cost more than the counting itself.
        // A dataset's routes are a bit mask, as are the routes a chunk of events has.
        let mut states: Vec<(&mut DatasetState, u64)> = engine
            .datasets
            .values_mut()
            .map(|ds| {
                let routes = ds.spec.statistic().counts.routes();
                assert!(routes.end <= 64, "routes fit a u64 mask");
                let mask = routes.fold(0u64, |m, r| m | 1 << r);
                (ds, mask)
            })
            .collect();
        // Events are counted dataset by dataset over a chunk, not event by event
        // over the datasets: each event's second, lateness and route are worked out
        // once per chunk (`ChunkPlan`), and a dataset without filters finds its
        // second's counts once per run of one second rather than once per sample.
        // With `Sample::key` and `Open::count_key` inlined (their results went
        // through the stack and the loads stalled on the stores before them), the
        // collector's CPU per event fell by about 45% (`analytics-bench`). A chunk's
        // events, about 100 bytes each, stay in the first-level cache across the
        // datasets.
        const CHUNK: usize = 128;
        let mut seconds = SecondOf::default();
        let mut spare = std::mem::take(&mut engine.spare);
        let mut plan = ChunkPlan::default();
        // An event's second, or None for one that came after its second was sealed
        // (counted as late); the Prometheus totals count every other event.
        let (sealed_upto, late, totals) =
            (engine.sealed_upto, &mut engine.late, &mut engine.totals);
        // NFS events carry ticks, made instants against this reading (`clock`).
        let reference = clock::Reference::now();
        let mut admit = |e: &Event| {
            let second = seconds.of_event(self, &reference, e);
            if sealed_upto.is_some_and(|s| second <= s) {
                *late += 1;
                return None;
            }
            totals.add(e);
            Some(second)
        };
        let mut count = |batch: &[Event]| {
            if per_event {
                for e in batch {
                    let Some(second) = admit(e) else { continue };
                    let bit = 1 << catalog::route(e);
                    for (ds, _) in states.iter_mut().filter(|(_, m)| m & bit != 0) {
                        if second >= ds.since {
                            ds.add(e, second, &mut namer);
                        }
                    }
                }
                return;
            }
            for chunk in batch.chunks(CHUNK) {
                plan.clear();
                for (i, e) in chunk.iter().enumerate() {
                    match admit(e) {
                        Some(second) => plan.push(i, second, 1 << catalog::route(e)),
                        None => plan.push_uncounted(),
                    }
                }
                for (ds, mask) in states.iter_mut().filter(|(_, m)| m & plan.present != 0) {
                    ds.add_chunk(chunk, &plan, *mask, &mut namer);
                }
            }
        };
        self.recorder.drain(&mut spare, &mut count);
        drop(states);
        engine.spare = spare;
        let Some(seal_to) = now.checked_sub(SEAL_DELAY_S) else {
            return;
        };
        let from = match engine.sealed_upto {
            Some(s) if s >= seal_to => return,
            // After a long pause (a suspended machine) only the last hour is replayed.
            Some(s) => (s + 1).max(seal_to.saturating_sub(history::SECONDS_KEPT as u64)),
            None => seal_to.saturating_sub(history::SECONDS_KEPT as u64),
        };
        let mut sealed = Vec::new();
        for (name, ds) in engine.datasets.iter_mut() {
            let points = ds.seal(from, seal_to, &mut namer);
            if !points.is_empty() {
                sealed.push((name.clone(), points));
            }
        }
        engine.sealed_upto = Some(seal_to);
        engine.trim_to_memory_limit();
        // The engine stays locked while the points are written, so a dataset removed
        // meanwhile cannot have its files written again after their removal.
        let mut archive = self.archive.lock().unwrap();
        if let Some(archive) = archive.as_mut() {
            for (name, points) in &sealed {
                for problem in archive.append(name, points) {
                    tracing::warn!(%problem, "analytics history");
                }
            }
            for note in archive.enforce_bound() {
                tracing::warn!(%note, "analytics history");
            }
        }
    }

    /// Keeps history on disk in `dir` within `max_bytes`: loads what is there (the
    /// datasets users enabled and every dataset's points) and appends from now on.
    /// Call before `start_collector`.
    pub fn open_history(&self, dir: &std::path::Path, max_bytes: u64) -> Result<(), String> {
        let mut archive = archive::Archive::open(dir, max_bytes)?;
        let saved: Vec<SavedDataset> = match std::fs::read(dir.join("datasets.json")) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| format!("{}: {e}", dir.join("datasets.json").display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                return Err(format!(
                    "reading {}: {e}",
                    dir.join("datasets.json").display()
                ))
            }
        };
        let mut engine = self.engine.lock().unwrap();
        for d in saved {
            match Spec::parse(&d.name) {
                Ok(spec) if !engine.datasets.contains_key(&d.name) => {
                    let user = engine.datasets.values().filter(|x| !x.builtin).count();
                    if user < MAX_USER_DATASETS {
                        engine
                            .datasets
                            .insert(d.name.clone(), DatasetState::new(spec, false, d.since));
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "a saved analytics dataset no longer parses"),
            }
        }
        // Points dated well after now (written under a clock that was set ahead) would
        // hold sealing back until the clock caught up with them: they are dropped. A
        // clock stepped back by less than `FUTURE_HISTORY_KEPT_S` keeps its history and
        // pauses sealing for at most that long.
        let latest = self.unix_now() + FUTURE_HISTORY_KEPT_S;
        let mut future = 0;
        let mut up_to_now = |points: Vec<Point>| {
            let before = points.len();
            let kept: Vec<Point> = points.into_iter().filter(|p| p.t <= latest).collect();
            future += before - kept.len();
            kept
        };
        for (name, ds) in engine.datasets.iter_mut() {
            let [s, m, h] = archive::RESOLUTIONS.map(|r| archive.load(name, r));
            ds.history = History::restore(up_to_now(s?), up_to_now(m?), up_to_now(h?));
        }
        let enabled: Vec<String> = engine.datasets.keys().cloned().collect();
        let removed = archive.remove_others(&enabled);
        if !removed.is_empty() {
            tracing::info!(
                files = removed.len(),
                "analytics history of datasets no longer kept was removed"
            );
        }
        if future > 0 {
            tracing::warn!(
                points = future,
                "analytics history dated after now was dropped"
            );
        }
        *self.archive.lock().unwrap() = Some(archive);
        drop(engine);
        self.save_datasets()
    }

    /// Rewrites `datasets.json` from the enabled user datasets.
    fn save_datasets(&self) -> Result<(), String> {
        let engine = self.engine.lock().unwrap();
        let archive = self.archive.lock().unwrap();
        let Some(archive) = archive.as_ref() else {
            return Ok(());
        };
        let saved: Vec<SavedDataset> = engine
            .datasets
            .iter()
            .filter(|(_, d)| !d.builtin)
            .map(|(name, d)| SavedDataset {
                name: name.clone(),
                since: d.since,
            })
            .collect();
        let bytes = serde_json::to_vec_pretty(&saved).expect("serialises");
        archive::write_atomically(&archive.dir().join("datasets.json"), &bytes)
    }

    /// Enables a dataset (or returns the one already enabled under that name).
    pub fn enable(&self, name: &str) -> Result<DatasetInfo, AnalyticsError> {
        let spec = Spec::parse(name)?;
        let canonical = spec.to_string();
        let now = self.unix_now();
        let mut engine = self.engine.lock().unwrap();
        if !engine.datasets.contains_key(&canonical) {
            let user = engine.datasets.values().filter(|d| !d.builtin).count();
            if user >= MAX_USER_DATASETS {
                return Err(AnalyticsError::TooMany);
            }
            // Counting starts with the next whole second.
            engine
                .datasets
                .insert(canonical.clone(), DatasetState::new(spec, false, now + 1));
            let info = engine.datasets[&canonical].info(&canonical);
            drop(engine);
            if let Err(e) = self.save_datasets() {
                tracing::warn!(error = %e, "saving the enabled analytics datasets");
            }
            return Ok(info);
        }
        Ok(engine.datasets[&canonical].info(&canonical))
    }

    pub fn disable(&self, name: &str) -> Result<(), AnalyticsError> {
        let canonical = Spec::parse(name)?.to_string();
        let mut engine = self.engine.lock().unwrap();
        match engine.datasets.get(&canonical) {
            None => Err(AnalyticsError::NotEnabled(canonical)),
            Some(d) if d.builtin => Err(AnalyticsError::BuiltIn(canonical)),
            Some(_) => {
                engine.datasets.remove(&canonical);
                if let Some(a) = self.archive.lock().unwrap().as_mut() {
                    a.remove(&canonical);
                }
                drop(engine);
                if let Err(e) = self.save_datasets() {
                    tracing::warn!(error = %e, "saving the enabled analytics datasets");
                }
                Ok(())
            }
        }
    }

    pub fn datasets(&self) -> Vec<DatasetInfo> {
        let engine = self.engine.lock().unwrap();
        engine
            .datasets
            .iter()
            .map(|(name, d)| d.info(name))
            .collect()
    }

    /// Sealed points of a dataset whose intervals start in `[start, end]`, at
    /// `resolution` (by default the finest one whose history reaches `start`).
    pub fn query(
        &self,
        name: &str,
        start: u64,
        end: u64,
        resolution: Option<Resolution>,
    ) -> Result<Series, AnalyticsError> {
        if start > end {
            return Err(AnalyticsError::BadRange(format!(
                "start {start} is after end {end}"
            )));
        }
        let canonical = Spec::parse(name)?.to_string();
        let engine = self.engine.lock().unwrap();
        // Reckoned from the newest sealed second, so a window of exactly an hour that
        // ends there still gets seconds.
        let newest = engine.sealed_upto.unwrap_or_else(|| self.unix_now());
        let ds = engine
            .datasets
            .get(&canonical)
            .ok_or_else(|| AnalyticsError::NotEnabled(canonical.clone()))?;
        let resolution = resolution.unwrap_or_else(|| {
            // The finest ring that reaches `start`: by span, then coarser while the
            // memory bound has trimmed the ring short of it.
            let mut r = Resolution::for_span(newest.saturating_sub(start));
            while r != Resolution::Hour && ds.history.trimmed_after(r, start) {
                r = r.coarser();
            }
            r
        });
        let points = ds.history.range(resolution, start, end);
        let summary = summarize(&points);
        Ok(Series {
            dataset: ds.info(&canonical),
            resolution,
            start,
            end,
            points,
            summary,
        })
    }

    /// The newest sealed second, or the current one before anything was sealed.
    pub fn newest_sealed(&self) -> u64 {
        let sealed = self.engine.lock().unwrap().sealed_upto;
        sealed.unwrap_or_else(|| self.unix_now())
    }

    pub fn status(&self) -> Status {
        let engine = self.engine.lock().unwrap();
        Status {
            events_dropped: self.dropped(),
            events_late: engine.late,
            sealed_upto: engine.sealed_upto,
            datasets: engine.datasets.len(),
            memory_bytes: engine.memory_bytes() as u64,
            memory_limit_bytes: engine.memory_limit,
            points_trimmed: engine.trimmed,
        }
    }

    fn dropped(&self) -> u64 {
        self.recorder.dropped()
    }

    /// The Prometheus text exposition of the cumulative counters.
    pub fn prometheus(&self) -> String {
        let resolver = self.resolver.read().unwrap().clone();
        // A copy, as in `tick`: share names come from the file systems.
        let registry = self.registry.read().unwrap().clone();
        let engine = self.engine.lock().unwrap();
        engine.totals.render(
            &|fsid| {
                resolver
                    .as_ref()
                    .and_then(|r| r.share(fsid))
                    .unwrap_or_default()
            },
            &registry.pools,
            &registry.devices,
            self.dropped(),
            engine.late,
        )
    }
}

impl Engine {
    fn memory_bytes(&self) -> usize {
        self.datasets.values().map(|d| d.history.bytes()).sum()
    }

    /// Drops the oldest points of the largest histories until all fit the limit
    /// (or every history is down to its minimum).
    fn trim_to_memory_limit(&mut self) {
        let mut total = self.memory_bytes() as u64;
        while total > self.memory_limit {
            let Some(ds) = self
                .datasets
                .values_mut()
                .filter(|d| d.history.can_trim())
                .max_by_key(|d| d.history.bytes())
            else {
                return;
            };
            let before = ds.history.bytes();
            ds.history.trim_oldest();
            total -= (before - ds.history.bytes()) as u64;
            self.trimmed += 1;
        }
    }
}

fn summarize(points: &[Point]) -> Summary {
    let seconds: u64 = points.iter().map(|p| p.seconds).sum();
    let total: u64 = points.iter().map(|p| p.total).sum();
    let rates = points
        .iter()
        .map(|p| p.total as f64 / p.seconds.max(1) as f64);
    Summary {
        seconds,
        total,
        average: if seconds == 0 {
            0.0
        } else {
            total as f64 / seconds as f64
        },
        min: rates.clone().reduce(f64::min).unwrap_or(0.0),
        max: rates.reduce(f64::max).unwrap_or(0.0),
    }
}

/// Names of breakdown values, cached per collector pass.
struct Namer<'a> {
    cache: &'a mut FastMap<(Dim, RawKey), String>,
    registry: &'a Registry,
    resolver: Option<&'a dyn Names>,
}

impl Namer<'_> {
    fn name(&mut self, dim: Dim, key: RawKey) -> String {
        if let Some(n) = self.cache.get(&(dim, key)) {
            return n.clone();
        }
        let share = |fsid: u64| {
            self.resolver
                .and_then(|r| r.share(fsid))
                .unwrap_or_else(|| format!("fsid:{fsid:x}"))
        };
        let name = match (dim, key) {
            (_, RawKey::Name(n)) => n.to_string(),
            (_, RawKey::Client(ip)) => RawKey::client_ip(ip).to_string(),
            (_, RawKey::Share(fsid)) => share(fsid),
            (_, RawKey::File(fsid, ino)) => self
                .resolver
                .and_then(|r| r.file(fsid, ino))
                .unwrap_or_else(|| format!("{}:object {ino}", share(fsid))),
            (Dim::Pool, RawKey::Device(d)) => self
                .registry
                .devices
                .get(d as usize)
                .and_then(|dev| self.registry.pools.get(dev.pool))
                .cloned()
                .unwrap_or_else(|| format!("pool of device {d}")),
            (Dim::Role, RawKey::Device(d)) => self
                .registry
                .devices
                .get(d as usize)
                .map_or("data", |dev| dev.role)
                .to_string(),
            (_, RawKey::Device(d)) => self
                .registry
                .devices
                .get(d as usize)
                .map(|dev| dev.path.clone())
                .unwrap_or_else(|| format!("device {d}")),
            (_, RawKey::Direction(out)) => (if out { "out" } else { "in" }).to_string(),
            (_, RawKey::Pool(p)) => self
                .registry
                .pools
                .get(p as usize)
                .cloned()
                .unwrap_or_else(|| format!("pool {p}")),
            (_, RawKey::Bucket(i)) => {
                let (low, high) = buckets::bounds(i);
                format!("{low}-{high}")
            }
        };
        self.cache.insert((dim, key), name.clone());
        name
    }
}

#[cfg(test)]
mod tests;
