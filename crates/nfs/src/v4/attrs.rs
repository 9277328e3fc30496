//! NFSv4 attributes (RFC 8881 section 5): which ones are supported, their fattr4
//! encoding in bit order, the settable ones decoded from SETATTR, CREATE and OPEN, and
//! owner strings.
//!
//! Owners go out as numeric strings ("1000"), which the Linux client maps back to ids
//! itself with AUTH_SYS (its default, nfs4_disable_idmapping), or, when an id domain
//! is configured (`IdMap`), as `name@domain` for ids the host's passwd and group files
//! name (numbers for the rest), as the Linux idmapper expects; they come in as numbers
//! or as `name@domain`, looked up in the same files.
//!
//! `change` is the object's ctime in nanoseconds: every change of data or attributes
//! moves the ctime, so clients' caches revalidate on every modification.

use super::{Nfs4Error, OpResult};
use crate::xdr::{Decoder, Encoder, XdrError, XdrResult};
use fs::{Kind, StatFs, Timespec};

pub const SUPPORTED_ATTRS: u32 = 0;
pub const TYPE: u32 = 1;
pub const FH_EXPIRE_TYPE: u32 = 2;
pub const CHANGE: u32 = 3;
pub const SIZE: u32 = 4;
pub const LINK_SUPPORT: u32 = 5;
pub const SYMLINK_SUPPORT: u32 = 6;
pub const NAMED_ATTR: u32 = 7;
pub const FSID: u32 = 8;
pub const UNIQUE_HANDLES: u32 = 9;
pub const LEASE_TIME: u32 = 10;
pub const RDATTR_ERROR: u32 = 11;
pub const ACLSUPPORT: u32 = 13;
pub const CANSETTIME: u32 = 15;
pub const CASE_INSENSITIVE: u32 = 16;
pub const CASE_PRESERVING: u32 = 17;
pub const CHOWN_RESTRICTED: u32 = 18;
pub const FILEHANDLE: u32 = 19;
pub const FILEID: u32 = 20;
pub const FILES_AVAIL: u32 = 21;
pub const FILES_FREE: u32 = 22;
pub const FILES_TOTAL: u32 = 23;
pub const HOMOGENEOUS: u32 = 26;
pub const MAXFILESIZE: u32 = 27;
pub const MAXLINK: u32 = 28;
pub const MAXNAME: u32 = 29;
pub const MAXREAD: u32 = 30;
pub const MAXWRITE: u32 = 31;
pub const MODE: u32 = 33;
pub const NO_TRUNC: u32 = 34;
pub const NUMLINKS: u32 = 35;
pub const OWNER: u32 = 36;
pub const OWNER_GROUP: u32 = 37;
pub const RAWDEV: u32 = 41;
pub const SPACE_AVAIL: u32 = 42;
pub const SPACE_FREE: u32 = 43;
pub const SPACE_TOTAL: u32 = 44;
pub const SPACE_USED: u32 = 45;
pub const TIME_ACCESS: u32 = 47;
pub const TIME_ACCESS_SET: u32 = 48;
pub const TIME_CREATE: u32 = 50;
pub const TIME_DELTA: u32 = 51;
pub const TIME_METADATA: u32 = 52;
pub const TIME_MODIFY: u32 = 53;
pub const TIME_MODIFY_SET: u32 = 54;
pub const MOUNTED_ON_FILEID: u32 = 55;
pub const SUPPATTR_EXCLCREAT: u32 = 75;

/// The longest bitmap4 read: 2,048 attribute numbers, far past any defined (a
/// client asking for attribute 1000 gets an answer, not BADXDR).
const MAX_BITMAP_WORDS: usize = 64;

/// Attribute numbers as a bitmap4 of up to three words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bitmap(pub [u32; 3]);

impl Bitmap {
    pub const fn of(bits: &[u32]) -> Bitmap {
        let mut w = [0u32; 3];
        let mut i = 0;
        while i < bits.len() {
            w[(bits[i] / 32) as usize] |= 1 << (bits[i] % 32);
            i += 1;
        }
        Bitmap(w)
    }

    pub fn has(&self, bit: u32) -> bool {
        bit < 96 && self.0[(bit / 32) as usize] & (1 << (bit % 32)) != 0
    }

    pub fn set(&mut self, bit: u32) {
        self.0[(bit / 32) as usize] |= 1 << (bit % 32);
    }

    pub fn and(&self, o: &Bitmap) -> Bitmap {
        Bitmap([self.0[0] & o.0[0], self.0[1] & o.0[1], self.0[2] & o.0[2]])
    }

    pub fn minus(&self, o: &Bitmap) -> Bitmap {
        Bitmap([
            self.0[0] & !o.0[0],
            self.0[1] & !o.0[1],
            self.0[2] & !o.0[2],
        ])
    }

    pub fn is_empty(&self) -> bool {
        self.0 == [0; 3]
    }

    pub fn bits(&self) -> impl Iterator<Item = u32> + '_ {
        (0..96).filter(|b| self.has(*b))
    }

    /// bitmap4: a word count, then the words (trailing zero words left out).
    pub fn encode(&self, e: &mut Encoder) {
        let n = self.0.iter().rposition(|w| *w != 0).map_or(0, |i| i + 1);
        e.u32(n as u32);
        for w in &self.0[..n] {
            e.u32(*w);
        }
    }

    /// Words past the third name attributes nobody defines: a GETATTR of them gets
    /// nothing for them (`decode`), setting or verifying them is ATTRNOTSUPP
    /// (`decode_noting_unknown`).
    pub fn decode(d: &mut Decoder<'_>) -> XdrResult<Bitmap> {
        Bitmap::decode_noting_unknown(d).map(|(b, _)| b)
    }

    /// The bitmap, and whether it names any attribute past the third word.
    pub fn decode_noting_unknown(d: &mut Decoder<'_>) -> XdrResult<(Bitmap, bool)> {
        let n = d.u32()? as usize;
        if n > MAX_BITMAP_WORDS {
            return Err(XdrError("bitmap of more than 64 words"));
        }
        let mut w = [0u32; 3];
        let mut unknown = false;
        for i in 0..n {
            let v = d.u32()?;
            match w.get_mut(i) {
                Some(slot) => *slot = v,
                None => unknown |= v != 0,
            }
        }
        Ok((Bitmap(w), unknown))
    }
}

pub const SUPPORTED: Bitmap = Bitmap::of(&[
    SUPPORTED_ATTRS,
    TYPE,
    FH_EXPIRE_TYPE,
    CHANGE,
    SIZE,
    LINK_SUPPORT,
    SYMLINK_SUPPORT,
    NAMED_ATTR,
    FSID,
    UNIQUE_HANDLES,
    LEASE_TIME,
    RDATTR_ERROR,
    ACLSUPPORT,
    CANSETTIME,
    CASE_INSENSITIVE,
    CASE_PRESERVING,
    CHOWN_RESTRICTED,
    FILEHANDLE,
    FILEID,
    FILES_AVAIL,
    FILES_FREE,
    FILES_TOTAL,
    HOMOGENEOUS,
    MAXFILESIZE,
    MAXLINK,
    MAXNAME,
    MAXREAD,
    MAXWRITE,
    MODE,
    NO_TRUNC,
    NUMLINKS,
    OWNER,
    OWNER_GROUP,
    RAWDEV,
    SPACE_AVAIL,
    SPACE_FREE,
    SPACE_TOTAL,
    SPACE_USED,
    TIME_ACCESS,
    TIME_ACCESS_SET,
    TIME_CREATE,
    TIME_DELTA,
    TIME_METADATA,
    TIME_MODIFY,
    TIME_MODIFY_SET,
    MOUNTED_ON_FILEID,
    SUPPATTR_EXCLCREAT,
]);

/// Attributes 4.1 added that a 4.0 client is not told of.
const MINOR1_ONLY: Bitmap = Bitmap::of(&[SUPPATTR_EXCLCREAT]);

/// The attributes supported in minor version `minor`.
pub fn supported(minor: u32) -> Bitmap {
    if minor == 0 {
        SUPPORTED.minus(&MINOR1_ONLY)
    } else {
        SUPPORTED
    }
}

/// What SETATTR (and the create attributes of OPEN and CREATE) may set.
pub const SETTABLE: Bitmap = Bitmap::of(&[
    SIZE,
    MODE,
    OWNER,
    OWNER_GROUP,
    TIME_ACCESS_SET,
    TIME_MODIFY_SET,
]);

/// What an EXCLUSIVE4_1 create may set beside its verifier (kept in the times).
pub const EXCLCREAT: Bitmap = Bitmap::of(&[SIZE, MODE, OWNER, OWNER_GROUP]);

/// Statistics that need the file system's totals.
const NEEDS_STATFS: Bitmap = Bitmap::of(&[
    FILES_AVAIL,
    FILES_FREE,
    FILES_TOTAL,
    SPACE_AVAIL,
    SPACE_FREE,
    SPACE_TOTAL,
]);

/// Attributes that can only be set (the *_SET times): asking to read one is INVAL
/// (RFC 8881 section 5.5).
pub fn check_readable(mask: &Bitmap) -> OpResult<()> {
    if mask.has(TIME_ACCESS_SET) || mask.has(TIME_MODIFY_SET) {
        return Err(Nfs4Error::Inval);
    }
    Ok(())
}

pub fn needs_statfs(mask: &Bitmap) -> bool {
    !mask.and(&NEEDS_STATFS).is_empty()
}

/// Everything an object's attributes are made of, for a file or a pseudo directory.
pub struct Obj {
    pub kind: Kind,
    pub change: u64,
    pub size: u64,
    pub fsid: (u64, u64),
    pub fileid: u64,
    pub mounted_on_fileid: u64,
    pub perm: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: (u32, u32),
    pub used: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    pub fh: Vec<u8>,
    pub statfs: Option<StatFs>,
    pub named_attrs: bool,
    /// The server's lease, in seconds.
    pub lease_seconds: u32,
    /// Owner names, when owners go out as `name@domain`.
    pub names: Option<std::sync::Arc<IdMap>>,
}

/// The host's user and group names with the NFSv4 id domain, read once.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IdMap {
    pub domain: String,
    pub users: std::collections::HashMap<u32, String>,
    pub groups: std::collections::HashMap<u32, String>,
}

fn id_names(text: &str) -> std::collections::HashMap<u32, String> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let _pw = f.next()?;
            let id = f.next()?.parse::<u32>().ok()?;
            (!name.is_empty()).then(|| (id, name.to_string()))
        })
        .collect()
}

impl IdMap {
    /// The names in `passwd` and `group` (the files' text) under `domain`.
    pub fn parse(domain: &str, passwd: &str, group: &str) -> IdMap {
        IdMap {
            domain: domain.to_string(),
            users: id_names(passwd),
            groups: id_names(group),
        }
    }

    /// The host's /etc/passwd and /etc/group.
    pub fn from_host(domain: &str) -> IdMap {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        IdMap::parse(domain, &read("/etc/passwd"), &read("/etc/group"))
    }

    /// An owner string: `name@domain`, or the number when the id has no name.
    pub fn owner(&self, id: u32, group: bool) -> String {
        let names = if group { &self.groups } else { &self.users };
        match names.get(&id) {
            Some(n) => format!("{n}@{}", self.domain),
            None => id.to_string(),
        }
    }
}

fn owner_string(o: &Obj, id: u32, group: bool) -> String {
    match &o.names {
        Some(m) => m.owner(id, group),
        None => id.to_string(),
    }
}

/// The change attribute of an object with this ctime.
pub fn change_of(ctime: Timespec) -> u64 {
    (ctime.sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ctime.nsec as u64)
}

pub fn ftype4(kind: Kind) -> u32 {
    crate::proto::ftype(kind)
}

fn time4(e: &mut Encoder, t: Timespec) {
    e.u64(t.sec as u64).u32(t.nsec);
}

/// fattr4 of `o` for the attributes in `mask` that minor version `minor` supports
/// (4.0 is told only of its own); the bitmap says which were given.
pub fn encode_fattr(e: &mut Encoder, o: &Obj, mask: &Bitmap, minor: u32) {
    let supported = supported(minor);
    let mut given = mask.and(&supported);
    if o.statfs.is_none() {
        given = given.minus(&NEEDS_STATFS);
    }
    let mut v = Encoder::new();
    for bit in given.bits() {
        encode_one(&mut v, o, bit, &supported);
    }
    given.encode(e);
    e.opaque(&v.buf);
}

fn encode_one(v: &mut Encoder, o: &Obj, bit: u32, supported: &Bitmap) {
    let sf = o.statfs.as_ref();
    match bit {
        SUPPORTED_ATTRS => supported.encode(v),
        TYPE => {
            v.u32(ftype4(o.kind));
        }
        FH_EXPIRE_TYPE => {
            v.u32(0); // FH4_PERSISTENT
        }
        CHANGE => {
            v.u64(o.change);
        }
        SIZE => {
            v.u64(o.size);
        }
        LINK_SUPPORT | SYMLINK_SUPPORT | UNIQUE_HANDLES | CANSETTIME | CASE_PRESERVING
        | CHOWN_RESTRICTED | HOMOGENEOUS | NO_TRUNC => {
            v.bool(true);
        }
        NAMED_ATTR => {
            v.bool(o.named_attrs);
        }
        CASE_INSENSITIVE => {
            v.bool(false);
        }
        FSID => {
            v.u64(o.fsid.0).u64(o.fsid.1);
        }
        LEASE_TIME => {
            v.u32(o.lease_seconds);
        }
        RDATTR_ERROR | ACLSUPPORT => {
            v.u32(0);
        }
        FILEHANDLE => {
            v.opaque(&o.fh);
        }
        FILEID => {
            v.u64(o.fileid);
        }
        FILES_AVAIL | FILES_FREE => {
            v.u64(sf.map_or(0, |s| s.free_files));
        }
        FILES_TOTAL => {
            v.u64(sf.map_or(0, |s| s.files));
        }
        MAXFILESIZE => {
            v.u64(fs::filesystem::MAX_FILE_SIZE);
        }
        MAXLINK => {
            v.u32(fs::filesystem::MAX_LINKS);
        }
        MAXNAME => {
            v.u32(crate::proto::NAME_MAX as u32);
        }
        MAXREAD => {
            v.u64(crate::service::RTMAX as u64);
        }
        MAXWRITE => {
            v.u64(crate::service::WTMAX as u64);
        }
        MODE => {
            v.u32(o.perm & 0o7777);
        }
        NUMLINKS => {
            v.u32(o.nlink);
        }
        OWNER => {
            v.opaque(owner_string(o, o.uid, false).as_bytes());
        }
        OWNER_GROUP => {
            v.opaque(owner_string(o, o.gid, true).as_bytes());
        }
        RAWDEV => {
            v.u32(o.rdev.0).u32(o.rdev.1);
        }
        SPACE_AVAIL => {
            v.u64(sf.map_or(0, |s| s.avail_bytes));
        }
        SPACE_FREE => {
            v.u64(sf.map_or(0, |s| s.free_bytes));
        }
        SPACE_TOTAL => {
            v.u64(sf.map_or(0, |s| s.total_bytes));
        }
        SPACE_USED => {
            v.u64(o.used);
        }
        TIME_ACCESS => time4(v, o.atime),
        TIME_CREATE => time4(v, o.crtime),
        TIME_DELTA => time4(v, Timespec { sec: 0, nsec: 1 }),
        TIME_METADATA => time4(v, o.ctime),
        TIME_MODIFY => time4(v, o.mtime),
        MOUNTED_ON_FILEID => {
            v.u64(o.mounted_on_fileid);
        }
        SUPPATTR_EXCLCREAT => EXCLCREAT.encode(v),
        // Write-only attributes (the *_SET times) are never returned.
        TIME_ACCESS_SET | TIME_MODIFY_SET => {}
        _ => unreachable!("only supported attributes are encoded"),
    }
}

/// How a time is set (settime4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime4 {
    Server,
    Client(Timespec),
}

/// Settable attributes decoded from a fattr4.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settable {
    pub given: Bitmap,
    pub size: Option<u64>,
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<SetTime4>,
    pub mtime: Option<SetTime4>,
}

impl Settable {
    pub fn to_setattr(&self) -> fs::SetAttr {
        let now = Timespec::now();
        let t = |s: Option<SetTime4>| {
            s.map(|s| match s {
                SetTime4::Server => now,
                SetTime4::Client(t) => t,
            })
        };
        fs::SetAttr {
            perm: self.mode.map(|m| m & 0o7777),
            uid: self.uid,
            gid: self.gid,
            size: self.size,
            atime: t(self.atime),
            mtime: t(self.mtime),
            ctime: None,
        }
    }
}

/// Decodes a fattr4 whose attributes are to be set. Unsupported attributes answer
/// ATTRNOTSUPP, supported read-only ones INVAL, bad owners BADOWNER, and values that
/// do not fill the opaque exactly BADXDR.
pub fn decode_settable(d: &mut Decoder<'_>) -> Result<Settable, Nfs4Error> {
    let (mask, unknown) = Bitmap::decode_noting_unknown(d).map_err(|_| Nfs4Error::BadXdr)?;
    let vals = d.opaque(1 << 16).map_err(|_| Nfs4Error::BadXdr)?;
    if unknown || !mask.minus(&SUPPORTED).is_empty() {
        return Err(Nfs4Error::AttrNotSupp);
    }
    if !mask.minus(&SETTABLE).is_empty() {
        return Err(Nfs4Error::Inval);
    }
    let mut v = Decoder::new(vals);
    let mut s = Settable {
        given: mask,
        ..Settable::default()
    };
    let bad = |_| Nfs4Error::BadXdr;
    for bit in mask.bits() {
        match bit {
            SIZE => s.size = Some(v.u64().map_err(bad)?),
            MODE => s.mode = Some(v.u32().map_err(bad)? & 0o7777),
            OWNER => s.uid = Some(parse_owner(nonempty(v.opaque(1024).map_err(bad)?)?, false)?),
            OWNER_GROUP => {
                s.gid = Some(parse_owner(nonempty(v.opaque(1024).map_err(bad)?)?, true)?)
            }
            TIME_ACCESS_SET | TIME_MODIFY_SET => {
                let t = match v.u32().map_err(bad)? {
                    0 => SetTime4::Server,
                    1 => {
                        // Well-formed XDR with an impossible value: INVAL, not BADXDR.
                        let sec = v.u64().map_err(bad)? as i64;
                        let nsec = v.u32().map_err(bad)?;
                        if nsec >= 1_000_000_000 {
                            return Err(Nfs4Error::Inval);
                        }
                        SetTime4::Client(Timespec { sec, nsec })
                    }
                    _ => return Err(Nfs4Error::BadXdr),
                };
                if bit == TIME_ACCESS_SET {
                    s.atime = Some(t);
                } else {
                    s.mtime = Some(t);
                }
            }
            _ => unreachable!("checked against SETTABLE"),
        }
    }
    v.finish().map_err(|_| Nfs4Error::BadXdr)?;
    Ok(s)
}

/// An owner or group string to set may not be empty (INVAL: no name at all, as
/// opposed to a name that maps to nobody, BADOWNER).
fn nonempty(raw: &[u8]) -> OpResult<&[u8]> {
    if raw.is_empty() {
        Err(Nfs4Error::Inval)
    } else {
        Ok(raw)
    }
}

/// An owner or group string: a number, or `name@domain` (any domain) / `name` found in
/// the host's passwd or group file.
pub fn parse_owner(raw: &[u8], group: bool) -> OpResult<u32> {
    let s = std::str::from_utf8(raw).map_err(|_| Nfs4Error::BadOwner)?;
    if let Ok(n) = s.parse::<u32>() {
        return Ok(n);
    }
    let name = s.split('@').next().unwrap_or("");
    if name.is_empty() {
        return Err(Nfs4Error::BadOwner);
    }
    let file = if group { "/etc/group" } else { "/etc/passwd" };
    let text = std::fs::read_to_string(file).map_err(|_| Nfs4Error::BadOwner)?;
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let n = f.next()?;
            let _pw = f.next()?;
            let id = f.next()?.parse::<u32>().ok()?;
            (n == name).then_some(id)
        })
        .next()
        .ok_or(Nfs4Error::BadOwner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmaps_round_trip_without_trailing_zero_words() {
        let b = Bitmap::of(&[TYPE, MODE]);
        let mut e = Encoder::new();
        b.encode(&mut e);
        assert_eq!(e.buf.len(), 4 + 8);
        let mut d = Decoder::new(&e.buf);
        assert_eq!(Bitmap::decode(&mut d).unwrap(), b);
        assert!(SUPPORTED.has(SUPPATTR_EXCLCREAT));
        assert!(!SUPPORTED.has(12)); // acl
        assert!(!Bitmap::default().has(200));
    }

    #[test]
    fn owners_go_out_as_names_at_the_domain_when_one_is_set() {
        let m = IdMap::parse(
            "example.org",
            "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n",
            "root:x:0:\nstaff:x:50:\n",
        );
        assert_eq!(m.owner(1000, false), "alice@example.org");
        assert_eq!(m.owner(50, true), "staff@example.org");
        // An id without a name, or a group id looked up as a user, stays a number.
        assert_eq!(m.owner(4242, false), "4242");
        assert_eq!(m.owner(50, false), "50");
    }

    #[test]
    fn owners_are_numbers_or_names() {
        assert_eq!(parse_owner(b"1000", false), Ok(1000));
        assert_eq!(parse_owner(b"root@example.org", false), Ok(0));
        assert_eq!(parse_owner(b"root", true), Ok(0));
        assert_eq!(
            parse_owner(b"no-such-user-here@x", false),
            Err(Nfs4Error::BadOwner)
        );
        assert_eq!(parse_owner(b"@x", false), Err(Nfs4Error::BadOwner));
    }

    #[test]
    fn settable_attributes_are_checked() {
        let mut e = Encoder::new();
        Bitmap::of(&[SIZE, MODE]).encode(&mut e);
        let mut v = Encoder::new();
        v.u64(77).u32(0o640);
        e.opaque(&v.buf);
        let s = decode_settable(&mut Decoder::new(&e.buf)).unwrap();
        assert_eq!((s.size, s.mode), (Some(77), Some(0o640)));
        // A read-only attribute, an unsupported one, and short values.
        for (bits, want) in [
            (vec![FILEID], Nfs4Error::Inval),
            (vec![12], Nfs4Error::AttrNotSupp),
            (vec![SIZE, MODE, OWNER], Nfs4Error::BadXdr),
        ] {
            let mut e = Encoder::new();
            Bitmap::of(&bits).encode(&mut e);
            e.opaque(&v.buf);
            assert_eq!(decode_settable(&mut Decoder::new(&e.buf)), Err(want));
        }
    }
}
