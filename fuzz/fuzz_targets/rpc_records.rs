//! Coverage-guided fuzzing of every record the NFS server can receive: the RPC header
//! and credential decoder, then the arguments of every MOUNT, portmapper and NFSv3
//! procedure against a real filesystem on simulated devices (`nfs::fuzzing`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfs::fuzzing::Harness;
use std::sync::OnceLock;

static HARNESS: OnceLock<Harness> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    HARNESS.get_or_init(Harness::new).run(data);
});
