//! Leaf devices backed by a regular file or a block device.
//!
//! O_DIRECT is tried first so the ARC is the only cache and "read from disk" means it
//! (DESIGN.md invariant 6). File systems that refuse O_DIRECT (tmpfs answers EINVAL)
//! get buffered I/O instead, with fdatasync as the flush; `io_mode` tells which, and
//! pool status shows it. With O_DIRECT, a caller's buffer that is not sector-aligned is
//! bounced through an `AlignedBuf`, and a read of up to 4 MiB whose buffers could
//! span more physically contiguous runs than the disk takes in one request
//! (`queue/max_segments`), or that is into many small pieces (raidz columns), goes
//! through a huge-page stage (`staging`) so the disk gets it whole, in one segment.
//!
//! A block device is opened exclusively (`O_EXCL`, which Linux gives block devices
//! without `O_CREAT` the meaning "claim it"): a disk that is mounted, holds a swap
//! area or a device-mapper target, or belongs to another running pool is refused with
//! `ResourceBusy` instead of being overwritten. The claim lasts while the device is
//! open and ends with the process. A device this process already has open (an
//! exported pool's handle that something still holds, a fault-injection wrapper) is
//! opened again without a claim: the claim is ours already, and the pool labels keep
//! two live pools of one process apart. `open_shared` is for reading labels only:
//! read-only, no claim.

use crate::aligned::AlignedBuf;
use crate::device::{check_io, Device, IoMode, SECTOR_SIZE};
use crate::huge_slab;
use crate::label::MIN_DEVICE_BYTES;
use crate::staging::{self, STAGE_BYTES};
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct FileDevice {
    file: File,
    path: PathBuf,
    size: u64,
    mode: IoMode,
    /// What the kernel says of the disk under it (`queue/rotational`), read at open.
    rotational: bool,
    /// Physically contiguous runs the disk under it takes in one request
    /// (`queue/max_segments`), read at open.
    max_segments: usize,
}

impl FileDevice {
    /// Opens an existing file or block device read-write, bypassing the page cache
    /// where the file system allows it.
    /// A block device is claimed exclusively (see the module doc).
    pub fn open(path: impl AsRef<Path>) -> io::Result<FileDevice> {
        Self::open_mode(path.as_ref(), true, true)
    }

    /// Opens read-only and buffered, without claiming a block device: for reading the
    /// labels of devices that may be in use (a listing of the host's disks), never
    /// for a pool (writes fail).
    pub fn open_shared(path: impl AsRef<Path>) -> io::Result<FileDevice> {
        Self::open_mode(path.as_ref(), false, false)
    }

    /// The holes of `[start, end)`, as the file system reports them.
    fn holes(&self, start: u64, end: u64) -> io::Result<Vec<std::ops::Range<u64>>> {
        let mut holes = Vec::new();
        let mut at = start;
        while at < end {
            let hole = self.seek_hole(at)?;
            if hole >= end {
                break;
            }
            let data = self.seek_data(hole)?.min(end);
            if data <= hole {
                break; // answers that contradict each other: trust neither
            }
            holes.push(hole..data);
            at = data;
        }
        Ok(holes)
    }

    /// Bytes an unprivileged writer may still allocate on the file's file system.
    fn free_bytes(&self) -> io::Result<u64> {
        // SAFETY: statvfs is a plain C struct of integers, for which all-zero bytes
        // are a valid value.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is valid and writable for the whole call; the fd is ours and
        // open.
        if unsafe { libc::fstatvfs(self.file.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st.f_bavail.saturating_mul(st.f_frsize))
    }

    /// The first hole at or after `at` (the file's end when it has none there, which
    /// is also the answer of file systems that do not track holes).
    fn seek_hole(&self, at: u64) -> io::Result<u64> {
        self.seek_whence(at, libc::SEEK_HOLE)
            .map(|pos| pos.unwrap_or(self.size))
    }

    /// The first data at or after `at`, or the file's end when only a hole follows.
    fn seek_data(&self, at: u64) -> io::Result<u64> {
        self.seek_whence(at, libc::SEEK_DATA)
            .map(|pos| pos.unwrap_or(self.size))
    }

    /// `lseek` with `whence`; None for ENXIO (nothing of that kind from `at` on).
    fn seek_whence(&self, at: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
        let at = libc::off_t::try_from(at)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        // SAFETY: lseek takes no pointers; the fd is ours and open for the call. It moves
        // the file's shared offset, which nothing here uses: all I/O is positional.
        let pos = unsafe { libc::lseek(self.file.as_raw_fd(), at, whence) };
        if pos >= 0 {
            return Ok(Some(pos as u64));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            _ => Err(e),
        }
    }

    /// Opens with buffered I/O (page cache) and fdatasync as the flush.
    /// A block device is claimed exclusively, as by `open`.
    pub fn open_buffered(path: impl AsRef<Path>) -> io::Result<FileDevice> {
        Self::open_mode(path.as_ref(), false, true)
    }

    /// `for_pool`: read-write, claiming a block device; else read-only, no claim.
    fn open_mode(path: &Path, try_direct: bool, for_pool: bool) -> io::Result<FileDevice> {
        use std::os::unix::fs::FileTypeExt;
        let claim = for_pool && std::fs::metadata(path)?.file_type().is_block_device();
        let open_with = |direct: bool, claim: bool| {
            let mut flags = 0;
            if direct {
                flags |= libc::O_DIRECT;
            }
            if claim {
                flags |= libc::O_EXCL;
            }
            OpenOptions::new()
                .read(true)
                .write(for_pool)
                .custom_flags(flags)
                .open(path)
        };
        let open = |direct: bool| match open_with(direct, claim) {
            Err(e) if claim && e.raw_os_error() == Some(libc::EBUSY) => {
                if held_by_this_process(path) {
                    return open_with(direct, false);
                }
                Err(io::Error::new(
                    io::ErrorKind::ResourceBusy,
                    format!(
                        "{} is in use (mounted, a swap area, or held by another pool \
                         or program); refusing to share it",
                        path.display()
                    ),
                ))
            }
            r => r,
        };
        let direct = if try_direct {
            open(true)
        } else {
            Err(io::Error::from_raw_os_error(libc::EINVAL))
        };
        let (mut file, mut mode) = match direct {
            Ok(f) => (f, IoMode::Direct),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(false)?, IoMode::Buffered),
            Err(e) => return Err(e),
        };
        let end = file.seek(SeekFrom::End(0))?;
        let size = end / SECTOR_SIZE as u64 * SECTOR_SIZE as u64;
        if mode == IoMode::Direct && size >= SECTOR_SIZE as u64 {
            // Some file systems accept the flag at open and refuse the I/O.
            let mut probe = AlignedBuf::zeroed(SECTOR_SIZE);
            if let Err(e) = file.read_exact_at(&mut probe, 0) {
                if e.raw_os_error() == Some(libc::EINVAL) {
                    // Closed first: a claimed block device cannot be opened twice.
                    drop(file);
                    file = open(false)?;
                    mode = IoMode::Buffered;
                } else {
                    return Err(e);
                }
            }
        }
        let rotational = backing_queue_attribute(&file, "rotational").as_deref() == Some("1");
        let max_segments = backing_queue_attribute(&file, "max_segments")
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_MAX_SEGMENTS);
        Ok(FileDevice {
            file,
            path: path.to_path_buf(),
            size,
            mode,
            rotational,
            max_segments,
        })
    }

    /// Creates a new sparse file of `size_bytes` and opens it.
    pub fn create(path: impl AsRef<Path>, size_bytes: u64) -> io::Result<FileDevice> {
        let path = path.as_ref();
        if !size_bytes.is_multiple_of(SECTOR_SIZE as u64) || size_bytes < MIN_DEVICE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "device size {size_bytes} must be a multiple of {SECTOR_SIZE} and at least {MIN_DEVICE_BYTES} bytes"
                ),
            ));
        }
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        f.set_len(size_bytes)?;
        f.sync_all()?;
        drop(f);
        FileDevice::open(path)
    }

    fn aligned(buf: &[u8]) -> bool {
        (buf.as_ptr() as usize).is_multiple_of(SECTOR_SIZE)
    }
}

impl Device for FileDevice {
    fn size_bytes(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_io(offset, buf.len(), self.size)?;
        if self.mode == IoMode::Direct && !Self::aligned(buf) {
            let mut bounce = AlignedBuf::zeroed(buf.len());
            self.file.read_exact_at(&mut bounce, offset)?;
            buf.copy_from_slice(&bounce);
            return Ok(());
        }
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_io(offset, buf.len(), self.size)?;
        if self.mode == IoMode::Direct && !Self::aligned(buf) {
            let bounce = AlignedBuf::from_slice(buf);
            return self.file.write_all_at(&bounce, offset);
        }
        self.file.write_all_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// A sparse file's holes cost a block allocation and a journal commit under the
    /// next flush of each write into them (measured on ext4: an 8K intent log commit
    /// took 202 us into holes, 113-129 us over written blocks), so the holes of the
    /// range are written with zeros once. Only holes, and of those only what reads
    /// back as zeros (so a file system that reported a hole over data loses nothing):
    /// the file's contents never change. Skipped when the holes would take more than
    /// half of the host file system's free space: it is an optimization, and a full
    /// host would fail the pool's own writes. Block devices, and file systems that
    /// report no holes, need nothing.
    fn preallocate(&self, offset: u64, len: u64) -> io::Result<()> {
        if !self.file.metadata()?.file_type().is_file() || len == 0 {
            return Ok(());
        }
        let len_usize = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "range too long"))?;
        check_io(offset, len_usize, self.size)?;
        let holes = self.holes(offset, offset + len)?;
        let hole_bytes: u64 = holes.iter().map(|h| h.end - h.start).sum();
        if hole_bytes == 0 || hole_bytes > self.free_bytes()? / 2 {
            return Ok(());
        }
        const CHUNK: u64 = 1 << 20;
        let zeros = AlignedBuf::zeroed(CHUNK as usize);
        let mut seen = AlignedBuf::zeroed(CHUNK as usize);
        for hole in holes {
            let mut pos = hole.start;
            while pos < hole.end {
                let n = CHUNK.min(hole.end - pos) as usize;
                self.file.read_exact_at(&mut seen[..n], pos)?;
                if seen[..n].iter().all(|&b| b == 0) {
                    self.file.write_all_at(&zeros[..n], pos)?;
                }
                pos += n as u64;
            }
        }
        self.file.sync_data()
    }

    fn rotational(&self) -> bool {
        self.rotational
    }

    fn io_mode(&self) -> IoMode {
        self.mode
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> io::Result<()> {
        self.preadv_all(offset, bufs)
    }

    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_io(offset, total, self.size)?;
        if !vectored_ok(bufs.iter().map(|b| (b.as_ptr() as usize, b.len()))) {
            return crate::device::write_joined(self, offset, bufs);
        }
        let iov: Vec<libc::iovec> = bufs
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: every iovec points into a slice borrowed for the whole call, with that
        // slice's exact length; pwritev only reads from them; the fd is ours and open.
        let n = unsafe {
            libc::pwritev(
                self.file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                offset as libc::off_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        finish_short(
            n as usize,
            offset,
            bufs.iter().map(|b| b.len()),
            |i, at, from| self.file.write_all_at(&bufs[i][from..], at + from as u64),
        )
    }
}

impl FileDevice {
    /// `preadv` into `bufs`; `Device::read_vectored_at` for file devices.
    fn preadv_all(&self, offset: u64, bufs: &mut [&mut [u8]]) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_io(offset, total, self.size)?;
        if self.mode == IoMode::Direct
            && total <= STAGE_BYTES
            && total.is_multiple_of(SECTOR_SIZE)
            && (many_small_pieces(bufs.len(), total) || !self.fits_in_one_request(bufs))
        {
            if let Some(stage) = staging::take(total) {
                return self.read_staged(stage, offset, bufs, total);
            }
        }
        if !vectored_ok(bufs.iter().map(|b| (b.as_ptr() as usize, b.len()))) {
            return crate::device::read_joined(self, offset, bufs);
        }
        let iov: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: every iovec points into a distinct slice mutably borrowed for the whole
        // call, with that slice's exact length, so preadv writes only memory we own
        // exclusively; the fd is ours and open.
        let n = unsafe {
            libc::preadv(
                self.file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                offset as libc::off_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize == total {
            return Ok(());
        }
        let lens: Vec<usize> = bufs.iter().map(|b| b.len()).collect();
        finish_short(n as usize, offset, lens.into_iter(), |i, at, from| {
            self.file
                .read_exact_at(&mut bufs[i][from..], at + from as u64)
        })
    }

    /// Whether a transfer into `bufs` is at most `max_segments` physically contiguous
    /// runs, so the disk gets it as one request.
    fn fits_in_one_request(&self, bufs: &[&mut [u8]]) -> bool {
        let pieces = || bufs.iter().map(|b| (b.as_ptr() as usize, b.len()));
        huge_slab::fits_anyway(pieces(), self.max_segments)
            || huge_slab::segments_at_most(pieces()) <= self.max_segments
    }

    /// A large read through a huge-page stage (`staging`): one request to the disk
    /// however scattered the pages of `bufs` are, then copied into them.
    fn read_staged(
        &self,
        mut stage: AlignedBuf,
        offset: u64,
        bufs: &mut [&mut [u8]],
        total: usize,
    ) -> io::Result<()> {
        let staged = &mut stage[..total];
        self.file.read_exact_at(staged, offset)?;
        let mut at = 0;
        for b in bufs.iter_mut() {
            b.copy_from_slice(&staged[at..at + b.len()]);
            at += b.len();
        }
        debug_assert_eq!(at, total);
        Ok(())
    }
}

/// Pieces this small or smaller on average make a read go through a stage even when
/// it fits one request: a raidz read-ahead run of 128 KiB records on a 4+2 group is
/// 32 KiB per record per leaf. Block buffers of a plain or mirrored pool (a record
/// each) stay above it and are read into directly: staging 4 MiB runs of 128 KiB
/// records cost 0.11-0.12 CPU-s/GB more and read slower from this VM's disk.
const SMALL_PIECE_BYTES: usize = 32 << 10;
/// ...and only reads of at least this much (16 pieces or more): the read-ahead runs
/// that stream. Smaller reads have few segments to save, and their stages would be
/// slab classes of their own, memory the slab keeps.
const SMALL_PIECES_MIN_BYTES: usize = 512 << 10;

/// Whether a read of `total` bytes into `pieces` buffers is a large one into many
/// small pieces (`SMALL_PIECE_BYTES`), which this VM's disk serves about 15% slower
/// than into one buffer (`staging`): more than the copy out of a stage costs.
fn many_small_pieces(pieces: usize, total: usize) -> bool {
    // A read of any bytes has a piece, so the division comes only after a nonzero total.
    total >= SMALL_PIECES_MIN_BYTES && total / pieces <= SMALL_PIECE_BYTES
}

/// Segment limit assumed when sysfs does not say (tmpfs, overlay): the smallest that
/// common disks have (SCSI's 128), so a read that might be split is staged.
const DEFAULT_MAX_SEGMENTS: usize = 128;

/// A queue attribute of the disk a device file is (a block device) or lives on (a
/// regular file's file system), from sysfs: `/sys/dev/block/MAJ:MIN/queue/NAME`, or
/// its parent's for a partition. None when unknown (tmpfs, overlay, no sysfs): a disk
/// then counts as not rotational, which only makes mirror reads weigh queue length
/// alone, and as taking `DEFAULT_MAX_SEGMENTS`.
fn backing_queue_attribute(file: &File, name: &str) -> Option<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = file.metadata().ok()?;
    let dev = if meta.file_type().is_block_device() {
        meta.rdev()
    } else {
        meta.dev()
    };
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let base = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    [base.clone(), base.join("..")].iter().find_map(|dir| {
        std::fs::read_to_string(dir.join("queue").join(name))
            .ok()
            .map(|v| v.trim().to_string())
    })
}

/// Vectored O_DIRECT needs every piece sector-aligned in address and length, and
/// at most IOV_MAX pieces.
fn vectored_ok(pieces: impl Iterator<Item = (usize, usize)>) -> bool {
    let mut count = 0;
    for (addr, len) in pieces {
        count += 1;
        if addr % SECTOR_SIZE != 0 || len % SECTOR_SIZE != 0 || count > 1024 {
            return false;
        }
    }
    count > 0
}

/// Finishes a vectored transfer that moved only `done` bytes (a signal, or a device
/// that shrank): for each piece of `lens` not wholly moved, `rest(i, at, from)` moves
/// the rest of piece `i`, which lies at `at` and has its first `from` bytes done.
fn finish_short(
    mut done: usize,
    offset: u64,
    lens: impl Iterator<Item = usize>,
    mut rest: impl FnMut(usize, u64, usize) -> io::Result<()>,
) -> io::Result<()> {
    let mut at = offset;
    for (i, len) in lens.enumerate() {
        if done >= len {
            done -= len;
        } else {
            rest(i, at, done)?;
            done = 0;
        }
        at += len as u64;
    }
    Ok(())
}

/// Whether this process has block device `path` open already (see the module doc).
fn held_by_this_process(path: &Path) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Ok(rdev) = std::fs::metadata(path).map(|m| m.rdev()) else {
        return false;
    };
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::metadata(fd.path())
            .is_ok_and(|m| m.file_type().is_block_device() && m.rdev() == rdev)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loop device over a file, detached when dropped.
    struct LoopDevice(PathBuf);

    impl LoopDevice {
        fn over(file: &Path) -> LoopDevice {
            let out = std::process::Command::new("losetup")
                .args(["--find", "--show"])
                .arg(file)
                .output()
                .expect("losetup (util-linux) runs");
            assert!(
                out.status.success(),
                "this test needs root and loop devices: losetup said {}",
                String::from_utf8_lossy(&out.stderr)
            );
            LoopDevice(PathBuf::from(
                String::from_utf8(out.stdout).unwrap().trim().to_string(),
            ))
        }
    }

    impl Drop for LoopDevice {
        fn drop(&mut self) {
            let _ = std::process::Command::new("losetup")
                .arg("-d")
                .arg(&self.0)
                .status();
        }
    }

    fn run(cmd: &str, args: &[&std::ffi::OsStr]) {
        let out = std::process::Command::new(cmd).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn a_mounted_block_device_is_refused_and_free_again_once_unmounted() {
        let dir = tempfile::tempdir().unwrap();
        let backing = dir.path().join("disk.img");
        FileDevice::create(&backing, MIN_DEVICE_BYTES).unwrap();
        let disk = LoopDevice::over(&backing);
        let dev = disk.0.as_os_str();
        run("mkfs.ext4", &["-q".as_ref(), dev]);
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        run("mount", &[dev, mnt.as_os_str()]);
        // Unmounted however the test ends, before the loop device is detached.
        struct Mounted<'a>(&'a Path);
        impl Drop for Mounted<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(self.0).status();
            }
        }
        let mounted = Mounted(&mnt);
        // Mounted: refused by `open` and `open_buffered`, with an error that says why.
        for e in [
            FileDevice::open(&disk.0).unwrap_err(),
            FileDevice::open_buffered(&disk.0).unwrap_err(),
        ] {
            assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
            assert!(e.to_string().contains("is in use"), "{e}");
        }
        // Its label can still be looked at, read-only.
        let look = FileDevice::open_shared(&disk.0).unwrap();
        assert_eq!(look.size_bytes(), MIN_DEVICE_BYTES);
        assert!(look.write_at(0, &[0u8; 512]).is_err(), "read-only");
        drop(look);
        // Negative control: the same open without the claim goes through, which is
        // how a pool came to write over a mounted file system.
        let unclaimed = OpenOptions::new().read(true).write(true).open(&disk.0);
        assert!(unclaimed.is_ok(), "an open without O_EXCL is not refused");
        drop(unclaimed);
        drop(mounted);
        // Free again; opened twice by this process (an exported pool's handle still
        // alive), the second open goes through on the claim this process holds.
        let first = FileDevice::open(&disk.0).unwrap();
        let second = FileDevice::open(&disk.0).unwrap();
        assert_eq!(first.size_bytes(), second.size_bytes());
        // Regular files are never claimed.
        let _one = FileDevice::open(&backing).unwrap();
        let _two = FileDevice::open(&backing).unwrap();
    }

    fn round_trip(dir: &Path) -> IoMode {
        round_trip_with(dir, false)
    }

    fn round_trip_with(dir: &Path, buffered: bool) -> IoMode {
        let path = dir.join("dev.img");
        let dev = FileDevice::create(&path, MIN_DEVICE_BYTES).unwrap();
        let dev = if buffered {
            FileDevice::open_buffered(&path).unwrap()
        } else {
            dev
        };
        assert_eq!(dev.size_bytes(), MIN_DEVICE_BYTES);
        let data: Vec<u8> = (0..3 * SECTOR_SIZE).map(|i| (i * 7 % 251) as u8).collect();
        dev.write_at(8192, &data).unwrap();
        dev.flush().unwrap();
        // Unaligned buffers work too (bounced).
        let mut raw = vec![0u8; data.len() + 1];
        dev.read_at(8192, &mut raw[1..]).unwrap();
        assert_eq!(&raw[1..], &data[..]);
        let mut aligned = AlignedBuf::zeroed(data.len());
        dev.read_at(8192, &mut aligned).unwrap();
        assert_eq!(&aligned[..], &data[..]);
        // Vectored reads: aligned pieces (one preadv) and an unaligned one (bounced).
        let (mut p1, mut p2) = (
            AlignedBuf::zeroed(4096),
            AlignedBuf::zeroed(data.len() - 4096),
        );
        dev.read_vectored_at(8192, &mut [&mut p1[..], &mut p2[..]])
            .unwrap();
        assert_eq!(&p1[..], &data[..4096]);
        assert_eq!(&p2[..], &data[4096..]);
        let mut odd = vec![0u8; 4097];
        let mut rest = AlignedBuf::zeroed(data.len() - 4096);
        dev.read_vectored_at(8192, &mut [&mut odd[1..], &mut rest[..]])
            .unwrap();
        assert_eq!(&odd[1..], &data[..4096]);
        assert_eq!(&rest[..], &data[4096..]);
        assert!(dev.read_at(100, &mut [0u8; 4096]).is_err());
        assert!(dev.write_at(MIN_DEVICE_BYTES, &[0u8; 4096]).is_err());
        assert!(
            FileDevice::create(&path, MIN_DEVICE_BYTES).is_err(),
            "create refuses an existing file"
        );
        let reopened = FileDevice::open(&path).unwrap();
        let mut back = vec![0u8; data.len()];
        reopened.read_at(8192, &mut back).unwrap();
        assert_eq!(back, data);
        dev.io_mode()
    }

    #[test]
    fn reads_into_scattered_memory_go_through_a_stage_and_land_in_every_piece() {
        use crate::staging::{taken_on_this_thread, STAGE_BYTES};
        let base = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target");
        std::fs::create_dir_all(base).unwrap();
        let dir = tempfile::tempdir_in(base).unwrap();
        let size = MIN_DEVICE_BYTES.max(16 << 20);
        let dev = FileDevice::create(dir.path().join("d"), size).unwrap();
        assert_eq!(
            dev.io_mode(),
            IoMode::Direct,
            "the build directory's file system takes O_DIRECT (staging is for it)"
        );
        // The cases below are on either side of any limit in this range (virtio 254,
        // SCSI 128, the default when sysfs does not say 128).
        assert!(
            (128..=512).contains(&dev.max_segments),
            "max_segments {}",
            dev.max_segments
        );
        let at = 3 * SECTOR_SIZE as u64;
        let data: Vec<u8> = (0..STAGE_BYTES + 8 * SECTOR_SIZE)
            .map(|i| (i * 31 % 253) as u8)
            .collect();
        dev.write_at(at, &data).unwrap();
        // (piece sizes, in huge pages, staged). 32 records of 128 KiB (a read-ahead
        // job) in huge pages are 32 segments, read straight in; on the heap, up to
        // 1,056 (every page apart), staged. Mixed small heap buffers, 56 pages at most;
        // one heap buffer of 3 MiB, 768 or more; one just past the largest stage.
        // 32 raidz columns of 32 KiB (a read-ahead run on one leaf of a 4+2 group)
        // in huge pages are 32 segments, one request, but staged for the disk's
        // sake; 8 of them are too small a read to stage, as are 8 of 128 KiB.
        let cases: [(Vec<usize>, bool, bool); 8] = [
            (vec![128 << 10; 32], true, false),
            (vec![32 << 10; 32], true, true),
            (vec![32 << 10; 8], true, false),
            (vec![128 << 10; 8], true, false),
            (vec![128 << 10; 32], false, true),
            (vec![4096, 64 << 10, 128 << 10, 12288], false, false),
            (vec![3 << 20], false, true),
            (
                vec![STAGE_BYTES / 2, STAGE_BYTES / 2 + SECTOR_SIZE],
                false,
                false,
            ),
        ];
        // A piece in huge pages is the start of a block buffer of at least 128 KiB, as
        // a raidz column is a part of its record's buffer.
        let block = |n: usize| n.max(128 << 10);
        for (sizes, huge, staged) in cases {
            if huge {
                // `take` never waits for the grower to make slots: make them here.
                let slots = sizes.len();
                assert!(
                    huge_slab::reserve(block(sizes[0]), slots),
                    "huge pages here"
                );
            }
            if staged {
                let total = sizes.iter().sum();
                assert!(huge_slab::reserve(total, 1), "a stage here");
            }
            let mut pieces: Vec<AlignedBuf> = sizes
                .iter()
                .map(|&n| match huge {
                    true => AlignedBuf::zeroed(block(n)),
                    false => AlignedBuf::zeroed_on_heap(n),
                })
                .collect();
            let mut bufs: Vec<&mut [u8]> = pieces
                .iter_mut()
                .zip(&sizes)
                .map(|(p, &n)| &mut p[..n])
                .collect();
            if huge {
                let runs = huge_slab::segments_at_most(
                    bufs.iter().map(|p| (p.as_ptr() as usize, p.len())),
                );
                assert_eq!(runs, sizes.len(), "block buffers come from huge pages");
            }
            let before = taken_on_this_thread();
            dev.read_vectored_at(at, &mut bufs).unwrap();
            assert_eq!(taken_on_this_thread() - before, staged as u64, "{sizes:?}");
            let mut from = 0;
            for p in &bufs {
                assert_eq!(&p[..], &data[from..from + p.len()], "{sizes:?}");
                from += p.len();
            }
        }
        // Past the device's end: refused before any stage is read into.
        let mut tail = AlignedBuf::zeroed_on_heap(3 << 20);
        assert!(dev
            .read_vectored_at(size - SECTOR_SIZE as u64, &mut [&mut tail[..]])
            .is_err());
    }

    #[test]
    fn file_on_disk() {
        // The build directory is on the real disk; /tmp may be tmpfs.
        let base = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target");
        std::fs::create_dir_all(base).unwrap();
        let dir = tempfile::tempdir_in(base).unwrap();
        let mode = round_trip(dir.path());
        assert!(mode == IoMode::Direct || mode == IoMode::Buffered);
    }

    #[test]
    fn tmpfs_mode_follows_what_the_kernel_allows() {
        // tmpfs refused O_DIRECT before Linux 6.6 and accepts it since: the device must
        // pick whichever the running kernel allows.
        let shm = Path::new("/dev/shm");
        assert!(shm.is_dir(), "this test needs the tmpfs at /dev/shm");
        let dir = tempfile::tempdir_in(shm).unwrap();
        let probe = dir.path().join("probe");
        std::fs::write(&probe, vec![0u8; 4096]).unwrap();
        let kernel_allows = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe)
            .is_ok();
        let expect = if kernel_allows {
            IoMode::Direct
        } else {
            IoMode::Buffered
        };
        assert_eq!(round_trip(dir.path()), expect);
    }

    #[test]
    fn refused_o_direct_falls_back_to_buffered() {
        // Character devices refuse O_DIRECT with EINVAL on every kernel, which is the
        // answer tmpfs gave before Linux 6.6: the device must come up buffered.
        let dev = FileDevice::open("/dev/null").unwrap();
        assert_eq!(dev.io_mode(), IoMode::Buffered);
        assert_eq!(dev.size_bytes(), 0);
    }

    #[test]
    fn buffered_mode_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(round_trip_with(dir.path(), true), IoMode::Buffered);
    }

    #[test]
    fn vectored_writes_land_back_to_back() {
        let base = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target");
        std::fs::create_dir_all(base).unwrap();
        let dir = tempfile::tempdir_in(base).unwrap();
        let dev = FileDevice::create(dir.path().join("v.img"), MIN_DEVICE_BYTES).unwrap();
        let a = AlignedBuf::from_slice(&[1u8; 8192]);
        let b = AlignedBuf::from_slice(&[2u8; 4096]);
        let unaligned = vec![3u8; 4097];
        // Aligned pieces: one pwritev.
        dev.write_vectored_at(65536, &[&a, &b]).unwrap();
        // An unaligned piece falls back to a joined write.
        dev.write_vectored_at(131072, &[&b, &unaligned[1..]])
            .unwrap();
        let mut back = vec![0u8; 12288];
        dev.read_at(65536, &mut back).unwrap();
        assert!(back[..8192].iter().all(|&x| x == 1) && back[8192..].iter().all(|&x| x == 2));
        dev.read_at(131072, &mut back[..8192]).unwrap();
        assert!(back[..4096].iter().all(|&x| x == 2) && back[4096..8192].iter().all(|&x| x == 3));
        assert!(
            dev.write_vectored_at(MIN_DEVICE_BYTES - 4096, &[&a])
                .is_err(),
            "past the end"
        );
    }

    #[test]
    fn preallocation_fills_the_holes_of_a_sparse_file() {
        use std::os::unix::fs::MetadataExt;
        let base = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target");
        std::fs::create_dir_all(base).unwrap();
        let dir = tempfile::tempdir_in(base).unwrap();
        let path = dir.path().join("p.img");
        let dev = FileDevice::create(&path, MIN_DEVICE_BYTES).unwrap();
        let allocated = || std::fs::metadata(&path).unwrap().blocks() * 512;
        let data = AlignedBuf::from_slice(&[7u8; 8192]);
        dev.write_at(8 << 20, &data).unwrap();
        // Live data inside the range: preallocation must leave it as it is.
        dev.write_at(3 << 20, &data).unwrap();
        let before = allocated();
        assert!(
            before < 1 << 20,
            "a new device file is sparse ({before} bytes)"
        );
        dev.preallocate(1 << 20, 4 << 20).unwrap();
        assert!(
            allocated() >= before + (4 << 20) - 8192,
            "{} bytes",
            allocated()
        );
        let mut back = AlignedBuf::zeroed(4 << 20);
        dev.read_at(1 << 20, &mut back).unwrap();
        let inside = (2 << 20)..(2 << 20) + 8192;
        assert_eq!(&back[inside.clone()], &data[..], "data in the range stays");
        assert!(back
            .iter()
            .enumerate()
            .all(|(i, &x)| inside.contains(&i) || x == 0));
        let mut kept = AlignedBuf::zeroed(8192);
        dev.read_at(8 << 20, &mut kept).unwrap();
        assert_eq!(&kept[..], &data[..], "outside the range nothing changes");

        assert!(
            dev.preallocate(MIN_DEVICE_BYTES - 4096, 8192).is_err(),
            "past the end"
        );
        // Block devices and the like are left alone.
        FileDevice::open("/dev/null")
            .unwrap()
            .preallocate(0, 4096)
            .unwrap();
    }

    #[test]
    fn too_small_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = FileDevice::create(dir.path().join("x"), 1 << 20).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
