//! The daemon's admin API and the CLI as its client: `shoal serve` runs, and the
//! `fs`, `snapshot`, `pool status/check`, `share` and `status` commands go through its
//! API (they could not do otherwise: the daemon holds the pools). Shares changed
//! through the API survive a restart; bad requests get JSON errors; every operation
//! of docs/openapi.json is served.

mod common;
use common::*;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running `shoal serve` on loopback with ports picked by the kernel.
struct Daemon {
    child: Option<Child>,
    api: SocketAddr,
    nfs: SocketAddr,
}

impl Daemon {
    fn start(state: &Path) -> Daemon {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(["serve", "--listen", "127.0.0.1:0", "--api", "127.0.0.1:0"])
            .args(["--iscsi", "off"])
            .env("SHOAL_STATE_DIR", state)
            .env("SHOAL_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start shoal serve");
        let (_, api) = daemon_addrs(state, &mut child, None);
        let mut d = Daemon {
            child: Some(child),
            api,
            nfs: "0.0.0.0:0".parse().unwrap(),
        };
        let (code, st) = d.request("GET", "/status", None);
        assert_eq!(code, 200, "{st}");
        d.nfs = st["nfs"][0].as_str().unwrap().parse().unwrap();
        d
    }

    /// One API call; returns the status code and the JSON body (null when empty).
    fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, serde_json::Value) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let url = format!("http://{}/api/v1{path}", self.api);
        let json = body.unwrap_or("{}").as_bytes();
        let r = match method {
            "GET" => agent.get(&url).call(),
            "DELETE" => agent.delete(&url).call(),
            "POST" => agent
                .post(&url)
                .header("content-type", "application/json")
                .send(json),
            "PUT" => agent
                .put(&url)
                .header("content-type", "application/json")
                .send(json),
            "PATCH" => agent
                .patch(&url)
                .header("content-type", "application/json")
                .send(json),
            m => panic!("method {m}"),
        };
        let mut resp = r.expect("the API answers");
        let code = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap();
        let value = if text.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"))
        };
        (code, value)
    }

    /// SIGTERM, and the daemon must exit cleanly and remove its address file.
    fn stop(mut self, state: &Path) {
        let mut child = self.child.take().unwrap();
        signal(&child, "TERM");
        let status = child.wait().unwrap();
        assert!(status.success(), "shoal serve exited with {status}");
        assert!(!server::DaemonFile::path(state).exists());
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn make_pool(dir: &Path) -> PathBuf {
    let state = dir.join("state");
    create_tank(&state, dir, "128M", &["raidz1", "a", "b", "c"]);
    ok(&state, &["fs", "create", "tank/a"]);
    state
}

/// A command that must fail; returns its error output.
fn fails(state: &Path, args: &[&str]) -> String {
    let out = shoal(state, args);
    assert!(!out.status.success(), "shoal {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn nfs_ls(d: &Daemon, export: &str) -> bool {
    let url = format!(
        "nfs://127.0.0.1{export}?version=3&nfsport={p}&mountport={p}",
        p = d.nfs.port()
    );
    Command::new("nfs-ls")
        .arg(url)
        .output()
        .expect("nfs-ls (libnfs-utils; .ci/test-deps.sh)")
        .status
        .success()
}

#[test]
fn cli_commands_go_through_the_running_daemon() {
    let t = tempfile::tempdir().unwrap();
    let state = make_pool(t.path());
    let d = Daemon::start(&state);

    // Filesystems and properties: the daemon holds the pool, so these can only work
    // through its API.
    ok(&state, &["fs", "create", "tank/b", "-o", "compression=lz4"]);
    ok(
        &state,
        &["fs", "set", "tank/b", "sync=disabled", "atime=off"],
    );
    let got: serde_json::Value =
        serde_json::from_str(&ok(&state, &["fs", "get", "tank/b", "sync", "--json"])).unwrap();
    assert_eq!(got[0]["value"], "disabled");
    assert_eq!(got[0]["source"], "local");
    ok(&state, &["fs", "inherit", "tank/b", "atime"]);
    let list = ok(&state, &["fs", "list"]);
    assert!(list.contains("tank/b") && list.contains("lz4"), "{list}");
    let err = fails(&state, &["fs", "set", "tank/b", "compression=bogus"]);
    assert!(err.contains("compression must be"), "{err}");
    let err = fails(&state, &["fs", "create", "tank/b"]);
    assert!(err.contains("exists"), "{err}");

    // Status shows sync=disabled for what it is.
    let status = ok(&state, &["status"]);
    assert!(
        status
            .contains("sync=disabled: synchronous writes are acknowledged before they are durable"),
        "{status}"
    );
    let st: serde_json::Value = serde_json::from_str(&ok(&state, &["status", "--json"])).unwrap();
    let b = st["pools"][0]["filesystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "tank/b")
        .unwrap()
        .clone();
    assert_eq!(b["sync"], "disabled");

    // Snapshots.
    assert!(ok(&state, &["snapshot", "create", "tank/b@one"]).contains("created tank/b@one"));
    assert!(ok(&state, &["snapshot", "list", "tank"]).contains("tank/b@one"));
    ok(&state, &["snapshot", "destroy", "tank/b@one"]);
    assert!(!ok(&state, &["snapshot", "list", "tank/b"]).contains("tank/b@one"));

    // Shares go live at once, and away at once.
    assert!(!nfs_ls(&d, "/tank/b"), "not shared yet");
    ok(
        &state,
        &[
            "share",
            "set",
            "tank/b",
            "127.0.0.1(rw,no_root_squash,insecure)",
        ],
    );
    assert!(nfs_ls(&d, "/tank/b"), "shared");
    assert!(ok(&state, &["share", "list"]).contains("/tank/b"));
    let exports = ok(&state, &["share", "exports"]);
    assert!(exports.contains("/tank/b 127.0.0.1(rw"), "{exports}");
    let err = fails(&state, &["fs", "destroy", "tank/b"]);
    assert!(err.contains("shared over NFS"), "{err}");
    ok(&state, &["share", "remove", "tank/b"]);
    assert!(!nfs_ls(&d, "/tank/b"), "unshared");

    // Pool commands: status and check through the API, the rest refused clearly.
    let pools: serde_json::Value =
        serde_json::from_str(&ok(&state, &["pool", "status", "tank", "--json"])).unwrap();
    assert_eq!(pools[0]["name"], "tank");
    assert!(ok(&state, &["pool", "check", "tank"]).contains("no problems found"));
    assert!(ok(&state, &["pool", "scrub", "tank"]).contains("with 0 errors"));
    // Pool administration goes through the daemon too (pool_admin.rs tests it).
    let err = fails(&state, &["pool", "export", "nopool"]);
    assert!(err.contains("no imported pool named 'nopool'"), "{err}");

    ok(&state, &["fs", "destroy", "tank/b"]);
    d.stop(&state);
    // Without the daemon the same commands work on the pool directly, and see what
    // the daemon committed.
    let list = ok(&state, &["fs", "list"]);
    assert!(
        list.contains("tank/a") && !list.contains("tank/b"),
        "{list}"
    );
    assert!(ok(&state, &["pool", "check", "tank"]).contains("no problems found"));
    let err = fails(&state, &["share", "list"]);
    assert!(err.contains("needs the daemon"), "{err}");
}

#[test]
fn shares_survive_restarts_and_bad_requests_get_json_errors() {
    let t = tempfile::tempdir().unwrap();
    let state = make_pool(t.path());
    let d = Daemon::start(&state);
    let (code, share) = d.request(
        "PUT",
        "/shares/tank/a",
        Some(r#"{"rules": "127.0.0.1(rw,insecure)"}"#),
    );
    assert_eq!(code, 200, "{share}");
    assert_eq!(share["path"], "/tank/a");
    d.stop(&state);

    let d = Daemon::start(&state);
    let (_, shares) = d.request("GET", "/shares", None);
    assert_eq!(shares[0]["dataset"], "tank/a", "{shares}");
    assert!(nfs_ls(&d, "/tank/a"));
    let (code, _) = d.request("DELETE", "/shares/tank/a", None);
    assert_eq!(code, 204);
    d.stop(&state);

    let d = Daemon::start(&state);
    let (_, shares) = d.request("GET", "/shares", None);
    assert_eq!(shares, serde_json::json!([]));

    // Bad requests: a JSON error, the right status, nothing changed.
    let cases: [(&str, &str, Option<&str>, u16); 9] = [
        ("POST", "/filesystems", Some("{not json"), 400),
        ("POST", "/filesystems", Some(r#"{"nam": "tank/x"}"#), 400),
        ("POST", "/filesystems", Some(r#"{"name": "tank/a"}"#), 409),
        ("POST", "/filesystems", Some(r#"{"name": "nopool/x"}"#), 404),
        (
            "PATCH",
            "/filesystems/tank/a",
            Some(r#"{"properties": {"recordsize": "3K"}}"#),
            400,
        ),
        ("GET", "/pools/nopool", None, 404),
        ("DELETE", "/snapshots/tank/a@never", None, 404),
        (
            "PUT",
            "/shares/tank/a",
            Some(r#"{"rules": "*(rw,frobnicate)"}"#),
            400,
        ),
        ("GET", "/no/such/path", None, 404),
    ];
    for (method, path, body, want) in cases {
        let (code, v) = d.request(method, path, body);
        assert_eq!(code, want, "{method} {path}: {v}");
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{method} {path}: {v}"
        );
    }
    let (_, list) = d.request("GET", "/filesystems", None);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tank", "tank/a"]);
    let (_, a) = d.request("GET", "/filesystems/tank/a", None);
    let recordsize = a["props"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["property"] == "recordsize")
        .unwrap();
    assert_eq!(recordsize["value"], "128K");
    let (_, shares) = d.request("GET", "/shares", None);
    assert_eq!(shares, serde_json::json!([]));
    d.stop(&state);
}

fn documented_ok(op: &serde_json::Value, code: u16) -> bool {
    op["responses"].get(code.to_string()).is_some()
}

/// Every operation of docs/openapi.json reaches a handler (not the fallback, not 405),
/// and answers with a status the document lists for it.
#[test]
fn every_documented_operation_is_served() {
    let doc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let t = tempfile::tempdir().unwrap();
    let state = make_pool(t.path());
    let d = Daemon::start(&state);
    // What the examples name: tank/home with a snapshot.
    assert_eq!(
        d.request("POST", "/filesystems", Some(r#"{"name": "tank/home"}"#))
            .0,
        201
    );
    assert_eq!(
        d.request(
            "POST",
            "/snapshots",
            Some(r#"{"name": "tank/home@monday"}"#)
        )
        .0,
        201
    );
    let mut operations = 0;
    let mut stream: Option<Vec<u8>> = None;
    // Deletions last, so the other calls find what they name.
    let order = ["get", "post", "put", "patch", "delete"];
    for method in order {
        for (path, item) in doc["paths"].as_object().unwrap() {
            let Some(op) = item.get(method) else { continue };
            // The pool administration calls name no pool of this daemon: its pool must
            // outlive them (their own test is pool_admin.rs).
            let admin = ["/export", "/replace", "/clear"]
                .iter()
                .any(|e| path.ends_with(e))
                || (path == "/api/v1/pools/{pool}" && method == "delete");
            let concrete = path
                .replace("{pool}", if admin { "nopool" } else { "tank" })
                .replace(
                    "{name}",
                    if path.contains("snapshots") {
                        "tank/home@monday"
                    } else if path.contains("volumes") {
                        "tank/vm1"
                    } else if path.contains("iscsi") {
                        "iqn.2026-12.org.example:vm1"
                    } else if path.contains("worksheets") {
                        "reads"
                    } else if path.contains("replication") {
                        "vault"
                    } else {
                        "tank/home"
                    },
                )
                .replace("{dataset}", "tank/home")
                .replace("{filesystem}", "tank/home")
                .replace("{id}", "1");
            // Replicas take streams only with a replication credential.
            if path.starts_with("/api/v1/replication/incoming/") {
                let url = format!("http://{}{concrete}", d.api);
                let r = match method {
                    "get" => ureq::get(&url).call(),
                    _ => ureq::post(&url)
                        .header("content-type", "application/octet-stream")
                        .send(&b"SHOALSND"[..]),
                };
                assert!(
                    matches!(r, Err(ureq::Error::StatusCode(401))),
                    "{method} {path} without a credential: {r:?}"
                );
                assert!(
                    documented_ok(op, 401),
                    "{method} {path}: 401 not documented"
                );
                operations += 1;
                continue;
            }
            // Streams are bytes, not JSON: the send's answer is the receive's body.
            if path.starts_with("/api/v1/send/") {
                let url = format!("http://{}/api/v1/send/tank/home@monday", d.api);
                let mut r = ureq::get(&url).call().unwrap();
                assert_eq!(r.status().as_u16(), 200);
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut r.body_mut().as_reader(), &mut bytes).unwrap();
                assert!(bytes.starts_with(b"SHOALSND"), "a snapshot stream");
                assert!(
                    documented_ok(op, 200),
                    "{method} {path}: 200 not documented"
                );
                stream = Some(bytes);
                operations += 1;
                continue;
            }
            if path.starts_with("/api/v1/receive/") {
                let bytes = stream.take().expect("the send ran first");
                let url = format!("http://{}/api/v1/receive/tank/copy", d.api);
                let r = ureq::post(&url)
                    .header("content-type", "application/octet-stream")
                    .send(&bytes[..])
                    .unwrap();
                assert_eq!(r.status().as_u16(), 201);
                assert!(
                    documented_ok(op, 201),
                    "{method} {path}: 201 not documented"
                );
                operations += 1;
                continue;
            }
            let Some(rel) = concrete.strip_prefix("/api/v1") else {
                // Outside the JSON API: /metrics, in Prometheus's text format.
                assert_eq!(concrete, "/metrics");
                let mut r = ureq::get(&format!("http://{}{concrete}", d.api))
                    .call()
                    .unwrap();
                assert_eq!(r.status().as_u16(), 200);
                let text = r.body_mut().read_to_string().unwrap();
                assert!(
                    text.contains("# TYPE shoal_nfs_operations_total counter"),
                    "{text}"
                );
                assert!(
                    documented_ok(op, 200),
                    "{method} {path}: 200 not documented"
                );
                operations += 1;
                continue;
            };
            // Required query parameters take their documented examples.
            let query: Vec<String> = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query" && p["required"] == true)
                .map(|p| {
                    let example = p["example"].as_str().unwrap();
                    let escaped: String = example
                        .bytes()
                        .map(|b| match b {
                            b'[' => "%5B".to_string(),
                            b']' => "%5D".to_string(),
                            b'=' => "%3D".to_string(),
                            _ => (b as char).to_string(),
                        })
                        .collect();
                    format!("{}={escaped}", p["name"].as_str().unwrap())
                })
                .collect();
            let rel = if query.is_empty() {
                rel.to_string()
            } else {
                format!("{rel}?{}", query.join("&"))
            };
            let rel = rel.as_str();
            let body = op.get("requestBody").map(|b| {
                let schema = &b["content"]["application/json"]["schema"]["$ref"];
                match schema.as_str().unwrap() {
                    "#/components/schemas/NewFilesystem" => r#"{"name": "tank/other"}"#,
                    "#/components/schemas/NewVolume" => r#"{"name": "tank/vm1", "volsize": "8M"}"#,
                    // This daemon serves no iSCSI: a documented 409.
                    "#/components/schemas/IscsiTargetSpec" => {
                        r#"{"name": "iqn.2026-12.org.example:vm1", "luns": {"0": "tank/vm1"}}"#
                    }
                    "#/components/schemas/IscsiDiscoverySpec" => "{}",
                    "#/components/schemas/PropertyChanges" if path.contains("volumes") => {
                        r#"{"properties": {"volsize": "16M"}}"#
                    }
                    "#/components/schemas/PropertyChanges" => r#"{"properties": {"atime": "off"}}"#,
                    "#/components/schemas/Rollback" => r#"{"name": "tank/home@monday"}"#,
                    "#/components/schemas/NewSchedule" => {
                        r#"{"dataset": "tank/home", "every": "1h", "keep": 24}"#
                    }
                    "#/components/schemas/HoldRequest" => {
                        r#"{"snapshot": "tank/home@monday", "tag": "keep"}"#
                    }
                    "#/components/schemas/SnapshotName" => r#"{"name": "tank/home@tuesday"}"#,
                    "#/components/schemas/ShareRules" => r#"{"rules": "127.0.0.1(rw)"}"#,
                    "#/components/schemas/DatasetName" => r#"{"name": "nfs3.ops[client]"}"#,
                    "#/components/schemas/WorksheetBody" => {
                        r#"{"datasets": ["nfs3.ops[op=read][client]"]}"#
                    }
                    "#/components/schemas/Login" => r#"{"password": "not set yet"}"#,
                    "#/components/schemas/NewCredential" => r#"{"name": "vault"}"#,
                    "#/components/schemas/Acknowledge" => "{}",
                    "#/components/schemas/ReplicationTarget" => {
                        r#"{"name": "vault", "address": "127.0.0.1:9", "credential": "x"}"#
                    }
                    "#/components/schemas/NewReplicationAction" => {
                        r#"{"filesystem": "tank/home", "target": "vault"}"#
                    }
                    // No device directory is configured: a documented 400 each.
                    "#/components/schemas/NewPool" => {
                        r#"{"name": "other", "layout": ["a"], "size": 268435456}"#
                    }
                    "#/components/schemas/ImportPool" => r#"{"name": "other"}"#,
                    "#/components/schemas/ReplaceDevice" => r#"{"old": "a", "new": "b"}"#,
                    "#/components/schemas/DeviceName" => r#"{"device": "a"}"#,
                    "#/components/schemas/NewSpare" => r#"{"device": "a"}"#,
                    "#/components/schemas/AddDevices" => r#"{"layout": ["log", "a"]}"#,
                    "#/components/schemas/AttachDevice" => r#"{"device": "a", "new": "b"}"#,
                    "#/components/schemas/MountRequest" => {
                        r#"{"dataset": "tank/home", "dir": "/nonexistent/mount/point"}"#
                    }
                    "#/components/schemas/UnmountRequest" => r#"{"dir": "/nope"}"#,
                    // Fault injection is off in this daemon: a documented 403.
                    "#/components/schemas/Injection" => r#"{"device": "/nope", "fault": "fail"}"#,
                    other => panic!("no example body for {other}"),
                }
            });
            let (code, v) = d.request(&method.to_uppercase(), rel, body);
            assert_ne!(
                v["error"], "no such API path",
                "{method} {path} is not routed"
            );
            assert_ne!(code, 405, "{method} {path} is not routed");
            let documented = op["responses"].as_object().unwrap();
            assert!(
                documented.contains_key(&code.to_string()),
                "{method} {path} answered {code} ({v}), not documented"
            );
            operations += 1;
        }
    }
    assert_eq!(operations, 88, "docs/openapi.json has 88 operations");
    d.stop(&state);
}

/// Runs `shoal` with `input` on its standard input; returns its output.
fn shoal_with_input(state: &Path, args: &[&str], input: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(args)
        .env("SHOAL_STATE_DIR", state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run shoal");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

/// `shoal send` and `shoal receive`, through the daemon and without it: a file written
/// over NFS arrives in the copy, an incremental carries a change, and damaged,
/// truncated or misdirected streams are refused with the target as it was.
#[test]
fn send_and_receive_through_the_daemon_and_without_it() {
    let t = tempfile::tempdir().unwrap();
    let state = make_pool(t.path());
    let d = Daemon::start(&state);
    ok(
        &state,
        &[
            "share",
            "set",
            "tank/a",
            "127.0.0.1(rw,no_root_squash,insecure)",
        ],
    );
    let nfs = |verb: &str, args: &[&str]| {
        let out = Command::new(verb)
            .args(args)
            .output()
            .expect("libnfs-utils");
        assert!(
            out.status.success(),
            "{verb} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let url = |export: &str, file: &str| {
        format!(
            "nfs://127.0.0.1{export}/{file}?version=3&nfsport={p}&mountport={p}",
            p = d.nfs.port()
        )
    };
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let local = t.path().join("data");
    std::fs::write(&local, &data).unwrap();
    nfs(
        "nfs-cp",
        &[local.to_str().unwrap(), &url("/tank/a", "data")],
    );
    ok(&state, &["snapshot", "create", "tank/a@one"]);

    // Through the daemon: the stream goes to a file, then into a new filesystem.
    let full = shoal(&state, &["send", "tank/a@one"]);
    assert!(
        full.status.success(),
        "{}",
        String::from_utf8_lossy(&full.stderr)
    );
    assert!(full.stdout.starts_with(b"SHOALSND") && full.stdout.len() > data.len());
    let got = shoal_with_input(&state, &["receive", "tank/copy", "--json"], &full.stdout);
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
    assert_eq!(summary["name"], "tank/copy@one");

    // An incremental: a rewritten file.
    let changed: Vec<u8> = data.iter().map(|b| b.wrapping_add(1)).collect();
    std::fs::write(&local, &changed).unwrap();
    nfs(
        "nfs-cp",
        &[local.to_str().unwrap(), &url("/tank/a", "data2")],
    );
    ok(&state, &["snapshot", "create", "tank/a@two"]);
    let incr = shoal(&state, &["send", "tank/a@two", "--from", "@one"]);
    assert!(
        incr.status.success(),
        "{}",
        String::from_utf8_lossy(&incr.stderr)
    );
    assert!(incr.stdout.len() < full.stdout.len() * 2);

    // Refused: damaged, truncated, into a shared filesystem.
    let mut damaged = incr.stdout.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x20;
    for (what, bytes) in [
        ("damaged", &damaged[..]),
        ("truncated", &incr.stdout[..incr.stdout.len() - 10]),
    ] {
        let out = shoal_with_input(&state, &["receive", "tank/copy"], bytes);
        assert!(!out.status.success(), "{what} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("stream refused"), "{what}: {err}");
    }
    let out = shoal_with_input(&state, &["receive", "tank/a"], &incr.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("shared over NFS"), "{err}");
    assert_eq!(
        ok(&state, &["snapshot", "list", "tank/copy"])
            .matches("tank/copy@")
            .count(),
        1,
        "no snapshot from a refused stream"
    );
    let got = shoal_with_input(&state, &["receive", "tank/copy"], &incr.stdout);
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert!(String::from_utf8_lossy(&got.stdout).contains("tank/copy@two (incremental)"));
    ok(
        &state,
        &[
            "share",
            "set",
            "tank/copy",
            "127.0.0.1(ro,no_root_squash,insecure)",
        ],
    );
    assert_eq!(nfs("nfs-cat", &[&url("/tank/copy", "data2")]), changed);
    assert_eq!(nfs("nfs-cat", &[&url("/tank/copy", "data")]), data);
    ok(&state, &["share", "remove", "tank/copy"]);

    // Replicated (-R): both snapshots in one go, through the daemon.
    let all = shoal(&state, &["send", "-R", "tank/a@two"]);
    assert!(
        all.status.success(),
        "{}",
        String::from_utf8_lossy(&all.stderr)
    );
    let got = shoal_with_input(&state, &["receive", "tank/mirror", "--json"], &all.stdout);
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
    assert_eq!(summary["name"], "tank/mirror@two");
    assert_eq!(summary["streams"], 2);
    assert_eq!(
        ok(&state, &["snapshot", "list", "tank/mirror"])
            .matches("tank/mirror@")
            .count(),
        2
    );
    d.stop(&state);

    // Without the daemon: the same commands on the pool directly.
    let again = shoal(&state, &["send", "tank/copy@two"]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let got = shoal_with_input(&state, &["receive", "tank/third"], &again.stdout);
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    let err = fails(&state, &["send", "tank/copy"]);
    assert!(err.contains("not a snapshot"), "{err}");
    let all = shoal(&state, &["send", "-R", "tank/mirror@two"]);
    assert!(
        all.status.success(),
        "{}",
        String::from_utf8_lossy(&all.stderr)
    );
    let got = shoal_with_input(&state, &["receive", "tank/fourth"], &all.stdout);
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    let out = String::from_utf8_lossy(&got.stdout);
    assert!(
        out.contains("tank/fourth@one") && out.contains("the last of 2 streams"),
        "{out}"
    );
    assert!(ok(&state, &["pool", "check", "tank"]).contains("no problems found"));
}

/// The token `shoal receive --resumable` prints when its stream is cut.
fn resume_token(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let at = text
        .find("--resume ")
        .unwrap_or_else(|| panic!("no resume token in: {text}"));
    text[at + 9..at + 9 + 64].to_string()
}

/// A receive cut part way keeps what arrived and prints a token; `shoal send --resume
/// TOKEN` sends only the rest, which completes it: through the daemon and without it.
#[test]
fn a_cut_receive_resumes_from_its_token() {
    let t = tempfile::tempdir().unwrap();
    let state = make_pool(t.path());
    let d = Daemon::start(&state);
    ok(
        &state,
        &[
            "share",
            "set",
            "tank/a",
            "127.0.0.1(rw,no_root_squash,insecure)",
        ],
    );
    let data: Vec<u8> = (0..12_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let local = t.path().join("data");
    std::fs::write(&local, &data).unwrap();
    let url = |export: &str| {
        format!(
            "nfs://127.0.0.1{export}/data?version=3&nfsport={p}&mountport={p}",
            p = d.nfs.port()
        )
    };
    let out = Command::new("nfs-cp")
        .arg(&local)
        .arg(url("/tank/a"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    ok(&state, &["snapshot", "create", "tank/a@one"]);
    let full = shoal(&state, &["send", "tank/a@one"]).stdout;
    assert!(full.len() > 12_000_000);
    let cut = &full[..full.len() * 2 / 3];
    let mut d = Some(d);
    for (target, through_daemon) in [("tank/viad", true), ("tank/local", false)] {
        if !through_daemon {
            d.take().unwrap().stop(&state);
        }
        let first = shoal_with_input(&state, &["receive", "--resumable", target], cut);
        assert!(!first.status.success());
        let token = resume_token(&first.stderr);
        // Without --resumable a resumed stream is refused.
        let rest = shoal(&state, &["send", "--resume", &token, "tank/a"]);
        assert!(rest.status.success(), "{rest:?}");
        assert!(
            rest.stdout.len() + 3_000_000 < full.len(),
            "only the rest: {} of {}",
            rest.stdout.len(),
            full.len()
        );
        let plain = shoal_with_input(&state, &["receive", target], &rest.stdout);
        assert!(!plain.status.success());
        let done = shoal_with_input(
            &state,
            &["receive", "--resumable", target, "--json"],
            &rest.stdout,
        );
        assert!(done.status.success(), "{done:?}");
        let summary: serde_json::Value = serde_json::from_slice(&done.stdout).unwrap();
        assert_eq!(summary["name"], format!("{target}@one"));
        let bad = shoal(&state, &["send", "--resume", "nothex", "tank/a"]);
        assert!(!bad.status.success());
        assert!(String::from_utf8_lossy(&bad.stderr).contains("not a resume token"));
    }
    // Both copies hold the data: read through the daemon again.
    let d = Daemon::start(&state);
    for target in ["tank/viad", "tank/local"] {
        ok(
            &state,
            &[
                "share",
                "set",
                target,
                "127.0.0.1(ro,no_root_squash,insecure)",
            ],
        );
        let url = format!(
            "nfs://127.0.0.1/{target}/data?version=3&nfsport={p}&mountport={p}",
            p = d.nfs.port()
        );
        let out = Command::new("nfs-cat").arg(url).output().unwrap();
        assert!(out.stdout == data, "{target} holds the data");
    }
    d.stop(&state);
}
