//! Pool administration while the daemon serves: creating, importing, exporting and
//! destroying pools, replacing and clearing devices, through the admin API
//! (`/api/v1/pools...`), which the CLI's `shoal pool` commands use when a daemon runs.
//!
//! The daemon owns every pool it holds; opening device files and keeping the pool
//! registry and its locks is the job of whoever started it, behind [`PoolHost`] (the
//! `shoal` binary), so this crate never touches the registry's files.
//!
//! Invariants:
//! - A pool is taken (`take_pool`) whole before any request can reach it: its
//!   analytics, handle key and datasets are in place before its shares are added.
//! - A pool is let go (`release_pool`) only when nothing of this daemon works in it: no
//!   replication run or receive, no scrub or resilver; its shares are removed from the
//!   NFS service first, so no new call reaches it, then it leaves the set of pools, and
//!   only then is it exported or destroyed. If that fails it is taken back.
//! - Device paths in requests are confined to the configured device directories
//!   (`[storage] device_dirs`) and block devices under /dev: the API never creates or
//!   opens files elsewhere.
//! - Long operations (scrub, resilver) publish their progress in `operations` while
//!   they run; one per pool at a time.
//! - A data device of a redundant vdev that is FAULTED or missing is replaced by the
//!   pool's first spare big enough (`activate_spare`, run by the alert monitor every
//!   2 s), as a resilver operation; a spare the replacement could not use is added
//!   back.

use crate::api::{run_blocking as blocking, ApiError, ApiResult, Body, Shared};
use crate::{DaemonState, Result, ServerError};
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::Json;
use pool::pool::{PoolStatus, ResilverSummary, ScrubProgress};
use pool::Pool;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Makes, finds and lets go of pools for the daemon (the `shoal` binary: it opens
/// devices as the daemon's options say, and keeps the registry and its locks).
pub trait PoolHost: Send + Sync {
    /// Creates pool `name` from zpool-style layout words whose device names are
    /// absolute paths, creating missing device files of `size` bytes when given, and
    /// registers it. Nothing is left behind when it fails.
    fn create(&self, name: &str, layout: &[String], size: Option<u64>) -> Result<Arc<Pool>>;
    /// Imports the pool whose devices are in `dir` (`name` when several are there)
    /// and registers it.
    fn import(&self, dir: &Path, name: Option<&str>) -> Result<Arc<Pool>>;
    /// Exports a pool the daemon let go of, and forgets it.
    fn export(&self, pool: &Pool) -> Result<()>;
    /// Destroys a pool the daemon let go of (its labels wiped), and forgets it.
    fn destroy(&self, pool: &Pool) -> Result<()>;
    /// Opens the device at `path` for a replacement, creating a file of `size` bytes
    /// if none is there; true when it was created (removed again if the replace fails).
    fn open_device(&self, path: &Path, size: Option<u64>) -> Result<(pool::pool::DeviceArg, bool)>;
    /// The pool's devices changed (a replacement): record them.
    fn devices_changed(&self, pool: &Pool) -> Result<()>;
}

/// A scrub or resilver running in a pool.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Operation {
    pub pool: String,
    /// `scrub` or `resilver`.
    pub kind: String,
    /// The device being resilvered.
    pub device: Option<String>,
    pub started_unix: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// Bytes per second since the start.
    pub rate: f64,
    /// Seconds left at that rate; none until there is a rate.
    pub seconds_left: Option<u64>,
}

/// The operations running, by pool.
#[derive(Default)]
pub struct Operations {
    running: Mutex<std::collections::BTreeMap<String, (Operation, Instant)>>,
}

impl Operations {
    /// Claims `pool` for an operation; 409 when one runs there already.
    pub(crate) fn begin(
        &self,
        pool: &str,
        kind: &str,
        device: Option<&str>,
    ) -> Result<OperationGuard<'_>> {
        let mut running = self.running.lock().unwrap();
        if let Some((op, _)) = running.get(pool) {
            return Err(ServerError::Conflict(format!(
                "a {} runs in pool '{pool}' (started at {})",
                op.kind, op.started_unix
            )));
        }
        running.insert(
            pool.to_string(),
            (
                Operation {
                    pool: pool.to_string(),
                    kind: kind.to_string(),
                    device: device.map(str::to_string),
                    started_unix: crate::replication::unix_now(),
                    bytes_done: 0,
                    bytes_total: 0,
                    rate: 0.0,
                    seconds_left: None,
                },
                Instant::now(),
            ),
        );
        Ok(OperationGuard {
            ops: self,
            pool: pool.to_string(),
        })
    }

    pub fn list(&self) -> Vec<Operation> {
        self.running
            .lock()
            .unwrap()
            .values()
            .map(|(op, _)| op.clone())
            .collect()
    }

    pub fn in_pool(&self, pool: &str) -> Option<Operation> {
        self.running
            .lock()
            .unwrap()
            .get(pool)
            .map(|(op, _)| op.clone())
    }
}

/// Ends its operation when dropped (however the operation ends).
pub(crate) struct OperationGuard<'a> {
    ops: &'a Operations,
    pool: String,
}

impl OperationGuard<'_> {
    pub(crate) fn progress(&self, p: ScrubProgress) {
        let mut running = self.ops.running.lock().unwrap();
        if let Some((op, started)) = running.get_mut(&self.pool) {
            op.bytes_done = p.bytes_done;
            op.bytes_total = p.bytes_total;
            let secs = started.elapsed().as_secs_f64();
            op.rate = if secs > 0.0 {
                p.bytes_done as f64 / secs
            } else {
                0.0
            };
            op.seconds_left = (op.rate > 0.0)
                .then(|| (p.bytes_total.saturating_sub(p.bytes_done) as f64 / op.rate) as u64);
        }
    }
}

impl Drop for OperationGuard<'_> {
    fn drop(&mut self) {
        self.ops.running.lock().unwrap().remove(&self.pool);
    }
}

impl DaemonState {
    /// Takes `pool` into the daemon: analytics, its handle key, its datasets, then
    /// its shares (the config file's, then those changed through the API). At start
    /// (`strict`) a share that fails fails the start; later it is logged and skipped.
    pub(crate) fn take_pool(self: &Arc<Self>, pool: Arc<Pool>, strict: bool) -> Result<()> {
        let name = pool.name.clone();
        if self.held.read().unwrap().contains_key(&name) {
            return Err(ServerError::Conflict(format!(
                "a pool named '{name}' is imported already"
            )));
        }
        if self.analytics_enabled {
            pool.attach_analytics(&self.analytics);
            self.analytics
                .add_sampler(crate::samplers::PoolSampler::new(&pool, &self.analytics));
            self.analytics
                .add_sampler(crate::replication::LagSampler::new(
                    Arc::downgrade(self),
                    &name,
                    &self.analytics,
                ));
        }
        let key = crate::handle_key(&self.state_dir, pool.guid)?;
        self.service.add_pool_key(&name, nfs::HandleKey::new(key));
        let datasets = Arc::new(fs::Datasets::new(pool.clone())?);
        self.held
            .write()
            .unwrap()
            .insert(name.clone(), (pool, datasets));
        let mut shares: std::collections::BTreeMap<String, Option<String>> = self
            .config_shares
            .iter()
            .filter(|(d, _)| fs::pool_of(d) == name)
            .map(|(d, r)| (d.clone(), Some(r.clone())))
            .collect();
        shares.extend(
            crate::read_persisted_shares(&self.state_dir)?
                .into_iter()
                .filter(|(d, _)| fs::pool_of(d) == name),
        );
        for (dataset, rules) in shares {
            let Some(rules) = rules else { continue };
            match self.share(&dataset, &rules, false) {
                Ok(()) => {}
                Err(e) if strict => return Err(e),
                Err(e) => tracing::warn!(%dataset, error = %e, "sharing a taken pool's dataset"),
            }
        }
        if let Some(iscsi) = &self.iscsi {
            iscsi.rebuild(self);
        }
        tracing::info!(pool = %name, "pool taken");
        Ok(())
    }

    /// Lets go of pool `name` (see the module's invariants). `forget_shares`: its
    /// shares are dropped from `shares.json` too (a destroy); an export keeps them
    /// for the next import.
    fn release_pool(&self, name: &str, forget_shares: bool) -> Result<Arc<Pool>> {
        let (pool, _) = self
            .held
            .read()
            .unwrap()
            .get(name)
            .cloned()
            .ok_or_else(|| ServerError::NotFound(format!("no imported pool named '{name}'")))?;
        if let Some(what) = self.replication.busy_in_pool(name) {
            return Err(ServerError::Conflict(format!(
                "pool '{name}' is busy: {what}; wait for it to end"
            )));
        }
        self.refuse_if_mounted(name)?;
        if let Some(op) = self.operations.in_pool(name) {
            return Err(ServerError::Conflict(format!(
                "a {} runs in pool '{name}'; wait for it to end",
                op.kind
            )));
        }
        for share in self.service.shares() {
            if fs::pool_of(&share.dataset) == name {
                self.service.remove_share(&share.dataset);
                tracing::info!(dataset = %share.dataset, "unshared: its pool is let go");
            }
        }
        if forget_shares {
            crate::forget_persisted_shares(&self.state_dir, name)?;
        }
        if let Some(iscsi) = &self.iscsi {
            iscsi.release_pool(self, name);
        }
        self.held.write().unwrap().remove(name);
        if let Some(iscsi) = &self.iscsi {
            iscsi.rebuild(self);
        }
        Ok(pool)
    }

    pub(crate) fn host(&self) -> std::result::Result<&Arc<dyn PoolHost>, ApiError> {
        self.host.as_ref().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "this daemon was started with a fixed set of pools".to_string(),
            )
        })
    }

    /// `path` (absolute, or relative to the first device directory) if it lies in a
    /// configured device directory or is a block device under /dev.
    pub(crate) fn device_path(&self, path: &str) -> Result<PathBuf> {
        let p = Path::new(path);
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            match self.device_dirs.first() {
                Some(d) => d.join(p),
                None => {
                    return Err(ServerError::Config(format!(
                        "device '{path}': give an absolute path (no [storage] device_dirs \
                         are configured)"
                    )))
                }
            }
        };
        if p.components().any(|c| c == std::path::Component::ParentDir) {
            return Err(ServerError::Config(format!(
                "device '{path}': no '..' allowed"
            )));
        }
        let in_dir = self
            .device_dirs
            .iter()
            .any(|d| p.parent() == Some(d.as_path()));
        let block_device = p.starts_with("/dev") && {
            use std::os::unix::fs::FileTypeExt;
            std::fs::metadata(&p).is_ok_and(|m| m.file_type().is_block_device())
        };
        if block_device {
            if let Some(why) = block_device_in_use(&p, &busy_devices()) {
                return Err(ServerError::Config(format!(
                    "device '{}' {why}: it is not offered and not taken",
                    p.display()
                )));
            }
        }
        if !(in_dir || block_device) {
            return Err(ServerError::Config(format!(
                "device '{}' is neither in a device directory ([storage] device_dirs: {}) \
                 nor a block device under /dev",
                p.display(),
                if self.device_dirs.is_empty() {
                    "none".to_string()
                } else {
                    self.device_dirs
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )));
        }
        Ok(p)
    }

    /// Runs a scrub of `pool` as an operation (progress in `operations`), flushes its
    /// repairs, raises its alert and notes when it ended (for `scrub_every`).
    pub(crate) fn scrub_pool(&self, pool: &Pool) -> Result<pool::pool::ScrubSummary> {
        let op = self.operations.begin(&pool.name, "scrub", None)?;
        let summary = pool.scrub(&|p| op.progress(p))?;
        pool.storage.flush_all();
        drop(op);
        let name = &pool.name;
        let (severity, what) = if summary.errors > 0 {
            (
                crate::alerts::Severity::Critical,
                "blocks no copy of which is readable",
            )
        } else if summary.repaired_bytes > 0 {
            (crate::alerts::Severity::Warning, "damage repaired")
        } else {
            (crate::alerts::Severity::Info, "no damage")
        };
        self.alerts.raise(
            severity,
            "scrub.finished",
            name,
            format!(
                "scrub of pool {name} finished in {:.0} s: {} blocks read, {} bytes repaired, \
                 {} unreadable ({what})",
                summary.seconds, summary.blocks, summary.repaired_bytes, summary.errors
            ),
        );
        self.note_scrub(pool.guid, crate::replication::unix_now());
        Ok(summary)
    }

    /// The scrub schedule's book: pool guid -> when its last scrub ended (or, before
    /// the first, when the daemon first saw the pool).
    fn scrub_book(&self) -> std::collections::BTreeMap<String, u64> {
        std::fs::read(self.state_dir.join(SCRUB_BOOK))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    fn note_scrub(&self, guid: u64, unix: u64) {
        let _one = self.scrub_book_lock.lock().unwrap();
        let mut book = self.scrub_book();
        book.insert(format!("{guid:016x}"), unix);
        let bytes = serde_json::to_vec_pretty(&book).expect("a map of numbers serialises");
        if let Err(e) = crate::write_atomically(&self.state_dir.join(SCRUB_BOOK), &bytes, 0o644) {
            tracing::warn!(error = %e, "recording a scrub's end");
        }
    }

    /// Starts a scrub of `pool` on its own thread when `[storage] scrub_every` has
    /// passed since its last one and nothing else runs in it (called by the alert
    /// monitor every 2 s).
    pub(crate) fn scrub_if_due(self: &Arc<Self>, pool: &Arc<Pool>) {
        let Some(every) = self.scrub_every else {
            return;
        };
        if self.operations.in_pool(&pool.name).is_some() {
            return;
        }
        let now = crate::replication::unix_now();
        let Some(&last) = self.scrub_book().get(&format!("{:016x}", pool.guid)) else {
            // First seen: the schedule counts from now.
            self.note_scrub(pool.guid, now);
            return;
        };
        if now < last.saturating_add(every.as_secs()) {
            return;
        }
        let (s, pool) = (self.clone(), pool.clone());
        std::thread::spawn(move || {
            tracing::info!(pool = %pool.name, "scheduled scrub");
            if let Err(e) = s.scrub_pool(&pool) {
                tracing::warn!(pool = %pool.name, error = %e, "scheduled scrub");
            }
        });
    }
}

/// The scrub schedule's book in the state directory.
const SCRUB_BOOK: &str = "scrubs.json";

/// Words of a layout that are keywords, not devices.
/// The words of a layout that are no device.
pub const LAYOUT_WORDS: [&str; 8] = [
    "mirror", "raidz", "raidz1", "raidz2", "raidz3", "log", "cache", "spare",
];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewPool {
    pub name: String,
    /// As `shoal pool create` takes it: `["mirror", "a", "b", "log", "c"]`. Device
    /// names are files in the first device directory, or absolute paths in a device
    /// directory or of block devices under /dev.
    pub layout: Vec<String>,
    /// Creates missing device files of this many bytes.
    #[serde(default)]
    pub size: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportPool {
    /// A device directory, or /dev; the first device directory when absent.
    #[serde(default)]
    pub dir: Option<String>,
    /// Which pool, when several are there.
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplaceDevice {
    /// The device replaced: its path or guid.
    pub old: String,
    /// The new device (a name in the first device directory, or a path as for
    /// `NewPool`).
    pub new: String,
    /// Creates the new device file with this many bytes if it is missing.
    #[serde(default)]
    pub size: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceName {
    /// A device's path or guid.
    pub device: String,
}

/// Takes a pool just created or imported; one the daemon cannot take is exported
/// again, so no pool is left registered and unserved.
fn take_new(
    s: &Shared,
    host: &dyn PoolHost,
    pool: Arc<Pool>,
) -> std::result::Result<PoolStatus, ApiError> {
    let st = pool.status();
    if let Err(e) = s.take_pool(pool.clone(), false) {
        let _ = host.export(&pool);
        return Err(e.into());
    }
    Ok(st)
}

pub(crate) async fn create_pool(
    State(s): State<Shared>,
    Body(n): Body<NewPool>,
) -> std::result::Result<(StatusCode, Json<PoolStatus>), ApiError> {
    let st = blocking(move || {
        let host = s.host()?.clone();
        pool::Pool::validate_pool_name(&n.name)?;
        if s.pools().iter().any(|p| p.name == n.name) {
            return Err(ServerError::Conflict(format!("pool '{}' exists", n.name)).into());
        }
        let mut layout = Vec::with_capacity(n.layout.len());
        for w in &n.layout {
            if LAYOUT_WORDS.contains(&w.as_str()) {
                layout.push(w.clone());
            } else {
                layout.push(s.device_path(w)?.display().to_string());
            }
        }
        take_new(&s, &*host, host.create(&n.name, &layout, n.size)?)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(st)))
}

pub(crate) async fn import_pool(
    State(s): State<Shared>,
    Body(req): Body<ImportPool>,
) -> std::result::Result<(StatusCode, Json<PoolStatus>), ApiError> {
    let st = blocking(move || {
        let host = s.host()?.clone();
        let dir = match &req.dir {
            Some(d) if Path::new(d) == Path::new("/dev") => PathBuf::from("/dev"),
            Some(d) => {
                let d = PathBuf::from(d);
                if !s.device_dirs.contains(&d) {
                    return Err(ApiError::bad(format!(
                        "{} is not a device directory ([storage] device_dirs) or /dev",
                        d.display()
                    )));
                }
                d
            }
            None => s.device_dirs.first().cloned().ok_or_else(|| {
                ApiError::bad("give a dir: no [storage] device_dirs are configured")
            })?,
        };
        if let Some(n) = &req.name {
            if s.pools().iter().any(|p| &p.name == n) {
                return Err(
                    ServerError::Conflict(format!("pool '{n}' is imported already")).into(),
                );
            }
        }
        take_new(&s, &*host, host.import(&dir, req.name.as_deref())?)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(st)))
}

pub(crate) async fn export_pool(
    State(s): State<Shared>,
    UrlPath(name): UrlPath<String>,
    crate::api::Params(q): crate::api::Params<Confirm>,
) -> ApiResult<serde_json::Value> {
    blocking(move || let_go(&s, &name, q.confirm.as_deref(), false)).await
}

pub(crate) async fn destroy_pool(
    State(s): State<Shared>,
    UrlPath(name): UrlPath<String>,
    crate::api::Params(q): crate::api::Params<Confirm>,
) -> ApiResult<serde_json::Value> {
    blocking(move || let_go(&s, &name, q.confirm.as_deref(), true)).await
}

#[derive(Debug, Deserialize)]
pub(crate) struct Confirm {
    /// The pool's name again: an export or destroy is never one stray request.
    confirm: Option<String>,
}

/// Exports or destroys pool `name` once `confirm` names it again; a pool the host
/// could not let go of is taken back.
fn let_go(
    s: &Shared,
    name: &str,
    confirm: Option<&str>,
    destroy: bool,
) -> ApiResult<serde_json::Value> {
    let (doing, done, why) = if destroy {
        ("destroying", "destroyed", "wipes it")
    } else {
        ("exporting", "exported", "ends its shares")
    };
    if confirm != Some(name) {
        return Err(ApiError::bad(format!(
            "{doing} pool '{name}' {why}: confirm with ?confirm={name}"
        )));
    }
    let host = s.host()?.clone();
    let pool = s.release_pool(name, destroy)?;
    let result = if destroy {
        host.destroy(&pool)
    } else {
        host.export(&pool)
    };
    if let Err(e) = result {
        s.take_pool(pool, false)?;
        return Err(e.into());
    }
    tracing::info!(pool = %name, "{done}");
    Ok(Json(serde_json::json!({ done: name })))
}

impl DaemonState {
    /// Runs a resilver of `pool` (`work`, onto or of `device`) as an operation with
    /// live progress, and raises `resilver.finished` with `what` says of it.
    pub(crate) fn resilver_operation(
        &self,
        pool: &str,
        device: &str,
        work: impl FnOnce(&dyn Fn(ScrubProgress)) -> std::result::Result<ResilverSummary, ApiError>,
        what: impl FnOnce(&ResilverSummary) -> String,
    ) -> std::result::Result<ResilverSummary, ApiError> {
        let op = self.operations.begin(pool, "resilver", Some(device))?;
        let summary = work(&|p| op.progress(p))?;
        drop(op);
        self.alerts.raise(
            crate::alerts::Severity::Info,
            "resilver.finished",
            &format!("pool {pool}"),
            format!(
                "{}: {} bytes resilvered in {:.1} s, {} errors",
                what(&summary),
                summary.bytes_written,
                summary.seconds,
                summary.errors
            ),
        );
        Ok(summary)
    }
}

/// Replaces a device and resilvers onto the new one while the pool serves; answers
/// when the resilver is done (its progress is in `GET /api/v1/operations`).
pub(crate) async fn replace_device(
    State(s): State<Shared>,
    UrlPath(name): UrlPath<String>,
    Body(req): Body<ReplaceDevice>,
) -> ApiResult<ResilverSummary> {
    blocking(move || {
        let host = s.host()?.clone();
        let pool = s.pool(&name)?;
        let path = s.device_path(&req.new)?;
        let summary = s.resilver_operation(
            &name,
            &req.old,
            |progress| {
                let (device, created) = host.open_device(&path, req.size)?;
                pool.replace(&req.old, device, progress).map_err(|e| {
                    if created {
                        let _ = std::fs::remove_file(&path);
                    }
                    e.into()
                })
            },
            |_| format!("{} replaced by {}", req.old, path.display()),
        )?;
        host.devices_changed(&pool)?;
        Ok(Json(summary))
    })
    .await
}

/// Brings a FAULTED device back by resilvering it in place (see `Pool::clear`).
pub(crate) async fn clear_device(
    State(s): State<Shared>,
    UrlPath(name): UrlPath<String>,
    Body(req): Body<DeviceName>,
) -> ApiResult<ResilverSummary> {
    blocking(move || {
        let pool = s.pool(&name)?;
        let summary = s.resilver_operation(
            &name,
            &req.device,
            |progress| Ok(pool.clear(&req.device, progress)?),
            |_| format!("{} cleared", req.device),
        )?;
        Ok(Json(summary))
    })
    .await
}

pub(crate) async fn operations(State(s): State<Shared>) -> Json<Vec<Operation>> {
    Json(s.operations.list())
}

/// A device the storage page may build a pool from (or import from).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Candidate {
    pub path: String,
    pub size_bytes: u64,
    /// `file` (in a device directory) or `block` (under /dev).
    pub kind: String,
    /// The pool whose label it carries, if any (an imported one is in use; another
    /// one can be imported).
    pub pool: Option<String>,
    /// That pool's state by its label: `active`, `exported` or `destroyed`.
    pub pool_state: Option<String>,
    /// Whether the daemon holds that pool now.
    pub in_use: bool,
}

/// Files of the device directories and block devices under /dev that hold no mounted
/// filesystem and are no swap space, with what their labels say.
pub(crate) async fn candidates(State(s): State<Shared>) -> ApiResult<Vec<Candidate>> {
    blocking(move || {
        let held: Vec<String> = s.pools().iter().map(|p| p.name.clone()).collect();
        let mut out = Vec::new();
        let mut paths: Vec<(PathBuf, &str)> = Vec::new();
        for dir in &s.device_dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut files: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    std::fs::metadata(p)
                        .is_ok_and(|m| m.is_file() && m.len() >= vdev::label::MIN_DEVICE_BYTES)
                })
                .collect();
            files.sort();
            paths.extend(files.into_iter().map(|p| (p, "file")));
        }
        paths.extend(free_block_devices().into_iter().map(|p| (p, "block")));
        for (path, kind) in paths {
            let Ok(dev) = vdev::FileDevice::open_shared(&path) else {
                continue;
            };
            let size_bytes = vdev::Device::size_bytes(&dev);
            let label = vdev::label::read_any_config(&dev)
                .ok()
                .flatten()
                .and_then(|b| pool::config::PoolConfig::from_bytes(&b));
            let (pool, pool_state) = match label {
                Some(c) => (
                    Some(c.name),
                    Some(format!("{:?}", c.state).to_ascii_lowercase()),
                ),
                None => (None, None),
            };
            out.push(Candidate {
                path: path.display().to_string(),
                size_bytes,
                kind: kind.to_string(),
                in_use: pool_state.as_deref() == Some("active")
                    && pool.as_ref().is_some_and(|p| held.contains(p)),
                pool,
                pool_state,
            });
        }
        Ok(Json(out))
    })
    .await
}

/// Whole block devices (from /sys/block) with a size, none of whose partitions is
/// mounted or used as swap.
fn free_block_devices() -> Vec<PathBuf> {
    let busy = busy_devices();
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let sectors: u64 = std::fs::read_to_string(e.path().join("size"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let dev = PathBuf::from("/dev").join(&name);
            let used = block_device_in_use(&dev, &busy).is_some();
            (sectors * 512 >= vdev::label::MIN_DEVICE_BYTES
                && !used
                && !name.starts_with("loop")
                && !name.starts_with("ram")
                && dev.exists())
            .then_some(dev)
        })
        .collect();
    out.sort();
    out
}

/// The mount and swap tables (`/proc/mounts`, `/proc/swaps`), for
/// `block_device_in_use`.
fn busy_devices() -> String {
    ["/proc/mounts", "/proc/swaps"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect()
}

/// Why block device `dev` is in use, if it is: it or one of its partitions is in
/// `busy` (the mount and swap tables), or the kernel lists holders of it (LVM, md,
/// dm-crypt).
fn block_device_in_use(dev: &Path, busy: &str) -> Option<&'static str> {
    let d = dev.to_string_lossy();
    // Partitions of sda are sda1...; of nvme0n1 (a name ending in a digit) nvme0n1p1...
    let digits = |r: &str| !r.is_empty() && r.chars().all(|c| c.is_ascii_digit());
    let numbered = d.ends_with(|c: char| c.is_ascii_digit());
    let partition_of = |name: &str| {
        name.strip_prefix(&*d).is_some_and(|rest| {
            rest.is_empty()
                || match numbered {
                    true => rest.strip_prefix('p').is_some_and(digits),
                    false => digits(rest),
                }
        })
    };
    if busy
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .any(partition_of)
    {
        return Some("holds a mounted filesystem or swap space");
    }
    let name = dev.file_name()?.to_string_lossy().into_owned();
    let held = std::fs::read_dir(Path::new("/sys/class/block").join(name).join("holders"))
        .is_ok_and(|mut h| h.next().is_some());
    held.then_some("is held by another device (LVM, md or dm-crypt)")
}

#[derive(Debug, Deserialize)]
pub(crate) struct PlanQuery {
    layout: String,
    disk_mbps: f64,
    disk_iops: f64,
    #[serde(default)]
    disk_size: Option<u64>,
}

/// `shoal plan --json` over the API: what the capacity model predicts for a layout.
pub(crate) async fn plan(
    crate::api::Params(q): crate::api::Params<PlanQuery>,
) -> ApiResult<bench::plan::Prediction> {
    if !(q.disk_mbps > 0.0
        && q.disk_iops > 0.0
        && q.disk_mbps.is_finite()
        && q.disk_iops.is_finite())
    {
        return Err(ApiError::bad(
            "disk_mbps and disk_iops must be positive numbers",
        ));
    }
    if q.disk_size.is_some_and(|b| b > 1 << 60) {
        return Err(ApiError::bad("disk_size is more than an exbibyte"));
    }
    let layout = bench::plan::parse_layout(&q.layout).map_err(|e| ApiError::bad(e.to_string()))?;
    Ok(Json(bench::plan::predict(
        layout,
        q.disk_mbps,
        q.disk_iops,
        q.disk_size,
    )))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewSpare {
    /// A device named as in `NewPool`'s layout.
    pub device: String,
    /// Creates the device file with this many bytes if it is missing.
    #[serde(default)]
    pub size: Option<u64>,
}

pub(crate) async fn add_spare(
    State(s): State<Shared>,
    UrlPath(name): UrlPath<String>,
    Body(req): Body<NewSpare>,
) -> ApiResult<PoolStatus> {
    blocking(move || {
        let host = s.host()?.clone();
        let pool = s.pool(&name)?;
        let path = s.device_path(&req.device)?;
        let (device, created) = host.open_device(&path, req.size)?;
        if let Err(e) = pool.add_spare(device) {
            if created {
                let _ = std::fs::remove_file(&path);
            }
            return Err(e.into());
        }
        host.devices_changed(&pool)?;
        Ok(Json(pool.status()))
    })
    .await
}

pub(crate) async fn remove_spare(
    State(s): State<Shared>,
    UrlPath(name): UrlPath<String>,
    Body(req): Body<DeviceName>,
) -> ApiResult<PoolStatus> {
    blocking(move || {
        let host = s.host()?.clone();
        let pool = s.pool(&name)?;
        pool.remove_spare(&req.device)?;
        host.devices_changed(&pool)?;
        Ok(Json(pool.status()))
    })
    .await
}

/// Puts a spare in place of a failed data device of `pool` (`st` is its status), if
/// it has one and nothing else runs in it: the replacement runs on its own thread as
/// a resilver operation, with alerts when the spare goes in and when it is done.
pub(crate) fn activate_spare(s: &Arc<DaemonState>, pool: &Arc<Pool>, st: &PoolStatus) {
    if st.spares.is_empty() || s.operations.in_pool(&pool.name).is_some() {
        return;
    }
    let failed = st
        .vdevs
        .iter()
        .filter(|t| t.layout != "disk" && t.children.len() > 1)
        .flat_map(|t| t.children.iter())
        .find(|c| c.health == "FAULTED" || c.health == "UNAVAIL");
    let Some(failed) = failed else { return };
    let Some(spare) = st
        .spares
        .iter()
        .find(|sp| sp.health == "ONLINE")
        .map(|sp| sp.path.clone())
    else {
        return;
    };
    // The thread claims the pool for the operation; if something claimed it since
    // the check above, it gives up and the next sample tries again.
    let (s, pool, failed) = (s.clone(), pool.clone(), failed.path.clone());
    std::thread::spawn(move || {
        let Ok(op) = s.operations.begin(&pool.name, "resilver", Some(&failed)) else {
            return;
        };
        let object = format!("pool {}", pool.name);
        let device = match pool.take_spare(&spare) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(pool = %pool.name, %spare, error = %e, "taking a spare");
                return;
            }
        };
        let keep = pool::pool::DeviceArg {
            path: device.path.clone(),
            device: device.device.clone(),
        };
        s.alerts.raise(
            crate::alerts::Severity::Warning,
            "spare.activated",
            &object,
            format!(
                "spare {spare} replaces {failed} of pool {}: resilvering",
                pool.name
            ),
        );
        match pool.replace(&failed, device, &|p| op.progress(p)) {
            Ok(summary) => {
                if let Some(host) = &s.host {
                    if let Err(e) = host.devices_changed(&pool) {
                        tracing::warn!(pool = %pool.name, error = %e, "recording devices");
                    }
                }
                s.alerts.raise(
                    if summary.errors > 0 {
                        crate::alerts::Severity::Critical
                    } else {
                        crate::alerts::Severity::Info
                    },
                    "resilver.finished",
                    &object,
                    format!(
                        "spare {spare} took the place of {failed}: {} bytes resilvered in {:.1} s, {} errors",
                        summary.bytes_written, summary.seconds, summary.errors
                    ),
                );
            }
            Err(e) => {
                let back = pool.add_spare(keep);
                s.alerts.raise(
                    crate::alerts::Severity::Critical,
                    "spare.failed",
                    &object,
                    format!(
                        "spare {spare} could not replace {failed}: {e}{}",
                        match back {
                            Ok(()) => " (it stays a spare)".to_string(),
                            Err(b) => format!(" (and could not be made a spare again: {b})"),
                        }
                    ),
                );
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_device_with_a_mounted_partition_is_in_use() {
        let busy = "/dev/sda1 / ext4 rw 0 0\n/dev/nvme0n1p2 /home xfs rw 0 0\n\
                    Filename Type Size Used Priority\n/dev/sdc partition 1 0 -2\n";
        let used = |d: &str| block_device_in_use(Path::new(d), busy).is_some();
        assert!(used("/dev/sda"), "a partition of it is mounted");
        assert!(used("/dev/nvme0n1"), "a partition of it is mounted");
        assert!(used("/dev/sdc"), "it is swap space");
        assert!(!used("/dev/sdb"));
        // A disk whose name extends another's is not its partition.
        assert!(block_device_in_use(Path::new("/dev/sd"), "/dev/sdx1 / ext4 rw 0 0").is_none());
        assert!(
            block_device_in_use(Path::new("/dev/loop1"), "/dev/loop10 / ext4 rw 0 0").is_none()
        );
    }
}
