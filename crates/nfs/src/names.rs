//! Names for analytics breakdowns: a share's dataset name from its fsid, and a file's
//! path from its object id.
//!
//! A path is found by walking up the parents the filesystem keeps for each object and
//! looking each object up in its parent directory. Whole directories are listed once
//! and their (object → name) maps kept for `DIR_CACHE`, so naming many files of one
//! big directory costs one listing, not one per file. All of this runs on the
//! analytics collector thread, never on an NFS call. A file moved to another directory
//! keeps its first parent in the filesystem, so it is not found there and is shown
//! by object id instead (`None`).

use crate::service::NfsService;
use analytics::Names;
use fs::filesystem::ROOT_INO;
use fs::Filesystem;
use std::collections::HashMap;
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

const DIR_CACHE: Duration = Duration::from_secs(10);
/// Directory levels walked before giving up (a bound, not a limit on real trees).
const MAX_DEPTH: usize = 256;
/// Directory entries read to name one file before giving up.
const MAX_DIR_ENTRIES: usize = 1 << 20;
/// Directories whose listings are cached.
const MAX_DIRS: usize = 4096;

type DirNames = HashMap<u64, String>;

pub struct ShareNames {
    /// Weak: the service holds the analytics that hold these names.
    service: Weak<NfsService>,
    dirs: Mutex<HashMap<(u64, u64), (Instant, DirNames)>>,
}

impl ShareNames {
    pub fn new(service: Weak<NfsService>) -> ShareNames {
        ShareNames {
            service,
            dirs: Mutex::new(HashMap::new()),
        }
    }

    fn name_in(&self, fsid: u64, fs: &Filesystem, dir: u64, ino: u64) -> Option<String> {
        let mut dirs = self.dirs.lock().unwrap();
        let fresh = dirs
            .get(&(fsid, dir))
            .is_some_and(|(at, _)| at.elapsed() < DIR_CACHE);
        if !fresh {
            if dirs.len() >= MAX_DIRS {
                dirs.retain(|_, (at, _)| at.elapsed() < DIR_CACHE);
                if dirs.len() >= MAX_DIRS {
                    dirs.clear();
                }
            }
            let mut names = DirNames::new();
            let mut cookie = 2; // past "." and ".."
            while names.len() < MAX_DIR_ENTRIES {
                let batch = fs.readdir(dir, cookie, 1024).ok()?;
                let Some(last) = batch.last() else { break };
                cookie = last.cookie;
                for e in batch {
                    names.insert(e.ino, String::from_utf8_lossy(&e.name).into_owned());
                }
            }
            dirs.insert((fsid, dir), (Instant::now(), names));
        }
        dirs.get(&(fsid, dir))?.1.get(&ino).cloned()
    }
}

impl Names for ShareNames {
    fn share(&self, fsid: u64) -> Option<String> {
        let share = self.service.upgrade()?.share_of_fsid(fsid)?;
        Some(share.dataset.clone())
    }

    fn file(&self, fsid: u64, ino: u64) -> Option<String> {
        let share = self.service.upgrade()?.share_of_fsid(fsid)?;
        let mut parts = Vec::new();
        let mut cur = ino;
        for _ in 0..MAX_DEPTH {
            if cur == ROOT_INO {
                parts.push(share.path());
                parts.reverse();
                return Some(parts.join("/"));
            }
            let parent = share.fs.getattr(cur).ok()?.parent;
            parts.push(self.name_in(fsid, &share.fs, parent, cur)?);
            cur = parent;
        }
        None
    }
}
