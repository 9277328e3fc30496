//! The bytes the load generator writes, and the check of the bytes it reads back.
//!
//! Content is a pure function of (seed, file, position): byte `p` of file `f` is
//! `pattern[(p + f * FILE_SHIFT) % PATTERN_BYTES]`, where the pattern is 4 MiB drawn
//! from the seed. So any read at any offset can be checked without remembering what
//! was written, any client can write any part of the file set, and no two files start
//! alike. Never all zeros: with `compressible = c`, the last `c` of every 4 KiB of the
//! pattern is zeros and the rest random, so a compressing server sees about `1/(1-c)`
//! (a block-level compressor cannot do better, since the pattern repeats only every
//! 4 MiB, far beyond any record).

/// Length of the repeating pattern.
pub const PATTERN_BYTES: usize = 4 << 20;
/// How far apart two files' patterns start (4 KiB-aligned, odd in 4 KiB units).
const FILE_SHIFT: u64 = 3 * 4096 + 4096 * 1024;

pub struct Content {
    /// The pattern and then its first `MAX_IO` bytes again, so any window of up to
    /// `MAX_IO` bytes is one contiguous slice.
    pattern: Vec<u8>,
}

/// The longest single I/O the generator issues.
pub const MAX_IO: usize = 1 << 20;

/// SplitMix64: small, seedable, and plenty for offsets and content.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5851_F42D_4C95_7F2D)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

impl Content {
    pub fn new(seed: u64, compressible: f64) -> Content {
        assert!((0.0..1.0).contains(&compressible), "compressible in [0, 1)");
        let mut rng = Rng::new(seed);
        let mut pattern = vec![0u8; PATTERN_BYTES + MAX_IO];
        let zeros_from = 4096 - (4096.0 * compressible) as usize;
        for chunk in pattern[..PATTERN_BYTES].chunks_mut(4096) {
            for word in chunk[..zeros_from].chunks_mut(8) {
                let v = rng.next_u64().to_le_bytes();
                word.copy_from_slice(&v[..word.len()]);
            }
        }
        let (head, tail) = pattern.split_at_mut(PATTERN_BYTES);
        tail.copy_from_slice(&head[..MAX_IO]);
        Content { pattern }
    }

    /// The bytes of `file` at `[offset, offset + len)`.
    pub fn slice(&self, file: u64, offset: u64, len: usize) -> &[u8] {
        assert!(len <= MAX_IO, "I/O of {len} bytes is larger than {MAX_IO}");
        let at =
            (offset.wrapping_add(file.wrapping_mul(FILE_SHIFT)) % PATTERN_BYTES as u64) as usize;
        &self.pattern[at..at + len]
    }

    /// The first position where `got` differs from what `file` holds at `offset`.
    pub fn mismatch(&self, file: u64, offset: u64, got: &[u8]) -> Option<u64> {
        let want = self.slice(file, offset, got.len());
        if want == got {
            return None;
        }
        let i = want.iter().zip(got).position(|(a, b)| a != b).unwrap();
        Some(offset + i as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_a_function_of_position_and_never_all_zeros() {
        let c = Content::new(7, 0.0);
        let whole = c.slice(3, 1000, 64 << 10).to_vec();
        assert_eq!(c.slice(3, 1000 + 4096, 4096), &whole[4096..8192]);
        assert!(c.mismatch(3, 1000, &whole).is_none());
        assert_ne!(c.slice(4, 1000, 4096), &whole[..4096]);
        assert!(whole.iter().filter(|b| **b == 0).count() < whole.len() / 64);
        let mut bad = whole.clone();
        bad[5000] ^= 1;
        assert_eq!(c.mismatch(3, 1000, &bad), Some(6000));
        // Across the pattern's wrap.
        let end = PATTERN_BYTES as u64 - 100;
        let w = c.slice(0, end, 4096).to_vec();
        assert_eq!(&w[100..], c.slice(0, PATTERN_BYTES as u64 * 2, 3996));
    }

    #[test]
    fn compressible_content_has_its_share_of_zeros() {
        let c = Content::new(1, 0.5);
        let s = c.slice(0, 0, 1 << 20);
        let zeros = s.iter().filter(|b| **b == 0).count() as f64 / s.len() as f64;
        assert!((0.49..0.52).contains(&zeros), "{zeros}");
    }
}
