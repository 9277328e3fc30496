//! The committed cargo-fuzz corpora of the iSCSI parsers (`fuzz/corpus/iscsi_pdu`,
//! `fuzz/corpus/iscsi_login_keys`: what the coverage-guided runs found reaching new
//! code) go through the same checks again on stable, so CI replays them on every
//! change.

#[path = "../../pool/tests/common/mod.rs"]
mod common;
use common::fuzz_corpus;

#[test]
fn the_pdu_corpus_replays_cleanly() {
    for input in fuzz_corpus("iscsi_pdu", 50) {
        iscsi::fuzzing::pdus(&input);
    }
}

#[test]
fn the_login_key_corpus_replays_cleanly() {
    for input in fuzz_corpus("iscsi_login_keys", 50) {
        iscsi::fuzzing::login_keys(&input);
    }
}
