//! The ARC: the pool's only data cache (Megiddo and Modha's Adaptive Replacement Cache,
//! bounded in bytes as ZFS uses it). Written here rather than taken from a crate
//! because read speed lives here and the pool needs what general caches lack: byte
//! weights, ghost lists, prefetch awareness and eviction handed back to the caller
//! (for the L2ARC feed).
//!
//! Four lists, most recent at the head: MRU (seen once), MFU (seen twice or more), and
//! their ghosts (keys and sizes only, of entries evicted recently). A miss that finds
//! its key in the MRU ghost means MRU was too small: the target MRU size `p` grows; a
//! hit in the MFU ghost shrinks it. Eviction takes the tail of MRU when MRU is above
//! `p`, else the tail of MFU. Prefetched entries enter MRU flagged; their first demand
//! hit clears the flag without promoting, so a streaming scan does not flush MFU.
//! The bytes of resident entries still flagged are read-ahead nobody has read yet
//! (`prefetch_unread_bytes`): read-ahead sizes its windows by it, so that prefetched
//! blocks are not evicted before their reader arrives.
//!
//! Invariants (checked by `check_invariants` in tests after every operation):
//! `mru + mfu <= max`, `mru + mru_ghost <= max`, all four lists together `<= 2 * max`,
//! `0 <= p <= max`, each key in exactly one list, list byte counts equal their members,
//! `prefetch_unread` equals the bytes of resident entries flagged prefetch.
//! Every operation is O(1): intrusive lists over a slab plus a hash map.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

pub trait Weighted {
    fn weight_bytes(&self) -> usize;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessKind {
    Demand,
    Prefetch,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArcStats {
    pub size_bytes: u64,
    pub max_bytes: u64,
    pub target_mru_bytes: u64,
    pub mru_bytes: u64,
    pub mfu_bytes: u64,
    pub mru_ghost_bytes: u64,
    pub mfu_ghost_bytes: u64,
    pub demand_hits: u64,
    pub demand_misses: u64,
    pub prefetch_hits: u64,
    pub prefetch_misses: u64,
    pub mru_ghost_hits: u64,
    pub mfu_ghost_hits: u64,
    pub evicted_bytes: u64,
    pub entries: u64,
    /// Bytes of cached blocks read ahead and not yet read on demand.
    pub prefetch_unread_bytes: u64,
}

const NIL: usize = usize::MAX;
const MRU: usize = 0;
const MFU: usize = 1;
const MRU_GHOST: usize = 2;
const MFU_GHOST: usize = 3;

#[derive(Debug)]
struct Node<K, V> {
    key: K,
    value: Option<V>,
    size: u64,
    list: usize,
    prefetch: bool,
    prev: usize,
    next: usize,
}

#[derive(Debug, Clone, Copy)]
struct List {
    head: usize,
    tail: usize,
    bytes: u64,
    /// Nodes on the list, so `stats` counts entries without walking them.
    len: u64,
}

#[derive(Debug)]
struct Inner<K, V> {
    slab: Vec<Option<Node<K, V>>>,
    free: Vec<usize>,
    map: HashMap<K, usize>,
    lists: [List; 4],
    max: u64,
    p: u64,
    /// Bytes of resident nodes flagged `prefetch`.
    prefetch_unread: u64,
    stats: ArcStats,
}

pub struct AdaptiveCache<K, V> {
    inner: Mutex<Inner<K, V>>,
}

impl<K: Hash + Eq + Clone, V: Clone + Weighted> Inner<K, V> {
    /// The node holding `key`'s value (not a ghost).
    fn live(&self, key: &K) -> Option<usize> {
        let i = *self.map.get(key)?;
        self.node(i).value.is_some().then_some(i)
    }

    /// Counts a hit on node `i` and moves it as the access kind says; its value.
    fn hit(&mut self, i: usize, kind: AccessKind) -> V {
        match kind {
            AccessKind::Demand => {
                self.stats.demand_hits += 1;
                let (list, prefetch) = (self.node(i).list, self.node(i).prefetch);
                self.unlink(i);
                if prefetch {
                    self.node_mut(i).prefetch = false;
                    self.prefetch_unread -= self.node(i).size;
                    self.push_head(i, list);
                } else {
                    self.push_head(i, MFU);
                }
            }
            AccessKind::Prefetch => self.stats.prefetch_hits += 1,
        }
        self.node(i)
            .value
            .clone()
            .expect("a live node holds a value")
    }

    fn node(&self, i: usize) -> &Node<K, V> {
        self.slab[i].as_ref().expect("live node")
    }
    fn node_mut(&mut self, i: usize) -> &mut Node<K, V> {
        self.slab[i].as_mut().expect("live node")
    }

    fn unlink(&mut self, i: usize) {
        let (list, prev, next, size) = {
            let n = self.node(i);
            (n.list, n.prev, n.next, n.size)
        };
        if prev != NIL {
            self.node_mut(prev).next = next;
        } else {
            self.lists[list].head = next;
        }
        if next != NIL {
            self.node_mut(next).prev = prev;
        } else {
            self.lists[list].tail = prev;
        }
        self.lists[list].bytes -= size;
        self.lists[list].len -= 1;
    }

    fn push_head(&mut self, i: usize, list: usize) {
        let head = self.lists[list].head;
        {
            let n = self.node_mut(i);
            n.list = list;
            n.prev = NIL;
            n.next = head;
        }
        if head != NIL {
            self.node_mut(head).prev = i;
        } else {
            self.lists[list].tail = i;
        }
        self.lists[list].head = i;
        let size = self.node(i).size;
        self.lists[list].bytes += size;
        self.lists[list].len += 1;
    }

    fn alloc(&mut self, node: Node<K, V>) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slab[i] = Some(node);
                i
            }
            None => {
                self.slab.push(Some(node));
                self.slab.len() - 1
            }
        }
    }

    fn release(&mut self, i: usize) -> Node<K, V> {
        self.unlink(i);
        let n = self.slab[i].take().expect("live node");
        if n.prefetch && n.value.is_some() {
            self.prefetch_unread -= n.size;
        }
        self.free.push(i);
        self.map.remove(&n.key);
        n
    }

    /// Moves the tail of a resident list to its ghost list; returns what it held.
    fn evict_one(&mut self, from: usize) -> Option<(K, V)> {
        let i = self.lists[from].tail;
        if i == NIL {
            return None;
        }
        self.unlink(i);
        let ghost = if from == MRU { MRU_GHOST } else { MFU_GHOST };
        let n = self.node_mut(i);
        let value = n.value.take().expect("resident node has a value");
        let key = n.key.clone();
        let unread = std::mem::take(&mut n.prefetch);
        let size = n.size;
        if unread {
            self.prefetch_unread -= size;
        }
        self.push_head(i, ghost);
        self.stats.evicted_bytes += size;
        Some((key, value))
    }

    fn resident(&self) -> u64 {
        self.lists[MRU].bytes + self.lists[MFU].bytes
    }

    fn make_room(&mut self, keep: usize) -> Vec<(K, V)> {
        let mut evicted = Vec::new();
        while self.resident() > self.max {
            let mru = self.lists[MRU].bytes;
            let from_mru = mru > 0 && (mru > self.p || self.lists[MFU].bytes == 0);
            let from = if from_mru { MRU } else { MFU };
            if self.lists[from].tail == keep && self.lists[from].head == keep {
                // Only the new entry is left in this list: take from the other.
                let other = if from == MRU { MFU } else { MRU };
                match self.evict_one(other) {
                    Some(e) => evicted.push(e),
                    None => break,
                }
                continue;
            }
            match self.evict_one(from) {
                Some(e) => evicted.push(e),
                None => break,
            }
        }
        self.trim_ghosts();
        evicted
    }

    fn trim_ghosts(&mut self) {
        while self.lists[MRU].bytes + self.lists[MRU_GHOST].bytes > self.max
            && self.lists[MRU_GHOST].tail != NIL
        {
            let t = self.lists[MRU_GHOST].tail;
            self.release(t);
        }
        let total = |s: &Self| s.lists.iter().map(|l| l.bytes).sum::<u64>();
        while total(self) > 2 * self.max {
            let t = if self.lists[MFU_GHOST].tail != NIL {
                self.lists[MFU_GHOST].tail
            } else {
                self.lists[MRU_GHOST].tail
            };
            if t == NIL {
                break;
            }
            self.release(t);
        }
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        for (l, list) in self.lists.iter().enumerate() {
            let mut bytes = 0;
            let mut len = 0;
            let mut i = list.head;
            let mut prev = NIL;
            while i != NIL {
                let n = self.node(i);
                assert_eq!(n.list, l);
                assert_eq!(n.prev, prev);
                assert_eq!(n.value.is_some(), l == MRU || l == MFU);
                assert_eq!(self.map[&n.key], i);
                bytes += n.size;
                len += 1;
                prev = i;
                i = n.next;
            }
            assert_eq!(list.tail, prev);
            assert_eq!(bytes, list.bytes);
            assert_eq!(len, list.len);
        }
        let count: usize = self.slab.iter().filter(|n| n.is_some()).count();
        assert_eq!(count, self.map.len());
        assert!(self.resident() <= self.max);
        assert!(self.lists[MRU].bytes + self.lists[MRU_GHOST].bytes <= self.max);
        assert!(self.lists.iter().map(|l| l.bytes).sum::<u64>() <= 2 * self.max);
        assert!(self.p <= self.max);
        let unread: u64 = self
            .slab
            .iter()
            .flatten()
            .filter(|n| n.prefetch && n.value.is_some())
            .map(|n| n.size)
            .sum();
        assert_eq!(unread, self.prefetch_unread);
        assert!(self
            .slab
            .iter()
            .flatten()
            .all(|n| n.value.is_some() || !n.prefetch));
    }
}

impl<K: Hash + Eq + Clone, V: Clone + Weighted> AdaptiveCache<K, V> {
    pub fn new(max_bytes: u64) -> Self {
        let empty = List {
            head: NIL,
            tail: NIL,
            bytes: 0,
            len: 0,
        };
        AdaptiveCache {
            inner: Mutex::new(Inner {
                slab: Vec::new(),
                free: Vec::new(),
                map: HashMap::new(),
                lists: [empty; 4],
                max: max_bytes,
                p: max_bytes / 2,
                prefetch_unread: 0,
                stats: ArcStats::default(),
            }),
        }
    }

    pub fn get(&self, key: &K, kind: AccessKind) -> Option<V> {
        let mut s = self.inner.lock().unwrap();
        let Some(i) = s.live(key) else {
            match kind {
                AccessKind::Demand => s.stats.demand_misses += 1,
                AccessKind::Prefetch => s.stats.prefetch_misses += 1,
            }
            return None;
        };
        Some(s.hit(i, kind))
    }

    /// Every key's value, each counted and moved as a `get` hit, when all are held;
    /// otherwise `None`, having counted and changed nothing. One lock, so no key leaves
    /// in between. For callers that only look (a server answering from cache) and else
    /// fall back to `get`, which counts each miss once.
    pub fn get_all_if_cached(&self, keys: &[K], kind: AccessKind) -> Option<Vec<V>> {
        let mut s = self.inner.lock().unwrap();
        let found: Vec<usize> = keys.iter().map(|k| s.live(k)).collect::<Option<_>>()?;
        Some(found.into_iter().map(|i| s.hit(i, kind)).collect())
    }

    /// The value, without counting an access or moving it in the lists.
    pub fn peek(&self, key: &K) -> Option<V> {
        let s = self.inner.lock().unwrap();
        let i = *s.map.get(key)?;
        s.node(i).value.clone()
    }

    pub fn contains(&self, key: &K) -> bool {
        self.inner.lock().unwrap().live(key).is_some()
    }

    pub fn insert(&self, key: K, value: V, kind: AccessKind) -> Vec<(K, V)> {
        let size = value.weight_bytes() as u64;
        let mut s = self.inner.lock().unwrap();
        if size > s.max {
            return vec![(key, value)];
        }
        let mut target = MRU;
        if let Some(&i) = s.map.get(&key) {
            let list = s.node(i).list;
            if list == MRU || list == MFU {
                s.unlink(i);
                let n = s.node_mut(i);
                n.value = Some(value);
                let (old, unread) = (std::mem::replace(&mut n.size, size), n.prefetch);
                if unread {
                    s.prefetch_unread = s.prefetch_unread - old + size;
                }
                s.push_head(i, list);
                return s.make_room(i);
            }
            // Ghost hit: adapt the MRU target, then bring it back as frequent.
            let (mru_g, mfu_g) = (
                s.lists[MRU_GHOST].bytes.max(1),
                s.lists[MFU_GHOST].bytes.max(1),
            );
            if list == MRU_GHOST {
                let delta = (mfu_g / mru_g).max(1) * size;
                s.p = (s.p + delta).min(s.max);
                s.stats.mru_ghost_hits += 1;
            } else {
                let delta = (mru_g / mfu_g).max(1) * size;
                s.p = s.p.saturating_sub(delta);
                s.stats.mfu_ghost_hits += 1;
            }
            s.release(i);
            if kind == AccessKind::Demand {
                target = MFU;
            }
        }
        let i = s.alloc(Node {
            key: key.clone(),
            value: Some(value),
            size,
            list: target,
            prefetch: kind == AccessKind::Prefetch,
            prev: NIL,
            next: NIL,
        });
        s.map.insert(key, i);
        if kind == AccessKind::Prefetch {
            s.prefetch_unread += size;
        }
        s.push_head(i, target);
        s.make_room(i)
    }

    pub fn remove(&self, key: &K) -> Option<V> {
        let mut s = self.inner.lock().unwrap();
        let i = *s.map.get(key)?;
        s.release(i).value
    }

    pub fn set_max_bytes(&self, max_bytes: u64) -> Vec<(K, V)> {
        let mut s = self.inner.lock().unwrap();
        s.max = max_bytes;
        s.p = s.p.min(max_bytes);
        s.make_room(NIL)
    }

    /// Bytes of cached values (MRU and MFU): what analytics' `arc.size` reads once a
    /// second, without copying every counter as `stats` does.
    pub fn resident_bytes(&self) -> u64 {
        self.inner.lock().unwrap().resident()
    }

    /// Bytes of cached blocks that read-ahead brought in and no demand read has asked
    /// for yet, and the cache's bound: what read-ahead sizes its windows against.
    pub fn prefetch_unread_and_max_bytes(&self) -> (u64, u64) {
        let s = self.inner.lock().unwrap();
        (s.prefetch_unread, s.max)
    }

    /// Every counter and level.
    pub fn stats(&self) -> ArcStats {
        let s = self.inner.lock().unwrap();
        let mut st = s.stats.clone();
        st.size_bytes = s.resident();
        st.max_bytes = s.max;
        st.target_mru_bytes = s.p;
        st.mru_bytes = s.lists[MRU].bytes;
        st.mfu_bytes = s.lists[MFU].bytes;
        st.mru_ghost_bytes = s.lists[MRU_GHOST].bytes;
        st.mfu_ghost_bytes = s.lists[MFU_GHOST].bytes;
        st.entries = s.lists[MRU].len + s.lists[MFU].len;
        st.prefetch_unread_bytes = s.prefetch_unread;
        st
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Buf(usize);
    impl Weighted for Buf {
        fn weight_bytes(&self) -> usize {
            self.0
        }
    }

    fn check(c: &AdaptiveCache<u64, Buf>) {
        c.inner.lock().unwrap().check_invariants();
        let live = c
            .inner
            .lock()
            .unwrap()
            .slab
            .iter()
            .flatten()
            .filter(|n| n.value.is_some())
            .count();
        assert_eq!(c.stats().entries, live as u64);
        assert_eq!(c.resident_bytes(), c.stats().size_bytes);
    }

    #[test]
    fn frequent_set_survives_a_scan() {
        let c = AdaptiveCache::new(100 * 10);
        for k in 0..50u64 {
            c.insert(k, Buf(10), AccessKind::Demand);
            assert!(c.get(&k, AccessKind::Demand).is_some());
        }
        // A long one-pass scan.
        for k in 1000..3000u64 {
            c.get(&k, AccessKind::Demand);
            c.insert(k, Buf(10), AccessKind::Demand);
            check(&c);
        }
        let kept = (0..50u64).filter(|k| c.contains(k)).count();
        assert_eq!(kept, 50, "the frequent working set was flushed by the scan");
    }

    #[test]
    fn prefetch_hit_does_not_promote_until_second_demand() {
        let c = AdaptiveCache::new(1000);
        c.insert(1, Buf(10), AccessKind::Prefetch);
        assert_eq!(c.prefetch_unread_and_max_bytes(), (10, 1000));
        c.get(&1, AccessKind::Prefetch);
        assert_eq!(
            c.stats().prefetch_unread_bytes,
            10,
            "a prefetch hit reads nothing"
        );
        c.get(&1, AccessKind::Demand);
        assert_eq!(
            c.stats().prefetch_unread_bytes,
            0,
            "the first demand read it"
        );
        assert_eq!(c.stats().mfu_bytes, 0);
        assert_eq!(c.resident_bytes(), c.stats().size_bytes);
        c.get(&1, AccessKind::Demand);
        assert_eq!(c.stats().mfu_bytes, 10);
        assert_eq!(c.stats().demand_hits, 2);
    }

    /// Read-ahead that is evicted, replaced or removed before anyone reads it stops
    /// counting as unread; the invariant check recounts it from the nodes each time.
    #[test]
    fn unread_prefetch_leaves_with_its_entry() {
        let c = AdaptiveCache::new(100);
        for k in 0..10u64 {
            c.insert(k, Buf(10), AccessKind::Prefetch);
        }
        assert_eq!(c.stats().prefetch_unread_bytes, 100);
        c.insert(0, Buf(5), AccessKind::Prefetch);
        assert_eq!(c.stats().prefetch_unread_bytes, 95);
        check(&c);
        for k in 100..105u64 {
            c.insert(k, Buf(10), AccessKind::Demand);
        }
        assert_eq!(c.stats().prefetch_unread_bytes, 45, "{:?}", c.stats());
        c.remove(&9);
        assert_eq!(c.stats().prefetch_unread_bytes, 35);
        check(&c);
    }

    #[test]
    fn ghost_hits_move_the_target() {
        let c = AdaptiveCache::new(100);
        for k in 0..5u64 {
            c.insert(k, Buf(10), AccessKind::Demand);
            c.get(&k, AccessKind::Demand);
        }
        for k in 100..110u64 {
            c.insert(k, Buf(10), AccessKind::Demand);
        }
        let p0 = c.stats().target_mru_bytes;
        // Key 100 was evicted from MRU into its ghost: re-inserting grows p.
        assert!(!c.contains(&100));
        assert!(c.stats().mru_ghost_bytes > 0);
        c.insert(100, Buf(10), AccessKind::Demand);
        assert!(c.stats().target_mru_bytes > p0);
        assert_eq!(c.stats().mru_ghost_hits, 1);
        check(&c);
    }

    #[test]
    fn evicted_come_back_oldest_first_and_oversize_is_refused() {
        let c = AdaptiveCache::new(30);
        for k in 0..3u64 {
            assert!(c.insert(k, Buf(10), AccessKind::Demand).is_empty());
        }
        let ev = c.insert(3, Buf(20), AccessKind::Demand);
        assert_eq!(ev.iter().map(|e| e.0).collect::<Vec<_>>(), vec![0, 1]);
        let ev = c.insert(9, Buf(31), AccessKind::Demand);
        assert_eq!(ev.len(), 1);
        assert!(!c.contains(&9));
        assert_eq!(c.remove(&3), Some(Buf(20)));
        check(&c);
    }

    proptest! {
        #[test]
        fn invariants_hold(ops in proptest::collection::vec((0u8..4, 0u64..40, 1usize..30), 1..400)) {
            let c = AdaptiveCache::new(200);
            for (op, key, size) in ops {
                match op {
                    0 => { c.insert(key, Buf(size), AccessKind::Demand); }
                    1 => { c.insert(key, Buf(size), AccessKind::Prefetch); }
                    2 => { c.get(&key, AccessKind::Demand); }
                    _ => { c.remove(&key); }
                }
                check(&c);
            }
            let st = c.stats();
            prop_assert!(st.size_bytes <= 200);
        }
    }
}
