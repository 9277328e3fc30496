//! COMPOUND (RFC 8881 sections 2.10, 15.2, 16.2): decoding the operation list, the
//! rules on what may start a COMPOUND, SEQUENCE with its slot and reply cache, and the
//! dispatch of every operation.
//!
//! Operations are decoded one at a time as they run, so a COMPOUND whose tenth
//! operation is malformed runs nine and answers BADXDR for the tenth. Every COMPOUND
//! but the few that set up a session (EXCHANGE_ID, CREATE_SESSION,
//! BIND_CONN_TO_SESSION, DESTROY_SESSION, DESTROY_CLIENTID, each alone) starts with
//! SEQUENCE. SEQUENCE claims a slot of the session: a new sequence id runs the
//! COMPOUND and keeps its whole reply in the slot when the client asked for it
//! (`cachethis`), the slot's current sequence id is a retransmission answered from
//! that cache without running anything again (exactly once), and anything else is
//! SEQ_MISORDERED. A retransmission of a request still running gets DELAY.
//!
//! Durability is settled per COMPOUND, not per operation: an operation whose answer
//! says its change is on stable storage (a create or remove, a FILE_SYNC WRITE, a
//! COMMIT) leaves its pool in `Ctx::unsettled`, and one log commit a pool follows the
//! last operation, before the reply is sent or kept in the slot. So OPEN (create),
//! WRITE (FILE_SYNC), CLOSE of a small file costs one device write and flush, where
//! NFSv3 pays one for CREATE and another for WRITE. A crash before that commit loses
//! only changes no client was told of; a commit that fails turns the first operation
//! that needed it into NFS4ERR_IO and ends the reply there.

use super::pseudo::Fh;
use super::state::{Release, SlotReply, Stateid};
use super::{op, Nfs4Error, MAX_OPS, MINOR_MAX, MINOR_MIN, OPAQUE_LIMIT};
use crate::rpc::Accept;
use crate::service::{refusal_reason, NfsService, Probe, PROBE};
use crate::transport::{Call, ReadBuf, Reply};
use crate::xdr::{Decoder, Encoder, XdrError};
use analytics::NfsEvent;
use std::sync::Arc;

/// A failed operation: its status, and the failure results some operations have
/// (SETATTR's bitmap, LOCK's and LOCKT's holder).
#[derive(Debug)]
pub(crate) struct OpFail {
    pub status: Nfs4Error,
    pub body: Vec<u8>,
}

impl From<Nfs4Error> for OpFail {
    fn from(status: Nfs4Error) -> OpFail {
        OpFail {
            status,
            body: Vec::new(),
        }
    }
}

impl From<XdrError> for OpFail {
    fn from(_: XdrError) -> OpFail {
        Nfs4Error::BadXdr.into()
    }
}

impl From<fs::FsError> for OpFail {
    fn from(e: fs::FsError) -> OpFail {
        Nfs4Error::from(&e).into()
    }
}

impl From<crate::proto::Status> for OpFail {
    fn from(s: crate::proto::Status) -> OpFail {
        Nfs4Error::from(s).into()
    }
}

pub(crate) type OpOut = Result<(), OpFail>;

/// A READ answered from memory: the handle it named, that handle resolved (so the
/// READ does not resolve it again), and the data for (offset, count).
pub(crate) struct Prefetched {
    pub fh: Vec<u8>,
    pub target: crate::service::Target,
    pub offset: u64,
    pub count: u32,
    pub data: ReadBuf,
}

/// The state of one COMPOUND as its operations run.
pub(crate) struct Ctx<'c, 'a> {
    pub call: &'c Call<'a>,
    pub cur: Option<Fh>,
    pub saved: Option<Fh>,
    pub cur_stateid: Option<Stateid>,
    pub saved_stateid: Option<Stateid>,
    /// The client of the session SEQUENCE named.
    pub client: Option<u64>,
    pub session: Option<[u8; 16]>,
    /// READ data that goes out after the results, uncopied (READ as the last op).
    pub data: Option<ReadBuf>,
    pub last_op: bool,
    /// Files whose last open went away during the COMPOUND.
    pub releases: Vec<Release>,
    /// The COMPOUND's READ as `NfsService::compound_cached` found it before it ran:
    /// its file resolved and its data in memory.
    pub prefetched: Option<Prefetched>,
    /// The file an OPEN of this COMPOUND just resolved and made current, kept for the
    /// GETFH and CLOSE that follow it directly (the way a create is sent: OPEN, GETFH,
    /// CLOSE), so they do not resolve the handle the server itself just made again.
    /// Any other operation drops it: it never outlives a change it did not see.
    pub opened: Option<crate::service::Target>,
    /// The pools this COMPOUND changed in ways its reply says are on stable storage
    /// (a create, a remove, a FILE_SYNC write, a COMMIT...), committed once after its
    /// last operation and before the reply is sent or kept in the slot: one log
    /// commit for an OPEN, WRITE, CLOSE of a new file, not one for each.
    pub unsettled: Vec<Arc<pool::Pool>>,
    /// The result index and status position of the first operation that left a
    /// commit for the end: where the COMPOUND stops with NFS4ERR_IO if it fails.
    pub first_unsettled: Option<(u32, usize)>,
    /// The running operation's result index and status position.
    pub op_at: (u32, usize),
    /// The COMPOUND's minor version (a session made by it calls back with it).
    pub minor: u32,
}

impl Ctx<'_, '_> {
    pub fn cur(&self) -> Result<&Fh, Nfs4Error> {
        self.cur.as_ref().ok_or(Nfs4Error::NoFileHandle)
    }

    pub fn client(&self) -> Result<u64, Nfs4Error> {
        self.client.ok_or(Nfs4Error::OpNotInSession)
    }

    /// A stateid from the wire, with the current-stateid special value resolved.
    pub fn stateid(&self, s: Stateid) -> Result<Stateid, Nfs4Error> {
        // The current stateid is 4.1's; in 4.0 that value is nothing special.
        if s == Stateid::CURRENT && self.minor > 0 {
            return self.cur_stateid.ok_or(Nfs4Error::BadStateId);
        }
        Ok(s)
    }

    /// `Filesystem::settle_stable` for the COMPOUND: a change that succeeded is
    /// committed with the COMPOUND's others before the reply (see `unsettled`). Safe
    /// because nothing of it is acknowledged before that commit: the client sees no
    /// reply, and a crash before the commit loses only changes nobody was told of.
    pub fn settle_stable<T>(&mut self, fs: &fs::Filesystem, r: fs::Result<T>) -> fs::Result<T> {
        if r.is_ok() && fs.commits_stable() {
            let pool = fs.pool();
            if !self.unsettled.iter().any(|p| Arc::ptr_eq(p, pool)) {
                self.unsettled.push(pool.clone());
            }
            self.first_unsettled.get_or_insert(self.op_at);
        }
        r
    }

    /// FILE_SYNC and COMMIT: every write to `fs` so far durable before the reply.
    pub fn settle_writes(&mut self, fs: &fs::Filesystem) {
        let _ = self.settle_stable(fs, Ok(()));
    }

    /// Commits what the COMPOUND left for the end (one log commit a pool). On
    /// failure, the index and status position of the first operation that relied on
    /// it.
    fn settle(&mut self) -> Result<(), (u32, usize)> {
        let pools = std::mem::take(&mut self.unsettled);
        let mut failed = false;
        for p in &pools {
            if let Err(e) = p.log_commit() {
                tracing::warn!(error = %e, "NFSv4 COMPOUND: log commit failed");
                failed = true;
            }
        }
        match (failed, self.first_unsettled) {
            (true, Some(at)) => Err(at),
            _ => Ok(()),
        }
    }
}

pub fn decode_stateid(d: &mut Decoder<'_>) -> Result<Stateid, XdrError> {
    let seqid = d.u32()?;
    let other: [u8; 12] = d.fixed(12)?.try_into().unwrap();
    Ok(Stateid { seqid, other })
}

pub fn encode_stateid(e: &mut Encoder, s: &Stateid) {
    e.u32(s.seqid).fixed(&s.other);
}

/// Whether a COMPOUND may run on its connection's reader (see
/// `Service::may_run_inline`): all but those whose first operation after SEQUENCE
/// and PUTFH is READ (a miss waits for disks, and a reader streams the next calls
/// meanwhile; cached READs are answered there anyway) or COMMIT (may write a txg).
/// Reads only the opening of the arguments; what it cannot read runs inline and is
/// answered as malformed there.
pub(crate) fn may_run_inline(call: &Call<'_>) -> bool {
    if call.header.procedure != 1 {
        return true; // NULL
    }
    let mut d = call.args();
    let first_real_op = (|| -> Result<u32, XdrError> {
        d.opaque(OPAQUE_LIMIT)?;
        d.u32()?; // minor version
        d.u32()?; // operations
        let mut opnum = d.u32()?;
        if opnum == op::SEQUENCE {
            d.fixed(16 + 4 * 4)?; // sessionid, sequenceid, slotid, highest, cachethis
            opnum = d.u32()?;
        }
        if opnum == op::PUTFH {
            d.opaque(super::FHSIZE4)?;
            opnum = d.u32()?;
        }
        Ok(opnum)
    })();
    !matches!(first_real_op, Ok(op::READ | op::COMMIT))
}

/// What SEQUENCE decided.
enum Sequenced {
    Run {
        cachethis: bool,
        slot: u32,
        seq: u32,
        /// The session's bounds on replies (ca_maxresponsesize and _cached).
        max_reply: usize,
        max_cached: usize,
    },
    Replay(Arc<Vec<u8>>),
}

fn is_session_setup(opnum: u32) -> bool {
    matches!(
        opnum,
        op::EXCHANGE_ID
            | op::CREATE_SESSION
            | op::BIND_CONN_TO_SESSION
            | op::DESTROY_SESSION
            | op::DESTROY_CLIENTID
    )
}

impl NfsService {
    /// Answers one NFSv4 COMPOUND (procedure 1 of version 4).
    pub(crate) fn compound(&self, call: &Call<'_>) -> Reply {
        // NFSv4.0 has no sessions, hence no reply cache of its own but the owners'
        // sequences: a retransmitted REMOVE, RENAME, LINK or CREATE (after a
        // reconnection) is answered from the duplicate-request cache NFSv3 uses
        // rather than run again (RFC 7530 section 3.1.1 leaves it to the server).
        let key = v40_drc_key(call);
        if let Some(k) = &key {
            if let Some(cached) = self.drc_begin_v40(k) {
                return cached.unwrap_or_default();
            }
        }
        let mut names_changed = false;
        let reply = self.run_compound(call, None, &mut names_changed);
        if let Some(k) = key {
            self.drc_end_v40(k, names_changed.then_some(&reply));
        }
        reply
    }

    /// The streaming-from-cache case on the connection's reader thread, as NFSv3's
    /// READ: a COMPOUND of exactly SEQUENCE, PUTFH and READ whose data is all in
    /// memory is answered here, without the hand-off to a worker. Looking is free of
    /// side effects (no slot is claimed, nothing counted); when the data is not all
    /// cached, `None` sends the call to a worker. The COMPOUND then runs as usual
    /// (every check of SEQUENCE, PUTFH and READ), its READ taking the data found.
    pub(crate) fn compound_cached(&self, call: &Call<'_>) -> Option<Reply> {
        let mut d = call.args();
        d.opaque(OPAQUE_LIMIT).ok()?;
        let minor = d.u32().ok()?;
        if !(MINOR_MIN..=MINOR_MAX).contains(&minor) || d.u32().ok()? != 3 {
            return None;
        }
        if d.u32().ok()? != op::SEQUENCE {
            return None;
        }
        d.fixed(16).ok()?;
        for _ in 0..3 {
            d.u32().ok()?;
        }
        d.bool().ok()?;
        if d.u32().ok()? != op::PUTFH {
            return None;
        }
        let fh = d.opaque(super::FHSIZE4).ok()?;
        if d.u32().ok()? != op::READ {
            return None;
        }
        decode_stateid(&mut d).ok()?;
        let offset = d.u64().ok()?;
        let count = d.u32().ok()?;
        d.finish().ok()?;
        let t = self.target(call, fh).ok()?;
        if t.attr.kind != fs::Kind::File {
            return None;
        }
        let want = count.min(crate::service::RTMAX) as usize;
        let data = t.share.fs.read_parts_cached(t.ino, offset, want).ok()??;
        let prefetched = Prefetched {
            fh: fh.to_vec(),
            target: t,
            offset,
            count,
            data,
        };
        Some(self.run_compound(call, Some(prefetched), &mut false))
    }

    /// Runs a COMPOUND; `names_changed` says whether a 4.0 one ran an operation that
    /// must not run twice (REMOVE, RENAME, LINK, CREATE), whose reply the
    /// duplicate-request cache keeps.
    fn run_compound(
        &self,
        call: &Call<'_>,
        prefetched: Option<Prefetched>,
        names_changed: &mut bool,
    ) -> Reply {
        let mut d = call.args();
        let head = (|| -> Result<_, XdrError> {
            let tag = d.opaque(OPAQUE_LIMIT)?;
            let minor = d.u32()?;
            let n = d.u32()?;
            Ok((tag, minor, n))
        })();
        let Ok((tag, minor, n)) = head else {
            return Reply::new(call.reply(Accept::GarbageArgs));
        };
        if !(MINOR_MIN..=MINOR_MAX).contains(&minor) {
            let mut e = call.reply(Accept::Success);
            e.u32(Nfs4Error::MinorVersMismatch as u32)
                .opaque(tag)
                .u32(0);
            return Reply::new(e);
        }
        let mut ctx = Ctx {
            minor,
            call,
            cur: None,
            saved: None,
            cur_stateid: None,
            saved_stateid: None,
            client: None,
            session: None,
            data: None,
            last_op: false,
            releases: Vec::new(),
            prefetched,
            opened: None,
            unsettled: Vec::new(),
            first_unsettled: None,
            op_at: (0, 0),
        };
        // The results go straight after the reply's header; the status and the count
        // of results are filled in at the end.
        let mut res = call.reply(Accept::Success);
        let body_at = res.len();
        res.u32(0).opaque(tag).u32(0);
        let results_at = res.len();
        let mut count = 0u32;
        let mut status = 0u32;
        let mut slot: Option<(bool, u32, u32)> = None;
        // Until SEQUENCE says otherwise: the largest reply the transport sends.
        let mut max_reply = crate::transport::MAX_RECORD_BYTES;
        let mut max_cached = usize::MAX;
        // Operations are timed and reported only while analytics is on.
        let analytics = self.analytics.get();
        let mut events: Vec<NfsEvent> = Vec::with_capacity(if analytics.is_some() {
            n.min(16) as usize
        } else {
            0
        });
        let mut op_start = analytics::Ticks::now();
        for i in 0..n {
            let Ok(opnum) = d.u32() else {
                res.u32(op::ILLEGAL).u32(Nfs4Error::BadXdr as u32);
                count += 1;
                status = Nfs4Error::BadXdr as u32;
                break;
            };
            count += 1;
            ctx.last_op = i + 1 == n;
            let known = match minor {
                0 => (op::ACCESS..=op::RELEASE_LOCKOWNER).contains(&opnum),
                1 => (op::ACCESS..=op::RECLAIM_COMPLETE).contains(&opnum),
                _ => (op::ACCESS..=op::CLONE).contains(&opnum),
            };
            let resop = if known { opnum } else { op::ILLEGAL };
            res.u32(resop);
            let at = res.len();
            res.u32(0);
            ctx.op_at = (count, at);
            PROBE.with(|p| p.set(Probe::default()));
            // NFSv4.0: whose operation this is, and where it is in its owner's
            // sequence (a retransmission is answered from the owner's last answer).
            let mut sequenced = None;
            if minor == 0 && known && n as usize <= MAX_OPS {
                match self.prepare_minor0(opnum, &mut ctx, &d) {
                    Ok(super::minor0::Prepared::Run(s)) => sequenced = s,
                    Ok(super::minor0::Prepared::Replay(answer, fh)) => {
                        res.buf.truncate(at);
                        res.buf.extend_from_slice(&answer);
                        status = u32::from_be_bytes(answer[..4].try_into().unwrap());
                        // A retransmitted request that succeeded: the COMPOUND goes
                        // on from the file handle it left (an OPEN's GETFH must name
                        // the file), past its arguments.
                        if status != 0 || super::minor0::skip_sequenced_args(opnum, &mut d).is_err()
                        {
                            break;
                        }
                        if fh.is_some() {
                            ctx.cur = fh;
                        }
                        ctx.opened = None;
                        continue;
                    }
                    Err(f) => {
                        res.buf.truncate(at);
                        res.u32(f.status as u32);
                        res.buf.extend_from_slice(&f.body);
                        status = f.status as u32;
                        break;
                    }
                }
            }
            let r: OpOut = if !known {
                Err(Nfs4Error::OpIllegal.into())
            } else if n as usize > MAX_OPS {
                // TOO_MANY_OPS is 4.1's; RFC 7530 has RESOURCE for it.
                Err(if minor == 0 {
                    Nfs4Error::Resource
                } else {
                    Nfs4Error::TooManyOps
                }
                .into())
            } else if i == 0 && opnum == op::SEQUENCE {
                match self.op_sequence(&mut ctx, &mut d, &mut res, n) {
                    Ok(Sequenced::Run {
                        cachethis,
                        slot: s,
                        seq,
                        max_reply: mr,
                        max_cached: mc,
                    }) => {
                        slot = Some((cachethis, s, seq));
                        max_reply = mr;
                        max_cached = if cachethis { mc } else { usize::MAX };
                        Ok(())
                    }
                    Ok(Sequenced::Replay(bytes)) => {
                        res.buf.truncate(body_at);
                        res.buf.extend_from_slice(&bytes);
                        return Reply::new(res);
                    }
                    Err(f) => Err(f),
                }
            } else if i > 0 && opnum == op::SEQUENCE {
                Err(Nfs4Error::SequencePos.into())
            } else if is_session_setup(opnum) {
                // Without SEQUENCE before it, each stands alone; after SEQUENCE all
                // may follow but BIND_CONN_TO_SESSION, which is always alone (RFC 8881
                // 18.34.3, 18.35.3, 18.36.3, 18.37.3, 18.50.3). DESTROY_SESSION of the
                // COMPOUND's own session must be its last operation (checked there).
                let alone = n == 1;
                let after_sequence = i > 0;
                if (i == 0 && !alone) || (after_sequence && opnum == op::BIND_CONN_TO_SESSION) {
                    Err(Nfs4Error::NotOnlyOp.into())
                } else {
                    self.session_op(opnum, &mut ctx, &mut d, &mut res)
                }
            } else if i == 0 && minor > 0 {
                Err(Nfs4Error::OpNotInSession.into())
            } else {
                self.operation(opnum, &mut ctx, &mut d, &mut res)
            };
            if !matches!(opnum, op::OPEN | op::GETFH | op::CLOSE) {
                ctx.opened = None;
            }
            if minor == 0 && matches!(opnum, op::REMOVE | op::RENAME | op::LINK | op::CREATE) {
                *names_changed = true;
            }
            let probe = PROBE.with(|p| p.get());
            let failed = r.as_ref().err().map(|f| f.status as u32);
            if tracing::enabled!(tracing::Level::DEBUG) {
                let status = r.as_ref().err().map(|f| f.status);
                tracing::debug!(
                    peer = %call.peer,
                    xid = call.header.xid,
                    op = op::name(resop),
                    ?status,
                    "nfs4 operation"
                );
            }
            if let Some(reason) = refusal_reason(&probe, failed) {
                self.refused(call, op::name(resop), reason, probe.fsid);
            }
            if analytics.is_some() {
                // One clock reading an operation: its end is the next one's start.
                let op_end = analytics::Ticks::now();
                let latency_ns = op_end.ns_since(op_start);
                op_start = op_end;
                events.push(NfsEvent {
                    version: 4,
                    minor: minor as u8,
                    op: op::name(resop),
                    client: call.peer.ip(),
                    fsid: probe.fsid,
                    ino: probe.ino,
                    bytes: probe.bytes,
                    offset: probe.offset,
                    request_bytes: 0,
                    reply_bytes: 0,
                    latency_ns,
                    at: op_end,
                });
            }
            if let Err(mut f) = r {
                if resop == op::SETATTR && f.body.is_empty() {
                    // SETATTR4res carries its attrsset bitmap on failure too.
                    f.body = vec![0; 4];
                }
                res.buf.truncate(at);
                res.u32(f.status as u32);
                res.buf.extend_from_slice(&f.body);
                status = f.status as u32;
                if let Some(s) = sequenced {
                    self.sequenced_minor0(s, status, &res.buf[at..], ctx.cur.clone());
                }
                break;
            }
            if let Some(s) = sequenced {
                self.sequenced_minor0(s, 0, &res.buf[at..], ctx.cur.clone());
            }
            // The reply so far must fit the session's bounds (RFC 8881 2.10.6.4): the
            // operation that would pass one answers REP_TOO_BIG (or _TO_CACHE).
            let data_len = ctx.data.as_ref().map_or(0, |d| d.len() + 3);
            let size = 64 + tag.len() + (res.len() - results_at) + data_len;
            let too_big = if size > max_reply {
                Some(Nfs4Error::RepTooBig)
            } else if size > max_cached {
                Some(Nfs4Error::RepTooBigToCache)
            } else {
                None
            };
            if let Some(s) = too_big {
                ctx.data = None;
                res.buf.truncate(at);
                res.u32(s as u32);
                status = s as u32;
                break;
            }
            if ctx.data.is_some() && !ctx.last_op {
                // A READ that is not the last operation: its data goes inline.
                let data = ctx.data.take().expect("checked");
                for part in data.slices() {
                    res.buf.extend_from_slice(part);
                }
                res.buf.extend_from_slice(Encoder::padding(data.len()));
            }
        }
        if let Err((index, at)) = ctx.settle() {
            // The changes are made but not known durable: the operation that needed
            // the commit answers IO and ends the COMPOUND there, as it would have had
            // it committed on its own.
            res.buf.truncate(at);
            res.u32(Nfs4Error::Io as u32);
            ctx.data = None;
            count = index;
            status = Nfs4Error::Io as u32;
        }
        res.buf[body_at..body_at + 4].copy_from_slice(&status.to_be_bytes());
        res.buf[results_at - 4..results_at].copy_from_slice(&count.to_be_bytes());
        let reply = Reply {
            head: res.buf,
            data: ctx.data.take(),
        };
        if let (Some((cachethis, s, seq)), Some(session)) = (slot, ctx.session) {
            // Kept whatever its size: a client asks for it only for requests that
            // must not run twice, and a slot holds one reply at a time.
            let kept = if cachethis {
                SlotReply::Cached(Arc::new(reply.to_bytes()[body_at..].to_vec()))
            } else {
                SlotReply::Uncached
            };
            let mut st = self.v4.state.lock().unwrap();
            if let Some(sess) = st.sessions.get_mut(&session) {
                // Only while the slot still holds this request (a client that
                // moved on meanwhile gets no stale reply in its place).
                if let Some(sl) = sess.slots.get_mut(s as usize).filter(|sl| sl.seq == seq) {
                    sl.reply = kept;
                }
            }
        }
        super::state::release_all(std::mem::take(&mut ctx.releases));
        if let Some(a) = analytics {
            // The records on the wire are counted once, with the first operation.
            if let Some(first) = events.first_mut() {
                first.request_bytes = (call.record.len() + 4) as u32;
                first.reply_bytes = (reply.len() + 4) as u32;
            }
            a.record_nfs(&events);
        }
        reply
    }

    fn op_sequence(
        &self,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
        ops: u32,
    ) -> Result<Sequenced, OpFail> {
        let sessionid: [u8; 16] = d.fixed(16)?.try_into().unwrap();
        let seq = d.u32()?;
        let slotid = d.u32()?;
        let highest = d.u32()?;
        let cachethis = d.bool()?;
        let mut st = self.v4.state.lock().unwrap();
        st.end_grace_if_due();
        let now = std::time::Instant::now();
        let sess = st
            .sessions
            .get_mut(&sessionid)
            .ok_or(Nfs4Error::BadSession)?;
        let nslots = sess.slots.len() as u32;
        if slotid >= nslots {
            return Err(Nfs4Error::BadSlot.into());
        }
        if highest >= nslots || highest < slotid {
            return Err(Nfs4Error::BadHighSlot.into());
        }
        if ops > sess.max_ops {
            return Err(Nfs4Error::TooManyOps.into());
        }
        if ctx.call.record.len() > sess.max_request as usize {
            return Err(Nfs4Error::ReqTooBig.into());
        }
        let client = sess.client;
        let (max_reply, max_cached) = (
            sess.max_response as usize,
            sess.max_response_cached as usize,
        );
        let slot = &mut sess.slots[slotid as usize];
        if seq == slot.seq && !matches!(slot.reply, SlotReply::Empty) {
            return match &slot.reply {
                SlotReply::Cached(bytes) => Ok(Sequenced::Replay(bytes.clone())),
                SlotReply::InProgress => Err(Nfs4Error::Delay.into()),
                SlotReply::Uncached => Err(Nfs4Error::RetryUncachedRep.into()),
                SlotReply::Empty => unreachable!("checked"),
            };
        }
        if seq != slot.seq.wrapping_add(1) {
            return Err(Nfs4Error::SeqMisordered.into());
        }
        slot.seq = seq;
        slot.reply = SlotReply::InProgress;
        // SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED until the client frees what it lost;
        // CB_PATH_DOWN when it holds delegations that cannot be recalled.
        use super::client::{
            SEQ4_STATUS_ADMIN_STATE_REVOKED, SEQ4_STATUS_CB_PATH_DOWN,
            SEQ4_STATUS_CB_PATH_DOWN_SESSION, SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED,
        };
        let mut status_flags = if st.has_revoked(client) {
            SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED
        } else {
            0
        };
        // A rollback took some of it.
        if st.has_admin_revoked(client) {
            status_flags |= SEQ4_STATUS_ADMIN_STATE_REVOKED;
        }
        if st.callback_path_down(client) {
            status_flags |= SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;
        }
        if let Some(c) = st.clients.get_mut(&client) {
            c.renewed = now;
        }
        ctx.client = Some(client);
        ctx.session = Some(sessionid);
        e.fixed(&sessionid)
            .u32(seq)
            .u32(slotid)
            .u32(nslots - 1)
            .u32(nslots - 1)
            .u32(status_flags);
        Ok(Sequenced::Run {
            cachethis,
            slot: slotid,
            seq,
            max_reply,
            max_cached,
        })
    }

    /// Every operation that runs inside a session.
    fn operation(
        &self,
        opnum: u32,
        ctx: &mut Ctx<'_, '_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> OpOut {
        match opnum {
            op::ACCESS => self.op_access(ctx, d, e),
            op::CLOSE => self.op_close(ctx, d, e),
            op::COMMIT => self.op_commit(ctx, d, e),
            op::CREATE => self.op_create(ctx, d, e),
            op::DELEGRETURN => self.op_delegreturn(ctx, d),
            op::GETATTR => self.op_getattr(ctx, d, e),
            op::GETFH => self.op_getfh(ctx, e),
            op::LINK => self.op_link(ctx, d, e),
            op::LOCK => self.op_lock(ctx, d, e),
            op::LOCKT => self.op_lockt(ctx, d, e),
            op::LOCKU => self.op_locku(ctx, d, e),
            op::LOOKUP => self.op_lookup(ctx, d),
            op::LOOKUPP => self.op_lookupp(ctx),
            op::NVERIFY => self.op_verify(ctx, d, false),
            op::VERIFY => self.op_verify(ctx, d, true),
            op::OPEN => self.op_open(ctx, d, e),
            op::OPEN_DOWNGRADE => self.op_open_downgrade(ctx, d, e),
            op::PUTFH => self.op_putfh(ctx, d),
            op::PUTPUBFH | op::PUTROOTFH => {
                ctx.cur = Some(Fh::Pseudo(String::new()));
                ctx.cur_stateid = None;
                Ok(())
            }
            op::READ => self.op_read(ctx, d, e),
            op::READDIR => self.op_readdir(ctx, d, e),
            op::READLINK => self.op_readlink(ctx, e),
            op::REMOVE => self.op_remove(ctx, d, e),
            op::RENAME => self.op_rename(ctx, d, e),
            op::RESTOREFH => {
                ctx.cur = Some(ctx.saved.clone().ok_or(Nfs4Error::RestoreFh)?);
                ctx.cur_stateid = ctx.saved_stateid;
                Ok(())
            }
            op::SAVEFH => {
                ctx.saved = Some(ctx.cur()?.clone());
                ctx.saved_stateid = ctx.cur_stateid;
                Ok(())
            }
            op::SECINFO => self.op_secinfo(ctx, d, e, true),
            op::SECINFO_NO_NAME => self.op_secinfo(ctx, d, e, false),
            op::SETATTR => self.op_setattr(ctx, d, e),
            op::WRITE => self.op_write(ctx, d, e),
            op::BACKCHANNEL_CTL => {
                let program = d.u32()?;
                let cred = super::session::decode_cb_sec_parms(d)?;
                let session = ctx.session.ok_or(Nfs4Error::OpNotInSession)?;
                // RFC 8881 18.33.3: credentials it cannot use are INVAL.
                let cred = cred.ok_or(Nfs4Error::Inval)?;
                let mut st = self.v4.state.lock().unwrap();
                if let Some(sess) = st.sessions.get_mut(&session) {
                    sess.cb_cred = Some(cred);
                    if let Some(b) = sess.back.as_mut() {
                        b.program = program;
                    }
                }
                Ok(())
            }
            op if super::minor0::is_minor0_only(op) && ctx.minor == 0 => {
                self.minor0_op(op, ctx, d, e)
            }
            op::FREE_STATEID => self.op_free_stateid(ctx, d),
            op::TEST_STATEID => self.op_test_stateid(ctx, d, e),
            op::RECLAIM_COMPLETE => self.op_reclaim_complete(ctx, d),
            op::SEEK => self.op_seek(ctx, d, e),
            op::DEALLOCATE => self.op_deallocate(ctx, d),
            op::COPY => self.op_copy(ctx, d, e),
            // Everything else of 4.1 and 4.2 that a server may leave out: no pNFS
            // layouts, no delegations, no named attributes, no SSV, no 4.0 operations.
            _ => Err(Nfs4Error::NotSupp.into()),
        }
    }
}

/// The duplicate-request cache's key of a 4.0 COMPOUND (none for 4.1 and 4.2, whose
/// sessions keep replies per slot): the caller, the xid and a fingerprint of the
/// arguments, under a procedure number of its own apart from NFSv3's.
fn v40_drc_key(call: &Call<'_>) -> Option<crate::service::DrcKey> {
    let mut d = call.args();
    d.opaque(OPAQUE_LIMIT).ok()?;
    if d.u32().ok()? != 0 {
        return None;
    }
    let args = &call.record[call.header.args_at..];
    let mut h = blake3::Hasher::new();
    h.update(&(args.len() as u64).to_le_bytes());
    h.update(&args[..args.len().min(1024)]);
    Some(crate::service::DrcKey {
        client: call.peer.ip(),
        xid: call.header.xid,
        procedure: V40_DRC_PROCEDURE,
        fingerprint: h.finalize().as_bytes()[..16].try_into().unwrap(),
    })
}

/// The procedure number 4.0 COMPOUNDs are kept under in the duplicate-request cache
/// (NFSv3's are 0-21).
const V40_DRC_PROCEDURE: u32 = 0x4000_0001;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::decode_call;
    use crate::rpc::{AuthSys, Credential};
    use crate::v4::client::{Compound, Stateid};

    fn inline(c: &Compound) -> bool {
        let cred = Credential::Sys(AuthSys {
            stamp: 0,
            machine: b"t".to_vec(),
            uid: 0,
            gid: 0,
            gids: vec![],
        });
        let record = c.record(1, &cred);
        let call = Call {
            peer: "127.0.0.1:1".parse().unwrap(),
            received: analytics::Ticks::now(),
            header: decode_call(&record).unwrap(),
            record: &record,
            back: None,
        };
        may_run_inline(&call)
    }

    fn in_session() -> Compound {
        let mut c = Compound::new("t");
        c.sequence(&[7; 16], 1, 0, 0, false);
        c
    }

    #[test]
    fn compounds_starting_with_read_or_commit_go_to_workers_the_rest_may_run_inline() {
        let mut read = in_session();
        read.putfh(&[1; 40]).read(&Stateid::ANONYMOUS, 0, 4096);
        assert!(!inline(&read));
        let mut commit = in_session();
        commit.putfh(&[1; 40]).commit(0, 0);
        assert!(!inline(&commit));
        let mut write = in_session();
        write
            .putfh(&[1; 40])
            .write(&Stateid::ANONYMOUS, 0, 2, b"data");
        assert!(inline(&write));
        let mut open_read_close = in_session();
        open_read_close
            .putfh(&[1; 40])
            .getfh()
            .read(&Stateid::CURRENT, 0, 10);
        assert!(
            inline(&open_read_close),
            "READ after other work: small, as a create's"
        );
        let mut setup = Compound::new("t");
        setup.exchange_id(&[1; 8], b"owner", 0);
        assert!(inline(&setup));
        let mut cut = in_session();
        cut.raw_op(op::PUTFH, &[0, 0]);
        assert!(inline(&cut), "malformed: answered as such, inline");
    }
}
