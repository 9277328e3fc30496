//! NFSv4 I/O: READ, WRITE, COMMIT, and 4.2's SEEK, DEALLOCATE and COPY. Durability
//! is NFSv3's: a WRITE that is not UNSTABLE, and every COMMIT, returns after the
//! intent log has the data.
//!
//! Every file handle is resolved by `NfsService::target`, the same check NFSv3 uses
//! (MAC, share, export rules for this client, generation), and permissions are checked
//! with the squashed credentials as for NFSv3.

use super::compound::{decode_stateid, Ctx, OpFail, OpOut};
use super::handles::open_file_key;
use super::pseudo::Fh;
use super::Nfs4Error;
use crate::service::{
    may, probe_update, NfsService, Target, MAY_EXEC, MAY_READ, MAY_WRITE, RTMAX, WTMAX,
};
use crate::xdr::{Decoder, Encoder};
use fs::Kind;

pub(super) const UNSTABLE4: u32 = 0;
/// The most one COPY moves.
pub(super) const COPY_MAX_BYTES: u64 = 64 << 20;
pub(super) const FILE_SYNC4: u32 = 2;

impl NfsService {
    // ---- I/O ----

    pub(crate) fn file_for_io(&self, ctx: &Ctx<'_, '_>) -> Result<Target, OpFail> {
        let t = self.cur_file(ctx, Nfs4Error::IsDir)?;
        match t.attr.kind {
            Kind::File => Ok(t),
            Kind::Dir => Err(Nfs4Error::IsDir.into()),
            Kind::Symlink => Err(Nfs4Error::Symlink.into()),
            // A fifo, socket or device: RFC 7530 says INVAL, RFC 8881 WRONG_TYPE.
            _ if ctx.minor == 0 => Err(Nfs4Error::Inval.into()),
            _ => Err(Nfs4Error::WrongType.into()),
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
            (p.offset, p.count) == (offset, count)
                && matches!(&ctx.cur, Some(Fh::File(h)) if h[..] == p.fh[..])
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
            ctx.settle_writes(&t.share.fs);
            FILE_SYNC4
        };
        e.u32(n as u32).u32(committed).fixed(&self.write_verifier);
        Ok(())
    }

    pub(crate) fn writable_file(&self, ctx: &Ctx<'_, '_>) -> Result<Target, OpFail> {
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
        let offset = d.u64()?;
        let count = d.u32()?;
        let t = self.file_for_io(ctx)?;
        // A range past 2^64 is no range (RFC 8881 18.3.3).
        if offset.checked_add(count as u64).is_none() {
            return Err(Nfs4Error::Inval.into());
        }
        // The log is pool-wide: one commit makes every earlier write durable.
        ctx.settle_writes(&t.share.fs);
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
}
