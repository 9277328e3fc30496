//! A buffered reader for a stream arriving through a pipe or a socket that lets big
//! reads bypass its buffer: record heads (tens of bytes) come from the buffer, while a
//! read of at least `DIRECT_MIN` bytes that finds the buffer empty goes from the
//! source straight into the caller's memory. A data record's payload so lands in the
//! block buffer the pool keeps (`Payload`), copied once by the kernel and never by
//! shoal.
//!
//! A direct read is one vectored read into the caller's memory and then the
//! (empty) buffer, so the head after a payload comes with it.
//!
//! std's `BufReader` bypasses only reads at least as long as its whole buffer. With a
//! buffer big enough to make heads cheap and payloads of 128 KiB, every payload was
//! copied from the buffer: that copy and the pool's own copy of the payload were
//! 15% of the CPU of `shoal send | shoal receive` (perf, 2 GiB on memory-backed
//! devices). The buffer here is small (`BUFFER_BYTES`) on purpose: a refill for a
//! head takes the start of the payload behind it with it, and that part is copied.
//!
//! Several streams may follow each other on one input (a replicated send): the
//! reader never takes more from the source than the buffer holds, and what it holds
//! is the next stream's start for the next receive.

use std::io::{BufRead, IoSliceMut, Read};

/// Reads at least this long skip the buffer when it is empty.
pub const DIRECT_MIN: usize = 16 << 10;
/// The buffer for heads and small records.
pub const BUFFER_BYTES: usize = 8 << 10;

pub struct StreamInput<R> {
    inner: R,
    buf: Box<[u8]>,
    /// `buf[pos..filled]` is read from the source and not yet handed out.
    pos: usize,
    filled: usize,
}

impl<R: Read> StreamInput<R> {
    pub fn new(inner: R) -> StreamInput<R> {
        StreamInput {
            inner,
            buf: vec![0u8; BUFFER_BYTES].into_boxed_slice(),
            pos: 0,
            filled: 0,
        }
    }
}

impl<R: Read> Read for StreamInput<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.filled && out.len() >= DIRECT_MIN {
            // One vectored read fills the caller's memory and then the buffer with
            // what follows (the next record's head): one system call per payload.
            let want = out.len();
            let n = loop {
                let mut slices = [IoSliceMut::new(out), IoSliceMut::new(&mut self.buf)];
                match self.inner.read_vectored(&mut slices) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    r => break r?,
                }
            };
            self.pos = 0;
            self.filled = n.saturating_sub(want);
            return Ok(n.min(want));
        }
        let held = self.fill_buf()?;
        let n = held.len().min(out.len());
        out[..n].copy_from_slice(&held[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: Read> BufRead for StreamInput<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.pos == self.filled {
            let n = loop {
                match self.inner.read(&mut self.buf) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    r => break r?,
                }
            };
            self.pos = 0;
            self.filled = n;
        }
        Ok(&self.buf[self.pos..self.filled])
    }

    fn consume(&mut self, n: usize) {
        debug_assert!(self.pos + n <= self.filled, "consumed more than held");
        self.pos = (self.pos + n).min(self.filled);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that hands out at most `step` bytes per read and counts the bytes
    /// read into buffers of at least `DIRECT_MIN`.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
        direct_bytes: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = out.len().min(self.step).min(self.data.len() - self.at);
            out[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            if out.len() >= DIRECT_MIN {
                self.direct_bytes += n;
            }
            Ok(n)
        }
    }

    #[test]
    fn mixed_reads_return_the_bytes_in_order_and_big_ones_go_direct() {
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for step in [1, 100, 5000, 70_000, 1 << 20] {
            let mut input = StreamInput::new(Trickle {
                data: data.clone(),
                at: 0,
                step,
                direct_bytes: 0,
            });
            let mut got = Vec::new();
            let sizes = [26usize, 131_072, 9, 4000, 65_536, 1, 20_000];
            'outer: loop {
                for &size in &sizes {
                    let mut b = vec![0u8; size];
                    let want = size.min(data.len() - got.len());
                    if want == 0 {
                        break 'outer;
                    }
                    input.read_exact(&mut b[..want]).unwrap();
                    got.extend_from_slice(&b[..want]);
                }
            }
            assert_eq!(got, data, "step {step}");
            assert_eq!(
                input.fill_buf().unwrap(),
                &[] as &[u8],
                "the end stays the end"
            );
            // Payload reads mostly bypass the buffer (all but what a head's refill
            // took along).
            let direct = input.inner.direct_bytes;
            assert!(
                direct > data.len() / 2,
                "step {step}: only {direct} bytes went direct"
            );
        }
    }

    #[test]
    fn a_direct_read_brings_the_next_head_into_the_buffer() {
        // A Cursor fills every slice of a vectored read.
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        let mut input = StreamInput::new(std::io::Cursor::new(data.clone()));
        let mut got = Vec::new();
        for size in [26usize, 131_072, 26, 131_072, 26, 37_778] {
            let mut b = vec![0u8; size];
            input.read_exact(&mut b).unwrap();
            got.extend_from_slice(&b);
        }
        assert_eq!(got, data);
        let mut end = [0u8; 1];
        assert_eq!(input.read(&mut end).unwrap(), 0);
    }

    #[test]
    fn never_reads_past_what_its_buffer_holds() {
        let mut input = StreamInput::new(std::io::Cursor::new(vec![5u8; 100_000]));
        let mut head = [0u8; 10];
        input.read_exact(&mut head).unwrap();
        assert_eq!(input.inner.position() as usize, BUFFER_BYTES);
    }
}
