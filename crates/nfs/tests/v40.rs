//! NFSv4.0 (RFC 7530) at the protocol level: client IDs by SETCLIENTID and
//! SETCLIENTID_CONFIRM, RENEW, COMPOUNDs without sessions, open and lock owner
//! sequence numbers (a retransmission answered from the owner's last answer, anything
//! out of order BAD_SEQID), RELEASE_LOCKOWNER, state shared with 4.1 clients, and
//! what a 4.0 client meets after a restart (STALE_CLIENTID, STALE_STATEID, reclaims
//! in the grace period).

use nfs::v4::client::{
    bitmap_has, Claim, Compound, CompoundReply, OpenHow, Res, SetAttrs, READ_LT, SHARE_ACCESS_BOTH,
    SHARE_ACCESS_READ, SHARE_ACCESS_WRITE, SHARE_DENY_NONE, WRITE_LT,
};
use nfs::v4::{op, Nfs4Error};

mod common;
use common::harness::*;

const SHARE_DENY_WRITE: u32 = 2;

fn v40(tag: &str) -> Compound {
    let mut c = Compound::new(tag);
    c.minor(0);
    c
}

/// SETCLIENTID and SETCLIENTID_CONFIRM as `owner`: the client ID.
fn set_up(cl: &Client<'_>, owner: &str) -> u64 {
    let mut c = v40("setclientid");
    c.setclientid(b"verifier", owner.as_bytes());
    let r = cl.ok(&c);
    let Res::SetClientId { clientid, confirm } = r.results[0].res.clone() else {
        panic!("no SETCLIENTID results: {:?}", r.summary());
    };
    let mut c = v40("confirm");
    c.setclientid_confirm(clientid, &confirm);
    cl.ok(&c);
    clientid
}

/// The share root's handle, by a 4.0 COMPOUND.
fn root(cl: &Client<'_>) -> Vec<u8> {
    let mut c = v40("root");
    c.putrootfh();
    for n in COMPONENTS {
        c.lookup(n);
    }
    c.getfh();
    cl.ok(&c).last().unwrap().fh().unwrap().to_vec()
}

/// OPEN (create) of `name` in `dir` by `owner` with sequence number `seq`.
#[allow(clippy::too_many_arguments)]
fn open(
    cl: &Client<'_>,
    dir: &[u8],
    clientid: u64,
    owner: &str,
    seq: u32,
    name: &str,
    access: u32,
    deny: u32,
) -> CompoundReply {
    let mut c = v40("open");
    c.putfh(dir).seq(seq).open(
        access,
        deny,
        clientid,
        owner.as_bytes(),
        &OpenHow::Unchecked(SetAttrs::mode(0o644)),
        &Claim::Null(name),
    );
    c.getfh();
    cl.call(&c)
}

#[test]
fn client_ids_are_set_up_confirmed_and_renewed_without_sessions() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut c = v40("setclientid");
    c.setclientid(b"verifier", b"linux-a");
    let r = a.ok(&c);
    let Res::SetClientId { clientid, confirm } = r.results[0].res.clone() else {
        panic!("{:?}", r.summary());
    };
    let dir = root(&a);
    // Not confirmed yet: its client ID opens nothing.
    let r = open(
        &a,
        &dir,
        clientid,
        "o",
        1,
        "f",
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
    );
    assert_eq!(failed_with(&r), st(Nfs4Error::StaleClientId));
    // Only the verifier SETCLIENTID answered confirms it, and only from its address.
    let mut c = v40("confirm");
    c.setclientid_confirm(clientid, b"wrong!!!");
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::StaleClientId));
    let mut c = v40("confirm");
    c.setclientid_confirm(clientid, &confirm);
    assert_eq!(
        failed_with(&srv.client_b().call(&c)),
        st(Nfs4Error::ClidInUse)
    );
    a.ok(&c);
    a.ok(&c); // a retransmission is fine
    let r = open(
        &a,
        &dir,
        clientid,
        "o",
        1,
        "f",
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
    );
    assert_ok(&r);
    let mut c = v40("renew");
    c.renew(clientid);
    a.ok(&c);
    let mut c = v40("renew");
    c.renew(clientid ^ 1);
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::StaleClientId));
    // The name is a's while its lease runs: b is told who uses it.
    let mut c = v40("setclientid");
    c.setclientid(b"verifier", b"linux-a");
    let r = srv.client_b().call(&c);
    assert_eq!(failed_with(&r), st(Nfs4Error::ClidInUse));
    assert!(matches!(&r.results[0].res, Res::ClientUsing { netid, .. } if netid == b"tcp"));
}

#[test]
fn minor_versions_keep_their_own_operations() {
    let srv = Server::new();
    let a = srv.client_a();
    // 4.1's operations are illegal in a 4.0 COMPOUND ...
    let mut c = v40("x");
    c.exchange_id(b"verifier", b"o", 0);
    let r = a.call(&c);
    assert_eq!(r.results[0].op, op::ILLEGAL);
    assert_eq!(failed_with(&r), st(Nfs4Error::OpIllegal));
    // ... and 4.0's are NOTSUPP in 4.1 (RFC 8881 section 18: MUST NOT implement).
    let mut s = a.session("v41");
    let mut c = s.compound();
    c.setclientid(b"verifier", b"o");
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::NotSupp));
    let mut c = s.compound();
    c.renew(s.clientid);
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::NotSupp));
    // A 4.0 COMPOUND needs no SEQUENCE to start with, and 4.0 is told only of its
    // own attributes (suppattr_exclcreat, 75, is 4.1's).
    let dir = root(&a);
    let mut c = v40("getattr");
    c.putfh(&dir).getattr(&[0]);
    let supported = a.ok(&c).last().unwrap().attrs().unwrap().supported.clone();
    assert!(!bitmap_has(&supported.unwrap(), 75));
    let mut c = s.compound();
    c.putfh(&dir).getattr(&[0]);
    let supported = a.ok(&c).last().unwrap().attrs().unwrap().supported.clone();
    assert!(bitmap_has(&supported.unwrap(), 75));
}

#[test]
fn an_open_owner_s_retransmission_is_answered_again_and_disorder_is_refused() {
    let srv = Server::new();
    let a = srv.client_a();
    let id = set_up(&a, "linux-a");
    let dir = root(&a);
    let first = open(
        &a,
        &dir,
        id,
        "o",
        7,
        "f",
        SHARE_ACCESS_READ,
        SHARE_DENY_NONE,
    );
    assert_ok(&first);
    let sid = first.find(op::OPEN).unwrap().stateid().unwrap();
    // The same request again (a retransmission): the same answer, nothing run again
    // (a second OPEN would have upgraded the open and moved its stateid on).
    let again = open(
        &a,
        &dir,
        id,
        "o",
        7,
        "f",
        SHARE_ACCESS_READ,
        SHARE_DENY_NONE,
    );
    assert_eq!(again.find(op::OPEN).unwrap(), first.find(op::OPEN).unwrap());
    assert_eq!(
        again.results.len(),
        2,
        "the COMPOUND ends at the replayed operation"
    );
    // Out of order: BAD_SEQID, and nothing moves.
    for seq in [6, 9, 0] {
        let r = open(
            &a,
            &dir,
            id,
            "o",
            seq,
            "f",
            SHARE_ACCESS_BOTH,
            SHARE_DENY_NONE,
        );
        assert_eq!(failed_with(&r), st(Nfs4Error::BadSeqId), "seqid {seq}");
    }
    // The next number runs.
    let r = open(
        &a,
        &dir,
        id,
        "o",
        8,
        "f",
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
    );
    assert_ok(&r);
    let sid2 = r.find(op::OPEN).unwrap().stateid().unwrap();
    assert_eq!(sid2.other, sid.other);
    assert!(sid2.seqid > sid.seqid, "the upgrade ran");
    // Another owner has a sequence of its own.
    assert_ok(&open(
        &a,
        &dir,
        id,
        "other",
        1,
        "g",
        SHARE_ACCESS_READ,
        SHARE_DENY_NONE,
    ));
    // CLOSE, then the CLOSE again: the same answer, though the open is gone.
    let fh = r.last().unwrap().fh().unwrap().to_vec();
    let mut c = v40("close");
    c.putfh(&fh).seq(9).close(&sid2);
    let closed = a.ok(&c);
    let again = a.call(&c);
    assert_eq!(again.results, closed.results);
    // A CLOSE of the gone open with another number: BAD_STATEID.
    let mut c = v40("close");
    c.putfh(&fh).seq(11).close(&sid2);
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::BadStateId));
}

#[test]
fn lock_owners_have_sequences_and_release_lockowner_waits_for_their_locks() {
    let srv = Server::new();
    let a = srv.client_a();
    let id = set_up(&a, "linux-a");
    let dir = root(&a);
    let r = open(
        &a,
        &dir,
        id,
        "o",
        1,
        "f",
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
    );
    let open_sid = r.find(op::OPEN).unwrap().stateid().unwrap();
    let fh = r.last().unwrap().fh().unwrap().to_vec();
    // A new lock owner: the open owner's number moves (2), the lock owner's starts
    // at the LOCK's lock_seqid (0).
    let mut c = v40("lock");
    c.putfh(&fh)
        .seq(2)
        .lock_new(WRITE_LT, 0, 10, &open_sid, id, b"lo");
    let lock_sid = a.ok(&c).last().unwrap().stateid().unwrap();
    // The open owner's number moved with the LOCK: its next one is 3.
    assert_ok(&open(
        &a,
        &dir,
        id,
        "o",
        3,
        "f",
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
    ));
    let mut c = v40("lock");
    c.putfh(&fh).seq(1).lock_existing(READ_LT, 20, 5, &lock_sid);
    let locked = a.ok(&c);
    assert_eq!(
        a.call(&c).results,
        locked.results,
        "a retransmission is answered again"
    );
    let mut c = v40("lock");
    c.putfh(&fh).seq(5).lock_existing(READ_LT, 30, 5, &lock_sid);
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::BadSeqId));
    // RELEASE_LOCKOWNER: refused while it holds locks, done once it holds none.
    let mut c = v40("release");
    c.release_lockowner(id, b"lo");
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::LocksHeld));
    let sid = locked.last().unwrap().stateid().unwrap();
    let mut c = v40("unlock");
    c.putfh(&fh).seq(2).locku(WRITE_LT, &sid, 0, u64::MAX);
    a.ok(&c);
    let mut c = v40("release");
    c.release_lockowner(id, b"lo");
    a.ok(&c);
    // Its stateid is gone with it.
    let mut c = v40("lock");
    c.putfh(&fh).seq(3).lock_existing(READ_LT, 0, 1, &sid);
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::BadStateId));
}

#[test]
fn nfs40_and_nfs41_clients_see_each_other_s_opens_and_locks() {
    let srv = Server::new();
    let (a, b) = (srv.client_a(), srv.client_b());
    let id = set_up(&a, "linux-a-4.0");
    let dir = root(&a);
    let r = open(
        &a,
        &dir,
        id,
        "o",
        1,
        "f",
        SHARE_ACCESS_BOTH,
        SHARE_DENY_WRITE,
    );
    assert_ok(&r);
    let open_sid = r.find(op::OPEN).unwrap().stateid().unwrap();
    let fh = r.last().unwrap().fh().unwrap().to_vec();
    let mut sb = b.session("linux-b-4.1");
    let bdir = b.share_root(&mut sb);
    let mut c = sb.compound();
    c.putfh(&bdir).open(
        SHARE_ACCESS_WRITE,
        SHARE_DENY_NONE,
        sb.clientid,
        b"ob",
        &OpenHow::NoCreate,
        &Claim::Null("f"),
    );
    assert_eq!(failed_with(&b.call(&c)), st(Nfs4Error::ShareDenied));
    let (_, b_open) = b.open(
        &mut sb,
        &bdir,
        "f",
        SHARE_ACCESS_READ,
        SHARE_DENY_NONE,
        "ob",
    );
    let mut c = v40("lock");
    c.putfh(&fh)
        .seq(2)
        .lock_new(WRITE_LT, 0, 100, &open_sid, id, b"lo");
    a.ok(&c);
    let clientid = sb.clientid;
    let r = b.on(&mut sb, &fh, |c| {
        c.lock_new(READ_LT, 50, 1, &b_open, clientid, b"lb");
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::Denied));
    assert_eq!(r.last().unwrap().denied().unwrap().offset, 0);
}

#[test]
fn after_a_restart_a_v40_client_finds_its_ids_stale_and_reclaims_in_grace() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("nfs4-clients");
    let mut srv = Server::new();
    srv.service.enable_v4_recovery(list.clone()).unwrap();
    let (id, fh, open_sid) = {
        let a = srv.client_a();
        let id = set_up(&a, "linux-a");
        let root = root(&a);
        let r = open(
            &a,
            &root,
            id,
            "o",
            1,
            "f",
            SHARE_ACCESS_BOTH,
            SHARE_DENY_NONE,
        );
        assert_ok(&r);
        let sid = r.find(op::OPEN).unwrap().stateid().unwrap();
        (id, r.last().unwrap().fh().unwrap().to_vec(), sid)
    };
    srv.restart(&list);
    let (a, b) = (srv.client_a(), srv.client_b());
    let mut c = v40("renew");
    c.renew(id);
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::StaleClientId));
    let mut c = v40("read");
    c.putfh(&fh).read(&open_sid, 0, 10);
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::StaleStateId));
    // Set up again: the previous start's client may reclaim its open; another client
    // gets nothing new in the grace period.
    let id = set_up(&a, "linux-a");
    let mut c = v40("reclaim");
    c.putfh(&fh).seq(1).open(
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
        id,
        b"o",
        &OpenHow::NoCreate,
        &Claim::Previous,
    );
    assert_ok(&a.call(&c));
    let bid = set_up(&b, "linux-b");
    let broot = root(&b);
    let r = open(
        &b,
        &broot,
        bid,
        "o",
        1,
        "g",
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
    );
    assert_eq!(failed_with(&r), st(Nfs4Error::Grace));
}

/// A 4.0 client silent past its lease (courtesy off) is let go though nobody
/// conflicted: RENEW answers STALE_CLIENTID, its open stateid is unknown, and it
/// starts over with SETCLIENTID.
#[test]
fn a_silent_v40_client_is_let_go_when_its_lease_ends_with_courtesy_off() {
    let srv = Server::new();
    srv.service
        .set_v4_lease(std::time::Duration::from_millis(300));
    srv.service.set_v4_courtesy(std::time::Duration::ZERO);
    let a = srv.client_a();
    let id = set_up(&a, "linux-a");
    let dir = root(&a);
    let r = open(
        &a,
        &dir,
        id,
        "o",
        1,
        "f",
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
    );
    assert_ok(&r);
    assert_eq!(srv.service.reap_v4_clients(), 0, "the lease runs");
    // Only makes the lease run out.
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert_eq!(srv.service.reap_v4_clients(), 1);
    assert_eq!(srv.service.nfs4_status().opens, 0);
    let mut c = v40("renew");
    c.renew(id);
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::StaleClientId));
    let again = set_up(&a, "linux-a");
    assert_ne!(again, id);
    let r = open(
        &a,
        &dir,
        again,
        "o",
        1,
        "f",
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
    );
    assert_ok(&r);
}
