//! One mounted filesystem (a dataset's object set): POSIX operations on objects.
//!
//! Object 1 is the root directory and object 2 the *unlinked set*, a directory of
//! objects whose last name is gone while they are still open; they are freed on last
//! close, or at the next open of the filesystem after a crash, so a crash never leaks
//! them. Object ids are pool object ids (never reused), and the generation is the txg
//! that created the object, so (object, generation) names one file for ever.
//!
//! Locking, and why it cannot deadlock with the pool: an operation first takes the
//! namespace lock (write for anything that changes a directory, read for lookups), then
//! the attribute locks of every object whose attributes it changes (sorted, so two
//! operations never wait on each other in a cycle), and only then begins its pool
//! transaction. Nothing waits for a filesystem lock while holding a transaction, so a
//! sync waiting for transactions to end always gets them.
//!
//! Permission checks on access (read, write, search) are the client's side of the
//! mount: the FUSE mount asks the kernel to check them (`default_permissions`); the NFS
//! server will check them with the request's credentials. Ownership of new objects and
//! the sticky-bit rule on removal use the caller's credentials here.

use crate::attr::{Attr, Kind, SetAttr, Timespec, ATTR_SIZE};
use crate::dir::{self, DirStore, Directory, DIR_BLOCK};
use crate::props::{EffectiveProps, SyncMode};
use crate::space::SpaceLimits;
use crate::{FsError, Result};
use pool::checksum::ChecksumKind;
use pool::compress::Compression;
use pool::{Pool, ReadBuf, Tx};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

mod gate;
mod open_files;
mod rollback;
use gate::Gate;
use open_files::OpenFiles;

pub const ROOT_INO: u64 = 1;
pub const UNLINKED_INO: u64 = 2;
/// Pool object types of filesystem objects.
const OT_BASE: u8 = 32;
const OT_XATTR: u8 = 48;
/// The largest file: 2^50 bytes (1 PiB).
pub const MAX_FILE_SIZE: u64 = 1 << 50;
pub const MAX_LINKS: u32 = 65_000;
const XATTR_NAME_MAX: usize = 255;
const XATTR_VALUE_MAX: usize = 64 * 1024;
const XATTR_TOTAL_MAX: usize = 256 * 1024;
const ATTR_LOCK_SHARDS: usize = 256;
const MIN_BLOCK: u32 = 512;

/// Who is asking (AUTH_SYS-style credentials).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Cred {
    pub fn root() -> Cred {
        Cred::default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub cookie: u64,
    pub name: Vec<u8>,
    pub ino: u64,
    pub kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u32,
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
    pub files: u64,
    pub free_files: u64,
    pub name_max: u32,
}

/// A directory object seen through a pool transaction (writes) or not (reads only).
struct ObjStore<'a> {
    pool: &'a Pool,
    tx: Option<&'a Tx<'a>>,
    os: u64,
    obj: u64,
}

impl DirStore for ObjStore<'_> {
    fn read_block(&self, blk: u64) -> Result<Vec<u8>> {
        Ok(self
            .pool
            .read(self.os, self.obj, blk * DIR_BLOCK as u64, DIR_BLOCK)?)
    }
    fn write_block(&self, blk: u64, data: &[u8]) -> Result<()> {
        let tx = self
            .tx
            .expect("directory writes happen inside a transaction");
        Ok(tx.write(self.os, self.obj, blk * DIR_BLOCK as u64, data)?)
    }
}

pub struct Filesystem {
    pool: Arc<Pool>,
    os: u64,
    name: String,
    props: RwLock<EffectiveProps>,
    namespace: RwLock<()>,
    attr_locks: Vec<Mutex<()>>,
    open_files: Mutex<OpenFiles>,
    limits: Arc<SpaceLimits>,
    /// Every public operation passes it; a rollback while open closes it (`gate.rs`).
    gate: Gate,
}

impl std::fmt::Debug for Filesystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filesystem")
            .field("name", &self.name)
            .finish()
    }
}

fn salt_for(os: u64, obj: u64, txg: u64) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&os.to_le_bytes());
    h.update(&obj.to_le_bytes());
    h.update(&txg.to_le_bytes());
    h.update(&Timespec::now().nsec.to_le_bytes());
    *h.finalize().as_bytes()
}

impl Filesystem {
    /// Lays out a new filesystem in a fresh object set, inside the caller's transaction.
    pub(crate) fn format(tx: &Tx<'_>, pool: &Pool, os: u64) -> Result<()> {
        let now = Timespec::now();
        for (want, perm) in [(ROOT_INO, 0o755), (UNLINKED_INO, 0o700)] {
            let obj = tx.create_object(
                os,
                OT_BASE + Kind::Dir as u8,
                DIR_BLOCK as u32,
                Compression::Lz4,
                ChecksumKind::Fletcher4,
            )?;
            if obj != want {
                return Err(FsError::Io(format!(
                    "new object set {os} gave object {obj} where {want} was expected"
                )));
            }
            let store = ObjStore {
                pool,
                tx: Some(tx),
                os,
                obj,
            };
            Directory::new(&store).init(salt_for(os, obj, tx.txg()))?;
            let a = Attr {
                ino: obj,
                generation: tx.txg(),
                kind: Kind::Dir,
                perm,
                uid: 0,
                gid: 0,
                nlink: 2,
                size: 0,
                atime: now,
                mtime: now,
                ctime: now,
                crtime: now,
                rdev: 0,
                parent: ROOT_INO,
                xattr_obj: 0,
                used_bytes: 0,
            };
            tx.set_bonus(os, obj, &a.encode(), Some(tx.txg()))?;
        }
        Ok(())
    }

    /// Opens a filesystem and frees what a crash left in its unlinked set.
    pub(crate) fn open(
        pool: Arc<Pool>,
        os: u64,
        name: &str,
        props: EffectiveProps,
        limits: Arc<SpaceLimits>,
    ) -> Result<Arc<Filesystem>> {
        let fs = Arc::new(Filesystem {
            limits,
            pool,
            os,
            name: name.to_string(),
            props: RwLock::new(props),
            namespace: RwLock::new(()),
            attr_locks: (0..ATTR_LOCK_SHARDS).map(|_| Mutex::new(())).collect(),
            open_files: Mutex::default(),
            gate: Gate::new(),
        });
        let root = fs.getattr(ROOT_INO)?;
        if root.kind != Kind::Dir {
            return Err(FsError::Io(format!("{name}: object 1 is not a directory")));
        }
        if !fs.readonly() {
            fs.drain_unlinked()?;
        }
        Ok(fs)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn objset(&self) -> u64 {
        self.os
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    pub fn props(&self) -> EffectiveProps {
        self.props.read().unwrap().clone()
    }

    pub(crate) fn set_props(&self, p: EffectiveProps) {
        *self.props.write().unwrap() = p;
    }

    fn readonly(&self) -> bool {
        self.props.read().unwrap().readonly
    }

    fn writable(&self) -> Result<()> {
        if self.readonly() {
            Err(FsError::ReadOnly)
        } else {
            Ok(())
        }
    }

    fn store<'a>(&'a self, tx: Option<&'a Tx<'a>>, obj: u64) -> ObjStore<'a> {
        ObjStore {
            pool: &self.pool,
            tx,
            os: self.os,
            obj,
        }
    }

    fn lock_attrs(&self, objs: &[u64]) -> Vec<MutexGuard<'_, ()>> {
        let mut shards: Vec<usize> = objs
            .iter()
            .map(|o| (*o as usize) % ATTR_LOCK_SHARDS)
            .collect();
        shards.sort_unstable();
        shards.dedup();
        shards
            .into_iter()
            .map(|s| self.attr_locks[s].lock().unwrap())
            .collect()
    }

    // ---- attributes ----

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let _pass = self.gate.pass();
        Ok(self.attr_and_info(ino)?.0)
    }

    /// Attributes plus the pool's facts about the object (block size, block count), from
    /// one lookup.
    fn attr_and_info(&self, ino: u64) -> Result<(Attr, pool::objset::ObjectInfo)> {
        if ino == 0 {
            return Err(FsError::NotFound(": object 0".into()));
        }
        let info = self.pool.object_info(self.os, ino)?;
        if info.object_type <= OT_BASE
            || info.object_type > OT_BASE + 7
            || info.bonus.len() < ATTR_SIZE
        {
            return Err(FsError::NotFound(format!(": object {ino} is not a file")));
        }
        let mut a = Attr::decode(ino, info.generation, &info.bonus)?;
        if a.nlink == 0 && ino != UNLINKED_INO && !self.is_open(ino) {
            return Err(FsError::NotFound(format!(": object {ino} is unlinked")));
        }
        a.used_bytes = info.nblocks * info.block_size as u64;
        Ok((a, info))
    }

    /// Attributes of `ino` if its generation matches (for NFS file handles).
    pub fn getattr_gen(&self, ino: u64, generation: u64) -> Result<Attr> {
        let _pass = self.gate.pass();
        let a = self.getattr(ino)?;
        if a.generation != generation {
            return Err(FsError::NotFound(format!(
                ": object {ino} generation changed"
            )));
        }
        Ok(a)
    }

    fn put_attr(&self, tx: &Tx<'_>, a: &Attr) -> Result<()> {
        Ok(tx.set_bonus(self.os, a.ino, &a.encode(), None)?)
    }

    fn dir_attr(&self, ino: u64) -> Result<Attr> {
        let a = self.getattr(ino)?;
        if a.kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        if a.nlink == 0 {
            return Err(FsError::NotFound(": directory was removed".into()));
        }
        Ok(a)
    }

    pub fn setattr(&self, ino: u64, set: &SetAttr, cred: &Cred) -> Result<Attr> {
        let _pass = self.gate.pass();
        self.writable()?;
        let _ns = self.namespace.read().unwrap();
        let _l = self.lock_attrs(&[ino]);
        let (mut a, info) = self.attr_and_info(ino)?;
        let now = Timespec::now();
        if let Some(size) = set.size {
            match a.kind {
                Kind::File => {}
                Kind::Dir => return Err(FsError::IsDir),
                _ => return Err(FsError::Invalid("only files have a size to set".into())),
            }
            if size > MAX_FILE_SIZE {
                return Err(FsError::TooBig);
            }
        }
        if let Some(uid) = set.uid {
            if cred.uid != 0 && uid != a.uid {
                return Err(FsError::Perm);
            }
        }
        if let Some(gid) = set.gid {
            if cred.uid != 0
                && (cred.uid != a.uid || (gid != cred.gid && !cred.groups.contains(&gid)))
                && gid != a.gid
            {
                return Err(FsError::Perm);
            }
        }
        if set.perm.is_some() && cred.uid != 0 && cred.uid != a.uid {
            return Err(FsError::Perm);
        }
        let tx = self.pool.begin(0)?;
        if let Some(size) = set.size {
            // Bytes past the size always read as zeros: shrinking zeroes and frees
            // everything stored beyond the new end.
            let stored_end = info.nblocks * info.block_size as u64;
            if size < stored_end {
                tx.free_range(self.os, ino, size, stored_end - size)?;
            }
            if size != a.size {
                a.mtime = now;
            }
            a.size = size;
        }
        let owner_changed =
            set.uid.is_some_and(|u| u != a.uid) || set.gid.is_some_and(|g| g != a.gid);
        if let Some(uid) = set.uid {
            a.uid = uid;
        }
        if let Some(gid) = set.gid {
            a.gid = gid;
        }
        if owner_changed && a.kind != Kind::Dir {
            // As Linux does: a change of owner drops set-user-id, and set-group-id
            // when the group can execute.
            a.perm &= !(libc::S_ISUID);
            if a.perm & 0o010 != 0 {
                a.perm &= !(libc::S_ISGID);
            }
        }
        if let Some(p) = set.perm {
            let mut p = p & 0o7777;
            // Only members of the file's group (or root) may set set-group-id.
            if cred.uid != 0 && a.gid != cred.gid && !cred.groups.contains(&a.gid) {
                p &= !(libc::S_ISGID);
            }
            a.perm = p;
        }
        if let Some(t) = set.atime {
            a.atime = t;
        }
        if let Some(t) = set.mtime {
            a.mtime = t;
        }
        a.ctime = set.ctime.unwrap_or(now);
        self.put_attr(&tx, &a)?;
        drop(tx);
        Ok(a)
    }

    // ---- names ----

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        let _pass = self.gate.pass();
        let _ns = self.namespace.read().unwrap();
        let p = self.dir_attr(parent)?;
        match name {
            b"." => return Ok(p),
            b".." => return self.getattr(p.parent),
            _ => {}
        }
        let store = self.store(None, parent);
        match Directory::new(&store).lookup(name)? {
            Some(e) => self.getattr(e.object),
            None => Err(FsError::NotFound(String::new())),
        }
    }

    fn check_new_name(name: &[u8]) -> Result<()> {
        // "." and ".." always exist; every other rule is the directory's own.
        if name == b"." || name == b".." {
            return Err(FsError::Exists);
        }
        dir::check_name(name)
    }

    /// Creates a file, directory, symlink or special file named `name` in `parent`.
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        kind: Kind,
        perm: u32,
        rdev: u64,
        cred: &Cred,
    ) -> Result<Attr> {
        let _pass = self.gate.pass();
        self.create_node(parent, name, kind, perm, rdev, None, cred)
    }

    pub fn symlink(&self, parent: u64, name: &[u8], target: &[u8], cred: &Cred) -> Result<Attr> {
        let _pass = self.gate.pass();
        if target.is_empty() || target.len() > 4095 {
            return Err(FsError::Invalid(
                "symlink target must be 1 to 4095 bytes".into(),
            ));
        }
        self.create_node(parent, name, Kind::Symlink, 0o777, 0, Some(target), cred)
    }

    #[allow(clippy::too_many_arguments)]
    fn create_node(
        &self,
        parent: u64,
        name: &[u8],
        kind: Kind,
        perm: u32,
        rdev: u64,
        target: Option<&[u8]>,
        cred: &Cred,
    ) -> Result<Attr> {
        self.writable()?;
        Self::check_new_name(name)?;
        let _ns = self.namespace.write().unwrap();
        let mut p = self.dir_attr(parent)?;
        if Directory::new(&self.store(None, parent))
            .lookup(name)?
            .is_some()
        {
            return Err(FsError::Exists);
        }
        if kind == Kind::Dir && p.nlink >= MAX_LINKS {
            return Err(FsError::TooManyLinks);
        }
        let _l = self.lock_attrs(&[parent]);
        let props = self.props();
        let tx = self.begin_adding(2 * DIR_BLOCK as u64 + target.map_or(0, |t| t.len() as u64))?;
        let block_size = match kind {
            Kind::Dir => DIR_BLOCK as u32,
            Kind::Symlink => (target.unwrap().len() as u32).div_ceil(MIN_BLOCK) * MIN_BLOCK,
            _ => MIN_BLOCK,
        };
        let compression = if kind == Kind::Dir {
            Compression::Lz4
        } else {
            props.compression
        };
        let obj = tx.create_object(
            self.os,
            OT_BASE + kind as u8,
            block_size,
            compression,
            props.checksum,
        )?;
        let now = Timespec::now();
        let mut perm = perm & 0o7777;
        let gid = if p.perm & libc::S_ISGID != 0 {
            if kind == Kind::Dir {
                perm |= libc::S_ISGID;
            }
            p.gid
        } else {
            cred.gid
        };
        let a = Attr {
            ino: obj,
            generation: tx.txg(),
            kind,
            perm,
            uid: cred.uid,
            gid,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            size: target.map_or(0, |t| t.len() as u64),
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            rdev: if matches!(kind, Kind::CharDev | Kind::BlockDev) {
                rdev
            } else {
                0
            },
            parent,
            xattr_obj: 0,
            used_bytes: 0,
        };
        if kind == Kind::Dir {
            Directory::new(&self.store(Some(&tx), obj)).init(salt_for(self.os, obj, tx.txg()))?;
        }
        if let Some(t) = target {
            tx.write(self.os, obj, 0, t)?;
        }
        tx.set_bonus(self.os, obj, &a.encode(), Some(tx.txg()))?;
        Directory::new(&self.store(Some(&tx), parent)).insert(name, obj, kind as u8)?;
        if kind == Kind::Dir {
            p.nlink += 1;
        }
        p.mtime = now;
        p.ctime = now;
        self.put_attr(&tx, &p)?;
        drop(tx);
        let mut a = a;
        let info = self.pool.object_info(self.os, obj)?;
        a.used_bytes = info.nblocks * info.block_size as u64;
        Ok(a)
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let _pass = self.gate.pass();
        let a = self.getattr(ino)?;
        if a.kind != Kind::Symlink {
            return Err(FsError::Invalid("not a symlink".into()));
        }
        Ok(self.pool.read(self.os, ino, 0, a.size as usize)?)
    }

    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8], _cred: &Cred) -> Result<Attr> {
        let _pass = self.gate.pass();
        self.writable()?;
        Self::check_new_name(newname)?;
        let _ns = self.namespace.write().unwrap();
        let _l = self.lock_attrs(&[ino, newparent]);
        let mut p = self.dir_attr(newparent)?;
        let mut a = self.getattr(ino)?;
        if a.kind == Kind::Dir {
            return Err(FsError::Perm);
        }
        if a.nlink == 0 {
            return Err(FsError::NotFound(": file was removed".into()));
        }
        if a.nlink >= MAX_LINKS {
            return Err(FsError::TooManyLinks);
        }
        if Directory::new(&self.store(None, newparent))
            .lookup(newname)?
            .is_some()
        {
            return Err(FsError::Exists);
        }
        let tx = self.pool.begin(DIR_BLOCK as u64)?;
        Directory::new(&self.store(Some(&tx), newparent)).insert(newname, ino, a.kind as u8)?;
        let now = Timespec::now();
        a.nlink += 1;
        a.ctime = now;
        self.put_attr(&tx, &a)?;
        p.mtime = now;
        p.ctime = now;
        self.put_attr(&tx, &p)?;
        Ok(a)
    }

    fn sticky_denies(p: &Attr, victim: &Attr, cred: &Cred) -> bool {
        p.perm & libc::S_ISVTX != 0 && cred.uid != 0 && cred.uid != p.uid && cred.uid != victim.uid
    }

    /// Drops one link of `a` (attributes already loaded and locked) in `tx`; frees the
    /// object when the last link goes and nobody has it open.
    fn drop_link(&self, tx: &Tx<'_>, a: &mut Attr, now: Timespec) -> Result<()> {
        a.nlink = if a.kind == Kind::Dir {
            0
        } else {
            a.nlink.saturating_sub(1)
        };
        a.ctime = now;
        if a.nlink > 0 {
            return self.put_attr(tx, a);
        }
        if self.keep_while_open(tx, a)? {
            return Ok(());
        }
        self.free_object(tx, a)
    }

    fn free_object(&self, tx: &Tx<'_>, a: &Attr) -> Result<()> {
        if a.xattr_obj != 0 {
            tx.free_object(self.os, a.xattr_obj)?;
        }
        Ok(tx.free_object(self.os, a.ino)?)
    }

    pub fn unlink(&self, parent: u64, name: &[u8], cred: &Cred) -> Result<()> {
        let _pass = self.gate.pass();
        self.remove(parent, name, Some(false), cred)
    }

    pub fn rmdir(&self, parent: u64, name: &[u8], cred: &Cred) -> Result<()> {
        let _pass = self.gate.pass();
        self.remove(parent, name, Some(true), cred)
    }

    /// Removes `name` whether it is a directory (which must be empty) or not, in one
    /// walk of the directory (NFSv4's REMOVE).
    pub fn remove_any(&self, parent: u64, name: &[u8], cred: &Cred) -> Result<()> {
        let _pass = self.gate.pass();
        self.remove(parent, name, None, cred)
    }

    /// `want_dir`: `Some(true)` for rmdir, `Some(false)` for unlink, `None` for either.
    fn remove(&self, parent: u64, name: &[u8], want_dir: Option<bool>, cred: &Cred) -> Result<()> {
        self.writable()?;
        match name {
            b"." if want_dir != Some(false) => {
                return Err(FsError::Invalid("cannot remove '.'".into()))
            }
            b".." if want_dir != Some(false) => return Err(FsError::NotEmpty),
            _ => {}
        }
        let _ns = self.namespace.write().unwrap();
        let mut p = self.dir_attr(parent)?;
        let entry = Directory::new(&self.store(None, parent))
            .lookup(name)?
            .ok_or_else(|| FsError::NotFound(String::new()))?;
        let _l = self.lock_attrs(&[parent, entry.object]);
        let mut a = self.getattr(entry.object)?;
        let is_dir = a.kind == Kind::Dir;
        match want_dir {
            Some(true) if !is_dir => return Err(FsError::NotDir),
            Some(false) if is_dir => return Err(FsError::IsDir),
            _ => {}
        }
        if Self::sticky_denies(&p, &a, cred) {
            return Err(FsError::Perm);
        }
        if is_dir && !Directory::new(&self.store(None, a.ino)).is_empty()? {
            return Err(FsError::NotEmpty);
        }
        let tx = self.pool.begin(0)?;
        Directory::new(&self.store(Some(&tx), parent)).remove(name)?;
        let now = Timespec::now();
        if is_dir {
            p.nlink = p.nlink.saturating_sub(1);
        }
        p.mtime = now;
        p.ctime = now;
        self.put_attr(&tx, &p)?;
        self.drop_link(&tx, &mut a, now)
    }

    /// Renames `name` in `parent` to `newname` in `newparent`, replacing a compatible
    /// target. `noreplace` fails with `Exists` instead.
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        noreplace: bool,
        cred: &Cred,
    ) -> Result<()> {
        let _pass = self.gate.pass();
        self.writable()?;
        if matches!(name, b"." | b"..") || matches!(newname, b"." | b"..") {
            return Err(FsError::Invalid("cannot rename '.' or '..'".into()));
        }
        Self::check_new_name(newname)?;
        let _ns = self.namespace.write().unwrap();
        let mut sp = self.dir_attr(parent)?;
        let mut dp = self.dir_attr(newparent)?;
        let src = Directory::new(&self.store(None, parent))
            .lookup(name)?
            .ok_or_else(|| FsError::NotFound(String::new()))?;
        let dst = Directory::new(&self.store(None, newparent)).lookup(newname)?;
        if let Some(d) = &dst {
            if d.object == src.object {
                return Ok(()); // two names of one file: nothing to do
            }
            if noreplace {
                return Err(FsError::Exists);
            }
        }
        let mut locked = vec![parent, newparent, src.object];
        if let Some(d) = &dst {
            locked.push(d.object);
        }
        let _l = self.lock_attrs(&locked);
        let mut s = self.getattr(src.object)?;
        if Self::sticky_denies(&sp, &s, cred) {
            return Err(FsError::Perm);
        }
        if s.kind == Kind::Dir && parent != newparent {
            // The target directory may not be inside the directory being moved.
            let mut at = newparent;
            let mut steps = 0;
            while at != ROOT_INO {
                if at == s.ino {
                    return Err(FsError::Invalid(
                        "cannot move a directory into itself".into(),
                    ));
                }
                at = self.getattr(at)?.parent;
                steps += 1;
                if steps > 1 << 20 {
                    return Err(FsError::Io(
                        "directory parent chain does not reach the root".into(),
                    ));
                }
            }
            if dp.nlink >= MAX_LINKS && dst.is_none() {
                return Err(FsError::TooManyLinks);
            }
        }
        let mut victim = None;
        if let Some(d) = &dst {
            let v = self.getattr(d.object)?;
            if Self::sticky_denies(&dp, &v, cred) {
                return Err(FsError::Perm);
            }
            match (s.kind == Kind::Dir, v.kind == Kind::Dir) {
                (false, true) => return Err(FsError::IsDir),
                (true, false) => return Err(FsError::NotDir),
                (true, true) => {
                    if !Directory::new(&self.store(None, v.ino)).is_empty()? {
                        return Err(FsError::NotEmpty);
                    }
                }
                (false, false) => {}
            }
            victim = Some(v);
        }
        let tx = self.pool.begin(DIR_BLOCK as u64)?;
        let now = Timespec::now();
        Directory::new(&self.store(Some(&tx), parent)).remove(name)?;
        if victim.is_some() {
            Directory::new(&self.store(Some(&tx), newparent)).replace(
                newname,
                s.ino,
                s.kind as u8,
            )?;
        } else {
            Directory::new(&self.store(Some(&tx), newparent)).insert(
                newname,
                s.ino,
                s.kind as u8,
            )?;
        }
        if let Some(mut v) = victim {
            if v.kind == Kind::Dir {
                dp.nlink = dp.nlink.saturating_sub(1);
            }
            self.drop_link(&tx, &mut v, now)?;
        }
        if s.kind == Kind::Dir && parent != newparent {
            sp.nlink = sp.nlink.saturating_sub(1);
            dp.nlink += 1;
            s.parent = newparent;
        }
        s.ctime = now;
        self.put_attr(&tx, &s)?;
        sp.mtime = now;
        sp.ctime = now;
        dp.mtime = now;
        dp.ctime = now;
        // In one directory `dp` carries every change (sp is the same object).
        if parent != newparent {
            self.put_attr(&tx, &sp)?;
        }
        self.put_attr(&tx, &dp)
    }

    /// Directory entries after `cookie` (0 = from the start; "." is 1 and ".." is 2),
    /// at most `max`.
    pub fn readdir(&self, ino: u64, cookie: u64, max: usize) -> Result<Vec<DirEntry>> {
        let _pass = self.gate.pass();
        let _ns = self.namespace.read().unwrap();
        let a = self.dir_attr(ino)?;
        let mut out = Vec::new();
        if cookie < 1 && out.len() < max {
            out.push(DirEntry {
                cookie: 1,
                name: b".".to_vec(),
                ino,
                kind: Kind::Dir,
            });
        }
        if cookie < 2 && out.len() < max {
            out.push(DirEntry {
                cookie: 2,
                name: b"..".to_vec(),
                ino: a.parent,
                kind: Kind::Dir,
            });
        }
        if out.len() < max {
            let list = Directory::new(&self.store(None, ino)).list(cookie, max - out.len())?;
            for e in list {
                let kind = Kind::from_byte(e.kind).ok_or_else(|| {
                    FsError::Io(format!("directory {ino}: entry of unknown kind"))
                })?;
                out.push(DirEntry {
                    cookie: e.cookie(),
                    name: e.name,
                    ino: e.object,
                    kind,
                });
            }
        }
        Ok(out)
    }

    // ---- data ----

    pub fn read(&self, ino: u64, offset: u64, len: usize) -> Result<Vec<u8>> {
        let _pass = self.gate.pass();
        Ok(self.read_parts(ino, offset, len)?.to_vec())
    }

    /// Reads up to `len` bytes at `offset` (fewer at the end of the file) as slices of
    /// the pool's cache buffers, for a server to send without copying.
    pub fn read_parts(&self, ino: u64, offset: u64, len: usize) -> Result<ReadBuf> {
        let _pass = self.gate.pass();
        let (a, n) = self.read_extent(ino, offset, len)?;
        if n == 0 {
            return Ok(ReadBuf::new());
        }
        let bytes = self.pool.read_parts(self.os, ino, offset, n)?;
        self.touch_atime(&a);
        Ok(bytes)
    }

    /// `read_parts` from memory alone: `None` when any part of it would need a device
    /// read, or when the read would move atime (a transaction, which may wait). Then
    /// nothing was read or changed, and the caller goes to `read_parts` on a thread that
    /// may block.
    pub fn read_parts_cached(&self, ino: u64, offset: u64, len: usize) -> Result<Option<ReadBuf>> {
        let _pass = self.gate.pass();
        let (a, n) = self.read_extent(ino, offset, len)?;
        if n == 0 {
            return Ok(Some(ReadBuf::new()));
        }
        if self.atime_due(&a, Timespec::now()) {
            return Ok(None);
        }
        Ok(self.pool.read_parts_cached(self.os, ino, offset, n)?)
    }

    /// A read's file attributes and how many bytes it returns (fewer than `len` at the
    /// end of the file, none past it); only regular files are read.
    fn read_extent(&self, ino: u64, offset: u64, len: usize) -> Result<(Attr, usize)> {
        let a = self.getattr(ino)?;
        match a.kind {
            Kind::File => {}
            Kind::Dir => return Err(FsError::IsDir),
            _ => return Err(FsError::Invalid("not a regular file".into())),
        }
        let n = if offset >= a.size {
            0
        } else {
            (a.size - offset).min(len as u64) as usize
        };
        Ok((a, n))
    }

    /// relatime: atime moves when it is older than mtime or ctime, or a day old, so
    /// reads do not turn into a stream of attribute writes.
    fn atime_due(&self, a: &Attr, now: Timespec) -> bool {
        if !self.props.read().unwrap().atime || self.readonly() {
            return false;
        }
        !(a.atime > a.mtime && a.atime > a.ctime && now.sec - a.atime.sec < 86_400)
    }

    fn touch_atime(&self, a: &Attr) {
        let now = Timespec::now();
        if !self.atime_due(a, now) {
            return;
        }
        let _l = self.lock_attrs(&[a.ino]);
        if let Ok(mut cur) = self.getattr(a.ino) {
            if let Ok(tx) = self.pool.begin(0) {
                cur.atime = now;
                let _ = self.put_attr(&tx, &cur);
            }
        }
    }

    /// Writes `data` at `offset`; with sync=always it is durable when this returns.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> Result<usize> {
        let _pass = self.gate.pass();
        self.writable()?;
        let (recordsize, sync) = {
            let p = self.props.read().unwrap();
            (p.recordsize, p.sync)
        };
        let n = self.write_locked(ino, offset, data, recordsize)?;
        // Outside the attribute lock: other writers of this file need not wait for
        // the commit.
        if sync == SyncMode::Always {
            self.fsync(ino)?;
        }
        Ok(n)
    }

    fn write_locked(&self, ino: u64, offset: u64, data: &[u8], recordsize: u32) -> Result<usize> {
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(FsError::TooBig)?;
        let _l = self.lock_attrs(&[ino]);
        let (mut a, info) = self.attr_and_info(ino)?;
        match a.kind {
            Kind::File => {}
            Kind::Dir => return Err(FsError::IsDir),
            _ => return Err(FsError::Invalid("not a regular file".into())),
        }
        if data.is_empty() {
            return Ok(0);
        }
        let tx = self.begin_adding(data.len() as u64)?;
        if info.block_size < recordsize && info.nblocks <= 1 {
            // A small file keeps one block of its own size, growing to the recordsize.
            let want = end.max(a.size).min(recordsize as u64) as u32;
            let want = want.div_ceil(MIN_BLOCK) * MIN_BLOCK;
            let want = if end > recordsize as u64 {
                recordsize
            } else {
                want
            };
            if want > info.block_size {
                tx.grow_block_size(self.os, ino, want)?;
            }
        }
        tx.write(self.os, ino, offset, data)?;
        let now = Timespec::now();
        a.size = a.size.max(end);
        a.mtime = now;
        a.ctime = now;
        self.put_attr(&tx, &a)?;
        Ok(data.len())
    }

    /// Punches a hole: `[offset, offset+len)` reads as zeros afterwards and whole
    /// records inside it give their space back. The size does not change.
    pub fn punch(&self, ino: u64, offset: u64, len: u64) -> Result<()> {
        let _pass = self.gate.pass();
        self.writable()?;
        let _l = self.lock_attrs(&[ino]);
        let mut a = self.getattr(ino)?;
        if a.kind != Kind::File {
            return Err(FsError::Invalid("not a regular file".into()));
        }
        if offset >= a.size || len == 0 {
            return Ok(());
        }
        let len = len.min(a.size - offset);
        let tx = self.pool.begin(0)?;
        tx.free_range(self.os, ino, offset, len)?;
        let now = Timespec::now();
        a.mtime = now;
        a.ctime = now;
        self.put_attr(&tx, &a)
    }

    /// Makes everything changed so far durable through the pool's intent log, without
    /// waiting for a transaction group; concurrent calls share one log write. The log
    /// is pool-wide, so this covers every object, which is what NFS COMMIT and
    /// metadata operations need anyway.
    pub fn fsync(&self, _ino: u64) -> Result<()> {
        let _pass = self.gate.pass();
        if self.props.read().unwrap().sync == SyncMode::Disabled {
            return Ok(());
        }
        self.pool.log_commit()?;
        Ok(())
    }

    /// With sync=always every change is durable before it is acknowledged: protocol
    /// adapters pass the result of each namespace or attribute change through here.
    pub fn settle<T>(&self, r: Result<T>) -> Result<T> {
        let _pass = self.gate.pass();
        if r.is_ok() && self.props.read().unwrap().sync == SyncMode::Always {
            self.pool.log_commit()?;
        }
        r
    }

    /// Whether a change answered as stable needs a log commit first (sync is not
    /// disabled): what `settle_stable` and `fsync` decide, for a caller that commits
    /// several changes at once.
    pub fn commits_stable(&self) -> bool {
        let _pass = self.gate.pass();
        self.props.read().unwrap().sync != SyncMode::Disabled
    }

    /// `settle` for protocols whose answer to a namespace or attribute change says it
    /// is on stable storage (NFS: RFC 1813 section 3.3, RFC 8881 section 18): the
    /// change is committed before the answer unless sync=disabled. Concurrent callers
    /// share one log commit (see `IntentLog::commit`).
    pub fn settle_stable<T>(&self, r: Result<T>) -> Result<T> {
        let _pass = self.gate.pass();
        if r.is_ok() && self.props.read().unwrap().sync != SyncMode::Disabled {
            self.pool.log_commit()?;
        }
        r
    }

    /// Begins a transaction for a change that adds about `bytes`, after the dataset's
    /// quotas and the reservations of others agree (see `space.rs`).
    fn begin_adding(&self, bytes: u64) -> Result<Tx<'_>> {
        self.limits.admit(&self.pool, self.os, bytes)?;
        Ok(self.pool.begin(bytes)?)
    }

    /// What the dataset uses (children and snapshots included) and can still take.
    pub fn usage(&self) -> crate::space::Usage {
        let _pass = self.gate.pass();
        self.limits.usage(&self.pool, self.os)
    }

    /// Space as zfs reports it: the size is what the dataset uses plus what it can
    /// still take, so quotas and others' reservations show in `df`.
    pub fn statfs(&self) -> Result<StatFs> {
        let _pass = self.gate.pass();
        let usage = self.usage();
        let avail = usage.available;
        let total = usage.used + avail;
        Ok(StatFs {
            block_size: 4096,
            total_bytes: total,
            free_bytes: avail,
            avail_bytes: avail,
            files: total / 512,
            free_files: avail / 512,
            name_max: dir::NAME_MAX as u32,
        })
    }

    // ---- extended attributes ----

    fn load_xattrs(&self, a: &Attr) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if a.xattr_obj == 0 {
            return Ok(Vec::new());
        }
        let head = self.pool.read(self.os, a.xattr_obj, 0, 4)?;
        let len = u32::from_le_bytes(head[0..4].try_into().unwrap()) as usize;
        if len > XATTR_TOTAL_MAX + 4096 {
            return Err(FsError::Io(format!(
                "object {}: xattr blob too long",
                a.ino
            )));
        }
        let b = self.pool.read(self.os, a.xattr_obj, 4, len)?;
        let mut out = Vec::new();
        let mut o = 0;
        while o < b.len() {
            let bad = || FsError::Io(format!("object {}: xattr blob corrupt", a.ino));
            if o + 5 > b.len() {
                return Err(bad());
            }
            let nl = b[o] as usize;
            let vl = u32::from_le_bytes(b[o + 1..o + 5].try_into().unwrap()) as usize;
            if o + 5 + nl + vl > b.len() {
                return Err(bad());
            }
            out.push((
                b[o + 5..o + 5 + nl].to_vec(),
                b[o + 5 + nl..o + 5 + nl + vl].to_vec(),
            ));
            o += 5 + nl + vl;
        }
        Ok(out)
    }

    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        let _pass = self.gate.pass();
        let a = self.getattr(ino)?;
        self.load_xattrs(&a)?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or(FsError::NoAttr)
    }

    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let _pass = self.gate.pass();
        let a = self.getattr(ino)?;
        Ok(self.load_xattrs(&a)?.into_iter().map(|(n, _)| n).collect())
    }

    /// Sets (`value` Some) or removes (None) an attribute. `create`/`replace` are the
    /// XATTR_CREATE and XATTR_REPLACE flags.
    pub fn setxattr(
        &self,
        ino: u64,
        name: &[u8],
        value: Option<&[u8]>,
        create: bool,
        replace: bool,
    ) -> Result<()> {
        let _pass = self.gate.pass();
        self.writable()?;
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return Err(if name.is_empty() {
                FsError::Invalid("empty attribute name".into())
            } else {
                FsError::Range
            });
        }
        if value.is_some_and(|v| v.len() > XATTR_VALUE_MAX) {
            return Err(FsError::TooBig);
        }
        let _l = self.lock_attrs(&[ino]);
        let mut a = self.getattr(ino)?;
        let mut list = self.load_xattrs(&a)?;
        let at = list.iter().position(|(n, _)| n == name);
        match (value, at) {
            (Some(_), Some(_)) if create => return Err(FsError::Exists),
            (Some(_), None) if replace => return Err(FsError::NoAttr),
            (None, None) => return Err(FsError::NoAttr),
            (Some(v), Some(i)) => list[i].1 = v.to_vec(),
            (Some(v), None) => list.push((name.to_vec(), v.to_vec())),
            (None, Some(i)) => {
                list.remove(i);
            }
        }
        let mut blob = Vec::new();
        for (n, v) in &list {
            blob.push(n.len() as u8);
            blob.extend_from_slice(&(v.len() as u32).to_le_bytes());
            blob.extend_from_slice(n);
            blob.extend_from_slice(v);
        }
        if blob.len() > XATTR_TOTAL_MAX {
            return Err(FsError::NoSpace);
        }
        let mut whole = (blob.len() as u32).to_le_bytes().to_vec();
        whole.extend_from_slice(&blob);
        let tx = self.begin_adding(whole.len() as u64)?;
        // A fresh object each time, in one block of the blob's size: small and simple,
        // and the old one is freed in the same transaction.
        let bs = (whole.len() as u32).div_ceil(MIN_BLOCK) * MIN_BLOCK;
        let bs = bs.clamp(MIN_BLOCK, 1 << 20);
        let new_obj = if list.is_empty() {
            0
        } else {
            let o = tx.create_object(
                self.os,
                OT_XATTR,
                bs,
                Compression::Lz4,
                ChecksumKind::Fletcher4,
            )?;
            tx.write(self.os, o, 0, &whole)?;
            o
        };
        if a.xattr_obj != 0 {
            tx.free_object(self.os, a.xattr_obj)?;
        }
        a.xattr_obj = new_obj;
        a.ctime = Timespec::now();
        self.put_attr(&tx, &a)
    }
}
