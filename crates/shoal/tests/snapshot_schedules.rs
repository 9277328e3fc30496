//! Snapshot schedules run by `shoal serve`, driven through the CLI: the first
//! snapshot is taken when a schedule is added, runs prune to `keep` oldest first but
//! never a held snapshot, a recursive schedule snapshots a dataset and its children
//! at one instant, a failing run raises one alert and its recovery another, and a
//! daemon that was down for many periods takes one catch-up snapshot, not a burst
//! (and a restart within a period takes none).

mod common;
use common::*;

use std::path::Path;
use std::time::{Duration, Instant};

fn json(state: &Path, args: &[&str]) -> serde_json::Value {
    let out = ok(state, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// (name after the `@`, txg) of the snapshots of `fs`, oldest first.
fn snapshots(state: &Path, fs: &str) -> Vec<(String, u64)> {
    json(state, &["snapshot", "list", fs, "--json"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"].as_str().unwrap().split_once('@').unwrap().0 == fs)
        .map(|s| {
            let n = s["name"].as_str().unwrap();
            (
                n.split_once('@').unwrap().1.to_string(),
                s["txg"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Adds a schedule through the CLI; its id.
fn add_schedule(state: &Path, dataset: &str, every: &str, keep: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "snapshot", "schedule", "add", dataset, "--every", every, "--keep", keep, "--json",
    ];
    args.extend_from_slice(extra);
    json(state, &args)["id"].as_u64().unwrap().to_string()
}

fn names(state: &Path, fs: &str) -> Vec<String> {
    snapshots(state, fs).into_iter().map(|(n, _)| n).collect()
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "waited 30 s for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn alerts(state: &Path, kind: &str) -> usize {
    json(state, &["alerts", "--all", "--json"])["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == kind)
        .count()
}

/// Waits, if need be, until the next UTC hour is at least two minutes away: the
/// schedules here run hourly and daily, and the test counts their snapshots, so no
/// period may begin while it runs.
fn away_from_an_hour_boundary() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let left = 3600 - now % 3600;
    if left < 120 {
        std::thread::sleep(Duration::from_secs(left + 1));
    }
}

#[test]
fn schedules_snapshot_prune_around_holds_alert_and_catch_up_once() {
    away_from_an_hour_boundary();
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = t.path().join("state");
    create_tank(&state, t.path(), "256M", &["mirror", "a", "b"]);
    ok(&state, &["fs", "create", "tank/home"]);
    ok(&state, &["fs", "create", "tank/home/alice"]);
    ok(&state, &["fs", "create", "tank/scratch"]);
    let mut d = Served::start(&state, &t.path().join("serve.log"), &[]);

    // Bad input is refused with a reason, and nothing is added.
    for (args, why) in [
        (
            vec!["--every", "7m", "--keep", "3"],
            "minutes must divide an hour",
        ),
        (vec!["--every", "1y", "--keep", "3"], "period '1y'"),
        (vec!["--every", "1h", "--keep", "0"], "keep 0"),
    ] {
        let mut a = vec!["snapshot", "schedule", "add", "tank/home"];
        a.extend(args);
        let out = shoal(&state, &a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "{a:?}: {err}");
    }
    let out = shoal(
        &state,
        &[
            "snapshot",
            "schedule",
            "add",
            "tank/nope",
            "--every",
            "1h",
            "--keep",
            "2",
        ],
    );
    assert!(
        !out.status.success(),
        "a schedule for a dataset that does not exist"
    );

    // Added: the first snapshot comes at once, named for its period and UTC time.
    let id = add_schedule(&state, "tank/home", "1h", "2", &[]);
    wait_for("the first scheduled snapshot", || {
        names(&state, "tank/home").len() == 1
    });
    let first = names(&state, "tank/home").remove(0);
    assert!(
        first.starts_with("auto-1h-")
            && first.ends_with('Z')
            && first.len() == "auto-1h-2026-12-07_22:00Z".len(),
        "{first}"
    );
    let dup = shoal(
        &state,
        &[
            "snapshot",
            "schedule",
            "add",
            "tank/home",
            "--every",
            "hourly",
            "--keep",
            "5",
        ],
    );
    assert!(
        !dup.status.success(),
        "a second hourly schedule of tank/home"
    );
    let listed = json(&state, &["snapshot", "schedule", "list", "--json"]);
    let next = listed[0]["next_run_unix"].as_u64().unwrap();
    assert_eq!(next % 3600, 0, "the next run is on the hour: {listed}");
    assert_eq!(listed[0]["last_run"]["ok"], true, "{listed}");

    // Runs asked for: names stay unique; keep 2 prunes the oldest, never a held one.
    ok(&state, &["snapshot", "schedule", "run", &id]);
    assert_eq!(names(&state, "tank/home").len(), 2);
    ok(
        &state,
        &["snapshot", "hold", "keep", &format!("tank/home@{first}")],
    );
    let run = json(&state, &["snapshot", "schedule", "run", &id, "--json"]);
    assert_eq!(run["ok"], true, "{run}");
    assert!(run["pruned"].as_array().unwrap().is_empty(), "{run}");
    let now = names(&state, "tank/home");
    assert_eq!(now.len(), 3, "the held one stays beside two: {now:?}");
    assert_eq!(now[0], first);
    ok(
        &state,
        &["snapshot", "release", "keep", &format!("tank/home@{first}")],
    );
    let run = json(&state, &["snapshot", "schedule", "run", &id, "--json"]);
    let pruned = run["pruned"].as_array().unwrap();
    assert_eq!(pruned.len(), 2, "{run}");
    assert_eq!(pruned[0], format!("tank/home@{first}"));
    assert_eq!(names(&state, "tank/home").len(), 2);
    // A snapshot of the operator's is never the schedule's to prune.
    ok(&state, &["snapshot", "create", "tank/home@mine"]);
    ok(&state, &["snapshot", "schedule", "run", &id]);
    assert!(names(&state, "tank/home").contains(&"mine".to_string()));

    // Recursive: the dataset and its child at one instant (one txg).
    let rid = add_schedule(&state, "tank/home", "1d", "3", &["-r"]);
    wait_for("the recursive snapshot", || {
        snapshots(&state, "tank/home/alice")
            .iter()
            .any(|(n, _)| n.starts_with("auto-1d-"))
    });
    // Two schedules of one period may not cover one dataset: they would share names.
    for (dataset, extra) in [("tank/home/alice", vec![]), ("tank", vec!["-r"])] {
        let mut args = vec![
            "snapshot", "schedule", "add", dataset, "--every", "1d", "--keep", "2",
        ];
        args.extend(extra);
        let out = shoal(&state, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("already snapshots tank/home"),
            "{args:?}: {err}"
        );
    }
    let top = snapshots(&state, "tank/home");
    let child = snapshots(&state, "tank/home/alice");
    let (tn, ttxg) = top.iter().find(|(n, _)| n.starts_with("auto-1d-")).unwrap();
    let (cn, ctxg) = child
        .iter()
        .find(|(n, _)| n.starts_with("auto-1d-"))
        .unwrap();
    assert_eq!((tn, ttxg), (cn, ctxg), "one name, one txg");

    // A failing run: one warning alert however often it fails, one info on recovery.
    let fid = add_schedule(&state, "tank/scratch", "1h", "1", &[]);
    wait_for("the scratch snapshot", || {
        names(&state, "tank/scratch").len() == 1
    });
    for n in names(&state, "tank/scratch") {
        ok(
            &state,
            &["snapshot", "destroy", &format!("tank/scratch@{n}")],
        );
    }
    ok(&state, &["fs", "destroy", "tank/scratch"]);
    for _ in 0..2 {
        let out = shoal(&state, &["snapshot", "schedule", "run", &fid]);
        assert!(!out.status.success());
    }
    assert_eq!(alerts(&state, "snapshot.schedule.failed"), 1);
    let listed = json(
        &state,
        &["snapshot", "schedule", "list", "tank/scratch", "--json"],
    );
    assert_eq!(listed[0]["last_run"]["ok"], false, "{listed}");
    ok(&state, &["fs", "create", "tank/scratch"]);
    ok(&state, &["snapshot", "schedule", "run", &fid]);
    assert_eq!(alerts(&state, "snapshot.schedule.recovered"), 1);
    ok(&state, &["snapshot", "schedule", "remove", &fid]);
    ok(&state, &["snapshot", "schedule", "remove", &rid]);

    // A restart within the period takes nothing.
    let before = names(&state, "tank/home");
    d.stop();
    d.restart();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(names(&state, "tank/home"), before);

    // Down for five periods: one catch-up snapshot when it is back.
    d.stop();
    let book_path = state.join("schedules.json");
    let mut book: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&book_path).unwrap()).unwrap();
    let slot = book["state"][&id]["last_slot_unix"].as_u64().unwrap();
    book["state"][&id]["last_slot_unix"] = (slot - 5 * 3600).into();
    std::fs::write(&book_path, serde_json::to_vec_pretty(&book).unwrap()).unwrap();
    d.restart();
    wait_for("the catch-up snapshot", || {
        names(&state, "tank/home") != before
    });
    std::thread::sleep(Duration::from_secs(2));
    let after = names(&state, "tank/home");
    let new: Vec<&String> = after.iter().filter(|n| !before.contains(n)).collect();
    assert_eq!(
        new.len(),
        1,
        "one catch-up, not a burst: {before:?} -> {after:?}"
    );
    d.stop();
}
