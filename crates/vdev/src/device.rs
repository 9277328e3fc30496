//! The one device trait all pool I/O goes through, so a simulated device can stand in
//! for a real one in crash, fault and slow-disk tests.
//!
//! Invariants: every offset and length is a multiple of `SECTOR_SIZE` and inside the
//! device (checked by `check_io`); `flush` is a barrier: when it returns Ok, every
//! write that returned Ok before it was called is durable.

use std::io;

/// The pool's unit of I/O and allocation (ashift 12).
pub const SECTOR_SIZE: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// O_DIRECT: the OS page cache is bypassed.
    Direct,
    /// The file system refused O_DIRECT (tmpfs): buffered I/O plus fdatasync.
    Buffered,
    /// The simulated in-memory device.
    Memory,
}

impl IoMode {
    pub fn name(self) -> &'static str {
        match self {
            IoMode::Direct => "direct",
            IoMode::Buffered => "buffered",
            IoMode::Memory => "memory",
        }
    }
}

pub trait Device: Send + Sync + std::fmt::Debug {
    fn size_bytes(&self) -> u64;
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// A real barrier: when it returns Ok, every write that returned Ok before the call is durable.
    fn flush(&self) -> io::Result<()>;
    fn io_mode(&self) -> IoMode;
    fn describe(&self) -> String;

    /// Whether the device has a head that seeks (a spinning disk, or a model of one):
    /// then a mirror read prefers the side whose head is near (`Leaf::read_cost`).
    fn rotational(&self) -> bool {
        false
    }

    /// Prepares `[offset, offset + len)` for many small writes that are each flushed
    /// (the intent log's ring): a sparse regular file gets the range's holes written
    /// with zeros and flushed, so the file system need not allocate and journal blocks
    /// under every later write and flush. What the range reads back never changes, so
    /// it is safe over live data, provided nothing writes the range meanwhile. Other
    /// devices do nothing.
    fn preallocate(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Ok(())
    }

    /// Writes `bufs` back to back from `offset`, as one I/O where the device can.
    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        write_joined(self, offset, bufs)
    }

    /// Reads back-to-back bytes from `offset` into `bufs` in order, as one I/O where
    /// the device can (a leaf read that feeds several blocks lands in their buffers
    /// without a staging copy).
    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> io::Result<()> {
        read_joined(self, offset, bufs)
    }
}

/// Writes `bufs` joined in a staging buffer as one `write_at`: vectored writes for
/// devices (or buffers) that cannot do better.
pub(crate) fn write_joined<D: Device + ?Sized>(
    dev: &D,
    offset: u64,
    bufs: &[&[u8]],
) -> io::Result<()> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut joined = crate::aligned::AlignedBuf::for_overwrite(total);
    let mut pos = 0;
    for b in bufs {
        joined[pos..pos + b.len()].copy_from_slice(b);
        pos += b.len();
    }
    dev.write_at(offset, &joined)
}

/// Reads `bufs`' total length from `offset` as one `read_at` into a staging buffer
/// and scatters it: vectored reads for devices (or buffers) that cannot do better.
pub(crate) fn read_joined<D: Device + ?Sized>(
    dev: &D,
    offset: u64,
    bufs: &mut [&mut [u8]],
) -> io::Result<()> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut joined = crate::aligned::AlignedBuf::for_overwrite(total);
    dev.read_at(offset, &mut joined)?;
    let mut pos = 0;
    for b in bufs.iter_mut() {
        let len = b.len();
        b.copy_from_slice(&joined[pos..pos + len]);
        pos += len;
    }
    Ok(())
}

/// Alignment and range check shared by every device.
pub fn check_io(offset: u64, len: usize, size: u64) -> io::Result<()> {
    let s = SECTOR_SIZE as u64;
    if !offset.is_multiple_of(s) || !(len as u64).is_multiple_of(s) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("I/O at offset {offset} length {len} is not aligned to {SECTOR_SIZE} bytes"),
        ));
    }
    if offset.checked_add(len as u64).is_none_or(|end| end > size) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("I/O at offset {offset} length {len} is past the device end ({size} bytes)"),
        ));
    }
    Ok(())
}
