//! The space log: allocation state made persistent one txg at a time.
//!
//! A chain of blocks hangs off the uberblock, newest first. A chain starts with one or
//! more *base* blocks (a full list of allocated extents, written when the chain is
//! condensed) followed by one *log* block per txg (that txg's allocations and frees).
//! Import walks the chain to its start, then applies it oldest first; the chain's own
//! blocks are marked allocated as they are found (they are never in any entry list).
//!
//! Block layout (logical, little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `SHOALSPL` |
//! | 8..12 | version u32 (1) |
//! | 12 | kind u8: 1 = base, 2 = log |
//! | 13..16 | reserved |
//! | 16..24 | txg u64 |
//! | 24..32 | entry count u64 |
//! | 32..160 | previous block pointer (hole at the start of the chain) |
//! | 160.. | entries of 21 bytes: vdev u32, flag u8 (1 alloc, 0 free), offset u64, length u64 |
//!
//! Crash safety: log blocks are new blocks referenced only by the uberblock of their
//! txg, so until that uberblock is durable they do not exist for import.

use crate::alloc::{Allocator, Extent, SpaceEntry};
use crate::blkptr::{BlockPointer, BlockType, BLKPTR_SIZE};
use crate::storage::{BlockSpec, Storage};
use crate::PoolError;

const MAGIC: &[u8; 8] = b"SHOALSPL";
const VERSION: u32 = 1;
const HEADER: usize = 160;
const ENTRY: usize = 21;
/// Entries per block: keeps space log blocks at most 1 MiB.
pub const ENTRIES_PER_BLOCK: usize = (1024 * 1024 - HEADER) / ENTRY;
/// Condense the chain when it grows longer than this.
pub const CONDENSE_AFTER: u64 = 200;

const KIND_BASE: u8 = 1;
const KIND_LOG: u8 = 2;

struct Decoded {
    kind: u8,
    prev: BlockPointer,
    entries: Vec<SpaceEntry>,
}

fn encode(kind: u8, txg: u64, prev: &BlockPointer, entries: &[SpaceEntry]) -> Vec<u8> {
    assert!(entries.len() <= ENTRIES_PER_BLOCK);
    let mut b = vec![0u8; HEADER + ENTRY * entries.len()];
    b[0..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&VERSION.to_le_bytes());
    b[12] = kind;
    b[16..24].copy_from_slice(&txg.to_le_bytes());
    b[24..32].copy_from_slice(&(entries.len() as u64).to_le_bytes());
    prev.encode(&mut b[32..32 + BLKPTR_SIZE]);
    for (i, e) in entries.iter().enumerate() {
        let o = HEADER + i * ENTRY;
        b[o..o + 4].copy_from_slice(&e.extent.vdev.to_le_bytes());
        b[o + 4] = e.alloc as u8;
        b[o + 5..o + 13].copy_from_slice(&e.extent.offset.to_le_bytes());
        b[o + 13..o + 21].copy_from_slice(&e.extent.len.to_le_bytes());
    }
    b
}

fn decode(b: &[u8]) -> Result<Decoded, PoolError> {
    let bad = |w: &str| PoolError::Corrupt(format!("space log: {w}"));
    if b.len() < HEADER || &b[0..8] != MAGIC {
        return Err(bad("magic"));
    }
    if u32::from_le_bytes(b[8..12].try_into().unwrap()) != VERSION {
        return Err(bad("version"));
    }
    let kind = b[12];
    if kind != KIND_BASE && kind != KIND_LOG {
        return Err(bad("kind"));
    }
    let count = u64::from_le_bytes(b[24..32].try_into().unwrap()) as usize;
    if count > ENTRIES_PER_BLOCK || b.len() != HEADER + count * ENTRY {
        return Err(bad("entry count"));
    }
    let prev = BlockPointer::decode(&b[32..32 + BLKPTR_SIZE])?;
    let mut entries = Vec::with_capacity(count);
    for i in 0..count {
        let o = HEADER + i * ENTRY;
        let flag = b[o + 4];
        if flag > 1 {
            return Err(bad("entry flag"));
        }
        entries.push(SpaceEntry {
            extent: Extent {
                vdev: u32::from_le_bytes(b[o..o + 4].try_into().unwrap()),
                offset: u64::from_le_bytes(b[o + 5..o + 13].try_into().unwrap()),
                len: u64::from_le_bytes(b[o + 13..o + 21].try_into().unwrap()),
            },
            alloc: flag == 1,
        });
    }
    Ok(Decoded {
        kind,
        prev,
        entries,
    })
}

fn spec() -> BlockSpec {
    BlockSpec::metadata(BlockType::SpaceLog, 0)
}

/// Appends this txg's entries to the chain, or condenses the chain into a new base.
/// Returns the new (head, length). Called last in a sync, after every other allocation.
pub fn write_txg(
    st: &Storage,
    txg: u64,
    head: BlockPointer,
    len: u64,
) -> Result<(BlockPointer, u64), PoolError> {
    let condense = head.is_hole() || len >= CONDENSE_AFTER;
    if !condense {
        let entries = st.alloc.lock().unwrap().take_pending_log();
        let mut head = head;
        let mut len = len;
        for chunk in entries.chunks(ENTRIES_PER_BLOCK.max(1)) {
            let block = encode(KIND_LOG, txg, &head, chunk);
            head = st.write_block(&block, spec(), txg, false)?;
            len += 1;
        }
        if entries.is_empty() {
            let block = encode(KIND_LOG, txg, &head, &[]);
            head = st.write_block(&block, spec(), txg, false)?;
            len += 1;
        }
        return Ok((head, len));
    }
    // Condense: retire the old chain, then record everything allocated now.
    let old_chain = chain_blocks(st, head)?;
    let base = {
        let mut alloc = st.alloc.lock().unwrap();
        for bp in &old_chain {
            for d in bp.copies() {
                alloc.free(d.extent(), txg, false);
            }
        }
        alloc.take_pending_log();
        alloc.base_extents()
    };
    for bp in &old_chain {
        st.arc.remove(&crate::storage::BlockKey::of(bp));
    }
    let entries: Vec<SpaceEntry> = base
        .into_iter()
        .map(|extent| SpaceEntry {
            extent,
            alloc: true,
        })
        .collect();
    let mut head = BlockPointer::HOLE;
    let mut len = 0;
    for chunk in entries.chunks(ENTRIES_PER_BLOCK) {
        let block = encode(KIND_BASE, txg, &head, chunk);
        head = st.write_block(&block, spec(), txg, false)?;
        len += 1;
    }
    if entries.is_empty() {
        let block = encode(KIND_BASE, txg, &head, &[]);
        head = st.write_block(&block, spec(), txg, false)?;
        len += 1;
    }
    Ok((head, len))
}

/// Every block of the chain, newest first.
pub fn chain_blocks(st: &Storage, head: BlockPointer) -> Result<Vec<BlockPointer>, PoolError> {
    let mut out = Vec::new();
    let mut bp = head;
    while !bp.is_hole() {
        if bp.block_type != BlockType::SpaceLog {
            return Err(PoolError::Corrupt(
                "space log chain names a non-log block".into(),
            ));
        }
        if out.len() as u64 > 1_000_000 {
            return Err(PoolError::Corrupt("space log chain too long".into()));
        }
        out.push(bp);
        let d = decode(st.read_block(&bp)?.bytes())?;
        bp = d.prev;
    }
    Ok(out)
}

/// Rebuilds the allocator from the chain (import).
pub fn replay(st: &Storage, head: BlockPointer, alloc: &mut Allocator) -> Result<(), PoolError> {
    let chain = chain_blocks(st, head)?;
    let mut decoded = Vec::with_capacity(chain.len());
    for bp in &chain {
        decoded.push(decode(st.read_block(bp)?.bytes())?);
    }
    if let Some(first) = decoded.last() {
        if first.kind != KIND_BASE {
            return Err(PoolError::Corrupt(
                "space log chain does not start with a base".into(),
            ));
        }
    }
    for d in decoded.iter().rev() {
        for e in &d.entries {
            if !alloc.replay(*e) {
                return Err(PoolError::Corrupt(format!(
                    "space log contradicts itself at {:?}",
                    e.extent
                )));
            }
        }
    }
    for bp in &chain {
        for dva in bp.copies() {
            let ok = alloc.replay(SpaceEntry {
                extent: dva.extent(),
                alloc: true,
            });
            if !ok {
                return Err(PoolError::Corrupt(
                    "space log block overlaps allocated space".into(),
                ));
            }
        }
    }
    Ok(())
}
