//! A device as slow as a disk: any device (normally a file) behind a model of one
//! disk head, so the scaling experiments of a many-disk server (`shoal bench` against
//! 3x(4+1) RAID-Z or 7x2 mirrors of 7200 rpm disks) can be repeated on one machine.
//!
//! Model (`SpeedLimit`, shared with the simulated device): an I/O that does not start
//! where the previous one ended pays a seek; every I/O pays its length over the
//! bandwidth. The head serves one I/O at a time in arrival order: each I/O reserves
//! the head from when it is free, for its service time, then does the real I/O and
//! returns when its reservation ends. So queued I/Os wait as they would on a disk,
//! while the real I/O underneath (page cache, SSD) costs nothing the model can see.
//!
//! It adds only waiting: data, errors and durability are the inner device's, so
//! everything said of the inner device about crashes holds unchanged.

use crate::device::{Device, IoMode};
use crate::sim_device::SpeedLimit;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Head {
    /// Where the last reserved I/O ends.
    position: u64,
    /// When the head is free again.
    free_at: Instant,
}

#[derive(Debug)]
pub struct ThrottledDevice {
    inner: Arc<dyn Device>,
    speed: SpeedLimit,
    head: Mutex<Head>,
}

impl ThrottledDevice {
    pub fn new(inner: Arc<dyn Device>, speed: SpeedLimit) -> ThrottledDevice {
        ThrottledDevice {
            inner,
            speed,
            head: Mutex::new(Head {
                position: u64::MAX,
                free_at: Instant::now(),
            }),
        }
    }

    /// Reserves the head for an I/O of `len` bytes at `offset`; returns when it ends.
    fn reserve(&self, offset: u64, len: usize) -> Instant {
        let mut h = self.head.lock().unwrap();
        let service = self.speed.service_time(offset == h.position, len);
        let start = h.free_at.max(Instant::now());
        h.free_at = start + service;
        h.position = offset + len as u64;
        h.free_at
    }

    fn run<T>(&self, offset: u64, len: usize, io: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let done_at = self.reserve(offset, len);
        let r = io();
        let wait = done_at.saturating_duration_since(Instant::now());
        if wait > Duration::ZERO {
            std::thread::sleep(wait);
        }
        r
    }
}

impl Device for ThrottledDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let len = buf.len();
        self.run(offset, len, || self.inner.read_at(offset, buf))
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.run(offset, buf.len(), || self.inner.write_at(offset, buf))
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }

    fn io_mode(&self) -> IoMode {
        self.inner.io_mode()
    }

    fn describe(&self) -> String {
        format!("{} (simulated disk: {})", self.inner.describe(), self.speed)
    }

    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.run(offset, len, || self.inner.write_vectored_at(offset, bufs))
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> io::Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.run(offset, len, || self.inner.read_vectored_at(offset, bufs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim_device::SimDevice;

    #[test]
    fn random_ios_pay_a_seek_and_queued_ios_wait_their_turn() {
        let speed = SpeedLimit::parse("100MB/s,50iops").unwrap();
        let dev = Arc::new(ThrottledDevice::new(SimDevice::new(64 << 20, 1), speed));
        let buf = vec![7u8; 4096];
        // Four random writes from four threads at once: one head, so about 4 x 20 ms.
        let t = Instant::now();
        std::thread::scope(|s| {
            for i in 0..4u64 {
                let (dev, buf) = (dev.clone(), &buf);
                s.spawn(move || dev.write_at(i * (8 << 20), buf).unwrap());
            }
        });
        assert!(
            t.elapsed() >= Duration::from_millis(78),
            "{:?}",
            t.elapsed()
        );
        // Sequential reads pay bandwidth only: 4 MiB at 100 MB/s is 42 ms, no seeks.
        let mut big = vec![0u8; 1 << 20];
        dev.read_at(0, &mut big[..4096]).unwrap();
        assert_eq!(&big[..4096], &buf[..]);
        let t = Instant::now();
        for i in 0..4u64 {
            dev.read_at(4096 + i * (1 << 20), &mut big).unwrap();
        }
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(41), "{took:?}");
        assert!(dev.describe().contains("100 MB/s"), "{}", dev.describe());
    }

    #[test]
    fn disk_specs_parse_or_say_why() {
        let s = SpeedLimit::parse("72MB/s, 90iops").unwrap();
        assert_eq!(s.bytes_per_sec, Some(72_000_000));
        assert_eq!(s.seek, Duration::from_secs_f64(1.0 / 90.0));
        // An 8 KiB random read: 11.1 ms + 0.11 ms, just under 90 a second.
        let per_second = 1.0 / s.service_time(false, 8192).as_secs_f64();
        assert!((88.0..90.0).contains(&per_second), "{per_second}");
        assert_eq!(
            SpeedLimit::parse("seek=8.5ms").unwrap().seek,
            Duration::from_micros(8500)
        );
        for bad in ["", "fast", "0MB/s", "-3iops", "72MB/s,seek=xms"] {
            assert!(SpeedLimit::parse(bad).is_err(), "{bad}");
        }
    }
}
