//! NFSv4.1 byte-range locks and leases at the protocol level: conflicts named with
//! their holder, splits, upgrades, lock stateids, and what a client whose lease ran
//! out loses. The lease tests sleep only to let a shortened lease run out.

use nfs::v4::client::{
    self, Compound, CompoundReply, Session, Stateid, FILE_SYNC4, READ_LT, SHARE_ACCESS_BOTH,
    SHARE_ACCESS_READ, SHARE_DENY_NONE, WRITE_LT,
};
use nfs::v4::Nfs4Error;
use std::time::Duration;

mod common;
use common::harness::*;

// ---- byte-range locks ----

/// Clients A and B with file `d/f` open read-write each (open owners "oa" and "ob").
struct LockSetup<'s> {
    a: Client<'s>,
    b: Client<'s>,
    sa: Session,
    sb: Session,
    fh: Vec<u8>,
    open_a: Stateid,
    open_b: Stateid,
}

fn lock_setup(srv: &Server) -> LockSetup<'_> {
    let (a, b) = (srv.client_a(), srv.client_b());
    let mut sa = a.session("client-a");
    let mut sb = b.session("client-b");
    let dir = a.mkdir(&mut sa, "d");
    let (fh, open_a) = a.open(&mut sa, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "oa");
    let (_, open_b) = b.open(&mut sb, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "ob");
    LockSetup {
        a,
        b,
        sa,
        sb,
        fh,
        open_a,
        open_b,
    }
}

impl LockSetup<'_> {
    /// A's lock owner "lock-a" takes [0, 100) for writing: the lock stateid.
    fn a_locks_0_100(&mut self) -> Stateid {
        let (sid, fh, clientid) = (self.open_a, self.fh.clone(), self.sa.clientid);
        let r = self.a.on(&mut self.sa, &fh, |c| {
            c.lock_new(WRITE_LT, 0, 100, &sid, clientid, b"lock-a");
        });
        assert_ok(&r);
        r.last().unwrap().stateid().unwrap()
    }

    /// B's LOCK (new lock owner "lock-b") of [offset, offset+length).
    fn b_lock(&mut self, locktype: u32, offset: u64, length: u64) -> CompoundReply {
        let (sid, fh, clientid) = (self.open_b, self.fh.clone(), self.sb.clientid);
        self.b.on(&mut self.sb, &fh, |c| {
            c.lock_new(locktype, offset, length, &sid, clientid, b"lock-b");
        })
    }

    fn b_lockt(&mut self, locktype: u32, offset: u64, length: u64) -> CompoundReply {
        let (fh, clientid) = (self.fh.clone(), self.sb.clientid);
        self.b.on(&mut self.sb, &fh, |c| {
            c.lockt(locktype, offset, length, clientid, b"lock-b");
        })
    }

    fn a_on(&mut self, f: impl FnOnce(&mut Compound)) -> CompoundReply {
        let fh = self.fh.clone();
        self.a.on(&mut self.sa, &fh, f)
    }

    fn b_on(&mut self, f: impl FnOnce(&mut Compound)) -> CompoundReply {
        let fh = self.fh.clone();
        self.b.on(&mut self.sb, &fh, f)
    }
}

fn denied(r: &CompoundReply) -> client::LockDenied {
    assert_eq!(failed_with(r), st(Nfs4Error::Denied));
    r.last().unwrap().denied().expect("LOCK4denied").clone()
}

#[test]
fn a_conflicting_lock_and_lockt_are_denied_naming_the_holders_range_type_and_owner() {
    let srv = Server::new();
    let mut t = lock_setup(&srv);
    t.a_locks_0_100();
    let want = client::LockDenied {
        offset: 0,
        length: 100,
        locktype: WRITE_LT,
        clientid: t.sa.clientid,
        owner: b"lock-a".to_vec(),
    };
    assert_eq!(denied(&t.b_lock(READ_LT, 50, 10)), want);
    assert_eq!(denied(&t.b_lockt(READ_LT, 50, 10)), want);
    assert_eq!(denied(&t.b_lockt(WRITE_LT, 99, u64::MAX)), want);
    // Outside the range there is no conflict.
    assert_ok(&t.b_lockt(WRITE_LT, 100, 10));
    assert_ok(&t.b_lock(WRITE_LT, 100, 10));
}

#[test]
fn unlocking_the_front_of_a_range_splits_it() {
    let srv = Server::new();
    let mut t = lock_setup(&srv);
    let lock = t.a_locks_0_100();
    let r = t.a_on(|c| {
        c.locku(WRITE_LT, &lock, 0, 50);
    });
    assert_ok(&r);
    let after = r.last().unwrap().stateid().unwrap();
    assert_eq!(after.other, lock.other);
    assert!(after.seqid > lock.seqid);
    assert_ok(&t.b_lock(READ_LT, 10, 10));
    let d = denied(&t.b_lock(READ_LT, 60, 10));
    assert_eq!((d.offset, d.length, d.locktype), (50, 50, WRITE_LT));
}

#[test]
fn a_lock_owner_relocking_its_own_range_upgrades_and_downgrades_it() {
    let srv = Server::new();
    let mut t = lock_setup(&srv);
    let lock = t.a_locks_0_100();
    // Down to a read lock over the middle: B may read-lock there, not write-lock.
    let r = t.a_on(|c| {
        c.lock_existing(READ_LT, 40, 20, &lock);
    });
    assert_ok(&r);
    let lock = r.last().unwrap().stateid().unwrap();
    assert_ok(&t.b_lockt(READ_LT, 45, 10));
    let d = denied(&t.b_lockt(WRITE_LT, 45, 10));
    assert_eq!((d.offset, d.length, d.locktype), (40, 20, READ_LT));
    assert!(!denied(&t.b_lockt(READ_LT, 30, 10)).owner.is_empty());
    // Back up to a write lock over all of it.
    let r = t.a_on(|c| {
        c.lock_existing(WRITE_LT, 0, 100, &lock);
    });
    assert_ok(&r);
    let d = denied(&t.b_lockt(READ_LT, 45, 10));
    assert_eq!((d.offset, d.length, d.locktype), (0, 100, WRITE_LT));
}

#[test]
fn close_with_locks_held_gets_locks_held() {
    let srv = Server::new();
    let mut t = lock_setup(&srv);
    let lock = t.a_locks_0_100();
    let open_a = t.open_a;
    let r = t.a_on(|c| {
        c.close(&open_a);
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::LocksHeld));
    // Unlocked, the open closes.
    let r = t.a_on(|c| {
        c.locku(WRITE_LT, &lock, 0, u64::MAX).close(&open_a);
    });
    assert_ok(&r);
}

#[test]
fn free_stateid_frees_a_lock_stateid_only_once_it_holds_no_range() {
    let srv = Server::new();
    let mut t = lock_setup(&srv);
    let lock = t.a_locks_0_100();
    let r = t.a_on(|c| {
        c.free_stateid(&lock);
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::LocksHeld));
    let r = t.a_on(|c| {
        c.locku(WRITE_LT, &lock, 0, 100);
    });
    assert_ok(&r);
    let lock = r.last().unwrap().stateid().unwrap();
    assert_ok(&t.a_on(|c| {
        c.free_stateid(&lock);
    }));
    let r = t.a_on(|c| {
        c.test_stateid(&[lock]);
    });
    assert_ok(&r);
    assert_eq!(
        r.last().unwrap().test_stateid().unwrap(),
        &[st(Nfs4Error::BadStateId)]
    );
}

#[test]
fn test_stateid_says_ok_for_live_stateids_and_bad_stateid_for_garbage() {
    let srv = Server::new();
    let mut t = lock_setup(&srv);
    let lock = t.a_locks_0_100();
    let garbage = Stateid {
        seqid: 1,
        other: *b"not-a-real-1",
    };
    let (open_a, open_b) = (t.open_a, t.open_b);
    let r = t.a_on(|c| {
        c.test_stateid(&[open_a, lock, garbage, open_b]);
    });
    assert_ok(&r);
    let bad = st(Nfs4Error::BadStateId);
    // B's open is live, but not A's to test.
    assert_eq!(r.last().unwrap().test_stateid().unwrap(), &[0, 0, bad, bad]);
    let r = t.b_on(|c| {
        c.test_stateid(&[open_b]);
    });
    assert_eq!(r.last().unwrap().test_stateid().unwrap(), &[0]);
}

#[test]
fn lock_owners_of_one_client_conflict_and_a_lock_stateid_carries_io() {
    let srv = Server::new();
    let mut t = lock_setup(&srv);
    let p1 = t.a_locks_0_100();
    let (open_a, clientid) = (t.open_a, t.sa.clientid);
    let r = t.a_on(|c| {
        c.lock_new(WRITE_LT, 5, 1, &open_a, clientid, b"other-process");
    });
    let d = denied(&r);
    assert_eq!((d.clientid, d.owner.as_slice()), (clientid, &b"lock-a"[..]));
    let r = t.a_on(|c| {
        c.write(&p1, 0, FILE_SYNC4, b"locked").read(&p1, 0, 6);
    });
    assert_ok(&r);
    assert_eq!(r.last().unwrap().read().unwrap(), (true, &b"locked"[..]));
}

#[test]
fn a_write_lock_through_a_read_only_open_gets_openmode() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "d");
    let (fh, sid) = a.open(&mut s, &dir, "f", SHARE_ACCESS_READ, SHARE_DENY_NONE, "o");
    let clientid = s.clientid;
    let r = a.on(&mut s, &fh, |c| {
        c.lock_new(WRITE_LT, 0, 1, &sid, clientid, b"l");
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::OpenMode));
    let r = a.on(&mut s, &fh, |c| {
        c.lock_new(READ_LT, 0, 1, &sid, clientid, b"l");
    });
    assert_ok(&r);
}

// ---- leases ----

/// A locks, then stays silent past a short lease; B conflicts with the lock.
fn expire_a_under_b(srv: &Server) -> (LockSetup<'_>, Stateid) {
    srv.service.set_v4_lease(Duration::from_millis(200));
    let mut t = lock_setup(srv);
    let lock = t.a_locks_0_100();
    // Only makes the lease run out; nothing below depends on how long it took.
    std::thread::sleep(Duration::from_millis(500));
    let r = t.b_lock(WRITE_LT, 50, 10);
    assert_ok(&r);
    (t, lock)
}

#[test]
fn after_its_lease_expires_a_silent_clients_conflicting_lock_gives_way() {
    let srv = Server::new();
    let (mut t, _lock) = expire_a_under_b(&srv);
    // B holds the range now; A's LOCKT of it names B.
    let r = t.a_on(|c| {
        c.lockt(WRITE_LT, 55, 1, 1, b"someone-else");
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::Denied));
}

/// Courtesy ends in revocation, not in forgetting the client: A keeps its client ID
/// and session, SEQUENCE says some of its state was revoked, its stateids answer
/// EXPIRED until A frees them, and then the flag goes.
#[test]
fn after_its_lease_expires_a_silent_client_keeps_its_session_but_its_lock_stateid_is_gone() {
    let srv = Server::new();
    let (mut t, lock) = expire_a_under_b(&srv);
    let open = t.open_a;
    let r = t.a_on(|c| {
        c.test_stateid(&[lock, open]);
    });
    assert_eq!(r.results[0].status, 0, "A's SEQUENCE: {:?}", r.summary());
    assert_ok(&r);
    let expired = st(Nfs4Error::Expired);
    assert_eq!(
        r.last().unwrap().test_stateid().unwrap(),
        &[expired, expired]
    );
    const SOME_STATE_REVOKED: u32 = 0x10;
    let flags = r.results[0].sequence().unwrap().status_flags;
    assert_eq!(flags & SOME_STATE_REVOKED, SOME_STATE_REVOKED);
    let r = t.a_on(|c| {
        c.free_stateid(&lock).free_stateid(&open);
    });
    assert_ok(&r);
    let r = t.a_on(|c| {
        c.test_stateid(&[lock]);
    });
    assert_eq!(
        r.results[0].sequence().unwrap().status_flags & SOME_STATE_REVOKED,
        0
    );
    assert_eq!(
        r.last().unwrap().test_stateid().unwrap(),
        &[st(Nfs4Error::BadStateId)]
    );
}

/// A locks, then A and B both stay silent past a short lease; with `courtesy`.
fn silent_past_the_lease(srv: &Server, courtesy: Duration) -> (LockSetup<'_>, Stateid) {
    srv.service.set_v4_lease(Duration::from_millis(300));
    srv.service.set_v4_courtesy(courtesy);
    let mut t = lock_setup(srv);
    let lock = t.a_locks_0_100();
    let before = srv.service.nfs4_status();
    assert_eq!((before.clients, before.opens, before.locks), (2, 2, 1));
    assert_eq!(before.courtesy, 0, "nobody is past the lease yet");
    // Only makes the lease run out; nothing below depends on how long it took.
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(srv.service.nfs4_status().courtesy, 2);
    (t, lock)
}

/// RFC 8881 section 8.3: a lease runs out on time, conflict or not. With courtesy
/// off, a silent client is let go when its lease ends though nobody wanted what it
/// held: its session is gone (BADSESSION) and so are its open and lock.
#[test]
fn with_courtesy_off_a_silent_client_is_let_go_when_its_lease_ends_without_any_conflict() {
    let srv = Server::new();
    let (mut t, _lock) = silent_past_the_lease(&srv, Duration::ZERO);
    assert_eq!(srv.service.reap_v4_clients(), 2);
    let after = srv.service.nfs4_status();
    assert_eq!(
        (after.clients, after.sessions, after.opens, after.locks),
        (0, 0, 0, 0)
    );
    let r = t.a_on(|_| {});
    assert_eq!(r.results[0].status, st(Nfs4Error::BadSession));
    // Nothing is left to conflict with: a new client locks what A held.
    let c = srv.client_a();
    let mut s = c.session("client-c");
    let root = c.share_root(&mut s);
    let mut k = s.compound();
    k.putfh(&root).lookup("d").getfh();
    let dir = c.ok(&k).last().unwrap().fh().unwrap().to_vec();
    let (fh, open) = c.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "oc");
    let clientid = s.clientid;
    let r = c.on(&mut s, &fh, |k| {
        k.lock_new(WRITE_LT, 0, 100, &open, clientid, b"lock-c");
    });
    assert_ok(&r);
}

/// The control: the same silence within the courtesy loses nothing; A comes back
/// to its session, its lock stateid and its lock.
#[test]
fn within_its_courtesy_a_silent_client_nobody_conflicts_with_keeps_everything() {
    let srv = Server::new();
    let (mut t, lock) = silent_past_the_lease(&srv, Duration::from_secs(3600));
    assert_eq!(srv.service.reap_v4_clients(), 0);
    let r = t.a_on(|c| {
        c.test_stateid(&[lock]);
    });
    assert_ok(&r);
    assert_eq!(r.last().unwrap().test_stateid().unwrap(), &[0]);
    assert_eq!(r.results[0].sequence().unwrap().status_flags & 0x10, 0);
    let status = srv.service.nfs4_status();
    assert_eq!((status.clients, status.locks, status.courtesy), (2, 1, 1));
}

/// The reaper thread does it on its own, without anyone calling.
#[test]
fn the_reaper_lets_a_silent_client_go_on_its_own() {
    let srv = Server::new();
    srv.service.start_v4_reaper().unwrap();
    let (mut t, _lock) = silent_past_the_lease(&srv, Duration::ZERO);
    // Asking the status renews nobody; the reaper runs every second.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while srv.service.nfs4_status().clients > 0 {
        assert!(std::time::Instant::now() < deadline, "nobody was reaped");
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = t.b_on(|_| {});
    assert_eq!(r.results[0].status, st(Nfs4Error::BadSession));
}
