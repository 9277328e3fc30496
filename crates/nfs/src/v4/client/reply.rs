//! Decoding COMPOUND replies for the client codec (see the parent module): one
//! result per operation, strictly as RFC 8881 lays each out.

use super::*;

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
    /// The delegation comes recalled already: the client is to return it.
    pub delegation_recalled: bool,
    /// OPEN_DELEGATE_NONE_EXT (3): why no delegation (why_no_delegation4).
    pub why_none: Option<u32>,
}

impl OpenRes {
    /// OPEN4resok, the delegation included.
    pub fn decode(d: &mut Decoder<'_>) -> XdrResult<OpenRes> {
        let stateid = Stateid::decode(d)?;
        let cinfo = ChangeInfo::decode(d)?;
        let rflags = d.u32()?;
        let attrset = decode_bitmap(d)?;
        let delegation = d.u32()?;
        let mut delegation_stateid = None;
        let mut delegation_recalled = false;
        let mut why_none = None;
        match delegation {
            0 => {}
            1 | 2 => {
                // open_read_delegation4 / open_write_delegation4
                delegation_stateid = Some(Stateid::decode(d)?);
                delegation_recalled = d.bool()?;
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
                // open_none_delegation4: why, and a bool for WND4_CONTENTION (1) and
                // WND4_RESOURCE (2)
                let why = d.u32()?;
                if matches!(why, 1 | 2) {
                    d.bool()?;
                }
                why_none = Some(why);
            }
            _ => return Err(XdrError("unknown delegation type")),
        }
        Ok(OpenRes {
            stateid,
            cinfo,
            rflags,
            attrset,
            delegation,
            delegation_stateid,
            delegation_recalled,
            why_none,
        })
    }
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
    /// supported_attrs: the bitmap words.
    pub supported: Option<Vec<u32>>,
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
                0 => a.supported = Some(decode_bitmap(&mut v)?),
                // suppattr_exclcreat, a bitmap4 too
                75 => {
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
    /// SETCLIENTID (4.0): the client ID and the verifier to confirm it with.
    SetClientId {
        clientid: u64,
        confirm: [u8; 8],
    },
    /// SETCLIENTID's CLID_INUSE: the address of the client using the name.
    ClientUsing {
        netid: Vec<u8>,
        addr: Vec<u8>,
    },
}

/// One operation's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpReply {
    /// resop: the operation's number (OP_ILLEGAL for an illegal one).
    pub op: u32,
    pub status: u32,
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
        let res = decode_result(opnum, op_status, &mut d).map_err(|e| ReplyError::BadResult {
            index,
            op: opnum,
            why: e.0,
        })?;
        results.push(OpReply {
            op: opnum,
            status: op_status,
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
    const DENIED: u32 = crate::v4::Nfs4Error::Denied as u32;
    if status != 0 {
        // Only a few operations have results when they fail.
        return Ok(match (opnum, status) {
            (op::SETATTR, _) => Res::Setattr(decode_bitmap(d)?),
            (op::LOCK | op::LOCKT, DENIED) => Res::Denied(LockDenied::decode(d)?),
            (op::SETCLIENTID, s) if s == crate::v4::Nfs4Error::ClidInUse as u32 => {
                Res::ClientUsing {
                    netid: d.opaque(1024)?.to_vec(),
                    addr: d.opaque(1024)?.to_vec(),
                }
            }
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
        op::OPEN => Res::Open(OpenRes::decode(d)?),
        op::CLOSE | op::OPEN_DOWNGRADE | op::LOCK | op::LOCKU | op::OPEN_CONFIRM => {
            Res::Stateid(Stateid::decode(d)?)
        }
        op::SETCLIENTID => Res::SetClientId {
            clientid: d.u64()?,
            confirm: decode_verifier(d)?,
        },
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
        | op::LOCKT
        | op::SETCLIENTID_CONFIRM
        | op::RENEW
        | op::RELEASE_LOCKOWNER => Res::Void,
        _ => {
            return Err(XdrError(
                "success of an operation this decoder does not know",
            ))
        }
    })
}
