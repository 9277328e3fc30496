//! Remote replication between daemons: this appliance's filesystems copied, snapshot
//! by snapshot, to another shoal daemon (a *target*), on a schedule, continuously or
//! on demand, and the receiving side of the same.
//!
//! Who owns what:
//! - `mod.rs` (here): the replication book (`replication.json` in the state directory:
//!   targets, actions with their history, credentials the replicas accept, and the
//!   datasets this appliance holds as replicas) and the scheduler thread.
//! - `sender.rs`: one run of an action: snapshot, find the newest snapshot both sides
//!   hold, stream every snapshot since to the target over HTTPS (throttled, counted),
//!   prune the old replication snapshots.
//! - `incoming.rs`: the target's side, `/api/v1/replication/incoming/...`: what a
//!   replica holds, and receiving streams into it.
//! - `admin_api.rs`: the admin API over all of it (`shoal replication ...`, the UI).
//!
//! The credential is exchanged once: the replica's operator makes one (`shoal
//! replication credential create NAME`, 32 random bytes shown once; the replica keeps
//! only its blake3 hash), the primary's operator gives it to `target add` with the
//! replica's address and its TLS certificate (the only certificate the primary then
//! trusts for that target). Incoming calls are refused without a known credential
//! whatever the API's login setting, and a credential lets in nothing else.
//!
//! Resuming: the replica receives resumably (unless it is shared: its clients must see
//! a whole snapshot, so a cut receive is undone there) and records the point each
//! commit reaches in the book; the next run asks for it and, if it still holds that
//! snapshot, sends the rest of the cut stream first (`pool::send::writer::send_from`)
//! and then every snapshot since, so nothing that arrived is sent twice. A run that
//! fails after bytes reached the target keeps its snapshot for that.
//!
//! File handles: the sender passes the filesystem's handle identity (the key and
//! object set id its handles are made with) with every stream; the replica keeps it in
//! the book for that object set and its share makes and accepts the same handles, so
//! NFS clients that fail over keep theirs (kept after promotion; not recorded when the
//! key is one of the replica's own pools', as within one daemon).
//!
//! A replica is read-only (`readonly=on` set locally after every receive) until it is
//! promoted; a promoted filesystem becomes a replica again only when its operator
//! demotes it, so a stream never lands on a filesystem someone writes to.
//!
//! Holds: the base of the next incremental stream is held on both sides (`zfs hold`),
//! so neither pruning nor an operator's `snapshot destroy` can break the chain. The
//! sender holds the snapshot a run delivered with `replication:<action id>` and only
//! then releases that tag from the previous base; the replica does the same with
//! `replication` for the newest snapshot it received. Removing an action releases its
//! holds; promoting a replica keeps its hold (the base of a replication back).
//!
//! Crash safety: the book is written whole or not at all (`write_atomically`). A
//! dataset is recorded as a replica before the first byte of a full stream is applied,
//! so a partial one left by a crash is known to be the replica's and is received
//! anew; an incremental cut by a crash is rolled back to its base by the next
//! receive (`pool::send::receiver`). A run cut on the sending side leaves its new
//! snapshot behind; the next run's base is found by identity (guid), not by name, so
//! that snapshot is harmless and is pruned later.

pub mod admin_api;
pub mod incoming;
pub mod sender;
pub mod wire;

use crate::{write_atomically, Result, ServerError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

pub const BOOK_FILE: &str = "replication.json";
/// Runs remembered per action.
const HISTORY: usize = 20;
/// Replication snapshots are named `<prefix><unix seconds>`; only these are pruned.
pub const SNAPSHOT_PREFIX: &str = "repl-";
/// How long a continuous action waits after a failed run before the next.
const RETRY_AFTER_FAILURE: u64 = 10;

/// Another daemon that receives this appliance's filesystems.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    pub name: String,
    /// `host:port` of its admin API.
    pub address: String,
    /// Its API's certificate (PEM): the target speaks HTTPS and only this certificate
    /// is trusted for it. Without one the target is reached over plain HTTP, which is
    /// for loopback and tests only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<String>,
    /// The credential the target's operator made for this appliance.
    pub credential: String,
}

/// A target as the API shows it: never the credential.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetInfo {
    pub name: String,
    pub address: String,
    pub tls: bool,
}

impl From<&Target> for TargetInfo {
    fn from(t: &Target) -> TargetInfo {
        TargetInfo {
            name: t.name.clone(),
            address: t.address.clone(),
            tls: t.certificate.is_some(),
        }
    }
}

/// One filesystem replicated to one target.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Action {
    pub id: u64,
    /// `pool/fs` on this appliance.
    pub filesystem: String,
    pub target: String,
    /// `pool/fs` on the target.
    pub remote: String,
    /// Seconds between the starts of scheduled runs; 0 = only on demand (or continuous).
    #[serde(default)]
    pub interval_seconds: u64,
    /// Start the next run as soon as one ends.
    #[serde(default)]
    pub continuous: bool,
    /// Replication snapshots kept here (at least 1: the newest, the next run's base).
    pub keep_local: u32,
    /// Replication snapshots kept on the target (at least 1).
    pub keep_remote: u32,
    /// Bytes per second on the wire; 0 = unlimited.
    #[serde(default)]
    pub bandwidth: u64,
    /// Alert when the target is more than this many seconds behind (0: never); none:
    /// see `alert_lag`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_lag_seconds: Option<u64>,
    /// Run after each snapshot a snapshot schedule takes of the filesystem
    /// (`schedules.rs`), so the target gets it at once.
    #[serde(default)]
    pub follow_schedules: bool,
}

/// The least lag a default lag alert waits for.
pub const MIN_DEFAULT_ALERT_LAG: u64 = 300;

impl Action {
    /// The lag past which the target counts as behind: the action's own setting, or
    /// else three intervals (five minutes at least) for a scheduled action, five
    /// minutes for a continuous one, and never for one run only on demand.
    pub fn alert_lag(&self) -> Option<u64> {
        match self.alert_lag_seconds {
            Some(0) => None,
            Some(s) => Some(s),
            None if self.continuous => Some(MIN_DEFAULT_ALERT_LAG),
            None if self.interval_seconds > 0 => {
                Some((3 * self.interval_seconds).max(MIN_DEFAULT_ALERT_LAG))
            }
            None => None,
        }
    }
}

/// One run of an action, as the history keeps it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunRecord {
    pub started_unix: u64,
    pub finished_unix: u64,
    /// The snapshot sent (`pool/fs@repl-...`).
    pub snapshot: String,
    /// The snapshot the target held that the streams applied on; none for a full send.
    pub base: Option<String>,
    /// Stream bytes that reached the target.
    pub bytes: u64,
    /// Streams sent (one per snapshot since the base).
    pub streams: u64,
    pub ok: bool,
    pub error: Option<String>,
}

/// A run in progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Progress {
    pub started_unix: u64,
    pub snapshot: String,
    pub bytes: u64,
    /// Bytes per second since the run started.
    pub rate: u64,
}

/// An action with what it has done.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ActionStatus {
    #[serde(flatten)]
    pub action: Action,
    pub running: Option<Progress>,
    /// Seconds since the newest snapshot that reached the target was taken; none
    /// before the first success.
    pub lag_seconds: Option<u64>,
    /// Newest first.
    pub history: Vec<RunRecord>,
}

/// A dataset this appliance holds as a replica.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Incoming {
    /// The credential whose holder replicates into it; none after a demotion, until
    /// the first stream binds it.
    pub credential: Option<String>,
    pub last_snapshot: Option<String>,
    pub last_received_unix: Option<u64>,
    /// Where a receive cut short got to, committed: the next stream may resume there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<ResumeState>,
}

/// A resumable receive's committed point, for the object set it was made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeState {
    pub local_objset: u64,
    #[serde(flatten)]
    pub point: pool::send::receiver::ResumePoint,
}

/// The file handles a filesystem here is served with: those of the appliance it was
/// replicated from, so NFS clients keep their handles when they fail over to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandleRecord {
    /// The object set id of the filesystem here; the record applies to it only (a
    /// filesystem destroyed and made again under the name is another one).
    pub local_objset: u64,
    /// The object set id in the handles.
    pub objset: u64,
    /// The key the handles are made with (hex), a secret like the pools' own.
    pub key: String,
}

/// Handle identities travel as `objset:key-hex` in this request header.
pub const HANDLE_HEADER: &str = "x-shoal-handle-identity";

impl HandleRecord {
    pub fn header_value(&self) -> String {
        format!("{}:{}", self.objset, self.key)
    }

    pub fn parse_header(value: &str, local_objset: u64) -> Option<HandleRecord> {
        let (objset, key) = value.split_once(':')?;
        if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(HandleRecord {
            local_objset,
            objset: objset.parse().ok()?,
            key: key.to_ascii_lowercase(),
        })
    }

    pub fn identity(&self) -> Option<nfs::HandleIdentity> {
        let mut key = [0u8; 32];
        for (i, b) in key.iter_mut().enumerate() {
            *b = u8::from_str_radix(self.key.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(nfs::HandleIdentity {
            key: nfs::HandleKey::new(key),
            objset: self.objset,
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CredentialEntry {
    /// blake3 of the token, hex.
    pub hash: String,
    pub created_unix: u64,
}

/// What `replication.json` holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Book {
    #[serde(default)]
    pub targets: BTreeMap<String, Target>,
    #[serde(default)]
    pub actions: BTreeMap<u64, Action>,
    #[serde(default)]
    pub history: BTreeMap<u64, VecDeque<RunRecord>>,
    #[serde(default)]
    pub credentials: BTreeMap<String, CredentialEntry>,
    #[serde(default)]
    pub incoming: BTreeMap<String, Incoming>,
    /// Filesystems served with another appliance's handles (kept after promotion).
    #[serde(default)]
    pub handles: BTreeMap<String, HandleRecord>,
    #[serde(default)]
    pub next_action: u64,
}

/// A run's live counters, shared with its transfer.
#[derive(Debug)]
pub struct LiveRun {
    pub started_unix: u64,
    pub snapshot: Mutex<String>,
    pub bytes: AtomicU64,
}

pub struct Replication {
    path: PathBuf,
    book: Mutex<Book>,
    running: Mutex<BTreeMap<u64, Arc<LiveRun>>>,
    /// Datasets a stream is being received into (one receive at a time each).
    receiving: Mutex<std::collections::BTreeSet<String>>,
    /// Action id -> when a scheduled run last found nothing changed since the snapshot
    /// the target got from its last run (the target was current then). Not kept
    /// across restarts: the next scheduled check finds it again.
    current: Mutex<HashMap<u64, u64>>,
    /// Actions that follow schedules and got a scheduled snapshot while running: the
    /// scheduler thread runs them again once that run ends.
    rerun: Mutex<std::collections::HashSet<u64>>,
    stop: AtomicBool,
}

/// The hold a replication action keeps, on the sending side, on its filesystem's
/// base: the newest snapshot the target is known to hold, which the next incremental
/// stream starts from.
pub fn action_hold_tag(action: u64) -> String {
    format!("replication:{action}")
}

/// The hold a replica keeps on the newest snapshot it received: the base of the next
/// incremental stream into it.
pub const REPLICA_HOLD_TAG: &str = "replication";

/// Holds snapshot `base` of `dataset` with `tag`, then releases `tag` from every
/// other snapshot of it (each committed): the base is never without its hold, and
/// the previous base is let go only once the new one is held.
pub(crate) fn move_hold(
    ds: &fs::Datasets,
    dataset: &str,
    base: &str,
    tag: &str,
) -> std::result::Result<(), String> {
    let pool = ds.pool();
    let id = pool
        .objset_id(base)
        .ok_or_else(|| format!("snapshot {base} is gone"))?;
    let held = pool.snapshot_holds(id).map_err(|e| e.to_string())?;
    if !held.iter().any(|(t, _)| t == tag) {
        ds.hold(base, tag).map_err(|e| e.to_string())?;
    }
    release_all_but(ds, dataset, tag, Some(base))
}

/// Releases `tag` from every snapshot of `dataset` but `keep`.
pub(crate) fn release_all_but(
    ds: &fs::Datasets,
    dataset: &str,
    tag: &str,
    keep: Option<&str>,
) -> std::result::Result<(), String> {
    let pool = ds.pool();
    for (id, name) in ds.snapshot_names(dataset).map_err(|e| e.to_string())? {
        if Some(name.as_str()) == keep {
            continue;
        }
        let held = pool.snapshot_holds(id).map_err(|e| e.to_string())?;
        if held.iter().any(|(t, _)| t == tag) {
            ds.release(&name, tag).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

fn hash_token(token: &str) -> String {
    blake3::hash(token.as_bytes()).to_hex().to_string()
}

impl Replication {
    pub fn open(state_dir: &Path) -> Result<Replication> {
        let path = state_dir.join(BOOK_FILE);
        let book = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| ServerError::Config(format!("{}: {e}", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Book::default(),
            Err(e) => return Err(ServerError::Io(format!("reading {}", path.display()), e)),
        };
        Ok(Replication {
            path,
            book: Mutex::new(book),
            running: Mutex::new(BTreeMap::new()),
            receiving: Mutex::new(Default::default()),
            current: Mutex::new(HashMap::new()),
            rerun: Mutex::new(Default::default()),
            stop: AtomicBool::new(false),
        })
    }

    /// Changes the book and writes it; a change that fails to reach the disk is
    /// undone in memory too.
    pub fn change<T>(&self, f: impl FnOnce(&mut Book) -> Result<T>) -> Result<T> {
        let mut book = self.book.lock().unwrap();
        let mut next = book.clone();
        let out = f(&mut next)?;
        let bytes = serde_json::to_vec_pretty(&next).expect("the book serialises");
        // It holds target credentials: only the daemon's user may read it.
        write_atomically(&self.path, &bytes, 0o600)?;
        *book = next;
        Ok(out)
    }

    pub fn read<T>(&self, f: impl FnOnce(&Book) -> T) -> T {
        f(&self.book.lock().unwrap())
    }

    /// The name of the credential `token` is, if any.
    pub fn credential_named(&self, token: &str) -> Option<String> {
        let h = hash_token(token);
        self.read(|b| {
            b.credentials
                .iter()
                .find(|(_, c)| crate::auth::same(&c.hash, &h))
                .map(|(n, _)| n.clone())
        })
    }

    /// Makes credential `name`; returns its token (shown once, kept only hashed).
    pub fn create_credential(&self, name: &str) -> Result<String> {
        check_label("credential", name)?;
        let token: String = crate::random_bytes::<32>()
            .map_err(|e| ServerError::Io("random bytes for a credential".into(), e))?
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect();
        self.change(|b| {
            if b.credentials.contains_key(name) {
                return Err(ServerError::Conflict(format!(
                    "a credential named '{name}' exists"
                )));
            }
            b.credentials.insert(
                name.to_string(),
                CredentialEntry {
                    hash: hash_token(&token),
                    created_unix: unix_now(),
                },
            );
            Ok(())
        })?;
        Ok(token)
    }

    pub fn statuses(&self) -> Vec<ActionStatus> {
        let running = self.running.lock().unwrap().clone();
        let now = unix_now();
        let current = self.current.lock().unwrap().clone();
        self.read(|b| {
            b.actions
                .values()
                .map(|a| {
                    let history: Vec<RunRecord> = b
                        .history
                        .get(&a.id)
                        .map(|h| h.iter().rev().cloned().collect())
                        .unwrap_or_default();
                    ActionStatus {
                        action: a.clone(),
                        running: running.get(&a.id).map(|r| {
                            let bytes = r.bytes.load(Ordering::Relaxed);
                            Progress {
                                started_unix: r.started_unix,
                                snapshot: r.snapshot.lock().unwrap().clone(),
                                bytes,
                                rate: bytes / now.saturating_sub(r.started_unix).max(1),
                            }
                        }),
                        lag_seconds: lag(&history, current.get(&a.id).copied(), now),
                        history,
                    }
                })
                .collect()
        })
    }

    /// Claims action `id` for a run; None when one is already running.
    pub(crate) fn claim(&self, id: u64) -> Option<Arc<LiveRun>> {
        let mut running = self.running.lock().unwrap();
        if running.contains_key(&id) {
            return None;
        }
        let live = Arc::new(LiveRun {
            started_unix: unix_now(),
            snapshot: Mutex::new(String::new()),
            bytes: AtomicU64::new(0),
        });
        running.insert(id, live.clone());
        Some(live)
    }

    /// A scheduled run that found nothing to send: the target is current as of `at`;
    /// no snapshot was taken and the history is not lengthened.
    fn unchanged(&self, id: u64, at: u64) {
        self.current.lock().unwrap().insert(id, at);
        self.running.lock().unwrap().remove(&id);
    }

    fn finish(&self, id: u64, record: RunRecord) {
        let kept = self.change(|b| {
            if b.actions.contains_key(&id) {
                let h = b.history.entry(id).or_default();
                h.push_back(record.clone());
                while h.len() > HISTORY {
                    h.pop_front();
                }
            }
            Ok(())
        });
        if let Err(e) = kept {
            tracing::warn!(action = id, error = %e, "recording a replication run");
        }
        self.running.lock().unwrap().remove(&id);
    }

    /// Whether a run of an action replicating `filesystem` is under way (its streams
    /// may name any snapshot after its base).
    pub(crate) fn running_for(&self, filesystem: &str) -> bool {
        let running: Vec<u64> = self.running.lock().unwrap().keys().copied().collect();
        self.read(|b| {
            running
                .iter()
                .filter_map(|id| b.actions.get(id))
                .any(|a| a.filesystem == filesystem)
        })
    }

    /// What of replication works in pool `pool` now (a run of an action whose
    /// filesystem is there, or a receive into it), if anything.
    pub fn busy_in_pool(&self, pool: &str) -> Option<String> {
        let running: Vec<u64> = self.running.lock().unwrap().keys().copied().collect();
        let run = self.read(|b| {
            running
                .iter()
                .filter_map(|id| b.actions.get(id))
                .find(|a| fs::pool_of(&a.filesystem) == pool)
                .map(|a| format!("replication action {} runs", a.id))
        });
        run.or_else(|| {
            self.receiving
                .lock()
                .unwrap()
                .iter()
                .find(|d| fs::pool_of(d) == pool)
                .map(|d| format!("a replication stream is being received into {d}"))
        })
    }

    /// Claims dataset `name` for a receive; false when one runs already.
    fn claim_receive(&self, name: &str) -> bool {
        self.receiving.lock().unwrap().insert(name.to_string())
    }

    fn release_receive(&self, name: &str) {
        self.receiving.lock().unwrap().remove(name);
    }

    /// The handles `dataset` (object set `objset`) is served with, when they are
    /// another appliance's.
    pub fn handle_identity(&self, dataset: &str, objset: u64) -> Option<nfs::HandleIdentity> {
        self.read(|b| {
            b.handles
                .get(dataset)
                .filter(|h| h.local_objset == objset)
                .and_then(HandleRecord::identity)
        })
    }

    /// The greatest lag over the actions of pool `pool` (for analytics).
    pub fn lag_of_pool(&self, pool: &str) -> Option<u64> {
        let now = unix_now();
        let current = self.current.lock().unwrap().clone();
        self.read(|b| {
            b.actions
                .values()
                .filter(|a| fs::pool_of(&a.filesystem) == pool)
                .filter_map(|a| {
                    let h: Vec<RunRecord> = b
                        .history
                        .get(&a.id)
                        .map(|h| h.iter().rev().cloned().collect())
                        .unwrap_or_default();
                    lag(&h, current.get(&a.id).copied(), now)
                })
                .max()
        })
    }
}

/// Seconds since the newest successfully sent snapshot was taken (its run's start).
/// Seconds since the target was last known current: the start of the newest
/// successful run, or a later check that found nothing changed since it.
fn lag(history_newest_first: &[RunRecord], current_at: Option<u64>, now: u64) -> Option<u64> {
    history_newest_first
        .iter()
        .find(|r| r.ok)
        .map(|r| now.saturating_sub(r.started_unix.max(current_at.unwrap_or(0))))
}

/// Raises an alert when an action's target falls behind its alert lag, and another
/// when it has caught up. Lag counts from the start of the newest successful run (the
/// snapshot it sent was taken then); an action that never succeeded counts from its
/// first run, so a target that never got anything is behind too.
fn alert_lag(s: &crate::DaemonState, lagging: &mut std::collections::HashSet<u64>, now: u64) {
    let current = s.replication.current.lock().unwrap().clone();
    // (action, what it replicates, (lag, limit) when behind)
    type Verdict = (u64, String, Option<(u64, u64)>);
    let verdicts: Vec<Verdict> = s.replication.read(|b| {
        b.actions
            .values()
            .map(|a| {
                let behind = a.alert_lag().and_then(|limit| {
                    let h = b.history.get(&a.id)?;
                    let since = h
                        .iter()
                        .rev()
                        .find(|r| r.ok)
                        .or_else(|| h.front())
                        .map(|r| r.started_unix)?
                        .max(current.get(&a.id).copied().unwrap_or(0));
                    let lag = now.saturating_sub(since);
                    (lag > limit).then_some((lag, limit))
                });
                let what = format!("{} to {}:{}", a.filesystem, a.target, a.remote);
                (a.id, what, behind)
            })
            .collect()
    });
    lagging.retain(|id| verdicts.iter().any(|(a, ..)| a == id));
    for (id, what, behind) in verdicts {
        let object = format!("replication {id}");
        match behind {
            Some((lag, limit)) if lagging.insert(id) => {
                s.alerts.raise(
                    crate::alerts::Severity::Warning,
                    "replication.lagging",
                    &object,
                    format!("the replica of {what} is {lag} s behind (alert past {limit} s)"),
                );
            }
            None if lagging.remove(&id) => {
                s.alerts.raise(
                    crate::alerts::Severity::Info,
                    "replication.caught_up",
                    &object,
                    format!("the replica of {what} has caught up"),
                );
            }
            _ => {}
        }
    }
}

/// Starts a run of every action that follows the snapshot schedules of one of
/// `datasets`, which a schedule has just snapshotted. An action already running runs
/// again when that run ends (the scheduler thread sees to it).
pub(crate) fn after_scheduled_snapshots(s: &Arc<crate::DaemonState>, datasets: &[&str]) {
    let follow: Vec<u64> = s.replication.read(|b| {
        b.actions
            .values()
            .filter(|a| a.follow_schedules && datasets.contains(&a.filesystem.as_str()))
            .map(|a| a.id)
            .collect()
    });
    for id in follow {
        match s.replication.claim(id) {
            Some(live) => {
                let s = s.clone();
                std::thread::spawn(move || sender::run_claimed(&s, id, live, true));
            }
            // Running: again once it ends, so the new snapshot goes too.
            None => {
                s.replication.rerun.lock().unwrap().insert(id);
            }
        }
    }
}

/// Names of targets and credentials: letters, digits, `-`, `_`, `.`.
pub(crate) fn check_label(what: &str, name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(ServerError::Config(format!(
            "{what} name '{name}': use letters, digits and - _ . (at most 64)"
        )));
    }
    Ok(())
}

/// Starts the thread that starts scheduled and continuous runs; it ends when the
/// daemon's state is gone or `stop_scheduler` is called.
pub fn start_scheduler(state: Weak<crate::DaemonState>) {
    // Actions whose target is behind past their alert lag (alerted once each way).
    let mut lagging: std::collections::HashSet<u64> = Default::default();
    std::thread::Builder::new()
        .name("replication".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            let Some(s) = state.upgrade() else { return };
            if s.replication.stop.load(Ordering::Relaxed) {
                return;
            }
            let now = unix_now();
            alert_lag(&s, &mut lagging, now);
            let current = s.replication.current.lock().unwrap().clone();
            let due: Vec<u64> = s.replication.read(|b| {
                b.actions
                    .values()
                    .filter(|a| {
                        let last = b.history.get(&a.id).and_then(|h| h.back());
                        match last {
                            None => a.continuous || a.interval_seconds > 0,
                            Some(r) if a.continuous => {
                                r.ok || now >= r.finished_unix + RETRY_AFTER_FAILURE
                            }
                            Some(r) => {
                                let last =
                                    r.started_unix.max(current.get(&a.id).copied().unwrap_or(0));
                                a.interval_seconds > 0 && now >= last + a.interval_seconds
                            }
                        }
                    })
                    .map(|a| a.id)
                    .collect()
            });
            let mut due = due;
            {
                // Follow-ups asked for while their action ran, now that it has ended.
                let running = s.replication.running.lock().unwrap();
                let mut rerun = s.replication.rerun.lock().unwrap();
                let ready: Vec<u64> = rerun
                    .iter()
                    .copied()
                    .filter(|id| !running.contains_key(id))
                    .collect();
                for id in ready {
                    rerun.remove(&id);
                    if !due.contains(&id) {
                        due.push(id);
                    }
                }
            }
            for id in due {
                if let Some(live) = s.replication.claim(id) {
                    let s = s.clone();
                    std::thread::spawn(move || sender::run_claimed(&s, id, live, true));
                }
            }
        })
        .expect("spawn the replication scheduler");
}

impl Replication {
    pub fn stop_scheduler(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Reports `replication.lag` of one pool once a second: the greatest lag over the
/// actions replicating its filesystems.
pub struct LagSampler {
    state: Weak<crate::DaemonState>,
    pool: String,
    subject: u32,
}

impl LagSampler {
    pub fn new(
        state: Weak<crate::DaemonState>,
        pool: &str,
        analytics: &analytics::Analytics,
    ) -> Arc<LagSampler> {
        Arc::new(LagSampler {
            state,
            pool: pool.to_string(),
            subject: analytics.register_pool(pool),
        })
    }
}

impl analytics::Sampler for LagSampler {
    fn sample(&self, at: std::time::Instant, out: &mut Vec<analytics::Event>) {
        let Some(s) = self.state.upgrade() else {
            return;
        };
        if let Some(lag) = s.replication.lag_of_pool(&self.pool) {
            out.push(analytics::Event::Meter(analytics::MeterEvent {
                meter: analytics::Meter::ReplicationLag,
                subject: self.subject,
                labels: ["", "", ""],
                value: lag,
                latency_ns: 0,
                at,
            }));
        }
    }
}
