//! NLM (NFSv3 clients' locks) and NSM at the protocol level, against a client
//! machine of the test's own: a portmapper, lock manager and status monitor on
//! loopback (`ClientMachine`) that records the calls the server makes to it. Calls
//! go over real TCP and UDP sockets where the server must call back (GRANTED, the
//! _RES answers, SM_NOTIFY), and through `answer_record` elsewhere.

use nfs::nlm::proto::*;
use nfs::proto::{MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};
use nfs::rpc::{self, Accept, Credential};
use nfs::transport::{Call, Reply, RpcClient, RpcServer, Service};
use nfs::v4::client::{
    SHARE_ACCESS_BOTH, SHARE_ACCESS_READ, SHARE_ACCESS_WRITE, SHARE_DENY_NONE, WRITE_LT,
};
use nfs::v4::Nfs4Error;
use nfs::wire::udp::UdpServer;
use nfs::xdr::{Decoder, Encoder};
use nfs::NfsService;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::harness::*;
use common::{pool_with_share, service_for, DATASET};

const V4: u32 = 4;

/// A client machine's RPC services as the server sees them: its portmapper (every
/// program is on its own port), its lock manager (GRANTED, the _RES calls) and its
/// status monitor (SM_NOTIFY), on TCP and UDP.
struct ClientMachine {
    port: Mutex<u16>,
    /// What the lock manager answers to GRANTED.
    answer_granted: Mutex<Stat>,
    granted: Mutex<Vec<TestArgs>>,
    results: Mutex<Vec<(u32, Vec<u8>)>>,
    notified: Mutex<Vec<(String, u32, SocketAddr)>>,
}

impl Service for ClientMachine {
    fn call(&self, call: &Call<'_>) -> Option<Reply> {
        let mut d = call.args();
        let mut e = call.reply(Accept::Success);
        match (call.header.program, call.header.procedure) {
            (100000, 3) => {
                e.u32(*self.port.lock().unwrap() as u32);
            }
            (NLM_PROGRAM, GRANTED) => {
                let a = decode_test_args(&mut d, call.header.version).unwrap();
                encode_res(&mut e, V4, &a.cookie, *self.answer_granted.lock().unwrap());
                self.granted.lock().unwrap().push(a);
            }
            (NLM_PROGRAM, p) => {
                self.results.lock().unwrap().push((p, d.rest().to_vec()));
            }
            (NSM_PROGRAM, 6) => {
                let name = String::from_utf8(d.opaque(1024).unwrap().to_vec()).unwrap();
                let state = d.u32().unwrap();
                self.notified.lock().unwrap().push((name, state, call.peer));
            }
            _ => return Some(Reply::new(call.reply(Accept::ProgUnavail))),
        }
        Some(Reply::new(e))
    }
}

struct Machine {
    state: Arc<ClientMachine>,
    _tcp: RpcServer,
    _udp: UdpServer,
    port: u16,
}

fn client_machine() -> Machine {
    let state = Arc::new(ClientMachine {
        port: Mutex::new(0),
        answer_granted: Mutex::new(Stat::Granted),
        granted: Mutex::new(Vec::new()),
        results: Mutex::new(Vec::new()),
        notified: Mutex::new(Vec::new()),
    });
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    *state.port.lock().unwrap() = port;
    let udp = UdpSocket::bind(("127.0.0.1", port)).unwrap();
    let tcp = RpcServer::start(vec![l], state.clone(), 2).unwrap();
    let udp = UdpServer::start(
        vec![udp],
        state.clone(),
        &[100000, NLM_PROGRAM, NSM_PROGRAM],
    )
    .unwrap();
    Machine {
        state,
        _tcp: tcp,
        _udp: udp,
        port,
    }
}

/// The service under test on loopback (TCP and UDP on one port), with NLM started:
/// clients' portmappers are asked at `client_portmapper`.
struct Served {
    service: Arc<NfsService>,
    addr: SocketAddr,
    _tcp: RpcServer,
    _udp: UdpServer,
    _pool: Arc<pool::Pool>,
    datasets: fs::Datasets,
}

fn serve(
    pool: Arc<pool::Pool>,
    datasets: fs::Datasets,
    boot: u64,
    state_dir: Option<&std::path::Path>,
    grace: Duration,
    client_portmapper: u16,
) -> Served {
    let service = Arc::new(service_for(&datasets, boot));
    service.set_nlm_client_portmapper(client_portmapper);
    service.start_nlm(state_dir, grace).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    service.set_nfs_port(addr.port());
    let u = UdpSocket::bind(addr).unwrap();
    service.set_udp_port(addr.port());
    let tcp = RpcServer::start(vec![l], service.clone(), 4).unwrap();
    let udp = UdpServer::start(
        vec![u],
        service.clone(),
        &[100000, MOUNT_PROGRAM, NLM_PROGRAM, NSM_PROGRAM],
    )
    .unwrap();
    Served {
        service,
        addr,
        _tcp: tcp,
        _udp: udp,
        _pool: pool,
        datasets,
    }
}

/// `serve` on a fresh pool, keeping nothing on disk, with a one-second grace.
fn serve_fresh(client_portmapper: u16) -> Served {
    let (pool, datasets) = pool_with_share();
    serve(
        pool,
        datasets,
        1,
        None,
        Duration::from_secs(1),
        client_portmapper,
    )
}

/// The results of an accepted, successful reply.
fn results(reply: &[u8]) -> Decoder<'_> {
    let mut d = Decoder::new(reply);
    d.u32().unwrap();
    assert_eq!(d.u32().unwrap(), 1, "a reply");
    assert_eq!(d.u32().unwrap(), 0, "accepted");
    d.u32().unwrap();
    d.opaque(400).unwrap();
    assert_eq!(d.u32().unwrap(), 0, "success");
    d
}

/// One NLM caller over TCP: a machine name and its connection.
struct Nlm {
    name: String,
    rpc: RpcClient,
}

fn lock_of(name: &str, fh: &[u8], svid: i32, offset: u64, len: u64) -> Lock {
    Lock {
        caller_name: name.into(),
        fh: fh.to_vec(),
        oh: format!("{svid}@{name}").into_bytes(),
        svid,
        offset,
        len,
    }
}

impl Nlm {
    fn connect(addr: SocketAddr, name: &str) -> Nlm {
        Nlm {
            name: name.into(),
            rpc: RpcClient::connect(addr).unwrap(),
        }
    }

    fn call(&mut self, procedure: u32, args: &Encoder) -> Vec<u8> {
        self.rpc
            .call(NLM_PROGRAM, V4, procedure, &root_cred(), &args.buf)
            .unwrap()
    }

    fn status(&mut self, procedure: u32, args: &Encoder) -> Stat {
        let reply = self.call(procedure, args);
        let mut d = results(&reply);
        let (cookie, stat) = decode_res(&mut d).unwrap();
        assert_eq!(cookie, b"cookie", "the cookie comes back");
        Stat::from_u32(stat).unwrap()
    }

    #[allow(clippy::too_many_arguments)]
    fn lock(
        &mut self,
        fh: &[u8],
        svid: i32,
        offset: u64,
        len: u64,
        block: bool,
        reclaim: bool,
    ) -> Stat {
        let mut e = Encoder::new();
        let a = LockArgs {
            cookie: b"cookie".to_vec(),
            block,
            exclusive: true,
            lock: lock_of(&self.name, fh, svid, offset, len),
            reclaim,
            state: 1,
        };
        encode_lock_args(&mut e, V4, &a);
        self.status(LOCK, &e)
    }

    fn unlock(&mut self, fh: &[u8], svid: i32, offset: u64, len: u64) -> Stat {
        let mut e = Encoder::new();
        let a = UnlockArgs {
            cookie: b"cookie".to_vec(),
            lock: lock_of(&self.name, fh, svid, offset, len),
        };
        encode_unlock_args(&mut e, V4, &a);
        self.status(UNLOCK, &e)
    }

    /// TEST of an exclusive lock: the status and the holder in the way.
    fn test(&mut self, fh: &[u8], svid: i32, offset: u64, len: u64) -> (Stat, Option<Holder>) {
        let mut e = Encoder::new();
        let a = TestArgs {
            cookie: b"cookie".to_vec(),
            exclusive: true,
            lock: lock_of(&self.name, fh, svid, offset, len),
        };
        encode_test_args(&mut e, V4, &a);
        let reply = self.call(TEST, &e);
        let (_, stat, holder) = decode_test_res(&mut results(&reply), V4).unwrap();
        (Stat::from_u32(stat).unwrap(), holder)
    }
}

/// MOUNT of the share and an NFSv3 CREATE of `name` in its root, over `addr`.
fn create_file(addr: SocketAddr, name: &str) -> Vec<u8> {
    let mut c = RpcClient::connect(addr).unwrap();
    let mut e = Encoder::new();
    e.opaque(format!("/{DATASET}").as_bytes());
    let reply = c
        .call(MOUNT_PROGRAM, MOUNT_V3, 1, &root_cred(), &e.buf)
        .unwrap();
    let mut d = results(&reply);
    assert_eq!(d.u32().unwrap(), 0, "MNT");
    let root = d.opaque(64).unwrap().to_vec();
    let mut e = Encoder::new();
    e.opaque(&root).opaque(name.as_bytes()).u32(0); // UNCHECKED
    for _ in 0..4 {
        e.bool(false); // mode, uid, gid, size not set
    }
    e.u32(0).u32(0); // atime, mtime: DONT_CHANGE
    let reply = c
        .call(NFS_PROGRAM, NFS_V3, 8, &root_cred(), &e.buf)
        .unwrap();
    let mut d = results(&reply);
    assert_eq!(d.u32().unwrap(), 0, "CREATE");
    assert!(d.bool().unwrap(), "a handle follows");
    d.opaque(64).unwrap().to_vec()
}

/// Waits (bounded) until `f` says yes.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_blocked_lock_is_granted_by_a_callback_when_the_holder_unlocks() {
    let machine = client_machine();
    let srv = serve_fresh(machine.port);
    let fh = create_file(srv.addr, "f");
    let mut a = Nlm::connect(srv.addr, "host-a");
    let mut b = Nlm::connect(srv.addr, "host-b");
    assert_eq!(a.lock(&fh, 100, 0, 100, false, false), Stat::Granted);
    assert_eq!(b.lock(&fh, 200, 50, 10, false, false), Stat::Denied);
    assert_eq!(b.lock(&fh, 200, 50, 10, true, false), Stat::Blocked);
    let (stat, holder) = b.test(&fh, 200, 50, 10);
    assert_eq!(stat, Stat::Denied);
    let holder = holder.unwrap();
    assert_eq!((holder.svid, holder.offset, holder.len), (100, 0, 100));
    assert!(
        machine.state.granted.lock().unwrap().is_empty(),
        "nothing granted yet"
    );
    // A's unlock frees the range: B's blocked lock is taken and B is told.
    assert_eq!(a.unlock(&fh, 100, 0, 0), Stat::Granted);
    eventually("GRANTED", || {
        !machine.state.granted.lock().unwrap().is_empty()
    });
    let g = machine.state.granted.lock().unwrap()[0].clone();
    assert_eq!(g.cookie, b"cookie", "GRANTED carries the LOCK's cookie");
    assert_eq!(
        g.lock,
        lock_of("host-b", &fh, 200, 50, 10),
        "and its lock, as sent"
    );
    assert!(g.exclusive);
    let (stat, holder) = a.test(&fh, 100, 0, 0);
    assert_eq!(stat, Stat::Denied, "B holds it now");
    assert_eq!(holder.unwrap().svid, 200);
    assert_eq!(srv.service.nlm_status().blocked, 0);

    // A client that turns the grant down (it stopped waiting) does not keep it.
    *machine.state.answer_granted.lock().unwrap() = Stat::Denied;
    assert_eq!(a.lock(&fh, 100, 50, 5, true, false), Stat::Blocked);
    assert_eq!(b.unlock(&fh, 200, 50, 10), Stat::Granted);
    eventually("the second GRANTED", || {
        machine.state.granted.lock().unwrap().len() == 2
    });
    eventually("the refused grant to be undone", || {
        srv.service.nlm_status().locks == 0
    });
    assert_eq!(b.test(&fh, 200, 0, 0).0, Stat::Granted);

    // CANCEL takes a blocked request back: nothing is granted later.
    assert_eq!(b.lock(&fh, 200, 0, 0, false, false), Stat::Granted);
    assert_eq!(a.lock(&fh, 100, 0, 1, true, false), Stat::Blocked);
    let mut e = Encoder::new();
    let cancel = CancelArgs {
        cookie: b"cookie".to_vec(),
        block: true,
        exclusive: true,
        lock: lock_of("host-a", &fh, 100, 0, 1),
    };
    encode_cancel_args(&mut e, V4, &cancel);
    assert_eq!(a.status(CANCEL, &e), Stat::Granted);
    assert_eq!(a.status(CANCEL, &e), Stat::Denied, "nothing left to cancel");
    assert_eq!(b.unlock(&fh, 200, 0, 0), Stat::Granted);
    std::thread::sleep(nfs::nlm::RETRY_EVERY * 2);
    assert_eq!(
        machine.state.granted.lock().unwrap().len(),
        2,
        "no grant after CANCEL"
    );
    assert_eq!(srv.service.nlm_status().locks, 0);
}

#[test]
fn asynchronous_calls_are_answered_by_res_calls_to_the_client() {
    let machine = client_machine();
    let srv = serve_fresh(machine.port);
    let fh = create_file(srv.addr, "f");
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let a = LockArgs {
        cookie: b"msg-cookie".to_vec(),
        block: false,
        exclusive: false,
        lock: lock_of("host-m", &fh, 7, 0, 0),
        reclaim: false,
        state: 1,
    };
    let mut e = rpc::encode_call(99, NLM_PROGRAM, V4, LOCK_MSG, &root_cred());
    encode_lock_args(&mut e, V4, &a);
    sock.send_to(&e.buf, srv.addr).unwrap();
    let mut buf = [0u8; 512];
    assert!(sock.recv(&mut buf).is_err(), "a _MSG call gets no reply");
    eventually("LOCK_RES", || {
        !machine.state.results.lock().unwrap().is_empty()
    });
    let (procedure, args) = machine.state.results.lock().unwrap()[0].clone();
    assert_eq!(procedure, LOCK_RES);
    let (cookie, stat) = decode_res(&mut Decoder::new(&args)).unwrap();
    assert_eq!(
        (cookie.as_slice(), stat),
        (&b"msg-cookie"[..], Stat::Granted as u32)
    );
    assert_eq!(srv.service.nlm_status().locks, 1);
}

#[test]
fn nlm_and_nfs4_locks_and_shares_conflict_both_ways() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut sa = a.session("v4-client");
    let dir = a.mkdir(&mut sa, "d");
    let (fh, open) = a.open(&mut sa, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "oa");
    let clientid = sa.clientid;
    let r = a.on(&mut sa, &fh, |c| {
        c.lock_new(WRITE_LT, 0, 100, &open, clientid, b"lock-a");
    });
    assert_ok(&r);
    let v4_lock = r.last().unwrap().stateid().unwrap();
    let v3 = Client::new(&srv, "127.0.0.9:800");
    let nlm = |procedure: u32, args: &Encoder| -> (u32, Vec<u8>) {
        let mut e = rpc::encode_call(v3.next_xid(), NLM_PROGRAM, V4, procedure, &root_cred());
        e.buf.extend_from_slice(&args.buf);
        let reply = v3.send_record(&e.buf);
        let mut d = results(&reply);
        let _cookie = d.opaque(1024).unwrap();
        (d.u32().unwrap(), d.rest().to_vec())
    };
    let lock_args = |offset, len| {
        let mut e = Encoder::new();
        let a = LockArgs {
            cookie: vec![],
            block: false,
            exclusive: true,
            lock: lock_of("v3-host", &fh, 5, offset, len),
            reclaim: false,
            state: 1,
        };
        encode_lock_args(&mut e, V4, &a);
        e
    };
    // The v4 lock stops the v3 one, and TEST names it.
    assert_eq!(nlm(LOCK, &lock_args(50, 10)).0, Stat::Denied as u32);
    let mut t = Encoder::new();
    encode_test_args(
        &mut t,
        V4,
        &TestArgs {
            cookie: vec![],
            exclusive: false,
            lock: lock_of("v3-host", &fh, 5, 99, 1),
        },
    );
    let (stat, rest) = nlm(TEST, &t);
    assert_eq!(stat, Stat::Denied as u32);
    let holder = decode_holder(&mut Decoder::new(&rest), V4).unwrap();
    assert_eq!(
        (holder.exclusive, holder.offset, holder.len),
        (true, 0, 100)
    );
    assert_eq!(
        nlm(LOCK, &lock_args(100, 10)).0,
        Stat::Granted as u32,
        "beside it"
    );
    // The v3 lock stops v4 LOCK and LOCKT, with the range it holds.
    let r = a.on(&mut sa, &fh, |c| {
        c.lock_existing(WRITE_LT, 100, 1, &v4_lock);
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::Denied));
    let r = a.on(&mut sa, &fh, |c| {
        c.lockt(WRITE_LT, 105, 1, clientid, b"someone");
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::Denied));
    // Released on either side, the other gets its lock.
    let r = a.on(&mut sa, &fh, |c| {
        c.locku(WRITE_LT, &v4_lock, 0, 100);
    });
    assert_ok(&r);
    let v4_lock = r.last().unwrap().stateid().unwrap();
    assert_eq!(nlm(LOCK, &lock_args(50, 10)).0, Stat::Granted as u32);
    let mut u = Encoder::new();
    encode_unlock_args(
        &mut u,
        V4,
        &UnlockArgs {
            cookie: vec![],
            lock: lock_of("v3-host", &fh, 5, 0, 0),
        },
    );
    assert_eq!(nlm(UNLOCK, &u).0, Stat::Granted as u32);
    let r = a.on(&mut sa, &fh, |c| {
        c.lock_existing(WRITE_LT, 0, 200, &v4_lock);
    });
    assert_ok(&r);

    // The v4 open of f writes: an NLM share of f that denies writing is refused.
    let share = |fh: &[u8], mode: u32, access: u32, owner: &str| {
        let mut e = Encoder::new();
        encode_share_args(
            &mut e,
            &ShareArgs {
                cookie: vec![],
                caller_name: "v3-host".into(),
                fh: fh.to_vec(),
                oh: owner.as_bytes().to_vec(),
                mode,
                access,
                reclaim: false,
            },
        );
        e
    };
    assert_eq!(nlm(SHARE, &share(&fh, 2, 1, "s1")).0, Stat::Denied as u32);
    // g is open for reading only: the share is granted, and then stops a v4 OPEN
    // of g for writing until it is given back.
    let (g, _) = a.open(&mut sa, &dir, "g", SHARE_ACCESS_READ, SHARE_DENY_NONE, "og");
    assert_eq!(nlm(SHARE, &share(&g, 2, 1, "s1")).0, Stat::Granted as u32);
    let mut c = sa.compound();
    c.putfh(&dir).open(
        SHARE_ACCESS_WRITE,
        SHARE_DENY_NONE,
        clientid,
        b"writer",
        &nfs::v4::client::OpenHow::NoCreate,
        &nfs::v4::client::Claim::Null("g"),
    );
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::ShareDenied));
    assert_eq!(nlm(UNSHARE, &share(&g, 2, 1, "s1")).0, Stat::Granted as u32);
    let mut c = sa.compound();
    c.putfh(&dir).open(
        SHARE_ACCESS_WRITE,
        SHARE_DENY_NONE,
        clientid,
        b"writer",
        &nfs::v4::client::OpenHow::NoCreate,
        &nfs::v4::client::Claim::Null("g"),
    );
    assert_ok(&a.call(&c));
    assert_eq!(nlm(SHARE, &share(&g, 2, 1, "s2")).0, Stat::Denied as u32);
}

#[test]
fn bad_calls_get_clear_answers() {
    let srv = Server::new();
    let cl = Client::new(&srv, "127.0.0.9:800");
    let send = |version: u32, procedure: u32, args: &[u8]| -> Vec<u8> {
        let mut e = rpc::encode_call(cl.next_xid(), NLM_PROGRAM, version, procedure, &root_cred());
        e.buf.extend_from_slice(args);
        cl.send_record(&e.buf)
    };
    let accept_stat = |reply: &[u8]| u32::from_be_bytes(reply[20..24].try_into().unwrap());
    // Truncated arguments: GARBAGE_ARGS.
    assert_eq!(accept_stat(&send(V4, LOCK, &[0, 0, 0, 1])), 4);
    // A version that does not exist: PROG_MISMATCH 1..4.
    let r = send(2, NULL, &[]);
    assert_eq!(accept_stat(&r), 2);
    assert_eq!(r[24..32], [0, 0, 0, 1, 0, 0, 0, 4]);
    // SHARE is not in version 1; an unknown procedure is PROC_UNAVAIL.
    assert_eq!(accept_stat(&send(1, SHARE, &[])), 3);
    assert_eq!(accept_stat(&send(V4, 17, &[])), 3);
    // A handle that is not ours: STALE_FH in version 4, NOLOCKS in version 1.
    for (version, want) in [(V4, Stat::StaleFh as u32), (1, Stat::DeniedNoLocks as u32)] {
        let mut e = Encoder::new();
        let a = LockArgs {
            cookie: vec![1],
            block: false,
            exclusive: true,
            lock: lock_of("h", &[7; 40], 1, 0, 0),
            reclaim: false,
            state: 1,
        };
        encode_lock_args(&mut e, version, &a);
        let r = send(version, LOCK, &e.buf);
        let mut d = results(&r);
        d.opaque(8).unwrap();
        assert_eq!(d.u32().unwrap(), want, "version {version}");
    }
    // Locks on a directory are refused.
    let root = mount_handle(&cl);
    let mut e = Encoder::new();
    let a = LockArgs {
        cookie: vec![],
        block: false,
        exclusive: true,
        lock: lock_of("h", &root, 1, 0, 0),
        reclaim: false,
        state: 1,
    };
    encode_lock_args(&mut e, V4, &a);
    let r = send(V4, LOCK, &e.buf);
    let mut d = results(&r);
    d.opaque(8).unwrap();
    assert_eq!(d.u32().unwrap(), Stat::Failed as u32);
}

#[test]
fn version_1_locks_use_32_bit_ranges_and_meet_version_4_locks() {
    let srv = Server::new();
    let cl = Client::new(&srv, "127.0.0.9:800");
    let mut sa = cl.session("v4");
    let dir = cl.mkdir(&mut sa, "d");
    let (fh, _) = cl.open(&mut sa, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    let lock = |version: u32, name: &str, offset: u64, len: u64| -> u32 {
        let mut e = rpc::encode_call(cl.next_xid(), NLM_PROGRAM, version, LOCK, &root_cred());
        let a = LockArgs {
            cookie: vec![],
            block: false,
            exclusive: true,
            lock: lock_of(name, &fh, 1, offset, len),
            reclaim: false,
            state: 1,
        };
        encode_lock_args(&mut e, version, &a);
        let r = cl.send_record(&e.buf);
        let mut d = results(&r);
        d.opaque(8).unwrap();
        d.u32().unwrap()
    };
    // A version 1 lock of [4 GiB - 10, to the end) ...
    assert_eq!(lock(1, "old", u32::MAX as u64 - 9, 0), 0);
    // ... stops a version 4 lock far beyond 4 GiB (length 0 runs to the end).
    assert_eq!(lock(V4, "new", 1 << 40, 1), Stat::Denied as u32);
    assert_eq!(lock(V4, "new", 0, u32::MAX as u64 - 9), 0, "below it");
}

#[test]
fn a_client_that_restarted_loses_its_locks() {
    let srv = Server::new();
    let (a, b) = (
        Client::new(&srv, "127.0.0.2:800"),
        Client::new(&srv, "127.0.0.3:800"),
    );
    let mut s = a.session("v4");
    let dir = a.mkdir(&mut s, "d");
    let (fh, _) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    let lock = |cl: &Client<'_>, name: &str| -> u32 {
        let mut e = rpc::encode_call(cl.next_xid(), NLM_PROGRAM, V4, LOCK, &root_cred());
        let args = LockArgs {
            cookie: vec![],
            block: false,
            exclusive: true,
            lock: lock_of(name, &fh, 1, 0, 0),
            reclaim: false,
            state: 1,
        };
        encode_lock_args(&mut e, V4, &args);
        let r = cl.send_record(&e.buf);
        let mut d = results(&r);
        d.opaque(8).unwrap();
        d.u32().unwrap()
    };
    assert_eq!(lock(&a, "a"), 0);
    assert_eq!(lock(&b, "b"), Stat::Denied as u32);
    // SM_NOTIFY from the address of another machine changes nothing ...
    let notify = |cl: &Client<'_>, name: &str| {
        let mut e = rpc::encode_call(cl.next_xid(), NSM_PROGRAM, NSM_V1, 6, &Credential::None);
        e.opaque(name.as_bytes()).u32(3);
        let r = cl.send_record(&e.buf);
        results(&r).finish().unwrap();
    };
    notify(&b, "a");
    assert_eq!(lock(&b, "b"), Stat::Denied as u32);
    // ... from a's address, a's locks go.
    notify(&a, "a");
    assert_eq!(lock(&b, "b"), 0);
    // FREE_ALL (a client without a status monitor) does the same.
    let mut e = rpc::encode_call(b.next_xid(), NLM_PROGRAM, V4, FREE_ALL, &root_cred());
    e.opaque(b"b").u32(5);
    results(&b.send_record(&e.buf)).finish().unwrap();
    assert_eq!(lock(&a, "a"), 0);
}

#[test]
fn after_a_restart_monitored_clients_are_notified_and_only_reclaims_are_granted_in_grace() {
    let machine = client_machine();
    let state = tempfile::tempdir().unwrap();
    let (pool, datasets) = pool_with_share();
    let grace = Duration::from_secs(3);
    let srv = serve(pool, datasets, 1, Some(state.path()), grace, machine.port);
    let fh = create_file(srv.addr, "f");
    let first_state = srv.service.nlm_status().nsm_state;
    let mut a = Nlm::connect(srv.addr, "host-a");
    assert_eq!(a.lock(&fh, 1, 0, 10, false, false), Stat::Granted);
    assert_eq!(
        a.lock(&fh, 1, 0, 10, false, true),
        Stat::DeniedNoLocks,
        "a reclaim outside a grace period is refused"
    );
    assert!(machine.state.notified.lock().unwrap().is_empty());
    // The server goes (its lock table with it) and comes back on the same state.
    let Served {
        service,
        _tcp,
        _udp,
        _pool,
        datasets,
        ..
    } = srv;
    drop(a);
    _tcp.stop();
    drop(_udp);
    drop(service);
    let srv = serve(_pool, datasets, 2, Some(state.path()), grace, machine.port);
    let status = srv.service.nlm_status();
    assert_eq!(status.nsm_state, first_state + 2, "a new odd state number");
    assert!(status.in_grace);
    eventually("SM_NOTIFY", || {
        !machine.state.notified.lock().unwrap().is_empty()
    });
    let (name, state_number, from) = machine.state.notified.lock().unwrap()[0].clone();
    assert_eq!(
        name, "127.0.0.1",
        "the server's address as the client reaches it"
    );
    assert_eq!(state_number, status.nsm_state);
    assert_eq!(from.ip().to_string(), "127.0.0.1");
    // In grace: only reclaims, and no TEST.
    let mut a = Nlm::connect(srv.addr, "host-a");
    let mut b = Nlm::connect(srv.addr, "host-b");
    assert_eq!(b.lock(&fh, 2, 0, 10, false, false), Stat::DeniedGracePeriod);
    assert_eq!(b.test(&fh, 2, 0, 10).0, Stat::DeniedGracePeriod);
    assert_eq!(a.lock(&fh, 1, 0, 10, false, true), Stat::Granted);
    // After it, the reclaimed lock holds against others.
    eventually("the end of the grace period", || {
        !srv.service.nlm_status().in_grace
    });
    assert_eq!(b.lock(&fh, 2, 0, 10, false, false), Stat::Denied);
    assert_eq!(b.lock(&fh, 2, 10, 10, false, false), Stat::Granted);
}

#[test]
fn the_portmapper_lists_nlm_and_nsm_on_tcp_and_udp() {
    let srv = serve_fresh(1);
    let mut c = RpcClient::connect(srv.addr).unwrap();
    for (prog, vers, proto, want) in [
        (NLM_PROGRAM, 4, 6, srv.addr.port() as u32),
        (NLM_PROGRAM, 4, 17, srv.addr.port() as u32),
        (NLM_PROGRAM, 1, 17, srv.addr.port() as u32),
        (NSM_PROGRAM, 1, 17, srv.addr.port() as u32),
        (NFS_PROGRAM, 3, 17, 0),
        (NLM_PROGRAM, 2, 6, 0),
    ] {
        let mut e = Encoder::new();
        e.u32(prog).u32(vers).u32(proto).u32(0);
        let r = c.call(100000, 2, 3, &Credential::None, &e.buf).unwrap();
        assert_eq!(
            results(&r).u32().unwrap(),
            want,
            "GETPORT {prog} v{vers} proto {proto}"
        );
    }
    // By UDP too; NFS itself is not served by UDP.
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let call = rpc::encode_call(5, NFS_PROGRAM, 3, 0, &Credential::None);
    sock.send_to(&call.buf, srv.addr).unwrap();
    let mut buf = [0u8; 64];
    let n = sock.recv(&mut buf).unwrap();
    assert_eq!(n, 24);
    assert_eq!(buf[20..24], 1u32.to_be_bytes(), "PROG_UNAVAIL");
}
