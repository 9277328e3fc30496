//! Crash tests of the snapshot operations that change more than one thing at once,
//! at every device write and flush they issue:
//! - a rollback to an older snapshot that destroys the newer ones (`rollback -r`):
//!   after the crash the filesystem is either as it was (every snapshot there, each
//!   with its contents, the latest changes too) or wholly rolled back (only the
//!   older snapshots left, the files as the target snapshot holds them); never a
//!   mix, and the rolled-back state once the call returned;
//! - placing and releasing a hold: there or not, and there once `hold` returned.
//!
//! Unflushed writes are kept, dropped, torn or mangled (`crash_policy`); the pool
//! must check clean after every import. The negative control runs the same harness
//! on a rollback done as three separate steps (destroy, destroy, roll back), which
//! a crash can cut between: it must find crash points where the state is a mix.

#[path = "../../pool/tests/common/mod.rs"]
mod common;
use common::*;

use fs::{Cred, Datasets, Kind};
use pool::Pool;
use std::collections::BTreeMap;
use std::sync::Arc;
use vdev::{CrashClock, SimDevice};

/// File name -> contents of the filesystem's root.
type Files = BTreeMap<String, Vec<u8>>;

/// What a filesystem and its snapshots hold: the live files, and each snapshot's.
#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    live: Files,
    snapshots: BTreeMap<String, Files>,
}

fn files_of(fs: &fs::Filesystem) -> Files {
    let mut out = Files::new();
    for e in fs.readdir(1, 0, 1000).unwrap() {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let a = fs.getattr(e.ino).unwrap();
        assert_eq!(a.kind, Kind::File);
        let data = fs.read(e.ino, 0, a.size as usize + 1).unwrap();
        out.insert(String::from_utf8(e.name).unwrap(), data);
    }
    out
}

fn state_of(ds: &Datasets) -> State {
    let live = files_of(&ds.open("tank/home").unwrap());
    let mut snapshots = BTreeMap::new();
    for (_, name) in ds.snapshot_names("tank/home").unwrap() {
        let files = files_of(&ds.open(&name).unwrap());
        ds.close(&name);
        snapshots.insert(name, files);
    }
    State { live, snapshots }
}

/// A filesystem with three snapshots, each after a round of creates, overwrites and
/// removals, and changes after the last one. Answers the devices, the pool and the
/// state before the operation.
fn setup(seed: u64, clock: &Arc<CrashClock>) -> (Vec<Arc<SimDevice>>, Arc<Pool>, State) {
    let (devs, pool) = dataset_crash_pool(seed, clock);
    let ds = Datasets::new(pool.clone()).unwrap();
    ds.create("tank/home", &[]).unwrap();
    let fs = ds.open("tank/home").unwrap();
    let cred = Cred::root();
    let mut rng = Rng(seed);
    for round in 0..4 {
        for _ in 0..6 {
            let name = format!("f{}", rng.below(8));
            let ino = match fs.lookup(1, name.as_bytes()) {
                Ok(_) if rng.below(4) == 0 => {
                    fs.unlink(1, name.as_bytes(), &cred).unwrap();
                    continue;
                }
                Ok(a) => a.ino,
                Err(_) => {
                    fs.create(1, name.as_bytes(), Kind::File, 0o644, 0, &cred)
                        .unwrap()
                        .ino
                }
            };
            let len = 1 + rng.below(40_000) as usize;
            fs.write(ino, rng.below(8192), &rng.mixed(len)).unwrap();
        }
        if round < 3 {
            ds.snapshot(&format!("tank/home@s{}", round + 1)).unwrap();
        }
    }
    drop(fs);
    pool.sync().unwrap();
    let before = state_of(&ds);
    assert_eq!(before.snapshots.len(), 3);
    (devs, pool, before)
}

/// The state a wholly done rollback to `s1` leaves.
fn rolled_back(before: &State) -> State {
    let s1 = before.snapshots["tank/home@s1"].clone();
    State {
        live: s1.clone(),
        snapshots: BTreeMap::from([("tank/home@s1".to_string(), s1)]),
    }
}

/// How the rollback is done: atomically, or (the negative control) in three steps.
#[derive(Clone, Copy)]
enum How {
    DestroyNewer,
    StepByStep,
}

fn roll_back(ds: &Datasets, how: How) -> fs::Result<()> {
    match how {
        How::DestroyNewer => ds.rollback_to("tank/home@s1", true),
        How::StepByStep => {
            ds.destroy_snapshot("tank/home@s3")?;
            ds.destroy_snapshot("tank/home@s2")?;
            ds.rollback("tank/home@s1")
        }
    }
}

fn import(devs: &[Arc<SimDevice>], point: u64) -> (Arc<Pool>, Datasets) {
    let after: Vec<Arc<SimDevice>> = devs
        .iter()
        .map(|d| d.restart(crash_policy(point)))
        .collect();
    let pool = Pool::import(args(&after), Some("tank"), dataset_crash_opts()).expect("import");
    let report = pool.check().unwrap();
    assert!(
        report.problems.is_empty(),
        "point {point}: {:?}",
        report.problems
    );
    let ds = Datasets::new(pool.clone()).unwrap();
    (pool, ds)
}

/// Every crash point of a rollback of each seed; answers (points, mixed states).
fn crash_rollbacks(how: How, seeds: u64) -> (u64, u64) {
    let (mut points, mut mixed) = (0, 0);
    for seed in 0..seeds {
        let clock = CrashClock::new();
        let (_devs, pool, before) = setup(seed, &clock);
        let start = clock.ops();
        roll_back(&Datasets::new(pool.clone()).unwrap(), how).unwrap();
        let total = clock.ops() - start;
        assert!(
            total > 4,
            "seed {seed}: the rollback issued {total} device operations"
        );
        let after = rolled_back(&before);
        assert_eq!(state_of(&Datasets::new(pool.clone()).unwrap()), after);
        drop(pool);
        for point in 1..=total + 1 {
            let clock = CrashClock::new();
            let (devs, pool, _) = setup(seed, &clock);
            let ds = Datasets::new(pool.clone()).unwrap();
            clock.arm(point);
            let returned = roll_back(&ds, how).is_ok();
            drop(ds);
            drop(pool);
            let (_pool, ds) = import(&devs, point);
            let found = state_of(&ds);
            if returned {
                assert_eq!(
                    found, after,
                    "seed {seed} point {point}: acknowledged, then lost"
                );
            } else if found != before && found != after {
                mixed += 1;
            }
            points += 1;
        }
    }
    (points, mixed)
}

fn seeds() -> u64 {
    std::env::var("SHOAL_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8)
}

#[test]
fn a_rollback_that_destroys_newer_snapshots_is_all_or_nothing_at_every_crash() {
    let (points, mixed) = crash_rollbacks(How::DestroyNewer, seeds());
    println!("rollback -r crash test: {points} crash points, {mixed} mixed states");
    assert!(points > 30, "{points}");
    assert_eq!(mixed, 0);
}

/// The negative control: the same harness, the rollback in three transactions.
#[test]
fn a_rollback_in_steps_leaves_mixed_states_the_harness_finds() {
    let (points, mixed) = crash_rollbacks(How::StepByStep, 1);
    println!("rollback in steps: {points} crash points, {mixed} mixed states");
    assert!(
        mixed > 0,
        "the harness found no mixed state in {points} points"
    );
}

#[test]
fn a_hold_and_its_release_survive_every_crash_once_returned() {
    let mut points = 0;
    for seed in 0..seeds() {
        let clock = CrashClock::new();
        let (_devs, pool, _) = setup(seed, &clock);
        let ds = Datasets::new(pool.clone()).unwrap();
        let start = clock.ops();
        ds.hold("tank/home@s2", "keep").unwrap();
        ds.release("tank/home@s2", "keep").unwrap();
        let total = clock.ops() - start;
        drop(ds);
        drop(pool);
        for point in 1..=total + 1 {
            let clock = CrashClock::new();
            let (devs, pool, before) = setup(seed, &clock);
            let ds = Datasets::new(pool.clone()).unwrap();
            clock.arm(point);
            let held = ds.hold("tank/home@s2", "keep").is_ok();
            let released = held && ds.release("tank/home@s2", "keep").is_ok();
            drop(ds);
            drop(pool);
            let (_pool, ds) = import(&devs, point);
            let tags: Vec<String> = ds
                .holds("tank/home@s2")
                .unwrap()
                .into_iter()
                .map(|h| h.tag)
                .collect();
            // Acknowledged: a returned release left no hold. A returned hold stays
            // unless the release after it committed; either may have committed
            // without returning.
            if released {
                assert!(tags.is_empty(), "seed {seed} point {point}: {tags:?}");
            }
            if !tags.is_empty() {
                assert_eq!(tags, ["keep"]);
                // Held: the snapshot outlives a destroy and a rollback past it.
                assert!(matches!(
                    ds.destroy_snapshot("tank/home@s2"),
                    Err(fs::FsError::Busy(_))
                ));
                assert!(matches!(
                    ds.rollback_to("tank/home@s1", true),
                    Err(fs::FsError::Busy(_))
                ));
            }
            // Nothing else moved.
            assert_eq!(state_of(&ds), before, "seed {seed} point {point}");
            points += 1;
        }
    }
    println!("hold crash test: {points} crash points");
    assert!(points > 10, "{points}");
}
