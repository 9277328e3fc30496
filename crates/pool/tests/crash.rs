//! Crash tests on the simulated device: a seeded workload runs until a crash clock fires
//! at a chosen write or flush; every unflushed write is then kept, dropped, torn, or
//! mangled (sectors of garbage, tears inside a sector: `CrashPolicy::Hostile`); the
//! pool is imported and must (1) check clean, (2) hold exactly the contents of the last
//! acknowledged sync or of the sync that was in flight, never anything else, and (3) keep
//! working. Every crash point of each workload is tried, so a run covers thousands.
//!
//! `SHOAL_CRASH_SEEDS=N` runs N workloads per layout (default 32: over 15,000 crash points
//! in all) for a longer soak;
//! `SHOAL_CRASH_SHOW_OPS=1` prints how many device operations each workload issued.

mod common;

use common::*;
use pool::compress::Compression;
use pool::PoolError;
use std::collections::BTreeMap;
use std::sync::Arc;
use vdev::{CrashClock, CrashPolicy, Layout, SimDevice};

type Model = BTreeMap<u64, Vec<u8>>;

/// One deterministic workload. Returns (acknowledged model, in-flight model) at the
/// moment the workload stopped (crash or end).
fn workload(pool: &pool::Pool, os: u64, seed: u64) -> (Model, Model) {
    let mut states = workload_with(pool, os, seed, false);
    let inflight = states.pop().unwrap();
    (states.swap_remove(0), inflight)
}

/// The workload of `workload`; with `ahead`, every other txg is prepared ahead
/// (`Pool::prepare_ahead_for_crash_tests`) and committed by the next sync after that
/// one's own txg is written, as the pipelined sync thread may order them. Returns the
/// states a crash may leave, oldest first: the acknowledged one, the one prepared
/// ahead (if any), the in-flight one.
fn workload_with(pool: &pool::Pool, os: u64, seed: u64, ahead: bool) -> Vec<Model> {
    let mut rng = Rng(seed);
    let mut model: Model = BTreeMap::new();
    let mut acked = model.clone();
    let mut prepared: Option<Model> = None;
    let states = |acked: Model, prepared: Option<Model>, model: Model| {
        std::iter::once(acked)
            .chain(prepared)
            .chain(std::iter::once(model))
            .collect::<Vec<_>>()
    };
    for txg in 0..4 {
        let ops = 1 + rng.below(6);
        for _ in 0..ops {
            let objs: Vec<u64> = model.keys().copied().collect();
            let choice = rng.below(10);
            let r: Result<(), PoolError> = if objs.is_empty() || choice < 2 {
                let bs = [4096u32, 16384, 131072][rng.below(3) as usize];
                let comp = if rng.below(2) == 0 {
                    Compression::Off
                } else {
                    Compression::Lz4
                };
                match pool.create_object(os, 19, bs, comp, pool::checksum::ChecksumKind::Fletcher4)
                {
                    Ok(o) => {
                        model.insert(o, Vec::new());
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            } else {
                let obj = objs[rng.below(objs.len() as u64) as usize];
                match choice {
                    2..=6 => {
                        let off = rng.below(600_000) as usize;
                        let len = 1 + rng.below(150_000) as usize;
                        let data = rng.mixed(len);
                        let r = pool.write(os, obj, off as u64, &data);
                        if r.is_ok() {
                            let m = model.get_mut(&obj).unwrap();
                            if m.len() < off + len {
                                m.resize(off + len, 0);
                            }
                            m[off..off + len].copy_from_slice(&data);
                        }
                        r
                    }
                    7 | 8 => {
                        let m = model.get_mut(&obj).unwrap();
                        let off = rng.below(m.len() as u64 + 1) as usize;
                        let len = rng.below(300_000) as usize;
                        let r = pool.free_range(os, obj, off as u64, len as u64);
                        if r.is_ok() {
                            let end = (off + len).min(m.len());
                            if off < end {
                                m[off..end].fill(0);
                            }
                        }
                        r
                    }
                    _ => {
                        let r = pool.free_object(os, obj);
                        if r.is_ok() {
                            model.remove(&obj);
                        }
                        r
                    }
                }
            };
            if r.is_err() {
                return states(acked, prepared, model);
            }
        }
        if ahead && txg % 2 == 0 {
            match pool.prepare_ahead_for_crash_tests() {
                Ok(()) => prepared = Some(model.clone()),
                Err(_) => return states(acked, prepared, model),
            }
            // The next txg allocates from the lowest free space: whatever the
            // allocator deems free while this one commits is reused at once.
            pool.rewind_allocator_for_crash_tests();
            continue;
        }
        match pool.sync() {
            Ok(_) => {
                acked = model.clone();
                prepared = None;
            }
            Err(_) => return states(acked, prepared, model),
        }
    }
    states(acked, prepared, model)
}

/// Whether the pool holds exactly `model`: its objects with their bytes, and none of
/// the other states' objects that `model` lacks.
fn contents_match(pool: &pool::Pool, os: u64, model: &Model, states: &[Model]) -> bool {
    for obj in states.iter().flat_map(|m| m.keys()) {
        let got = match model.get(obj) {
            Some(data) => pool.read(os, *obj, 0, data.len()).ok().map(|g| g == *data),
            None => Some(matches!(
                pool.read(os, *obj, 0, 1),
                Err(PoolError::NotFound(_))
            )),
        };
        if got != Some(true) {
            return false;
        }
    }
    true
}

struct Outcome {
    points: u64,
    inflight_won: u64,
}

fn run_layout(layout: Layout, ndev: usize, seeds: u64) -> Outcome {
    run_layout_with(layout, ndev, seeds, true, &[])
}

fn run_layout_with(
    layout: Layout,
    ndev: usize,
    seeds: u64,
    deterministic: bool,
    liars: &[usize],
) -> Outcome {
    run_layout_ahead(layout, ndev, seeds, deterministic, liars, false)
}

/// `deterministic` false runs the production sync path (parallel compression and
/// per-leaf writers): crash points then differ run to run, and every one must hold.
/// `liars`: devices whose flushes report success and make nothing durable. `ahead`:
/// txgs prepared ahead of the previous one's commit (`workload_with`).
fn run_layout_ahead(
    layout: Layout,
    ndev: usize,
    seeds: u64,
    deterministic: bool,
    liars: &[usize],
    ahead: bool,
) -> Outcome {
    let mut o = opts();
    o.deterministic_io = deterministic;
    run_layout_opts(layout, ndev, seeds, &o, liars, ahead)
}

fn run_layout_opts(
    layout: Layout,
    ndev: usize,
    seeds: u64,
    o: &pool::PoolOptions,
    liars: &[usize],
    ahead: bool,
) -> Outcome {
    let o = o.clone();
    let create = |devs: &[Arc<SimDevice>]| create_pool(layout, devs, &o);
    let mut out = Outcome {
        points: 0,
        inflight_won: 0,
    };
    for seed in 0..seeds {
        // Dry run: how many device operations does the workload issue?
        let clock = CrashClock::new();
        let devs = sim_devices(ndev, seed, Some(clock.clone()));
        let pool = create(&devs);
        let os = pool.create_objset("tank/crash", "{}").unwrap();
        pool.sync().unwrap();
        // Liars lie from here on: the pool and its labels exist.
        for &i in liars {
            devs[i].inject(vdev::Fault::LyingFlush);
        }
        let start = clock.ops();
        workload_with(&pool, os, seed, ahead);
        let total = clock.ops() - start;
        drop(pool);
        if std::env::var("SHOAL_CRASH_SHOW_OPS").is_ok() {
            println!("{layout:?} seed {seed}: {total} device operations");
        }

        for point in 1..=total {
            let clock = CrashClock::new();
            let devs = sim_devices(ndev, seed, Some(clock.clone()));
            let pool = create(&devs);
            let os = pool.create_objset("tank/crash", "{}").unwrap();
            pool.sync().unwrap();
            // Liars lie from here on: the pool and its labels exist.
            for &i in liars {
                devs[i].inject(vdev::Fault::LyingFlush);
            }
            clock.arm(point);
            let states = workload_with(&pool, os, seed, ahead);
            drop(pool);
            let policy = [
                CrashPolicy::Random,
                CrashPolicy::Hostile,
                CrashPolicy::Hostile,
                CrashPolicy::DropAll,
                CrashPolicy::KeepAll,
            ][(point % 5) as usize];
            // With redundancy, every seventh crash also misdirects unflushed writes of
            // one device (a single device's firmware fault): the others must cover it.
            let misdirect = layout != Layout::Disk && point % 7 == 0;
            let after: Vec<Arc<SimDevice>> = devs
                .iter()
                .enumerate()
                .map(|(i, d)| match (misdirect, i) {
                    (true, 0) => d.restart(CrashPolicy::Misdirected),
                    _ => d.restart(policy),
                })
                .collect();
            let what = format!("{layout:?} seed {seed} crash point {point}/{total}");
            check_recovered(&after, &o, os, &states, &what, &mut out);
        }
    }
    out
}

fn create_pool(layout: Layout, devs: &[Arc<SimDevice>], o: &pool::PoolOptions) -> Arc<pool::Pool> {
    pool::Pool::create(
        "tank",
        vec![pool::pool::TopArg {
            layout,
            devices: args(devs),
        }],
        vec![],
        vec![],
        o.clone(),
    )
    .expect("create pool")
}

/// Imports `devs` after a crash and checks what every crash point must hold: the
/// pool imports and checks clean, its contents are the acknowledged or the in-flight
/// state, and it keeps working; counts the point in `out`.
fn check_recovered(
    devs: &[Arc<SimDevice>],
    o: &pool::PoolOptions,
    os: u64,
    states: &[Model],
    what: &str,
    out: &mut Outcome,
) {
    let pool = pool::Pool::import(args(devs), Some("tank"), o.clone())
        .unwrap_or_else(|e| panic!("{what}: import: {e}"));
    let report = pool.check().unwrap();
    assert!(
        report.problems.is_empty(),
        "{what}: check found {:?}",
        report.problems
    );
    let held = states
        .iter()
        .position(|m| contents_match(&pool, os, m, states));
    assert!(
        held.is_some(),
        "{what}: contents are neither the acknowledged nor the in-flight state"
    );
    if held != Some(0) {
        out.inflight_won += 1;
    }
    // The pool keeps working after the crash.
    let obj = pool
        .create_object(
            os,
            19,
            4096,
            Compression::Off,
            pool::checksum::ChecksumKind::Blake3,
        )
        .unwrap();
    pool.write(os, obj, 0, b"after the crash").unwrap();
    pool.sync().unwrap();
    assert_eq!(pool.read(os, obj, 0, 15).unwrap(), b"after the crash");
    assert!(pool.check().unwrap().problems.is_empty());
    out.points += 1;
}

/// Prints what a crash test tried and fails it if that is fewer points than `min`.
fn tested(what: &str, o: &Outcome, min: u64) {
    println!(
        "{what}: {} crash points tested, {} committed the in-flight txg",
        o.points, o.inflight_won
    );
    assert!(o.points > min, "{what}: only {} crash points", o.points);
}

fn seeds() -> u64 {
    std::env::var("SHOAL_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32)
}

#[test]
fn crash_at_every_point_raidz2() {
    let o = run_layout(Layout::RaidZ { nparity: 2 }, 4, seeds());
    tested("raidz2", &o, 500);
}

#[test]
fn crash_at_every_point_mirror() {
    let o = run_layout(Layout::Mirror, 2, seeds());
    tested("mirror", &o, 200);
}

#[test]
fn crash_at_every_point_single_disk() {
    let o = run_layout(Layout::Disk, 1, seeds());
    tested("disk", &o, 100);
}

#[test]
fn crash_at_every_point_parallel_sync_raidz1() {
    let o = run_layout_with(
        Layout::RaidZ { nparity: 1 },
        3,
        seeds().div_ceil(3),
        false,
        &[],
    );
    tested("raidz1, parallel sync", &o, 100);
}

#[test]
fn crash_at_every_point_mirror_with_one_device_ignoring_flushes() {
    let o = run_layout_with(Layout::Mirror, 2, seeds().div_ceil(4), true, &[1]);
    tested("mirror, one side ignoring flushes", &o, 100);
}

#[test]
fn crash_at_every_point_raidz1_with_one_device_ignoring_flushes() {
    let o = run_layout_with(
        Layout::RaidZ { nparity: 1 },
        3,
        seeds().div_ceil(4),
        true,
        &[0],
    );
    tested("raidz1, one device ignoring flushes", &o, 100);
}

/// The pipelined sync's order: a txg's blocks all written before the previous txg's
/// commit starts, then both commits in order. A crash anywhere leaves the last
/// acknowledged state, the state prepared ahead, or the one in flight.
#[test]
fn crash_at_every_point_with_txgs_prepared_ahead_raidz2_and_mirror() {
    let r = run_layout_ahead(
        Layout::RaidZ { nparity: 2 },
        4,
        seeds().div_ceil(2),
        true,
        &[],
        true,
    );
    tested("raidz2, txgs prepared ahead", &r, 250);
    let m = run_layout_ahead(Layout::Mirror, 2, seeds().div_ceil(2), true, &[], true);
    tested("mirror, txgs prepared ahead", &m, 100);
}

/// Its negative control: the same harness with freed space reusable as soon as its
/// txg is prepared (`release_frees_when_durable` off). A txg prepared ahead then
/// overwrites blocks the last durable tree still needs, and a crash before the
/// previous commit must show it.
#[test]
fn txgs_prepared_ahead_reusing_undurable_frees_are_caught() {
    assert_loss_caught(|| {
        let mut o = opts();
        o.release_frees_when_durable = false;
        run_layout_opts(Layout::Mirror, 2, 8, &o, &[], true)
    });
}

/// Runs a crash harness that must find a loss: a crash point whose pool does not
/// import, does not check clean, or holds neither acknowledged nor in-flight state.
fn assert_loss_caught(run: impl FnOnce() -> Outcome + std::panic::UnwindSafe) {
    let msg = match std::panic::catch_unwind(run) {
        Ok(o) => panic!(
            "{} crash points, none lost anything: the harness cannot see this loss",
            o.points
        ),
        Err(e) => e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    };
    println!("the harness caught: {msg}");
    assert!(
        ["neither the acknowledged", "check found", ": import: "]
            .iter()
            .any(|m| msg.contains(m)),
        "failed for another reason: {msg}"
    );
}

/// The negative control of the two above: when every device ignores flushes, nothing
/// is durable, and the same harness must find a crash point that loses what was
/// acknowledged (or a pool that does not come back).
#[test]
fn crash_with_every_device_ignoring_flushes_is_caught() {
    assert_loss_caught(|| run_layout_with(Layout::Mirror, 2, 2, true, &[0, 1]));
}

/// Crash, then crash again while the pool is being imported (recovery part way), then
/// import: the pool must still check clean and hold the acknowledged or the in-flight
/// state of the first crash, and keep working. Every `stride`-th first crash point,
/// and at each of those every device operation of the import.
fn run_crash_during_import(layout: Layout, ndev: usize, seeds: u64, stride: u64) -> Outcome {
    let o = opts();
    let create = |devs: &[Arc<SimDevice>]| create_pool(layout, devs, &o);
    // The state a first crash at `point` leaves (deterministic), on devices whose
    // operations count on `clock`.
    let first_crash = |seed: u64, point: u64, clock: &Arc<CrashClock>| {
        let c1 = CrashClock::new();
        let devs = sim_devices(ndev, seed, Some(c1.clone()));
        let pool = create(&devs);
        let os = pool.create_objset("tank/crash", "{}").unwrap();
        pool.sync().unwrap();
        c1.arm(point);
        let (acked, inflight) = workload(&pool, os, seed);
        drop(pool);
        let policy = [
            CrashPolicy::Random,
            CrashPolicy::Hostile,
            CrashPolicy::DropAll,
        ][(point % 3) as usize];
        let after: Vec<Arc<SimDevice>> = devs
            .iter()
            .map(|d| d.restart_with_clock(policy, Some(clock.clone())))
            .collect();
        (after, os, acked, inflight)
    };
    let mut out = Outcome {
        points: 0,
        inflight_won: 0,
    };
    for seed in 0..seeds {
        let clock = CrashClock::new();
        let devs = sim_devices(ndev, seed, Some(clock.clone()));
        let pool = create(&devs);
        let os = pool.create_objset("tank/crash", "{}").unwrap();
        pool.sync().unwrap();
        let start = clock.ops();
        workload(&pool, os, seed);
        let total = clock.ops() - start;
        drop(pool);
        for point in (1..=total).step_by(stride as usize) {
            // Crash the import at its 1st, 2nd, ... device operation until an import
            // runs to the end before its crash point.
            for j in 1.. {
                let clock = CrashClock::new();
                let (devs, os, acked, inflight) = first_crash(seed, point, &clock);
                clock.arm(j);
                let imported = pool::Pool::import(args(&devs), Some("tank"), o.clone());
                let crashed = clock.crashed();
                drop(imported);
                let policy = [
                    CrashPolicy::Hostile,
                    CrashPolicy::KeepAll,
                    CrashPolicy::DropAll,
                ][(j % 3) as usize];
                let again: Vec<Arc<SimDevice>> = devs.iter().map(|d| d.restart(policy)).collect();
                let what = format!("{layout:?} seed {seed} point {point}, import crash {j}");
                check_recovered(
                    &again,
                    &o,
                    os,
                    &[acked.clone(), inflight.clone()],
                    &what,
                    &mut out,
                );
                if !crashed {
                    break;
                }
            }
        }
    }
    out
}

#[test]
fn crash_during_import_after_a_crash_mirror_and_raidz1() {
    let m = run_crash_during_import(Layout::Mirror, 2, 2, 7);
    let r = run_crash_during_import(Layout::RaidZ { nparity: 1 }, 3, 2, 7);
    println!(
        "crash during import: {} points (mirror) and {} (raidz1), {} and {} committed the in-flight txg",
        m.points, r.points, m.inflight_won, r.inflight_won
    );
    assert!(m.points > 50 && r.points > 50);
}

/// A crash at every device operation of a replace (the resilver, the new labels, the
/// old device's labels cleared, the txg after): whatever survives, import finds every
/// position of the vdev filled, by the old device or by the new one, and the data
/// whole. (Labels naming the new device were once written to the other devices before
/// the new device's own: a crash in between left a position import could fill with
/// neither.)
fn run_crash_during_replace(layout: Layout, ndev: usize) -> Outcome {
    let setup = |clock: &Arc<CrashClock>| {
        let devs = sim_devices(ndev, 61, Some(clock.clone()));
        let pool = create_pool(layout, &devs, &opts());
        let os = pool.create_objset("tank/data", "{}").unwrap();
        let mut model = Model::new();
        let mut rng = Rng(61);
        for len in [300_000usize, 70_000, 5_000] {
            let obj = new_file(&pool, os, 16384, Compression::Lz4);
            let data = rng.mixed(len);
            pool.write(os, obj, 0, &data).unwrap();
            model.insert(obj, data);
        }
        pool.sync().unwrap();
        let fresh = SimDevice::with_clock(DEV_SIZE, 777, clock.clone());
        (devs, pool, os, model, fresh)
    };
    let replace = |pool: &pool::Pool, fresh: &Arc<SimDevice>| {
        let arg = pool::pool::DeviceArg {
            path: "fresh".into(),
            device: fresh.clone(),
        };
        pool.replace("sim1", arg, &|_| {})
    };
    let clock = CrashClock::new();
    let (_devs, pool, _, _, fresh) = setup(&clock);
    let start = clock.ops();
    replace(&pool, &fresh).expect("replace without a crash");
    let total = clock.ops() - start;
    drop(pool);
    let mut out = Outcome {
        points: 0,
        inflight_won: 0,
    };
    for point in 1..=total {
        let clock = CrashClock::new();
        let (devs, pool, os, model, fresh) = setup(&clock);
        clock.arm(point);
        let _ = replace(&pool, &fresh);
        drop(pool);
        let policy = crash_policy(point);
        let mut after: Vec<Arc<SimDevice>> = devs.iter().map(|d| d.restart(policy)).collect();
        after.push(fresh.restart(policy));
        let mut candidates = args(&after[..ndev]);
        candidates.push(pool::pool::DeviceArg {
            path: "fresh".into(),
            device: after[ndev].clone(),
        });
        let what = format!("{layout:?} replace, crash point {point}/{total}");
        let pool = pool::Pool::import(candidates, Some("tank"), opts())
            .unwrap_or_else(|e| panic!("{what}: import: {e}"));
        let st = pool.status();
        for leaf in st.vdevs.iter().flat_map(|t| t.children.iter()) {
            assert_eq!(
                leaf.health, "ONLINE",
                "{what}: {} is {} after the crash",
                leaf.path, leaf.health
            );
        }
        let report = pool.check().unwrap();
        assert!(report.problems.is_empty(), "{what}: {:?}", report.problems);
        assert!(
            contents_match(&pool, os, &model, std::slice::from_ref(&model)),
            "{what}: contents"
        );
        out.points += 1;
    }
    out
}

#[test]
fn crash_during_a_replace_leaves_every_device_position_filled() {
    for (layout, ndev) in [(Layout::Mirror, 2), (Layout::RaidZ { nparity: 1 }, 3)] {
        let o = run_crash_during_replace(layout, ndev);
        tested(&format!("replace on {layout:?}"), &o, 20);
    }
}
