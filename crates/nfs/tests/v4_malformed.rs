//! Malformed NFSv4.1 input at the protocol level: truncated and over-long COMPOUNDs,
//! illegal operations, attributes that may not be read, and random COMPOUNDs
//! (deterministic, 2,000 each or `SHOAL_V4_FUZZ_CASES`), each answered with its error.

use nfs::rpc::{self};
use nfs::v4::client::{
    self, attr, decode_reply, Compound, FILE_SYNC4, SHARE_ACCESS_BOTH, SHARE_DENY_NONE,
};
use nfs::v4::{op, Nfs4Error};
use nfs::xdr::Encoder;

mod common;
use common::harness::*;

// ---- malformed input ----

#[test]
fn a_compound_truncated_inside_an_ops_arguments_gets_badxdr_for_it_after_earlier_results() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let mut c = s.compound();
    c.putrootfh().getfh().lookup("tank");
    let record = c.record(a.next_xid(), &root_cred());
    // Cut inside "tank": the length says 4 bytes, 2 follow.
    let bytes = a.send_record(&record[..record.len() - 2]);
    let r = decode_reply(&bytes).unwrap();
    assert_eq!(
        r.statuses(),
        vec![0, 0, 0, st(Nfs4Error::BadXdr)],
        "{:?}",
        r.summary()
    );
    assert_eq!(r.results[3].op, op::LOOKUP);
    assert!(r.results[2].fh().is_some());
    // A WRITE whose data is shorter than its count.
    let dir = a.mkdir(&mut s, "d");
    let (fh, sid) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    let mut c = s.compound();
    c.putfh(&fh).write(&sid, 0, FILE_SYNC4, &[1; 64]);
    let record = c.record(a.next_xid(), &root_cred());
    let r = decode_reply(&a.send_record(&record[..record.len() - 32])).unwrap();
    assert_eq!(r.statuses(), vec![0, 0, st(Nfs4Error::BadXdr)]);
    // Nothing was written.
    let r = a.on(&mut s, &fh, |c| {
        c.getattr(&[attr::SIZE]);
    });
    assert_eq!(r.last().unwrap().attrs().unwrap().size, Some(0));
}

#[test]
fn a_compound_declaring_1000_ops_gets_too_many_ops_with_one_result() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let mut c = s.compound();
    c.putrootfh().getfh().declare_ops(1000);
    let r = a.call(&c);
    assert_eq!(r.statuses(), vec![st(Nfs4Error::TooManyOps)]);
    assert_eq!(r.status, st(Nfs4Error::TooManyOps));
    // Without a session too.
    let mut c = Compound::new("");
    c.putrootfh().declare_ops(1000);
    assert_eq!(a.call(&c).statuses(), vec![st(Nfs4Error::TooManyOps)]);
    // Past the session's own bound (ChannelAttrs::fore asks for 16), SEQUENCE refuses.
    let mut c = s.compound();
    for _ in 0..16 {
        c.putrootfh();
    }
    assert_eq!(a.call(&c).statuses(), vec![st(Nfs4Error::TooManyOps)]);
}

#[test]
fn an_unknown_operation_number_gets_op_illegal_with_resop_illegal() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    for bad in [0, 1, 2, 9999, op::ILLEGAL] {
        let mut c = s.compound();
        c.putrootfh().raw_op(bad, &[0; 8]).getfh();
        let r = a.call(&c);
        assert_eq!(failed_with(&r), st(Nfs4Error::OpIllegal), "op {bad}");
        assert_eq!(r.results.len(), 3);
        assert_eq!(r.last().unwrap().op, op::ILLEGAL, "op {bad}");
    }
    // Without a session, an illegal first op is still illegal.
    let mut c = Compound::new("");
    c.raw_op(12345, &[]);
    let r = a.call(&c);
    assert_eq!(r.statuses(), vec![st(Nfs4Error::OpIllegal)]);
    assert_eq!(r.results[0].op, op::ILLEGAL);
}

#[test]
fn getattr_of_a_set_only_attribute_gets_inval() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let root = a.share_root(&mut s);
    for bit in [attr::TIME_ACCESS_SET, attr::TIME_MODIFY_SET] {
        let r = a.on(&mut s, &root, |c| {
            c.getattr(&[attr::SIZE, bit]);
        });
        assert_eq!(failed_with(&r), st(Nfs4Error::Inval), "attribute {bit}");
    }
}

#[test]
fn a_failed_setattr_still_carries_its_attrsset_bitmap() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let root = a.share_root(&mut s);
    // Arguments cut short: BADXDR, and an empty bitmap after it.
    let mut c = s.compound();
    c.putfh(&root).raw_op(op::SETATTR, &[0, 0, 0, 1]);
    let bytes = a.send_record(&c.record(a.next_xid(), &root_cred()));
    let r = decode_reply(&bytes).expect("SETATTR4res with its bitmap");
    assert_eq!(r.statuses(), vec![0, 0, st(Nfs4Error::BadXdr)]);
    assert_eq!(r.last().unwrap().res, client::Res::Setattr(vec![]));
}

/// How many random COMPOUNDs each fuzz test sends: 2,000, or `SHOAL_V4_FUZZ_CASES`.
fn fuzz_cases() -> u32 {
    std::env::var("SHOAL_V4_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000)
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// XDR-ish words: mostly small numbers (lengths, enums, booleans), some random.
    fn words(&mut self, n: usize, e: &mut Encoder) {
        for _ in 0..n {
            match self.below(4) {
                0 | 1 => e.u32(self.below(5) as u32),
                2 => e.u32(self.below(64) as u32),
                _ => e.u32(self.next() as u32),
            };
        }
    }
}

#[test]
fn random_bytes_after_a_valid_compound_header_always_get_a_reply_with_the_calls_xid() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "fuzz");
    let (file, open) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    assert_ok(&a.on(&mut s, &file, |c| {
        c.write(&open, 0, FILE_SYNC4, &[3; 300]);
    }));
    let handles = [dir.clone(), file.clone(), a.share_root(&mut s)];
    let mut rng = Rng(0x0005_eed0_fa11);
    let mut decoded = 0;
    for case in 0..fuzz_cases() {
        let xid = 0x7000_0000 + case;
        let mut e = rpc::encode_call(xid, nfs::proto::NFS_PROGRAM, 4, 1, &root_cred());
        let shape = rng.below(4);
        if shape == 0 {
            // Anything at all as the COMPOUND's arguments.
            let n = rng.below(200) as usize;
            for _ in 0..n {
                e.buf.push(rng.next() as u8);
            }
        } else {
            // tag, minor version 1 or 2, an op count, then a valid SEQUENCE of the
            // session, maybe a valid PUTFH, and random operations (the SEQUENCE always
            // runs, so the slot's sequence id stays in step).
            let mut c = s.compound();
            if shape >= 2 {
                c.putfh(&handles[rng.below(3) as usize]);
            }
            let random_ops = 1 + rng.below(7) as u32;
            let declared = c.ops().len() as u32 + random_ops;
            e.opaque(b"fuzz").u32(1 + rng.below(2) as u32).u32(declared);
            e.buf.extend_from_slice(&c.args()[12..]); // past the builder's own header
            let fixed_end = e.buf.len();
            for _ in 0..random_ops {
                let opnum = match rng.below(8) {
                    0 => rng.next() as u32,
                    1 => op::OPEN,
                    2 => op::LOCK,
                    _ => 3 + rng.below(70) as u32,
                };
                e.u32(opnum);
                if shape == 3 {
                    // A stateid that exists, to get past the stateid checks.
                    e.u32(0).fixed(&open.other);
                }
                let n = rng.below(12) as usize;
                rng.words(n, &mut e);
            }
            if rng.below(4) == 0 {
                let cut = (rng.below(16) as usize).min(e.buf.len() - fixed_end);
                e.buf.truncate(e.buf.len() - cut);
            }
        }
        let reply = a.send_record(&e.buf);
        assert_eq!(client::reply_xid(&reply), Some(xid), "case {case}");
        if decode_reply(&reply).is_ok() {
            decoded += 1;
        }
    }
    assert!(decoded > 0);
    // The server still serves the session, state and all (random operations may have
    // closed, renamed or removed the fuzzed file: a new one in the share's root).
    let root = a.share_root(&mut s);
    let (fh, sid) = a.open(
        &mut s,
        &root,
        "after-fuzz",
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
        "z",
    );
    let r = a.on(&mut s, &fh, |c| {
        c.write(&sid, 0, FILE_SYNC4, b"alive").read(&sid, 0, 10);
    });
    assert_ok(&r);
    assert_eq!(r.last().unwrap().read().unwrap(), (true, &b"alive"[..]));
}

#[test]
fn every_reply_to_random_compounds_decodes_as_rfc_8881_lays_it_out() {
    // Like the test above, but every accepted reply must parse with the strict codec:
    // a server encoding a result wrong shows up here.
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "fuzz");
    let (file, open) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    let handles = [dir.clone(), file.clone(), a.share_root(&mut s)];
    let mut rng = Rng(0x00de_c0de);
    // Each way of failing: how often, and the first case that did.
    let mut failures: std::collections::BTreeMap<String, (u32, u32)> = Default::default();
    for case in 0..fuzz_cases() {
        let ops = 1 + rng.below(6) as u32;
        let mut e = rpc::encode_call(case, nfs::proto::NFS_PROGRAM, 4, 1, &root_cred());
        e.opaque(b"").u32(1 + rng.below(2) as u32).u32(ops + 2);
        let mut c = s.compound();
        c.putfh(&handles[rng.below(3) as usize]);
        e.buf.extend_from_slice(&c.args()[12..]);
        for _ in 0..ops {
            // Operations whose arguments start with a stateid get a live one.
            let opnum = 3 + rng.below(70) as u32;
            e.u32(opnum);
            if matches!(opnum, op::READ | op::WRITE | op::SETATTR | op::SEEK) {
                e.u32(0).fixed(&open.other);
            }
            let n = rng.below(10) as usize;
            rng.words(n, &mut e);
        }
        let reply = a.send_record(&e.buf);
        match decode_reply(&reply) {
            Ok(_) | Err(client::ReplyError::NotSuccess(_)) => {}
            Err(err) => failures.entry(err.to_string()).or_insert((0, case)).0 += 1,
        }
    }
    assert!(
        failures.is_empty(),
        "replies that do not decode (how many, first case):\n{failures:#?}"
    );
}
