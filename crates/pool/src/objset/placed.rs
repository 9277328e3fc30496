//! Blocks the intent log writes to their final place ahead of their txg (large sync
//! writes without a log device), and their replay: a placed block's space is
//! allocated but not logged, so until its txg adopts it (or lets it go), a crash leaves
//! that space free on disk and only a log record names it (see `Storage::write_block_batched`).

use super::*;

impl Objset {
    /// Writes the dirty blocks of `obj` that lie wholly inside `[offset, offset+len)`
    /// to their final place now, for the intent log to name by pointer instead of
    /// copying them (large sync writes without a log device). The caller holds the
    /// pool's txg gate, so `txg` is the open txg and stays so until this returns; its
    /// sync adopts each placed block unless the block changes first. Returns (block
    /// offset, block size, pointer) of the blocks placed, in offset order (blocks not
    /// dirty in this txg, and zero blocks that become holes, are not placed).
    pub fn place_blocks(
        &self,
        st: &Storage,
        obj: u64,
        offset: u64,
        len: u64,
        txg: u64,
    ) -> Result<Vec<(u64, u64, BlockPointer)>, PoolError> {
        let mut out = Vec::new();
        let mut writes: Vec<(usize, u64, Dirty, BlockSpec)> = Vec::new();
        let bs = {
            let mut inner = self.lock_loaded(st, obj);
            let s = Self::load(st, &mut inner, obj)?;
            let bs = s.dnode.block_size as u64;
            let whole = offset.div_ceil(bs)..(offset + len) / bs;
            if whole.is_empty() {
                return Ok(out);
            }
            let spec = data_spec(&s.dnode);
            for (&blkid, contents) in s.open.blocks.range(whole) {
                let Some(data) = contents
                    .data()
                    .filter(|d| d.len() == s.dnode.block_size as usize)
                else {
                    continue;
                };
                match s.open.placed.get(&blkid) {
                    Some((b, bp)) if Arc::ptr_eq(b, data) => out.push((blkid * bs, bs, *bp)),
                    _ => writes.push((0, blkid, Dirty::Data(data.clone()), spec)),
                }
            }
            bs
        };
        let written = write_parallel(st, txg, &writes, true)?;
        let mut inner = self.inner.lock().unwrap();
        for ((_, blkid, contents, _), bp) in writes.into_iter().zip(written) {
            let Dirty::Data(data) = contents else {
                unreachable!("only data blocks are placed")
            };
            if bp.is_hole() {
                continue;
            }
            let replaced = inner
                .objects
                .get_mut(&obj)
                .map(|s| s.open.placed.insert(blkid, (data, bp)));
            match replaced {
                // An older placement of this block in the same txg: a log record may
                // name it, and its release waits until this txg's records cannot
                // replay any more.
                Some(Some((_, old))) => st.release_placed(&old, txg),
                Some(None) => {}
                None => st.release_placed(&bp, txg),
            }
            out.push((blkid * bs, bs, bp));
        }
        if inner.objects.contains_key(&obj) {
            inner.open_dirty.insert(obj);
        }
        out.sort_by_key(|&(o, _, _)| o);
        Ok(out)
    }

    /// Intent log replay of a pointer record: block `blkid` of `obj` becomes the block
    /// at `bp`, whose space the caller claimed; the replay txg adopts it.
    pub fn adopt_replayed(
        &self,
        st: &Storage,
        obj: u64,
        blkid: u64,
        bp: BlockPointer,
        txg: u64,
    ) -> Result<(), PoolError> {
        let block = st.read_block(&bp)?;
        let mut inner = self.lock_loaded(st, obj);
        let s = Self::load(st, &mut inner, obj)?;
        if block.bytes().len() != s.dnode.block_size as usize
            || bp.block_type != BlockType::Data
            || bp.level != 0
        {
            return Err(PoolError::Corrupt(format!(
                "log pointer record for object {obj} block {blkid} does not fit the object"
            )));
        }
        let data = Arc::new(AlignedBuf::from_slice(block.bytes()));
        s.open.blocks.insert(blkid, Dirty::Data(data.clone()));
        if let Some((_, old)) = s.open.placed.insert(blkid, (data, bp)) {
            st.release_placed(&old, txg);
        }
        if blkid + 1 > s.dnode.nblocks {
            s.dnode.nblocks = blkid + 1;
            s.open.dnode_dirty = true;
        }
        inner.open_dirty.insert(obj);
        Ok(())
    }

    /// Whether `bp` is already the placed block `blkid` of `obj` (replay of a second
    /// record naming the same placement).
    pub fn is_placed(&self, obj: u64, blkid: u64, bp: &BlockPointer) -> bool {
        let inner = self.inner.lock().unwrap();
        inner
            .objects
            .get(&obj)
            .and_then(|s| s.open.placed.get(&blkid))
            .is_some_and(|(_, p)| p == bp)
    }
}
