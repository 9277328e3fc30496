//! RFC 8881 rules other clients than Linux rely on, one test a rule: the EXCHANGE_ID
//! case table (section 18.35.5) as a table, undefined flag bits, which session
//! operations may follow SEQUENCE, LOOKUPP from a symbolic link, SECINFO_NO_NAME
//! for the parent of the root, and what may come before RECLAIM_COMPLETE.

use nfs::v4::client::{
    ChannelAttrs, Claim, Compound, OpenHow, SetAttrs, SHARE_ACCESS_BOTH, SHARE_DENY_NONE, WRITE_LT,
};
use nfs::v4::{op, Nfs4Error};

mod common;
use common::harness::*;

const UPDATE: u32 = 0x4000_0000; // EXCHGID4_FLAG_UPD_CONFIRMED_REC_A
const CONFIRMED_R: u32 = 0x8000_0000;

/// EXCHANGE_ID as `owner` with `verifier` and `flags`: the status and, on success,
/// (client ID, CONFIRMED_R set).
fn exchange(
    cl: &Client<'_>,
    owner: &str,
    verifier: &[u8; 8],
    flags: u32,
) -> (u32, Option<(u64, bool)>) {
    let mut c = Compound::new("x");
    c.exchange_id(verifier, owner.as_bytes(), flags);
    let r = cl.call(&c);
    let got = r.results[0]
        .exchange_id()
        .map(|x| (x.clientid, x.flags & CONFIRMED_R != 0));
    (r.status, got)
}

/// CREATE_SESSION for a client ID just exchanged (sequence 1): the status.
fn confirm(cl: &Client<'_>, clientid: u64) -> u32 {
    let mut c = Compound::new("cs");
    c.create_session(clientid, 1, &ChannelAttrs::fore(), &ChannelAttrs::back());
    cl.call(&c).status
}

/// The records a case starts from.
#[derive(Debug, Clone, Copy)]
enum Before {
    Nothing,
    /// A confirmed record of the owner (verifier "v1", client A's address).
    Confirmed,
    /// Only an unconfirmed record (verifier "v1", client A's address).
    Unconfirmed,
}

#[test]
fn exchange_id_follows_the_case_table_of_section_18_35_5() {
    // (case, records before, from client B's address, verifier, update flag,
    //  expected status, expected: the same client ID as the record before,
    //  CONFIRMED_R)
    #[allow(clippy::type_complexity)]
    let table: &[(
        &str,
        Before,
        bool,
        &[u8; 8],
        bool,
        u32,
        Option<(bool, bool)>,
    )] = &[
        (
            "1 new",
            Before::Nothing,
            false,
            b"v1------",
            false,
            0,
            Some((false, false)),
        ),
        (
            "2 same again",
            Before::Confirmed,
            false,
            b"v1------",
            false,
            0,
            Some((true, true)),
        ),
        (
            "3 another principal",
            Before::Confirmed,
            true,
            b"v1------",
            false,
            st(Nfs4Error::ClidInUse),
            None,
        ),
        (
            "4 unconfirmed replaced",
            Before::Unconfirmed,
            false,
            b"v1------",
            false,
            0,
            Some((false, false)),
        ),
        (
            "5 restarted",
            Before::Confirmed,
            false,
            b"v2------",
            false,
            0,
            Some((false, false)),
        ),
        (
            "6 update",
            Before::Confirmed,
            false,
            b"v1------",
            true,
            0,
            Some((true, true)),
        ),
        (
            "6 update, other verifier",
            Before::Confirmed,
            false,
            b"v2------",
            true,
            st(Nfs4Error::NotSame),
            None,
        ),
        (
            "7 update of nothing",
            Before::Nothing,
            false,
            b"v1------",
            true,
            st(Nfs4Error::NoEnt),
            None,
        ),
        (
            "7 update of unconfirmed",
            Before::Unconfirmed,
            false,
            b"v1------",
            true,
            st(Nfs4Error::NoEnt),
            None,
        ),
        (
            "8 update by another principal",
            Before::Confirmed,
            true,
            b"v1------",
            true,
            st(Nfs4Error::Perm),
            None,
        ),
    ];
    for &(case, before, from_b, verifier, update, want, same) in table {
        let srv = Server::new();
        let (a, b) = (srv.client_a(), srv.client_b());
        let prior = match before {
            Before::Nothing => None,
            Before::Unconfirmed | Before::Confirmed => {
                let (s, got) = exchange(&a, "owner", b"v1------", 0);
                assert_eq!(s, 0, "{case}: setting up");
                let (id, _) = got.unwrap();
                if let Before::Confirmed = before {
                    assert_eq!(confirm(&a, id), 0, "{case}: confirming");
                }
                Some(id)
            }
        };
        let cl = if from_b { &b } else { &a };
        let (status, got) = exchange(cl, "owner", verifier, if update { UPDATE } else { 0 });
        assert_eq!(status, want, "case {case}");
        match (same, got) {
            (Some((same_id, confirmed_r)), Some((id, flag))) => {
                assert_eq!(
                    Some(id) == prior,
                    same_id,
                    "case {case}: client ID kept or new"
                );
                assert_eq!(flag, confirmed_r, "case {case}: CONFIRMED_R");
            }
            (None, None) => {}
            other => panic!("case {case}: {other:?}"),
        }
        // 5: the restarted client's new record replaces the old one when confirmed.
        if case.starts_with('5') {
            let (id, _) = got.unwrap();
            assert_eq!(confirm(&a, id), 0);
            let (_, again) = exchange(&a, "owner", b"v1------", 0);
            assert_ne!(again.unwrap().0, prior.unwrap(), "the old record is gone");
        }
    }
}

#[test]
fn undefined_flag_bits_are_invalid() {
    let srv = Server::new();
    let a = srv.client_a();
    for flags in [0x8, 0x1000, 0x2000_0000, CONFIRMED_R] {
        let (status, _) = exchange(&a, "owner", b"v1------", flags);
        assert_eq!(status, st(Nfs4Error::Inval), "eia_flags {flags:#x}");
    }
    let (_, got) = exchange(&a, "owner", b"v1------", 0x1 | 0x4);
    let (id, _) = got.expect("defined flags are fine");
    let mut c = Compound::new("cs");
    c.create_session_with_flags(id, 1, 0x8, &ChannelAttrs::fore(), &ChannelAttrs::back());
    assert_eq!(a.call(&c).status, st(Nfs4Error::Inval), "csa_flags 0x8");
    assert_eq!(confirm(&a, id), 0);
}

#[test]
fn session_operations_may_follow_sequence_but_bind_conn_to_session_stands_alone() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("owner");
    // EXCHANGE_ID after SEQUENCE: allowed (its own record again).
    let mut c = s.compound();
    c.exchange_id(b"verifier", b"owner", 0);
    let r = a.ok(&c);
    assert_eq!(r.results[1].exchange_id().unwrap().clientid, s.clientid);
    // CREATE_SESSION after SEQUENCE, for another client ID.
    let mut x = Compound::new("x");
    x.exchange_id(b"verifier", b"second", 0);
    let id2 = a.ok(&x).results[0].exchange_id().unwrap().clientid;
    let mut c = s.compound();
    c.create_session(id2, 1, &ChannelAttrs::fore(), &ChannelAttrs::back());
    a.ok(&c);
    // DESTROY_CLIENTID after SEQUENCE: allowed (busy: it has a session).
    let mut c = s.compound();
    c.destroy_clientid(id2);
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::ClientIdBusy));
    // Without SEQUENCE, each must be alone.
    let mut c = Compound::new("two");
    c.exchange_id(b"verifier", b"owner", 0).putrootfh();
    assert_eq!(a.call(&c).results[0].status, st(Nfs4Error::NotOnlyOp));
    // BIND_CONN_TO_SESSION is alone even after SEQUENCE.
    let mut c = s.compound();
    c.raw_op(op::BIND_CONN_TO_SESSION, &{
        let mut e = nfs::xdr::Encoder::new();
        e.fixed(&s.sessionid).u32(1).bool(false);
        e.buf
    });
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::NotOnlyOp));
}

#[test]
fn lookupp_of_a_symlink_is_symlink_and_secinfo_no_name_of_the_root_s_parent_is_noent() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("owner");
    let root = a.share_root(&mut s);
    let mut c = s.compound();
    c.putfh(&root)
        .symlink("l", "target", &SetAttrs::mode(0o777))
        .getfh();
    let link = a.ok(&c).last().unwrap().fh().unwrap().to_vec();
    let mut c = s.compound();
    c.putfh(&link).lookupp();
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::Symlink));
    // The parent of the pseudo root is nothing.
    let mut c = s.compound();
    c.putrootfh().secinfo_no_name(true);
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::NoEnt));
    // The parent of a share's root is a pseudo directory: fine.
    let mut c = s.compound();
    c.putfh(&root).secinfo_no_name(true);
    a.ok(&c);
    let mut c = s.compound();
    c.putrootfh().secinfo_no_name(false);
    a.ok(&c);
}

/// Section 18.51.3: a new client ID takes no new locking state before its
/// RECLAIM_COMPLETE (OPEN and LOCK answer GRACE, grace period or not); after it,
/// no reclaim (NO_GRACE) and no second RECLAIM_COMPLETE (COMPLETE_ALREADY).
#[test]
fn nothing_is_locked_before_reclaim_complete_and_nothing_reclaimed_after_it() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session_to_reclaim("client-a");
    let root = a.share_root(&mut s);
    // Not locking state: a directory is made and looked at.
    let mut c = s.compound();
    c.putfh(&root).mkdir("d", &SetAttrs::mode(0o755)).getfh();
    let dir = a.ok(&c).last().unwrap().fh().unwrap().to_vec();
    let mut c = s.compound();
    c.putfh(&dir).open(
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
        s.clientid,
        b"o",
        &OpenHow::Unchecked(SetAttrs::mode(0o644)),
        &Claim::Null("f"),
    );
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::Grace));
    let mut c = s.compound();
    c.reclaim_complete(false);
    a.ok(&c);
    let (fh, open) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    let clientid = s.clientid;
    let r = a.on(&mut s, &fh, |c| {
        c.lock_new(WRITE_LT, 0, 1, &open, clientid, b"l");
    });
    assert_ok(&r);
    let r = a.on(&mut s, &fh, |c| {
        c.open(
            SHARE_ACCESS_BOTH,
            SHARE_DENY_NONE,
            clientid,
            b"o2",
            &OpenHow::NoCreate,
            &Claim::Previous,
        );
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::NoGrace));
    let mut c = s.compound();
    c.reclaim_complete(false);
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::CompleteAlready));
}
