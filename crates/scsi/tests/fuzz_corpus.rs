//! The committed cargo-fuzz corpus of the SCSI command path (`fuzz/corpus/scsi_cdb`:
//! what the coverage-guided runs found reaching new code) goes through the same check
//! again on stable, over the same unit, so CI replays it on every change.

#[path = "../../pool/tests/common/mod.rs"]
mod common;
use common::*;

use fs::Datasets;
use pool::PoolOptions;
use std::sync::Arc;
use vdev::{Layout, SimDevice};

#[test]
fn the_cdb_corpus_replays_cleanly() {
    let inputs = fuzz_corpus("scsi_cdb", 100);
    let devs: Vec<Arc<SimDevice>> = (0..3).map(|i| SimDevice::new(64 << 20, i)).collect();
    let pool = create_pool_with(Layout::RaidZ { nparity: 1 }, &devs, PoolOptions::default());
    let ds = Datasets::new(pool).unwrap();
    ds.create_volume("tank/v", &scsi::fuzzing::volume_spec(), &[])
        .unwrap();
    let lu = scsi::fuzzing::unit(ds.open_volume("tank/v").unwrap());
    for input in &inputs {
        scsi::fuzzing::execute(&lu, input);
    }
}
