//! Sector-aligned heap buffers for O_DIRECT, built without `unsafe`: a `Vec<u8>`
//! over-allocated by one sector, used from its first aligned byte. The backing vector
//! is never resized after creation, so the aligned start never moves.

use crate::device::SECTOR_SIZE;
use std::ops::{Deref, DerefMut};

pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn zeroed(len: usize) -> AlignedBuf {
        let storage = vec![0u8; len + SECTOR_SIZE];
        let addr = storage.as_ptr() as usize;
        let start = (SECTOR_SIZE - addr % SECTOR_SIZE) % SECTOR_SIZE;
        let buf = AlignedBuf {
            storage,
            start,
            len,
        };
        debug_assert_eq!(buf.as_ptr() as usize % SECTOR_SIZE, 0);
        buf
    }

    pub fn from_slice(data: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(data.len());
        b.copy_from_slice(data);
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        AlignedBuf::from_slice(self)
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn always_aligned() {
        for len in [0usize, 1, 511, 4096, 4097, 131072, 1 << 20] {
            let b = AlignedBuf::zeroed(len);
            assert_eq!(b.len(), len);
            if len > 0 {
                assert_eq!(b.as_ptr() as usize % SECTOR_SIZE, 0);
            }
            assert!(b.iter().all(|&x| x == 0));
            let c = b.clone();
            if len > 0 {
                assert_eq!(c.as_ptr() as usize % SECTOR_SIZE, 0);
            }
        }
    }
}
