//! Space limits through the filesystem: a full pool answers ENOSPC, a quota EDQUOT
//! (its own writes, its children's, and what its snapshots hold all count), a
//! reservation keeps space from other datasets; statfs shows each; every refusal leaves
//! the pool checking clean and the data written before it intact; freeing space makes
//! writes work again.

#[path = "../../pool/tests/common/mod.rs"]
mod common;
use common::*;

use fs::{Cred, Datasets, Filesystem, FsError, Kind, SetAttr};
use pool::Pool;
use std::sync::Arc;
use vdev::Layout;

const MIB: u64 = 1 << 20;

fn setup() -> (Arc<Pool>, Datasets) {
    let devs = sim_devices(3, 7, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let ds = Datasets::new(pool.clone()).unwrap();
    (pool, ds)
}

fn dataset(ds: &Datasets, name: &str, settings: &[(&str, &str)]) -> Arc<Filesystem> {
    let s: Vec<(String, String)> = settings
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ds.create(name, &s).unwrap();
    ds.open(name).unwrap()
}

fn new_file(fs: &Filesystem, name: &str) -> u64 {
    fs.create(1, name.as_bytes(), Kind::File, 0o644, 0, &Cred::root())
        .unwrap()
        .ino
}

/// Writes 1 MiB chunks of a pattern until the first error; returns the bytes written
/// and that error.
fn fill(fs: &Filesystem, ino: u64, start: u64, limit: u64) -> (u64, Option<FsError>) {
    let chunk = pattern(ino, MIB as usize);
    let mut at = start;
    while at < start + limit {
        match fs.write(ino, at, &chunk) {
            Ok(n) => at += n as u64,
            Err(e) => return (at - start, Some(e)),
        }
    }
    (at - start, None)
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    Rng(seed).bytes(len)
}

fn check_clean(pool: &Pool) {
    for _ in 0..3 {
        pool.sync().unwrap();
    }
    let r = pool.check().unwrap();
    assert!(r.problems.is_empty(), "check: {:?}", r.problems);
}

fn assert_contents(fs: &Filesystem, ino: u64, len: u64) {
    let chunk = pattern(ino, MIB as usize);
    let mut at = 0;
    while at < len {
        let n = MIB.min(len - at) as usize;
        assert_eq!(fs.read(ino, at, n).unwrap(), chunk[..n], "at {at}");
        at += n as u64;
    }
}

#[test]
fn a_full_pool_answers_enospc_and_recovers_after_a_delete() {
    let (pool, ds) = setup();
    let fs = dataset(&ds, "tank/full", &[]);
    let before = fs.statfs().unwrap();
    assert!(before.avail_bytes > 40 * MIB, "{before:?}");
    let ino = new_file(&fs, "big");
    let (written, err) = fill(&fs, ino, 0, 1 << 30);
    assert!(
        matches!(err, Some(FsError::NoSpace)),
        "expected ENOSPC, got {err:?} after {written}"
    );
    // Most of what statfs promised could be written.
    assert!(
        written >= before.avail_bytes * 3 / 4,
        "{written} of {} available",
        before.avail_bytes
    );
    assert!(fs.statfs().unwrap().avail_bytes < 2 * MIB);
    check_clean(&pool);
    assert_contents(&fs, ino, written);
    fs.unlink(1, b"big", &Cred::root()).unwrap();
    let ino = new_file(&fs, "again");
    let (again, err) = fill(&fs, ino, 0, 8 * MIB);
    assert!(err.is_none(), "{err:?} after deleting");
    assert_eq!(again, 8 * MIB);
    check_clean(&pool);
}

#[test]
fn quotas_count_children_and_snapshots() {
    let (pool, ds) = setup();
    let parent = dataset(&ds, "tank/p", &[("quota", "12M")]);
    let child = dataset(&ds, "tank/p/c", &[]);
    let st = parent.statfs().unwrap();
    assert!(
        st.total_bytes <= 12 * MIB && st.avail_bytes <= 12 * MIB,
        "{st:?}"
    );

    // The child has no quota of its own; its parent's stops it.
    let ino = new_file(&child, "f");
    let (written, err) = fill(&child, ino, 0, 64 * MIB);
    assert!(matches!(err, Some(FsError::Quota)), "{err:?}");
    assert!(
        (9 * MIB..=12 * MIB).contains(&written),
        "wrote {written} under a 12M quota"
    );
    assert!(child.statfs().unwrap().avail_bytes < MIB);
    assert!(ds
        .info("tank/p")
        .unwrap()
        .props
        .iter()
        .any(|p| p.property == "used" && p.value.parse::<u64>().unwrap() >= written));
    check_clean(&pool);
    assert_contents(&child, ino, written);

    // Truncating gives the space back.
    let zero = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    child.setattr(ino, &zero, &Cred::root()).unwrap();
    let (again, err) = fill(&child, ino, 0, 6 * MIB);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(again, 6 * MIB);

    // A snapshot holds the overwritten data, and that counts against the quota.
    ds.snapshot("tank/p/c@s").unwrap();
    let (over, err) = fill(&child, ino, 0, 6 * MIB);
    assert!(matches!(err, Some(FsError::Quota)), "{err:?} after {over}");
    assert!(over < 6 * MIB);
    ds.destroy_snapshot("tank/p/c@s").unwrap();
    let (after, err) = fill(&child, ino, 0, 6 * MIB);
    assert!(err.is_none(), "{err:?} once the snapshot is gone");
    assert_eq!(after, 6 * MIB);

    // Raising the quota lets more in.
    ds.set("tank/p", "quota", Some("24M")).unwrap();
    let (more, err) = fill(&child, ino, 6 * MIB, 8 * MIB);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(more, 8 * MIB);
    check_clean(&pool);
}

#[test]
fn a_reservation_keeps_space_from_other_datasets() {
    let (pool, ds) = setup();
    let free_at_start = ds.open("tank").unwrap().statfs().unwrap().avail_bytes;
    let kept = dataset(&ds, "tank/kept", &[("reservation", "20M")]);
    let other = dataset(&ds, "tank/other", &[]);
    let seen_by_other = other.statfs().unwrap().avail_bytes;
    assert!(
        seen_by_other + 19 * MIB <= free_at_start,
        "others see {seen_by_other} of {free_at_start}"
    );
    assert!(kept.statfs().unwrap().avail_bytes >= seen_by_other + 19 * MIB);

    let ino = new_file(&other, "f");
    let (written, err) = fill(&other, ino, 0, 1 << 30);
    assert!(matches!(err, Some(FsError::NoSpace)), "{err:?}");
    // statfs is conservative (worst-case parity and rounding), so a little more than
    // it promised fits; but the reservation's 20M stays out of reach.
    assert!(
        written <= seen_by_other + seen_by_other / 10,
        "other wrote {written}, was shown {seen_by_other}"
    );
    assert!(kept.statfs().unwrap().avail_bytes >= 19 * MIB);
    check_clean(&pool);

    // The reserved space is still there for the dataset that holds it.
    let mine = new_file(&kept, "mine");
    let (own, err) = fill(&kept, mine, 0, 16 * MIB);
    assert!(err.is_none(), "{err:?} within the reservation");
    assert_eq!(own, 16 * MIB);
    check_clean(&pool);
    assert_contents(&kept, mine, own);
    assert_contents(&other, ino, written);
}
