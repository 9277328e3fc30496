//! What the NFSv4 tests share: a pool on simulated devices with `tank/home/share`
//! shared read-write to everyone.

// Each test binary uses part of what is here.
#![allow(dead_code)]

use nfs::{ExportRules, HandleKey, NfsService, Share};
pub mod harness;

use pool::Pool;
use std::sync::Arc;

/// The shared dataset: two pseudo directories (`tank`, `tank/home`) lead to it.
pub const DATASET: &str = "tank/home/share";

/// A mirror of two 64 MiB simulated devices holding `DATASET`.
pub fn pool_with_share() -> (Arc<Pool>, fs::Datasets) {
    let pool = nfs::fuzzing::simulated_mirror("tank");
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
        handle_identity: None,
    });
    service
}
