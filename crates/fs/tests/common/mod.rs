//! Shared helpers for the filesystem's integration tests: a deterministic random
//! generator and device arguments for simulated devices.

#![allow(dead_code)]

use pool::pool::DeviceArg;
use std::sync::Arc;
use vdev::SimDevice;

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
