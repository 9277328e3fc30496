//! Alerts from a running daemon: a device failed through fault injection while files
//! are written becomes a critical device alert and a degraded-pool alert, delivered
//! to the configured command (JSON on its standard input) and webhook (a JSON POST to
//! a listener in this test); a scrub's end is an alert too; alerts are acknowledged
//! and survive a restart, which repeats none of them.
//!
//! Needs libnfs-utils (`.ci/test-deps.sh`).

mod common;
use common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A webhook receiver: every request's body goes to the channel; the first request
/// is refused (503, "REFUSED" on the channel) so the sender must retry, the others get
/// a 200.
fn webhook() -> (u16, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut refused = false;
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut len = 0usize;
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() || !request_line.starts_with("POST ") {
                continue;
            }
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() || line == "\r\n" || line.is_empty() {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; len];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            if !refused {
                refused = true;
                let _ = conn.write_all(
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
                let _ = tx.send("REFUSED".into());
                continue;
            }
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = tx.send(String::from_utf8_lossy(&body).into_owned());
        }
    });
    (port, rx)
}

fn alerts(state: &std::path::Path, all: bool) -> serde_json::Value {
    let mut args = vec!["alerts", "--json"];
    if all {
        args.push("--all");
    }
    serde_json::from_str(&ok(state, &args)).unwrap()
}

fn has(list: &serde_json::Value, kind: &str) -> Option<serde_json::Value> {
    list["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == kind)
        .cloned()
}

#[test]
fn a_failed_device_is_alerted_to_the_hooks_and_kept() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = t.path().join("state");
    create_tank(&state, t.path(), "128M", &["raidz1", "a", "b", "c"]);
    ok(&state, &["fs", "create", "tank/a"]);
    let (port, posted) = webhook();
    let hook_file = t.path().join("alerts.jsonl");
    let config = t.path().join("shoal.toml");
    std::fs::write(
        &config,
        format!(
            "[alerts]\ncommand = \"cat >> {}\"\nwebhook = \"http://127.0.0.1:{port}/hook\"\n",
            hook_file.display()
        ),
    )
    .unwrap();
    let mut d = Served::start(
        &state,
        &t.path().join("log"),
        &[
            "--config",
            config.to_str().unwrap(),
            "--fault-injection",
            "--share",
            "tank/a=127.0.0.1(rw,no_root_squash,insecure)",
        ],
    );
    // A healthy pool: nothing to say.
    std::thread::sleep(Duration::from_secs(3));
    let quiet = alerts(&state, true);
    assert!(has(&quiet, "device.faulted").is_none(), "{quiet}");
    assert_eq!(quiet["unacknowledged"], 0, "{quiet}");

    let (code, body) = d.get("/api/v1/pools/tank");
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let dead = status["vdevs"][0]["children"][0]["path"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, body) = d.post(
        "/api/v1/pools/tank/inject",
        &serde_json::json!({"device": dead, "fault": "fail"}),
    );
    assert_eq!(code, 200, "{body}");
    // Writes reach the dead device and fault it.
    let data = t.path().join("data");
    std::fs::write(&data, vec![7u8; 2 << 20]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut i = 0;
    let faulted = loop {
        let url = format!(
            "nfs://127.0.0.1/tank/a/f{i}?version=3&nfsport={p}&mountport={p}",
            p = d.nfs_port
        );
        let out = Command::new("nfs-cp")
            .arg(&data)
            .arg(&url)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "writes go on with a dead device: {out:?}"
        );
        i += 1;
        let list = alerts(&state, false);
        if let (Some(f), Some(_)) = (has(&list, "device.faulted"), has(&list, "pool.degraded")) {
            break f;
        }
        assert!(Instant::now() < deadline, "no device alert: {list}");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(faulted["severity"], "critical");
    assert_eq!(faulted["object"], dead.as_str());
    assert!(alerts(&state, false)["unacknowledged"].as_u64().unwrap() >= 2);

    // Both hooks got it as JSON; the webhook after a retry (its first answer was 503).
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = posted
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .expect("the webhook was called");
    assert_eq!(first, "REFUSED");
    loop {
        let body = posted
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the webhook got the device alert after a refusal");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        if v["kind"] == "device.faulted" {
            assert_eq!(v["object"], dead.as_str());
            break;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&hook_file).unwrap_or_default();
        let got: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if got
            .iter()
            .any(|a| a["kind"] == "device.faulted" && a["severity"] == "critical")
        {
            break;
        }
        assert!(Instant::now() < deadline, "the command got: {text}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // A scrub's end.
    let (code, body) = d.post("/api/v1/pools/tank/scrub", &serde_json::json!({}));
    assert_eq!(code, 200, "{body}");
    assert!(has(&alerts(&state, false), "scrub.finished").is_some());

    // A snapshot commits a transaction group, which records the device as FAULTED on
    // the others: it stays FAULTED across the restart below.
    ok(&state, &["snapshot", "create", "tank/a@synced"]);

    // Acknowledged, and kept across a restart.
    let acked: serde_json::Value =
        serde_json::from_str(&ok(&state, &["alerts", "ack", "--json"])).unwrap();
    assert!(acked["acknowledged"].as_u64().unwrap() >= 3, "{acked}");
    assert_eq!(alerts(&state, false)["unacknowledged"], 0);
    d.restart();
    // The monitor samples the pool at once and every 2 s: the device is still
    // FAULTED, which was said before the restart and is not said again.
    std::thread::sleep(Duration::from_secs(3));
    let kept = alerts(&state, true);
    assert_eq!(kept["unacknowledged"], 0, "{kept}");
    let (_, body) = d.get("/api/v1/pools/tank");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["health"], "DEGRADED", "{status}");
    let f = has(&kept, "device.faulted").expect("kept across a restart");
    assert_eq!(f["acknowledged"], true, "{kept}");
    let wrong = shoal(&state, &["alerts", "ack", "99999"]);
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("no alert 99999"));
}

/// `[storage] scrub_every`: a pool is scrubbed that long after the daemon first saw it
/// and again that long after each scrub; each scrub is alerted.
#[test]
fn pools_are_scrubbed_on_their_schedule() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = t.path().join("state");
    create_tank(&state, t.path(), "128M", &["mirror", "a", "b"]);
    let config = t.path().join("shoal.toml");
    std::fs::write(&config, "[storage]\nscrub_every = \"4s\"\n").unwrap();
    let started = Instant::now();
    let _d = Served::start(
        &state,
        &t.path().join("log"),
        &["--config", config.to_str().unwrap()],
    );
    let scrubs = |state: &std::path::Path| {
        alerts(state, true)["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["kind"] == "scrub.finished" && a["object"] == "tank")
            .count()
    };
    // Not at once: the schedule counts from when the daemon first saw the pool.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(scrubs(&state), 0, "scrubbed before its interval");
    let deadline = Instant::now() + Duration::from_secs(60);
    while scrubs(&state) < 2 {
        assert!(
            Instant::now() < deadline,
            "two scheduled scrubs did not happen"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        started.elapsed() >= Duration::from_secs(8),
        "two intervals of 4 s"
    );
    let book: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("scrubs.json")).unwrap()).unwrap();
    assert_eq!(book.as_object().unwrap().len(), 1, "{book}");
    // A wrong duration is refused at start with a clear error.
    std::fs::write(&config, "[storage]\nscrub_every = \"soon\"\n").unwrap();
    let out = shoal(
        &state,
        &[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--api",
            "off",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("duration 'soon'"), "{err}");
}
