//! Coverage-guided fuzzing of login text: `iscsi::text::parse`, every key through the
//! operational negotiation (`iscsi::params::negotiate`), and CHAP value decoding.
//! Checked: no panic; parsed pairs encode and parse back the same; negotiated values
//! stay within this target's limits.
#![no_main]

use iscsi::params::{self, SessionParams, MAX_BURST, MAX_OUTSTANDING_R2T};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(pairs) = iscsi::text::parse(data) else {
        return;
    };
    assert_eq!(iscsi::text::parse(&iscsi::text::encode(&pairs)).unwrap(), pairs);
    let mut p = SessionParams::default();
    for (k, v) in &pairs {
        let _ = params::negotiate(&mut p, k, v);
        let _ = iscsi::chap::decode(v);
    }
    params::settle(&mut p);
    assert!(p.max_burst <= MAX_BURST.max(262_144));
    assert!(p.first_burst <= p.max_burst);
    assert!(p.max_outstanding_r2t <= MAX_OUTSTANDING_R2T.max(1));
});
