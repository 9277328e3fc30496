//! NLM's wire types (the Open Group's XNFS, chapters 10-14; NLM v4 in RFC 1813
//! appendix II), for versions 1 and 3 (32-bit offsets, lengths and pids) and 4
//! (64-bit), decoded into one shape so the procedures are written once.
//!
//! A length of 0 means "to the end of the file, however long it grows" in every
//! version. Strings and opaque objects are bounded (`MAX_NAME`, `MAX_NETOBJ`):
//! anything longer is garbage, not truncated.

use crate::xdr::{Decoder, Encoder, XdrResult};

pub const NLM_PROGRAM: u32 = 100021;
pub const NSM_PROGRAM: u32 = 100024;
pub const NSM_V1: u32 = 1;

/// `LM_MAXSTRLEN` (caller names) and `SM_MAXSTRLEN` (monitored names).
pub const MAX_NAME: usize = 1024;
/// `MAXNETOBJ_SZ`: cookies, owner handles and file handles.
pub const MAX_NETOBJ: usize = 1024;

// Procedures, the same numbers in every version (SHARE and above from version 3).
pub const NULL: u32 = 0;
pub const TEST: u32 = 1;
pub const LOCK: u32 = 2;
pub const CANCEL: u32 = 3;
pub const UNLOCK: u32 = 4;
pub const GRANTED: u32 = 5;
pub const TEST_MSG: u32 = 6;
pub const LOCK_MSG: u32 = 7;
pub const CANCEL_MSG: u32 = 8;
pub const UNLOCK_MSG: u32 = 9;
pub const GRANTED_MSG: u32 = 10;
pub const TEST_RES: u32 = 11;
pub const LOCK_RES: u32 = 12;
pub const CANCEL_RES: u32 = 13;
pub const UNLOCK_RES: u32 = 14;
pub const GRANTED_RES: u32 = 15;
pub const SHARE: u32 = 20;
pub const UNSHARE: u32 = 21;
pub const NM_LOCK: u32 = 22;
pub const FREE_ALL: u32 = 23;

/// Procedure names by number, for logs and analytics ("" where none).
pub fn procedure_name(procedure: u32) -> &'static str {
    match procedure {
        NULL => "null",
        TEST => "test",
        LOCK => "lock",
        CANCEL => "cancel",
        UNLOCK => "unlock",
        GRANTED => "granted",
        TEST_MSG => "test_msg",
        LOCK_MSG => "lock_msg",
        CANCEL_MSG => "cancel_msg",
        UNLOCK_MSG => "unlock_msg",
        GRANTED_MSG => "granted_msg",
        TEST_RES => "test_res",
        LOCK_RES => "lock_res",
        CANCEL_RES => "cancel_res",
        UNLOCK_RES => "unlock_res",
        GRANTED_RES => "granted_res",
        SHARE => "share",
        UNSHARE => "unshare",
        NM_LOCK => "nm_lock",
        FREE_ALL => "free_all",
        _ => "",
    }
}

/// nlm4_stats (versions 1 and 3 know only the first five, and DEADLCK in 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    Granted = 0,
    Denied = 1,
    DeniedNoLocks = 2,
    Blocked = 3,
    DeniedGracePeriod = 4,
    Deadlock = 5,
    ReadOnlyFs = 6,
    StaleFh = 7,
    FileTooBig = 8,
    Failed = 9,
}

impl Stat {
    /// The status as `version` can say it: versions 1 and 3 have no codes for a
    /// read-only file system, a stale handle, a file too big or a failure, and say
    /// "no locks" for each.
    pub fn for_version(self, version: u32) -> u32 {
        if version < 4 && (self as u32) > Stat::Deadlock as u32 {
            Stat::DeniedNoLocks as u32
        } else {
            self as u32
        }
    }

    pub fn from_u32(v: u32) -> Option<Stat> {
        Some(match v {
            0 => Stat::Granted,
            1 => Stat::Denied,
            2 => Stat::DeniedNoLocks,
            3 => Stat::Blocked,
            4 => Stat::DeniedGracePeriod,
            5 => Stat::Deadlock,
            6 => Stat::ReadOnlyFs,
            7 => Stat::StaleFh,
            8 => Stat::FileTooBig,
            9 => Stat::Failed,
            _ => return None,
        })
    }
}

/// nlm_lock / nlm4_lock: who locks what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub caller_name: String,
    pub fh: Vec<u8>,
    /// The owner handle: opaque to the server.
    pub oh: Vec<u8>,
    /// The process on the client (`uppid` in versions 1 and 3).
    pub svid: i32,
    pub offset: u64,
    /// 0: to the end of the file.
    pub len: u64,
}

impl Lock {
    /// [start, end) as the lock table keeps ranges (`u64::MAX`: no end). A range
    /// that would run past the largest offset runs to the end.
    pub fn range(&self) -> (u64, u64) {
        let end = if self.len == 0 {
            u64::MAX
        } else {
            self.offset.saturating_add(self.len)
        };
        (self.offset, end)
    }
}

fn string(d: &mut Decoder<'_>) -> XdrResult<String> {
    Ok(String::from_utf8_lossy(d.opaque(MAX_NAME)?).into_owned())
}

pub fn netobj(d: &mut Decoder<'_>) -> XdrResult<Vec<u8>> {
    Ok(d.opaque(MAX_NETOBJ)?.to_vec())
}

/// A 32-bit or 64-bit unsigned quantity, by version.
fn offset(d: &mut Decoder<'_>, version: u32) -> XdrResult<u64> {
    if version >= 4 {
        d.u64()
    } else {
        Ok(d.u32()? as u64)
    }
}

fn put_offset(e: &mut Encoder, version: u32, v: u64) {
    if version >= 4 {
        e.u64(v);
    } else {
        // Versions 1 and 3 cannot say more: a range beyond 4 GiB is cut to fit.
        e.u32(v.min(u32::MAX as u64) as u32);
    }
}

pub fn decode_lock(d: &mut Decoder<'_>, version: u32) -> XdrResult<Lock> {
    Ok(Lock {
        caller_name: string(d)?,
        fh: netobj(d)?,
        oh: netobj(d)?,
        svid: d.i32()?,
        offset: offset(d, version)?,
        len: offset(d, version)?,
    })
}

pub fn encode_lock(e: &mut Encoder, version: u32, l: &Lock) {
    e.opaque(l.caller_name.as_bytes())
        .opaque(&l.fh)
        .opaque(&l.oh)
        .i32(l.svid);
    put_offset(e, version, l.offset);
    put_offset(e, version, l.len);
}

/// nlm_holder / nlm4_holder: who is in the way (TEST's DENIED answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub exclusive: bool,
    pub svid: i32,
    pub oh: Vec<u8>,
    pub offset: u64,
    pub len: u64,
}

pub fn encode_holder(e: &mut Encoder, version: u32, h: &Holder) {
    e.bool(h.exclusive).i32(h.svid).opaque(&h.oh);
    put_offset(e, version, h.offset);
    put_offset(e, version, h.len);
}

pub fn decode_holder(d: &mut Decoder<'_>, version: u32) -> XdrResult<Holder> {
    Ok(Holder {
        exclusive: d.bool()?,
        svid: d.i32()?,
        oh: netobj(d)?,
        offset: offset(d, version)?,
        len: offset(d, version)?,
    })
}

/// nlm_testargs: TEST and GRANTED.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestArgs {
    pub cookie: Vec<u8>,
    pub exclusive: bool,
    pub lock: Lock,
}

pub fn decode_test_args(d: &mut Decoder<'_>, version: u32) -> XdrResult<TestArgs> {
    Ok(TestArgs {
        cookie: netobj(d)?,
        exclusive: d.bool()?,
        lock: decode_lock(d, version)?,
    })
}

pub fn encode_test_args(e: &mut Encoder, version: u32, a: &TestArgs) {
    e.opaque(&a.cookie).bool(a.exclusive);
    encode_lock(e, version, &a.lock);
}

/// nlm_lockargs: LOCK and NM_LOCK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockArgs {
    pub cookie: Vec<u8>,
    pub block: bool,
    pub exclusive: bool,
    pub lock: Lock,
    pub reclaim: bool,
    /// The client's NSM state number.
    pub state: i32,
}

pub fn decode_lock_args(d: &mut Decoder<'_>, version: u32) -> XdrResult<LockArgs> {
    Ok(LockArgs {
        cookie: netobj(d)?,
        block: d.bool()?,
        exclusive: d.bool()?,
        lock: decode_lock(d, version)?,
        reclaim: d.bool()?,
        state: d.i32()?,
    })
}

pub fn encode_lock_args(e: &mut Encoder, version: u32, a: &LockArgs) {
    e.opaque(&a.cookie).bool(a.block).bool(a.exclusive);
    encode_lock(e, version, &a.lock);
    e.bool(a.reclaim).i32(a.state);
}

/// nlm_cancargs: CANCEL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelArgs {
    pub cookie: Vec<u8>,
    pub block: bool,
    pub exclusive: bool,
    pub lock: Lock,
}

pub fn decode_cancel_args(d: &mut Decoder<'_>, version: u32) -> XdrResult<CancelArgs> {
    Ok(CancelArgs {
        cookie: netobj(d)?,
        block: d.bool()?,
        exclusive: d.bool()?,
        lock: decode_lock(d, version)?,
    })
}

pub fn encode_cancel_args(e: &mut Encoder, version: u32, a: &CancelArgs) {
    e.opaque(&a.cookie).bool(a.block).bool(a.exclusive);
    encode_lock(e, version, &a.lock);
}

/// nlm_unlockargs: UNLOCK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnlockArgs {
    pub cookie: Vec<u8>,
    pub lock: Lock,
}

pub fn decode_unlock_args(d: &mut Decoder<'_>, version: u32) -> XdrResult<UnlockArgs> {
    Ok(UnlockArgs {
        cookie: netobj(d)?,
        lock: decode_lock(d, version)?,
    })
}

pub fn encode_unlock_args(e: &mut Encoder, version: u32, a: &UnlockArgs) {
    e.opaque(&a.cookie);
    encode_lock(e, version, &a.lock);
}

/// nlm_share: a DOS share reservation. `mode` is what others may not do (fsh_mode:
/// 0 deny none, 1 deny read, 2 deny write, 3 deny both), `access` what the holder
/// does (fsh_access: 0 none, 1 read, 2 write, 3 both): the bits are NFSv4's
/// share_deny and share_access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareArgs {
    pub cookie: Vec<u8>,
    pub caller_name: String,
    pub fh: Vec<u8>,
    pub oh: Vec<u8>,
    pub mode: u32,
    pub access: u32,
    pub reclaim: bool,
}

pub fn decode_share_args(d: &mut Decoder<'_>) -> XdrResult<ShareArgs> {
    let a = ShareArgs {
        cookie: netobj(d)?,
        caller_name: string(d)?,
        fh: netobj(d)?,
        oh: netobj(d)?,
        mode: d.u32()?,
        access: d.u32()?,
        reclaim: d.bool()?,
    };
    if a.mode > 3 || a.access > 3 {
        return Err(crate::xdr::XdrError("share mode or access out of range"));
    }
    Ok(a)
}

pub fn encode_share_args(e: &mut Encoder, a: &ShareArgs) {
    e.opaque(&a.cookie)
        .opaque(a.caller_name.as_bytes())
        .opaque(&a.fh)
        .opaque(&a.oh)
        .u32(a.mode)
        .u32(a.access)
        .bool(a.reclaim);
}

/// nlm_notify: FREE_ALL's arguments (a client that restarted without NSM).
pub fn decode_notify(d: &mut Decoder<'_>) -> XdrResult<(String, i32)> {
    Ok((string(d)?, d.i32()?))
}

/// nlm_res: the answer of LOCK, CANCEL, UNLOCK and GRANTED (and their _RES calls).
pub fn encode_res(e: &mut Encoder, version: u32, cookie: &[u8], stat: Stat) {
    e.opaque(cookie).u32(stat.for_version(version));
}

pub fn decode_res(d: &mut Decoder<'_>) -> XdrResult<(Vec<u8>, u32)> {
    Ok((netobj(d)?, d.u32()?))
}

/// nlm_testres: TEST's answer.
pub fn encode_test_res(
    e: &mut Encoder,
    version: u32,
    cookie: &[u8],
    result: Result<(), Result<&Holder, Stat>>,
) {
    e.opaque(cookie);
    match result {
        Ok(()) => {
            e.u32(Stat::Granted as u32);
        }
        Err(Ok(h)) => {
            e.u32(Stat::Denied as u32);
            encode_holder(e, version, h);
        }
        Err(Err(s)) => {
            e.u32(s.for_version(version));
        }
    }
}

/// TEST's answer decoded: the status and, for DENIED, the holder.
pub fn decode_test_res(
    d: &mut Decoder<'_>,
    version: u32,
) -> XdrResult<(Vec<u8>, u32, Option<Holder>)> {
    let cookie = netobj(d)?;
    let stat = d.u32()?;
    let holder = if stat == Stat::Denied as u32 {
        Some(decode_holder(d, version)?)
    } else {
        None
    };
    Ok((cookie, stat, holder))
}

/// nlm_shareres: SHARE's and UNSHARE's answer.
pub fn encode_share_res(e: &mut Encoder, version: u32, cookie: &[u8], stat: Stat) {
    e.opaque(cookie).u32(stat.for_version(version)).i32(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock() -> Lock {
        Lock {
            caller_name: "client-a".into(),
            fh: vec![7; 40],
            oh: b"1234@client-a".to_vec(),
            svid: 1234,
            offset: 4096,
            len: 0,
        }
    }

    #[test]
    fn lock_args_round_trip_in_every_version() {
        for version in [1, 3, 4] {
            let a = LockArgs {
                cookie: vec![1, 2, 3],
                block: true,
                exclusive: true,
                lock: lock(),
                reclaim: false,
                state: 3,
            };
            let mut e = Encoder::new();
            encode_lock_args(&mut e, version, &a);
            let mut d = Decoder::new(&e.buf);
            assert_eq!(decode_lock_args(&mut d, version).unwrap(), a);
            d.finish().unwrap();
        }
    }

    #[test]
    fn ranges_and_versions() {
        let mut l = lock();
        assert_eq!(l.range(), (4096, u64::MAX), "length 0 runs to the end");
        l.len = 10;
        assert_eq!(l.range(), (4096, 4106));
        l.offset = u64::MAX - 1;
        assert_eq!(
            l.range(),
            (u64::MAX - 1, u64::MAX),
            "an overflow runs to the end"
        );
        assert_eq!(Stat::StaleFh.for_version(4), 7);
        assert_eq!(Stat::StaleFh.for_version(3), 2);
        assert_eq!(Stat::Deadlock.for_version(3), 5);
    }

    #[test]
    fn a_share_with_an_unknown_mode_is_garbage() {
        let mut e = Encoder::new();
        let a = ShareArgs {
            cookie: vec![],
            caller_name: "c".into(),
            fh: vec![1],
            oh: vec![2],
            mode: 4,
            access: 1,
            reclaim: false,
        };
        encode_share_args(&mut e, &a);
        assert!(decode_share_args(&mut Decoder::new(&e.buf)).is_err());
    }
}
