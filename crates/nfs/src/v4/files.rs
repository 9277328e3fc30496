//! The NFSv4 operations on files and directories: file handles (PUTFH to SECINFO),
//! attributes (GETATTR, SETATTR, VERIFY), the namespace (LOOKUP, CREATE, REMOVE,
//! RENAME, LINK, READDIR, READLINK), opens (OPEN, OPEN_DOWNGRADE, CLOSE), I/O (READ,
//! WRITE, COMMIT and 4.2's SEEK, DEALLOCATE, COPY) and byte-range locks (LOCK, LOCKT,
//! LOCKU, TEST_STATEID, FREE_STATEID).
//!
//! Every file handle is resolved by `NfsService::target`, the same check NFSv3 uses
//! (MAC, share, export rules for this client, generation), and permissions are checked
//! with the squashed credentials as for NFSv3. Pseudo directories answer reads and
//! refuse changes with ROFS. Durability is NFSv3's: a WRITE that is not UNSTABLE, and
//! every COMMIT, returns after the intent log has the data.

use super::attrs::{self, change_of, Bitmap, Obj, Settable};
use super::compound::{decode_stateid, encode_stateid, Ctx, OpFail, OpOut};
use super::pseudo::{pseudo_handle, pseudo_obj, Child, Fh};
use super::state::{range_end, FileKey, StateRef, Stateid, SHARE_READ, SHARE_WRITE};
use super::{Nfs4Error, OpResult, FHSIZE4};
use crate::service::{
    access_bits, may, probe_update, NfsService, Target, ACCESS_DELETE, ACCESS_EXECUTE,
    ACCESS_EXTEND, ACCESS_LOOKUP, ACCESS_MODIFY, ACCESS_READ, MAY_EXEC, MAY_READ, MAY_WRITE, RTMAX,
    WTMAX,
};
use crate::xdr::{Decoder, Encoder};
use fs::{Attr, Cred, Kind, SetAttr, Timespec};

const NAME_MAX: usize = crate::proto::NAME_MAX;
const AUTH_SYS: u32 = 1;
const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 4;
const OPEN4_RESULT_PRESERVE_UNLINKED: u32 = 8;
const UNSTABLE4: u32 = 0;
/// The most one COPY moves.
const COPY_MAX_BYTES: u64 = 64 << 20;
/// READDIR cookies of shared datasets nested in a share's root start here.
const NESTED_SHARE_COOKIE: u64 = 1 << 63;
const FILE_SYNC4: u32 = 2;

/// A name from the wire (component4): UTF-8, not empty, no slash, not "." or "..".
fn component<'a>(d: &mut Decoder<'a>) -> Result<&'a [u8], OpFail> {
    let name = d.opaque(crate::proto::PATH_MAX)?;
    check_name(name)?;
    Ok(name)
}

fn check_name(name: &[u8]) -> OpResult<()> {
    if name.is_empty() {
        return Err(Nfs4Error::Inval);
    }
    if name.len() > NAME_MAX {
        return Err(Nfs4Error::NameTooLong);
    }
    if std::str::from_utf8(name).is_err() {
        return Err(Nfs4Error::Inval);
    }
    if name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(Nfs4Error::BadName);
    }
    Ok(())
}

fn change_info(e: &mut Encoder, before: &Attr, after: Option<&Attr>) {
    let b = change_of(before.ctime);
    // Not atomic: before and after are read apart from the change, so another change
    // may fall between them and the client must not trust them to be the only one.
    e.bool(false)
        .u64(b)
        .u64(after.map_or(b, |a| change_of(a.ctime)));
}

fn open_file_key(t: &Target) -> FileKey {
    (t.fsid, t.ino)
}

impl NfsService {
    // ---- file handles ----

    /// The file the current handle names (not a pseudo directory: `pseudo` answers
    /// for those).
    fn cur_file(&self, ctx: &Ctx<'_, '_>, pseudo: Nfs4Error) -> Result<Target, OpFail> {
        match ctx.cur()? {
            Fh::Pseudo(_) => Err(pseudo.into()),
            Fh::File(h) => Ok(self.target(ctx.call, h)?),
        }
    }

    fn saved_file(&self, ctx: &Ctx<'_, '_>, pseudo: Nfs4Error) -> Result<Target, OpFail> {
        match ctx.saved.as_ref().ok_or(Nfs4Error::NoFileHandle)? {
            Fh::Pseudo(_) => Err(pseudo.into()),
            Fh::File(h) => Ok(self.target(ctx.call, h)?),
        }
    }

    pub(crate) fn op_putfh(&self, ctx: &mut Ctx<'_, '_>, d: &mut Decoder<'_>) -> OpOut {
        let fh = d.opaque(FHSIZE4)?;
        ctx.cur_stateid = None;
        if let Some(p) = self.pseudo_path_of(ctx.call, fh) {
            ctx.cur = Some(Fh::Pseudo(p));
            return Ok(());
        }
        // Only the shape is checked here; the MAC, the share and the generation are
        // checked by the operation that uses the handle (`target`), once per use.
        if fh.len() != crate::handle::HANDLE_LEN || fh[0] != crate::handle::HANDLE_VERSION {
            return Err(Nfs4Error::BadHandle.into());
        }
        ctx.cur = Some(Fh::File(fh.to_vec()));
        Ok(())
    }

    pub(crate) fn op_getfh(&self, ctx: &mut Ctx<'_, '_>, e: &mut Encoder) -> OpOut {
        match ctx.cur()? {
            Fh::Pseudo(p) => {
                e.opaque(&pseudo_handle(p));
            }
            Fh::File(h) => {
                // Resolving it checks the export rules and that the file still exists.
                self.target(ctx.call, h)?;
                e.opaque(h);
            }
        }
        Ok(())
    }

    fn enter(&self, ctx: &mut Ctx<'_, '_>, child: Child) -> OpOut {
        ctx.cur = Some(match child {
            Child::Pseudo(p) => Fh::Pseudo(p),
            Child::Share(s) => Fh::File(self.share_root_handle(&s).ok_or(Nfs4Error::Io)?),
        });
        ctx.cur_stateid = None;
        Ok(())
    }

    pub(crate) fn op_lookup(&self, ctx: &mut Ctx<'_, '_>, d: &mut Decoder<'_>) -> OpOut {
        let name = component(d)?;
        self.lookup_name(ctx, name)
    }

    fn lookup_name(&self, ctx: &mut Ctx<'_, '_>, name: &[u8]) -> OpOut {
        let name_str = std::str::from_utf8(name).expect("checked by component");
        match ctx.cur()?.clone() {
            Fh::Pseudo(p) => {
                let child = self
                    .pseudo_child(ctx.call, &p, name_str)
                    .ok_or(Nfs4Error::NoEnt)?;
                self.enter(ctx, child)
            }
            Fh::File(h) => {
                let t = self.target(ctx.call, &h)?;
                match t.attr.kind {
                    Kind::Dir => {}
                    Kind::Symlink => return Err(Nfs4Error::Symlink.into()),
                    _ => return Err(Nfs4Error::NotDir.into()),
                }
                if !may(&t.attr, &t.access.cred, MAY_EXEC) {
                    return Err(Nfs4Error::Access.into());
                }
                if t.ino == fs::filesystem::ROOT_INO {
                    // A nested shared dataset covers a name in its parent's root.
                    if let Some(c) = self.pseudo_child(ctx.call, &t.share.dataset, name_str) {
                        return self.enter(ctx, c);
                    }
                }
                let a = t.share.fs.lookup(t.ino, name)?;
                ctx.cur = Some(Fh::File(self.handle_for(&t.share, &a)));
                ctx.cur_stateid = None;
                Ok(())
            }
        }
    }

    pub(crate) fn op_lookupp(&self, ctx: &mut Ctx<'_, '_>) -> OpOut {
        match ctx.cur()?.clone() {
            Fh::Pseudo(p) => {
                let parent = self.pseudo_parent(ctx.call, &p).ok_or(Nfs4Error::NoEnt)?;
                self.enter(ctx, parent)
            }
            Fh::File(h) => {
                let t = self.target(ctx.call, &h)?;
                if t.attr.kind != Kind::Dir {
                    return Err(Nfs4Error::NotDir.into());
                }
                if t.ino == fs::filesystem::ROOT_INO {
                    let parent = self
                        .pseudo_parent(ctx.call, &t.share.dataset)
                        .ok_or(Nfs4Error::NoEnt)?;
                    return self.enter(ctx, parent);
                }
                let a = t.share.fs.lookup(t.ino, b"..")?;
                ctx.cur = Some(Fh::File(self.handle_for(&t.share, &a)));
                ctx.cur_stateid = None;
                Ok(())
            }
        }
    }

    pub(crate) fn op_secinfo(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
        named: bool,
    ) -> OpOut {
        if named {
            let name = component(d)?;
            // The name must exist: SECINFO answers for the object it leads to.
            let saved = ctx.cur.clone();
            self.lookup_name(ctx, name)?;
            ctx.cur = saved;
        } else {
            let style = d.u32()?;
            if style > 1 {
                return Err(Nfs4Error::Inval.into());
            }
            ctx.cur()?;
        }
        // Only AUTH_SYS is spoken; the current handle is consumed (RFC 8881 2.6.3.1.1.8).
        e.u32(1).u32(AUTH_SYS);
        ctx.cur = None;
        Ok(())
    }

    // ---- attributes ----

    fn obj_of(&self, t: &Target, a: &Attr, statfs: bool) -> Obj {
        let is_root = a.ino == fs::filesystem::ROOT_INO;
        let rdev = if matches!(a.kind, Kind::CharDev | Kind::BlockDev) {
            (libc::major(a.rdev), libc::minor(a.rdev))
        } else {
            (0, 0)
        };
        Obj {
            kind: a.kind,
            change: change_of(a.ctime),
            size: a.size,
            fsid: (t.fsid, 0),
            fileid: a.ino,
            mounted_on_fileid: if is_root {
                super::pseudo::pseudo_fileid(&t.share.dataset)
            } else {
                a.ino
            },
            perm: a.perm,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev,
            used: a.used_bytes,
            atime: a.atime,
            mtime: a.mtime,
            ctime: a.ctime,
            crtime: a.crtime,
            fh: self.handle_for(&t.share, a),
            statfs: if statfs {
                t.share.fs.statfs().ok()
            } else {
                None
            },
            named_attrs: false,
            lease_seconds: self.v4.lease_seconds(),
            names: self.v4.names.read().unwrap().clone(),
        }
    }

    fn cur_obj(&self, ctx: &Ctx<'_, '_>, mask: &Bitmap) -> Result<Obj, OpFail> {
        Ok(match ctx.cur()? {
            Fh::Pseudo(p) => pseudo_obj(p, self.v4.boot_time, self.v4.lease_seconds()),
            Fh::File(h) => {
                let t = self.target(ctx.call, h)?;
                self.obj_of(&t, &t.attr, attrs::needs_statfs(mask))
            }
        })
    }

    pub(crate) fn op_getattr(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let mask = Bitmap::decode(d)?;
        attrs::check_readable(&mask)?;
        let o = self.cur_obj(ctx, &mask)?;
        attrs::encode_fattr(e, &o, &mask);
        Ok(())
    }

    pub(crate) fn op_verify(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        want_same: bool,
    ) -> OpOut {
        let mask = Bitmap::decode(d)?;
        let vals = d.opaque(1 << 16)?;
        if !mask.minus(&attrs::SUPPORTED).is_empty() {
            return Err(Nfs4Error::AttrNotSupp.into());
        }
        if mask.has(attrs::RDATTR_ERROR)
            || mask.has(attrs::TIME_ACCESS_SET)
            || mask.has(attrs::TIME_MODIFY_SET)
        {
            return Err(Nfs4Error::Inval.into());
        }
        let o = self.cur_obj(ctx, &mask)?;
        let mut mine = Encoder::new();
        attrs::encode_fattr(&mut mine, &o, &mask);
        let mut theirs = Encoder::new();
        mask.encode(&mut theirs);
        theirs.opaque(vals);
        let same = mine.buf == theirs.buf;
        match (want_same, same) {
            (true, true) | (false, false) => Ok(()),
            (true, false) => Err(Nfs4Error::NotSame.into()),
            (false, true) => Err(Nfs4Error::Same.into()),
        }
    }

    /// Applies settable attributes as the caller (the owner rules are the file
    /// system's; the rest are checked here as for NFSv3).
    fn apply_setattr(&self, t: &Target, s: &Settable) -> OpResult<Attr> {
        let cred = &t.access.cred;
        let owner = cred.uid == 0 || cred.uid == t.attr.uid;
        if s.size.is_some() {
            if t.attr.kind == Kind::Dir {
                return Err(Nfs4Error::IsDir);
            }
            if t.attr.kind != Kind::File {
                return Err(Nfs4Error::Inval);
            }
            if !owner && !may(&t.attr, cred, MAY_WRITE) {
                return Err(Nfs4Error::Access);
            }
        }
        for time in [s.atime, s.mtime].into_iter().flatten() {
            let allowed = match time {
                attrs::SetTime4::Client(_) => owner,
                attrs::SetTime4::Server => owner || may(&t.attr, cred, MAY_WRITE),
            };
            if !allowed {
                return Err(Nfs4Error::Perm);
            }
        }
        let set = s.to_setattr();
        Ok(t.share.fs.settle(t.share.fs.setattr(t.ino, &set, cred))?)
    }

    pub(crate) fn op_setattr(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let stateid = decode_stateid(d)?;
        let fail = |s: Nfs4Error| OpFail {
            status: s,
            body: vec![0, 0, 0, 0],
        };
        let s = attrs::decode_settable(d).map_err(fail)?;
        let t = self
            .cur_file(ctx, Nfs4Error::RoFs)
            .map_err(|f| fail(f.status))?;
        if t.access.read_only || t.share.fs.props().readonly {
            return Err(fail(Nfs4Error::RoFs));
        }
        if s.size.is_some() {
            self.check_io_stateid(ctx, stateid, &t, true)
                .map_err(|f| fail(f.status))?;
        }
        self.clear_for_change(open_file_key(&t), ctx.client)
            .map_err(fail)?;
        self.apply_setattr(&t, &s).map_err(fail)?;
        s.given.encode(e);
        Ok(())
    }

    pub(crate) fn op_access(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let want = d.u32()?;
        let all = ACCESS_READ
            | ACCESS_LOOKUP
            | ACCESS_MODIFY
            | ACCESS_EXTEND
            | ACCESS_DELETE
            | ACCESS_EXECUTE;
        let got = match ctx.cur()? {
            Fh::Pseudo(_) => ACCESS_READ | ACCESS_LOOKUP,
            Fh::File(h) => access_bits(&self.target(ctx.call, h)?),
        };
        e.u32(want & all).u32(got & want);
        Ok(())
    }

    // ---- the namespace ----

    /// A change to the entries of the current directory: a writable export, a
    /// directory, and write and search permission.
    fn dir_for_change(&self, ctx: &Ctx<'_, '_>) -> Result<Target, OpFail> {
        let t = self.cur_file(ctx, Nfs4Error::RoFs)?;
        if t.access.read_only {
            return Err(Nfs4Error::RoFs.into());
        }
        if t.attr.kind != Kind::Dir {
            return Err(Nfs4Error::NotDir.into());
        }
        if !may(&t.attr, &t.access.cred, MAY_WRITE | MAY_EXEC) {
            return Err(Nfs4Error::Access.into());
        }
        Ok(t)
    }

    pub(crate) fn op_create(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        enum What<'a> {
            Link(&'a [u8]),
            Node(Kind, u64),
        }
        let ty = d.u32()?;
        let what = match ty {
            5 => What::Link(d.opaque(crate::proto::PATH_MAX)?),
            3 | 4 => {
                let major = d.u32()?;
                let minor = d.u32()?;
                let k = if ty == 3 {
                    Kind::BlockDev
                } else {
                    Kind::CharDev
                };
                What::Node(k, libc::makedev(major, minor))
            }
            2 => What::Node(Kind::Dir, 0),
            6 => What::Node(Kind::Socket, 0),
            7 => What::Node(Kind::Fifo, 0),
            1 => return Err(Nfs4Error::BadType.into()),
            _ => return Err(Nfs4Error::BadXdr.into()),
        };
        let name = component(d)?;
        let s = attrs::decode_settable(d)?;
        let t = self.dir_for_change(ctx)?;
        let fs = &t.share.fs;
        let cred = &t.access.cred;
        let made = match what {
            What::Link(target) => fs.symlink(t.ino, name, target, cred)?,
            What::Node(kind, rdev) => {
                let default = if kind == Kind::Dir { 0o755 } else { 0o644 };
                fs.create(t.ino, name, kind, s.mode.unwrap_or(default), rdev, cred)?
            }
        };
        let rest = Settable {
            mode: None,
            size: None,
            ..s.clone()
        };
        if rest.uid.is_some() || rest.gid.is_some() || rest.atime.is_some() || rest.mtime.is_some()
        {
            fs.setattr(made.ino, &rest.to_setattr(), cred)?;
        }
        fs.settle(Ok(()))?;
        let after = fs.getattr(t.ino).ok();
        change_info(e, &t.attr, after.as_ref());
        let mut set = s.given;
        set.0[0] &= !(1 << attrs::SIZE);
        set.encode(e);
        ctx.cur = Some(Fh::File(self.handle_for(&t.share, &made)));
        ctx.cur_stateid = None;
        Ok(())
    }

    pub(crate) fn op_remove(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let name = component(d)?;
        let t = self.dir_for_change(ctx)?;
        self.refuse_in_grace()?;
        let fs = &t.share.fs;
        let victim = fs.lookup(t.ino, name)?;
        self.clear_for_change((t.fsid, victim.ino), ctx.client)?;
        let r = if victim.kind == Kind::Dir {
            fs.rmdir(t.ino, name, &t.access.cred)
        } else {
            fs.unlink(t.ino, name, &t.access.cred)
        };
        fs.settle(r)?;
        let after = fs.getattr(t.ino).ok();
        change_info(e, &t.attr, after.as_ref());
        Ok(())
    }

    pub(crate) fn op_rename(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let from_name = component(d)?;
        let to_name = component(d)?;
        let from = self.saved_file(ctx, Nfs4Error::RoFs)?;
        let to = self.dir_for_change(ctx)?;
        self.refuse_in_grace()?;
        if !std::sync::Arc::ptr_eq(&from.share, &to.share) {
            return Err(Nfs4Error::XDev.into());
        }
        if from.attr.kind != Kind::Dir {
            return Err(Nfs4Error::NotDir.into());
        }
        if !may(&from.attr, &from.access.cred, MAY_WRITE | MAY_EXEC) {
            return Err(Nfs4Error::Access.into());
        }
        let fs = &from.share.fs;
        for (dir, name) in [(from.ino, from_name), (to.ino, to_name)] {
            if let Ok(a) = fs.lookup(dir, name) {
                self.clear_for_change((from.fsid, a.ino), ctx.client)?;
            }
        }
        fs.settle(fs.rename(
            from.ino,
            from_name,
            to.ino,
            to_name,
            false,
            &from.access.cred,
        ))?;
        let fa = fs.getattr(from.ino).ok();
        let ta = fs.getattr(to.ino).ok();
        change_info(e, &from.attr, fa.as_ref());
        change_info(e, &to.attr, ta.as_ref());
        Ok(())
    }

    pub(crate) fn op_link(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let name = component(d)?;
        let file = self.saved_file(ctx, Nfs4Error::IsDir)?;
        let dir = self.dir_for_change(ctx)?;
        if !std::sync::Arc::ptr_eq(&file.share, &dir.share) {
            return Err(Nfs4Error::XDev.into());
        }
        if file.attr.kind == Kind::Dir {
            return Err(Nfs4Error::IsDir.into());
        }
        self.clear_for_change(open_file_key(&file), ctx.client)?;
        let fs = &dir.share.fs;
        fs.settle(fs.link(file.ino, dir.ino, name, &dir.access.cred))?;
        let after = fs.getattr(dir.ino).ok();
        change_info(e, &dir.attr, after.as_ref());
        Ok(())
    }

    pub(crate) fn op_readlink(&self, ctx: &mut Ctx<'_, '_>, e: &mut Encoder) -> OpOut {
        let t = self.cur_file(ctx, Nfs4Error::Inval)?;
        if t.attr.kind != Kind::Symlink {
            return Err(Nfs4Error::Inval.into());
        }
        e.opaque(&t.share.fs.readlink(t.ino)?);
        Ok(())
    }

    pub(crate) fn op_readdir(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let cookie = d.u64()?;
        let _verifier = d.fixed(8)?;
        let _dircount = d.u32()?;
        let maxcount = d.u32()?;
        let mask = Bitmap::decode(d)?;
        attrs::check_readable(&mask)?;
        // Cookies 1 and 2 are reserved in NFSv4 (no "." and ".." entries).
        if cookie == 1 || cookie == 2 {
            return Err(Nfs4Error::BadCookie.into());
        }
        // The reply's fixed parts (verifier, end marker, eof) and the results
        // before it take about 200 bytes.
        let budget = (maxcount as usize)
            .clamp(256, RTMAX as usize)
            .saturating_sub(200);
        let mut body = Encoder::new();
        let mut count = 0usize;
        let mut eof;
        let mut entry = |body: &mut Encoder, cookie: u64, name: &[u8], o: &Obj| -> bool {
            let mut one = Encoder::new();
            one.bool(true).u64(cookie).opaque(name);
            attrs::encode_fattr(&mut one, o, &mask);
            if body.len() + one.len() > budget {
                return false;
            }
            body.buf.extend_from_slice(&one.buf);
            count += 1;
            true
        };
        match ctx.cur()?.clone() {
            Fh::Pseudo(p) => {
                let list = self.pseudo_list(ctx.call, &p);
                let start = if cookie == 0 {
                    0
                } else {
                    (cookie - 2) as usize
                };
                eof = true;
                for (i, (name, child)) in list.iter().enumerate().skip(start) {
                    let o = match child {
                        Child::Pseudo(cp) => {
                            pseudo_obj(cp, self.v4.boot_time, self.v4.lease_seconds())
                        }
                        Child::Share(s) => {
                            let Some(h) = self.share_root_handle(s) else {
                                continue;
                            };
                            let t = self.target(ctx.call, &h)?;
                            self.obj_of(&t, &t.attr, attrs::needs_statfs(&mask))
                        }
                    };
                    if !entry(&mut body, i as u64 + 3, name.as_bytes(), &o) {
                        eof = false;
                        break;
                    }
                }
            }
            Fh::File(h) => {
                let t = self.target(ctx.call, &h)?;
                if t.attr.kind != Kind::Dir {
                    return Err(Nfs4Error::NotDir.into());
                }
                if !may(&t.attr, &t.access.cred, MAY_READ) {
                    return Err(Nfs4Error::Access.into());
                }
                let statfs = attrs::needs_statfs(&mask);
                let mut at = cookie.max(2);
                eof = at >= NESTED_SHARE_COOKIE;
                'outer: while !eof {
                    let batch = t.share.fs.readdir(t.ino, at, 256)?;
                    if batch.is_empty() {
                        eof = true;
                        break;
                    }
                    for ent in batch {
                        at = ent.cookie;
                        if ent.name == b"." || ent.name == b".." {
                            continue;
                        }
                        let Ok(a) = t.share.fs.getattr(ent.ino) else {
                            continue;
                        };
                        let o = self.obj_of(&t, &a, statfs);
                        if !entry(&mut body, ent.cookie, &ent.name, &o) {
                            break 'outer;
                        }
                    }
                }
                if eof && t.ino == fs::filesystem::ROOT_INO {
                    // Shared datasets nested below this one show in its root, as
                    // mount points do, after its own entries (cookies above any a
                    // directory gives: its keys stay below 2^62).
                    let skip = cookie.saturating_sub(NESTED_SHARE_COOKIE) as usize;
                    let nested = self.pseudo_list(ctx.call, &t.share.dataset);
                    for (i, (name, child)) in nested.iter().enumerate().skip(skip) {
                        if t.share.fs.lookup(t.ino, name.as_bytes()).is_ok() {
                            continue; // a real entry of that name: LOOKUP crosses it
                        }
                        let o = match child {
                            Child::Pseudo(cp) => {
                                pseudo_obj(cp, self.v4.boot_time, self.v4.lease_seconds())
                            }
                            Child::Share(s) => {
                                let Some(h) = self.share_root_handle(s) else {
                                    continue;
                                };
                                let c = self.target(ctx.call, &h)?;
                                self.obj_of(&c, &c.attr, statfs)
                            }
                        };
                        let at = NESTED_SHARE_COOKIE + i as u64 + 1;
                        if !entry(&mut body, at, name.as_bytes(), &o) {
                            eof = false;
                            break;
                        }
                    }
                }
            }
        }
        if count == 0 && !eof {
            return Err(Nfs4Error::TooSmall.into());
        }
        e.fixed(&[0u8; 8]);
        e.buf.extend_from_slice(&body.buf);
        e.bool(false).bool(eof);
        Ok(())
    }

    // ---- opens ----

    pub(crate) fn op_open(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        enum Create {
            No,
            Unchecked(Settable),
            Guarded(Settable),
            Exclusive([u8; 8], Settable),
        }
        let _seqid = d.u32()?;
        let share_access = d.u32()?;
        let access = share_access & 0xff;
        let deny = d.u32()?;
        let _owner_clientid = d.u64()?;
        let owner = d.opaque(super::OPAQUE_LIMIT)?.to_vec();
        let create = match d.u32()? {
            0 => Create::No,
            1 => match d.u32()? {
                0 => Create::Unchecked(attrs::decode_settable(d)?),
                1 => Create::Guarded(attrs::decode_settable(d)?),
                2 => Create::Exclusive(d.fixed(8)?.try_into().unwrap(), Settable::default()),
                3 => {
                    let verf: [u8; 8] = d.fixed(8)?.try_into().unwrap();
                    let s = attrs::decode_settable(d)?;
                    if !s.given.minus(&attrs::EXCLCREAT).is_empty() {
                        return Err(Nfs4Error::Inval.into());
                    }
                    Create::Exclusive(verf, s)
                }
                _ => return Err(Nfs4Error::BadXdr.into()),
            },
            _ => return Err(Nfs4Error::BadXdr.into()),
        };
        let claim = d.u32()?;
        let mut deleg_claim = None;
        let name = match claim {
            0 => Some(component(d)?),
            4 => None,
            1 => {
                // CLAIM_PREVIOUS: an open held before the server restarted, on the
                // current file handle, reclaimed in the grace period.
                let _delegation_type = d.u32()?;
                None
            }
            // CLAIM_DELEGATE_CUR (a name) and CLAIM_DELEG_CUR_FH (the current
            // handle): an open the client made under its delegation, told to the
            // server before the delegation goes back.
            2 => {
                deleg_claim = Some(decode_stateid(d)?);
                Some(component(d)?)
            }
            6 => {
                deleg_claim = Some(decode_stateid(d)?);
                None
            }
            3 => {
                component(d)?;
                return Err(Nfs4Error::NotSupp.into());
            }
            5 => return Err(Nfs4Error::NotSupp.into()),
            _ => return Err(Nfs4Error::BadXdr.into()),
        };
        if !matches!(access, 1..=3) || deny > 3 {
            return Err(Nfs4Error::Inval.into());
        }
        let client = ctx.client()?;
        {
            let st = self.v4.state.lock().unwrap();
            if claim == 1 {
                st.may_reclaim(client)?;
            } else if st.in_grace() {
                return Err(Nfs4Error::Grace.into());
            }
        }
        let mut attrset = Bitmap::default();
        let mut created = false;
        let mut truncate = false;
        if let (Some(name), Some(Fh::Pseudo(p))) = (name, ctx.cur.clone()) {
            // Pseudo directories hold only the way to shares: nothing to open.
            if !matches!(create, Create::No) {
                return Err(Nfs4Error::RoFs.into());
            }
            let name = std::str::from_utf8(name).expect("checked by component");
            return Err(match self.pseudo_child(ctx.call, &p, name) {
                Some(_) => Nfs4Error::IsDir,
                None => Nfs4Error::NoEnt,
            }
            .into());
        }
        let (dir, file) = match name {
            None => {
                if !matches!(create, Create::No) {
                    return Err(Nfs4Error::Inval.into());
                }
                (None, self.cur_file(ctx, Nfs4Error::IsDir)?)
            }
            Some(name) => {
                let dir = self.cur_file(ctx, Nfs4Error::RoFs)?;
                if dir.attr.kind != Kind::Dir {
                    return Err(if dir.attr.kind == Kind::Symlink {
                        Nfs4Error::Symlink
                    } else {
                        Nfs4Error::NotDir
                    }
                    .into());
                }
                let fs = &dir.share.fs;
                let cred = &dir.access.cred;
                let a = match &create {
                    Create::No => {
                        if !may(&dir.attr, cred, MAY_EXEC) {
                            return Err(Nfs4Error::Access.into());
                        }
                        fs.lookup(dir.ino, name)?
                    }
                    Create::Unchecked(s) | Create::Guarded(s) => {
                        let guarded = matches!(create, Create::Guarded(_));
                        // An existing name is opened (UNCHECKED) or refused (GUARDED)
                        // without needing to change the directory.
                        if !may(&dir.attr, cred, MAY_EXEC) {
                            return Err(Nfs4Error::Access.into());
                        }
                        let existing = match fs.lookup(dir.ino, name) {
                            Ok(a) => Some(a),
                            Err(fs::FsError::NotFound(_)) => None,
                            Err(e) => return Err(e.into()),
                        };
                        let made = match existing {
                            Some(_) if guarded => return Err(Nfs4Error::Exist.into()),
                            Some(a) => Err(a),
                            None => {
                                let t = self.dir_for_change(ctx)?;
                                match fs.create(
                                    t.ino,
                                    name,
                                    Kind::File,
                                    s.mode.unwrap_or(0o644),
                                    0,
                                    cred,
                                ) {
                                    Ok(a) => Ok(a),
                                    Err(fs::FsError::Exists) if !guarded => {
                                        Err(fs.lookup(t.ino, name)?)
                                    }
                                    Err(e) => return Err(e.into()),
                                }
                            }
                        };
                        match made {
                            Ok(a) => {
                                created = true;
                                attrset = s.given;
                                let rest = Settable {
                                    mode: None,
                                    ..s.clone()
                                };
                                if rest != Settable::default() {
                                    fs.setattr(a.ino, &rest.to_setattr(), cred)?
                                } else {
                                    a
                                }
                            }
                            Err(a) => {
                                // Truncated only once the open is granted (below).
                                truncate = a.kind == Kind::File && s.size == Some(0);
                                a
                            }
                        }
                    }
                    Create::Exclusive(verf, s) => {
                        let t = self.dir_for_change(ctx)?;
                        let va = u32::from_be_bytes(verf[0..4].try_into().unwrap()) as i64;
                        let vm = u32::from_be_bytes(verf[4..8].try_into().unwrap()) as i64;
                        match fs.create(t.ino, name, Kind::File, s.mode.unwrap_or(0o600), 0, cred) {
                            Ok(a) => {
                                created = true;
                                attrset = s.given;
                                // The verifier lives in the times until the client
                                // sets them, so a retransmitted create finds its file.
                                // Only the verifier is written as root; what the client
                                // asks to set is set with its own credentials.
                                let stamp = SetAttr {
                                    atime: Some(Timespec { sec: va, nsec: 0 }),
                                    mtime: Some(Timespec { sec: vm, nsec: 0 }),
                                    ..SetAttr::default()
                                };
                                let a = fs.setattr(a.ino, &stamp, &Cred::root())?;
                                let asked = SetAttr {
                                    uid: s.uid,
                                    gid: s.gid,
                                    size: s.size,
                                    ..SetAttr::default()
                                };
                                if asked.uid.is_some()
                                    || asked.gid.is_some()
                                    || asked.size.is_some()
                                {
                                    fs.setattr(a.ino, &asked, cred)?
                                } else {
                                    a
                                }
                            }
                            Err(fs::FsError::Exists) => {
                                let a = fs.lookup(t.ino, name)?;
                                // A retransmission finds its own file: the verifier, and
                                // made by this caller (the times alone can be read by
                                // anyone).
                                if a.kind == Kind::File
                                    && a.atime.sec == va
                                    && a.mtime.sec == vm
                                    && a.uid == cred.uid
                                {
                                    created = true;
                                    a
                                } else {
                                    return Err(Nfs4Error::Exist.into());
                                }
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                };
                let t = self.target(ctx.call, &self.handle_for(&dir.share, &a))?;
                (Some(dir), t)
            }
        };
        match file.attr.kind {
            Kind::File => {}
            Kind::Dir => return Err(Nfs4Error::IsDir.into()),
            Kind::Symlink => return Err(Nfs4Error::Symlink.into()),
            _ => return Err(Nfs4Error::WrongType.into()),
        }
        let cred = &file.access.cred;
        if access & SHARE_WRITE != 0 && (file.access.read_only || file.share.fs.props().readonly) {
            return Err(Nfs4Error::RoFs.into());
        }
        if !created {
            let owner_ok = cred.uid == file.attr.uid;
            if access & SHARE_READ != 0 && !(may(&file.attr, cred, MAY_READ) || owner_ok) {
                return Err(Nfs4Error::Access.into());
            }
            if access & SHARE_WRITE != 0 && !(may(&file.attr, cred, MAY_WRITE) || owner_ok) {
                return Err(Nfs4Error::Access.into());
            }
        }
        if truncate && access & SHARE_WRITE == 0 {
            // A size in the create attributes of a read-only open (as Linux's server).
            return Err(Nfs4Error::Inval.into());
        }
        let key = open_file_key(&file);
        if let Some(s) = deleg_claim {
            if !matches!(create, Create::No) {
                return Err(Nfs4Error::Inval.into());
            }
            let st = self.v4.state.lock().unwrap();
            match st.lookup(&s)? {
                StateRef::Deleg(id)
                    if st.delegs[&id].client == client && st.delegs[&id].file == key => {}
                _ => return Err(Nfs4Error::BadStateId.into()),
            }
        }
        if access & SHARE_WRITE != 0 || deny & SHARE_READ != 0 {
            // Writers (and readers' deniers) wait for read delegations to come back.
            self.clear_for_change(key, Some(client))?;
        }
        let handle = self.handle_for(&file.share, &file.attr);
        let (r, released, deleg) = {
            let mut st = self.v4.state.lock().unwrap();
            let (r, released) = st.open(client, &owner, key, access, deny, &file.share.fs);
            let deleg = (r.is_ok()
                && access == SHARE_READ
                && deny == 0
                && matches!(claim, 0 | 4)
                && super::delegations::wants_delegation(share_access))
            .then(|| st.grant_read_deleg(client, key, &handle))
            .flatten();
            (r.map(|(id, seq)| st.stateid_of(id, seq)), released, deleg)
        };
        ctx.releases.extend(released);
        let stateid = r?;
        let mut file_attr = file.attr.clone();
        if truncate && file.attr.size != 0 {
            let trunc = SetAttr {
                size: Some(0),
                ..SetAttr::default()
            };
            match file.share.fs.setattr(file.ino, &trunc, cred) {
                Ok(a) => {
                    file_attr = a;
                    attrset.set(attrs::SIZE);
                }
                Err(err) => {
                    // Undo the open this truncation belonged to.
                    let mut st = self.v4.state.lock().unwrap();
                    // A new open (seqid 1) goes again; an upgraded one stays as it is.
                    if let (1, Ok(StateRef::Open(id))) = (stateid.seqid, st.lookup(&stateid)) {
                        if let Ok(rel) = st.close(id) {
                            ctx.releases.extend(rel);
                        }
                    }
                    return Err(err.into());
                }
            }
        }
        file.share.fs.settle(Ok(()))?;
        encode_stateid(e, &stateid);
        match &dir {
            Some(d) => {
                let after = d.share.fs.getattr(d.ino).ok();
                change_info(e, &d.attr, after.as_ref());
            }
            None => {
                e.bool(true).u64(0).u64(0);
            }
        }
        e.u32(OPEN4_RESULT_LOCKTYPE_POSIX | OPEN4_RESULT_PRESERVE_UNLINKED);
        attrset.encode(e);
        match &deleg {
            Some(d) => super::delegations::encode_read_delegation(e, d),
            None => {
                e.u32(0); // OPEN_DELEGATE_NONE
            }
        }
        ctx.cur = Some(Fh::File(self.handle_for(&file.share, &file_attr)));
        ctx.cur_stateid = Some(stateid);
        Ok(())
    }

    /// Names may not go away while clients may still reclaim opens of them (as the
    /// Linux server: REMOVE and RENAME wait for the grace period).
    fn refuse_in_grace(&self) -> OpResult<()> {
        if self.v4.state.lock().unwrap().in_grace() {
            return Err(Nfs4Error::Grace);
        }
        Ok(())
    }

    /// An open stateid of this client for the current file: its id.
    fn open_of(&self, ctx: &Ctx<'_, '_>, s: Stateid, t: &Target) -> OpResult<u64> {
        let s = ctx.stateid(s)?;
        let client = ctx.client()?;
        let st = self.v4.state.lock().unwrap();
        match st.lookup(&s)? {
            StateRef::Open(id) => {
                let o = &st.opens[&id];
                if o.client != client || o.file != open_file_key(t) {
                    return Err(Nfs4Error::BadStateId);
                }
                Ok(id)
            }
            StateRef::Lock(_) | StateRef::Deleg(_) => Err(Nfs4Error::BadStateId),
        }
    }

    pub(crate) fn op_close(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let _seqid = d.u32()?;
        let s = decode_stateid(d)?;
        let t = self.cur_file(ctx, Nfs4Error::IsDir)?;
        let id = self.open_of(ctx, s, &t)?;
        let released = self.v4.state.lock().unwrap().close(id)?;
        ctx.releases.extend(released);
        encode_stateid(e, &Stateid::INVALID);
        ctx.cur_stateid = None;
        Ok(())
    }

    pub(crate) fn op_open_downgrade(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let s = decode_stateid(d)?;
        let _seqid = d.u32()?;
        let access = d.u32()? & 0xff;
        let deny = d.u32()?;
        let t = self.cur_file(ctx, Nfs4Error::IsDir)?;
        let id = self.open_of(ctx, s, &t)?;
        let stateid = {
            let mut st = self.v4.state.lock().unwrap();
            let seq = st.downgrade(id, access, deny)?;
            st.stateid_of(id, seq)
        };
        encode_stateid(e, &stateid);
        ctx.cur_stateid = Some(stateid);
        Ok(())
    }

    /// Whether `s` allows I/O on `t` (RFC 8881 section 8.2.3): the special stateids
    /// if no open denies it, else an open or lock stateid of this client for this
    /// file whose open has the access (OPENMODE otherwise).
    fn check_io_stateid(
        &self,
        ctx: &mut Ctx<'_, '_>,
        s: Stateid,
        t: &Target,
        write: bool,
    ) -> OutOk {
        let s = ctx.stateid(s)?;
        let key = open_file_key(t);
        let mut st = self.v4.state.lock().unwrap();
        if s.is_special() {
            let (ok, released) = st.anonymous_allowed(key, write);
            drop(st);
            ctx.releases.extend(released);
            return if ok {
                Ok(())
            } else {
                Err(Nfs4Error::Locked.into())
            };
        }
        let client = ctx.client()?;
        let open = match st.lookup(&s)? {
            StateRef::Open(id) => id,
            StateRef::Lock(id) => st.lock_owners[&id].open,
            StateRef::Deleg(id) => {
                // A read delegation's stateid reads; it never writes.
                let d = &st.delegs[&id];
                if d.client != client || d.file != key {
                    return Err(Nfs4Error::BadStateId.into());
                }
                if write {
                    return Err(Nfs4Error::OpenMode.into());
                }
                return Ok(());
            }
        };
        let o = st.opens.get(&open).ok_or(Nfs4Error::BadStateId)?;
        if o.client != client || o.file != key {
            return Err(Nfs4Error::BadStateId.into());
        }
        if write && o.access & SHARE_WRITE == 0 {
            return Err(Nfs4Error::OpenMode.into());
        }
        Ok(())
    }

    // ---- I/O ----

    fn file_for_io(&self, ctx: &Ctx<'_, '_>) -> Result<Target, OpFail> {
        let t = self.cur_file(ctx, Nfs4Error::IsDir)?;
        match t.attr.kind {
            Kind::File => Ok(t),
            Kind::Dir => Err(Nfs4Error::IsDir.into()),
            Kind::Symlink => Err(Nfs4Error::Symlink.into()),
            _ => Err(Nfs4Error::Inval.into()),
        }
    }

    pub(crate) fn op_read(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let s = decode_stateid(d)?;
        let offset = d.u64()?;
        let count = d.u32()?;
        // The READ compound_cached found in memory, if this is it (same handle, range).
        let found = ctx.prefetched.take().filter(|p| {
            (p.offset, p.count) == (offset, count) && matches!(&ctx.cur, Some(Fh::File(h)) if *h == p.fh)
        });
        let (t, cached) = match found {
            Some(p) => (p.target, Some(p.data)),
            None => (self.file_for_io(ctx)?, None),
        };
        self.check_io_stateid(ctx, s, &t, false)?;
        let c = &t.access.cred;
        if !(may(&t.attr, c, MAY_READ) || c.uid == t.attr.uid || may(&t.attr, c, MAY_EXEC)) {
            return Err(Nfs4Error::Access.into());
        }
        let bytes = match cached {
            Some(data) => data,
            None => t
                .share
                .fs
                .read_parts(t.ino, offset, count.min(RTMAX) as usize)?,
        };
        let eof = offset.saturating_add(bytes.len() as u64) >= t.attr.size;
        probe_update(|p| (p.bytes, p.offset) = (bytes.len() as u32, offset));
        e.bool(eof).u32(bytes.len() as u32);
        ctx.data = Some(bytes);
        Ok(())
    }

    pub(crate) fn op_write(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let s = decode_stateid(d)?;
        let offset = d.u64()?;
        let stable = d.u32()?;
        let payload = d.opaque(WTMAX as usize)?;
        if stable > 2 {
            return Err(Nfs4Error::BadXdr.into());
        }
        let t = self.writable_file(ctx)?;
        self.check_io_stateid(ctx, s, &t, true)?;
        self.clear_for_change(open_file_key(&t), ctx.client)?;
        let n = t.share.fs.write(t.ino, offset, payload)?;
        probe_update(|p| (p.bytes, p.offset) = (payload.len() as u32, offset));
        let committed = if stable == UNSTABLE4 {
            UNSTABLE4
        } else {
            t.share.fs.fsync(t.ino)?;
            FILE_SYNC4
        };
        e.u32(n as u32).u32(committed).fixed(&self.write_verifier);
        Ok(())
    }

    fn writable_file(&self, ctx: &Ctx<'_, '_>) -> Result<Target, OpFail> {
        let t = self.file_for_io(ctx)?;
        if t.access.read_only {
            return Err(Nfs4Error::RoFs.into());
        }
        let c = &t.access.cred;
        if !(may(&t.attr, c, MAY_WRITE) || c.uid == t.attr.uid) {
            return Err(Nfs4Error::Access.into());
        }
        Ok(t)
    }

    pub(crate) fn op_commit(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let _offset = d.u64()?;
        let _count = d.u32()?;
        let t = self.file_for_io(ctx)?;
        // The log is pool-wide: one commit makes every earlier write durable.
        t.share.fs.fsync(t.ino)?;
        e.fixed(&self.write_verifier);
        Ok(())
    }

    pub(crate) fn op_seek(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let s = decode_stateid(d)?;
        let offset = d.u64()?;
        let what = d.u32()?;
        let t = self.file_for_io(ctx)?;
        self.check_io_stateid(ctx, s, &t, false)?;
        if what > 1 {
            return Err(Nfs4Error::Inval.into());
        }
        let size = t.attr.size;
        if offset >= size {
            return Err(Nfs4Error::NxIo.into());
        }
        // Holes inside a file are not reported: all of it is data, and the only hole
        // is the one at its end, as for a file system without hole tracking.
        if what == 0 {
            e.bool(false).u64(offset);
        } else {
            e.bool(true).u64(size);
        }
        Ok(())
    }

    pub(crate) fn op_deallocate(&self, ctx: &mut Ctx<'_, '_>, d: &mut Decoder<'_>) -> OpOut {
        let s = decode_stateid(d)?;
        let offset = d.u64()?;
        let length = d.u64()?;
        let t = self.writable_file(ctx)?;
        self.check_io_stateid(ctx, s, &t, true)?;
        self.clear_for_change(open_file_key(&t), ctx.client)?;
        t.share.fs.punch(t.ino, offset, length)?;
        Ok(())
    }

    pub(crate) fn op_copy(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let src_stateid = decode_stateid(d)?;
        let dst_stateid = decode_stateid(d)?;
        let src_offset = d.u64()?;
        let dst_offset = d.u64()?;
        let count = d.u64()?;
        let _consecutive = d.bool()?;
        let _synchronous = d.bool()?;
        let servers = d.u32()?;
        if servers != 0 {
            // Copies between servers are not offered.
            return Err(Nfs4Error::NotSupp.into());
        }
        let src = self.saved_file(ctx, Nfs4Error::IsDir)?;
        if src.attr.kind != Kind::File {
            return Err(Nfs4Error::WrongType.into());
        }
        let c = &src.access.cred;
        if !(may(&src.attr, c, MAY_READ) || c.uid == src.attr.uid) {
            return Err(Nfs4Error::Access.into());
        }
        // The source's stateid belongs to the saved file: check it against that one
        // with the current stateid of the saved handle.
        self.check_io_stateid(ctx, src_stateid, &src, false)?;
        let dst = self.writable_file(ctx)?;
        self.clear_for_change(open_file_key(&dst), ctx.client)?;
        self.check_io_stateid(ctx, dst_stateid, &dst, true)?;
        if src_offset > src.attr.size {
            return Err(Nfs4Error::Inval.into());
        }
        // At most COPY_MAX_BYTES a call: a short count is legal (RFC 7862 15.2.3) and
        // keeps one COPY from holding a worker for long.
        let end = if count == 0 {
            src.attr.size
        } else {
            src_offset.saturating_add(count).min(src.attr.size)
        }
        .min(src_offset.saturating_add(COPY_MAX_BYTES));
        let mut done = 0u64;
        while src_offset + done < end {
            let n = ((end - src_offset - done) as usize).min(1 << 20);
            let chunk = src.share.fs.read(src.ino, src_offset + done, n)?;
            if chunk.is_empty() {
                break;
            }
            dst.share.fs.write(dst.ino, dst_offset + done, &chunk)?;
            done += chunk.len() as u64;
        }
        // write_response4 (no callback id: the copy is done), then copy_requirements4.
        e.u32(0)
            .u64(done)
            .u32(UNSTABLE4)
            .fixed(&self.write_verifier);
        e.bool(true).bool(true);
        Ok(())
    }

    // ---- byte-range locks ----

    pub(crate) fn op_lock(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let locktype = d.u32()?;
        let reclaim = d.bool()?;
        let offset = d.u64()?;
        let length = d.u64()?;
        enum Locker {
            New { open: Stateid, owner: Vec<u8> },
            Existing(Stateid),
        }
        let locker = if d.bool()? {
            let _open_seqid = d.u32()?;
            let open = decode_stateid(d)?;
            let _lock_seqid = d.u32()?;
            let _clientid = d.u64()?;
            let owner = d.opaque(super::OPAQUE_LIMIT)?.to_vec();
            Locker::New { open, owner }
        } else {
            let s = decode_stateid(d)?;
            let _lock_seqid = d.u32()?;
            Locker::Existing(s)
        };
        if !(1..=4).contains(&locktype) {
            return Err(Nfs4Error::BadXdr.into());
        }
        check_range(offset, length)?;
        let write = locktype == 2 || locktype == 4;
        let t = self.file_for_io(ctx)?;
        let client = ctx.client()?;
        {
            let st = self.v4.state.lock().unwrap();
            if reclaim {
                st.may_reclaim(client)?;
            } else if st.in_grace() {
                return Err(Nfs4Error::Grace.into());
            }
        }
        let key = open_file_key(&t);
        // A delegation's holder may be caching locks of its own: it tells them
        // when the delegation is recalled, before anyone else's lock is decided.
        self.clear_for_change(key, Some(client))?;
        let lock_id = match locker {
            Locker::New { open, owner } => {
                let open_id = self.open_of(ctx, open, &t)?;
                self.v4
                    .state
                    .lock()
                    .unwrap()
                    .lock_owner(client, &owner, open_id)?
            }
            Locker::Existing(s) => {
                let s = ctx.stateid(s)?;
                let st = self.v4.state.lock().unwrap();
                match st.lookup(&s)? {
                    StateRef::Lock(id) => {
                        let l = &st.lock_owners[&id];
                        if l.client != client || l.file != key {
                            return Err(Nfs4Error::BadStateId.into());
                        }
                        id
                    }
                    StateRef::Open(_) | StateRef::Deleg(_) => {
                        return Err(Nfs4Error::BadStateId.into())
                    }
                }
            }
        };
        let (r, released, stateid) = {
            let mut st = self.v4.state.lock().unwrap();
            let open_access = st
                .lock_owners
                .get(&lock_id)
                .and_then(|l| st.opens.get(&l.open))
                .map_or(0, |o| o.access);
            let need = if write { SHARE_WRITE } else { SHARE_READ };
            let (r, released) = if open_access & need == 0 {
                (Err(Err(Nfs4Error::OpenMode)), Vec::new())
            } else {
                st.lock(lock_id, write, offset, range_end(offset, length))
            };
            if r.is_err() && st.lock_owners.get(&lock_id).is_some_and(|l| l.seqid == 0) {
                // A lock owner made for this LOCK and never granted anything: the
                // client never saw its stateid, so nothing else would ever free it.
                let _ = st.free_lock(lock_id);
            }
            let stateid = r.as_ref().ok().map(|seq| st.stateid_of(lock_id, *seq));
            (r, released, stateid)
        };
        ctx.releases.extend(released);
        match r {
            Ok(_) => {
                let s = stateid.expect("made with the result");
                encode_stateid(e, &s);
                ctx.cur_stateid = Some(s);
                Ok(())
            }
            Err(Ok(denied)) => Err(denied_fail(&denied)),
            Err(Err(status)) => Err(status.into()),
        }
    }

    pub(crate) fn op_lockt(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        _e: &mut Encoder,
    ) -> OpOut {
        let locktype = d.u32()?;
        let offset = d.u64()?;
        let length = d.u64()?;
        let _clientid = d.u64()?;
        let owner = d.opaque(super::OPAQUE_LIMIT)?.to_vec();
        if !(1..=4).contains(&locktype) {
            return Err(Nfs4Error::BadXdr.into());
        }
        check_range(offset, length)?;
        let t = self.file_for_io(ctx)?;
        let client = ctx.client()?;
        if self.v4.state.lock().unwrap().in_grace() {
            return Err(Nfs4Error::Grace.into());
        }
        self.clear_for_change(open_file_key(&t), Some(client))?;
        let write = locktype == 2 || locktype == 4;
        let denied = self.v4.state.lock().unwrap().test_lock(
            open_file_key(&t),
            client,
            &owner,
            write,
            offset,
            range_end(offset, length),
        );
        match denied {
            Some(d) => Err(denied_fail(&d)),
            None => Ok(()),
        }
    }

    pub(crate) fn op_locku(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let _locktype = d.u32()?;
        let _seqid = d.u32()?;
        let s = decode_stateid(d)?;
        let offset = d.u64()?;
        let length = d.u64()?;
        check_range(offset, length)?;
        let s = ctx.stateid(s)?;
        let t = self.file_for_io(ctx)?;
        let client = ctx.client()?;
        let stateid = {
            let mut st = self.v4.state.lock().unwrap();
            let id = match st.lookup(&s)? {
                StateRef::Lock(id) => id,
                StateRef::Open(_) | StateRef::Deleg(_) => return Err(Nfs4Error::BadStateId.into()),
            };
            let l = &st.lock_owners[&id];
            if l.client != client || l.file != open_file_key(&t) {
                return Err(Nfs4Error::BadStateId.into());
            }
            let seq = st.unlock(id, offset, range_end(offset, length))?;
            st.stateid_of(id, seq)
        };
        encode_stateid(e, &stateid);
        ctx.cur_stateid = Some(stateid);
        Ok(())
    }

    pub(crate) fn op_test_stateid(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let n = d.u32()?;
        if n > 1024 {
            return Err(Nfs4Error::BadXdr.into());
        }
        let mut ids = Vec::with_capacity(n as usize);
        for _ in 0..n {
            ids.push(decode_stateid(d)?);
        }
        let client = ctx.client()?;
        let st = self.v4.state.lock().unwrap();
        e.u32(n);
        for s in ids {
            let status = match st.lookup(&s) {
                Ok(StateRef::Open(id)) if st.opens[&id].client == client => 0,
                Ok(StateRef::Deleg(id)) if st.delegs[&id].client == client => 0,
                Ok(StateRef::Lock(id)) if st.lock_owners[&id].client == client => 0,
                Ok(_) => Nfs4Error::BadStateId as u32,
                Err(e) => e as u32,
            };
            e.u32(status);
        }
        Ok(())
    }

    pub(crate) fn op_free_stateid(&self, ctx: &mut Ctx<'_, '_>, d: &mut Decoder<'_>) -> OpOut {
        let s = decode_stateid(d)?;
        let client = ctx.client()?;
        let mut st = self.v4.state.lock().unwrap();
        if st.free_revoked(&s, client) {
            return Ok(());
        }
        match st.lookup(&s)? {
            StateRef::Lock(id) if st.lock_owners[&id].client == client => Ok(st.free_lock(id)?),
            StateRef::Deleg(id) if st.delegs[&id].client == client => {
                Err(Nfs4Error::LocksHeld.into())
            }
            StateRef::Open(id) if st.opens[&id].client == client => {
                Err(Nfs4Error::LocksHeld.into())
            }
            _ => Err(Nfs4Error::BadStateId.into()),
        }
    }
}

type OutOk = Result<(), OpFail>;

fn check_range(offset: u64, length: u64) -> OpResult<()> {
    if length == 0 {
        return Err(Nfs4Error::Inval);
    }
    if length != u64::MAX && offset.checked_add(length).is_none() {
        return Err(Nfs4Error::Inval);
    }
    Ok(())
}

/// LOCK4denied as the failure results of LOCK and LOCKT.
fn denied_fail(d: &super::state::Denied) -> OpFail {
    let mut e = Encoder::new();
    e.u64(d.offset)
        .u64(d.length)
        .u32(if d.write { 2 } else { 1 })
        .u64(d.client)
        .opaque(&d.owner);
    OpFail {
        status: Nfs4Error::Denied,
        body: e.buf,
    }
}
