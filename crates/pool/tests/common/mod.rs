//! Shared helpers for the pool's and the filesystem's integration tests (the `fs`
//! tests include this file by path): pools on simulated devices, a deterministic random
//! generator, and the crash policy for a crash point.

#![allow(dead_code)]

use pool::checksum::ChecksumKind;
use pool::compress::Compression;
use pool::pool::{DeviceArg, TopArg};
use pool::{Pool, PoolOptions};
use std::sync::Arc;
use vdev::{CrashClock, CrashPolicy, Layout, SimDevice};

pub const DEV_SIZE: u64 = 64 << 20;

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }
    /// Compressible-ish data: runs of a repeated random byte mixed with noise.
    pub fn mixed(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        while v.len() < n {
            let run = 1 + self.below(64) as usize;
            let b = self.next() as u8;
            if self.below(2) == 0 {
                v.extend(std::iter::repeat_n(b, run));
            } else {
                v.extend(self.bytes(run));
            }
        }
        v.truncate(n);
        v
    }
}

pub fn opts() -> PoolOptions {
    PoolOptions {
        arc_max_bytes: Some(64 << 20),
        sync_thread: false,
        // Device operations in a fixed order: a failing seed and crash point replay.
        deterministic_io: true,
        ..PoolOptions::default()
    }
}

pub fn sim_devices(n: usize, seed: u64, clock: Option<Arc<CrashClock>>) -> Vec<Arc<SimDevice>> {
    (0..n)
        .map(|i| match &clock {
            Some(c) => SimDevice::with_clock(DEV_SIZE, seed * 100 + i as u64, c.clone()),
            None => SimDevice::new(DEV_SIZE, seed * 100 + i as u64),
        })
        .collect()
}

/// One device argument: `d` named `path`.
pub fn device_arg(path: &str, d: &Arc<SimDevice>) -> DeviceArg {
    DeviceArg {
        path: path.into(),
        device: d.clone(),
    }
}

pub fn args(devs: &[Arc<SimDevice>]) -> Vec<DeviceArg> {
    devs.iter()
        .enumerate()
        .map(|(i, d)| DeviceArg {
            path: format!("sim{i}"),
            device: d.clone(),
        })
        .collect()
}

/// `layout` over all of `devs` as one top-level vdev.
pub fn create_pool(layout: Layout, devs: &[Arc<SimDevice>]) -> Arc<Pool> {
    create_pool_with(layout, devs, opts())
}

/// `create_pool` with other options.
pub fn create_pool_with(
    layout: Layout,
    devs: &[Arc<SimDevice>],
    options: PoolOptions,
) -> Arc<Pool> {
    Pool::create(
        "tank",
        vec![TopArg {
            layout,
            devices: args(devs),
        }],
        vec![],
        vec![],
        options,
    )
    .expect("create pool")
}

pub fn import(devs: &[Arc<SimDevice>]) -> Arc<Pool> {
    Pool::import(args(devs), Some("tank"), opts()).expect("import pool")
}

pub fn new_file(pool: &Pool, os: u64, block_size: u32, compression: Compression) -> u64 {
    pool.create_object(os, 19, block_size, compression, ChecksumKind::Fletcher4)
        .expect("create object")
}

/// The options of the dataset crash tests (`fs/tests/crash.rs`, `volume_crash.rs`):
/// `opts()` with a smaller cache.
pub fn dataset_crash_opts() -> PoolOptions {
    PoolOptions {
        arc_max_bytes: Some(32 << 20),
        ..opts()
    }
}

/// The pool the dataset crash tests start from: RAID-Z1 over three 64 MiB simulated
/// devices on one crash clock, created with `dataset_crash_opts()`.
pub fn dataset_crash_pool(seed: u64, clock: &Arc<CrashClock>) -> (Vec<Arc<SimDevice>>, Arc<Pool>) {
    let devs: Vec<Arc<SimDevice>> = (0..3)
        .map(|i| SimDevice::with_clock(64 << 20, seed * 10 + i, clock.clone()))
        .collect();
    let pool = create_pool_with(Layout::RaidZ { nparity: 1 }, &devs, dataset_crash_opts());
    (devs, pool)
}

/// What happens to unflushed writes at crash point `point`: every policy in turn.
pub fn crash_policy(point: u64) -> CrashPolicy {
    [
        CrashPolicy::Random,
        CrashPolicy::Hostile,
        CrashPolicy::DropAll,
        CrashPolicy::KeepAll,
    ][(point % 4) as usize]
}

/// The inputs of the committed cargo-fuzz corpus of `target` (`fuzz/corpus/TARGET`),
/// in name order; at least `min` of them, or the corpus is not in the repo.
pub fn fuzz_corpus(target: &str, min: usize) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    assert!(
        paths.len() >= min,
        "the {target} corpus is in the repo ({} inputs)",
        paths.len()
    );
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}
