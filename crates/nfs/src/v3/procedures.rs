//! The 22 NFSv3 procedures (RFC 1813 section 3), with the duplicate-request cache
//! for the non-idempotent ones and the analytics event of every call.

use crate::rpc::Accept;
use crate::service::*;
use crate::transport::ReadBuf;
use crate::transport::{Call, Reply};
use crate::v3::proto::*;
use crate::xdr::{Decoder, Encoder};
use analytics::{Event, NfsEvent};
use fs::{Attr, Cred, Kind, SetAttr, Timespec};
use std::sync::Arc;

impl NfsService {
    // ---- NFSv3 ----

    pub(crate) fn nfs3(&self, call: &Call<'_>) -> Reply {
        self.nfs3_answer(call, false)
            .expect("a call that may wait is always answered")
    }

    /// Answers an NFSv3 call; with `cached_only`, `None` (and nothing done or counted)
    /// when answering would wait on a device.
    pub(crate) fn nfs3_answer(&self, call: &Call<'_>, cached_only: bool) -> Option<Reply> {
        let procedure = call.header.procedure;
        if procedure > 21 {
            return Some(Reply::new(call.reply(Accept::ProcUnavail)));
        }
        let drc_key = is_non_idempotent(procedure).then(|| {
            let args = &call.record[call.header.args_at..];
            let mut h = blake3::Hasher::new();
            h.update(&(args.len() as u64).to_le_bytes());
            h.update(&args[..args.len().min(1024)]);
            DrcKey {
                client: call.peer.ip(),
                xid: call.header.xid,
                procedure,
                fingerprint: h.finalize().as_bytes()[..16].try_into().unwrap(),
            }
        });
        assert!(
            !(cached_only && drc_key.is_some()),
            "only idempotent calls are tried from cache"
        );
        if let Some(key) = &drc_key {
            if let Some(cached) = self.drc_begin(key) {
                // Still running (None): stay silent; the client will retransmit.
                return Some(cached.unwrap_or_default());
            }
        }
        PROBE.with(|p| p.set(Probe::default()));
        let (reply, status) = self.nfs3_procedure(call, procedure, cached_only)?;
        if let Some(key) = drc_key {
            self.drc_finish(key, &reply);
        }
        let probe = PROBE.with(|p| p.get());
        let op = PROCEDURE_NAMES[procedure as usize];
        if let Some(reason) = refusal_reason(&probe, status) {
            self.refused(call, op, reason, probe.fsid);
        }
        if let Some(a) = self.analytics.get() {
            let at = analytics::Ticks::now();
            a.record(Event::Nfs(NfsEvent {
                version: 3,
                minor: 0,
                op,
                client: call.peer.ip(),
                fsid: probe.fsid,
                ino: probe.ino,
                bytes: probe.bytes,
                offset: probe.offset,
                // With the 4-byte record marks.
                request_bytes: (call.record.len() + 4) as u32,
                reply_bytes: (reply.len() + 4) as u32,
                latency_ns: at.ns_since(call.received),
                at,
            }));
        }
        Some(reply)
    }

    /// Logs (within the budget) and counts a refused call.
    /// Runs one NFSv3 procedure; returns its reply and the NFS status it answered
    /// (None for NULL and for undecodable arguments).
    /// `None` only with `cached_only`, when the procedure would wait on a device.
    fn nfs3_procedure(
        &self,
        call: &Call<'_>,
        procedure: u32,
        cached_only: bool,
    ) -> Option<(Reply, Option<u32>)> {
        let mut d = call.args();
        let mut e = call.reply(Accept::Success);
        let status_at = e.buf.len();
        let mut data = None;
        let r = match procedure {
            0 => d.finish().map_err(Failure::from),
            1 => self.getattr(call, &mut d, &mut e),
            2 => self.setattr(call, &mut d, &mut e),
            3 => self.lookup(call, &mut d, &mut e),
            4 => self.access(call, &mut d, &mut e),
            5 => self.readlink(call, &mut d, &mut e),
            6 => self.read(call, &mut d, &mut e, &mut data, cached_only),
            7 => self.write(call, &mut d, &mut e),
            8..=11 => self.create_kind(call, procedure, &mut d, &mut e),
            12 | 13 => self.remove(call, procedure == 13, &mut d, &mut e),
            14 => self.rename(call, &mut d, &mut e),
            15 => self.link(call, &mut d, &mut e),
            16 => self.readdir(call, false, &mut d, &mut e),
            17 => self.readdir(call, true, &mut d, &mut e),
            18 => self.fsstat(call, &mut d, &mut e),
            19 => self.fsinfo(call, &mut d, &mut e),
            20 => self.pathconf(call, &mut d, &mut e),
            21 => self.commit(call, &mut d, &mut e),
            _ => unreachable!("checked by the caller"),
        };
        if matches!(r, Err(Failure::NotCached)) {
            assert!(cached_only, "only a cached-only call can be sent on");
            return None;
        }
        let code = (procedure != 0 && r.is_ok())
            .then(|| e.buf.get(status_at..status_at + 4))
            .flatten()
            .map(|b| u32::from_be_bytes(b.try_into().unwrap()));
        if tracing::enabled!(tracing::Level::DEBUG) {
            let status = code.map(|code| {
                Status::from_code(code).map_or_else(|| code.to_string(), |s| format!("{s:?}"))
            });
            let uid = match &call.header.credential {
                crate::rpc::Credential::Sys(a) => Some(a.uid),
                _ => None,
            };
            tracing::debug!(
                peer = %call.peer,
                xid = call.header.xid,
                procedure = PROCEDURE_NAMES[procedure as usize],
                ?uid,
                status = status.as_deref().unwrap_or(if r.is_err() { "GARBAGE_ARGS" } else { "-" }),
                "nfs call"
            );
        }
        Some(match r {
            Ok(()) => (Reply { head: e.buf, data }, code),
            Err(Failure::Garbage) => (Reply::new(call.reply(Accept::GarbageArgs)), None),
            Err(Failure::Status(_)) => unreachable!("procedures encode their own failures"),
            Err(Failure::NotCached) => unreachable!("returned above"),
        })
    }

    /// Runs a procedure body; a failure status is encoded as the status followed by
    /// what `fail` writes (the procedure's failure results).
    fn outcome(
        e: &mut Encoder,
        r: Result<(), Failure>,
        fail: impl FnOnce(&mut Encoder),
    ) -> Result<(), Failure> {
        match r {
            Ok(()) => Ok(()),
            Err(Failure::Garbage) => Err(Failure::Garbage),
            Err(Failure::NotCached) => Err(Failure::NotCached),
            Err(Failure::Status(s)) => {
                e.u32(s as u32);
                fail(e);
                Ok(())
            }
        }
    }

    fn getattr(
        &self,
        call: &Call<'_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let fh = handle_only(d)?;
        let r = (|| {
            let t = self.target(call, fh)?;
            e.u32(0);
            fattr(e, &t.attr, t.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |_| {})
    }

    fn setattr(
        &self,
        call: &Call<'_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let s = decode_sattr(d)?;
        let guard = d.optional(decode_time)?;
        d.finish()?;
        let mut before: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            before = Some((t.attr.clone(), t.fsid));
            if t.access.read_only {
                return Err(Status::RoFs.into());
            }
            self.v3_clear_delegations(&t, t.ino)?;
            if let Some(g) = guard {
                if g != t.attr.ctime {
                    return Err(Status::NotSync.into());
                }
            }
            let cred = &t.access.cred;
            let owner = cred.uid == 0 || cred.uid == t.attr.uid;
            if s.size.is_some() && !owner && !may(&t.attr, cred, MAY_WRITE) {
                return Err(Status::Acces.into());
            }
            for time in [s.atime, s.mtime].into_iter().flatten() {
                let allowed = match time {
                    SetTime::ClientTime(_) => owner,
                    SetTime::ServerTime => owner || may(&t.attr, cred, MAY_WRITE),
                };
                if !allowed {
                    return Err(Status::Perm.into());
                }
            }
            let now = Timespec::now();
            let resolve = |t: Option<SetTime>| {
                t.map(|t| match t {
                    SetTime::ServerTime => now,
                    SetTime::ClientTime(c) => c,
                })
            };
            let set = SetAttr {
                perm: s.mode,
                uid: s.uid,
                gid: s.gid,
                size: s.size,
                atime: resolve(s.atime),
                mtime: resolve(s.mtime),
                ctime: None,
            };
            let after = t
                .share
                .fs
                .settle_stable(t.share.fs.setattr(t.ino, &set, cred))?;
            e.u32(0);
            wcc_data(e, Some(&t.attr), Some(&after), t.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_wcc(e, &before))
    }

    fn lookup(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let (fh, name) = decode_diropargs(d)?;
        d.finish()?;
        let mut dir: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            dir = Some((t.attr.clone(), t.fsid));
            if t.attr.kind != Kind::Dir {
                return Err(Status::NotDir.into());
            }
            if name.len() > NAME_MAX {
                return Err(Status::NameTooLong.into());
            }
            if !may(&t.attr, &t.access.cred, MAY_EXEC) {
                return Err(Status::Acces.into());
            }
            let a = t.share.fs.lookup(t.ino, name)?;
            e.u32(0).opaque(&self.file_handle(&t.share, &a));
            post_op_attr(e, Some(&a), t.fsid);
            post_op_attr(e, Some(&t.attr), t.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_attr(e, &dir))
    }

    fn access(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let want = d.u32()?;
        d.finish()?;
        self.attr_query(call, fh, e, |t, e| {
            let got = access_bits(t);
            e.u32(got & want);
            Ok(())
        })
    }

    fn readlink(
        &self,
        call: &Call<'_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let fh = handle_only(d)?;
        self.attr_query(call, fh, e, |t, e| {
            if t.attr.kind != Kind::Symlink {
                return Err(Status::Inval.into());
            }
            e.opaque(&t.share.fs.readlink(t.ino)?);
            Ok(())
        })
    }

    fn read(
        &self,
        call: &Call<'_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
        data: &mut Option<ReadBuf>,
        cached_only: bool,
    ) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let offset = d.u64()?;
        let count = d.u32()?;
        d.finish()?;
        let mut attr: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            attr = Some((t.attr.clone(), t.fsid));
            match t.attr.kind {
                Kind::File => {}
                Kind::Dir => return Err(Status::IsDir.into()),
                _ => return Err(Status::Inval.into()),
            }
            let c = &t.access.cred;
            // As knfsd: the owner may read what it may write, and execute-only
            // files may be read (the client enforces execute-only itself).
            if !(may(&t.attr, c, MAY_READ) || c.uid == t.attr.uid || may(&t.attr, c, MAY_EXEC)) {
                return Err(Status::Acces.into());
            }
            if !self.break_write_delegations((t.fsid, t.ino), None) {
                // An NFSv4 client's write delegation may hold newer data.
                return Err(Status::Jukebox.into());
            }
            let count = count.min(RTMAX) as usize;
            let bytes = if cached_only {
                let cached = t.share.fs.read_parts_cached(t.ino, offset, count)?;
                cached.ok_or(Failure::NotCached)?
            } else {
                t.share.fs.read_parts(t.ino, offset, count)?
            };
            probe_update(|p| (p.bytes, p.offset) = (bytes.len() as u32, offset));
            let eof = offset.saturating_add(bytes.len() as u64) >= t.attr.size;
            e.u32(0);
            post_op_attr(e, Some(&t.attr), t.fsid);
            e.u32(bytes.len() as u32).bool(eof).u32(bytes.len() as u32);
            *data = Some(bytes);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_attr(e, &attr))
    }

    fn write(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let offset = d.u64()?;
        let count = d.u32()?;
        let stable = d.u32()?;
        let payload = d.opaque(WTMAX as usize)?;
        d.finish()?;
        if stable > 2 || count as usize != payload.len() {
            return Err(Failure::Garbage);
        }
        let mut before: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            before = Some((t.attr.clone(), t.fsid));
            if t.access.read_only {
                return Err(Status::RoFs.into());
            }
            match t.attr.kind {
                Kind::File => {}
                Kind::Dir => return Err(Status::IsDir.into()),
                _ => return Err(Status::Inval.into()),
            }
            let c = &t.access.cred;
            if !(may(&t.attr, c, MAY_WRITE) || c.uid == t.attr.uid) {
                return Err(Status::Acces.into());
            }
            self.v3_clear_delegations(&t, t.ino)?;
            let n = t.share.fs.write(t.ino, offset, payload)?;
            probe_update(|p| (p.bytes, p.offset) = (payload.len() as u32, offset));
            let committed = if stable == 0 {
                0
            } else {
                t.share.fs.fsync(t.ino)?;
                2 // FILE_SYNC: the intent log holds data and attributes
            };
            let after = t.share.fs.getattr(t.ino).ok();
            e.u32(0);
            wcc_data(e, Some(&t.attr), after.as_ref(), t.fsid);
            e.u32(n as u32).u32(committed).fixed(&self.write_verifier);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_wcc(e, &before))
    }

    /// CREATE (8), MKDIR (9), SYMLINK (10), MKNOD (11).
    fn create_kind(
        &self,
        call: &Call<'_>,
        procedure: u32,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let (fh, name) = decode_diropargs(d)?;
        enum How<'a> {
            File {
                guarded: bool,
                attrs: Sattr,
            },
            Exclusive([u8; 8]),
            Dir(Sattr),
            Symlink(Sattr, &'a [u8]),
            Node(Kind, Sattr, u64),
            /// MKNOD of a regular file, directory or symlink.
            BadType,
        }
        let how = match procedure {
            8 => match d.u32()? {
                0 => How::File {
                    guarded: false,
                    attrs: decode_sattr(d)?,
                },
                1 => How::File {
                    guarded: true,
                    attrs: decode_sattr(d)?,
                },
                2 => How::Exclusive(d.fixed(8)?.try_into().unwrap()),
                _ => return Err(Failure::Garbage),
            },
            9 => How::Dir(decode_sattr(d)?),
            10 => {
                let s = decode_sattr(d)?;
                How::Symlink(s, d.opaque(PATH_MAX)?)
            }
            _ => {
                let ft = d.u32()?;
                match kind_of(ft) {
                    Some(k @ (Kind::CharDev | Kind::BlockDev)) => {
                        let s = decode_sattr(d)?;
                        let major = d.u32()?;
                        let minor = d.u32()?;
                        How::Node(k, s, libc::makedev(major, minor))
                    }
                    Some(k @ (Kind::Socket | Kind::Fifo)) => How::Node(k, decode_sattr(d)?, 0),
                    Some(_) => How::BadType,
                    None => return Err(Failure::Garbage),
                }
            }
        };
        d.finish()?;
        let mut dir_before: Option<(Attr, u64)> = None;
        let mut dir_after: Option<Attr> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            dir_before = Some((t.attr.clone(), t.fsid));
            self.check_dir_change(&t, name)?;
            let fs = &t.share.fs;
            let cred = &t.access.cred;
            let (made, attrs) = match how {
                How::File { guarded, attrs } => {
                    let mode = attrs.mode.unwrap_or(0o644);
                    match fs.create(t.ino, name, Kind::File, mode, 0, cred) {
                        Ok(a) => (a, Some(attrs)),
                        Err(fs::FsError::Exists) if !guarded => {
                            // UNCHECKED: an existing file is opened (and truncated if
                            // a size is given).
                            let a = fs.lookup(t.ino, name)?;
                            if a.kind != Kind::File {
                                return Err(Status::Exist.into());
                            }
                            if attrs.size.is_some() {
                                self.v3_clear_delegations(&t, a.ino)?;
                            }
                            let only_size = Sattr {
                                size: attrs.size,
                                ..Sattr::default()
                            };
                            (a, Some(only_size))
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                How::Exclusive(verf) => {
                    // The verifier is kept in the new file's atime and mtime seconds
                    // until the client's SETATTR replaces them, so a retransmitted
                    // create finds its own file.
                    let va = u32::from_be_bytes(verf[0..4].try_into().unwrap()) as i64;
                    let vm = u32::from_be_bytes(verf[4..8].try_into().unwrap()) as i64;
                    match fs.create(t.ino, name, Kind::File, 0o600, 0, cred) {
                        Ok(a) => {
                            let stamp = SetAttr {
                                atime: Some(Timespec { sec: va, nsec: 0 }),
                                mtime: Some(Timespec { sec: vm, nsec: 0 }),
                                ..SetAttr::default()
                            };
                            (fs.setattr(a.ino, &stamp, &Cred::root())?, None)
                        }
                        Err(fs::FsError::Exists) => {
                            let a = fs.lookup(t.ino, name)?;
                            if a.kind == Kind::File && a.atime.sec == va && a.mtime.sec == vm {
                                (a, None)
                            } else {
                                return Err(Status::Exist.into());
                            }
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                How::Dir(attrs) => {
                    let mode = attrs.mode.unwrap_or(0o755);
                    (
                        fs.create(t.ino, name, Kind::Dir, mode, 0, cred)?,
                        Some(attrs),
                    )
                }
                How::Symlink(attrs, target) => {
                    if target.len() > PATH_MAX {
                        return Err(Status::NameTooLong.into());
                    }
                    (
                        fs.symlink(t.ino, name, target, cred)?,
                        Some(Sattr {
                            mode: None,
                            ..attrs
                        }),
                    )
                }
                How::BadType => return Err(Status::BadType.into()),
                How::Node(kind, attrs, rdev) => {
                    let mode = attrs.mode.unwrap_or(0o644);
                    (fs.create(t.ino, name, kind, mode, rdev, cred)?, Some(attrs))
                }
            };
            // Attributes beyond the mode given at creation (owner, size, times).
            let mut made = made;
            if let Some(s) = attrs {
                let set = SetAttr {
                    perm: None,
                    uid: s.uid,
                    gid: s.gid,
                    size: s.size.filter(|_| made.kind == Kind::File),
                    atime: s.atime.map(|t| match t {
                        SetTime::ServerTime => Timespec::now(),
                        SetTime::ClientTime(c) => c,
                    }),
                    mtime: s.mtime.map(|t| match t {
                        SetTime::ServerTime => Timespec::now(),
                        SetTime::ClientTime(c) => c,
                    }),
                    ctime: None,
                };
                if set.uid.is_some()
                    || set.gid.is_some()
                    || set.size.is_some()
                    || set.atime.is_some()
                    || set.mtime.is_some()
                {
                    made = fs.setattr(made.ino, &set, cred)?;
                }
            }
            fs.settle_stable(Ok(()))?;
            dir_after = fs.getattr(t.ino).ok();
            e.u32(0);
            e.bool(true).opaque(&self.file_handle(&t.share, &made));
            post_op_attr(e, Some(&made), t.fsid);
            wcc_data(e, Some(&t.attr), dir_after.as_ref(), t.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |e| match &dir_before {
            Some((a, fsid)) => wcc_data(e, Some(a), dir_after.as_ref().or(Some(a)), *fsid),
            None => wcc_data(e, None, None, 0),
        })
    }

    /// NFSv4 delegations of object `ino` (of `t`'s share) are recalled before an
    /// NFSv3 change to it: JUKEBOX (try again) until they are back.
    fn v3_clear_delegations(&self, t: &Target, ino: u64) -> Result<(), Failure> {
        if self.break_delegations((t.fsid, ino), None) {
            Ok(())
        } else {
            Err(Status::Jukebox.into())
        }
    }

    /// A change of directory `t`'s entries: writable export, a directory, a legal
    /// name, and write and search permission.
    fn check_dir_change(&self, t: &Target, name: &[u8]) -> Result<(), Failure> {
        if t.access.read_only {
            return Err(Status::RoFs.into());
        }
        if t.attr.kind != Kind::Dir {
            return Err(Status::NotDir.into());
        }
        if name.len() > NAME_MAX {
            return Err(Status::NameTooLong.into());
        }
        if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
            return Err(Status::Inval.into());
        }
        if !may(&t.attr, &t.access.cred, MAY_WRITE | MAY_EXEC) {
            return Err(Status::Acces.into());
        }
        Ok(())
    }

    fn remove(
        &self,
        call: &Call<'_>,
        dir: bool,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let (fh, name) = decode_diropargs(d)?;
        d.finish()?;
        let mut before: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            before = Some((t.attr.clone(), t.fsid));
            if name == b"." || name == b".." {
                return Err(if dir { Status::Inval } else { Status::Acces }.into());
            }
            self.check_dir_change(&t, name)?;
            let fs = &t.share.fs;
            if !self.break_delegations_of_names(fs, t.fsid, &[(t.ino, name)], None) {
                return Err(Status::Jukebox.into());
            }
            let r = if dir {
                fs.rmdir(t.ino, name, &t.access.cred)
            } else {
                fs.unlink(t.ino, name, &t.access.cred)
            };
            fs.settle_stable(r)?;
            let after = fs.getattr(t.ino).ok();
            e.u32(0);
            wcc_data(e, Some(&t.attr), after.as_ref(), t.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_wcc(e, &before))
    }

    fn rename(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let (from_fh, from_name) = decode_diropargs(d)?;
        let (to_fh, to_name) = decode_diropargs(d)?;
        d.finish()?;
        let mut befores: [Option<(Attr, u64)>; 2] = [None, None];
        let r = (|| {
            let from = self.target(call, from_fh)?;
            befores[0] = Some((from.attr.clone(), from.fsid));
            let to = self.target(call, to_fh)?;
            befores[1] = Some((to.attr.clone(), to.fsid));
            if !Arc::ptr_eq(&from.share, &to.share) {
                return Err(Status::XDev.into());
            }
            for n in [from_name, to_name] {
                if n == b"." || n == b".." {
                    return Err(Status::Inval.into());
                }
            }
            self.check_dir_change(&from, from_name)?;
            self.check_dir_change(&to, to_name)?;
            let fs = &from.share.fs;
            let names = [(from.ino, from_name), (to.ino, to_name)];
            if !self.break_delegations_of_names(fs, from.fsid, &names, None) {
                return Err(Status::Jukebox.into());
            }
            fs.settle_stable(fs.rename(
                from.ino,
                from_name,
                to.ino,
                to_name,
                false,
                &from.access.cred,
            ))?;
            let fa = fs.getattr(from.ino).ok();
            let ta = fs.getattr(to.ino).ok();
            e.u32(0);
            wcc_data(e, Some(&from.attr), fa.as_ref(), from.fsid);
            wcc_data(e, Some(&to.attr), ta.as_ref(), to.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |e| {
            for b in &befores {
                fail_wcc(e, b);
            }
        })
    }

    fn link(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let (dir_fh, name) = decode_diropargs(d)?;
        d.finish()?;
        let mut file_attr: Option<(Attr, u64)> = None;
        let mut dir_before: Option<Attr> = None;
        let r = (|| {
            let file = self.target(call, fh)?;
            file_attr = Some((file.attr.clone(), file.fsid));
            let dir = self.target(call, dir_fh)?;
            dir_before = Some(dir.attr.clone());
            if !Arc::ptr_eq(&file.share, &dir.share) {
                return Err(Status::XDev.into());
            }
            if file.attr.kind == Kind::Dir {
                return Err(Status::IsDir.into());
            }
            self.check_dir_change(&dir, name)?;
            self.v3_clear_delegations(&file, file.ino)?;
            let fs = &file.share.fs;
            let a = fs.settle_stable(fs.link(file.ino, dir.ino, name, &dir.access.cred))?;
            let da = fs.getattr(dir.ino).ok();
            e.u32(0);
            post_op_attr(e, Some(&a), file.fsid);
            wcc_data(e, Some(&dir.attr), da.as_ref(), dir.fsid);
            Ok(())
        })();
        Self::outcome(e, r, |e| {
            fail_attr(e, &file_attr);
            let fsid = file_attr.as_ref().map_or(0, |x| x.1);
            wcc_data(e, dir_before.as_ref(), dir_before.as_ref(), fsid);
        })
    }

    fn readdir(
        &self,
        call: &Call<'_>,
        plus: bool,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let cookie = d.u64()?;
        let _verifier = d.fixed(8)?;
        let (dircount, maxcount) = if plus {
            let dc = d.u32()?;
            (dc, d.u32()?)
        } else {
            let c = d.u32()?;
            (c, c)
        };
        d.finish()?;
        let mut dir: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            dir = Some((t.attr.clone(), t.fsid));
            if t.attr.kind != Kind::Dir {
                return Err(Status::NotDir.into());
            }
            if !may(&t.attr, &t.access.cred, MAY_READ) {
                return Err(Status::Acces.into());
            }
            let fsid = t.fsid;
            // Reply budget: the header and trailer take about 120 bytes.
            let max_reply = (maxcount as usize).clamp(512, RTMAX as usize);
            let max_dir = (dircount as usize).clamp(512, RTMAX as usize);
            let mut body = Encoder::new();
            let mut dir_bytes = 0usize;
            let mut at = cookie;
            let mut eof = false;
            let mut count = 0usize;
            'outer: loop {
                let batch = t.share.fs.readdir(t.ino, at, 256)?;
                if batch.is_empty() {
                    eof = true;
                    break;
                }
                for entry in batch {
                    let name_len = entry.name.len().div_ceil(4) * 4;
                    let entry_dir = 8 + 4 + name_len + 8;
                    let mut one = Encoder::new();
                    one.bool(true)
                        .u64(entry.ino)
                        .opaque(&entry.name)
                        .u64(entry.cookie);
                    if plus {
                        match t.share.fs.getattr(entry.ino) {
                            Ok(a) => {
                                post_op_attr(&mut one, Some(&a), fsid);
                                one.bool(true).opaque(&self.file_handle(&t.share, &a));
                            }
                            Err(_) => {
                                post_op_attr(&mut one, None, fsid);
                                one.bool(false);
                            }
                        }
                    }
                    if 120 + body.len() + one.len() > max_reply
                        || (plus && dir_bytes + entry_dir > max_dir)
                    {
                        break 'outer;
                    }
                    dir_bytes += entry_dir;
                    body.buf.extend_from_slice(&one.buf);
                    at = entry.cookie;
                    count += 1;
                }
            }
            if count == 0 && !eof {
                return Err(Status::TooSmall.into());
            }
            e.u32(0);
            post_op_attr(e, Some(&t.attr), fsid);
            e.fixed(&[0u8; 8]); // cookie verifier: cookies stay valid, so it never changes
            e.buf.extend_from_slice(&body.buf);
            e.bool(false).bool(eof);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_attr(e, &dir))
    }

    /// The shape of ACCESS, READLINK, FSSTAT, FSINFO and PATHCONF: a handle in;
    /// status, the object's attributes and `body`'s results out (on failure, no
    /// attributes).
    fn attr_query(
        &self,
        call: &Call<'_>,
        fh: &[u8],
        e: &mut Encoder,
        body: impl FnOnce(&Target, &mut Encoder) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        let r = (|| {
            let t = self.target(call, fh)?;
            let mut rest = Encoder::new();
            body(&t, &mut rest)?;
            e.u32(0);
            post_op_attr(e, Some(&t.attr), t.fsid);
            e.buf.extend_from_slice(&rest.buf);
            Ok(())
        })();
        Self::outcome(e, r, |e| post_op_attr(e, None, 0))
    }

    fn fsstat(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let fh = handle_only(d)?;
        self.attr_query(call, fh, e, |t, e| {
            let s = t.share.fs.statfs()?;
            e.u64(s.total_bytes)
                .u64(s.free_bytes)
                .u64(s.avail_bytes)
                .u64(s.files)
                .u64(s.free_files)
                .u64(s.free_files)
                .u32(0); // invarsec
            Ok(())
        })
    }

    fn fsinfo(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let fh = handle_only(d)?;
        self.attr_query(call, fh, e, |_, e| {
            e.u32(RTMAX).u32(PREFERRED).u32(4096);
            e.u32(WTMAX).u32(PREFERRED).u32(4096);
            e.u32(PREFERRED); // dtpref
            e.u64(fs::filesystem::MAX_FILE_SIZE);
            e.u32(0).u32(1); // time_delta: nanoseconds
            const FSF_LINK: u32 = 0x1;
            const FSF_SYMLINK: u32 = 0x2;
            const FSF_HOMOGENEOUS: u32 = 0x8;
            const FSF_CANSETTIME: u32 = 0x10;
            e.u32(FSF_LINK | FSF_SYMLINK | FSF_HOMOGENEOUS | FSF_CANSETTIME);
            Ok(())
        })
    }

    fn pathconf(
        &self,
        call: &Call<'_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), Failure> {
        let fh = handle_only(d)?;
        self.attr_query(call, fh, e, |_, e| {
            e.u32(fs::filesystem::MAX_LINKS)
                .u32(NAME_MAX as u32)
                .bool(true) // no_trunc
                .bool(true) // chown_restricted
                .bool(false) // case_insensitive
                .bool(true); // case_preserving
            Ok(())
        })
    }

    fn commit(&self, call: &Call<'_>, d: &mut Decoder<'_>, e: &mut Encoder) -> Result<(), Failure> {
        let fh = d.opaque(FHSIZE3)?;
        let _offset = d.u64()?;
        let _count = d.u32()?;
        d.finish()?;
        let mut before: Option<(Attr, u64)> = None;
        let r = (|| {
            let t = self.target(call, fh)?;
            before = Some((t.attr.clone(), t.fsid));
            if t.attr.kind != Kind::File {
                return Err(Status::Inval.into());
            }
            // The log is pool-wide: one commit makes every earlier write durable.
            t.share.fs.fsync(t.ino)?;
            e.u32(0);
            wcc_data(e, Some(&t.attr), Some(&t.attr), t.fsid);
            e.fixed(&self.write_verifier);
            Ok(())
        })();
        Self::outcome(e, r, |e| fail_wcc(e, &before))
    }
}
