//! Coverage-guided fuzzing of the iSCSI PDU reader (`iscsi::pdu::read_pdu`), with and
//! without header and data digests (the first byte picks). Checked: no panic; the
//! data segment is within the bound; and a PDU read back from its own encoding is the
//! same PDU.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The checks live in `iscsi::fuzzing`, where CI replays the corpus through them too.
fuzz_target!(|data: &[u8]| iscsi::fuzzing::pdus(data));
