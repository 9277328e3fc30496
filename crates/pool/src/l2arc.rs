//! The L2ARC: a second-level read cache on cache devices (SSDs), fed from the ARC's
//! eviction end.
//!
//! Blocks the ARC evicts are queued (bounded; a full queue drops, never blocks the
//! reader that caused the eviction) to a writer thread that packs them into large
//! writes laid out as a ring over each cache device's data area. The index (block key
//! -> device, offset, length, fletcher4 of the contents) lives in memory only: the cache
//! starts empty after import, which is always correct.
//!
//! Invariants:
//! - Before the writer overwrites a region of the ring, every index entry in that region
//!   is removed, so a new lookup never points at a region being written.
//! - A reader that looked up an entry just before it was overwritten still cannot return
//!   wrong data: every L2 read is verified against the checksum kept in the index, and a
//!   mismatch is a miss (counted), after which the block is read from the pool.
//! - Nothing on a cache device is ever needed for correctness: losing one loses speed.
//! - Its I/O goes through each cache device's `Leaf`, like every other device I/O of
//!   the pool: it is counted in the leaf's counters and in analytics (`io.*` with
//!   role `cache`), and a cache device whose writes fail (or whose reads fail often)
//!   is faulted and then skipped; it costs speed only. `shoal pool remove` and `add`
//!   put it back in service.
//! - Cache devices come and go while the pool is imported (`add_device`,
//!   `remove_device`). Index entries name their ring by a number never reused, so an
//!   entry can never point into another device; removing a device drops its entries
//!   and waits for a batch being written to it, so nothing writes to it afterwards.

use crate::arc::Weighted;
use crate::checksum::{self, Checksum, ChecksumKind};
use crate::storage::{BlockKey, CachedBlock};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use vdev::{AlignedBuf, Leaf, SECTOR_SIZE};

/// Evicted blocks waiting to be written.
const FEED_QUEUE: usize = 4096;
/// Largest single write to a cache device.
const WRITE_BATCH_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// `Ring::id` of the ring holding it.
    device: u64,
    offset: u64,
    len: u32,
    stored: u32,
    sum: Checksum,
}

struct Ring {
    id: u64,
    /// Offsets are within the leaf's data area.
    leaf: Arc<Leaf>,
    len: u64,
    hand: u64,
    /// Ring offset -> key of the entry stored there.
    by_offset: BTreeMap<u64, BlockKey>,
}

struct State {
    rings: Vec<Ring>,
    index: HashMap<BlockKey, Entry>,
    next_ring: usize,
    next_id: u64,
}

impl State {
    fn ring_mut(&mut self, id: u64) -> Option<&mut Ring> {
        self.rings.iter_mut().find(|r| r.id == id)
    }

    fn add(&mut self, leaf: Arc<Leaf>) {
        let len = leaf.data_len() / SECTOR_SIZE as u64 * SECTOR_SIZE as u64;
        self.rings.push(Ring {
            id: self.next_id,
            leaf,
            len,
            hand: 0,
            by_offset: BTreeMap::new(),
        });
        self.next_id += 1;
    }
}

#[derive(Debug, Default, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct L2Stats {
    pub hits: u64,
    pub misses: u64,
    pub bad_reads: u64,
    pub written_bytes: u64,
    pub dropped_feeds: u64,
    pub size_bytes: u64,
    pub entries: u64,
    /// Bytes the cache devices can hold (their rings' lengths).
    #[serde(default)]
    pub capacity_bytes: u64,
}

pub struct L2Arc {
    state: Mutex<State>,
    /// Held while a batch is written to a device, so `remove_device` can wait for it.
    writing: Mutex<()>,
    feed: Mutex<Option<SyncSender<(BlockKey, CachedBlock)>>>,
    hits: AtomicU64,
    misses: AtomicU64,
    bad_reads: AtomicU64,
    written_bytes: AtomicU64,
    dropped_feeds: AtomicU64,
}

fn sector_round(n: usize) -> usize {
    n.div_ceil(SECTOR_SIZE) * SECTOR_SIZE
}

impl L2Arc {
    /// Starts an L2ARC over the data areas of `devices` (empty: no L2ARC).
    pub fn start(devices: Vec<Arc<Leaf>>) -> Option<Arc<L2Arc>> {
        if devices.is_empty() {
            return None;
        }
        let mut state = State {
            rings: Vec::new(),
            index: HashMap::new(),
            next_ring: 0,
            next_id: 0,
        };
        for device in devices {
            state.add(device);
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(FEED_QUEUE);
        let l2 = Arc::new(L2Arc {
            state: Mutex::new(state),
            writing: Mutex::new(()),
            feed: Mutex::new(Some(tx)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            bad_reads: AtomicU64::new(0),
            written_bytes: AtomicU64::new(0),
            dropped_feeds: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&l2);
        std::thread::Builder::new()
            .name("l2arc-feed".into())
            .spawn(move || writer(weak, rx))
            .expect("spawn l2arc writer");
        Some(l2)
    }

    /// Starts caching on one more device (empty: the cache fills from evictions).
    pub fn add_device(&self, device: Arc<Leaf>) {
        self.state.lock().unwrap().add(device);
    }

    /// Stops using `device`: its entries are forgotten, and a batch being written to
    /// it finishes before this returns. The cache may be left with no device; it
    /// then caches nothing.
    pub fn remove_device(&self, device: &Arc<Leaf>) {
        {
            let mut st = self.state.lock().unwrap();
            let Some(i) = st.rings.iter().position(|r| Arc::ptr_eq(&r.leaf, device)) else {
                return;
            };
            let ring = st.rings.remove(i);
            for key in ring.by_offset.values() {
                st.index.remove(key);
            }
        }
        drop(self.writing.lock().unwrap());
    }

    /// Offers blocks the ARC evicted. Never blocks.
    pub fn feed(&self, evicted: Vec<(BlockKey, CachedBlock)>) {
        if evicted.is_empty() {
            return;
        }
        let tx = self.feed.lock().unwrap().clone();
        let Some(tx) = tx else { return };
        for item in evicted {
            match tx.try_send(item) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    self.dropped_feeds.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Looks a block up and reads it from the cache device, verified.
    pub fn read(&self, key: &BlockKey) -> Option<CachedBlock> {
        let (entry, leaf) = {
            let st = self.state.lock().unwrap();
            match st.index.get(key) {
                Some(e) => {
                    let ring = st.rings.iter().find(|r| r.id == e.device);
                    let ring = ring.expect("an index entry names a ring of the cache");
                    (*e, ring.leaf.clone())
                }
                None => {
                    drop(st);
                    self.misses.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            }
        };
        let mut buf = AlignedBuf::for_overwrite(entry.stored as usize);
        let ok = leaf.read_direct(entry.offset, &mut buf)
            && checksum::compute(ChecksumKind::Fletcher4, &buf[..entry.len as usize]) == entry.sum;
        if !ok {
            self.bad_reads.fetch_add(1, Ordering::Relaxed);
            self.forget(key);
            return None;
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(CachedBlock(Arc::new(crate::storage::BlockBytes::Aligned(
            buf,
            entry.len as usize,
        ))))
    }

    /// Drops a block (freed in the pool).
    pub fn forget(&self, key: &BlockKey) {
        let mut st = self.state.lock().unwrap();
        if let Some(e) = st.index.remove(key) {
            if let Some(ring) = st.ring_mut(e.device) {
                ring.by_offset.remove(&e.offset);
            }
        }
    }

    pub fn stats(&self) -> L2Stats {
        let st = self.state.lock().unwrap();
        L2Stats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bad_reads: self.bad_reads.load(Ordering::Relaxed),
            written_bytes: self.written_bytes.load(Ordering::Relaxed),
            dropped_feeds: self.dropped_feeds.load(Ordering::Relaxed),
            size_bytes: st.index.values().map(|e| e.stored as u64).sum(),
            entries: st.index.len() as u64,
            capacity_bytes: st.rings.iter().map(|r| r.len).sum(),
        }
    }

    /// Stops feeding (pool export); the writer thread ends.
    pub fn stop(&self) {
        self.feed.lock().unwrap().take();
    }

    /// Writes one batch at the hand of the next ring.
    fn write_batch(&self, items: Vec<(BlockKey, CachedBlock)>) {
        let total: usize = items
            .iter()
            .map(|(_, b)| sector_round(b.bytes().len()))
            .sum();
        if total == 0 {
            return;
        }
        let writing = self.writing.lock().unwrap();
        // Reserve the region and retire what it overwrites.
        let (ring_id, leaf, offset) = {
            let mut st = self.state.lock().unwrap();
            let n = st.rings.len();
            // The next ring whose device is in service: a faulted cache device is
            // skipped until it is removed (and added again).
            let start = st.next_ring;
            let Some(r) = (0..n)
                .map(|i| (start + i) % n)
                .find(|&i| st.rings[i].leaf.is_usable())
            else {
                return;
            };
            st.next_ring = r.wrapping_add(1);
            let ring = &mut st.rings[r];
            if total as u64 > ring.len {
                return;
            }
            if ring.hand + total as u64 > ring.len {
                ring.hand = 0;
            }
            let offset = ring.hand;
            ring.hand += total as u64;
            let doomed: Vec<(u64, BlockKey)> = ring
                .by_offset
                .range(offset..offset + total as u64)
                .map(|(o, k)| (*o, *k))
                .collect();
            let leaf = ring.leaf.clone();
            for (o, k) in doomed {
                st.rings[r].by_offset.remove(&o);
                st.index.remove(&k);
            }
            (st.rings[r].id, leaf, offset)
        };
        let mut buf = AlignedBuf::zeroed(total);
        let mut pos = 0;
        let mut entries = Vec::with_capacity(items.len());
        for (key, block) in &items {
            let data = block.bytes();
            buf[pos..pos + data.len()].copy_from_slice(data);
            let stored = sector_round(data.len());
            entries.push((
                *key,
                Entry {
                    device: ring_id,
                    offset: offset + pos as u64,
                    len: data.len() as u32,
                    stored: stored as u32,
                    sum: checksum::compute(ChecksumKind::Fletcher4, data),
                },
            ));
            pos += stored;
        }
        if !leaf.write_direct(offset, &buf) {
            return; // a failing cache device just caches nothing
        }
        drop(writing);
        self.written_bytes
            .fetch_add(total as u64, Ordering::Relaxed);
        let mut st = self.state.lock().unwrap();
        if st.ring_mut(ring_id).is_none() {
            return; // the device was removed meanwhile
        }
        for (key, e) in entries {
            if let Some(old) = st.index.insert(key, e) {
                if let Some(ring) = st.ring_mut(old.device) {
                    ring.by_offset.remove(&old.offset);
                }
            }
            st.ring_mut(ring_id)
                .expect("checked above")
                .by_offset
                .insert(e.offset, key);
        }
    }
}

fn writer(l2: std::sync::Weak<L2Arc>, rx: Receiver<(BlockKey, CachedBlock)>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        let mut bytes = batch[0].1.weight_bytes();
        while bytes < WRITE_BATCH_BYTES {
            match rx.try_recv() {
                Ok(item) => {
                    bytes += item.1.weight_bytes();
                    batch.push(item);
                }
                Err(_) => break,
            }
        }
        let Some(l2) = l2.upgrade() else { return };
        l2.write_batch(batch);
    }
}
