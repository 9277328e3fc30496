//! What another NFSv4 host or user may not do: take over a client's record, get state
//! from a host no export admits, give a file to another owner, pass the session's
//! reply bounds, or run operations outside a session.

use nfs::v4::client::{
    attr, ChannelAttrs, Compound, SetAttrs, Stateid, SHARE_ACCESS_BOTH, SHARE_DENY_NONE, UNSTABLE4,
};
use nfs::v4::{op, Nfs4Error};
use nfs::xdr::Encoder;

mod common;
use common::harness::*;
use common::DATASET;

// ---- what another host or user may not do ----

/// An EXCLUSIVE4_1 create sets what the client asks with the caller's credentials:
/// uid 1000 cannot make a file owned by root that way (the verifier alone is written
/// as root).
#[test]
fn an_exclusive_create_cannot_give_a_file_to_another_owner() {
    let srv = Server::new();
    let root = srv.client_a();
    let mut sr = root.session("client-a");
    let d = root.mkdir(&mut sr, "d");
    let r = root.on(&mut sr, &d, |c| {
        c.setattr(&Stateid::ANONYMOUS, &SetAttrs::mode(0o777));
    });
    assert_ok(&r);
    let user = srv.client_b().with_user(1000);
    let mut s = user.session("client-b");
    let clientid = s.clientid;
    let mut e = Encoder::new();
    e.u32(0)
        .u32(SHARE_ACCESS_BOTH)
        .u32(SHARE_DENY_NONE)
        .u64(clientid)
        .opaque(b"o");
    e.u32(1).u32(3).fixed(b"exclverf"); // OPEN4_CREATE, EXCLUSIVE4_1
    let mut vals = Encoder::new();
    vals.opaque(b"0"); // owner: root
    e.u32(2).u32(0).u32(1 << (36 - 32)).opaque(&vals.buf); // fattr4 {owner}
    e.u32(0).opaque(b"mine"); // CLAIM_NULL
    let r = user.on(&mut s, &d, |c| {
        c.raw_op(op::OPEN, &e.buf);
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::Perm), "{:?}", r.summary());
    let r = root.on(&mut sr, &d, |c| {
        c.lookup("mine").getattr(&[attr::OWNER]);
    });
    assert_ok(&r);
    let owner = r.last().unwrap().attrs().unwrap().owner.clone().unwrap();
    assert_eq!(owner, b"1000", "the file stays its creator's");
}

/// A client's record answers only to the host that made it: another host cannot
/// open a session on it, destroy it, or take over its owner name while its lease
/// runs. Client IDs are not guessable from one's own.
#[test]
fn another_host_cannot_take_over_a_clients_record() {
    let srv = Server::new();
    let a = srv.client_a();
    let sa = a.session("client-a");
    let other = Client::new(&srv, "127.0.0.9:900");
    let mut c = Compound::new("steal");
    c.create_session(sa.clientid, 2, &ChannelAttrs::fore(), &ChannelAttrs::back());
    assert_eq!(failed_with(&other.call(&c)), st(Nfs4Error::ClidInUse));
    let mut c = Compound::new("steal");
    c.destroy_clientid(sa.clientid);
    assert_eq!(failed_with(&other.call(&c)), st(Nfs4Error::StaleClientId));
    let mut c = Compound::new("steal");
    c.destroy_session(&sa.sessionid);
    assert_eq!(failed_with(&other.call(&c)), st(Nfs4Error::BadSession));
    let mut c = Compound::new("steal");
    c.exchange_id(b"newverif", b"client-a", 0);
    assert_eq!(failed_with(&other.call(&c)), st(Nfs4Error::ClidInUse));
    // A's own record still works.
    let mut sa = sa;
    let mut c = sa.compound();
    c.putrootfh();
    a.ok(&c);
    // Two clients' IDs share no counter a third could step through.
    let b = srv.client_b();
    let sb = b.session("client-b");
    assert!(
        sa.clientid.abs_diff(sb.clientid) > 1 << 20,
        "{:x} {:x}",
        sa.clientid,
        sb.clientid
    );
}

/// A host no export admits gets no client state at all.
#[test]
fn a_host_no_export_admits_gets_no_client_id() {
    let srv = Server::new();
    srv.service.remove_share(DATASET);
    srv.share("tank/only-b", "127.0.0.2(rw)");
    let a = srv.client_a();
    let mut c = Compound::new("exchange");
    c.exchange_id(b"verifier", b"client-a", 0);
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::Perm));
    let b = srv.client_b();
    b.session("client-b");
}

/// Replies keep to the session's ca_maxresponsesize: the READ that would pass it
/// answers REP_TOO_BIG, after the ones that fit.
#[test]
fn a_reply_larger_than_the_session_allows_is_refused_at_the_operation_that_passes_it() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let d = a.mkdir(&mut s, "d");
    let (fh, sid) = a.open(&mut s, &d, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    let big = vec![7u8; 1 << 20];
    let r = a.on(&mut s, &fh, |c| {
        c.write(&sid, 0, UNSTABLE4, &big);
    });
    assert_ok(&r);
    // The fore channel allows 1 MiB + 4 KiB of reply: one 1 MiB READ fits, two do not.
    let r = a.on(&mut s, &fh, |c| {
        c.read(&sid, 0, 1 << 20).read(&sid, 0, 1 << 20);
    });
    let statuses = r.statuses();
    assert_eq!(
        statuses,
        [0, 0, 0, st(Nfs4Error::RepTooBig)],
        "{:?}",
        r.summary()
    );
}

/// DESTROY_SESSION may end a COMPOUND of its session, but not open one: what came
/// after it would run outside any session.
#[test]
fn destroy_session_cannot_open_a_compound_of_other_operations() {
    let srv = Server::new();
    let a = srv.client_a();
    let s = a.session("client-a");
    let mut c = Compound::new("sneak");
    c.destroy_session(&s.sessionid).putrootfh();
    let r = a.call(&c);
    assert_eq!(r.results.len(), 1);
    assert_eq!(r.results[0].status, st(Nfs4Error::NotOnlyOp));
}
