//! Coverage-guided fuzzing of the SCSI target's command path
//! (`scsi::LogicalUnit::execute`) over a real volume of a pool on simulated devices:
//! the input is split into a CDB (first byte: its length, at most 32) and Data-Out.
//! Checked: no panic; GOOD never carries sense and CHECK CONDITION always does.
#![no_main]

#[path = "../../crates/pool/tests/common/mod.rs"]
mod common;
use common::create_pool_with;

use fs::{Datasets, VolumeSpec};
use libfuzzer_sys::fuzz_target;
use pool::PoolOptions;
use scsi::{LogicalUnit, LuConfig, Nexus, Status};
use std::sync::{Arc, OnceLock};
use vdev::{Layout, SimDevice};

fn unit() -> &'static LogicalUnit {
    static UNIT: OnceLock<LogicalUnit> = OnceLock::new();
    UNIT.get_or_init(|| {
        let devs: Vec<Arc<SimDevice>> = (0..3).map(|i| SimDevice::new(64 << 20, i)).collect();
        let pool = create_pool_with(Layout::RaidZ { nparity: 1 }, &devs, PoolOptions::default());
        let ds = Datasets::new(pool).unwrap();
        let spec = VolumeSpec {
            volsize: 8 << 20,
            volblocksize: None,
            sparse: true,
        };
        ds.create_volume("tank/v", &spec, &[]).unwrap();
        let v = ds.open_volume("tank/v").unwrap();
        let config = LuConfig {
            block_size: 512,
            identity: 1,
            product: "FUZZ".into(),
        };
        LogicalUnit::new(v, config, &[], None).unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = (n as usize % 33).min(rest.len());
    let (cdb, out) = rest.split_at(n);
    let nexus = Nexus {
        initiator_port: "iqn.fuzz,i,0x1".into(),
        target_port: 1,
    };
    let r = unit().execute(&nexus, cdb, out);
    match r.status {
        Status::Good => assert!(r.sense.is_none()),
        Status::CheckCondition => assert!(r.sense.is_some()),
        _ => {}
    }
});
