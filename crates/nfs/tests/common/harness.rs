//! The NFSv4 protocol tests' harness: a service sharing `DATASET` on a pool of
//! simulated devices (`Server`), clients calling it from an address of their own
//! (`Client`) through `transport::answer_record`, the path every received record
//! takes, and the checks the tests share.

use super::{pool_with_share, service_for, DATASET};
use nfs::proto::{MOUNT_PROGRAM, MOUNT_V3};
use nfs::rpc::{self, AuthSys, Credential};
use nfs::transport::answer_record;
use nfs::v4::client::{
    self, decode_reply, ChannelAttrs, Claim, Compound, CompoundReply, OpenHow, Session, SetAttrs,
    Stateid,
};
use nfs::v4::{op, Nfs4Error};
use nfs::xdr::Decoder;
use nfs::{ExportRules, NfsService, Share};
use pool::Pool;
use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::Arc;

pub const COMPONENTS: [&str; 3] = ["tank", "home", "share"];

pub fn st(e: Nfs4Error) -> u32 {
    e as u32
}

pub fn cred(uid: u32) -> Credential {
    Credential::Sys(AuthSys {
        stamp: 0,
        machine: b"v4test".to_vec(),
        uid,
        gid: uid,
        gids: vec![],
    })
}

pub fn root_cred() -> Credential {
    cred(0)
}

/// A service sharing `tank/home/share` read-write to everyone, on a fresh pool.
pub struct Server {
    pub service: Arc<NfsService>,
    pub datasets: fs::Datasets,
    pub _pool: Arc<Pool>,
}

impl Server {
    pub fn new() -> Server {
        let (pool, datasets) = pool_with_share();
        let service = Arc::new(service_for(&datasets, 1));
        Server {
            service,
            datasets,
            _pool: pool,
        }
    }

    /// A restart: a new service (another boot) over the same pool, handle key and
    /// share, keeping its NFSv4 client list in `clients`.
    pub fn restart(&mut self, clients: &std::path::Path) {
        let service = Arc::new(service_for(&self.datasets, 2));
        // The old service goes first (its client list is written when it goes), as a
        // daemon stops before the next one starts.
        drop(std::mem::replace(&mut self.service, service));
        self.service
            .enable_v4_recovery(clients.to_path_buf())
            .unwrap();
    }

    /// Starts the service's threads (as a daemon does): what calls clients back on
    /// connections of its own (NFSv4.0 callbacks, NLM grants) needs them.
    pub fn start_threads(&self) {
        self.service
            .start_nlm(None, std::time::Duration::from_secs(1))
            .unwrap();
    }

    /// Creates `dataset` and shares it under `rules`.
    pub fn share(&self, dataset: &str, rules: &str) {
        self.datasets.create(dataset, &[]).unwrap();
        self.service.add_share(Share {
            pool: "tank".into(),
            dataset: dataset.into(),
            fs: self.datasets.open(dataset).unwrap(),
            rules: ExportRules::parse(rules).unwrap(),
            handle_identity: None,
        });
    }

    /// Client A and client B come from different addresses.
    pub fn client_a(&self) -> Client<'_> {
        Client::new(self, "127.0.0.1:700")
    }

    pub fn client_b(&self) -> Client<'_> {
        Client::new(self, "127.0.0.2:701")
    }
}

/// One client machine: its address, the user it calls as, and its xids.
pub struct Client<'a> {
    pub srv: &'a Server,
    pub peer: SocketAddr,
    pub cred: Credential,
    pub xid: Cell<u32>,
}

impl<'a> Client<'a> {
    pub fn new(srv: &'a Server, peer: &str) -> Client<'a> {
        Client {
            srv,
            peer: peer.parse().unwrap(),
            cred: root_cred(),
            xid: Cell::new(peer.len() as u32 * 1000),
        }
    }

    /// The same machine calling as user (and group) `uid`.
    pub fn with_user(mut self, uid: u32) -> Client<'a> {
        self.cred = cred(uid);
        self
    }

    pub fn next_xid(&self) -> u32 {
        self.xid.set(self.xid.get() + 1);
        self.xid.get()
    }

    /// The reply to a record, as bytes; the server must answer with the call's xid.
    pub fn send_record(&self, record: &[u8]) -> Vec<u8> {
        let reply = answer_record(
            &*self.srv.service,
            self.peer,
            record,
            analytics::Ticks::now(),
        )
        .expect("the server answers every call");
        let bytes = reply.to_bytes();
        assert_eq!(bytes[..4], record[..4], "a reply carries the call's xid");
        assert_eq!(bytes.len() % 4, 0, "a reply is whole XDR units");
        bytes
    }

    /// Sends a COMPOUND with a new xid: the reply's bytes and its decoding.
    pub fn call_bytes(&self, c: &Compound) -> (Vec<u8>, CompoundReply) {
        let record = c.record(self.next_xid(), &self.cred);
        let bytes = self.send_record(&record);
        let reply = decode_reply(&bytes)
            .unwrap_or_else(|e| panic!("reply to {:?} does not decode: {e}", names(c.ops())));
        (bytes, reply)
    }

    pub fn call(&self, c: &Compound) -> CompoundReply {
        self.call_bytes(c).1
    }

    /// Sends a COMPOUND that must succeed in full.
    pub fn ok(&self, c: &Compound) -> CompoundReply {
        let r = self.call(c);
        assert_ok(&r);
        r
    }

    pub fn exchange_id(&self, owner: &str) -> client::ExchangeIdRes {
        let mut c = Compound::new("exchange");
        c.exchange_id(b"verifier", owner.as_bytes(), 0);
        self.ok(&c).results[0].exchange_id().unwrap().clone()
    }

    /// EXCHANGE_ID, CREATE_SESSION and RECLAIM_COMPLETE, as a client mounts.
    pub fn session(&self, owner: &str) -> Session {
        let mut s = self.session_to_reclaim(owner);
        let mut c = s.compound();
        c.reclaim_complete(false);
        self.ok(&c);
        s
    }

    /// EXCHANGE_ID and CREATE_SESSION only: a client that has state to reclaim.
    pub fn session_to_reclaim(&self, owner: &str) -> Session {
        let x = self.exchange_id(owner);
        let mut c = Compound::new("create");
        c.create_session(
            x.clientid,
            x.seq,
            &ChannelAttrs::fore(),
            &ChannelAttrs::back(),
        );
        let cs = self.ok(&c).results[0].create_session().unwrap().clone();
        Session::new(x.clientid, cs.sessionid)
    }

    /// The share root's handle, by LOOKUPs from the pseudo root.
    pub fn share_root(&self, s: &mut Session) -> Vec<u8> {
        let mut c = s.compound();
        c.putrootfh();
        for name in COMPONENTS {
            c.lookup(name);
        }
        c.getfh();
        self.ok(&c).last().unwrap().fh().unwrap().to_vec()
    }

    /// A new directory `name` in the share's root: its handle.
    pub fn mkdir(&self, s: &mut Session, name: &str) -> Vec<u8> {
        let root = self.share_root(s);
        let mut c = s.compound();
        c.putfh(&root).mkdir(name, &SetAttrs::mode(0o755)).getfh();
        self.ok(&c).last().unwrap().fh().unwrap().to_vec()
    }

    /// OPEN `name` in `dir` (created if missing) for open owner `owner`: the file's
    /// handle and the open stateid.
    pub fn open(
        &self,
        s: &mut Session,
        dir: &[u8],
        name: &str,
        access: u32,
        deny: u32,
        owner: &str,
    ) -> (Vec<u8>, Stateid) {
        let mut c = s.compound();
        c.putfh(dir)
            .open(
                access,
                deny,
                s.clientid,
                owner.as_bytes(),
                &OpenHow::Unchecked(SetAttrs::mode(0o644)),
                &Claim::Null(name),
            )
            .getfh();
        let r = self.ok(&c);
        let stateid = r.find(op::OPEN).unwrap().stateid().unwrap();
        (r.last().unwrap().fh().unwrap().to_vec(), stateid)
    }

    /// A COMPOUND on `fh` of session `s`: SEQUENCE, PUTFH, then what `f` adds.
    pub fn on(&self, s: &mut Session, fh: &[u8], f: impl FnOnce(&mut Compound)) -> CompoundReply {
        let mut c = s.compound();
        c.putfh(fh);
        f(&mut c);
        self.call(&c)
    }
}

pub fn names(ops: &[u32]) -> Vec<&'static str> {
    ops.iter().map(|o| op::name(*o)).collect()
}

pub fn assert_ok(r: &CompoundReply) {
    assert!(
        r.status == 0 && r.results.iter().all(|x| x.ok()),
        "COMPOUND failed: {:?}",
        r.summary()
    );
}

/// The status of the last result, after asserting that every earlier one succeeded.
pub fn failed_with(r: &CompoundReply) -> u32 {
    let (last, before) = r.results.split_last().expect("a result");
    assert!(before.iter().all(|x| x.ok()), "{:?}", r.summary());
    assert_eq!(
        r.status, last.status,
        "the COMPOUND's status is its last op's"
    );
    last.status
}

/// MOUNT v3 of the share: the root handle NFSv3 clients get.
pub fn mount_handle(cl: &Client<'_>) -> Vec<u8> {
    let mut e = rpc::encode_call(cl.next_xid(), MOUNT_PROGRAM, MOUNT_V3, 1, &root_cred());
    e.opaque(format!("/{DATASET}").as_bytes());
    let reply = cl.send_record(&e.buf);
    let mut d = Decoder::new(&reply[24..]);
    assert_eq!(d.u32().unwrap(), 0, "MNT");
    d.opaque(64).unwrap().to_vec()
}
