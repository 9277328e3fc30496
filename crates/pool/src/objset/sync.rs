//! The sync of an object set: moving open changes to the syncing state at quiesce,
//! then writing a txg's data blocks (in parallel batches), indirect blocks, dnode
//! array and root block, and installing the new tree roots. Nothing here writes in
//! place: every block goes to new space and what it replaces is released
//! (`Release`), so a crash before the txg commits leaves the previous tree whole.

use super::*;

impl Objset {
    /// Moves every open change to the syncing state. Called with the pool's txg gate
    /// held exclusively, after the previous sync finished. Returns true if anything is
    /// to be synced.
    pub fn quiesce(&self) -> bool {
        let mut inner = self.inner.lock().unwrap();
        assert!(
            inner.syncing_dirty.is_empty(),
            "quiesce while a sync is in progress"
        );
        let dirty = std::mem::take(&mut inner.open_dirty);
        inner.syncing_next_object = inner.next_object;
        {
            let mut space = self.space.lock().unwrap();
            space.syncing_charge += std::mem::take(&mut space.open_charge);
        }
        for &obj in &dirty {
            let s = inner.objects.get_mut(&obj).expect("dirty object is loaded");
            assert!(s.syncing.is_none());
            let mut set = std::mem::take(&mut s.open);
            if set.is_empty() {
                continue;
            }
            let mut snap = s.dnode.clone();
            if set.freed {
                snap = Dnode::free_slot();
            }
            set.snapshot = Some(snap);
            s.syncing = Some(set);
        }
        inner.syncing_dirty = dirty
            .into_iter()
            .filter(|o| inner.objects[o].syncing.is_some())
            .collect();
        !inner.syncing_dirty.is_empty()
    }

    /// Writes the syncing changes as part of `txg`; returns the new root block pointer.
    pub fn sync(&self, st: &Storage, txg: u64) -> Result<BlockPointer, PoolError> {
        let rel = Release {
            st,
            txg,
            keep_upto: self.keep_upto(),
            dead: &self.dead,
            born_bytes: AtomicU64::new(0),
            released_bytes: AtomicU64::new(0),
        };
        // 1. Collect the work.
        let jobs: Vec<(u64, DirtySet, BlockPointer, u8)> = {
            let inner = self.inner.lock().unwrap();
            inner
                .syncing_dirty
                .iter()
                .map(|&obj| {
                    let s = &inner.objects[&obj];
                    (
                        obj,
                        s.syncing.clone().unwrap(),
                        s.dnode.root,
                        s.dnode.levels,
                    )
                })
                .collect()
        };
        if jobs.is_empty() {
            self.space.lock().unwrap().syncing_charge = 0;
            return Ok(self.root_bp());
        }

        // 2. Data blocks, in parallel.
        // Placed blocks whose buffer is still the block's contents are adopted as they
        // are; the others are released.
        let mut writes: Vec<(usize, u64, Dirty, BlockSpec)> = Vec::new();
        let mut data_bps: Vec<BTreeMap<u64, BlockPointer>> = vec![BTreeMap::new(); jobs.len()];
        for (j, (_, set, _, _)) in jobs.iter().enumerate() {
            let snap = set.snapshot.as_ref().unwrap();
            for (&blkid, (placed, bp)) in &set.placed {
                let current = set.blocks.get(&blkid).and_then(Dirty::data);
                if !set.freed && current.is_some_and(|c| Arc::ptr_eq(c, placed)) {
                    st.adopt_placed(bp);
                    rel.born(bp);
                    data_bps[j].insert(blkid, *bp);
                } else {
                    st.release_placed(bp, txg);
                }
            }
            for (&blkid, contents) in &set.blocks {
                if !data_bps[j].contains_key(&blkid) {
                    writes.push((j, blkid, contents.clone(), data_spec(snap)));
                }
            }
        }
        let written = write_parallel(st, txg, &writes, false)?;
        for ((j, blkid, _, _), bp) in writes.iter().zip(written) {
            rel.born(&bp);
            data_bps[*j].insert(*blkid, bp);
        }

        // The metadata below (indirect blocks, dnode blocks, the root block) goes to the
        // devices in one batch, every leaf at once, before step 6 makes any of it
        // reachable: written one block at a time, leaf after leaf, eight streams' trees
        // kept slow disks idle for a third of each txg.
        let meta_batch = st.new_batch();
        // 3. Trees. Objects are independent, so on real devices several are updated
        // at once: each reads its old indirect blocks (often gone from the ARC after a
        // txg of streaming data), and one object after another those reads were seeks
        // in a row with the other disks idle.
        let tree_of = |j: usize| -> TreeResult {
            let (obj, set, root, levels) = &jobs[j];
            let mut snap = set.snapshot.clone().unwrap();
            if set.freed {
                free_tree(st, *root, *levels, &rel)?;
                return Ok((*obj, Dnode::free_slot()));
            }
            let mut updates: BTreeMap<u64, BlockPointer> = BTreeMap::new();
            for &(s, e) in &set.range_frees {
                for blkid in existing_blocks(st, *root, *levels, s, e)? {
                    updates.insert(blkid, BlockPointer::HOLE);
                }
            }
            for &blkid in set.blocks.keys() {
                updates.insert(blkid, data_bps[j][&blkid]);
            }
            let nblocks = snap
                .nblocks
                .max(updates.keys().next_back().map_or(0, |b| b + 1));
            let (new_root, new_levels) =
                update_tree(&rel, *root, *levels, nblocks, updates, &meta_batch)?;
            snap.root = new_root;
            snap.levels = new_levels;
            snap.nblocks = nblocks;
            Ok((*obj, snap))
        };
        let threads = if st.is_deterministic() {
            1
        } else {
            TREE_WRITERS.min(jobs.len())
        };
        let results: Vec<(u64, Dnode)> = if threads <= 1 {
            (0..jobs.len()).map(tree_of).collect::<Result<_, _>>()?
        } else {
            let slots: Vec<Mutex<Option<TreeResult>>> =
                jobs.iter().map(|_| Mutex::new(None)).collect();
            let next = AtomicUsize::new(0);
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| loop {
                        let j = next.fetch_add(1, Ordering::Relaxed);
                        if j >= jobs.len() {
                            break;
                        }
                        *slots[j].lock().unwrap() = Some(tree_of(j));
                    });
                }
            });
            slots
                .into_iter()
                .map(|r| r.into_inner().unwrap().expect("every tree was updated"))
                .collect::<Result<_, _>>()?
        };

        // 4. Dnode array (object 0).
        let (meta, next_object, old_root) = {
            let inner = self.inner.lock().unwrap();
            (inner.meta.clone(), inner.syncing_next_object, inner.root_bp)
        };
        let mut by_block: BTreeMap<u64, Vec<(usize, Dnode)>> = BTreeMap::new();
        for (obj, d) in &results {
            by_block
                .entry(obj / DNODES_PER_BLOCK)
                .or_default()
                .push(((obj % DNODES_PER_BLOCK) as usize, d.clone()));
        }
        let mut meta_updates: BTreeMap<u64, BlockPointer> = BTreeMap::new();
        for (blkid, slots) in by_block {
            let mut block =
                match read_tree_block(st, meta.root, meta.levels, blkid, AccessKind::Demand)? {
                    Some(b) => b.bytes().to_vec(),
                    None => vec![0u8; DNODE_BLOCK_SIZE as usize],
                };
            for (slot, d) in slots {
                d.encode(&mut block[slot * DNODE_SIZE..(slot + 1) * DNODE_SIZE]);
            }
            let bp = if block.iter().all(|&b| b == 0) {
                BlockPointer::HOLE
            } else {
                let mut spec = BlockSpec::metadata(BlockType::Dnodes, 0);
                spec.fill = 1;
                st.write_block_into(&block, spec, txg, &meta_batch)?
            };
            rel.born(&bp);
            meta_updates.insert(blkid, bp);
        }
        let meta_nblocks = meta
            .nblocks
            .max(meta_updates.keys().next_back().map_or(0, |b| b + 1));
        let (meta_root, meta_levels) = update_tree(
            &rel,
            meta.root,
            meta.levels,
            meta_nblocks,
            meta_updates,
            &meta_batch,
        )?;
        let mut new_meta = meta.clone();
        new_meta.root = meta_root;
        new_meta.levels = meta_levels;
        new_meta.nblocks = meta_nblocks;

        // 5. Root block.
        let referenced_before = self.space().referenced;
        let born = rel.born_bytes.load(Ordering::Relaxed);
        let released = rel.released_bytes.load(Ordering::Relaxed);
        assert!(
            referenced_before + born >= released,
            "object set {} releases {released} bytes but references {referenced_before} + {born}",
            self.id
        );
        let referenced = referenced_before + born - released;
        let mut rootblk = vec![0u8; OBJSET_ROOT_SIZE];
        new_meta.encode(&mut rootblk[0..512]);
        rootblk[512..520].copy_from_slice(OBJSET_MAGIC);
        rootblk[520..524].copy_from_slice(&OBJSET_VERSION.to_le_bytes());
        rootblk[528..536].copy_from_slice(&next_object.to_le_bytes());
        rootblk[536..544].copy_from_slice(&referenced.to_le_bytes());
        let root_bp = st.write_block_into(
            &rootblk,
            BlockSpec::metadata(BlockType::ObjsetRoot, 0),
            txg,
            &meta_batch,
        )?;
        st.submit_batch(meta_batch)?;
        rel.free_root(&old_root);

        // 6. Install.
        let mut inner = self.inner.lock().unwrap();
        for (obj, d) in results {
            if d.is_free() {
                inner.objects.remove(&obj);
                continue;
            }
            let s = inner.objects.get_mut(&obj).unwrap();
            s.dnode.root = d.root;
            s.dnode.levels = d.levels;
            s.syncing = None;
        }
        inner.syncing_dirty.clear();
        inner.meta = new_meta;
        inner.root_bp = root_bp;
        let mut space = self.space.lock().unwrap();
        space.referenced = referenced;
        space.syncing_charge = 0;
        Ok(root_bp)
    }
}

/// An object's new dnode after its tree was updated.
type TreeResult = Result<(u64, Dnode), PoolError>;

/// How a data block of an object with these attributes is stored.
pub(super) fn data_spec(d: &Dnode) -> BlockSpec {
    BlockSpec {
        block_type: BlockType::Data,
        level: 0,
        compression: d.compression,
        checksum: d.checksum,
        copies: 1,
        fill: 1,
    }
}

/// Writes data blocks for `txg`; `placed`: ahead of the sync, for the intent log (see
/// `Storage::write_placed`).
pub(super) fn write_parallel(
    st: &Storage,
    txg: u64,
    writes: &[(usize, u64, Dirty, BlockSpec)],
    placed: bool,
) -> Result<Vec<BlockPointer>, PoolError> {
    let mut out = Vec::with_capacity(writes.len());
    // Batches bound the memory of planned writes and let adjacent blocks merge. While
    // batches go to the devices, the next one is compressed, checksummed and given
    // parity, so the CPU and the disks work at the same time. Two are at the devices at
    // once, each leaf taking them in turn (`Leaf::batch_turn`): with one, every disk
    // waited at the end of each batch for the slowest one.
    std::thread::scope(|scope| -> Result<(), PoolError> {
        let mut in_flight: std::collections::VecDeque<
            std::thread::ScopedJoinHandle<'_, Result<(), PoolError>>,
        > = std::collections::VecDeque::new();
        for chunk in writes.chunks(BATCH_BLOCKS) {
            let batch = st.new_batch();
            let results: Vec<Mutex<Option<Result<BlockPointer, PoolError>>>> =
                chunk.iter().map(|_| Mutex::new(None)).collect();
            let next = AtomicUsize::new(0);
            let work = || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= chunk.len() {
                    break;
                }
                let (_, _, contents, spec) = &chunk[i];
                let r = match contents {
                    // Zero blocks become holes when compression is on.
                    Dirty::Data(data)
                        if spec.compression != Compression::Off && data.iter().all(|&b| b == 0) =>
                    {
                        Ok(BlockPointer::HOLE)
                    }
                    Dirty::Data(data) => st.write_block_batched(data, *spec, txg, &batch, placed),
                    Dirty::Stored(block) => {
                        assert!(!placed, "received blocks are never placed ahead");
                        st.write_stored_batched(block, *spec, txg, &batch)
                    }
                };
                *results[i].lock().unwrap() = Some(r);
            };
            let threads = if st.is_deterministic() {
                1
            } else {
                SYNC_WRITERS.min(chunk.len())
            };
            if threads <= 1 {
                work();
            } else {
                std::thread::scope(|s| {
                    for _ in 0..threads {
                        s.spawn(work);
                    }
                });
            }
            for r in results {
                out.push(r.into_inner().unwrap().unwrap()?);
            }
            if in_flight.len() == BATCHES_IN_FLIGHT {
                let h = in_flight.pop_front().unwrap();
                h.join().expect("batch writer panicked")?;
            }
            if st.is_deterministic() {
                st.submit_batch(batch)?;
            } else {
                in_flight.push_back(scope.spawn(move || st.submit_batch(batch)));
            }
        }
        for h in in_flight {
            h.join().expect("batch writer panicked")?;
        }
        Ok(())
    })?;
    Ok(out)
}
