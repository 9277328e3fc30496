//! Rolling a filesystem back while it is open (shared over NFS, mounted), as the
//! daemon does for `shoal snapshot rollback` of a filesystem in use:
//! 1. the gate closes (`gate.rs`): operations that arrive wait, the ones inside end;
//! 2. everything written so far is committed, so no intent log record of this
//!    object set is left to replay over the rolled-back one;
//! 3. the pool rolls the object set back in one txg, keeping the ids of objects made
//!    since unused (`Pool::snapshot_rollback_in_place`);
//! 4. the open files are matched with the rolled-back objects by (object,
//!    generation): one that no longer exists, or is another file now, is forgotten
//!    and reported to `vanished`, which runs with the gate still closed so the caller
//!    can revoke protocol state naming it before anyone can open an object that
//!    reuses its id;
//! 5. the unlinked set is now the snapshot's: its objects still open stay orphans
//!    (freed on last close), the others are freed, as at open after a crash;
//! 6. the gate opens. Handles of files that exist in both stay valid: same object,
//!    same generation.
//!
//! Crash safety: the rollback is one txg (all or nothing, `pool::snapshots`); a crash
//! before step 5 commits leaves orphans in the unlinked set, which the next open frees.

use super::gate::NotClosed;
use super::Filesystem;
use crate::{FsError, Result};
use std::collections::HashMap;
use std::time::Duration;

/// How long a rollback waits for the operations inside the filesystem to end.
const DRAIN_WAIT: Duration = Duration::from_secs(30);

impl Filesystem {
    /// Rolls this open filesystem back to its snapshot `snap` (a pool object set id);
    /// `destroy_newer` as in `Pool::snapshot_rollback_to`. `vanished` is given the
    /// open files that no longer exist, with no operation running (see the module
    /// doc); they are returned too.
    pub(crate) fn rollback_while_open(
        &self,
        snap: u64,
        destroy_newer: bool,
        vanished: &mut dyn FnMut(&[u64]),
    ) -> Result<Vec<u64>> {
        if let Err(why) = self.gate.close(DRAIN_WAIT) {
            return Err(FsError::Busy(match why {
                NotClosed::StillInside => format!(
                    "'{}' is busy: its operations did not end within {} s",
                    self.name,
                    DRAIN_WAIT.as_secs()
                ),
                NotClosed::ClosedAlready => format!("'{}' is being rolled back", self.name),
                NotClosed::FromInside => {
                    format!("'{}': a rollback from inside its own operation", self.name)
                }
            }));
        }
        let r = self.rollback_closed(snap, destroy_newer, vanished);
        self.gate.open();
        r
    }

    fn rollback_closed(
        &self,
        snap: u64,
        destroy_newer: bool,
        vanished: &mut dyn FnMut(&[u64]),
    ) -> Result<Vec<u64>> {
        self.pool.sync()?;
        let open = self.open_inos();
        let mut generation: HashMap<u64, u64> = HashMap::new();
        for ino in open {
            if let Ok(a) = self.getattr(ino) {
                generation.insert(ino, a.generation);
            }
        }
        self.pool.snapshot_rollback_in_place(snap, destroy_newer)?;
        let gone: Vec<u64> = {
            // Which open files are orphans is the snapshot's unlinked set's to say
            // (one unlinked after the snapshot has its name back). A file opened while
            // the gate was closed (`opened` does not wait) is judged by whether its
            // object is there: the pool never gives a vanished object's id again.
            let open = self.open_inos();
            // Judged without the open-files lock: `getattr` takes it.
            let gone: Vec<u64> = open
                .into_iter()
                .filter(|ino| match (self.getattr(*ino), generation.get(ino)) {
                    (Err(_), _) => true,
                    (Ok(a), Some(gen)) => a.generation != *gen,
                    (Ok(_), None) => false,
                })
                .collect();
            let mut of = self.open_files.lock().unwrap();
            for ino in &gone {
                of.counts.remove(ino);
            }
            of.orphans.clear();
            gone
        };
        vanished(&gone);
        self.drain_unlinked()?;
        self.pool.sync()?;
        Ok(gone)
    }

    /// The objects held open now (read under the open-files lock, which is then let
    /// go: `getattr` takes it).
    fn open_inos(&self) -> Vec<u64> {
        let of = self.open_files.lock().unwrap();
        of.counts.keys().copied().collect()
    }
}
