//! Dnodes: the fixed-size descriptor of one object (a sparse array of equal-size
//! blocks plus a small "bonus" buffer the layer above uses for attributes).
//!
//! On disk a dnode is 512 bytes, little-endian; object `n` of an object set lives at
//! byte `(n % 32) * 512` of block `n / 32` of the object set's dnode array (object 0):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | object type (0 = free slot) |
//! | 1 | levels of the block tree (0 = no blocks, 1 = root is the data block) |
//! | 2 | checksum kind of data blocks |
//! | 3 | compression code of data blocks |
//! | 4..8 | data block size u32 |
//! | 8..16 | number of blocks (highest written block id + 1) u64 |
//! | 16..24 | generation u64 (owner-defined) |
//! | 24..32 | reserved, zero |
//! | 32..160 | root block pointer |
//! | 160..162 | bonus length u16 |
//! | 162..192 | reserved, zero |
//! | 192..512 | bonus bytes |
//!
//! Indirect blocks are `INDIRECT_BLOCK_SIZE` bytes holding `BPS_PER_INDIRECT` block
//! pointers; a tree of `levels` levels addresses `BPS_PER_INDIRECT^(levels-1)` blocks.

use crate::blkptr::{BlockPointer, BLKPTR_SIZE};
use crate::checksum::ChecksumKind;
use crate::compress::Compression;
use crate::PoolError;

pub const DNODE_SIZE: usize = 512;
pub const DNODES_PER_BLOCK: u64 = 32;
pub const DNODE_BLOCK_SIZE: u32 = (DNODE_SIZE as u32) * DNODES_PER_BLOCK as u32;
pub const BONUS_MAX: usize = 320;
pub const INDIRECT_BLOCK_SIZE: usize = 128 * 1024;
pub const BPS_PER_INDIRECT: u64 = (INDIRECT_BLOCK_SIZE / BLKPTR_SIZE) as u64;
pub const INDIRECT_SHIFT: u32 = 10;
pub const MAX_LEVELS: u8 = 6;
pub const MIN_BLOCK_SIZE: u32 = 512;
pub const MAX_BLOCK_SIZE: u32 = 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dnode {
    pub object_type: u8,
    pub levels: u8,
    pub checksum: ChecksumKind,
    pub compression: Compression,
    pub block_size: u32,
    pub nblocks: u64,
    pub generation: u64,
    pub root: BlockPointer,
    pub bonus: Vec<u8>,
}

impl Dnode {
    pub fn new(
        object_type: u8,
        block_size: u32,
        compression: Compression,
        checksum: ChecksumKind,
    ) -> Dnode {
        assert!(object_type != 0, "type 0 marks a free slot");
        assert!(
            (MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size)
                && block_size.is_multiple_of(512),
            "block size {block_size} out of range"
        );
        Dnode {
            object_type,
            levels: 0,
            checksum,
            compression,
            block_size,
            nblocks: 0,
            generation: 0,
            root: BlockPointer::HOLE,
            bonus: Vec::new(),
        }
    }

    pub fn is_free(&self) -> bool {
        self.object_type == 0
    }

    pub fn free_slot() -> Dnode {
        Dnode {
            object_type: 0,
            levels: 0,
            checksum: ChecksumKind::Fletcher4,
            compression: Compression::Off,
            block_size: MIN_BLOCK_SIZE,
            nblocks: 0,
            generation: 0,
            root: BlockPointer::HOLE,
            bonus: Vec::new(),
        }
    }

    pub fn encode(&self, out: &mut [u8]) {
        assert_eq!(out.len(), DNODE_SIZE);
        out.fill(0);
        if self.is_free() {
            return;
        }
        assert!(self.bonus.len() <= BONUS_MAX);
        out[0] = self.object_type;
        out[1] = self.levels;
        out[2] = self.checksum.code();
        out[3] = self.compression.code();
        out[4..8].copy_from_slice(&self.block_size.to_le_bytes());
        out[8..16].copy_from_slice(&self.nblocks.to_le_bytes());
        out[16..24].copy_from_slice(&self.generation.to_le_bytes());
        self.root.encode(&mut out[32..160]);
        out[160..162].copy_from_slice(&(self.bonus.len() as u16).to_le_bytes());
        out[192..192 + self.bonus.len()].copy_from_slice(&self.bonus);
    }

    pub fn decode(b: &[u8]) -> Result<Dnode, PoolError> {
        assert_eq!(b.len(), DNODE_SIZE);
        if b[0] == 0 {
            return Ok(Dnode::free_slot());
        }
        let bad = |w: &str| PoolError::Corrupt(format!("dnode: {w}"));
        let block_size = u32::from_le_bytes(b[4..8].try_into().unwrap());
        let bonus_len = u16::from_le_bytes(b[160..162].try_into().unwrap()) as usize;
        if bonus_len > BONUS_MAX {
            return Err(bad("bonus length"));
        }
        if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) || b[1] > MAX_LEVELS {
            return Err(bad("geometry"));
        }
        Ok(Dnode {
            object_type: b[0],
            levels: b[1],
            checksum: ChecksumKind::from_code(b[2]).ok_or_else(|| bad("checksum"))?,
            compression: Compression::from_code(b[3]).ok_or_else(|| bad("compression"))?,
            block_size,
            nblocks: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            generation: u64::from_le_bytes(b[16..24].try_into().unwrap()),
            root: BlockPointer::decode(&b[32..160])?,
            bonus: b[192..192 + bonus_len].to_vec(),
        })
    }
}

/// Levels needed so a tree addresses `nblocks` blocks.
pub fn levels_for(nblocks: u64) -> u8 {
    if nblocks == 0 {
        return 0;
    }
    let mut levels = 1u8;
    let mut span = 1u64;
    while span < nblocks {
        span = span.saturating_mul(BPS_PER_INDIRECT);
        levels += 1;
    }
    levels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut d = Dnode::new(7, 131072, Compression::Lz4, ChecksumKind::Blake3);
        d.nblocks = 12345;
        d.levels = 3;
        d.generation = 99;
        d.bonus = vec![1, 2, 3];
        let mut buf = [0u8; DNODE_SIZE];
        d.encode(&mut buf);
        assert_eq!(Dnode::decode(&buf).unwrap(), d);
        assert!(Dnode::decode(&[0u8; DNODE_SIZE]).unwrap().is_free());
    }

    #[test]
    fn levels() {
        assert_eq!(levels_for(0), 0);
        assert_eq!(levels_for(1), 1);
        assert_eq!(levels_for(2), 2);
        assert_eq!(levels_for(1024), 2);
        assert_eq!(levels_for(1025), 3);
    }
}
