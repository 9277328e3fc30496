//! NFSv4 namespace operations: CREATE, REMOVE, RENAME, LINK, READLINK and READDIR
//! (with the shared datasets nested in a share's root listed after its entries).
//!
//! Every file handle is resolved by `NfsService::target`, the same check NFSv3 uses
//! (MAC, share, export rules for this client, generation), and permissions are checked
//! with the squashed credentials as for NFSv3.

use super::attrs::{self, change_of, Bitmap, Obj, Settable};
use super::compound::{Ctx, OpFail, OpOut};
use super::handles::{component, open_file_key};
use super::pseudo::{pseudo_obj, Child, Fh};
use super::Nfs4Error;
use crate::service::{may, NfsService, Target, MAY_EXEC, MAY_READ, MAY_WRITE, RTMAX};
use crate::xdr::{Decoder, Encoder};
use fs::{Attr, Kind};

/// READDIR cookies of shared datasets nested in a share's root start here.
pub(super) const NESTED_SHARE_COOKIE: u64 = 1 << 63;

pub(super) fn change_info(e: &mut Encoder, before: &Attr, after: Option<&Attr>) {
    let b = change_of(before.ctime);
    // Not atomic: before and after are read apart from the change, so another change
    // may fall between them and the client must not trust them to be the only one.
    e.bool(false)
        .u64(b)
        .u64(after.map_or(b, |a| change_of(a.ctime)));
}

impl NfsService {
    // ---- the namespace ----

    /// A change to the entries of the current directory: a writable export, a
    /// directory, and write and search permission.
    pub(crate) fn dir_for_change(&self, ctx: &Ctx<'_, '_>) -> Result<Target, OpFail> {
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
        ctx.settle_stable(fs, Ok(()))?;
        let after = fs.getattr(t.ino).ok();
        change_info(e, &t.attr, after.as_ref());
        let mut set = s.given;
        set.0[0] &= !(1 << attrs::SIZE);
        set.encode(e);
        ctx.cur = Some(Fh::File(self.file_handle(&t.share, &made)));
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
        // A delegation of the file goes back before its name does.
        if !self.break_delegations_of_names(fs, t.fsid, &[(t.ino, name)], ctx.client) {
            return Err(Nfs4Error::Delay.into());
        }
        ctx.settle_stable(fs, fs.remove_any(t.ino, name, &t.access.cred))?;
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
        let names = [(from.ino, from_name), (to.ino, to_name)];
        if !self.break_delegations_of_names(fs, from.fsid, &names, ctx.client) {
            return Err(Nfs4Error::Delay.into());
        }
        ctx.settle_stable(
            fs,
            fs.rename(
                from.ino,
                from_name,
                to.ino,
                to_name,
                false,
                &from.access.cred,
            ),
        )?;
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
        ctx.settle_stable(fs, fs.link(file.ino, dir.ino, name, &dir.access.cred))?;
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
        let minor = ctx.minor;
        // Cookies 1 and 2 are reserved in NFSv4 (no "." and ".." entries).
        if cookie == 1 || cookie == 2 {
            return Err(Nfs4Error::BadCookie.into());
        }
        // maxcount bounds READDIR4resok: its fixed parts (verifier, end marker,
        // eof) take 16 bytes; one that cannot hold even those is TOOSMALL, and one
        // that cannot hold the first entry too (below). The whole reply keeps
        // about 200 bytes clear of the largest record for the results before it.
        const FIXED: usize = 16;
        if (maxcount as usize) < FIXED {
            return Err(Nfs4Error::TooSmall.into());
        }
        let budget = (maxcount as usize - FIXED).min(RTMAX as usize - 200);
        let mut body = Encoder::new();
        let mut count = 0usize;
        let mut eof;
        let mut entry = |body: &mut Encoder, cookie: u64, name: &[u8], o: &Obj| -> bool {
            let mut one = Encoder::new();
            one.bool(true).u64(cookie).opaque(name);
            attrs::encode_fattr(&mut one, o, &mask, minor);
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
}
