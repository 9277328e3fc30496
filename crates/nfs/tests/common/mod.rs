//! What the NFSv4 tests share: a pool on simulated devices with `tank/home/share`
//! shared read-write to everyone.

use nfs::{ExportRules, HandleKey, NfsService, Share};
use pool::pool::{DeviceArg, TopArg};
use pool::{Pool, PoolOptions};
use std::sync::Arc;
use vdev::{Layout, SimDevice};

/// The shared dataset: two pseudo directories (`tank`, `tank/home`) lead to it.
pub const DATASET: &str = "tank/home/share";

/// A mirror of two 64 MiB simulated devices holding `DATASET`.
pub fn pool_with_share() -> (Arc<Pool>, fs::Datasets) {
    let devs: Vec<DeviceArg> = (0..2)
        .map(|i| DeviceArg {
            path: format!("sim{i}"),
            device: SimDevice::new(64 << 20, i),
        })
        .collect();
    let options = PoolOptions {
        arc_max_bytes: Some(16 << 20),
        sync_thread: false,
        deterministic_io: true,
        ..PoolOptions::default()
    };
    let top = TopArg {
        layout: Layout::Mirror,
        devices: devs,
    };
    let pool = Pool::create("tank", vec![top], vec![], vec![], options).unwrap();
    let datasets = fs::Datasets::new(pool.clone()).unwrap();
    datasets.create("tank/home", &[]).unwrap();
    datasets.create(DATASET, &[]).unwrap();
    (pool, datasets)
}

/// A service (boot number `boot`) sharing `DATASET` of `datasets` to everyone.
pub fn service_for(datasets: &fs::Datasets, boot: u64) -> NfsService {
    let service = NfsService::new(boot);
    service.add_pool_key("tank", HandleKey::new([9; 32]));
    service.add_share(Share {
        pool: "tank".into(),
        dataset: DATASET.into(),
        fs: datasets.open(DATASET).unwrap(),
        rules: ExportRules::parse("*(rw,no_root_squash)").unwrap(),
    });
    service
}
