//! Files held open (FUSE handles, NFSv4 opens) and the orphans among them: objects
//! whose last name went while they were open. An orphan is listed in the unlinked set
//! (object 2) in the same transaction that drops its last name, and freed on its last
//! close, or by `drain_unlinked` at the next open of the filesystem after a crash, so
//! a crash at any instant never leaks one.

use super::{Filesystem, UNLINKED_INO};
use crate::attr::Attr;
use crate::dir::Directory;
use crate::{FsError, Result};
use pool::Tx;
use std::collections::{HashMap, HashSet};

/// Open counts and, of the open files, the orphans. One lock for both, so a removal
/// and a last close never miss each other.
#[derive(Default)]
pub(super) struct OpenFiles {
    pub(super) counts: HashMap<u64, u32>,
    pub(super) orphans: HashSet<u64>,
}

impl Filesystem {
    /// Called with `a`'s last name gone: when the file is open, keeps it (its
    /// attributes written, listed in the unlinked set, marked an orphan) and says so.
    pub(super) fn keep_while_open(&self, tx: &Tx<'_>, a: &Attr) -> Result<bool> {
        {
            let mut of = self.open_files.lock().unwrap();
            if of.counts.get(&a.ino).is_none_or(|&n| n == 0) {
                return Ok(false);
            }
            of.orphans.insert(a.ino);
        }
        self.put_attr(tx, a)?;
        let name = format!("{:x}", a.ino);
        match Directory::new(&self.store(Some(tx), UNLINKED_INO)).insert(
            name.as_bytes(),
            a.ino,
            a.kind as u8,
        ) {
            Ok(_) | Err(FsError::Exists) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Counts an open of `ino`. It does not pass the gate (`gate.rs`): it touches
    /// only the counts, and the NFSv4 server calls it holding its state lock, which a
    /// rollback's revocation takes with the gate closed.
    pub fn opened(&self, ino: u64) {
        *self
            .open_files
            .lock()
            .unwrap()
            .counts
            .entry(ino)
            .or_insert(0) += 1;
    }

    pub(super) fn is_open(&self, ino: u64) -> bool {
        self.open_files
            .lock()
            .unwrap()
            .counts
            .get(&ino)
            .is_some_and(|&n| n > 0)
    }

    /// Last close of an unlinked file frees it.
    pub fn released(&self, ino: u64) -> Result<()> {
        let _pass = self.gate.pass();
        {
            let mut of = self.open_files.lock().unwrap();
            let Some(n) = of.counts.get_mut(&ino) else {
                return Ok(());
            };
            *n -= 1;
            if *n > 0 {
                return Ok(());
            }
            of.counts.remove(&ino);
            // Almost every close is of a file that still has a name: known here,
            // without reading the object or taking the namespace lock.
            if !of.orphans.remove(&ino) {
                return Ok(());
            }
        }
        let _ns = self.namespace.write().unwrap();
        let _l = self.lock_attrs(&[ino]);
        let Ok(info) = self.pool.object_info(self.os, ino) else {
            return Ok(());
        };
        let a = Attr::decode(ino, info.generation, &info.bonus)?;
        debug_assert_eq!(
            a.nlink, 0,
            "an orphan is never linked again (`link` refuses)"
        );
        {
            let mut of = self.open_files.lock().unwrap();
            if of.counts.get(&ino).is_some_and(|&n| n > 0) {
                // Opened again by its handle meanwhile: the next last close frees it.
                of.orphans.insert(ino);
                return Ok(());
            }
        }
        let tx = self.pool.begin(0)?;
        let name = format!("{ino:x}");
        let _ = Directory::new(&self.store(Some(&tx), UNLINKED_INO)).remove(name.as_bytes());
        self.free_object(&tx, &a)
    }

    /// Frees the objects of the unlinked set that are not open: all of them at open
    /// (after a crash, nothing is), those no file handle holds after a rollback of an
    /// open filesystem (`rollback.rs`). The open ones are orphans again, freed on
    /// their last close.
    pub(super) fn drain_unlinked(&self) -> Result<()> {
        let _ns = self.namespace.write().unwrap();
        let list = Directory::new(&self.store(None, UNLINKED_INO)).list(0, usize::MAX)?;
        if list.is_empty() {
            return Ok(());
        }
        let tx = self.pool.begin(0)?;
        for e in list {
            {
                let mut of = self.open_files.lock().unwrap();
                if of.counts.get(&e.object).is_some_and(|&n| n > 0) {
                    of.orphans.insert(e.object);
                    continue;
                }
            }
            Directory::new(&self.store(Some(&tx), UNLINKED_INO)).remove(&e.name)?;
            let info = self.pool.object_info(self.os, e.object)?;
            let a = Attr::decode(e.object, info.generation, &info.bonus)?;
            self.free_object(&tx, &a)?;
        }
        Ok(())
    }
}
