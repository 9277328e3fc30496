//! XDR (RFC 4506): big-endian 4-byte units, opaque data padded to a multiple of 4.
//!
//! Our own codec rather than a crate, because it sits on the hot path: decoding
//! borrows from the record buffer (a WRITE's payload is a slice of the bytes read from
//! the socket, never copied again), and encoding appends to one growable buffer that
//! a reply's data can be sent beside with a vectored write.
//!
//! Invariants: a decoder never reads past its buffer, and every variable-length item
//! is checked against both the remaining bytes and an explicit maximum before any
//! allocation, so a hostile length costs nothing.

use std::fmt;

/// A decoding failure: the call is answered GARBAGE_ARGS (or the record dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdrError(pub &'static str);

impl fmt::Display for XdrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad XDR: {}", self.0)
    }
}

impl std::error::Error for XdrError {}

pub type XdrResult<T> = Result<T, XdrError>;

fn pad(len: usize) -> usize {
    (4 - (len & 3)) & 3
}

/// Reads XDR items from a borrowed buffer.
#[derive(Debug, Clone)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Decoder<'a> {
        Decoder { buf, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The bytes not yet decoded.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    fn take(&mut self, n: usize) -> XdrResult<&'a [u8]> {
        if n > self.remaining() {
            return Err(XdrError("truncated"));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn u32(&mut self) -> XdrResult<u32> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }

    pub fn i32(&mut self) -> XdrResult<i32> {
        Ok(self.u32()? as i32)
    }

    pub fn u64(&mut self) -> XdrResult<u64> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().unwrap()))
    }

    pub fn bool(&mut self) -> XdrResult<bool> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(XdrError("boolean not 0 or 1")),
        }
    }

    /// Fixed-length opaque data (`opaque x[n]`).
    pub fn fixed(&mut self, n: usize) -> XdrResult<&'a [u8]> {
        let s = self.take(n)?;
        self.take(pad(n))?;
        Ok(s)
    }

    /// Variable-length opaque data of at most `max` bytes (`opaque x<max>`).
    pub fn opaque(&mut self, max: usize) -> XdrResult<&'a [u8]> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(XdrError("opaque longer than its limit"));
        }
        if n > self.remaining() {
            return Err(XdrError("opaque longer than the record"));
        }
        self.fixed(n)
    }

    /// An optional item (`*x`): the boolean discriminant.
    pub fn optional<T>(
        &mut self,
        f: impl FnOnce(&mut Decoder<'a>) -> XdrResult<T>,
    ) -> XdrResult<Option<T>> {
        if self.bool()? {
            Ok(Some(f(self)?))
        } else {
            Ok(None)
        }
    }

    /// The call is fully decoded: nothing may follow (trailing bytes mean the
    /// client and server disagree on the layout).
    pub fn finish(&self) -> XdrResult<()> {
        if self.remaining() != 0 {
            return Err(XdrError("trailing bytes"));
        }
        Ok(())
    }
}

/// Appends XDR items to a buffer.
#[derive(Debug, Default, Clone)]
pub struct Encoder {
    pub buf: Vec<u8>,
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder {
            buf: Vec::with_capacity(256),
        }
    }

    pub fn with_buffer(buf: Vec<u8>) -> Encoder {
        Encoder { buf }
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.u32(v as u32)
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u32(v as u32)
    }

    pub fn fixed(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(&[0u8; 3][..pad(b.len())]);
        self
    }

    pub fn opaque(&mut self, b: &[u8]) -> &mut Self {
        assert!(b.len() <= u32::MAX as usize);
        self.u32(b.len() as u32);
        self.fixed(b)
    }

    /// The padding that must follow `len` bytes of opaque data sent separately.
    pub fn padding(len: usize) -> &'static [u8] {
        &[0u8; 3][..pad(len)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn opaque_is_padded_and_bounded() {
        let mut e = Encoder::new();
        e.opaque(b"abcde").u32(7);
        assert_eq!(e.buf.len(), 4 + 8 + 4);
        let mut d = Decoder::new(&e.buf);
        assert_eq!(d.opaque(5).unwrap(), b"abcde");
        assert_eq!(d.u32().unwrap(), 7);
        d.finish().unwrap();
        let mut d = Decoder::new(&e.buf);
        assert_eq!(d.opaque(4), Err(XdrError("opaque longer than its limit")));
    }

    #[test]
    fn hostile_lengths_are_refused_before_allocation() {
        let mut e = Encoder::new();
        e.u32(0xffff_fff0);
        let mut d = Decoder::new(&e.buf);
        assert!(d.opaque(usize::MAX).is_err());
        let mut d = Decoder::new(&[0, 0, 0, 2]);
        assert_eq!(d.bool(), Err(XdrError("boolean not 0 or 1")));
        let mut d = Decoder::new(&[0, 0]);
        assert!(d.u32().is_err());
    }

    proptest! {
        #[test]
        fn round_trip(a: u32, b: u64, c in proptest::collection::vec(any::<u8>(), 0..100), f: bool) {
            let mut e = Encoder::new();
            e.u32(a).u64(b).opaque(&c).bool(f);
            prop_assert_eq!(e.buf.len() % 4, 0);
            let mut d = Decoder::new(&e.buf);
            prop_assert_eq!(d.u32().unwrap(), a);
            prop_assert_eq!(d.u64().unwrap(), b);
            prop_assert_eq!(d.opaque(100).unwrap(), &c[..]);
            prop_assert_eq!(d.bool().unwrap(), f);
            prop_assert!(d.finish().is_ok());
        }

        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut d = Decoder::new(&bytes);
            let _ = d.u32();
            let _ = d.opaque(1 << 20);
            let _ = d.u64();
            let _ = d.optional(|d| d.bool());
        }
    }
}
