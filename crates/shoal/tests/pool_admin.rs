//! Pools administered while the daemon serves: `shoal pool create/replace/export/
//! import/destroy` go through the running daemon's API (the commands are the same as
//! without a daemon); a device replaced while an NFS client writes is resilvered and
//! every byte reads back; an exported pool stops being served and comes back with its
//! shares when imported; device paths outside the device directories are refused.
//!
//! Needs libnfs-utils (`.ci/test-deps.sh`).

mod common;
use common::*;

use std::path::Path;

fn pool_json(state: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(state, &["pool", "status", "--json"])).unwrap()
}

/// Device paths of pool `name` as its status lists them.
fn devices(state: &Path, name: &str) -> Vec<String> {
    let all = pool_json(state);
    let p = all
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no pool {name}: {all}"));
    p["vdevs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["children"].as_array().unwrap().iter())
        .map(|c| format!("{} {}", c["path"].as_str().unwrap(), c["health"]))
        .collect()
}

#[test]
fn pools_are_created_repaired_exported_imported_and_destroyed_while_serving() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = t.path().join("state");
    let devs = t.path().join("devs");
    std::fs::create_dir_all(&devs).unwrap();
    let devs = std::fs::canonicalize(&devs).unwrap();
    let mut d = Served::start(
        &state,
        &t.path().join("serve.log"),
        &["--device-dir", devs.to_str().unwrap()],
    );
    let dir = devs.to_str().unwrap();

    // Created through the daemon: it serves the new pool at once.
    let out = ok(
        &state,
        &[
            "pool", "create", "--dir", dir, "--size", "256M", "vault", "mirror", "a", "b",
        ],
    );
    assert!(out.contains("created pool 'vault'"), "{out}");
    let again = shoal(
        &state,
        &[
            "pool", "create", "--dir", dir, "--size", "256M", "vault", "c",
        ],
    );
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success() && err.contains("pool 'vault' exists"),
        "a second pool of the same name is refused: {err}"
    );
    assert!(!devs.join("c").exists(), "nothing made for a refused pool");
    ok(&state, &["fs", "create", "vault/data"]);
    ok(
        &state,
        &[
            "share",
            "set",
            "vault/data",
            "127.0.0.1(rw,no_root_squash,insecure)",
        ],
    );
    nfs_put(&d, "/vault/data", "first", &pattern(3 << 20, 1));

    // Mounted locally by the daemon beside the share: both see one filesystem, a
    // snapshot is taken while mounted, the pool cannot be exported from under the
    // mount, and unmount returns with the mount gone.
    let at = t.path().join("mnt");
    std::fs::create_dir_all(&at).unwrap();
    let out = shoal(&state, &["mount", "vault/data", at.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert!(is_mounted(&std::fs::canonicalize(&at).unwrap()));
    std::fs::write(at.join("local"), b"written through FUSE").unwrap();
    assert_eq!(
        nfs_get(&d, "/vault/data", "local").as_deref(),
        Some(&b"written through FUSE"[..])
    );
    assert_eq!(
        std::fs::read(at.join("first")).unwrap(),
        pattern(3 << 20, 1)
    );
    ok(&state, &["snapshot", "create", "vault/data@mounted"]);
    assert_eq!(
        std::fs::read(at.join(".shoal/snapshot/mounted/local")).unwrap(),
        b"written through FUSE"
    );
    let busy = shoal(&state, &["pool", "export", "vault"]);
    let err = String::from_utf8_lossy(&busy.stderr);
    assert!(
        !busy.status.success() && err.contains("is mounted on"),
        "{err}"
    );
    let (code, _) = d.post(
        "/api/v1/mounts",
        &serde_json::json!({"dataset": "vault/data", "dir": t.path().to_str().unwrap()}),
    );
    assert_eq!(code, 409, "a directory that is not empty is refused");
    ok(&state, &["unmount", at.to_str().unwrap()]);
    assert!(!is_mounted(&std::fs::canonicalize(&at).unwrap()));
    // Unmounted means let go: the pool exports at once (and comes back).
    ok(&state, &["pool", "export", "vault"]);
    ok(&state, &["pool", "import", "--dir", dir, "vault"]);
    ok(&state, &["snapshot", "destroy", "vault/data@mounted"]);

    // Paths outside the device directory are refused, and nothing is created.
    let outside = t.path().join("elsewhere");
    let (code, body) = d.post(
        "/api/v1/pools",
        &serde_json::json!({"name": "stray", "layout": [outside.to_str().unwrap()], "size": 268435456}),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("device directory"), "{body}");
    assert!(!outside.exists());
    let (code, body) = d.post(
        "/api/v1/pools",
        &serde_json::json!({"name": "stray", "layout": ["../x"], "size": 268435456}),
    );
    assert_eq!(code, 400, "{body}");

    // A device replaced while a client writes: resilvered, nothing lost.
    let writer = NfsWriter::start(&d, t.path(), "/vault/data", "during", 1 << 20, 100);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let a = devs.join("a");
    let c = devs.join("c");
    let out = ok(
        &state,
        &[
            "pool",
            "replace",
            "vault",
            a.to_str().unwrap(),
            c.to_str().unwrap(),
            "--size",
            "256M",
            "--json",
        ],
    );
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["errors"], 0, "{summary}");
    assert!(
        summary["bytes_written"].as_u64().unwrap() >= 3 << 20,
        "{summary}"
    );
    let written = writer.finish();
    let now = devices(&state, "vault");
    assert!(
        now.contains(&format!("{} \"ONLINE\"", c.display())),
        "{now:?}"
    );
    assert!(
        !now.iter().any(|p| p.starts_with(a.to_str().unwrap())),
        "{now:?}"
    );
    assert_eq!(
        nfs_get(&d, "/vault/data", "first").unwrap(),
        pattern(3 << 20, 1)
    );
    written.check(&d);
    let check: serde_json::Value =
        serde_json::from_str(&ok(&state, &["pool", "check", "vault", "--json"])).unwrap();
    assert_eq!(check["problems"].as_array().unwrap().len(), 0, "{check}");
    // The replaced device is no longer the pool's: the resilvered side alone holds it.
    let alerts = ok(&state, &["alerts", "--all", "--json"]);
    assert!(alerts.contains("resilver.finished"), "{alerts}");

    // A spare added and removed through the daemon.
    let spare = devs.join("s");
    ok(
        &state,
        &[
            "pool",
            "spare",
            "add",
            "vault",
            spare.to_str().unwrap(),
            "--size",
            "256M",
        ],
    );
    let spares = |state: &Path| pool_json(state)[0]["spares"].as_array().unwrap().clone();
    assert_eq!(spares(&state).len(), 1);
    assert_eq!(spares(&state)[0]["path"], spare.to_str().unwrap());
    let err = String::from_utf8_lossy(
        &shoal(&state, &["pool", "spare", "remove", "vault", "nope"]).stderr,
    )
    .into_owned();
    assert!(err.contains("no spare 'nope'"), "{err}");
    ok(
        &state,
        &["pool", "spare", "remove", "vault", spare.to_str().unwrap()],
    );
    assert!(spares(&state).is_empty());

    // Exported: no longer served; imported again: served with its share.
    ok(&state, &["pool", "export", "vault"]);
    assert!(pool_json(&state).as_array().unwrap().is_empty());
    assert!(nfs_get(&d, "/vault/data", "first").is_none());
    let out = ok(&state, &["pool", "import", "--dir", dir, "vault"]);
    assert!(out.contains("imported pool 'vault'"), "{out}");
    assert_eq!(
        nfs_get(&d, "/vault/data", "first").unwrap(),
        pattern(3 << 20, 1)
    );

    // Destroyed: gone, and its devices hold no pool to import.
    ok(&state, &["pool", "destroy", "vault"]);
    assert!(pool_json(&state).as_array().unwrap().is_empty());
    assert!(!shoal(&state, &["pool", "import", "--dir", dir, "vault"])
        .status
        .success());

    // The daemon ends cleanly, and without it the registry holds no pool.
    d.stop();
    let out = ok(&state, &["pool", "status"]);
    assert!(out.contains("no pools"), "{out}");
}
