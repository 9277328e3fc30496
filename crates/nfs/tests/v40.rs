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
    // The COMPOUND goes on from the file the OPEN left (its GETFH names the file,
    // as the Linux client and RFC 7530's replay rules need).
    assert_eq!(again.results.len(), 3, "{:?}", again.summary());
    assert_eq!(again.last().unwrap().fh(), first.last().unwrap().fh());
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

/// A 4.0 client's callback service: answers CB_NULL and CB_COMPOUND, keeping each
/// call's record.
struct CallbackService {
    calls: std::sync::Mutex<Vec<Vec<u8>>>,
    /// The statuses of the next CB_COMPOUNDs' answers, in turn (then NFS4_OK).
    statuses: std::sync::Mutex<std::collections::VecDeque<u32>>,
}

impl CallbackService {
    fn new(statuses: &[u32]) -> std::sync::Arc<CallbackService> {
        std::sync::Arc::new(CallbackService {
            calls: std::sync::Mutex::new(Vec::new()),
            statuses: std::sync::Mutex::new(statuses.iter().copied().collect()),
        })
    }

    /// The CB_COMPOUND calls so far.
    fn compounds(&self) -> Vec<Vec<u8>> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|r| nfs::rpc::decode_call(r).unwrap().procedure == 1)
            .cloned()
            .collect()
    }

    /// Serves on a loopback port: the server and the universal address naming it.
    fn serve(self: &std::sync::Arc<Self>) -> (nfs::transport::RpcServer, String) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = nfs::transport::RpcServer::start(vec![listener], self.clone(), 2).unwrap();
        (server, format!("127.0.0.1.{}.{}", port >> 8, port & 0xff))
    }
}

impl nfs::transport::Service for CallbackService {
    fn call(&self, call: &nfs::transport::Call<'_>) -> Option<nfs::transport::Reply> {
        self.calls.lock().unwrap().push(call.record.to_vec());
        let mut e = call.reply(nfs::rpc::Accept::Success);
        if call.header.procedure == 1 {
            // CB_COMPOUND4res: status, tag, no results.
            let status = self.statuses.lock().unwrap().pop_front().unwrap_or(0);
            e.u32(status).opaque(b"").u32(0);
        }
        Some(nfs::transport::Reply::new(e))
    }
}

/// Waits until `cb` has had `n` CB_COMPOUNDs: them.
fn wait_for_compounds(cb: &CallbackService, n: usize) -> Vec<Vec<u8>> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let got = cb.compounds();
        if got.len() >= n {
            return got;
        }
        assert!(
            std::time::Instant::now() < until,
            "{} CB_COMPOUNDs of {n}",
            got.len()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// 4.0 client `a` (with its callback service `cb` answering) opens `d/f` for reading
/// and writing until it gets a write delegation (once the probe went through): the
/// file's handle, the open and the delegation stateids.
fn write_delegation(a: &Client<'_>, id: u64) -> (Vec<u8>, nfs::v4::client::Stateid) {
    let dir = root(a);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    for round in 1.. {
        let owner = format!("writer-{round}");
        let mut c = v40("open");
        c.putfh(&dir).seq(1).open(
            SHARE_ACCESS_BOTH,
            SHARE_DENY_NONE,
            id,
            owner.as_bytes(),
            &OpenHow::Unchecked(SetAttrs::mode(0o644)),
            &Claim::Null("f"),
        );
        c.getfh();
        let r = a.ok(&c);
        let fh = r.last().unwrap().fh().unwrap().to_vec();
        let o = r.find(op::OPEN).unwrap().open().unwrap().clone();
        if o.delegation == 2 {
            return (fh, o.delegation_stateid.unwrap());
        }
        let mut c = v40("close");
        c.putfh(&fh).seq(2).close(&o.stateid);
        a.ok(&c);
        assert!(
            std::time::Instant::now() < until,
            "no write delegation after the probe"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    unreachable!()
}

/// A 4.0 COMPOUND names no client when it carries no client ID or stateid (PUTFH,
/// GETATTR): the holder of a write delegation asking its own file's size must not
/// have it recalled (4.0 knows the caller only by its address), while another
/// client asking does. And a client that answers a recall BADHANDLE (it has not
/// seen the OPEN reply yet) is asked again.
#[test]
fn a_v40_holder_s_own_getattr_keeps_its_delegation_and_a_recall_it_does_not_know_yet_is_sent_again()
{
    let srv = Server::new();
    srv.start_threads();
    // The first recall is answered BADHANDLE, the next one OK.
    let cb = CallbackService::new(&[10001]);
    let (_cb_server, r_addr) = cb.serve();
    let a = srv.client_a();
    let id = set_up_with_callback(&a, "linux-a", &r_addr);
    let (fh, deleg) = write_delegation(&a, id);
    let mut c = v40("getattr");
    c.putfh(&fh)
        .getattr(&[nfs::v4::client::attr::SIZE, nfs::v4::client::attr::CHANGE]);
    a.ok(&c);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        cb.compounds().len(),
        0,
        "the holder's own GETATTR recalled its delegation"
    );
    // Another client's GETATTR of the size waits for the delegation to come back.
    let b = srv.client_b();
    let mut sb = b.session("linux-b");
    let mut c = sb.compound();
    c.putfh(&fh).getattr(&[nfs::v4::client::attr::SIZE]);
    assert_eq!(failed_with(&b.call(&c)), st(Nfs4Error::Delay));
    let recalls = wait_for_compounds(&cb, 2);
    for r in &recalls {
        let h = nfs::rpc::decode_call(r).unwrap();
        let mut d = nfs::xdr::Decoder::new(&r[h.args_at..]);
        d.opaque(1024).unwrap();
        assert_eq!(d.u32().unwrap(), 0, "minor version 0");
        d.u32().unwrap();
        d.u32().unwrap();
        assert_eq!(d.u32().unwrap(), 4, "CB_RECALL");
        assert_eq!(nfs::v4::client::Stateid::decode(&mut d).unwrap(), deleg);
    }
    let mut c = v40("delegreturn");
    c.putfh(&fh).delegreturn(&deleg);
    a.ok(&c);
    let mut c = sb.compound();
    c.putfh(&fh).getattr(&[nfs::v4::client::attr::SIZE]);
    b.ok(&c);
}

const CB_PROGRAM: u32 = 0x4000_0123;

/// SETCLIENTID naming `r_addr` as the callback service, and its confirmation.
fn set_up_with_callback(cl: &Client<'_>, owner: &str, r_addr: &str) -> u64 {
    let mut c = v40("setclientid");
    c.setclientid_cb(
        b"verifier",
        owner.as_bytes(),
        CB_PROGRAM,
        r_addr.as_bytes(),
        77,
    );
    let Res::SetClientId { clientid, confirm } = cl.ok(&c).results[0].res.clone() else {
        panic!("no SETCLIENTID results");
    };
    let mut c = v40("confirm");
    c.setclientid_confirm(clientid, &confirm);
    cl.ok(&c);
    clientid
}

#[test]
fn a_v40_client_whose_callback_path_answers_gets_delegations_and_their_recalls() {
    let srv = Server::new();
    srv.start_threads();
    let cb = CallbackService::new(&[]);
    let (_cb_server, r_addr) = cb.serve();
    let (a, b) = (srv.client_a(), srv.client_b());
    let id = set_up_with_callback(&a, "linux-a", &r_addr);
    let dir = root(&a);
    // The file, made and closed by a 4.1 client that wants no delegation.
    let mut sb = b.session("linux-b");
    let bdir = b.share_root(&mut sb);
    let (_, made) = b.open(
        &mut sb,
        &bdir,
        "f",
        SHARE_ACCESS_BOTH | 0x0400,
        SHARE_DENY_NONE,
        "mk",
    );
    let fh = {
        let mut c = sb.compound();
        c.putfh(&bdir).lookup("f").getfh();
        b.ok(&c).last().unwrap().fh().unwrap().to_vec()
    };
    let mut c = sb.compound();
    c.putfh(&fh).close(&made);
    b.ok(&c);
    // Once the probe (CB_NULL) is answered, a read open gets a read delegation.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut round = 0;
    let deleg = loop {
        // A fresh open owner each round, so each starts its own sequence.
        round += 1;
        let owner = format!("reader-{round}");
        let r = open(
            &a,
            &dir,
            id,
            &owner,
            1,
            "f",
            SHARE_ACCESS_READ,
            SHARE_DENY_NONE,
        );
        let o = r.find(op::OPEN).unwrap().open().unwrap().clone();
        if o.delegation == 1 {
            break o.delegation_stateid.unwrap();
        }
        // Not yet probed: give the open back and try again.
        let mut c = v40("close");
        c.putfh(&fh).seq(2).close(&o.stateid);
        a.ok(&c);
        assert!(
            std::time::Instant::now() < until,
            "no delegation after the probe"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let first = cb.calls.lock().unwrap()[0].clone();
    let h = nfs::rpc::decode_call(&first).unwrap();
    assert_eq!(
        (h.program, h.version, h.procedure),
        (CB_PROGRAM, 1, 0),
        "CB_NULL first"
    );
    // A writer: DELAY for it, CB_RECALL (minor 0, callback_ident 77, no CB_SEQUENCE)
    // on a connection the server opened to the 4.0 client.
    let mut c = sb.compound();
    c.putfh(&bdir).open(
        SHARE_ACCESS_WRITE,
        SHARE_DENY_NONE,
        sb.clientid,
        b"writer",
        &OpenHow::NoCreate,
        &Claim::Null("f"),
    );
    assert_eq!(failed_with(&b.call(&c)), st(Nfs4Error::Delay));
    let recall = wait_for_compounds(&cb, 1)[0].clone();
    let h = nfs::rpc::decode_call(&recall).unwrap();
    let mut d = nfs::xdr::Decoder::new(&recall[h.args_at..]);
    d.opaque(1024).unwrap();
    assert_eq!(d.u32().unwrap(), 0, "minor version 0");
    assert_eq!(d.u32().unwrap(), 77, "the client's callback_ident");
    assert_eq!(d.u32().unwrap(), 1, "CB_RECALL alone");
    assert_eq!(d.u32().unwrap(), 4, "CB_RECALL");
    assert_eq!(nfs::v4::client::Stateid::decode(&mut d).unwrap(), deleg);
    // Returned, the writer goes ahead.
    let mut c = v40("delegreturn");
    c.putfh(&fh).delegreturn(&deleg);
    a.ok(&c);
    let mut c = sb.compound();
    c.putfh(&bdir).open(
        SHARE_ACCESS_WRITE,
        SHARE_DENY_NONE,
        sb.clientid,
        b"writer",
        &OpenHow::NoCreate,
        &Claim::Null("f"),
    );
    b.ok(&c);
}

#[test]
fn a_v40_client_whose_callback_path_is_down_gets_no_delegation() {
    let srv = Server::new();
    srv.start_threads();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let a = srv.client_a();
    let id = set_up_with_callback(
        &a,
        "linux-a",
        &format!("127.0.0.1.{}.{}", port >> 8, port & 0xff),
    );
    let dir = root(&a);
    assert_ok(&open(
        &a,
        &dir,
        id,
        "maker",
        1,
        "f",
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
    ));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let r = open(
        &a,
        &dir,
        id,
        "reader",
        1,
        "f",
        SHARE_ACCESS_READ,
        SHARE_DENY_NONE,
    );
    assert_eq!(r.find(op::OPEN).unwrap().open().unwrap().delegation, 0);
}

/// RFC 7530's own answers where 4.1 has others: a file operation on a fifo is
/// INVAL (4.1: WRONG_TYPE), an OPEN of one SYMLINK (RFC 7530 16.16.5: SYMLINK for
/// anything but a directory), a COMPOUND of more operations than the server takes
/// RESOURCE (TOO_MANY_OPS is 4.1's); and an owner's request that failed with an
/// error that moves its sequence is answered the same error when sent again.
#[test]
fn v40_answers_rfc_7530_s_errors() {
    let srv = Server::new();
    let b = srv.client_b();
    let mut sb = b.session("linux-b");
    let share = b.share_root(&mut sb);
    let mut c = sb.compound();
    let mut e = nfs::xdr::Encoder::new();
    e.u32(7).opaque(b"p"); // NF4FIFO
    SetAttrs::mode(0o644).encode(&mut e);
    c.putfh(&share).raw_op(op::CREATE, &e.buf).getfh();
    let fifo = b.ok(&c).last().unwrap().fh().unwrap().to_vec();
    let mut c = sb.compound();
    c.putfh(&share).mkdir("sub", &SetAttrs::mode(0o755));
    b.ok(&c);
    let a = srv.client_a();
    let id = set_up(&a, "linux-a");
    let dir = root(&a);
    let r = open(
        &a,
        &dir,
        id,
        "o",
        1,
        "p",
        SHARE_ACCESS_READ,
        SHARE_DENY_NONE,
    );
    assert_eq!(failed_with(&r), st(Nfs4Error::Symlink), "OPEN of a fifo");
    let r = open(
        &a,
        &dir,
        id,
        "o",
        2,
        "sub",
        SHARE_ACCESS_READ,
        SHARE_DENY_NONE,
    );
    assert_eq!(failed_with(&r), st(Nfs4Error::IsDir), "OPEN of a directory");
    let mut c = v40("read");
    c.putfh(&fifo)
        .read(&nfs::v4::client::Stateid::ANONYMOUS, 0, 10);
    assert_eq!(
        failed_with(&a.call(&c)),
        st(Nfs4Error::Inval),
        "READ of a fifo"
    );
    let mut c = v40("commit");
    c.putfh(&fifo).commit(0, 0);
    assert_eq!(
        failed_with(&a.call(&c)),
        st(Nfs4Error::Inval),
        "COMMIT of a fifo"
    );
    let mut c = v40("long");
    for _ in 0..65 {
        c.putrootfh();
    }
    let r = a.call(&c);
    assert_eq!(r.status, st(Nfs4Error::Resource), "{:?}", r.summary());
    // OPEN of a missing file without create: NOENT, which moves the sequence; sent
    // again, the same NOENT from the owner's last answer; the next number runs.
    let mut c = v40("open");
    c.putfh(&dir).seq(3).open(
        SHARE_ACCESS_READ,
        SHARE_DENY_NONE,
        id,
        b"o",
        &OpenHow::NoCreate,
        &Claim::Null("missing"),
    );
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::NoEnt));
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::NoEnt), "the replay");
    let r = open(
        &a,
        &dir,
        id,
        "o",
        4,
        "f",
        SHARE_ACCESS_READ,
        SHARE_DENY_NONE,
    );
    assert_ok(&r);
}

/// A 4.0 REMOVE or RENAME sent again with the same xid (a retransmission after a
/// reconnection) is answered from the duplicate-request cache, not run again: OK
/// both times, where running it again would say NOENT. Another xid runs.
#[test]
fn a_retransmitted_v40_remove_or_rename_is_answered_from_the_reply_cache() {
    let srv = Server::new();
    let a = srv.client_a();
    let id = set_up(&a, "linux-a");
    let dir = root(&a);
    for name in ["gone", "moved"] {
        let r = open(
            &a,
            &dir,
            id,
            name,
            1,
            name,
            SHARE_ACCESS_BOTH,
            SHARE_DENY_NONE,
        );
        assert_ok(&r);
        let sid = r.find(op::OPEN).unwrap().stateid().unwrap();
        let fh = r.last().unwrap().fh().unwrap().to_vec();
        let mut c = v40("close");
        c.putfh(&fh).seq(2).close(&sid);
        a.ok(&c);
    }
    for (what, build) in [
        (
            "REMOVE",
            (|c: &mut Compound| {
                c.remove("gone");
            }) as fn(&mut Compound),
        ),
        ("RENAME", |c| {
            c.savefh().rename("moved", "elsewhere");
        }),
    ] {
        let mut c = v40(what);
        c.putfh(&dir);
        build(&mut c);
        let record = c.record(a.next_xid(), &root_cred());
        let first = nfs::v4::client::decode_reply(&a.send_record(&record)).unwrap();
        assert_ok(&first);
        let again = nfs::v4::client::decode_reply(&a.send_record(&record)).unwrap();
        assert_eq!(again.results, first.results, "{what} sent again");
        // A new request (another xid) does run: the name is gone.
        assert_eq!(
            failed_with(&a.call(&c)),
            st(Nfs4Error::NoEnt),
            "{what} anew"
        );
    }
}

/// A callback update (SETCLIENTID again with the same verifier, then its
/// confirmation) naming a path that does not answer: the old path stops taking
/// delegations at once, and the new one never starts.
#[test]
fn a_v40_callback_update_to_a_dead_path_ends_delegations() {
    let srv = Server::new();
    srv.start_threads();
    let cb = CallbackService::new(&[]);
    let (_cb_server, r_addr) = cb.serve();
    let a = srv.client_a();
    let id = set_up_with_callback(&a, "linux-a", &r_addr);
    let (fh, deleg) = write_delegation(&a, id);
    let mut c = v40("delegreturn");
    c.putfh(&fh).delegreturn(&deleg);
    a.ok(&c);
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // A file nobody has open (made by a 4.1 client that wants no delegation), which
    // a reader would get a read delegation of.
    let dir = root(&a);
    let bcl = srv.client_b();
    let mut sb = bcl.session("linux-b");
    let share = bcl.share_root(&mut sb);
    let (g, made) = bcl.open(
        &mut sb,
        &share,
        "g",
        SHARE_ACCESS_BOTH | 0x0400,
        SHARE_DENY_NONE,
        "mk",
    );
    let mut c = sb.compound();
    c.putfh(&g).close(&made);
    bcl.ok(&c);
    let r = open(
        &a,
        &dir,
        id,
        "before",
        1,
        "g",
        SHARE_ACCESS_READ,
        SHARE_DENY_NONE,
    );
    let o = r
        .find(op::OPEN)
        .unwrap()
        .open()
        .unwrap_or_else(|| panic!("{:?}", r.summary()))
        .clone();
    assert_eq!(o.delegation, 1, "the path is up");
    let mut c = v40("delegreturn");
    c.putfh(&g).delegreturn(&o.delegation_stateid.unwrap());
    a.ok(&c);
    let again = set_up_with_callback(
        &a,
        "linux-a",
        &format!("127.0.0.1.{}.{}", dead >> 8, dead & 0xff),
    );
    assert_eq!(again, id, "a callback update keeps the client ID");
    for round in 0..3 {
        let owner = format!("after-update-{round}");
        let r = open(
            &a,
            &dir,
            id,
            &owner,
            1,
            "g",
            SHARE_ACCESS_READ,
            SHARE_DENY_NONE,
        );
        let got = r.find(op::OPEN).unwrap().open().unwrap().delegation;
        assert_eq!(got, 0, "round {round}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// 4.1's forms of OPEN are not 4.0's: EXCLUSIVE4_1 and the claims by file handle
/// are BADXDR in a 4.0 COMPOUND (and a retransmission can skip every form 4.0 has).
#[test]
fn v40_open_refuses_4_1_s_forms() {
    let srv = Server::new();
    let a = srv.client_a();
    let id = set_up(&a, "linux-a");
    let dir = root(&a);
    let mut c = v40("open");
    c.putfh(&dir).seq(1).open(
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
        id,
        b"o",
        &OpenHow::Exclusive41([1; 8], SetAttrs::default()),
        &Claim::Null("x"),
    );
    assert_eq!(
        failed_with(&a.call(&c)),
        st(Nfs4Error::BadXdr),
        "EXCLUSIVE4_1"
    );
    let mut c = v40("open");
    c.putfh(&dir).seq(1).open(
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
        id,
        b"o",
        &OpenHow::NoCreate,
        &Claim::Fh,
    );
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::BadXdr), "CLAIM_FH");
}
