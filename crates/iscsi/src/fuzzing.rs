//! The fuzzing checks of the iSCSI parsers, shared by the cargo-fuzz targets
//! (`fuzz/fuzz_targets/iscsi_pdu.rs`, `iscsi_login_keys.rs`, nightly) and the stable
//! test `tests/fuzz_corpus.rs`, which replays their committed corpora in CI. Each
//! takes arbitrary bytes and panics only on a finding.

use crate::params::{self, SessionParams, MAX_BURST, MAX_OUTSTANDING_R2T};
use crate::pdu::read_pdu;

/// PDUs read from `data` (its first byte picks header and data digests): every one
/// read writes back to bytes that read as the same PDU.
pub fn pdus(data: &[u8]) {
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
}

/// Login text from `data`: it re-encodes to itself, every key goes through the
/// operational negotiation and CHAP value decoding, and what is settled stays within
/// the target's bounds.
pub fn login_keys(data: &[u8]) {
    let Ok(pairs) = crate::text::parse(data) else {
        return;
    };
    assert_eq!(
        crate::text::parse(&crate::text::encode(&pairs)).unwrap(),
        pairs
    );
    let mut p = SessionParams::default();
    for (k, v) in &pairs {
        let _ = params::negotiate(&mut p, k, v);
        let _ = crate::chap::decode(v);
    }
    params::settle(&mut p);
    assert!(p.max_burst <= MAX_BURST.max(262_144));
    assert!(p.first_burst <= p.max_burst);
    assert!(p.max_outstanding_r2t <= MAX_OUTSTANDING_R2T.max(1));
}
