//! `shoal mount` / `shoal unmount`: a shoal filesystem on a local directory through
//! FUSE (the adapter is the `fuse` crate). While `shoal serve` runs, the daemon serves
//! the mount; otherwise the mount process owns the pool while it runs: SIGTERM or
//! SIGINT (or `shoal unmount`) unmounts, commits the open transaction group and
//! exits; nothing acknowledged is lost.

use crate::pool_cmd::open_registered_long_lived;
use crate::registry::lock_pool;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `shoal mount POOL/FS MOUNTPOINT [-o ro,allow_other]`: runs until unmounted; while
/// `shoal serve` runs, the daemon serves the mount and this returns at once.
pub fn mount(dataset: &str, mountpoint: &Path, options: &[String]) -> Result<()> {
    fuse::check_options(options)?;
    if let Some(api) = crate::admin::Api::running()? {
        let dir = std::env::current_dir()?.join(mountpoint);
        let dir = dir.canonicalize().unwrap_or(dir);
        let m: server::mounts::MountInfo = api.post(
            "/mounts",
            &server::mounts::MountRequest {
                dataset: dataset.to_string(),
                dir: dir.display().to_string(),
                options: options.to_vec(),
            },
        )?;
        eprintln!("mounted {} on {} (served by shoal serve)", m.dataset, m.dir);
        return Ok(());
    }
    let pool_name = dataset.split('/').next().unwrap_or(dataset);
    let _lock = lock_pool(pool_name)?;
    let pool = open_registered_long_lived(pool_name, None)?;
    let datasets = Arc::new(fs::Datasets::new(pool.clone())?);
    // A mount of its own process: no NFS server, so no delegations to wait for.
    let mut session = fuse::session(datasets.clone(), dataset, mountpoint, options, None)?;
    let mut unmounter = session.unmount_callable();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])?;
    let handle = signals.handle();
    let mp = mountpoint.to_path_buf();
    let signal_thread = std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            if let Err(e) = unmounter.unmount() {
                eprintln!("shoal: unmounting {}: {e}", mp.display());
            }
        }
    });
    eprintln!("mounted {dataset} on {}", mountpoint.display());
    let result = session.run();
    handle.close();
    let _ = signal_thread.join();
    drop(datasets);
    pool.sync().context("committing on unmount")?;
    result.context("FUSE session")?;
    Ok(())
}

/// `shoal unmount MOUNTPOINT`: a mount the daemon serves is unmounted and committed by
/// it before this returns; otherwise asks the kernel to unmount, and the mount process
/// then commits and exits.
pub fn unmount(mountpoint: &Path) -> Result<()> {
    let path: PathBuf = mountpoint
        .canonicalize()
        .with_context(|| format!("{}", mountpoint.display()))?;
    if let Some(api) = crate::admin::Api::running()? {
        let mounts: Vec<server::mounts::MountInfo> = api.get("/mounts")?;
        if mounts.iter().any(|m| Path::new(&m.dir) == path) {
            // The daemon answers once the mount is gone and the pool committed.
            api.post::<server::mounts::MountInfo>(
                "/mounts/unmount",
                &server::mounts::UnmountRequest {
                    dir: path.display().to_string(),
                },
            )?;
            return Ok(());
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts")?;
    let is_shoal = mounts.lines().any(|l| {
        let mut f = l.split_whitespace();
        let (src, dst) = (f.next().unwrap_or(""), f.next().unwrap_or(""));
        dst == path.to_string_lossy() && src.starts_with("shoal:")
    });
    if !is_shoal {
        bail!("{} is not a shoal mount", path.display());
    }
    let status = std::process::Command::new("umount")
        .arg(&path)
        .status()
        .context("running umount")?;
    if !status.success() {
        bail!("umount {} failed ({status})", path.display());
    }
    Ok(())
}
