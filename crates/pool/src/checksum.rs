//! Block checksums: fletcher4 (the default, cheap enough to run on every read) and
//! blake3 (cryptographic strength).
//!
//! fletcher4: four wrapping u64 accumulators over the data as little-endian u32 words
//! (a += w; b += a; c += b; d += c); the checksum is a, b, c, d as little-endian u64,
//! 32 bytes. A tail shorter than 4 bytes is zero-padded (blocks are sector multiples,
//! so it only matters for direct callers). blake3: the 32-byte hash.
//!
//! Speed: fletcher4 takes four words per step using the expanded four-step update of
//! (a, b, c, d), whose terms are independent multiply-adds instead of a serial chain of
//! sixteen additions; a property test checks it against the scalar definition.

use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChecksumKind {
    Fletcher4 = 1,
    Blake3 = 2,
}

impl ChecksumKind {
    pub fn code(self) -> u8 {
        self as u8
    }
    pub fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(ChecksumKind::Fletcher4),
            2 => Some(ChecksumKind::Blake3),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            ChecksumKind::Fletcher4 => "fletcher4",
            ChecksumKind::Blake3 => "blake3",
        }
    }
}

impl FromStr for ChecksumKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fletcher4" | "on" => Ok(ChecksumKind::Fletcher4),
            "blake3" => Ok(ChecksumKind::Blake3),
            _ => Err(format!("unknown checksum '{s}': use fletcher4 or blake3")),
        }
    }
}

impl std::fmt::Display for ChecksumKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Checksum(pub [u8; 32]);

pub fn compute(kind: ChecksumKind, data: &[u8]) -> Checksum {
    match kind {
        ChecksumKind::Fletcher4 => fletcher4(data),
        ChecksumKind::Blake3 => Checksum(*blake3::hash(data).as_bytes()),
    }
}

fn pack(a: u64, b: u64, c: u64, d: u64) -> Checksum {
    let mut out = [0u8; 32];
    out[0..8].copy_from_slice(&a.to_le_bytes());
    out[8..16].copy_from_slice(&b.to_le_bytes());
    out[16..24].copy_from_slice(&c.to_le_bytes());
    out[24..32].copy_from_slice(&d.to_le_bytes());
    Checksum(out)
}

fn word(chunk: &[u8]) -> u64 {
    let mut w = [0u8; 4];
    w[..chunk.len()].copy_from_slice(chunk);
    u32::from_le_bytes(w) as u64
}

/// The definition, one word at a time.
pub fn fletcher4_scalar(data: &[u8]) -> Checksum {
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    for chunk in data.chunks(4) {
        a = a.wrapping_add(word(chunk));
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    pack(a, b, c, d)
}

/// Processes 4 words per step with the exact 4-step update of (a, b, c, d), which has
/// a shorter dependency chain than 4 single steps.
pub fn fletcher4(data: &[u8]) -> Checksum {
    let body = data.len() / 16 * 16;
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    for g in data[..body].chunks_exact(16) {
        let w0 = u32::from_le_bytes(g[0..4].try_into().unwrap()) as u64;
        let w1 = u32::from_le_bytes(g[4..8].try_into().unwrap()) as u64;
        let w2 = u32::from_le_bytes(g[8..12].try_into().unwrap()) as u64;
        let w3 = u32::from_le_bytes(g[12..16].try_into().unwrap()) as u64;
        // Four scalar steps expanded:
        // a4 = a + w0+w1+w2+w3
        // b4 = b + 4a + 4w0 + 3w1 + 2w2 + w3
        // c4 = c + 4b + 10a + 10w0 + 6w1 + 3w2 + w3
        // d4 = d + 4c + 10b + 20a + 20w0 + 10w1 + 4w2 + w3
        let nd = d
            .wrapping_add(c.wrapping_mul(4))
            .wrapping_add(b.wrapping_mul(10))
            .wrapping_add(a.wrapping_mul(20))
            .wrapping_add(w0.wrapping_mul(20))
            .wrapping_add(w1.wrapping_mul(10))
            .wrapping_add(w2.wrapping_mul(4))
            .wrapping_add(w3);
        let nc = c
            .wrapping_add(b.wrapping_mul(4))
            .wrapping_add(a.wrapping_mul(10))
            .wrapping_add(w0.wrapping_mul(10))
            .wrapping_add(w1.wrapping_mul(6))
            .wrapping_add(w2.wrapping_mul(3))
            .wrapping_add(w3);
        let nb = b
            .wrapping_add(a.wrapping_mul(4))
            .wrapping_add(w0.wrapping_mul(4))
            .wrapping_add(w1.wrapping_mul(3))
            .wrapping_add(w2.wrapping_mul(2))
            .wrapping_add(w3);
        let na = a
            .wrapping_add(w0)
            .wrapping_add(w1)
            .wrapping_add(w2)
            .wrapping_add(w3);
        a = na;
        b = nb;
        c = nc;
        d = nd;
    }
    for chunk in data[body..].chunks(4) {
        a = a.wrapping_add(word(chunk));
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    pack(a, b, c, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_answers() {
        // Words 1, 2: a = 3, b = 1 + 3 = 4, c = 1 + 4 = 5, d = 1 + 5 = 6.
        let data = [1u8, 0, 0, 0, 2, 0, 0, 0];
        assert_eq!(fletcher4(&data), pack(3, 4, 5, 6));
        assert_eq!(fletcher4_scalar(&data), pack(3, 4, 5, 6));
        assert_eq!(
            compute(ChecksumKind::Blake3, b"abc").0,
            *blake3::hash(b"abc").as_bytes()
        );
        assert_ne!(fletcher4(&[0u8; 4096]), fletcher4(&[1u8; 4096]));
    }

    proptest! {
        #[test]
        fn grouped_equals_scalar(data in proptest::collection::vec(any::<u8>(), 0..5000)) {
            prop_assert_eq!(fletcher4(&data), fletcher4_scalar(&data));
        }
    }

    #[test]
    fn names_round_trip() {
        for k in [ChecksumKind::Fletcher4, ChecksumKind::Blake3] {
            assert_eq!(k.name().parse::<ChecksumKind>().unwrap(), k);
            assert_eq!(ChecksumKind::from_code(k.code()), Some(k));
        }
        assert!("md5".parse::<ChecksumKind>().is_err());
    }
}
