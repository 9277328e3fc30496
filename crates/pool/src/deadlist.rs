//! Dead lists: the blocks a dataset stopped referencing that an older snapshot still
//! references, so they are kept instead of freed.
//!
//! When an object set frees a block born at or before its latest snapshot's txg, the
//! block goes on the dataset's dead list rather than back to the allocator. Taking a
//! snapshot hands the dataset's dead list to the snapshot (the blocks that died between
//! the previous snapshot and this one) and starts an empty one. Destroying snapshot S,
//! with P the snapshot before it (txg p, 0 if none) and N the next one or the live
//! dataset: every block on N's dead list born after p and at or before S's txg was
//! referenced only by S and is freed; the rest of N's list and all of S's list become
//! N's list. Space is accounted by birth time the same way: what S alone holds is the
//! part of N's dead list born in (p, s].
//!
//! On disk a dead list is a chain of blocks, newest first, appended to once per txg in
//! which the dataset freed a shared block. Block layout (logical, little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `SHOALDL\0` |
//! | 8..12 | version u32 (1) |
//! | 12..16 | entry count u32 (at most `ENTRIES_PER_BLOCK`) |
//! | 16..144 | previous block pointer (hole at the start of the chain) |
//! | 144.. | block pointers of the dead blocks, 128 bytes each |
//!
//! Crash safety: chain blocks are new blocks named only by the directory of the txg
//! that wrote them, and a rewritten chain frees the old one in that same txg (deferred),
//! so the committed directory always names an intact chain.

use crate::blkptr::{BlockPointer, BlockType, BLKPTR_SIZE};
use crate::storage::{BlockSpec, Storage};
use crate::PoolError;

const MAGIC: &[u8; 8] = b"SHOALDL\0";
const VERSION: u32 = 1;
const HEADER: usize = 16 + BLKPTR_SIZE;
pub const ENTRIES_PER_BLOCK: usize = 1000;

/// A dead list's chain head and how many block pointers it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlist {
    pub head: BlockPointer,
    pub count: u64,
    /// Deflated size (`Storage::dsize`) of the dead blocks listed: what the snapshots
    /// hold beyond the dataset.
    pub bytes: u64,
}

impl Deadlist {
    pub const EMPTY: Deadlist = Deadlist {
        head: BlockPointer::HOLE,
        count: 0,
        bytes: 0,
    };
}

fn spec() -> BlockSpec {
    BlockSpec::metadata(BlockType::Deadlist, 0)
}

/// Appends `bps` to the chain, writing new blocks in `txg`.
pub fn append(
    st: &Storage,
    txg: u64,
    list: Deadlist,
    bps: &[BlockPointer],
) -> Result<Deadlist, PoolError> {
    let mut head = list.head;
    for chunk in bps.chunks(ENTRIES_PER_BLOCK) {
        let mut b = Vec::with_capacity(HEADER + chunk.len() * BLKPTR_SIZE);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
        b.extend_from_slice(&head.to_bytes());
        for bp in chunk {
            assert!(!bp.is_hole(), "a hole on a dead list");
            b.extend_from_slice(&bp.to_bytes());
        }
        head = st.write_block(&b, spec(), txg, true)?;
    }
    Ok(Deadlist {
        head,
        count: list.count + bps.len() as u64,
        bytes: list.bytes + bps.iter().map(|bp| st.dsize(bp)).sum::<u64>(),
    })
}

/// Walks the chain: (chain block, its entries), newest block first.
fn walk(
    st: &Storage,
    head: BlockPointer,
    visit: &mut dyn FnMut(&BlockPointer, Vec<BlockPointer>),
) -> Result<(), PoolError> {
    let bad = |w: &str| PoolError::Corrupt(format!("dead list: {w}"));
    let mut bp = head;
    let mut blocks = 0u64;
    while !bp.is_hole() {
        if bp.block_type != BlockType::Deadlist {
            return Err(bad("chain names a block of another type"));
        }
        blocks += 1;
        if blocks > 100_000_000 {
            return Err(bad("chain too long"));
        }
        let block = st.read_block(&bp)?;
        let b = block.bytes();
        if b.len() < HEADER || &b[0..8] != MAGIC {
            return Err(bad("magic"));
        }
        if u32::from_le_bytes(b[8..12].try_into().unwrap()) != VERSION {
            return Err(bad("version"));
        }
        let n = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
        if n > ENTRIES_PER_BLOCK || b.len() < HEADER + n * BLKPTR_SIZE {
            return Err(bad("entry count"));
        }
        let prev = BlockPointer::decode(&b[16..HEADER])?;
        let mut entries = Vec::with_capacity(n);
        for i in 0..n {
            let at = HEADER + i * BLKPTR_SIZE;
            entries.push(BlockPointer::decode(&b[at..at + BLKPTR_SIZE])?);
        }
        visit(&bp, entries);
        bp = prev;
    }
    Ok(())
}

/// Every dead block pointer on the list.
pub fn entries(st: &Storage, list: Deadlist) -> Result<Vec<BlockPointer>, PoolError> {
    let mut out = Vec::with_capacity(list.count.min(1 << 20) as usize);
    walk(st, list.head, &mut |_, e| out.extend(e))?;
    Ok(out)
}

/// The deflated size of the listed blocks, counted by reading the chain (for
/// directories written before the size was stored).
pub fn count_bytes(st: &Storage, list: Deadlist) -> Result<u64, PoolError> {
    let mut total = 0;
    walk(st, list.head, &mut |_, e| {
        total += e.iter().map(|bp| st.dsize(bp)).sum::<u64>()
    })?;
    Ok(total)
}

/// The chain's own blocks.
pub fn chain_blocks(st: &Storage, list: Deadlist) -> Result<Vec<BlockPointer>, PoolError> {
    let mut out = Vec::new();
    walk(st, list.head, &mut |bp, _| out.push(*bp))?;
    Ok(out)
}

/// Frees the chain's own blocks (not the dead blocks it lists) in `txg`.
pub fn free_chain(st: &Storage, list: Deadlist, txg: u64) -> Result<(), PoolError> {
    for bp in chain_blocks(st, list)? {
        st.free_block(&bp, txg);
    }
    Ok(())
}
