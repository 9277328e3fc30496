//! What the server remembers of NFSv4.1 clients: client IDs, sessions and their slots
//! (the reply cache), opens with their share reservations, and byte-range locks.
//!
//! All of it sits behind one mutex in `NfsService`, held only for table work, never
//! across file system calls: an operation takes what it needs, drops the lock, does its
//! I/O, and comes back to record the outcome. Opens keep their file open in the
//! filesystem (`Filesystem::opened`), so a file removed while open stays readable until
//! its last CLOSE; whoever drops an open gets a `Release` back and must call
//! `Filesystem::released` for it after letting go of the lock.
//!
//! Stateids and client IDs carry this boot's number, so after a restart every old one
//! is refused (BAD_STATEID, STALE_CLIENTID) and clients establish new state; nothing of
//! this is on disk yet. Leases are courteous: a client that stopped renewing keeps its
//! state until another client conflicts with it (then its state is revoked: its
//! stateids answer EXPIRED) or until its courtesy runs out too (`reap`: then the
//! client and all it held are let go).
//!
//! Delegations: a client opening a file only to read it may get a read delegation
//! (`grant_read_deleg`) when it has a back channel and nobody writes the file; any
//! change to the file by anyone (NFSv3 included), and any byte-range lock, first
//! recalls it (`break_delegations`: CB_RECALL, and DELAY for the change until the
//! holder returns it or its lease runs out after the recall, when it is revoked).
//! A client opening a file to write may get a write delegation (`grant_write_deleg`)
//! when it has a back channel and is the file's only opener; then a read by anyone
//! else (an open, a READ, a GETATTR of size or change, an NFSv3 READ) recalls it too
//! (`break_write_delegations`), and the holder's own changes never do.
//!
//! NFSv3 clients' NLM locks and share reservations are kept here too, in the same
//! per-file tables, so every protocol sees every other's locks (`nlm.rs`).
//!
//! Here: the types, client IDs, sessions, leases and their expiry; opens and share
//! reservations are in `opens.rs`, the delegation table in `delegs.rs`, the
//! byte-range lock table in `locks.rs`, NLM hosts in `nlm.rs`, NFSv4.0's owner
//! sequences and callback paths in `minor0.rs` (all `impl V4State`).
//!
//! Bounds: `MAX_CLIENTS` client records (a new one past that evicts the least recently
//! renewed client that holds no state), `MAX_SLOTS` slots a session, `MAX_SESSIONS_PER_CLIENT`
//! sessions a client, `MAX_LOCKS_PER_FILE` lock ranges a file.

use super::recovery::Recovery;
use super::{Nfs4Error, OpResult, LEASE_SECONDS};

/// How long past its lease a silent client keeps what it holds while nobody else
/// needs it, unless `[nfs] courtesy` says otherwise: a day, as the Linux server
/// keeps its courtesy clients, so a client cut off for a night's network outage
/// keeps its opens and locks.
pub const DEFAULT_COURTESY: Duration = Duration::from_secs(24 * 3600);
use fs::Filesystem;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod delegs;
mod locks;
mod minor0;
mod nlm;
mod opens;

pub use nlm::{svid_of_owner, NlmHost, NlmShare};

pub const MAX_CLIENTS: usize = 4096;
pub const MAX_SESSIONS_PER_CLIENT: usize = 16;
pub const MAX_LOCKS_PER_FILE: usize = 4096;
pub const MAX_DELEGATIONS: usize = 100_000;

/// share_access and share_deny bits.
pub const SHARE_READ: u32 = 1;
pub const SHARE_WRITE: u32 = 2;

/// stateid4
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stateid {
    pub seqid: u32,
    pub other: [u8; 12],
}

impl Stateid {
    pub const CURRENT: Stateid = Stateid {
        seqid: 1,
        other: [0; 12],
    };
    pub const INVALID: Stateid = Stateid {
        seqid: u32::MAX,
        other: [0; 12],
    };

    pub fn is_special(&self) -> bool {
        self.other == [0; 12] || self.other == [0xff; 12]
    }
}

/// Whose a revoked stateid was, and why it went.
#[derive(Debug, Clone, Copy)]
struct Revoked {
    client: u64,
    /// By the administrator (a rollback), not for a lapsed lease.
    by_admin: bool,
}

/// A client's revoked stateids not yet freed, by why they went.
#[derive(Debug, Clone, Copy, Default)]
struct RevokedCount {
    lease: usize,
    admin: usize,
}

/// A file as state knows it: the fsid of its share and its object.
pub type FileKey = (u64, u64);

/// What the caller must tell the filesystem after dropping the state lock.
pub struct Release {
    pub fs: Arc<Filesystem>,
    pub ino: u64,
}

impl Release {
    pub fn run(self) {
        if let Err(e) = self.fs.released(self.ino) {
            tracing::warn!(ino = self.ino, "releasing a closed file failed: {e}");
        }
    }
}

pub fn release_all(v: Vec<Release>) {
    for r in v {
        r.run();
    }
}

#[derive(Debug)]
pub enum SlotReply {
    /// Nothing has used the slot yet.
    Empty,
    /// The request with the slot's sequence id is running.
    InProgress,
    /// The whole COMPOUND4res of the slot's last request.
    Cached(Arc<Vec<u8>>),
    /// The last request's reply was not kept (the client did not ask for it).
    Uncached,
}

pub struct Slot {
    pub seq: u32,
    pub reply: SlotReply,
}

pub struct Session {
    pub client: u64,
    pub slots: Vec<Slot>,
    pub max_ops: u32,
    pub max_request: u32,
    pub max_response: u32,
    pub max_response_cached: u32,
    pub back: Option<BackChan>,
    /// The minor version of the COMPOUND that made it: its callbacks carry it (the
    /// Linux client keeps one client per minor version and finds the session of a
    /// CB_SEQUENCE among the ones of that version only).
    pub minor: u32,
    /// The credentials its callbacks carry (csa_sec_parms or BACKCHANNEL_CTL's);
    /// `None`: it gave none this server speaks, so it cannot be called back.
    pub cb_cred: Option<crate::rpc::Credential>,
    /// NFSv4.0's callback_ident (4.0 clients' records only; see `callback40`).
    pub cb_ident: u32,
}

pub struct Client {
    pub id: u64,
    pub owner: Vec<u8>,
    pub verifier: [u8; 8],
    pub confirmed: bool,
    /// The CREATE_SESSION sequence slot: the last sequence id used, and its reply.
    pub cs_seq: u32,
    pub cs_reply: Option<Arc<Vec<u8>>>,
    pub renewed: Instant,
    pub reclaim_complete: bool,
    /// The address it set itself up from: CREATE_SESSION and the DESTROY operations
    /// must come from there (the principal of RFC 8881 section 2.4, for AUTH_SYS).
    pub peer: std::net::IpAddr,
    /// The minor version that set it up: 0 (SETCLIENTID) or 1 (EXCHANGE_ID).
    pub minor: u32,
    /// NFSv4.0: what the last SETCLIENTID answered, which SETCLIENTID_CONFIRM brings.
    pub setclientid_confirm: Option<[u8; 8]>,
    /// NFSv4.0: the callback service SETCLIENTID named (address, program,
    /// callback_ident), if it named a usable one.
    pub callback40: Option<Callback40>,
    /// NFSv4.0: the session-like record of the callback path that answered its
    /// probe, and which path that was (`open_callback40`).
    pub callback40_up: Option<([u8; 16], Callback40)>,
    /// NFSv4.0: a probe of its callback path is under way.
    pub probing: bool,
}

/// A 4.0 client's callback service: address, program, callback_ident.
pub type Callback40 = (std::net::SocketAddr, u32, u32);

/// 4.0 callback probes under way at most (each a thread for up to a few seconds);
/// a confirmation past it leaves its client without delegations.
pub const MAX_PROBES: usize = 64;

impl Client {
    /// An unconfirmed record (minor version 1 unless changed).
    pub fn new(
        id: u64,
        owner: Vec<u8>,
        verifier: [u8; 8],
        peer: std::net::IpAddr,
        now: Instant,
    ) -> Client {
        Client {
            id,
            owner,
            verifier,
            confirmed: false,
            cs_seq: 0,
            cs_reply: None,
            renewed: now,
            reclaim_complete: false,
            peer,
            minor: 1,
            setclientid_confirm: None,
            callback40: None,
            callback40_up: None,
            probing: false,
        }
    }
}

/// An NFSv4.0 open or lock owner, whose requests carry sequence numbers (`minor0.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerKey {
    pub client: u64,
    pub lock: bool,
    pub owner: Vec<u8>,
}

impl OwnerKey {
    pub fn open(client: u64, owner: &[u8]) -> OwnerKey {
        OwnerKey {
            client,
            lock: false,
            owner: owner.to_vec(),
        }
    }

    pub fn lock(client: u64, owner: &[u8]) -> OwnerKey {
        OwnerKey {
            client,
            lock: true,
            owner: owner.to_vec(),
        }
    }
}

/// An owner's last sequence number and the answer to it (for a retransmission).
pub struct OwnerSeq {
    pub seqid: u32,
    pub reply: Option<Arc<Vec<u8>>>,
    /// The current file handle the request left (an OPEN's: the file opened), which
    /// a retransmission's later operations start from.
    pub fh: Option<crate::v4::pseudo::Fh>,
    /// The stateid its last request closed (CLOSE), if it did.
    pub closed: Option<[u8; 12]>,
}

/// An open's (access, deny) pair as a bit of `Open::modes` (access 1-3, deny 0-3).
pub fn mode_bit(access: u32, deny: u32) -> u16 {
    1 << (((access & 3) << 2) | (deny & 3))
}

/// Owner sequences kept at most; past it, those whose last request was a CLOSE go.
pub const MAX_OWNER_SEQS: usize = 65_536;

pub struct Open {
    pub client: u64,
    pub owner: Vec<u8>,
    pub file: FileKey,
    pub seqid: u32,
    pub access: u32,
    pub deny: u32,
    /// Each (access, deny) pair its OPENs asked for (`mode_bit`): OPEN_DOWNGRADE may
    /// go only to the union of some of them (RFC 8881 18.18.3, RFC 7530 16.19.4).
    pub modes: u16,
    pub fs: Arc<Filesystem>,
    /// The lock owners made under this open (they go with it).
    pub locks: Vec<u64>,
}

pub struct LockOwner {
    pub client: u64,
    pub owner: Vec<u8>,
    pub file: FileKey,
    pub open: u64,
    pub seqid: u32,
}

/// One locked range: [start, end), `end` u64::MAX meaning to the end of any file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub lock: u64,
    pub write: bool,
    pub start: u64,
    pub end: u64,
}

/// What `shoal status` shows of NFSv4 state (`V4State::status`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Nfs4Status {
    /// Confirmed client IDs (4.0 and 4.1/4.2 alike).
    pub clients: usize,
    /// Of those, clients past their lease that keep their state by courtesy.
    pub courtesy: usize,
    pub sessions: usize,
    pub opens: usize,
    /// Byte ranges NFSv4 lock owners hold.
    pub locks: usize,
    pub delegations: usize,
    pub lease_seconds: u64,
    /// How long past its lease a silent client keeps its state (0: not at all).
    pub courtesy_seconds: u64,
}

/// Who holds a conflicting lock (LOCK4denied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub offset: u64,
    pub length: u64,
    pub write: bool,
    pub client: u64,
    pub owner: Vec<u8>,
}

#[derive(Default)]
struct FileState {
    opens: Vec<u64>,
    ranges: Vec<Range>,
    /// NLM share reservations (NFSv3 clients' DOS share modes).
    shares: Vec<NlmShare>,
}

pub enum StateRef {
    Open(u64),
    Lock(u64),
    Deleg(u64),
}

/// A read delegation: the client may cache the file's data and attributes and open
/// it for reading without asking, until it is recalled.
pub struct Deleg {
    pub client: u64,
    pub file: FileKey,
    /// The file's handle, for CB_RECALL.
    pub fh: Vec<u8>,
    /// When CB_RECALL was sent (the holder then has a lease to return it).
    pub recalled: Option<Instant>,
    /// A write delegation (OPEN_DELEGATE_WRITE): the holder may write and cache
    /// attributes, so others' reads are in its way too.
    pub write: bool,
    /// The open owner whose open got it. One client may open a file through two
    /// caches of its own (Linux: two mounts with `nosharecache`) that share no
    /// locks; only the owner's cache knows what the delegation covers, so another
    /// owner's open recalls a write delegation.
    pub owner: Vec<u8>,
    /// The session whose OPEN got it: one client ID may stand for several caches of
    /// one host (Linux: one per minor version), and only the one that asked holds
    /// it, so the recall goes there while that session can be called.
    pub session: Option<[u8; 16]>,
}

/// A session's back channel: where callbacks go.
pub struct BackChan {
    pub conn: Arc<dyn crate::transport::BackChannel>,
    pub program: u32,
    /// The next sequence id of the back channel's one slot, held while a callback
    /// uses the slot (one callback at a time a session).
    pub slot: Arc<std::sync::Mutex<u32>>,
}

/// A CB_RECALL to send (after the state lock is let go).
pub struct Recall {
    pub back: (
        Arc<dyn crate::transport::BackChannel>,
        u32,
        Arc<std::sync::Mutex<u32>>,
    ),
    pub session: [u8; 16],
    /// The session's minor version, for CB_COMPOUND.
    pub minor: u32,
    /// The credentials the client asked callbacks to carry.
    pub cred: crate::rpc::Credential,
    /// NFSv4.0's callback_ident (minor 0: CB_COMPOUND carries it, no CB_SEQUENCE).
    pub ident: u32,
    pub stateid: Stateid,
    pub fh: Vec<u8>,
}

pub struct V4State {
    boot: u32,
    next: u64,
    /// Ids are a keyed hash of a counter under this secret, so no client can guess
    /// another's client ID, session ID or stateids from its own.
    secret: [u8; 32],
    pub clients: HashMap<u64, Client>,
    pub sessions: HashMap<[u8; 16], Session>,
    pub opens: HashMap<u64, Open>,
    pub lock_owners: HashMap<u64, LockOwner>,
    /// Each lock owner's id by (client, owner, file): at most one each.
    lock_owner_ids: HashMap<(u64, Vec<u8>, FileKey), u64>,
    files: HashMap<FileKey, FileState>,
    /// Stateids (their `other`) revoked, by client: when their client's lease ran out
    /// and another client needed what they held (they answer EXPIRED), or by the
    /// administrator (a rollback took their file away: ADMIN_REVOKED), until the
    /// client frees them; SEQUENCE tells the client some of its state is gone.
    revoked: HashMap<[u8; 12], Revoked>,
    /// How many of `revoked` each client has (SEQUENCE asks on every call).
    revoked_by_client: HashMap<u64, RevokedCount>,
    /// Changed only through `add_deleg` and `remove_deleg`, which keep the indexes.
    pub delegs: HashMap<u64, Deleg>,
    /// Delegation ids by file (a change to a file looks only at its own).
    delegs_by_file: HashMap<FileKey, Vec<u64>>,
    /// How many delegations each client holds (SEQUENCE asks on every call).
    delegs_by_client: HashMap<u64, usize>,
    /// How many delegations exist, readable without this state's lock, so a change
    /// to a file pays for a look at delegations only while some exist.
    pub deleg_count: Arc<std::sync::atomic::AtomicUsize>,
    lease: Duration,
    /// How long past its lease a silent client keeps its state while nobody needs
    /// it (`reap`); zero: its state goes when the lease runs out.
    courtesy: Duration,
    /// Recovery after a restart (see `Recovery`).
    pub recovery: Recovery,
    /// NLM hosts (NFSv3 clients that lock), by id; ids share the space of client
    /// ids, so a range's holder is one or the other (`nlm.rs`).
    pub nlm_hosts: HashMap<u64, NlmHost>,
    nlm_host_ids: HashMap<(std::net::IpAddr, String), u64>,
    /// The NLM grace period after a restart: hosts monitored before it reclaim
    /// their locks, and nobody (NLM or NFSv4) gets a new lock or open until then.
    pub nlm_grace_until: Option<Instant>,
    /// NFSv4.0 owners' sequences (`minor0.rs`).
    pub owner_seqs: HashMap<OwnerKey, OwnerSeq>,
}

fn random_secret(boot: u32) -> [u8; 32] {
    use std::io::Read;
    let mut key = [0u8; 32];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut key));
    if read.is_err() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        key = *blake3::hash(format!("{boot} {now} {}", std::process::id()).as_bytes()).as_bytes();
    }
    key
}

pub fn range_end(offset: u64, length: u64) -> u64 {
    if length == u64::MAX {
        u64::MAX
    } else {
        offset.saturating_add(length)
    }
}

impl V4State {
    pub fn new(boot: u32) -> V4State {
        V4State {
            boot,
            next: 1,
            secret: random_secret(boot),
            clients: HashMap::new(),
            sessions: HashMap::new(),
            opens: HashMap::new(),
            lock_owners: HashMap::new(),
            lock_owner_ids: HashMap::new(),
            files: HashMap::new(),
            revoked: HashMap::new(),
            revoked_by_client: HashMap::new(),
            delegs: HashMap::new(),
            delegs_by_file: HashMap::new(),
            delegs_by_client: HashMap::new(),
            deleg_count: Arc::default(),
            lease: Duration::from_secs(LEASE_SECONDS as u64),
            courtesy: DEFAULT_COURTESY,
            recovery: Recovery::default(),
            nlm_hosts: HashMap::new(),
            nlm_host_ids: HashMap::new(),
            nlm_grace_until: None,
            owner_seqs: HashMap::new(),
        }
    }

    /// An unpredictable 8-byte verifier (SETCLIENTID's confirm).
    pub fn new_verifier(&mut self) -> [u8; 8] {
        self.next += 1;
        let h = blake3::keyed_hash(&self.secret, &self.next.to_le_bytes());
        h.as_bytes()[24..32].try_into().unwrap()
    }

    /// Whether a (not special) stateid was made in this start of the server.
    pub fn of_this_boot(&self, s: &Stateid) -> bool {
        s.other[..4] == self.boot.to_le_bytes()
    }

    /// The lease (tests shorten it to see expiry).
    pub fn set_lease(&mut self, lease: Duration) {
        self.lease = lease;
    }

    /// How long past its lease a silent client keeps its state while nobody needs
    /// it (`[nfs] courtesy`).
    pub fn set_courtesy(&mut self, courtesy: Duration) {
        self.courtesy = courtesy;
    }

    /// What `shoal status` shows of NFSv4 clients now.
    pub fn status(&self, now: Instant) -> Nfs4Status {
        let courtesy = self
            .clients
            .values()
            .filter(|c| c.confirmed && now.saturating_duration_since(c.renewed) > self.lease)
            .count();
        let locks = self
            .files
            .values()
            .flat_map(|f| &f.ranges)
            .filter(|r| {
                self.lock_owners
                    .get(&r.lock)
                    .is_some_and(|l| !self.nlm_hosts.contains_key(&l.client))
            })
            .count();
        Nfs4Status {
            clients: self.clients.values().filter(|c| c.confirmed).count(),
            courtesy,
            // 4.0 clients' callback records are kept as sessions of minor 0.
            sessions: self.sessions.values().filter(|s| s.minor > 0).count(),
            opens: self.opens.len(),
            locks,
            delegations: self.delegs.len(),
            lease_seconds: self.lease.as_secs(),
            courtesy_seconds: self.courtesy.as_secs(),
        }
    }

    /// Lets go of every client silent for longer than its lease and the courtesy
    /// after it: its client ID, sessions, opens, locks and delegations go (its
    /// next SEQUENCE gets BADSESSION, its next RENEW STALE_CLIENTID, and it starts
    /// over; what it held is lost to it, as RFC 8881 section 8.3 allows once the
    /// lease has run out). Returns how many went and what they held open.
    pub fn reap(&mut self, now: Instant) -> (usize, Vec<Release>) {
        let limit = self.lease.saturating_add(self.courtesy);
        let silent: Vec<u64> = self
            .clients
            .values()
            .filter(|c| now.saturating_duration_since(c.renewed) > limit)
            .map(|c| c.id)
            .collect();
        let mut released = Vec::new();
        for &id in &silent {
            tracing::info!(
                client = id,
                "NFSv4 client silent past its lease and courtesy: its state is let go"
            );
            released.extend(self.purge_client(id));
        }
        (silent.len(), released)
    }

    /// A new id, unpredictable and unused by any client, open or lock owner.
    fn next_id(&mut self) -> u64 {
        loop {
            self.next += 1;
            let h = blake3::keyed_hash(&self.secret, &self.next.to_le_bytes());
            let id = u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap());
            let used = self.clients.contains_key(&id)
                || self.opens.contains_key(&id)
                || self.lock_owners.contains_key(&id)
                || self.delegs.contains_key(&id)
                || self.nlm_hosts.contains_key(&id);
            if id > 1 && !used {
                return id;
            }
        }
    }

    /// A new session id (16 bytes, as unpredictable as `next_id`).
    pub fn new_session_id(&mut self) -> [u8; 16] {
        loop {
            self.next += 1;
            let h = blake3::keyed_hash(&self.secret, &self.next.to_le_bytes());
            let id: [u8; 16] = h.as_bytes()[16..32].try_into().unwrap();
            if !self.sessions.contains_key(&id) {
                return id;
            }
        }
    }

    pub fn stateid_of(&self, id: u64, seqid: u32) -> Stateid {
        let mut other = [0u8; 12];
        other[..4].copy_from_slice(&self.boot.to_le_bytes());
        other[4..].copy_from_slice(&id.to_le_bytes());
        Stateid { seqid, other }
    }

    /// The state a stateid names, if it was made in this boot and still exists.
    pub fn lookup(&self, s: &Stateid) -> OpResult<StateRef> {
        if s.other[..4] != self.boot.to_le_bytes() {
            return Err(Nfs4Error::BadStateId);
        }
        let id = u64::from_le_bytes(s.other[4..].try_into().unwrap());
        let current = if let Some(o) = self.opens.get(&id) {
            (StateRef::Open(id), o.seqid)
        } else if let Some(l) = self.lock_owners.get(&id) {
            (StateRef::Lock(id), l.seqid)
        } else if self.delegs.contains_key(&id) {
            (StateRef::Deleg(id), 1)
        } else if let Some(r) = self.revoked.get(&s.other) {
            return Err(if r.by_admin {
                Nfs4Error::AdminRevoked
            } else {
                Nfs4Error::Expired
            });
        } else {
            return Err(Nfs4Error::BadStateId);
        };
        // seqid 0 means "the current one" (RFC 8881 section 8.2.2).
        if s.seqid != 0 {
            if s.seqid < current.1 {
                return Err(Nfs4Error::OldStateId);
            }
            if s.seqid > current.1 {
                return Err(Nfs4Error::BadStateId);
            }
        }
        Ok(current.0)
    }

    // ---- clients ----

    pub fn new_client_id(&mut self) -> u64 {
        self.next_id()
    }

    /// Whether `session` exists and its client set itself up from `peer`.
    pub fn session_of_peer(&self, session: &[u8; 16], peer: std::net::IpAddr) -> bool {
        self.sessions
            .get(session)
            .and_then(|s| self.clients.get(&s.client))
            .is_some_and(|c| c.peer == peer)
    }

    /// A client has been confirmed by CREATE_SESSION: it is remembered for recovery.
    pub fn confirmed(&mut self, owner: &[u8]) {
        if self.recovery.confirmed.insert(owner.to_vec()) {
            self.recovery.save();
        }
    }

    /// In a grace period: NFSv4 clients of the previous start still reclaiming, or
    /// the NLM grace period still running.
    pub fn in_grace(&self) -> bool {
        let now = Instant::now();
        self.recovery.in_grace(now) || self.nlm_grace_until.is_some_and(|t| now < t)
    }

    /// Ends a grace period that is over: clients of the previous boot that never came
    /// back are forgotten, so the next start does not wait for them again.
    pub fn end_grace_if_due(&mut self) {
        let Some(until) = self.recovery.grace_until else {
            return;
        };
        if Instant::now() < until && !self.recovery.reclaimable.is_empty() {
            return;
        }
        self.recovery.grace_until = None;
        let gone: Vec<Vec<u8>> = self
            .recovery
            .reclaimable
            .drain()
            .filter(|o| !self.clients.values().any(|c| c.owner == *o))
            .collect();
        if !gone.is_empty() {
            tracing::info!(
                clients = gone.len(),
                "grace period over: clients that did not come back are forgotten"
            );
            for o in gone {
                self.recovery.confirmed.remove(&o);
            }
            self.recovery.save();
        }
    }

    /// Whether `client` may take new locking state (a non-reclaim OPEN or LOCK):
    /// a 4.1/4.2 client only after its RECLAIM_COMPLETE (RFC 8881 section 18.51.3:
    /// GRACE before it, grace period or not, so a client can never take state
    /// that one of its own reclaims would have needed). 4.0 has no such operation.
    pub fn may_lock_new(&self, client: u64) -> OpResult<()> {
        match self.clients.get(&client) {
            Some(c) if c.minor >= 1 && !c.reclaim_complete => Err(Nfs4Error::Grace),
            _ => Ok(()),
        }
    }

    /// Whether `client` may reclaim state now: in the grace period, one of the
    /// previous boot's clients, and before its RECLAIM_COMPLETE.
    pub fn may_reclaim(&self, client: u64) -> OpResult<()> {
        if !self.in_grace() {
            return Err(Nfs4Error::NoGrace);
        }
        let c = self.clients.get(&client).ok_or(Nfs4Error::StaleClientId)?;
        if c.reclaim_complete || !self.recovery.reclaimable.contains(&c.owner) {
            return Err(Nfs4Error::NoGrace);
        }
        Ok(())
    }

    /// RECLAIM_COMPLETE: the client has reclaimed all it will.
    pub fn reclaim_complete(&mut self, client: u64) -> OpResult<()> {
        let c = self
            .clients
            .get_mut(&client)
            .ok_or(Nfs4Error::StaleClientId)?;
        if c.reclaim_complete {
            return Err(Nfs4Error::CompleteAlready);
        }
        c.reclaim_complete = true;
        let owner = c.owner.clone();
        if self.recovery.reclaimable.remove(&owner) && self.recovery.reclaimable.is_empty() {
            tracing::info!("every NFSv4 client has reclaimed its state: grace period over");
        }
        Ok(())
    }

    /// Whether `client`'s lease ran out. NLM hosts have no lease: never.
    pub fn expired(&self, client: u64, now: Instant) -> bool {
        if self.nlm_hosts.contains_key(&client) {
            return false;
        }
        self.clients
            .get(&client)
            .is_none_or(|c| now.saturating_duration_since(c.renewed) > self.lease)
    }

    /// Drops a client and everything it holds.
    pub fn purge_client(&mut self, client: u64) -> Vec<Release> {
        let revoked: Vec<[u8; 12]> = self
            .revoked
            .iter()
            .filter(|(_, r)| r.client == client)
            .map(|(other, _)| *other)
            .collect();
        for other in revoked {
            self.unrevoke(&other);
        }
        for id in self.delegs_of(client) {
            self.remove_deleg(id);
        }
        if let Some(c) = self.clients.remove(&client) {
            // A confirmed client can no longer reclaim anything, here or after a
            // restart (an unconfirmed record of the same owner changes nothing).
            if c.confirmed {
                self.recovery.reclaimable.remove(&c.owner);
                if self.recovery.confirmed.remove(&c.owner) {
                    self.recovery.save();
                }
            }
        }
        self.sessions.retain(|_, s| s.client != client);
        self.owner_seqs.retain(|k, _| k.client != client);
        let opens: Vec<u64> = self
            .opens
            .iter()
            .filter(|(_, o)| o.client == client)
            .map(|(id, _)| *id)
            .collect();
        let mut released = Vec::new();
        for id in opens {
            released.extend(self.drop_open(id));
        }
        released
    }

    /// Revokes everything a client holds (its lease ran out and someone conflicts):
    /// the client and its sessions stay, its stateids answer EXPIRED.
    pub fn revoke_state(&mut self, client: u64) -> Vec<Release> {
        let opens: Vec<u64> = self
            .opens
            .iter()
            .filter(|(_, o)| o.client == client)
            .map(|(id, _)| *id)
            .collect();
        // Only stateids the client was given (a lock owner's first grant makes seqid 1).
        let locks: Vec<u64> = self
            .lock_owners
            .iter()
            .filter(|(_, l)| l.client == client && l.seqid > 0)
            .map(|(id, _)| *id)
            .collect();
        let delegs = self.delegs_of(client);
        for id in opens.iter().chain(&locks).chain(&delegs) {
            let other = self.stateid_of(*id, 0).other;
            self.revoke(other, client);
        }
        for id in delegs {
            self.remove_deleg(id);
        }
        opens
            .into_iter()
            .filter_map(|id| self.drop_open(id))
            .collect()
    }

    /// Whether some of the client's state was revoked for its lease and not yet freed
    /// by it.
    pub fn has_revoked(&self, client: u64) -> bool {
        self.revoked_by_client
            .get(&client)
            .is_some_and(|n| n.lease > 0)
    }

    /// Whether some of the client's state was revoked by the administrator and not
    /// yet freed by it.
    pub fn has_admin_revoked(&self, client: u64) -> bool {
        self.revoked_by_client
            .get(&client)
            .is_some_and(|n| n.admin > 0)
    }

    fn revoke(&mut self, other: [u8; 12], client: u64) {
        self.revoke_as(other, client, false);
    }

    fn revoke_as(&mut self, other: [u8; 12], client: u64, by_admin: bool) {
        if self
            .revoked
            .insert(other, Revoked { client, by_admin })
            .is_none()
        {
            let n = self.revoked_by_client.entry(client).or_default();
            if by_admin {
                n.admin += 1;
            } else {
                n.lease += 1;
            }
        }
    }

    fn unrevoke(&mut self, other: &[u8; 12]) {
        let Some(r) = self.revoked.remove(other) else {
            return;
        };
        if let std::collections::hash_map::Entry::Occupied(mut n) =
            self.revoked_by_client.entry(r.client)
        {
            let c = n.get_mut();
            if r.by_admin {
                c.admin -= 1;
            } else {
                c.lease -= 1;
            }
            if c.admin == 0 && c.lease == 0 {
                n.remove();
            }
        }
    }

    /// Revokes, as the administrator, the state a rollback of the filesystem `fsid`
    /// took the ground from: the opens (and their locks) of the files `gone` (no
    /// longer there), and every delegation on the filesystem (its files may have
    /// changed under them). Their stateids answer ADMIN_REVOKED, and SEQUENCE flags
    /// ADMIN_STATE_REVOKED, until the client frees them. Answers the releases to run
    /// after the state lock is dropped, and how many stateids were revoked.
    pub fn revoke_for_rollback(&mut self, fsid: u64, gone: &[u64]) -> (Vec<Release>, usize) {
        let opens: Vec<u64> = self
            .opens
            .iter()
            .filter(|(_, o)| o.file.0 == fsid && gone.contains(&o.file.1))
            .map(|(id, _)| *id)
            .collect();
        let delegs: Vec<u64> = self
            .delegs
            .iter()
            .filter(|(_, d)| d.file.0 == fsid)
            .map(|(id, _)| *id)
            .collect();
        let mut revoked = 0;
        for &id in &opens {
            let o = &self.opens[&id];
            let client = o.client;
            let mut ids = vec![id];
            ids.extend(
                o.locks
                    .iter()
                    .filter(|l| self.lock_owners.get(l).is_some_and(|l| l.seqid > 0)),
            );
            for id in ids {
                let other = self.stateid_of(id, 0).other;
                self.revoke_as(other, client, true);
                revoked += 1;
            }
        }
        for id in delegs {
            let client = self.delegs[&id].client;
            let other = self.stateid_of(id, 0).other;
            self.revoke_as(other, client, true);
            self.remove_deleg(id);
            revoked += 1;
        }
        let released = opens
            .into_iter()
            .filter_map(|id| self.drop_open(id))
            .collect();
        (released, revoked)
    }

    /// FREE_STATEID of a revoked stateid: the client has seen that it is gone.
    pub fn free_revoked(&mut self, s: &Stateid, client: u64) -> bool {
        if self
            .revoked
            .get(&s.other)
            .is_some_and(|r| r.client == client)
        {
            self.unrevoke(&s.other);
            true
        } else {
            false
        }
    }

    /// Makes room for one more client record: past `MAX_CLIENTS`, an unconfirmed
    /// record or one whose lease ran out (least recently renewed first) goes; a live
    /// confirmed client is never evicted to make room (`false`: no room).
    pub fn make_room(&mut self) -> (bool, Vec<Release>) {
        if self.clients.len() < MAX_CLIENTS {
            return (true, Vec::new());
        }
        let now = Instant::now();
        let victim = self
            .clients
            .values()
            .filter(|c| !c.confirmed || self.expired(c.id, now))
            .min_by_key(|c| c.renewed)
            .map(|c| c.id);
        match victim {
            Some(v) => (true, self.purge_client(v)),
            None => (false, Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::recovery::hex_encode;
    use super::locks::{cut, merge};
    use super::*;

    fn r(lock: u64, write: bool, start: u64, end: u64) -> Range {
        Range {
            lock,
            write,
            start,
            end,
        }
    }

    #[test]
    fn cut_splits_and_merge_joins() {
        let mut v = vec![r(1, true, 0, 100)];
        cut(&mut v, &[1], 40, 60);
        v.sort_by_key(|x| x.start);
        assert_eq!(v, vec![r(1, true, 0, 40), r(1, true, 60, 100)]);
        v.push(r(1, true, 40, 60));
        merge(&mut v, 1);
        assert_eq!(v, vec![r(1, true, 0, 100)]);
        // Another owner's ranges are untouched by both.
        let mut v = vec![r(2, false, 0, 10), r(1, false, 5, 20)];
        cut(&mut v, &[1], 0, u64::MAX);
        assert_eq!(v, vec![r(2, false, 0, 10)]);
    }

    #[test]
    fn the_client_list_survives_a_restart_and_opens_the_grace_period() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nfs4-clients");
        let grace = Duration::from_secs(60);
        let mut st = V4State::new(1);
        st.recovery = Recovery::open(path.clone(), grace).unwrap();
        assert!(!st.in_grace(), "no list, no grace");
        st.confirmed(b"client-a");
        st.confirmed(b"client-b\n\x00");
        st.recovery.flush();
        // The next start: both may reclaim, nobody else, until each is complete.
        let mut st = V4State::new(2);
        st.recovery = Recovery::open(path.clone(), grace).unwrap();
        assert!(st.in_grace());
        let a = st.new_client_id();
        let now = Instant::now();
        {
            let id = a;
            let mut c = Client::new(
                id,
                b"client-a".to_vec(),
                [0; 8],
                std::net::IpAddr::from([127, 0, 0, 1]),
                now,
            );
            c.confirmed = true;
            c.cs_seq = 1;
            st.clients.insert(id, c);
        }
        st.may_reclaim(a).unwrap();
        st.reclaim_complete(a).unwrap();
        assert_eq!(st.may_reclaim(a), Err(Nfs4Error::NoGrace));
        assert!(st.in_grace(), "client-b has not come back yet");
        // The grace period runs out: client-b is forgotten, client-a kept.
        st.recovery.grace_until = Some(Instant::now());
        st.end_grace_if_due();
        assert!(!st.in_grace());
        st.recovery.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{}\n", hex_encode(b"client-a")));
        // A line that is not hex stops the start with its place.
        std::fs::write(&path, "zz\n").unwrap();
        let e = Recovery::open(path, grace).err().unwrap();
        assert!(e.to_string().contains("line 1"), "{e}");
    }

    #[test]
    fn different_types_do_not_merge() {
        let mut v = vec![r(1, true, 0, 10), r(1, false, 10, 20)];
        merge(&mut v, 1);
        assert_eq!(v.len(), 2);
    }
}
