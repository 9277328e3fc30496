//! NFSv4.1 recovery at the protocol level: the grace period after a restart.

use nfs::v4::client::{
    Claim, Compound, OpenHow, Stateid, SHARE_ACCESS_BOTH, SHARE_ACCESS_READ, SHARE_DENY_NONE,
    WRITE_LT,
};
use nfs::v4::{op, Nfs4Error};

mod common;
use common::harness::*;

// ---- recovery ----

/// OPEN of the current file handle with CLAIM_PREVIOUS (a reclaim after a restart).
fn open_previous(c: &mut Compound, clientid: u64, owner: &[u8]) {
    c.open(
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
        clientid,
        owner,
        &OpenHow::NoCreate,
        &Claim::Previous,
    );
}

/// LOCK with `reclaim` set, for a new lock owner of the open `open`.
fn lock_reclaim(
    c: &mut Compound,
    open: &Stateid,
    clientid: u64,
    owner: &[u8],
    offset: u64,
    length: u64,
) {
    c.lock_reclaim(WRITE_LT, offset, length, open, clientid, owner);
}

/// After a restart, the clients of the client list reclaim their opens and locks in
/// the grace period; meanwhile nobody gets new state (GRACE) and a client that was
/// not on the list cannot reclaim (NO_GRACE). When the last listed client has sent
/// RECLAIM_COMPLETE, the grace period is over, and what was reclaimed still excludes
/// others. Without the list (the negative control) the reclaim is refused.
#[test]
fn after_a_restart_listed_clients_reclaim_in_the_grace_period_and_new_state_waits() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("nfs4-clients");
    let mut srv = Server::new();
    srv.service.enable_v4_recovery(list.clone()).unwrap();
    let fh = {
        let a = srv.client_a();
        let mut s = a.session("client-a");
        let d = a.mkdir(&mut s, "d");
        let (fh, open) = a.open(&mut s, &d, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "oa");
        let clientid = s.clientid;
        let r = a.on(&mut s, &fh, |c| {
            c.lock_new(WRITE_LT, 0, 100, &open, clientid, b"la");
        });
        assert_ok(&r);
        fh
    };
    srv.restart(&list);
    let (a, b) = (srv.client_a(), srv.client_b());
    let mut sa = a.session_to_reclaim("client-a");
    let mut sb = b.session("client-b");
    let idb = sb.clientid;
    // B is new: in the grace period it may neither open nor lock.
    let r = b.on(&mut sb, &fh, |c| {
        c.open(
            SHARE_ACCESS_READ,
            SHARE_DENY_NONE,
            idb,
            b"ob",
            &OpenHow::NoCreate,
            &Claim::Fh,
        );
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::Grace));
    // Nor may it reclaim: it held nothing before.
    let r = b.on(&mut sb, &fh, |c| open_previous(c, idb, b"ob"));
    assert_eq!(failed_with(&r), st(Nfs4Error::NoGrace));
    // A reclaims its open and its lock, then says it is done.
    let clientid = sa.clientid;
    let r = a.on(&mut sa, &fh, |c| open_previous(c, clientid, b"oa"));
    assert_ok(&r);
    let open = r.find(op::OPEN).unwrap().stateid().unwrap();
    let r = a.on(&mut sa, &fh, |c| {
        lock_reclaim(c, &open, clientid, b"la", 0, 100)
    });
    assert_ok(&r);
    let mut c = sa.compound();
    c.reclaim_complete(false);
    a.ok(&c);
    // The grace period is over: B opens, and A's reclaimed lock stops B's.
    let r = b.on(&mut sb, &fh, |c| {
        c.open(
            SHARE_ACCESS_BOTH,
            SHARE_DENY_NONE,
            idb,
            b"ob",
            &OpenHow::NoCreate,
            &Claim::Fh,
        );
    });
    assert_ok(&r);
    let open_b = r.find(op::OPEN).unwrap().stateid().unwrap();
    let r = b.on(&mut sb, &fh, |c| {
        c.lock_new(WRITE_LT, 50, 10, &open_b, idb, b"lb");
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::Denied));
    // Too late now for anyone to reclaim.
    let r = a.on(&mut sa, &fh, |c| open_previous(c, clientid, b"oa"));
    assert_eq!(failed_with(&r), st(Nfs4Error::NoGrace));

    // The negative control: a restart without the list has no grace period, so A's
    // reclaim is refused and B's new open is not held back.
    let mut srv = Server::new();
    let fh = {
        let a = srv.client_a();
        let mut s = a.session("client-a");
        let d = a.mkdir(&mut s, "d");
        a.open(&mut s, &d, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "oa")
            .0
    };
    let empty = dir.path().join("no-such-list");
    srv.restart(&empty);
    let a = srv.client_a();
    let mut sa = a.session_to_reclaim("client-a");
    let clientid = sa.clientid;
    let r = a.on(&mut sa, &fh, |c| open_previous(c, clientid, b"oa"));
    assert_eq!(failed_with(&r), st(Nfs4Error::NoGrace));
}

/// A client that held a delegation before the restart names it in its CLAIM_PREVIOUS
/// open and gets it again, so what it cached under it (locks included) stays
/// covered; without a back channel to call it on (as in this harness) it comes
/// recalled, telling the client to write back and return it, and DELEGRETURN of
/// its stateid is accepted. A reclaim that names none gets none.
#[test]
fn a_delegation_named_in_a_reclaim_is_given_again() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("nfs4-clients");
    let mut srv = Server::new();
    srv.service.enable_v4_recovery(list.clone()).unwrap();
    let (f, g) = {
        let a = srv.client_a();
        let mut s = a.session("client-a");
        let d = a.mkdir(&mut s, "d");
        let f = a
            .open(&mut s, &d, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "oa")
            .0;
        let g = a
            .open(&mut s, &d, "g", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "oa")
            .0;
        (f, g)
    };
    srv.restart(&list);
    let a = srv.client_a();
    let mut sa = a.session_to_reclaim("client-a");
    let clientid = sa.clientid;
    let r = a.on(&mut sa, &f, |c| {
        c.open(
            SHARE_ACCESS_BOTH,
            SHARE_DENY_NONE,
            clientid,
            b"oa",
            &OpenHow::NoCreate,
            &Claim::PreviousDelegated(2),
        );
    });
    assert_ok(&r);
    let o = r.find(op::OPEN).unwrap().open().unwrap().clone();
    assert_eq!(o.delegation, 2, "the write delegation again");
    assert!(o.delegation_recalled, "no back channel: it comes recalled");
    let deleg = o.delegation_stateid.unwrap();
    let r = a.on(&mut sa, &f, |c| {
        c.delegreturn(&deleg);
    });
    assert_ok(&r);
    let r = a.on(&mut sa, &g, |c| open_previous(c, clientid, b"oa"));
    assert_ok(&r);
    assert_eq!(r.find(op::OPEN).unwrap().open().unwrap().delegation, 0);
}
