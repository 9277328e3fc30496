//! Object sets: numbered objects, each a sparse array of equal-size blocks under a tree
//! of indirect blocks, with changes grouped into transaction groups.
//!
//! Each object's changes go to its *open* dirty set. When the pool quiesces a txg, every
//! open set becomes the *syncing* set and a fresh open set starts; the sync writes the
//! syncing sets (data blocks in parallel, then indirect blocks bottom-up, then the dnode
//! array, then the object set's root block) and installs the new tree roots. Readers look
//! at the open set, then the syncing set, then the committed tree, so they always see
//! their own writes and never a half-written tree.
//!
//! Invariants:
//! - Nothing is written in place: every rewritten block gets new space and the old
//!   version is freed (deferred) in the same txg.
//! - A txg's on-disk state contains exactly the changes made before its quiesce: the
//!   dnode attributes written are those captured at quiesce, never later ones.
//! - Object ids are never reused within an object set (the next id only grows).
//!
//! Memory: an object is loaded (its dnode read into `Inner::objects`) on first use and
//! stays while it has changes. Clean objects form a cache the pool bounds after every
//! txg (`evict_clean_objects`, least recently loaded first), so walking millions of
//! files does not grow the daemon without end; the dnode blocks themselves stay in the
//! ARC, so loading an evicted object again is usually a memory copy.
//!
//! Object set root block (4 KiB logical, little-endian): bytes 0..512 the meta-dnode
//! (object 0: the dnode array); 512..520 magic `SHOALOS\0`; 520..524 version (2);
//! 524..528 reserved; 528..536 next object id; 536..544 referenced bytes (version 2);
//! the rest zero.
//!
//! Space: *referenced* is the deflated size (`Storage::dsize`) of every block below the root block (the
//! dnode array's tree and every object's tree). Each sync adds the blocks it writes and
//! subtracts the ones it releases (freed or moved to the dead list), and stores the
//! total in the root block it writes, so the figure is exact at every committed txg
//! and a crash leaves the one that matches the tree. A version-1 root has no figure;
//! it is counted by walking the tree once when opened. Between syncs, *charges*
//! estimate what open and syncing changes will add (a block's size each time a block
//! is first dirtied in a txg), so quota checks see writes before they are allocated.

use crate::arc::AccessKind;
use crate::blkptr::{BlockPointer, BlockType, BLKPTR_SIZE};
use crate::checksum::ChecksumKind;
use crate::compress::Compression;
use crate::dnode::*;
use crate::prefetch::{PrefetchConfig, StreamDetector};
use crate::read_buf::ReadBuf;
use crate::storage::{BlockSpec, Fetch, Storage, StoredBlock, WriteBatch};
use crate::PoolError;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use vdev::AlignedBuf;

mod placed;
mod sync;
mod tree;
use sync::{data_spec, write_parallel};
pub(crate) use tree::{bp_at, check_child};
pub use tree::{
    existing_blocks, read_root, read_tree_block, stored_referenced, tree_block_bp, visit_objset,
};
use tree::{free_tree, read_dnode, tree_block_lookup, update_tree, TreeLookup};

pub const OBJSET_ROOT_SIZE: usize = 4096;
const OBJSET_MAGIC: &[u8; 8] = b"SHOALOS\0";
const OBJSET_VERSION: u32 = 2;
/// Parallel writers of data blocks during a sync.
const SYNC_WRITERS: usize = 4;
/// Data blocks per write batch (32 MiB of 128 KiB records).
const BATCH_BLOCKS: usize = 256;
/// Objects whose trees a sync updates at once (see `Objset::sync`).
const TREE_WRITERS: usize = 8;
/// Batches at the devices at once during a sync (see `write_parallel`).
const BATCHES_IN_FLIGHT: usize = 2;

type Bytes = Arc<AlignedBuf>;

/// The new contents of a dirty block.
#[derive(Debug, Clone)]
enum Dirty {
    Data(Bytes),
    /// A received block, written as it was stored (see `write_stored`).
    Stored(Arc<StoredBlock>),
}

impl Dirty {
    fn data(&self) -> Option<&Bytes> {
        match self {
            Dirty::Data(b) => Some(b),
            _ => None,
        }
    }
}

#[derive(Debug, Default, Clone)]
struct DirtySet {
    /// Block id -> new contents.
    blocks: BTreeMap<u64, Dirty>,
    /// Block id ranges punched to holes; applied before `blocks`.
    range_frees: Vec<(u64, u64)>,
    dnode_dirty: bool,
    freed: bool,
    /// Blocks the intent log wrote to their final place ahead of the sync (see
    /// `place_block`): block id -> (the contents written, where). The sync adopts a
    /// placed block while `blocks` still holds that same buffer, and releases it
    /// otherwise.
    placed: BTreeMap<u64, (Bytes, BlockPointer)>,
    /// Attributes as of quiesce (set when the set becomes the syncing set).
    snapshot: Option<Dnode>,
}

impl DirtySet {
    fn is_empty(&self) -> bool {
        self.blocks.is_empty()
            && self.range_frees.is_empty()
            && !self.dnode_dirty
            && !self.freed
            && self.placed.is_empty()
    }
    fn covers_free(&self, blkid: u64) -> bool {
        self.range_frees
            .iter()
            .any(|&(s, e)| blkid >= s && blkid < e)
    }
}

#[derive(Debug)]
struct ObjectState {
    /// Latest attributes; `root` and `levels` are the committed tree's.
    dnode: Dnode,
    open: DirtySet,
    syncing: Option<DirtySet>,
    /// `Inner::clock` when last loaded: the oldest clean objects are evicted first.
    used: u64,
}

impl ObjectState {
    /// Nothing here that the committed tree does not hold: dropping it loses nothing,
    /// and the next `load` reads the same attributes back.
    fn is_clean(&self) -> bool {
        self.open.is_empty() && self.syncing.is_none()
    }
}

#[derive(Debug)]
struct Inner {
    meta: Dnode,
    /// Loaded objects: every object with changes, and a bounded cache of clean ones
    /// (see `evict_clean_objects`).
    objects: HashMap<u64, ObjectState>,
    /// Counts loads and creations, to order the clean objects by last use.
    clock: u64,
    next_object: u64,
    open_dirty: BTreeSet<u64>,
    syncing_dirty: Vec<u64>,
    syncing_next_object: u64,
    root_bp: BlockPointer,
}

impl Inner {
    /// The next tick of `clock`, for an object being used now.
    fn next_use(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }
}

/// Where a block's current contents come from.
enum Source {
    Mem(Bytes),
    /// A received block not yet synced (see `dirty_contents`).
    Stored(Arc<StoredBlock>),
    Zero,
    Tree(BlockPointer, u8),
}

/// Public facts about one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub object_type: u8,
    pub block_size: u32,
    /// What the object's next blocks are written with.
    pub compression: Compression,
    pub checksum: ChecksumKind,
    pub nblocks: u64,
    pub generation: u64,
    pub bonus: Vec<u8>,
}

#[derive(Debug)]
pub struct Objset {
    pub id: u64,
    inner: Mutex<Inner>,
    /// Read-ahead stream detectors per object (bounded: cleared past MAX_DETECTORS).
    detectors: Mutex<HashMap<u64, StreamDetector>>,
    /// Txg of the latest snapshot of this object set (0: none): blocks born at or
    /// before it are shared with the snapshot and go on the dead list when released.
    keep_upto: std::sync::atomic::AtomicU64,
    /// Blocks released by syncs since the pool last took them (`take_dead`).
    dead: Mutex<Vec<BlockPointer>>,
    space: Mutex<SpaceCounters>,
}

/// An object set's space, as of its last sync plus the charges of changes since.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SpaceCounters {
    /// Allocated bytes of every block below the root block, as of the last sync.
    pub referenced: u64,
    /// Estimated bytes the open txg's changes add.
    pub open_charge: u64,
    /// Estimated bytes the syncing txg's changes add (until its sync ends).
    pub syncing_charge: u64,
}

impl SpaceCounters {
    /// What the object set will reference once its pending changes are synced (an
    /// upper estimate: rewrites and frees are not netted out before their sync).
    pub fn estimate(&self) -> u64 {
        self.referenced + self.open_charge + self.syncing_charge
    }
}

const MAX_DETECTORS: usize = 4096;

/// Where the blocks a sync stops referencing go: back to the allocator (deferred), or
/// onto the object set's dead list when a snapshot still references them, that is when
/// they were born at or before the latest snapshot's txg (see `deadlist.rs`).
/// It also counts what the sync writes and releases, for the referenced bytes.
struct Release<'a> {
    st: &'a Storage,
    txg: u64,
    keep_upto: u64,
    dead: &'a Mutex<Vec<BlockPointer>>,
    born_bytes: AtomicU64,
    released_bytes: AtomicU64,
}

impl Release<'_> {
    /// The sync wrote `bp` into the tree.
    fn born(&self, bp: &BlockPointer) {
        self.born_bytes
            .fetch_add(self.st.dsize(bp), Ordering::Relaxed);
    }

    fn free(&self, bp: &BlockPointer) {
        if bp.is_hole() {
            return;
        }
        self.released_bytes
            .fetch_add(self.st.dsize(bp), Ordering::Relaxed);
        self.free_root(bp);
    }

    /// Releases a root block, which is not part of the referenced bytes.
    fn free_root(&self, bp: &BlockPointer) {
        if bp.is_hole() {
            return;
        }
        if bp.birth_txg <= self.keep_upto {
            self.dead.lock().unwrap().push(*bp);
        } else {
            self.st.free_block(bp, self.txg);
        }
    }
}

fn check_block_size(block_size: u32) -> Result<(), PoolError> {
    if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) || !block_size.is_multiple_of(512) {
        return Err(PoolError::InvalidArgument(format!(
            "block size {block_size} must be a multiple of 512 from 512 to 1M"
        )));
    }
    Ok(())
}

fn meta_dnode() -> Dnode {
    Dnode::new(
        1,
        DNODE_BLOCK_SIZE,
        Compression::Lz4,
        ChecksumKind::Fletcher4,
    )
}

impl Objset {
    pub fn new_empty(id: u64) -> Objset {
        Objset {
            id,
            inner: Mutex::new(Inner {
                meta: meta_dnode(),
                objects: HashMap::new(),
                clock: 0,
                next_object: 1,
                open_dirty: BTreeSet::new(),
                syncing_dirty: Vec::new(),
                syncing_next_object: 1,
                root_bp: BlockPointer::HOLE,
            }),
            detectors: Mutex::new(HashMap::new()),
            keep_upto: AtomicU64::new(0),
            dead: Mutex::new(Vec::new()),
            space: Mutex::new(SpaceCounters::default()),
        }
    }

    /// Opens an object set from its root block.
    pub fn open(st: &Storage, id: u64, root_bp: BlockPointer) -> Result<Objset, PoolError> {
        if root_bp.is_hole() {
            return Ok(Objset::new_empty(id));
        }
        if root_bp.block_type != BlockType::ObjsetRoot {
            return Err(PoolError::Corrupt(
                "object set root has the wrong block type".into(),
            ));
        }
        let block = st.read_block(&root_bp)?;
        let b = block.bytes();
        if b.len() != OBJSET_ROOT_SIZE || &b[512..520] != OBJSET_MAGIC {
            return Err(PoolError::Corrupt("object set root: bad magic".into()));
        }
        let version = u32::from_le_bytes(b[520..524].try_into().unwrap());
        if version != 1 && version != OBJSET_VERSION {
            return Err(PoolError::Corrupt(format!(
                "object set version {version} unsupported"
            )));
        }
        let meta = Dnode::decode(&b[0..512])?;
        let next_object = u64::from_le_bytes(b[528..536].try_into().unwrap());
        let referenced = if version >= 2 {
            u64::from_le_bytes(b[536..544].try_into().unwrap())
        } else {
            let mut total = 0u64;
            visit_objset(st, root_bp, &mut |bp| {
                total += st.dsize(bp);
                Ok(())
            })?;
            total - st.dsize(&root_bp)
        };
        Ok(Objset {
            id,
            inner: Mutex::new(Inner {
                meta,
                objects: HashMap::new(),
                clock: 0,
                next_object,
                open_dirty: BTreeSet::new(),
                syncing_dirty: Vec::new(),
                syncing_next_object: next_object,
                root_bp,
            }),
            detectors: Mutex::new(HashMap::new()),
            keep_upto: AtomicU64::new(0),
            dead: Mutex::new(Vec::new()),
            space: Mutex::new(SpaceCounters {
                referenced,
                ..SpaceCounters::default()
            }),
        })
    }

    /// Referenced bytes and pending charges (see the module comment).
    pub fn space(&self) -> SpaceCounters {
        *self.space.lock().unwrap()
    }

    /// Adds `bytes` newly dirtied in the open txg to its charge (the pool does, as it
    /// accounts dirty data).
    pub(crate) fn charge(&self, bytes: u64) {
        if bytes > 0 {
            self.space.lock().unwrap().open_charge += bytes;
        }
    }

    /// Blocks born at or before `txg` are shared with a snapshot from now on.
    pub fn set_keep_upto(&self, txg: u64) {
        self.keep_upto.store(txg, Ordering::SeqCst);
    }

    pub fn keep_upto(&self) -> u64 {
        self.keep_upto.load(Ordering::SeqCst)
    }

    /// The blocks syncs moved to the dead list since the last call.
    pub fn take_dead(&self) -> Vec<BlockPointer> {
        std::mem::take(&mut *self.dead.lock().unwrap())
    }

    /// Blocks the intent log placed for changes not yet synced (their txg adopts or
    /// releases them).
    pub(crate) fn placed_blocks(&self) -> Vec<BlockPointer> {
        let inner = self.inner.lock().unwrap();
        inner
            .objects
            .values()
            .flat_map(|s| {
                s.open
                    .placed
                    .values()
                    .chain(s.syncing.iter().flat_map(|d| d.placed.values()))
            })
            .map(|(_, bp)| *bp)
            .collect()
    }

    /// The id the next new object gets.
    pub(crate) fn next_object(&self) -> u64 {
        self.inner.lock().unwrap().next_object
    }

    /// The next new object gets at least `next` (see `Pool::raise_next_object`).
    pub(crate) fn raise_next_object(&self, next: u64) {
        let mut inner = self.inner.lock().unwrap();
        inner.next_object = inner.next_object.max(next);
    }

    pub fn root_bp(&self) -> BlockPointer {
        self.inner.lock().unwrap().root_bp
    }

    /// Changes not yet in the committed root: open ones or a sync in progress.
    pub fn has_uncommitted_changes(&self) -> bool {
        let inner = self.inner.lock().unwrap();
        !inner.open_dirty.is_empty() || !inner.syncing_dirty.is_empty()
    }

    pub fn has_open_changes(&self) -> bool {
        let inner = self.inner.lock().unwrap();
        !inner.open_dirty.is_empty()
    }

    /// Objects held in memory (with changes, or cached clean).
    pub fn loaded_objects(&self) -> usize {
        self.inner.lock().unwrap().objects.len()
    }

    /// Bounds the objects held in memory: when more than `max` are loaded, drops the
    /// least recently loaded clean ones until a quarter of `max` is free again (so the
    /// scan runs once per many loads, not on every one). Objects with changes are never
    /// dropped, so a set with more than `max` dirty objects stays above the bound until
    /// they sync. Dropping a clean object loses nothing: its dnode is in the committed
    /// tree, and `load` reads it back on next use.
    pub fn evict_clean_objects(&self, max: usize) {
        let mut inner = self.inner.lock().unwrap();
        if inner.objects.len() <= max {
            return;
        }
        let target = max - max / 4;
        let mut clean: Vec<(u64, u64)> = inner
            .objects
            .iter()
            .filter(|(id, s)| s.is_clean() && !inner.open_dirty.contains(id))
            .map(|(&id, s)| (s.used, id))
            .collect();
        let excess = (inner.objects.len() - target).min(clean.len());
        if excess == 0 {
            return;
        }
        if excess < clean.len() {
            clean.select_nth_unstable(excess);
        }
        for &(_, id) in &clean[..excess] {
            inner.objects.remove(&id);
        }
    }

    /// The inner lock, taken so that `load` of `obj` under it finds the dnode's block
    /// in the ARC: when `obj` is not loaded, that block is read (as read-ahead) with the
    /// lock released first. `load` reads under the lock, and a cold dnode read there (a device read)
    /// would stall every reader and writer of this object set meanwhile. The warm-up
    /// uses the tree as of the first look; whatever changed since, `load` reads the
    /// current one.
    fn lock_loaded(&self, st: &Storage, obj: u64) -> std::sync::MutexGuard<'_, Inner> {
        let inner = self.inner.lock().unwrap();
        if obj == 0 || obj >= inner.next_object || inner.objects.contains_key(&obj) {
            return inner;
        }
        drop(inner);
        let _pin = st.pin_reads();
        let inner = self.inner.lock().unwrap();
        let meta = inner.meta.clone();
        drop(inner);
        let _ = read_tree_block(
            st,
            meta.root,
            meta.levels,
            obj / DNODES_PER_BLOCK,
            AccessKind::Prefetch,
        );
        self.inner.lock().unwrap()
    }

    fn load<'a>(
        st: &Storage,
        inner: &'a mut Inner,
        obj: u64,
    ) -> Result<&'a mut ObjectState, PoolError> {
        if obj == 0 || obj >= inner.next_object {
            return Err(PoolError::NotFound(format!("object {obj}")));
        }
        if !inner.objects.contains_key(&obj) {
            let dnode = read_dnode(st, &inner.meta, obj)?;
            if dnode.is_free() {
                return Err(PoolError::NotFound(format!("object {obj}")));
            }
            inner.objects.insert(
                obj,
                ObjectState {
                    dnode,
                    open: DirtySet::default(),
                    syncing: None,
                    used: 0,
                },
            );
        }
        let used = inner.next_use();
        let state = inner.objects.get_mut(&obj).unwrap();
        state.used = used;
        // Freed in the open txg, or in the txg being synced: until that sync installs
        // the free, a change here would be lost with the object (and leave it listed
        // as dirty).
        if state.dnode.is_free()
            || state.open.freed
            || state.syncing.as_ref().is_some_and(|set| set.freed)
        {
            return Err(PoolError::NotFound(format!("object {obj}")));
        }
        Ok(state)
    }

    pub fn create_object(
        &self,
        object_type: u8,
        block_size: u32,
        compression: Compression,
        checksum: ChecksumKind,
    ) -> Result<u64, PoolError> {
        self.create_object_as(None, object_type, block_size, compression, checksum)
    }

    /// Creates object `id` when given (intent log replay: it must be at or past the next
    /// id, so ids stay never-reused), else the next id.
    pub fn create_object_as(
        &self,
        id: Option<u64>,
        object_type: u8,
        block_size: u32,
        compression: Compression,
        checksum: ChecksumKind,
    ) -> Result<u64, PoolError> {
        check_block_size(block_size)?;
        if object_type == 0 {
            return Err(PoolError::InvalidArgument(
                "object type 0 is reserved".into(),
            ));
        }
        let mut inner = self.inner.lock().unwrap();
        let obj = match id {
            Some(id) if id < inner.next_object => {
                return Err(PoolError::Exists(format!("object {id}")))
            }
            Some(id) => id,
            None => inner.next_object,
        };
        inner.next_object = obj + 1;
        let open = DirtySet {
            dnode_dirty: true,
            ..DirtySet::default()
        };
        let dnode = Dnode::new(object_type, block_size, compression, checksum);
        // A new object is the most recently used one: a file just created is the
        // likeliest to be written again, so it must not be the first evicted.
        let used = inner.next_use();
        inner.objects.insert(
            obj,
            ObjectState {
                dnode,
                open,
                syncing: None,
                used,
            },
        );
        inner.open_dirty.insert(obj);
        Ok(obj)
    }

    pub fn info(&self, st: &Storage, obj: u64) -> Result<ObjectInfo, PoolError> {
        let mut inner = self.lock_loaded(st, obj);
        let s = Self::load(st, &mut inner, obj)?;
        Ok(ObjectInfo {
            object_type: s.dnode.object_type,
            block_size: s.dnode.block_size,
            compression: s.dnode.compression,
            checksum: s.dnode.checksum,
            nblocks: s.dnode.nblocks,
            generation: s.dnode.generation,
            bonus: s.dnode.bonus.clone(),
        })
    }

    pub fn set_bonus(
        &self,
        st: &Storage,
        obj: u64,
        bonus: &[u8],
        generation: Option<u64>,
    ) -> Result<(), PoolError> {
        if bonus.len() > BONUS_MAX {
            return Err(PoolError::InvalidArgument(format!(
                "bonus of {} bytes exceeds {BONUS_MAX}",
                bonus.len()
            )));
        }
        let mut inner = self.lock_loaded(st, obj);
        let s = Self::load(st, &mut inner, obj)?;
        s.dnode.bonus = bonus.to_vec();
        if let Some(g) = generation {
            s.dnode.generation = g;
        }
        s.open.dnode_dirty = true;
        inner.open_dirty.insert(obj);
        Ok(())
    }

    /// The compression and checksum of the blocks `obj` writes from now on (blocks
    /// already written keep theirs: each block pointer names its own). Answers
    /// whether anything changed.
    pub fn set_codec(
        &self,
        st: &Storage,
        obj: u64,
        compression: Compression,
        checksum: ChecksumKind,
    ) -> Result<bool, PoolError> {
        let mut inner = self.lock_loaded(st, obj);
        let s = Self::load(st, &mut inner, obj)?;
        if s.dnode.compression == compression && s.dnode.checksum == checksum {
            return Ok(false);
        }
        s.dnode.compression = compression;
        s.dnode.checksum = checksum;
        s.open.dnode_dirty = true;
        inner.open_dirty.insert(obj);
        Ok(true)
    }

    pub fn free_object(&self, st: &Storage, obj: u64) -> Result<(), PoolError> {
        let mut inner = self.lock_loaded(st, obj);
        let s = Self::load(st, &mut inner, obj)?;
        // Placed blocks stay listed so the sync releases them.
        s.open = DirtySet {
            freed: true,
            placed: std::mem::take(&mut s.open.placed),
            ..DirtySet::default()
        };
        inner.open_dirty.insert(obj);
        Ok(())
    }

    fn source_of(s: &ObjectState, blkid: u64) -> Source {
        let dirty = |d: &Dirty| match d {
            Dirty::Data(b) => Source::Mem(b.clone()),
            Dirty::Stored(b) => Source::Stored(b.clone()),
        };
        if let Some(d) = s.open.blocks.get(&blkid) {
            return dirty(d);
        }
        if s.open.covers_free(blkid) {
            return Source::Zero;
        }
        if let Some(sync) = &s.syncing {
            if let Some(d) = sync.blocks.get(&blkid) {
                return dirty(d);
            }
            if sync.covers_free(blkid) {
                return Source::Zero;
            }
        }
        if s.dnode.levels == 0 {
            return Source::Zero;
        }
        Source::Tree(s.dnode.root, s.dnode.levels)
    }

    /// The contents of a dirty block (a received one is decompressed: rare, a read
    /// of a block before its txg syncs).
    fn dirty_contents(source: Source) -> Result<Source, PoolError> {
        Ok(match source {
            Source::Stored(b) => Source::Mem(Arc::new(b.decompress()?)),
            other => other,
        })
    }

    /// Reads `len` bytes at `offset` as slices of the buffers that hold them (the ARC's
    /// blocks, dirty blocks); holes and unwritten blocks read as zeros. Returns the
    /// object's block size (for read-ahead) with the bytes.
    ///
    /// With `Fetch::CachedOnly` nothing is read from the devices: `None` when the
    /// object's dnode, an indirect block or a data block is not in memory.
    pub fn read_parts(
        &self,
        st: &Storage,
        obj: u64,
        offset: u64,
        len: usize,
        fetch: Fetch,
    ) -> Result<Option<(u64, ReadBuf)>, PoolError> {
        // The tree's pointers are read below with the lock released. Nothing is read
        // from the devices with `CachedOnly`, so nothing can be repaired there either.
        let _pin = (fetch == Fetch::Any).then(|| st.pin_reads());
        let (bs, plan) = {
            let mut inner = match fetch {
                Fetch::CachedOnly => {
                    let inner = self.inner.lock().unwrap();
                    if !inner.objects.contains_key(&obj) {
                        return Ok(None);
                    }
                    inner
                }
                Fetch::Any => self.lock_loaded(st, obj),
            };
            let s = Self::load(st, &mut inner, obj)?;
            let bs = s.dnode.block_size as u64;
            if len == 0 {
                return Ok(Some((bs, ReadBuf::new())));
            }
            let first = offset / bs;
            let last = (offset + len as u64 - 1) / bs;
            let plan: Vec<(u64, Source)> = (first..=last)
                .map(|b| Ok((b, Self::dirty_contents(Self::source_of(s, b))?)))
                .collect::<Result<_, PoolError>>()?;
            (bs, plan)
        };
        // Resolve the committed blocks first, then read them in one aggregated batch.
        let mut tree_bps: Vec<BlockPointer> = Vec::new();
        let mut tree_slot: Vec<Option<usize>> = Vec::with_capacity(plan.len());
        let mut indirect: Vec<BlockPointer> = Vec::new();
        for (blkid, source) in &plan {
            match source {
                Source::Tree(root, levels) => {
                    match tree_block_lookup(st, *root, *levels, *blkid, fetch, &mut indirect)? {
                        TreeLookup::Block(bp) => {
                            tree_slot.push(Some(tree_bps.len()));
                            tree_bps.push(bp);
                        }
                        TreeLookup::Hole => tree_slot.push(None),
                        TreeLookup::NotCached => return Ok(None),
                    }
                }
                _ => tree_slot.push(None),
            }
        }
        let blocks = if fetch == Fetch::CachedOnly {
            // All or nothing, under one look at the ARC: the indirect blocks the lookups
            // only peeked at, then the data blocks. They count as an ordinary read
            // counts them (an indirect block once per data block found through it), and
            // only when the read is answered here.
            let wanted: Vec<BlockPointer> = indirect.iter().chain(&tree_bps).copied().collect();
            let Some(mut found) = st.cached_blocks(&wanted) else {
                return Ok(None);
            };
            found.drain(..indirect.len());
            found.into_iter().map(Ok).collect()
        } else if tree_bps.len() > 1 {
            st.read_batch(&tree_bps, AccessKind::Demand)
        } else {
            tree_bps
                .iter()
                .map(|bp| st.read_block_as(bp, AccessKind::Demand))
                .collect()
        };
        let mut blocks: Vec<Option<crate::storage::CachedBlock>> = blocks
            .into_iter()
            .map(|r| r.map(Some))
            .collect::<Result<_, _>>()?;
        let mut out = ReadBuf::new();
        for ((blkid, source), slot) in plan.into_iter().zip(tree_slot) {
            let block_start = blkid * bs;
            let from = offset.max(block_start);
            let to = (offset + len as u64).min(block_start + bs);
            let src_range = (from - block_start) as usize..(to - block_start) as usize;
            match source {
                Source::Zero => out.push_zeros(src_range.len()),
                Source::Mem(b) => out.push_dirty(b, src_range),
                Source::Stored(_) => unreachable!("decompressed by dirty_contents"),
                Source::Tree(..) => match slot.and_then(|i| blocks[i].take()) {
                    Some(block) => {
                        if block.bytes().len() < src_range.end {
                            return Err(PoolError::Corrupt(
                                "data block shorter than the object's block size".into(),
                            ));
                        }
                        out.push_block(block, src_range);
                    }
                    None => out.push_zeros(src_range.len()),
                },
            }
        }
        assert_eq!(out.len(), len, "a read returns exactly the bytes asked for");
        Ok(Some((bs, out)))
    }

    /// The block size of `obj` if it is loaded (no device I/O; `None` otherwise).
    pub fn loaded_block_size(&self, obj: u64) -> Option<u64> {
        let inner = self.inner.lock().unwrap();
        inner.objects.get(&obj).map(|s| s.dnode.block_size as u64)
    }

    /// Feeds a demand read to the object's stream detector; returns the stream it
    /// belongs to and the block ids to read ahead. `budget`: the pool's read-ahead
    /// issued and not yet read, and the ARC's bound, in bytes, asked only when the read
    /// continues a stream; they decide whether it may read further ahead than the
    /// normal distance (`PrefetchConfig::may_extend`).
    pub fn note_read(
        &self,
        obj: u64,
        offset: u64,
        len: u64,
        block_size: u64,
        budget: impl FnOnce() -> (u64, u64),
    ) -> (crate::prefetch::StreamId, std::ops::Range<u64>) {
        if len == 0 || block_size == 0 {
            return (0, 0..0);
        }
        let first = offset / block_size;
        let last = (offset + len - 1) / block_size;
        let mut d = self.detectors.lock().unwrap();
        if d.len() >= MAX_DETECTORS && !d.contains_key(&obj) {
            d.clear();
        }
        d.entry(obj)
            .or_insert_with(|| StreamDetector::new(PrefetchConfig::default()))
            .on_read(
                first,
                last - first + 1,
                block_size,
                std::time::Instant::now(),
                budget,
            )
    }

    /// Reads a range of blocks into the ARC ahead of demand, in one aggregated batch
    /// (holes and dirty blocks are skipped).
    /// The part of `range` that read-ahead would still have to read: from its first to
    /// its last block that is neither in memory nor a hole, found without device I/O
    /// (a block behind an indirect block that is not cached counts as not cached).
    /// Empty when everything is there, so a stream from the ARC hands no work to the
    /// read-ahead threads.
    pub fn uncached_part(
        &self,
        st: &Storage,
        obj: u64,
        range: std::ops::Range<u64>,
    ) -> std::ops::Range<u64> {
        let sources: Vec<(u64, Source)> = {
            let inner = self.inner.lock().unwrap();
            let Some(s) = inner.objects.get(&obj) else {
                return range;
            };
            range
                .clone()
                .filter(|&b| b < s.dnode.nblocks)
                .map(|b| (b, Self::source_of(s, b)))
                .collect()
        };
        let mut missing = sources.into_iter().filter_map(|(blkid, source)| {
            let Source::Tree(root, levels) = source else {
                return None;
            };
            let peeked = &mut Vec::new();
            match tree_block_lookup(st, root, levels, blkid, Fetch::CachedOnly, peeked) {
                Ok(TreeLookup::Hole) => None,
                Ok(TreeLookup::Block(bp)) => (!st.is_cached(&bp)).then_some(blkid),
                // Read-ahead looks again, reading what it needs.
                Ok(TreeLookup::NotCached) | Err(_) => Some(blkid),
            }
        });
        let Some(first) = missing.next() else {
            return range.start..range.start;
        };
        let last = missing.last().unwrap_or(first);
        first..last + 1
    }

    pub fn prefetch_range(&self, st: &Storage, obj: u64, range: std::ops::Range<u64>) {
        let _pin = st.pin_reads();
        let sources: Vec<(u64, Source)> = {
            let mut inner = self.lock_loaded(st, obj);
            match Self::load(st, &mut inner, obj) {
                Ok(s) => range
                    .filter(|&b| b < s.dnode.nblocks)
                    .map(|b| (b, Self::source_of(s, b)))
                    .collect(),
                Err(_) => return,
            }
        };
        let mut bps = Vec::new();
        for (blkid, source) in sources {
            if let Source::Tree(root, levels) = source {
                if let Ok(Some(bp)) = tree_block_bp(st, root, levels, blkid) {
                    bps.push(bp);
                }
            }
        }
        if !bps.is_empty() {
            let _ = st.read_batch(&bps, AccessKind::Prefetch);
        }
    }

    /// Writes `data` at `offset`. Returns the bytes newly dirtied (for the write throttle).
    pub fn write(
        &self,
        st: &Storage,
        obj: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<u64, PoolError> {
        if data.is_empty() {
            return Ok(0);
        }
        let mut inner = self.lock_loaded(st, obj);
        let s = Self::load(st, &mut inner, obj)?;
        let bs = s.dnode.block_size as u64;
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| PoolError::InvalidArgument("offset overflow".into()))?;
        let last = (end - 1) / bs;
        if levels_for(last + 1) > MAX_LEVELS {
            return Err(PoolError::InvalidArgument(
                "write beyond the largest object size".into(),
            ));
        }
        let mut dirtied = 0;
        let mut blkid = offset / bs;
        while blkid * bs < end {
            let block_start = blkid * bs;
            let from = offset.max(block_start);
            let to = end.min(block_start + bs);
            let src = &data[(from - offset) as usize..(to - offset) as usize];
            // A block already changed in this txg that nothing else holds (no reader,
            // no placed copy, not yet shared with the ARC) takes a partial write in
            // place: small writes into large records copy what they write, not the
            // whole record each time.
            if let Some(Dirty::Data(open)) = s.open.blocks.get_mut(&blkid) {
                if let Some(buf) = Arc::get_mut(open).filter(|b| b.len() as u64 == bs) {
                    buf[(from - block_start) as usize..(to - block_start) as usize]
                        .copy_from_slice(src);
                    blkid += 1;
                    continue;
                }
            }
            let contents = if from == block_start && to == block_start + bs {
                AlignedBuf::from_slice(src)
            } else {
                let mut base = match Self::dirty_contents(Self::source_of(s, blkid))? {
                    Source::Mem(b) => AlignedBuf::from_slice(&b),
                    Source::Zero => AlignedBuf::zeroed(bs as usize),
                    Source::Stored(_) => unreachable!("decompressed by dirty_contents"),
                    Source::Tree(root, levels) => {
                        match read_tree_block(st, root, levels, blkid, AccessKind::Demand)? {
                            Some(b) => AlignedBuf::from_slice(b.bytes()),
                            None => AlignedBuf::zeroed(bs as usize),
                        }
                    }
                };
                base[(from - block_start) as usize..(to - block_start) as usize]
                    .copy_from_slice(src);
                base
            };
            if s.open
                .blocks
                .insert(blkid, Dirty::Data(Arc::new(contents)))
                .is_none()
            {
                dirtied += bs;
            }
            blkid += 1;
        }
        if last + 1 > s.dnode.nblocks {
            s.dnode.nblocks = last + 1;
            s.open.dnode_dirty = true;
        }
        inner.open_dirty.insert(obj);
        Ok(dirtied)
    }

    /// Block `blkid` of `obj` becomes `contents`, a whole block the caller hands over
    /// (a received block read straight into its buffer): `write` of the same bytes
    /// without copying them. Returns the bytes newly dirtied.
    pub fn write_block(
        &self,
        st: &Storage,
        obj: u64,
        blkid: u64,
        contents: AlignedBuf,
    ) -> Result<u64, PoolError> {
        let len = contents.len() as u64;
        self.put_whole_block(st, obj, blkid, len, Dirty::Data(Arc::new(contents)))
    }

    /// Block `blkid` of `obj` becomes `block` as it was stored by the pool that sent
    /// it: the sync writes its bytes without decompressing or compressing them.
    /// Returns the bytes newly dirtied.
    pub fn write_stored(
        &self,
        st: &Storage,
        obj: u64,
        blkid: u64,
        block: Arc<StoredBlock>,
    ) -> Result<u64, PoolError> {
        let len = block.lsize as u64;
        self.put_whole_block(st, obj, blkid, len, Dirty::Stored(block))
    }

    /// Block `blkid` of `obj` becomes `block`, `len` bytes once read, which must be
    /// the object's block size. Returns the bytes newly dirtied.
    fn put_whole_block(
        &self,
        st: &Storage,
        obj: u64,
        blkid: u64,
        len: u64,
        block: Dirty,
    ) -> Result<u64, PoolError> {
        let mut inner = self.lock_loaded(st, obj);
        let s = Self::load(st, &mut inner, obj)?;
        if len != s.dnode.block_size as u64 {
            return Err(PoolError::InvalidArgument(format!(
                "a {len}-byte block for object {obj} of {}-byte blocks",
                s.dnode.block_size
            )));
        }
        if levels_for(blkid.saturating_add(1)) > MAX_LEVELS {
            return Err(PoolError::InvalidArgument(
                "write beyond the largest object size".into(),
            ));
        }
        let dirtied = if s.open.blocks.insert(blkid, block).is_none() {
            s.dnode.block_size as u64
        } else {
            0
        };
        if blkid + 1 > s.dnode.nblocks {
            s.dnode.nblocks = blkid + 1;
            s.open.dnode_dirty = true;
        }
        inner.open_dirty.insert(obj);
        Ok(dirtied)
    }

    /// Grows the block size of an object with at most one block, keeping its contents:
    /// a small file stores one block of its own size and grows it up to the recordsize.
    /// The new block 0 goes to the open set, so readers never see a block whose size
    /// differs from the dnode's. Returns the bytes newly dirtied.
    pub fn grow_block_size(
        &self,
        st: &Storage,
        obj: u64,
        block_size: u32,
    ) -> Result<u64, PoolError> {
        check_block_size(block_size)?;
        let mut inner = self.lock_loaded(st, obj);
        let s = Self::load(st, &mut inner, obj)?;
        let old = s.dnode.block_size;
        if block_size <= old {
            return Ok(0);
        }
        if s.dnode.nblocks > 1 || s.open.blocks.keys().any(|&b| b > 0) {
            return Err(PoolError::InvalidArgument(format!(
                "object {obj} has more than one block; its block size is fixed"
            )));
        }
        let mut grown = AlignedBuf::zeroed(block_size as usize);
        let had_block = match Self::dirty_contents(Self::source_of(s, 0))? {
            Source::Mem(b) => {
                grown[..b.len()].copy_from_slice(&b);
                true
            }
            Source::Zero => s.dnode.nblocks > 0,
            Source::Stored(_) => unreachable!("decompressed by dirty_contents"),
            Source::Tree(root, levels) => {
                if let Some(b) = read_tree_block(st, root, levels, 0, AccessKind::Demand)? {
                    let n = b.bytes().len().min(block_size as usize);
                    grown[..n].copy_from_slice(&b.bytes()[..n]);
                }
                s.dnode.nblocks > 0
            }
        };
        s.dnode.block_size = block_size;
        s.open.dnode_dirty = true;
        if had_block {
            s.open.blocks.insert(0, Dirty::Data(Arc::new(grown)));
        }
        inner.open_dirty.insert(obj);
        Ok(block_size as u64)
    }

    /// Punches whole blocks inside `[offset, offset+len)` to holes and zeroes the
    /// partial blocks at either end.
    pub fn free_range(
        &self,
        st: &Storage,
        obj: u64,
        offset: u64,
        len: u64,
    ) -> Result<(), PoolError> {
        if len == 0 {
            return Ok(());
        }
        let bs = {
            let mut inner = self.lock_loaded(st, obj);
            Self::load(st, &mut inner, obj)?.dnode.block_size as u64
        };
        let end = offset.saturating_add(len);
        let first_full = offset.div_ceil(bs);
        let last_full = end / bs; // exclusive
        if first_full >= last_full {
            let zeros = vec![0u8; (end - offset) as usize];
            self.write(st, obj, offset, &zeros)?;
            return Ok(());
        }
        if offset < first_full * bs {
            self.write(
                st,
                obj,
                offset,
                &vec![0u8; (first_full * bs - offset) as usize],
            )?;
        }
        if end > last_full * bs {
            self.write(
                st,
                obj,
                last_full * bs,
                &vec![0u8; (end - last_full * bs) as usize],
            )?;
        }
        let mut inner = self.lock_loaded(st, obj);
        let s = Self::load(st, &mut inner, obj)?;
        let doomed: Vec<u64> = s
            .open
            .blocks
            .range(first_full..last_full)
            .map(|(&k, _)| k)
            .collect();
        for k in doomed {
            s.open.blocks.remove(&k);
        }
        s.open.range_frees.push((first_full, last_full));
        inner.open_dirty.insert(obj);
        Ok(())
    }

    /// The committed pointer of data block `blkid` of `obj` (none: a hole).
    pub fn committed_block(
        &self,
        st: &Storage,
        obj: u64,
        blkid: u64,
    ) -> Result<Option<BlockPointer>, PoolError> {
        let _pin = st.pin_reads();
        let (root, levels) = {
            let mut inner = self.lock_loaded(st, obj);
            let s = Self::load(st, &mut inner, obj)?;
            (s.dnode.root, s.dnode.levels)
        };
        if levels == 0 {
            return Ok(None);
        }
        tree_block_bp(st, root, levels, blkid)
    }

    /// Whether data block `blkid` of `obj` holds data now (written, in memory or on
    /// disk) rather than being a hole (never written, or freed): what a block
    /// protocol reports as mapped or deallocated.
    pub fn block_mapped(&self, st: &Storage, obj: u64, blkid: u64) -> Result<bool, PoolError> {
        let _pin = st.pin_reads();
        let source = {
            let mut inner = self.lock_loaded(st, obj);
            let s = Self::load(st, &mut inner, obj)?;
            Self::source_of(s, blkid)
        };
        match source {
            Source::Mem(_) | Source::Stored(_) => Ok(true),
            Source::Zero => Ok(false),
            Source::Tree(root, levels) => {
                Ok(tree_block_bp(st, root, levels, blkid)?.is_some_and(|bp| !bp.is_hole()))
            }
        }
    }

    /// The block size of an object.
    pub fn block_size(&self, st: &Storage, obj: u64) -> Result<u32, PoolError> {
        let mut inner = self.lock_loaded(st, obj);
        Ok(Self::load(st, &mut inner, obj)?.dnode.block_size)
    }
}
