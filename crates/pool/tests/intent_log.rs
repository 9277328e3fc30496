//! Crash tests for the intent log on the simulated device: a seeded workload of object
//! changes with log commits (fsync) and the odd txg commit runs until a crash clock
//! fires at a chosen device write or flush; unflushed writes are then kept, dropped or
//! torn, and the pool is imported. It must check clean and hold exactly the state after
//! some prefix of the workload that includes every change acknowledged by a log commit
//! or a sync: nothing acknowledged lost, nothing invented, nothing out of order. Every
//! crash point of every workload is tried, on RAID-Z (log in the pool's own area), a
//! mirror, and with a separate log device. After recovery the pool logs again, crashes
//! again, and must still have the new acknowledged write.
//!
//! `SHOAL_CRASH_SEEDS=N` runs N workloads per layout (default 4).

mod common;

use common::*;
use pool::checksum::ChecksumKind;
use pool::compress::Compression;
use pool::pool::{DeviceArg, TopArg};
use pool::{Pool, PoolError};
use std::collections::BTreeMap;
use std::sync::Arc;
use vdev::{CrashClock, CrashPolicy, Layout, SimDevice};

type Model = BTreeMap<u64, Vec<u8>>;

struct Run {
    /// The model after each change (index 0: before any).
    states: Vec<Model>,
    /// Index into `states` of the last acknowledged state.
    acked: usize,
    /// Every object id the workload created.
    ids: Vec<u64>,
}

fn workload(pool: &Pool, os: u64, seed: u64) -> Run {
    let mut rng = Rng(seed);
    let mut model: Model = BTreeMap::new();
    let mut run = Run {
        states: vec![model.clone()],
        acked: 0,
        ids: Vec::new(),
    };
    for _ in 0..24 {
        let objs: Vec<u64> = model.keys().copied().collect();
        let choice = rng.below(12);
        let r: Result<(), PoolError> = if objs.is_empty() || choice < 2 {
            let bs = [4096u32, 16384, 131072][rng.below(3) as usize];
            let comp = [Compression::Off, Compression::Lz4][rng.below(2) as usize];
            pool.create_object(os, 19, bs, comp, ChecksumKind::Fletcher4)
                .map(|o| {
                    model.insert(o, Vec::new());
                    run.ids.push(o);
                })
        } else {
            let obj = objs[rng.below(objs.len() as u64) as usize];
            match choice {
                2..=7 => {
                    let off = rng.below(300_000) as usize;
                    // Now and then a write long enough for its blocks to be placed.
                    let len = if choice == 7 {
                        1_100_000 + rng.below(200_000) as usize
                    } else {
                        1 + rng.below(40_000) as usize
                    };
                    let data = rng.mixed(len);
                    pool.write(os, obj, off as u64, &data).map(|_| {
                        let m = model.get_mut(&obj).unwrap();
                        if m.len() < off + len {
                            m.resize(off + len, 0);
                        }
                        m[off..off + len].copy_from_slice(&data);
                    })
                }
                8 | 9 => {
                    let m = model.get_mut(&obj).unwrap();
                    let off = rng.below(m.len() as u64 + 1) as usize;
                    let len = rng.below(100_000) as usize;
                    pool.free_range(os, obj, off as u64, len as u64).map(|_| {
                        let end = (off + len).min(m.len());
                        if off < end {
                            m[off..end].fill(0);
                        }
                    })
                }
                _ => pool.free_object(os, obj).map(|_| {
                    model.remove(&obj);
                }),
            }
        };
        if r.is_err() {
            return run;
        }
        run.states.push(model.clone());
        // Mostly log commits, now and then a txg, so replay meets both.
        let ack = match rng.below(10) {
            0..=4 => pool.log_commit().map(Some),
            5 => pool.sync().map(|_| Some(())),
            _ => Ok(None),
        };
        match ack {
            Ok(Some(())) => run.acked = run.states.len() - 1,
            Ok(None) => {}
            Err(_) => return run,
        }
    }
    run
}

fn matches(pool: &Pool, os: u64, ids: &[u64], model: &Model) -> bool {
    ids.iter().all(|obj| match model.get(obj) {
        Some(data) => pool
            .read(os, *obj, 0, data.len())
            .is_ok_and(|got| got == *data),
        None => matches!(pool.read(os, *obj, 0, 1), Err(PoolError::NotFound(_))),
    })
}

#[derive(Clone, Copy, Debug)]
enum Setup {
    /// Log in the pool's own area.
    Pool(Layout, usize),
    /// Same data layout plus one log device.
    LogDevice(Layout, usize),
}

struct Totals {
    points: u64,
    replayed_points: u64,
    blocks_written: u64,
    blocks_placed: u64,
}

fn devices(setup: Setup, seed: u64, clock: &Arc<CrashClock>) -> Vec<Arc<SimDevice>> {
    let n = match setup {
        Setup::Pool(_, n) => n,
        Setup::LogDevice(_, n) => n + 1,
    };
    sim_devices(n, seed, Some(clock.clone()))
}

fn split(setup: Setup, devs: &[Arc<SimDevice>]) -> (Vec<TopArg>, Vec<DeviceArg>) {
    let all = args(devs);
    match setup {
        Setup::Pool(layout, _) => (
            vec![TopArg {
                layout,
                devices: all,
            }],
            vec![],
        ),
        Setup::LogDevice(layout, n) => (
            vec![TopArg {
                layout,
                devices: all[..n].to_vec(),
            }],
            all[n..].to_vec(),
        ),
    }
}

fn run(setup: Setup, seeds: u64) -> Totals {
    let o = opts();
    let create = |devs: &[Arc<SimDevice>]| {
        let (tops, log) = split(setup, devs);
        let pool = Pool::create("tank", tops, log, vec![], o.clone()).expect("create pool");
        let os = pool.create_objset("tank/log", "{}").unwrap();
        pool.sync().unwrap();
        (pool, os)
    };
    let mut t = Totals {
        points: 0,
        replayed_points: 0,
        blocks_written: 0,
        blocks_placed: 0,
    };
    for seed in 0..seeds {
        let clock = CrashClock::new();
        let devs = devices(setup, seed, &clock);
        let (pool, os) = create(&devs);
        let start = clock.ops();
        workload(&pool, os, seed);
        let total = clock.ops() - start;
        t.blocks_written += pool.intent_log_stats().blocks_written;
        t.blocks_placed += pool.intent_log_stats().blocks_placed;
        drop(pool);

        for point in 1..=total {
            let clock = CrashClock::new();
            let devs = devices(setup, seed, &clock);
            let (pool, os) = create(&devs);
            clock.arm(point);
            let run = workload(&pool, os, seed);
            drop(pool);
            let policy = crash_policy(point);
            let after: Vec<Arc<SimDevice>> = devs.iter().map(|d| d.restart(policy)).collect();
            let (tops, log) = split(setup, &after);
            let mut all: Vec<DeviceArg> = tops.into_iter().flat_map(|t| t.devices).collect();
            all.extend(log);
            let pool = Pool::import(all, Some("tank"), o.clone()).expect("import pool");
            let report = pool.check().unwrap();
            assert!(
                report.problems.is_empty(),
                "{setup:?} seed {seed} point {point}: check found {:?}",
                report.problems
            );
            let found = (run.acked..run.states.len())
                .rev()
                .find(|&k| matches(&pool, os, &run.ids, &run.states[k]));
            assert!(
                found.is_some(),
                "{setup:?} seed {seed} crash point {point}/{total}: the pool holds no state at \
                 or after the last acknowledged change (state {} of {})",
                run.acked,
                run.states.len() - 1
            );
            if pool.intent_log_stats().records_replayed > 0 {
                t.replayed_points += 1;
            }
            assert_eq!(pool.intent_log_stats().replay_failures, 0);

            // The recovered pool logs again; a second crash keeps the new write.
            let obj = pool
                .create_object(os, 19, 4096, Compression::Off, ChecksumKind::Blake3)
                .unwrap();
            pool.write(os, obj, 0, b"after the crash").unwrap();
            pool.log_commit().unwrap();
            drop(pool);
            let again: Vec<Arc<SimDevice>> = after
                .iter()
                .map(|d| d.restart(CrashPolicy::DropAll))
                .collect();
            let pool = Pool::import(args(&again), Some("tank"), o.clone()).expect("reimport");
            assert_eq!(
                pool.read(os, obj, 0, 15).unwrap(),
                b"after the crash",
                "{setup:?} seed {seed} point {point}: the write logged after recovery is lost"
            );
            assert!(pool.check().unwrap().problems.is_empty());
            t.points += 1;
        }
    }
    t
}

fn seeds() -> u64 {
    std::env::var("SHOAL_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4)
}

fn report(name: &str, t: &Totals) {
    println!(
        "{name}: {} crash points, {} of them replayed the log, {} log blocks written and {} \
         data blocks placed per workload",
        t.points, t.replayed_points, t.blocks_written, t.blocks_placed
    );
    // The log really was written and really was replayed: otherwise this test would
    // only be testing txg commits.
    assert!(t.blocks_written > 0, "{name}: nothing went to the log");
    assert!(
        t.replayed_points > 0,
        "{name}: no crash point needed replay"
    );
}

#[test]
fn log_crash_at_every_point_raidz2() {
    let t = run(Setup::Pool(Layout::RaidZ { nparity: 2 }, 4), seeds());
    report("raidz2, pool log area", &t);
    assert!(t.points > 300);
    assert!(t.blocks_placed > 0, "no write was logged by pointer");
}

#[test]
fn log_crash_at_every_point_mirror() {
    let t = run(Setup::Pool(Layout::Mirror, 2), seeds());
    report("mirror, pool log area", &t);
    assert!(t.points > 200);
    assert!(t.blocks_placed > 0, "no write was logged by pointer");
}

#[test]
fn log_crash_at_every_point_log_device() {
    let t = run(Setup::LogDevice(Layout::Disk, 1), seeds());
    report("disk + log device", &t);
    assert!(t.points > 100);
    assert_eq!(
        t.blocks_placed, 0,
        "with a log device everything is copied to it"
    );
}

/// The log commit does not commit a txg: after an fsync-style commit the pool's synced
/// txg is unchanged, and the change is back after a crash anyway.
#[test]
fn log_commit_does_not_force_a_txg() {
    let devs = sim_devices(3, 7, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let os = pool.create_objset("tank/a", "{}").unwrap();
    pool.sync().unwrap();
    let before = pool.synced_txg();
    let obj = pool
        .create_object(os, 19, 131072, Compression::Off, ChecksumKind::Blake3)
        .unwrap();
    let data = Rng(3).bytes(300_000);
    pool.write(os, obj, 1000, &data).unwrap();
    pool.log_commit().unwrap();
    assert_eq!(pool.synced_txg(), before, "the log commit forced a txg");
    let stats = pool.intent_log_stats();
    assert_eq!(stats.txg_fallbacks, 0);
    assert!(stats.blocks_written >= 2, "a 300 KB write spans log blocks");
    assert_eq!(stats.blocks_placed, 0, "a commit this small copies");
    drop(pool);
    let after: Vec<Arc<SimDevice>> = devs
        .iter()
        .map(|d| d.restart(CrashPolicy::DropAll))
        .collect();
    let pool = Pool::import(args(&after), Some("tank"), opts()).unwrap();
    assert_eq!(pool.synced_txg(), before + 1, "replay commits one txg");
    assert_eq!(pool.read(os, obj, 1000, data.len()).unwrap(), data);
    assert_eq!(pool.read(os, obj, 0, 1000).unwrap(), vec![0u8; 1000]);
    assert!(pool.intent_log_stats().records_replayed >= 2);
    assert!(pool.check().unwrap().problems.is_empty());
}

/// A batch larger than half the ring goes to a txg instead, and wrapping the ring many
/// times over keeps working.
#[test]
fn large_batches_fall_back_and_the_ring_wraps() {
    let devs = sim_devices(2, 9, None);
    let pool = create_pool(Layout::Mirror, &devs);
    let os = pool.create_objset("tank/a", "{}").unwrap();
    let obj = pool
        .create_object(os, 19, 131072, Compression::Off, ChecksumKind::Blake3)
        .unwrap();
    let ring = pool.intent_log_stats().ring_bytes;
    assert!(ring >= 1 << 20, "ring of {ring} bytes");
    let big = Rng(1).bytes(ring as usize);
    // Written in pieces too short to be placed, so all of it would be copied.
    for (i, piece) in big.chunks(16384).enumerate() {
        pool.write(os, obj, (i * 16384) as u64, piece).unwrap();
    }
    pool.log_commit().unwrap();
    assert_eq!(pool.intent_log_stats().txg_fallbacks, 1);
    // Many small commits: several passes over the ring, with txgs now and then.
    let mut rng = Rng(2);
    let mut model = big.clone();
    for i in 0..400u64 {
        let off = rng.below(model.len() as u64 - 40_000) as usize;
        let data = rng.bytes(30_000);
        pool.write(os, obj, off as u64, &data).unwrap();
        model[off..off + data.len()].copy_from_slice(&data);
        pool.log_commit().unwrap();
        if i % 97 == 96 {
            pool.sync().unwrap();
        }
    }
    let stats = pool.intent_log_stats();
    assert!(
        stats.bytes_written > 3 * ring,
        "{} bytes logged in a ring of {ring}",
        stats.bytes_written
    );
    drop(pool);
    let after: Vec<Arc<SimDevice>> = devs
        .iter()
        .map(|d| d.restart(CrashPolicy::DropAll))
        .collect();
    let pool = Pool::import(args(&after), Some("tank"), opts()).unwrap();
    assert_eq!(pool.read(os, obj, 0, model.len()).unwrap(), model);
    assert!(pool.check().unwrap().problems.is_empty());
}

/// Without a log device, the whole blocks of a long write go to their final place and
/// the log names them by pointer; the partial blocks at either end are copied. A block
/// placed twice in one txg keeps only the newer placement, a txg commit adopts placed
/// blocks without writing them again, and after a crash replay brings them back. No
/// space leaks either way.
#[test]
fn long_writes_are_placed_and_logged_by_pointer() {
    for crash_before_sync in [true, false] {
        let devs = sim_devices(3, 11, None);
        let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
        let os = pool.create_objset("tank/a", "{}").unwrap();
        let obj = pool
            .create_object(os, 19, 131072, Compression::Off, ChecksumKind::Blake3)
            .unwrap();
        pool.sync().unwrap();
        let mut rng = Rng(5);
        let mut model = rng.bytes(1000 + 8 * 131072);
        model[..1000].fill(0);
        pool.write(os, obj, 1000, &model[1000..]).unwrap();
        pool.log_commit().unwrap();
        let stats = pool.intent_log_stats();
        assert_eq!(stats.blocks_placed, 7, "whole blocks 1..8 are placed");
        assert!(
            stats.bytes_written < 3 * 131072,
            "{} log bytes: only the two partial blocks are copied",
            stats.bytes_written
        );
        // Blocks 3..11 in the same txg: placed anew, the old placements let go.
        let again = rng.bytes(8 * 131072);
        pool.write(os, obj, 3 * 131072, &again).unwrap();
        model.resize(11 * 131072, 0);
        model[3 * 131072..].copy_from_slice(&again);
        pool.log_commit().unwrap();
        assert_eq!(pool.intent_log_stats().blocks_placed, 15);
        assert_eq!(pool.intent_log_stats().txg_fallbacks, 0);
        if !crash_before_sync {
            let data_bytes = || {
                pool.storage
                    .counters
                    .logical_bytes_written
                    .load(std::sync::atomic::Ordering::Relaxed)
            };
            let written = data_bytes();
            pool.sync().unwrap();
            let by_sync = data_bytes() - written;
            assert!(
                by_sync < 4 * 131072,
                "the txg rewrote placed blocks ({by_sync} bytes written)"
            );
            assert!(pool.check().unwrap().problems.is_empty());
        }
        drop(pool);
        let after: Vec<Arc<SimDevice>> = devs
            .iter()
            .map(|d| d.restart(CrashPolicy::DropAll))
            .collect();
        let pool = Pool::import(args(&after), Some("tank"), opts()).unwrap();
        assert_eq!(pool.read(os, obj, 0, model.len()).unwrap(), model);
        assert_eq!(pool.intent_log_stats().replay_failures, 0);
        if crash_before_sync {
            assert!(pool.intent_log_stats().records_replayed >= 17);
        }
        let report = pool.check().unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}

/// A new pool writes the holes of its log rings on file devices once (zeros), and an
/// import fills any the ring has again, so log writes land on allocated blocks and no
/// flush waits for the file system to allocate them.
#[test]
fn log_rings_on_file_devices_are_filled_at_creation_and_import() {
    use std::os::unix::fs::MetadataExt;
    let base = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target");
    std::fs::create_dir_all(base).unwrap();
    let dir = tempfile::tempdir_in(base).unwrap();
    let size: u64 = 64 << 20;
    let dev = |name: &str| DeviceArg {
        path: name.to_string(),
        device: Arc::new(vdev::FileDevice::create(dir.path().join(name), size).unwrap()),
    };
    let allocated = |name: &str| std::fs::metadata(dir.path().join(name)).unwrap().blocks() * 512;
    let pool = Pool::create(
        "tank",
        vec![TopArg {
            layout: Layout::Mirror,
            devices: vec![dev("a"), dev("b")],
        }],
        vec![dev("log")],
        vec![],
        opts(),
    )
    .unwrap();
    // The log device's ring is all of it but its labels.
    assert!(
        allocated("log") >= size * 9 / 10,
        "{} bytes",
        allocated("log")
    );
    assert_eq!(pool.intent_log_stats().ring, "log devices");
    // And the log works on it: a committed write survives a stop without a txg.
    let os = pool.create_objset("tank/fs", "{}").unwrap();
    pool.sync().unwrap();
    let obj = new_file(&pool, os, 4096, Compression::Off);
    pool.write(os, obj, 0, b"logged").unwrap();
    pool.log_commit().unwrap();
    drop(pool); // no export, no txg
                // A ring gone sparse (a pool made before rings were preallocated, or a replaced
                // device): import fills it again, around the chain it replays.
    let punched = std::process::Command::new("fallocate")
        .args(["--punch-hole", "--offset", &(size / 2).to_string()])
        .args(["--length", &(size / 4).to_string()])
        .arg(dir.path().join("log"))
        .status()
        .unwrap();
    assert!(punched.success());
    assert!(allocated("log") < size * 3 / 4 + (1 << 20));
    let reopen = |name: &str| DeviceArg {
        path: name.to_string(),
        device: Arc::new(vdev::FileDevice::open(dir.path().join(name)).unwrap()),
    };
    let pool = Pool::import(
        vec![reopen("a"), reopen("b"), reopen("log")],
        Some("tank"),
        opts(),
    )
    .unwrap();
    assert!(pool.intent_log_stats().records_replayed > 0);
    assert_eq!(pool.read(os, obj, 0, 6).unwrap(), b"logged");
    assert!(
        allocated("log") >= size * 9 / 10,
        "{} bytes after import",
        allocated("log")
    );
}

/// With several replicas a commit writes the first one itself and the others on their
/// workers (the parallel path the daemon runs): with the first replica dead, committed
/// writes are still durable on the others and replay from them.
#[test]
fn parallel_log_commits_survive_a_dead_first_replica() {
    let devs = sim_devices(3, 77, None);
    let parallel = pool::PoolOptions {
        deterministic_io: false,
        ..opts()
    };
    let pool = create_pool_with(Layout::Mirror, &devs, parallel.clone());
    let os = pool.create_objset("tank/fs", "{}").unwrap();
    pool.sync().unwrap();
    let obj = new_file(&pool, os, 4096, Compression::Off);
    pool.write(os, obj, 0, b"first").unwrap();
    pool.log_commit().unwrap();
    devs[0].inject(vdev::Fault::Dead);
    pool.write(os, obj, 4096, b"second").unwrap();
    pool.log_commit().unwrap();
    let stats = pool.intent_log_stats();
    assert_eq!(stats.ring, "pool");
    assert_eq!(
        stats.txg_fallbacks, 0,
        "the live replicas took both commits"
    );
    drop(pool); // no export, no txg
    let pool = Pool::import(args(&devs), Some("tank"), parallel).unwrap();
    assert!(pool.intent_log_stats().records_replayed > 0);
    assert_eq!(pool.read(os, obj, 0, 5).unwrap(), b"first");
    assert_eq!(pool.read(os, obj, 4096, 6).unwrap(), b"second");
}

/// `pool check` reads the intent log chain as import would. A clean pool whose last
/// acknowledged write lives only in the log says so (blocks and records to replay);
/// with the log device wiped under it, the same check reports the acknowledged block
/// that an import would no longer find.
#[test]
fn check_reports_acknowledged_log_blocks_that_import_would_not_find() {
    use vdev::Device;
    let devs = sim_devices(3, 41, None);
    let all = args(&devs);
    let pool = Pool::create(
        "tank",
        vec![TopArg {
            layout: Layout::Mirror,
            devices: all[..2].to_vec(),
        }],
        all[2..].to_vec(),
        vec![],
        opts(),
    )
    .unwrap();
    let os = pool.create_objset("tank/fs", "{}").unwrap();
    let obj = new_file(&pool, os, 4096, Compression::Off);
    pool.sync().unwrap();
    pool.write(os, obj, 0, &[7u8; 8192]).unwrap();
    pool.log_commit().unwrap();
    let clean = pool.check().unwrap();
    assert!(clean.problems.is_empty(), "{:?}", clean.problems);
    assert!(
        clean.log_blocks > 0 && clean.log_records_to_replay > 0,
        "the check did not read the log: {clean:?}"
    );
    assert!(
        clean.space_map_blocks > 0 && clean.space_map_bytes > 0,
        "{clean:?}"
    );
    let log = &devs[2];
    let (start, len) = vdev::label::data_area(log.size_bytes());
    log.corrupt_range(start, len / 4096 * 4096, 5);
    let report = pool.check().unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("not on the chain")),
        "wiped log not reported: {:?}",
        report.problems
    );
}
