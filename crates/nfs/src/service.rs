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

use crate::exports::{Access, ExportRules};
use crate::handle::{FileId, HandleKey};
use crate::rpc::Accept;
use crate::transport::{Call, Reply, Service};
use crate::v3::proto::*;
use crate::xdr::{Decoder, Encoder, XdrError, XdrResult};
use analytics::{Analytics, Event, RefusalEvent};
use fs::{Attr, Cred, Filesystem, Kind};
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// Largest READ and WRITE, and the preferred sizes (FSINFO).
pub const RTMAX: u32 = 1 << 20;
pub const WTMAX: u32 = 1 << 20;
pub const PREFERRED: u32 = 128 * 1024;
pub(crate) const DRC_ENTRIES: usize = 8192;
pub(crate) const REFUSALS_LOGGED_PER_SECOND: u32 = 20;

/// One shared filesystem.
pub struct Share {
    /// Pool the dataset lives in (handles are made under its secret).
    pub pool: String,
    /// The dataset, `pool/a/b`; clients mount `/pool/a/b` (or a directory below it).
    pub dataset: String,
    pub fs: Arc<Filesystem>,
    pub rules: ExportRules,
    /// Handles of this share are made as another appliance made them for the same
    /// filesystem (a replica serves its source's handles, so clients that fail over
    /// keep theirs); none = the pool's key and this dataset's object set id.
    pub handle_identity: Option<HandleIdentity>,
}

/// Whose handles a share makes: the key and the object set id written into them.
#[derive(Debug, Clone)]
pub struct HandleIdentity {
    pub key: HandleKey,
    pub objset: u64,
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
pub(crate) struct MountEntry {
    pub(crate) host: String,
    pub(crate) path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct DrcKey {
    pub(crate) client: IpAddr,
    pub(crate) xid: u32,
    pub(crate) procedure: u32,
    pub(crate) fingerprint: [u8; 16],
}

pub(crate) enum DrcEntry {
    Running,
    Done(Arc<Vec<u8>>),
}

#[derive(Default)]
pub(crate) struct Drc {
    pub(crate) entries: HashMap<DrcKey, DrcEntry>,
    pub(crate) order: VecDeque<DrcKey>,
    /// 4.0 COMPOUNDs running now (all of them: which change names is known only
    /// once they ran), so a retransmission of one is not run beside it.
    pub(crate) running_v40: std::collections::HashSet<DrcKey>,
}

/// The largest 4.0 reply the duplicate-request cache keeps.
pub(crate) const DRC_V40_REPLY_MAX: usize = 4096;

impl Drc {
    /// Keeps at most `DRC_ENTRIES`, oldest first out; a call still running stays
    /// (it goes to the back, and the trimming stops there).
    fn evict(&mut self) {
        while self.order.len() > DRC_ENTRIES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(DrcEntry::Running) = self.entries.get(&old) {
                self.order.push_back(old);
                break;
            }
            self.entries.remove(&old);
        }
    }
}

pub struct NfsService {
    pub(crate) shares: RwLock<HashMap<(String, u64), Arc<Share>>>,
    pub(crate) keys: RwLock<Vec<(String, HandleKey)>>,
    pub(crate) write_verifier: [u8; 8],
    pub(crate) mounts: Mutex<BTreeSet<MountEntry>>,
    pub(crate) drc: Mutex<Drc>,
    /// The port NFS and MOUNT are served on (what the portmapper answers).
    pub(crate) nfs_port: Mutex<u16>,
    /// The port MOUNT, NLM and NSM also answer datagrams on, if they do.
    pub(crate) udp_port: Mutex<Option<u16>>,
    /// Where each NFSv3 call is reported; set once when the daemon starts.
    pub(crate) analytics: OnceLock<Arc<Analytics>>,
    pub(crate) refusal_log: Mutex<RefusalLog>,
    /// NFSv4.1/4.2 clients, sessions, opens and locks.
    pub(crate) v4: crate::v4::session::V4Server,
    /// NLM's blocked locks and NSM's monitored clients (locks are in `v4`'s state).
    pub(crate) nlm: crate::nlm::Nlm,
    /// This service, for threads it starts (set by `start_nlm`).
    pub(crate) me: OnceLock<std::sync::Weak<NfsService>>,
}

/// The refusal log's budget: lines written in the current second, and those left out.
#[derive(Default)]
pub(crate) struct RefusalLog {
    pub(crate) second: u64,
    pub(crate) logged: u32,
    pub(crate) left_out: u64,
}

/// What the call being served touched, for its analytics event: the first file
/// handle it resolved, and a READ's or WRITE's size and offset. Per thread, because
/// a call runs start to finish on one worker thread.
#[derive(Clone, Copy, Default)]
pub(crate) struct Probe {
    pub(crate) fsid: u64,
    pub(crate) ino: u64,
    pub(crate) bytes: u32,
    pub(crate) offset: u64,
    /// Set when a handle or the export rules refused the call (the first reason wins).
    pub(crate) refusal: &'static str,
    /// The resolved handle's rules squashed a caller who said it was root.
    pub(crate) root_squashed: bool,
}

thread_local! {
    pub(crate) static PROBE: Cell<Probe> = Cell::new(Probe::default());
}

pub(crate) fn probe_update(f: impl FnOnce(&mut Probe)) {
    PROBE.with(|p| {
        let mut v = p.get();
        f(&mut v);
        p.set(v);
    });
}

pub(crate) enum Failure {
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
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) share: Arc<Share>,
    pub(crate) ino: u64,
    pub(crate) attr: Attr,
    pub(crate) access: Access,
    pub(crate) fsid: u64,
}

pub(crate) fn fsid_of(share: &Share) -> u64 {
    fsid_for(&share.pool, share.fs.objset())
}

/// The fsid of object set `objset` of pool `pool`: the object set id, salted by the
/// pool name so two pools never share an fsid.
pub fn fsid_for(pool: &str, objset: u64) -> u64 {
    let h = blake3::hash(pool.as_bytes());
    let salt = u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap());
    objset ^ (salt & 0xffff_ffff_0000_0000)
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

pub(crate) const MAY_READ: u32 = 4;
pub(crate) const MAY_WRITE: u32 = 2;
pub(crate) const MAY_EXEC: u32 = 1;

/// Whether `cred` has all of `want` (rwx bits) on an object with `a`'s mode.
pub(crate) fn may(a: &Attr, cred: &Cred, want: u32) -> bool {
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
pub(crate) const ACCESS_READ: u32 = 0x01;
pub(crate) const ACCESS_LOOKUP: u32 = 0x02;
pub(crate) const ACCESS_MODIFY: u32 = 0x04;
pub(crate) const ACCESS_EXTEND: u32 = 0x08;
pub(crate) const ACCESS_DELETE: u32 = 0x10;
pub(crate) const ACCESS_EXECUTE: u32 = 0x20;

/// The ACCESS bits (the same in NFSv3 and NFSv4) the caller of `t` has: from the
/// mode bits with the squashed credentials, and no change under a read-only rule or
/// on a read-only dataset.
pub(crate) fn access_bits(t: &Target) -> u32 {
    let (a, c) = (&t.attr, &t.access.cred);
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
    got
}

/// Arguments that are one file handle.
pub(crate) fn handle_only<'a>(d: &mut Decoder<'a>) -> XdrResult<&'a [u8]> {
    let fh = d.opaque(FHSIZE3)?;
    d.finish()?;
    Ok(fh)
}

/// Failure results that are a post_op_attr: the attributes seen before failing.
pub(crate) fn fail_attr(e: &mut Encoder, seen: &Option<(Attr, u64)>) {
    match seen {
        Some((a, fsid)) => post_op_attr(e, Some(a), *fsid),
        None => post_op_attr(e, None, 0),
    }
}

/// Failure results that are a wcc_data: nothing changed, so before is after.
pub(crate) fn fail_wcc(e: &mut Encoder, seen: &Option<(Attr, u64)>) {
    match seen {
        Some((a, fsid)) => wcc_data(e, Some(a), Some(a), *fsid),
        None => wcc_data(e, None, None, 0),
    }
}

/// Why a finished call counts as refused: what its handle or the rules said, else a
/// read-only refusal or a permission denied (to a squashed root, or to anyone).
pub(crate) fn refusal_reason(probe: &Probe, status: Option<u32>) -> Option<&'static str> {
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

pub(crate) fn is_non_idempotent(procedure: u32) -> bool {
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
            udp_port: Mutex::new(None),
            analytics: OnceLock::new(),
            refusal_log: Mutex::new(RefusalLog::default()),
            v4: crate::v4::session::V4Server::new(boot_nonce),
            nlm: crate::nlm::Nlm::new(),
            me: OnceLock::new(),
        }
    }

    /// The NFSv4 lease: a client silent for longer loses its state when another
    /// client conflicts with it, or once its courtesy is over too
    /// (`LEASE_SECONDS` unless set; tests shorten it).
    pub fn set_v4_lease(&self, lease: std::time::Duration) {
        self.v4.state.lock().unwrap().set_lease(lease);
        let seconds = lease.as_secs().clamp(1, u32::MAX as u64) as u32;
        self.v4
            .lease
            .store(seconds, std::sync::atomic::Ordering::Relaxed);
    }

    /// NFSv4 owners go out as `name@domain` (names from the host's passwd and group
    /// files, read now) instead of numbers.
    pub fn set_v4_id_domain(&self, domain: &str) {
        let map = crate::v4::attrs::IdMap::from_host(domain);
        *self.v4.names.write().unwrap() = Some(Arc::new(map));
    }

    /// How long past its lease a silent NFSv4 client keeps what it holds while no
    /// other client needs it (`[nfs] courtesy`; zero: not at all).
    pub fn set_v4_courtesy(&self, courtesy: std::time::Duration) {
        self.v4.state.lock().unwrap().set_courtesy(courtesy);
    }

    /// NFSv4 clients and what they hold, for `shoal status`.
    pub fn nfs4_status(&self) -> crate::v4::state::Nfs4Status {
        self.v4
            .state
            .lock()
            .unwrap()
            .status(std::time::Instant::now())
    }

    /// Lets go of every NFSv4 client silent past its lease and courtesy (the
    /// reaper's work, `start_v4_reaper`); how many went.
    pub fn reap_v4_clients(&self) -> usize {
        let (reaped, released) = self
            .v4
            .state
            .lock()
            .unwrap()
            .reap(std::time::Instant::now());
        crate::v4::state::release_all(released);
        reaped
    }

    /// Starts the thread that runs `reap_v4_clients` every second, so a lease runs
    /// out on time whether or not the client ever comes back. It ends with the
    /// service.
    pub fn start_v4_reaper(self: &Arc<Self>) -> std::io::Result<()> {
        let weak = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("nfs4-reaper".into())
            .spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                match weak.upgrade() {
                    Some(service) => {
                        service.reap_v4_clients();
                    }
                    None => return,
                }
            })?;
        Ok(())
    }

    /// Keeps the list of NFSv4 clients in `path` (in the state directory) and, if
    /// clients held state before this start, opens the grace period in which they
    /// reclaim it (a lease long).
    pub fn enable_v4_recovery(&self, path: std::path::PathBuf) -> std::io::Result<()> {
        let lease = std::time::Duration::from_secs(crate::v4::LEASE_SECONDS as u64);
        self.enable_v4_recovery_with_grace(path, lease)
    }

    /// `enable_v4_recovery` with a grace period of `grace` (`[nfs] grace_period`):
    /// 4.1 clients end it sooner when all have sent RECLAIM_COMPLETE; 4.0 clients
    /// have no way to, so with them it lasts all of `grace`.
    pub fn enable_v4_recovery_with_grace(
        &self,
        path: std::path::PathBuf,
        grace: std::time::Duration,
    ) -> std::io::Result<()> {
        let recovery = crate::v4::recovery::Recovery::open(path, grace)?;
        if recovery.grace_until.is_some() {
            tracing::info!(
                clients = recovery.reclaimable.len(),
                seconds = grace.as_secs(),
                "NFSv4 grace period: clients of the previous start may reclaim their state"
            );
        }
        self.v4.state.lock().unwrap().recovery = recovery;
        self.v4
            .grace_over
            .store(false, std::sync::atomic::Ordering::Release);
        Ok(())
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

    /// MOUNT, NLM and NSM answer datagrams on `port` (what the portmapper says).
    pub fn set_udp_port(&self, port: u16) {
        *self.udp_port.lock().unwrap() = Some(port);
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

    /// After a rollback of object set `objset` of `pool` (its filesystem paused, see
    /// `fs::Datasets::rollback_with`): revokes the NFSv4 state on the files that
    /// no longer exist (`gone`) and every delegation on the filesystem
    /// (`V4State::revoke_for_rollback`). Answers how many stateids were revoked.
    pub fn revoke_for_rollback(&self, pool: &str, objset: u64, gone: &[u64]) -> usize {
        let fsid = fsid_for(pool, objset);
        let (released, revoked) = self
            .v4
            .state
            .lock()
            .unwrap()
            .revoke_for_rollback(fsid, gone);
        crate::v4::state::release_all(released);
        if revoked > 0 {
            tracing::info!(pool, objset, revoked, "NFSv4 state revoked by a rollback");
        }
        revoked
    }

    /// The share of `dataset`, if it is shared.
    pub fn share_named(&self, dataset: &str) -> Option<Arc<Share>> {
        self.shares
            .read()
            .unwrap()
            .values()
            .find(|s| s.dataset == dataset)
            .cloned()
    }

    /// Whether some share's rules admit `peer` (only such hosts get NFSv4 client
    /// state, so nobody else can fill the client table).
    pub(crate) fn admits_any(&self, peer: IpAddr) -> bool {
        self.shares
            .read()
            .unwrap()
            .values()
            .any(|s| s.rules.rule_for(peer).is_some())
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

    pub(crate) fn handle_for(&self, share: &Share, attr: &Attr) -> Vec<u8> {
        self.file_handle(share, attr).to_vec()
    }

    /// `handle_for` without the allocation (handles are of one length).
    pub(crate) fn file_handle(
        &self,
        share: &Share,
        attr: &Attr,
    ) -> [u8; crate::handle::HANDLE_LEN] {
        if let Some(id) = &share.handle_identity {
            return id.key.encode(FileId {
                objset: id.objset,
                object: attr.ino,
                generation: attr.generation,
            });
        }
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
    }

    /// Resolves a handle for a call from `call` (see the module comment).
    pub(crate) fn target(&self, call: &Call<'_>, fh: &[u8]) -> Result<Target, Status> {
        let refuse = |reason: &'static str| {
            probe_update(|p| {
                if p.refusal.is_empty() {
                    p.refusal = reason;
                }
            })
        };
        let own = {
            let keys = self.keys.read().unwrap();
            keys.iter()
                .find_map(|(p, k)| k.decode(fh).map(|id| (p.clone(), id)))
        };
        let decoded = own.is_some();
        let (share, id) = {
            let shares = self.shares.read().unwrap();
            match own.and_then(|(pool, id)| Some((shares.get(&(pool, id.objset))?.clone(), id))) {
                Some(found) => found,
                // A handle another appliance made, served by a replica here.
                None => shares
                    .values()
                    .find_map(|s| {
                        let identity = s.handle_identity.as_ref()?;
                        let id = identity.key.decode(fh)?;
                        (id.objset == identity.objset).then(|| (s.clone(), id))
                    })
                    .ok_or_else(|| {
                        if !decoded {
                            refuse("bad_handle");
                            Status::BadHandle
                        } else {
                            Status::Stale
                        }
                    })?,
            }
        };
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

    pub(crate) fn drc_begin(&self, key: &DrcKey) -> Option<Option<Reply>> {
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
        drc.evict();
        None
    }

    /// A 4.0 COMPOUND about to run: its cached reply if it already ran
    /// (`Some(Some)`), or `Some(None)` if the same call is running now (the
    /// retransmission stays unanswered; the client sends it again); `None`: it runs,
    /// marked running until `drc_end_v40`.
    pub(crate) fn drc_begin_v40(&self, key: &DrcKey) -> Option<Option<Reply>> {
        let mut drc = self.drc.lock().unwrap();
        if let Some(DrcEntry::Done(bytes)) = drc.entries.get(key) {
            return Some(Some(Reply {
                head: bytes.to_vec(),
                data: None,
            }));
        }
        if !drc.running_v40.insert(key.clone()) {
            return Some(None);
        }
        None
    }

    /// A 4.0 COMPOUND ran: its reply is kept if it changed names and is small (a
    /// COMPOUND that also READ a megabyte is not worth a megabyte of cache).
    pub(crate) fn drc_end_v40(&self, key: DrcKey, reply: Option<&Reply>) {
        let mut drc = self.drc.lock().unwrap();
        drc.running_v40.remove(&key);
        let Some(reply) = reply.filter(|r| r.len() <= DRC_V40_REPLY_MAX) else {
            return;
        };
        let bytes = Arc::new(reply.to_bytes());
        if drc
            .entries
            .insert(key.clone(), DrcEntry::Done(bytes))
            .is_none()
        {
            drc.order.push_back(key);
            drc.evict();
        }
    }

    /// Keeps an NFSv3 call's reply (after `drc_begin`).
    pub(crate) fn drc_finish(&self, key: DrcKey, reply: &Reply) {
        let mut drc = self.drc.lock().unwrap();
        drc.entries
            .insert(key, DrcEntry::Done(Arc::new(reply.to_bytes())));
    }

    pub(crate) fn dispatch(&self, call: &Call<'_>) -> Reply {
        let h = &call.header;
        match (h.program, h.version) {
            (NFS_PROGRAM, NFS_V3) => self.nfs3(call),
            (NFS_PROGRAM, NFS_V4) => match h.procedure {
                0 => Reply::new(call.reply(Accept::Success)),
                1 => self.compound(call),
                _ => Reply::new(call.reply(Accept::ProcUnavail)),
            },
            (NFS_PROGRAM, _) => Reply::new(call.reply(Accept::ProgMismatch {
                low: NFS_V3,
                high: NFS_V4,
            })),
            (MOUNT_PROGRAM, MOUNT_V3) => self.mount3(call),
            (MOUNT_PROGRAM, _) => Reply::new(call.reply(Accept::ProgMismatch {
                low: MOUNT_V3,
                high: MOUNT_V3,
            })),
            (crate::nlm::proto::NLM_PROGRAM, _) => self.nlm(call),
            (crate::nlm::proto::NSM_PROGRAM, _) => self.nsm(call),
            (PORTMAP_PROGRAM, PORTMAP_V2) => self.portmap(call),
            (PORTMAP_PROGRAM, _) => Reply::new(call.reply(Accept::ProgMismatch {
                low: PORTMAP_V2,
                high: PORTMAP_V2,
            })),
            _ => Reply::new(call.reply(Accept::ProgUnavail)),
        }
    }

    pub(crate) fn refused(
        &self,
        call: &Call<'_>,
        op: &'static str,
        reason: &'static str,
        fsid: u64,
    ) {
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
        match (h.program, h.version, h.procedure) {
            (NFS_PROGRAM, NFS_V3, NFSPROC3_READ) => {
                self.nfs3_answer(call, true).filter(|r| !r.is_empty())
            }
            (NFS_PROGRAM, NFS_V4, 1) => self.compound_cached(call),
            _ => None,
        }
    }

    /// NFSv3 calls but READ (a miss reads from disk; cached READs are answered
    /// inline anyway) and COMMIT (may write a whole txg): v3 has no calls back to the
    /// client, and its other calls are small. NFSv4 COMPOUNDs likewise but those that
    /// start (after SEQUENCE and PUTFH) with READ or COMMIT
    /// (`v4::compound::may_run_inline`): no NFSv4 operation waits for a client, since
    /// a delegation recall goes out on a thread of its own while the operation that
    /// met the delegation answers DELAY at once.
    fn may_run_inline(&self, call: &Call<'_>) -> bool {
        let h = &call.header;
        match (h.program, h.version) {
            (NFS_PROGRAM, NFS_V3) => h.procedure != NFSPROC3_READ && h.procedure != NFSPROC3_COMMIT,
            (NFS_PROGRAM, NFS_V4) => crate::v4::compound::may_run_inline(call),
            _ => false,
        }
    }
}
