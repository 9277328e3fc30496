//! SIGKILL loop against real files: a child process writes generations of data to a
//! pool on real device files and records each generation only after `sync` returned;
//! the parent kills it with SIGKILL at a random moment, imports the pool, checks it,
//! and requires every object to hold one same generation, no older than the last one
//! acknowledged. The child is this test binary itself, re-run with an environment
//! variable. `SHOAL_KILL_LOOPS=N` sets the number of kills (default 30).

mod common;

use common::Rng;
use pool::checksum::ChecksumKind;
use pool::compress::Compression;
use pool::pool::{DeviceArg, TopArg};
use pool::{Pool, PoolOptions};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use vdev::{FileDevice, Layout};

const OBJECTS: u64 = 6;
const OBJ_BYTES: usize = 300_000;

fn options() -> PoolOptions {
    PoolOptions {
        arc_max_bytes: Some(32 << 20),
        sync_thread: false,
        ..PoolOptions::default()
    }
}

fn devices(dir: &Path) -> Vec<DeviceArg> {
    (0..3)
        .map(|i| {
            let p = dir.join(format!("d{i}.img"));
            DeviceArg {
                path: p.display().to_string(),
                device: Arc::new(FileDevice::open(&p).unwrap()),
            }
        })
        .collect()
}

fn content(generation: u64, obj: u64) -> Vec<u8> {
    let mut rng = Rng(generation * 1000 + obj);
    rng.mixed(OBJ_BYTES)
}

fn last_acked(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join("acked"))
        .ok()?
        .lines()
        .last()?
        .parse()
        .ok()
}

/// The pool the children write: made by the parent before the first child, so that
/// every child imports it and a kill can never land halfway through creating it.
fn create(dir: &Path) {
    let p = Pool::create(
        "killtest",
        vec![TopArg {
            layout: Layout::RaidZ { nparity: 1 },
            devices: devices(dir),
        }],
        vec![],
        vec![],
        options(),
    )
    .unwrap();
    let os = p.create_objset("killtest/data", "{}").unwrap();
    for _ in 0..OBJECTS {
        p.create_object(os, 19, 16384, Compression::Lz4, ChecksumKind::Fletcher4)
            .unwrap();
    }
    p.sync().unwrap();
    p.export().unwrap();
}

/// The child: import, then write and sync generations forever.
fn child(dir: &Path) {
    let pool = Pool::import(devices(dir), Some("killtest"), options()).unwrap();
    let os = pool.objset_id("killtest/data").unwrap();
    let mut generation = last_acked(dir).map_or(1, |g| g + 1);
    let mut ack = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("acked"))
        .unwrap();
    loop {
        for obj in 1..=OBJECTS {
            pool.write(os, obj, 0, &content(generation, obj)).unwrap();
        }
        pool.sync().unwrap();
        writeln!(ack, "{generation}").unwrap();
        ack.sync_all().unwrap();
        generation += 1;
    }
}

#[test]
fn sigkill_loop_on_real_files() {
    if let Ok(dir) = std::env::var("SHOAL_KILL_CHILD_DIR") {
        child(Path::new(&dir));
        return;
    }
    let loops: u64 = std::env::var("SHOAL_KILL_LOOPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let tmp = tempfile::tempdir_in(&base).unwrap();
    let dir = tmp.path();
    for i in 0..3 {
        FileDevice::create(dir.join(format!("d{i}.img")), 64 << 20).unwrap();
    }
    create(dir);
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng(42);
    let mut kills = 0;
    let mut generations_seen = Vec::new();
    for _ in 0..loops {
        let mut child = std::process::Command::new(&exe)
            .args(["--exact", "sigkill_loop_on_real_files", "--nocapture"])
            .env("SHOAL_KILL_CHILD_DIR", dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(50 + rng.below(400)));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        // By the signal: not finished, and not a panic of its own (an import that
        // failed, say).
        assert_eq!(status.signal(), Some(9), "the child must die by the signal");
        kills += 1;
        let acked = last_acked(dir);
        let pool = Pool::import(devices(dir), Some("killtest"), options()).unwrap();
        let report = pool.check().unwrap();
        assert!(
            report.problems.is_empty(),
            "after kill {kills}: {:?}",
            report.problems
        );
        let os = pool.objset_id("killtest/data").unwrap();
        // Every object holds the same generation: >= the last acknowledged one and at
        // most one newer (the sync that was in flight).
        let mut found = None;
        for obj in 1..=OBJECTS {
            let got = pool.read(os, obj, 0, OBJ_BYTES).unwrap();
            let lo = acked.unwrap_or(0);
            let generation = (lo..=lo + 1)
                .find(|&g| {
                    if g == 0 {
                        got.iter().all(|&b| b == 0)
                    } else {
                        got == content(g, obj)
                    }
                })
                .unwrap_or_else(|| {
                    panic!(
                        "kill {kills}: object {obj} is neither generation {lo} nor {}",
                        lo + 1
                    )
                });
            assert!(
                found.is_none_or(|f| f == generation),
                "objects from different generations"
            );
            found = Some(generation);
        }
        generations_seen.push(found.unwrap());
        drop(pool);
        // The next child continues after what is on disk now.
        if let Some(g) = found {
            if Some(g) != acked && g > 0 {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(dir.join("acked"))
                    .unwrap();
                writeln!(f, "{g}").unwrap();
            }
        }
    }
    println!("{kills} SIGKILLs; generations after each: {generations_seen:?}");
    assert!(
        generations_seen.last().copied().unwrap_or(0) > 3,
        "the writer made progress between kills"
    );
}
