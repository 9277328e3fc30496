//! Torture: the running daemon (`shoal serve`, a real process) under many pipelined
//! clients, killed with SIGKILL at random moments (also behind a simulated volatile
//! write cache, so a kill is a power cut), with corrupted blocks under it, on a full
//! pool, and facing clients its exports refuse. Every test checks that nothing
//! acknowledged is lost, byte for byte.
//!
//! CI runs the short forms; `SHOAL_SOAK=1` runs the soak: 10 minutes of load, 50
//! kills and 200 power cuts (`docs/reliability.md` has the commands and the figures).

#[path = "../common/mod.rs"]
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
        delegations: false,
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
    try_read_all(nfs, fh, offset, len).unwrap_or_else(|e| panic!("{e:#}"))
}

/// `read_all` that reports a failed READ instead of failing the test.
fn try_read_all(nfs: &Nfs, fh: &Fh, offset: u64, len: usize) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let at = offset + out.len() as u64;
        let r = nfs
            .read(fh, at, (len - out.len()).min(1 << 20) as u32)
            .map_err(|e| e.context(format!("READ at {at}")))?;
        if r.bytes().is_empty() {
            break;
        }
        out.extend_from_slice(r.bytes());
    }
    Ok(out)
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

mod faults;
mod full_pool;
mod kill;
mod load;
mod power_loss;
mod refusals;
mod v4_state;
