//! Read and write delegations: granting one at OPEN, DELEGRETURN, and recalling them
//! over the back channel (CB_COMPOUND of CB_SEQUENCE and CB_RECALL, RFC 8881 sections
//! 10.4, 20.2 and 20.9; for a 4.0 client CB_RECALL alone with its callback_ident,
//! RFC 7530 section 16.2) when anyone else, over NFSv4 or NFSv3, changes the file or
//! locks it, or (a write delegation) reads it: opens it, READs it, or asks for its
//! size or change attribute.
//!
//! A write delegation lets its holder open, stat and read the file without asking the
//! server. It is handed out with a space limit of zero bytes, which tells the client
//! to write its cached data back at each CLOSE (RFC 8881 10.4.1; the Linux client
//! flushes on close when its modified pages exceed the limit), so what others see of
//! the file after its holder closed it is what NFSv3's close-to-open promises. An
//! NFSv3 GETATTR does not recall one (as Linux's server): NFSv3 has no way to ask
//! fresher than close-to-open.
//!
//! A change that meets a delegation is answered DELAY (NFSv3: JUKEBOX) while the
//! recall is out; the client retries, and goes ahead once the holder has returned
//! the delegation, or once a lease has passed since the recall (the delegation is
//! then revoked). A recall answered BADHANDLE or BAD_STATEID (the client has not yet
//! seen the OPEN reply that granted the delegation) is sent again, `RECALL_TRIES`
//! times in all. Callbacks are sent from a thread of their own, never from a worker
//! that holds a call, and never under the state lock.

use super::compound::{decode_stateid, encode_stateid, Ctx, OpOut};
use super::state::{FileKey, Recall, StateRef, Stateid, V4State};
use super::{Nfs4Error, OpResult};
use crate::rpc;
use crate::service::NfsService;
use crate::xdr::{Decoder, Encoder};
use std::time::Duration;

const CB_COMPOUND: u32 = 1;
const CB_VERSION: u32 = 1;
const OP_CB_RECALL: u32 = 4;
const OP_CB_SEQUENCE: u32 = 11;
/// How long one CB_RECALL waits for the client's reply.
const CALLBACK_TIMEOUT: Duration = Duration::from_secs(10);
/// OPEN4_SHARE_ACCESS_WANT_NO_DELEG, in share_access's want bits.
pub const WANT_NO_DELEG: u32 = 0x0400;
const WANT_MASK: u32 = 0xff00;

/// OPEN4_SHARE_ACCESS_WANT_CANCEL.
const WANT_CANCEL: u32 = 0x0500;

/// open_delegation4 when none is handed out. A client that said what it wants
/// (4.1's want bits) is told why not (OPEN_DELEGATE_NONE_EXT, RFC 8881 18.16.3):
/// WND4_NOT_WANTED for WANT_NO_DELEG, WND4_CANCELLED for WANT_CANCEL, otherwise
/// WND4_CONTENTION (others use the file, or it cannot be called back), with no
/// promise to push one later. Others get plain OPEN_DELEGATE_NONE.
pub fn encode_no_delegation(e: &mut Encoder, share_access: u32, minor: u32) {
    let want = share_access & WANT_MASK;
    if minor == 0 || want == 0 {
        e.u32(0); // OPEN_DELEGATE_NONE
        return;
    }
    e.u32(3); // OPEN_DELEGATE_NONE_EXT
    match want {
        WANT_NO_DELEG => {
            e.u32(0); // WND4_NOT_WANTED
        }
        WANT_CANCEL => {
            e.u32(7); // WND4_CANCELLED
        }
        _ => {
            e.u32(1).bool(false); // WND4_CONTENTION, ond_server_will_push_deleg
        }
    }
}

/// Whether an OPEN's want bits leave room for a delegation.
pub fn wants_delegation(share_access: u32) -> bool {
    !matches!(share_access & WANT_MASK, WANT_NO_DELEG | WANT_CANCEL)
}

/// open_delegation4 of a read delegation: its stateid, whether it is recalled
/// already (a reclaim that could not be granted cleanly), and an empty ACE (the
/// client checks access itself, with ACCESS).
pub fn encode_read_delegation(e: &mut Encoder, stateid: &Stateid, recall: bool) {
    e.u32(1); // OPEN_DELEGATE_READ
    encode_stateid(e, stateid);
    e.bool(recall);
    e.u32(0).u32(0).u32(0).opaque(b""); // nfsace4: ALLOWED, no flags, no mask, no who
}

/// open_delegation4 of a write delegation: its stateid, whether it is recalled
/// already, a space limit of zero bytes (flush at close), and an empty ACE.
pub fn encode_write_delegation(e: &mut Encoder, stateid: &Stateid, recall: bool) {
    e.u32(2); // OPEN_DELEGATE_WRITE
    encode_stateid(e, stateid);
    e.bool(recall);
    e.u32(1).u64(0); // nfs_space_limit4: NFS_LIMIT_SIZE, filesize 0
    e.u32(0).u32(0).u32(0).opaque(b"");
}

impl NfsService {
    /// Whether any client holds a delegation (without the state lock).
    pub(crate) fn delegations_exist(&self) -> bool {
        self.v4
            .deleg_count
            .load(std::sync::atomic::Ordering::Acquire)
            != 0
    }

    /// Clears the way for access to object `ino` of the filesystem of fsid `fsid`
    /// (`service::fsid_for`) from outside NFS (a local FUSE mount of the same dataset):
    /// `true` when no delegation is in the way; otherwise the ones not yet recalled
    /// are, and the caller asks again until the holders have given them back or a
    /// lease has passed since the recall (they are then revoked). A `change` meets
    /// every delegation of the file, a read only write delegations, as the same access
    /// over NFS would.
    pub fn clear_for_local_access(&self, fsid: u64, ino: u64, change: bool) -> bool {
        let file = (fsid, ino);
        if change {
            self.break_delegations(file, None)
        } else {
            self.break_write_delegations(file, None)
        }
    }

    /// The NFSv4 lease: a recalled delegation not given back within it is revoked at
    /// the next access that meets it.
    pub fn v4_lease(&self) -> Duration {
        Duration::from_secs(
            self.v4
                .lease
                .load(std::sync::atomic::Ordering::Relaxed)
                .into(),
        )
    }

    /// `break_delegations` of the files `names` (directory, name) lead to in `fs`, the
    /// ones a REMOVE or RENAME takes a name from: the names are looked up only while
    /// some delegation exists; a name that leads nowhere is in nobody's way.
    pub(crate) fn break_delegations_of_names(
        &self,
        fs: &fs::Filesystem,
        fsid: u64,
        names: &[(u64, &[u8])],
        holder: Option<u64>,
    ) -> bool {
        if !self.delegations_exist() {
            return true;
        }
        names
            .iter()
            .filter_map(|(dir, name)| fs.lookup(*dir, name).ok())
            .all(|a| self.break_delegations((fsid, a.ino), holder))
    }

    /// Clears the way for a change to `file` (or a lock on it): `true` when no
    /// delegation is in the way; otherwise the ones not yet recalled are, and the
    /// caller answers DELAY (JUKEBOX). `holder`: the client making the change, whose
    /// own recalled delegation does not stop it.
    pub(crate) fn break_delegations(&self, file: FileKey, holder: Option<u64>) -> bool {
        // The common case, no delegation anywhere: no lock taken on every change.
        if !self.delegations_exist() {
            return true;
        }
        self.recall_in_the_way(|st| st.break_delegations(file, holder))
    }

    /// Runs `find` (one of `V4State`'s break_* methods) under the state lock, sends
    /// the recalls it made after letting go of the lock, and says whether the way is
    /// clear.
    fn recall_in_the_way(&self, find: impl FnOnce(&mut V4State) -> (bool, Vec<Recall>)) -> bool {
        let (clear, recalls) = find(&mut self.v4.state.lock().unwrap());
        send_recalls(recalls);
        clear
    }

    /// As `break_delegations`, for a read of `file` by anyone but `holder`: only write
    /// delegations are in its way.
    pub(crate) fn break_write_delegations(&self, file: FileKey, holder: Option<u64>) -> bool {
        if !self.delegations_exist() {
            return true;
        }
        self.recall_in_the_way(|st| st.break_write_delegations(file, holder))
    }

    pub(crate) fn op_delegreturn(&self, ctx: &mut Ctx<'_, '_>, d: &mut Decoder<'_>) -> OpOut {
        let s = ctx.stateid(decode_stateid(d)?)?;
        let client = ctx.client()?;
        let key = match ctx.cur()? {
            super::pseudo::Fh::Pseudo(_) => return Err(Nfs4Error::BadStateId.into()),
            super::pseudo::Fh::File(h) => {
                let t = self.target(ctx.call, h)?;
                (t.fsid, t.ino)
            }
        };
        let mut st = self.v4.state.lock().unwrap();
        match st.lookup(&s)? {
            StateRef::Deleg(id) => Ok(st.delegreturn(id, client, key)?),
            _ => Err(Nfs4Error::BadStateId.into()),
        }
    }

    /// Clears the way for an OPEN (`V4State::break_for_open`): DELAY while a
    /// delegation in its way is out.
    pub(crate) fn clear_for_open(
        &self,
        file: FileKey,
        client: u64,
        owner: &[u8],
        writes: bool,
        claims_delegation: bool,
    ) -> OpResult<()> {
        if !self.delegations_exist() {
            return Ok(());
        }
        let clear = self.recall_in_the_way(|st| {
            st.break_for_open(file, client, owner, writes, claims_delegation)
        });
        if clear {
            Ok(())
        } else {
            Err(Nfs4Error::Delay)
        }
    }

    /// The v4 answer to a read that met a write delegation being recalled.
    pub(crate) fn clear_for_read(&self, file: FileKey, holder: Option<u64>) -> OpResult<()> {
        if self.break_write_delegations(file, holder) {
            Ok(())
        } else {
            Err(Nfs4Error::Delay)
        }
    }

    /// The v4 answer to a change that met a delegation being recalled.
    pub(crate) fn clear_for_change(&self, file: FileKey, holder: Option<u64>) -> OpResult<()> {
        if self.break_delegations(file, holder) {
            Ok(())
        } else {
            Err(Nfs4Error::Delay)
        }
    }
}

/// How often a recall is sent while the client answers it does not know the
/// delegation, and how long apart.
const RECALL_TRIES: u32 = 3;
const RECALL_RETRY_AFTER: Duration = Duration::from_secs(1);
const NFS4ERR_BADHANDLE: u32 = 10001;
const NFS4ERR_BAD_STATEID: u32 = 10025;

/// Sends each recall from a thread of its own (never from a worker holding a call).
pub(crate) fn send_recalls(recalls: Vec<Recall>) {
    for r in recalls {
        let spawned = std::thread::Builder::new()
            .name("nfs4-recall".into())
            .spawn(move || send_recall(r));
        if let Err(e) = spawned {
            tracing::warn!("no thread for a delegation recall: {e}");
        }
    }
}

/// CB_COMPOUND { CB_SEQUENCE, CB_RECALL } to the holder; its answer only tells that
/// the client heard (it returns the delegation with DELEGRETURN).
fn send_recall(r: Recall) {
    let (conn, program, slot) = &r.back;
    // The credentials the client gave for its callbacks (RFC 8881 18.36.4).
    let cred = &r.cred;
    // BADHANDLE or BAD_STATEID: the client does not know the delegation yet, as when
    // the recall overtook the OPEN reply that granted it; asked again a moment later
    // (the slot free meanwhile).
    for attempt in 1..=RECALL_TRIES {
        let mut seq = slot.lock().unwrap();
        let slot_seq = *seq;
        let record = |xid: u32| {
            let mut e = rpc::encode_call(xid, *program, CB_VERSION, CB_COMPOUND, cred);
            if r.minor == 0 {
                // NFSv4.0: the client's callback_ident, and CB_RECALL alone.
                e.opaque(b"").u32(0).u32(r.ident).u32(1);
            } else {
                e.opaque(b"").u32(r.minor).u32(0).u32(2);
                e.u32(OP_CB_SEQUENCE)
                    .fixed(&r.session)
                    .u32(slot_seq)
                    .u32(0)
                    .u32(0)
                    .bool(false)
                    .u32(0);
            }
            e.u32(OP_CB_RECALL);
            encode_stateid(&mut e, &r.stateid);
            e.bool(false).opaque(&r.fh);
            e.buf
        };
        let status = match conn.call(&record, CALLBACK_TIMEOUT) {
            Ok(reply) => {
                // The slot's request was heard: the next one takes the next id.
                *seq = seq.wrapping_add(1);
                compound_status(&reply)
            }
            Err(e) => {
                tracing::info!("CB_RECALL got no answer: {e}");
                return;
            }
        };
        drop(seq);
        match status {
            Some(0) => tracing::info!(minor = r.minor, "delegation recalled (CB_RECALL answered)"),
            Some(s @ (NFS4ERR_BADHANDLE | NFS4ERR_BAD_STATEID)) if attempt < RECALL_TRIES => {
                tracing::debug!(
                    status = s,
                    "CB_RECALL: delegation not known yet, asked again"
                );
                std::thread::sleep(RECALL_RETRY_AFTER);
                continue;
            }
            Some(s) => tracing::info!(status = s, "CB_RECALL answered with an error"),
            None => tracing::info!("CB_RECALL answered with a reply that does not decode"),
        }
        return;
    }
}

/// The status of a CB_COMPOUND reply (after the accepted RPC header).
fn compound_status(reply: &[u8]) -> Option<u32> {
    let mut d = Decoder::new(reply);
    d.u32().ok()?; // xid
    if d.u32().ok()? != rpc::MSG_REPLY || d.u32().ok()? != 0 {
        return None;
    }
    d.u32().ok()?;
    d.opaque(400).ok()?;
    if d.u32().ok()? != 0 {
        return None;
    }
    d.u32().ok()
}
