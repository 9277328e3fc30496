//! A stand-alone iSCSI target over one volume on a pool of simulated (in-memory)
//! devices, for trying initiators and conformance suites against the target without
//! the daemon: `cargo run --release -p iscsi --example iscsi_target -- 127.0.0.1:3260
//! [SIZE_MIB] [CHAP_USER CHAP_SECRET [MUTUAL_USER MUTUAL_SECRET]]`. It serves
//! `iqn.2026-12.org.shoal:example` with the volume as LUN 0 until killed.

#[path = "../../pool/tests/common/mod.rs"]
mod common;
use common::create_pool_with;

use fs::{Datasets, VolumeSpec};
use iscsi::{Credential, Server, Target, Targets};
use pool::PoolOptions;
use scsi::{LogicalUnit, LuConfig};
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::Arc;
use vdev::{Layout, SimDevice};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let addr = args.get(1).map(String::as_str).unwrap_or("127.0.0.1:3260");
    let mib: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(64);
    let devs: Vec<Arc<SimDevice>> = (0..3)
        .map(|i| SimDevice::new((mib * 3 / 2 + 64) << 20, i))
        .collect();
    let pool = create_pool_with(Layout::RaidZ { nparity: 1 }, &devs, PoolOptions::default());
    let ds = Datasets::new(pool.clone()).unwrap();
    ds.create_volume(
        "tank/lun0",
        &VolumeSpec {
            volsize: mib << 20,
            volblocksize: None,
            sparse: false,
        },
        &[],
    )
    .unwrap();
    let vol = ds.open_volume("tank/lun0").unwrap();
    let stored = vol.load_reservations().unwrap();
    let keep = vol.clone();
    let lu = LogicalUnit::new(
        vol.clone(),
        LuConfig {
            block_size: 512,
            identity: scsi::lu::volume_identity(pool.guid, vol.objset()),
            product: "VOLUME".into(),
        },
        &stored,
        Some(Box::new(move |b: &[u8]| {
            keep.store_reservations(b).map_err(|e| e.to_string())
        })),
    )
    .unwrap();
    let cred = |i: usize| {
        args.get(i).map(|u| Credential {
            user: u.clone(),
            secret: args.get(i + 1).cloned().unwrap_or_default(),
        })
    };
    let targets = Targets::new();
    targets.put(Target {
        name: "iqn.2026-12.org.shoal:example".into(),
        alias: Some("example".into()),
        luns: BTreeMap::from([(0, Arc::new(lu))]),
        allow: Vec::new(),
        chap: cred(3),
        mutual_chap: cred(5),
    });
    let server = Server::new(targets, 4);
    let listener = TcpListener::bind(addr).expect("bind the portal");
    eprintln!("serving iqn.2026-12.org.shoal:example on {addr}");
    server.serve(listener).unwrap().join().unwrap();
}
