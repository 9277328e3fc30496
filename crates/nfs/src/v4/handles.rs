//! NFSv4 file handle operations: PUTFH, GETFH, LOOKUP, LOOKUPP, SECINFO and
//! SECINFO_NO_NAME, and how the other operations reach the file a handle names
//! (`cur_file`, `saved_file`) and check names from the wire (`component`).
//! Pseudo directories (`pseudo.rs`) answer reads and refuse changes with ROFS.
//!
//! Every file handle is resolved by `NfsService::target`, the same check NFSv3 uses
//! (MAC, share, export rules for this client, generation), and permissions are checked
//! with the squashed credentials as for NFSv3.

use super::compound::{Ctx, OpFail, OpOut};
use super::pseudo::{pseudo_handle, Child, Fh};
use super::state::FileKey;
use super::{Nfs4Error, OpResult, FHSIZE4};
use crate::service::{may, NfsService, Target, MAY_EXEC};
use crate::xdr::{Decoder, Encoder};
use fs::Kind;

pub(super) const NAME_MAX: usize = crate::proto::NAME_MAX;
pub(super) const AUTH_SYS: u32 = 1;

/// A name from the wire (component4): UTF-8, not empty, no slash, not "." or "..".
pub(super) fn component<'a>(d: &mut Decoder<'a>) -> Result<&'a [u8], OpFail> {
    let name = d.opaque(crate::proto::PATH_MAX)?;
    check_name(name)?;
    Ok(name)
}

pub(super) fn check_name(name: &[u8]) -> OpResult<()> {
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

pub(super) fn open_file_key(t: &Target) -> FileKey {
    (t.fsid, t.ino)
}

impl NfsService {
    // ---- file handles ----

    /// The file the current handle names (not a pseudo directory: `pseudo` answers
    /// for those).
    pub(crate) fn cur_file(&self, ctx: &Ctx<'_, '_>, pseudo: Nfs4Error) -> Result<Target, OpFail> {
        match ctx.cur()? {
            Fh::Pseudo(_) => Err(pseudo.into()),
            Fh::File(h) => Ok(self.target(ctx.call, h)?),
        }
    }

    pub(crate) fn saved_file(
        &self,
        ctx: &Ctx<'_, '_>,
        pseudo: Nfs4Error,
    ) -> Result<Target, OpFail> {
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
        ctx.cur = Some(Fh::File(fh.try_into().expect("length checked above")));
        Ok(())
    }

    pub(crate) fn op_getfh(&self, ctx: &mut Ctx<'_, '_>, e: &mut Encoder) -> OpOut {
        match ctx.cur()? {
            Fh::Pseudo(p) => {
                e.opaque(&pseudo_handle(p));
            }
            Fh::File(h) => {
                // Resolving it checks the export rules and that the file still exists
                // (already done when an OPEN right before made it current).
                if ctx.opened.is_none() {
                    self.target(ctx.call, h)?;
                }
                e.opaque(h);
            }
        }
        Ok(())
    }

    pub(crate) fn enter(&self, ctx: &mut Ctx<'_, '_>, child: Child) -> OpOut {
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

    pub(crate) fn lookup_name(&self, ctx: &mut Ctx<'_, '_>, name: &[u8]) -> OpOut {
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
                ctx.cur = Some(Fh::File(self.file_handle(&t.share, &a)));
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
                // RFC 8881 18.14.3: SYMLINK from a symbolic link, NOTDIR from the rest.
                if t.attr.kind == Kind::Symlink {
                    return Err(Nfs4Error::Symlink.into());
                }
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
                ctx.cur = Some(Fh::File(self.file_handle(&t.share, &a)));
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
            if style == 1 {
                // SECINFO_STYLE4_PARENT: for the parent, which the root has not
                // (NOENT, RFC 8881 18.45.3); LOOKUPP's own errors otherwise.
                let saved = ctx.cur.clone();
                self.op_lookupp(ctx)?;
                ctx.cur = saved;
            }
        }
        // Only AUTH_SYS is spoken; the current handle is consumed (RFC 8881 2.6.3.1.1.8).
        e.u32(1).u32(AUTH_SYS);
        ctx.cur = None;
        Ok(())
    }
}
