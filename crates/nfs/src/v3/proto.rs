//! NFSv3 wire types (RFC 1813 section 2.5 and 2.6): status codes, file types,
//! attributes, and their XDR forms.

use crate::xdr::{Decoder, Encoder, XdrError, XdrResult};
use fs::{Attr, FsError, Kind, Timespec};

pub const NFS_PROGRAM: u32 = 100003;
pub const NFS_V3: u32 = 3;
pub const NFS_V4: u32 = 4;
pub const MOUNT_PROGRAM: u32 = 100005;
pub const MOUNT_V3: u32 = 3;
pub const PORTMAP_PROGRAM: u32 = 100000;
pub const PORTMAP_V2: u32 = 2;
/// The NFSv3 READ procedure (RFC 1813 section 3.3.6).
pub const NFSPROC3_READ: u32 = 6;
pub const NFSPROC3_COMMIT: u32 = 21;

pub const FHSIZE3: usize = 64;
pub const NAME_MAX: usize = 255;
pub const PATH_MAX: usize = 4096;

/// nfsstat3
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Status {
    Ok = 0,
    Perm = 1,
    NoEnt = 2,
    Io = 5,
    NxIo = 6,
    Acces = 13,
    Exist = 17,
    XDev = 18,
    NotDir = 20,
    IsDir = 21,
    Inval = 22,
    FBig = 27,
    NoSpc = 28,
    RoFs = 30,
    MLink = 31,
    NameTooLong = 63,
    NotEmpty = 66,
    DQuot = 69,
    Stale = 70,
    BadHandle = 10001,
    NotSync = 10002,
    BadCookie = 10003,
    NotSupp = 10004,
    TooSmall = 10005,
    ServerFault = 10006,
    BadType = 10007,
    /// Try again later (a delegation of the file is being recalled).
    Jukebox = 10008,
}

impl Status {
    /// The status with this wire code, if it is one NFSv3 defines.
    pub fn from_code(code: u32) -> Option<Status> {
        use Status::*;
        [
            Ok,
            Perm,
            NoEnt,
            Io,
            NxIo,
            Acces,
            Exist,
            XDev,
            NotDir,
            IsDir,
            Inval,
            FBig,
            NoSpc,
            RoFs,
            MLink,
            NameTooLong,
            NotEmpty,
            DQuot,
            Stale,
            BadHandle,
            NotSync,
            BadCookie,
            NotSupp,
            TooSmall,
            ServerFault,
            BadType,
            Jukebox,
        ]
        .into_iter()
        .find(|s| *s as u32 == code)
    }
}

impl From<&FsError> for Status {
    fn from(e: &FsError) -> Status {
        match e {
            FsError::NotFound(_) => Status::NoEnt,
            FsError::Exists => Status::Exist,
            FsError::NotDir => Status::NotDir,
            FsError::IsDir => Status::IsDir,
            FsError::NotEmpty => Status::NotEmpty,
            FsError::Access => Status::Acces,
            FsError::Perm => Status::Perm,
            FsError::Invalid(_) | FsError::WrongType { .. } | FsError::NoAttr | FsError::Range => {
                Status::Inval
            }
            FsError::NameTooLong => Status::NameTooLong,
            FsError::NoSpace => Status::NoSpc,
            FsError::Quota => Status::DQuot,
            FsError::ReadOnly => Status::RoFs,
            FsError::TooManyLinks => Status::MLink,
            FsError::TooBig => Status::FBig,
            FsError::CrossDevice => Status::XDev,
            FsError::Io(_) => Status::Io,
            FsError::Busy(_) => Status::Jukebox,
        }
    }
}

impl From<FsError> for Status {
    fn from(e: FsError) -> Status {
        Status::from(&e)
    }
}

/// ftype3
pub fn ftype(kind: Kind) -> u32 {
    match kind {
        Kind::File => 1,
        Kind::Dir => 2,
        Kind::BlockDev => 3,
        Kind::CharDev => 4,
        Kind::Symlink => 5,
        Kind::Socket => 6,
        Kind::Fifo => 7,
    }
}

pub fn kind_of(ftype: u32) -> Option<Kind> {
    Some(match ftype {
        1 => Kind::File,
        2 => Kind::Dir,
        3 => Kind::BlockDev,
        4 => Kind::CharDev,
        5 => Kind::Symlink,
        6 => Kind::Socket,
        7 => Kind::Fifo,
        _ => return None,
    })
}

fn time(e: &mut Encoder, t: Timespec) {
    // nfstime3 seconds are unsigned 32-bit: times before 1970 or after 2106 clamp.
    e.u32(t.sec.clamp(0, u32::MAX as i64) as u32).u32(t.nsec);
}

pub fn decode_time(d: &mut Decoder<'_>) -> XdrResult<Timespec> {
    let sec = d.u32()? as i64;
    let nsec = d.u32()?;
    if nsec >= 1_000_000_000 {
        return Err(XdrError("nanoseconds of a time are 1e9 or more"));
    }
    Ok(Timespec { sec, nsec })
}

/// fattr3 of `a` in file system `fsid`.
pub fn fattr(e: &mut Encoder, a: &Attr, fsid: u64) {
    e.u32(ftype(a.kind))
        .u32(a.perm & 0o7777)
        .u32(a.nlink)
        .u32(a.uid)
        .u32(a.gid)
        .u64(a.size)
        .u64(a.used_bytes);
    let (major, minor) = if matches!(a.kind, Kind::CharDev | Kind::BlockDev) {
        (libc::major(a.rdev) as u32, libc::minor(a.rdev) as u32)
    } else {
        (0, 0)
    };
    e.u32(major).u32(minor).u64(fsid).u64(a.ino);
    time(e, a.atime);
    time(e, a.mtime);
    time(e, a.ctime);
}

/// post_op_attr
pub fn post_op_attr(e: &mut Encoder, a: Option<&Attr>, fsid: u64) {
    match a {
        Some(a) => {
            e.bool(true);
            fattr(e, a, fsid);
        }
        None => {
            e.bool(false);
        }
    }
}

/// wcc_data: pre-operation size and times, then post-operation attributes.
pub fn wcc_data(e: &mut Encoder, before: Option<&Attr>, after: Option<&Attr>, fsid: u64) {
    match before {
        Some(b) => {
            e.bool(true).u64(b.size);
            time(e, b.mtime);
            time(e, b.ctime);
        }
        None => {
            e.bool(false);
        }
    }
    post_op_attr(e, after, fsid);
}

/// How a time is set by sattr3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    ServerTime,
    ClientTime(Timespec),
}

/// sattr3
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sattr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

fn decode_set_time(d: &mut Decoder<'_>) -> XdrResult<Option<SetTime>> {
    match d.u32()? {
        0 => Ok(None),
        1 => Ok(Some(SetTime::ServerTime)),
        2 => Ok(Some(SetTime::ClientTime(decode_time(d)?))),
        _ => Err(XdrError("time_how out of range")),
    }
}

pub fn decode_sattr(d: &mut Decoder<'_>) -> XdrResult<Sattr> {
    Ok(Sattr {
        mode: d.optional(|d| d.u32())?,
        uid: d.optional(|d| d.u32())?,
        gid: d.optional(|d| d.u32())?,
        size: d.optional(|d| d.u64())?,
        atime: decode_set_time(d)?,
        mtime: decode_set_time(d)?,
    })
}

pub fn encode_sattr(e: &mut Encoder, s: &Sattr) {
    let opt32 = |e: &mut Encoder, v: Option<u32>| match v {
        Some(v) => {
            e.bool(true).u32(v);
        }
        None => {
            e.bool(false);
        }
    };
    opt32(e, s.mode);
    opt32(e, s.uid);
    opt32(e, s.gid);
    match s.size {
        Some(v) => e.bool(true).u64(v),
        None => e.bool(false),
    };
    for t in [s.atime, s.mtime] {
        match t {
            None => {
                e.u32(0);
            }
            Some(SetTime::ServerTime) => {
                e.u32(1);
            }
            Some(SetTime::ClientTime(t)) => {
                e.u32(2);
                time(e, t);
            }
        }
    }
}

/// A file name from the wire: at most NAME_MAX bytes is checked by the caller so the
/// right status (NAMETOOLONG) can be returned; the XDR limit here only bounds memory.
pub fn decode_name<'a>(d: &mut Decoder<'a>) -> XdrResult<&'a [u8]> {
    d.opaque(PATH_MAX)
}

/// diropargs3: (directory handle, name).
pub fn decode_diropargs<'a>(d: &mut Decoder<'a>) -> XdrResult<(&'a [u8], &'a [u8])> {
    let fh = d.opaque(FHSIZE3)?;
    let name = decode_name(d)?;
    Ok((fh, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sattr_round_trips() {
        let s = Sattr {
            mode: Some(0o4755),
            uid: None,
            gid: Some(7),
            size: Some(1 << 40),
            atime: Some(SetTime::ServerTime),
            mtime: Some(SetTime::ClientTime(Timespec { sec: 5, nsec: 6 })),
        };
        let mut e = Encoder::new();
        encode_sattr(&mut e, &s);
        let mut d = Decoder::new(&e.buf);
        assert_eq!(decode_sattr(&mut d).unwrap(), s);
        d.finish().unwrap();
    }

    #[test]
    fn every_kind_has_a_type_and_back() {
        for k in [
            Kind::File,
            Kind::Dir,
            Kind::Symlink,
            Kind::Fifo,
            Kind::CharDev,
            Kind::BlockDev,
            Kind::Socket,
        ] {
            assert_eq!(kind_of(ftype(k)), Some(k));
        }
        assert_eq!(kind_of(0), None);
        assert_eq!(kind_of(8), None);
    }
}
