//! NLM, the Network Lock Manager (program 100021, versions 1, 3 and 4), and the part
//! of NSM a lock server needs (program 100024): byte-range locks and DOS share
//! reservations for NFSv3 clients, on the same port as NFS (TCP and UDP) and listed
//! by the portmapper.
//!
//! Locks live in the NFSv4 state's lock table (`v4::state`, `nlm.rs` there), so NLM
//! and NFSv4 locks conflict with each other, and an NLM lock first recalls the
//! delegations on its file as an NFSv4 LOCK does.
//!
//! - LOCK, TEST, UNLOCK, CANCEL, SHARE, UNSHARE, NM_LOCK (a lock whose host is not
//!   monitored) and FREE_ALL, synchronous, and the asynchronous _MSG forms, whose
//!   answers go back as _RES calls to the client's lock manager.
//! - Blocking locks: a LOCK with `block` that conflicts is answered BLOCKED and kept
//!   in `blocked`; the granter thread retries blocked locks when locks are released
//!   (and every `RETRY_EVERY` for conflicts that end without an NLM call: an NFSv4
//!   unlock, a delegation returned), and sends GRANTED to the client's lock manager
//!   when one is taken. A client that turns the grant down (it gave up waiting),
//!   or cannot be reached, loses the lock again.
//! - The grace period: after a restart with monitored clients, every one of them is
//!   sent SM_NOTIFY (`nsm.rs`) and has `grace` to reclaim its locks (LOCK with
//!   `reclaim`); nobody else gets a lock, a share or an NFSv4 open or lock until
//!   it is over. TEST is refused in the grace period too.
//!
//! Bounds: `MAX_BLOCKED` blocked requests in all (more conflicting blocking locks
//! are answered DENIED_NOLOCKS), `MAX_CALLS_IN_FLIGHT` calls to clients at once;
//! names and objects as `proto` bounds them.
//!
//! Credentials: the export rules must admit the caller for the file (the same
//! `NfsService::target` check NFSv3 makes); a lock needs no permission on the file
//! beyond that, as with every Unix lock manager.

pub mod callback;
pub mod nsm;
pub mod proto;

use self::callback::Proto;
use self::proto::*;
use crate::rpc::Accept;
use crate::service::NfsService;
use crate::transport::{Call, Reply};
use crate::v4::state::{release_all, svid_of_owner, Denied, FileKey};
use crate::xdr::{Decoder, Encoder, XdrResult};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Blocked lock requests kept at once.
pub const MAX_BLOCKED: usize = 4096;
/// How often blocked locks are retried when nothing wakes the granter sooner.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);
/// How long a lock that does not block waits for delegations on its file to come
/// back before it is denied.
const DELEGATION_WAIT: Duration = Duration::from_secs(2);
/// GRANTED attempts before a blocked lock that was taken is given up.
const GRANT_TRIES: u32 = 3;
/// Calls to clients (GRANTED, _RES) under way at once; beyond it a _RES answer is
/// dropped (its client sends the _MSG call again) and a grant is undone (the
/// client's lock manager asks again), so no client can make threads without bound.
pub const MAX_CALLS_IN_FLIGHT: usize = 64;

/// A blocked lock: what to retry and where to send GRANTED.
#[derive(Debug, Clone)]
struct Blocked {
    host: u64,
    peer: IpAddr,
    version: u32,
    proto: Proto,
    /// Came as LOCK_MSG: the grant goes as GRANTED_MSG.
    asynchronous: bool,
    monitored: bool,
    args: LockArgs,
    file: FileKey,
}

impl Blocked {
    fn same_request(&self, host: u64, file: FileKey, l: &Lock, exclusive: bool) -> bool {
        self.host == host
            && self.file == file
            && self.args.lock.svid == l.svid
            && self.args.lock.range() == l.range()
            && self.args.exclusive == exclusive
    }
}

/// NLM's own state beside the lock table.
pub(crate) struct Nlm {
    blocked: Mutex<Vec<Blocked>>,
    wake: Condvar,
    pub monitor: OnceLock<Arc<nsm::Monitor>>,
    /// The port of client machines' portmappers (111; tests move it).
    pub client_portmapper: AtomicU16,
    /// Calls back to clients are made only once the service was started for real
    /// (`NfsService::start_nlm`), never from a fuzz harness.
    started: AtomicBool,
    /// Calls to clients under way (`MAX_CALLS_IN_FLIGHT`).
    calls_in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

impl Nlm {
    pub fn new() -> Nlm {
        Nlm {
            blocked: Mutex::new(Vec::new()),
            wake: Condvar::new(),
            monitor: OnceLock::new(),
            client_portmapper: AtomicU16::new(111),
            started: AtomicBool::new(false),
            calls_in_flight: Arc::default(),
        }
    }

    /// Runs `f` (a call to a client) on a thread of its own, logging its failure;
    /// `false` (nothing runs) when `MAX_CALLS_IN_FLIGHT` are under way.
    fn spawn_call(
        &self,
        name: &str,
        f: impl FnOnce() -> std::io::Result<()> + Send + 'static,
    ) -> bool {
        let in_flight = self.calls_in_flight.clone();
        if in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_CALLS_IN_FLIGHT {
            in_flight.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!(call = name, "too many calls to NLM clients under way");
            return false;
        }
        let what = name.to_string();
        let counted = in_flight.clone();
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if let Err(e) = f() {
                    tracing::warn!(call = what, "a call to an NLM client failed: {e}");
                }
                counted.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            in_flight.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!("no thread for a call to an NLM client: {e}");
            return false;
        }
        true
    }

    fn monitor(&self) -> Option<&Arc<nsm::Monitor>> {
        self.monitor.get()
    }

    fn wake_granter(&self) {
        self.wake.notify_all();
    }
}

/// What `shoal status` shows of NLM.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NlmStatus {
    /// This server's NSM state number.
    pub nsm_state: u32,
    /// Client machines holding NLM locks or shares.
    pub hosts: usize,
    /// Byte ranges NLM clients hold.
    pub locks: usize,
    /// Blocked lock requests waiting.
    pub blocked: usize,
    /// Clients that will be told of a restart.
    pub monitored: usize,
    pub in_grace: bool,
}

/// The holder TEST reports for a conflict (NLM lengths: 0 runs to the end).
fn holder_of(d: &Denied) -> Holder {
    Holder {
        exclusive: d.write,
        svid: svid_of_owner(&d.owner).unwrap_or(0),
        oh: Vec::new(),
        offset: d.offset,
        len: if d.length == u64::MAX { 0 } else { d.length },
    }
}

/// Which transport a call came on (UDP calls have no connection).
fn proto_of(call: &Call<'_>) -> Proto {
    if call.back.is_some() {
        Proto::Tcp
    } else {
        Proto::Udp
    }
}

impl NfsService {
    /// Starts NLM for real: the state number and monitored clients in `state_dir`
    /// (none: nothing is kept), a grace period of `grace` if clients held locks
    /// before, SM_NOTIFY to each of them, and the thread that grants blocked locks.
    pub fn start_nlm(
        self: &Arc<Self>,
        state_dir: Option<&std::path::Path>,
        grace: Duration,
    ) -> std::io::Result<()> {
        let monitor = Arc::new(match state_dir {
            Some(d) => nsm::Monitor::open(d)?,
            None => nsm::Monitor::in_memory(),
        });
        let pending = monitor.pending();
        if self.nlm.monitor.set(monitor.clone()).is_err() {
            return Err(std::io::Error::other("NLM is already started"));
        }
        if !pending.is_empty() {
            tracing::info!(
                clients = pending.len(),
                seconds = grace.as_secs(),
                "NLM grace period: clients that held locks before may reclaim them"
            );
            self.v4.state.lock().unwrap().nlm_grace_until = Some(Instant::now() + grace);
            self.v4.grace_over.store(false, Ordering::Release);
        }
        let _ = self.me.set(Arc::downgrade(self));
        self.nlm.started.store(true, Ordering::Release);
        nsm::start_notifier(monitor, self.nlm.client_portmapper.load(Ordering::Relaxed));
        let weak = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("nlm-granter".into())
            .spawn(move || granter(weak))?;
        Ok(())
    }

    /// Where client machines' portmappers are asked for their lock manager and
    /// status monitor (111 unless a test moves it).
    pub fn set_nlm_client_portmapper(&self, port: u16) {
        self.nlm.client_portmapper.store(port, Ordering::Relaxed);
    }

    pub fn nlm_status(&self) -> NlmStatus {
        let (hosts, locks, in_grace) = {
            let st = self.v4.state.lock().unwrap();
            (st.nlm_hosts.len(), st.nlm_ranges(), st.in_grace())
        };
        NlmStatus {
            nsm_state: self.nlm.monitor().map_or(0, |m| m.state),
            hosts,
            locks,
            blocked: self.nlm.blocked.lock().unwrap().len(),
            monitored: self.nlm.monitor().map_or(0, |m| m.monitored()),
            in_grace,
        }
    }

    /// Waits until the monitored list as last changed is on disk (tests).
    pub fn flush_nlm(&self) {
        if let Some(m) = self.nlm.monitor() {
            m.flush();
        }
    }

    // ---- NLM ----

    pub(crate) fn nlm(&self, call: &Call<'_>) -> Reply {
        let version = call.header.version;
        if !matches!(version, 1 | 3 | 4) {
            return Reply::new(call.reply(Accept::ProgMismatch { low: 1, high: 4 }));
        }
        let procedure = call.header.procedure;
        if version == 1 && procedure >= SHARE {
            return Reply::new(call.reply(Accept::ProcUnavail));
        }
        crate::service::PROBE.with(|p| p.set(Default::default()));
        let mut d = call.args();
        let r: XdrResult<Option<Encoder>> = (|| {
            Ok(match procedure {
                NULL => {
                    d.finish()?;
                    Some(call.reply(Accept::Success))
                }
                TEST | TEST_MSG => {
                    let a = decode_test_args(&mut d, version)?;
                    d.finish()?;
                    let mut e = Encoder::new();
                    match self.nlm_test(call, &a) {
                        Ok(()) => encode_test_res(&mut e, version, &a.cookie, Ok(())),
                        Err(Ok(h)) => encode_test_res(&mut e, version, &a.cookie, Err(Ok(&h))),
                        Err(Err(s)) => encode_test_res(&mut e, version, &a.cookie, Err(Err(s))),
                    }
                    self.answer(call, procedure == TEST_MSG, TEST_RES, e)
                }
                LOCK | LOCK_MSG | NM_LOCK => {
                    let mut a = decode_lock_args(&mut d, version)?;
                    d.finish()?;
                    let monitored = procedure != NM_LOCK;
                    if !monitored {
                        a.block = false;
                    }
                    let stat = self.nlm_lock(call, &a, monitored, procedure == LOCK_MSG);
                    self.answer_res(call, procedure == LOCK_MSG, LOCK_RES, &a.cookie, stat)
                }
                CANCEL | CANCEL_MSG => {
                    let a = decode_cancel_args(&mut d, version)?;
                    d.finish()?;
                    let stat = self.nlm_cancel(call, &a);
                    self.answer_res(call, procedure == CANCEL_MSG, CANCEL_RES, &a.cookie, stat)
                }
                UNLOCK | UNLOCK_MSG => {
                    let a = decode_unlock_args(&mut d, version)?;
                    d.finish()?;
                    let stat = self.nlm_unlock(call, &a);
                    self.answer_res(call, procedure == UNLOCK_MSG, UNLOCK_RES, &a.cookie, stat)
                }
                GRANTED | GRANTED_MSG => {
                    // For clients' lock managers: this server asked for nothing.
                    let a = decode_test_args(&mut d, version)?;
                    d.finish()?;
                    self.answer_res(
                        call,
                        procedure == GRANTED_MSG,
                        GRANTED_RES,
                        &a.cookie,
                        Stat::Denied,
                    )
                }
                TEST_RES | LOCK_RES | CANCEL_RES | UNLOCK_RES | GRANTED_RES => {
                    // Answers to _MSG calls; this server sends GRANTED only, and
                    // synchronously, so there is nothing to match them with.
                    Some(call.reply(Accept::Success))
                }
                SHARE | UNSHARE => {
                    let a = decode_share_args(&mut d)?;
                    d.finish()?;
                    let stat = self.nlm_share(call, &a, procedure == SHARE);
                    let mut e = call.reply(Accept::Success);
                    encode_share_res(&mut e, version, &a.cookie, stat);
                    Some(e)
                }
                FREE_ALL => {
                    let (name, _state) = decode_notify(&mut d)?;
                    d.finish()?;
                    self.nlm_free_all(call.peer.ip(), Some(&name));
                    Some(call.reply(Accept::Success))
                }
                _ => Some(call.reply(Accept::ProcUnavail)),
            })
        })();
        let reply = match r {
            Ok(Some(e)) => Reply::new(e),
            Ok(None) => Reply::default(),
            Err(_) => Reply::new(call.reply(Accept::GarbageArgs)),
        };
        self.record_nlm(call, procedure, &reply);
        reply
    }

    /// `answer` of an nlm_res (a cookie and a status).
    fn answer_res(
        &self,
        call: &Call<'_>,
        asynchronous: bool,
        res_procedure: u32,
        cookie: &[u8],
        stat: Stat,
    ) -> Option<Encoder> {
        let mut e = Encoder::new();
        encode_res(&mut e, call.header.version, cookie, stat);
        self.answer(call, asynchronous, res_procedure, e)
    }

    /// The reply of a synchronous call, or for a _MSG call no reply and the
    /// results sent to the client's `res_procedure`.
    fn answer(
        &self,
        call: &Call<'_>,
        asynchronous: bool,
        res_procedure: u32,
        results: Encoder,
    ) -> Option<Encoder> {
        if !asynchronous {
            let mut e = call.reply(Accept::Success);
            e.buf.extend_from_slice(&results.buf);
            return Some(e);
        }
        if self.nlm.started.load(Ordering::Acquire) {
            let (peer, version, proto) = (call.peer.ip(), call.header.version, proto_of(call));
            let port = self.nlm.client_portmapper.load(Ordering::Relaxed);
            self.nlm.spawn_call("nlm-res", move || {
                callback::call_service(
                    peer,
                    port,
                    proto,
                    NLM_PROGRAM,
                    version,
                    res_procedure,
                    &results.buf,
                    false,
                )
                .map(|_| ())
            });
        }
        None
    }

    fn record_nlm(&self, call: &Call<'_>, procedure: u32, reply: &Reply) {
        let Some(a) = self.analytics.get() else {
            return;
        };
        let probe = crate::service::PROBE.with(|p| p.get());
        let at = analytics::Ticks::now();
        a.record(analytics::Event::Nfs(analytics::NfsEvent {
            version: analytics::event::NLM_VERSION,
            minor: 0,
            op: procedure_name(procedure),
            client: call.peer.ip(),
            fsid: probe.fsid,
            ino: probe.ino,
            bytes: 0,
            offset: 0,
            request_bytes: (call.record.len() + 4) as u32,
            reply_bytes: if reply.is_empty() {
                0
            } else {
                (reply.len() + 4) as u32
            },
            latency_ns: at.ns_since(call.received),
            at,
        }));
    }

    /// The file a lock names: its key, or the status that refuses it.
    fn nlm_file(&self, call: &Call<'_>, fh: &[u8]) -> Result<FileKey, Stat> {
        let t = self.target(call, fh).map_err(|s| match s {
            crate::proto::Status::Stale | crate::proto::Status::BadHandle => Stat::StaleFh,
            _ => Stat::Failed,
        })?;
        if t.attr.kind != fs::Kind::File {
            return Err(Stat::Failed);
        }
        Ok((t.fsid, t.ino))
    }

    fn nlm_test(&self, call: &Call<'_>, a: &TestArgs) -> Result<(), Result<Holder, Stat>> {
        let file = self.nlm_file(call, &a.lock.fh).map_err(Err)?;
        if self.in_grace() {
            return Err(Err(Stat::DeniedGracePeriod));
        }
        let (start, end) = a.lock.range();
        let peer = call.peer.ip();
        let st = self.v4.state.lock().unwrap();
        // A host that never locked owns nothing: every holder is someone else.
        let host = st.find_nlm_host(peer, &a.lock.caller_name).unwrap_or(0);
        match st.nlm_test(host, a.lock.svid, file, a.exclusive, start, end) {
            None => Ok(()),
            Some(d) => Err(Ok(holder_of(&d))),
        }
    }

    fn nlm_lock(&self, call: &Call<'_>, a: &LockArgs, monitored: bool, asynchronous: bool) -> Stat {
        let file = match self.nlm_file(call, &a.lock.fh) {
            Ok(f) => f,
            Err(s) => return s,
        };
        let in_grace = self.in_grace();
        if in_grace && !a.reclaim {
            return Stat::DeniedGracePeriod;
        }
        if a.reclaim && !in_grace {
            // Too late to reclaim: what it held may be someone else's by now.
            return Stat::DeniedNoLocks;
        }
        let peer = call.peer.ip();
        let (start, end) = a.lock.range();
        // Delegations first: their holders may be caching locks of their own.
        let mut clear = self.break_delegations(file, None);
        if !clear && !a.block {
            let until = Instant::now() + DELEGATION_WAIT;
            while !clear && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
                clear = self.break_delegations(file, None);
            }
        }
        let (r, released, host) = {
            let mut st = self.v4.state.lock().unwrap();
            let host = st.nlm_host(peer, &a.lock.caller_name);
            if clear {
                let (r, released) = st.nlm_lock(host, a.lock.svid, file, a.exclusive, start, end);
                (r.map_err(|_| ()), released, host)
            } else {
                (Err(()), Vec::new(), host)
            }
        };
        release_all(released);
        match r {
            Ok(()) => {
                // A retransmitted or re-sent blocking request is settled too.
                self.nlm
                    .blocked
                    .lock()
                    .unwrap()
                    .retain(|b| !b.same_request(host, file, &a.lock, a.exclusive));
                if monitored {
                    self.monitor_durably(peer, &a.lock.caller_name);
                }
                Stat::Granted
            }
            Err(()) if a.block => {
                let mut blocked = self.nlm.blocked.lock().unwrap();
                blocked.retain(|b| !b.same_request(host, file, &a.lock, a.exclusive));
                if blocked.len() >= MAX_BLOCKED {
                    return Stat::DeniedNoLocks;
                }
                blocked.push(Blocked {
                    host,
                    peer,
                    version: call.header.version,
                    proto: proto_of(call),
                    asynchronous,
                    monitored,
                    args: a.clone(),
                    file,
                });
                self.nlm.wake_granter();
                Stat::Blocked
            }
            Err(()) => {
                self.forget_idle_host(host);
                Stat::Denied
            }
        }
    }

    /// Adds a client to the monitored list and, if it is new there, waits until the
    /// list is on disk: a lock is answered GRANTED only once a restart would notify
    /// its holder (as a lock manager waits for SM_MON before it grants).
    fn monitor_durably(&self, peer: IpAddr, name: &str) {
        if let Some(m) = self.nlm.monitor() {
            if m.monitor(peer, name) {
                m.flush();
            }
        }
    }

    /// A host that holds nothing and waits for nothing is forgotten (a client that
    /// only tests or is refused leaves no record behind).
    fn forget_idle_host(&self, host: u64) {
        let waiting = self
            .nlm
            .blocked
            .lock()
            .unwrap()
            .iter()
            .any(|b| b.host == host);
        if waiting {
            return;
        }
        let mut st = self.v4.state.lock().unwrap();
        if !st.nlm_host_holds(host) {
            st.forget_nlm_host(host);
        }
    }

    fn nlm_cancel(&self, call: &Call<'_>, a: &CancelArgs) -> Stat {
        let file = match self.nlm_file(call, &a.lock.fh) {
            Ok(f) => f,
            Err(s) => return s,
        };
        let Some(host) = self
            .v4
            .state
            .lock()
            .unwrap()
            .find_nlm_host(call.peer.ip(), &a.lock.caller_name)
        else {
            return Stat::Denied;
        };
        let found = {
            let mut blocked = self.nlm.blocked.lock().unwrap();
            let before = blocked.len();
            blocked.retain(|b| !b.same_request(host, file, &a.lock, a.exclusive));
            blocked.len() != before
        };
        self.forget_idle_host(host);
        if found {
            Stat::Granted
        } else {
            Stat::Denied
        }
    }

    fn nlm_unlock(&self, call: &Call<'_>, a: &UnlockArgs) -> Stat {
        let file = match self.nlm_file(call, &a.lock.fh) {
            Ok(f) => f,
            Err(s) => return s,
        };
        let (start, end) = a.lock.range();
        let host = {
            let mut st = self.v4.state.lock().unwrap();
            let host = st.find_nlm_host(call.peer.ip(), &a.lock.caller_name);
            if let Some(h) = host {
                st.nlm_unlock(h, a.lock.svid, file, start, end);
            }
            host
        };
        if let Some(h) = host {
            self.forget_idle_host(h);
        }
        self.nlm.wake_granter();
        Stat::Granted
    }

    fn nlm_share(&self, call: &Call<'_>, a: &ShareArgs, share: bool) -> Stat {
        let file = match self.nlm_file(call, &a.fh) {
            Ok(f) => f,
            Err(s) => return s,
        };
        let peer = call.peer.ip();
        if !share {
            let host = {
                let mut st = self.v4.state.lock().unwrap();
                let host = st.find_nlm_host(peer, &a.caller_name);
                if let Some(h) = host {
                    st.nlm_unshare(h, &a.oh, file);
                }
                host
            };
            if let Some(h) = host {
                self.forget_idle_host(h);
            }
            return Stat::Granted;
        }
        let in_grace = self.in_grace();
        if in_grace && !a.reclaim {
            return Stat::DeniedGracePeriod;
        }
        // A share that denies others is a change in the eyes of delegation holders.
        if a.mode != 0 && !self.break_delegations(file, None) {
            return Stat::Denied;
        }
        let (ok, released, host) = {
            let mut st = self.v4.state.lock().unwrap();
            let host = st.nlm_host(peer, &a.caller_name);
            let (ok, released) = st.nlm_share(host, &a.oh, file, a.access, a.mode);
            (ok, released, host)
        };
        release_all(released);
        if ok {
            self.monitor_durably(peer, &a.caller_name);
            Stat::Granted
        } else {
            self.forget_idle_host(host);
            Stat::Denied
        }
    }

    /// Drops every lock, share and blocked request of the client machine at `addr`
    /// (named `name`, when the call says), which restarted.
    pub(crate) fn nlm_free_all(&self, addr: IpAddr, name: Option<&str>) {
        let hosts: Vec<u64> = {
            let mut st = self.v4.state.lock().unwrap();
            let hosts: Vec<u64> = st
                .nlm_hosts_at(addr)
                .into_iter()
                .filter(|h| name.is_none_or(|n| st.nlm_hosts[h].name == n))
                .collect();
            for h in &hosts {
                st.forget_nlm_host(*h);
            }
            hosts
        };
        self.nlm
            .blocked
            .lock()
            .unwrap()
            .retain(|b| !hosts.contains(&b.host));
        if !hosts.is_empty() {
            tracing::info!(client = %addr, "a lock client restarted: its NLM locks are released");
        }
        if let Some(m) = self.nlm.monitor() {
            m.unmonitor(addr);
        }
        self.nlm.wake_granter();
    }

    // ---- NSM (the calls a client's status monitor makes here) ----

    pub(crate) fn nsm(&self, call: &Call<'_>) -> Reply {
        if call.header.version != proto::NSM_V1 {
            return Reply::new(call.reply(Accept::ProgMismatch { low: 1, high: 1 }));
        }
        let state = self.nlm.monitor().map_or(1, |m| m.state);
        let mut d = call.args();
        let r: XdrResult<Encoder> = (|| {
            Ok(match call.header.procedure {
                0 => {
                    d.finish()?;
                    call.reply(Accept::Success)
                }
                nsm::SM_STAT | nsm::SM_MON => {
                    // Monitoring is for the callers' own lock managers: refused.
                    let mut e = call.reply(Accept::Success);
                    e.u32(1).u32(state);
                    e
                }
                nsm::SM_UNMON | nsm::SM_UNMON_ALL => {
                    let mut e = call.reply(Accept::Success);
                    e.u32(state);
                    e
                }
                nsm::SM_SIMU_CRASH => call.reply(Accept::Success),
                nsm::SM_NOTIFY => {
                    let name = d.opaque(MAX_NAME)?;
                    let _their_state = d.i32()?;
                    d.finish()?;
                    let name = String::from_utf8_lossy(name).into_owned();
                    tracing::info!(client = %call.peer.ip(), name, "SM_NOTIFY: a lock client restarted");
                    self.nlm_free_all(call.peer.ip(), None);
                    call.reply(Accept::Success)
                }
                _ => call.reply(Accept::ProcUnavail),
            })
        })();
        match r {
            Ok(e) => Reply::new(e),
            Err(_) => Reply::new(call.reply(Accept::GarbageArgs)),
        }
    }

    /// One pass over the blocked locks: those that can be taken now are, and
    /// their clients are told.
    fn retry_blocked(&self) {
        let waiting: Vec<Blocked> = self.nlm.blocked.lock().unwrap().clone();
        if waiting.is_empty() || self.in_grace() {
            return;
        }
        for b in waiting {
            if !self.break_delegations(b.file, None) {
                continue;
            }
            let (start, end) = b.args.lock.range();
            let (granted, released) = {
                // Only if it is still blocked (not cancelled or settled meanwhile):
                // the blocked list's lock is taken before the state's everywhere.
                let mut blocked = self.nlm.blocked.lock().unwrap();
                let Some(at) = blocked
                    .iter()
                    .position(|x| x.same_request(b.host, b.file, &b.args.lock, b.args.exclusive))
                else {
                    continue;
                };
                let mut st = self.v4.state.lock().unwrap();
                let (r, released) = st.nlm_lock(
                    b.host,
                    b.args.lock.svid,
                    b.file,
                    b.args.exclusive,
                    start,
                    end,
                );
                if r.is_ok() {
                    blocked.remove(at);
                }
                (r.is_ok(), released)
            };
            release_all(released);
            if granted {
                if b.monitored {
                    self.monitor_durably(b.peer, &b.args.lock.caller_name);
                }
                self.send_granted(b);
            }
        }
    }

    /// GRANTED (or GRANTED_MSG) for a blocked lock just taken, from a thread of its
    /// own; a client that turns it down or cannot be reached loses the lock again.
    fn send_granted(&self, b: Blocked) {
        if !self.nlm.started.load(Ordering::Acquire) {
            return;
        }
        let Some(me) = self.me.get().cloned() else {
            return;
        };
        let port = self.nlm.client_portmapper.load(Ordering::Relaxed);
        let undo = b.clone();
        let sent = self.nlm.spawn_call("nlm-granted", move || {
            let args = TestArgs {
                cookie: b.args.cookie.clone(),
                exclusive: b.args.exclusive,
                lock: b.args.lock.clone(),
            };
            let mut e = Encoder::new();
            encode_test_args(&mut e, b.version, &args);
            let procedure = if b.asynchronous { GRANTED_MSG } else { GRANTED };
            let mut outcome = Err(std::io::Error::other("not sent"));
            for attempt in 0..GRANT_TRIES {
                if attempt > 0 {
                    std::thread::sleep(callback::CALL_TIMEOUT);
                }
                outcome = callback::call_service(
                    b.peer,
                    port,
                    b.proto,
                    NLM_PROGRAM,
                    b.version,
                    procedure,
                    &e.buf,
                    !b.asynchronous,
                );
                if outcome.is_ok() {
                    break;
                }
            }
            let accepted = match &outcome {
                Ok(None) => true,
                Ok(Some(res)) => {
                    let stat = decode_res(&mut Decoder::new(res)).map(|(_, s)| s);
                    stat == Ok(Stat::Granted as u32)
                }
                Err(_) => false,
            };
            if !accepted {
                if let Some(svc) = me.upgrade() {
                    svc.undo_grant(&b);
                }
            }
            match outcome {
                Ok(_) if accepted => {
                    tracing::info!(client = %b.peer, "NLM: a blocked lock was taken and its client told (GRANTED)");
                    Ok(())
                }
                Ok(_) => Err(std::io::Error::other(
                    "the client turned the granted lock down (it stopped waiting)",
                )),
                Err(e) => Err(e),
            }
        });
        if !sent {
            self.undo_grant(&undo);
        }
    }

    fn undo_grant(&self, b: &Blocked) {
        let (start, end) = b.args.lock.range();
        {
            let mut st = self.v4.state.lock().unwrap();
            if st.nlm_holds(
                b.host,
                b.args.lock.svid,
                b.file,
                b.args.exclusive,
                start,
                end,
            ) {
                st.nlm_unlock(b.host, b.args.lock.svid, b.file, start, end);
            }
        }
        self.forget_idle_host(b.host);
        self.nlm.wake_granter();
    }
}

/// The granter: waits for releases (or `RETRY_EVERY`) while locks are blocked and
/// retries them; ends when the service goes.
fn granter(weak: Weak<NfsService>) {
    loop {
        let Some(svc) = weak.upgrade() else { return };
        {
            let blocked = svc.nlm.blocked.lock().unwrap();
            // Woken by a release or a new blocked lock; the timeout also lets the
            // thread see the service go.
            let wait = if blocked.is_empty() {
                Duration::from_secs(5)
            } else {
                RETRY_EVERY
            };
            let _ = svc.nlm.wake.wait_timeout(blocked, wait).unwrap();
        }
        svc.retry_blocked();
    }
}
