//! A volatile write cache in front of a real device, so that killing the daemon loses
//! what a power cut would (`shoal serve --simulate-power-loss SEED`). For tests only,
//! never for real service: every write not yet flushed lives only in the process.
//!
//! A disk with its write cache on acknowledges a write once the data is in the cache,
//! and makes it durable only when it destages it on its own or is told to flush. This
//! device does the same in memory: a write lands in the cache, sector by sector (a
//! later write of a sector replaces the earlier one, as in a disk's cache); reads see
//! the cache over the inner device; `flush` writes every cached sector to the inner
//! device and flushes that; and a background thread destages a seeded random subset
//! of the cached sectors, in random order, now and then (`DESTAGE_EVERY`). SIGKILL of the
//! process then loses every write since the last flush except an arbitrary subset,
//! exactly the freedom a power cut has; the host's page cache, which keeps whatever
//! a killed process wrote, no longer hides a missing flush.
//!
//! `lying_flush` is the negative control of the power-loss tests: `flush` returns at
//! once and destages nothing (a device, or a server, that never makes anything
//! durable). The same tests must then report losses.
//!
//! Invariants: the cache holds whole sectors (`check_io` on every call); a sector's
//! newest data is in the cache or, once destaged, in the inner device, so reads never
//! go back in time; the cache lock is held across a destage and a flush, so a write
//! to a sector being written back waits for it. Memory is bounded: past
//! `MAX_CACHED_BYTES`, a write first destages a random half of the cache.

use crate::device::{check_io, Device, IoMode, SECTOR_SIZE};
use crate::sim_device::SplitMix;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The most a cache holds before a write makes room (a disk's cache is far smaller;
/// this only bounds memory when a pool goes long without flushing).
pub const MAX_CACHED_BYTES: usize = 256 << 20;
/// How often the background destage runs, at most (each pause is random below it).
/// With a sixteenth to a quarter of the cache written back each time, a sector stays
/// cached for about a second: long enough that a kill finds plenty unflushed, so a
/// missing flush shows as a loss.
const DESTAGE_EVERY: Duration = Duration::from_millis(250);

#[derive(Debug)]
struct Cache {
    /// Sector index to its newest unflushed data.
    sectors: BTreeMap<u64, Box<[u8]>>,
    rng: SplitMix,
}

#[derive(Debug)]
struct Shared {
    inner: Arc<dyn Device>,
    cache: Mutex<Cache>,
}

#[derive(Debug)]
pub struct VolatileCacheDevice {
    shared: Arc<Shared>,
    lying_flush: bool,
}

impl VolatileCacheDevice {
    /// `inner` behind a volatile cache whose destage choices follow `seed`.
    pub fn new(inner: Arc<dyn Device>, seed: u64, lying_flush: bool) -> VolatileCacheDevice {
        let shared = Arc::new(Shared {
            inner,
            cache: Mutex::new(Cache {
                sectors: BTreeMap::new(),
                rng: SplitMix(seed),
            }),
        });
        let weak = Arc::downgrade(&shared);
        let spawned = std::thread::Builder::new()
            .name("volatile-cache".into())
            .spawn(move || destage_loop(weak, seed.rotate_left(17)));
        // Without the thread only flushes write back: still a legal disk.
        drop(spawned);
        VolatileCacheDevice {
            shared,
            lying_flush,
        }
    }

    /// Bytes written and not yet durable (for tests).
    pub fn cached_bytes(&self) -> usize {
        self.shared.cache.lock().unwrap().sectors.len() * SECTOR_SIZE
    }
}

fn destage_loop(shared: Weak<Shared>, seed: u64) {
    let mut rng = SplitMix(seed);
    loop {
        std::thread::sleep(Duration::from_millis(
            1 + rng.below(DESTAGE_EVERY.as_millis() as u64),
        ));
        let Some(s) = shared.upgrade() else { return };
        let mut cache = s.cache.lock().unwrap();
        let share = 1 + cache.rng.below(4);
        // A failed write-back leaves its sectors cached: the next flush writes them
        // again and reports the error to the pool.
        let _ = destage_some(&s.inner, &mut cache, share, 16);
    }
}

/// Writes back about `share`/`of` of the cached sectors, in random order.
fn destage_some(inner: &Arc<dyn Device>, cache: &mut Cache, share: u64, of: u64) -> io::Result<()> {
    let mut chosen: Vec<u64> = Vec::new();
    for &sector in cache.sectors.keys() {
        if cache.rng.below(of) < share {
            chosen.push(sector);
        }
    }
    // Fisher-Yates: the order a disk's firmware picks is none of the writer's business.
    for i in (1..chosen.len()).rev() {
        let j = cache.rng.below(i as u64 + 1) as usize;
        chosen.swap(i, j);
    }
    for sector in chosen {
        let data = &cache.sectors[&sector];
        inner.write_at(sector * SECTOR_SIZE as u64, data)?;
        cache.sectors.remove(&sector);
    }
    Ok(())
}

/// Writes back every cached sector, runs of neighbours as one write, and flushes.
fn destage_all(inner: &Arc<dyn Device>, cache: &mut Cache) -> io::Result<()> {
    let mut run: Vec<u8> = Vec::new();
    let mut run_start = 0u64;
    let mut next = u64::MAX;
    let mut written = Vec::new();
    for (&sector, data) in &cache.sectors {
        if sector != next && !run.is_empty() {
            inner.write_at(run_start * SECTOR_SIZE as u64, &run)?;
            run.clear();
        }
        if run.is_empty() {
            run_start = sector;
        }
        run.extend_from_slice(data);
        next = sector + 1;
        written.push(sector);
    }
    if !run.is_empty() {
        inner.write_at(run_start * SECTOR_SIZE as u64, &run)?;
    }
    inner.flush()?;
    // Only now: a failed write or flush leaves everything cached, to be tried again.
    for sector in written {
        cache.sectors.remove(&sector);
    }
    Ok(())
}

impl Device for VolatileCacheDevice {
    fn size_bytes(&self) -> u64 {
        self.shared.inner.size_bytes()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_io(offset, buf.len(), self.size_bytes())?;
        let cache = self.shared.cache.lock().unwrap();
        self.shared.inner.read_at(offset, buf)?;
        let first = offset / SECTOR_SIZE as u64;
        let end = first + (buf.len() / SECTOR_SIZE) as u64;
        for (&sector, data) in cache.sectors.range(first..end) {
            let at = ((sector - first) as usize) * SECTOR_SIZE;
            buf[at..at + SECTOR_SIZE].copy_from_slice(data);
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_io(offset, buf.len(), self.size_bytes())?;
        let mut cache = self.shared.cache.lock().unwrap();
        if (cache.sectors.len() + buf.len() / SECTOR_SIZE) * SECTOR_SIZE > MAX_CACHED_BYTES {
            destage_some(&self.shared.inner, &mut cache, 1, 2)?;
        }
        let first = offset / SECTOR_SIZE as u64;
        for (i, chunk) in buf.chunks_exact(SECTOR_SIZE).enumerate() {
            cache.sectors.insert(first + i as u64, chunk.into());
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        if self.lying_flush {
            return Ok(());
        }
        let mut cache = self.shared.cache.lock().unwrap();
        destage_all(&self.shared.inner, &mut cache)
    }

    fn rotational(&self) -> bool {
        self.shared.inner.rotational()
    }

    fn io_mode(&self) -> IoMode {
        self.shared.inner.io_mode()
    }

    fn describe(&self) -> String {
        format!(
            "{} behind a simulated volatile write cache{}",
            self.shared.inner.describe(),
            if self.lying_flush {
                " whose flush does nothing"
            } else {
                ""
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim_device::SimDevice;

    const MIB: u64 = 1 << 20;

    fn sector(fill: u8) -> Vec<u8> {
        vec![fill; SECTOR_SIZE]
    }

    #[test]
    fn reads_see_the_newest_write_cached_or_destaged() {
        let inner: Arc<dyn Device> = SimDevice::new(4 * MIB, 1);
        let dev = VolatileCacheDevice::new(inner.clone(), 7, false);
        let mut want = vec![0u8; 64 * SECTOR_SIZE];
        let mut rng = SplitMix(3);
        for round in 0..2000u64 {
            let at = rng.below(60) as usize;
            let n = 1 + rng.below(4) as usize;
            let data: Vec<u8> = (0..n * SECTOR_SIZE)
                .map(|i| (round as usize + i) as u8)
                .collect();
            dev.write_at((at * SECTOR_SIZE) as u64, &data).unwrap();
            want[at * SECTOR_SIZE..(at + n) * SECTOR_SIZE].copy_from_slice(&data);
            if round % 97 == 0 {
                dev.flush().unwrap();
            }
            let mut got = vec![0u8; want.len()];
            dev.read_at(0, &mut got).unwrap();
            assert!(got == want, "round {round}: a read went back in time");
        }
        dev.flush().unwrap();
        assert_eq!(dev.cached_bytes(), 0);
        let mut durable = vec![0u8; want.len()];
        inner.read_at(0, &mut durable).unwrap();
        assert!(durable == want, "a flush made everything durable");
    }

    #[test]
    fn unflushed_writes_are_not_durable_until_a_flush_and_a_lying_flush_keeps_them_so() {
        for lying in [false, true] {
            let inner: Arc<dyn Device> = SimDevice::new(4 * MIB, 1);
            let dev = VolatileCacheDevice::new(inner.clone(), 11, lying);
            // Many sectors, written at once: the background destage cannot have
            // written them all back before the check right after.
            let data = sector(0xab).repeat(256);
            dev.write_at(0, &data).unwrap();
            let mut durable = vec![0u8; data.len()];
            inner.read_at(0, &mut durable).unwrap();
            assert_ne!(durable, data, "nothing flushed, yet all durable");
            dev.flush().unwrap();
            inner.read_at(0, &mut durable).unwrap();
            if lying {
                assert!(
                    dev.cached_bytes() > 0,
                    "a lying flush wrote everything back"
                );
            } else {
                assert_eq!(durable, data, "flush returned before the data was durable");
            }
        }
    }

    #[test]
    fn the_background_destage_writes_back_without_a_flush() {
        let inner: Arc<dyn Device> = SimDevice::new(4 * MIB, 1);
        let dev = VolatileCacheDevice::new(inner.clone(), 5, true);
        dev.write_at(0, &sector(1).repeat(64)).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while dev.cached_bytes() == 64 * SECTOR_SIZE {
            assert!(
                std::time::Instant::now() < deadline,
                "nothing destaged in 30 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut durable = vec![0u8; 64 * SECTOR_SIZE];
        inner.read_at(0, &mut durable).unwrap();
        assert!(durable.chunks(SECTOR_SIZE).any(|s| s == sector(1)));
    }

    #[test]
    fn misaligned_io_is_refused() {
        let inner: Arc<dyn Device> = SimDevice::new(MIB, 1);
        let dev = VolatileCacheDevice::new(inner, 1, false);
        assert!(dev.write_at(100, &sector(1)).is_err());
        assert!(dev.write_at(0, &[1u8; 100]).is_err());
        assert!(dev.write_at(MIB, &sector(1)).is_err());
        let mut b = vec![0u8; 100];
        assert!(dev.read_at(0, &mut b).is_err());
    }
}
