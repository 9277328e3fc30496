//! Replication's snapshot bookkeeping between two daemons on loopback: the base of
//! the next incremental is held on both sides and survives a destroy attempt, and an
//! action that follows snapshot schedules sends each scheduled snapshot at once.

mod common;
use common::replication::*;
use common::*;

use std::collections::BTreeMap;
use std::path::Path;

/// The tags holding each snapshot of `fs` (`shoal snapshot holds --json`).
fn holds(state: &Path, fs: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for h in json(state, &["snapshot", "holds", fs, "--json"])
        .as_array()
        .unwrap()
    {
        let snap = h["snapshot"].as_str().unwrap().split_once('@').unwrap().1;
        out.entry(snap.to_string())
            .or_default()
            .push(h["tag"].as_str().unwrap().to_string());
    }
    out
}

#[test]
fn the_base_is_held_on_both_sides_and_survives_a_destroy_attempt() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (p, r, primary, _replica) = primary_and_replica(t.path());
    let id = add_action(
        &p,
        "tank/data",
        "vault",
        "tank/copy",
        &["--keep-local", "1", "--keep-remote", "1"],
    );
    let tag = format!("replication:{id}");
    nfs_put(&primary, "/tank/data", "one", b"first");
    assert_eq!(run(&p, &id)["ok"], true);
    let base = snapshots(&p, "tank/data").last().unwrap().clone();
    assert_eq!(
        holds(&p, "tank/data"),
        BTreeMap::from([(base.clone(), vec![tag.clone()])])
    );
    assert_eq!(
        holds(&r, "tank/copy"),
        BTreeMap::from([(base.clone(), vec!["replication".to_string()])])
    );

    // An operator's destroy of the base is refused on both sides, naming the hold.
    for (state, fs) in [(&p, "tank/data"), (&r, "tank/copy")] {
        let out = shoal(state, &["snapshot", "destroy", &format!("{fs}@{base}")]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is held (replication"), "{err}");
    }
    // An operator's own hold stacks with the replication's.
    ok(
        &p,
        &["snapshot", "hold", "keep", &format!("tank/data@{base}")],
    );

    // The next run moves the replication hold to the new base on both sides and
    // prunes what nothing holds; the operator's hold keeps the old base here.
    nfs_put(&primary, "/tank/data", "two", b"second");
    let second = run(&p, &id);
    assert_eq!(second["ok"], true, "{second}");
    let new_base = snapshots(&p, "tank/data").last().unwrap().clone();
    assert_ne!(new_base, base);
    assert_eq!(
        holds(&p, "tank/data"),
        BTreeMap::from([
            (base.clone(), vec!["keep".to_string()]),
            (new_base.clone(), vec![tag.clone()])
        ])
    );
    assert_eq!(snapshots(&p, "tank/data"), [base.clone(), new_base.clone()]);
    assert_eq!(
        holds(&r, "tank/copy"),
        BTreeMap::from([(new_base.clone(), vec!["replication".to_string()])])
    );
    assert_eq!(
        snapshots(&r, "tank/copy"),
        std::slice::from_ref(&new_base),
        "the old base pruned there"
    );

    // Released, the old base goes; removing the action lets go of its base.
    ok(
        &p,
        &["snapshot", "release", "keep", &format!("tank/data@{base}")],
    );
    ok(&p, &["snapshot", "destroy", &format!("tank/data@{base}")]);
    ok(&p, &["replication", "remove", &id]);
    assert!(holds(&p, "tank/data").is_empty());
    ok(
        &p,
        &["snapshot", "destroy", &format!("tank/data@{new_base}")],
    );
    assert!(snapshots(&p, "tank/data").is_empty());
}

#[test]
fn an_action_that_follows_schedules_sends_each_scheduled_snapshot() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (p, r, primary, _replica) = primary_and_replica(t.path());
    add_action(
        &p,
        "tank/data",
        "vault",
        "tank/copy",
        &["--follow-schedules"],
    );
    nfs_put(&primary, "/tank/data", "one", b"first");
    // The schedule's first snapshot is taken at once; the action sends it.
    let s = json(
        &p,
        &[
            "snapshot",
            "schedule",
            "add",
            "tank/data",
            "--every",
            "1d",
            "--keep",
            "5",
            "--json",
        ],
    );
    let sid = s["id"].as_u64().unwrap().to_string();
    let auto_on = |state: &Path, fs: &str| -> Vec<String> {
        snapshots(state, fs)
            .into_iter()
            .filter(|n| n.starts_with("auto-1d-"))
            .collect()
    };
    let arrived = |want: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let here = auto_on(&p, "tank/data");
            let there = if json(&r, &["fs", "list", "--json"])
                .to_string()
                .contains("tank/copy")
            {
                auto_on(&r, "tank/copy")
            } else {
                Vec::new()
            };
            if here.len() == want && there == here {
                return here;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "waited for {want} scheduled snapshots on both sides: {here:?} here, {there:?} there"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    arrived(1);
    // Another scheduled snapshot (asked for now) goes the same way.
    nfs_put(&primary, "/tank/data", "two", b"second");
    ok(&p, &["snapshot", "schedule", "run", &sid]);
    arrived(2);
    // The run that sent it records itself once the replica has answered.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let st = loop {
        let st = json(&p, &["replication", "status", "--json"]);
        let a = &st["actions"][0];
        if a["running"].is_null() && a["history"].as_array().unwrap().len() >= 2 {
            break st;
        }
        assert!(std::time::Instant::now() < deadline, "{st}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let history = st["actions"][0]["history"].as_array().unwrap();
    assert!(history.iter().all(|h| h["ok"] == true), "{st}");
    assert_eq!(st["actions"][0]["follow_schedules"], true, "{st}");
}
