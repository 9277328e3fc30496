//! A shoal filesystem on a local directory through FUSE (the fuser crate, speaking to
//! /dev/fuse directly): the adapter from FUSE requests to the file system layer
//! (`fs`), for `shoal mount` (a process of its own that holds the pool) and for the
//! daemon's mounts beside its NFS shares (`server::mounts`). Inode numbers are object
//! ids (the root directory is object 1, as FUSE wants) and the generation is the
//! object's.
//!
//! Snapshots are readable under `.shoal/snapshot/NAME/` at the root (hidden from the
//! root's listing, like ZFS's `.zfs`). Their inode numbers live in their own range:
//! bit 63 set, the snapshot's object set id in bits 40..63 and the object id below, so
//! they never collide with the live filesystem's (object ids stay below 2^40 here), and
//! `.shoal` and `.shoal/snapshot` are two fixed numbers with bit 62 set. Everything
//! under `.shoal` is read-only (EROFS).
//!
//! In the daemon, NFSv4 clients may hold delegations of the files a mount reaches:
//! before each access that would meet one (any change of a file; for a write
//! delegation, any read or stat of it too) the mount asks the daemon's `Delegations`
//! to recall them and waits until they are back or revoked, as a local access on a
//! kernel NFS server waits for a lease break. The request waits on one of the
//! session's threads; the others go on.
//!
//! The kernel checks access permissions (`default_permissions`); ownership of new files
//! comes from the caller's uid/gid. Nothing here commits: whoever runs the session
//! commits the pool when it ends (`shoal mount` on SIGTERM, SIGINT or unmount; the
//! daemon on unmount), so nothing acknowledged is lost.

use anyhow::{bail, Context, Result};
use fs::{Attr, Cred, FsError, Kind, SetAttr, Timespec};
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, LockOwner,
    MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, SessionACL,
    TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the kernel may keep attributes and names (found or not) without asking,
/// in milliseconds. A `shoal mount` process is the only writer of the dataset (it
/// holds the pool), and the kernel drops what its own requests change, so the cache
/// stays true; 60 s only bounds how long an overlooked case could stay stale. In the
/// daemon, NFS clients write the same files, so its mounts revalidate after
/// `DAEMON_TTL_MS`, as an NFS client's attribute cache does.
static TTL_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(60_000);
const DAEMON_TTL_MS: u64 = 1_000;

/// From now on, attributes and names are kept `DAEMON_TTL_MS` (mounts beside NFS
/// shares, whose clients change the same files).
pub fn use_daemon_ttl() {
    TTL_MS.store(DAEMON_TTL_MS, std::sync::atomic::Ordering::Relaxed);
}

pub use fuser;

fn ttl() -> Duration {
    Duration::from_millis(TTL_MS.load(std::sync::atomic::Ordering::Relaxed))
}

/// How a local access meets NFSv4 delegations of the file it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalAccess {
    /// Reading the file or its attributes: in the way of write delegations.
    Read,
    /// Changing the file, its attributes or its names: in the way of every delegation.
    Change,
}

/// The delegations local access to one mounted filesystem waits for (the daemon's
/// NFSv4 state; a mount of its own process has none).
pub trait Delegations: Send + Sync {
    /// Whether nothing stands in the way of `access` to object `ino`. When something
    /// does, its recall is under way and the caller asks again.
    fn clear(&self, ino: u64, access: LocalAccess) -> bool;

    /// How long one access may wait: a recalled delegation is revoked a lease after
    /// its recall, so a longer wait means new delegations keep coming in its way.
    fn wait_limit(&self) -> Duration;
}

/// Between two asks whether a delegation is back: short at first (a client answers a
/// recall within milliseconds), then at most this.
const RECALL_POLL_MAX: Duration = Duration::from_millis(100);

/// The FUSE file system of one mounted dataset.
pub struct ShoalFuse {
    fs: Arc<fs::Filesystem>,
    /// What local access waits for.
    delegations: Option<Arc<dyn Delegations>>,
    datasets: Arc<fs::Datasets>,
    /// This mount's dataset (its snapshots are the ones shown).
    dataset: String,
    /// Snapshots opened through `.shoal/snapshot`, by object set id.
    snapshots: std::sync::Mutex<std::collections::HashMap<u64, Arc<fs::Filesystem>>>,
}

const CTL_DIR_INO: u64 = (1 << 62) | 1;
const SNAP_DIR_INO: u64 = (1 << 62) | 2;
const SNAP_BIT: u64 = 1 << 63;
const SNAP_OBJ_BITS: u32 = 40;
const CTL_NAME: &[u8] = b".shoal";

/// What an inode number names.
enum Node {
    Live,
    CtlDir,
    SnapDir,
    /// (snapshot filesystem, its object set id, object id)
    Snap(Arc<fs::Filesystem>, u64, u64),
}

fn snap_ino(os: u64, obj: u64) -> u64 {
    SNAP_BIT | (os << SNAP_OBJ_BITS) | obj
}

/// Answers a readdir from `offset` with the entries of directory `obj` of `f`, their
/// inode numbers passed through `to_ino`.
fn list_dir(
    f: &fs::Filesystem,
    obj: u64,
    offset: u64,
    to_ino: impl Fn(u64) -> u64,
    mut reply: ReplyDirectory,
) {
    let mut cookie = offset;
    loop {
        let page = match f.readdir(obj, cookie, 128) {
            Ok(p) => p,
            Err(e) => return reply.error(errno(e)),
        };
        if page.is_empty() {
            break;
        }
        for e in page {
            let name = OsStr::from_bytes(&e.name);
            if reply.add(INodeNo(to_ino(e.ino)), e.cookie, file_type(e.kind), name) {
                return reply.ok();
            }
            cookie = e.cookie;
        }
    }
    reply.ok()
}

/// EROFS for a change under `.shoal` or to `.shoal` itself.
fn refuse(parent: INodeNo, name: &OsStr) -> Option<Errno> {
    let ctl = parent.0 == fs::filesystem::ROOT_INO && name.as_bytes() == CTL_NAME;
    (special(parent) || ctl).then_some(Errno::EROFS)
}

/// Whether an inode is under `.shoal` (read-only, not the live filesystem's).
fn special(ino: INodeNo) -> bool {
    ino.0 >= 1 << 62
}

fn errno(e: FsError) -> Errno {
    Errno::from_i32(e.errno())
}

/// Answers an operation that returns nothing but success or an errno.
fn done(r: fs::Result<()>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

fn attr(r: fs::Result<Attr>, reply: ReplyAttr) {
    match r {
        Ok(a) => reply.attr(&ttl(), &fuse_attr(&a)),
        Err(e) => reply.error(errno(e)),
    }
}

fn data(r: fs::Result<Vec<u8>>, reply: ReplyData) {
    match r {
        Ok(d) => reply.data(&d),
        Err(e) => reply.error(errno(e)),
    }
}

fn to_system(t: Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(t.nsec as u64)
    }
}

fn from_system(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            let d = e.duration();
            let (mut sec, mut nsec) = (-(d.as_secs() as i64), d.subsec_nanos());
            if nsec > 0 {
                sec -= 1;
                nsec = 1_000_000_000 - nsec;
            }
            Timespec { sec, nsec }
        }
    }
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::CharDev => FileType::CharDevice,
        Kind::BlockDev => FileType::BlockDevice,
        Kind::Socket => FileType::Socket,
    }
}

fn fuse_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.used_bytes.div_ceil(512),
        atime: to_system(a.atime),
        mtime: to_system(a.mtime),
        ctime: to_system(a.ctime),
        crtime: to_system(a.crtime),
        kind: file_type(a.kind),
        perm: a.perm as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev as u32,
        blksize: 128 * 1024,
        flags: 0,
    }
}

/// The attributes of a negative entry (node id 0); the kernel looks at nothing else.
fn negative_entry() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 128 * 1024,
        flags: 0,
    }
}

/// The caller's credentials, with supplementary groups read from /proc (FUSE does not
/// pass them), needed where group membership decides (chown to a group, setgid).
fn cred(req: &Request, with_groups: bool) -> Cred {
    let mut c = Cred {
        uid: req.uid(),
        gid: req.gid(),
        groups: Vec::new(),
    };
    if with_groups {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{}/status", req.pid())) {
            if let Some(l) = s.lines().find(|l| l.starts_with("Groups:")) {
                c.groups = l[7..]
                    .split_whitespace()
                    .filter_map(|g| g.parse().ok())
                    .collect();
            }
        }
    }
    c
}

impl ShoalFuse {
    /// Waits until no delegation stands in the way of `access` to live object `ino`;
    /// whether it had to wait (what was read before is then stale). EAGAIN when new
    /// delegations kept coming in the way for longer than `Delegations::wait_limit`.
    fn clear_delegations(&self, ino: u64, access: LocalAccess) -> Result<bool, Errno> {
        let Some(d) = &self.delegations else {
            return Ok(false);
        };
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(2);
        let mut waited = false;
        while !d.clear(ino, access) {
            if waited && started.elapsed() > d.wait_limit() {
                tracing::warn!(
                    dataset = %self.dataset,
                    ino,
                    "local access still waits for NFSv4 delegations: EAGAIN"
                );
                return Err(Errno::EAGAIN);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(RECALL_POLL_MAX);
            waited = true;
        }
        Ok(waited)
    }

    /// `clear_delegations` of the object `name` in `parent` leads to, if any.
    fn clear_delegations_of_name(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        if self.delegations.is_none() {
            return Ok(());
        }
        match self.fs.lookup(parent, name) {
            Ok(a) => self
                .clear_delegations(a.ino, LocalAccess::Change)
                .map(|_| ()),
            Err(_) => Ok(()),
        }
    }

    fn node(&self, ino: u64) -> Result<Node, Errno> {
        match ino {
            CTL_DIR_INO => Ok(Node::CtlDir),
            SNAP_DIR_INO => Ok(Node::SnapDir),
            i if i & SNAP_BIT != 0 => {
                let os = (i & !SNAP_BIT) >> SNAP_OBJ_BITS;
                let obj = i & ((1 << SNAP_OBJ_BITS) - 1);
                Ok(Node::Snap(self.snapshot_fs(os)?, os, obj))
            }
            i if i >= 1 << 62 => Err(Errno::ENOENT),
            _ => Ok(Node::Live),
        }
    }

    fn snapshot_fs(&self, os: u64) -> Result<Arc<fs::Filesystem>, Errno> {
        if let Some(f) = self.snapshots.lock().unwrap().get(&os) {
            return Ok(f.clone());
        }
        let snaps = self.datasets.snapshot_names(&self.dataset).map_err(errno)?;
        let (_, name) = snaps.iter().find(|s| s.0 == os).ok_or(Errno::ENOENT)?;
        let f = self.datasets.open(name).map_err(errno)?;
        self.snapshots.lock().unwrap().insert(os, f.clone());
        Ok(f)
    }

    /// Attributes of `.shoal` and `.shoal/snapshot`: read-only directories dated like
    /// the root.
    fn ctl_attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let root = self.fs.getattr(fs::filesystem::ROOT_INO).map_err(errno)?;
        let mut a = fuse_attr(&root);
        a.ino = INodeNo(ino);
        a.perm = 0o555;
        a.nlink = 2;
        a.size = 0;
        a.blocks = 0;
        Ok(a)
    }

    fn snap_attr(os: u64, a: &Attr) -> FileAttr {
        let mut f = fuse_attr(a);
        f.ino = INodeNo(snap_ino(os, a.ino));
        f
    }

    /// Lookups and attributes inside `.shoal`.
    fn special_lookup(&self, parent: u64, name: &[u8]) -> Result<(FileAttr, u64), Errno> {
        match self.node(parent)? {
            Node::Live => Ok((self.ctl_attr(CTL_DIR_INO)?, 0)),
            Node::CtlDir if name == b"snapshot" => Ok((self.ctl_attr(SNAP_DIR_INO)?, 0)),
            Node::CtlDir => Err(Errno::ENOENT),
            Node::SnapDir => {
                let name = std::str::from_utf8(name).map_err(|_| Errno::ENOENT)?;
                let full = format!("{}@{name}", self.dataset);
                let snaps = self.datasets.snapshot_names(&self.dataset).map_err(errno)?;
                let (id, _) = snaps.iter().find(|s| s.1 == full).ok_or(Errno::ENOENT)?;
                let f = self.snapshot_fs(*id)?;
                let a = f.getattr(fs::filesystem::ROOT_INO).map_err(errno)?;
                Ok((Self::snap_attr(*id, &a), a.generation))
            }
            Node::Snap(f, os, obj) => {
                let a = f.lookup(obj, name).map_err(errno)?;
                Ok((Self::snap_attr(os, &a), a.generation))
            }
        }
    }

    fn special_readdir(&self, ino: u64, offset: u64, reply: ReplyDirectory) {
        let fixed = |entries: Vec<(u64, FileType, Vec<u8>)>, mut reply: ReplyDirectory| {
            for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
                if reply.add(INodeNo(ino), i as u64 + 1, kind, OsStr::from_bytes(&name)) {
                    break;
                }
            }
            reply.ok()
        };
        let dot = |ino: u64, parent: u64| {
            vec![
                (ino, FileType::Directory, b".".to_vec()),
                (parent, FileType::Directory, b"..".to_vec()),
            ]
        };
        match self.node(ino) {
            Err(e) => reply.error(e),
            Ok(Node::Live) => reply.error(Errno::ENOENT),
            Ok(Node::CtlDir) => {
                let mut v = dot(CTL_DIR_INO, fs::filesystem::ROOT_INO);
                v.push((SNAP_DIR_INO, FileType::Directory, b"snapshot".to_vec()));
                fixed(v, reply)
            }
            Ok(Node::SnapDir) => match self.datasets.snapshot_names(&self.dataset) {
                Err(e) => reply.error(errno(e)),
                Ok(snaps) => {
                    let mut v = dot(SNAP_DIR_INO, CTL_DIR_INO);
                    for (id, name) in snaps {
                        let short = name.rsplit_once('@').map_or("", |x| x.1);
                        v.push((
                            snap_ino(id, fs::filesystem::ROOT_INO),
                            FileType::Directory,
                            short.as_bytes().to_vec(),
                        ));
                    }
                    fixed(v, reply)
                }
            },
            Ok(Node::Snap(f, os, obj)) => list_dir(&f, obj, offset, |i| snap_ino(os, i), reply),
        }
    }

    fn entry(&self, r: fs::Result<Attr>, reply: ReplyEntry) {
        match r {
            Ok(a) => reply.entry(&ttl(), &fuse_attr(&a), Generation(a.generation)),
            Err(e) => reply.error(errno(e)),
        }
    }

    /// unlink and rmdir: nothing under `.shoal` can be removed.
    fn remove(&self, req: &Request, parent: INodeNo, name: &OsStr, dir: bool, reply: ReplyEmpty) {
        if let Some(e) = refuse(parent, name) {
            return reply.error(e);
        }
        let (ino, name, cred) = (parent.0, name.as_bytes(), cred(req, false));
        if let Err(e) = self.clear_delegations_of_name(ino, name) {
            return reply.error(e);
        }
        let r = if dir {
            self.fs.rmdir(ino, name, &cred)
        } else {
            self.fs.unlink(ino, name, &cred)
        };
        done(self.fs.settle(r), reply)
    }

    /// Creates `name` in `parent` with the caller's mode less its umask; nothing can be
    /// created under `.shoal`.
    #[allow(clippy::too_many_arguments)]
    fn make_node(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: Kind,
        mode: u32,
        umask: u32,
        rdev: u64,
    ) -> fs::Result<Attr> {
        if refuse(parent, name).is_some() {
            return Err(FsError::ReadOnly);
        }
        let perm = mode & 0o7777 & !umask;
        self.fs.settle(self.fs.create(
            parent.0,
            name.as_bytes(),
            kind,
            perm,
            rdev,
            &cred(req, false),
        ))
    }
}

impl fuser::Filesystem for ShoalFuse {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let root_ctl = parent.0 == fs::filesystem::ROOT_INO && name.as_bytes() == CTL_NAME;
        if special(parent) || root_ctl {
            return match self.special_lookup(parent.0, name.as_bytes()) {
                Ok((a, generation)) => reply.entry(&ttl(), &a, Generation(generation)),
                Err(e) => reply.error(e),
            };
        }
        let mut r = self.fs.lookup(parent.0, name.as_bytes());
        if let Ok(a) = &r {
            match self.clear_delegations(a.ino, LocalAccess::Read) {
                Ok(true) => r = self.fs.lookup(parent.0, name.as_bytes()),
                Ok(false) => {}
                Err(e) => return reply.error(e),
            }
        }
        match r {
            // Node id 0 is a negative entry: the kernel remembers the name is absent.
            Err(FsError::NotFound(_)) => reply.entry(&ttl(), &negative_entry(), Generation(0)),
            r => self.entry(r, reply),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if special(ino) {
            let r = match self.node(ino.0) {
                Ok(Node::Snap(f, os, obj)) => f
                    .getattr(obj)
                    .map(|a| Self::snap_attr(os, &a))
                    .map_err(errno),
                Ok(_) => self.ctl_attr(ino.0),
                Err(e) => Err(e),
            };
            return match r {
                Ok(a) => reply.attr(&ttl(), &a),
                Err(e) => reply.error(e),
            };
        }
        if let Err(e) = self.clear_delegations(ino.0, LocalAccess::Read) {
            return reply.error(e);
        }
        attr(self.fs.getattr(ino.0), reply)
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if special(ino) {
            return reply.error(Errno::EROFS);
        }
        if let Err(e) = self.clear_delegations(ino.0, LocalAccess::Change) {
            return reply.error(e);
        }
        let t = |x: Option<TimeOrNow>| {
            x.map(|v| match v {
                TimeOrNow::Now => Timespec::now(),
                TimeOrNow::SpecificTime(s) => from_system(s),
            })
        };
        let set = SetAttr {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: t(atime),
            mtime: t(mtime),
            ctime: ctime.map(from_system),
        };
        attr(
            self.fs.settle(self.fs.setattr(
                ino.0,
                &set,
                &cred(req, gid.is_some() || mode.is_some()),
            )),
            reply,
        )
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        if special(ino) {
            return match self.node(ino.0) {
                Ok(Node::Snap(f, _, obj)) => data(f.readlink(obj), reply),
                Ok(_) => reply.error(Errno::EINVAL),
                Err(e) => reply.error(e),
            };
        }
        data(self.fs.readlink(ino.0), reply)
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let Some(kind) = Kind::from_mode(mode) else {
            return reply.error(Errno::EINVAL);
        };
        if kind == Kind::Dir || kind == Kind::Symlink {
            return reply.error(Errno::EINVAL);
        }
        let r = self.make_node(req, parent, name, kind, mode, umask, rdev as u64);
        self.entry(r, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.make_node(req, parent, name, Kind::Dir, mode, umask, 0);
        self.entry(r, reply);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(req, parent, name, false, reply)
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(req, parent, name, true, reply)
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        if let Some(e) = refuse(parent, link_name) {
            return reply.error(e);
        }
        self.entry(
            self.fs.settle(self.fs.symlink(
                parent.0,
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
                &cred(req, false),
            )),
            reply,
        );
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if let Some(e) = refuse(parent, name).or_else(|| refuse(newparent, newname)) {
            return reply.error(e);
        }
        let bits = flags.bits();
        if bits & !libc::RENAME_NOREPLACE != 0 {
            return reply.error(Errno::EINVAL); // RENAME_EXCHANGE and WHITEOUT: not supported
        }
        let noreplace = bits & libc::RENAME_NOREPLACE != 0;
        if let Err(e) = self
            .clear_delegations_of_name(parent.0, name.as_bytes())
            .and_then(|()| self.clear_delegations_of_name(newparent.0, newname.as_bytes()))
        {
            return reply.error(e);
        }
        done(
            self.fs.settle(self.fs.rename(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                noreplace,
                &cred(req, false),
            )),
            reply,
        )
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        if let Some(e) = refuse(newparent, newname).or(special(ino).then_some(Errno::EROFS)) {
            return reply.error(e);
        }
        if let Err(e) = self.clear_delegations(ino.0, LocalAccess::Change) {
            return reply.error(e);
        }
        self.entry(
            self.fs.settle(
                self.fs
                    .link(ino.0, newparent.0, newname.as_bytes(), &cred(req, false)),
            ),
            reply,
        );
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if special(ino) {
            if flags.0 & libc::O_ACCMODE != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
                return reply.error(Errno::EROFS);
            }
            return match self.node(ino.0) {
                Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
                Err(e) => reply.error(e),
            };
        }
        let access = if flags.0 & libc::O_ACCMODE != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0
        {
            LocalAccess::Change
        } else {
            LocalAccess::Read
        };
        if let Err(e) = self.clear_delegations(ino.0, access) {
            return reply.error(e);
        }
        match self.fs.getattr(ino.0) {
            Ok(_) => {
                self.fs.opened(ino.0);
                reply.opened(FileHandle(0), FopenFlags::FOPEN_NOFLUSH);
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if special(ino) {
            return match self.node(ino.0) {
                Ok(Node::Snap(f, _, obj)) => data(f.read(obj, offset, size as usize), reply),
                Ok(_) => reply.error(Errno::EISDIR),
                Err(e) => reply.error(e),
            };
        }
        if let Err(e) = self.clear_delegations(ino.0, LocalAccess::Read) {
            return reply.error(e);
        }
        data(self.fs.read(ino.0, offset, size as usize), reply)
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if special(ino) {
            return reply.error(Errno::EROFS);
        }
        // A delegation may have come since the open: NFS does not see local opens.
        if let Err(e) = self.clear_delegations(ino.0, LocalAccess::Change) {
            return reply.error(e);
        }
        // sync=always is the filesystem's own; O_SYNC and O_DSYNC are this open's.
        let r = self.fs.write(ino.0, offset, data).and_then(|n| {
            if flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0 {
                self.fs.fsync(ino.0)?;
            }
            Ok(n)
        });
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(e)),
        }
    }

    /// Nothing to do: writes are in the open txg when they return, and durability is
    /// fsync's. Live files are opened with FOPEN_NOFLUSH so close does not come here.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if special(ino) {
            return reply.ok();
        }
        done(self.fs.released(ino.0), reply)
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        done(self.fs.fsync(ino.0), reply)
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        if special(ino) {
            return self.special_readdir(ino.0, offset, reply);
        }
        list_dir(&self.fs, ino.0, offset, |i| i, reply)
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        done(self.fs.fsync(ino.0), reply)
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.fs.statfs() {
            Ok(s) => {
                let bs = s.block_size as u64;
                reply.statfs(
                    s.total_bytes / bs,
                    s.free_bytes / bs,
                    s.avail_bytes / bs,
                    s.files,
                    s.free_files,
                    s.block_size,
                    s.name_max,
                    s.block_size,
                )
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if special(ino) {
            return reply.error(Errno::EROFS);
        }
        if let Err(e) = self.clear_delegations(ino.0, LocalAccess::Change) {
            return reply.error(e);
        }
        let create = flags & libc::XATTR_CREATE != 0;
        let replace = flags & libc::XATTR_REPLACE != 0;
        done(
            self.fs.settle(
                self.fs
                    .setxattr(ino.0, name.as_bytes(), Some(value), create, replace),
            ),
            reply,
        )
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let r = if special(ino) {
            match self.node(ino.0) {
                Ok(Node::Snap(f, _, obj)) => f.getxattr(obj, name.as_bytes()),
                Ok(_) => Err(FsError::NoAttr),
                Err(e) => return reply.error(e),
            }
        } else {
            self.fs.getxattr(ino.0, name.as_bytes())
        };
        match r {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(Errno::ERANGE),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = if special(ino) {
            match self.node(ino.0) {
                Ok(Node::Snap(f, _, obj)) => f.listxattr(obj),
                Ok(_) => Ok(Vec::new()),
                Err(e) => return reply.error(e),
            }
        } else {
            self.fs.listxattr(ino.0)
        };
        match r {
            Ok(names) => {
                let mut buf = Vec::new();
                for n in names {
                    buf.extend_from_slice(&n);
                    buf.push(0);
                }
                if size == 0 {
                    reply.size(buf.len() as u32)
                } else if buf.len() <= size as usize {
                    reply.data(&buf)
                } else {
                    reply.error(Errno::ERANGE)
                }
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if special(ino) {
            return reply.error(Errno::EROFS);
        }
        if let Err(e) = self.clear_delegations(ino.0, LocalAccess::Change) {
            return reply.error(e);
        }
        done(
            self.fs
                .settle(self.fs.setxattr(ino.0, name.as_bytes(), None, false, false)),
            reply,
        )
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.make_node(req, parent, name, Kind::File, mode, umask, 0) {
            Ok(a) => {
                self.fs.opened(a.ino);
                reply.created(
                    &ttl(),
                    &fuse_attr(&a),
                    Generation(a.generation),
                    FileHandle(0),
                    FopenFlags::FOPEN_NOFLUSH,
                )
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if special(ino) {
            return reply.error(Errno::EROFS);
        }
        if let Err(e) = self.clear_delegations(ino.0, LocalAccess::Change) {
            return reply.error(e);
        }
        let r = if mode == libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE {
            self.fs.settle(self.fs.punch(ino.0, offset, length))
        } else if mode == 0 {
            // Copy-on-write cannot reserve blocks ahead; the size grows as asked.
            match self.fs.getattr(ino.0) {
                Ok(a) if offset.saturating_add(length) > a.size => self
                    .fs
                    .setattr(
                        ino.0,
                        &SetAttr {
                            size: Some(offset + length),
                            ..Default::default()
                        },
                        &cred(req, false),
                    )
                    .map(|_| ()),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            }
        } else {
            return reply.error(Errno::EOPNOTSUPP);
        };
        done(r, reply)
    }
}

/// Mount options as `shoal mount -o` takes them: (read-only, allow other users).
/// Refuses options a shoal mount does not know, naming the known ones.
pub fn check_options(options: &[String]) -> Result<()> {
    parse_options(options).map(|_| ())
}

fn parse_options(options: &[String]) -> Result<(bool, bool)> {
    let mut ro = false;
    let mut allow_other = false;
    for o in options.iter().flat_map(|o| o.split(',')) {
        match o {
            "ro" => ro = true,
            "rw" => ro = false,
            "allow_other" => allow_other = true,
            "" => {}
            other => bail!("unknown mount option '{other}' (known: ro, rw, allow_other)"),
        }
    }
    Ok((ro, allow_other))
}

/// A FUSE session of `dataset` (of `datasets`) on `mountpoint`, mounted, not yet run;
/// its access waits for `delegations`, if given.
pub fn session(
    datasets: Arc<fs::Datasets>,
    dataset: &str,
    mountpoint: &Path,
    options: &[String],
    delegations: Option<Arc<dyn Delegations>>,
) -> Result<fuser::Session<ShoalFuse>> {
    let (ro, allow_other) = parse_options(options)?;
    if !mountpoint.is_dir() {
        bail!("mount point {} is not a directory", mountpoint.display());
    }
    let filesystem = datasets
        .open(dataset)
        .with_context(|| format!("opening {dataset}"))?;
    let mut mount_options = vec![
        MountOption::FSName(format!("shoal:{dataset}")),
        // As a kernel option, so the mount shows as type fuse.shoal and mount(8) never
        // hands a remount of it to a generic mount.fuse helper.
        MountOption::CUSTOM("subtype=shoal".into()),
        MountOption::DefaultPermissions,
    ];
    if ro || filesystem.props().readonly {
        mount_options.push(MountOption::RO);
    }
    let mut config = Config::default();
    config.mount_options = mount_options;
    config.acl = if allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(4);
    fuser::Session::new(
        ShoalFuse {
            fs: filesystem,
            delegations,
            datasets,
            dataset: dataset.to_string(),
            snapshots: Default::default(),
        },
        mountpoint,
        &config,
    )
    .with_context(|| format!("mounting on {}", mountpoint.display()))
}
