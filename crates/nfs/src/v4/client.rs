//! A small NFSv4.1 client codec (RFC 8881): COMPOUND calls built operation by
//! operation, and COMPOUND replies decoded back into one result per operation. The
//! protocol tests (`tests/v4_protocol.rs`) drive the server with it; it is transport
//! free, so the same bytes can go through `transport::answer_record` or a socket.
//!
//! What it owns:
//! - `Compound`: the builder of COMPOUND4args (tag, minor version, operations) with an
//!   encoder for each operation the tests use, and `Compound::record`, which wraps the
//!   arguments in an ONC RPC call (program 100003, version 4, procedure 1).
//! - `decode_reply`: an RPC reply to a COMPOUND read into a `CompoundReply`, each
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

/// SEQ4_STATUS flags of SEQUENCE results.
pub const SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED: u32 = 0x0000_0010;
pub const SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED: u32 = 0x0000_0020;
pub const SEQ4_STATUS_ADMIN_STATE_REVOKED: u32 = 0x0000_0040;
pub const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x0000_0080;

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

/// The arguments of one COMPOUND, built an operation at a time.
#[derive(Debug, Clone)]
pub struct Compound {
    tag: Vec<u8>,
    minor: u32,
    /// The operation count sent; `None`: the number of operations added.
    declared: Option<u32>,
    ops: Vec<u32>,
    args: Encoder,
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
        }
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
        e.opaque(&self.tag)
            .u32(self.minor)
            .u32(self.declared.unwrap_or(self.ops.len() as u32));
        e.buf.extend_from_slice(&self.args.buf);
        e.buf
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
        let e = self.op(op::CREATE_SESSION);
        e.u64(clientid).u32(seq).u32(flags);
        fore.encode(e);
        back.encode(e);
        e.u32(0x4000_0000) // csa_cb_program
            .u32(1)
            .u32(rpc::AUTH_NONE); // csa_sec_parms: one, AUTH_NONE
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
        let e = self.op(op::OPEN);
        e.u32(0) // seqid: ignored in 4.1
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
        }
        self
    }

    pub fn close(&mut self, stateid: &Stateid) -> &mut Self {
        let e = self.op(op::CLOSE);
        e.u32(0);
        stateid.encode(e);
        self
    }

    pub fn open_downgrade(&mut self, stateid: &Stateid, access: u32, deny: u32) -> &mut Self {
        let e = self.op(op::OPEN_DOWNGRADE);
        stateid.encode(e);
        e.u32(0).u32(access).u32(deny);
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
        let e = self.op(op::LOCK);
        e.u32(locktype)
            .bool(false)
            .u64(offset)
            .u64(length)
            .bool(true);
        e.u32(0); // open_seqid
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
        let e = self.op(op::LOCK);
        e.u32(locktype)
            .bool(false)
            .u64(offset)
            .u64(length)
            .bool(false);
        lock.encode(e);
        e.u32(0); // lock_seqid
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
        let e = self.op(op::LOCKU);
        e.u32(locktype).u32(0);
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
}

// ---- replies ----

/// Why a reply could not be read as the answer to a COMPOUND.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyError {
    /// The bytes ended or held an impossible value.
    Xdr(&'static str),
    /// Not an RPC reply.
    NotAReply,
    /// MSG_DENIED (RPC version or authentication).
    Denied,
    /// Accepted, but not SUCCESS (PROG_MISMATCH, GARBAGE_ARGS ...): its accept_stat.
    NotSuccess(u32),
    /// The results of operation `index` (number `op`) do not parse.
    BadResult {
        index: usize,
        op: u32,
        why: &'static str,
    },
    /// Bytes after the last result.
    Trailing(usize),
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyError::Xdr(w) => write!(f, "bad XDR: {w}"),
            ReplyError::NotAReply => write!(f, "not an RPC reply"),
            ReplyError::Denied => write!(f, "call denied"),
            ReplyError::NotSuccess(s) => write!(f, "call accepted with accept_stat {s}"),
            ReplyError::BadResult { index, op, why } => write!(
                f,
                "results of operation {index} ({}) do not parse: {why}",
                op::name(*op)
            ),
            ReplyError::Trailing(n) => write!(f, "{n} bytes after the last result"),
        }
    }
}

impl std::error::Error for ReplyError {}

impl From<XdrError> for ReplyError {
    fn from(e: XdrError) -> ReplyError {
        ReplyError::Xdr(e.0)
    }
}

/// SEQUENCE4resok
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceRes {
    pub sessionid: [u8; 16],
    pub seq: u32,
    pub slot: u32,
    pub highest_slot: u32,
    pub target_highest_slot: u32,
    pub status_flags: u32,
}

/// EXCHANGE_ID4resok (the parts anyone looks at).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeIdRes {
    pub clientid: u64,
    pub seq: u32,
    pub flags: u32,
    pub server_major_id: Vec<u8>,
    pub server_scope: Vec<u8>,
}

/// CREATE_SESSION4resok
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSessionRes {
    pub sessionid: [u8; 16],
    pub seq: u32,
    pub flags: u32,
    pub fore: ChannelAttrs,
    pub back: ChannelAttrs,
}

/// change_info4
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeInfo {
    pub atomic: bool,
    pub before: u64,
    pub after: u64,
}

impl ChangeInfo {
    fn decode(d: &mut Decoder<'_>) -> XdrResult<ChangeInfo> {
        Ok(ChangeInfo {
            atomic: d.bool()?,
            before: d.u64()?,
            after: d.u64()?,
        })
    }
}

/// OPEN4resok
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRes {
    pub stateid: Stateid,
    pub cinfo: ChangeInfo,
    pub rflags: u32,
    pub attrset: Vec<u32>,
    /// open_delegation_type4 of the delegation handed out (0: none).
    pub delegation: u32,
    /// The delegation's stateid, when one was handed out.
    pub delegation_stateid: Option<Stateid>,
}

/// LOCK4denied: who holds the conflicting lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockDenied {
    pub offset: u64,
    pub length: u64,
    pub locktype: u32,
    pub clientid: u64,
    pub owner: Vec<u8>,
}

impl LockDenied {
    fn decode(d: &mut Decoder<'_>) -> XdrResult<LockDenied> {
        Ok(LockDenied {
            offset: d.u64()?,
            length: d.u64()?,
            locktype: d.u32()?,
            clientid: d.u64()?,
            owner: d.opaque(OPAQUE_LIMIT)?.to_vec(),
        })
    }
}

/// WRITE4resok
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteRes {
    pub count: u32,
    pub committed: u32,
    pub verifier: [u8; 8],
}

/// nfstime4
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Time {
    pub sec: i64,
    pub nsec: u32,
}

/// A decoded fattr4: the bitmap the server answered, and the values of the
/// attributes the tests look at (the others are checked for shape and skipped).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attrs {
    pub mask: Vec<u32>,
    pub kind: Option<u32>,
    pub change: Option<u64>,
    pub size: Option<u64>,
    pub fsid: Option<(u64, u64)>,
    pub lease_time: Option<u32>,
    pub filehandle: Option<Vec<u8>>,
    pub fileid: Option<u64>,
    pub mode: Option<u32>,
    pub numlinks: Option<u32>,
    pub owner: Option<Vec<u8>>,
    pub owner_group: Option<Vec<u8>>,
    pub mtime: Option<Time>,
    pub mounted_on_fileid: Option<u64>,
}

impl Attrs {
    /// fattr4: a bitmap, then an opaque the values fill exactly, in bit order.
    pub fn decode(d: &mut Decoder<'_>) -> XdrResult<Attrs> {
        let mask = decode_bitmap(d)?;
        let vals = d.opaque(1 << 20)?;
        let mut v = Decoder::new(vals);
        let mut a = Attrs {
            mask: mask.clone(),
            ..Attrs::default()
        };
        let time = |v: &mut Decoder<'_>| -> XdrResult<Time> {
            Ok(Time {
                sec: v.u64()? as i64,
                nsec: v.u32()?,
            })
        };
        for bit in 0..(mask.len() as u32 * 32) {
            if !bitmap_has(&mask, bit) {
                continue;
            }
            match bit {
                // bitmap4 values: supported_attrs, suppattr_exclcreat
                0 | 75 => {
                    decode_bitmap(&mut v)?;
                }
                1 => a.kind = Some(v.u32()?),
                3 => a.change = Some(v.u64()?),
                4 => a.size = Some(v.u64()?),
                8 => a.fsid = Some((v.u64()?, v.u64()?)),
                10 => a.lease_time = Some(v.u32()?),
                19 => a.filehandle = Some(v.opaque(FHSIZE4)?.to_vec()),
                20 => a.fileid = Some(v.u64()?),
                33 => a.mode = Some(v.u32()?),
                35 => a.numlinks = Some(v.u32()?),
                36 => a.owner = Some(v.opaque(OPAQUE_LIMIT)?.to_vec()),
                37 => a.owner_group = Some(v.opaque(OPAQUE_LIMIT)?.to_vec()),
                53 => a.mtime = Some(time(&mut v)?),
                55 => a.mounted_on_fileid = Some(v.u64()?),
                // uint32: fh_expire_type, rdattr_error, aclsupport, maxlink, maxname
                2 | 11 | 13 | 28 | 29 => {
                    v.u32()?;
                }
                // bool: link_support, symlink_support, named_attr, unique_handles,
                // archive, cansettime, case_insensitive, case_preserving,
                // chown_restricted, hidden, homogeneous, no_trunc, system
                5 | 6 | 7 | 9 | 14 | 15 | 16 | 17 | 18 | 25 | 26 | 34 | 46 => {
                    v.bool()?;
                }
                // uint64: files_*, maxfilesize, maxread, maxwrite, quota_*, space_*
                21 | 22 | 23 | 27 | 30 | 31 | 38 | 39 | 40 | 42 | 43 | 44 | 45 => {
                    v.u64()?;
                }
                // specdata4: rawdev
                41 => {
                    v.u32()?;
                    v.u32()?;
                }
                // utf8str_cs: mimetype
                32 => {
                    v.opaque(OPAQUE_LIMIT)?;
                }
                // nfstime4: time_access, time_backup, time_create, time_delta,
                // time_metadata
                47 | 49 | 50 | 51 | 52 => {
                    time(&mut v)?;
                }
                48 | 54 => return Err(XdrError("a set-only attribute in a reply")),
                _ => return Err(XdrError("an attribute this decoder does not know")),
            }
        }
        v.finish()
            .map_err(|_| XdrError("attribute values longer than their bitmap says"))?;
        Ok(a)
    }
}

/// One READDIR entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub cookie: u64,
    pub name: Vec<u8>,
    pub attrs: Attrs,
}

/// READDIR4resok
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaddirRes {
    pub verifier: [u8; 8],
    pub entries: Vec<DirEntry>,
    pub eof: bool,
}

/// The parsed results of one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res {
    /// No results (a failure of most operations, or an operation without results).
    Void,
    Sequence(SequenceRes),
    ExchangeId(ExchangeIdRes),
    CreateSession(CreateSessionRes),
    /// GETFH
    Fh(Vec<u8>),
    /// GETATTR
    Attrs(Attrs),
    Access {
        supported: u32,
        access: u32,
    },
    Open(OpenRes),
    /// CLOSE, OPEN_DOWNGRADE, LOCK, LOCKU
    Stateid(Stateid),
    /// LOCK and LOCKT answering DENIED
    Denied(LockDenied),
    Read {
        eof: bool,
        data: Vec<u8>,
    },
    Write(WriteRes),
    /// COMMIT
    Verifier([u8; 8]),
    Create {
        cinfo: ChangeInfo,
        attrset: Vec<u32>,
    },
    /// REMOVE, LINK
    ChangeInfo(ChangeInfo),
    Rename {
        source: ChangeInfo,
        target: ChangeInfo,
    },
    Readdir(ReaddirRes),
    Readlink(Vec<u8>),
    /// SETATTR (success or not): the attributes set.
    Setattr(Vec<u32>),
    TestStateid(Vec<u32>),
    /// SECINFO, SECINFO_NO_NAME: the flavors.
    Secinfo(Vec<u32>),
    Seek {
        eof: bool,
        offset: u64,
    },
}

/// One operation's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpReply {
    /// resop: the operation's number (OP_ILLEGAL for an illegal one).
    pub op: u32,
    pub status: u32,
    /// The raw results after the status.
    pub body: Vec<u8>,
    pub res: Res,
}

impl OpReply {
    pub fn ok(&self) -> bool {
        self.status == 0
    }

    pub fn fh(&self) -> Option<&[u8]> {
        match &self.res {
            Res::Fh(h) => Some(h),
            _ => None,
        }
    }

    /// The stateid of OPEN, CLOSE, OPEN_DOWNGRADE, LOCK and LOCKU.
    pub fn stateid(&self) -> Option<Stateid> {
        match &self.res {
            Res::Open(o) => Some(o.stateid),
            Res::Stateid(s) => Some(*s),
            _ => None,
        }
    }

    pub fn open(&self) -> Option<&OpenRes> {
        match &self.res {
            Res::Open(o) => Some(o),
            _ => None,
        }
    }

    pub fn denied(&self) -> Option<&LockDenied> {
        match &self.res {
            Res::Denied(d) => Some(d),
            _ => None,
        }
    }

    /// READ: eof and the data.
    pub fn read(&self) -> Option<(bool, &[u8])> {
        match &self.res {
            Res::Read { eof, data } => Some((*eof, data)),
            _ => None,
        }
    }

    pub fn write(&self) -> Option<&WriteRes> {
        match &self.res {
            Res::Write(w) => Some(w),
            _ => None,
        }
    }

    pub fn attrs(&self) -> Option<&Attrs> {
        match &self.res {
            Res::Attrs(a) => Some(a),
            _ => None,
        }
    }

    pub fn sequence(&self) -> Option<&SequenceRes> {
        match &self.res {
            Res::Sequence(s) => Some(s),
            _ => None,
        }
    }

    pub fn exchange_id(&self) -> Option<&ExchangeIdRes> {
        match &self.res {
            Res::ExchangeId(x) => Some(x),
            _ => None,
        }
    }

    pub fn create_session(&self) -> Option<&CreateSessionRes> {
        match &self.res {
            Res::CreateSession(c) => Some(c),
            _ => None,
        }
    }

    pub fn readdir(&self) -> Option<&ReaddirRes> {
        match &self.res {
            Res::Readdir(r) => Some(r),
            _ => None,
        }
    }

    pub fn test_stateid(&self) -> Option<&[u32]> {
        match &self.res {
            Res::TestStateid(v) => Some(v),
            _ => None,
        }
    }
}

/// A decoded reply to a COMPOUND.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompoundReply {
    pub xid: u32,
    /// The COMPOUND's status: that of the last operation run.
    pub status: u32,
    pub tag: Vec<u8>,
    pub results: Vec<OpReply>,
}

impl CompoundReply {
    /// The statuses of the results in order.
    pub fn statuses(&self) -> Vec<u32> {
        self.results.iter().map(|r| r.status).collect()
    }

    /// The `(op, status)` of every result, for assertion messages.
    pub fn summary(&self) -> Vec<(&'static str, u32)> {
        self.results
            .iter()
            .map(|r| (op::name(r.op), r.status))
            .collect()
    }

    /// The last result (the failed one when the COMPOUND failed).
    pub fn last(&self) -> Option<&OpReply> {
        self.results.last()
    }

    /// The first result of operation `opnum`.
    pub fn find(&self, opnum: u32) -> Option<&OpReply> {
        self.results.iter().find(|r| r.op == opnum)
    }
}

/// The xid of an RPC message, if it has one.
pub fn reply_xid(bytes: &[u8]) -> Option<u32> {
    Decoder::new(bytes).u32().ok()
}

/// Reads an RPC reply to a COMPOUND (see the module comment: strict).
pub fn decode_reply(bytes: &[u8]) -> Result<CompoundReply, ReplyError> {
    let mut d = Decoder::new(bytes);
    let xid = d.u32()?;
    if d.u32()? != rpc::MSG_REPLY {
        return Err(ReplyError::NotAReply);
    }
    if d.u32()? != 0 {
        return Err(ReplyError::Denied);
    }
    let _verf_flavor = d.u32()?;
    d.opaque(400)?;
    let accept = d.u32()?;
    if accept != 0 {
        return Err(ReplyError::NotSuccess(accept));
    }
    let status = d.u32()?;
    let tag = d.opaque(OPAQUE_LIMIT)?.to_vec();
    let n = d.u32()? as usize;
    if n > d.remaining() / 8 {
        return Err(ReplyError::Xdr("more results than the reply can hold"));
    }
    let mut results = Vec::with_capacity(n);
    for index in 0..n {
        let opnum = d.u32()?;
        let op_status = d.u32()?;
        let start = d.position();
        let res = decode_result(opnum, op_status, &mut d).map_err(|e| ReplyError::BadResult {
            index,
            op: opnum,
            why: e.0,
        })?;
        results.push(OpReply {
            op: opnum,
            status: op_status,
            body: bytes[start..d.position()].to_vec(),
            res,
        });
    }
    if d.remaining() != 0 {
        return Err(ReplyError::Trailing(d.remaining()));
    }
    Ok(CompoundReply {
        xid,
        status,
        tag,
        results,
    })
}

fn decode_sessionid(d: &mut Decoder<'_>) -> XdrResult<[u8; 16]> {
    Ok(d.fixed(16)?.try_into().expect("16 bytes"))
}

fn decode_verifier(d: &mut Decoder<'_>) -> XdrResult<[u8; 8]> {
    Ok(d.fixed(8)?.try_into().expect("8 bytes"))
}

/// state_protect4_r of EXCHANGE_ID.
fn skip_state_protect(d: &mut Decoder<'_>) -> XdrResult<()> {
    match d.u32()? {
        0 => {}
        1 => {
            decode_bitmap(d)?;
            decode_bitmap(d)?;
        }
        2 => {
            decode_bitmap(d)?;
            decode_bitmap(d)?;
            for _ in 0..4 {
                d.u32()?;
            }
            let handles = d.u32()?;
            if handles as usize > d.remaining() / 4 {
                return Err(XdrError("too many GSS handles"));
            }
            for _ in 0..handles {
                d.opaque(OPAQUE_LIMIT)?;
            }
        }
        _ => return Err(XdrError("unknown state protection")),
    }
    Ok(())
}

/// The results of one operation after its status.
fn decode_result(opnum: u32, status: u32, d: &mut Decoder<'_>) -> XdrResult<Res> {
    const DENIED: u32 = super::Nfs4Error::Denied as u32;
    if status != 0 {
        // Only a few operations have results when they fail.
        return Ok(match (opnum, status) {
            (op::SETATTR, _) => Res::Setattr(decode_bitmap(d)?),
            (op::LOCK | op::LOCKT, DENIED) => Res::Denied(LockDenied::decode(d)?),
            _ => Res::Void,
        });
    }
    Ok(match opnum {
        op::SEQUENCE => Res::Sequence(SequenceRes {
            sessionid: decode_sessionid(d)?,
            seq: d.u32()?,
            slot: d.u32()?,
            highest_slot: d.u32()?,
            target_highest_slot: d.u32()?,
            status_flags: d.u32()?,
        }),
        op::EXCHANGE_ID => {
            let clientid = d.u64()?;
            let seq = d.u32()?;
            let flags = d.u32()?;
            skip_state_protect(d)?;
            let _minor_id = d.u64()?;
            let server_major_id = d.opaque(OPAQUE_LIMIT)?.to_vec();
            let server_scope = d.opaque(OPAQUE_LIMIT)?.to_vec();
            let impls = d.u32()?;
            if impls > 1 {
                return Err(XdrError("more than one implementation id"));
            }
            for _ in 0..impls {
                d.opaque(OPAQUE_LIMIT)?;
                d.opaque(OPAQUE_LIMIT)?;
                d.u64()?;
                d.u32()?;
            }
            Res::ExchangeId(ExchangeIdRes {
                clientid,
                seq,
                flags,
                server_major_id,
                server_scope,
            })
        }
        op::CREATE_SESSION => Res::CreateSession(CreateSessionRes {
            sessionid: decode_sessionid(d)?,
            seq: d.u32()?,
            flags: d.u32()?,
            fore: ChannelAttrs::decode(d)?,
            back: ChannelAttrs::decode(d)?,
        }),
        op::BIND_CONN_TO_SESSION => {
            decode_sessionid(d)?;
            d.u32()?;
            d.bool()?;
            Res::Void
        }
        op::GETFH => Res::Fh(d.opaque(FHSIZE4)?.to_vec()),
        op::GETATTR => Res::Attrs(Attrs::decode(d)?),
        op::ACCESS => Res::Access {
            supported: d.u32()?,
            access: d.u32()?,
        },
        op::OPEN => {
            let stateid = Stateid::decode(d)?;
            let cinfo = ChangeInfo::decode(d)?;
            let rflags = d.u32()?;
            let attrset = decode_bitmap(d)?;
            let delegation = d.u32()?;
            let mut delegation_stateid = None;
            match delegation {
                0 => {}
                1 | 2 => {
                    // open_read_delegation4 / open_write_delegation4
                    delegation_stateid = Some(Stateid::decode(d)?);
                    d.bool()?;
                    if delegation == 2 {
                        match d.u32()? {
                            1 => {
                                d.u64()?;
                            }
                            2 => {
                                d.u32()?;
                                d.u32()?;
                            }
                            _ => return Err(XdrError("unknown space limit")),
                        }
                    }
                    // nfsace4
                    d.u32()?;
                    d.u32()?;
                    d.u32()?;
                    d.opaque(OPAQUE_LIMIT)?;
                }
                3 => {
                    // open_none_delegation4: why, and a bool for two of the reasons
                    if matches!(d.u32()?, 6 | 7) {
                        d.bool()?;
                    }
                }
                _ => return Err(XdrError("unknown delegation type")),
            }
            Res::Open(OpenRes {
                stateid,
                cinfo,
                rflags,
                attrset,
                delegation,
                delegation_stateid,
            })
        }
        op::CLOSE | op::OPEN_DOWNGRADE | op::LOCK | op::LOCKU => Res::Stateid(Stateid::decode(d)?),
        op::READ => Res::Read {
            eof: d.bool()?,
            data: d.opaque(u32::MAX as usize)?.to_vec(),
        },
        op::WRITE => Res::Write(WriteRes {
            count: d.u32()?,
            committed: d.u32()?,
            verifier: decode_verifier(d)?,
        }),
        op::COMMIT => Res::Verifier(decode_verifier(d)?),
        op::CREATE => Res::Create {
            cinfo: ChangeInfo::decode(d)?,
            attrset: decode_bitmap(d)?,
        },
        op::REMOVE | op::LINK => Res::ChangeInfo(ChangeInfo::decode(d)?),
        op::RENAME => Res::Rename {
            source: ChangeInfo::decode(d)?,
            target: ChangeInfo::decode(d)?,
        },
        op::READDIR => {
            let verifier = decode_verifier(d)?;
            let mut entries = Vec::new();
            while d.bool()? {
                entries.push(DirEntry {
                    cookie: d.u64()?,
                    name: d.opaque(OPAQUE_LIMIT)?.to_vec(),
                    attrs: Attrs::decode(d)?,
                });
            }
            Res::Readdir(ReaddirRes {
                verifier,
                entries,
                eof: d.bool()?,
            })
        }
        op::READLINK => Res::Readlink(d.opaque(1 << 20)?.to_vec()),
        op::SETATTR => Res::Setattr(decode_bitmap(d)?),
        op::TEST_STATEID => {
            let n = d.u32()? as usize;
            if n > d.remaining() / 4 {
                return Err(XdrError("more status codes than bytes"));
            }
            Res::TestStateid((0..n).map(|_| d.u32()).collect::<XdrResult<_>>()?)
        }
        op::SECINFO | op::SECINFO_NO_NAME => {
            let n = d.u32()? as usize;
            if n > d.remaining() / 4 {
                return Err(XdrError("more flavors than bytes"));
            }
            let mut flavors = Vec::with_capacity(n);
            for _ in 0..n {
                let f = d.u32()?;
                if f == 6 {
                    // RPCSEC_GSS: oid, qop, service
                    d.opaque(OPAQUE_LIMIT)?;
                    d.u32()?;
                    d.u32()?;
                }
                flavors.push(f);
            }
            Res::Secinfo(flavors)
        }
        op::SEEK => Res::Seek {
            eof: d.bool()?,
            offset: d.u64()?,
        },
        op::COPY => {
            // write_response4 then copy_requirements4
            let ids = d.u32()?;
            if ids > 1 {
                return Err(XdrError("more than one callback id"));
            }
            for _ in 0..ids {
                Stateid::decode(d)?;
            }
            d.u64()?;
            d.u32()?;
            decode_verifier(d)?;
            d.bool()?;
            d.bool()?;
            Res::Void
        }
        // Operations whose success has no results.
        op::DESTROY_SESSION
        | op::DESTROY_CLIENTID
        | op::RECLAIM_COMPLETE
        | op::PUTFH
        | op::PUTPUBFH
        | op::PUTROOTFH
        | op::LOOKUP
        | op::LOOKUPP
        | op::SAVEFH
        | op::RESTOREFH
        | op::VERIFY
        | op::NVERIFY
        | op::FREE_STATEID
        | op::BACKCHANNEL_CTL
        | op::DELEGRETURN
        | op::DEALLOCATE
        | op::LOCKT => Res::Void,
        _ => {
            return Err(XdrError(
                "success of an operation this decoder does not know",
            ))
        }
    })
}

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
