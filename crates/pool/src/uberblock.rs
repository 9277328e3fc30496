//! The uberblock: the root of everything a pool has committed.
//!
//! One 4 KiB slot of a label's uberblock ring (see `vdev::label`), little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `SHOALUB\0` |
//! | 8..12 | version u32 (1) |
//! | 12..16 | reserved, zero |
//! | 16..24 | txg u64 |
//! | 24..32 | pool guid u64 |
//! | 32..40 | commit time, ns since the Unix epoch u64 |
//! | 40..168 | directory block pointer (object sets of the pool) |
//! | 168..296 | space log head block pointer |
//! | 296..304 | space log chain length u64 |
//! | 304..312 | intent log chain guid u64 |
//! | 312..320 | intent log chain start: byte position in its ring u64 |
//! | 320..328 | intent log chain start: sequence number u64 |
//! | 328..332 | intent log ring u32: 0 none, 1 the pool's log area, 2 the log devices |
//! | 332..336 | reserved, zero |
//! | 336..344 | pool log area: logical offset on top-level vdev 0 u64 |
//! | 344..352 | pool log area: logical length u64 (0 = none) |
//! | 352..4064 | zero |
//! | 4064..4096 | blake3 of bytes 0..4064 |
//!
//! Commit protocol (pool.rs): all blocks of txg `t` are written and every device
//! flushed; then the uberblock of `t` is written to slot `t % 32` of all four labels of
//! every device and the devices flushed again. `t` is committed when that second
//! flush returns. A crash before it leaves either the old or the new uberblock valid;
//! both name intact trees because frees are deferred (see `alloc.rs`). Import takes the
//! highest-txg uberblock whose checksum, pool guid and trees all verify.

use crate::blkptr::{BlockPointer, BLKPTR_SIZE};
use crate::intent_log::{LogHeader, RingKind};
use crate::PoolError;
use vdev::label::UBERBLOCK_SLOT_SIZE;

const MAGIC: &[u8; 8] = b"SHOALUB\0";
const VERSION: u32 = 1;
const HASH_AT: usize = UBERBLOCK_SLOT_SIZE - 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uberblock {
    pub txg: u64,
    pub pool_guid: u64,
    pub time_ns: u64,
    pub directory: BlockPointer,
    pub spacelog_head: BlockPointer,
    pub spacelog_len: u64,
    pub log: LogHeader,
}

impl Uberblock {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; UBERBLOCK_SLOT_SIZE];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.txg.to_le_bytes());
        b[24..32].copy_from_slice(&self.pool_guid.to_le_bytes());
        b[32..40].copy_from_slice(&self.time_ns.to_le_bytes());
        self.directory.encode(&mut b[40..40 + BLKPTR_SIZE]);
        self.spacelog_head.encode(&mut b[168..168 + BLKPTR_SIZE]);
        b[296..304].copy_from_slice(&self.spacelog_len.to_le_bytes());
        let l = &self.log;
        b[304..312].copy_from_slice(&l.guid.to_le_bytes());
        b[312..320].copy_from_slice(&l.start.to_le_bytes());
        b[320..328].copy_from_slice(&l.seq.to_le_bytes());
        b[328..332].copy_from_slice(&l.kind.code().to_le_bytes());
        b[336..344].copy_from_slice(&l.area_offset.to_le_bytes());
        b[344..352].copy_from_slice(&l.area_len.to_le_bytes());
        let h = blake3::hash(&b[..HASH_AT]);
        b[HASH_AT..].copy_from_slice(h.as_bytes());
        b
    }

    /// `Ok(None)` for an empty or foreign slot; `Err` never (torn slots are just invalid).
    pub fn decode(b: &[u8]) -> Option<Uberblock> {
        if b.len() != UBERBLOCK_SLOT_SIZE || &b[0..8] != MAGIC {
            return None;
        }
        if blake3::hash(&b[..HASH_AT]).as_bytes() != &b[HASH_AT..] {
            return None;
        }
        if u32::from_le_bytes(b[8..12].try_into().unwrap()) != VERSION {
            return None;
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        Some(Uberblock {
            txg: u64_at(16),
            pool_guid: u64_at(24),
            time_ns: u64_at(32),
            directory: BlockPointer::decode(&b[40..40 + BLKPTR_SIZE]).ok()?,
            spacelog_head: BlockPointer::decode(&b[168..168 + BLKPTR_SIZE]).ok()?,
            spacelog_len: u64_at(296),
            log: LogHeader {
                guid: u64_at(304),
                start: u64_at(312),
                seq: u64_at(320),
                kind: RingKind::from_code(u32::from_le_bytes(b[328..332].try_into().unwrap()))?,
                area_offset: u64_at(336),
                area_len: u64_at(344),
            },
        })
    }
}

/// Valid uberblocks of a pool from many raw slots, newest first, duplicates removed.
pub fn candidates(slots: &[Vec<u8>], pool_guid: u64) -> Vec<Uberblock> {
    let mut ubs: Vec<Uberblock> = slots
        .iter()
        .filter_map(|s| Uberblock::decode(s))
        .filter(|u| u.pool_guid == pool_guid && u.txg > 0)
        .collect();
    ubs.sort_by_key(|u| std::cmp::Reverse(u.txg));
    ubs.dedup_by(|a, b| a == b);
    ubs
}

pub fn now_ns() -> u64 {
    vdev::sim_time::since_epoch().as_nanos() as u64
}

#[allow(dead_code)]
fn _assert_error_type(_: PoolError) {}

#[cfg(test)]
mod tests {
    use super::*;

    fn ub(txg: u64) -> Uberblock {
        Uberblock {
            txg,
            pool_guid: 42,
            time_ns: 1,
            directory: BlockPointer::HOLE,
            spacelog_head: BlockPointer::HOLE,
            spacelog_len: 0,
            log: LogHeader::default(),
        }
    }

    #[test]
    fn newest_valid_wins_and_torn_slots_are_ignored() {
        let mut slots = vec![
            ub(5).encode(),
            ub(7).encode(),
            ub(6).encode(),
            vec![0u8; 4096],
        ];
        let mut torn = ub(9).encode();
        torn[100] ^= 1;
        slots.push(torn);
        let mut foreign = ub(10);
        foreign.pool_guid = 1;
        slots.push(foreign.encode());
        let c = candidates(&slots, 42);
        assert_eq!(c.iter().map(|u| u.txg).collect::<Vec<_>>(), vec![7, 6, 5]);
    }

    #[test]
    fn round_trip() {
        assert_eq!(Uberblock::decode(&ub(3).encode()), Some(ub(3)));
    }
}
