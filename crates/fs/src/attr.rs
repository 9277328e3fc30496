//! File attributes and their on-disk form, kept in the bonus buffer of each object's
//! dnode (so a stat costs no extra block read). The layout is in `docs/format.md`:
//! 128 bytes, little-endian, versioned. The bonus is written in the same transaction as
//! the change it describes, so after a crash attributes and data agree.

use crate::{FsError, Result};

pub const ATTR_SIZE: usize = 128;
const ATTR_VERSION: u8 = 1;

/// What an object is. The byte values are on disk and in directory entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    File = 1,
    Dir = 2,
    Symlink = 3,
    Fifo = 4,
    CharDev = 5,
    BlockDev = 6,
    Socket = 7,
}

impl Kind {
    pub fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::File,
            2 => Kind::Dir,
            3 => Kind::Symlink,
            4 => Kind::Fifo,
            5 => Kind::CharDev,
            6 => Kind::BlockDev,
            7 => Kind::Socket,
            _ => return None,
        })
    }

    /// From the `S_IFMT` bits of a mode.
    pub fn from_mode(mode: u32) -> Option<Kind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFCHR => Kind::CharDev,
            libc::S_IFBLK => Kind::BlockDev,
            libc::S_IFSOCK => Kind::Socket,
            _ => return None,
        })
    }

    pub fn mode_bits(self) -> u32 {
        match self {
            Kind::File => libc::S_IFREG,
            Kind::Dir => libc::S_IFDIR,
            Kind::Symlink => libc::S_IFLNK,
            Kind::Fifo => libc::S_IFIFO,
            Kind::CharDev => libc::S_IFCHR,
            Kind::BlockDev => libc::S_IFBLK,
            Kind::Socket => libc::S_IFSOCK,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    pub fn now() -> Timespec {
        let d = vdev::sim_time::since_epoch();
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }
}

/// Attributes of one object, as `stat` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub generation: u64,
    pub kind: Kind,
    /// Permission bits and setuid/setgid/sticky (no file type bits).
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    pub rdev: u64,
    /// The directory this object was created in (for "..", and NFS lookups of it).
    pub parent: u64,
    /// Object holding extended attributes (0 = none).
    pub xattr_obj: u64,
    /// Bytes allocated, for `st_blocks` (filled in on read, not stored).
    pub used_bytes: u64,
}

/// What a setattr changes.
#[derive(Debug, Clone, Default)]
pub struct SetAttr {
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<Timespec>,
    pub mtime: Option<Timespec>,
    pub ctime: Option<Timespec>,
}

fn put_time(b: &mut [u8], t: Timespec) {
    b[0..8].copy_from_slice(&t.sec.to_le_bytes());
    b[8..12].copy_from_slice(&t.nsec.to_le_bytes());
}

fn get_time(b: &[u8]) -> Timespec {
    Timespec {
        sec: i64::from_le_bytes(b[0..8].try_into().unwrap()),
        nsec: u32::from_le_bytes(b[8..12].try_into().unwrap()),
    }
}

impl Attr {
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.perm
    }

    pub fn encode(&self) -> Vec<u8> {
        assert!(
            self.perm & !0o7777 == 0,
            "perm carries only permission bits"
        );
        let mut b = vec![0u8; ATTR_SIZE];
        b[0] = ATTR_VERSION;
        b[1] = self.kind as u8;
        b[4..8].copy_from_slice(&self.perm.to_le_bytes());
        b[8..12].copy_from_slice(&self.uid.to_le_bytes());
        b[12..16].copy_from_slice(&self.gid.to_le_bytes());
        b[16..20].copy_from_slice(&self.nlink.to_le_bytes());
        b[24..32].copy_from_slice(&self.size.to_le_bytes());
        put_time(&mut b[32..44], self.atime);
        put_time(&mut b[44..56], self.mtime);
        put_time(&mut b[56..68], self.ctime);
        put_time(&mut b[68..80], self.crtime);
        b[80..88].copy_from_slice(&self.rdev.to_le_bytes());
        b[88..96].copy_from_slice(&self.parent.to_le_bytes());
        b[96..104].copy_from_slice(&self.xattr_obj.to_le_bytes());
        b
    }

    pub fn decode(ino: u64, generation: u64, b: &[u8]) -> Result<Attr> {
        let bad = |why: &str| FsError::Io(format!("object {ino}: attributes {why}"));
        if b.len() < ATTR_SIZE {
            return Err(bad("missing or short"));
        }
        if b[0] != ATTR_VERSION {
            return Err(bad(&format!("version {} unknown", b[0])));
        }
        let kind = Kind::from_byte(b[1]).ok_or_else(|| bad("name an unknown kind"))?;
        let perm = u32::from_le_bytes(b[4..8].try_into().unwrap());
        if perm & !0o7777 != 0 {
            return Err(bad("carry bad permission bits"));
        }
        Ok(Attr {
            ino,
            generation,
            kind,
            perm,
            uid: u32::from_le_bytes(b[8..12].try_into().unwrap()),
            gid: u32::from_le_bytes(b[12..16].try_into().unwrap()),
            nlink: u32::from_le_bytes(b[16..20].try_into().unwrap()),
            size: u64::from_le_bytes(b[24..32].try_into().unwrap()),
            atime: get_time(&b[32..44]),
            mtime: get_time(&b[44..56]),
            ctime: get_time(&b[56..68]),
            crtime: get_time(&b[68..80]),
            rdev: u64::from_le_bytes(b[80..88].try_into().unwrap()),
            parent: u64::from_le_bytes(b[88..96].try_into().unwrap()),
            xattr_obj: u64::from_le_bytes(b[96..104].try_into().unwrap()),
            used_bytes: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_and_garbage_is_refused() {
        let a = Attr {
            ino: 9,
            generation: 4,
            kind: Kind::Symlink,
            perm: 0o4755,
            uid: 1000,
            gid: 100,
            nlink: 3,
            size: 1 << 40,
            atime: Timespec {
                sec: -5,
                nsec: 999_999_999,
            },
            mtime: Timespec {
                sec: 1 << 33,
                nsec: 1,
            },
            ctime: Timespec::now(),
            crtime: Timespec::default(),
            rdev: 0x0801,
            parent: 1,
            xattr_obj: 77,
            used_bytes: 0,
        };
        assert_eq!(Attr::decode(9, 4, &a.encode()).unwrap(), a);
        let mut b = a.encode();
        b[1] = 99;
        assert!(Attr::decode(9, 4, &b).is_err());
        assert!(Attr::decode(9, 4, &[1u8; 10]).is_err());
    }
}
