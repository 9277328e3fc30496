//! The committed cargo-fuzz corpora of the iSCSI parsers (`fuzz/corpus/iscsi_pdu`,
//! `fuzz/corpus/iscsi_login_keys`: what the coverage-guided runs found reaching new
//! code) go through the same checks again on stable, so CI replays them on every
//! change.

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 50,
        "the {target} corpus is in the repo ({} inputs)",
        paths.len()
    );
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

#[test]
fn the_pdu_corpus_replays_cleanly() {
    for input in corpus("iscsi_pdu") {
        iscsi::fuzzing::pdus(&input);
    }
}

#[test]
fn the_login_key_corpus_replays_cleanly() {
    for input in corpus("iscsi_login_keys") {
        iscsi::fuzzing::login_keys(&input);
    }
}
