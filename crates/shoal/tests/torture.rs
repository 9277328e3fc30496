//! Torture: the running daemon (`shoal serve`, a real process) under many pipelined
//! clients, killed with SIGKILL at random moments, with corrupted blocks under it, on
//! a full pool, and facing clients its exports refuse. Every test checks that nothing
//! acknowledged is lost, byte for byte.
//!
//! CI runs the short forms; `SHOAL_SOAK=1` runs the soak: 10 minutes of load and 50
//! kills (`docs/reliability.md` has the commands and the figures).

mod common;
use common::*;

use bench::client::{
    mount, post_op_attr, root_credential, Connection, Fh, Nfs, NfsStatus, Stable, Target,
};
use bench::data::Rng;
use nfs::proto::{NFS_PROGRAM, NFS_V3};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn soak() -> bool {
    std::env::var_os("SHOAL_SOAK").is_some_and(|v| v != "0")
}

fn target(s: &Served) -> Target {
    Target {
        nfs: s.nfs(),
        mount: s.nfs(),
        bind: None,
        version: bench::client::Version::V3,
    }
}

fn status<T>(r: anyhow::Result<T>) -> Option<u32> {
    match r {
        Ok(_) => Some(0),
        Err(e) => NfsStatus::of(&e),
    }
}

/// Deterministic bytes for (stream, offset): what a block must read back as.
fn pattern(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ offset;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn seed() -> u64 {
    let s = std::env::var("SHOAL_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("torture seed {s} (SHOAL_TORTURE_SEED={s} repeats the choices)");
    s | 1
}

/// Where tests leave their figures: `target/artifacts/torture/NAME.json`.
fn save_figures(name: &str, v: &Value) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/artifacts/torture");
    std::fs::create_dir_all(&dir).unwrap();
    let text = serde_json::to_string_pretty(v).unwrap();
    std::fs::write(dir.join(format!("{name}.json")), &text).unwrap();
    println!("{text}");
}

/// The daemon's resident memory, from /proc.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The sum of a metric's samples in `/metrics` (over its labels).
fn metric(s: &Served, name: &str) -> u64 {
    let (_, text) = s.get("/metrics");
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Files `PREFIX0..PREFIX3` of `bytes` each under `root`, file `i` holding
/// `pattern(base ^ i, ..)`, written in 1 MiB calls (committed when `Unstable`);
/// returns each handle with its seed.
fn write_files(
    nfs: &Nfs,
    root: &Fh,
    prefix: &str,
    base: u64,
    bytes: usize,
    stable: Stable,
) -> Vec<(Fh, u64)> {
    (0..4u64)
        .map(|i| {
            let fh = nfs.create(root, &format!("{prefix}{i}"), true).unwrap();
            let data = pattern(base ^ i, 0, bytes);
            for (j, chunk) in data.chunks(1 << 20).enumerate() {
                nfs.write(&fh, (j << 20) as u64, chunk, stable).unwrap();
            }
            if stable == Stable::Unstable {
                nfs.commit(&fh).unwrap();
            }
            (fh, base ^ i)
        })
        .collect()
}

/// Reads `len` bytes at `offset` whole (several READs if need be).
fn read_all(nfs: &Nfs, fh: &Fh, offset: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let want = (len - out.len()).min(1 << 20) as u32;
        let r = nfs
            .read(fh, offset + out.len() as u64, want)
            .unwrap_or_else(|e| panic!("READ at {}: {e:#}", offset + out.len() as u64));
        if r.bytes().is_empty() {
            break;
        }
        out.extend_from_slice(r.bytes());
    }
    out
}

/// Pool `tank` from `layout` devices of `size`, with each dataset of `datasets` made.
fn tank(dir: &Path, size: &str, layout: &[&str], datasets: &[&str]) -> std::path::PathBuf {
    let state = dir.join("state");
    create_tank(&state, dir, size, layout);
    for d in datasets {
        ok(&state, &["fs", "create", d]);
    }
    state
}

/// Pool `tank` of `layout` devices of `size` with `tank/NAME` shared to root
/// (`no_root_squash`), served with `extra` options: the daemon, where to reach it, and
/// the share's root handle.
fn serve_share(
    dir: &Path,
    size: &str,
    layout: &[&str],
    name: &str,
    extra: &[&str],
) -> (Served, Target, Fh) {
    let dataset = format!("tank/{name}");
    let state = tank(dir, size, layout, &[dataset.as_str()]);
    let share = format!("{dataset}=*(rw,no_root_squash)");
    let mut args = vec!["--share", share.as_str()];
    args.extend_from_slice(extra);
    let served = Served::start(&state, &dir.join("serve.log"), &args);
    let t = target(&served);
    let root = mount(&t, &format!("/{dataset}"), root_credential("torture")).unwrap();
    (served, t, root)
}

/// Sums of `nfs.refusals[reason]` since the daemon started, by reason.
fn refusals(s: &Served) -> BTreeMap<String, u64> {
    let (code, body) = s.get(&format!(
        "/api/v1/analytics/data?name=nfs.refusals%5Breason%5D&start=0&end={}&resolution=second",
        u64::MAX / 2
    ));
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let mut by = BTreeMap::new();
    for p in v["points"].as_array().unwrap() {
        for k in p["breakdown"].as_array().into_iter().flatten() {
            *by.entry(k["key"].as_str().unwrap().to_string())
                .or_default() += k["count"].as_u64().unwrap();
        }
    }
    by
}

#[test]
fn export_rules_refuse_log_and_count_every_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let state = tank(
        dir.path(),
        "128M",
        &["mirror", "a", "b"],
        &["tank/nobody", "tank/ro", "tank/squash", "tank/private"],
    );
    let served = Served::start(
        &state,
        &dir.path().join("serve.log"),
        &[
            "--share",
            "tank/nobody=10.9.9.9(rw)",
            "--share",
            "tank/ro=127.0.0.1(ro)",
            "--share",
            "tank/squash=*(rw)",
        ],
    );
    let t = target(&served);
    let root = root_credential("torture");
    let nfs = Nfs::connect(&t, root.clone()).unwrap();

    // An unlisted client, a path that leaves the export, a dataset not shared.
    assert_eq!(status(mount(&t, "/tank/nobody", root.clone())), Some(13));
    assert_eq!(
        status(mount(&t, "/tank/squash/../private", root.clone())),
        Some(13)
    );
    assert_eq!(status(mount(&t, "/tank/private", root.clone())), Some(2));
    // A read-only client writing.
    let ro = mount(&t, "/tank/ro", root.clone()).unwrap();
    assert_eq!(status(nfs.create(&ro, "new", false)), Some(30), "ROFS");
    // A squashed root writing the root-owned 0755 root directory.
    let sq = mount(&t, "/tank/squash", root.clone()).unwrap();
    assert_eq!(status(nfs.create(&sq, "new", false)), Some(13), "ACCES");
    // A forged handle: one flipped bit.
    let mut forged = sq.clone();
    forged.0[10] ^= 0x04;
    assert_eq!(status(nfs.getattr(&forged)), Some(10001), "BADHANDLE");
    // Nothing was made.
    assert!(nfs.lookup(&ro, "new").unwrap().is_none());
    assert!(nfs.lookup(&sq, "new").unwrap().is_none());

    let want: BTreeMap<String, u64> = [
        "bad_handle",
        "not_allowed",
        "not_exported",
        "path_escape",
        "read_only",
        "root_squashed",
    ]
    .iter()
    .map(|r| (r.to_string(), 1))
    .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = refusals(&served);
    while got != want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        got = refusals(&served);
    }
    assert_eq!(got, want, "nfs.refusals[reason]");
    let (_, metrics) = served.get("/metrics");
    assert!(
        metrics.contains("shoal_nfs_refusals_total{reason=\"read_only\"} 1"),
        "{metrics}"
    );
    let log = served.log_text();
    for reason in want.keys() {
        let logged = log
            .lines()
            .any(|l| l.contains("refused") && l.contains(reason.as_str()));
        assert!(logged, "no log line for {reason}:\n{log}");
    }
}

/// One pipelined client of the load test: its own directory and file, a region read
/// back against what preparation wrote, a region written at random, and metadata.
struct LoadClient {
    nfs: Nfs,
    dir: Fh,
    file: Fh,
    seed: u64,
}

const READ_REGION: u64 = 1 << 20;
const WRITE_REGION: u64 = 1 << 20;
const LOAD_IO: usize = 32 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum LoadOp {
    Read,
    Write,
    Getattr,
    Lookup,
    Create,
    Remove,
    Readdirplus,
    Commit,
}

const LOAD_CYCLE: [LoadOp; 8] = [
    LoadOp::Write,
    LoadOp::Read,
    LoadOp::Getattr,
    LoadOp::Create,
    LoadOp::Read,
    LoadOp::Lookup,
    LoadOp::Remove,
    LoadOp::Readdirplus,
];

/// Latencies in microseconds per operation, and the blocks written (to check after).
#[derive(Default)]
struct LoadTally {
    latency_us: BTreeMap<LoadOp, Vec<u32>>,
    written: std::collections::BTreeSet<u64>,
    ops: u64,
}

fn run_load_client(
    c: &LoadClient,
    depth: usize,
    deadline: Instant,
    rng: &mut Rng,
) -> anyhow::Result<LoadTally> {
    let mut tally = LoadTally::default();
    let mut window: VecDeque<(LoadOp, u64, Instant, bench::client::Call)> = VecDeque::new();
    let mut k: u64 = 0;
    let mut created: VecDeque<u64> = VecDeque::new();
    loop {
        while window.len() < depth && Instant::now() < deadline {
            let mut op = LOAD_CYCLE[(k % LOAD_CYCLE.len() as u64) as usize];
            if op == LoadOp::Remove && created.len() < 2 * depth {
                op = LoadOp::Commit;
            }
            let mut arg = 0;
            let call = match op {
                LoadOp::Read => {
                    arg = rng.below(READ_REGION / LOAD_IO as u64) * LOAD_IO as u64;
                    c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 6, |e| {
                        e.opaque(&c.file.0).u64(arg).u32(LOAD_IO as u32);
                    })?
                }
                LoadOp::Write => {
                    arg = READ_REGION + rng.below(WRITE_REGION / LOAD_IO as u64) * LOAD_IO as u64;
                    let data = pattern(c.seed, arg, LOAD_IO);
                    c.nfs.start_write(&c.file, arg, &data, Stable::Unstable)?
                }
                LoadOp::Getattr => c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 1, |e| {
                    e.opaque(&c.file.0);
                })?,
                LoadOp::Lookup => c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 3, |e| {
                    e.opaque(&c.dir.0).opaque(b"f");
                })?,
                LoadOp::Create => {
                    arg = k;
                    created.push_back(k);
                    c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 8, |e| {
                        e.opaque(&c.dir.0).opaque(format!("t{arg}").as_bytes());
                        e.u32(1); // GUARDED: a name made twice would be an error
                        nfs::proto::encode_sattr(e, &nfs::proto::Sattr::default());
                    })?
                }
                LoadOp::Remove => {
                    // Made at least two windows ago, so its CREATE has been answered.
                    arg = created.pop_front().unwrap();
                    c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 12, |e| {
                        e.opaque(&c.dir.0).opaque(format!("t{arg}").as_bytes());
                    })?
                }
                LoadOp::Readdirplus => c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 17, |e| {
                    e.opaque(&c.dir.0)
                        .u64(0)
                        .fixed(&[0; 8])
                        .u32(4096)
                        .u32(16384);
                })?,
                LoadOp::Commit => c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 21, |e| {
                    e.opaque(&c.file.0).u64(0).u32(0);
                })?,
            };
            if op == LoadOp::Write {
                tally.written.insert(arg);
            }
            window.push_back((op, arg, Instant::now(), call));
            k += 1;
        }
        let Some((op, arg, sent, call)) = window.pop_front() else {
            return Ok(tally);
        };
        let reply = call.wait()?;
        let us = sent.elapsed().as_micros().min(u32::MAX as u128) as u32;
        tally.latency_us.entry(op).or_default().push(us);
        tally.ops += 1;
        if op == LoadOp::Read {
            let data = Nfs::finish_read(reply)?;
            anyhow::ensure!(data.bytes().len() == LOAD_IO, "short READ at {arg}");
            anyhow::ensure!(
                data.bytes() == pattern(c.seed, arg, LOAD_IO).as_slice(),
                "READ at {arg} returned other bytes"
            );
        } else {
            let st = reply.decoder().u32()?;
            anyhow::ensure!(st == 0, "{op:?} ({arg}) answered NFS status {st}");
        }
    }
}

fn percentiles(v: &mut [u32]) -> Value {
    v.sort_unstable();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    json!({
        "count": v.len(),
        "p50_us": at(0.5),
        "p90_us": at(0.9),
        "p99_us": at(0.99),
        "p999_us": at(0.999),
        "max_us": v[v.len() - 1],
    })
}

/// The documented memory bound over the ARC maximum (`docs/reliability.md`): dirty
/// data of the open and of the syncing transaction group, the NFS request budget, and
/// 256 MiB for the rest (code, threads, metadata, analytics, allocator slack).
fn rss_over_arc() -> u64 {
    2 * pool::PoolOptions::default().dirty_max_bytes
        + nfs::transport::MAX_BUFFERED_BYTES as u64
        + (256 << 20)
}

#[test]
fn load_of_256_connections_16_deep_without_errors_in_bounded_memory() {
    let connections = 256;
    let depth = 16;
    let seconds = std::env::var("SHOAL_TORTURE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if soak() { 600 } else { 60 });
    let arc: u64 = 256 << 20;
    let dir = tempfile::tempdir().unwrap();
    let (served, t, root) = serve_share(
        dir.path(),
        "1G",
        &["raidz1", "a", "b", "c"],
        "load",
        &["--arc-max", "256M"],
    );
    let base = seed();

    // Each client's directory and file, its read region written and committed.
    let clients: Vec<LoadClient> = {
        let made = Mutex::new(Vec::new());
        let next = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= connections as u64 {
                            break;
                        }
                        let d = nfs.mkdir_p(&root, &format!("c{i}")).unwrap();
                        let f = nfs.create(&d, "f", true).unwrap();
                        let seed = base ^ (i << 40);
                        let mut window = VecDeque::new();
                        for off in (0..READ_REGION).step_by(LOAD_IO) {
                            let data = pattern(seed, off, LOAD_IO);
                            window.push_back(
                                nfs.start_write(&f, off, &data, Stable::Unstable).unwrap(),
                            );
                            if window.len() >= 8 {
                                let r = window.pop_front().unwrap().wait().unwrap();
                                Nfs::finish_write(r, LOAD_IO, Stable::Unstable).unwrap();
                            }
                        }
                        for w in window {
                            Nfs::finish_write(w.wait().unwrap(), LOAD_IO, Stable::Unstable)
                                .unwrap();
                        }
                        nfs.commit(&f).unwrap();
                        made.lock().unwrap().push((i, d, f, seed));
                    }
                });
            }
        });
        let mut made = made.into_inner().unwrap();
        made.sort_by_key(|m| m.0);
        made.into_iter()
            .map(|(_, dir, file, seed)| LoadClient {
                nfs: Nfs::connect(&t, root_credential("torture")).unwrap(),
                dir,
                file,
                seed,
            })
            .collect()
    };

    let pid = served.pid();
    let done = AtomicBool::new(false);
    let rss_max = AtomicU64::new(0);
    let arc_size_max = AtomicU64::new(0);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let results: Vec<anyhow::Result<LoadTally>> = std::thread::scope(|s| {
        s.spawn(|| {
            let mut ticks = 0u64;
            while !done.load(Ordering::Relaxed) {
                rss_max.fetch_max(rss_bytes(pid), Ordering::Relaxed);
                if ticks.is_multiple_of(5) {
                    let arc = metric(&served, "shoal_arc_size_bytes");
                    arc_size_max.fetch_max(arc, Ordering::Relaxed);
                }
                ticks += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let handles: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                std::thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn_scoped(s, move || {
                        let mut rng = Rng::new(base ^ (i as u64 * 0x51ed_2701));
                        run_load_client(c, depth, deadline, &mut rng)
                    })
                    .unwrap()
            })
            .collect();
        let r = handles.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::Relaxed);
        r
    });
    let elapsed = start.elapsed().as_secs_f64();

    let mut errors = Vec::new();
    let mut all: BTreeMap<LoadOp, Vec<u32>> = BTreeMap::new();
    let mut ops = 0;
    let mut written = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(t) => {
                ops += t.ops;
                for (op, mut v) in t.latency_us {
                    all.entry(op).or_default().append(&mut v);
                }
                written.push(t.written);
            }
            Err(e) => errors.push(format!("client {i}: {e:#}")),
        }
    }
    assert!(
        errors.is_empty(),
        "{} clients failed: {errors:?}",
        errors.len()
    );

    // What was written reads back: each written block its pattern, the rest zeros.
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    for (c, blocks) in clients.iter().zip(&written) {
        let got = read_all(&nfs, &c.file, READ_REGION, WRITE_REGION as usize);
        for (j, chunk) in got.chunks(LOAD_IO).enumerate() {
            let off = READ_REGION + (j * LOAD_IO) as u64;
            if blocks.contains(&off) {
                assert!(
                    chunk == pattern(c.seed, off, LOAD_IO),
                    "block {off} differs"
                );
            } else {
                assert!(
                    chunk.iter().all(|&b| b == 0),
                    "unwritten block {off} is not zero"
                );
            }
        }
    }
    let rss = rss_max.load(Ordering::Relaxed);
    let mut latency = serde_json::Map::new();
    for (op, v) in all.iter_mut() {
        latency.insert(format!("{op:?}").to_lowercase(), percentiles(v));
    }
    save_figures(
        "load",
        &json!({
            "connections": connections,
            "depth": depth,
            "seconds": elapsed,
            "operations": ops,
            "operations_per_second": ops as f64 / elapsed,
            "errors": 0,
            "rss_max_bytes": rss,
            "arc_size_max_bytes": arc_size_max.load(Ordering::Relaxed),
            "arc_max_bytes": arc,
            "rss_bound_bytes": arc + rss_over_arc(),
            "latency": latency,
        }),
    );
    assert!(rss > 0, "RSS was never read");
    assert!(
        rss <= arc + rss_over_arc(),
        "RSS {} MiB over the bound {} MiB",
        rss >> 20,
        (arc + rss_over_arc()) >> 20
    );
}

/// A write the server acknowledged as stable (FILE_SYNC, DATA_SYNC, or UNSTABLE and
/// then a COMMIT with the same verifier).
#[derive(Clone, Copy)]
struct Acked {
    /// Restarts before the acknowledgement.
    generation: u64,
    stable: Stable,
    file: usize,
    offset: u64,
    len: usize,
}

/// A writer of the kill test: appends blocks of varied, unaligned sizes to its own
/// file, 8 in flight, never writing any byte twice; reconnects with the same handle
/// whenever the daemon dies. Returns the writes acknowledged as stable and how many
/// were acknowledged after each restart.
fn kill_test_writer(
    t: &Target,
    file_index: usize,
    fh: &Fh,
    seed: u64,
    stop: &AtomicBool,
    restarts: &AtomicU64,
    acked_after_restart: &Mutex<BTreeMap<u64, u64>>,
) -> Vec<Acked> {
    let mut rng = Rng::new(seed);
    let mut acked = Vec::new();
    let mut offset = 0u64;
    let mut conn: Option<Nfs> = None;
    while !stop.load(Ordering::Relaxed) {
        let c = match &conn {
            Some(c) => c,
            None => match Nfs::connect(t, root_credential("torture")) {
                Ok(c) => conn.insert(c),
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            },
        };
        let generation = restarts.load(Ordering::SeqCst);
        let stable = match rng.below(3) {
            0 => Stable::FileSync,
            1 => Stable::DataSync,
            _ => Stable::Unstable,
        };
        // A batch of 8 writes in flight.
        let mut batch = Vec::new();
        let mut failed = false;
        for _ in 0..8 {
            let len = 1 + rng.below(32 << 10) as usize;
            let data = pattern(seed, offset, len);
            match c.start_write(fh, offset, &data, stable) {
                Ok(call) => batch.push((offset, len, call)),
                Err(_) => failed = true,
            }
            offset += len as u64;
        }
        let mut done = Vec::new();
        let mut verifiers = Vec::new();
        for (off, len, call) in batch {
            match call.wait() {
                // An NFS error, a short write or a weaker stability than asked
                // fails the test; a dead connection only ends the batch.
                Ok(reply) => match Nfs::finish_write(reply, len, stable) {
                    Ok(verf) => {
                        verifiers.push(verf);
                        done.push(Acked {
                            generation,
                            stable,
                            file: file_index,
                            offset: off,
                            len,
                        });
                    }
                    Err(e) => panic!("WRITE at {off}: {e:#}"),
                },
                Err(_) => failed = true,
            }
        }
        if failed && stable == Stable::Unstable {
            // Answered UNSTABLE and never committed: not acknowledged as stable.
            done.clear();
        } else if stable == Stable::Unstable {
            match c.commit_verifier(fh) {
                Ok(verf) => {
                    // Writes made under another server instance must be sent again;
                    // these are simply not counted (their bytes are never rewritten).
                    done.retain(|_| verifiers.iter().all(|v| *v == verf));
                }
                Err(e) if NfsStatus::of(&e).is_some() => panic!("COMMIT: {e:#}"),
                Err(_) => {
                    failed = true;
                    done.clear();
                }
            }
        }
        if !done.is_empty() {
            *acked_after_restart
                .lock()
                .unwrap()
                .entry(generation)
                .or_default() += done.len() as u64;
        }
        acked.extend(done);
        if failed {
            conn = None;
        }
        // Paced, so the soak's 50 kills fit its pool.
        std::thread::sleep(Duration::from_millis(20));
    }
    acked
}

#[test]
fn kill_9_under_load_loses_no_acknowledged_write() {
    let kills = std::env::var("SHOAL_TORTURE_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if soak() { 50 } else { 5 });
    let writers = 4;
    let dir = tempfile::tempdir().unwrap();
    let size = if soak() { "4G" } else { "1G" };
    let (mut served, t, root) = serve_share(dir.path(), size, &["raidz1", "a", "b", "c"], "k", &[]);
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    let files: Vec<Fh> = (0..writers)
        .map(|i| nfs.create(&root, &format!("w{i}"), true).unwrap())
        .collect();
    nfs.commit(&files[0]).unwrap();
    drop(nfs);
    let base = seed();
    let mut rng = Rng::new(base);
    let stop = AtomicBool::new(false);
    let restarts = AtomicU64::new(0);
    let per_generation = Mutex::new(BTreeMap::new());
    let acked: Vec<Acked> = std::thread::scope(|s| {
        let handles: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(i, fh)| {
                let (t, stop, restarts, per_generation) = (&t, &stop, &restarts, &per_generation);
                s.spawn(move || {
                    kill_test_writer(
                        t,
                        i,
                        fh,
                        base ^ ((i as u64 + 1) << 48),
                        stop,
                        restarts,
                        per_generation,
                    )
                })
            })
            .collect();
        if kills == 0 {
            std::thread::sleep(Duration::from_secs(8));
        }
        // The writers stop however this thread leaves the scope: a panic here (a
        // restart that fails) would otherwise wait on them forever.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop_writers = StopOnDrop(&stop);
        // Every generation must get acknowledged writes before the next kill; a short
        // random gap alone does not promise that on a loaded machine. False after two
        // minutes without one: the writers are stopped and the check after the scope
        // names the generation.
        let wait_for_ack = |generation: u64| {
            let deadline = std::time::Instant::now() + Duration::from_secs(120);
            while per_generation
                .lock()
                .unwrap()
                .get(&generation)
                .is_none_or(|&n| n == 0)
            {
                if std::time::Instant::now() > deadline {
                    stop.store(true, Ordering::Relaxed);
                    return false;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            true
        };
        let mut acked_every_generation = true;
        for _ in 0..kills {
            acked_every_generation = wait_for_ack(restarts.load(Ordering::SeqCst));
            if !acked_every_generation {
                break;
            }
            std::thread::sleep(Duration::from_millis(300 + rng.below(2500)));
            served.kill9();
            restarts.fetch_add(1, Ordering::SeqCst);
            served.restart();
        }
        // Clients carry on after the last restart, then stop.
        if acked_every_generation && wait_for_ack(restarts.load(Ordering::SeqCst)) {
            std::thread::sleep(Duration::from_millis(1500));
        }
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    // Kill once more so what is read back comes from the pool and its log, not memory.
    served.kill9();
    served.restart();

    let per_generation = per_generation.into_inner().unwrap();
    for g in 0..=kills as u64 {
        assert!(
            per_generation.get(&g).copied().unwrap_or(0) > 0,
            "no write was acknowledged after restart {g}: {per_generation:?}"
        );
    }
    // The same handles, never looked up again, read back every acknowledged byte.
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    let mut bytes = 0u64;
    for a in &acked {
        let want = pattern(base ^ ((a.file as u64 + 1) << 48), a.offset, a.len);
        let got = read_all(&nfs, &files[a.file], a.offset, a.len);
        if got != want {
            let first = got.iter().zip(&want).position(|(g, w)| g != w);
            let size = nfs.getattr(&files[a.file]).unwrap().size;
            let zeros = got.iter().filter(|&&b| b == 0).count();
            let kept = dir.keep();
            panic!(
                "file w{} bytes {}..{} ({:?}, after restart {}) acknowledged as stable read back differently: \
                 {} bytes read, first difference at +{first:?}, {zeros} zero bytes, file size \
                 {size}; pool and log kept in {}",
                a.file,
                a.offset,
                a.offset + a.len as u64,
                a.stable,
                a.generation,
                got.len(),
                kept.display()
            );
        }
        bytes += a.len as u64;
    }
    served.stop();
    save_figures(
        "kill9",
        &json!({
            "kills": kills,
            "writers": writers,
            "acknowledged_writes": acked.len(),
            "acknowledged_bytes": bytes,
            "acknowledged_per_server_instance": per_generation,
            "lost": 0,
        }),
    );
}

/// FSSTAT: (total bytes, available bytes) of the share.
fn fsstat(conn: &Connection, fh: &Fh) -> (u64, u64) {
    let r = conn
        .call(NFS_PROGRAM, NFS_V3, 18, |e| {
            e.opaque(&fh.0);
        })
        .unwrap();
    let mut d = r.decoder();
    assert_eq!(d.u32().unwrap(), 0, "FSSTAT");
    post_op_attr(&mut d).unwrap();
    let total = d.u64().unwrap();
    let _free = d.u64().unwrap();
    (total, d.u64().unwrap())
}

#[test]
fn a_full_pool_refuses_only_what_does_not_fit_and_keeps_everything_stored() {
    let dir = tempfile::tempdir().unwrap();
    let (mut served, t, root) = serve_share(dir.path(), "160M", &["mirror", "a", "b"], "full", &[]);
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    let (total, available_at_start) = fsstat(&nfs.conn, &root);
    let base = seed();

    // Stored before the pool fills: must survive everything below.
    let precious = write_files(&nfs, &root, "precious", base, 4 << 20, Stable::FileSync);

    // Fill with 1 MiB stable writes until the pool says NOSPC.
    let mut stored: Vec<(Fh, u64, u64)> = Vec::new(); // file, seed, bytes stored
    let mut accepted = 0u64;
    let mut nospc = None;
    'fill: for i in 0.. {
        let fh = match nfs.create(&root, &format!("fill{i}"), true) {
            Ok(fh) => fh,
            Err(e) => {
                nospc = NfsStatus::of(&e);
                break;
            }
        };
        let seed = base ^ (1000 + i);
        let mut len = 0u64;
        let whole = pattern(seed, 0, 16 << 20);
        for (j, data) in whole.chunks(1 << 20).enumerate() {
            match nfs.write(&fh, (j << 20) as u64, data, Stable::FileSync) {
                Ok(()) => {
                    len += 1 << 20;
                    accepted += 1 << 20;
                }
                Err(e) => {
                    nospc = NfsStatus::of(&e);
                    stored.push((fh, seed, len));
                    break 'fill;
                }
            }
        }
        stored.push((fh, seed, len));
    }
    assert_eq!(nospc, Some(28), "the fill ends with NFS3ERR_NOSPC");
    let (_, available_at_nospc) = fsstat(&nfs.conn, &root);
    eprintln!(
        "pool of {} MiB: {} MiB available at start, {} MiB accepted, {} MiB available at NOSPC",
        total >> 20,
        available_at_start >> 20,
        accepted >> 20,
        available_at_nospc >> 20
    );
    // NOSPC only where there truly was no room: nearly all that FSSTAT offered was
    // taken, and what it still offers is less than one more write's worth of slack.
    assert!(
        accepted + (16 << 20) >= available_at_start * 9 / 10,
        "NOSPC after {} MiB of {} MiB available",
        accepted >> 20,
        available_at_start >> 20
    );
    assert!(
        available_at_nospc < 8 << 20,
        "{available_at_nospc} bytes still available"
    );

    let check = |nfs: &Nfs| {
        for (fh, seed) in &precious {
            assert!(read_all(nfs, fh, 0, 4 << 20) == pattern(*seed, 0, 4 << 20));
        }
        for (i, (fh, seed, len)) in stored.iter().enumerate() {
            let got = read_all(nfs, fh, 0, *len as usize);
            let want = pattern(*seed, 0, *len as usize);
            if got != want {
                let first = got.iter().zip(&want).position(|(g, w)| g != w);
                let size = nfs.getattr(fh).unwrap().size;
                panic!(
                    "fill{i} changed: {} of {len} bytes read, first difference at {first:?}, \
                     size {size}, {} zero bytes",
                    got.len(),
                    got.iter().filter(|&&b| b == 0).count()
                );
            }
        }
    };
    check(&nfs);
    // A crash on a full pool: it imports, replays, and everything is still there.
    drop(nfs);
    served.restart();
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    check(&nfs);

    // Freeing space makes room again (once the frees commit).
    for i in 0..stored.len() / 2 {
        assert!(nfs.remove(&root, &format!("fill{i}")).unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let again = nfs.create(&root, "after", true).unwrap();
    loop {
        match nfs.write(&again, 0, &pattern(7, 0, 1 << 20), Stable::FileSync) {
            Ok(()) => break,
            Err(e) if NfsStatus::of(&e) == Some(28) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("writing after frees: {e:#}"),
        }
    }
    for (fh, seed) in &precious {
        assert!(read_all(&nfs, fh, 0, 4 << 20) == pattern(*seed, 0, 4 << 20));
    }
    served.stop();
    assert!(
        !served.log_text().contains("panicked"),
        "{}",
        served.log_text()
    );
    save_figures(
        "enospc",
        &json!({
            "pool_bytes": total,
            "available_at_start": available_at_start,
            "accepted_bytes": accepted,
            "available_at_nospc": available_at_nospc,
            "lost": 0,
        }),
    );
}

/// Overwrites `count` random 4 KiB blocks of the device file at `path` (between
/// `margin` from either end, so the labels stay) with random bytes, as a failing disk
/// or a stray write would, and makes the damage reach the disk.
fn corrupt_device(path: &Path, count: usize, margin: u64, rng: &mut Rng) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let size = f.metadata().unwrap().len();
    let blocks = (size - 2 * margin) / 4096;
    for _ in 0..count {
        let at = margin + rng.below(blocks) * 4096;
        let junk = pattern(rng.below(u64::MAX), at, 4096);
        f.write_all_at(&junk, at).unwrap();
    }
    f.sync_all().unwrap();
}

#[test]
fn corrupted_blocks_of_a_live_pool_never_reach_a_client() {
    let dir = tempfile::tempdir().unwrap();
    let (mut served, t, root) = serve_share(
        dir.path(),
        "128M",
        &["raidz2", "a", "b", "c", "d", "e", "f"],
        "c",
        &["--arc-max", "64M"],
    );
    let devices: Vec<_> = ["a", "b"]
        .iter()
        .map(|d| dir.path().join("devs").join(d))
        .collect();
    assert!(devices.iter().all(|d| d.exists()), "{devices:?}");
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    let base = seed();
    let file_bytes = 24usize << 20;
    // More data than the ARC holds, so reads go to the devices.
    let files = write_files(&nfs, &root, "data", base, file_bytes, Stable::Unstable);
    // Let the transaction group put the data in its final place.
    std::thread::sleep(Duration::from_secs(6));

    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let mut rng = Rng::new(base);
    std::thread::scope(|s| {
        for r in 0..2 {
            let (t, files, stop, reads) = (&t, &files, &stop, &reads);
            s.spawn(move || {
                let nfs = Nfs::connect(t, root_credential("torture")).unwrap();
                let mut k = r;
                while !stop.load(Ordering::Relaxed) {
                    let (fh, seed) = &files[k % files.len()];
                    let want = pattern(*seed, 0, file_bytes);
                    for off in (0..file_bytes).step_by(1 << 20) {
                        let got = nfs.read(fh, off as u64, 1 << 20).unwrap();
                        assert!(
                            got.bytes() == &want[off..off + (1 << 20)],
                            "a client read corrupted data at {off}"
                        );
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                    k += 1;
                }
            });
        }
        // A writer keeps the pool changing while it is damaged.
        let (t, root, stop) = (&t, &root, &stop);
        s.spawn(move || {
            let nfs = Nfs::connect(t, root_credential("torture")).unwrap();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let fh = nfs.create(root, &format!("live{}", i % 8), true).unwrap();
                nfs.write(&fh, 0, &pattern(i, 0, 1 << 20), Stable::FileSync)
                    .unwrap();
                i += 1;
            }
        });
        for _ in 0..3 {
            std::thread::sleep(Duration::from_secs(3));
            for d in &devices {
                corrupt_device(d, 300, 16 << 20, &mut rng);
            }
        }
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
    });

    // A scrub repairs what the reads did not reach; nothing is unrecoverable.
    let scrub = scrub_pool(&served);
    assert_eq!(scrub["errors"], 0, "{scrub}");
    let status = pool_status(&served);
    let cksum_errors: u64 = status["vdevs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| v["children"].as_array().unwrap())
        .map(|l| l["cksum_errors"].as_u64().unwrap())
        .sum();
    assert_eq!(status["unrecoverable_reads"], 0, "{status}");
    assert!(cksum_errors > 0, "the damage was never seen: {status}");
    // Everything reads back, and again from the devices after a kill -9.
    for pass in 0..2 {
        let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
        for (fh, seed) in &files {
            assert!(
                read_all(&nfs, fh, 0, file_bytes) == pattern(*seed, 0, file_bytes),
                "data differs after the scrub (pass {pass})"
            );
        }
        served.restart();
    }
    let scrub_again = scrub_pool(&served);
    assert_eq!(scrub_again["errors"], 0, "{scrub_again}");
    assert_eq!(
        scrub_again["bad_copies"], 0,
        "the first scrub left damage: {scrub_again}"
    );
    save_figures(
        "corruption",
        &json!({
            "devices_damaged": devices.len(),
            "blocks_overwritten": 3 * 300 * devices.len(),
            "client_reads_verified": reads.load(Ordering::Relaxed),
            "checksum_errors_seen": cksum_errors,
            "scrub": scrub,
            "lost": 0,
        }),
    );
}

/// Scrubs pool `tank` through the API; its summary.
fn scrub_pool(s: &Served) -> Value {
    let (code, body) = s.post("/api/v1/pools/tank/scrub", &json!({}));
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn pool_status(s: &Served) -> Value {
    let (code, body) = s.get("/api/v1/pools/tank");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn failed_devices_under_load_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut served, t, root) = serve_share(
        dir.path(),
        "128M",
        &["raidz2", "a", "b", "c", "d", "e", "f"],
        "f",
        &["--arc-max", "64M", "--fault-injection"],
    );
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    let base = seed();
    let file_bytes = 16usize << 20;
    let files = write_files(&nfs, &root, "data", base, file_bytes, Stable::FileSync);
    let leaves: Vec<String> = pool_status(&served)["vdevs"][0]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["path"].as_str().unwrap().to_string())
        .collect();
    // Bad requests are refused with a reason.
    let (code, _) = served.post(
        "/api/v1/pools/tank/inject",
        &json!({"device": "/nope", "fault": "fail"}),
    );
    assert_eq!(code, 404);
    let (code, _) = served.post(
        "/api/v1/pools/tank/inject",
        &json!({"device": leaves[0], "fault": "melt"}),
    );
    assert_eq!(code, 400);

    let stop = AtomicBool::new(false);
    let written = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for r in 0..2 {
            let (t, files, stop) = (&t, &files, &stop);
            s.spawn(move || {
                let nfs = Nfs::connect(t, root_credential("torture")).unwrap();
                let mut k = r;
                while !stop.load(Ordering::Relaxed) {
                    let (fh, seed) = &files[k % files.len()];
                    let want = pattern(*seed, 0, file_bytes);
                    for off in (0..file_bytes).step_by(1 << 20) {
                        let got = nfs
                            .read(fh, off as u64, 1 << 20)
                            .unwrap_or_else(|e| panic!("READ with failed devices: {e:#}"));
                        assert!(got.bytes() == &want[off..off + (1 << 20)]);
                    }
                    k += 1;
                }
            });
        }
        let (t, root, stop, written) = (&t, &root, &stop, &written);
        s.spawn(move || {
            let nfs = Nfs::connect(t, root_credential("torture")).unwrap();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if i >= 200 {
                    // 50 MiB is plenty; a full pool is another test.
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                let fh = nfs.create(root, &format!("new{i}"), true).unwrap();
                let data = pattern(base ^ (500 + i), 0, 256 << 10);
                nfs.write(&fh, 0, &data, Stable::FileSync)
                    .unwrap_or_else(|e| panic!("WRITE with failed devices: {e:#}"));
                written.lock().unwrap().push((fh, base ^ (500 + i)));
                i += 1;
                std::thread::sleep(Duration::from_millis(40));
            }
        });
        // Two of six devices die, one after the other: RAID-Z2 carries on.
        for dead in &leaves[..2] {
            std::thread::sleep(Duration::from_secs(3));
            let (code, body) = served.post(
                "/api/v1/pools/tank/inject",
                &json!({"device": dead, "fault": "fail"}),
            );
            assert_eq!(code, 200, "{body}");
        }
        std::thread::sleep(Duration::from_secs(4));
        stop.store(true, Ordering::Relaxed);
    });
    let status = pool_status(&served);
    assert_ne!(status["health"], "ONLINE", "{status}");
    assert_eq!(status["unrecoverable_reads"], 0, "{status}");
    let written = written.into_inner().unwrap();
    assert!(!written.is_empty());
    let check = |nfs: &Nfs| {
        for (fh, seed) in &files {
            assert!(read_all(nfs, fh, 0, file_bytes) == pattern(*seed, 0, file_bytes));
        }
        for (fh, seed) in &written {
            assert!(read_all(nfs, fh, 0, 256 << 10) == pattern(*seed, 0, 256 << 10));
        }
    };
    check(&Nfs::connect(&t, root_credential("torture")).unwrap());
    // After a kill -9 the devices are back (the fault lived in the old process); the
    // pool imports, and the data is all there.
    served.restart();
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    check(&nfs);
    served.stop();
    save_figures(
        "device-failure",
        &json!({
            "devices_failed": 2,
            "layout": "raidz2 of 6",
            "files_written_while_failing": written.len(),
            "health_after": status["health"],
            "lost": 0,
        }),
    );
}
