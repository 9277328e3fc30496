//! Coverage-guided fuzzing of the iSCSI PDU reader (`iscsi::pdu::read_pdu`), with and
//! without header and data digests (the first byte picks). Checked: no panic; the
//! data segment is within the bound; and a PDU read back from its own encoding is the
//! same PDU.
#![no_main]

use iscsi::pdu::read_pdu;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (hd, dd) = (mode & 1 != 0, mode & 2 != 0);
    let mut input = rest;
    while let Ok(mut p) = read_pdu(&mut input, hd, dd, 8192) {
        assert!(p.data.len() <= 8192);
        let mut wire = Vec::new();
        p.write_to(&mut wire, hd, dd).expect("writing to memory");
        let back = read_pdu(&mut &wire[..], hd, dd, 8192).expect("its own encoding reads");
        assert_eq!(back.bhs, p.bhs);
        assert_eq!(back.data, p.data);
    }
});
