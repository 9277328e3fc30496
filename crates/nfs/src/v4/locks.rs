//! NFSv4 byte-range locks: LOCK, LOCKT, LOCKU, TEST_STATEID and FREE_STATEID, over
//! the lock table of `state.rs`.
//!
//! Every file handle is resolved by `NfsService::target`, the same check NFSv3 uses
//! (MAC, share, export rules for this client, generation), and permissions are checked
//! with the squashed credentials as for NFSv3.

use super::compound::{decode_stateid, encode_stateid, Ctx, OpFail, OpOut};
use super::handles::open_file_key;
use super::state::{range_end, StateRef, Stateid, SHARE_READ, SHARE_WRITE};
use super::{Nfs4Error, OpResult};
use crate::service::NfsService;
use crate::xdr::{Decoder, Encoder};

pub(super) fn check_range(offset: u64, length: u64) -> OpResult<()> {
    if length == 0 {
        return Err(Nfs4Error::Inval);
    }
    if length != u64::MAX && offset.checked_add(length).is_none() {
        return Err(Nfs4Error::Inval);
    }
    Ok(())
}

/// LOCK4denied as the failure results of LOCK and LOCKT.
pub(super) fn denied_fail(d: &super::state::Denied) -> OpFail {
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

impl NfsService {
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
        if reclaim {
            self.v4.state.lock().unwrap().may_reclaim(client)?;
        } else if self.in_grace() {
            return Err(Nfs4Error::Grace.into());
        } else {
            self.v4.state.lock().unwrap().may_lock_new(client)?;
        }
        let key = open_file_key(&t);
        // A delegation's holder may be caching locks of its own: it tells them
        // when the delegation is recalled, before anyone else's lock is decided.
        self.clear_for_change(key, Some(client))?;
        let lock_id = match locker {
            Locker::New { open, owner } => {
                let open_id = self.open_of(ctx, open, super::handles::open_file_key(&t))?;
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
        if self.in_grace() {
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
