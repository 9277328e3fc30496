//! The `shoal pool` commands end to end on real device files: create, status, scrub,
//! check, export, import, destroy, and wrong arguments that must fail cleanly without
//! leaving anything behind.

mod common;
use common::*;

use std::path::Path;

fn fails(state: &Path, args: &[&str]) -> String {
    let out = shoal(state, args);
    assert!(!out.status.success(), "shoal {args:?} should have failed");
    String::from_utf8(out.stderr).unwrap()
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

#[test]
fn pool_lifecycle() {
    let t = tmp();
    let state = t.path().join("state");
    let dir = t.path().join("devs");
    let d = dir.to_str().unwrap();
    let out = ok(
        &state,
        &[
            "pool", "create", "--dir", d, "--size", "64M", "tank", "raidz2", "a", "b", "c", "d",
            "log", "x", "cache", "y",
        ],
    );
    assert!(out.contains("created pool 'tank'"), "{out}");
    for f in ["a", "b", "c", "d", "x", "y"] {
        assert!(dir.join(f).exists());
    }
    let status = ok(&state, &["pool", "status", "tank"]);
    assert!(
        status.contains("raidz2-0") && status.contains("ONLINE") && status.contains("logs"),
        "{status}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&state, &["pool", "status", "--json"])).unwrap();
    assert_eq!(json[0]["name"], "tank");
    assert_eq!(json[0]["health"], "ONLINE");
    assert_eq!(json[0]["vdevs"][0]["children"].as_array().unwrap().len(), 4);
    let mode = json[0]["vdevs"][0]["children"][0]["io_mode"]
        .as_str()
        .unwrap();
    assert!(mode == "direct" || mode == "buffered");

    let scrub: serde_json::Value =
        serde_json::from_str(&ok(&state, &["pool", "scrub", "tank", "--json"])).unwrap();
    assert_eq!(scrub["errors"], 0);
    assert!(scrub["blocks"].as_u64().unwrap() > 0);
    let check: serde_json::Value =
        serde_json::from_str(&ok(&state, &["pool", "check", "tank", "--json"])).unwrap();
    assert_eq!(check["problems"].as_array().unwrap().len(), 0);

    // The same devices cannot make a second pool.
    let err = fails(
        &state,
        &["pool", "create", "--dir", d, "other", "mirror", "a", "b"],
    );
    assert!(err.contains("belongs to pool 'tank'"), "{err}");

    ok(&state, &["pool", "export", "tank"]);
    assert!(ok(&state, &["pool", "status"]).contains("no pools"));
    let out = ok(&state, &["pool", "import", "--dir", d]);
    assert!(out.contains("imported pool 'tank'"), "{out}");
    let err = fails(&state, &["pool", "import", "--dir", d, "tank"]);
    assert!(err.contains("already imported"), "{err}");
    ok(&state, &["pool", "destroy", "tank"]);
    let err = fails(&state, &["pool", "import", "--dir", d]);
    assert!(err.contains("no pool"), "{err}");
    // After destroy the devices are free again.
    ok(
        &state,
        &["pool", "create", "--dir", d, "again", "mirror", "a", "b"],
    );
}

#[test]
fn wrong_arguments_fail_cleanly() {
    let t = tmp();
    let state = t.path().join("state");
    let dir = t.path().join("devs");
    let d = dir.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "pool", "create", "--dir", d, "--size", "64M", "tank", "mirror", "a",
            ],
            "mirror needs at least 2",
        ),
        (
            &[
                "pool", "create", "--dir", d, "--size", "64M", "tank", "raidz2", "a", "b", "c",
            ],
            "raidz2 needs at least 4",
        ),
        (
            &["pool", "create", "--dir", d, "--size", "1M", "tank", "a"],
            "64M minimum",
        ),
        (
            &["pool", "create", "--dir", d, "--size", "lots", "tank", "a"],
            "not a number",
        ),
        (&["serve", "--arc-max", "4X"], "unknown unit 'X'"),
        (&["serve", "--arc-max", "0"], "out of range"),
        (
            &["pool", "create", "--dir", d, "tank", "a"],
            "does not exist",
        ),
        (
            &["pool", "create", "--dir", d, "--size", "64M", "9tank", "a"],
            "must start with a letter",
        ),
        (
            &[
                "pool", "create", "--dir", d, "--size", "64M", "tank", "a", "a",
            ],
            "named twice",
        ),
        (&["pool", "status", "nosuch"], "no pool named 'nosuch'"),
        (&["pool", "scrub", "nosuch"], "no pool named 'nosuch'"),
    ];
    for (args, expect) in cases {
        let err = fails(&state, args);
        assert!(
            err.contains(expect),
            "{args:?}: expected '{expect}' in: {err}"
        );
    }
    // Nothing was left behind by the failed creates.
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .map(|r| r.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "half-made pool files: {leftovers:?}");
    let out = shoal(&state, &["pool", "frobnicate"]);
    assert!(!out.status.success());
}

/// A mirror side that was missing while the pool went on comes back FAULTED (it missed
/// writes), `pool status` says how to fix it, and `pool clear` resilvers it.
#[test]
fn a_device_back_from_missing_stays_faulted_until_cleared() {
    let t = tmp();
    let state = t.path().join("state");
    let dir = t.path().join("devs");
    let d = dir.to_str().unwrap();
    ok(
        &state,
        &[
            "pool", "create", "--dir", d, "--size", "64M", "tank", "mirror", "a", "b",
        ],
    );
    let b = std::fs::canonicalize(dir.join("b")).unwrap();
    let b = b.to_str().unwrap();
    let healthy = fails(&state, &["pool", "clear", "tank", b]);
    assert!(healthy.contains("not FAULTED"), "{healthy}");
    // The disk is pulled; the pool commits a change without it.
    std::fs::rename(dir.join("b"), t.path().join("b.away")).unwrap();
    ok(&state, &["fs", "create", "tank/made-without-b"]);
    ok(&state, &["pool", "export", "tank"]);
    std::fs::rename(t.path().join("b.away"), dir.join("b")).unwrap();
    ok(&state, &["pool", "import", "--dir", d, "tank"]);
    let status = ok(&state, &["pool", "status", "tank"]);
    assert!(
        status.contains("DEGRADED") && status.contains("FAULTED"),
        "{status}"
    );
    assert!(status.contains("shoal pool clear tank"), "{status}");
    let cleared: serde_json::Value =
        serde_json::from_str(&ok(&state, &["pool", "clear", "tank", b, "--json"])).unwrap();
    assert_eq!(cleared["errors"], 0);
    assert!(cleared["bytes_written"].as_u64().unwrap() > 0);
    let json: serde_json::Value =
        serde_json::from_str(&ok(&state, &["pool", "status", "tank", "--json"])).unwrap();
    assert_eq!(json[0]["health"], "ONLINE", "{json}");
    let check: serde_json::Value =
        serde_json::from_str(&ok(&state, &["pool", "check", "tank", "--json"])).unwrap();
    assert_eq!(check["problems"].as_array().unwrap().len(), 0);
}
