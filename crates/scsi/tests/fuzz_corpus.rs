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
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/scsi_cdb");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 100,
        "the corpus is in the repo ({} inputs)",
        paths.len()
    );
    let devs: Vec<Arc<SimDevice>> = (0..3).map(|i| SimDevice::new(64 << 20, i)).collect();
    let pool = create_pool_with(Layout::RaidZ { nparity: 1 }, &devs, PoolOptions::default());
    let ds = Datasets::new(pool).unwrap();
    ds.create_volume("tank/v", &scsi::fuzzing::volume_spec(), &[])
        .unwrap();
    let lu = scsi::fuzzing::unit(ds.open_volume("tank/v").unwrap());
    for path in &paths {
        scsi::fuzzing::execute(&lu, &std::fs::read(path).unwrap());
    }
}
