//! NFSv4 attribute operations: GETATTR, VERIFY, NVERIFY, SETATTR and ACCESS, over
//! the encodings of `attrs.rs`.
//!
//! Every file handle is resolved by `NfsService::target`, the same check NFSv3 uses
//! (MAC, share, export rules for this client, generation), and permissions are checked
//! with the squashed credentials as for NFSv3.

use super::attrs::{self, change_of, Bitmap, Obj, Settable};
use super::compound::{decode_stateid, Ctx, OpFail, OpOut};
use super::handles::open_file_key;
use super::pseudo::{pseudo_obj, Fh};
use super::{Nfs4Error, OpResult};
use crate::service::{
    access_bits, may, NfsService, Target, ACCESS_DELETE, ACCESS_EXECUTE, ACCESS_EXTEND,
    ACCESS_LOOKUP, ACCESS_MODIFY, ACCESS_READ, MAY_WRITE,
};
use crate::xdr::{Decoder, Encoder};
use fs::{Attr, Kind};

impl NfsService {
    // ---- attributes ----

    pub(crate) fn obj_of(&self, t: &Target, a: &Attr, statfs: bool) -> Obj {
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

    pub(crate) fn cur_obj(&self, ctx: &Ctx<'_, '_>, mask: &Bitmap) -> Result<Obj, OpFail> {
        Ok(match ctx.cur()? {
            Fh::Pseudo(p) => pseudo_obj(p, self.v4.boot_time, self.v4.lease_seconds()),
            Fh::File(h) => {
                let t = self.target(ctx.call, h)?;
                if (mask.has(attrs::SIZE) || mask.has(attrs::CHANGE)) && self.delegations_exist() {
                    // Another client's write delegation may hold a newer size and
                    // change: it comes back first (RFC 8881 10.4.3, by recall).
                    self.clear_for_read(open_file_key(&t), ctx.client)?;
                }
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
        attrs::encode_fattr(e, &o, &mask, ctx.minor);
        Ok(())
    }

    pub(crate) fn op_verify(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        want_same: bool,
    ) -> OpOut {
        let (mask, unknown) = Bitmap::decode_noting_unknown(d)?;
        let vals = d.opaque(1 << 16)?;
        if unknown || !mask.minus(&attrs::supported(ctx.minor)).is_empty() {
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
        attrs::encode_fattr(&mut mine, &o, &mask, ctx.minor);
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
    pub(crate) fn apply_setattr(&self, t: &Target, s: &Settable) -> OpResult<Attr> {
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
        Ok(t.share
            .fs
            .settle_stable(t.share.fs.setattr(t.ino, &set, cred))?)
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
}
