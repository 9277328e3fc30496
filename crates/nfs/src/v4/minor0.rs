//! NFSv4.0 (RFC 7530) on the same port, service and state as 4.1 and 4.2: what a
//! COMPOUND of minor version 0 does differently.
//!
//! - No sessions. A client sets itself up with SETCLIENTID and SETCLIENTID_CONFIRM
//!   (RFC 7530 sections 16.33-16.34), keeps its lease with RENEW or with any
//!   operation that names its client ID or one of its stateids (implicit renewal,
//!   section 9.5), and an operation belongs to the client its client ID or stateid
//!   names (`prepare`), which must call from the address that set the client up.
//!   A stateid of an earlier start of the server answers STALE_STATEID and a client
//!   ID of one STALE_CLIENTID, which is what sends a 4.0 client to reclaim.
//! - Open and lock owners number their requests (seqid, section 9.1.7): the next
//!   number runs the request; the last one, a retransmission, gets that request's
//!   answer again without running anything (and the COMPOUND ends there); anything
//!   else is BAD_SEQID. A request that fails for a reason the RFC lists as not
//!   moving the sequence (a stale or bad stateid or client ID, BAD_SEQID, bad XDR,
//!   no file handle, RESOURCE) leaves it where it was. `OwnerSeq` keeps the number
//!   and the last answer of each owner; an owner whose open or lock is gone keeps
//!   them until its client goes, so a retransmitted CLOSE is answered again.
//! - OPEN never asks for OPEN_CONFIRM (OPEN4_RESULT_CONFIRM is never set: an owner's
//!   sequence starts at its first OPEN), but OPEN_CONFIRM is answered. RELEASE_LOCKOWNER
//!   forgets a lock owner that holds no lock (LOCKS_HELD otherwise).
//! - Callbacks go over a connection the server opens to the address SETCLIENTID
//!   gave (`callback40.rs`); once it answers CB_NULL, the client has a session-like
//!   record of minor 0 whose back channel is that connection (`ctx.session` of its
//!   operations), so delegations are granted and recalled by the 4.1 code. An
//!   operation that names no client (PUTFH, GETATTR...) is taken to come from the
//!   one 4.0 client at the caller's address while delegations exist (`v40_caller`),
//!   so the holder's own calls do not recall its delegation.
//! - Retransmissions: a sequenced operation sent again is answered from its owner's
//!   last answer and the COMPOUND goes on from the file handle it left
//!   (`skip_sequenced_args`); a COMPOUND that changed names (REMOVE, RENAME, LINK,
//!   CREATE) sent again is answered from the duplicate-request cache
//!   (`compound.rs`, `v40_drc_key`).
//! - Grace: 4.0 has no RECLAIM_COMPLETE, so a 4.0 client of the previous start may
//!   reclaim until the grace period runs out.
//! - Operations 40 and up (4.1's) are OP_ILLEGAL in a 4.0 COMPOUND, and 4.0's own
//!   (OPEN_CONFIRM, RENEW, SETCLIENTID, SETCLIENTID_CONFIRM, RELEASE_LOCKOWNER) are
//!   NOTSUPP in 4.1 and 4.2, as RFC 8881 section 18 has them.

use super::compound::{decode_stateid, encode_stateid, Ctx, OpFail, OpOut};
use super::state::{Client, OwnerKey, StateRef, Stateid, V4State};
use super::{op, Nfs4Error, OPAQUE_LIMIT};
use crate::service::NfsService;
use crate::xdr::{Decoder, Encoder};
use std::time::Instant;

/// What `prepare` found about an operation of a 4.0 COMPOUND.
pub(crate) enum Prepared {
    /// Run it; if it moves an owner's sequence, which (see `Sequenced`).
    Run(Option<Sequenced>),
    /// A retransmission: the owner's last answer (status and results), and the
    /// current file handle it left, from which the COMPOUND goes on.
    Replay(std::sync::Arc<Vec<u8>>, Option<super::pseudo::Fh>),
}

/// An operation that moves an owner's sequence when it runs.
pub(crate) struct Sequenced {
    pub owner: OwnerKey,
    pub seqid: u32,
    /// LOCK for a new lock owner: that owner's sequence starts at this number.
    pub new_lock_owner: Option<(OwnerKey, u32)>,
    /// CLOSE: the stateid closed (a retransmission finds its owner by it).
    pub closes: Option<[u8; 12]>,
}

/// Errors after which an owner's sequence does not move (RFC 7530 section 9.1.7).
fn keeps_sequence(status: u32) -> bool {
    [
        Nfs4Error::StaleClientId,
        Nfs4Error::StaleStateId,
        Nfs4Error::BadStateId,
        Nfs4Error::BadSeqId,
        Nfs4Error::BadXdr,
        Nfs4Error::Resource,
        Nfs4Error::NoFileHandle,
        Nfs4Error::Moved,
    ]
    .iter()
    .any(|e| *e as u32 == status)
}

/// The operations of 4.0 that 4.1 and 4.2 do not have.
pub(crate) fn is_minor0_only(opnum: u32) -> bool {
    matches!(
        opnum,
        op::OPEN_CONFIRM
            | op::RENEW
            | op::SETCLIENTID
            | op::SETCLIENTID_CONFIRM
            | op::RELEASE_LOCKOWNER
    )
}

impl NfsService {
    /// Who calls, for an operation of a 4.0 COMPOUND that names no client (PUTFH,
    /// GETATTR, REMOVE, a READ with a special stateid...): the one 4.0 client at the
    /// caller's address, so a delegation holder's own GETATTR or change does not
    /// recall its delegation (4.1 knows the caller from SEQUENCE; 4.0 has only the
    /// address). Looked up only while delegations exist: nothing else asks, and it
    /// renews nothing.
    fn v40_caller(&self, opnum: u32, ctx: &Ctx<'_, '_>) -> Option<u64> {
        // Of the operations naming no client, these are the ones that may recall a
        // delegation (a GETATTR of size or change, and changes of names).
        let asks = matches!(opnum, op::GETATTR | op::REMOVE | op::RENAME | op::LINK);
        if !asks || !self.delegations_exist() {
            return None;
        }
        v40_client_at(&self.v4.state.lock().unwrap(), ctx.call.peer.ip())
    }

    /// Before an operation of a 4.0 COMPOUND runs: the client it belongs to (its
    /// client ID or stateid; `ctx.client`), whose lease it renews, and the owner
    /// sequence it must fit. Reads a copy of the arguments; the operation decodes
    /// them again. What cannot be read is left for the operation to refuse.
    pub(crate) fn prepare_minor0(
        &self,
        opnum: u32,
        ctx: &mut Ctx<'_, '_>,
        args: &Decoder<'_>,
    ) -> Result<Prepared, OpFail> {
        // Operations that name no client (PUTFH, LOOKUP, GETATTR...) need no look
        // at the state, whose lock every client's calls share.
        if !matches!(
            opnum,
            op::OPEN
                | op::CLOSE
                | op::OPEN_DOWNGRADE
                | op::OPEN_CONFIRM
                | op::LOCK
                | op::LOCKU
                | op::LOCKT
                | op::READ
                | op::WRITE
                | op::SETATTR
                | op::DELEGRETURN
        ) {
            ctx.client = self.v40_caller(opnum, ctx);
            return Ok(Prepared::Run(None));
        }
        let mut d = args.clone();
        let peer = ctx.call.peer.ip();
        let mut st = self.v4.state.lock().unwrap();
        // The client a client ID names: confirmed, from the address that set it up.
        let by_clientid = |st: &V4State, id: u64| -> Result<u64, Nfs4Error> {
            match st.clients.get(&id) {
                Some(c) if c.confirmed && c.peer == peer => Ok(id),
                _ => Err(Nfs4Error::StaleClientId),
            }
        };
        let by_stateid = |st: &V4State, s: &Stateid| stateid_client(st, s, peer);
        let open_owner = |st: &V4State, r: &StateRef| -> Option<OwnerKey> {
            match r {
                StateRef::Open(id) => {
                    let o = &st.opens[id];
                    Some(OwnerKey::open(o.client, &o.owner))
                }
                _ => None,
            }
        };
        let mut sequenced = None;
        let client: Option<u64> = match opnum {
            op::OPEN => {
                let seqid = d.u32()?;
                d.u32()?;
                d.u32()?;
                let clientid = d.u64()?;
                let owner = d.opaque(OPAQUE_LIMIT)?;
                let c = by_clientid(&st, clientid)?;
                sequenced = Some(Sequenced {
                    owner: OwnerKey::open(c, owner),
                    seqid,
                    new_lock_owner: None,
                    closes: None,
                });
                Some(c)
            }
            op::CLOSE | op::OPEN_DOWNGRADE | op::OPEN_CONFIRM => {
                let (seqid, s) = if opnum == op::CLOSE {
                    let seqid = d.u32()?;
                    (seqid, decode_stateid(&mut d)?)
                } else {
                    let s = decode_stateid(&mut d)?;
                    (d.u32()?, s)
                };
                match by_stateid(&st, &s) {
                    Ok(Some((c, r))) => {
                        let owner = open_owner(&st, &r).ok_or(Nfs4Error::BadStateId)?;
                        sequenced = Some(Sequenced {
                            owner,
                            seqid,
                            new_lock_owner: None,
                            closes: (opnum == op::CLOSE).then_some(s.other),
                        });
                        Some(c)
                    }
                    Ok(None) => return Err(Nfs4Error::BadStateId.into()),
                    Err(e) => {
                        // A CLOSE sent again after it closed: its owner's answer.
                        if opnum == op::CLOSE {
                            if let Some(reply) = st.closed_replay(&s.other, seqid, peer) {
                                return Ok(Prepared::Replay(reply, None));
                            }
                        }
                        return Err(e.into());
                    }
                }
            }
            op::LOCK => {
                d.u32()?; // locktype
                d.bool()?; // reclaim
                d.u64()?;
                d.u64()?;
                if d.bool()? {
                    let open_seqid = d.u32()?;
                    let open = decode_stateid(&mut d)?;
                    let lock_seqid = d.u32()?;
                    let clientid = d.u64()?;
                    let lock_owner = d.opaque(OPAQUE_LIMIT)?;
                    let (c, r) = by_stateid(&st, &open)?.ok_or(Nfs4Error::BadStateId)?;
                    if clientid != c {
                        return Err(Nfs4Error::BadStateId.into());
                    }
                    let owner = open_owner(&st, &r).ok_or(Nfs4Error::BadStateId)?;
                    sequenced = Some(Sequenced {
                        owner,
                        seqid: open_seqid,
                        new_lock_owner: Some((OwnerKey::lock(c, lock_owner), lock_seqid)),
                        closes: None,
                    });
                    Some(c)
                } else {
                    let s = decode_stateid(&mut d)?;
                    let seqid = d.u32()?;
                    lock_sequence(&st, &s, seqid, peer, &mut sequenced)?
                }
            }
            op::LOCKU => {
                d.u32()?; // locktype
                let seqid = d.u32()?;
                let s = decode_stateid(&mut d)?;
                lock_sequence(&st, &s, seqid, peer, &mut sequenced)?
            }
            op::LOCKT => {
                d.u32()?;
                d.u64()?;
                d.u64()?;
                Some(by_clientid(&st, d.u64()?)?)
            }
            op::READ | op::WRITE | op::SETATTR | op::DELEGRETURN => {
                let s = decode_stateid(&mut d)?;
                by_stateid(&st, &s)?.map(|(c, _)| c)
            }
            _ => None,
        };
        if let Some(c) = client {
            if let Some(cl) = st.clients.get_mut(&c) {
                cl.renewed = Instant::now();
            }
        }
        ctx.client = client.or_else(|| v40_client_at(&st, peer));
        // Its callback record stands for the session a delegation is granted on.
        ctx.session = client.and_then(|c| st.callback40_of(c));
        if let Some(s) = &sequenced {
            match st.owner_seqs.get(&s.owner) {
                None => {}
                Some(last) if s.seqid == last.seqid.wrapping_add(1) => {}
                Some(last) if s.seqid == last.seqid => {
                    return match &last.reply {
                        Some(r) => Ok(Prepared::Replay(r.clone(), last.fh.clone())),
                        None => Err(Nfs4Error::BadSeqId.into()),
                    };
                }
                Some(_) => return Err(Nfs4Error::BadSeqId.into()),
            }
        }
        Ok(Prepared::Run(sequenced))
    }

    /// After a sequenced operation ran: the owner's sequence moves to its number and
    /// keeps its answer (`status_and_results`), unless its status keeps it.
    pub(crate) fn sequenced_minor0(
        &self,
        s: Sequenced,
        status: u32,
        status_and_results: &[u8],
        fh: Option<super::pseudo::Fh>,
    ) {
        if keeps_sequence(status) {
            return;
        }
        let reply = std::sync::Arc::new(status_and_results.to_vec());
        let mut st = self.v4.state.lock().unwrap();
        st.record_sequence(s.owner, s.seqid, reply.clone(), fh.clone(), s.closes);
        if let (Some((lock_owner, lock_seqid)), 0) = (s.new_lock_owner, status) {
            st.record_sequence(lock_owner, lock_seqid, reply, fh, None);
        }
    }

    /// The 4.0-only operations.
    pub(crate) fn minor0_op(
        &self,
        opnum: u32,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        match opnum {
            op::SETCLIENTID => self.op_setclientid(ctx, d, e),
            op::SETCLIENTID_CONFIRM => self.op_setclientid_confirm(ctx, d),
            op::RENEW => {
                let clientid = d.u64()?;
                let mut st = self.v4.state.lock().unwrap();
                st.renew_minor0(clientid, ctx.call.peer.ip())?;
                // Some of its state was revoked (its lease ran out and another client
                // needed what it held): it must find out and recover.
                if st.has_revoked(clientid) {
                    return Err(Nfs4Error::Expired.into());
                }
                Ok(())
            }
            op::OPEN_CONFIRM => {
                let s = decode_stateid(d)?;
                let _seqid = d.u32()?;
                let st = self.v4.state.lock().unwrap();
                match st.lookup(&s)? {
                    StateRef::Open(id) if Some(st.opens[&id].client) == ctx.client => {
                        let seqid = st.opens[&id].seqid;
                        encode_stateid(e, &st.stateid_of(id, seqid));
                        Ok(())
                    }
                    _ => Err(Nfs4Error::BadStateId.into()),
                }
            }
            op::RELEASE_LOCKOWNER => {
                let clientid = d.u64()?;
                let owner = d.opaque(OPAQUE_LIMIT)?;
                let mut st = self.v4.state.lock().unwrap();
                st.renew_minor0(clientid, ctx.call.peer.ip())?;
                Ok(st.release_lock_owner(clientid, owner)?)
            }
            _ => unreachable!("only 4.0's own operations come here"),
        }
    }

    fn op_setclientid(&self, ctx: &mut Ctx<'_, '_>, d: &mut Decoder<'_>, e: &mut Encoder) -> OpOut {
        let verifier: [u8; 8] = d.fixed(8)?.try_into().unwrap();
        let owner = d.opaque(OPAQUE_LIMIT)?.to_vec();
        let cb_program = d.u32()?;
        let netid = d.opaque(OPAQUE_LIMIT)?;
        let r_addr = d.opaque(OPAQUE_LIMIT)?;
        let callback_ident = d.u32()?;
        let callback = super::callback40::parse_callback_address(netid, r_addr)
            .map(|a| (a, cb_program, callback_ident));
        if owner.is_empty() {
            return Err(Nfs4Error::Inval.into());
        }
        let peer = ctx.call.peer.ip();
        if !self.admits_any(peer) {
            return Err(Nfs4Error::Perm.into());
        }
        let now = Instant::now();
        let confirm = self.v4.new_confirm_verifier();
        let (id, released) = {
            let mut st = self.v4.state.lock().unwrap();
            // The same owner from another address while its lease runs: another host
            // claiming the name (RFC 7530 section 16.33.5). Its address goes back.
            if let Some(c) = st.clients.values().find(|c| {
                c.minor == 0
                    && c.owner == owner
                    && c.confirmed
                    && c.peer != peer
                    && !st.expired(c.id, now)
            }) {
                let mut body = Encoder::new();
                body.opaque(if c.peer.is_ipv4() { b"tcp" } else { b"tcp6" })
                    .opaque(universal_address(c.peer).as_bytes());
                return Err(OpFail {
                    status: Nfs4Error::ClidInUse,
                    body: body.buf,
                });
            }
            let mut released = Vec::new();
            // Unconfirmed records of the owner go: this request replaces them.
            let unconfirmed: Vec<u64> = st
                .clients
                .values()
                .filter(|c| c.minor == 0 && c.owner == owner && !c.confirmed)
                .map(|c| c.id)
                .collect();
            for u in unconfirmed {
                released.extend(st.purge_client(u));
            }
            let same = st.clients.values_mut().find(|c| {
                c.minor == 0 && c.owner == owner && c.verifier == verifier && c.peer == peer
            });
            let id = match same {
                // The client as it is (a callback update): its client ID stays, and
                // the new confirm verifier is what SETCLIENTID_CONFIRM must bring.
                Some(c) => {
                    c.setclientid_confirm = Some(confirm);
                    c.callback40 = callback;
                    c.renewed = now;
                    c.id
                }
                // A new client, or one that restarted (another verifier): a new
                // unconfirmed record; the old one goes when this one is confirmed.
                None => {
                    let (room, evicted) = st.make_room();
                    released.extend(evicted);
                    if !room {
                        drop(st);
                        super::state::release_all(released);
                        return Err(Nfs4Error::Resource.into());
                    }
                    let id = st.new_client_id();
                    let mut c = Client::new(id, owner.clone(), verifier, peer, now);
                    c.minor = 0;
                    c.setclientid_confirm = Some(confirm);
                    c.callback40 = callback;
                    st.clients.insert(id, c);
                    id
                }
            };
            (id, released)
        };
        super::state::release_all(released);
        e.u64(id).fixed(&confirm);
        Ok(())
    }

    fn op_setclientid_confirm(&self, ctx: &mut Ctx<'_, '_>, d: &mut Decoder<'_>) -> OpOut {
        let id = d.u64()?;
        let confirm: [u8; 8] = d.fixed(8)?.try_into().unwrap();
        let peer = ctx.call.peer.ip();
        let released = {
            let mut st = self.v4.state.lock().unwrap();
            let c = st.clients.get_mut(&id).ok_or(Nfs4Error::StaleClientId)?;
            if c.peer != peer {
                return Err(Nfs4Error::ClidInUse.into());
            }
            if c.setclientid_confirm != Some(confirm) {
                return Err(Nfs4Error::StaleClientId.into());
            }
            c.renewed = Instant::now();
            if c.confirmed {
                // A retransmission, or the confirmation of a callback update: a
                // path that is no longer the client's stops taking delegations, and
                // the new one is probed.
                if c.callback40_up
                    .is_some_and(|(_, p)| Some(p) != c.callback40)
                {
                    st.close_callback40(id);
                }
                drop(st);
                self.probe_callback40(id);
                return Ok(());
            }
            c.confirmed = true;
            let owner = c.owner.clone();
            // The client before its restart (the same owner's older confirmed
            // record) goes now, with everything it held.
            let older: Vec<u64> = st
                .clients
                .values()
                .filter(|o| o.minor == 0 && o.owner == owner && o.id != id)
                .map(|o| o.id)
                .collect();
            let mut released = Vec::new();
            for o in older {
                released.extend(st.purge_client(o));
            }
            st.confirmed(&owner);
            released
        };
        super::state::release_all(released);
        ctx.client = Some(id);
        self.probe_callback40(id);
        Ok(())
    }

    /// Probes a confirmed 4.0 client's callback path (CB_NULL) from a thread of its
    /// own and, once it answers, opens it for delegations (`open_callback40`): one
    /// probe a client at a time, `MAX_PROBES` in all, none for a path already up.
    /// Needs the service started (`start_nlm` sets the handle threads reach it by).
    fn probe_callback40(&self, client: u64) {
        let Some(me) = self.me.get().cloned() else {
            return;
        };
        let Some(path) = self.v4.state.lock().unwrap().start_probe40(client) else {
            return;
        };
        let spawned = std::thread::Builder::new()
            .name("nfs40-cb-probe".into())
            .spawn(move || {
                let chan = std::sync::Arc::new(super::callback40::OutboundChannel::new(path.0));
                let up = super::callback40::probe(&chan, path.1);
                if let Some(svc) = me.upgrade() {
                    let mut st = svc.v4.state.lock().unwrap();
                    st.end_probe40(client);
                    if up {
                        st.open_callback40(client, chan, path);
                        tracing::debug!(client, address = %path.0, "NFSv4.0 callback path up");
                    }
                }
            });
        if let Err(e) = spawned {
            self.v4.state.lock().unwrap().end_probe40(client);
            tracing::warn!("no thread to probe an NFSv4.0 callback path: {e}");
        }
    }
}

/// Reads past the arguments of a sequenced 4.0 operation (OPEN, OPEN_CONFIRM,
/// OPEN_DOWNGRADE, CLOSE, LOCK, LOCKU) without acting on them: a retransmission is
/// answered from the owner's last answer and the COMPOUND goes on after it.
pub(crate) fn skip_sequenced_args(opnum: u32, d: &mut Decoder<'_>) -> crate::xdr::XdrResult<()> {
    let stateid = |d: &mut Decoder<'_>| d.fixed(16).map(|_| ());
    match opnum {
        op::CLOSE | op::OPEN_CONFIRM => {
            d.u32()?;
            stateid(d)?;
        }
        op::OPEN_DOWNGRADE => {
            stateid(d)?;
            d.u32()?;
            d.u32()?;
            d.u32()?;
        }
        op::LOCKU => {
            d.u32()?;
            d.u32()?;
            stateid(d)?;
            d.u64()?;
            d.u64()?;
        }
        op::LOCK => {
            d.u32()?;
            d.bool()?;
            d.u64()?;
            d.u64()?;
            if d.bool()? {
                d.u32()?;
                stateid(d)?;
                d.u32()?;
                d.u64()?;
                d.opaque(OPAQUE_LIMIT)?;
            } else {
                stateid(d)?;
                d.u32()?;
            }
        }
        op::OPEN => {
            d.u32()?; // seqid
            d.u32()?; // share_access
            d.u32()?; // share_deny
            d.u64()?; // clientid
            d.opaque(OPAQUE_LIMIT)?; // owner
            if d.u32()? == 1 {
                // OPEN4_CREATE: UNCHECKED4 and GUARDED4 carry a fattr4, EXCLUSIVE4 a
                // verifier.
                if d.u32()? == 2 {
                    d.fixed(8)?;
                } else {
                    let words = d.u32()?;
                    if words > 64 {
                        return Err(crate::xdr::XdrError("bitmap of more than 64 words"));
                    }
                    for _ in 0..words {
                        d.u32()?;
                    }
                    d.opaque(1 << 16)?;
                }
            }
            match d.u32()? {
                0 | 3 => {
                    d.opaque(OPAQUE_LIMIT)?;
                }
                1 => {
                    d.u32()?;
                }
                2 => {
                    stateid(d)?;
                    d.opaque(OPAQUE_LIMIT)?;
                }
                _ => return Err(crate::xdr::XdrError("open_claim4 of another minor version")),
            }
        }
        _ => unreachable!("only sequenced operations are replayed"),
    }
    Ok(())
}

/// The one confirmed 4.0 client at `peer`, if there is exactly one.
fn v40_client_at(st: &V4State, peer: std::net::IpAddr) -> Option<u64> {
    let mut at = st
        .clients
        .values()
        .filter(|c| c.minor == 0 && c.confirmed && c.peer == peer);
    match (at.next(), at.next()) {
        (Some(c), None) => Some(c.id),
        _ => None,
    }
}

/// The client and state a stateid names for a call from `peer` (special stateids
/// name none): STALE_STATEID for one of an earlier start of the server, BAD_STATEID
/// for another address's.
fn stateid_client(
    st: &V4State,
    s: &Stateid,
    peer: std::net::IpAddr,
) -> Result<Option<(u64, StateRef)>, Nfs4Error> {
    if s.is_special() {
        return Ok(None);
    }
    if !st.of_this_boot(s) {
        return Err(Nfs4Error::StaleStateId);
    }
    // By `other` alone: a retransmission carries the stateid as it was before the
    // request it repeats moved it on (the operation checks the number itself).
    let r = st.lookup(&Stateid {
        seqid: 0,
        other: s.other,
    })?;
    let client = match &r {
        StateRef::Open(id) => st.opens[id].client,
        StateRef::Lock(id) => st.lock_owners[id].client,
        StateRef::Deleg(id) => st.delegs[id].client,
    };
    if st.clients.get(&client).is_none_or(|c| c.peer != peer) {
        return Err(Nfs4Error::BadStateId);
    }
    Ok(Some((client, r)))
}

/// LOCK by an existing lock owner, and LOCKU: the client and sequence of the lock
/// stateid's owner.
fn lock_sequence(
    st: &V4State,
    s: &Stateid,
    seqid: u32,
    peer: std::net::IpAddr,
    sequenced: &mut Option<Sequenced>,
) -> Result<Option<u64>, OpFail> {
    let (c, r) = stateid_client(st, s, peer)?.ok_or(Nfs4Error::BadStateId)?;
    let StateRef::Lock(id) = r else {
        return Err(Nfs4Error::BadStateId.into());
    };
    let l = &st.lock_owners[&id];
    *sequenced = Some(Sequenced {
        owner: OwnerKey::lock(l.client, &l.owner),
        seqid,
        new_lock_owner: None,
        closes: None,
    });
    Ok(Some(c))
}

/// An address as an RPC universal address (`10.0.0.7.8.1`: port 2049), for the
/// client_using of CLID_INUSE (the port is not known: 0).
fn universal_address(ip: std::net::IpAddr) -> String {
    format!("{ip}.0.0")
}
