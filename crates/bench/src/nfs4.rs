//! The load generator's NFSv4.1 side: a session per connection, and the operations of
//! `client::Nfs` as COMPOUNDs (SEQUENCE, PUTFH, then the operation), so every workload
//! runs over NFSv4.1 against any server, shoal or not.
//!
//! Sessions: EXCHANGE_ID with an owner unique to the connection (so each connection is
//! its own client, as separate hosts would be), CREATE_SESSION asking for 64 slots, and
//! RECLAIM_COMPLETE. Each call in flight holds one slot (`SlotGuard`) from sending to
//! taking its reply, so the window of a pipelined workload is bounded by the slots the
//! server granted; a slot's sequence id goes up by one per call sent on it.
//!
//! Delegations (`--delegations`): CREATE_SESSION then makes the connection the
//! session's back channel, small-file creates take the write delegation a server
//! offers, and the connection's reader answers CB_RECALL (the handle is marked
//! recalled; the workload gives the delegation back at its next step, or at once
//! when it removes the file, in the REMOVE's COMPOUND). What a delegation lets a
//! client skip is recorded as `getattr_delegated` and `read_delegated`.
//!
//! Otherwise what is sent, as a client without delegations would: READ and WRITE with the
//! anonymous stateid (no OPEN needed for I/O, as NFSv3 clients do it), CREATE as one
//! COMPOUND of OPEN (UNCHECKED, mode 0644), GETFH and CLOSE of the current stateid (the
//! open state NFSv4 has, in one round trip); LOOKUP + GETFH + GETATTR; REMOVE for files and
//! directories; COMMIT. READ and WRITE replies are parsed in place (the data is never
//! copied out of the reply record); the rest through `nfs::v4::client`.
//!
//! Invariants: a slot is never used by two calls at once (it is taken under the
//! session's lock and given back when the call's reply has been taken or the call
//! failed to go out); a failed SEQUENCE fails the call with its status.

use crate::client::{Attr, Call, Connection, Fh, Nfs, NfsStatus, ReadOk, Reply, Stable, Verifier};
use anyhow::{anyhow, bail, Context, Result};
use nfs::proto::NFS_PROGRAM;
use nfs::v4::client::{
    decode_reply, ChannelAttrs, Claim, Compound, CompoundReply, OpenHow, SetAttrs, Stateid,
};
use nfs::v4::op;
use nfs::xdr::{Decoder, Encoder};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};

const NFS_V4: u32 = 4;
const COMPOUND: u32 = 1;
/// Slots asked for: as many calls in flight as the deepest workload keeps.
const SLOTS_WANTED: u32 = 64;
/// NFS4ERR_NOENT and NFS4ERR_EXIST.
const NOENT: u32 = 2;
const EXIST: u32 = 17;
// Attributes the load generator reads: type, size, fileid.
const ATTR_TYPE: u32 = 1;
const ATTR_SIZE: u32 = 4;
const ATTR_FILEID: u32 = 20;

struct Slots {
    /// The next sequence id of each slot.
    next_seq: Vec<u32>,
    free: Vec<u32>,
    /// Callers waiting for a free slot (a slot given back wakes one only then: a
    /// wake-up is a system call).
    waiting: u32,
}

struct Inner {
    id: [u8; 16],
    clientid: u64,
    owner: Vec<u8>,
    slots: Mutex<Slots>,
    freed: Condvar,
    highest: u32,
    /// Delegations are taken (the connection is the back channel).
    delegations: bool,
}

/// One NFSv4.1 session (of one connection).
pub struct Session {
    inner: Arc<Inner>,
}

/// A slot held by a call in flight; given back when dropped.
pub struct SlotGuard {
    inner: Arc<Inner>,
    slot: u32,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut s = self.inner.slots.lock().unwrap();
        s.free.push(self.slot);
        if s.waiting > 0 {
            self.inner.freed.notify_one();
        }
    }
}

fn unique_owner() -> Vec<u8> {
    static N: AtomicU32 = AtomicU32::new(0);
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    format!(
        "shoal-bench {} {} {}",
        host.trim(),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
    .into_bytes()
}

/// Sends `c` (no SEQUENCE of its own, or one already in it) and decodes the reply.
fn send(conn: &Connection, c: &Compound) -> Result<CompoundReply> {
    decode(&conn.call(NFS_PROGRAM, NFS_V4, COMPOUND, |e| c.encode_args(e))?)
}

fn decode(r: &Reply) -> Result<CompoundReply> {
    decode_reply(&r.record).map_err(|e| anyhow!("an NFSv4 reply that does not parse: {e:?}"))
}

/// The first failed operation of a reply, as an error naming it.
fn check(r: &CompoundReply) -> Result<()> {
    match r.results.iter().find(|o| o.status != 0) {
        None => Ok(()),
        Some(o) => {
            Err(anyhow::Error::new(NfsStatus(o.status))
                .context(format!("NFSv4 {}", op::name(o.op))))
        }
    }
}

fn status_of(r: &CompoundReply, opnum: u32) -> Option<u32> {
    r.results.iter().find(|o| o.op == opnum).map(|o| o.status)
}

impl Session {
    pub fn create(conn: &Connection, delegations: bool) -> Result<Session> {
        let owner = unique_owner();
        let mut c = Compound::new("bench");
        c.exchange_id(b"shoalbnc", &owner, 0);
        let r = send(conn, &c).context("EXCHANGE_ID")?;
        check(&r)?;
        let x = r.results[0]
            .exchange_id()
            .ok_or_else(|| anyhow!("EXCHANGE_ID result"))?
            .clone();
        let fore = ChannelAttrs {
            max_requests: SLOTS_WANTED,
            ..ChannelAttrs::fore()
        };
        let mut c = Compound::new("bench");
        let flags = if delegations { CONN_BACK_CHAN } else { 0 };
        c.create_session_with_flags(x.clientid, x.seq, flags, &fore, &ChannelAttrs::back());
        let r = send(conn, &c).context("CREATE_SESSION")?;
        check(&r)?;
        let cs = r.results[0]
            .create_session()
            .ok_or_else(|| anyhow!("CREATE_SESSION result"))?
            .clone();
        if delegations && cs.flags & CONN_BACK_CHAN == 0 {
            eprintln!("note: the server made no back channel; it will offer no delegations");
        }
        let n = cs.fore.max_requests.clamp(1, SLOTS_WANTED);
        let s = Session {
            inner: Arc::new(Inner {
                id: cs.sessionid,
                clientid: x.clientid,
                owner,
                slots: Mutex::new(Slots {
                    next_seq: vec![1; n as usize],
                    free: (0..n).rev().collect(),
                    waiting: 0,
                }),
                freed: Condvar::new(),
                highest: n - 1,
                delegations,
            }),
        };
        // A new client has nothing to reclaim; servers hold back opens until it says so.
        let r = s.call(conn, |c| {
            c.reclaim_complete(false);
        })?;
        check(&r).context("RECLAIM_COMPLETE")?;
        Ok(s)
    }

    /// Waits for a free slot and uses up its next sequence id.
    fn slot(&self) -> (SlotGuard, u32) {
        let mut s = self.inner.slots.lock().unwrap();
        loop {
            if let Some(slot) = s.free.pop() {
                let seq = s.next_seq[slot as usize];
                s.next_seq[slot as usize] = seq.wrapping_add(1);
                return (
                    SlotGuard {
                        inner: self.inner.clone(),
                        slot,
                    },
                    seq,
                );
            }
            s.waiting += 1;
            s = self.inner.freed.wait(s).unwrap();
            s.waiting -= 1;
        }
    }

    /// A COMPOUND of SEQUENCE and what `build` adds, waited for: its reply undecoded
    /// (see `Results`).
    fn call_raw(&self, conn: &Connection, build: impl FnOnce(&mut Compound)) -> Result<Reply> {
        let (guard, seq) = self.slot();
        let mut c = Compound::new("");
        c.sequence(&self.inner.id, seq, guard.slot, self.inner.highest, false);
        build(&mut c);
        let r = conn.call(NFS_PROGRAM, NFS_V4, COMPOUND, |e| c.encode_args(e));
        drop(guard);
        r
    }

    /// `call_raw`, decoded.
    fn call(&self, conn: &Connection, build: impl FnOnce(&mut Compound)) -> Result<CompoundReply> {
        let r = decode(&self.call_raw(conn, build)?)?;
        if let Some(s) = status_of(&r, op::SEQUENCE).filter(|s| *s != 0) {
            return Err(anyhow::Error::new(NfsStatus(s)).context("NFSv4 SEQUENCE"));
        }
        Ok(r)
    }

    /// Sends SEQUENCE + PUTFH + one operation encoded by `op_args` without waiting;
    /// the call holds its slot until its reply is taken.
    fn start(
        &self,
        conn: &Connection,
        fh: &Fh,
        opnum: u32,
        op_args: impl FnOnce(&mut Encoder),
    ) -> Result<Call> {
        let (guard, seq) = self.slot();
        let mut call = conn.start(NFS_PROGRAM, NFS_V4, COMPOUND, |e| {
            e.opaque(b"").u32(1).u32(3);
            e.u32(op::SEQUENCE)
                .fixed(&self.inner.id)
                .u32(seq)
                .u32(guard.slot)
                .u32(self.inner.highest)
                .bool(false);
            e.u32(op::PUTFH).opaque(&fh.0);
            e.u32(opnum);
            op_args(e);
        })?;
        call.slot = Some(guard);
        Ok(call)
    }
}

fn anonymous(e: &mut Encoder) {
    e.u32(0).fixed(&[0u8; 12]);
}

/// A COMPOUND reply walked in place, result by result, decoding only what the caller
/// reads (the hot paths: no allocation per result). `new` checks SEQUENCE's result;
/// each `next` checks that the next result is of the operation expected and succeeded
/// (else an `NfsStatus` error naming it), and leaves the decoder at its body.
struct Results<'a> {
    d: Decoder<'a>,
    left: u32,
    what: &'a str,
}

impl<'a> Results<'a> {
    fn new(reply: &'a Reply, what: &'a str) -> Result<Results<'a>> {
        let mut d = reply.decoder();
        let _status = d.u32()?;
        d.opaque(1024)?;
        let left = d.u32()?;
        let mut r = Results { d, left, what };
        r.next(op::SEQUENCE)?.fixed(16 + 5 * 4)?;
        Ok(r)
    }

    fn next(&mut self, opnum: u32) -> Result<&mut Decoder<'a>> {
        if self.left == 0 {
            bail!("{}: the reply ended before {}", self.what, op::name(opnum));
        }
        self.left -= 1;
        let got = self.d.u32()?;
        let status = self.d.u32()?;
        if status != 0 {
            return Err(anyhow::Error::new(NfsStatus(status)).context(format!(
                "NFSv4 {} ({})",
                op::name(got),
                self.what
            )));
        }
        if got != opnum {
            bail!(
                "{}: {} in the reply where {} was sent",
                self.what,
                op::name(got),
                op::name(opnum)
            );
        }
        Ok(&mut self.d)
    }
}

/// Skips the COMPOUND header and the results of SEQUENCE and PUTFH of a reply to
/// `Session::start`, leaving the decoder at the last operation's result body.
fn last_result<'a>(reply: &'a Reply, what: &'a str, opnum: u32) -> Result<Decoder<'a>> {
    let mut r = Results::new(reply, what)?;
    r.next(op::PUTFH)?;
    r.next(opnum)?;
    Ok(r.d)
}

/// OPEN4resok: the delegation handed out, if any (its stateid, and whether it is a
/// write delegation).
fn open_result(d: &mut Decoder<'_>) -> Result<Option<(Stateid, bool)>> {
    let o = nfs::v4::client::OpenRes::decode(d).map_err(|e| anyhow!("OPEN result: {e:?}"))?;
    Ok(o.delegation_stateid.map(|s| (s, o.delegation == 2)))
}

/// OPEN4resok of an open that asked for no delegation.
fn skip_open_result(d: &mut Decoder<'_>) -> Result<()> {
    match open_result(d)? {
        None => Ok(()),
        Some(_) => bail!("OPEN: a delegation, which was not asked for"),
    }
}

/// CREATE_SESSION4_FLAG_CONN_BACK_CHAN.
const CONN_BACK_CHAN: u32 = 0x2;
const CB_SEQUENCE: u32 = 11;
const CB_RECALL: u32 = 4;
const NFS4ERR_OP_ILLEGAL: u32 = 10044;

/// The reply to a callback record the server sent on the back channel, and the file
/// handles it recalls: CB_NULL, or CB_COMPOUND of CB_SEQUENCE and CB_RECALLs (all
/// this client takes delegations for; any other operation is answered
/// NFS4ERR_OP_ILLEGAL, which ends the compound, as RFC 8881 20 has it).
pub(crate) fn answer_callback(record: &[u8]) -> Result<(Vec<u8>, Vec<Vec<u8>>)> {
    let call = nfs::rpc::decode_call(record).map_err(|e| anyhow!("callback header: {e:?}"))?;
    let mut reply = nfs::rpc::accepted(call.xid, nfs::rpc::Accept::Success);
    let mut recalls = Vec::new();
    if call.procedure == 0 {
        return Ok((reply.buf, recalls));
    }
    let mut d = Decoder::new(&record[call.args_at..]);
    let tag = d.opaque(1024)?.to_vec();
    let _minor = d.u32()?;
    let _ident = d.u32()?;
    let n = d.u32()?;
    let mut results = Encoder::new();
    let (mut status, mut done) = (0u32, 0u32);
    for _ in 0..n.min(16) {
        let opnum = d.u32()?;
        done += 1;
        match opnum {
            CB_SEQUENCE => {
                let session = d.fixed(16)?.to_vec();
                let (seq, slot, highest) = (d.u32()?, d.u32()?, d.u32()?);
                let _cache = d.bool()?;
                let referring = d.u32()?;
                if referring != 0 {
                    bail!("CB_SEQUENCE with referring calls");
                }
                results.u32(opnum).u32(0).fixed(&session);
                results.u32(seq).u32(slot).u32(highest).u32(highest);
            }
            CB_RECALL => {
                let _stateid = Stateid::decode(&mut d)?;
                let _truncate = d.bool()?;
                recalls.push(d.opaque(nfs::v4::FHSIZE4)?.to_vec());
                results.u32(opnum).u32(0);
            }
            _ => {
                status = NFS4ERR_OP_ILLEGAL;
                results.u32(nfs::v4::op::ILLEGAL).u32(status);
                break;
            }
        }
    }
    reply.u32(status).opaque(&tag).u32(done);
    reply.buf.extend_from_slice(&results.buf);
    Ok((reply.buf, recalls))
}

/// OPEN4_SHARE_ACCESS_WANT_NO_DELEG (RFC 8881 18.16.3): the load generator keeps no
/// cache that a delegation would serve.
const WANT_NO_DELEG: u32 = 0x0400;

/// GETATTR's result for ATTR_TYPE, ATTR_SIZE and ATTR_FILEID, which come in that
/// order (the attribute numbers' order).
fn attr_from(d: &mut Decoder<'_>) -> Result<Attr> {
    let words = d.u32()?;
    let mut mask = [0u32; 2];
    for i in 0..words {
        let w = d.u32()?;
        if let Some(m) = mask.get_mut(i as usize) {
            *m = w;
        } else if w != 0 {
            bail!("GETATTR: attributes past the ones asked for");
        }
    }
    let asked = (1 << ATTR_TYPE) | (1 << ATTR_SIZE) | (1 << ATTR_FILEID);
    if mask != [asked, 0] {
        bail!("GETATTR: attributes {mask:x?} where {asked:x} was asked");
    }
    let mut body = Decoder::new(d.opaque(1 << 16)?);
    Ok(Attr {
        ftype: body.u32()?,
        size: body.u64()?,
        fileid: body.u64()?,
    })
}

pub fn finish_read(reply: Reply) -> Result<ReadOk> {
    let (data, eof) = {
        let mut d = last_result(&reply, "READ", op::READ)?;
        let eof = d.bool()?;
        let start = d.position() + 4;
        let bytes = d.opaque(usize::MAX)?;
        (start..start + bytes.len(), eof)
    };
    Ok(ReadOk { reply, data, eof })
}

pub fn finish_write(reply: Reply, len: usize, stable: Stable) -> Result<Verifier> {
    let mut d = last_result(&reply, "WRITE", op::WRITE)?;
    crate::client::write_result(&mut d, len, stable)
}

fn attr_of(r: &CompoundReply) -> Result<Attr> {
    let a = r
        .find(op::GETATTR)
        .and_then(|o| o.attrs())
        .ok_or_else(|| anyhow!("GETATTR result"))?;
    Ok(Attr {
        ftype: a.kind.unwrap_or(0),
        size: a.size.unwrap_or(0),
        fileid: a.fileid.unwrap_or(0),
    })
}

fn fh_of(r: &CompoundReply) -> Result<Fh> {
    r.find(op::GETFH)
        .and_then(|o| o.fh())
        .map(|h| Fh(h.to_vec()))
        .ok_or_else(|| anyhow!("GETFH result"))
}

impl Nfs {
    fn session(&self) -> &Session {
        self.v4.as_ref().expect("an NFSv4.1 connection")
    }

    /// The handle of `export` (`/pool/fs`), by LOOKUPs from the pseudo root.
    pub fn v4_mount(&self, export: &str) -> Result<Fh> {
        let r = self.session().call(&self.conn, |c| {
            c.putrootfh();
            for part in export.split('/').filter(|p| !p.is_empty()) {
                c.lookup(part);
            }
            c.getfh();
        })?;
        check(&r).with_context(|| format!("mounting {export} over NFSv4.1"))?;
        fh_of(&r)
    }

    pub(crate) fn v4_getattr(&self, s: &Session, fh: &Fh) -> Result<Attr> {
        let reply = s.call_raw(&self.conn, |c| {
            c.putfh(&fh.0).getattr(&[ATTR_TYPE, ATTR_SIZE, ATTR_FILEID]);
        })?;
        let mut r = Results::new(&reply, "GETATTR")?;
        r.next(op::PUTFH)?;
        attr_from(r.next(op::GETATTR)?)
    }

    pub(crate) fn v4_truncate(&self, s: &Session, fh: &Fh, size: u64) -> Result<()> {
        let r = s.call(&self.conn, |c| {
            c.putfh(&fh.0)
                .setattr(&Stateid::ANONYMOUS, &SetAttrs::size(size));
        })?;
        check(&r)
    }

    pub(crate) fn v4_lookup(
        &self,
        s: &Session,
        dir: &Fh,
        name: &str,
    ) -> Result<Option<(Fh, Option<Attr>)>> {
        let r = s.call(&self.conn, |c| {
            c.putfh(&dir.0)
                .lookup(name)
                .getfh()
                .getattr(&[ATTR_TYPE, ATTR_SIZE, ATTR_FILEID]);
        })?;
        if status_of(&r, op::LOOKUP) == Some(NOENT) {
            return Ok(None);
        }
        check(&r).with_context(|| format!("LOOKUP {name}"))?;
        Ok(Some((fh_of(&r)?, Some(attr_of(&r)?))))
    }

    /// OPEN (create, UNCHECKED, mode 0644, size 0 when `truncate`), GETFH and CLOSE of
    /// the current stateid, in one COMPOUND: one round trip, as NFSv3's CREATE.
    pub(crate) fn v4_create(
        &self,
        s: &Session,
        dir: &Fh,
        name: &str,
        truncate: bool,
    ) -> Result<Fh> {
        let attrs = SetAttrs {
            mode: Some(0o644),
            size: truncate.then_some(0),
        };
        let (clientid, owner) = (s.inner.clientid, &s.inner.owner);
        let reply = s.call_raw(&self.conn, |c| {
            c.putfh(&dir.0)
                .open(
                    3,
                    0,
                    clientid,
                    owner,
                    &OpenHow::Unchecked(attrs),
                    &Claim::Null(name),
                )
                .getfh()
                .close(&Stateid::CURRENT);
        })?;
        let what = format!("OPEN (create) {name}");
        let mut r = Results::new(&reply, &what)?;
        r.next(op::PUTFH)?;
        skip_open_result(r.next(op::OPEN)?)?;
        let fh = Fh(r.next(op::GETFH)?.opaque(nfs::v4::FHSIZE4)?.to_vec());
        r.next(op::CLOSE)?;
        Ok(fh)
    }

    /// OPEN (create, UNCHECKED, mode 0644, size 0), GETFH, WRITE of `data` at 0
    /// (FILE_SYNC, on the OPEN's stateid) and CLOSE, in one COMPOUND: a small file
    /// made and on stable storage in one round trip, where NFSv3 takes CREATE and
    /// WRITE.
    pub(crate) fn v4_create_with_data(
        &self,
        s: &Session,
        dir: &Fh,
        name: &str,
        data: &[u8],
    ) -> Result<(Fh, Option<Stateid>)> {
        let attrs = SetAttrs {
            mode: Some(0o644),
            size: Some(0),
        };
        let (clientid, owner) = (s.inner.clientid, &s.inner.owner);
        let want = if s.inner.delegations {
            0
        } else {
            WANT_NO_DELEG
        };
        let reply = s.call_raw(&self.conn, |c| {
            c.putfh(&dir.0)
                .open(
                    3 | want,
                    0,
                    clientid,
                    owner,
                    &OpenHow::Unchecked(attrs),
                    &Claim::Null(name),
                )
                .getfh()
                .write(&Stateid::CURRENT, 0, Stable::FileSync as u32, data)
                .close(&Stateid::CURRENT);
        })?;
        let what = format!("OPEN (create), WRITE, CLOSE {name}");
        let mut r = Results::new(&reply, &what)?;
        r.next(op::PUTFH)?;
        let deleg = open_result(r.next(op::OPEN)?)?;
        let fh = Fh(r.next(op::GETFH)?.opaque(nfs::v4::FHSIZE4)?.to_vec());
        crate::client::write_result(r.next(op::WRITE)?, data.len(), Stable::FileSync)?;
        r.next(op::CLOSE)?;
        // Only a write delegation covers what this client does next (stat and read
        // what it wrote); a read delegation on a write open would be the server's
        // odd choice, and is given back with the file's REMOVE all the same.
        Ok((fh, deleg.map(|(stateid, _write)| stateid)))
    }

    /// OPEN of `name` in `dir` for reading, READ of up to `count` bytes at 0 on its
    /// stateid, and CLOSE, in one COMPOUND; the bytes read.
    pub(crate) fn v4_open_read_close(
        &self,
        s: &Session,
        dir: &Fh,
        name: &str,
        count: u32,
    ) -> Result<usize> {
        let (clientid, owner) = (s.inner.clientid, &s.inner.owner);
        let reply = s.call_raw(&self.conn, |c| {
            c.putfh(&dir.0)
                .open(
                    1 | WANT_NO_DELEG,
                    0,
                    clientid,
                    owner,
                    &OpenHow::NoCreate,
                    &Claim::Null(name),
                )
                .read(&Stateid::CURRENT, 0, count)
                .close(&Stateid::CURRENT);
        })?;
        let what = format!("OPEN, READ, CLOSE {name}");
        let mut r = Results::new(&reply, &what)?;
        r.next(op::PUTFH)?;
        skip_open_result(r.next(op::OPEN)?)?;
        let d = r.next(op::READ)?;
        let _eof = d.bool()?;
        let n = d.opaque(count as usize)?.len();
        r.next(op::CLOSE)?;
        Ok(n)
    }

    pub(crate) fn v4_mkdir(&self, s: &Session, dir: &Fh, name: &str) -> Result<Fh> {
        let r = s.call(&self.conn, |c| {
            c.putfh(&dir.0).mkdir(name, &SetAttrs::mode(0o755)).getfh();
        })?;
        if status_of(&r, op::CREATE) == Some(EXIST) {
            // Another client made it first.
            return self
                .v4_lookup(s, dir, name)?
                .map(|(fh, _)| fh)
                .ok_or_else(|| anyhow!("MKDIR {name}: exists, but the name is not found"));
        }
        check(&r).with_context(|| format!("MKDIR {name}"))?;
        fh_of(&r)
    }

    pub(crate) fn v4_rename(
        &self,
        s: &Session,
        from_dir: &Fh,
        from: &str,
        to_dir: &Fh,
        to: &str,
    ) -> Result<()> {
        let reply = s.call_raw(&self.conn, |c| {
            c.putfh(&from_dir.0)
                .savefh()
                .putfh(&to_dir.0)
                .rename(from, to);
        })?;
        let what = format!("RENAME {from} {to}");
        let mut r = Results::new(&reply, &what)?;
        r.next(op::PUTFH)?;
        r.next(op::SAVEFH)?;
        r.next(op::PUTFH)?;
        r.next(op::RENAME)?;
        Ok(())
    }

    /// DELEGRETURN of `fh`'s delegation and REMOVE of `name` in `dir`, in one
    /// COMPOUND (as the Linux client piggybacks it). A delegation the server no
    /// longer knows (revoked, or dropped) is no reason to fail: the REMOVE goes alone.
    pub(crate) fn v4_return_and_remove(
        &self,
        s: &Session,
        dir: &Fh,
        name: &str,
        fh: &Fh,
        deleg: &Stateid,
    ) -> Result<bool> {
        let r = s.call(&self.conn, |c| {
            c.putfh(&fh.0).delegreturn(deleg);
            c.putfh(&dir.0).remove(name);
        })?;
        self.conn.returned(&fh.0);
        match status_of(&r, op::DELEGRETURN) {
            Some(0) => {}
            Some(status) => {
                eprintln!("note: DELEGRETURN refused ({status}); removing without it");
                return self.v4_remove(s, dir, name);
            }
            None => check(&r).context("DELEGRETURN")?,
        }
        match status_of(&r, op::REMOVE) {
            Some(0) => Ok(true),
            Some(NOENT) => Ok(false),
            _ => {
                check(&r).with_context(|| format!("REMOVE {name}"))?;
                Ok(true)
            }
        }
    }

    /// DELEGRETURN of `fh`'s delegation alone (after a recall).
    pub(crate) fn v4_delegreturn(&self, s: &Session, fh: &Fh, deleg: &Stateid) -> Result<()> {
        let r = s.call(&self.conn, |c| {
            c.putfh(&fh.0).delegreturn(deleg);
        })?;
        self.conn.returned(&fh.0);
        match status_of(&r, op::DELEGRETURN) {
            Some(0) | None => check(&r).context("DELEGRETURN"),
            Some(status) => {
                eprintln!("note: DELEGRETURN refused after a recall ({status})");
                Ok(())
            }
        }
    }

    /// REMOVE of a file or a directory; a missing name is `false`.
    pub(crate) fn v4_remove(&self, s: &Session, dir: &Fh, name: &str) -> Result<bool> {
        let reply = s.call_raw(&self.conn, |c| {
            c.putfh(&dir.0).remove(name);
        })?;
        let what = format!("REMOVE {name}");
        let mut r = Results::new(&reply, &what)?;
        r.next(op::PUTFH)?;
        match r.next(op::REMOVE) {
            Ok(_) => Ok(true),
            Err(e) if NfsStatus::of(&e) == Some(NOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn v4_start_read(
        &self,
        s: &Session,
        fh: &Fh,
        offset: u64,
        count: u32,
    ) -> Result<Call> {
        s.start(&self.conn, fh, op::READ, |e| {
            anonymous(e);
            e.u64(offset).u32(count);
        })
    }

    pub(crate) fn v4_start_write(
        &self,
        s: &Session,
        fh: &Fh,
        offset: u64,
        data: &[u8],
        stable: Stable,
    ) -> Result<Call> {
        s.start(&self.conn, fh, op::WRITE, |e| {
            anonymous(e);
            e.u64(offset).u32(stable as u32).opaque(data);
        })
    }

    pub(crate) fn v4_commit(&self, s: &Session, fh: &Fh) -> Result<Verifier> {
        let reply = s
            .start(&self.conn, fh, op::COMMIT, |e| {
                e.u64(0).u32(0);
            })?
            .wait()?;
        let mut d = last_result(&reply, "COMMIT", op::COMMIT)?;
        Ok(d.fixed(8)?.try_into().unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs::rpc::{AuthSys, Credential};

    /// A CB_COMPOUND as a server sends a recall: CB_SEQUENCE, then CB_RECALL.
    fn recall_record(ops: &[u32]) -> Vec<u8> {
        let cred = Credential::Sys(AuthSys {
            stamp: 0,
            machine: b"server".to_vec(),
            uid: 0,
            gid: 0,
            gids: vec![],
        });
        let mut e = nfs::rpc::encode_call(77, 0x4000_0000, 1, 1, &cred);
        e.opaque(b"tag").u32(2).u32(0).u32(ops.len() as u32);
        for &opnum in ops {
            e.u32(opnum);
            match opnum {
                CB_SEQUENCE => {
                    e.fixed(&[9; 16]).u32(5).u32(0).u32(0).bool(false).u32(0);
                }
                CB_RECALL => {
                    Stateid::ANONYMOUS.encode(&mut e);
                    e.bool(false).opaque(b"the-handle");
                }
                _ => {}
            }
        }
        e.buf
    }

    #[test]
    fn a_recall_is_answered_and_its_handle_marked() {
        let (reply, recalls) = answer_callback(&recall_record(&[CB_SEQUENCE, CB_RECALL])).unwrap();
        assert_eq!(recalls, vec![b"the-handle".to_vec()]);
        let mut d = Decoder::new(&reply);
        assert_eq!(d.u32().unwrap(), 77, "xid");
        assert_eq!(d.u32().unwrap(), nfs::rpc::MSG_REPLY);
        assert_eq!((d.u32().unwrap(), d.u32().unwrap()), (0, 0), "accepted");
        d.opaque(400).unwrap();
        assert_eq!(d.u32().unwrap(), 0, "SUCCESS");
        assert_eq!(d.u32().unwrap(), 0, "CB_COMPOUND status");
        assert_eq!(d.opaque(100).unwrap(), b"tag");
        assert_eq!(d.u32().unwrap(), 2, "two results");
        assert_eq!((d.u32().unwrap(), d.u32().unwrap()), (CB_SEQUENCE, 0));
        assert_eq!(d.fixed(16).unwrap(), &[9; 16]);
        assert_eq!(d.u32().unwrap(), 5, "the sequence id echoed");
        d.fixed(12).unwrap();
        assert_eq!((d.u32().unwrap(), d.u32().unwrap()), (CB_RECALL, 0));
        assert!(d.u32().is_err(), "nothing more");
    }

    #[test]
    fn an_unknown_callback_operation_ends_the_compound_with_op_illegal() {
        let (reply, recalls) =
            answer_callback(&recall_record(&[CB_SEQUENCE, 99, CB_RECALL])).unwrap();
        assert!(recalls.is_empty());
        let mut d = Decoder::new(&reply);
        d.fixed(16).unwrap(); // xid, reply, accepted, verifier flavour
        d.opaque(400).unwrap();
        assert_eq!(d.u32().unwrap(), 0, "SUCCESS");
        assert_eq!(d.u32().unwrap(), NFS4ERR_OP_ILLEGAL);
        d.opaque(100).unwrap();
        assert_eq!(d.u32().unwrap(), 2, "CB_SEQUENCE and the illegal one");
    }
}
