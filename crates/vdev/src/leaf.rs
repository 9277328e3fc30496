//! One leaf of the vdev tree: a device slot with its health, error counters and I/O
//! accounting. Every device I/O of the pool goes through a leaf, which refuses I/O
//! while the leaf is not usable and turns I/O errors into health changes.
//!
//! Invariants:
//! - A leaf is FAULTED after a failed write or flush (its contents may be stale) or
//!   after `LEAF_ERROR_LIMIT` read errors; faulted leaves get no I/O until replaced or
//!   cleared (`Pool::clear`).
//! - A device swap (`replace_device`) waits for every I/O in flight on the old device:
//!   each I/O holds the device slot shared from its health check to its last health
//!   change, so none lands on the old device after the swap, and none faults the new
//!   device for an error of the old one.

use crate::device::Device;
use crate::label;
use analytics::{Analytics, Event, IoEvent};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::Instant;

/// Read errors after which a leaf is taken out of service.
pub const LEAF_ERROR_LIMIT: u64 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Online,
    Degraded,
    Faulted,
    /// The device could not be opened at import.
    Unavail,
    /// A replacement being filled: written to, not yet read from.
    Resilvering,
    /// Taken out of service by the operator: neither read nor written until brought
    /// back online (and resilvered with what it missed).
    Offline,
}

impl Health {
    pub fn name(self) -> &'static str {
        match self {
            Health::Online => "ONLINE",
            Health::Degraded => "DEGRADED",
            Health::Faulted => "FAULTED",
            Health::Unavail => "UNAVAIL",
            Health::Resilvering => "RESILVERING",
            Health::Offline => "OFFLINE",
        }
    }
}

#[derive(Debug, Default)]
pub struct LeafCounters {
    pub read_ops: AtomicU64,
    pub write_ops: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub read_errors: AtomicU64,
    pub write_errors: AtomicU64,
    pub cksum_errors: AtomicU64,
    pub repaired_bytes: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeafCountersSnapshot {
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_errors: u64,
    pub write_errors: u64,
    pub cksum_errors: u64,
    pub repaired_bytes: u64,
}

/// One leaf device of the pool.
#[derive(Debug)]
pub struct Leaf {
    /// (guid, path): changes only when the device is replaced.
    identity: Mutex<(u64, String)>,
    device: RwLock<Option<Arc<dyn Device>>>,
    health: Mutex<Health>,
    pub counters: LeafCounters,
    data_start: u64,
    data_len: AtomicU64,
    /// Where this leaf's I/O is reported, with its device number there.
    analytics: OnceLock<Arc<Analytics>>,
    /// This leaf's analytics device number: registered again when its path or role
    /// changes (a replacement device, a spare put to work), so I/O is reported under
    /// what the device is now.
    analytics_id: AtomicU32,
    /// Busy time while analytics is attached (`busy_ns`).
    busy: BusyClock,
    /// Queue length and head position, for choosing a mirror side (`read_cost`).
    head: HeadHint,
    /// Held while one batch's share of this leaf is written (`TopVdev::write_planned`
    /// in parallel): with two batches in flight, each disk writes one batch's pieces
    /// and then the next one's, instead of interleaving them with a seek each time.
    batch_turn: Mutex<()>,
}

/// What a mirror read needs to know of a side: how many bytes it has in flight and
/// where its last I/O ended. Kept with relaxed atomics: a hint read while other I/Os
/// start and end, never a lock on the I/O path.
#[derive(Debug, Default)]
struct HeadHint {
    queued_bytes: AtomicU64,
    /// End of the last I/O issued, in data-area bytes.
    last_end: AtomicU64,
    /// The device seeks (`Device::rotational`): distance matters, not only queue.
    rotational: std::sync::atomic::AtomicBool,
}

/// What a seek is worth in bytes queued: a disk transfers about 1 MiB in the time of
/// one seek (8-11 ms at 100-200 MB/s), half that for a seek within
/// `NEAR_SEEK_BYTES`. A device without a head pays a command's overhead for a read
/// that does not continue the last one (continuing reads merge in its queue).
///
/// Queued work is counted in bytes, not I/Os as OpenZFS's mirror does: shoal's reads
/// range from 4 KiB to 1 MiB batches, and a side with one 1 MiB read queued is as far
/// behind as a seek, so a stream's next batch goes to the idle side (one seek, then
/// it streams there) rather than waiting. Counting I/Os kept one stream on one side
/// of each mirror until five batches queued, which the read-ahead never reaches.
pub(crate) const SEEK_BYTES: u64 = 1 << 20;
const NEAR_SEEK_BYTES: u64 = 1 << 20;
const NON_ROTATIONAL_SEEK_BYTES: u64 = 128 << 10;

impl HeadHint {
    fn new(rotational: bool) -> HeadHint {
        HeadHint {
            rotational: std::sync::atomic::AtomicBool::new(rotational),
            ..HeadHint::default()
        }
    }

    fn issue(&self, offset: u64, len: u64) {
        self.queued_bytes.fetch_add(len, Ordering::Relaxed);
        self.last_end.store(offset + len, Ordering::Relaxed);
    }

    fn done(&self, len: u64) {
        self.queued_bytes.fetch_sub(len, Ordering::Relaxed);
    }

    fn cost(&self, offset: u64) -> u64 {
        let queued = self.queued_bytes.load(Ordering::Relaxed);
        let last_end = self.last_end.load(Ordering::Relaxed);
        let seek = if last_end == offset {
            0
        } else if !self.rotational.load(Ordering::Relaxed) {
            NON_ROTATIONAL_SEEK_BYTES
        } else if last_end.abs_diff(offset) < NEAR_SEEK_BYTES {
            SEEK_BYTES / 2
        } else {
            SEEK_BYTES
        };
        queued + seek
    }
}

/// How long a device had at least one I/O in flight: the union of its I/Os'
/// intervals, kept with atomics only. The first I/O to start stamps the start, the
/// last to finish adds the interval. A start that slips in between another I/O's
/// finish and its reading of the stamp shortens that interval: a statistic that
/// can read a little low, never a lock on the I/O path.
#[derive(Debug, Default)]
struct BusyClock {
    in_flight: AtomicU32,
    /// Nanoseconds since `epoch` when the current busy interval began.
    since_ns: AtomicU64,
    total_ns: AtomicU64,
}

impl BusyClock {
    fn start(&self, epoch: Instant, now: Instant) {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.since_ns.store(
                now.duration_since(epoch).as_nanos() as u64,
                Ordering::Release,
            );
        }
    }

    fn finish(&self, epoch: Instant, now: Instant) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            let since = self.since_ns.load(Ordering::Acquire);
            let now = now.duration_since(epoch).as_nanos() as u64;
            self.total_ns
                .fetch_add(now.saturating_sub(since), Ordering::Relaxed);
        }
    }

    pub(crate) fn read(&self, epoch: Instant) -> u64 {
        let mut total = self.total_ns.load(Ordering::Relaxed);
        if self.in_flight.load(Ordering::Acquire) > 0 {
            let now = Instant::now().duration_since(epoch).as_nanos() as u64;
            total += now.saturating_sub(self.since_ns.load(Ordering::Acquire));
        }
        total
    }
}

impl Leaf {
    /// Taken while a batch's share of this leaf is written (see the field).
    pub(crate) fn batch_turn(&self) -> std::sync::MutexGuard<'_, ()> {
        self.batch_turn.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn new(guid: u64, path: String, device: Arc<dyn Device>) -> Leaf {
        let (data_start, data_len) = label::data_area(device.size_bytes());
        let head = HeadHint::new(device.rotational());
        Leaf {
            identity: Mutex::new((guid, path)),
            device: RwLock::new(Some(device)),
            health: Mutex::new(Health::Online),
            counters: LeafCounters::default(),
            data_start,
            data_len: AtomicU64::new(data_len),
            analytics: OnceLock::new(),
            analytics_id: AtomicU32::new(0),
            busy: BusyClock::default(),
            head,
            batch_turn: Mutex::new(()),
        }
    }

    /// A leaf whose device could not be opened.
    pub fn missing(guid: u64, path: String, data_len: u64) -> Leaf {
        Leaf {
            identity: Mutex::new((guid, path)),
            device: RwLock::new(None),
            health: Mutex::new(Health::Unavail),
            counters: LeafCounters::default(),
            data_start: label::DATA_AREA_START,
            data_len: AtomicU64::new(data_len),
            analytics: OnceLock::new(),
            analytics_id: AtomicU32::new(0),
            busy: BusyClock::default(),
            head: HeadHint::default(),
            batch_turn: Mutex::new(()),
        }
    }

    /// Reports this leaf's I/O to `analytics` from now on, as a device of `pool`
    /// with `role` (data, log, cache, spare). Called again, it re-registers the leaf
    /// under its current path and the role given (the first analytics instance stays).
    pub fn attach_analytics(&self, analytics: &Arc<Analytics>, pool: &str, role: &'static str) {
        let a = self.analytics.get().unwrap_or(analytics);
        let id = a.register_device(pool, &self.path(), role);
        // The number before the instance: I/O reported from the moment the instance
        // is set must carry this leaf's number, not another device's.
        self.analytics_id.store(id, Ordering::Relaxed);
        self.analytics.get_or_init(|| analytics.clone());
    }

    /// Reports this leaf's I/O under device number `id` from now on (a number the
    /// caller registered for the device about to take the leaf's place); no lock.
    pub fn set_analytics_id(&self, id: u32) {
        self.analytics_id.store(id, Ordering::Relaxed);
    }

    /// Runs one device I/O of `bytes` at `offset`, reporting it to analytics when
    /// attached (the clock is read only then).
    fn timed(
        &self,
        write: bool,
        bytes: usize,
        offset: u64,
        io: impl FnOnce() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let Some(a) = self.analytics.get() else {
            return io();
        };
        let device = self.analytics_id.load(Ordering::Relaxed);
        let started = Instant::now();
        let epoch = a.epoch();
        self.busy.start(epoch, started);
        let result = io();
        let at = Instant::now();
        self.busy.finish(epoch, at);
        a.record(Event::Io(IoEvent {
            device,
            write,
            bytes: bytes as u32,
            offset,
            latency_ns: at.saturating_duration_since(started).as_nanos() as u64,
            at,
        }));
        result
    }

    /// This leaf's analytics device number and the nanoseconds it has been busy
    /// since analytics was attached (None before).
    pub fn busy_ns(&self) -> Option<(u32, u64)> {
        let a = self.analytics.get()?;
        Some((
            self.analytics_id.load(Ordering::Relaxed),
            self.busy.read(a.epoch()),
        ))
    }

    pub fn device(&self) -> Option<Arc<dyn Device>> {
        self.device.read().unwrap().clone()
    }

    pub fn data_len(&self) -> u64 {
        self.data_len.load(Ordering::Relaxed)
    }

    pub fn guid(&self) -> u64 {
        self.identity.lock().unwrap().0
    }

    pub fn path(&self) -> String {
        self.identity.lock().unwrap().1.clone()
    }

    /// Puts a new device in this slot. It takes writes at once but serves no reads
    /// until `finish_resilver`, because it holds none of the existing blocks yet.
    ///
    /// The swap waits for every I/O in flight on the old device: each leaf I/O holds
    /// the device slot shared from its health check to its last health change, so none
    /// can write to the old device after the swap (a write the new device would miss)
    /// or fault the new device for an error of the old one.
    pub fn replace_device(&self, guid: u64, path: String, device: Arc<dyn Device>) {
        let (_, data_len) = label::data_area(device.size_bytes());
        let mut slot = self.device.write().unwrap();
        *self.identity.lock().unwrap() = (guid, path);
        self.head
            .rotational
            .store(device.rotational(), Ordering::Relaxed);
        *slot = Some(device);
        self.data_len.store(data_len, Ordering::Relaxed);
        self.clear_counters();
        self.set_health(Health::Resilvering);
        drop(slot);
    }

    pub fn finish_resilver(&self) {
        let mut h = self.health.lock().unwrap();
        if *h == Health::Resilvering {
            *h = Health::Online;
        }
    }

    pub fn health(&self) -> Health {
        *self.health.lock().unwrap()
    }

    pub fn set_health(&self, health: Health) {
        let old = std::mem::replace(&mut *self.health.lock().unwrap(), health);
        if old != health {
            crate::sim_device::history::event(|| {
                format!("leaf {} {old:?} -> {health:?}", self.path())
            });
        }
    }

    pub fn io_mode(&self) -> Option<crate::device::IoMode> {
        self.device().map(|d| d.io_mode())
    }

    pub fn is_usable(&self) -> bool {
        self.health() == Health::Online && self.device().is_some()
    }

    pub fn counters(&self) -> LeafCountersSnapshot {
        let c = &self.counters;
        LeafCountersSnapshot {
            read_ops: c.read_ops.load(Ordering::Relaxed),
            write_ops: c.write_ops.load(Ordering::Relaxed),
            read_bytes: c.read_bytes.load(Ordering::Relaxed),
            write_bytes: c.write_bytes.load(Ordering::Relaxed),
            read_errors: c.read_errors.load(Ordering::Relaxed),
            write_errors: c.write_errors.load(Ordering::Relaxed),
            cksum_errors: c.cksum_errors.load(Ordering::Relaxed),
            repaired_bytes: c.repaired_bytes.load(Ordering::Relaxed),
        }
    }

    pub fn clear_counters(&self) {
        let c = &self.counters;
        for a in [
            &c.read_errors,
            &c.write_errors,
            &c.cksum_errors,
            &c.repaired_bytes,
        ] {
            a.store(0, Ordering::Relaxed);
        }
    }

    /// Reads from the data area outside any vdev layout (the intent log's ring lives in
    /// a region of the leaf that the layout has handed over whole). False on failure.
    pub fn read_direct(&self, offset: u64, buf: &mut [u8]) -> bool {
        self.read(offset, buf)
    }

    /// Writes into the data area outside any vdev layout; see `read_direct`.
    pub fn write_direct(&self, offset: u64, data: &[u8]) -> bool {
        self.write(offset, data)
    }

    /// `Device::preallocate` for `[offset, offset + len)` of the data area, which
    /// nothing may write meanwhile. Setup, not traffic: not counted in the I/O
    /// statistics.
    pub fn preallocate(&self, offset: u64, len: u64) -> std::io::Result<()> {
        assert!(
            offset + len <= self.data_len(),
            "preallocation past the data area"
        );
        match self.device() {
            Some(dev) => dev.preallocate(self.data_start + offset, len),
            None => Ok(()),
        }
    }

    /// Whether this leaf's device has a head that seeks (`Device::rotational`).
    pub fn is_rotational(&self) -> bool {
        self.head.rotational.load(Ordering::Relaxed)
    }

    /// What reading at `offset` from this leaf would cost against its other mirror
    /// sides, in bytes: its bytes in flight, plus a seek's worth unless the read
    /// continues the last I/O issued (`HeadHint::cost`). Lower is better.
    pub fn read_cost(&self, offset: u64) -> u64 {
        self.head.cost(offset)
    }

    /// Sets how many bytes this leaf has queued (tests of side choice).
    #[cfg(test)]
    pub(crate) fn pretend_queued(&self, bytes: u64) {
        self.head.queued_bytes.store(bytes, Ordering::Relaxed);
    }

    pub(crate) fn read(&self, offset: u64, buf: &mut [u8]) -> bool {
        self.read_vectored(offset, &mut [buf])
    }

    /// Reads adjacent pieces as one I/O, straight into their buffers.
    pub(crate) fn read_vectored(&self, offset: u64, bufs: &mut [&mut [u8]]) -> bool {
        // Held to the end: see `replace_device`.
        let slot = self.device.read().unwrap();
        let Some(dev) = slot.as_ref() else {
            return false;
        };
        if self.health() != Health::Online {
            return false;
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        assert!(
            offset + total as u64 <= self.data_len(),
            "read past data area"
        );
        self.counters.read_ops.fetch_add(1, Ordering::Relaxed);
        self.head.issue(offset, total as u64);
        let result = self.timed(false, total, offset, || match bufs {
            [one] => dev.read_at(self.data_start + offset, one),
            _ => dev.read_vectored_at(self.data_start + offset, bufs),
        });
        self.head.done(total as u64);
        match result {
            Ok(()) => {
                self.counters
                    .read_bytes
                    .fetch_add(total as u64, Ordering::Relaxed);
                true
            }
            Err(e) => {
                let n = self.counters.read_errors.fetch_add(1, Ordering::Relaxed) + 1;
                if n >= LEAF_ERROR_LIMIT {
                    crate::sim_device::history::event(|| {
                        format!("leaf {}: read error {n} at {offset}: {e}", self.path())
                    });
                    self.set_health(Health::Faulted);
                }
                false
            }
        }
    }

    pub(crate) fn write(&self, offset: u64, data: &[u8]) -> bool {
        self.write_vectored(offset, &[data])
    }

    /// Writes adjacent pieces as one I/O. A failed write faults the leaf: what it holds
    /// may now be stale.
    pub(crate) fn write_vectored(&self, offset: u64, bufs: &[&[u8]]) -> bool {
        // Held to the end: see `replace_device`.
        let slot = self.device.read().unwrap();
        let Some(dev) = slot.as_ref() else {
            crate::sim_device::history::event(|| {
                format!("leaf {} skips a write at {offset}: no device", self.path())
            });
            return false;
        };
        if !matches!(self.health(), Health::Online | Health::Resilvering) {
            crate::sim_device::history::event(|| {
                format!(
                    "leaf {} skips a write at {offset}: {:?}",
                    self.path(),
                    self.health()
                )
            });
            return false;
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        assert!(
            offset + total as u64 <= self.data_len(),
            "write past data area"
        );
        self.counters.write_ops.fetch_add(1, Ordering::Relaxed);
        self.head.issue(offset, total as u64);
        let result = self.timed(true, total, offset, || match bufs {
            [one] => dev.write_at(self.data_start + offset, one),
            _ => dev.write_vectored_at(self.data_start + offset, bufs),
        });
        self.head.done(total as u64);
        match result {
            Ok(()) => {
                self.counters
                    .write_bytes
                    .fetch_add(total as u64, Ordering::Relaxed);
                true
            }
            Err(e) => {
                crate::sim_device::history::event(|| {
                    format!(
                        "leaf {}: write of {total} at {offset} failed: {e}",
                        self.path()
                    )
                });
                self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                self.set_health(Health::Faulted);
                false
            }
        }
    }

    pub(crate) fn repair(&self, offset: u64, data: &[u8]) {
        if self.write(offset, data) {
            self.counters
                .repaired_bytes
                .fetch_add(data.len() as u64, Ordering::Relaxed);
        }
    }

    pub(crate) fn count_cksum(&self) {
        self.counters.cksum_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Flush the device; a failure faults the leaf.
    pub fn flush(&self) -> bool {
        // Held to the end: see `replace_device`.
        let slot = self.device.read().unwrap();
        let Some(dev) = slot.as_ref() else {
            return false;
        };
        if !matches!(self.health(), Health::Online | Health::Resilvering) {
            return false;
        }
        match dev.flush() {
            Ok(()) => true,
            Err(e) => {
                crate::sim_device::history::event(|| {
                    format!("leaf {}: flush failed: {e}", self.path())
                });
                self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                self.set_health(Health::Faulted);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim_device::SimDevice;
    use crate::tree::{Layout, TopVdev};

    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    /// A dying disk whose writes hang until released, then fail.
    #[derive(Debug)]
    struct HangingDisk {
        inner: Arc<SimDevice>,
        started: std::sync::mpsc::SyncSender<()>,
        release: Mutex<std::sync::mpsc::Receiver<()>>,
    }

    impl Device for HangingDisk {
        fn size_bytes(&self) -> u64 {
            self.inner.size_bytes()
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
            self.inner.read_at(offset, buf)
        }
        fn write_at(&self, _offset: u64, _buf: &[u8]) -> std::io::Result<()> {
            let _ = self.started.send(());
            let _ = self.release.lock().unwrap().recv();
            Err(std::io::Error::other("the disk died under the write"))
        }
        fn flush(&self) -> std::io::Result<()> {
            self.inner.flush()
        }
        fn io_mode(&self) -> crate::device::IoMode {
            crate::device::IoMode::Memory
        }
        fn describe(&self) -> String {
            "hanging disk".into()
        }
    }

    /// A write still in flight on a dying disk when the disk is replaced must neither
    /// land after the swap nor, failing, fault the new disk: a faulted replacement takes
    /// no more writes, while everything above counts it as whole.
    #[test]
    fn an_io_in_flight_on_the_old_disk_never_touches_its_replacement() {
        let (started_tx, started_rx) = std::sync::mpsc::sync_channel(1);
        let (release_tx, release_rx) = std::sync::mpsc::channel();
        let dying = Arc::new(HangingDisk {
            inner: SimDevice::new(label::MIN_DEVICE_BYTES, 1),
            started: started_tx,
            release: Mutex::new(release_rx),
        });
        let other = SimDevice::new(label::MIN_DEVICE_BYTES, 2);
        let leaves = vec![
            Arc::new(Leaf::new(1, "dying".into(), dying)),
            Arc::new(Leaf::new(2, "other".into(), other)),
        ];
        let top = Arc::new(TopVdev::new(0, Layout::Mirror, leaves));
        let replacement = SimDevice::new(label::MIN_DEVICE_BYTES, 3);

        let writer = {
            let top = top.clone();
            std::thread::spawn(move || top.write(0, &pattern(1, 4096)))
        };
        started_rx.recv().unwrap();
        let (swapped_tx, swapped_rx) = std::sync::mpsc::channel();
        let swapper = {
            let top = top.clone();
            let replacement = replacement.clone();
            std::thread::spawn(move || {
                top.leaves[0].replace_device(3, "replacement".into(), replacement);
                let _ = swapped_tx.send(());
            })
        };
        // The swap must wait for the write on the old disk: had it finished while that
        // write hangs, the write's failure would land on the new disk.
        let swapped_during_the_write = swapped_rx
            .recv_timeout(std::time::Duration::from_millis(300))
            .is_ok();
        release_tx.send(()).unwrap();
        writer
            .join()
            .unwrap()
            .expect("the other side took the write");
        swapper.join().unwrap();
        assert_eq!(
            top.leaves[0].health(),
            Health::Resilvering,
            "the old disk's failure landed on its replacement"
        );
        assert!(
            !swapped_during_the_write,
            "the disk was swapped under a write in flight on it"
        );

        // The replacement takes the next write.
        top.write(8192, &pattern(2, 4096)).unwrap();
        let mut back = vec![0u8; 4096];
        replacement
            .read_at(label::DATA_AREA_START + 8192, &mut back)
            .unwrap();
        assert_eq!(back, pattern(2, 4096));
    }
}
