//! Helpers of the replication tests (`replication.rs`, `replication_holds.rs`): two
//! appliances with their pools, paired as primary and replica, and the CLI calls that
//! set up and run replication actions.

use super::*;
use std::path::{Path, PathBuf};

/// A pool `tank` in its own state directory, with filesystem `fs` (when given).
pub fn appliance(dir: &Path, fs: Option<&str>) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let state = dir.join("state");
    create_tank(&state, dir, "256M", &["mirror", "a", "b"]);
    if let Some(fs) = fs {
        ok(&state, &["fs", "create", fs, "-o", "compression=lz4"]);
    }
    state
}

pub fn json(state: &Path, args: &[&str]) -> serde_json::Value {
    let out = ok(state, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// Snapshot names (after the `@`) of `fs`.
pub fn snapshots(state: &Path, fs: &str) -> Vec<String> {
    json(state, &["snapshot", "list", fs, "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let n = s["name"].as_str().unwrap();
            n.split_once('@').unwrap().1.to_string()
        })
        .collect()
}

/// Makes a credential on `replica` and adds it as target `name` on `primary`.
pub fn pair(primary: &Path, replica: &Served, name: &str, cert: Option<&Path>) {
    let c = json(
        &replica.state,
        &["replication", "credential", "create", name, "--json"],
    );
    let token = c["token"].as_str().unwrap();
    let host = if cert.is_some() {
        "localhost"
    } else {
        "127.0.0.1"
    };
    let address = format!("{host}:{}", replica.api_port);
    let mut args = vec![
        "replication",
        "target",
        "add",
        name,
        "--address",
        &address,
        "--credential",
        token,
    ];
    if let Some(c) = cert {
        args.extend(["--certificate", c.to_str().unwrap()]);
    }
    ok(primary, &args);
}

pub fn add_action(primary: &Path, fs: &str, target: &str, remote: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "replication",
        "add",
        fs,
        "--target",
        target,
        "--remote",
        remote,
        "--json",
    ];
    args.extend_from_slice(extra);
    json(primary, &args)["id"].as_u64().unwrap().to_string()
}

pub fn run(primary: &Path, id: &str) -> serde_json::Value {
    json(primary, &["replication", "run", id, "--json"])
}

/// Shares `fs` of `state` read-write to 127.0.0.1 (libnfs clients, root not squashed).
pub fn share_to_loopback(state: &Path, fs: &str) {
    ok(
        state,
        &["share", "set", fs, "127.0.0.1(rw,no_root_squash,insecure)"],
    );
}

/// Two daemons over plain HTTP on loopback: a primary whose `tank/data` is shared to
/// loopback, and a replica it knows as target `vault`. Their state directories, then
/// the daemons.
pub fn primary_and_replica(dir: &Path) -> (PathBuf, PathBuf, Served, Served) {
    let p = appliance(&dir.join("primary"), Some("tank/data"));
    let r = appliance(&dir.join("replica"), None);
    let primary = Served::start(&p, &dir.join("p.log"), &[]);
    let replica = Served::start(&r, &dir.join("r.log"), &[]);
    share_to_loopback(&p, "tank/data");
    pair(&p, &replica, "vault", None);
    (p, r, primary, replica)
}
