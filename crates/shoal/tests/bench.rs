//! `shoal bench` end to end: two agent processes (sending from 127.0.0.1 and
//! 127.0.0.2) driven by `shoal bench run --agents` against `shoal serve` and against
//! NFS-Ganesha, and the cache check against shoal's own counters; `shoal plan`.

mod common;
use common::*;

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// `shoal serve` sharing tank/b to root (no_root_squash) with a small ARC; returns
/// the process, the NFS address and the API address.
fn serve(dir: &Path, arc: &str) -> (Served, String, String) {
    let state = dir.join("state");
    create_tank(&state, dir, "256M", &["raidz1", "a", "b", "c"]);
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
        for w in ["metadata", "randwrite", "varmail"] {
            let (ok_run, r) =
                bench(&[&common[..], &at, &["--workload", w, "--duration", "1s"]].concat());
            assert!(ok_run, "{server} {w}: {r}");
            check_sums(&r, 2);
        }
    }
    // Ganesha holds what the generator wrote.
    let f0 = std::fs::metadata(ganesha.export.join("shoal-bench/set-4x8388608/f0")).unwrap();
    assert_eq!(f0.len(), 8 << 20);
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
    assert_eq!(p["usable_bytes"], 7u64 << 40);
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
        // Ganesha registers with rpcbind and will not start without it.
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
        wait_listening(port);
        wait_listening(mount_port);
        g
    }

    fn server(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}
