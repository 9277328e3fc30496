//! Per-block compression: off, lzjb, gzip-1..9, lz4, zstd-1..19.
//!
//! A block is stored compressed only when that saves space (the caller gives the bound
//! and stores the block raw otherwise). The block pointer records the exact compressed
//! length and the original size, so no codec needs a length header of its own.
//! Decompression of corrupt input returns an error, never a panic: input reaches here
//! only after its checksum verified, but the codecs are still treated as untrusted.
//!
//! lzjb is shoal's own implementation of the LZJB format: a copy-map byte before every
//! eight items; an item is a literal byte or a 2-byte match (6-bit length - 3, 10-bit
//! offset into a 1 KiB window), found through a 1024-entry hash of 3-byte sequences.

use std::io::{Read, Write};
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    Off,
    Lzjb,
    Gzip(u8),
    Lz4,
    Zstd(i32),
}

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("{0}: compressed data is corrupt")]
    Corrupt(&'static str),
    #[error("{codec}: produced {got} bytes, expected {want}")]
    WrongSize {
        codec: &'static str,
        got: usize,
        want: usize,
    },
}

impl Compression {
    pub fn code(self) -> u8 {
        match self {
            Compression::Off => 0,
            Compression::Lzjb => 1,
            Compression::Lz4 => 2,
            Compression::Gzip(n) => 10 + n,
            Compression::Zstd(n) => 32 + n as u8,
        }
    }

    pub fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(Compression::Off),
            1 => Some(Compression::Lzjb),
            2 => Some(Compression::Lz4),
            11..=19 => Some(Compression::Gzip(c - 10)),
            33..=51 => Some(Compression::Zstd((c - 32) as i32)),
            _ => None,
        }
    }

    pub fn name(self) -> String {
        match self {
            Compression::Off => "off".into(),
            Compression::Lzjb => "lzjb".into(),
            Compression::Lz4 => "lz4".into(),
            Compression::Gzip(n) => format!("gzip-{n}"),
            Compression::Zstd(n) => format!("zstd-{n}"),
        }
    }
}

impl FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("unknown compression '{s}': use off, lzjb, gzip, gzip-1..gzip-9, lz4, zstd, zstd-1..zstd-19 (on = lz4)")
        };
        Ok(match s {
            "off" => Compression::Off,
            "on" | "lz4" => Compression::Lz4,
            "lzjb" => Compression::Lzjb,
            "gzip" => Compression::Gzip(6),
            "zstd" => Compression::Zstd(3),
            _ => {
                if let Some(n) = s.strip_prefix("gzip-") {
                    match n.parse::<u8>() {
                        Ok(n @ 1..=9) => Compression::Gzip(n),
                        _ => return Err(bad()),
                    }
                } else if let Some(n) = s.strip_prefix("zstd-") {
                    match n.parse::<i32>() {
                        Ok(n @ 1..=19) => Compression::Zstd(n),
                        _ => return Err(bad()),
                    }
                } else {
                    return Err(bad());
                }
            }
        })
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// Compresses `src`; `None` unless the result is strictly shorter than `max_out`.
/// Its CPU time is charged to compression (`cpu.daemon[work]`).
pub fn compress(alg: Compression, src: &[u8], max_out: usize) -> Option<Vec<u8>> {
    if alg == Compression::Off {
        return None;
    }
    analytics::cpu::charge_compression(|| compress_uncharged(alg, src, max_out))
}

fn compress_uncharged(alg: Compression, src: &[u8], max_out: usize) -> Option<Vec<u8>> {
    let out = match alg {
        Compression::Off => return None,
        Compression::Lzjb => lzjb_compress(src, max_out)?,
        Compression::Lz4 => lz4_flex::block::compress(src),
        Compression::Gzip(level) => {
            let mut e =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(level as u32));
            e.write_all(src).ok()?;
            e.finish().ok()?
        }
        Compression::Zstd(level) => zstd::bulk::compress(src, level).ok()?,
    };
    (out.len() < max_out).then_some(out)
}

/// Decompresses exactly `src` into `dst`, whose length is the original size. Its
/// CPU time is charged to compression, except for `off`, which is a copy.
pub fn decompress(alg: Compression, src: &[u8], dst: &mut [u8]) -> Result<(), CodecError> {
    if alg == Compression::Off {
        return decompress_uncharged(alg, src, dst);
    }
    analytics::cpu::charge_compression(|| decompress_uncharged(alg, src, dst))
}

fn decompress_uncharged(alg: Compression, src: &[u8], dst: &mut [u8]) -> Result<(), CodecError> {
    match alg {
        Compression::Off => {
            if src.len() != dst.len() {
                return Err(CodecError::WrongSize {
                    codec: "off",
                    got: src.len(),
                    want: dst.len(),
                });
            }
            dst.copy_from_slice(src);
            Ok(())
        }
        Compression::Lzjb => lzjb_decompress(src, dst),
        Compression::Lz4 => {
            let n = lz4_flex::block::decompress_into(src, dst)
                .map_err(|_| CodecError::Corrupt("lz4"))?;
            if n != dst.len() {
                return Err(CodecError::WrongSize {
                    codec: "lz4",
                    got: n,
                    want: dst.len(),
                });
            }
            Ok(())
        }
        Compression::Gzip(_) => {
            let mut d = flate2::read::ZlibDecoder::new(src);
            let mut filled = 0;
            while filled < dst.len() {
                match d.read(&mut dst[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(_) => return Err(CodecError::Corrupt("gzip")),
                }
            }
            let mut extra = [0u8; 1];
            if filled != dst.len() || !matches!(d.read(&mut extra), Ok(0)) {
                return Err(CodecError::WrongSize {
                    codec: "gzip",
                    got: filled,
                    want: dst.len(),
                });
            }
            Ok(())
        }
        Compression::Zstd(_) => {
            let n = zstd::bulk::decompress_to_buffer(src, dst)
                .map_err(|_| CodecError::Corrupt("zstd"))?;
            if n != dst.len() {
                return Err(CodecError::WrongSize {
                    codec: "zstd",
                    got: n,
                    want: dst.len(),
                });
            }
            Ok(())
        }
    }
}

const MATCH_BITS: u32 = 6;
const MATCH_MIN: usize = 3;
const MATCH_MAX: usize = (1 << MATCH_BITS) + MATCH_MIN - 1;
const OFFSET_MASK: usize = (1 << (16 - MATCH_BITS)) - 1;
const LEMPEL_SIZE: usize = 1024;

fn lzjb_compress(src: &[u8], max_out: usize) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(max_out.min(src.len() + src.len() / 8 + 2));
    let mut table = [usize::MAX; LEMPEL_SIZE];
    let mut copymap_at = 0usize;
    let mut copymask: u8 = 0x80; // forces a new map byte first
    let mut pos = 0;
    while pos < src.len() {
        copymask = copymask.rotate_left(1);
        if copymask == 1 {
            if out.len() + 1 + 2 * 8 >= max_out {
                return None;
            }
            copymap_at = out.len();
            out.push(0);
        }
        if pos + MATCH_MAX > src.len() {
            out.push(src[pos]);
            pos += 1;
            continue;
        }
        let h =
            ((src[pos] as usize) << 16) + ((src[pos + 1] as usize) << 8) + src[pos + 2] as usize;
        let h = (h + (h >> 9) + (h >> 18)) & (LEMPEL_SIZE - 1);
        let cand = table[h];
        table[h] = pos;
        let usable =
            cand != usize::MAX && cand < pos && pos - cand <= OFFSET_MASK && pos - cand > 0;
        if usable && src[cand..cand + MATCH_MIN] == src[pos..pos + MATCH_MIN] {
            let mut mlen = MATCH_MIN;
            while mlen < MATCH_MAX && src[cand + mlen] == src[pos + mlen] {
                mlen += 1;
            }
            let offset = pos - cand;
            out[copymap_at] |= copymask;
            out.push((((mlen - MATCH_MIN) << (8 - MATCH_BITS as usize)) | (offset >> 8)) as u8);
            out.push(offset as u8);
            pos += mlen;
        } else {
            out.push(src[pos]);
            pos += 1;
        }
        if out.len() >= max_out {
            return None;
        }
    }
    Some(out)
}

fn lzjb_decompress(src: &[u8], dst: &mut [u8]) -> Result<(), CodecError> {
    let corrupt = || CodecError::Corrupt("lzjb");
    let mut s = 0;
    let mut d = 0;
    let mut copymap = 0u8;
    let mut copymask: u8 = 0x80;
    while d < dst.len() {
        copymask = copymask.rotate_left(1);
        if copymask == 1 {
            copymap = *src.get(s).ok_or_else(corrupt)?;
            s += 1;
        }
        if copymap & copymask != 0 {
            let b0 = *src.get(s).ok_or_else(corrupt)? as usize;
            let b1 = *src.get(s + 1).ok_or_else(corrupt)? as usize;
            s += 2;
            let mlen = (b0 >> (8 - MATCH_BITS as usize)) + MATCH_MIN;
            let offset = ((b0 << 8) | b1) & OFFSET_MASK;
            if offset == 0 || offset > d || d + mlen > dst.len() {
                return Err(corrupt());
            }
            for i in 0..mlen {
                dst[d + i] = dst[d + i - offset];
            }
            d += mlen;
        } else {
            dst[d] = *src.get(s).ok_or_else(corrupt)?;
            s += 1;
            d += 1;
        }
    }
    if s != src.len() {
        return Err(CodecError::WrongSize {
            codec: "lzjb",
            got: d,
            want: dst.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all() -> Vec<Compression> {
        let mut v = vec![Compression::Off, Compression::Lzjb, Compression::Lz4];
        v.extend((1..=9).map(Compression::Gzip));
        v.extend([1, 3, 19].map(Compression::Zstd));
        v
    }

    fn text(n: usize) -> Vec<u8> {
        b"shoal pools disks into mirrors and raidz; every block is checksummed. "
            .iter()
            .cycle()
            .take(n)
            .copied()
            .collect()
    }

    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn round_trips_and_refuses_incompressible() {
        for alg in all() {
            for data in [
                text(128 * 1024),
                vec![0u8; 4096],
                text(1),
                text(3 * 1024 * 1024 / 3 + 7),
            ] {
                match compress(alg, &data, data.len()) {
                    Some(c) => {
                        assert!(c.len() < data.len());
                        let mut back = vec![0u8; data.len()];
                        decompress(alg, &c, &mut back).unwrap();
                        assert_eq!(back, data, "{alg}");
                    }
                    None => assert!(
                        alg == Compression::Off || data.len() < 16,
                        "{alg} did not compress text"
                    ),
                }
            }
            assert!(
                compress(alg, &noise(128 * 1024, 5), 128 * 1024).is_none(),
                "{alg} shrank noise"
            );
        }
    }

    #[test]
    fn lzjb_compresses_repetitive_text_well() {
        let data = text(128 * 1024);
        let c = compress(Compression::Lzjb, &data, data.len()).unwrap();
        assert!(
            c.len() < data.len() / 4,
            "lzjb ratio {}",
            data.len() as f64 / c.len() as f64
        );
    }

    #[test]
    fn names_and_codes_round_trip() {
        for alg in all() {
            assert_eq!(alg.name().parse::<Compression>().unwrap(), alg);
            assert_eq!(Compression::from_code(alg.code()), Some(alg));
        }
        assert_eq!("gzip".parse::<Compression>().unwrap(), Compression::Gzip(6));
        assert_eq!("on".parse::<Compression>().unwrap(), Compression::Lz4);
        for bad in ["gzip-0", "gzip-10", "zstd-20", "lzma", ""] {
            assert!(bad.parse::<Compression>().is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn any_data_round_trips(data in proptest::collection::vec(0u8..4, 0..20_000), pick in 0usize..15) {
            let alg = all()[pick];
            if let Some(c) = compress(alg, &data, data.len() + 64) {
                let mut back = vec![0u8; data.len()];
                decompress(alg, &c, &mut back).unwrap();
                prop_assert_eq!(back, data);
            }
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..4000), len in 0usize..10_000, pick in 0usize..15) {
            let mut out = vec![0u8; len];
            let _ = decompress(all()[pick], &data, &mut out);
        }
    }
}
