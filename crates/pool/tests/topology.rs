//! Changing an imported pool's devices: a vdev added, a mirror side attached and
//! detached, a device taken offline and online, log and cache devices added and
//! removed. Each change is checked for what it promises (capacity, redundancy, where
//! the log lives, what import finds) and crash-tested at every device operation: after
//! a crash at any point the pool imports from all its devices, checks clean and holds
//! every acknowledged write, including writes only the intent log held when the change
//! began. The log-device changes have a negative control: without moving the log's
//! chain first, the same harness reports acknowledged writes lost.

mod common;

use common::*;
use pool::compress::Compression;
use pool::pool::TopArg;
use pool::{Pool, PoolError, PoolOptions};
use std::collections::BTreeMap;
use std::sync::Arc;
use vdev::{CrashClock, Fault, Health, Layout, SimDevice};

type Model = BTreeMap<u64, Vec<u8>>;

fn write_files(pool: &Pool, os: u64, seed: u64, sizes: &[usize]) -> Model {
    let mut rng = Rng(seed);
    let mut model = Model::new();
    for &len in sizes {
        let obj = new_file(pool, os, 16384, Compression::Lz4);
        let data = rng.mixed(len);
        pool.write(os, obj, 0, &data).unwrap();
        model.insert(obj, data);
    }
    model
}

fn holds(pool: &Pool, os: u64, model: &Model) -> bool {
    model
        .iter()
        .all(|(obj, data)| pool.read(os, *obj, 0, data.len()).is_ok_and(|d| d == *data))
}

fn layouts(pool: &Pool) -> Vec<(String, usize)> {
    pool.status()
        .vdevs
        .iter()
        .map(|t| (t.layout.clone(), t.children.len()))
        .collect()
}

#[test]
fn a_pool_grows_by_a_vdev_that_takes_new_blocks_and_survives_import() {
    let devs = sim_devices(4, 71, None);
    let pool = create_pool(Layout::Mirror, &devs[..2]);
    let os = pool.create_objset("tank/data", "{}").unwrap();
    let mut model = write_files(&pool, os, 71, &[2 << 20]);
    pool.sync().unwrap();
    let before = pool.status().capacity_bytes;

    // A wrong vdev is refused and changes nothing; a device of the pool too.
    let one = TopArg {
        layout: Layout::Mirror,
        devices: vec![device_arg("sim2", &devs[2])],
    };
    assert!(matches!(
        pool.add_vdev(one),
        Err(PoolError::InvalidArgument(_))
    ));
    let taken = TopArg {
        layout: Layout::Mirror,
        devices: vec![device_arg("sim0", &devs[0]), device_arg("sim2", &devs[2])],
    };
    assert!(matches!(pool.add_vdev(taken), Err(PoolError::Exists(_))));
    assert_eq!(layouts(&pool).len(), 1);

    pool.add_vdev(TopArg {
        layout: Layout::Mirror,
        devices: vec![device_arg("sim2", &devs[2]), device_arg("sim3", &devs[3])],
    })
    .unwrap();
    let st = pool.status();
    assert_eq!(st.vdevs.len(), 2);
    assert!(
        st.capacity_bytes > before + before / 2,
        "{} -> {}",
        before,
        st.capacity_bytes
    );
    // New writes spread over both vdevs.
    model.extend(write_files(&pool, os, 72, &[4 << 20, 300_000]));
    pool.sync().unwrap();
    let st = pool.status();
    assert!(
        st.vdevs[1].free_bytes < st.vdevs[1].capacity_bytes - (1 << 20),
        "the new vdev took no blocks: {:?}",
        st.vdevs[1]
    );
    assert!(holds(&pool, os, &model));

    pool.export().unwrap();
    drop(pool);
    let pool = import(&devs);
    assert_eq!(layouts(&pool).len(), 2);
    assert!(holds(&pool, os_of(&pool), &model));
    let report = pool.check().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

fn os_of(pool: &Pool) -> u64 {
    pool.objset_id("tank/data").unwrap()
}

#[test]
fn an_attached_side_holds_every_block_and_a_detached_one_leaves_the_pool() {
    let devs = sim_devices(2, 73, None);
    let pool = create_pool(Layout::Disk, &devs[..1]);
    let os = pool.create_objset("tank/data", "{}").unwrap();
    let model = write_files(&pool, os, 73, &[3 << 20, 70_000]);
    pool.sync().unwrap();

    let summary = pool
        .attach("sim0", device_arg("sim1", &devs[1]), &|_| {})
        .unwrap();
    assert_eq!(summary.errors, 0);
    // Every allocated block of the vdev (the data is compressible: less than 3 MiB).
    assert!(summary.bytes_written >= 1 << 20, "{summary:?}");
    assert_eq!(layouts(&pool), vec![("mirror".to_string(), 2)]);
    assert_eq!(pool.health(), Health::Online);
    pool.export().unwrap();
    drop(pool);

    // The original disk dies: the attached side alone holds everything.
    devs[0].inject(Fault::Dead);
    let pool = Pool::import(args(&devs), Some("tank"), opts()).unwrap();
    assert_eq!(pool.health(), Health::Degraded);
    assert!(holds(&pool, os, &model));

    // The dead side is detached: a plain disk again, whole, and the pool imports
    // from the survivor alone.
    assert!(matches!(
        pool.detach("sim1"),
        Err(PoolError::InvalidArgument(_))
    ));
    pool.detach("sim0").unwrap();
    assert_eq!(layouts(&pool), vec![("disk".to_string(), 1)]);
    assert_eq!(pool.health(), Health::Online);
    assert!(matches!(
        pool.detach("sim1"),
        Err(PoolError::InvalidArgument(_))
    ));
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import(vec![device_arg("sim1", &devs[1])], Some("tank"), opts()).unwrap();
    assert!(holds(&pool, os, &model));
    assert!(pool.check().unwrap().problems.is_empty());
}

#[test]
fn without_the_attach_losing_the_original_disk_loses_the_pool() {
    // Negative control of the test above: the same pool and loss, no attach.
    let devs = sim_devices(2, 73, None);
    let pool = create_pool(Layout::Disk, &devs[..1]);
    let os = pool.create_objset("tank/data", "{}").unwrap();
    write_files(&pool, os, 73, &[3 << 20]);
    pool.export().unwrap();
    drop(pool);
    devs[0].inject(Fault::Dead);
    assert!(Pool::import(args(&devs), Some("tank"), opts()).is_err());
}

#[test]
fn an_offline_device_misses_writes_stays_offline_across_import_and_online_resilvers_it() {
    let devs = sim_devices(2, 75, None);
    let pool = create_pool(Layout::Mirror, &devs);
    let os = pool.create_objset("tank/data", "{}").unwrap();
    let mut model = write_files(&pool, os, 75, &[1 << 20]);
    pool.sync().unwrap();

    pool.offline("sim1").unwrap();
    assert_eq!(pool.health(), Health::Degraded);
    assert!(matches!(
        pool.offline("sim0"),
        Err(PoolError::InvalidArgument(_))
    ));
    assert!(matches!(
        pool.online("sim0", &|_| {}),
        Err(PoolError::InvalidArgument(_))
    ));
    let writes_before = devs[1].stats().writes;
    model.extend(write_files(&pool, os, 76, &[2 << 20]));
    pool.sync().unwrap();
    assert_eq!(
        devs[1].stats().writes,
        writes_before,
        "an offline device was written"
    );
    pool.export().unwrap();
    drop(pool);

    let pool = import(&devs);
    let st = pool.status();
    assert_eq!(st.vdevs[0].children[1].health, "OFFLINE");
    let summary = pool.online("sim1", &|_| {}).unwrap();
    assert_eq!(summary.errors, 0);
    assert_eq!(pool.health(), Health::Online);
    pool.export().unwrap();
    drop(pool);

    // The device that was offline now holds everything, the writes it missed too.
    devs[0].inject(Fault::Dead);
    let pool = Pool::import(args(&devs), Some("tank"), opts()).unwrap();
    assert!(holds(&pool, os, &model));
    assert!(pool.check().unwrap().problems.is_empty());
}

#[test]
fn log_and_cache_devices_come_and_go_while_imported() {
    let devs = sim_devices(4, 77, None);
    let pool = create_pool(Layout::Mirror, &devs[..2]);
    let os = pool.create_objset("tank/data", "{}").unwrap();
    assert_eq!(pool.status().intent_log.ring, "pool");

    pool.add_log(device_arg("log0", &devs[2])).unwrap();
    let st = pool.status();
    assert_eq!(st.log.len(), 1);
    assert_eq!(st.intent_log.ring, "log devices");
    // A synchronous write now goes to the log device.
    let log_writes = devs[2].stats().writes;
    let model = write_files(&pool, os, 77, &[20_000]);
    pool.log_commit().unwrap();
    assert!(
        devs[2].stats().writes > log_writes,
        "nothing logged on the log device"
    );

    pool.add_cache(device_arg("cache0", &devs[3])).unwrap();
    assert_eq!(pool.status().cache.len(), 1);
    assert!(pool.status().l2arc.is_some());
    assert!(matches!(
        pool.remove_cache("nope"),
        Err(PoolError::NotFound(_))
    ));

    pool.export().unwrap();
    drop(pool);
    let pool = import(&devs);
    let st = pool.status();
    assert_eq!((st.log.len(), st.cache.len()), (1, 1));
    assert!(holds(&pool, os, &model));

    // Import named the devices by where it found them.
    pool.remove_log("sim2").unwrap();
    pool.remove_cache("sim3").unwrap();
    let st = pool.status();
    assert_eq!((st.log.len(), st.cache.len()), (0, 0));
    assert_eq!(st.intent_log.ring, "pool");
    // Both are free devices again: a new pool may take them.
    pool.export().unwrap();
    drop(pool);
    let other = Pool::create(
        "other",
        vec![TopArg {
            layout: Layout::Mirror,
            devices: vec![device_arg("log0", &devs[2]), device_arg("cache0", &devs[3])],
        }],
        vec![],
        vec![],
        opts(),
    )
    .unwrap();
    drop(other);
    let pool = Pool::import(args(&devs[..2]), Some("tank"), opts()).unwrap();
    assert!(holds(&pool, os, &model));
}

/// One crash test's world: the pool's devices (all on one crash clock), any device
/// the change brings in, and what the pool must hold.
struct Scene {
    devs: Vec<Arc<SimDevice>>,
    pool: Arc<Pool>,
    os: u64,
    /// Acknowledged: by a sync, or by a log commit only (in the intent log when the
    /// change begins).
    model: Model,
}

#[derive(Clone, Copy, Debug)]
enum Change {
    AddVdev,
    Attach,
    Detach,
    Offline,
    Online,
    AddLog,
    RemoveLog,
    AddCache,
    RemoveCache,
}

/// devs[0..2] a mirror (devs[0] alone for `Attach`), devs[2] a log device for
/// `RemoveLog`, a cache device for `RemoveCache`; devs[2..4] free otherwise.
fn scene(change: Change, clock: &Arc<CrashClock>, o: &PoolOptions) -> Scene {
    let devs = sim_devices(4, 81, Some(clock.clone()));
    let (layout, data) = match change {
        Change::Attach => (Layout::Disk, &devs[..1]),
        _ => (Layout::Mirror, &devs[..2]),
    };
    let log = match change {
        Change::RemoveLog => vec![device_arg("sim2", &devs[2])],
        _ => vec![],
    };
    let cache = match change {
        Change::RemoveCache => vec![device_arg("sim2", &devs[2])],
        _ => vec![],
    };
    let pool = Pool::create(
        "tank",
        vec![TopArg {
            layout,
            devices: args(data),
        }],
        log,
        cache,
        o.clone(),
    )
    .unwrap();
    let os = pool.create_objset("tank/data", "{}").unwrap();
    let mut model = write_files(&pool, os, 81, &[200_000, 5_000]);
    pool.sync().unwrap();
    if let Change::Online = change {
        pool.offline("sim1").unwrap();
        model.extend(write_files(&pool, os, 82, &[60_000]));
        pool.sync().unwrap();
    }
    // Acknowledged by the intent log alone.
    model.extend(write_files(&pool, os, 83, &[30_000, 3_000]));
    pool.log_commit().unwrap();
    Scene {
        devs,
        pool,
        os,
        model,
    }
}

fn apply(change: Change, s: &Scene) -> Result<(), PoolError> {
    let (pool, d) = (&s.pool, &s.devs);
    match change {
        Change::AddVdev => pool.add_vdev(TopArg {
            layout: Layout::Mirror,
            devices: vec![device_arg("sim2", &d[2]), device_arg("sim3", &d[3])],
        }),
        Change::Attach => pool
            .attach("sim0", device_arg("sim1", &d[1]), &|_| {})
            .map(|_| ()),
        Change::Detach => pool.detach("sim1"),
        Change::Offline => pool.offline("sim1"),
        Change::Online => pool.online("sim1", &|_| {}).map(|_| ()),
        Change::AddLog => pool.add_log(device_arg("sim2", &d[2])),
        Change::RemoveLog => pool.remove_log("sim2"),
        Change::AddCache => pool.add_cache(device_arg("sim2", &d[2])),
        Change::RemoveCache => pool.remove_cache("sim2"),
    }
}

struct Tally {
    points: u64,
    /// Crash points after which an acknowledged write was missing (or the pool did
    /// not import, or did not check clean).
    losses: Vec<String>,
}

/// Crashes `change` at every device operation it issues, and once just after it
/// returned; imports from every device each time.
fn crash_during(change: Change, o: &PoolOptions) -> Tally {
    let clock = CrashClock::new();
    let s = scene(change, &clock, o);
    let start = clock.ops();
    apply(change, &s).unwrap_or_else(|e| panic!("{change:?} without a crash: {e}"));
    let total = clock.ops() - start;
    drop(s);
    let mut tally = Tally {
        points: 0,
        losses: Vec::new(),
    };
    for point in 1..=total + 1 {
        let clock = CrashClock::new();
        let s = scene(change, &clock, o);
        if point <= total {
            clock.arm(point);
        }
        let _ = apply(change, &s);
        let Scene {
            devs,
            pool,
            os,
            model,
        } = s;
        drop(pool);
        let policy = crash_policy(point);
        let after: Vec<Arc<SimDevice>> = devs.iter().map(|d| d.restart(policy)).collect();
        let what = format!("{change:?}, crash point {point}/{total}");
        tally.points += 1;
        let pool = match Pool::import(args(&after), Some("tank"), opts()) {
            Ok(p) => p,
            Err(e) => {
                tally.losses.push(format!("{what}: import: {e}"));
                continue;
            }
        };
        let report = pool.check().unwrap();
        if !report.problems.is_empty() {
            tally.losses.push(format!("{what}: {:?}", report.problems));
        } else if !holds(&pool, os, &model) {
            tally
                .losses
                .push(format!("{what}: acknowledged writes missing"));
        }
    }
    tally
}

#[test]
fn a_crash_at_any_point_of_a_device_change_loses_nothing() {
    for change in [
        Change::AddVdev,
        Change::Attach,
        Change::Detach,
        Change::Offline,
        Change::Online,
        Change::AddLog,
        Change::RemoveLog,
        Change::AddCache,
        Change::RemoveCache,
    ] {
        let t = crash_during(change, &opts());
        eprintln!("{change:?}: {} crash points", t.points);
        assert!(t.points >= 3, "{change:?}: only {} crash points", t.points);
        assert!(t.losses.is_empty(), "{:#?}", t.losses);
    }
}

#[test]
fn removing_a_log_device_without_moving_the_chain_loses_acknowledged_writes() {
    // Negative control: the same harness with the chain left on the device.
    let o = PoolOptions {
        move_log_chain: false,
        ..opts()
    };
    let t = crash_during(Change::RemoveLog, &o);
    eprintln!(
        "{} of {} crash points lost writes: {:?}",
        t.losses.len(),
        t.points,
        t.losses.first()
    );
    assert!(
        !t.losses.is_empty(),
        "no loss found at {} crash points: the harness cannot see it",
        t.points
    );
}
