//! Local mounts served by the daemon: `shoal mount pool/fs DIR` while `shoal serve`
//! runs asks the daemon (`POST /api/v1/mounts`) to run the FUSE session beside the
//! NFS shares of the same filesystems, from the same open datasets, so snapshots and
//! every other change go on through the API; `shoal unmount DIR`
//! (`POST /api/v1/mounts/unmount`) returns once the mount is gone and the pool has
//! committed.
//!
//! Invariants:
//! - A mount point must be an empty directory given by its absolute path, and not a
//!   mount already: a request can never hide files under a mount.
//! - A pool with mounts is not let go (export, destroy); the daemon unmounts every
//!   mount before it commits its pools and exits.
//! - The FUSE sessions are the `fuse` crate's (`FuseHost`); a test may stand in
//!   another `MountHost`.
//! - A mount's access waits for the NFSv4 delegations in its way (`NfsDelegations`):
//!   what an NFS client holding one caches stays true while the same file is used
//!   through the mount.

use crate::api::{run_blocking as blocking, ApiError, ApiResult, Body, Shared};
use crate::DaemonState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A running FUSE session; `unmount` returns when the kernel has let go of it.
pub trait MountHandle: Send {
    fn unmount(self: Box<Self>) -> Result<(), String>;

    /// Whether the session has ended without `unmount` (a plain `umount DIR`).
    fn ended(&self) -> bool {
        false
    }
}

/// Starts FUSE sessions for the daemon; their access waits for `delegations`.
pub trait MountHost: Send + Sync {
    fn mount(
        &self,
        datasets: Arc<fs::Datasets>,
        dataset: &str,
        dir: &Path,
        options: &[String],
        delegations: Arc<dyn fuse::Delegations>,
    ) -> Result<Box<dyn MountHandle>, String>;
}

/// The daemon's NFSv4 delegations of one mounted filesystem, as its mount waits for
/// them: a local access recalls the ones in its way as the same access by another NFS
/// client would. The filesystem's fsid (what delegations are keyed by) is found once.
pub struct NfsDelegations {
    service: std::sync::Weak<nfs::NfsService>,
    fsid: u64,
}

impl NfsDelegations {
    /// For the filesystem of object set `objset` of pool `pool`.
    pub fn new(service: &Arc<nfs::NfsService>, pool: &str, objset: u64) -> NfsDelegations {
        NfsDelegations {
            service: Arc::downgrade(service),
            fsid: nfs::service::fsid_for(pool, objset),
        }
    }
}

impl fuse::Delegations for NfsDelegations {
    fn clear(&self, ino: u64, access: fuse::LocalAccess) -> bool {
        // No service (the daemon is stopping): no client holds anything any more.
        self.service.upgrade().is_none_or(|service| {
            service.clear_for_local_access(self.fsid, ino, access == fuse::LocalAccess::Change)
        })
    }

    /// Two leases and a margin: a recalled delegation is revoked one lease after its
    /// recall, so only new delegations coming in the way one after another wait longer.
    fn wait_limit(&self) -> std::time::Duration {
        let lease = self
            .service
            .upgrade()
            .map(|s| s.v4_lease())
            .unwrap_or_default();
        lease * 2 + std::time::Duration::from_secs(10)
    }
}

/// A mount the daemon serves: the FUSE session runs on its own threads.
struct FuseMount(fuse::fuser::BackgroundSession);

impl MountHandle for FuseMount {
    fn unmount(self: Box<Self>) -> Result<(), String> {
        self.0.umount_and_join().map_err(|e| e.to_string())
    }

    fn ended(&self) -> bool {
        self.0.guard.is_finished()
    }
}

/// Starts the daemon's FUSE sessions; their attributes revalidate after a second, as
/// an NFS client's do, since NFS clients change the same files.
pub struct FuseHost;

impl MountHost for FuseHost {
    fn mount(
        &self,
        datasets: Arc<fs::Datasets>,
        dataset: &str,
        dir: &Path,
        options: &[String],
        delegations: Arc<dyn fuse::Delegations>,
    ) -> Result<Box<dyn MountHandle>, String> {
        fuse::use_daemon_ttl();
        let s = fuse::session(datasets, dataset, dir, options, Some(delegations))
            .map_err(|e| format!("{e:#}"))?;
        let background = s
            .spawn()
            .map_err(|e| format!("starting the FUSE session: {e}"))?;
        Ok(Box::new(FuseMount(background)))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MountRequest {
    pub dataset: String,
    /// An empty directory, by its absolute path.
    pub dir: String,
    /// As `shoal mount -o`: `ro`, `rw`, `allow_other`.
    #[serde(default)]
    pub options: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MountInfo {
    pub dataset: String,
    pub dir: String,
    pub options: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnmountRequest {
    pub dir: String,
}

struct Entry {
    info: MountInfo,
    handle: Box<dyn MountHandle>,
}

/// The daemon's mounts, by directory.
#[derive(Default)]
pub struct Mounts {
    by_dir: Mutex<BTreeMap<PathBuf, Entry>>,
}

impl Mounts {
    /// The mounts still there: one whose session ended because its directory was
    /// unmounted with a plain `umount DIR` is let go of here, so it neither holds its
    /// pool nor its directory (fuser never unmounts a directory twice, so a newer
    /// mount there is left alone). What was written through it is in the pool's open
    /// transaction group, committed as any other.
    fn live(&self) -> std::sync::MutexGuard<'_, BTreeMap<PathBuf, Entry>> {
        let mut by_dir = self.by_dir.lock().unwrap();
        let ended: Vec<PathBuf> = by_dir
            .iter()
            .filter(|(_, e)| e.handle.ended())
            .map(|(d, _)| d.clone())
            .collect();
        for dir in ended {
            let e = by_dir.remove(&dir).expect("listed");
            tracing::info!(dataset = %e.info.dataset, dir = %e.info.dir, "unmounted outside the daemon");
            if let Err(err) = e.handle.unmount() {
                tracing::warn!(dir = %dir.display(), error = %err, "letting go of an ended mount");
            }
        }
        by_dir
    }

    pub fn list(&self) -> Vec<MountInfo> {
        self.live().values().map(|e| e.info.clone()).collect()
    }

    /// A mount of a filesystem of pool `pool`, if any.
    pub fn in_pool(&self, pool: &str) -> Option<String> {
        self.live()
            .values()
            .find(|e| fs::pool_of(&e.info.dataset) == pool)
            .map(|e| e.info.dir.clone())
    }

    /// Unmounts everything (the daemon is stopping).
    pub fn unmount_all(&self) {
        let all = std::mem::take(&mut *self.by_dir.lock().unwrap());
        for (dir, e) in all {
            if let Err(err) = e.handle.unmount() {
                tracing::warn!(dir = %dir.display(), error = %err, "unmounting at stop");
            }
        }
    }
}

/// True when `dir` (canonical) is a mount point now.
pub fn is_mount_point(dir: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return false;
    };
    let d = dir.to_string_lossy();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(&*d))
}

pub(crate) async fn list(State(s): State<Shared>) -> Json<Vec<MountInfo>> {
    Json(s.mounts.list())
}

pub(crate) async fn mount(
    State(s): State<Shared>,
    Body(req): Body<MountRequest>,
) -> Result<(StatusCode, Json<MountInfo>), ApiError> {
    let info = blocking(move || {
        let host = s.mount_host.clone().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "this daemon does not serve local mounts".to_string(),
            )
        })?;
        let dir = PathBuf::from(&req.dir);
        if !dir.is_absolute()
            || dir
                .components()
                .any(|c| c == std::path::Component::ParentDir)
        {
            return Err(ApiError::bad(format!(
                "'{}': give the mount point's absolute path",
                req.dir
            )));
        }
        let empty = std::fs::read_dir(&dir)
            .map_err(|e| ApiError::bad(format!("mount point {}: {e}", dir.display())))?
            .next()
            .is_none();
        if !empty || is_mount_point(&dir) || dir == Path::new("/") {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "{} is not an empty directory that is no mount point",
                    dir.display()
                ),
            ));
        }
        let datasets = s.datasets_of(&req.dataset)?;
        // The mount's delegations are keyed by its filesystem's object set.
        let objset = datasets
            .open(&req.dataset)
            .map_err(|e| ApiError::bad(format!("opening {}: {e}", req.dataset)))?
            .objset();
        let mut by_dir = s.mounts.live();
        if by_dir.contains_key(&dir) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("{} is mounted already", dir.display()),
            ));
        }
        let handle = host
            .mount(
                datasets,
                &req.dataset,
                &dir,
                &req.options,
                Arc::new(NfsDelegations::new(
                    &s.service,
                    fs::pool_of(&req.dataset),
                    objset,
                )),
            )
            .map_err(ApiError::bad)?;
        let info = MountInfo {
            dataset: req.dataset.clone(),
            dir: dir.display().to_string(),
            options: req.options.clone(),
        };
        by_dir.insert(
            dir,
            Entry {
                info: info.clone(),
                handle,
            },
        );
        tracing::info!(dataset = %info.dataset, dir = %info.dir, "mounted");
        Ok(info)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// Unmounts, then commits the pool: the answer means the mount is gone and what was
/// written through it is on disk.
pub(crate) async fn unmount(
    State(s): State<Shared>,
    Body(req): Body<UnmountRequest>,
) -> ApiResult<MountInfo> {
    blocking(move || {
        let entry = s.mounts.live().remove(Path::new(&req.dir)).ok_or_else(|| {
            ApiError::not_found(format!("{} is no mount of this daemon", req.dir))
        })?;
        let info = entry.info.clone();
        entry.handle.unmount().map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("unmounting {}: {e}", info.dir),
            )
        })?;
        if let Some(ds) = s.datasets_of_pool(fs::pool_of(&info.dataset)) {
            ds.pool().sync()?;
        }
        tracing::info!(dataset = %info.dataset, dir = %info.dir, "unmounted");
        Ok(Json(info))
    })
    .await
}

impl DaemonState {
    /// 409 when pool `pool` has local mounts.
    pub(crate) fn refuse_if_mounted(&self, pool: &str) -> crate::Result<()> {
        match self.mounts.in_pool(pool) {
            Some(dir) => Err(crate::ServerError::Conflict(format!(
                "pool '{pool}' is mounted on {dir}: unmount it first"
            ))),
            None => Ok(()),
        }
    }
}
