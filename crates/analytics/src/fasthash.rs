//! A fast hasher for the collector's maps, whose keys are small (device numbers,
//! file ids, addresses, static names) and which it touches once per event per
//! dataset: the standard SipHash took a fifth of the collector's CPU under 8K random
//! reads. Written here rather than taken from a crate because it is a dozen lines and
//! sits on the hot path the overhead target measures.
//!
//! Invariant: keys are not chosen by remote parties freely enough to flood one
//! bucket: file ids and device numbers are assigned by shoal, client addresses are
//! bounded by the export rules, names are static. The final multiply-fold spreads
//! every input bit into the high bits hashbrown uses for its tags.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with `FastHasher`.
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

const K: u64 = 0x9E37_79B9_7F4A_7C15;

#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(26) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(i as u64);
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.mix(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.mix(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        let m = (self.0 as u128).wrapping_mul(K as u128);
        (m as u64) ^ ((m >> 64) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(t: &T) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(t)
    }

    #[test]
    fn nearby_keys_spread_over_the_top_bits() {
        // hashbrown takes its 7-bit tags from the top of the hash: sequential file
        // ids must not share them.
        let tops: std::collections::HashSet<u64> =
            (0..1024u64).map(|i| hash(&(7u64, i)) >> 57).collect();
        assert!(
            tops.len() > 100,
            "only {} distinct top-7-bit tags",
            tops.len()
        );
        assert_ne!(hash(&"read"), hash(&"reae"));
        assert_ne!(hash(&"ab"), hash(&"ab\0"));
    }
}
