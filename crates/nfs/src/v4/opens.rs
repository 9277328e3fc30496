//! NFSv4 opens: OPEN (every claim and create mode this server takes, share
//! reservations, read delegations granted), OPEN_DOWNGRADE and CLOSE, and the check
//! of the stateid an I/O comes with (`check_io_stateid`).
//!
//! Every file handle is resolved by `NfsService::target`, the same check NFSv3 uses
//! (MAC, share, export rules for this client, generation), and permissions are checked
//! with the squashed credentials as for NFSv3.

use super::attrs::{self, Bitmap, Settable};
use super::compound::{decode_stateid, encode_stateid, Ctx, OpOut};
use super::handles::{component, open_file_key};
use super::namespace::change_info;
use super::pseudo::Fh;
use super::state::{FileKey, StateRef, Stateid, V4State, SHARE_READ, SHARE_WRITE};
use super::{Nfs4Error, OpResult};
use crate::service::{may, NfsService, Target, MAY_EXEC, MAY_READ, MAY_WRITE};
use crate::xdr::{Decoder, Encoder};
use fs::{Cred, Kind, SetAttr, Timespec};

pub(super) const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 4;
pub(super) const OPEN4_RESULT_PRESERVE_UNLINKED: u32 = 8;

impl NfsService {
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
        let owner = d.opaque(super::OPAQUE_LIMIT)?;
        let create = match d.u32()? {
            0 => Create::No,
            1 => match d.u32()? {
                0 => Create::Unchecked(attrs::decode_settable(d)?),
                1 => Create::Guarded(attrs::decode_settable(d)?),
                2 => Create::Exclusive(d.fixed(8)?.try_into().unwrap(), Settable::default()),
                // EXCLUSIVE4_1 is 4.1's: not in 4.0's createmode4.
                3 if ctx.minor == 0 => return Err(Nfs4Error::BadXdr.into()),
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
        // The claims by file handle (4 and up) are 4.1's.
        if ctx.minor == 0 && claim > 3 {
            return Err(Nfs4Error::BadXdr.into());
        }
        let mut deleg_claim = None;
        // CLAIM_PREVIOUS: the delegation the client held before a restart, if any.
        let mut reclaimed_deleg = 0;
        let name = match claim {
            0 => Some(component(d)?),
            4 => None,
            1 => {
                // CLAIM_PREVIOUS: an open held before the server restarted, on the
                // current file handle, reclaimed in the grace period.
                reclaimed_deleg = d.u32()?;
                if reclaimed_deleg > 3 {
                    return Err(Nfs4Error::BadXdr.into());
                }
                None
            }
            // CLAIM_DELEGATE_CUR (a name) and CLAIM_DELEG_CUR_FH (the current
            // handle): an open the client made under its delegation, told to the
            // server before the delegation goes back.
            2 => {
                deleg_claim = Some(decode_stateid(d)?);
                Some(component(d)?)
            }
            5 => {
                deleg_claim = Some(decode_stateid(d)?);
                None
            }
            // CLAIM_DELEGATE_PREV and CLAIM_DELEG_PREV_FH: delegations are not kept
            // across a restart, so there is none to claim an open under.
            3 => {
                component(d)?;
                return Err(Nfs4Error::NotSupp.into());
            }
            6 => return Err(Nfs4Error::NotSupp.into()),
            _ => return Err(Nfs4Error::BadXdr.into()),
        };
        if !matches!(access, 1..=3) || deny > 3 {
            return Err(Nfs4Error::Inval.into());
        }
        let client = ctx.client()?;
        if claim == 1 {
            self.v4.state.lock().unwrap().may_reclaim(client)?;
        } else if self.in_grace() {
            return Err(Nfs4Error::Grace.into());
        } else {
            self.v4.state.lock().unwrap().may_lock_new(client)?;
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
                        // Made first when the caller may change the directory (the
                        // common case: one walk of the directory); otherwise only an
                        // existing file can be opened.
                        let writable = !dir.access.read_only
                            && !fs.props().readonly
                            && may(&dir.attr, cred, MAY_WRITE | MAY_EXEC);
                        let made = if writable {
                            let mode = s.mode.unwrap_or(0o644);
                            match fs.create(dir.ino, name, Kind::File, mode, 0, cred) {
                                Ok(a) => Ok(a),
                                Err(fs::FsError::Exists) if guarded => {
                                    return Err(Nfs4Error::Exist.into())
                                }
                                Err(fs::FsError::Exists) => Err(fs.lookup(dir.ino, name)?),
                                Err(e) => return Err(e.into()),
                            }
                        } else {
                            match fs.lookup(dir.ino, name) {
                                Ok(_) if guarded => return Err(Nfs4Error::Exist.into()),
                                Ok(a) => Err(a),
                                Err(fs::FsError::NotFound(_)) => {
                                    // What `dir_for_change` answers.
                                    return Err(if dir.access.read_only || fs.props().readonly {
                                        Nfs4Error::RoFs
                                    } else {
                                        Nfs4Error::Access
                                    }
                                    .into());
                                }
                                Err(e) => return Err(e.into()),
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
                // Found or made in `dir` just now: the same share, export rules and
                // caller, and attributes as fresh as resolving its handle would give.
                let t = Target {
                    share: dir.share.clone(),
                    ino: a.ino,
                    attr: a,
                    access: dir.access.clone(),
                    fsid: dir.fsid,
                };
                (Some(dir), t)
            }
        };
        match file.attr.kind {
            Kind::File => {}
            Kind::Dir => return Err(Nfs4Error::IsDir.into()),
            Kind::Symlink => return Err(Nfs4Error::Symlink.into()),
            // A fifo, socket or device: RFC 7530 (16.16.5) has SYMLINK for anything
            // but a directory, RFC 8881 (18.16.3) WRONG_TYPE.
            _ if ctx.minor == 0 => return Err(Nfs4Error::Symlink.into()),
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
        // Writers (and readers' deniers) wait for read delegations to come back,
        // everyone for another's write delegation.
        let writes = access & SHARE_WRITE != 0 || deny & SHARE_READ != 0;
        self.clear_for_open(key, client, owner, writes, deleg_claim.is_some())?;
        let handle = self.file_handle(&file.share, &file.attr);
        let (r, released, deleg) = {
            let mut st = self.v4.state.lock().unwrap();
            let (r, released) = st.open(client, owner, key, access, deny, &file.share.fs);
            let wants = super::delegations::wants_delegation(share_access);
            let session = ctx.session;
            // (stateid, write, handed out already recalled)
            let deleg = match (r.is_ok(), claim) {
                (false, _) => None,
                (true, 1) if matches!(reclaimed_deleg, 1 | 2) => {
                    let write = reclaimed_deleg == 2;
                    let (s, recall) = st.reclaim_deleg(client, session, owner, key, &handle, write);
                    Some((s, write, recall))
                }
                (true, 0 | 4) if wants && access & SHARE_WRITE != 0 => st
                    .grant_write_deleg(client, session, owner, key, &handle)
                    .map(|s| (s, true, false)),
                (true, 0 | 4) if wants && deny == 0 => st
                    .grant_read_deleg(client, session, key, &handle)
                    .map(|s| (s, false, false)),
                _ => None,
            };
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
        if created || attrset.has(attrs::SIZE) {
            ctx.settle_stable(&file.share.fs, Ok(()))?;
        }
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
        // PRESERVE_UNLINKED is 4.1's: a 4.0 client is not told (it silly-renames).
        e.u32(if ctx.minor == 0 {
            OPEN4_RESULT_LOCKTYPE_POSIX
        } else {
            OPEN4_RESULT_LOCKTYPE_POSIX | OPEN4_RESULT_PRESERVE_UNLINKED
        });
        attrset.encode(e);
        match &deleg {
            Some((d, false, recall)) => super::delegations::encode_read_delegation(e, d, *recall),
            Some((d, true, recall)) => super::delegations::encode_write_delegation(e, d, *recall),
            None => super::delegations::encode_no_delegation(e, share_access, ctx.minor),
        }
        // A truncation keeps the generation, so the handle is the one made above.
        debug_assert_eq!(file_attr.generation, file.attr.generation);
        ctx.cur = Some(Fh::File(handle));
        ctx.cur_stateid = Some(stateid);
        ctx.opened = Some(Target {
            attr: file_attr,
            ..file
        });
        Ok(())
    }

    /// Names may not go away while clients may still reclaim opens of them (as the
    /// Linux server: REMOVE and RENAME wait for the grace period).
    pub(crate) fn refuse_in_grace(&self) -> OpResult<()> {
        if self.in_grace() {
            return Err(Nfs4Error::Grace);
        }
        Ok(())
    }

    /// Whether the grace period is on (without the state lock once it is over).
    pub(crate) fn in_grace(&self) -> bool {
        use std::sync::atomic::Ordering;
        if self.v4.grace_over.load(Ordering::Acquire) {
            return false;
        }
        let on = self.v4.state.lock().unwrap().in_grace();
        if !on {
            self.v4.grace_over.store(true, Ordering::Release);
        }
        on
    }

    /// An open stateid of this client for the current file: its id.
    pub(crate) fn open_of(&self, ctx: &Ctx<'_, '_>, s: Stateid, file: FileKey) -> OpResult<u64> {
        open_in(&self.v4.state.lock().unwrap(), ctx, s, file)
    }

    pub(crate) fn op_close(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let _seqid = d.u32()?;
        let s = decode_stateid(d)?;
        let file = match &ctx.opened {
            Some(t) => open_file_key(t),
            None => open_file_key(&self.cur_file(ctx, Nfs4Error::IsDir)?),
        };
        let released = {
            let mut st = self.v4.state.lock().unwrap();
            let id = open_in(&st, ctx, s, file)?;
            st.close(id)?
        };
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
        let id = self.open_of(ctx, s, open_file_key(&t))?;
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
    pub(crate) fn check_io_stateid(
        &self,
        ctx: &mut Ctx<'_, '_>,
        s: Stateid,
        t: &Target,
        write: bool,
    ) -> OpOut {
        let s = ctx.stateid(s)?;
        let key = open_file_key(t);
        let mut st = self.v4.state.lock().unwrap();
        if s.is_special() {
            let (ok, released) = st.anonymous_allowed(key, write);
            // A read without open state: another client's write delegation may hold
            // data the server has not seen (writes clear their own way). Looked for
            // under the lock already held.
            let (clear, recalls) = if ok && !write && self.delegations_exist() {
                st.break_write_delegations(key, ctx.client)
            } else {
                (true, Vec::new())
            };
            drop(st);
            ctx.releases.extend(released);
            super::delegations::send_recalls(recalls);
            return match (ok, clear) {
                (false, _) => Err(Nfs4Error::Locked.into()),
                (true, false) => Err(Nfs4Error::Delay.into()),
                (true, true) => Ok(()),
            };
        }
        let client = ctx.client()?;
        let open = match st.lookup(&s)? {
            StateRef::Open(id) => id,
            StateRef::Lock(id) => st.lock_owners[&id].open,
            StateRef::Deleg(id) => {
                // A read delegation's stateid reads; a write delegation's writes too.
                let d = &st.delegs[&id];
                if d.client != client || d.file != key {
                    return Err(Nfs4Error::BadStateId.into());
                }
                if write && !d.write {
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
}

/// `NfsService::open_of` under the state lock the caller holds.
fn open_in(st: &V4State, ctx: &Ctx<'_, '_>, s: Stateid, file: FileKey) -> OpResult<u64> {
    let s = ctx.stateid(s)?;
    let client = ctx.client()?;
    match st.lookup(&s)? {
        StateRef::Open(id) => {
            let o = &st.opens[&id];
            if o.client != client || o.file != file {
                return Err(Nfs4Error::BadStateId);
            }
            Ok(id)
        }
        StateRef::Lock(_) | StateRef::Deleg(_) => Err(Nfs4Error::BadStateId),
    }
}
