//! The fuzzing harness: a real `NfsService` sharing a filesystem of a pool on simulated
//! devices, and `Harness::run`, which turns arbitrary bytes into records and feeds them
//! through `transport::answer_record`, the path every received record takes.
//!
//! Used by the cargo-fuzz target (`fuzz/fuzz_targets/rpc_records.rs`, nightly) and by
//! the stable test `tests/decoder_fuzz.rs`, which runs the same harness in CI.
//!
//! Most random bytes die in the RPC header, so the first input byte picks a shape:
//! raw bytes as the whole record, or a well-formed call header (program, version,
//! procedure and credential chosen by the input) followed by a valid file handle of the
//! share (root directory, a file, a directory, a symlink, or a forged one) and then the rest of the
//! input as the procedure's arguments. NFSv4 gets a COMPOUND on the harness's own session
//! (SEQUENCE, PUTFH of one of those handles, then an operation chosen by the input with
//! the rest of the input as its arguments and as any operations after it). That way the fuzzer reaches every procedure's
//! argument decoder and the code behind it. Invariants checked on every reply: it
//! carries the call's xid, is a reply, and is a whole number of XDR units.

use crate::proto::{self, Sattr, MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};
use crate::rpc::{self, AuthSys, Credential};
use crate::service::{NfsService, Share};
use crate::transport::answer_record;
use crate::xdr::{Decoder, Encoder};
use crate::{ExportRules, HandleKey};
use pool::pool::{DeviceArg, TopArg};
use pool::{Pool, PoolOptions};
use std::net::SocketAddr;
use std::sync::Arc;
use vdev::{Layout, SimDevice};

fn sys(uid: u32, gid: u32, gids: Vec<u32>) -> Credential {
    Credential::Sys(AuthSys {
        stamp: 0,
        machine: b"fuzz".to_vec(),
        uid,
        gid,
        gids,
    })
}

/// A pool `name`: a mirror of two 64 MiB simulated devices, deterministic I/O, no
/// sync thread, a 16 MiB ARC (the fuzz harness's, and the NFS tests').
pub fn simulated_mirror(name: &str) -> Arc<Pool> {
    let devs: Vec<DeviceArg> = (0..2)
        .map(|i| DeviceArg {
            path: format!("sim{i}"),
            device: SimDevice::new(64 << 20, i),
        })
        .collect();
    let options = PoolOptions {
        arc_max_bytes: Some(16 << 20),
        sync_thread: false,
        deterministic_io: true,
        ..PoolOptions::default()
    };
    let top = TopArg {
        layout: Layout::Mirror,
        devices: devs,
    };
    Pool::create(name, vec![top], vec![], vec![], options).expect("a pool on simulated devices")
}

pub struct Harness {
    service: NfsService,
    /// The NFSv4 session the COMPOUND shapes run in (made anew if one destroys it).
    v4: std::sync::Mutex<crate::v4::client::Session>,
    /// Handles of the share's root, a file and a directory in it.
    handles: Vec<Vec<u8>>,
    peer: SocketAddr,
    _pool: Arc<Pool>,
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// A mirror of two 64 MiB simulated devices, dataset `fuzz/share` shared to
    /// everyone read-write, holding a file `f` (8 KiB) and a directory `d`.
    pub fn new() -> Harness {
        let pool = simulated_mirror("fuzz");
        let datasets = fs::Datasets::new(pool.clone()).unwrap();
        datasets.create("fuzz/share", &[]).unwrap();
        let service = NfsService::new(1);
        service.add_pool_key("fuzz", HandleKey::new([7; 32]));
        service.add_share(Share {
            pool: "fuzz".into(),
            dataset: "fuzz/share".into(),
            fs: datasets.open("fuzz/share").unwrap(),
            rules: ExportRules::parse("*(rw,no_root_squash)").unwrap(),
            handle_identity: None,
        });
        let mut h = Harness {
            service,
            v4: std::sync::Mutex::new(crate::v4::client::Session::new(0, [0; 16])),
            handles: vec![],
            peer: "127.0.0.1:700".parse().unwrap(),
            _pool: pool,
        };
        let root = h.mount("/fuzz/share");
        let file = h.make(&root, 8, "f");
        let dir = h.make(&root, 9, "d");
        let link = h.symlink(&root, "s", "f");
        h.write(&file, &[0x5a; 8192]);
        h.handles = vec![root, file, dir, link];
        *h.v4.lock().unwrap() = h.v4_session();
        h
    }

    /// EXCHANGE_ID and CREATE_SESSION, as a client mounts.
    fn v4_session(&self) -> crate::v4::client::Session {
        use crate::v4::client::{decode_reply, ChannelAttrs, Compound, Session};
        let send = |c: &Compound| {
            let bytes = self
                .check_reply(&c.record(1, &sys(0, 0, vec![])))
                .expect("a reply");
            decode_reply(&bytes).expect("a COMPOUND reply")
        };
        let mut c = Compound::new("fuzz");
        c.exchange_id(b"fuzzverf", b"fuzz-harness", 0);
        let x = send(&c).results[0]
            .exchange_id()
            .expect("EXCHANGE_ID")
            .clone();
        let mut c = Compound::new("fuzz");
        c.create_session(
            x.clientid,
            x.seq,
            &ChannelAttrs::fore(),
            &ChannelAttrs::back(),
        );
        let cs = send(&c).results[0]
            .create_session()
            .expect("CREATE_SESSION")
            .clone();
        Session::new(x.clientid, cs.sessionid)
    }

    /// SEQUENCE, PUTFH of a handle the input picks, then an operation the input picks
    /// with the rest of the input as its arguments (and whatever follows them).
    fn v4_record(&self, shape: u8, pick: u32, rest: &[u8]) -> Vec<u8> {
        use crate::v4::op;
        let mut c = {
            let mut s = self.v4.lock().unwrap();
            s.compound_with(pick & 1 != 0)
        };
        c.minor(1 + ((pick >> 1) & 1));
        let which = (shape >> 4) as usize % self.handles.len();
        c.putfh(&self.handles[which]);
        let mut opnum = op::ACCESS + ((pick >> 2) & 0x7f) % (op::CLONE - op::ACCESS + 1);
        if matches!(opnum, op::DESTROY_SESSION | op::DESTROY_CLIENTID) {
            opnum = op::GETATTR;
        }
        c.raw_op(opnum, rest);
        // Up to 7 operations more, whose bytes are the tail of the input.
        c.declare_ops(3 + ((pick >> 10) & 7));
        c.record(pick >> 8, &sys(0, 0, vec![]))
    }

    /// Valid handles: the share's root, file `f`, directory `d`, symlink `s`.
    pub fn handles(&self) -> &[Vec<u8>] {
        &self.handles
    }

    /// Feeds one input through the server; panics if a reply breaks an invariant.
    /// Returns the reply, if the server sent one.
    pub fn run(&self, input: &[u8]) -> Option<Vec<u8>> {
        let (&shape, rest) = input.split_first()?;
        let record = if shape & 3 == 0 {
            rest.to_vec()
        } else {
            self.shaped_record(shape, rest)
        };
        self.check_reply(&record)
    }

    fn shaped_record(&self, shape: u8, rest: &[u8]) -> Vec<u8> {
        let mut d = Decoder::new(rest);
        let pick = d.u32().unwrap_or(0);
        let (program, version) = match (shape >> 2) & 3 {
            0 if shape & 0x80 != 0 => return self.v4_record(shape, pick, d.rest()),
            0 | 1 => (NFS_PROGRAM, NFS_V3),
            2 => (MOUNT_PROGRAM, MOUNT_V3),
            _ if shape & 0x80 != 0 => return self.nlm_record(shape, pick, d.rest()),
            _ => (proto::PORTMAP_PROGRAM, proto::PORTMAP_V2),
        };
        let procedure = pick & 0x1f;
        let cred = match (pick >> 5) & 3 {
            0 | 1 => sys(0, 0, vec![]),
            2 => sys(1000, 1000, vec![1000, 10]),
            _ => Credential::None,
        };
        let mut e = rpc::encode_call(pick >> 8, program, version, procedure, &cred);
        if shape & 2 != 0 {
            let which = (shape >> 4) as usize % (self.handles.len() + 1);
            match self.handles.get(which) {
                Some(h) => e.opaque(h),
                None => {
                    // A forged handle: a real one with its last byte flipped.
                    let mut h = self.handles[0].clone();
                    *h.last_mut().unwrap() ^= 1;
                    e.opaque(&h)
                }
            };
        }
        e.fixed(d.rest());
        e.buf
    }

    /// An NLM call (version 1, 3 or 4, any procedure) shaped as LOCK's arguments
    /// begin: a cookie, two booleans, a caller name and a handle (valid or forged),
    /// then the input's bytes. No call back is ever made: NLM is not started here.
    fn nlm_record(&self, shape: u8, pick: u32, rest: &[u8]) -> Vec<u8> {
        let version = [1, 3, 4, 4][(pick as usize >> 5) & 3];
        let procedure = pick & 0x1f;
        let mut e = rpc::encode_call(
            pick >> 8,
            crate::nlm::proto::NLM_PROGRAM,
            version,
            procedure,
            &sys(0, 0, vec![]),
        );
        e.opaque(b"cookie")
            .bool(shape & 1 != 0)
            .bool(shape & 2 != 0);
        e.opaque(b"fuzz-host");
        let which = (shape >> 4) as usize % (self.handles.len() + 1);
        match self.handles.get(which) {
            Some(h) => e.opaque(h),
            None => e.opaque(&[0x5a; 40]),
        };
        e.fixed(rest);
        e.buf
    }

    fn check_reply(&self, record: &[u8]) -> Option<Vec<u8>> {
        let reply = answer_record(&self.service, self.peer, record, analytics::Ticks::now())?;
        let bytes = reply.to_bytes();
        assert_eq!(bytes.len() % 4, 0, "a reply must be whole XDR units");
        assert_eq!(bytes[..4], record[..4], "a reply must carry the call's xid");
        assert_eq!(
            u32::from_be_bytes(bytes[4..8].try_into().unwrap()),
            rpc::MSG_REPLY
        );
        Some(bytes)
    }

    fn call(&self, program: u32, version: u32, procedure: u32, args: &Encoder) -> Vec<u8> {
        let mut e = rpc::encode_call(1, program, version, procedure, &sys(0, 0, vec![]));
        e.fixed(&args.buf);
        let reply = self.check_reply(&e.buf).expect("a reply");
        // xid, REPLY, MSG_ACCEPTED, verifier (flavor, empty body), SUCCESS.
        let results = reply[24..].to_vec();
        assert_eq!(reply[20..24], [0; 4], "call accepted");
        results
    }

    fn mount(&self, path: &str) -> Vec<u8> {
        let mut args = Encoder::new();
        args.opaque(path.as_bytes());
        let r = self.call(MOUNT_PROGRAM, MOUNT_V3, 1, &args);
        let mut d = Decoder::new(&r);
        assert_eq!(d.u32().unwrap(), 0, "MNT {path}");
        d.opaque(proto::FHSIZE3).unwrap().to_vec()
    }

    /// CREATE (8) or MKDIR (9) `name` in `dir`; returns the new object's handle.
    fn make(&self, dir: &[u8], procedure: u32, name: &str) -> Vec<u8> {
        let mut args = Encoder::new();
        args.opaque(dir).opaque(name.as_bytes());
        if procedure == 8 {
            args.u32(0); // UNCHECKED
        }
        let attrs = Sattr {
            mode: Some(0o755),
            ..Sattr::default()
        };
        proto::encode_sattr(&mut args, &attrs);
        let r = self.call(NFS_PROGRAM, NFS_V3, procedure, &args);
        let mut d = Decoder::new(&r);
        assert_eq!(d.u32().unwrap(), 0, "making {name}");
        assert!(d.bool().unwrap(), "a handle for {name}");
        d.opaque(proto::FHSIZE3).unwrap().to_vec()
    }

    fn symlink(&self, dir: &[u8], name: &str, target: &str) -> Vec<u8> {
        let mut args = Encoder::new();
        args.opaque(dir).opaque(name.as_bytes());
        proto::encode_sattr(&mut args, &Sattr::default());
        args.opaque(target.as_bytes());
        let r = self.call(NFS_PROGRAM, NFS_V3, 10, &args);
        let mut d = Decoder::new(&r);
        assert_eq!(d.u32().unwrap(), 0, "making symlink {name}");
        assert!(d.bool().unwrap(), "a handle for {name}");
        d.opaque(proto::FHSIZE3).unwrap().to_vec()
    }

    fn write(&self, file: &[u8], data: &[u8]) {
        let mut args = Encoder::new();
        args.opaque(file)
            .u64(0)
            .u32(data.len() as u32)
            .u32(2) // FILE_SYNC
            .opaque(data);
        let r = self.call(NFS_PROGRAM, NFS_V3, 7, &args);
        assert_eq!(r[..4], [0; 4], "WRITE");
    }
}
