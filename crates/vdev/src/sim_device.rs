//! The simulated device: an in-memory, seeded, deterministic disk for crash, fault and
//! slow-disk tests.
//!
//! Content model: `durable` sectors (what survives power loss), the list of writes since
//! the last flush, and `current` sectors (what reads see). `flush` moves the unflushed
//! writes into `durable`. `restart` models power loss and reboot: each unflushed write
//! is kept, dropped or torn (some of its sectors land) according to a `CrashPolicy`
//! and the device's seed; the old handle stays dead and a new one is returned.
//!
//! Storage is sparse (sectors that were never written read as zeros and take no memory)
//! so thousands of crash runs over 64 MiB devices stay cheap.
//!
//! A `CrashClock` shared by the devices of one simulated machine counts their write and
//! flush operations; when it fires, that operation and every later one fails on every
//! device sharing it, and the triggering write is not applied.

use crate::device::{check_io, Device, IoMode, SECTOR_SIZE};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// SplitMix64: tiny, seedable, good enough for fault choices.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Debug)]
pub struct CrashClock {
    ops: AtomicU64,
    target: AtomicU64,
    crashed: AtomicBool,
}

impl CrashClock {
    pub fn new() -> Arc<CrashClock> {
        Arc::new(CrashClock {
            ops: AtomicU64::new(0),
            target: AtomicU64::new(u64::MAX),
            crashed: AtomicBool::new(false),
        })
    }
    /// Crash when `after_ops` more write/flush operations have been issued.
    pub fn arm(&self, after_ops: u64) {
        self.target.store(
            self.ops.load(Ordering::SeqCst) + after_ops.max(1),
            Ordering::SeqCst,
        );
    }
    /// The power goes now: every later operation on every device of this clock fails.
    /// A power cut between operations takes this before the devices restart one by one,
    /// so nothing still running can write to a device not yet restarted after another
    /// was (a cut is one instant for all devices).
    pub fn crash_now(&self) {
        self.crashed.store(true, Ordering::SeqCst);
    }
    pub fn disarm(&self) {
        self.target.store(u64::MAX, Ordering::SeqCst);
    }
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::SeqCst)
    }
    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }
    /// Counts one operation; false if the machine has crashed (now or before).
    fn tick(&self) -> bool {
        if self.crashed() {
            return false;
        }
        let n = self.ops.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= self.target.load(Ordering::SeqCst) {
            self.crashed.store(true, Ordering::SeqCst);
            return false;
        }
        true
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPolicy {
    KeepAll,
    DropAll,
    /// Each unflushed write independently kept, dropped or torn.
    Random,
    /// What `Random` does, and what a disk losing power in the middle of writing can
    /// leave besides: a write whose sectors each hold the new data, the old, seeded
    /// garbage, or a tear inside the sector (a 512-byte-aligned prefix of the new data
    /// over the old data or over garbage).
    Hostile,
    /// Each unflushed write kept, dropped, or landed whole at a wrong offset (1 to 16
    /// sectors away, inside the device), as a disk that misdirects a write in its
    /// cache when the power goes.
    Misdirected,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Reads overlapping the range fail `times` times (`u32::MAX` = forever).
    ReadError {
        offset: u64,
        len: u64,
        times: u32,
    },
    WriteError {
        offset: u64,
        len: u64,
        times: u32,
    },
    /// Flip one bit of current and durable content, silently.
    BitFlip {
        offset: u64,
        bit: u8,
    },
    /// The next write lands at `offset + delta_bytes` and reports success.
    MisdirectNextWrite {
        delta_bytes: i64,
    },
    /// Every operation fails until `revive`.
    Dead,
    /// Flushes report success and make nothing durable (a device whose cache ignores
    /// flushes): what it was told to flush stays subject to the crash policy.
    LyingFlush,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeedLimit {
    pub bytes_per_sec: Option<u64>,
    pub iops: Option<u64>,
    /// Charged when an operation does not start where the previous one ended.
    pub seek: Duration,
}

impl SpeedLimit {
    /// Roughly a 7200 rpm disk: 160 MB/s streaming, 8.5 ms per random access.
    pub fn hdd_7200() -> SpeedLimit {
        SpeedLimit {
            bytes_per_sec: Some(160_000_000),
            iops: None,
            seek: Duration::from_micros(8500),
        }
    }

    /// How long a disk head takes for one I/O of `len` bytes: a seek unless it starts
    /// where the previous one ended, plus the transfer; at least `1/iops` when set.
    pub fn service_time(&self, sequential: bool, len: usize) -> Duration {
        let mut t = Duration::ZERO;
        if !sequential {
            t += self.seek;
        }
        if let Some(bw) = self.bytes_per_sec {
            t += Duration::from_secs_f64(len as f64 / bw as f64);
        }
        if let Some(iops) = self.iops {
            t = t.max(Duration::from_secs_f64(1.0 / iops as f64));
        }
        t
    }

    /// `72MB/s,90iops`: streaming bandwidth (MB = 10^6 bytes) and random IOPS, which
    /// become a seek of `1/iops` charged to every I/O that does not follow the last
    /// one (so small random I/Os come out just under `iops`). `seek=8.5ms` sets the
    /// seek instead.
    pub fn parse(spec: &str) -> Result<SpeedLimit, String> {
        let mut speed = SpeedLimit {
            bytes_per_sec: None,
            iops: None,
            seek: Duration::ZERO,
        };
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let lower = part.to_ascii_lowercase();
            let number = |s: &str| -> Result<f64, String> {
                match s.trim().parse::<f64>() {
                    Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
                    _ => Err(format!("'{part}': expected a positive number")),
                }
            };
            if let Some(v) = lower.strip_suffix("mb/s") {
                speed.bytes_per_sec = Some((number(v)? * 1e6) as u64);
            } else if let Some(v) = lower.strip_suffix("iops") {
                speed.seek = Duration::from_secs_f64(1.0 / number(v)?);
            } else if let Some(v) = lower
                .strip_prefix("seek=")
                .and_then(|v| v.strip_suffix("ms"))
            {
                speed.seek = Duration::from_secs_f64(number(v)? / 1000.0);
            } else {
                return Err(format!(
                    "'{part}': a simulated disk is like 72MB/s,90iops (or seek=8.5ms)"
                ));
            }
        }
        if speed.bytes_per_sec.is_none() && speed.seek.is_zero() {
            return Err("a simulated disk needs a bandwidth (72MB/s) or IOPS (90iops)".into());
        }
        Ok(speed)
    }
}

impl std::fmt::Display for SpeedLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(bw) = self.bytes_per_sec {
            write!(f, "{} MB/s, ", bw as f64 / 1e6)?;
        }
        write!(f, "{:.2} ms seek", self.seek.as_secs_f64() * 1000.0)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub failed_ops: u64,
    pub simulated_busy: Duration,
}

/// Sector contents, shared between the current and the durable view and between a
/// device and the one a restart returns: a restart copies pointers, not data, and a
/// bit flip copies the one sector it changes (`Arc::make_mut`).
type Sectors = HashMap<u64, Arc<[u8; SECTOR_SIZE]>>;

/// What happened to each sector of each simulated device (across restarts), for
/// finding out after a failure who last wrote a bad sector and whether a power cut
/// mangled it. Off unless `record_history(true)`; the last few events a sector.
pub mod history {
    use std::collections::{HashMap, VecDeque};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Mutex;

    static ON: AtomicBool = AtomicBool::new(false);
    static SEQ: AtomicU64 = AtomicU64::new(0);
    type Log = HashMap<(u64, u64), VecDeque<String>>;
    static LOG: Mutex<Option<Log>> = Mutex::new(None);
    const KEEP: usize = 12;

    pub fn record_history(on: bool) {
        ON.store(on, Ordering::SeqCst);
    }

    pub(super) fn on() -> bool {
        ON.load(Ordering::Relaxed)
    }

    /// `what`, numbered in the order of all events, with the thread that did it.
    fn stamped(what: &str) -> String {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let thread = std::thread::current();
        format!("#{seq} {what} ({})", thread.name().unwrap_or("unnamed"))
    }

    pub(super) fn note(lineage: u64, first_sector: u64, sectors: u64, what: &str) {
        if !on() {
            return;
        }
        let line = stamped(what);
        let mut log = LOG.lock().unwrap();
        let log = log.get_or_insert_with(HashMap::new);
        for s in first_sector..first_sector + sectors {
            let e = log.entry((lineage, s)).or_default();
            if e.len() == KEEP {
                e.pop_front();
            }
            e.push_back(line.clone());
        }
    }

    static EVENTS: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

    /// An event not tied to sectors (a leaf's health changing), kept in order.
    pub fn event(what: impl FnOnce() -> String) {
        if !on() {
            return;
        }
        let line = stamped(&what());
        let mut events = EVENTS.lock().unwrap();
        if events.len() == 2000 {
            events.pop_front();
        }
        events.push_back(line);
    }

    /// The last events (`event`), oldest first.
    pub fn events() -> Vec<String> {
        EVENTS.lock().unwrap().iter().cloned().collect()
    }

    /// The events of sectors `[first, first + n)` of the device of `lineage`.
    pub fn of(lineage: u64, first: u64, n: u64) -> Vec<(u64, Vec<String>)> {
        let log = LOG.lock().unwrap();
        let Some(log) = log.as_ref() else {
            return Vec::new();
        };
        (first..first + n)
            .filter_map(|s| {
                log.get(&(lineage, s))
                    .map(|e| (s, e.iter().cloned().collect()))
            })
            .collect()
    }
}

#[derive(Debug)]
struct State {
    current: Sectors,
    durable: Sectors,
    unflushed: Vec<(u64, Vec<u8>)>,
    rng: SplitMix,
    dead: bool,
    defunct: bool,
    read_faults: Vec<(u64, u64, u32)>,
    write_faults: Vec<(u64, u64, u32)>,
    misdirect: Option<i64>,
    lying_flush: bool,
    speed: Option<SpeedLimit>,
    head: u64,
    stats: SimStats,
}

#[derive(Debug)]
pub struct SimDevice {
    id: u64,
    /// The same across restarts of one device (`history`).
    lineage: u64,
    size: u64,

    clock: Option<Arc<CrashClock>>,
    state: Mutex<State>,
    /// Reads wait here while held (`hold_reads`): (held, reads waiting).
    read_gate: Mutex<(bool, usize)>,
    read_gate_opened: std::sync::Condvar,
}

fn sim_error(what: &str) -> io::Error {
    io::Error::other(what.to_string())
}

fn overlaps(a_off: u64, a_len: u64, b_off: u64, b_len: u64) -> bool {
    a_off < b_off + b_len && b_off < a_off + a_len
}

fn put(map: &mut Sectors, offset: u64, data: &[u8]) {
    for (i, chunk) in data.chunks(SECTOR_SIZE).enumerate() {
        let sector = offset / SECTOR_SIZE as u64 + i as u64;
        if chunk.iter().all(|&b| b == 0) {
            map.remove(&sector);
        } else {
            let mut s = [0u8; SECTOR_SIZE];
            assert_eq!(
                chunk.len(),
                SECTOR_SIZE,
                "simulated writes are whole sectors"
            );
            s.copy_from_slice(chunk);
            map.insert(sector, Arc::new(s));
        }
    }
}

fn fill_garbage(rng: &mut SplitMix, buf: &mut [u8]) {
    for chunk in buf.chunks_mut(8) {
        let x = rng.next().to_le_bytes();
        chunk.copy_from_slice(&x[..chunk.len()]);
    }
}

fn get(map: &Sectors, offset: u64, buf: &mut [u8]) {
    for (i, chunk) in buf.chunks_mut(SECTOR_SIZE).enumerate() {
        let sector = offset / SECTOR_SIZE as u64 + i as u64;
        match map.get(&sector) {
            Some(s) => chunk.copy_from_slice(&s[..]),
            None => chunk.fill(0),
        }
    }
}

fn flip(map: &mut Sectors, offset: u64, bit: u8) {
    let sector = offset / SECTOR_SIZE as u64;
    let s = map
        .entry(sector)
        .or_insert_with(|| Arc::new([0u8; SECTOR_SIZE]));
    let s = Arc::make_mut(s);
    s[(offset % SECTOR_SIZE as u64) as usize] ^= 1 << (bit % 8);
}

impl SimDevice {
    pub fn new(size_bytes: u64, seed: u64) -> Arc<SimDevice> {
        Self::build(size_bytes, seed, seed, None, Sectors::new())
    }

    pub fn with_clock(size_bytes: u64, seed: u64, clock: Arc<CrashClock>) -> Arc<SimDevice> {
        Self::build(size_bytes, seed, seed, Some(clock), Sectors::new())
    }

    /// The identity `history` knows this device (and its restarts) by.
    pub fn lineage(&self) -> u64 {
        self.lineage
    }

    fn build(
        size_bytes: u64,
        seed: u64,
        lineage: u64,
        clock: Option<Arc<CrashClock>>,
        content: Sectors,
    ) -> Arc<SimDevice> {
        assert!(
            size_bytes.is_multiple_of(SECTOR_SIZE as u64),
            "simulated size must be sector aligned"
        );
        Arc::new(SimDevice {
            id: seed,
            lineage,
            size: size_bytes,

            clock,
            read_gate: Mutex::new((false, 0)),
            read_gate_opened: std::sync::Condvar::new(),
            state: Mutex::new(State {
                current: content.clone(),
                durable: content,
                unflushed: Vec::new(),
                rng: SplitMix(seed ^ 0x5151_5151),
                dead: false,
                defunct: false,
                read_faults: Vec::new(),
                write_faults: Vec::new(),
                misdirect: None,
                lying_flush: false,
                speed: None,
                head: 0,
                stats: SimStats::default(),
            }),
        })
    }

    /// Power loss now, then reboot: returns the device as it comes back.
    pub fn restart(&self, policy: CrashPolicy) -> Arc<SimDevice> {
        self.restart_with_clock(policy, None)
    }

    pub fn restart_with_clock(
        &self,
        policy: CrashPolicy,
        clock: Option<Arc<CrashClock>>,
    ) -> Arc<SimDevice> {
        let mut st = self.state.lock().unwrap();
        st.defunct = true;
        let mut durable = st.durable.clone();
        let unflushed = std::mem::take(&mut st.unflushed);
        for (offset, data) in unflushed {
            let choice = match policy {
                CrashPolicy::KeepAll => 0,
                CrashPolicy::DropAll => 1,
                CrashPolicy::Random => st.rng.below(3),
                CrashPolicy::Hostile => st.rng.below(4),
                CrashPolicy::Misdirected => [0, 1, 4][st.rng.below(3) as usize],
            };
            let sectors = (data.len() / SECTOR_SIZE) as u64;
            let first = offset / SECTOR_SIZE as u64;
            history::note(
                self.lineage,
                first,
                sectors,
                &format!("power cut: unflushed write {policy:?} choice {choice}"),
            );
            match choice {
                0 => put(&mut durable, offset, &data),
                1 => {}
                4 => {
                    let sectors = 1 + st.rng.below(16);
                    let delta = sectors * SECTOR_SIZE as u64;
                    let last = self.size - data.len() as u64;
                    let to = if st.rng.below(2) == 0 && offset >= delta {
                        offset - delta
                    } else {
                        (offset + delta).min(last)
                    };
                    put(&mut durable, to, &data);
                }
                3 => {
                    for (i, new) in data.chunks(SECTOR_SIZE).enumerate() {
                        let at = offset + (i * SECTOR_SIZE) as u64;
                        let mut sector = vec![0u8; SECTOR_SIZE];
                        get(&durable, at, &mut sector);
                        let cut = 512 * (1 + st.rng.below(7) as usize);
                        match st.rng.below(5) {
                            0 => sector.copy_from_slice(new),
                            1 => continue,
                            2 => fill_garbage(&mut st.rng, &mut sector),
                            3 => sector[..cut].copy_from_slice(&new[..cut]),
                            _ => {
                                fill_garbage(&mut st.rng, &mut sector);
                                sector[..cut].copy_from_slice(&new[..cut]);
                            }
                        }
                        put(&mut durable, at, &sector);
                    }
                }
                _ => {
                    for (i, chunk) in data.chunks(SECTOR_SIZE).enumerate() {
                        if st.rng.below(2) == 0 {
                            put(&mut durable, offset + (i * SECTOR_SIZE) as u64, chunk);
                        }
                    }
                }
            }
        }
        let seed = st.rng.next();
        drop(st);
        Self::build(self.size, seed, self.lineage, clock, durable)
    }

    pub fn inject(&self, fault: Fault) {
        let mut st = self.state.lock().unwrap();
        match fault {
            Fault::ReadError { offset, len, times } => st.read_faults.push((offset, len, times)),
            Fault::WriteError { offset, len, times } => st.write_faults.push((offset, len, times)),
            Fault::BitFlip { offset, bit } => {
                assert!(offset < self.size);
                flip(&mut st.current, offset, bit);
                flip(&mut st.durable, offset, bit);
            }
            Fault::MisdirectNextWrite { delta_bytes } => st.misdirect = Some(delta_bytes),
            Fault::Dead => st.dead = true,
            Fault::LyingFlush => st.lying_flush = true,
        }
    }

    pub fn revive(&self) {
        let mut st = self.state.lock().unwrap();
        st.dead = false;
    }

    /// Overwrites `[offset, offset+len)` with seeded random bytes, silently.
    pub fn corrupt_range(&self, offset: u64, len: u64, seed: u64) {
        assert!(
            offset.is_multiple_of(SECTOR_SIZE as u64) && len.is_multiple_of(SECTOR_SIZE as u64)
        );
        assert!(offset + len <= self.size);
        let mut rng = SplitMix(seed);
        let mut data = vec![0u8; len as usize];
        for chunk in data.chunks_mut(8) {
            let r = rng.next().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
        let mut st = self.state.lock().unwrap();
        put(&mut st.current, offset, &data);
        put(&mut st.durable, offset, &data);
        history::note(
            self.lineage,
            offset / SECTOR_SIZE as u64,
            len / SECTOR_SIZE as u64,
            "corrupted",
        );
    }

    /// While held, every read waits before it starts (tests that must see which reads
    /// a pool issues while one is outstanding); releasing lets them all go.
    pub fn hold_reads(&self, held: bool) {
        self.read_gate.lock().unwrap().0 = held;
        if !held {
            self.read_gate_opened.notify_all();
        }
    }

    /// Reads waiting at the gate of `hold_reads`.
    pub fn held_reads(&self) -> usize {
        self.read_gate.lock().unwrap().1
    }

    fn pass_read_gate(&self) {
        let mut gate = self.read_gate.lock().unwrap();
        if gate.0 {
            gate.1 += 1;
            while gate.0 {
                gate = self.read_gate_opened.wait(gate).unwrap();
            }
            gate.1 -= 1;
        }
    }

    pub fn set_speed(&self, speed: Option<SpeedLimit>) {
        self.state.lock().unwrap().speed = speed;
    }

    pub fn stats(&self) -> SimStats {
        self.state.lock().unwrap().stats
    }

    fn alive(&self, st: &mut State, counts_as_op: bool) -> io::Result<()> {
        if st.defunct {
            st.stats.failed_ops += 1;
            return Err(sim_error(
                "simulated device was restarted; this handle is gone",
            ));
        }
        if st.dead {
            st.stats.failed_ops += 1;
            return Err(sim_error("simulated device is dead"));
        }
        if let Some(c) = &self.clock {
            let ok = if counts_as_op { c.tick() } else { !c.crashed() };
            if !ok {
                st.stats.failed_ops += 1;
                return Err(sim_error("simulated crash"));
            }
        }
        Ok(())
    }

    /// Charges service time like a disk head would, and sleeps it.
    fn service(&self, st: &mut State, offset: u64, len: usize) -> Option<Duration> {
        let speed = st.speed?;
        let t = speed.service_time(offset == st.head, len);
        st.head = offset + len as u64;
        st.stats.simulated_busy += t;
        Some(t)
    }

    fn take_fault(faults: &mut [(u64, u64, u32)], offset: u64, len: u64) -> bool {
        for f in faults.iter_mut() {
            if f.2 > 0 && overlaps(offset, len, f.0, f.1) {
                if f.2 != u32::MAX {
                    f.2 -= 1;
                }
                return true;
            }
        }
        false
    }
}

impl Device for SimDevice {
    fn size_bytes(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_io(offset, buf.len(), self.size)?;
        self.pass_read_gate();
        let mut st = self.state.lock().unwrap();
        self.alive(&mut st, false)?;
        let sleep = self.service(&mut st, offset, buf.len());
        if Self::take_fault(&mut st.read_faults, offset, buf.len() as u64) {
            st.stats.failed_ops += 1;
            return Err(sim_error("simulated read error"));
        }
        get(&st.current, offset, buf);
        st.stats.reads += 1;
        st.stats.bytes_read += buf.len() as u64;
        drop(st);
        if let Some(t) = sleep {
            std::thread::sleep(t);
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_io(offset, buf.len(), self.size)?;
        let mut st = self.state.lock().unwrap();
        self.alive(&mut st, true)?;
        let sleep = self.service(&mut st, offset, buf.len());
        if Self::take_fault(&mut st.write_faults, offset, buf.len() as u64) {
            st.stats.failed_ops += 1;
            return Err(sim_error("simulated write error"));
        }
        let mut target = offset;
        if let Some(delta) = st.misdirect.take() {
            let t = offset as i64 + delta;
            if t < 0
                || !(t as u64).is_multiple_of(SECTOR_SIZE as u64)
                || t as u64 + buf.len() as u64 > self.size
            {
                st.stats.writes += 1;
                return Ok(()); // lost entirely, yet reported done
            }
            target = t as u64;
        }
        put(&mut st.current, target, buf);
        st.unflushed.push((target, buf.to_vec()));
        if history::on() {
            let head: [u8; 8] = buf[..8].try_into().unwrap();
            history::note(
                self.lineage,
                target / SECTOR_SIZE as u64,
                (buf.len() / SECTOR_SIZE) as u64,
                &format!(
                    "write of {} at {target}{} starting {head:02x?}",
                    buf.len(),
                    if target != offset {
                        " (misdirected)"
                    } else {
                        ""
                    }
                ),
            );
        }
        st.stats.writes += 1;
        st.stats.bytes_written += buf.len() as u64;
        drop(st);
        if let Some(t) = sleep {
            std::thread::sleep(t);
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut st = self.state.lock().unwrap();
        self.alive(&mut st, true)?;
        st.stats.flushes += 1;
        if st.lying_flush {
            return Ok(());
        }
        let unflushed = std::mem::take(&mut st.unflushed);
        for (offset, data) in unflushed {
            put(&mut st.durable, offset, &data);
            history::note(
                self.lineage,
                offset / SECTOR_SIZE as u64,
                (data.len() / SECTOR_SIZE) as u64,
                "flushed",
            );
        }
        Ok(())
    }

    /// A simulated disk with a seek time set (`set_speed`) has a head.
    fn rotational(&self) -> bool {
        let st = self.state.lock().unwrap();
        st.speed.is_some_and(|s| !s.seek.is_zero())
    }

    fn io_mode(&self) -> IoMode {
        IoMode::Memory
    }

    fn describe(&self) -> String {
        format!("sim:{}", self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn pattern(b: u8) -> Vec<u8> {
        vec![b; SECTOR_SIZE * 2]
    }

    fn read(d: &SimDevice, off: u64) -> Vec<u8> {
        let mut v = vec![0u8; SECTOR_SIZE * 2];
        d.read_at(off, &mut v).unwrap();
        v
    }

    #[test]
    fn flushed_survive_unflushed_follow_policy() {
        for (policy, expect_second) in [(CrashPolicy::KeepAll, true), (CrashPolicy::DropAll, false)]
        {
            let d = SimDevice::new(4 * MB, 1);
            d.write_at(0, &pattern(1)).unwrap();
            d.flush().unwrap();
            d.write_at(8192, &pattern(2)).unwrap();
            assert_eq!(read(&d, 8192), pattern(2), "reads see unflushed writes");
            let after = d.restart(policy);
            assert_eq!(read(&after, 0), pattern(1));
            assert_eq!(read(&after, 8192) == pattern(2), expect_second);
            assert!(
                d.read_at(0, &mut [0u8; 4096]).is_err(),
                "old handle is dead"
            );
        }
    }

    #[test]
    fn random_policy_is_deterministic_and_tears() {
        let run = |seed| {
            let d = SimDevice::new(4 * MB, seed);
            for i in 0..64u64 {
                d.write_at(i * 8192, &pattern(i as u8 + 1)).unwrap();
            }
            let after = d.restart(CrashPolicy::Random);
            (0..64u64)
                .map(|i| {
                    let v = read(&after, i * 8192);
                    let first = v[0] != 0;
                    let second = v[SECTOR_SIZE] != 0;
                    (first, second)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(9), run(9));
        let outcome = run(9);
        assert!(outcome.iter().any(|&(a, b)| a != b), "some write torn");
        assert!(outcome.contains(&(true, true)));
        assert!(outcome.contains(&(false, false)));
    }

    #[test]
    fn hostile_policy_leaves_garbage_and_tears_inside_sectors() {
        // One unflushed write of 64 sectors over flushed ones: it is kept, dropped,
        // torn by sector or mangled; over the seeds that mangle it, some sector is
        // torn inside (new prefix, old suffix) and some holds bytes never written.
        let mangled = (1..64u64).any(|seed| {
            let d = SimDevice::new(4 * MB, seed);
            d.write_at(0, &vec![0xaa; 64 * SECTOR_SIZE]).unwrap();
            d.flush().unwrap();
            d.write_at(0, &vec![0xbb; 64 * SECTOR_SIZE]).unwrap();
            let after = d.restart(CrashPolicy::Hostile);
            let mut all = vec![0u8; 64 * SECTOR_SIZE];
            after.read_at(0, &mut all).unwrap();
            let torn = all
                .chunks(SECTOR_SIZE)
                .any(|s| s[0] == 0xbb && s[SECTOR_SIZE - 1] == 0xaa);
            let junk = all
                .chunks(SECTOR_SIZE)
                .any(|s| s.iter().any(|&b| b != 0xaa && b != 0xbb));
            torn && junk
        });
        assert!(mangled, "no seed left both a torn sector and garbage");
    }

    #[test]
    fn misdirected_policy_lands_writes_elsewhere() {
        let landed_elsewhere = (1..64u64).any(|seed| {
            let d = SimDevice::new(4 * MB, seed);
            let at = 64 * SECTOR_SIZE as u64;
            d.write_at(at, &pattern(7)).unwrap();
            let after = d.restart(CrashPolicy::Misdirected);
            let mut all = vec![0u8; 256 * SECTOR_SIZE];
            after.read_at(0, &mut all).unwrap();
            let here = all[at as usize] == 7;
            let sectors_with_it = all.chunks(SECTOR_SIZE).filter(|c| c[0] == 7).count();
            !here && sectors_with_it == 2
        });
        assert!(landed_elsewhere, "no seed misdirected the write");
    }

    #[test]
    fn clock_fires_at_exact_op_across_devices() {
        let clock = CrashClock::new();
        let a = SimDevice::with_clock(4 * MB, 1, clock.clone());
        let b = SimDevice::with_clock(4 * MB, 2, clock.clone());
        clock.arm(3);
        a.write_at(0, &pattern(1)).unwrap();
        b.write_at(0, &pattern(2)).unwrap();
        assert!(a.flush().is_err(), "third op crashes");
        assert!(clock.crashed());
        assert!(b.write_at(0, &pattern(3)).is_err());
        assert!(b.read_at(0, &mut vec![0u8; 4096]).is_err());
        let a2 = a.restart(CrashPolicy::DropAll);
        let b2 = b.restart(CrashPolicy::KeepAll);
        assert_eq!(read(&a2, 0), vec![0u8; 8192]);
        assert_eq!(read(&b2, 0), pattern(2));
    }

    #[test]
    fn faults_are_observable() {
        let d = SimDevice::new(4 * MB, 3);
        d.write_at(0, &pattern(7)).unwrap();
        d.inject(Fault::ReadError {
            offset: 0,
            len: 4096,
            times: 2,
        });
        assert!(d.read_at(0, &mut vec![0u8; 4096]).is_err());
        assert!(d.read_at(0, &mut vec![0u8; 4096]).is_err());
        assert_eq!(read(&d, 0), pattern(7));
        d.inject(Fault::BitFlip { offset: 5, bit: 1 });
        assert_eq!(read(&d, 0)[5], 7 ^ 2);
        d.inject(Fault::MisdirectNextWrite { delta_bytes: 65536 });
        d.write_at(16384, &pattern(9)).unwrap();
        assert_eq!(read(&d, 16384), vec![0u8; 8192]);
        assert_eq!(read(&d, 16384 + 65536), pattern(9));
        d.inject(Fault::WriteError {
            offset: 0,
            len: 4096,
            times: 1,
        });
        assert!(d.write_at(0, &pattern(1)).is_err());
        d.write_at(0, &pattern(1)).unwrap();
        d.inject(Fault::Dead);
        assert!(d.read_at(0, &mut vec![0u8; 4096]).is_err());
        assert!(d.flush().is_err());
        d.revive();
        assert_eq!(read(&d, 0), pattern(1));
        d.corrupt_range(0, 4096, 5);
        assert_ne!(read(&d, 0)[..4096], pattern(1)[..4096]);
        assert!(d.stats().failed_ops >= 5);
    }

    #[test]
    fn speed_limit_charges_seeks_and_transfer() {
        let d = SimDevice::new(4 * MB, 4);
        d.set_speed(Some(SpeedLimit {
            bytes_per_sec: Some(1_000_000_000),
            iops: None,
            seek: Duration::from_micros(100),
        }));
        d.write_at(0, &vec![1u8; 4096]).unwrap(); // starts at head 0: no seek
        d.write_at(4096, &vec![1u8; 4096]).unwrap(); // sequential
        let seq = d.stats().simulated_busy;
        d.write_at(MB, &vec![1u8; 4096]).unwrap(); // seek
        let busy = d.stats().simulated_busy;
        assert!(seq < Duration::from_micros(100));
        assert!(busy - seq >= Duration::from_micros(100));
    }
}
