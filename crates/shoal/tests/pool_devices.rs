//! A served pool's devices changed through the daemon while an NFS client writes:
//! `shoal pool attach` turns a plain disk into a mirror, `add` grows the pool by a
//! mirror and gives it a log and a cache device, `offline`/`online` take a side out
//! and resilver it, `detach` and `remove` take devices away; wrong requests are
//! refused and change nothing; after a restart the daemon imports the pool as it was
//! left, and every byte written reads back.
//!
//! Needs libnfs-utils (`.ci/test-deps.sh`).

mod common;
use common::*;

use std::path::Path;

fn status(state: &Path) -> serde_json::Value {
    let all: serde_json::Value =
        serde_json::from_str(&ok(state, &["pool", "status", "--json"])).unwrap();
    all.as_array().unwrap()[0].clone()
}

/// (layout, [(path, health)]) of each data vdev.
fn vdevs(st: &serde_json::Value) -> Vec<(String, Vec<(String, String)>)> {
    st["vdevs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["layout"].as_str().unwrap().to_string(),
                t["children"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| {
                        (
                            c["path"].as_str().unwrap().to_string(),
                            c["health"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect(),
            )
        })
        .collect()
}

fn paths(st: &serde_json::Value, class: &str) -> Vec<String> {
    st[class]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["path"].as_str().unwrap().to_string())
        .collect()
}

fn refused(state: &Path, args: &[&str], says: &str) {
    let out = shoal(state, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains(says),
        "{args:?}: expected a refusal saying '{says}', got: {err}"
    );
}

#[test]
fn devices_change_while_the_pool_serves_and_the_change_survives_a_restart() {
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
    let dev = |n: &str| devs.join(n).display().to_string();
    ok(
        &state,
        &[
            "pool", "create", "--dir", dir, "--size", "256M", "tank", "a",
        ],
    );
    ok(&state, &["fs", "create", "tank/data"]);
    ok(
        &state,
        &[
            "share",
            "set",
            "tank/data",
            "127.0.0.1(rw,no_root_squash,insecure)",
        ],
    );
    nfs_put(&d, "/tank/data", "first", &pattern(3 << 20, 1));

    // A client writes all along.
    let writer = NfsWriter::start(&d, t.path(), "/tank/data", "during", 512 << 10, 200);

    // Attach: the plain disk becomes a mirror, resilvered.
    let out = ok(
        &state,
        &[
            "pool",
            "attach",
            "tank",
            &dev("a"),
            &dev("b"),
            "--size",
            "256M",
            "--json",
        ],
    );
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["errors"], 0, "{summary}");
    assert!(
        summary["bytes_written"].as_u64().unwrap() >= 2 << 20,
        "{summary}"
    );
    let st = status(&state);
    assert_eq!(
        vdevs(&st)[0],
        (
            "mirror".to_string(),
            vec![
                (dev("a"), "ONLINE".to_string()),
                (dev("b"), "ONLINE".to_string())
            ]
        )
    );

    // Add: a second mirror, a log and a cache device, in one request.
    let before = st["capacity_bytes"].as_u64().unwrap();
    ok(
        &state,
        &[
            "pool", "add", "--dir", dir, "--size", "256M", "tank", "mirror", "c", "d", "log", "e",
            "cache", "f",
        ],
    );
    let st = status(&state);
    assert_eq!(vdevs(&st).len(), 2, "{st}");
    assert_eq!(vdevs(&st)[1].0, "mirror");
    assert!(
        st["capacity_bytes"].as_u64().unwrap() > before * 3 / 2,
        "{st}"
    );
    assert_eq!(paths(&st, "log"), vec![dev("e")]);
    assert_eq!(paths(&st, "cache"), vec![dev("f")]);
    assert_eq!(st["intent_log"]["ring"], "log devices");
    // The client's new files spread to the new vdev.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let v = &status(&state)["vdevs"][1];
        let used = v["capacity_bytes"].as_u64().unwrap() - v["free_bytes"].as_u64().unwrap();
        if used > 2 << 20 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no writes reached the new vdev: {v}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    // Offline and online: degraded meanwhile, resilvered after.
    ok(&state, &["pool", "offline", "tank", &dev("a")]);
    let st = status(&state);
    assert_eq!(st["health"], "DEGRADED");
    assert_eq!(vdevs(&st)[0].1[0].1, "OFFLINE");
    refused(
        &state,
        &["pool", "offline", "tank", &dev("b")],
        "without enough devices",
    );
    ok(&state, &["pool", "online", "tank", &dev("a")]);
    assert_eq!(status(&state)["health"], "ONLINE");

    // Wrong requests change nothing.
    refused(
        &state,
        &["pool", "remove", "tank", &dev("c")],
        "data device",
    );
    refused(&state, &["pool", "remove", "tank", "nope"], "no device");
    refused(
        &state,
        &[
            "pool",
            "attach",
            "tank",
            &dev("a"),
            "/tmp/elsewhere",
            "--size",
            "256M",
        ],
        "device director",
    );
    assert!(!Path::new("/tmp/elsewhere").exists());
    refused(
        &state,
        &["pool", "add", "tank", "mirror", &dev("g")],
        "at least 2",
    );
    assert!(!devs.join("g").exists());

    // Detach and remove.
    ok(&state, &["pool", "detach", "tank", &dev("a")]);
    ok(&state, &["pool", "remove", "tank", &dev("e")]);
    ok(&state, &["pool", "remove", "tank", &dev("f")]);
    let st = status(&state);
    assert_eq!(
        vdevs(&st)[0],
        ("disk".to_string(), vec![(dev("b"), "ONLINE".to_string())])
    );
    assert!(
        paths(&st, "log").is_empty() && paths(&st, "cache").is_empty(),
        "{st}"
    );
    assert_eq!(st["intent_log"]["ring"], "pool");

    let written = writer.finish();
    eprintln!(
        "{} files written over NFS during the changes",
        written.files.len()
    );

    // A restart imports the pool as it was left.
    d.restart();
    let st = status(&state);
    assert_eq!(vdevs(&st).len(), 2, "{st}");
    assert_eq!(vdevs(&st)[0].1, vec![(dev("b"), "ONLINE".to_string())]);
    assert_eq!(vdevs(&st)[1].1.len(), 2);
    assert_eq!(
        nfs_get(&d, "/tank/data", "first").unwrap(),
        pattern(3 << 20, 1)
    );
    written.check(&d);
    let check: serde_json::Value =
        serde_json::from_str(&ok(&state, &["pool", "check", "tank", "--json"])).unwrap();
    assert_eq!(check["problems"].as_array().unwrap().len(), 0, "{check}");
    d.stop();
}
