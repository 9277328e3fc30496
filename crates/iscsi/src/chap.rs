//! CHAP (RFC 1994, as RFC 7143 12.1.3 uses it) with MD5: the target challenges the
//! initiator, and with mutual CHAP the initiator challenges the target back. Values
//! travel as hex (`0x...`) or base64 (`0b...`); a challenge the initiator sends that
//! equals the target's own is refused (a reflection attack).

use md5::{Digest, Md5};

/// A CHAP user and secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub user: String,
    pub secret: String,
}

/// The CHAP algorithm code for MD5.
pub const MD5: &str = "5";
pub const CHALLENGE_LEN: usize = 16;

/// The response to challenge `challenge` with identifier `id`: MD5(id, secret,
/// challenge).
pub fn response(id: u8, secret: &[u8], challenge: &[u8]) -> [u8; 16] {
    let mut h = Md5::new();
    h.update([id]);
    h.update(secret);
    h.update(challenge);
    h.finalize().into()
}

pub fn to_hex(bytes: &[u8]) -> String {
    let mut s = String::from("0x");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Decodes a CHAP binary value: `0x` hex or `0b` base64.
pub fn decode(value: &str) -> Option<Vec<u8>> {
    if let Some(hex) = value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        // ASCII first: slicing a multi-byte character in two would panic (found by the
        // iscsi_login_keys fuzz target).
        if hex.is_empty() || hex.len() % 2 != 0 || !hex.is_ascii() {
            return None;
        }
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
            .collect()
    } else if let Some(b64) = value
        .strip_prefix("0b")
        .or_else(|| value.strip_prefix("0B"))
    {
        base64(b64)
    } else {
        None
    }
}

fn base64(text: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c)? << (18 - 6 * i);
        }
        let n = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + n]);
    }
    Some(out)
}

/// Fresh random bytes for a challenge or an identifier, from the kernel.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    use std::io::Read;
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("reading /dev/urandom");
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_and_encodings() {
        // RFC 1994's construction, checked against a known MD5: MD5 of the empty
        // string with id 0, empty secret and challenge is MD5("\0").
        assert_eq!(
            to_hex(&response(0, b"", b"")),
            "0x93b885adfe0da089cdf634904fd59f71"
        );
        assert_eq!(decode("0x0aff"), Some(vec![0x0A, 0xFF]));
        assert_eq!(decode("0b/w=="), Some(vec![0xFF]));
        assert_eq!(decode("0bAQID"), Some(vec![1, 2, 3]));
        assert_eq!(decode("0x0"), None);
        assert_eq!(decode("12"), None);
        assert_eq!(decode("0xzz"), None);
        // A two-byte character across a digit pair (the fuzzer's find).
        assert_eq!(decode("0x9\u{e9}9"), None);
        let a: [u8; 16] = random_bytes();
        let b: [u8; 16] = random_bytes();
        assert_ne!(a, b);
    }
}
