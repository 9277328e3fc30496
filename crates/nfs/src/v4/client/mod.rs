//! A small NFSv4.1 client codec (RFC 8881): COMPOUND calls built operation by
//! operation, and COMPOUND replies decoded back into one result per operation. The
//! protocol tests (`tests/v4_*.rs`) drive the server with it; it is transport
//! free, so the same bytes can go through `transport::answer_record` or a socket.
//!
//! What it owns:
//! - `Compound`: the builder of COMPOUND4args (tag, minor version, operations) with an
//!   encoder for each operation the tests use, and `Compound::record`, which wraps the
//!   arguments in an ONC RPC call (program 100003, version 4, procedure 1).
//! - `decode_reply` (in `reply.rs`): an RPC reply to a COMPOUND read into a `CompoundReply`, each
//!   operation's status, the raw bytes of its results and, for the operations whose
//!   results anyone inspects, those results parsed (`Res`). A failed operation has
//!   results only for SETATTR (attrsset) and LOCK and LOCKT denied (LOCK4denied).
//! - `Session`: a client ID and session with the sequence id of one slot, which starts
//!   each COMPOUND with the right SEQUENCE so that tests stay short.
//!
//! Invariants: the decoder is strict. Results are not length-prefixed in XDR, so every
//! operation's results must be parsed exactly to find where the next one starts; a
//! result that does not parse as RFC 8881 lays it out (including an fattr4 whose
//! values do not fill its opaque exactly) is an error, never a guess, so a server that
//! encodes something wrong shows up as a `ReplyError`. Encoders never check their
//! arguments: tests must be able to send what a server has to refuse.

use super::{op, FHSIZE4, OPAQUE_LIMIT};
use crate::proto::{NFS_PROGRAM, NFS_V4};
use crate::rpc::{self, Credential};
use crate::xdr::{Decoder, Encoder, XdrError, XdrResult};
use std::fmt;

/// NULL and COMPOUND, the two procedures of NFSv4.
pub const PROC_NULL: u32 = 0;
pub const PROC_COMPOUND: u32 = 1;

/// share_access and share_deny of OPEN and OPEN_DOWNGRADE.
pub const SHARE_ACCESS_READ: u32 = 1;
pub const SHARE_ACCESS_WRITE: u32 = 2;
pub const SHARE_ACCESS_BOTH: u32 = 3;
pub const SHARE_DENY_NONE: u32 = 0;
pub const SHARE_DENY_READ: u32 = 1;
pub const SHARE_DENY_WRITE: u32 = 2;
pub const SHARE_DENY_BOTH: u32 = 3;

/// OPEN4resok rflags.
pub const OPEN4_RESULT_CONFIRM: u32 = 2;
pub const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 4;
pub const OPEN4_RESULT_PRESERVE_UNLINKED: u32 = 8;

/// stable_how4 of WRITE.
pub const UNSTABLE4: u32 = 0;
pub const DATA_SYNC4: u32 = 1;
pub const FILE_SYNC4: u32 = 2;

/// nfs_lock_type4
pub const READ_LT: u32 = 1;
pub const WRITE_LT: u32 = 2;
pub const READW_LT: u32 = 3;
pub const WRITEW_LT: u32 = 4;

/// nfs_ftype4 values of the attribute `type`.
pub const NF4REG: u32 = 1;
pub const NF4DIR: u32 = 2;
pub const NF4LNK: u32 = 5;

/// Attribute numbers the tests ask for (RFC 8881 section 5).
pub mod attr {
    pub const SUPPORTED_ATTRS: u32 = 0;
    pub const TYPE: u32 = 1;
    pub const CHANGE: u32 = 3;
    pub const SIZE: u32 = 4;
    pub const FSID: u32 = 8;
    pub const LEASE_TIME: u32 = 10;
    pub const FILEHANDLE: u32 = 19;
    pub const FILEID: u32 = 20;
    pub const MODE: u32 = 33;
    pub const NUMLINKS: u32 = 35;
    pub const OWNER: u32 = 36;
    pub const OWNER_GROUP: u32 = 37;
    pub const TIME_ACCESS_SET: u32 = 48;
    pub const TIME_MODIFY: u32 = 53;
    pub const TIME_MODIFY_SET: u32 = 54;
    pub const MOUNTED_ON_FILEID: u32 = 55;
}

/// SEQ4_STATUS flags of SEQUENCE results (RFC 8881 section 18.46.3).
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x0000_0001;
pub const SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED: u32 = 0x0000_0008;
pub const SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED: u32 = 0x0000_0010;
pub const SEQ4_STATUS_ADMIN_STATE_REVOKED: u32 = 0x0000_0020;
pub const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x0000_0040;
pub const SEQ4_STATUS_CB_PATH_DOWN_SESSION: u32 = 0x0000_0200;

/// A NULL call to NFSv4 (procedure 0, no arguments), as a record.
pub fn null_record(xid: u32, cred: &Credential) -> Vec<u8> {
    rpc::encode_call(xid, NFS_PROGRAM, NFS_V4, PROC_NULL, cred).buf
}

/// stateid4
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stateid {
    pub seqid: u32,
    pub other: [u8; 12],
}

impl Stateid {
    /// The anonymous stateid (all zeros).
    pub const ANONYMOUS: Stateid = Stateid {
        seqid: 0,
        other: [0; 12],
    };
    /// The READ bypass stateid (all ones).
    pub const BYPASS: Stateid = Stateid {
        seqid: u32::MAX,
        other: [0xff; 12],
    };
    /// "The current stateid" of the COMPOUND (RFC 8881 section 16.2.3.1.2).
    pub const CURRENT: Stateid = Stateid {
        seqid: 1,
        other: [0; 12],
    };

    pub fn encode(&self, e: &mut Encoder) {
        e.u32(self.seqid).fixed(&self.other);
    }

    pub fn decode(d: &mut Decoder<'_>) -> XdrResult<Stateid> {
        let seqid = d.u32()?;
        let other = d.fixed(12)?.try_into().expect("12 bytes");
        Ok(Stateid { seqid, other })
    }
}

/// A bitmap4 from attribute numbers.
pub fn bitmap(attrs: &[u32]) -> Vec<u32> {
    let words = attrs.iter().map(|a| a / 32 + 1).max().unwrap_or(0) as usize;
    let mut w = vec![0u32; words];
    for a in attrs {
        w[(a / 32) as usize] |= 1 << (a % 32);
    }
    w
}

fn encode_bitmap(e: &mut Encoder, words: &[u32]) {
    e.u32(words.len() as u32);
    for w in words {
        e.u32(*w);
    }
}

fn decode_bitmap(d: &mut Decoder<'_>) -> XdrResult<Vec<u32>> {
    let n = d.u32()? as usize;
    if n > 8 {
        return Err(XdrError("bitmap of more than 8 words"));
    }
    (0..n).map(|_| d.u32()).collect()
}

/// Whether attribute `a` is in a bitmap4.
pub fn bitmap_has(words: &[u32], a: u32) -> bool {
    words
        .get((a / 32) as usize)
        .is_some_and(|w| w & (1 << (a % 32)) != 0)
}

/// Attributes to set (SETATTR, and the create attributes of OPEN and CREATE).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttrs {
    pub size: Option<u64>,
    pub mode: Option<u32>,
}

impl SetAttrs {
    pub fn mode(mode: u32) -> SetAttrs {
        SetAttrs {
            mode: Some(mode),
            ..SetAttrs::default()
        }
    }

    pub fn size(size: u64) -> SetAttrs {
        SetAttrs {
            size: Some(size),
            ..SetAttrs::default()
        }
    }

    /// fattr4: the bitmap, then the values in attribute order.
    pub fn encode(&self, e: &mut Encoder) {
        let mut bits = Vec::new();
        let mut vals = Encoder::new();
        if let Some(size) = self.size {
            bits.push(attr::SIZE);
            vals.u64(size);
        }
        if let Some(mode) = self.mode {
            bits.push(attr::MODE);
            vals.u32(mode);
        }
        encode_bitmap(e, &bitmap(&bits));
        e.opaque(&vals.buf);
    }
}

/// createhow4 of OPEN, with `NoCreate` for OPEN4_NOCREATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenHow {
    NoCreate,
    Unchecked(SetAttrs),
    Guarded(SetAttrs),
    /// EXCLUSIVE4_1: the verifier and the attributes to set.
    Exclusive41([u8; 8], SetAttrs),
}

/// open_claim4 of OPEN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim<'a> {
    /// CLAIM_NULL: a name in the current directory.
    Null(&'a str),
    /// CLAIM_FH: the current file handle itself.
    Fh,
    /// CLAIM_PREVIOUS: the current file handle, reclaimed after a server restart (no
    /// delegation held).
    Previous,
    /// CLAIM_PREVIOUS naming the delegation type the client held (1 read, 2 write).
    PreviousDelegated(u32),
    /// CLAIM_DELEG_CUR_FH: the current file handle, opened under this delegation.
    DelegCurFh(Stateid),
}

/// channel_attrs4 of CREATE_SESSION.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelAttrs {
    pub header_pad: u32,
    pub max_request: u32,
    pub max_response: u32,
    pub max_response_cached: u32,
    pub max_ops: u32,
    pub max_requests: u32,
}

impl ChannelAttrs {
    /// A fore channel fit for the tests: 1 MiB requests and replies, 64 KiB cached
    /// replies, 16 operations, 8 slots.
    pub fn fore() -> ChannelAttrs {
        ChannelAttrs {
            header_pad: 0,
            max_request: (1 << 20) + 4096,
            max_response: (1 << 20) + 4096,
            max_response_cached: 64 << 10,
            max_ops: 16,
            max_requests: 8,
        }
    }

    /// A minimal back channel (the server offers none anyway).
    pub fn back() -> ChannelAttrs {
        ChannelAttrs {
            header_pad: 0,
            max_request: 4096,
            max_response: 4096,
            max_response_cached: 0,
            max_ops: 2,
            max_requests: 1,
        }
    }

    fn encode(&self, e: &mut Encoder) {
        e.u32(self.header_pad)
            .u32(self.max_request)
            .u32(self.max_response)
            .u32(self.max_response_cached)
            .u32(self.max_ops)
            .u32(self.max_requests)
            .u32(0); // ca_rdma_ird<1>: none
    }

    fn decode(d: &mut Decoder<'_>) -> XdrResult<ChannelAttrs> {
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
            return Err(XdrError("ca_rdma_ird of more than one"));
        }
        for _ in 0..rdma {
            d.u32()?;
        }
        Ok(c)
    }
}

/// callback_sec_parms4<>: AUTH_NONE, AUTH_SYS, or (`Other`) an RPCSEC_GSS entry
/// with an empty context.
fn encode_cb_sec(e: &mut Encoder, cb_sec: &[Credential]) {
    e.u32(cb_sec.len() as u32);
    for c in cb_sec {
        match c {
            Credential::None => {
                e.u32(rpc::AUTH_NONE);
            }
            Credential::Sys(a) => {
                e.u32(rpc::AUTH_SYS)
                    .u32(a.stamp)
                    .opaque(&a.machine)
                    .u32(a.uid)
                    .u32(a.gid)
                    .u32(a.gids.len() as u32);
                for g in &a.gids {
                    e.u32(*g);
                }
            }
            Credential::Other(_) => {
                e.u32(6).u32(0).opaque(b"").opaque(b"");
            }
        }
    }
}

/// The arguments of one COMPOUND, built an operation at a time.
#[derive(Debug, Clone)]
pub struct Compound {
    tag: Vec<u8>,
    minor: u32,
    /// The operation count sent; `None`: the number of operations added.
    declared: Option<u32>,
    ops: Vec<u32>,
    args: Encoder,
    /// The sequence number OPEN, CLOSE, OPEN_DOWNGRADE, LOCK and LOCKU carry (4.0's
    /// owner sequences; 4.1 ignores them).
    seq: u32,
}

impl Compound {
    /// An empty COMPOUND of minor version 1.
    pub fn new(tag: &str) -> Compound {
        Compound {
            tag: tag.as_bytes().to_vec(),
            minor: 1,
            declared: None,
            ops: Vec::new(),
            args: Encoder::new(),
            seq: 0,
        }
    }

    /// The owner sequence number of the operations added from now on (4.0).
    pub fn seq(&mut self, seqid: u32) -> &mut Self {
        self.seq = seqid;
        self
    }

    /// Sets the minor version (tests send unsupported ones too).
    pub fn minor(&mut self, minor: u32) -> &mut Self {
        self.minor = minor;
        self
    }

    /// Sends `n` as the operation count whatever was added (TOO_MANY_OPS tests).
    pub fn declare_ops(&mut self, n: u32) -> &mut Self {
        self.declared = Some(n);
        self
    }

    /// The operations added, in order.
    pub fn ops(&self) -> &[u32] {
        &self.ops
    }

    /// COMPOUND4args: tag, minor version, operation count, operations.
    pub fn args(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        self.encode_args(&mut e);
        e.buf
    }

    /// `args` appended to `e` (no buffer of its own).
    pub fn encode_args(&self, e: &mut Encoder) {
        e.opaque(&self.tag)
            .u32(self.minor)
            .u32(self.declared.unwrap_or(self.ops.len() as u32));
        e.buf.extend_from_slice(&self.args.buf);
    }

    /// The whole RPC call: a record as `transport::answer_record` takes it (no
    /// record marking).
    pub fn record(&self, xid: u32, cred: &Credential) -> Vec<u8> {
        let mut e = rpc::encode_call(xid, NFS_PROGRAM, NFS_V4, PROC_COMPOUND, cred);
        e.buf.extend_from_slice(&self.args());
        e.buf
    }

    /// Starts operation `opnum`: its number goes out, its arguments follow.
    fn op(&mut self, opnum: u32) -> &mut Encoder {
        self.ops.push(opnum);
        self.args.u32(opnum);
        &mut self.args
    }

    /// Any operation number followed by raw argument bytes (illegal operations,
    /// malformed arguments).
    pub fn raw_op(&mut self, opnum: u32, args: &[u8]) -> &mut Self {
        self.op(opnum).buf.extend_from_slice(args);
        self
    }

    // ---- sessions ----

    pub fn sequence(
        &mut self,
        sessionid: &[u8; 16],
        seq: u32,
        slot: u32,
        highest_slot: u32,
        cachethis: bool,
    ) -> &mut Self {
        self.op(op::SEQUENCE)
            .fixed(sessionid)
            .u32(seq)
            .u32(slot)
            .u32(highest_slot)
            .bool(cachethis);
        self
    }

    /// EXCHANGE_ID with SP4_NONE and no implementation id.
    pub fn exchange_id(&mut self, verifier: &[u8; 8], owner: &[u8], flags: u32) -> &mut Self {
        self.op(op::EXCHANGE_ID)
            .fixed(verifier)
            .opaque(owner)
            .u32(flags)
            .u32(0) // SP4_NONE
            .u32(0); // eia_client_impl_id<1>: none
        self
    }

    /// CREATE_SESSION with no back channel program worth calling and AUTH_NONE.
    pub fn create_session(
        &mut self,
        clientid: u64,
        seq: u32,
        fore: &ChannelAttrs,
        back: &ChannelAttrs,
    ) -> &mut Self {
        self.create_session_with_flags(clientid, seq, 0, fore, back)
    }

    /// CREATE_SESSION with `flags` (CREATE_SESSION4_FLAG_CONN_BACK_CHAN 0x2 makes
    /// the connection the back channel).
    pub fn create_session_with_flags(
        &mut self,
        clientid: u64,
        seq: u32,
        flags: u32,
        fore: &ChannelAttrs,
        back: &ChannelAttrs,
    ) -> &mut Self {
        self.create_session_with_sec(clientid, seq, flags, fore, back, &[Credential::None])
    }

    /// CREATE_SESSION whose callbacks are to carry the first of `cb_sec` this
    /// server speaks (AUTH_NONE or AUTH_SYS; `Credential::Other(6)` stands for an
    /// RPCSEC_GSS entry, which it does not).
    pub fn create_session_with_sec(
        &mut self,
        clientid: u64,
        seq: u32,
        flags: u32,
        fore: &ChannelAttrs,
        back: &ChannelAttrs,
        cb_sec: &[Credential],
    ) -> &mut Self {
        let e = self.op(op::CREATE_SESSION);
        e.u64(clientid).u32(seq).u32(flags);
        fore.encode(e);
        back.encode(e);
        e.u32(0x4000_0000); // csa_cb_program
        encode_cb_sec(e, cb_sec);
        self
    }

    /// DELEGRETURN of the current file's delegation.
    pub fn delegreturn(&mut self, stateid: &Stateid) -> &mut Self {
        stateid.encode(self.op(op::DELEGRETURN));
        self
    }

    pub fn destroy_session(&mut self, sessionid: &[u8; 16]) -> &mut Self {
        self.op(op::DESTROY_SESSION).fixed(sessionid);
        self
    }

    pub fn destroy_clientid(&mut self, clientid: u64) -> &mut Self {
        self.op(op::DESTROY_CLIENTID).u64(clientid);
        self
    }

    pub fn reclaim_complete(&mut self, one_fs: bool) -> &mut Self {
        self.op(op::RECLAIM_COMPLETE).bool(one_fs);
        self
    }

    // ---- file handles ----

    pub fn putrootfh(&mut self) -> &mut Self {
        self.op(op::PUTROOTFH);
        self
    }

    pub fn putfh(&mut self, fh: &[u8]) -> &mut Self {
        self.op(op::PUTFH).opaque(fh);
        self
    }

    pub fn getfh(&mut self) -> &mut Self {
        self.op(op::GETFH);
        self
    }

    pub fn savefh(&mut self) -> &mut Self {
        self.op(op::SAVEFH);
        self
    }

    pub fn restorefh(&mut self) -> &mut Self {
        self.op(op::RESTOREFH);
        self
    }

    pub fn lookup(&mut self, name: &str) -> &mut Self {
        self.op(op::LOOKUP).opaque(name.as_bytes());
        self
    }

    pub fn lookupp(&mut self) -> &mut Self {
        self.op(op::LOOKUPP);
        self
    }

    /// SECINFO_NO_NAME; `parent`: SECINFO_STYLE4_PARENT rather than CURRENT_FH.
    pub fn secinfo_no_name(&mut self, parent: bool) -> &mut Self {
        self.op(op::SECINFO_NO_NAME).u32(parent as u32);
        self
    }

    // ---- attributes ----

    pub fn getattr(&mut self, attrs: &[u32]) -> &mut Self {
        encode_bitmap(self.op(op::GETATTR), &bitmap(attrs));
        self
    }

    pub fn setattr(&mut self, stateid: &Stateid, attrs: &SetAttrs) -> &mut Self {
        let e = self.op(op::SETATTR);
        stateid.encode(e);
        attrs.encode(e);
        self
    }

    pub fn access(&mut self, bits: u32) -> &mut Self {
        self.op(op::ACCESS).u32(bits);
        self
    }

    // ---- the namespace ----

    /// CREATE of a directory.
    pub fn mkdir(&mut self, name: &str, attrs: &SetAttrs) -> &mut Self {
        let e = self.op(op::CREATE);
        e.u32(NF4DIR).opaque(name.as_bytes());
        attrs.encode(e);
        self
    }

    /// CREATE of a symbolic link.
    pub fn symlink(&mut self, name: &str, target: &str, attrs: &SetAttrs) -> &mut Self {
        let e = self.op(op::CREATE);
        e.u32(NF4LNK)
            .opaque(target.as_bytes())
            .opaque(name.as_bytes());
        attrs.encode(e);
        self
    }

    pub fn remove(&mut self, name: &str) -> &mut Self {
        self.op(op::REMOVE).opaque(name.as_bytes());
        self
    }

    /// RENAME from the saved directory to the current one.
    pub fn rename(&mut self, from: &str, to: &str) -> &mut Self {
        self.op(op::RENAME)
            .opaque(from.as_bytes())
            .opaque(to.as_bytes());
        self
    }

    /// LINK of the saved file into the current directory.
    pub fn link(&mut self, name: &str) -> &mut Self {
        self.op(op::LINK).opaque(name.as_bytes());
        self
    }

    pub fn readdir(
        &mut self,
        cookie: u64,
        verifier: &[u8; 8],
        maxcount: u32,
        attrs: &[u32],
    ) -> &mut Self {
        let e = self.op(op::READDIR);
        e.u64(cookie).fixed(verifier).u32(maxcount).u32(maxcount);
        encode_bitmap(e, &bitmap(attrs));
        self
    }

    pub fn readlink(&mut self) -> &mut Self {
        self.op(op::READLINK);
        self
    }

    // ---- opens ----

    /// OPEN with open owner (`clientid`, `owner`).
    pub fn open(
        &mut self,
        access: u32,
        deny: u32,
        clientid: u64,
        owner: &[u8],
        how: &OpenHow,
        claim: &Claim<'_>,
    ) -> &mut Self {
        let seq = self.seq;
        let e = self.op(op::OPEN);
        e.u32(seq) // seqid: ignored in 4.1
            .u32(access)
            .u32(deny)
            .u64(clientid)
            .opaque(owner);
        match how {
            OpenHow::NoCreate => {
                e.u32(0);
            }
            OpenHow::Unchecked(a) => {
                e.u32(1).u32(0);
                a.encode(e);
            }
            OpenHow::Guarded(a) => {
                e.u32(1).u32(1);
                a.encode(e);
            }
            OpenHow::Exclusive41(verf, a) => {
                e.u32(1).u32(3).fixed(verf);
                a.encode(e);
            }
        }
        match claim {
            Claim::Null(name) => {
                e.u32(0).opaque(name.as_bytes());
            }
            Claim::Fh => {
                e.u32(4);
            }
            Claim::Previous => {
                e.u32(1).u32(0);
            }
            Claim::PreviousDelegated(kind) => {
                e.u32(1).u32(*kind);
            }
            Claim::DelegCurFh(s) => {
                e.u32(5);
                s.encode(e);
            }
        }
        self
    }

    pub fn close(&mut self, stateid: &Stateid) -> &mut Self {
        let seq = self.seq;
        let e = self.op(op::CLOSE);
        e.u32(seq);
        stateid.encode(e);
        self
    }

    pub fn open_downgrade(&mut self, stateid: &Stateid, access: u32, deny: u32) -> &mut Self {
        let seq = self.seq;
        let e = self.op(op::OPEN_DOWNGRADE);
        stateid.encode(e);
        e.u32(seq).u32(access).u32(deny);
        self
    }

    // ---- I/O ----

    pub fn read(&mut self, stateid: &Stateid, offset: u64, count: u32) -> &mut Self {
        let e = self.op(op::READ);
        stateid.encode(e);
        e.u64(offset).u32(count);
        self
    }

    pub fn write(&mut self, stateid: &Stateid, offset: u64, stable: u32, data: &[u8]) -> &mut Self {
        let e = self.op(op::WRITE);
        stateid.encode(e);
        e.u64(offset).u32(stable).opaque(data);
        self
    }

    pub fn commit(&mut self, offset: u64, count: u32) -> &mut Self {
        self.op(op::COMMIT).u64(offset).u32(count);
        self
    }

    /// SEEK (4.2); `hole`: NFS4_CONTENT_HOLE rather than DATA.
    pub fn seek(&mut self, stateid: &Stateid, offset: u64, hole: bool) -> &mut Self {
        let e = self.op(op::SEEK);
        stateid.encode(e);
        e.u64(offset).u32(hole as u32);
        self
    }

    // ---- locks ----

    /// LOCK for a new lock owner (`clientid`, `owner`) of the open `open`.
    #[allow(clippy::too_many_arguments)]
    pub fn lock_new(
        &mut self,
        locktype: u32,
        offset: u64,
        length: u64,
        open: &Stateid,
        clientid: u64,
        owner: &[u8],
    ) -> &mut Self {
        self.lock_new_with(false, locktype, offset, length, open, clientid, owner)
    }

    /// As `lock_new`, reclaiming a lock held before a server restart (grace period).
    #[allow(clippy::too_many_arguments)]
    pub fn lock_reclaim(
        &mut self,
        locktype: u32,
        offset: u64,
        length: u64,
        open: &Stateid,
        clientid: u64,
        owner: &[u8],
    ) -> &mut Self {
        self.lock_new_with(true, locktype, offset, length, open, clientid, owner)
    }

    #[allow(clippy::too_many_arguments)]
    fn lock_new_with(
        &mut self,
        reclaim: bool,
        locktype: u32,
        offset: u64,
        length: u64,
        open: &Stateid,
        clientid: u64,
        owner: &[u8],
    ) -> &mut Self {
        let seq = self.seq;
        let e = self.op(op::LOCK);
        e.u32(locktype)
            .bool(reclaim)
            .u64(offset)
            .u64(length)
            .bool(true);
        e.u32(seq); // open_seqid
        open.encode(e);
        e.u32(0).u64(clientid).opaque(owner); // lock_seqid, lock_owner4
        self
    }

    /// LOCK by an existing lock owner, named by its lock stateid.
    pub fn lock_existing(
        &mut self,
        locktype: u32,
        offset: u64,
        length: u64,
        lock: &Stateid,
    ) -> &mut Self {
        let seq = self.seq;
        let e = self.op(op::LOCK);
        e.u32(locktype)
            .bool(false)
            .u64(offset)
            .u64(length)
            .bool(false);
        lock.encode(e);
        e.u32(seq); // lock_seqid
        self
    }

    pub fn lockt(
        &mut self,
        locktype: u32,
        offset: u64,
        length: u64,
        clientid: u64,
        owner: &[u8],
    ) -> &mut Self {
        self.op(op::LOCKT)
            .u32(locktype)
            .u64(offset)
            .u64(length)
            .u64(clientid)
            .opaque(owner);
        self
    }

    pub fn locku(&mut self, locktype: u32, lock: &Stateid, offset: u64, length: u64) -> &mut Self {
        let seq = self.seq;
        let e = self.op(op::LOCKU);
        e.u32(locktype).u32(seq);
        lock.encode(e);
        e.u64(offset).u64(length);
        self
    }

    pub fn test_stateid(&mut self, ids: &[Stateid]) -> &mut Self {
        let e = self.op(op::TEST_STATEID);
        e.u32(ids.len() as u32);
        for s in ids {
            s.encode(e);
        }
        self
    }

    pub fn free_stateid(&mut self, s: &Stateid) -> &mut Self {
        s.encode(self.op(op::FREE_STATEID));
        self
    }

    // ---- NFSv4.0's own ----

    /// SETCLIENTID with a callback address nobody is called at.
    pub fn setclientid(&mut self, verifier: &[u8; 8], owner: &[u8]) -> &mut Self {
        self.setclientid_cb(verifier, owner, 0x4000_0000, b"127.0.0.1.0.0", 1)
    }

    /// SETCLIENTID naming a callback service (`r_addr`: a universal address for
    /// netid tcp) with `program` and `ident`.
    pub fn setclientid_cb(
        &mut self,
        verifier: &[u8; 8],
        owner: &[u8],
        program: u32,
        r_addr: &[u8],
        ident: u32,
    ) -> &mut Self {
        let e = self.op(op::SETCLIENTID);
        e.fixed(verifier).opaque(owner);
        e.u32(program).opaque(b"tcp").opaque(r_addr).u32(ident);
        self
    }

    pub fn setclientid_confirm(&mut self, clientid: u64, confirm: &[u8; 8]) -> &mut Self {
        self.op(op::SETCLIENTID_CONFIRM)
            .u64(clientid)
            .fixed(confirm);
        self
    }

    pub fn renew(&mut self, clientid: u64) -> &mut Self {
        self.op(op::RENEW).u64(clientid);
        self
    }

    pub fn open_confirm(&mut self, stateid: &Stateid) -> &mut Self {
        let seq = self.seq;
        let e = self.op(op::OPEN_CONFIRM);
        stateid.encode(e);
        e.u32(seq);
        self
    }

    pub fn release_lockowner(&mut self, clientid: u64, owner: &[u8]) -> &mut Self {
        self.op(op::RELEASE_LOCKOWNER).u64(clientid).opaque(owner);
        self
    }
}

mod reply;
pub use reply::*;

// ---- a session ----

/// A client ID and a session, with the next sequence id of one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub clientid: u64,
    pub sessionid: [u8; 16],
    pub slot: u32,
    /// The sequence id the next SEQUENCE on `slot` sends.
    pub seq: u32,
}

impl Session {
    /// A new session: every slot's first sequence id is 1.
    pub fn new(clientid: u64, sessionid: [u8; 16]) -> Session {
        Session {
            clientid,
            sessionid,
            slot: 0,
            seq: 1,
        }
    }

    /// A COMPOUND that starts with SEQUENCE on the slot with its next sequence id
    /// (the reply not cached); the id is used up.
    pub fn compound(&mut self) -> Compound {
        self.compound_with(false)
    }

    /// As `compound`, asking the server to keep the reply (`cachethis`).
    pub fn compound_with(&mut self, cachethis: bool) -> Compound {
        let mut c = Compound::new("");
        c.sequence(&self.sessionid, self.seq, self.slot, self.slot, cachethis);
        self.seq = self.seq.wrapping_add(1);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmaps_have_the_words_they_need() {
        assert_eq!(bitmap(&[]), Vec::<u32>::new());
        assert_eq!(bitmap(&[1, 4]), vec![0b10010]);
        assert_eq!(bitmap(&[33, 3]), vec![8, 2]);
        assert!(bitmap_has(&bitmap(&[75]), 75));
        assert!(!bitmap_has(&bitmap(&[3]), 75));
    }

    #[test]
    fn setattrs_and_attrs_round_trip() {
        let mut e = Encoder::new();
        SetAttrs {
            size: Some(9),
            mode: Some(0o640),
        }
        .encode(&mut e);
        let a = Attrs::decode(&mut Decoder::new(&e.buf)).unwrap();
        assert_eq!((a.size, a.mode), (Some(9), Some(0o640)));
        // Values longer than the bitmap says are refused.
        let mut e = Encoder::new();
        encode_bitmap(&mut e, &bitmap(&[attr::SIZE]));
        e.opaque(&[0; 12]);
        assert!(Attrs::decode(&mut Decoder::new(&e.buf)).is_err());
    }

    #[test]
    fn sessions_use_up_sequence_ids() {
        let mut s = Session::new(7, [1; 16]);
        let c = s.compound();
        assert_eq!(s.seq, 2);
        assert_eq!(c.ops(), &[op::SEQUENCE]);
        let args = c.args();
        // tag "", minor 1, one op, SEQUENCE, session id, seq 1
        assert_eq!(
            &args[..16],
            &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 53]
        );
        assert_eq!(&args[32..36], &[0, 0, 0, 1]);
    }
}
