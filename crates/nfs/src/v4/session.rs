//! Client IDs and sessions (RFC 8881 sections 2.4, 2.10, 18.35-18.37, 18.50-18.51):
//! EXCHANGE_ID, CREATE_SESSION, BIND_CONN_TO_SESSION, DESTROY_SESSION,
//! DESTROY_CLIENTID and RECLAIM_COMPLETE.
//!
//! Channel attributes asked for are honoured up to this server's bounds and answered
//! with what was granted: requests and replies up to the transport's record limit,
//! at most `MAX_OPS` operations, at most `MAX_SLOTS` slots. The connection of a
//! CREATE_SESSION that asks for it (CONN_BACK_CHAN), or one bound later with
//! BIND_CONN_TO_SESSION, is the session's back channel: delegations are recalled
//! over it (one slot, one callback at a time), with the credentials the client gave
//! in csa_sec_parms or BACKCHANNEL_CTL (the first AUTH_NONE or AUTH_SYS one).
//!
//! EXCHANGE_ID follows the case table of RFC 8881 section 18.35.5, with 4.0's
//! SETCLIENTID records (`minor0.rs`) a name space of their own; undefined flag bits
//! of EXCHANGE_ID and CREATE_SESSION are INVAL.

use super::compound::{Ctx, OpFail, OpOut};
use super::state::{BackChan, Client, Session, Slot, SlotReply, V4State};
use super::{op, Nfs4Error, MAX_OPS, MAX_SLOTS, OPAQUE_LIMIT};
use crate::rpc::Credential;
use crate::service::NfsService;
use crate::transport::BackChannel;
use crate::transport::MAX_RECORD_BYTES;
use crate::xdr::{Decoder, Encoder, XdrResult};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Largest reply kept in a slot for a retransmission.
const MAX_CACHED_REPLY: u32 = 64 << 10;

const EXCHGID4_FLAG_USE_NON_PNFS: u32 = 0x0001_0000;
const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;
const EXCHGID4_FLAG_UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
/// The eia_flags a client may set: SUPP_MOVED_REFER, SUPP_MOVED_MIGR,
/// SUPP_FENCE_OPS, BIND_PRINC_STATEID, the pNFS roles and UPD_CONFIRMED_REC_A.
const EIA_FLAGS_DEFINED: u32 =
    0x1 | 0x2 | 0x4 | 0x100 | 0x7_0000 | EXCHGID4_FLAG_UPD_CONFIRMED_REC_A;
/// csa_flags: PERSIST, CONN_BACK_CHAN, CONN_RDMA.
const CSA_FLAGS_DEFINED: u32 = 0x1 | 0x2 | 0x4;
const SP4_NONE: u32 = 0;
const CONN_BACK_CHAN: u32 = 0x2;

/// The NFSv4 side of the service: client and session state, and who this server is.
pub(crate) struct V4Server {
    pub state: Mutex<V4State>,
    /// When this instance started: the change attribute of pseudo directories.
    pub boot_time: fs::Timespec,
    /// The server owner (EXCHANGE_ID): the same for every address of this daemon.
    pub owner: Vec<u8>,
    /// The lease as the `lease_time` attribute reports it.
    pub lease: std::sync::atomic::AtomicU32,
    /// The state's count of delegations (`V4State::deleg_count`).
    pub deleg_count: Arc<std::sync::atomic::AtomicUsize>,
    /// Owner names (`name@domain`), when an id domain is configured.
    pub names: std::sync::RwLock<Option<Arc<super::attrs::IdMap>>>,
    /// Set once a look at the state found no grace period: one opens only when
    /// recovery is enabled (at start, which clears this), so from then on the
    /// operations that wait for the grace period need not take the state lock.
    pub grace_over: std::sync::atomic::AtomicBool,
}

impl V4Server {
    pub fn new(boot_nonce: u64) -> V4Server {
        let h = blake3::hash(&boot_nonce.to_le_bytes());
        let boot = u32::from_le_bytes(h.as_bytes()[..4].try_into().unwrap());
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        let state = V4State::new(boot);
        V4Server {
            deleg_count: state.deleg_count.clone(),
            state: Mutex::new(state),
            boot_time: fs::Timespec::now(),
            owner: format!("shoal@{}", host.trim()).into_bytes(),
            lease: std::sync::atomic::AtomicU32::new(super::LEASE_SECONDS),
            names: std::sync::RwLock::new(None),
            grace_over: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// SETCLIENTID's confirm verifier: unpredictable, so only the client that was
    /// answered can confirm.
    pub fn new_confirm_verifier(&self) -> [u8; 8] {
        self.state.lock().unwrap().new_verifier()
    }

    pub fn lease_seconds(&self) -> u32 {
        self.lease.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// channel_attrs4
#[derive(Debug, Clone, Copy)]
struct ChannelAttrs {
    header_pad: u32,
    max_request: u32,
    max_response: u32,
    max_response_cached: u32,
    max_ops: u32,
    max_requests: u32,
}

fn decode_channel(d: &mut Decoder<'_>) -> XdrResult<ChannelAttrs> {
    let c = ChannelAttrs {
        header_pad: d.u32()?,
        max_request: d.u32()?,
        max_response: d.u32()?,
        max_response_cached: d.u32()?,
        max_ops: d.u32()?,
        max_requests: d.u32()?,
    };
    let rdma = d.u32()?;
    if rdma > 1 {
        return Err(crate::xdr::XdrError("ca_rdma_ird of more than one"));
    }
    for _ in 0..rdma {
        d.u32()?;
    }
    Ok(c)
}

fn encode_channel(e: &mut Encoder, c: &ChannelAttrs) {
    e.u32(c.header_pad)
        .u32(c.max_request)
        .u32(c.max_response)
        .u32(c.max_response_cached)
        .u32(c.max_ops)
        .u32(c.max_requests)
        .u32(0);
}

/// callback_sec_parms4<>: the credentials callbacks must carry (RFC 8881 18.36.4,
/// 18.33): the first AUTH_NONE or AUTH_SYS one the client gave, in its order.
/// `None` when it gave only RPCSEC_GSS, which this server does not speak: then it
/// cannot be called back.
pub(crate) fn decode_cb_sec_parms(d: &mut Decoder<'_>) -> XdrResult<Option<Credential>> {
    let n = d.u32()?;
    if n > 16 {
        return Err(crate::xdr::XdrError(
            "too many callback security parameters",
        ));
    }
    let mut chosen = None;
    for _ in 0..n {
        let found = match d.u32()? {
            0 => Credential::None,
            1 => {
                let stamp = d.u32()?;
                let machine = d.opaque(255)?.to_vec();
                let uid = d.u32()?;
                let gid = d.u32()?;
                let g = d.u32()?;
                if g > 16 {
                    return Err(crate::xdr::XdrError("more than 16 groups"));
                }
                let mut gids = Vec::with_capacity(g as usize);
                for _ in 0..g {
                    gids.push(d.u32()?);
                }
                Credential::Sys(crate::rpc::AuthSys {
                    stamp,
                    machine,
                    uid,
                    gid,
                    gids,
                })
            }
            6 => {
                d.u32()?;
                d.opaque(OPAQUE_LIMIT)?;
                d.opaque(OPAQUE_LIMIT)?;
                continue;
            }
            _ => return Err(crate::xdr::XdrError("unknown callback security flavor")),
        };
        chosen.get_or_insert(found);
    }
    Ok(chosen)
}

impl NfsService {
    pub(crate) fn session_op(
        &self,
        opnum: u32,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        match opnum {
            op::EXCHANGE_ID => self.op_exchange_id(ctx.call.peer.ip(), d, e),
            op::CREATE_SESSION => {
                self.op_create_session(ctx.call.peer.ip(), ctx.call.back.clone(), ctx.minor, d, e)
            }
            op::BIND_CONN_TO_SESSION => {
                let sessionid: [u8; 16] = d.fixed(16)?.try_into().unwrap();
                let dir = d.u32()?;
                let _rdma = d.bool()?;
                let mut st = self.v4.state.lock().unwrap();
                if !st.session_of_peer(&sessionid, ctx.call.peer.ip()) {
                    return Err(Nfs4Error::BadSession.into());
                }
                // CDFC4_FORE 1, BACK 2, FORE_OR_BOTH 3, BACK_OR_BOTH 7.
                if !matches!(dir, 1 | 2 | 3 | 7) {
                    return Err(Nfs4Error::Inval.into());
                }
                let sess = st.sessions.get_mut(&sessionid).expect("checked");
                let mut bound = 1; // CDFS4_FORE
                if dir != 1 {
                    if let Some(conn) = ctx.call.back.clone() {
                        let program = sess.back.as_ref().map_or(0, |b| b.program);
                        let slot = sess
                            .back
                            .as_ref()
                            .map_or_else(|| Arc::new(Mutex::new(1)), |b| b.slot.clone());
                        sess.back = Some(BackChan {
                            conn,
                            program,
                            slot,
                        });
                        bound = 3; // CDFS4_BOTH
                    }
                }
                e.fixed(&sessionid).u32(bound).bool(false);
                Ok(())
            }
            op::DESTROY_SESSION => {
                let sessionid: [u8; 16] = d.fixed(16)?.try_into().unwrap();
                let mut st = self.v4.state.lock().unwrap();
                if !st.session_of_peer(&sessionid, ctx.call.peer.ip()) {
                    return Err(Nfs4Error::BadSession.into());
                }
                let sess = st.sessions.get(&sessionid).ok_or(Nfs4Error::BadSession)?;
                // In its own session, only as the last operation (the slot's reply
                // has nowhere to go afterwards).
                if ctx.session == Some(sessionid) && !ctx.last_op {
                    return Err(Nfs4Error::BadSession.into());
                }
                let in_use = sess
                    .slots
                    .iter()
                    .any(|s| matches!(s.reply, SlotReply::InProgress));
                if in_use && ctx.session != Some(sessionid) {
                    return Err(Nfs4Error::Delay.into());
                }
                st.sessions.remove(&sessionid);
                if ctx.session == Some(sessionid) {
                    ctx.session = None;
                }
                Ok(())
            }
            op::DESTROY_CLIENTID => {
                let clientid = d.u64()?;
                let released = {
                    let mut st = self.v4.state.lock().unwrap();
                    let peer = ctx.call.peer.ip();
                    if st.clients.get(&clientid).is_none_or(|c| c.peer != peer) {
                        return Err(Nfs4Error::StaleClientId.into());
                    }
                    if st.sessions.values().any(|s| s.client == clientid) {
                        return Err(Nfs4Error::ClientIdBusy.into());
                    }
                    st.purge_client(clientid)
                };
                ctx.releases.extend(released);
                Ok(())
            }
            _ => unreachable!("only session set-up operations come here"),
        }
    }

    fn op_exchange_id(&self, peer: IpAddr, d: &mut Decoder<'_>, e: &mut Encoder) -> OpOut {
        let verifier: [u8; 8] = d.fixed(8)?.try_into().unwrap();
        let owner = d.opaque(OPAQUE_LIMIT)?.to_vec();
        let flags = d.u32()?;
        let how = d.u32()?;
        if how != SP4_NONE {
            // State protection needs RPCSEC_GSS, which this server does not speak.
            return Err(Nfs4Error::Inval.into());
        }
        let impls = d.u32()?;
        if impls > 1 {
            return Err(Nfs4Error::BadXdr.into());
        }
        for _ in 0..impls {
            d.opaque(OPAQUE_LIMIT)?;
            d.opaque(OPAQUE_LIMIT)?;
            d.u64()?;
            d.u32()?;
        }
        // Undefined bits, and CONFIRMED_R, which only a server sets: INVAL
        // (RFC 8881 18.35.3).
        if owner.is_empty() || flags & !EIA_FLAGS_DEFINED != 0 {
            return Err(Nfs4Error::Inval.into());
        }
        let update = flags & EXCHGID4_FLAG_UPD_CONFIRMED_REC_A != 0;
        // Client state only for hosts some export admits, so nobody else can fill
        // the client table.
        if !self.admits_any(peer) {
            return Err(Nfs4Error::Perm.into());
        }
        let now = Instant::now();
        let (clientid, seq, confirmed, released) = {
            let mut st = self.v4.state.lock().unwrap();
            // The records of this owner (4.0's SETCLIENTID records are another
            // name space): the confirmed one, if any, and the unconfirmed ones.
            let confirmed_rec = st
                .clients
                .values()
                .find(|c| c.owner == owner && c.confirmed && c.minor > 0)
                .map(|c| (c.id, c.verifier, c.peer, c.cs_seq));
            let unconfirmed: Vec<u64> = st
                .clients
                .values()
                .filter(|c| c.owner == owner && !c.confirmed && c.minor > 0)
                .map(|c| c.id)
                .collect();
            let mut released = Vec::new();
            // RFC 8881 section 18.35.5, case by case.
            let reuse = match (update, confirmed_rec) {
                // 7: an update of a record that is not there (or not confirmed).
                (true, None) => return Err(Nfs4Error::NoEnt.into()),
                // 8: an update from another principal.
                (true, Some((_, _, p, _))) if p != peer => return Err(Nfs4Error::Perm.into()),
                // 6 (the verifier differs): not the same client instance.
                (true, Some((_, v, _, _))) if v != verifier => {
                    return Err(Nfs4Error::NotSame.into())
                }
                // 6: the update of its own confirmed record.
                (true, Some((id, _, _, cs))) => Some((id, cs)),
                // 3: the name is another principal's while its lease runs.
                (false, Some((id, _, p, _))) if p != peer && !st.expired(id, now) => {
                    return Err(Nfs4Error::ClidInUse.into())
                }
                // 2: the same client again: its confirmed record.
                (false, Some((id, v, p, cs))) if v == verifier && p == peer => Some((id, cs)),
                // 1, 4 and 5: a new unconfirmed record (4: an unconfirmed one is
                // replaced; 5: the client restarted, and its confirmed record goes
                // when the new one is confirmed).
                (false, _) => None,
            };
            match reuse {
                Some((id, cs)) => (id, cs.wrapping_add(1), true, released),
                None => {
                    for id in unconfirmed {
                        released.extend(st.purge_client(id));
                    }
                    let (room, evicted) = st.make_room();
                    released.extend(evicted);
                    if !room {
                        drop(st);
                        super::state::release_all(released);
                        return Err(Nfs4Error::Delay.into());
                    }
                    let id = st.new_client_id();
                    st.clients
                        .insert(id, Client::new(id, owner.clone(), verifier, peer, now));
                    (id, 1, false, released)
                }
            }
        };
        super::state::release_all(released);
        let mut flags = EXCHGID4_FLAG_USE_NON_PNFS;
        if confirmed {
            flags |= EXCHGID4_FLAG_CONFIRMED_R;
        }
        e.u64(clientid).u32(seq).u32(flags).u32(SP4_NONE);
        // server_owner4 and server_scope: one daemon, one owner for all its addresses.
        e.u64(0).opaque(&self.v4.owner);
        e.opaque(&self.v4.owner);
        // nfs_impl_id4<1>
        e.u32(1)
            .opaque(b"shoal")
            .opaque(format!("shoal {}", env!("CARGO_PKG_VERSION")).as_bytes())
            .u64(0)
            .u32(0);
        Ok(())
    }

    fn op_create_session(
        &self,
        peer: IpAddr,
        conn: Option<Arc<dyn BackChannel>>,
        minor: u32,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        let clientid = d.u64()?;
        let seq = d.u32()?;
        let flags = d.u32()?;
        let fore = decode_channel(d)?;
        let back = decode_channel(d)?;
        let cb_program = d.u32()?;
        let cb_cred = decode_cb_sec_parms(d)?;
        let mut released = Vec::new();
        let r = (|| -> Result<Vec<u8>, OpFail> {
            if flags & !CSA_FLAGS_DEFINED != 0 {
                return Err(Nfs4Error::Inval.into());
            }
            let mut st = self.v4.state.lock().unwrap();
            let c = st.clients.get(&clientid).ok_or(Nfs4Error::StaleClientId)?;
            if c.peer != peer {
                return Err(Nfs4Error::ClidInUse.into());
            }
            if seq == c.cs_seq {
                if let Some(r) = &c.cs_reply {
                    return Ok(r.to_vec());
                }
            }
            if seq != c.cs_seq.wrapping_add(1) {
                return Err(Nfs4Error::SeqMisordered.into());
            }
            if st
                .sessions
                .values()
                .filter(|s| s.client == clientid)
                .count()
                >= super::state::MAX_SESSIONS_PER_CLIENT
            {
                return Err(Nfs4Error::Inval.into());
            }
            let limit = MAX_RECORD_BYTES as u32;
            if fore.max_request < 256 || fore.max_response < 256 {
                return Err(Nfs4Error::TooSmall.into());
            }
            let granted = ChannelAttrs {
                header_pad: 0,
                max_request: fore.max_request.min(limit),
                max_response: fore.max_response.min(limit),
                max_response_cached: fore.max_response_cached.min(MAX_CACHED_REPLY),
                max_ops: fore.max_ops.clamp(2, MAX_OPS as u32),
                max_requests: fore.max_requests.clamp(1, MAX_SLOTS),
            };
            let granted_back = ChannelAttrs {
                header_pad: 0,
                max_request: back.max_request.min(4096),
                max_response: back.max_response.min(4096),
                max_response_cached: 0,
                max_ops: back.max_ops.clamp(1, 2),
                max_requests: 1,
            };
            // A confirmed client of the same owner is the same client before a
            // restart: this confirmation replaces it and drops its state.
            let owner = c.owner.clone();
            let olds: Vec<u64> = st
                .clients
                .values()
                .filter(|o| o.owner == owner && o.id != clientid && o.confirmed && o.minor > 0)
                .map(|o| o.id)
                .collect();
            for o in olds {
                released.extend(st.purge_client(o));
            }
            let sessionid = st.new_session_id();
            // The connection becomes the back channel when the client asks for it
            // and gave credentials this server can call back with.
            let back_chan = conn
                .filter(|_| flags & CONN_BACK_CHAN != 0 && cb_cred.is_some())
                .map(|conn| BackChan {
                    conn,
                    program: cb_program,
                    slot: Arc::new(Mutex::new(1)),
                });
            let granted_flags = if back_chan.is_some() {
                CONN_BACK_CHAN
            } else {
                0
            };
            st.sessions.insert(
                sessionid,
                Session {
                    client: clientid,
                    slots: (0..granted.max_requests)
                        .map(|_| Slot {
                            seq: 0,
                            reply: SlotReply::Empty,
                        })
                        .collect(),
                    max_ops: granted.max_ops,
                    max_request: granted.max_request,
                    max_response: granted.max_response,
                    max_response_cached: granted.max_response_cached,
                    back: back_chan,
                    minor,
                    cb_cred,
                    cb_ident: 0,
                },
            );
            let mut out = Encoder::new();
            out.fixed(&sessionid).u32(seq).u32(granted_flags);
            encode_channel(&mut out, &granted);
            encode_channel(&mut out, &granted_back);
            st.confirmed(&owner);
            let c = st.clients.get_mut(&clientid).expect("looked up above");
            c.confirmed = true;
            c.cs_seq = seq;
            c.cs_reply = Some(Arc::new(out.buf.clone()));
            c.renewed = Instant::now();
            Ok(out.buf)
        })();
        super::state::release_all(released);
        e.buf.extend_from_slice(&r?);
        Ok(())
    }

    pub(crate) fn op_reclaim_complete(&self, ctx: &mut Ctx<'_, '_>, d: &mut Decoder<'_>) -> OpOut {
        let one_fs = d.bool()?;
        let client = ctx.client()?;
        if one_fs {
            // Per file system reclaim: nothing to track without a grace period.
            return Ok(());
        }
        Ok(self.v4.state.lock().unwrap().reclaim_complete(client)?)
    }
}
