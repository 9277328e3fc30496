//! Coverage-guided fuzzing of the SCSI target's command path
//! (`scsi::LogicalUnit::execute`) over a real volume of a pool on simulated devices:
//! the input is split into a CDB (first byte: its length, at most 32) and Data-Out.
//! Checked: no panic; GOOD never carries sense and CHECK CONDITION always does.
#![no_main]

#[path = "../../crates/pool/tests/common/mod.rs"]
mod common;
use common::create_pool_with;

use fs::Datasets;
use libfuzzer_sys::fuzz_target;
use pool::PoolOptions;
use scsi::LogicalUnit;
use std::sync::{Arc, OnceLock};
use vdev::{Layout, SimDevice};

fn unit() -> &'static LogicalUnit {
    static UNIT: OnceLock<LogicalUnit> = OnceLock::new();
    UNIT.get_or_init(|| {
        let devs: Vec<Arc<SimDevice>> = (0..3).map(|i| SimDevice::new(64 << 20, i)).collect();
        let pool = create_pool_with(Layout::RaidZ { nparity: 1 }, &devs, PoolOptions::default());
        let ds = Datasets::new(pool).unwrap();
        ds.create_volume("tank/v", &scsi::fuzzing::volume_spec(), &[])
            .unwrap();
        scsi::fuzzing::unit(ds.open_volume("tank/v").unwrap())
    })
}

// The check lives in `scsi::fuzzing`, where CI replays the corpus through it too.
fuzz_target!(|data: &[u8]| scsi::fuzzing::execute(unit(), data));
