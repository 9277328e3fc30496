//! The fuzz target's harness (`nfs::fuzzing`) on stable, in CI: random records of every
//! shape (raw bytes, and well-formed calls to every procedure of NFSv3, MOUNT, NLM and
//! the portmapper with valid, forged or no file handles and random arguments) go through
//! the server's record path against a real filesystem. No input may panic the server
//! or draw a reply without the call's xid. `SHOAL_FUZZ_CASES=N` runs more.
//!
//! The coverage-guided version of the same harness is `fuzz/` (cargo-fuzz, nightly).

use nfs::fuzzing::Harness;
use nfs::xdr::Encoder;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::collections::BTreeSet;

fn cases() -> u32 {
    std::env::var("SHOAL_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50_000)
}

/// A fixed seed: each test owns its harness, and its inputs change the filesystem
/// (files made, renamed, removed), so a run is only repeatable from the same seed.
fn runner() -> TestRunner {
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
}

#[test]
fn random_records_get_an_answer_or_silence() {
    let h = Harness::new();
    runner()
        .run(&proptest::collection::vec(any::<u8>(), 0..300), |input| {
            h.run(&input);
            Ok(())
        })
        .unwrap();
}

/// One argument field of an NFSv3 procedure (RFC 1813), in the order the procedure
/// takes them.
#[derive(Debug, Clone, Copy)]
enum Field {
    Handle,
    Name,
    /// A name to remove or rename away: never the harness's own f, d and s, whose
    /// handles the other calls need.
    Victim,
    Sattr,
    Guard,
    Offset,
    Count,
    Stable,
    Data,
    Path,
    Verifier,
    CreateHow,
    NodeType,
}

fn template(procedure: u32) -> Vec<Field> {
    use Field::*;
    match procedure {
        2 => vec![Handle, Sattr, Guard],
        3 => vec![Handle, Name],
        12 | 13 => vec![Handle, Victim],
        4 => vec![Handle, Count],
        6 => vec![Handle, Offset, Count],
        7 => vec![Handle, Offset, Count, Stable, Data],
        8 => vec![Handle, Name, CreateHow],
        9 => vec![Handle, Name, Sattr],
        10 => vec![Handle, Name, Sattr, Path],
        11 => vec![Handle, Name, NodeType],
        14 => vec![Handle, Victim, Handle, Name],
        15 => vec![Handle, Handle, Name],
        16 => vec![Handle, Offset, Verifier, Count],
        17 => vec![Handle, Offset, Verifier, Count, Count],
        21 => vec![Handle, Offset, Count],
        _ => vec![Handle],
    }
}

/// Draws every field from a few values, most of them valid, some at the edges, so the
/// calls reach the code behind the decoders.
fn encode_field(h: &Harness, f: Field, rng: &mut TestRng, e: &mut Encoder) {
    let mut pick = |choices: &[u64]| choices[rng.random_range(0..choices.len())];
    match f {
        Field::Handle => {
            let i = pick(&[0, 1, 2, 3, 4]) as usize;
            match h.handles().get(i) {
                Some(fh) => e.opaque(fh),
                None => e.opaque(&[0xee; 41]),
            };
        }
        Field::Name | Field::Victim => {
            let names = ["new", "new2", "..", ".", "", "a/b", "f", "d", "s"];
            let choices: &[u64] = match f {
                Field::Name => &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9],
                _ => &[0, 0, 1, 1, 2, 3, 4, 5, 9],
            };
            match pick(choices) as usize {
                9 => {
                    // A fresh name, so creating calls can succeed again and again.
                    let fresh = format!("n{}", rng.random_range(0..1_000_000u32));
                    e.opaque(fresh.as_bytes())
                }
                i => e.opaque(names[i].as_bytes()),
            };
        }
        Field::Sattr => {
            let mode = pick(&[0, 1, 1]);
            e.u32(mode as u32);
            if mode == 1 {
                e.u32(pick(&[0o644, 0o755, 0o7777, 0xffff_ffff]) as u32);
            }
            for _ in 0..2 {
                let set = pick(&[0, 0, 1]);
                e.u32(set as u32);
                if set == 1 {
                    e.u32(pick(&[0, 1000, 65534, 0xffff_ffff]) as u32);
                }
            }
            let set = pick(&[0, 0, 1]);
            e.u32(set as u32);
            if set == 1 {
                e.u64(pick(&[0, 1, 100_000, 1 << 40, u64::MAX]));
            }
            for _ in 0..2 {
                let how = pick(&[0, 0, 1, 2, 3]);
                e.u32(how as u32);
                if how == 2 {
                    e.u32(pick(&[0, 1, 0xffff_ffff]) as u32).u32(pick(&[
                        0,
                        999_999_999,
                        1_000_000_000,
                    ]) as u32);
                }
            }
        }
        Field::Guard => {
            e.u32(pick(&[0, 0, 1]) as u32);
        }
        Field::Offset => {
            e.u64(pick(&[0, 0, 1, 4096, 8192, 1 << 40, u64::MAX - 1]));
        }
        Field::Count => {
            e.u32(pick(&[0, 1, 512, 4096, 8192, 65536, 1 << 20, 0xffff_ffff]) as u32);
        }
        Field::Stable => {
            e.u32(pick(&[0, 1, 2, 3]) as u32);
        }
        Field::Data => {
            let len = pick(&[0, 1, 7, 4096, 8192]) as usize;
            e.opaque(&vec![0xa5; len]);
        }
        Field::Path => {
            e.opaque(
                pick(&[0, 1, 2])
                    .to_string()
                    .repeat(pick(&[1, 4095, 4097]) as usize)
                    .as_bytes(),
            );
        }
        Field::Verifier => {
            e.u64(pick(&[0, 0, 1]));
        }
        Field::CreateHow => {
            let how = pick(&[0, 1, 2, 3]);
            e.u32(how as u32);
            if how == 2 {
                e.u64(pick(&[1, 2]));
            } else {
                encode_field(h, Field::Sattr, rng, e);
            }
        }
        Field::NodeType => {
            let t = pick(&[1, 2, 3, 4, 5, 6, 7, 8]);
            e.u32(t as u32);
            if matches!(t, 3 | 4 | 6 | 7) {
                encode_field(h, Field::Sattr, rng, e);
            }
            if matches!(t, 3 | 4) {
                e.u32(1).u32(3);
            }
        }
    }
}

/// Well-formed calls to every NFSv3 procedure, a quarter of them then damaged
/// (truncated, a word inserted, or a byte flipped). Checks that the inputs really reach
/// the procedures: every one but NULL (which has no status) must succeed for some
/// input, or the harness only exercises the decoders.
#[test]
fn structured_calls_reach_every_procedure() {
    let h = Harness::new();
    let mut succeeded = BTreeSet::new();
    let mut rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    for _ in 0..cases() {
        let procedure = rng.random_range(0..22u32);
        let mut args = Encoder::new();
        for f in template(procedure) {
            encode_field(&h, f, &mut rng, &mut args);
        }
        let mut args = args.buf;
        match rng.random_range(0..12) {
            0 => args.truncate(rng.random_range(0..=args.len())),
            1 => {
                let at = rng.random_range(0..=args.len() / 4) * 4;
                let w: u32 = rng.random();
                args.splice(at..at, w.to_be_bytes());
            }
            2 if !args.is_empty() => {
                let at = rng.random_range(0..args.len());
                args[at] ^= 1 << rng.random_range(0..8);
            }
            _ => {}
        }
        // Shape 1: a well-formed NFSv3 call from root whose arguments we wrote.
        let mut input = vec![1u8];
        input.extend_from_slice(&procedure.to_be_bytes());
        input.extend_from_slice(&args);
        let reply = h.run(&input).expect("NFS calls get replies");
        // Accepted with SUCCESS, then nfsstat3 NFS3_OK.
        if reply.len() >= 28 && reply[20..28] == [0; 8] {
            succeeded.insert(procedure);
        }
    }
    println!("procedures that succeeded on some input: {succeeded:?}");
    let missing: Vec<u32> = (1..22).filter(|p| !succeeded.contains(p)).collect();
    assert!(
        missing.is_empty(),
        "procedures {missing:?} never succeeded: inputs stop in the decoders"
    );
}

/// Every input of the committed cargo-fuzz corpus (`fuzz/corpus/rpc_records`, what the
/// coverage-guided runs found reaching new code) goes through the harness again, so CI
/// replays them on every change.
#[test]
fn the_committed_fuzz_corpus_replays_cleanly() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/rpc_records");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    inputs.sort();
    assert!(
        inputs.len() >= 100,
        "the corpus is in the repo ({} inputs)",
        inputs.len()
    );
    let h = Harness::new();
    for path in &inputs {
        h.run(&std::fs::read(path).unwrap());
    }
}

/// The NFSv4 shape really reaches COMPOUNDs on a live session: SEQUENCE and PUTFH
/// succeed and the operation the input picked runs (GETATTR here).
#[test]
fn the_v4_shape_runs_compounds_in_a_session() {
    use nfs::v4::client::decode_reply;
    let h = Harness::new();
    for i in 0..3u32 {
        let mut input = vec![0x82u8];
        // pick: GETATTR ((9 - 3) << 2), minor 1, no cachethis, xid in the high bits.
        let pick = ((9 - 3) << 2) | (i << 20);
        input.extend_from_slice(&pick.to_be_bytes());
        let mut args = Encoder::new();
        args.u32(1).u32(0x1a); // a bitmap: type, change, size
        input.extend_from_slice(&args.buf);
        let reply = h.run(&input).expect("a reply");
        let r = decode_reply(&reply).expect("a COMPOUND reply");
        let statuses: Vec<u32> = r.results.iter().map(|o| o.status).collect();
        assert_eq!(&statuses[..3], &[0, 0, 0], "{:?}", r.summary());
    }
}
