//! The fuzzing check of the SCSI command path, shared by the cargo-fuzz target
//! (`fuzz/fuzz_targets/scsi_cdb.rs`, nightly) and the stable test
//! `tests/fuzz_corpus.rs`, which replays its committed corpus in CI.

use crate::{LogicalUnit, LuConfig, Nexus, Status};
use std::sync::Arc;

/// The volume the fuzzed unit is made over: 8 MiB, sparse, default block size.
pub fn volume_spec() -> fs::VolumeSpec {
    fs::VolumeSpec {
        volsize: 8 << 20,
        volblocksize: None,
        sparse: true,
    }
}

/// The fuzzed unit over `volume` (made as `volume_spec` says): 512-byte blocks, no
/// stored reservations.
pub fn unit(volume: Arc<fs::Volume>) -> LogicalUnit {
    let config = LuConfig {
        block_size: 512,
        identity: 1,
        product: "FUZZ".into(),
    };
    LogicalUnit::new(volume, config, &[], None).expect("a unit over the fuzzing volume")
}

/// `data` split into a CDB (its first byte: the length, at most 32) and Data-Out, run
/// through `lu` as one initiator: no panic, GOOD never carries sense and CHECK
/// CONDITION always does.
pub fn execute(lu: &LogicalUnit, data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = (n as usize % 33).min(rest.len());
    let (cdb, out) = rest.split_at(n);
    let nexus = Nexus {
        initiator_port: "iqn.fuzz,i,0x1".into(),
        target_port: 1,
    };
    let r = lu.execute(&nexus, cdb, out);
    match r.status {
        Status::Good => assert!(r.sense.is_none()),
        Status::CheckCondition => assert!(r.sense.is_some()),
        _ => {}
    }
}
