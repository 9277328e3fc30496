//! Block trees of objects and of the dnode array: looking up, reading, listing,
//! rewriting and freeing the blocks under a root pointer, and walking a whole object
//! set (scrub, check, send). The object set itself (`mod.rs`) keeps the dirty state
//! and decides what changes; these functions only follow and rebuild pointers.

use super::*;

pub(crate) fn bp_at(block: &[u8], index: u64) -> Result<BlockPointer, PoolError> {
    let o = index as usize * BLKPTR_SIZE;
    BlockPointer::decode(&block[o..o + BLKPTR_SIZE])
}

pub(crate) fn check_child(parent_level: u8, bp: &BlockPointer) -> Result<(), PoolError> {
    if !bp.is_hole() && bp.level + 1 != parent_level {
        return Err(PoolError::Corrupt(format!(
            "indirect block at level {parent_level} points to a level {} block",
            bp.level
        )));
    }
    Ok(())
}

/// The level-0 pointer of block `blkid` of a tree; `None` for a hole.
pub fn tree_block_bp(
    st: &Storage,
    root: BlockPointer,
    levels: u8,
    blkid: u64,
) -> Result<Option<BlockPointer>, PoolError> {
    match tree_block_lookup(st, root, levels, blkid, Fetch::Any, &mut Vec::new())? {
        TreeLookup::Hole => Ok(None),
        TreeLookup::Block(bp) => Ok(Some(bp)),
        TreeLookup::NotCached => unreachable!("Fetch::Any reads what is not cached"),
    }
}

/// Where a tree lookup ended.
pub(super) enum TreeLookup {
    Hole,
    Block(BlockPointer),
    /// An indirect block on the way is not in the ARC (`Fetch::CachedOnly` only).
    NotCached,
}

/// With `Fetch::CachedOnly` the indirect blocks are only peeked at and pushed to
/// `peeked`, so a lookup that ends `NotCached` counts nothing; the caller counts them
/// (`Storage::cached_blocks`) with the data blocks, all or nothing.
pub(super) fn tree_block_lookup(
    st: &Storage,
    root: BlockPointer,
    levels: u8,
    blkid: u64,
    fetch: Fetch,
    peeked: &mut Vec<BlockPointer>,
) -> Result<TreeLookup, PoolError> {
    if levels == 0 || root.is_hole() {
        return Ok(TreeLookup::Hole);
    }
    let span_shift = INDIRECT_SHIFT * (levels as u32 - 1);
    if span_shift < 64 && (blkid >> span_shift) > 0 {
        return Ok(TreeLookup::Hole);
    }
    let mut bp = root;
    for level in (1..levels).rev() {
        let block = match fetch {
            Fetch::Any => st.read_block(&bp)?,
            Fetch::CachedOnly => match st.peek_block(&bp) {
                Some(block) => {
                    peeked.push(bp);
                    block
                }
                None => return Ok(TreeLookup::NotCached),
            },
        };
        let index = (blkid >> (INDIRECT_SHIFT * (level as u32 - 1))) & (BPS_PER_INDIRECT - 1);
        if block.bytes().len() != INDIRECT_BLOCK_SIZE {
            return Err(PoolError::Corrupt("indirect block of wrong size".into()));
        }
        bp = bp_at(block.bytes(), index)?;
        check_child(level, &bp)?;
        if bp.is_hole() {
            return Ok(TreeLookup::Hole);
        }
    }
    Ok(TreeLookup::Block(bp))
}

/// Reads block `blkid` of a tree; `None` for a hole.
pub fn read_tree_block(
    st: &Storage,
    root: BlockPointer,
    levels: u8,
    blkid: u64,
    kind: AccessKind,
) -> Result<Option<crate::storage::CachedBlock>, PoolError> {
    match tree_block_bp(st, root, levels, blkid)? {
        Some(bp) => Ok(Some(st.read_block_as(&bp, kind)?)),
        None => Ok(None),
    }
}

/// Block ids in `[start, end)` that are not holes in the tree.
pub fn existing_blocks(
    st: &Storage,
    root: BlockPointer,
    levels: u8,
    start: u64,
    end: u64,
) -> Result<Vec<u64>, PoolError> {
    let mut out = Vec::new();
    fn walk(
        st: &Storage,
        bp: BlockPointer,
        level: u8,
        base: u64,
        start: u64,
        end: u64,
        out: &mut Vec<u64>,
    ) -> Result<(), PoolError> {
        if bp.is_hole() {
            return Ok(());
        }
        if level == 0 {
            if base >= start && base < end {
                out.push(base);
            }
            return Ok(());
        }
        let span = 1u64 << (INDIRECT_SHIFT * level as u32);
        if base >= end || base.saturating_add(span) <= start {
            return Ok(());
        }
        let block = st.read_block(&bp)?;
        let child_span = span >> INDIRECT_SHIFT;
        for i in 0..BPS_PER_INDIRECT {
            let child = bp_at(block.bytes(), i)?;
            check_child(level, &child)?;
            walk(st, child, level - 1, base + i * child_span, start, end, out)?;
        }
        Ok(())
    }
    if levels > 0 {
        walk(st, root, levels - 1, 0, start, end, &mut out)?;
    }
    Ok(out)
}

/// Frees every block of a tree (object destroyed).
pub(super) fn free_tree(
    st: &Storage,
    root: BlockPointer,
    levels: u8,
    rel: &Release,
) -> Result<(), PoolError> {
    fn walk(st: &Storage, bp: BlockPointer, level: u8, rel: &Release) -> Result<(), PoolError> {
        if bp.is_hole() {
            return Ok(());
        }
        if level > 0 {
            let block = st.read_block(&bp)?;
            for i in 0..BPS_PER_INDIRECT {
                let child = bp_at(block.bytes(), i)?;
                check_child(level, &child)?;
                walk(st, child, level - 1, rel)?;
            }
        }
        rel.free(&bp);
        Ok(())
    }
    if levels > 0 {
        walk(st, root, levels - 1, rel)?;
    }
    Ok(())
}

/// Applies level-0 `updates` (block id -> new pointer or hole) to a tree, rewriting
/// every indirect block on their paths into `batch`, freeing replaced blocks. Returns
/// the new root, which must not be reachable by readers before `batch` is written.
pub(super) fn update_tree(
    rel: &Release,
    old_root: BlockPointer,
    old_levels: u8,
    nblocks: u64,
    updates: BTreeMap<u64, BlockPointer>,
    batch: &WriteBatch,
) -> Result<(BlockPointer, u8), PoolError> {
    if updates.is_empty() {
        return Ok((old_root, old_levels));
    }
    let (st, txg) = (rel.st, rel.txg);
    let levels = levels_for(nblocks).max(old_levels).max(1);
    assert!(levels <= MAX_LEVELS);
    // Modified indirect nodes: (level, index) -> (contents, pointer it replaces).
    let mut nodes: BTreeMap<(u8, u64), (Vec<u8>, BlockPointer)> = BTreeMap::new();
    let grown = levels > old_levels && old_levels > 0 && !old_root.is_hole();
    if grown {
        // The old root becomes entry 0 of a new node one level up.
        let mut block = vec![0u8; INDIRECT_BLOCK_SIZE];
        old_root.encode(&mut block[0..BLKPTR_SIZE]);
        nodes.insert((old_levels, 0), (block, BlockPointer::HOLE));
    }
    let load_old = |level: u8, index: u64| -> Result<(Vec<u8>, BlockPointer), PoolError> {
        if level >= old_levels || old_root.is_hole() {
            return Ok((vec![0u8; INDIRECT_BLOCK_SIZE], BlockPointer::HOLE));
        }
        let root_level = old_levels - 1;
        let shift = INDIRECT_SHIFT * (root_level - level) as u32;
        if shift < 64 && (index >> shift) > 0 {
            return Ok((vec![0u8; INDIRECT_BLOCK_SIZE], BlockPointer::HOLE));
        }
        let mut bp = old_root;
        for l in ((level + 1)..=root_level).rev() {
            if bp.is_hole() {
                break;
            }
            let block = st.read_block(&bp)?;
            let i = (index >> (INDIRECT_SHIFT * (l - level - 1) as u32)) & (BPS_PER_INDIRECT - 1);
            bp = bp_at(block.bytes(), i)?;
            check_child(l, &bp)?;
        }
        if bp.is_hole() {
            return Ok((vec![0u8; INDIRECT_BLOCK_SIZE], BlockPointer::HOLE));
        }
        let block = st.read_block(&bp)?;
        if block.bytes().len() != INDIRECT_BLOCK_SIZE {
            return Err(PoolError::Corrupt("indirect block of wrong size".into()));
        }
        Ok((block.bytes().to_vec(), bp))
    };

    if levels == 1 {
        // The root is data block 0 itself.
        let new_root = updates[&0];
        assert_eq!(updates.len(), 1);
        if new_root != old_root {
            rel.free(&old_root);
        }
        return Ok((new_root, 1));
    }

    let mut current = updates;
    for level in 1..levels {
        for (&idx, &bp) in &current {
            let key = (level, idx >> INDIRECT_SHIFT);
            if let std::collections::btree_map::Entry::Vacant(e) = nodes.entry(key) {
                let loaded = load_old(key.0, key.1)?;
                e.insert(loaded);
            }
            let (block, _) = nodes.get_mut(&key).unwrap();
            let slot = ((idx & (BPS_PER_INDIRECT - 1)) as usize) * BLKPTR_SIZE;
            let old = BlockPointer::decode(&block[slot..slot + BLKPTR_SIZE])?;
            if old != bp {
                rel.free(&old);
            }
            bp.encode(&mut block[slot..slot + BLKPTR_SIZE]);
        }
        let mut next = BTreeMap::new();
        let keys: Vec<(u8, u64)> = nodes
            .range((level, 0)..=(level, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            let (block, replaced) = nodes.remove(&key).unwrap();
            let mut fill = 0u64;
            let mut empty = true;
            for i in 0..BPS_PER_INDIRECT {
                let child = bp_at(&block, i)?;
                if !child.is_hole() {
                    empty = false;
                    fill += child.fill;
                }
            }
            let bp = if empty {
                BlockPointer::HOLE
            } else {
                let mut spec = BlockSpec::metadata(BlockType::Indirect, level);
                spec.fill = fill;
                st.write_block_into(&block, spec, txg, batch)?
            };
            rel.born(&bp);
            // The replaced version is freed when the parent slot is overwritten, except
            // at the top, which has no parent.
            if level == levels - 1 && !grown {
                rel.free(&replaced);
            }
            let _ = replaced;
            next.insert(key.1, bp);
        }
        current = next;
    }
    assert_eq!(current.len(), 1, "tree must converge to one root");
    let root = current[&0];
    Ok((root, levels))
}

/// Reads the dnode of `obj` from the committed dnode array.
pub(super) fn read_dnode(st: &Storage, meta: &Dnode, obj: u64) -> Result<Dnode, PoolError> {
    let blkid = obj / DNODES_PER_BLOCK;
    match read_tree_block(st, meta.root, meta.levels, blkid, AccessKind::Demand)? {
        None => Ok(Dnode::free_slot()),
        Some(block) => {
            let slot = (obj % DNODES_PER_BLOCK) as usize;
            if block.bytes().len() != DNODE_BLOCK_SIZE as usize {
                return Err(PoolError::Corrupt("dnode block of wrong size".into()));
            }
            Dnode::decode(&block.bytes()[slot * DNODE_SIZE..(slot + 1) * DNODE_SIZE])
        }
    }
}

/// The referenced bytes an object set root stores (`None`: a version-1 root, or no
/// root yet).
pub fn stored_referenced(st: &Storage, root_bp: BlockPointer) -> Result<Option<u64>, PoolError> {
    if root_bp.is_hole() {
        return Ok(None);
    }
    Ok(read_root_fields(st, root_bp)?.2)
}

/// The meta-dnode (the dnode array's dnode) and the next object id of an object set
/// root block.
pub fn read_root(st: &Storage, root_bp: BlockPointer) -> Result<(Dnode, u64), PoolError> {
    let (meta, next_object, _) = read_root_fields(st, root_bp)?;
    Ok((meta, next_object))
}

/// An object set root block's meta-dnode, next object id and stored referenced bytes
/// (`None` before version 2), its magic checked.
fn read_root_fields(
    st: &Storage,
    root_bp: BlockPointer,
) -> Result<(Dnode, u64, Option<u64>), PoolError> {
    let block = st.read_block(&root_bp)?;
    let b = block.bytes();
    if b.len() != OBJSET_ROOT_SIZE || &b[512..520] != OBJSET_MAGIC {
        return Err(PoolError::Corrupt("object set root: bad magic".into()));
    }
    let version = u32::from_le_bytes(b[520..524].try_into().unwrap());
    let meta = Dnode::decode(&b[0..512])?;
    let next_object = u64::from_le_bytes(b[528..536].try_into().unwrap());
    let referenced = (version >= 2).then(|| u64::from_le_bytes(b[536..544].try_into().unwrap()));
    Ok((meta, next_object, referenced))
}

/// Every block pointer reachable from an object set root, for scrub and check.
pub fn visit_objset(
    st: &Storage,
    root_bp: BlockPointer,
    visit: &mut dyn FnMut(&BlockPointer) -> Result<(), PoolError>,
) -> Result<(), PoolError> {
    if root_bp.is_hole() {
        return Ok(());
    }
    visit(&root_bp)?;
    let block = st.read_block(&root_bp)?;
    let meta = Dnode::decode(&block.bytes()[0..512])?;
    let mut dnode_blocks: Vec<Vec<u8>> = Vec::new();
    visit_tree(st, meta.root, meta.levels, &mut |bp, level| {
        visit(bp)?;
        if level == 0 {
            dnode_blocks.push(st.read_block(bp)?.bytes().to_vec());
        }
        Ok(())
    })?;
    for block in dnode_blocks {
        for slot in block.chunks(DNODE_SIZE) {
            let d = Dnode::decode(slot)?;
            if !d.is_free() {
                visit_tree(st, d.root, d.levels, &mut |bp, _| visit(bp))?;
            }
        }
    }
    Ok(())
}

fn visit_tree(
    st: &Storage,
    root: BlockPointer,
    levels: u8,
    visit: &mut dyn FnMut(&BlockPointer, u8) -> Result<(), PoolError>,
) -> Result<(), PoolError> {
    fn walk(
        st: &Storage,
        bp: BlockPointer,
        level: u8,
        visit: &mut dyn FnMut(&BlockPointer, u8) -> Result<(), PoolError>,
    ) -> Result<(), PoolError> {
        if bp.is_hole() {
            return Ok(());
        }
        visit(&bp, level)?;
        if level > 0 {
            let block = st.read_block(&bp)?;
            for i in 0..BPS_PER_INDIRECT {
                let child = bp_at(block.bytes(), i)?;
                check_child(level, &child)?;
                walk(st, child, level - 1, visit)?;
            }
        }
        Ok(())
    }
    if levels > 0 {
        walk(st, root, levels - 1, visit)?;
    }
    Ok(())
}
