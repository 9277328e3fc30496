//! `shoal volume`, on the pool directly and through the daemon's API: a thick and a
//! sparse volume are made and listed apart from filesystems, grown online, refused a
//! smaller size, a new block size and filesystem properties with a reason, snapshotted
//! and destroyed; the filesystem commands refuse a volume and the volume commands a
//! filesystem.

mod common;
use common::*;

use std::path::Path;

fn json(state: &Path, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(state, args)).unwrap()
}

fn prop(info: &serde_json::Value, name: &str) -> String {
    info["props"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["property"] == name)
        .unwrap_or_else(|| panic!("no {name} in {info}"))["value"]
        .as_str()
        .unwrap()
        .to_string()
}

fn refused(state: &Path, args: &[&str], says: &str) {
    let out = shoal(state, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(err.contains(says), "{args:?}: {err}");
}

/// The whole life of two volumes, with or without a daemon holding the pool.
fn volume_life(state: &Path) {
    let made = json(
        state,
        &[
            "volume",
            "create",
            "tank/vm1",
            "--size",
            "32M",
            "-o",
            "compression=lz4",
            "--json",
        ],
    );
    assert_eq!(prop(&made, "type"), "volume");
    assert_eq!(prop(&made, "volsize"), "32M");
    assert_eq!(prop(&made, "volblocksize"), "16K");
    assert_ne!(prop(&made, "refreservation"), "none");
    let text = ok(
        state,
        &[
            "volume",
            "create",
            "tank/sparse",
            "--size",
            "64M",
            "--volblocksize",
            "4K",
            "--sparse",
        ],
    );
    assert!(
        text.contains("created tank/sparse: 64M in 4K blocks, sparse"),
        "{text}"
    );
    ok(state, &["fs", "create", "tank/files"]);

    // Each listing holds its own kind.
    let volumes = json(state, &["volume", "list", "--json"]);
    let names: Vec<&str> = volumes
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tank/sparse", "tank/vm1"]);
    let filesystems = json(state, &["fs", "list", "--json"]);
    assert!(filesystems
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["name"] != "tank/vm1" && f["name"] != "tank/sparse"));
    let table = ok(state, &["volume", "list"]);
    assert!(
        table.contains("VOLSIZE") && table.contains("tank/vm1"),
        "{table}"
    );

    // Grown; never shrunk; the block size and filesystem properties refused.
    ok(state, &["volume", "set", "tank/vm1", "volsize=48M"]);
    let got = json(state, &["volume", "get", "tank/vm1", "volsize", "--json"]);
    assert_eq!(got[0]["value"], "48M");
    refused(
        state,
        &["volume", "set", "tank/vm1", "volsize=16M"],
        "never shrinks",
    );
    refused(
        state,
        &["volume", "set", "tank/vm1", "volblocksize=8K"],
        "fixed",
    );
    refused(
        state,
        &["volume", "set", "tank/vm1", "atime=off"],
        "a volume has no atime",
    );
    refused(
        state,
        &["volume", "get", "tank/vm1", "recordsize"],
        "unknown property",
    );
    refused(
        state,
        &[
            "volume",
            "create",
            "tank/bad",
            "--size",
            "10M",
            "--volblocksize",
            "3K",
        ],
        "volblocksize",
    );
    refused(
        state,
        &["volume", "create", "tank/bad", "--size", "lots"],
        "not a size",
    );
    refused(
        state,
        &["volume", "create", "tank/huge", "--size", "100G"],
        "no space",
    );

    // Each kind's commands refuse the other.
    refused(state, &["fs", "get", "tank/vm1"], "is a volume");
    refused(state, &["fs", "destroy", "tank/vm1"], "is a volume");
    refused(state, &["volume", "get", "tank/files"], "is a filesystem");
    refused(
        state,
        &["volume", "destroy", "tank/files"],
        "is a filesystem",
    );

    // Snapshots as for filesystems.
    ok(state, &["snapshot", "create", "tank/vm1@first"]);
    let snaps = ok(state, &["snapshot", "list", "tank/vm1"]);
    assert!(snaps.contains("tank/vm1@first"), "{snaps}");
    ok(state, &["snapshot", "destroy", "tank/vm1@first"]);

    ok(state, &["volume", "destroy", "tank/sparse"]);
    ok(state, &["volume", "destroy", "tank/vm1"]);
    let volumes = json(state, &["volume", "list", "--json"]);
    assert_eq!(volumes.as_array().unwrap().len(), 0);
}

#[test]
fn volumes_on_the_pool_directly() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = t.path().join("state");
    create_tank(&state, t.path(), "128M", &["raidz1", "a", "b", "c"]);
    volume_life(&state);
}

#[test]
fn volumes_through_the_daemon() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = t.path().join("state");
    create_tank(&state, t.path(), "128M", &["raidz1", "a", "b", "c"]);
    let mut d = Served::start(&state, &t.path().join("log"), &[]);
    volume_life(&state);
    // The API's own refusals carry their reason and status.
    let (code, body) = d.post(
        "/api/v1/volumes",
        &serde_json::json!({"name": "tank/v", "volsize": "8M", "colour": "blue"}),
    );
    assert_eq!(code, 400, "{body}");
    let (code, body) = d.post(
        "/api/v1/volumes",
        &serde_json::json!({"name": "tank/v", "volsize": "100G"}),
    );
    assert_eq!(code, 409, "{body}");
    d.stop();
}
