//! Coverage-guided fuzzing of login text: `iscsi::text::parse`, every key through the
//! operational negotiation (`iscsi::params::negotiate`), and CHAP value decoding.
//! Checked: no panic; parsed pairs encode and parse back the same; negotiated values
//! stay within this target's limits.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The checks live in `iscsi::fuzzing`, where CI replays the corpus through them too.
fuzz_target!(|data: &[u8]| iscsi::fuzzing::login_keys(data));
