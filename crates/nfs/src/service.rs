//! The NFS service: shares, MOUNT v3, NFSv3, a minimal portmapper, and the
//! duplicate-request cache, behind one RPC dispatcher.
//!
//! Every call is checked the same way before any work: the file handle must verify
//! under a pool's secret (else BADHANDLE), name a share that still exists and an
//! object of the same generation (else STALE), and the share's rules must admit the
//! client (else ACCES, or ROFS for a change on a read-only rule). Credentials are
//! squashed by those rules, and permission checks on access (read, write, search) are
//! done here with them: the filesystem checks ownership rules itself.
//!
//! A call refused for who or what it named, not for what the file system said (a
//! client no rule admits, a change under a read-only rule, a permission denied to a
//! squashed root or anyone else, a handle that fails its check, a MOUNT path that
//! leaves the exports) is logged and counted in Analytics as `nfs.refusals` with its
//! reason. The log keeps at most `REFUSALS_LOGGED_PER_SECOND` lines a second and then
//! says how many it left out, so a hostile client cannot flood it.
//!
//! Non-idempotent calls (SETATTR, WRITE, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR,
//! RENAME, LINK) go through the duplicate-request cache, keyed by client address,
//! xid, procedure and a fingerprint of the arguments: a retransmission of a finished
//! call gets the first reply again, and one of a call still running gets nothing (the
//! client retransmits again later).

use crate::exports::{Access, ExportRules, Refusal};
use crate::handle::{FileId, HandleKey};
use crate::proto::*;
use crate::rpc::Accept;
use crate::transport::{Call, ReadBuf, Reply, Service};
use crate::xdr::{Decoder, Encoder, XdrError, XdrResult};
use analytics::{Analytics, Event, NfsEvent, RefusalEvent};
use fs::{Attr, Cred, Filesystem, Kind, SetAttr, Timespec};
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// Largest READ and WRITE, and the preferred sizes (FSINFO).
pub const RTMAX: u32 = 1 << 20;
pub const WTMAX: u32 = 1 << 20;
pub const PREFERRED: u32 = 128 * 1024;
const DRC_ENTRIES: usize = 8192;
const REFUSALS_LOGGED_PER_SECOND: u32 = 20;

/// One shared filesystem.
pub struct Share {
    /// Pool the dataset lives in (handles are made under its secret).
    pub pool: String,
    /// The dataset, `pool/a/b`; clients mount `/pool/a/b` (or a directory below it).
    pub dataset: String,
    pub fs: Arc<Filesystem>,
    pub rules: ExportRules,
}

impl Share {
    pub fn path(&self) -> String {
        format!("/{}", self.dataset)
    }
}

/// What `shoal` shows about a share.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShareInfo {
    pub dataset: String,
    pub path: String,
    pub rules: String,
    pub read_only_dataset: bool,
}

/// An export as MOUNT EXPORT lists it, with the clients that mounted it (MOUNT DUMP).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExportInfo {
    pub path: String,
    pub rules: String,
    /// `host:path` of each client mount below this export, as the clients reported
    /// them (MNT adds, UMNT and UMNTALL remove; NFSv3 has no other way to know).
    pub mounts: Vec<String>,
}

/// A client's mount, for MOUNT DUMP.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct MountEntry {
    host: String,
    path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct DrcKey {
    client: IpAddr,
    xid: u32,
    procedure: u32,
    fingerprint: [u8; 16],
}

enum DrcEntry {
    Running,
    Done(Arc<Vec<u8>>),
}

#[derive(Default)]
struct Drc {
    entries: HashMap<DrcKey, DrcEntry>,
    order: VecDeque<DrcKey>,
}

pub struct NfsService {
    shares: RwLock<HashMap<(String, u64), Arc<Share>>>,
    keys: RwLock<Vec<(String, HandleKey)>>,
    write_verifier: [u8; 8],
    mounts: Mutex<BTreeSet<MountEntry>>,
    drc: Mutex<Drc>,
    /// The port NFS and MOUNT are served on (what the portmapper answers).
    nfs_port: Mutex<u16>,
    /// Where each NFSv3 call is reported; set once when the daemon starts.
    analytics: OnceLock<Arc<Analytics>>,
    refusal_log: Mutex<RefusalLog>,
}

/// The refusal log's budget: lines written in the current second, and those left out.
#[derive(Default)]
struct RefusalLog {
    second: u64,
    logged: u32,
    left_out: u64,
}

/// What the call being served touched, for its analytics event: the first file
/// handle it resolved, and a READ's or WRITE's size and offset. Per thread, because
/// a call runs start to finish on one worker thread.
#[derive(Clone, Copy, Default)]
struct Probe {
    fsid: u64,
    ino: u64,
    bytes: u32,
    offset: u64,
    /// Set when a handle or the export rules refused the call (the first reason wins).
    refusal: &'static str,
    /// The resolved handle's rules squashed a caller who said it was root.
    root_squashed: bool,
}

thread_local! {
    static PROBE: Cell<Probe> = Cell::new(Probe::default());
}

fn probe_update(f: impl FnOnce(&mut Probe)) {
    PROBE.with(|p| {
        let mut v = p.get();
        f(&mut v);
        p.set(v);
    });
}

enum Failure {
    /// Answer with this NFS status (and the procedure's failure results).
    Status(Status),
    /// The arguments did not decode.
    Garbage,
    /// Answering needs device I/O, and the call was tried on a thread that must not
    /// wait (`Service::call_cached`): nothing was done; a worker answers it.
    NotCached,
}

impl From<Status> for Failure {
    fn from(s: Status) -> Failure {
        Failure::Status(s)
    }
}

impl From<XdrError> for Failure {
    fn from(_: XdrError) -> Failure {
        Failure::Garbage
    }
}

impl From<fs::FsError> for Failure {
    fn from(e: fs::FsError) -> Failure {
        Failure::Status(Status::from(&e))
    }
}

/// A resolved handle.
struct Target {
    share: Arc<Share>,
    ino: u64,
    attr: Attr,
    access: Access,
    fsid: u64,
}

fn fsid_of(share: &Share) -> u64 {
    // The object set id, salted by the pool name so two pools never share an fsid.
    let h = blake3::hash(share.pool.as_bytes());
    let salt = u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap());
    share.fs.objset() ^ (salt & 0xffff_ffff_0000_0000)
}

/// NFSv3 procedure names by number (RFC 1813), for logs and analytics.
pub const PROCEDURE_NAMES: [&str; 22] = [
    "null",
    "getattr",
    "setattr",
    "lookup",
    "access",
    "readlink",
    "read",
    "write",
    "create",
    "mkdir",
    "symlink",
    "mknod",
    "remove",
    "rmdir",
    "rename",
    "link",
    "readdir",
    "readdirplus",
    "fsstat",
    "fsinfo",
    "pathconf",
    "commit",
];

const MAY_READ: u32 = 4;
const MAY_WRITE: u32 = 2;
const MAY_EXEC: u32 = 1;

/// Whether `cred` has all of `want` (rwx bits) on an object with `a`'s mode.
fn may(a: &Attr, cred: &Cred, want: u32) -> bool {
    if cred.uid == 0 {
        // Root may do anything but execute a file no one may execute.
        return want & MAY_EXEC == 0 || a.kind == Kind::Dir || a.perm & 0o111 != 0;
    }
    let bits = if cred.uid == a.uid {
        (a.perm >> 6) & 7
    } else if cred.gid == a.gid || cred.groups.contains(&a.gid) {
        (a.perm >> 3) & 7
    } else {
        a.perm & 7
    };
    bits & want == want
}

// ACCESS3 bits.
const ACCESS_READ: u32 = 0x01;
const ACCESS_LOOKUP: u32 = 0x02;
const ACCESS_MODIFY: u32 = 0x04;
const ACCESS_EXTEND: u32 = 0x08;
const ACCESS_DELETE: u32 = 0x10;
const ACCESS_EXECUTE: u32 = 0x20;

/// Arguments that are one file handle.
fn handle_only<'a>(d: &mut Decoder<'a>) -> XdrResult<&'a [u8]> {
    let fh = d.opaque(FHSIZE3)?;
    d.finish()?;
    Ok(fh)
}

/// Failure results that are a post_op_attr: the attributes seen before failing.
fn fail_attr(e: &mut Encoder, seen: &Option<(Attr, u64)>) {
    match seen {
        Some((a, fsid)) => post_op_attr(e, Some(a), *fsid),
        None => post_op_attr(e, None, 0),
    }
}

/// Failure results that are a wcc_data: nothing changed, so before is after.
fn fail_wcc(e: &mut Encoder, seen: &Option<(Attr, u64)>) {
    match seen {
        Some((a, fsid)) => wcc_data(e, Some(a), Some(a), *fsid),
        None => wcc_data(e, None, None, 0),
    }
}

/// Why a finished call counts as refused: what its handle or the rules said, else a
/// read-only refusal or a permission denied (to a squashed root, or to anyone).
fn refusal_reason(probe: &Probe, status: Option<u32>) -> Option<&'static str> {
    if !probe.refusal.is_empty() {
        return Some(probe.refusal);
    }
    match status? {
        s if s == Status::RoFs as u32 => Some("read_only"),
        s if s == Status::Acces as u32 || s == Status::Perm as u32 => {
            Some(if probe.root_squashed {
                "root_squashed"
            } else {
                "permission"
            })
        }
        _ => None,
    }
}

fn is_non_idempotent(procedure: u32) -> bool {
    matches!(procedure, 2 | 7 | 8 | 9 | 10 | 11 | 12 | 13 | 14 | 15)
}

impl NfsService {
    /// A service with no shares yet; `boot_nonce` makes the write verifier differ on
    /// every start (the time the server started, in nanoseconds, is a good one).
    pub fn new(boot_nonce: u64) -> NfsService {
        let h = blake3::hash(&boot_nonce.to_le_bytes());
        NfsService {
            shares: RwLock::new(HashMap::new()),
            keys: RwLock::new(Vec::new()),
            write_verifier: h.as_bytes()[..8].try_into().unwrap(),
            mounts: Mutex::new(BTreeSet::new()),
            drc: Mutex::new(Drc::default()),
            nfs_port: Mutex::new(2049),
            analytics: OnceLock::new(),
            refusal_log: Mutex::new(RefusalLog::default()),
        }
    }

    /// Reports every NFSv3 call to `analytics` from now on (the first one set stays).
    pub fn set_analytics(&self, analytics: Arc<Analytics>) {
        let _ = self.analytics.set(analytics);
    }

    /// The share with this fsid (as FSINFO and analytics give it).
    pub fn share_of_fsid(&self, fsid: u64) -> Option<Arc<Share>> {
        self.shares
            .read()
            .unwrap()
            .values()
            .find(|s| fsid_of(s) == fsid)
            .cloned()
    }

    pub fn set_nfs_port(&self, port: u16) {
        *self.nfs_port.lock().unwrap() = port;
    }

    pub fn write_verifier(&self) -> [u8; 8] {
        self.write_verifier
    }

    /// Handles of `pool` are made and checked under `key`.
    pub fn add_pool_key(&self, pool: &str, key: HandleKey) {
        let mut keys = self.keys.write().unwrap();
        keys.retain(|(p, _)| p != pool);
        keys.push((pool.to_string(), key));
    }

    pub fn add_share(&self, share: Share) {
        let key = (share.pool.clone(), share.fs.objset());
        self.shares.write().unwrap().insert(key, Arc::new(share));
    }

    /// Removes the share of `dataset`; its handles become stale.
    pub fn remove_share(&self, dataset: &str) -> bool {
        let mut shares = self.shares.write().unwrap();
        let before = shares.len();
        shares.retain(|_, s| s.dataset != dataset);
        shares.len() != before
    }

    pub fn is_shared(&self, dataset: &str) -> bool {
        self.shares
            .read()
            .unwrap()
            .values()
            .any(|s| s.dataset == dataset)
    }

    pub fn shares(&self) -> Vec<ShareInfo> {
        let mut v: Vec<ShareInfo> = self
            .shares
            .read()
            .unwrap()
            .values()
            .map(|s| ShareInfo {
                dataset: s.dataset.clone(),
                path: s.path(),
                rules: s.rules.to_string(),
                read_only_dataset: s.fs.props().readonly,
            })
            .collect();
        v.sort_by(|a, b| a.dataset.cmp(&b.dataset));
        v
    }

    /// Every export with the client mounts below it.
    pub fn exports(&self) -> Vec<ExportInfo> {
        let mounts = self.mounts.lock().unwrap().clone();
        self.shares()
            .into_iter()
            .map(|s| {
                let below = |p: &str| p == s.path || p.starts_with(&format!("{}/", s.path));
                ExportInfo {
                    mounts: mounts
                        .iter()
                        .filter(|m| below(&m.path))
                        .map(|m| format!("{}:{}", m.host, m.path))
                        .collect(),
                    path: s.path,
                    rules: s.rules,
                }
            })
            .collect()
    }

    fn handle_for(&self, share: &Share, attr: &Attr) -> Vec<u8> {
        let keys = self.keys.read().unwrap();
        let key = &keys
            .iter()
            .find(|(p, _)| *p == share.pool)
            .expect("a shared pool has a handle key")
            .1;
        key.encode(FileId {
            objset: share.fs.objset(),
            object: attr.ino,
            generation: attr.generation,
        })
        .to_vec()
    }

    /// Resolves a handle for a call from `call` (see the module comment).
    fn target(&self, call: &Call<'_>, fh: &[u8]) -> Result<Target, Status> {
        let refuse = |reason: &'static str| {
            probe_update(|p| {
                if p.refusal.is_empty() {
                    p.refusal = reason;
                }
            })
        };
        let (pool, id) = {
            let keys = self.keys.read().unwrap();
            keys.iter()
                .find_map(|(p, k)| k.decode(fh).map(|id| (p.clone(), id)))
                .ok_or_else(|| {
                    refuse("bad_handle");
                    Status::BadHandle
                })?
        };
        let share = self
            .shares
            .read()
            .unwrap()
            .get(&(pool, id.objset))
            .cloned()
            .ok_or(Status::Stale)?;
        let access = share
            .rules
            .access(call.peer, &call.header.credential)
            .map_err(|r| {
                refuse(r.reason());
                Status::Acces
            })?;
        let attr = share
            .fs
            .getattr_gen(id.object, id.generation)
            .map_err(|e| match e {
                fs::FsError::NotFound(_) => Status::Stale,
                e => Status::from(&e),
            })?;
        if attr.nlink == 0 && attr.kind == Kind::Dir {
            return Err(Status::Stale);
        }
        let fsid = fsid_of(&share);
        probe_update(|p| {
            if p.fsid == 0 {
                (p.fsid, p.ino) = (fsid, id.object);
                p.root_squashed = access.root_squashed;
            }
        });
        Ok(Target {
            fsid,
            share,
            ino: id.object,
            attr,
            access,
        })
    }

    fn drc_begin(&self, key: &DrcKey) -> Option<Option<Reply>> {
        let mut drc = self.drc.lock().unwrap();
        match drc.entries.get(key) {
            Some(DrcEntry::Running) => return Some(None),
            Some(DrcEntry::Done(bytes)) => {
                return Some(Some(Reply {
                    head: bytes.to_vec(),
                    data: None,
                }))
            }
            None => {}
        }
        drc.entries.insert(key.clone(), DrcEntry::Running);
        drc.order.push_back(key.clone());
        while drc.order.len() > DRC_ENTRIES {
            if let Some(old) = drc.order.pop_front() {
                if let Some(DrcEntry::Running) = drc.entries.get(&old) {
                    drc.order.push_back(old);
                    break;
                }
                drc.entries.remove(&old);
            }
        }
        None
    }

    fn drc_finish(&self, key: DrcKey, reply: &Reply) {
        let mut drc = self.drc.lock().unwrap();
        drc.entries
            .insert(key, DrcEntry::Done(Arc::new(reply.to_bytes())));
    }

    fn dispatch(&self, call: &Call<'_>) -> Reply {
        let h = &call.header;
        match (h.program, h.version) {
            (NFS_PROGRAM, NFS_V3) => self.nfs3(call),
            (NFS_PROGRAM, _) => Reply::new(call.reply(Accept::ProgMismatch {
                low: NFS_V3,
                high: NFS_V3,
            })),
            (MOUNT_PROGRAM, MOUNT_V3) => self.mount3(call),
            (MOUNT_PROGRAM, _) => Reply::new(call.reply(Accept::ProgMismatch {
                low: MOUNT_V3,
                high: MOUNT_V3,
            })),
            (PORTMAP_PROGRAM, PORTMAP_V2) => self.portmap(call),
            (PORTMAP_PROGRAM, _) => Reply::new(call.reply(Accept::ProgMismatch {
                low: PORTMAP_V2,
                high: PORTMAP_V2,
            })),
            _ => Reply::new(call.reply(Accept::ProgUnavail)),
        }
    }

    // ---- MOUNT v3 ----

    fn mount3(&self, call: &Call<'_>) -> Reply {
        let mut d = call.args();
        let r = match call.header.procedure {
            0 => Ok(call.reply(Accept::Success)),
            1 => self.mnt(call, &mut d),
            2 => {
                // DUMP: the mount list.
                let mut e = call.reply(Accept::Success);
                for m in self.mounts.lock().unwrap().iter() {
                    e.bool(true)
                        .opaque(m.host.as_bytes())
                        .opaque(m.path.as_bytes());
                }
                e.bool(false);
                Ok(e)
            }
            3 => (|| {
                let path = d.opaque(1024)?;
                d.finish()?;
                let host = call.peer.ip().to_string();
                let path = String::from_utf8_lossy(path).into_owned();
                self.mounts
                    .lock()
                    .unwrap()
                    .remove(&MountEntry { host, path });
                Ok(call.reply(Accept::Success))
            })(),
            4 => (|| {
                d.finish()?;
                let host = call.peer.ip().to_string();
                self.mounts.lock().unwrap().retain(|m| m.host != host);
                Ok(call.reply(Accept::Success))
            })(),
            5 => (|| {
                d.finish()?;
                let mut e = call.reply(Accept::Success);
                let mut shares: Vec<Arc<Share>> =
                    self.shares.read().unwrap().values().cloned().collect();
                shares.sort_by(|a, b| a.dataset.cmp(&b.dataset));
                for s in shares {
                    e.bool(true).opaque(s.path().as_bytes());
                    for r in &s.rules.rules {
                        e.bool(true).opaque(r.clients.to_string().as_bytes());
                    }
                    e.bool(false);
                }
                e.bool(false);
                Ok(e)
            })(),
            _ => return Reply::new(call.reply(Accept::ProcUnavail)),
        };
        match r {
            Ok(e) => Reply::new(e),
            Err(XdrError(_)) => Reply::new(call.reply(Accept::GarbageArgs)),
        }
    }

    /// MNT: the root handle of a share, or of a directory inside it.
    fn mnt(&self, call: &Call<'_>, d: &mut Decoder<'_>) -> XdrResult<Encoder> {
        let raw = d.opaque(1024)?;
        d.finish()?;
        let mut e = call.reply(Accept::Success);
        let path = String::from_utf8_lossy(raw).into_owned();
        match self.mount_path(call, &path) {
            Ok(fh) => {
                self.mounts.lock().unwrap().insert(MountEntry {
                    host: call.peer.ip().to_string(),
                    path,
                });
                e.u32(0).opaque(&fh);
                e.u32(2)
                    .u32(crate::rpc::AUTH_SYS)
                    .u32(crate::rpc::AUTH_NONE);
            }
            Err((stat, reason)) => {
                tracing::info!(peer = %call.peer, %path, ?stat, "mount refused");
                if let Some(reason) = reason {
                    self.refused(call, "mnt", reason, 0);
                }
                e.u32(stat);
            }
        }
        Ok(e)
    }

    /// mountstat3 values: NOENT 2, ACCES 13, NOTDIR 20, INVAL 22, NAMETOOLONG 63; with
    /// the refusal reason when the path or the client was refused.
    fn mount_path(
        &self,
        call: &Call<'_>,
        path: &str,
    ) -> Result<Vec<u8>, (u32, Option<&'static str>)> {
        let clean: Vec<&str> = path
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        if clean.contains(&"..") {
            return Err((13, Some("path_escape")));
        }
        let shares: Vec<Arc<Share>> = self.shares.read().unwrap().values().cloned().collect();
        // The share whose dataset is the longest prefix of the path.
        let (share, depth) = shares
            .iter()
            .filter_map(|s| {
                let parts: Vec<&str> = s.dataset.split('/').collect();
                (clean.len() >= parts.len() && clean[..parts.len()] == parts[..])
                    .then_some((s.clone(), parts.len()))
            })
            .max_by_key(|(_, n)| *n)
            .ok_or((2u32, Some("not_exported")))?;
        share
            .rules
            .access(call.peer, &call.header.credential)
            .map_err(|r: Refusal| (13u32, Some(r.reason())))?;
        let mut attr = share
            .fs
            .getattr(fs::filesystem::ROOT_INO)
            .map_err(|_| (5u32, None))?;
        for c in &clean[depth..] {
            if attr.kind != Kind::Dir {
                return Err((20, None));
            }
            attr = share
                .fs
                .lookup(attr.ino, c.as_bytes())
                .map_err(|e| match e {
                    fs::FsError::NotFound(_) => (2u32, None),
                    fs::FsError::NameTooLong => (63, None),
                    _ => (5, None),
                })?;
        }
        if attr.kind != Kind::Dir {
            return Err((20, None));
        }
        Ok(self.handle_for(&share, &attr))
    }

    // ---- portmapper v2 (GETPORT and DUMP only) ----

    fn portmap(&self, call: &Call<'_>) -> Reply {
        const IPPROTO_TCP: u32 = 6;
        let port = *self.nfs_port.lock().unwrap() as u32;
        let mut d = call.args();
        let r: XdrResult<Encoder> = match call.header.procedure {
            0 => Ok(call.reply(Accept::Success)),
            3 => (|| {
                let prog = d.u32()?;
                let vers = d.u32()?;
                let prot = d.u32()?;
                let _port = d.u32()?;
                d.finish()?;
                let served = prot == IPPROTO_TCP
                    && matches!(
                        (prog, vers),
                        (NFS_PROGRAM, NFS_V3) | (MOUNT_PROGRAM, MOUNT_V3)
                    );
                let mut e = call.reply(Accept::Success);
                e.u32(if served { port } else { 0 });
                Ok(e)
            })(),
            4 => (|| {
                d.finish()?;
                let mut e = call.reply(Accept::Success);
                for (prog, vers) in [(NFS_PROGRAM, NFS_V3), (MOUNT_PROGRAM, MOUNT_V3)] {
                    e.bool(true).u32(prog).u32(vers).u32(IPPROTO_TCP).u32(port);
                }
                e.bool(false);
                Ok(e)
            })(),
            _ => return Reply::new(call.reply(Accept::ProcUnavail)),
        };
        match r {
            Ok(e) => Reply::new(e),
            Err(_) => Reply::new(call.reply(Accept::GarbageArgs)),
        }
    }

    // ---- NFSv3 ----

    fn nfs3(&self, call: &Call<'_>) -> Reply {
        self.nfs3_answer(call, false)
            .expect("a call that may wait is always answered")
    }

    /// Answers an NFSv3 call; with `cached_only`, `None` (and nothing done or counted)
    /// when answering would wait on a device.
    fn nfs3_answer(&self, call: &Call<'_>, cached_only: bool) -> Option<Reply> {
        let procedure = call.header.procedure;
        if procedure > 21 {
            return Some(Reply::new(call.reply(Accept::ProcUnavail)));
        }
        let drc_key = is_non_idempotent(procedure).then(|| {
            let args = &call.record[call.header.args_at..];
            let mut h = blake3::Hasher::new();
            h.update(&(args.len() as u64).to_le_bytes());
            h.update(&args[..args.len().min(1024)]);
            DrcKey {
                client: call.peer.ip(),
                xid: call.header.xid,
                procedure,
                fingerprint: h.finalize().as_bytes()[..16].try_into().unwrap(),
            }
        });
        assert!(
            !(cached_only && drc_key.is_some()),
            "only idempotent calls are tried from cache"
        );
        if let Some(key) = &drc_key {
            if let Some(cached) = self.drc_begin(key) {
                // Still running (None): stay silent; the client will retransmit.
                return Some(cached.unwrap_or_default());
            }
        }
        PROBE.with(|p| p.set(Probe::default()));
        let (reply, status) = self.nfs3_procedure(call, procedure, cached_only)?;
        if let Some(key) = drc_key {
            self.drc_finish(key, &reply);
        }
        let probe = PROBE.with(|p| p.get());
        let op = PROCEDURE_NAMES[procedure as usize];
        if let Some(reason) = refusal_reason(&probe, status) {
            self.refused(call, op, reason, probe.fsid);
        }
        if let Some(a) = self.analytics.get() {
            let at = std::time::Instant::now();
            a.record(Event::Nfs(NfsEvent {
                op,
                client: call.peer.ip(),
                fsid: probe.fsid,
                ino: probe.ino,
                bytes: probe.bytes,
                offset: probe.offset,
                // With the 4-byte record marks.
                request_bytes: (call.record.len() + 4) as u32,
                reply_bytes: (reply.len() + 4) as u32,
                latency_ns: at.saturating_duration_since(call.received).as_nanos() as u64,
                at,
            }));
        }
        Some(reply)
    }

    /// Logs (within the budget) and counts a refused call.
    fn refused(&self, call: &Call<'_>, op: &'static str, reason: &'static str, fsid: u64) {
        let at = std::time::Instant::now();
        if let Some(a) = self.analytics.get() {
            a.record(Event::Refusal(RefusalEvent {
                reason,
                op,
                client: call.peer.ip(),
                fsid,
                at,
            }));
        }
        let second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut log = self.refusal_log.lock().unwrap();
        if log.second != second {
            if log.left_out > 0 {
                tracing::warn!(
                    left_out = log.left_out,
                    "more refused calls were not logged"
                );
            }
            *log = RefusalLog {
                second,
                ..RefusalLog::default()
            };
        }
        if log.logged < REFUSALS_LOGGED_PER_SECOND {
            log.logged += 1;
            let uid = match &call.header.credential {
                crate::rpc::Credential::Sys(a) => Some(a.uid),
                _ => None,
            };
            tracing::warn!(peer = %call.peer, op, reason, ?uid, "nfs call refused");
        } else {
            log.left_out += 1;
        }
    }

    /// Runs one NFSv3 procedure; returns its reply and the NFS status it answered
    /// (None for NULL and for undecodable arguments).
    /// `None` only with `cached_only`, when the procedure would wait on a device.
    fn nfs3_procedure(
        &self,
        call: &Call<'_>,
        procedure: u32,
        cached_only: bool,
    ) -> Option<(Reply, Option<u32>)> {
        let mut d = call.args();
        let mut e = call.reply(Accept::Success);
        let status_at = e.buf.len();
        let mut data = None;
        let r = match procedure {
            0 => d.finish().map_err(Failure::from),
            1 => self.getattr(call, &mut d, &mut e),
            2 => self.setattr(call, &mut d, &mut e),
            3 => self.lookup(call, &mut d, &mut e),
            4 => self.access(call, &mut d, &mut e),
            5 => self.readlink(call, &mut d, &mut e),
            6 => self.read(call, &mut d, &mut e, &mut data, cached_only),
            7 => self.write(call, &mut d, &mut e),
            8..=11 => self.create_kind(call, procedure, &mut d, &mut e),
            12 | 13 => self.remove(call, procedure == 13, &mut d, &mut e),
            14 => self.rename(call, &mut d, &mut e),
            15 => self.link(call, &mut d, &mut e),
            16 => self.readdir(call, false, &mut d, &mut e),
            17 => self.readdir(call, true, &mut d, &mut e),
            18 => self.fsstat(call, &mut d, &mut e),
            19 => self.fsinfo(call, &mut d, &mut e),
            20 => self.pathconf(call, &mut d, &mut e),
            21 => self.commit(call, &mut d, &mut e),
            _ => unreachable!("checked by the caller"),
        };
        if matches!(r, Err(Failure::NotCached)) {
            assert!(cached_only, "only a cached-only call can be sent on");
            return None;
        }
        let code = (procedure != 0 && r.is_ok())
            .then(|| e.buf.get(status_at..status_at + 4))
            .flatten()
            .map(|b| u32::from_be_bytes(b.try_into().unwrap()));
        if tracing::enabled!(tracing::Level::DEBUG) {
            let status = code.map(|code| {
                Status::from_code(code).map_or_else(|| code.to_string(), |s| format!("{s:?}"))
            });
            let uid = match &call.header.credential {
                crate::rpc::Credential::Sys(a) => Some(a.uid),
                _ => None,
            };
            tracing::debug!(
                peer = %call.peer,
                xid = call.header.xid,
                procedure = PROCEDURE_NAMES[procedure as usize],
                ?uid,
                status = status.as_deref().unwrap_or(if r.is_err() { "GARBAGE_ARGS" } else { "-" }),
                "nfs call"
            );
        }
        Some(match r {
            Ok(()) => (Reply { head: e.buf, data }, code),
            Err(Failure::Garbage) => (Reply::new(call.reply(Accept::GarbageArgs)), None),
            Err(Failure::Status(_)) => unreachable!("procedures encode their own failures"),
            Err(Failure::NotCached) => unreachable!("returned above"),
        })
    }

    /// Runs a procedure body; a failure status is encoded as the status followed by
    /// what `fail` writes (the procedure's failure results).
    fn outcome(
        e: &mut Encoder,
        r: Result<(), Failure>,
        fail: impl FnOnce(&mut Encoder),
    ) -> Result<(), Failure> {
        match r {
            Ok(()) => Ok(()),
            Err(Failure::Garbage) => Err(Failure::Garbage),
            Err(Failure::NotCached) => Err(Failure::NotCached),
            Err(Failure::Status(s)) => {
                e.u32(s as u32);
                fail(e);
                Ok(())
            }
        }
    }

    fn getattr(
        &self,
        call: &Call<'_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let fh = handle_only(d)?;
        let r = (|| {
            let t = self.target(call, fh)?;
            e.u32(0);
            fattr(e, &t.attr, t.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |_| {})
    }

    fn setattr(
        &self,
        call: &Call<'_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let s = decode_sattr(d)?;
        let guard = d.optional(decode_time)?;
        d.finish()?;
        let mut before: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            before = Some((t.attr.clone(), t.fsid));
            if t.access.read_only {
                return Err(Status::RoFs.into());
            }
            if let Some(g) = guard {
                if g != t.attr.ctime {
                    return Err(Status::NotSync.into());
                }
            }
            let cred = &t.access.cred;
            let owner = cred.uid == 0 || cred.uid == t.attr.uid;
            if s.size.is_some() && !owner && !may(&t.attr, cred, MAY_WRITE) {
                return Err(Status::Acces.into());
            }
            for time in [s.atime, s.mtime].into_iter().flatten() {
                let allowed = match time {
                    SetTime::ClientTime(_) => owner,
                    SetTime::ServerTime => owner || may(&t.attr, cred, MAY_WRITE),
                };
                if !allowed {
                    return Err(Status::Perm.into());
                }
            }
            let now = Timespec::now();
            let resolve = |t: Option<SetTime>| {
                t.map(|t| match t {
                    SetTime::ServerTime => now,
                    SetTime::ClientTime(c) => c,
                })
            };
            let set = SetAttr {
                perm: s.mode,
                uid: s.uid,
                gid: s.gid,
                size: s.size,
                atime: resolve(s.atime),
                mtime: resolve(s.mtime),
                ctime: None,
            };
            let after = t.share.fs.settle(t.share.fs.setattr(t.ino, &set, cred))?;
            e.u32(0);
            wcc_data(e, Some(&t.attr), Some(&after), t.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_wcc(e, &before))
    }

    fn lookup(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let (fh, name) = decode_diropargs(d)?;
        d.finish()?;
        let mut dir: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            dir = Some((t.attr.clone(), t.fsid));
            if t.attr.kind != Kind::Dir {
                return Err(Status::NotDir.into());
            }
            if name.len() > NAME_MAX {
                return Err(Status::NameTooLong.into());
            }
            if !may(&t.attr, &t.access.cred, MAY_EXEC) {
                return Err(Status::Acces.into());
            }
            let a = t.share.fs.lookup(t.ino, name)?;
            e.u32(0).opaque(&self.handle_for(&t.share, &a));
            post_op_attr(e, Some(&a), t.fsid);
            post_op_attr(e, Some(&t.attr), t.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_attr(e, &dir))
    }

    fn access(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let want = d.u32()?;
        d.finish()?;
        self.attr_query(call, fh, e, |t, e| {
            let c = &t.access.cred;
            let a = &t.attr;
            let mut got = 0;
            if may(a, c, MAY_READ) {
                got |= ACCESS_READ;
            }
            let writable = !t.access.read_only && !t.share.fs.props().readonly;
            if a.kind == Kind::Dir {
                if may(a, c, MAY_EXEC) {
                    got |= ACCESS_LOOKUP;
                }
                if writable && may(a, c, MAY_WRITE | MAY_EXEC) {
                    got |= ACCESS_MODIFY | ACCESS_EXTEND | ACCESS_DELETE;
                }
            } else {
                if writable && may(a, c, MAY_WRITE) {
                    got |= ACCESS_MODIFY | ACCESS_EXTEND;
                }
                if may(a, c, MAY_EXEC) {
                    got |= ACCESS_EXECUTE;
                }
            }
            e.u32(got & want);
            Ok(())
        })
    }

    fn readlink(
        &self,
        call: &Call<'_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let fh = handle_only(d)?;
        self.attr_query(call, fh, e, |t, e| {
            if t.attr.kind != Kind::Symlink {
                return Err(Status::Inval.into());
            }
            e.opaque(&t.share.fs.readlink(t.ino)?);
            Ok(())
        })
    }

    fn read(
        &self,
        call: &Call<'_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
        data: &mut Option<ReadBuf>,
        cached_only: bool,
    ) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let offset = d.u64()?;
        let count = d.u32()?;
        d.finish()?;
        let mut attr: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            attr = Some((t.attr.clone(), t.fsid));
            match t.attr.kind {
                Kind::File => {}
                Kind::Dir => return Err(Status::IsDir.into()),
                _ => return Err(Status::Inval.into()),
            }
            let c = &t.access.cred;
            // As knfsd: the owner may read what it may write, and execute-only
            // files may be read (the client enforces execute-only itself).
            if !(may(&t.attr, c, MAY_READ) || c.uid == t.attr.uid || may(&t.attr, c, MAY_EXEC)) {
                return Err(Status::Acces.into());
            }
            let count = count.min(RTMAX) as usize;
            let bytes = if cached_only {
                let cached = t.share.fs.read_parts_cached(t.ino, offset, count)?;
                cached.ok_or(Failure::NotCached)?
            } else {
                t.share.fs.read_parts(t.ino, offset, count)?
            };
            probe_update(|p| (p.bytes, p.offset) = (bytes.len() as u32, offset));
            let eof = offset.saturating_add(bytes.len() as u64) >= t.attr.size;
            e.u32(0);
            post_op_attr(e, Some(&t.attr), t.fsid);
            e.u32(bytes.len() as u32).bool(eof).u32(bytes.len() as u32);
            *data = Some(bytes);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_attr(e, &attr))
    }

    fn write(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let offset = d.u64()?;
        let count = d.u32()?;
        let stable = d.u32()?;
        let payload = d.opaque(WTMAX as usize)?;
        d.finish()?;
        if stable > 2 || count as usize != payload.len() {
            return Err(Failure::Garbage);
        }
        let mut before: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            before = Some((t.attr.clone(), t.fsid));
            if t.access.read_only {
                return Err(Status::RoFs.into());
            }
            match t.attr.kind {
                Kind::File => {}
                Kind::Dir => return Err(Status::IsDir.into()),
                _ => return Err(Status::Inval.into()),
            }
            let c = &t.access.cred;
            if !(may(&t.attr, c, MAY_WRITE) || c.uid == t.attr.uid) {
                return Err(Status::Acces.into());
            }
            let n = t.share.fs.write(t.ino, offset, payload)?;
            probe_update(|p| (p.bytes, p.offset) = (payload.len() as u32, offset));
            let committed = if stable == 0 {
                0
            } else {
                t.share.fs.fsync(t.ino)?;
                2 // FILE_SYNC: the intent log holds data and attributes
            };
            let after = t.share.fs.getattr(t.ino).ok();
            e.u32(0);
            wcc_data(e, Some(&t.attr), after.as_ref(), t.fsid);
            e.u32(n as u32).u32(committed).fixed(&self.write_verifier);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_wcc(e, &before))
    }

    /// CREATE (8), MKDIR (9), SYMLINK (10), MKNOD (11).
    fn create_kind(
        &self,
        call: &Call<'_>,
        procedure: u32,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let (fh, name) = decode_diropargs(d)?;
        enum How<'a> {
            File {
                guarded: bool,
                attrs: Sattr,
            },
            Exclusive([u8; 8]),
            Dir(Sattr),
            Symlink(Sattr, &'a [u8]),
            Node(Kind, Sattr, u64),
            /// MKNOD of a regular file, directory or symlink.
            BadType,
        }
        let how = match procedure {
            8 => match d.u32()? {
                0 => How::File {
                    guarded: false,
                    attrs: decode_sattr(d)?,
                },
                1 => How::File {
                    guarded: true,
                    attrs: decode_sattr(d)?,
                },
                2 => How::Exclusive(d.fixed(8)?.try_into().unwrap()),
                _ => return Err(Failure::Garbage),
            },
            9 => How::Dir(decode_sattr(d)?),
            10 => {
                let s = decode_sattr(d)?;
                How::Symlink(s, d.opaque(PATH_MAX)?)
            }
            _ => {
                let ft = d.u32()?;
                match kind_of(ft) {
                    Some(k @ (Kind::CharDev | Kind::BlockDev)) => {
                        let s = decode_sattr(d)?;
                        let major = d.u32()?;
                        let minor = d.u32()?;
                        How::Node(k, s, libc::makedev(major, minor))
                    }
                    Some(k @ (Kind::Socket | Kind::Fifo)) => How::Node(k, decode_sattr(d)?, 0),
                    Some(_) => How::BadType,
                    None => return Err(Failure::Garbage),
                }
            }
        };
        d.finish()?;
        let mut dir_before: Option<(Attr, u64)> = None;
        let mut dir_after: Option<Attr> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            dir_before = Some((t.attr.clone(), t.fsid));
            self.check_dir_change(&t, name)?;
            let fs = &t.share.fs;
            let cred = &t.access.cred;
            let (made, attrs) = match how {
                How::File { guarded, attrs } => {
                    let mode = attrs.mode.unwrap_or(0o644);
                    match fs.create(t.ino, name, Kind::File, mode, 0, cred) {
                        Ok(a) => (a, Some(attrs)),
                        Err(fs::FsError::Exists) if !guarded => {
                            // UNCHECKED: an existing file is opened (and truncated if
                            // a size is given).
                            let a = fs.lookup(t.ino, name)?;
                            if a.kind != Kind::File {
                                return Err(Status::Exist.into());
                            }
                            let only_size = Sattr {
                                size: attrs.size,
                                ..Sattr::default()
                            };
                            (a, Some(only_size))
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                How::Exclusive(verf) => {
                    // The verifier is kept in the new file's atime and mtime seconds
                    // until the client's SETATTR replaces them, so a retransmitted
                    // create finds its own file.
                    let va = u32::from_be_bytes(verf[0..4].try_into().unwrap()) as i64;
                    let vm = u32::from_be_bytes(verf[4..8].try_into().unwrap()) as i64;
                    match fs.create(t.ino, name, Kind::File, 0o600, 0, cred) {
                        Ok(a) => {
                            let stamp = SetAttr {
                                atime: Some(Timespec { sec: va, nsec: 0 }),
                                mtime: Some(Timespec { sec: vm, nsec: 0 }),
                                ..SetAttr::default()
                            };
                            (fs.setattr(a.ino, &stamp, &Cred::root())?, None)
                        }
                        Err(fs::FsError::Exists) => {
                            let a = fs.lookup(t.ino, name)?;
                            if a.kind == Kind::File && a.atime.sec == va && a.mtime.sec == vm {
                                (a, None)
                            } else {
                                return Err(Status::Exist.into());
                            }
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                How::Dir(attrs) => {
                    let mode = attrs.mode.unwrap_or(0o755);
                    (
                        fs.create(t.ino, name, Kind::Dir, mode, 0, cred)?,
                        Some(attrs),
                    )
                }
                How::Symlink(attrs, target) => {
                    if target.len() > PATH_MAX {
                        return Err(Status::NameTooLong.into());
                    }
                    (
                        fs.symlink(t.ino, name, target, cred)?,
                        Some(Sattr {
                            mode: None,
                            ..attrs
                        }),
                    )
                }
                How::BadType => return Err(Status::BadType.into()),
                How::Node(kind, attrs, rdev) => {
                    let mode = attrs.mode.unwrap_or(0o644);
                    (fs.create(t.ino, name, kind, mode, rdev, cred)?, Some(attrs))
                }
            };
            // Attributes beyond the mode given at creation (owner, size, times).
            let mut made = made;
            if let Some(s) = attrs {
                let set = SetAttr {
                    perm: None,
                    uid: s.uid,
                    gid: s.gid,
                    size: s.size.filter(|_| made.kind == Kind::File),
                    atime: s.atime.map(|t| match t {
                        SetTime::ServerTime => Timespec::now(),
                        SetTime::ClientTime(c) => c,
                    }),
                    mtime: s.mtime.map(|t| match t {
                        SetTime::ServerTime => Timespec::now(),
                        SetTime::ClientTime(c) => c,
                    }),
                    ctime: None,
                };
                if set.uid.is_some()
                    || set.gid.is_some()
                    || set.size.is_some()
                    || set.atime.is_some()
                    || set.mtime.is_some()
                {
                    made = fs.setattr(made.ino, &set, cred)?;
                }
            }
            fs.settle(Ok(()))?;
            dir_after = fs.getattr(t.ino).ok();
            e.u32(0);
            e.bool(true).opaque(&self.handle_for(&t.share, &made));
            post_op_attr(e, Some(&made), t.fsid);
            wcc_data(e, Some(&t.attr), dir_after.as_ref(), t.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |e| match &dir_before {
            Some((a, fsid)) => wcc_data(e, Some(a), dir_after.as_ref().or(Some(a)), *fsid),
            None => wcc_data(e, None, None, 0),
        })
    }

    /// A change of directory `t`'s entries: writable export, a directory, a legal
    /// name, and write and search permission.
    fn check_dir_change(&self, t: &Target, name: &[u8]) -> Result<(), Failure> {
        if t.access.read_only {
            return Err(Status::RoFs.into());
        }
        if t.attr.kind != Kind::Dir {
            return Err(Status::NotDir.into());
        }
        if name.len() > NAME_MAX {
            return Err(Status::NameTooLong.into());
        }
        if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
            return Err(Status::Inval.into());
        }
        if !may(&t.attr, &t.access.cred, MAY_WRITE | MAY_EXEC) {
            return Err(Status::Acces.into());
        }
        Ok(())
    }

    fn remove(
        &self,
        call: &Call<'_>,
        dir: bool,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let (fh, name) = decode_diropargs(d)?;
        d.finish()?;
        let mut before: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            before = Some((t.attr.clone(), t.fsid));
            if name == b"." || name == b".." {
                return Err(if dir { Status::Inval } else { Status::Acces }.into());
            }
            self.check_dir_change(&t, name)?;
            let fs = &t.share.fs;
            let r = if dir {
                fs.rmdir(t.ino, name, &t.access.cred)
            } else {
                fs.unlink(t.ino, name, &t.access.cred)
            };
            fs.settle(r)?;
            let after = fs.getattr(t.ino).ok();
            e.u32(0);
            wcc_data(e, Some(&t.attr), after.as_ref(), t.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_wcc(e, &before))
    }

    fn rename(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let (from_fh, from_name) = decode_diropargs(d)?;
        let (to_fh, to_name) = decode_diropargs(d)?;
        d.finish()?;
        let mut befores: [Option<(Attr, u64)>; 2] = [None, None];
        let r = (|| {
            let from = self.target(call, from_fh)?;
            befores[0] = Some((from.attr.clone(), from.fsid));
            let to = self.target(call, to_fh)?;
            befores[1] = Some((to.attr.clone(), to.fsid));
            if !Arc::ptr_eq(&from.share, &to.share) {
                return Err(Status::XDev.into());
            }
            for n in [from_name, to_name] {
                if n == b"." || n == b".." {
                    return Err(Status::Inval.into());
                }
            }
            self.check_dir_change(&from, from_name)?;
            self.check_dir_change(&to, to_name)?;
            let fs = &from.share.fs;
            fs.settle(fs.rename(
                from.ino,
                from_name,
                to.ino,
                to_name,
                false,
                &from.access.cred,
            ))?;
            let fa = fs.getattr(from.ino).ok();
            let ta = fs.getattr(to.ino).ok();
            e.u32(0);
            wcc_data(e, Some(&from.attr), fa.as_ref(), from.fsid);
            wcc_data(e, Some(&to.attr), ta.as_ref(), to.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |e| {
            for b in &befores {
                fail_wcc(e, b);
            }
        })
    }

    fn link(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let (dir_fh, name) = decode_diropargs(d)?;
        d.finish()?;
        let mut file_attr: Option<(Attr, u64)> = None;
        let mut dir_before: Option<Attr> = None;
        let r = (|| {
            let file = self.target(call, fh)?;
            file_attr = Some((file.attr.clone(), file.fsid));
            let dir = self.target(call, dir_fh)?;
            dir_before = Some(dir.attr.clone());
            if !Arc::ptr_eq(&file.share, &dir.share) {
                return Err(Status::XDev.into());
            }
            if file.attr.kind == Kind::Dir {
                return Err(Status::IsDir.into());
            }
            self.check_dir_change(&dir, name)?;
            let fs = &file.share.fs;
            let a = fs.settle(fs.link(file.ino, dir.ino, name, &dir.access.cred))?;
            let da = fs.getattr(dir.ino).ok();
            e.u32(0);
            post_op_attr(e, Some(&a), file.fsid);
            wcc_data(e, Some(&dir.attr), da.as_ref(), dir.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |e| {
            fail_attr(e, &file_attr);
            let fsid = file_attr.as_ref().map_or(0, |x| x.1);
            wcc_data(e, dir_before.as_ref(), dir_before.as_ref(), fsid);
        })
    }

    fn readdir(
        &self,
        call: &Call<'_>,
        plus: bool,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let cookie = d.u64()?;
        let _verifier = d.fixed(8)?;
        let (dircount, maxcount) = if plus {
            let dc = d.u32()?;
            (dc, d.u32()?)
        } else {
            let c = d.u32()?;
            (c, c)
        };
        d.finish()?;
        let mut dir: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            dir = Some((t.attr.clone(), t.fsid));
            if t.attr.kind != Kind::Dir {
                return Err(Status::NotDir.into());
            }
            if !may(&t.attr, &t.access.cred, MAY_READ) {
                return Err(Status::Acces.into());
            }
            let fsid = t.fsid;
            // Reply budget: the header and trailer take about 120 bytes.
            let max_reply = (maxcount as usize).clamp(512, RTMAX as usize);
            let max_dir = (dircount as usize).clamp(512, RTMAX as usize);
            let mut body = Encoder::new();
            let mut dir_bytes = 0usize;
            let mut at = cookie;
            let mut eof = false;
            let mut count = 0usize;
            'outer: loop {
                let batch = t.share.fs.readdir(t.ino, at, 256)?;
                if batch.is_empty() {
                    eof = true;
                    break;
                }
                for entry in batch {
                    let name_len = entry.name.len().div_ceil(4) * 4;
                    let entry_dir = 8 + 4 + name_len + 8;
                    let mut one = Encoder::new();
                    one.bool(true)
                        .u64(entry.ino)
                        .opaque(&entry.name)
                        .u64(entry.cookie);
                    if plus {
                        match t.share.fs.getattr(entry.ino) {
                            Ok(a) => {
                                post_op_attr(&mut one, Some(&a), fsid);
                                one.bool(true).opaque(&self.handle_for(&t.share, &a));
                            }
                            Err(_) => {
                                post_op_attr(&mut one, None, fsid);
                                one.bool(false);
                            }
                        }
                    }
                    if 120 + body.len() + one.len() > max_reply
                        || (plus && dir_bytes + entry_dir > max_dir)
                    {
                        break 'outer;
                    }
                    dir_bytes += entry_dir;
                    body.buf.extend_from_slice(&one.buf);
                    at = entry.cookie;
                    count += 1;
                }
            }
            if count == 0 && !eof {
                return Err(Status::TooSmall.into());
            }
            e.u32(0);
            post_op_attr(e, Some(&t.attr), fsid);
            e.fixed(&[0u8; 8]); // cookie verifier: cookies stay valid, so it never changes
            e.buf.extend_from_slice(&body.buf);
            e.bool(false).bool(eof);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_attr(e, &dir))
    }

    /// The shape of ACCESS, READLINK, FSSTAT, FSINFO and PATHCONF: a handle in;
    /// status, the object's attributes and `body`'s results out (on failure, no
    /// attributes).
    fn attr_query(
        &self,
        call: &Call<'_>,
        fh: &[u8],
        e: &mut Encoder,
        body: impl FnOnce(&Target, &mut Encoder) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        let r = (|| {
            let t = self.target(call, fh)?;
            let mut rest = Encoder::new();
            body(&t, &mut rest)?;
            e.u32(0);
            post_op_attr(e, Some(&t.attr), t.fsid);
            e.buf.extend_from_slice(&rest.buf);
            Ok(())
        })();
        Self::outcome(e, r, |e| post_op_attr(e, None, 0))
    }

    fn fsstat(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let fh = handle_only(d)?;
        self.attr_query(call, fh, e, |t, e| {
            let s = t.share.fs.statfs()?;
            e.u64(s.total_bytes)
                .u64(s.free_bytes)
                .u64(s.avail_bytes)
                .u64(s.files)
                .u64(s.free_files)
                .u64(s.free_files)
                .u32(0); // invarsec
            Ok(())
        })
    }

    fn fsinfo(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let fh = handle_only(d)?;
        self.attr_query(call, fh, e, |_, e| {
            e.u32(RTMAX).u32(PREFERRED).u32(4096);
            e.u32(WTMAX).u32(PREFERRED).u32(4096);
            e.u32(PREFERRED); // dtpref
            e.u64(fs::filesystem::MAX_FILE_SIZE);
            e.u32(0).u32(1); // time_delta: nanoseconds
            const FSF_LINK: u32 = 0x1;
            const FSF_SYMLINK: u32 = 0x2;
            const FSF_HOMOGENEOUS: u32 = 0x8;
            const FSF_CANSETTIME: u32 = 0x10;
            e.u32(FSF_LINK | FSF_SYMLINK | FSF_HOMOGENEOUS | FSF_CANSETTIME);
            Ok(())
        })
    }

    fn pathconf(
        &self,
        call: &Call<'_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let fh = handle_only(d)?;
        self.attr_query(call, fh, e, |_, e| {
            e.u32(fs::filesystem::MAX_LINKS)
                .u32(NAME_MAX as u32)
                .bool(true) // no_trunc
                .bool(true) // chown_restricted
                .bool(false) // case_insensitive
                .bool(true); // case_preserving
            Ok(())
        })
    }

    fn commit(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let _offset = d.u64()?;
        let _count = d.u32()?;
        d.finish()?;
        let mut before: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            before = Some((t.attr.clone(), t.fsid));
            if t.attr.kind != Kind::File {
                return Err(Status::Inval.into());
            }
            // The log is pool-wide: one commit makes every earlier write durable.
            t.share.fs.fsync(t.ino)?;
            e.u32(0);
            wcc_data(e, Some(&t.attr), Some(&t.attr), t.fsid);
            e.fixed(&self.write_verifier);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_wcc(e, &before))
    }
}

impl Service for NfsService {
    fn call(&self, call: &Call<'_>) -> Option<Reply> {
        let reply = self.dispatch(call);
        if reply.is_empty() {
            None
        } else {
            Some(reply)
        }
    }

    /// READs whose data, indirect blocks and dnode are in memory, and whose atime does
    /// not move: the streaming-from-cache case, answered without a thread hand-off.
    fn call_cached(&self, call: &Call<'_>) -> Option<Reply> {
        let h = &call.header;
        if (h.program, h.version, h.procedure) != (NFS_PROGRAM, NFS_V3, NFSPROC3_READ) {
            return None;
        }
        self.nfs3_answer(call, true).filter(|r| !r.is_empty())
    }
}
