//! Directories: an extendible hash table of 4 KiB leaf blocks inside one pool object,
//! so lookup, insert and remove read O(1) blocks at any size (a million entries is a
//! table of a few thousand leaves), and readdir cookies are positions in hash order that
//! stay valid while entries are added and removed.
//!
//! Names hash (blake3 keyed with the directory's own random salt, so nobody can aim
//! names at one bucket) to 46 bits. An entry's *key* is `hash << 16 | cd`, where the
//! collision differentiator `cd` separates names with equal hashes; entries are kept
//! sorted by key inside each leaf, and leaves cover contiguous hash prefixes, so walking
//! the table in order walks the keys in order. A readdir cookie is `key + 3` (cookies
//! 1 and 2 belong to "." and ".."): resuming means "first key above the cookie's", which
//! is well defined however the leaves have split since.
//!
//! Layout in the directory object (little-endian; `docs/format.md`):
//! - block 0, the header: magic `SHOALZAP`, version (u32), depth (u32), entries (u64),
//!   next free leaf block (u64), salt (32 bytes), then at byte 64 the table inline
//!   (2^depth u64 leaf block ids) while depth <= 8;
//! - past depth 8 the table lives in blocks from `TABLE_START` (512 ids per block);
//! - leaves from block 1: magic (u32), local depth (u16), count (u16), prefix (u64),
//!   end of entries (u16), 6 bytes reserved, then the entries, each key (u64),
//!   object (u64), kind (u8), name length (u8), name bytes.
//!
//! Crash safety comes from the caller: every change to a directory happens inside one
//! pool transaction together with the change to the object it names, and the pool
//! commits a transaction group atomically. Leaves never merge (as in ZFS's fat ZAP).

use crate::{FsError, Result};

pub const DIR_BLOCK: usize = 4096;
const HEADER_MAGIC: &[u8; 8] = b"SHOALZAP";
const LEAF_MAGIC: u32 = 0x4641_454c;
const VERSION: u32 = 1;
const HASH_BITS: u32 = 46;
const INLINE_DEPTH_MAX: u32 = 8;
const INLINE_TABLE_AT: usize = 64;
const TABLE_START: u64 = 1 << 30;
const IDS_PER_TABLE_BLOCK: u64 = (DIR_BLOCK / 8) as u64;
/// 2^20 leaves of 4 KiB hold tens of millions of names; past that inserts fail.
const DEPTH_MAX: u32 = 20;
const LEAF_HEADER: usize = 24;
const ENTRY_FIXED: usize = 18;
pub const NAME_MAX: usize = 255;
/// Cookies 0..3 are the start, "." and "..".
pub const FIRST_ENTRY_COOKIE: u64 = 3;

/// Where a directory's blocks live: the filesystem implements it over a pool object.
pub trait DirStore {
    /// Reads a block; a block never written reads as zeros.
    fn read_block(&self, blk: u64) -> Result<Vec<u8>>;
    fn write_block(&self, blk: u64, data: &[u8]) -> Result<()>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: u64,
    pub object: u64,
    pub kind: u8,
    pub name: Vec<u8>,
}

impl Entry {
    pub fn cookie(&self) -> u64 {
        self.key + FIRST_ENTRY_COOKIE
    }
    fn hash(&self) -> u64 {
        self.key >> 16
    }
    fn encoded_len(&self) -> usize {
        ENTRY_FIXED + self.name.len()
    }
}

struct Header {
    depth: u32,
    entries: u64,
    next_leaf: u64,
    salt: [u8; 32],
    /// The table, when inline.
    inline: Vec<u64>,
}

impl Header {
    fn decode(b: &[u8]) -> Result<Header> {
        if &b[0..8] != HEADER_MAGIC {
            return Err(FsError::Io("directory header has a bad magic".into()));
        }
        let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
        if version != VERSION {
            return Err(FsError::Io(format!("directory version {version} unknown")));
        }
        let depth = u32::from_le_bytes(b[12..16].try_into().unwrap());
        if depth > DEPTH_MAX {
            return Err(FsError::Io(format!("directory depth {depth} out of range")));
        }
        let mut salt = [0u8; 32];
        salt.copy_from_slice(&b[32..64]);
        let mut inline = Vec::new();
        if depth <= INLINE_DEPTH_MAX {
            for i in 0..(1usize << depth) {
                let o = INLINE_TABLE_AT + i * 8;
                inline.push(u64::from_le_bytes(b[o..o + 8].try_into().unwrap()));
            }
        }
        Ok(Header {
            depth,
            entries: u64::from_le_bytes(b[16..24].try_into().unwrap()),
            next_leaf: u64::from_le_bytes(b[24..32].try_into().unwrap()),
            salt,
            inline,
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; DIR_BLOCK];
        b[0..8].copy_from_slice(HEADER_MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.depth.to_le_bytes());
        b[16..24].copy_from_slice(&self.entries.to_le_bytes());
        b[24..32].copy_from_slice(&self.next_leaf.to_le_bytes());
        b[32..64].copy_from_slice(&self.salt);
        if self.depth <= INLINE_DEPTH_MAX {
            debug_assert_eq!(self.inline.len(), 1 << self.depth);
            for (i, id) in self.inline.iter().enumerate() {
                let o = INLINE_TABLE_AT + i * 8;
                b[o..o + 8].copy_from_slice(&id.to_le_bytes());
            }
        }
        b
    }
}

struct Leaf {
    local_depth: u32,
    prefix: u64,
    entries: Vec<Entry>,
}

impl Leaf {
    fn decode(blk: u64, b: &[u8]) -> Result<Leaf> {
        let bad = |why: &str| FsError::Io(format!("directory leaf {blk}: {why}"));
        if u32::from_le_bytes(b[0..4].try_into().unwrap()) != LEAF_MAGIC {
            return Err(bad("bad magic"));
        }
        let local_depth = u16::from_le_bytes(b[4..6].try_into().unwrap()) as u32;
        let count = u16::from_le_bytes(b[6..8].try_into().unwrap()) as usize;
        let prefix = u64::from_le_bytes(b[8..16].try_into().unwrap());
        let end = u16::from_le_bytes(b[16..18].try_into().unwrap()) as usize;
        if local_depth > DEPTH_MAX || !(LEAF_HEADER..=DIR_BLOCK).contains(&end) {
            return Err(bad("header out of range"));
        }
        let mut entries = Vec::with_capacity(count);
        let mut o = LEAF_HEADER;
        for _ in 0..count {
            if o + ENTRY_FIXED > end {
                return Err(bad("entry past the end"));
            }
            let key = u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
            let object = u64::from_le_bytes(b[o + 8..o + 16].try_into().unwrap());
            let kind = b[o + 16];
            let len = b[o + 17] as usize;
            if o + ENTRY_FIXED + len > end || len == 0 {
                return Err(bad("name past the end"));
            }
            entries.push(Entry {
                key,
                object,
                kind,
                name: b[o + ENTRY_FIXED..o + ENTRY_FIXED + len].to_vec(),
            });
            o += ENTRY_FIXED + len;
        }
        if o != end || entries.windows(2).any(|w| w[0].key >= w[1].key) {
            return Err(bad("entries unsorted or length mismatch"));
        }
        Ok(Leaf {
            local_depth,
            prefix,
            entries,
        })
    }

    fn used(&self) -> usize {
        LEAF_HEADER + self.entries.iter().map(Entry::encoded_len).sum::<usize>()
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; DIR_BLOCK];
        let used = self.used();
        assert!(used <= DIR_BLOCK, "directory leaf overfull");
        b[0..4].copy_from_slice(&LEAF_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&(self.local_depth as u16).to_le_bytes());
        b[6..8].copy_from_slice(&(self.entries.len() as u16).to_le_bytes());
        b[8..16].copy_from_slice(&self.prefix.to_le_bytes());
        b[16..18].copy_from_slice(&(used as u16).to_le_bytes());
        let mut o = LEAF_HEADER;
        for e in &self.entries {
            b[o..o + 8].copy_from_slice(&e.key.to_le_bytes());
            b[o + 8..o + 16].copy_from_slice(&e.object.to_le_bytes());
            b[o + 16] = e.kind;
            b[o + 17] = e.name.len() as u8;
            b[o + ENTRY_FIXED..o + ENTRY_FIXED + e.name.len()].copy_from_slice(&e.name);
            o += e.encoded_len();
        }
        b
    }
}

/// One directory, over its store.
pub struct Directory<'a, S: DirStore> {
    store: &'a S,
}

/// A name a directory can hold: 1..=255 bytes, no '/', no NUL, not "." or "..".
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return Err(FsError::Invalid(format!(
            "'{}' is not a valid name",
            String::from_utf8_lossy(name)
        )));
    }
    if name.contains(&0) {
        return Err(FsError::Invalid("a name may not contain NUL".into()));
    }
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    Ok(())
}

impl<'a, S: DirStore> Directory<'a, S> {
    pub fn new(store: &'a S) -> Self {
        Directory { store }
    }

    /// Writes an empty directory (header and one leaf) with the given salt.
    pub fn init(&self, salt: [u8; 32]) -> Result<()> {
        let h = Header {
            depth: 0,
            entries: 0,
            next_leaf: 2,
            salt,
            inline: vec![1],
        };
        let leaf = Leaf {
            local_depth: 0,
            prefix: 0,
            entries: Vec::new(),
        };
        self.store.write_block(1, &leaf.encode())?;
        self.store.write_block(0, &h.encode())
    }

    fn header(&self) -> Result<Header> {
        Header::decode(&self.store.read_block(0)?)
    }

    fn hash(salt: &[u8; 32], name: &[u8]) -> u64 {
        let h = blake3::keyed_hash(salt, name);
        u64::from_le_bytes(h.as_bytes()[0..8].try_into().unwrap()) >> (64 - HASH_BITS)
    }

    fn table_get(&self, h: &Header, idx: u64) -> Result<u64> {
        if h.depth <= INLINE_DEPTH_MAX {
            return Ok(h.inline[idx as usize]);
        }
        let b = self
            .store
            .read_block(TABLE_START + idx / IDS_PER_TABLE_BLOCK)?;
        let o = (idx % IDS_PER_TABLE_BLOCK) as usize * 8;
        Ok(u64::from_le_bytes(b[o..o + 8].try_into().unwrap()))
    }

    fn read_table(&self, h: &Header) -> Result<Vec<u64>> {
        if h.depth <= INLINE_DEPTH_MAX {
            return Ok(h.inline.clone());
        }
        let n = 1u64 << h.depth;
        let mut t = Vec::with_capacity(n as usize);
        for blk in 0..n.div_ceil(IDS_PER_TABLE_BLOCK) {
            let b = self.store.read_block(TABLE_START + blk)?;
            for i in 0..IDS_PER_TABLE_BLOCK.min(n - blk * IDS_PER_TABLE_BLOCK) as usize {
                t.push(u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap()));
            }
        }
        Ok(t)
    }

    /// Stores the table (into the header when small; the caller writes the header).
    fn write_table(&self, h: &mut Header, table: Vec<u64>) -> Result<()> {
        debug_assert_eq!(table.len() as u64, 1u64 << h.depth);
        if h.depth <= INLINE_DEPTH_MAX {
            h.inline = table;
            return Ok(());
        }
        h.inline.clear();
        for (blk, chunk) in table.chunks(IDS_PER_TABLE_BLOCK as usize).enumerate() {
            let mut b = vec![0u8; DIR_BLOCK];
            for (i, id) in chunk.iter().enumerate() {
                b[i * 8..i * 8 + 8].copy_from_slice(&id.to_le_bytes());
            }
            self.store.write_block(TABLE_START + blk as u64, &b)?;
        }
        Ok(())
    }

    fn leaf_for(&self, h: &Header, hash: u64) -> Result<(u64, Leaf)> {
        let idx = hash >> (HASH_BITS - h.depth);
        let blk = self.table_get(h, idx)?;
        let leaf = Leaf::decode(blk, &self.store.read_block(blk)?)?;
        // Check after reading: the leaf must cover the hash the table sent us for.
        let covers =
            leaf.local_depth <= h.depth && hash >> (HASH_BITS - leaf.local_depth) == leaf.prefix;
        if !covers {
            return Err(FsError::Io(format!(
                "directory leaf {blk} does not cover the hash it is filed under"
            )));
        }
        Ok((blk, leaf))
    }

    pub fn lookup(&self, name: &[u8]) -> Result<Option<Entry>> {
        if name.len() > NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        let h = self.header()?;
        let hash = Self::hash(&h.salt, name);
        let (_, leaf) = self.leaf_for(&h, hash)?;
        Ok(leaf
            .entries
            .into_iter()
            .find(|e| e.hash() == hash && e.name == name))
    }

    /// Number of entries.
    pub fn len(&self) -> Result<u64> {
        Ok(self.header()?.entries)
    }

    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Adds `name`; fails with `Exists` if it is there.
    pub fn insert(&self, name: &[u8], object: u64, kind: u8) -> Result<Entry> {
        check_name(name)?;
        let mut h = self.header()?;
        let hash = Self::hash(&h.salt, name);
        loop {
            let (blk, mut leaf) = self.leaf_for(&h, hash)?;
            if leaf
                .entries
                .iter()
                .any(|e| e.hash() == hash && e.name == name)
            {
                return Err(FsError::Exists);
            }
            if leaf.used() + ENTRY_FIXED + name.len() <= DIR_BLOCK {
                let mut cd = 0u64;
                for e in leaf.entries.iter().filter(|e| e.hash() == hash) {
                    if e.key & 0xffff == cd {
                        cd += 1;
                    }
                }
                if cd > 0xffff {
                    return Err(FsError::NoSpace);
                }
                let entry = Entry {
                    key: hash << 16 | cd,
                    object,
                    kind,
                    name: name.to_vec(),
                };
                let at = leaf.entries.partition_point(|e| e.key < entry.key);
                leaf.entries.insert(at, entry.clone());
                self.store.write_block(blk, &leaf.encode())?;
                h.entries += 1;
                self.store.write_block(0, &h.encode())?;
                return Ok(entry);
            }
            self.split(&mut h, blk, leaf)?;
        }
    }

    /// Splits a full leaf in two by its next hash bit, doubling the table first if the
    /// leaf already uses every bit of it.
    fn split(&self, h: &mut Header, blk: u64, leaf: Leaf) -> Result<()> {
        if leaf.local_depth == h.depth {
            if h.depth == DEPTH_MAX {
                return Err(FsError::NoSpace);
            }
            let old = self.read_table(h)?;
            let doubled: Vec<u64> = (0..old.len() * 2).map(|i| old[i / 2]).collect();
            h.depth += 1;
            self.write_table(h, doubled)?;
        }
        let ld = leaf.local_depth + 1;
        let bit = HASH_BITS - ld;
        let new_blk = h.next_leaf;
        h.next_leaf += 1;
        let (ones, zeros): (Vec<Entry>, Vec<Entry>) = leaf
            .entries
            .into_iter()
            .partition(|e| (e.hash() >> bit) & 1 == 1);
        let low = Leaf {
            local_depth: ld,
            prefix: leaf.prefix << 1,
            entries: zeros,
        };
        let high = Leaf {
            local_depth: ld,
            prefix: leaf.prefix << 1 | 1,
            entries: ones,
        };
        self.store.write_block(blk, &low.encode())?;
        self.store.write_block(new_blk, &high.encode())?;
        // Table slots of the high half now point to the new leaf.
        let span = 1u64 << (h.depth - ld);
        let first = high.prefix * span;
        if h.depth <= INLINE_DEPTH_MAX {
            for i in first..first + span {
                h.inline[i as usize] = new_blk;
            }
        } else {
            let mut i = first;
            while i < first + span {
                let tblk = TABLE_START + i / IDS_PER_TABLE_BLOCK;
                let mut b = self.store.read_block(tblk)?;
                while i < first + span && TABLE_START + i / IDS_PER_TABLE_BLOCK == tblk {
                    let o = (i % IDS_PER_TABLE_BLOCK) as usize * 8;
                    b[o..o + 8].copy_from_slice(&new_blk.to_le_bytes());
                    i += 1;
                }
                self.store.write_block(tblk, &b)?;
            }
        }
        self.store.write_block(0, &h.encode())
    }

    /// Removes `name`, returning its entry.
    pub fn remove(&self, name: &[u8]) -> Result<Entry> {
        let mut h = self.header()?;
        let hash = Self::hash(&h.salt, name);
        let (blk, mut leaf) = self.leaf_for(&h, hash)?;
        let at = leaf
            .entries
            .iter()
            .position(|e| e.hash() == hash && e.name == name)
            .ok_or_else(|| FsError::NotFound(String::new()))?;
        let e = leaf.entries.remove(at);
        self.store.write_block(blk, &leaf.encode())?;
        h.entries = h
            .entries
            .checked_sub(1)
            .ok_or_else(|| FsError::Io("directory entry count underflow".into()))?;
        self.store.write_block(0, &h.encode())?;
        Ok(e)
    }

    /// Points an existing entry at another object (rename over an existing name).
    pub fn replace(&self, name: &[u8], object: u64, kind: u8) -> Result<Entry> {
        let h = self.header()?;
        let hash = Self::hash(&h.salt, name);
        let (blk, mut leaf) = self.leaf_for(&h, hash)?;
        let e = leaf
            .entries
            .iter_mut()
            .find(|e| e.hash() == hash && e.name == name)
            .ok_or_else(|| FsError::NotFound(String::new()))?;
        let old = e.clone();
        e.object = object;
        e.kind = kind;
        self.store.write_block(blk, &leaf.encode())?;
        Ok(old)
    }

    /// Entries with a cookie greater than `after` (0 = from the start), in cookie
    /// order, at most `max` of them.
    pub fn list(&self, after: u64, max: usize) -> Result<Vec<Entry>> {
        let h = self.header()?;
        let start_key = after.saturating_sub(FIRST_ENTRY_COOKIE - 1);
        let first_key = if after < FIRST_ENTRY_COOKIE {
            0
        } else {
            start_key
        };
        let slots = 1u64 << h.depth;
        let mut idx = (first_key >> 16) >> (HASH_BITS - h.depth);
        let mut out = Vec::new();
        while idx < slots && out.len() < max {
            let blk = self.table_get(&h, idx)?;
            let leaf = Leaf::decode(blk, &self.store.read_block(blk)?)?;
            if leaf.local_depth > h.depth {
                return Err(FsError::Io(format!(
                    "directory leaf {blk} deeper than the table"
                )));
            }
            for e in leaf.entries {
                if e.key >= first_key && out.len() < max {
                    out.push(e);
                }
            }
            let span = 1u64 << (h.depth - leaf.local_depth);
            idx = (leaf.prefix + 1) * span;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cell::RefCell;
    use std::collections::{BTreeMap, HashMap};

    #[derive(Default)]
    struct MemStore(RefCell<HashMap<u64, Vec<u8>>>);
    impl DirStore for MemStore {
        fn read_block(&self, blk: u64) -> Result<Vec<u8>> {
            Ok(self
                .0
                .borrow()
                .get(&blk)
                .cloned()
                .unwrap_or_else(|| vec![0; DIR_BLOCK]))
        }
        fn write_block(&self, blk: u64, data: &[u8]) -> Result<()> {
            assert_eq!(data.len(), DIR_BLOCK);
            self.0.borrow_mut().insert(blk, data.to_vec());
            Ok(())
        }
    }

    fn all(d: &Directory<MemStore>) -> Vec<Entry> {
        let mut out = Vec::new();
        let mut after = 0;
        loop {
            let page = d.list(after, 7).unwrap();
            if page.is_empty() {
                return out;
            }
            after = page.last().unwrap().cookie();
            out.extend(page);
        }
    }

    #[test]
    fn many_entries_split_past_the_inline_table_and_list_once_each() {
        let s = MemStore::default();
        let d = Directory::new(&s);
        d.init([7; 32]).unwrap();
        let n = 40_000u64;
        for i in 0..n {
            d.insert(format!("file-{i:08}").as_bytes(), i + 10, 1)
                .unwrap();
        }
        assert_eq!(d.len().unwrap(), n);
        assert!(d.header().unwrap().depth > INLINE_DEPTH_MAX);
        for i in (0..n).step_by(997) {
            let e = d
                .lookup(format!("file-{i:08}").as_bytes())
                .unwrap()
                .unwrap();
            assert_eq!(e.object, i + 10);
        }
        assert!(d.lookup(b"file-x").unwrap().is_none());
        let listed = all(&d);
        assert_eq!(listed.len() as u64, n);
        let mut names: Vec<_> = listed.iter().map(|e| e.name.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len() as u64, n);
        assert!(listed.windows(2).all(|w| w[0].cookie() < w[1].cookie()));
    }

    #[test]
    fn bad_names_are_refused() {
        let s = MemStore::default();
        let d = Directory::new(&s);
        d.init([1; 32]).unwrap();
        for bad in [&b""[..], b".", b"..", b"a/b", b"a\0b"] {
            assert!(matches!(d.insert(bad, 5, 1), Err(FsError::Invalid(_))));
        }
        assert!(matches!(
            d.insert(&[b'x'; 256], 5, 1),
            Err(FsError::NameTooLong)
        ));
        d.insert(&[b'x'; 255], 5, 1).unwrap();
        assert!(matches!(d.insert(&[b'x'; 255], 6, 1), Err(FsError::Exists)));
    }

    #[test]
    fn a_corrupt_leaf_is_an_error_not_a_panic() {
        let s = MemStore::default();
        let d = Directory::new(&s);
        d.init([1; 32]).unwrap();
        d.insert(b"a", 5, 1).unwrap();
        let mut b = s.read_block(1).unwrap();
        b[16] = 0xff; // end of entries past the block
        b[17] = 0xff;
        s.write_block(1, &b).unwrap();
        assert!(matches!(d.lookup(b"a"), Err(FsError::Io(_))));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Against a BTreeMap: inserts and removes in any order, with a cursor taken
        /// midway that must still return every entry that stayed, once.
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec((0u16..600, any::<bool>()), 1..1500)) {
            let s = MemStore::default();
            let d = Directory::new(&s);
            d.init([3; 32]).unwrap();
            let mut model = BTreeMap::new();
            for (i, (n, add)) in ops.iter().enumerate() {
                let name = format!("n{n}-{}", "y".repeat(*n as usize % 200));
                if *add {
                    let r = d.insert(name.as_bytes(), i as u64, 1);
                    let existed = model.contains_key(&name);
                    if existed {
                        prop_assert!(matches!(r, Err(FsError::Exists)));
                    } else {
                        r.unwrap();
                    }
                    model.entry(name).or_insert(i as u64);
                } else {
                    let r = d.remove(name.as_bytes());
                    prop_assert_eq!(r.is_ok(), model.remove(&name).is_some());
                }
            }
            prop_assert_eq!(d.len().unwrap(), model.len() as u64);
            let listed = all(&d);
            let got: BTreeMap<String, u64> = listed
                .iter()
                .map(|e| (String::from_utf8(e.name.clone()).unwrap(), e.object))
                .collect();
            prop_assert_eq!(listed.len(), got.len());
            prop_assert_eq!(&got, &model);
            // A cursor in the middle survives inserts that split leaves.
            if listed.len() > 2 {
                let mid = listed[listed.len() / 2].cookie();
                for j in 0..300 {
                    d.insert(format!("late-{j}").as_bytes(), 1, 1).unwrap();
                }
                let mut rest = Vec::new();
                let mut after = mid;
                loop {
                    let page = d.list(after, 50).unwrap();
                    if page.is_empty() { break; }
                    after = page.last().unwrap().cookie();
                    rest.extend(page);
                }
                for e in &listed[listed.len() / 2 + 1..] {
                    prop_assert!(rest.iter().any(|r| r.name == e.name));
                }
                prop_assert!(rest.iter().all(|r| r.cookie() > mid));
            }
        }
    }
}
