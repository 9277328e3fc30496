//! The local pool registry: which device paths make up each imported pool, so commands
//! can find a pool by name (the role zpool.cache plays). One JSON file in the state
//! directory, rewritten atomically (write a temporary file, fsync, rename). A lock file
//! per pool serialises commands that open the same pool.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Registry {
    pub pools: BTreeMap<String, Vec<String>>,
}

/// `$SHOAL_STATE_DIR`, else `/var/lib/shoal` for root, else `~/.local/state/shoal`.
pub fn state_dir() -> PathBuf {
    if let Ok(d) = std::env::var("SHOAL_STATE_DIR") {
        return PathBuf::from(d);
    }
    // Root or not, read from /proc so no unsafe libc call is needed.
    let is_root = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    if is_root {
        PathBuf::from("/var/lib/shoal")
    } else {
        let home = std::env::var("HOME").unwrap_or_else(|_| ".".into());
        PathBuf::from(home).join(".local/state/shoal")
    }
}

fn registry_path() -> PathBuf {
    state_dir().join("pools.json")
}

impl Registry {
    pub fn load() -> Result<Registry> {
        let p = registry_path();
        match fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b).with_context(|| format!("reading {}", p.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Registry::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
        }
    }

    pub fn save(&self) -> Result<()> {
        let dir = state_dir();
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let tmp = dir.join("pools.json.tmp");
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&serde_json::to_vec_pretty(self)?)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, registry_path())?;
        Ok(())
    }
}

/// An exclusive lock on a pool name for the life of the value.
pub struct PoolLock {
    _file: File,
}

pub fn lock_pool(name: &str) -> Result<PoolLock> {
    let dir = state_dir();
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}.lock"));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    if file.try_lock().is_err() {
        if let Some(d) = server::DaemonFile::read_live(&dir) {
            anyhow::bail!(
                "pool '{name}' is held by shoal serve (pid {}): stop it for this command",
                d.pid
            );
        }
        anyhow::bail!("pool '{name}' is in use by another shoal command");
    }
    Ok(PoolLock { _file: file })
}
