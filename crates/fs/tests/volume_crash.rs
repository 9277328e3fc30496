//! Crash tests of a volume through the intent log, in both write-cache modes: a seeded
//! sequence of block writes (some with FUA), unmaps and flushes runs on simulated
//! devices until a crash clock fires at a chosen device write or flush. Unflushed
//! writes are kept, dropped or torn; the pool is imported and the volume opened. Then
//! the pool checks clean and the volume's bytes equal the model after some prefix of
//! the sequence that includes every write acknowledged as durable:
//! - writes answered before their commit (`Durability::Cached`, sync=standard: the
//!   volume API's write cache, which the SCSI target uses only with sync=disabled and
//!   within one command before its own commit): those before the last flush or FUA
//!   write that returned;
//! - sync=always: every write that returned.
//!
//! The negative control runs the same harness with sync=disabled, counting flushes and
//! FUA writes as acknowledged as the cache-on mode does: it must find crash points
//! where an acknowledged write is lost.
//!
//! Every crash point of every sequence is tried, and a crash after its end. `SHOAL_CRASH_SEEDS=N` runs more.

#[path = "../../pool/tests/common/mod.rs"]
mod common;
use common::*;

use fs::{Datasets, Durability, VolumeSpec};
use pool::Pool;
use std::sync::Arc;
use vdev::{CrashClock, SimDevice};

const VOLSIZE: u64 = 512 << 10;
const BLOCK: u64 = 4096;

struct Run {
    /// The volume's bytes after each step (`states[0]`: before any).
    states: Vec<Vec<u8>>,
    /// The index of the last state acknowledged as durable.
    acked: usize,
    durable_points: usize,
}

/// Runs the sequence until an operation fails (the crash has struck). `every_write`:
/// each returned write counts as durable (write cache off).
fn workload(v: &fs::Volume, seed: u64, every_write: bool) -> Run {
    let mut rng = Rng(seed);
    let mut image = vec![0u8; VOLSIZE as usize];
    let mut run = Run {
        states: vec![image.clone()],
        acked: 0,
        durable_points: 0,
    };
    for _ in 0..60 {
        let blk = rng.below(VOLSIZE / BLOCK - 4);
        let op = rng.below(10);
        let (r, durable) = match op {
            0..=5 => {
                let len = (1 + rng.below(3)) * BLOCK - rng.below(2) * 100;
                let off = blk * BLOCK + rng.below(2) * 512;
                let data = rng.bytes(len as usize);
                let fua = rng.below(4) == 0;
                let r = v.write(
                    off,
                    &data,
                    if fua {
                        Durability::Stable
                    } else {
                        Durability::Cached
                    },
                );
                if r.is_ok() {
                    image[off as usize..(off + len) as usize].copy_from_slice(&data);
                }
                (r, fua)
            }
            6 => {
                let len = (1 + rng.below(4)) * BLOCK;
                let r = v.unmap(blk * BLOCK, len, Durability::Cached);
                if r.is_ok() {
                    image[(blk * BLOCK) as usize..(blk * BLOCK + len) as usize].fill(0);
                }
                (r, false)
            }
            _ => (v.flush(), true),
        };
        if r.is_err() {
            return run;
        }
        if op < 7 {
            run.states.push(image.clone());
        }
        if durable || every_write {
            run.acked = run.states.len() - 1;
            run.durable_points += 1;
        }
    }
    run
}

fn setup(seed: u64, clock: &Arc<CrashClock>, sync: &str) -> (Vec<Arc<SimDevice>>, Arc<Pool>) {
    let (devs, pool) = dataset_crash_pool(seed, clock);
    let ds = Datasets::new(pool.clone()).unwrap();
    ds.create_volume(
        "tank/vol",
        &VolumeSpec {
            volsize: VOLSIZE,
            volblocksize: Some(BLOCK as u32),
            sparse: false,
        },
        &[("sync".into(), sync.into())],
    )
    .unwrap();
    pool.sync().unwrap();
    (devs, pool)
}

/// Runs every crash point of `seeds` sequences; answers (points tried, points where
/// the volume held no state at or after the last acknowledged one).
fn crash_everywhere(sync: &str, every_write: bool, seeds: u64) -> (u64, u64) {
    let (mut points, mut lost) = (0u64, 0u64);
    for seed in 0..seeds {
        let clock = CrashClock::new();
        let (_devs, pool) = setup(seed, &clock, sync);
        let start = clock.ops();
        let v = Datasets::new(pool.clone())
            .unwrap()
            .open_volume("tank/vol")
            .unwrap();
        let dry = workload(&v, seed, every_write);
        assert!(
            dry.durable_points > 3,
            "seed {seed}: too few durable points"
        );
        let total = clock.ops() - start;
        drop(v);
        drop(pool);
        // Point `total + 1` fires after the sequence: the crash comes at the end.
        for point in 1..=total + 1 {
            let clock = CrashClock::new();
            let (devs, pool) = setup(seed, &clock, sync);
            let v = Datasets::new(pool.clone())
                .unwrap()
                .open_volume("tank/vol")
                .unwrap();
            clock.arm(point);
            let run = workload(&v, seed, every_write);
            drop(v);
            drop(pool);
            let after: Vec<Arc<SimDevice>> = devs
                .iter()
                .map(|d| d.restart(crash_policy(point)))
                .collect();
            let pool =
                Pool::import(args(&after), Some("tank"), dataset_crash_opts()).expect("import");
            assert_eq!(pool.intent_log_stats().replay_failures, 0);
            let ds = Datasets::new(pool.clone()).unwrap();
            let v = ds.open_volume("tank/vol").unwrap();
            let image = v.read(0, VOLSIZE as usize).unwrap().to_vec();
            if !(run.acked..run.states.len()).any(|k| run.states[k] == image) {
                lost += 1;
            }
            let report = pool.check().unwrap();
            assert!(
                report.problems.is_empty(),
                "{sync} seed {seed} point {point}: {:?}",
                report.problems
            );
            points += 1;
        }
    }
    (points, lost)
}

fn seeds() -> u64 {
    std::env::var("SHOAL_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4)
}

#[test]
fn with_the_write_cache_on_flushed_and_fua_writes_survive_every_crash() {
    let (points, lost) = crash_everywhere("standard", false, seeds());
    println!("volume crash test, write cache on: {points} crash points, {lost} lost");
    assert!(points > 300, "{points}");
    assert_eq!(lost, 0);
}

#[test]
fn with_the_write_cache_off_every_write_survives_every_crash() {
    let (points, lost) = crash_everywhere("always", true, seeds());
    println!("volume crash test, write cache off: {points} crash points, {lost} lost");
    assert!(points > 300, "{points}");
    assert_eq!(lost, 0);
}

/// The negative control: with sync=disabled the same harness finds lost writes.
#[test]
fn without_the_log_commit_the_harness_reports_lost_writes() {
    let (points, lost) = crash_everywhere("disabled", false, 1);
    println!("volume crash test, sync=disabled: {points} crash points, {lost} lost");
    assert!(lost > 0, "the harness found no loss in {points} points");
}
