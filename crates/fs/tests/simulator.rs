//! The whole-system simulator: deterministic simulation of the storage stack under
//! clients, faults and power loss, driven by one seed.
//!
//! One seed picks a layout (2- or 3-way mirror, raidz1, raidz2; a separate log device
//! on odd layouts), dataset properties (recordsize, compression) and a run of epochs.
//! In each epoch several simulated clients take turns, in an order the seed draws, at
//! POSIX changes in their own directories and in one they share (create, write,
//! truncate, rename, link, unlink, mkdir, rmdir), reads that must return exactly what
//! the model says, fsyncs and txg commits; between them the seed injects device faults
//! within the layout's redundancy: silent corruption of whole ranges, read errors, a
//! device that dies, its replacement (a resilver), scrubs. Every epoch ends in a power
//! cut: either when a crash clock fires at a device write or flush in the middle of
//! whatever runs (an operation, a scrub, a resilver), or between operations. Unflushed
//! writes are then kept, dropped, torn, filled with garbage or (once in a while, on one
//! device) misdirected. The import that follows may itself be cut, during label reads,
//! log replay or its first txg, and is tried again, so crash, recover part way, crash
//! again happens too. After every recovery:
//! - the tree (names, kinds, sizes, link counts, bytes) equals the model after some
//!   prefix of the operations that includes everything acknowledged (a returned fsync
//!   or txg commit): nothing acknowledged lost, nothing half applied, nothing invented;
//! - `pool check` finds no problem (block tree, space maps, dataset figures, intent
//!   log chain), and the set of unlinked-but-open files is empty.
//!
//! The damage budget: the simulator tracks which devices may hold bad data (corrupted,
//! stale after dying, read errors armed, misdirected at a crash) and never lets them
//! outnumber what the layout can lose; a scrub followed by a txg commit clears it for
//! every device that is alive. Within that budget every read must succeed and every
//! check must pass; past it, nothing is promised, so nothing is tested.
//!
//! Determinism: the pool runs without its sync thread or read-ahead and with device
//! I/O in a fixed order, time and identifiers are simulated (`vdev::sim_time`), and
//! the clients are interleaved by the seed on one thread, so a seed replays exactly.
//! The first seed of every run is run twice and must end with the same counts (device
//! operations, power cuts, faults). Every fifth seed is concurrent instead: the
//! background txg sync thread and the parallel log replica writers run, so power cuts
//! also land in their work; such a seed replays its operations and faults, not always
//! its crash points. A failure prints its seed and the command that replays it.
//!
//! `SHOAL_SIM_SEEDS=N` (default 6) and `SHOAL_SIM_OPS=N` operations a seed (default
//! 10,000: enough for space map condensing and log ring wraps); `SHOAL_SIM_SECONDS=N` runs seeds from a time-drawn start for N seconds
//! instead; `SHOAL_SIM_SEED=S` runs seed S alone; `SHOAL_SIM_ARC_MIB=N` sizes the ARC
//! (default 32; a small one sends more reads to the devices, and so more repairs);
//! `SHOAL_SIM_PIN_READS=0` turns off read pins (`Storage::pin_reads`) and the simulator's
//! hold on freed space while it aims damage, to show what they prevent; `SHOAL_SIM_TXG_MS=N` sets the concurrent seeds'
//! txg interval (default 10 ms; shorter makes races with the sync thread likelier).

#[path = "../../pool/tests/common/mod.rs"]
mod common;
#[path = "simulator/diagnose.rs"]
mod diagnose;
#[path = "simulator/faults.rs"]
mod faults;
#[path = "simulator/stats.rs"]
mod stats;
use common::Rng;
use stats::Stats;

use fs::{Cred, Datasets, Filesystem, Kind, SetAttr};
use pool::pool::{DeviceArg, TopArg};
use pool::{Pool, PoolOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vdev::{CrashClock, CrashPolicy, Fault, Layout, SimDevice};

const DEV_BYTES: u64 = 64 << 20;
const LOG_DEV_BYTES: u64 = 64 << 20;
/// Operations per epoch at most (an epoch ends in a power cut).
const EPOCH_OPS: u64 = 1_500;
const MAX_FILE: u64 = 128 << 10;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir,
    File { nlink: u32, data: Arc<Vec<u8>> },
}

type Tree = BTreeMap<String, Node>;

/// What the clients have done: directories, names to file ids (hard links), contents.
#[derive(Debug, Clone, Default)]
struct Model {
    dirs: BTreeSet<String>,
    names: BTreeMap<String, u64>,
    files: BTreeMap<u64, Arc<Vec<u8>>>,
    next_id: u64,
}

impl Model {
    fn tree(&self) -> Tree {
        let mut t = Tree::new();
        for d in &self.dirs {
            t.insert(d.clone(), Node::Dir);
        }
        let mut links: BTreeMap<u64, u32> = BTreeMap::new();
        for id in self.names.values() {
            *links.entry(*id).or_default() += 1;
        }
        for (path, id) in &self.names {
            t.insert(
                path.clone(),
                Node::File {
                    nlink: links[id],
                    data: self.files[id].clone(),
                },
            );
        }
        t
    }

    fn unlink(&mut self, path: &str) {
        let id = self.names.remove(path).expect("unlinking a modelled name");
        if !self.names.values().any(|i| *i == id) {
            self.files.remove(&id);
        }
    }
}

fn read_tree(fs: &Filesystem) -> Result<Tree, String> {
    let mut t = Tree::new();
    let mut stack = vec![(1u64, String::new())];
    while let Some((ino, prefix)) = stack.pop() {
        let mut cookie = 0;
        loop {
            let page = fs
                .readdir(ino, cookie, 64)
                .map_err(|e| format!("readdir {prefix}: {e}"))?;
            let Some(last) = page.last() else { break };
            cookie = last.cookie;
            for e in page {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let path = format!("{prefix}{}", String::from_utf8_lossy(&e.name));
                let a = fs
                    .getattr(e.ino)
                    .map_err(|e| format!("getattr {path}: {e}"))?;
                match a.kind {
                    Kind::Dir => {
                        t.insert(path.clone(), Node::Dir);
                        stack.push((e.ino, format!("{path}/")));
                    }
                    Kind::File => {
                        let data = fs
                            .read(e.ino, 0, a.size as usize + 1)
                            .map_err(|e| format!("read {path}: {e}"))?;
                        if data.len() as u64 != a.size {
                            return Err(format!(
                                "{path}: size {} but {} bytes read",
                                a.size,
                                data.len()
                            ));
                        }
                        t.insert(
                            path,
                            Node::File {
                                nlink: a.nlink,
                                data: Arc::new(data),
                            },
                        );
                    }
                    k => return Err(format!("{path}: unexpected {k:?}")),
                }
            }
        }
    }
    Ok(t)
}

/// The first difference between two trees, for a failure report.
fn tree_difference(want: &Tree, got: &Tree) -> String {
    for (path, node) in want {
        match got.get(path) {
            None => return format!("{path} missing"),
            Some(g) if g != node => {
                return match (node, g) {
                    (
                        Node::File { nlink, data },
                        Node::File {
                            nlink: gl,
                            data: gd,
                        },
                    ) => format!(
                        "{path}: nlink {nlink} vs {gl}, {} vs {} bytes, first differing byte {:?}",
                        data.len(),
                        gd.len(),
                        data.iter().zip(gd.iter()).position(|(a, b)| a != b)
                    ),
                    _ => format!("{path}: {node:?} vs {g:?}"),
                }
            }
            _ => {}
        }
    }
    match got.keys().find(|p| !want.contains_key(*p)) {
        Some(p) => format!("{p} invented"),
        None => "equal".into(),
    }
}

/// `SHOAL_SIM_TRACE=1`: every fault, repair and power cut on stderr, for a replay.
fn trace(what: std::fmt::Arguments<'_>) {
    if std::env::var_os("SHOAL_SIM_TRACE").is_some() {
        eprintln!("sim: {what}");
    }
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// Pool options of a seed. Concurrent seeds run the background txg sync thread (every
/// 10 ms) and write log replicas in parallel, so crash points fall in the middle of
/// those threads' work; they replay the same operations and faults, but the device
/// operation a crash lands on may differ from run to run.
fn options(concurrent: bool) -> PoolOptions {
    PoolOptions {
        arc_max_bytes: Some(
            std::env::var("SHOAL_SIM_ARC_MIB")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(32u64)
                << 20,
        ),
        sync_thread: concurrent,
        txg_interval: Duration::from_millis(
            std::env::var("SHOAL_SIM_TXG_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(10),
        ),
        deterministic_io: !concurrent,
        // Read-ahead decides by the real clock; reads consume injected read errors.
        prefetch: false,
        pin_reads: pins_on(),
        ..PoolOptions::default()
    }
}

/// Read pins, and holds of freed space while damage is aimed at listed blocks; off
/// (`SHOAL_SIM_PIN_READS=0`) only to show what they prevent.
fn pins_on() -> bool {
    std::env::var("SHOAL_SIM_PIN_READS").as_deref() != Ok("0")
}

/// Every fifth seed is concurrent (see `options`).
fn concurrent(seed: u64) -> bool {
    seed % 5 == 4
}

/// One data device position of the pool and the device there now.
struct Slot {
    path: String,
    dev: Arc<SimDevice>,
}

/// The protections a run keeps. The negative controls switch one off and must see
/// the simulator report a loss, proving that it can.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Control {
    Honest,
    /// Every device acknowledges flushes without making anything durable.
    LyingFlushes,
    /// Damage may reach one device more than the layout can lose.
    OverBudget,
}

/// What ended an operation: it returned, or the power went.
enum Step {
    Done,
    Crashed,
}

type SimResult<T> = Result<T, String>;

struct Sim {
    seed: u64,
    control: Control,
    rng: Rng,
    layout: Layout,
    /// Devices the layout can lose and still read everything.
    redundancy: usize,
    clients: u64,
    slots: Vec<Slot>,
    log_dev: Option<Slot>,
    /// A replacement the power cut interrupted: (slot, its new device).
    replacing: Option<(usize, Slot)>,
    generation: u64,
    clock: Arc<CrashClock>,
    pool: Option<Arc<Pool>>,
    fs: Option<Arc<Filesystem>>,
    model: Model,
    /// Models since the last acknowledgement (index 0 is acknowledged).
    states: Vec<Model>,
    /// Slots that may hold bad data, and the dead, read-faulted and (by the pool, at
    /// import: it missed writes) FAULTED among them.
    damaged: BTreeSet<usize>,
    dead: BTreeSet<usize>,
    read_faulted: BTreeSet<usize>,
    faulted: BTreeSet<usize>,
    stats: Stats,
    /// The committed txg when this pool life began; the space map chain's length at
    /// the last check.
    first_txg: u64,
    space_map_blocks: u64,
}

impl Sim {
    fn new(seed: u64, control: Control) -> SimResult<Sim> {
        let mut rng = Rng(seed ^ 0x005E_ED0F_5140);
        let (layout, n, redundancy) = match seed % 4 {
            0 => (Layout::Mirror, 2, 1),
            1 => (Layout::Mirror, 3, 2),
            2 => (Layout::RaidZ { nparity: 1 }, 4, 1),
            _ => (Layout::RaidZ { nparity: 2 }, 5, 2),
        };
        let clock = CrashClock::new();
        let slots: Vec<Slot> = (0..n)
            .map(|i| Slot {
                path: format!("d{i}.0"),
                dev: SimDevice::with_clock(DEV_BYTES, seed * 1000 + i as u64, clock.clone()),
            })
            .collect();
        let log_dev = (seed / 4 % 2 == 1).then(|| Slot {
            path: "log.0".into(),
            dev: SimDevice::with_clock(LOG_DEV_BYTES, seed * 1000 + 999, clock.clone()),
        });
        let pool = Pool::create(
            "tank",
            vec![TopArg {
                layout,
                devices: slots.iter().map(arg).collect(),
            }],
            log_dev.iter().map(arg).collect(),
            vec![],
            options(concurrent(seed)),
        )
        .map_err(|e| format!("create: {e}"))?;
        let recordsize = ["4K", "16K", "128K"][rng.below(3) as usize];
        let compression = ["off", "lz4", "zstd", "gzip-1"][rng.below(4) as usize];
        let ds = Datasets::new(pool.clone()).map_err(|e| e.to_string())?;
        ds.create(
            "tank/fs",
            &[
                ("recordsize".into(), recordsize.into()),
                ("compression".into(), compression.into()),
            ],
        )
        .map_err(|e| e.to_string())?;
        let fs = ds.open("tank/fs").map_err(|e| e.to_string())?;
        if control == Control::LyingFlushes {
            for s in slots.iter().chain(log_dev.iter()) {
                s.dev.inject(Fault::LyingFlush);
            }
        }
        let clients = 3 + seed % 4;
        let mut model = Model::default();
        let cred = Cred::root();
        for c in 0..clients {
            let name = format!("c{c}");
            fs.create(1, name.as_bytes(), Kind::Dir, 0o755, 0, &cred)
                .map_err(|e| e.to_string())?;
            model.dirs.insert(name);
        }
        fs.create(1, b"shared", Kind::Dir, 0o777, 0, &cred)
            .map_err(|e| e.to_string())?;
        model.dirs.insert("shared".into());
        pool.sync().map_err(|e| e.to_string())?;
        Ok(Sim {
            seed,
            control,
            rng,
            layout,
            redundancy,
            clients,
            slots,
            log_dev,
            replacing: None,
            generation: 1,
            clock,
            pool: Some(pool),
            fs: Some(fs),
            states: vec![model.clone()],
            model,
            damaged: BTreeSet::new(),
            dead: BTreeSet::new(),
            read_faulted: BTreeSet::new(),
            faulted: BTreeSet::new(),
            stats: Stats {
                concurrent_seeds: u64::from(concurrent(seed)),
                ..Stats::default()
            },
            first_txg: 0,
            space_map_blocks: 0,
        })
    }

    fn fs(&self) -> &Arc<Filesystem> {
        self.fs.as_ref().expect("an imported pool")
    }

    fn pool(&self) -> &Arc<Pool> {
        self.pool.as_ref().expect("an imported pool")
    }

    fn resolve(&self, path: &str) -> SimResult<u64> {
        let mut ino = 1;
        for c in path.split('/').filter(|c| !c.is_empty()) {
            ino = self
                .fs()
                .lookup(ino, c.as_bytes())
                .map_err(|e| format!("lookup {c} of {path}: {e}"))?
                .ino;
        }
        Ok(ino)
    }

    /// The model changed by a completed operation: a new candidate state.
    fn changed(&mut self) {
        self.states.push(self.model.clone());
    }

    fn acknowledged(&mut self) {
        self.states = vec![self.model.clone()];
        self.stats.acks += 1;
    }

    /// A random directory for client `c`: its own, its subdirectory, or the shared one.
    fn dir_for(&mut self, c: u64) -> String {
        match self.rng.below(4) {
            0 => "shared".into(),
            1 if self.model.dirs.contains(&format!("c{c}/d")) => format!("c{c}/d"),
            _ => format!("c{c}"),
        }
    }

    /// Runs one operation of client `c`. An error after the crash clock fired is the
    /// power cut; any other error is a failure.
    fn client_op(&mut self, c: u64) -> SimResult<Step> {
        let cred = Cred::root();
        let dir = self.dir_for(c);
        let name = format!("f{}", self.rng.below(5));
        let path = format!("{dir}/{name}");
        let exists = self.model.names.get(&path).copied();
        let pick = self.rng.below(100);
        let outcome: Result<(), String> = (|| {
            let dino = self.resolve(&dir)?;
            let fs = self.fs().clone();
            match (pick, exists) {
                (0..=29, _) => {
                    let off = self.rng.below(MAX_FILE);
                    // Mostly small writes; one in eight up to 64 KiB, so the log rings
                    // go round.
                    let max = if self.rng.below(8) == 0 {
                        64 << 10
                    } else {
                        24 << 10
                    };
                    let len = 1 + self.rng.below(max) as usize;
                    let data = self.rng.mixed(len);
                    let ino = match exists {
                        Some(_) => fs.lookup(dino, name.as_bytes()).map(|a| a.ino),
                        None => fs
                            .create(dino, name.as_bytes(), Kind::File, 0o644, 0, &cred)
                            .map(|a| a.ino),
                    }
                    .map_err(|e| format!("create/lookup {path}: {e}"))?;
                    if exists.is_none() {
                        let id = self.model.next_id;
                        self.model.next_id += 1;
                        self.model.files.insert(id, Arc::new(Vec::new()));
                        self.model.names.insert(path.clone(), id);
                        self.changed();
                    }
                    fs.write(ino, off, &data)
                        .map_err(|e| format!("write {path}: {e}"))?;
                    let id = self.model.names[&path];
                    let f = Arc::make_mut(self.model.files.get_mut(&id).unwrap());
                    let end = off as usize + len;
                    if f.len() < end {
                        f.resize(end, 0);
                    }
                    f[off as usize..end].copy_from_slice(&data);
                }
                (30..=44, Some(id)) => {
                    let ino = fs
                        .lookup(dino, name.as_bytes())
                        .map_err(|e| format!("lookup {path}: {e}"))?
                        .ino;
                    let got = fs
                        .read(ino, 0, MAX_FILE as usize * 2)
                        .map_err(|e| format!("read {path}: {e}"))?;
                    if got[..] != self.model.files[&id][..] {
                        return Err(format!(
                            "read {path}: {} bytes, the model has {}; first difference at {:?}",
                            got.len(),
                            self.model.files[&id].len(),
                            got.iter()
                                .zip(self.model.files[&id].iter())
                                .position(|(a, b)| a != b)
                        ));
                    }
                    self.stats.reads_verified += 1;
                    return Ok(());
                }
                (45..=49, Some(id)) => {
                    let size = self.rng.below(MAX_FILE);
                    let ino = fs
                        .lookup(dino, name.as_bytes())
                        .map_err(|e| format!("lookup {path}: {e}"))?
                        .ino;
                    let set = SetAttr {
                        size: Some(size),
                        ..Default::default()
                    };
                    fs.setattr(ino, &set, &cred)
                        .map_err(|e| format!("truncate {path}: {e}"))?;
                    Arc::make_mut(self.model.files.get_mut(&id).unwrap()).resize(size as usize, 0);
                }
                (50..=57, Some(id)) => {
                    let to_dir = self.dir_for(c);
                    let to_name = format!("f{}", self.rng.below(5));
                    let to_path = format!("{to_dir}/{to_name}");
                    let tino = self.resolve(&to_dir)?;
                    fs.rename(
                        dino,
                        name.as_bytes(),
                        tino,
                        to_name.as_bytes(),
                        false,
                        &cred,
                    )
                    .map_err(|e| format!("rename {path} {to_path}: {e}"))?;
                    if self.model.names.get(&to_path) != Some(&id) {
                        if self.model.names.contains_key(&to_path) {
                            self.model.unlink(&to_path);
                        }
                        self.model.names.remove(&path);
                        self.model.names.insert(to_path, id);
                    }
                }
                (58..=61, Some(id)) => {
                    let to_dir = self.dir_for(c);
                    let to_path = format!("{to_dir}/g{}", self.rng.below(3));
                    if self.model.names.contains_key(&to_path) {
                        return Ok(());
                    }
                    let (_, to_name) = split(&to_path);
                    let ino = fs
                        .lookup(dino, name.as_bytes())
                        .map_err(|e| format!("lookup {path}: {e}"))?
                        .ino;
                    let tino = self.resolve(&to_dir)?;
                    fs.link(ino, tino, to_name.as_bytes(), &cred)
                        .map_err(|e| format!("link {path} {to_path}: {e}"))?;
                    self.model.names.insert(to_path, id);
                }
                (62..=69, Some(_)) => {
                    fs.unlink(dino, name.as_bytes(), &cred)
                        .map_err(|e| format!("unlink {path}: {e}"))?;
                    self.model.unlink(&path);
                }
                (70..=72, _) => {
                    let sub = format!("c{c}/d");
                    let home = self.resolve(&format!("c{c}"))?;
                    if self.model.dirs.contains(&sub) {
                        let empty = !self
                            .model
                            .names
                            .keys()
                            .any(|p| p.starts_with(&format!("{sub}/")));
                        if !empty {
                            return Ok(());
                        }
                        fs.rmdir(home, b"d", &cred)
                            .map_err(|e| format!("rmdir {sub}: {e}"))?;
                        self.model.dirs.remove(&sub);
                    } else {
                        fs.create(home, b"d", Kind::Dir, 0o755, 0, &cred)
                            .map_err(|e| format!("mkdir {sub}: {e}"))?;
                        self.model.dirs.insert(sub);
                    }
                }
                (73..=87, _) => {
                    fs.fsync(dino).map_err(|e| format!("fsync: {e}"))?;
                    self.acknowledged();
                    return Ok(());
                }
                (88..=91, _) => {
                    self.pool().sync().map_err(|e| format!("txg commit: {e}"))?;
                    self.acknowledged();
                    return Ok(());
                }
                _ => return Ok(()),
            }
            self.changed();
            Ok(())
        })();
        self.stats.ops += 1;
        match outcome {
            Ok(()) => Ok(Step::Done),
            Err(_) if self.clock.crashed() => {
                // Not acknowledged: the state may or may not hold it (its effect so far
                // is the model now).
                self.changed();
                Ok(Step::Crashed)
            }
            Err(e) => Err(format!(
                "{e}; damage budget {:?} of {}; devices: {}",
                self.damaged,
                self.redundancy,
                self.devices()
            )),
        }
    }

    /// One epoch: operations until the power goes (clock or between operations).
    fn epoch(&mut self, budget: u64) -> SimResult<u64> {
        let fire_at = 1 + self.rng.below(20_000);
        self.clock.arm(fire_at);
        let length = 50 + self.rng.below(EPOCH_OPS);
        let mut done = 0;
        while done < budget.min(length) {
            done += 1;
            let step = if self.rng.below(100) < 2 {
                self.fault()?
            } else {
                let c = self.rng.below(self.clients);
                self.client_op(c)?
            };
            if matches!(step, Step::Crashed) || self.clock.crashed() {
                break;
            }
        }
        self.clock.disarm();
        Ok(done)
    }

    /// Power cut and reboot: every device keeps, drops, tears or garbles its unflushed
    /// writes; then import (itself cut now and then, and retried) and verify.
    fn recover(&mut self) -> SimResult<()> {
        self.stats.crashes += 1;
        // One instant for every device: the pool that ran (its sync thread goes on)
        // must not reach a device not yet restarted after another one was.
        self.clock.crash_now();
        self.count_errors();
        self.fs = None;
        self.pool = None;
        let mut attempt = 0u64;
        let mut cut_before = false;
        loop {
            let policy = [
                CrashPolicy::Random,
                CrashPolicy::Hostile,
                CrashPolicy::DropAll,
                CrashPolicy::KeepAll,
            ][self.rng.below(4) as usize];
            // Misdirected writes on one device at most, and only within the budget.
            let misdirect = if self.rng.below(7) == 0 {
                self.damageable_slot()
            } else {
                None
            };
            self.clock = CrashClock::new();
            for (i, s) in self.slots.iter_mut().enumerate() {
                let p = if misdirect == Some(i) {
                    CrashPolicy::Misdirected
                } else {
                    policy
                };
                s.dev = s.dev.restart_with_clock(p, Some(self.clock.clone()));
            }
            if let Some(slot) = misdirect {
                self.damaged.insert(slot);
            }
            trace(format_args!(
                "power cut ({policy:?}, misdirected {misdirect:?}), damaged {:?}",
                self.damaged
            ));
            for s in self.log_dev.iter_mut() {
                s.dev = s.dev.restart_with_clock(policy, Some(self.clock.clone()));
            }
            if let Some((_, s)) = self.replacing.as_mut() {
                s.dev = s.dev.restart_with_clock(policy, Some(self.clock.clone()));
            }
            if self.control == Control::LyingFlushes {
                for s in self.slots.iter().chain(self.log_dev.iter()) {
                    s.dev.inject(Fault::LyingFlush);
                }
            }
            // A dead device comes back after the power cycle, with what it had.
            self.dead.clear();
            self.read_faulted.clear();
            let cut = attempt < 3 && self.rng.below(3) == 0;
            if cut {
                self.clock.arm(1 + self.rng.below(400));
            }
            attempt += 1;
            let mut devices: Vec<DeviceArg> = self.slots.iter().map(arg).collect();
            devices.extend(self.log_dev.iter().map(arg));
            devices.extend(self.replacing.iter().map(|(_, s)| arg(s)));
            let opened = Pool::import(devices, Some("tank"), options(concurrent(self.seed)))
                .and_then(|pool| {
                    let replayed = pool.intent_log_stats().records_replayed > 0;
                    let fs = Datasets::new(pool.clone())
                        .and_then(|ds| ds.open("tank/fs"))
                        .map_err(|e| pool::PoolError::Io(e.to_string()))?;
                    Ok((pool, fs, replayed))
                });
            // Disarmed before the check: a concurrent seed's sync thread may reach the
            // armed point just after the import returned; after this no cut can come.
            self.clock.disarm();
            match opened {
                Ok(_) | Err(_) if self.clock.crashed() => {
                    self.stats.crashes_in_recovery += 1;
                    cut_before = true;
                    continue;
                }
                Ok((pool, fs, replayed)) => {
                    if replayed {
                        self.stats.logs_replayed += 1;
                        if cut_before {
                            self.stats.cuts_in_replay += 1;
                        }
                    }
                    self.first_txg = pool.synced_txg();
                    self.pool = Some(pool);
                    self.fs = Some(fs);
                    break;
                }
                Err(e) => return Err(format!("import after a power cut: {e}")),
            }
        }
        self.settle_replacement();
        self.note_faulted()?;
        self.verify()
    }

    /// The data devices as the pool sees them, for a failure report.
    fn devices(&self) -> String {
        let st = self.pool().status();
        st.vdevs
            .iter()
            .flat_map(|t| t.children.iter())
            .map(|l| {
                format!(
                    "{} {} {} (read errors {}, bad copies {})",
                    l.path, l.health, l.io_mode, l.read_errors, l.cksum_errors
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Adds what the pool met since its import to the totals.
    fn count_errors(&mut self) {
        self.stats.device_ops += self.clock.ops();
        if let Some(pool) = &self.pool {
            self.stats.txgs += pool.synced_txg() - self.first_txg;
            let log = pool.intent_log_stats();
            self.stats.log_bytes += log.bytes_written;
            self.stats.log_ring_bytes = self.stats.log_ring_bytes.max(log.ring_bytes);
            for leaf in pool.status().vdevs.iter().flat_map(|t| t.children.iter()) {
                self.stats.checksum_errors += leaf.cksum_errors;
                self.stats.read_errors += leaf.read_errors;
            }
        }
    }

    fn verify(&mut self) -> SimResult<()> {
        let tree = read_tree(self.fs())?;
        let found = (0..self.states.len())
            .rev()
            .find(|&k| self.states[k].tree() == tree);
        let Some(k) = found else {
            return Err(format!(
                "after a power cut the tree is no state at or after the last \
                 acknowledgement ({} candidates; against the acknowledged one: {}; against \
                 the latest: {})",
                self.states.len(),
                tree_difference(&self.states[0].tree(), &tree),
                tree_difference(&self.states.last().unwrap().tree(), &tree),
            ));
        };
        self.model = self.states[k].clone();
        self.states = vec![self.model.clone()];
        let unlinked = self
            .fs()
            .readdir(fs::filesystem::UNLINKED_INO, 0, 10)
            .map_err(|e| format!("reading the unlinked set: {e}"))?;
        if unlinked.iter().any(|e| e.name != b"." && e.name != b"..") {
            return Err("the unlinked set is not empty after recovery".into());
        }
        let report = self.pool().check().map_err(|e| format!("check: {e}"))?;
        if !report.problems.is_empty() {
            return Err(format!("pool check: {:?}", report.problems));
        }
        if report.space_map_blocks < self.space_map_blocks {
            self.stats.space_map_condenses += 1;
        }
        self.space_map_blocks = report.space_map_blocks;
        Ok(())
    }

    fn run(mut self, ops: u64) -> SimResult<Stats> {
        while self.stats.ops < ops {
            if let Err(e) = self
                .epoch(ops - self.stats.ops)
                .and_then(|_| self.recover())
            {
                self.explain(&e);
                return Err(e);
            }
        }
        self.count_errors();
        Ok(self.stats)
    }
}

fn arg(s: &Slot) -> DeviceArg {
    DeviceArg {
        path: s.path.clone(),
        device: s.dev.clone(),
    }
}

/// Runs one seed; a panic anywhere below is a failure of that seed too.
fn run_seed(seed: u64, ops: u64, control: Control) -> SimResult<Stats> {
    vdev::sim_time::simulate(seed);
    vdev::sim_device::history::record_history(std::env::var_os("SHOAL_SIM_TRACE").is_some());
    let r = std::panic::catch_unwind(|| Sim::new(seed, control).and_then(|s| s.run(ops)));
    vdev::sim_time::stop();
    match r {
        Ok(r) => r,
        Err(p) => Err(p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into())),
    }
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn simulated_clients_faults_and_power_cuts_lose_nothing_acknowledged() {
    let ops = env("SHOAL_SIM_OPS").unwrap_or(10_000);
    let started = Instant::now();
    let (first, deadline, count) = match (env("SHOAL_SIM_SEED"), env("SHOAL_SIM_SECONDS")) {
        (Some(seed), _) => (seed, None, 1),
        (None, Some(secs)) => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            (
                t % 1_000_000 * 1000,
                Some(Duration::from_secs(secs)),
                u64::MAX,
            )
        }
        (None, None) => (0, None, env("SHOAL_SIM_SEEDS").unwrap_or(6)),
    };
    let mut total = Stats::default();
    let mut failures = Vec::new();
    let mut seeds = 0;
    for seed in first..first.saturating_add(count) {
        if deadline.is_some_and(|d| started.elapsed() > d) {
            break;
        }
        match run_seed(seed, ops, Control::Honest) {
            Ok(s) => {
                if seed == first && !concurrent(seed) {
                    // The same seed again must do exactly the same device operations.
                    let again = run_seed(seed, ops, Control::Honest).expect("the same seed again");
                    assert_eq!(again, s, "seed {seed} does not replay exactly");
                }
                total.add(&s);
            }
            Err(e) => {
                let how = if concurrent(seed) {
                    " (a concurrent seed: the replay repeats its operations and faults; \
                     the crash points may fall elsewhere)"
                } else {
                    ""
                };
                eprintln!(
                    "simulator: seed {seed} failed: {e}\n  replay{how}: SHOAL_SIM_SEED={seed} \
                     SHOAL_SIM_OPS={ops} cargo test --release -p fs --test simulator"
                );
                failures.push(seed);
            }
        }
        seeds += 1;
    }
    println!(
        "simulator: {seeds} seeds, {} operations ({} reads verified, {} acknowledgements), \
         {} power cuts ({} more during recovery, of which {} in a log replay; {} during a \
         resilver; {} intent log replays), {} device \
         operations; faults: {} corruptions, {} read-error ranges, {} device deaths, {} \
         replacements, {} faulted devices cleared, {} scrubs ({} bytes repaired); the pool read around {} bad copies \
         and {} read errors; {} txgs, the intent logs went round their rings {:.1} times, \
         space maps condensed {} times or more; {} seeds concurrent; {:.1} s",
        total.ops,
        total.reads_verified,
        total.acks,
        total.crashes,
        total.crashes_in_recovery,
        total.cuts_in_replay,
        total.cuts_in_resilver,
        total.logs_replayed,
        total.device_ops,
        total.corruptions,
        total.read_faults,
        total.deaths,
        total.replaces,
        total.clears,
        total.scrubs,
        total.repaired_bytes,
        total.checksum_errors,
        total.read_errors,
        total.txgs,
        total.log_bytes as f64 / total.log_ring_bytes.max(1) as f64,
        total.space_map_condenses,
        total.concurrent_seeds,
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "failing seeds: {failures:?}");
    assert!(total.crashes > 0 && total.acks > 0 && total.reads_verified > 0);
}

/// The negative controls: the same simulator with flushes that lie on every device, or
/// with damage past the layout's redundancy, must report a failure for most seeds.
#[test]
fn the_simulator_reports_losses_when_a_protection_is_off() {
    for control in [Control::LyingFlushes, Control::OverBudget] {
        let seeds = 8;
        let failed: Vec<String> = (100..100 + seeds)
            .filter_map(|seed| run_seed(seed, 2_500, control).err())
            .collect();
        println!(
            "negative control {control:?}: {} of {seeds} seeds report a failure; first: {:?}",
            failed.len(),
            failed.first()
        );
        assert!(
            failed.len() as u64 * 2 > seeds,
            "{control:?}: only {} of {seeds} seeds failed",
            failed.len()
        );
    }
}
