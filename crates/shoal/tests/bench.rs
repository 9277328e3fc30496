//! `shoal bench` end to end: two agent processes (sending from 127.0.0.1 and
//! 127.0.0.2) driven by `shoal bench run --agents` against `shoal serve` and against
//! NFS-Ganesha; the cache check against shoal's own counters for each tier (ARC, cache
//! devices, disks), with the cache device removed as the negative control; every
//! workload personality's operation mix against shoal and Ganesha; one filesystem
//! per client; the server's CPU and network per run; `shoal plan`.

mod common;
use common::*;

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `shoal serve` sharing tank/b to root (no_root_squash) with a small ARC; returns
/// the process, the NFS address and the API address.
fn serve(dir: &Path, arc: &str) -> (Served, String, String) {
    serve_pool(dir, arc, &["raidz1", "a", "b", "c"])
}

/// As `serve`, on a pool of `layout` (`shoal pool create` words).
fn serve_pool(dir: &Path, arc: &str, layout: &[&str]) -> (Served, String, String) {
    let state = dir.join("state");
    create_tank(&state, dir, "256M", layout);
    ok(&state, &["fs", "create", "tank/b"]);
    let served = Served::start(
        &state,
        &dir.join("serve.log"),
        &["--share", "tank/b=*(rw,no_root_squash)", "--arc-max", arc],
    );
    let (nfs, api) = (served.nfs().to_string(), served.api_url(""));
    (served, nfs, api)
}

/// An agent process on a kernel-chosen port; returns it and its address.
fn agent(bind: &str, name: &str) -> (Kill, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args([
            "bench",
            "agent",
            "--listen",
            "127.0.0.1:0",
            "--bind",
            bind,
            "--name",
            name,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    assert!(line.contains("listening on"), "{line}");
    (Kill(child), addr)
}

/// `shoal bench run ARGS --json`: exit success and the report.
fn bench(args: &[&str]) -> (bool, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["bench", "run", "--json"])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}); stderr: {stderr}"));
    eprintln!("{stderr}");
    (out.status.success(), report)
}

/// Per-client figures sum to the aggregate, every client worked, from its address.
fn check_sums(r: &Value, clients: usize) {
    let list = r["clients"].as_array().unwrap();
    assert_eq!(list.len(), clients, "{r}");
    let agg = &r["aggregate"];
    for key in ["ops", "read_bytes", "write_bytes", "errors"] {
        let sum: u64 = list.iter().map(|c| c[key].as_u64().unwrap()).sum();
        assert_eq!(sum, agg[key].as_u64().unwrap(), "{key}");
    }
    assert_eq!(agg["errors"], 0);
    for c in list {
        assert!(c["ops"].as_u64().unwrap() > 0, "{c}");
        let per_second: u64 = c["seconds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["ops"].as_u64().unwrap())
            .sum();
        assert_eq!(
            per_second,
            c["ops"].as_u64().unwrap(),
            "the per-second series holds every operation"
        );
    }
    let sources: Vec<&str> = list.iter().map(|c| c["source"].as_str().unwrap()).collect();
    assert!(
        sources.contains(&"127.0.0.1") && sources.contains(&"127.0.0.2"),
        "{sources:?}"
    );
    let stonewall = agg["stonewall"]["seconds"].as_f64().unwrap();
    let last = agg["last_done"]["seconds"].as_f64().unwrap();
    assert!(stonewall > 0.0 && stonewall <= last, "{stonewall} {last}");
    assert!(list.iter().any(|c| c["client"] == agg["slowest_client"]));
}

#[test]
fn two_agents_against_shoal_and_against_ganesha() {
    let dir = tempfile::tempdir().unwrap();
    let (_shoal, nfs, api) = serve(dir.path(), "64M");
    let (_a, a) = agent("127.0.0.1", "hostA");
    let (_b, b) = agent("127.0.0.2", "hostB");
    let agents = format!("{a},{b}");
    // One pass over a 32 MiB set by 2 agents x 2 clients x 2 threads, every byte checked.
    let common = [
        "--agents",
        &agents,
        "--clients",
        "2",
        "--threads",
        "2",
        "--files",
        "4",
        "--file-size",
        "8M",
        "--verify",
    ];
    let at_shoal = ["--server", nfs.as_str(), "--export", "/tank/b"];
    let read = ["--workload", "read", "--shoal-api", api.as_str()];
    let (ok_run, r) = bench(&[&common[..], &at_shoal, &read].concat());
    assert!(ok_run, "{r}");
    check_sums(&r, 4);
    assert_eq!(
        r["aggregate"]["read_bytes"],
        32 << 20,
        "one pass reads the set once"
    );
    // shoal counted exactly the bytes the clients read.
    assert_eq!(r["server"]["nfs_read_bytes"], 32 << 20, "{}", r["server"]);
    // Random FILE_SYNC writes from both agents for a second.
    let randwrite = ["--workload", "randwrite", "--duration", "1s"];
    let (ok_run, r) = bench(&[&common[..], &at_shoal, &randwrite].concat());
    assert!(ok_run, "{r}");
    check_sums(&r, 4);
    assert!(r["aggregate"]["write_bytes"].as_u64().unwrap() > 0);

    let ganesha = Ganesha::start(&dir.path().join("ganesha"));
    let (ok_run, r) = bench(
        &[
            &common[..],
            &[
                "--server",
                &ganesha.server(),
                "--mount-port",
                &ganesha.mount_port.to_string(),
                "--export",
                ganesha.export.to_str().unwrap(),
                "--workload",
                "read",
            ],
        ]
        .concat(),
    );
    assert!(ok_run, "{r}");
    check_sums(&r, 4);
    assert_eq!(r["aggregate"]["read_bytes"], 32 << 20);
    assert!(r["server"].is_null(), "no shoal API was given");
    // The bytes are on Ganesha's disk as the generator wrote them.
    let f0 = std::fs::metadata(ganesha.export.join("shoal-bench/set-4x8388608/f0")).unwrap();
    assert_eq!(f0.len(), 8 << 20);
}

/// The same workloads over NFSv4.1 (a session per connection, COMPOUNDs) against
/// shoal and against Ganesha: every byte read back checked, shoal's counters agree,
/// creates go through OPEN and CLOSE.
#[test]
fn nfs41_workloads_against_shoal_and_against_ganesha() {
    let dir = tempfile::tempdir().unwrap();
    let (_shoal, nfs, api) = serve(dir.path(), "64M");
    let (_a, a) = agent("127.0.0.1", "hostA");
    let (_b, b) = agent("127.0.0.2", "hostB");
    let agents = format!("{a},{b}");
    let common = [
        "--agents",
        &agents,
        "--nfs-version",
        "4.1",
        "--clients",
        "1",
        "--threads",
        "2",
        "--files",
        "4",
        "--file-size",
        "8M",
        "--verify",
    ];
    let ganesha = Ganesha::start(&dir.path().join("ganesha"));
    let g = ganesha.server();
    for (server, export, shoal_api) in [
        (nfs.as_str(), "/tank/b", Some(api.as_str())),
        (g.as_str(), "/bench", None),
    ] {
        let at = ["--server", server, "--export", export];
        let api_args: Vec<&str> = shoal_api.map_or(vec![], |a| vec!["--shoal-api", a]);
        let (ok_run, r) = bench(&[&common[..], &at, &["--workload", "read"], &api_args].concat());
        assert!(ok_run, "{server}: {r}");
        check_sums(&r, 2);
        assert_eq!(r["aggregate"]["read_bytes"], 32 << 20, "{server}");
        if shoal_api.is_some() {
            assert_eq!(r["server"]["nfs_read_bytes"], 32 << 20, "{}", r["server"]);
        }
        for w in ["metadata", "randwrite", "varmail", "smallfiles"] {
            let (ok_run, r) =
                bench(&[&common[..], &at, &["--workload", w, "--duration", "1s"]].concat());
            assert!(ok_run, "{server} {w}: {r}");
            check_sums(&r, 2);
            if w == "smallfiles" {
                // Two agents of one client with two threads each.
                check_mix(w, &r, 4);
            }
        }
    }
    // Ganesha holds what the generator wrote.
    let f0 = std::fs::metadata(ganesha.export.join("shoal-bench/set-4x8388608/f0")).unwrap();
    assert_eq!(f0.len(), 8 << 20);
}

/// `--delegations` over NFSv4.1: shoal hands each small file's creator a write
/// delegation, so its stat and open/read/close are answered by the client (recorded
/// as such, no bytes counted as moved) and the REMOVE gives the delegation back; the
/// same run without the flag sends every step to the server. Over NFSv3 the flag is
/// refused.
#[test]
fn smallfiles_with_delegations_are_stated_and_read_under_the_write_delegation() {
    let dir = tempfile::tempdir().unwrap();
    let (_shoal, nfs, _api) = serve(dir.path(), "64M");
    let base = [
        "--server",
        &nfs,
        "--export",
        "/tank/b",
        "--nfs-version",
        "4.1",
        "--workload",
        "smallfiles",
        "--io-size",
        "4K",
        "--threads",
        "2",
        "--duration",
        "1s",
    ];
    let (ok_run, r) = bench(&[&base[..], &["--delegations"]].concat());
    assert!(ok_run, "{r}");
    assert_eq!(r["aggregate"]["errors"], 0, "{r}");
    let ops = op_counts(&r);
    let n = |op: &str| ops.get(op).copied().unwrap_or(0);
    let created = n("create");
    assert!(created > 0, "{ops:?}");
    assert_eq!(
        n("getattr") + n("read"),
        0,
        "no stat or read went out: {ops:?}"
    );
    for op in ["getattr_delegated", "read_delegated", "remove"] {
        assert!(
            (created.saturating_sub(2)..=created).contains(&n(op)),
            "{op}: {ops:?}"
        );
    }
    assert_eq!(r["aggregate"]["per_op"]["read_delegated"]["bytes"], 0);
    // Without the flag: every step a call, no delegation.
    let (ok_run, r) = bench(&base);
    assert!(ok_run, "{r}");
    let ops = op_counts(&r);
    assert!(ops.get("getattr").copied().unwrap_or(0) > 0, "{ops:?}");
    assert!(!ops.contains_key("getattr_delegated"), "{ops:?}");
    // NFSv3 has no delegations.
    let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["bench", "run", "--server", &nfs, "--export", "/tank/b"])
        .args([
            "--workload",
            "smallfiles",
            "--duration",
            "1s",
            "--delegations",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("delegations are NFSv4.1's"), "{err}");
}

#[test]
fn the_cache_check_flags_reads_the_arc_served() {
    let dir = tempfile::tempdir().unwrap();
    let (_shoal, nfs, api) = serve(dir.path(), "64M");
    let base = [
        "--server",
        &nfs,
        "--export",
        "/tank/b",
        "--workload",
        "read",
        "--threads",
        "2",
        "--shoal-api",
        &api,
        "--expect",
        "disk",
    ];
    // Half the ARC, read once to warm it, then "from disk": the ARC served it.
    let (ok_run, r) = bench(
        &[
            &base[..],
            &["--working-set", "0.5xARC", "--files", "2", "--warmup"],
        ]
        .concat(),
    );
    assert!(!ok_run, "a false claim fails the run");
    let check = &r["server"]["cache_check"];
    assert_eq!(check["passed"], false, "{r}");
    assert!(
        check["message"]
            .as_str()
            .unwrap()
            .starts_with("NOT FROM DISK"),
        "{check}"
    );
    assert_eq!(
        r["job"]["file_size"],
        16 << 20,
        "0.5 x a 64 MiB ARC over 2 files"
    );
    // Four times the ARC, read once: most of it has to come from the devices.
    let (ok_run, r) = bench(&[&base[..], &["--working-set", "4xARC", "--files", "4"]].concat());
    let check = &r["server"]["cache_check"];
    assert!(ok_run, "{r}");
    assert_eq!(check["passed"], true, "{check}");
    assert!(
        r["server"]["device_read_bytes"].as_u64().unwrap() >= 128 << 20,
        "{}",
        r["server"]
    );
}

/// `--expect l2arc` on a working set sized to fit the ARC plus the cache device
/// passes; the same job after the cache device is removed fails the check.
#[test]
fn the_l2arc_check_passes_from_the_cache_device_and_fails_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (_served, nfs, api) =
        serve_pool(dir.path(), "32M", &["raidz1", "a", "b", "c", "cache", "d"]);
    let base = [
        "--server",
        &nfs,
        "--export",
        "/tank/b",
        "--workload",
        "read",
        "--threads",
        "2",
        "--files",
        "4",
        "--warmup",
        "--shoal-api",
        &api,
        "--expect",
        "l2arc",
    ];
    let (ok_run, r) = bench(&[&base[..], &["--working-set", "0.5xARC+L2ARC"]].concat());
    let server = &r["server"];
    assert!(ok_run, "{server}");
    assert_eq!(server["cache_check"]["passed"], true, "{server}");
    let nfs_read = server["nfs_read_bytes"].as_u64().unwrap();
    let cache_read = server["cache_device_read_bytes"].as_u64().unwrap();
    assert!(cache_read * 2 >= nfs_read, "{server}");
    // The working set: half of the 32 MiB ARC plus the cache device's ring.
    let set = r["job"]["file_size"].as_u64().unwrap() * 4;
    assert!(set > 64 << 20 && set < 160 << 20, "{set}");
    // The server's CPU and the host's network over the run.
    assert!(
        server["server_cpu_seconds"].as_f64().unwrap() > 0.0,
        "{server}"
    );
    assert!(
        server["server_cpu_seconds_per_gb"].as_f64().unwrap() > 0.0,
        "{server}"
    );
    assert!(
        server["host_net_in_bytes"].as_u64().unwrap() >= nfs_read,
        "the host's interfaces carried at least the NFS payload: {server}"
    );

    // The cache device removed (through the daemon): the same job, no cache device.
    let devices = dir.path().join("devs");
    let cache_dev = std::fs::read_dir(&devices)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with('d'))
        .expect("the cache device's file");
    ok(
        &state,
        &["pool", "remove", "tank", cache_dev.to_str().unwrap()],
    );
    let same_set = format!("{set}");
    let (ok_run, r) = bench(&[&base[..], &["--working-set", &same_set]].concat());
    let check = &r["server"]["cache_check"];
    assert!(
        !ok_run,
        "the claim is false without the cache device: {check}"
    );
    assert_eq!(check["passed"], false, "{check}");
    assert!(
        check["message"]
            .as_str()
            .unwrap()
            .starts_with("NOT FROM THE CACHE DEVICES"),
        "{check}"
    );
    assert_eq!(r["server"]["cache_device_read_bytes"], 0, "{}", r["server"]);
}

/// Each client mounts its own filesystem (`{client}` in the export), as the original
/// appliance's runs gave each client its own share: every byte lands in its own.
#[test]
fn each_client_can_have_its_own_filesystem() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    create_tank(&state, dir.path(), "256M", &["raidz1", "a", "b", "c"]);
    let mut share = vec![];
    for c in 0..2 {
        ok(&state, &["fs", "create", &format!("tank/c{c}")]);
        share.push(format!("tank/c{c}=*(rw,no_root_squash)"));
    }
    let served = Served::start(
        &state,
        &dir.path().join("serve.log"),
        &["--share", &share[0], "--share", &share[1]],
    );
    let nfs = served.nfs().to_string();
    let api = served.api_url("");
    let (_a, a) = agent("127.0.0.1", "hostA");
    let (_b, b) = agent("127.0.0.2", "hostB");
    let agents = format!("{a},{b}");
    let (ok_run, r) = bench(&[
        "--agents",
        &agents,
        "--server",
        &nfs,
        "--export",
        "/tank/c{client}",
        "--workload",
        "read",
        "--files",
        "2",
        "--working-set",
        "16M",
        "--verify",
        "--shoal-api",
        &api,
    ]);
    assert!(ok_run, "{r}");
    // 16 MiB split between two clients' sets of two 4 MiB files, each read once.
    assert_eq!(r["job"]["file_size"], 4 << 20);
    assert_eq!(r["aggregate"]["read_bytes"], 16 << 20);
    assert_eq!(r["server"]["nfs_read_bytes"], 16 << 20);
    for c in 0..2 {
        let used = ok(&state, &["fs", "list", "--json"]);
        let list: Value = serde_json::from_str(&used).unwrap();
        let fs = list
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == format!("tank/c{c}"))
            .unwrap_or_else(|| panic!("tank/c{c} in {list}"));
        let used: u64 = fs["props"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["property"] == "used")
            .and_then(|p| p["value"].as_str())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no used in {fs}"));
        assert!(
            used >= 8 << 20,
            "tank/c{c} holds its client's set: {used} bytes used"
        );
    }
}

/// The operations of one run, by name.
fn op_counts(r: &Value) -> std::collections::BTreeMap<String, u64> {
    r["aggregate"]["per_op"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v["ops"].as_u64().unwrap()))
        .collect()
}

/// Checks one personality's operation mix against its definition (docs/bench.md),
/// for `threads` threads that each may have stopped part way through a loop.
fn check_mix(workload: &str, r: &Value, threads: u64) {
    let ops = op_counts(r);
    let n = |op: &str| ops.get(op).copied().unwrap_or(0);
    let bytes = |op: &str| r["aggregate"]["per_op"][op]["bytes"].as_u64().unwrap_or(0);
    let within = |v: u64, lo: u64, hi: u64, what: &str| {
        assert!(
            (lo..=hi).contains(&v),
            "{workload}: {what} = {v}, not in {lo}..={hi}; all: {ops:?}"
        );
    };
    let file_size = r["job"]["file_size"].as_u64().unwrap();
    let rsize = r["job"]["rsize"].as_u64().unwrap();
    let reads_per_file = file_size.div_ceil(rsize);
    match workload {
        "fileserver" => {
            // create, write it whole and append, read a set file whole, remove, stat.
            assert!(n("create") > 0, "{ops:?}");
            within(
                n("remove"),
                n("create").saturating_sub(threads),
                n("create"),
                "removes",
            );
            within(
                n("getattr"),
                n("remove").saturating_sub(threads),
                n("remove"),
                "getattrs",
            );
            within(
                n("read"),
                n("remove") * reads_per_file,
                (n("create") + threads) * reads_per_file,
                "reads",
            );
            assert!(n("write") >= n("create"), "{ops:?}");
            assert_eq!(n("commit"), 0, "{ops:?}");
        }
        "varmail" => {
            // remove, create, append, commit, read, append, commit, read.
            assert!(n("create") > 0, "{ops:?}");
            within(
                n("create"),
                n("remove").saturating_sub(threads),
                n("remove"),
                "creates",
            );
            within(
                n("commit"),
                2 * n("create").saturating_sub(threads),
                2 * n("create"),
                "commits",
            );
            within(
                n("write"),
                n("commit"),
                n("commit") + threads,
                "16K appends",
            );
            assert_eq!(bytes("write"), n("write") * (16 << 10), "appends are 16K");
            within(
                n("read"),
                n("commit").saturating_sub(threads) * reads_per_file,
                (n("commit") + threads) * reads_per_file,
                "whole-file reads",
            );
        }
        "webserver" => {
            // A log each; ten whole set files read per 16K append.
            assert_eq!(n("create"), threads, "{ops:?}");
            assert!(n("write") > 0, "{ops:?}");
            within(
                n("read"),
                10 * n("write") * reads_per_file,
                10 * (n("write") + threads) * reads_per_file,
                "reads",
            );
            assert_eq!(bytes("write"), n("write") * (16 << 10), "appends are 16K");
            assert_eq!(n("remove") + n("commit"), 0, "{ops:?}");
        }
        "videoserver" => {
            // Thread 0 writes videos in io_size WRITEs then COMMIT; the rest stream.
            let io = r["job"]["io_size"].as_u64().unwrap();
            assert!(
                n("create") >= 1 && n("read") > 0 && n("write") > 0,
                "{ops:?}"
            );
            within(
                n("commit"),
                n("create").saturating_sub(1),
                n("create"),
                "commits",
            );
            let wsize = r["job"]["wsize"].as_u64().unwrap();
            assert_eq!(
                bytes("write"),
                n("write") * io.min(wsize),
                "video writes are io_size, cut at wsize"
            );
            assert_eq!(bytes("read"), n("read") * io, "streamed reads are io_size");
            assert_eq!(n("remove"), 0, "{ops:?}");
        }
        "oltp" => {
            // Thread 0: 64K log writes; one writer of io_size at random; the rest read.
            let io = r["job"]["io_size"].as_u64().unwrap();
            assert_eq!(n("create"), 1, "one log: {ops:?}");
            assert!(n("read") > 0 && n("write") > 0, "{ops:?}");
            assert_eq!(bytes("read"), n("read") * io, "reads are io_size");
            let w = bytes("write");
            assert!(
                w > n("write") * io && w < n("write") * (64 << 10),
                "writes mix 64K log writes and {io}-byte random ones: {w} bytes in {} writes",
                n("write")
            );
            assert_eq!(
                n("commit") + n("remove"),
                0,
                "FILE_SYNC, no COMMIT: {ops:?}"
            );
        }
        "smallfiles" => {
            // Per file: create with io_size bytes, stat, open/read/close, remove; each
            // step one operation whatever the protocol sends for it.
            let io = r["job"]["io_size"].as_u64().unwrap();
            assert!(n("create") > 0, "{ops:?}");
            within(
                n("getattr"),
                n("create").saturating_sub(threads),
                n("create"),
                "stats",
            );
            within(
                n("read"),
                n("getattr").saturating_sub(threads),
                n("getattr"),
                "opens",
            );
            within(
                n("remove"),
                n("read").saturating_sub(threads),
                n("read"),
                "removes",
            );
            assert_eq!(bytes("create"), n("create") * io, "files of io_size");
            assert_eq!(bytes("read"), n("read") * io, "read whole");
            assert_eq!(n("write") + n("commit"), 0, "{ops:?}");
        }
        other => panic!("no mix for {other}"),
    }
}

#[test]
fn personalities_issue_the_mix_they_define_against_shoal_and_ganesha() {
    let dir = tempfile::tempdir().unwrap();
    let (_shoal, nfs, api) = serve(dir.path(), "64M");
    let ganesha = Ganesha::start(&dir.path().join("ganesha"));
    let g = ganesha.server();
    let g_mount = ganesha.mount_port.to_string();
    const THREADS: u64 = 4;
    for (server, export, extra) in [
        (nfs.as_str(), "/tank/b", vec!["--shoal-api", api.as_str()]),
        (
            g.as_str(),
            ganesha.export.to_str().unwrap(),
            vec!["--mount-port", g_mount.as_str()],
        ),
    ] {
        for w in [
            "fileserver",
            "varmail",
            "webserver",
            "videoserver",
            "oltp",
            "smallfiles",
        ] {
            let (ok_run, r) = bench(
                &[
                    &[
                        "--server",
                        server,
                        "--export",
                        export,
                        "--workload",
                        w,
                        "--threads",
                        "4",
                        "--files",
                        "8",
                        "--file-size",
                        "1M",
                        "--duration",
                        "1s",
                    ][..],
                    &extra,
                ]
                .concat(),
            );
            assert!(ok_run, "{server} {w}: {r}");
            assert_eq!(r["aggregate"]["errors"], 0, "{server} {w}");
            check_mix(w, &r, THREADS);
        }
    }
}

/// A peer's CPU and the host's network come from /proc with --server-pid.
#[test]
fn a_peers_cpu_and_network_come_from_proc() {
    let dir = tempfile::tempdir().unwrap();
    let ganesha = Ganesha::start(&dir.path().join("ganesha"));
    let pid = ganesha.pid().to_string();
    let (ok_run, r) = bench(&[
        "--server",
        &ganesha.server(),
        "--mount-port",
        &ganesha.mount_port.to_string(),
        "--export",
        ganesha.export.to_str().unwrap(),
        "--workload",
        "read",
        "--files",
        "2",
        "--file-size",
        "16M",
        "--server-pid",
        &pid,
    ]);
    assert!(ok_run, "{r}");
    let s = &r["server"];
    assert!(s["server_cpu_seconds"].as_f64().unwrap() > 0.0, "{s}");
    assert!(s["host_net_in_bytes"].as_u64().unwrap() > 0, "{s}");
    assert!(
        s["cache_check"].is_null() && s["server_cpu_seconds_per_gb"].is_null(),
        "no NFS counters for a peer: {s}"
    );
}

#[test]
fn plan_predicts_and_bad_input_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args([
            "plan",
            "7x2mirror",
            "--disk-mbps",
            "72",
            "--disk-iops",
            "90",
            "--disk-size",
            "1T",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["streaming_read_mb_per_s"], 1008.0);
    assert_eq!(p["streaming_write_mb_per_s"], 504.0);
    assert_eq!(p["random_read_iops"], 1260.0);
    assert_eq!(p["random_write_iops"], 630.0);
    assert_eq!(p["device_bytes_per_write_byte"], 2.0);
    // Vendors' terabytes: 7 x 1 TB.
    assert_eq!(p["usable_bytes"], 7_000_000_000_000u64);
    let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args([
            "plan",
            "3x(4+1)raidz",
            "--disk-mbps",
            "72",
            "--disk-iops",
            "90",
            "--disk-size",
            "1T",
            "--binary",
            "--spares",
            "2",
            "--bus-mbps",
            "800",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "17 disks (2 hot spares)",
        "800 MB/s  (the bus's 800 MB/s",
        "640 MB/s  (the bus's 800 MB/s; 1.25 device bytes per byte written)",
        "random writes         270 IOPS",
        "usable capacity    12 TiB",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    for (args, why) in [
        (
            vec![
                "plan",
                "3x(4+1)raidz2",
                "--disk-mbps",
                "72",
                "--disk-iops",
                "90",
            ],
            "parity",
        ),
        (
            vec!["plan", "7x2mirror", "--disk-mbps", "0", "--disk-iops", "90"],
            "positive",
        ),
        (
            vec![
                "bench",
                "run",
                "--export",
                "/x",
                "--server",
                "127.0.0.1:1",
                "--threads",
                "0",
            ],
            "threads",
        ),
        (vec!["bench", "run", "--export", "/x"], "no server"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

/// NFS-Ganesha (FSAL VFS) exporting a directory, NFSv3 on kernel-chosen ports.
struct Ganesha {
    _child: Kill,
    export: std::path::PathBuf,
    port: u16,
    mount_port: u16,
}

impl Ganesha {
    fn start(dir: &Path) -> Ganesha {
        let export = dir.join("export");
        std::fs::create_dir_all(&export).unwrap();
        // Ganesha registers with rpcbind and will not start without it. Once for the
        // test binary: two tests starting it at once made the second one fail.
        static RPCBIND: std::sync::Once = std::sync::Once::new();
        RPCBIND.call_once(|| {
            let running = Command::new("pgrep")
                .args(["-x", "rpcbind"])
                .status()
                .unwrap()
                .success();
            if !running {
                let started = Command::new("rpcbind")
                    .arg("-w")
                    .status()
                    .expect("rpcbind (.ci/test-deps.sh)");
                assert!(started.success());
            }
        });
        // One Ganesha starts at a time: each unregisters the NFS programs from
        // rpcbind before registering its own, so two starting together can undo each
        // other's registration, and the loser never listens.
        static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _starting = STARTING.lock().unwrap_or_else(|e| e.into_inner());
        let [port, mount_port, nlm, rquota] = free_ports();
        let conf = dir.join("ganesha.conf");
        std::fs::write(
            &conf,
            format!(
                "NFS_CORE_PARAM {{ NFS_Port = {port}; MNT_Port = {mount_port}; NLM_Port = {nlm}; Rquota_Port = {rquota};\n\
                 Protocols = 3, 4; Enable_NLM = false; Enable_RQUOTA = false; Bind_addr = 127.0.0.1; }}\n\
                 NFSV4 {{ Graceless = true; Minor_Versions = 1, 2; }}\n\
                 EXPORT {{ Export_Id = 1; Path = {p}; Pseudo = /bench; Access_Type = RW; Squash = No_Root_Squash;\n\
                 SecType = sys; Protocols = 3, 4; Transports = TCP; FSAL {{ Name = VFS; }} }}\n",
                p = export.display()
            ),
        )
        .unwrap();
        let child = Command::new("ganesha.nfsd")
            .arg("-F")
            .arg("-L")
            .arg(dir.join("ganesha.log"))
            .arg("-f")
            .arg(&conf)
            .arg("-p")
            .arg(dir.join("ganesha.pid"))
            .spawn()
            .expect("ganesha.nfsd (nfs-ganesha and nfs-ganesha-vfs; .ci/test-deps.sh)");
        let g = Ganesha {
            _child: Kill(child),
            export,
            port,
            mount_port,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        for p in [port, mount_port] {
            while std::net::TcpStream::connect(("127.0.0.1", p)).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "Ganesha does not listen on {p}; its log:\n{}",
                    std::fs::read_to_string(dir.join("ganesha.log")).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        g
    }

    fn server(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> u32 {
        self._child.0.id()
    }
}
