//! Block pointers: how a parent names, sizes and vouches for a child block.
//!
//! A block pointer is 128 bytes, little-endian, documented in `docs/format.md`:
//!
//! | bytes | field |
//! |---|---|
//! | 0..48 | up to 3 DVAs of 16 bytes: vdev u32, allocated sectors u32, offset u64 (bytes, logical in the vdev) |
//! | 48..52 | logical size u32 (bytes, before compression) |
//! | 52..56 | physical size u32 (bytes as stored, exact) |
//! | 56 | compression code |
//! | 57 | checksum kind |
//! | 58 | level (0 = data, n = indirect over level n-1) |
//! | 59 | block type (`BlockType`) |
//! | 60..64 | reserved, zero |
//! | 64..72 | birth txg u64 |
//! | 72..80 | fill: data blocks at or below this pointer u64 |
//! | 80..112 | checksum of the physical bytes (32 bytes) |
//! | 112..128 | reserved, zero |
//!
//! An all-zero pointer is a hole: nothing allocated, reads as zeros. The checksum
//! covers the stored bytes, so a block is verified before it is decompressed, and the
//! parent's pointer is itself covered by the parent's checksum: every byte read is
//! vouched for by a chain ending at the uberblock.

use crate::checksum::{Checksum, ChecksumKind};
use crate::compress::Compression;
use crate::PoolError;

pub const BLKPTR_SIZE: usize = 128;
pub const MAX_DVAS: usize = 3;

/// Data virtual address: where one copy of a block lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Dva {
    pub vdev: u32,
    /// Allocated size in 4 KiB sectors (0 = unused DVA slot).
    pub asize_sectors: u32,
    /// Logical byte offset inside the top-level vdev.
    pub offset: u64,
}

impl Dva {
    pub fn is_empty(&self) -> bool {
        self.asize_sectors == 0
    }
    pub fn asize(&self) -> u64 {
        self.asize_sectors as u64 * vdev::SECTOR_SIZE as u64
    }

    /// The space this copy occupies, as the allocator names it.
    pub fn extent(&self) -> crate::alloc::Extent {
        crate::alloc::Extent {
            vdev: self.vdev,
            offset: self.offset,
            len: self.asize(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BlockType {
    None = 0,
    Data = 1,
    Indirect = 2,
    Dnodes = 3,
    ObjsetRoot = 4,
    SpaceLog = 5,
    Directory = 6,
    Deadlist = 7,
}

impl BlockType {
    pub fn from_code(code: u8) -> Option<BlockType> {
        Some(match code {
            0 => BlockType::None,
            1 => BlockType::Data,
            2 => BlockType::Indirect,
            3 => BlockType::Dnodes,
            4 => BlockType::ObjsetRoot,
            5 => BlockType::SpaceLog,
            6 => BlockType::Directory,
            7 => BlockType::Deadlist,
            _ => return None,
        })
    }
    /// Metadata gets extra copies and is always compressed.
    pub fn is_metadata(self) -> bool {
        !matches!(self, BlockType::Data)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockPointer {
    pub dvas: [Dva; MAX_DVAS],
    pub lsize: u32,
    pub psize: u32,
    pub compression: Compression,
    pub checksum_kind: ChecksumKind,
    pub level: u8,
    pub block_type: BlockType,
    pub birth_txg: u64,
    pub fill: u64,
    pub checksum: Checksum,
}

impl Default for BlockPointer {
    fn default() -> Self {
        BlockPointer::HOLE
    }
}

impl BlockPointer {
    pub const HOLE: BlockPointer = BlockPointer {
        dvas: [Dva {
            vdev: 0,
            asize_sectors: 0,
            offset: 0,
        }; MAX_DVAS],
        lsize: 0,
        psize: 0,
        compression: Compression::Off,
        checksum_kind: ChecksumKind::Fletcher4,
        level: 0,
        block_type: BlockType::None,
        birth_txg: 0,
        fill: 0,
        checksum: Checksum([0; 32]),
    };

    pub fn is_hole(&self) -> bool {
        self.birth_txg == 0
    }

    pub fn copies(&self) -> impl Iterator<Item = &Dva> {
        self.dvas.iter().filter(|d| !d.is_empty())
    }

    /// Bytes a copy occupies on its vdev before parity: the stored bytes, sector-rounded.
    pub fn io_size(&self) -> u64 {
        (self.psize as u64).div_ceil(vdev::SECTOR_SIZE as u64) * vdev::SECTOR_SIZE as u64
    }

    /// True if `io` (a copy as read, at least `psize` bytes) matches the checksum.
    pub fn verifies(&self, io: &[u8]) -> bool {
        io.len() >= self.psize as usize
            && crate::checksum::compute(self.checksum_kind, &io[..self.psize as usize])
                == self.checksum
    }

    /// Bytes allocated for all copies.
    pub fn asize_total(&self) -> u64 {
        self.copies().map(|d| d.asize()).sum()
    }

    pub fn encode(&self, out: &mut [u8]) {
        assert_eq!(out.len(), BLKPTR_SIZE);
        out.fill(0);
        if self.is_hole() {
            return;
        }
        for (i, dva) in self.dvas.iter().enumerate() {
            let o = i * 16;
            out[o..o + 4].copy_from_slice(&dva.vdev.to_le_bytes());
            out[o + 4..o + 8].copy_from_slice(&dva.asize_sectors.to_le_bytes());
            out[o + 8..o + 16].copy_from_slice(&dva.offset.to_le_bytes());
        }
        out[48..52].copy_from_slice(&self.lsize.to_le_bytes());
        out[52..56].copy_from_slice(&self.psize.to_le_bytes());
        out[56] = self.compression.code();
        out[57] = self.checksum_kind.code();
        out[58] = self.level;
        out[59] = self.block_type as u8;
        out[64..72].copy_from_slice(&self.birth_txg.to_le_bytes());
        out[72..80].copy_from_slice(&self.fill.to_le_bytes());
        out[80..112].copy_from_slice(&self.checksum.0);
    }

    pub fn to_bytes(&self) -> [u8; BLKPTR_SIZE] {
        let mut b = [0u8; BLKPTR_SIZE];
        self.encode(&mut b);
        b
    }

    /// Decodes and validates a pointer read from a verified parent.
    pub fn decode(b: &[u8]) -> Result<BlockPointer, PoolError> {
        assert_eq!(b.len(), BLKPTR_SIZE);
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let birth_txg = u64_at(64);
        if birth_txg == 0 {
            if b.iter().any(|&x| x != 0) {
                return Err(PoolError::Corrupt("hole pointer with nonzero bytes".into()));
            }
            return Ok(BlockPointer::HOLE);
        }
        let mut dvas = [Dva::default(); MAX_DVAS];
        for (i, dva) in dvas.iter_mut().enumerate() {
            let o = i * 16;
            *dva = Dva {
                vdev: u32_at(o),
                asize_sectors: u32_at(o + 4),
                offset: u64_at(o + 8),
            };
        }
        let bad = |what: &str| PoolError::Corrupt(format!("block pointer: {what}"));
        let compression = Compression::from_code(b[56]).ok_or_else(|| bad("compression code"))?;
        let checksum_kind = ChecksumKind::from_code(b[57]).ok_or_else(|| bad("checksum kind"))?;
        let block_type = BlockType::from_code(b[59]).ok_or_else(|| bad("block type"))?;
        let bp = BlockPointer {
            dvas,
            lsize: u32_at(48),
            psize: u32_at(52),
            compression,
            checksum_kind,
            level: b[58],
            block_type,
            birth_txg,
            fill: u64_at(72),
            checksum: Checksum(b[80..112].try_into().unwrap()),
        };
        if dvas[0].is_empty() {
            return Err(bad("no copies"));
        }
        if bp.psize == 0 || bp.psize > bp.lsize.max(bp.psize) || bp.lsize > 16 * 1024 * 1024 {
            return Err(bad("sizes"));
        }
        if bp.compression == Compression::Off && bp.psize != bp.lsize {
            return Err(bad("uncompressed block with psize != lsize"));
        }
        Ok(bp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn encode_decode_round_trip(
            vdev in 0u32..8, sectors in 1u32..1000, offset in 0u64..(1u64 << 40),
            lsize in 1u32..(1 << 20), level in 0u8..5, birth in 1u64..u64::MAX,
            fill in 0u64..1000, sum in any::<[u8; 32]>(), copies in 1usize..=3,
        ) {
            let mut dvas = [Dva::default(); MAX_DVAS];
            for (i, d) in dvas.iter_mut().enumerate().take(copies) {
                *d = Dva { vdev: vdev + i as u32, asize_sectors: sectors, offset: offset + i as u64 };
            }
            let bp = BlockPointer {
                dvas, lsize, psize: lsize, compression: Compression::Off,
                checksum_kind: ChecksumKind::Blake3, level, block_type: BlockType::Indirect,
                birth_txg: birth, fill, checksum: Checksum(sum),
            };
            let back = BlockPointer::decode(&bp.to_bytes()).unwrap();
            prop_assert_eq!(back, bp);
            prop_assert_eq!(back.copies().count(), copies);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), BLKPTR_SIZE)) {
            let _ = BlockPointer::decode(&bytes);
        }
    }

    #[test]
    fn hole_is_all_zero() {
        assert_eq!(BlockPointer::HOLE.to_bytes(), [0u8; BLKPTR_SIZE]);
        assert!(BlockPointer::decode(&[0u8; BLKPTR_SIZE]).unwrap().is_hole());
    }
}
