//! A device as slow as a disk: any device (normally a file) behind a model of one
//! disk head, so the scaling experiments of a many-disk server (`shoal bench` against
//! 3x(4+1) RAID-Z or 7x2 mirrors of 7200 rpm disks) can be repeated on one machine.
//!
//! Model (`SpeedLimit`, shared with the simulated device): every I/O pays its length
//! over the bandwidth, and a seek unless it continues an I/O the disk has in hand.
//! The head serves one I/O at a time: each I/O reserves the head from when it is
//! free, for its service time, then does the real I/O and returns when its
//! reservation ends. So queued I/Os wait as they would on a disk, while the real I/O
//! underneath (page cache, SSD) costs nothing the model can see.
//!
//! "Continues" is how a disk with command queueing behaves: it serves the I/Os queued
//! in it in offset order, so an I/O that starts where a queued (or the last) one ends,
//! or ends where one starts, follows it without a seek, whatever order they arrived
//! in; a forward gap of up to `NEAR_GAP` costs the time to pass over it, not a seek.
//! Writes of one txg issued from several threads at once are contiguous on the disk
//! but arrive out of order; a model that charged each a seek would measure the
//! thread scheduler, not the layout.
//!
//! It adds only waiting: data, errors and durability are the inner device's, so
//! everything said of the inner device about crashes holds unchanged.
//!
//! It also keeps account of what it charged (`DiskStats`): I/Os that continued one in
//! hand, and seeks by what the device can see of their cause (to a label at either
//! end, small I/Os as metadata is, reads or writes, a head that was idle against one
//! with a queue), so a layout that streams below its model can be explained.

use crate::device::{Device, IoMode};
use crate::sim_device::SpeedLimit;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A forward gap the head passes over rather than seeks across (a part of a track).
pub const NEAR_GAP: u64 = 128 << 10;

/// What the disk model charged, for explaining a benchmark.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    pub ios: u64,
    pub bytes: u64,
    /// I/Os that continued one in hand (contiguous, or a forward gap passed over).
    pub continued: u64,
    /// Bytes of gaps passed over.
    pub gap_bytes: u64,
    pub seeks: u64,
    pub seek_reads: u64,
    pub seek_writes: u64,
    /// Seeks to a label area (the first or last two labels' space).
    pub seeks_to_labels: u64,
    /// Seeks for I/Os of 16 KiB or less (metadata, small records, log blocks).
    pub seeks_small: u64,
    /// Seeks that found the head idle with nothing queued: the I/O came too late to
    /// join the previous one's queue (a stream that leaves the disk idle between its
    /// I/Os pays a seek only if it also jumps).
    pub seeks_idle: u64,
    /// Seeks of at most 1 MiB either way (a real disk pays less for them than the
    /// model's full seek).
    pub seeks_short: u64,
    /// Time charged: all service, and seeks alone.
    pub busy: Duration,
    pub seek_time: Duration,
}

impl std::ops::AddAssign for DiskStats {
    /// Sums two accounts (a pool's disks together).
    fn add_assign(&mut self, o: DiskStats) {
        self.ios += o.ios;
        self.bytes += o.bytes;
        self.continued += o.continued;
        self.gap_bytes += o.gap_bytes;
        self.seeks += o.seeks;
        self.seek_reads += o.seek_reads;
        self.seek_writes += o.seek_writes;
        self.seeks_to_labels += o.seeks_to_labels;
        self.seeks_small += o.seeks_small;
        self.seeks_idle += o.seeks_idle;
        self.seeks_short += o.seeks_short;
        self.busy += o.busy;
        self.seek_time += o.seek_time;
    }
}

#[derive(Debug)]
struct Head {
    /// Extents (start, end, done at) the disk has in hand: queued, in service, or the
    /// last one served.
    recent: std::collections::VecDeque<(u64, u64, Instant)>,
    /// When the head is free again.
    free_at: Instant,
    stats: DiskStats,
    /// Where the last I/O reserved ended, for seek distances.
    last_end: u64,
}

impl Head {
    /// The bytes the head passes over to reach `[start, end)` without a seek, if it can.
    fn gap_to(&self, start: u64, end: u64) -> Option<u64> {
        self.recent.iter().find_map(|&(s, e, _)| {
            if start >= e && start - e <= NEAR_GAP {
                Some(start - e)
            } else if end <= s && s - end <= NEAR_GAP {
                Some(s - end)
            } else {
                None
            }
        })
    }
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
                recent: std::collections::VecDeque::new(),
                free_at: Instant::now(),
                stats: DiskStats::default(),
                last_end: 0,
            }),
        }
    }

    /// Reserves the head for an I/O of `len` bytes at `offset`; returns when it ends.
    fn reserve(&self, offset: u64, len: usize, write: bool) -> Instant {
        let now = Instant::now();
        let mut h = self.head.lock().unwrap();
        let end = offset + len as u64;
        let gap = h.gap_to(offset, end);
        let service = match gap {
            Some(gap) => self.speed.service_time(true, len + gap as usize),
            None => self.speed.service_time(false, len),
        };
        let idle = h.free_at <= now;
        let last_end = h.last_end;
        let size = self.inner.size_bytes();
        let st = &mut h.stats;
        st.ios += 1;
        st.bytes += len as u64;
        st.busy += service;
        match gap {
            Some(g) => {
                st.continued += 1;
                st.gap_bytes += g;
            }
            None => {
                st.seeks += 1;
                st.seek_time += self.speed.seek;
                if write {
                    st.seek_writes += 1;
                } else {
                    st.seek_reads += 1;
                }
                let labels = 2 * crate::label::LABEL_SIZE;
                if offset < labels || end > size.saturating_sub(labels) {
                    st.seeks_to_labels += 1;
                }
                if len <= 16 << 10 {
                    st.seeks_small += 1;
                }
                if idle {
                    st.seeks_idle += 1;
                }
                if offset.abs_diff(last_end) <= 1 << 20 {
                    st.seeks_short += 1;
                }
            }
        }
        h.last_end = end;
        let start = h.free_at.max(now);
        h.free_at = start + service;
        let done_at = h.free_at;
        // Keep what is still queued, and the last served.
        while h.recent.len() > 1 && h.recent.front().is_some_and(|&(_, _, t)| t < now) {
            h.recent.pop_front();
        }
        if h.recent.len() >= 64 {
            h.recent.pop_front();
        }
        h.recent.push_back((offset, end, done_at));
        done_at
    }

    /// The disk time charged so far (seeks and transfers).
    pub fn busy(&self) -> Duration {
        self.head.lock().unwrap().stats.busy
    }

    /// What the model charged so far.
    pub fn stats(&self) -> DiskStats {
        self.head.lock().unwrap().stats
    }

    fn run<T>(
        &self,
        offset: u64,
        len: usize,
        write: bool,
        io: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        let done_at = self.reserve(offset, len, write);
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
        self.run(offset, len, false, || self.inner.read_at(offset, buf))
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.run(offset, buf.len(), true, || self.inner.write_at(offset, buf))
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }

    fn rotational(&self) -> bool {
        true
    }

    fn io_mode(&self) -> IoMode {
        self.inner.io_mode()
    }

    fn describe(&self) -> String {
        format!("{} (simulated disk: {})", self.inner.describe(), self.speed)
    }

    fn preallocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.preallocate(offset, len)
    }

    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.run(offset, len, true, || {
            self.inner.write_vectored_at(offset, bufs)
        })
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> io::Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.run(offset, len, false, || {
            self.inner.read_vectored_at(offset, bufs)
        })
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
        let transfer = |n: u64| Duration::from_secs_f64(n as f64 / 100e6);
        // Four random writes from four threads at once: one head, four seeks, and the
        // last to be served waits for the three before it.
        let t = Instant::now();
        std::thread::scope(|s| {
            for i in 0..4u64 {
                let (dev, buf) = (dev.clone(), &buf);
                s.spawn(move || dev.write_at(i * (8 << 20), buf).unwrap());
            }
        });
        let four_seeks = 4 * (Duration::from_millis(20) + transfer(4096));
        assert_eq!(dev.busy(), four_seeks);
        let st = dev.stats();
        assert_eq!(
            (st.ios, st.seeks, st.seek_writes, st.continued),
            (4, 4, 4, 0)
        );
        assert_eq!(st.seeks_small, 4);
        assert!((1..=4).contains(&st.seeks_idle), "{st:?}");
        // The one at offset 0 is in the label area at the device's start.
        assert_eq!(st.seeks_to_labels, 1);
        assert_eq!(st.seek_time, Duration::from_millis(80));
        assert!(
            t.elapsed() >= four_seeks - Duration::from_millis(1),
            "{:?}",
            t.elapsed()
        );
        // Reads that follow each other pay the transfer only.
        let mut big = vec![0u8; 1 << 20];
        dev.read_at(0, &mut big[..4096]).unwrap();
        assert_eq!(&big[..4096], &buf[..]);
        for i in 0..4u64 {
            dev.read_at(4096 + i * (1 << 20), &mut big).unwrap();
        }
        assert_eq!(
            dev.busy(),
            four_seeks + 4 * transfer(1 << 20) + transfer(4096) + Duration::from_millis(20)
        );
        // Arriving in reverse order, still contiguous: the disk sorts its queue.
        let before = dev.busy();
        dev.read_at(8 << 20, &mut big).unwrap();
        dev.read_at((8 << 20) - (1 << 20), &mut big).unwrap();
        assert_eq!(
            dev.busy() - before,
            Duration::from_millis(20) + 2 * transfer(1 << 20)
        );
        // A small forward gap is passed over; a large one is a seek.
        let before = dev.busy();
        dev.read_at((9 << 20) + (64 << 10), &mut big[..4096])
            .unwrap();
        assert_eq!(dev.busy() - before, transfer((64 << 10) + 4096));
        let st = dev.stats();
        assert_eq!(st.gap_bytes, 64 << 10);
        assert_eq!(st.ios, st.seeks + st.continued);
        let before = dev.busy();
        let idle_before = dev.stats().seeks_idle;
        dev.read_at(40 << 20, &mut big[..4096]).unwrap();
        // One seek, by a read, at a head left idle by the reads before it.
        assert_eq!(dev.stats().seeks_idle, idle_before + 1);
        assert_eq!(
            dev.busy() - before,
            Duration::from_millis(20) + transfer(4096)
        );
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
