//! Read and write delegations over real TCP connections (the back channel is the
//! client's own connection): a read-only open with a back channel gets a read
//! delegation, an open for writing of a file nobody else has open a write delegation;
//! a conflicting change by another client (for a write delegation: any read of it too,
//! by NFSv4 or NFSv3) is answered DELAY (JUKEBOX) while a CB_RECALL goes to the holder;
//! the holder's own work never waits; after DELEGRETURN the other client goes ahead; a
//! holder that never answers loses the delegation a lease after the recall, and
//! SEQUENCE tells it. An NFSv3 client's NLM lock recalls delegations as an NFSv4
//! LOCK does. Callbacks carry the credentials the client gave in CREATE_SESSION; an
//! open that wanted a delegation it does not get is told why (NONE_EXT).

mod common;

use nfs::rpc::{self, AuthSys, Credential};
use nfs::transport::{read_reply_record, RpcServer, LAST_FRAGMENT};
use nfs::v4::client::{
    decode_reply, ChannelAttrs, Claim, Compound, CompoundReply, OpenHow, Session, SetAttrs,
    Stateid, SHARE_ACCESS_BOTH, SHARE_ACCESS_READ, SHARE_DENY_NONE,
};
use nfs::v4::{op, Nfs4Error};
use nfs::xdr::{Decoder, Encoder};
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

const CONN_BACK_CHAN: u32 = 0x2;
/// OPEN4_SHARE_ACCESS_WANT_NO_DELEG.
const WANT_NO_DELEG: u32 = 0x0400;
const ATTR_SIZE: u32 = 4;

fn root() -> Credential {
    Credential::Sys(AuthSys {
        stamp: 0,
        machine: b"deleg-test".to_vec(),
        uid: 0,
        gid: 0,
        gids: vec![],
    })
}

/// One client on one connection, which is also its back channel.
struct Client {
    stream: TcpStream,
    xid: u32,
    session: Session,
    /// Callbacks received while waiting for replies: (xid, whole record).
    callbacks: Vec<(u32, Vec<u8>)>,
}

impl Client {
    fn connect(addr: std::net::SocketAddr, owner: &str) -> Client {
        Client::connect_minor(addr, owner, 1)
    }

    /// A client whose session is made by a COMPOUND of minor version `minor`.
    fn connect_minor(addr: std::net::SocketAddr, owner: &str, minor: u32) -> Client {
        Client::connect_full(addr, owner, minor, &[Credential::None]).expect("a back channel")
    }

    /// A client whose CREATE_SESSION asks callbacks to carry `cb_sec`; `None` when
    /// the server granted no back channel.
    fn connect_full(
        addr: std::net::SocketAddr,
        owner: &str,
        minor: u32,
        cb_sec: &[Credential],
    ) -> Option<Client> {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut c = Client {
            stream,
            xid: owner.len() as u32 * 1000,
            session: Session::new(0, [0; 16]),
            callbacks: Vec::new(),
        };
        let mut x = Compound::new("x");
        x.exchange_id(b"verifier", owner.as_bytes(), 0);
        let r = c.send(&x);
        let x = r.results[0].exchange_id().unwrap().clone();
        let mut cs = Compound::new("cs");
        cs.minor(minor).create_session_with_sec(
            x.clientid,
            x.seq,
            CONN_BACK_CHAN,
            &ChannelAttrs::fore(),
            &ChannelAttrs::back(),
            cb_sec,
        );
        let r = c.send(&cs);
        let made = r.results[0].create_session().unwrap().clone();
        c.session = Session::new(x.clientid, made.sessionid);
        let mut rc = c.session.compound();
        rc.reclaim_complete(false);
        assert_eq!(c.send(&rc).status, 0);
        (made.flags & CONN_BACK_CHAN == CONN_BACK_CHAN).then_some(c)
    }

    /// Sends a COMPOUND and waits for its reply, keeping callbacks that come first.
    fn send(&mut self, c: &Compound) -> CompoundReply {
        self.xid += 1;
        let record = c.record(self.xid, &root());
        let mark = (LAST_FRAGMENT | record.len() as u32).to_be_bytes();
        self.stream.write_all(&mark).unwrap();
        self.stream.write_all(&record).unwrap();
        loop {
            let rec = read_reply_record(&mut self.stream).unwrap();
            let mut d = Decoder::new(&rec);
            let xid = d.u32().unwrap();
            if d.u32().unwrap() == rpc::MSG_CALL {
                self.callbacks.push((xid, rec));
                continue;
            }
            assert_eq!(xid, self.xid);
            return decode_reply(&rec).unwrap();
        }
    }

    /// Answers a callback: CB_COMPOUND OK with CB_SEQUENCE and CB_RECALL results.
    fn answer_callback(&mut self, xid: u32) {
        let mut e = Encoder::new();
        e.u32(xid).u32(rpc::MSG_REPLY).u32(0).u32(0).u32(0).u32(0);
        e.u32(0).opaque(b"").u32(0); // status OK, tag, no results: enough for the test
        let mark = (LAST_FRAGMENT | e.buf.len() as u32).to_be_bytes();
        self.stream.write_all(&mark).unwrap();
        self.stream.write_all(&e.buf).unwrap();
    }

    /// Waits for a callback to arrive (reading with a no-op COMPOUND if none came yet).
    fn wait_callback(&mut self) -> (u32, Vec<u8>) {
        for _ in 0..200 {
            if let Some(cb) = self.callbacks.pop() {
                return cb;
            }
            std::thread::sleep(Duration::from_millis(10));
            let mut c = self.session.compound();
            c.putrootfh();
            self.send(&c);
        }
        panic!("no callback came");
    }

    /// DELEGRETURN of `deleg`, the delegation of `fh`.
    fn delegreturn(&mut self, fh: &[u8], deleg: &Stateid) -> CompoundReply {
        let mut c = self.session.compound();
        c.putfh(fh).delegreturn(deleg);
        self.send(&c)
    }

    /// Makes file `name` in `dir` with an open for writing that wants no delegation,
    /// then closes it.
    fn make(&mut self, dir: &[u8], name: &str) {
        let r = self.open(dir, name, SHARE_ACCESS_BOTH | WANT_NO_DELEG, b"maker");
        assert_eq!(r.status, 0, "{:?}", r.summary());
        let open = r.find(op::OPEN).unwrap().open().unwrap().clone();
        // OPEN_DELEGATE_NONE_EXT, WND4_NOT_WANTED (RFC 8881 18.16.3).
        assert_eq!(
            (open.delegation, open.why_none),
            (3, Some(0)),
            "an open that wants none gets none, and is told it did not want one"
        );
        let fh = r.last().unwrap().fh().unwrap().to_vec();
        let mut c = self.session.compound();
        c.putfh(&fh).close(&open.stateid);
        assert_eq!(self.send(&c).status, 0);
    }

    fn root_of_share(&mut self) -> Vec<u8> {
        let mut c = self.session.compound();
        c.putrootfh();
        for n in ["tank", "home", "share"] {
            c.lookup(n);
        }
        c.getfh();
        let r = self.send(&c);
        assert_eq!(r.status, 0, "{:?}", r.summary());
        r.last().unwrap().fh().unwrap().to_vec()
    }

    fn open(&mut self, dir: &[u8], name: &str, access: u32, owner: &[u8]) -> CompoundReply {
        let clientid = self.session.clientid;
        let mut c = self.session.compound();
        c.putfh(dir)
            .open(
                access,
                SHARE_DENY_NONE,
                clientid,
                owner,
                &OpenHow::Unchecked(SetAttrs::mode(0o644)),
                &Claim::Null(name),
            )
            .getfh();
        self.send(&c)
    }
}

/// The CB_RECALL in a CB_COMPOUND call record: the stateid it recalls.
fn recalled_stateid(record: &[u8]) -> Stateid {
    let header = rpc::decode_call(record).unwrap();
    let mut d = Decoder::new(&record[header.args_at..]);
    assert_eq!((header.version, header.procedure), (1, 1), "CB_COMPOUND");
    d.opaque(1024).unwrap(); // tag
    assert_eq!(d.u32().unwrap(), 1, "minor version of the holder's session");
    d.u32().unwrap(); // callback_ident
    assert_eq!(d.u32().unwrap(), 2, "two operations");
    assert_eq!(d.u32().unwrap(), 11, "CB_SEQUENCE");
    d.fixed(16).unwrap();
    for _ in 0..3 {
        d.u32().unwrap();
    }
    d.bool().unwrap();
    assert_eq!(d.u32().unwrap(), 0, "no referring calls");
    assert_eq!(d.u32().unwrap(), 4, "CB_RECALL");
    Stateid::decode(&mut d).unwrap()
}

fn serve(service: nfs::NfsService) -> (RpcServer, std::net::SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = RpcServer::start(vec![listener], Arc::new(service), 4).unwrap();
    let addr = server.local_addrs()[0];
    (server, addr)
}

/// A server on a fresh pool, clients A and B connected to it, and the share's root.
struct Two {
    _pool: Arc<pool::Pool>,
    _server: RpcServer,
    addr: std::net::SocketAddr,
    a: Client,
    b: Client,
    root: Vec<u8>,
}

impl Two {
    fn start() -> Two {
        let (pool, datasets) = common::pool_with_share();
        let (server, addr) = serve(common::service_for(&datasets, 1));
        let mut a = Client::connect(addr, "client-a");
        let b = Client::connect(addr, "client-b");
        let root = a.root_of_share();
        Two {
            _pool: pool,
            _server: server,
            addr,
            a,
            b,
            root,
        }
    }
}

#[test]
fn a_read_delegation_is_recalled_before_another_client_writes() {
    let Two {
        mut a, mut b, root, ..
    } = Two::start();
    // A makes the file (a write open gets no delegation), then opens it to read.
    a.make(&root, "f");
    let r = a.open(&root, "f", SHARE_ACCESS_READ, b"oa2");
    let open = r.find(op::OPEN).unwrap().open().unwrap().clone();
    assert_eq!(open.delegation, 1, "a read delegation");
    let deleg = open.delegation_stateid.unwrap();
    let fh = r.last().unwrap().fh().unwrap().to_vec();
    // B wants to write: DELAY, and A is called back with that delegation.
    let r = b.open(&root, "f", SHARE_ACCESS_BOTH, b"ob");
    assert_eq!(r.status, Nfs4Error::Delay as u32, "{:?}", r.summary());
    let (cb_xid, cb) = a.wait_callback();
    assert_eq!(recalled_stateid(&cb), deleg);
    a.answer_callback(cb_xid);
    // Still DELAY until A gives it back.
    let r = b.open(&root, "f", SHARE_ACCESS_BOTH, b"ob");
    assert_eq!(r.status, Nfs4Error::Delay as u32);
    let r = a.delegreturn(&fh, &deleg);
    assert_eq!(r.status, 0, "{:?}", r.summary());
    let r = b.open(&root, "f", SHARE_ACCESS_BOTH, b"ob");
    assert_eq!(r.status, 0, "{:?}", r.summary());
    // With a writer, nobody gets a read delegation.
    let r = a.open(&root, "f", SHARE_ACCESS_READ, b"oa3");
    assert_eq!(r.find(op::OPEN).unwrap().open().unwrap().delegation, 0);
}

#[test]
fn a_holder_that_never_returns_its_delegation_loses_it_a_lease_after_the_recall() {
    let (_pool, datasets) = common::pool_with_share();
    let service = common::service_for(&datasets, 1);
    service.set_v4_lease(Duration::from_millis(300));
    let (_server, addr) = serve(service);
    let mut a = Client::connect(addr, "client-a");
    let mut b = Client::connect(addr, "client-b");
    let root = a.root_of_share();
    a.make(&root, "f");
    let r = a.open(&root, "f", SHARE_ACCESS_READ, b"oa2");
    let deleg = r
        .find(op::OPEN)
        .unwrap()
        .open()
        .unwrap()
        .delegation_stateid
        .expect("a delegation");
    let r = b.open(&root, "f", SHARE_ACCESS_BOTH, b"ob");
    assert_eq!(r.status, Nfs4Error::Delay as u32);
    // A ignores the recall. A lease later B goes ahead.
    std::thread::sleep(Duration::from_millis(600));
    let r = b.open(&root, "f", SHARE_ACCESS_BOTH, b"ob");
    assert_eq!(r.status, 0, "{:?}", r.summary());
    // A learns that state was revoked, and its delegation stateid is expired.
    let mut c = a.session.compound();
    c.test_stateid(&[deleg]);
    let r = a.send(&c);
    assert_eq!(r.results[0].sequence().unwrap().status_flags & 0x10, 0x10);
    assert_eq!(
        r.last().unwrap().test_stateid().unwrap(),
        &[Nfs4Error::Expired as u32]
    );
}

fn getattr_size(c: &mut Client, fh: &[u8]) -> CompoundReply {
    let mut g = c.session.compound();
    g.putfh(fh).getattr(&[ATTR_SIZE]);
    c.send(&g)
}

/// An NFSv3 READ of `count` bytes at 0 of `fh` on a connection of its own: the
/// status (NFS3_OK 0, NFS3ERR_JUKEBOX 10008).
fn v3_read_status(addr: std::net::SocketAddr, fh: &[u8]) -> u32 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut e = rpc::encode_call(7, 100_003, 3, 6, &root());
    e.opaque(fh).u64(0).u32(4096);
    let mark = (LAST_FRAGMENT | e.buf.len() as u32).to_be_bytes();
    s.write_all(&mark).unwrap();
    s.write_all(&e.buf).unwrap();
    let rec = read_reply_record(&mut s).unwrap();
    let mut d = Decoder::new(&rec);
    assert_eq!(d.u32().unwrap(), 7, "xid");
    assert_eq!(d.u32().unwrap(), rpc::MSG_REPLY);
    assert_eq!(d.u32().unwrap(), 0, "accepted");
    d.u32().unwrap(); // verifier flavour
    d.opaque(400).unwrap();
    assert_eq!(d.u32().unwrap(), 0, "SUCCESS");
    d.u32().unwrap()
}

#[test]
fn a_write_delegation_serves_its_holder_and_is_recalled_before_anyone_else_reads() {
    let Two {
        addr,
        mut a,
        mut b,
        root,
        ..
    } = Two::start();
    // A creates the file for writing, alone: a write delegation.
    let r = a.open(&root, "w", SHARE_ACCESS_BOTH, b"oa");
    assert_eq!(r.status, 0, "{:?}", r.summary());
    let open = r.find(op::OPEN).unwrap().open().unwrap().clone();
    assert_eq!(open.delegation, 2, "a write delegation");
    let deleg = open.delegation_stateid.unwrap();
    let fh = r.last().unwrap().fh().unwrap().to_vec();
    // The holder writes on the delegation's stateid, stats, closes, and opens again
    // to read (the same open owner), never waiting on its own delegation.
    let mut c = a.session.compound();
    c.putfh(&fh)
        .write(&deleg, 0, 2, &[7u8; 100])
        .getattr(&[ATTR_SIZE])
        .close(&open.stateid);
    let r = a.send(&c);
    assert_eq!(r.status, 0, "{:?}", r.summary());
    let r = a.open(&root, "w", SHARE_ACCESS_READ, b"oa");
    assert_eq!(r.status, 0, "{:?}", r.summary());
    assert_eq!(r.find(op::OPEN).unwrap().open().unwrap().delegation, 0);
    let reopened = r.find(op::OPEN).unwrap().open().unwrap().stateid;
    let mut c = a.session.compound();
    c.putfh(&fh).close(&reopened);
    assert_eq!(a.send(&c).status, 0);
    assert!(
        a.callbacks.is_empty(),
        "no recall for the holder's own work"
    );
    // B asks for the size: DELAY, and A is called back. NFSv3 READs wait too, and
    // so does B's open to read.
    let r = getattr_size(&mut b, &fh);
    assert_eq!(r.status, Nfs4Error::Delay as u32, "{:?}", r.summary());
    let (cb_xid, cb) = a.wait_callback();
    assert_eq!(recalled_stateid(&cb), deleg);
    a.answer_callback(cb_xid);
    assert_eq!(v3_read_status(addr, &fh), 10008, "NFSv3 READ: JUKEBOX");
    let r = b.open(&root, "w", SHARE_ACCESS_READ, b"ob");
    assert_eq!(r.status, Nfs4Error::Delay as u32, "{:?}", r.summary());
    // The holder may still write back what it cached, then returns the delegation.
    let mut c = a.session.compound();
    c.putfh(&fh).write(&deleg, 100, 2, &[8u8; 28]);
    assert_eq!(
        a.send(&c).status,
        0,
        "the holder writes back during the recall"
    );
    let r = a.delegreturn(&fh, &deleg);
    assert_eq!(r.status, 0, "{:?}", r.summary());
    // Now B sees all the holder wrote, and NFSv3 reads it.
    let r = getattr_size(&mut b, &fh);
    assert_eq!(r.status, 0, "{:?}", r.summary());
    assert_eq!(
        r.find(op::GETATTR).unwrap().attrs().unwrap().size,
        Some(128)
    );
    assert_eq!(v3_read_status(addr, &fh), 0);
    let r = b.open(&root, "w", SHARE_ACCESS_READ, b"ob");
    assert_eq!(r.status, 0, "{:?}", r.summary());
}

#[test]
fn no_write_delegation_while_another_client_has_the_file_open() {
    let Two {
        mut a, mut b, root, ..
    } = Two::start();
    a.make(&root, "f");
    let r = b.open(&root, "f", SHARE_ACCESS_READ | WANT_NO_DELEG, b"ob");
    assert_eq!(r.status, 0, "{:?}", r.summary());
    let r = a.open(&root, "f", SHARE_ACCESS_BOTH, b"oa");
    assert_eq!(r.status, 0, "{:?}", r.summary());
    assert_eq!(r.find(op::OPEN).unwrap().open().unwrap().delegation, 0);
    // And none for an open that asks for none, even alone: it is told why
    // (OPEN_DELEGATE_NONE_EXT, WND4_NOT_WANTED).
    let r = a.open(&root, "g", SHARE_ACCESS_BOTH | WANT_NO_DELEG, b"oa");
    let open = r.find(op::OPEN).unwrap().open().unwrap().clone();
    assert_eq!((open.delegation, open.why_none), (3, Some(0)));
    // An open that wants a read delegation it cannot have is told so too
    // (WND4_CONTENTION: b has the file open).
    let r = b.open(&root, "f", SHARE_ACCESS_READ | 0x0100, b"ob2");
    let open = r.find(op::OPEN).unwrap().open().unwrap().clone();
    assert_eq!((open.delegation, open.why_none), (3, Some(1)));
}

/// One client with two caches of its own (Linux: two mounts with `nosharecache`)
/// opens through two open owners: the second owner's open recalls the first one's
/// write delegation, whose holder may have taken locks the server never saw.
#[test]
fn another_owner_of_the_same_client_recalls_its_write_delegation() {
    let (_pool, datasets) = common::pool_with_share();
    let (_server, addr) = serve(common::service_for(&datasets, 1));
    let mut a = Client::connect(addr, "client-a");
    let root = a.root_of_share();
    let r = a.open(&root, "l", SHARE_ACCESS_BOTH, b"mount-1");
    let open = r.find(op::OPEN).unwrap().open().unwrap().clone();
    assert_eq!(open.delegation, 2, "a write delegation");
    let deleg = open.delegation_stateid.unwrap();
    let fh = r.last().unwrap().fh().unwrap().to_vec();
    // The same owner opens again: no recall.
    let r = a.open(&root, "l", SHARE_ACCESS_READ, b"mount-1");
    assert_eq!(r.status, 0, "{:?}", r.summary());
    assert!(a.callbacks.is_empty());
    // Another owner: DELAY, and a recall of that delegation.
    let r = a.open(&root, "l", SHARE_ACCESS_BOTH, b"mount-2");
    assert_eq!(r.status, Nfs4Error::Delay as u32, "{:?}", r.summary());
    let (cb_xid, cb) = a.wait_callback();
    assert_eq!(recalled_stateid(&cb), deleg);
    a.answer_callback(cb_xid);
    // The holder hands its open over under the delegation (CLAIM_DELEG_CUR_FH) with
    // a third owner without waiting, then returns it, and the other owner goes ahead.
    let clientid = a.session.clientid;
    let mut c = a.session.compound();
    c.putfh(&fh).open(
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
        clientid,
        b"local-open",
        &OpenHow::NoCreate,
        &Claim::DelegCurFh(deleg),
    );
    let r = a.send(&c);
    assert_eq!(r.status, 0, "{:?}", r.summary());
    let r = a.delegreturn(&fh, &deleg);
    assert_eq!(r.status, 0, "{:?}", r.summary());
    let r = a.open(&root, "l", SHARE_ACCESS_BOTH, b"mount-2");
    assert_eq!(r.status, 0, "{:?}", r.summary());
    assert_eq!(
        r.find(op::OPEN).unwrap().open().unwrap().delegation,
        0,
        "no write delegation while another owner of the client has the file open"
    );
}

/// The minor version of a CB_COMPOUND call record.
fn callback_minor(record: &[u8]) -> u32 {
    let header = rpc::decode_call(record).unwrap();
    let mut d = Decoder::new(&record[header.args_at..]);
    d.opaque(1024).unwrap();
    d.u32().unwrap()
}

/// A client whose session is NFSv4.2's is called back in minor version 2: the
/// Linux client keeps a client per minor version and finds the session of a
/// CB_SEQUENCE among its own version's only (a recall in 1 is answered BADSESSION).
#[test]
fn a_recall_to_a_v42_session_is_a_v42_callback() {
    let (_pool, datasets) = common::pool_with_share();
    let (_server, addr) = serve(common::service_for(&datasets, 1));
    let mut a = Client::connect_minor(addr, "client-a", 2);
    let mut b = Client::connect(addr, "client-b");
    let root = a.root_of_share();
    a.make(&root, "f");
    let r = a.open(&root, "f", SHARE_ACCESS_READ, b"oa");
    assert_eq!(r.find(op::OPEN).unwrap().open().unwrap().delegation, 1);
    let r = b.open(&root, "f", SHARE_ACCESS_BOTH, b"ob");
    assert_eq!(r.status, Nfs4Error::Delay as u32, "{:?}", r.summary());
    let (_, cb) = a.wait_callback();
    assert_eq!(callback_minor(&cb), 2);
}

/// An NFSv3 client's NLM LOCK (no blocking) of `fh`, over its own connection: the
/// NLM status.
fn nlm_lock(addr: std::net::SocketAddr, fh: &[u8]) -> u32 {
    use nfs::nlm::proto::{encode_lock_args, Lock, LockArgs, LOCK, NLM_PROGRAM};
    let mut c = nfs::RpcClient::connect(addr).unwrap();
    let mut e = Encoder::new();
    let args = LockArgs {
        cookie: vec![],
        block: false,
        exclusive: true,
        lock: Lock {
            caller_name: "v3-host".into(),
            fh: fh.to_vec(),
            oh: b"oh".to_vec(),
            svid: 1,
            offset: 0,
            len: 0,
        },
        reclaim: false,
        state: 1,
    };
    encode_lock_args(&mut e, 4, &args);
    let reply = c.call(NLM_PROGRAM, 4, LOCK, &root(), &e.buf).unwrap();
    let mut d = Decoder::new(&reply[24..]);
    d.opaque(1024).unwrap();
    d.u32().unwrap()
}

#[test]
fn an_nlm_lock_recalls_a_delegation_and_is_granted_once_it_is_returned() {
    let Two {
        mut a, root, addr, ..
    } = Two::start();
    a.make(&root, "f");
    let r = a.open(&root, "f", SHARE_ACCESS_READ, b"oa2");
    let open = r.find(op::OPEN).unwrap().open().unwrap().clone();
    assert_eq!(open.delegation, 1, "a read delegation");
    let deleg = open.delegation_stateid.unwrap();
    let fh = r.last().unwrap().fh().unwrap().to_vec();
    // The v3 lock waits for the delegation: A is called back, returns it, and the
    // lock is granted.
    let locker = {
        let fh = fh.clone();
        std::thread::spawn(move || nlm_lock(addr, &fh))
    };
    let (cb_xid, cb) = a.wait_callback();
    assert_eq!(recalled_stateid(&cb), deleg);
    a.answer_callback(cb_xid);
    assert_eq!(a.delegreturn(&fh, &deleg).status, 0);
    assert_eq!(locker.join().unwrap(), 0, "NLM4_GRANTED");
    // Its control is the next test: a holder that never returns its delegation
    // keeps the v3 lock out, so the grant here came from the return.
}

#[test]
fn a_delegation_that_is_not_returned_keeps_an_nlm_lock_out() {
    let Two {
        mut a, root, addr, ..
    } = Two::start();
    a.make(&root, "f");
    let r = a.open(&root, "f", SHARE_ACCESS_READ, b"oa2");
    let open = r.find(op::OPEN).unwrap().open().unwrap().clone();
    assert_eq!(open.delegation, 1, "a read delegation");
    let fh = r.last().unwrap().fh().unwrap().to_vec();
    let locker = std::thread::spawn(move || nlm_lock(addr, &fh));
    let (cb_xid, _) = a.wait_callback();
    a.answer_callback(cb_xid);
    assert_eq!(
        locker.join().unwrap(),
        1,
        "NLM4_DENIED while the delegation is out"
    );
}

#[test]
fn no_delegation_while_an_nlm_lock_is_held_on_the_file() {
    let Two {
        mut a, root, addr, ..
    } = Two::start();
    a.make(&root, "f");
    let r = a.open(&root, "f", SHARE_ACCESS_READ, b"probe");
    let fh = r.last().unwrap().fh().unwrap().to_vec();
    let open = r.find(op::OPEN).unwrap().open().unwrap().clone();
    let deleg = open.delegation_stateid.unwrap();
    assert_eq!(a.delegreturn(&fh, &deleg).status, 0);
    assert_eq!(nlm_lock(addr, &fh), 0, "NLM4_GRANTED");
    // The holder of a delegation takes its locks in its own cache: it would never
    // meet the v3 lock. So neither kind is handed out while the lock is held.
    for (access, owner) in [
        (SHARE_ACCESS_READ, &b"oa2"[..]),
        (SHARE_ACCESS_BOTH, b"oa3"),
    ] {
        let r = a.open(&root, "f", access, owner);
        assert_eq!(r.status, 0, "{:?}", r.summary());
        assert_eq!(r.find(op::OPEN).unwrap().open().unwrap().delegation, 0);
    }
}

#[test]
fn callbacks_carry_the_credentials_the_client_gave() {
    let (pool, datasets) = common::pool_with_share();
    let (_server, addr) = serve(common::service_for(&datasets, 1));
    let _pool = pool;
    let sys = Credential::Sys(AuthSys {
        stamp: 7,
        machine: b"cb-test".to_vec(),
        uid: 4321,
        gid: 8765,
        gids: vec![1, 2],
    });
    // RPCSEC_GSS (unspoken here) first: the first flavor this server speaks counts.
    for (i, asked) in [
        vec![Credential::Other(6), sys.clone()],
        vec![Credential::None, sys.clone()],
    ]
    .into_iter()
    .enumerate()
    {
        let mut a = Client::connect_full(addr, &format!("holder-{i}"), 1, &asked).unwrap();
        let mut b = Client::connect(addr, &format!("writer-{i}"));
        let root = a.root_of_share();
        let name = format!("f{i}");
        a.make(&root, &name);
        let r = a.open(&root, &name, SHARE_ACCESS_READ, b"oa");
        assert_eq!(r.find(op::OPEN).unwrap().open().unwrap().delegation, 1);
        let r = b.open(&root, &name, SHARE_ACCESS_BOTH, b"ob");
        assert_eq!(r.status, Nfs4Error::Delay as u32);
        let (xid, cb) = a.wait_callback();
        a.answer_callback(xid);
        let header = rpc::decode_call(&cb).unwrap();
        let want = asked
            .iter()
            .find(|c| !matches!(c, Credential::Other(_)))
            .unwrap();
        assert_eq!(&header.credential, want, "case {i}");
    }
    // Only RPCSEC_GSS: no back channel, so no delegation.
    assert!(Client::connect_full(addr, "gss-only", 1, &[Credential::Other(6)]).is_none());
}
