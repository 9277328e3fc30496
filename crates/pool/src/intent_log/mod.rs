//! The intent log: changes made durable before their transaction group commits.
//!
//! Files: this one keeps the log itself (records waiting, group commit, chains started
//! and carried on, what a txg commit frees); `records.rs` the records and their
//! encoding; `ring.rs` the rings, the block format and reading a chain back.
//!
//! Every change a `Tx` makes (object created, data written, range freed, bonus set,
//! object set created...) is also kept in memory as a *record* tagged with its txg.
//! When somebody needs durability now (fsync, an O_SYNC write, `sync=always`), `commit`
//! writes every record not yet durable to a chain of self-checksummed log blocks and
//! flushes them; the txg writes the same changes to their final place later, and its
//! commit makes the records of that txg and older obsolete. Import reads the chain from
//! the uberblock's log header and replays the records newer than the committed txg, in
//! order, in one txg of its own.
//!
//! The log lives in a *ring*: on the log devices when the pool has usable ones, or else
//! in a log area reserved at pool creation on top-level vdev 0 (allocated in the space
//! log, so nothing else ever lands there; for RAID-Z a whole number of rows, so every
//! child owns the same contiguous range of its data area). Log blocks bypass the vdev
//! layout: each block is written whole to `nparity + 1` children (every side of a
//! mirror), so any one surviving copy replays. Creation and every import fill the holes
//! of the first `PREALLOCATE_MAX_BYTES` of each ring replica with zeros
//! (`Device::preallocate`; file devices only): a log write into a sparse file's hole
//! made its flush wait for the file system to allocate and journal the block (8K
//! commits on a file log device: 202 us into holes, 113-129 us over written blocks).
//! A hole already reads as zeros, so this never changes what a ring holds, and zeros
//! never parse as a log block, so they end a chain like never-written space.
//!
//! Large writes without log devices: the whole blocks of a write of `PLACE_MIN_BYTES`
//! or more are written to their final place (*placed*, see `Objset::place_blocks`) and
//! the log holds only their pointers, so the data goes to the disks once, not to the
//! log and again with the txg. The devices that took placed blocks are flushed before
//! any log block naming them is written. A placed block's space stays out of the space
//! log until the txg that syncs it adopts it; replay claims it. Placing costs a flush of
//! every device the blocks went to, so it is used only for commits that carry at least
//! `PLACE_BATCH_MIN_BYTES` of writes, where writing the data once saves more than the
//! flushes cost; smaller commits copy (measured: 128 KiB write+fsync on a raidz2 of 6
//! files, copying did about twice the rate of placing).
//!
//! Why records are written by reference: a write record keeps only (object, offset,
//! length) in memory; its bytes are read from the object when the record goes to the
//! log (ZFS's "need copy"). A later change to the same range may then be logged early,
//! which shows an unacknowledged write after a crash but never loses an acknowledged one.
//!
//! Invariants:
//! - Records reach the log in append order; a `Tx` appends all its records at once when
//!   it ends (still inside its txg), so a batch never splits a `Tx`. A batch may span
//!   several blocks; its last block carries the commit-end flag and replay takes only
//!   the records of complete commits, so it applies whole transactions. Records are in non-decreasing txg order because a txg quiesces
//!   only after every `Tx` of it ended.
//! - One writer at a time; a commit returns only when every record appended before it
//!   began is on stable storage (written and flushed on at least one replica) or in a
//!   committed txg. Concurrent commits share one log write (group commit).
//! - The ring never overwrites a block the durable header can still reach: the tail
//!   moves only after the uberblock naming the new start is durable.
//! - A block is accepted on replay only with the right magic, chain guid, sequence
//!   number and checksum; the chain ends at the first block that fails, which is exactly
//!   a block whose write was never acknowledged (blocks are acknowledged in order, after
//!   a flush). A failed log write falls back to a txg commit before anything else is
//!   logged, so an unreadable block never hides an acknowledged one behind it.
//!
//! Crash safety: log blocks are written only into ring space the durable header does not
//! reach; a crash at any instant leaves the committed txg plus a chain whose valid
//! prefix holds every acknowledged record. Replay commits everything in one txg, whose
//! uberblock also starts a fresh chain (new guid), so a crash during replay replays
//! again from the same state.
//!
//! Log block layout (little-endian, a multiple of 4 KiB, at most `LOG_BLOCK_MAX`):
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `SHOALZIL` |
//! | 8..12 | version u32 (2; 1 is read, each block then a whole commit) |
//! | 12..16 | block size in bytes u32 |
//! | 16..24 | chain guid u64 |
//! | 24..32 | sequence number in the chain u64 |
//! | 32..40 | payload bytes u64 |
//! | 40..48 | record count u64 |
//! | 48..56 | highest record txg u64 |
//! | 56..60 | flags u32: bit 0 = the last block of its commit |
//! | 60..64 | reserved, zero |
//! | 64..96 | blake3 of bytes 0..64 followed by the payload |
//! | 96.. | payload: records back to back; the rest of the block is zero |
//!
//! Record: type u8, 3 reserved bytes, record length u32 (header included), txg u64,
//! then by type (all integers little-endian): 1 create object set: id u64, name length
//! u16, name, properties length u32, properties; 2 set object set properties: id u64,
//! length u32, properties; 3 destroy object set: id u64; 4 create object: set u64,
//! object u64, type u8, checksum code u8, compression code u8, block size u32; 5 write:
//! set u64, object u64, offset u64, length u32, data; 6 free range: set u64, object u64,
//! offset u64, length u64; 7 free object: set u64, object u64; 8 set bonus: set u64,
//! object u64, has generation u8, generation u64, length u16, bonus; 9 grow block size:
//! set u64, object u64, block size u32; 10 write by pointer: set u64, object u64,
//! offset u64, block pointer.

use crate::blkptr::{BlockPointer, BLKPTR_SIZE};
use crate::checksum::ChecksumKind;
use crate::compress::Compression;
use crate::PoolError;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use vdev::{AlignedBuf, Leaf, SECTOR_SIZE};

pub const LOG_BLOCK_MAX: usize = 256 * 1024;
/// Write records carry at most this much data; longer writes become several records.
pub const WRITE_CHUNK_MAX: usize = 128 * 1024;
/// Without log devices, whole blocks of writes at least this long go to their final
/// place and the log holds only their pointers (ZFS's indirect writes): the data is
/// written once instead of to the log and again by the txg.
pub const PLACE_MIN_BYTES: u64 = 32 * 1024;
/// ...in commits whose writes add up to at least this much.
pub const PLACE_BATCH_MIN_BYTES: u64 = 1024 * 1024;
const POINTER_RECORD_BYTES: u64 = (RECORD_HEADER + 24 + BLKPTR_SIZE) as u64;
/// A ring must hold a few maximal blocks.
pub const RING_MIN_BYTES: u64 = 4 * LOG_BLOCK_MAX as u64;
/// The pool's own log area per child: 1/32 of the child, within these bounds.
pub const AREA_MAX_BYTES_PER_CHILD: u64 = 64 << 20;
/// How much of each ring replica is preallocated: all of a pool's log area, and the
/// first 4 GiB of a log device file, so that a pool with a large log file is created
/// in seconds. Past it, the ring's first lap writes into holes (slower flushes), and
/// every later lap over written blocks. (With a 1 GiB bound, 8K FILE_SYNC writes at
/// 8 streams on a 2 GiB log file fell from about 13,000 to 10,300 IOPS while the
/// ring crossed its second GiB.)
pub const PREALLOCATE_MAX_BYTES: u64 = 4 << 30;
const BLOCK_HEADER: usize = 96;
const RECORD_HEADER: usize = 16;
const MAGIC: &[u8; 8] = b"SHOALZIL";
/// Version 2 added the commit-end flag; version 1 blocks each count as a whole commit.
const VERSION: u32 = 2;
/// Header flag (bytes 56..60): the last block of its commit.
const FLAG_COMMIT_END: u32 = 1;

/// Where the chain named by a log header lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RingKind {
    /// No log area (a pool made before the intent log existed).
    #[default]
    None,
    /// The log area on top-level vdev 0.
    Pool,
    /// The log devices.
    LogDevices,
}

impl RingKind {
    pub fn code(self) -> u32 {
        match self {
            RingKind::None => 0,
            RingKind::Pool => 1,
            RingKind::LogDevices => 2,
        }
    }
    pub fn from_code(c: u32) -> Option<RingKind> {
        match c {
            0 => Some(RingKind::None),
            1 => Some(RingKind::Pool),
            2 => Some(RingKind::LogDevices),
            _ => None,
        }
    }
}

/// The part of the uberblock that finds the log (bytes 304..352, see `uberblock.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogHeader {
    pub guid: u64,
    /// Byte position in the ring of the first block that may hold live records.
    pub start: u64,
    pub seq: u64,
    pub kind: RingKind,
    /// The pool log area: logical offset and length on top-level vdev 0.
    pub area_offset: u64,
    pub area_len: u64,
}

mod records;
mod ring;

use records::encode_write;
pub use records::LogOp;
use ring::seal_block;
#[cfg(test)]
use ring::verify_block;
pub use ring::{read_chain, ChainRead, ReplicaJob, Ring};

/// The chain as the log knows it (`IntentLog::acknowledged_blocks`).
pub struct AcknowledgedChain {
    pub guid: u64,
    pub kind: RingKind,
    pub blocks: Vec<AcknowledgedBlock>,
}

/// A block the log wrote and flushed: its ring position, sequence number and highest
/// record txg.
#[derive(Debug, Clone, Copy)]
pub struct AcknowledgedBlock {
    pub pos: u64,
    pub seq: u64,
    pub max_txg: u64,
}

#[derive(Debug)]
struct Pending {
    id: u64,
    txg: u64,
    op: LogOp,
}

#[derive(Debug, Clone, Copy)]
struct LiveBlock {
    /// Virtual position: grows without wrapping; the ring position is `v % len`.
    v: u64,
    seq: u64,
    max_txg: u64,
}

#[derive(Debug, Default)]
struct LogState {
    pending: VecDeque<Pending>,
    next_id: u64,
    /// Every record with a smaller id is durable (in the log or in a committed txg).
    safe_upto: u64,
    /// The batch being written: (first record id, highest txg).
    writing: Option<(u64, u64)>,
    guid: u64,
    kind: RingKind,
    next_seq: u64,
    head_v: u64,
    tail_v: u64,
    live: VecDeque<LiveBlock>,
    replaying: bool,
    /// Committers waiting (the id their records end below, and the thread), in
    /// arrival order: woken one by one (`wake`), not all at once, so a batch's end
    /// wakes the committers it made durable and the one that writes next.
    waiters: Vec<(u64, std::thread::Thread)>,
}

impl LogState {
    /// Unparks every committer whose records are durable now and, when no batch is in
    /// flight, the first one still waiting, to write the next batch. Call after any
    /// change of `safe_upto` or `writing`.
    fn wake(&mut self) {
        let safe = self.safe_upto;
        let mut leader = self.writing.is_none();
        self.waiters.retain(|(target, thread)| {
            let go = *target <= safe || std::mem::take(&mut leader);
            if go {
                thread.unpark();
            }
            !go
        });
    }
}

/// Counters shown in pool status.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct IntentLogStats {
    /// "log devices", "pool", or "none".
    pub ring: String,
    pub ring_bytes: u64,
    pub commits: u64,
    pub blocks_written: u64,
    pub bytes_written: u64,
    /// Commits that became a txg commit (batch too large for the ring, or a log write
    /// failed).
    pub txg_fallbacks: u64,
    /// Whole blocks written to their final place and logged as pointers.
    pub blocks_placed: u64,
    pub records_replayed: u64,
    pub replay_failures: u64,
}

/// Ends `IntentLog::switch_rings`'s hold on the writer slot, also when it unwinds.
struct WriterRelease<'a>(&'a IntentLog);

impl Drop for WriterRelease<'_> {
    fn drop(&mut self) {
        let mut st = self.0.state.lock().unwrap();
        st.writing = None;
        st.wake();
        drop(st);
        self.0.cv.notify_all();
    }
}

/// What the pool needs from itself to write the log: reading object data and
/// committing a txg. Kept as a trait so this module does not reach into the pool.
pub trait LogSource {
    /// Current bytes of an object range; `None` if the object (or set) is gone.
    fn read_for_log(&self, os: u64, obj: u64, offset: u64, len: usize) -> Option<Vec<u8>>;
    /// Commits a txg holding every change made so far.
    fn commit_txg(&self) -> Result<(), PoolError>;
    /// For a write of txg `txg`: writes the whole blocks inside `[offset, offset+len)`
    /// that are still dirty in that (open) txg to their final place, and returns
    /// (offset, length, pointer) of each, in offset order. Empty when `txg` is no
    /// longer open or nothing qualifies.
    fn place_for_log(
        &self,
        os: u64,
        obj: u64,
        offset: u64,
        len: u64,
        txg: u64,
    ) -> Vec<(u64, u64, BlockPointer)>;
    /// Makes every block placed so far durable (before a log block names it).
    fn flush_placed(&self) -> bool;
}

#[derive(Debug)]
pub struct IntentLog {
    state: Mutex<LogState>,
    cv: Condvar,
    /// The pool's own ring and the log devices' ring (either may be unusable).
    pool_ring: Mutex<Option<Arc<Ring>>>,
    device_ring: Mutex<Option<Arc<Ring>>>,
    parallel: bool,
    stats: Mutex<IntentLogStats>,
}

impl IntentLog {
    pub fn new(device_ring: Option<Ring>, parallel: bool) -> IntentLog {
        IntentLog {
            state: Mutex::new(LogState::default()),
            cv: Condvar::new(),
            pool_ring: Mutex::new(None),
            device_ring: Mutex::new(device_ring.map(Arc::new)),
            parallel,
            stats: Mutex::new(IntentLogStats::default()),
        }
    }

    pub fn set_pool_ring(&self, ring: Option<Ring>) {
        *self.pool_ring.lock().unwrap() = ring.map(Arc::new);
    }

    /// Prepares the space of both rings for the log's small flushed writes (see
    /// `Device::preallocate`): at creation, and at import (pools made before rings
    /// were preallocated, and log areas reserved at import), before anything is
    /// logged. Nothing may write the rings meanwhile.
    pub fn preallocate_rings(&self) -> Result<(), String> {
        let pool_ring = self.pool_ring.lock().unwrap().clone();
        let device_ring = self.device_ring.lock().unwrap().clone();
        for ring in [device_ring, pool_ring].into_iter().flatten() {
            ring.preallocate()?;
        }
        Ok(())
    }

    pub fn ring(&self, kind: RingKind) -> Option<Arc<Ring>> {
        match kind {
            RingKind::None => None,
            RingKind::Pool => self.pool_ring.lock().unwrap().clone(),
            RingKind::LogDevices => self.device_ring.lock().unwrap().clone(),
        }
    }

    /// The ring new chains go to: the log devices if any is usable, else the pool's.
    fn preferred_ring(&self) -> Option<Arc<Ring>> {
        let device_ring = self.device_ring.lock().unwrap().clone();
        device_ring.filter(|r| r.usable()).or_else(|| {
            self.pool_ring
                .lock()
                .unwrap()
                .clone()
                .filter(|r| r.usable())
        })
    }

    /// Starts a fresh chain at ring position `start` (a new guid, so nothing of an
    /// older chain is ever taken for part of it).
    pub fn start_chain(&self, start: u64) {
        assert!(
            self.state.lock().unwrap().writing.is_none(),
            "new chain while a batch is in flight"
        );
        self.begin_chain(start);
    }

    /// Changes the rings under a live log (a log device added or removed, a side of
    /// vdev 0 attached or detached): `device` and `pool` replace the log devices' and
    /// the pool's ring where given. With `restart`, the chain then starts afresh on the
    /// preferred ring and `commit_txg` commits a txg whose uberblock names it, before
    /// any record is written there: every record logged so far is in that txg, so
    /// nothing the old chain held is needed any more, and no acknowledged record is
    /// ever in a block the durable header cannot reach. No batch is in flight
    /// meanwhile and none starts (commits wait); `commit_txg` must not wait for the
    /// log.
    pub fn switch_rings(
        &self,
        device: Option<Option<Ring>>,
        pool: Option<Option<Ring>>,
        restart: bool,
        commit_txg: impl FnOnce() -> Result<(), PoolError>,
    ) -> Result<(), PoolError> {
        let mut st = self.state.lock().unwrap();
        while st.writing.is_some() {
            st = self.cv.wait(st).unwrap();
        }
        // A batch of nothing, of no txg: holds off other writers, blocks no commit.
        st.writing = Some((st.next_id, 0));
        drop(st);
        let _release = WriterRelease(self);
        if let Some(d) = device {
            *self.device_ring.lock().unwrap() = d.map(Arc::new);
        }
        if let Some(p) = pool {
            *self.pool_ring.lock().unwrap() = p.map(Arc::new);
        }
        if !restart {
            return Ok(());
        }
        self.begin_chain(0);
        commit_txg()
    }

    fn begin_chain(&self, start: u64) {
        let ring = self.preferred_ring();
        let mut st = self.state.lock().unwrap();
        st.guid = crate::config::new_guid();
        st.kind = ring.as_ref().map_or(RingKind::None, |r| r.kind);
        let start = ring.as_ref().map_or(0, |r| r.next_pos(start.min(r.len)));
        st.next_seq = 0;
        st.head_v = start;
        st.tail_v = start;
        st.live.clear();
        drop(st);
        match ring {
            Some(r) => self.set_stats_ring(&r),
            None => *self.stats.lock().unwrap() = IntentLogStats::default(),
        }
    }

    /// Carries on the chain import read (nothing needed replay), so the durable
    /// header still finds every block written from now on without a txg commit first.
    pub fn continue_chain(&self, header: &LogHeader, read: &ChainRead) {
        let Some(ring) = self.ring(header.kind) else {
            return;
        };
        let mut st = self.state.lock().unwrap();
        assert!(
            st.writing.is_none(),
            "chain continued while a batch is in flight"
        );
        st.guid = header.guid;
        st.kind = header.kind;
        let start = ring.next_pos(header.start.min(ring.len));
        st.tail_v = start;
        st.live.clear();
        let mut v = start;
        for (i, &(pos, size, max_txg)) in read.blocks.iter().enumerate() {
            assert_eq!(v % ring.len, pos, "chain blocks out of ring order");
            st.live.push_back(LiveBlock {
                v,
                seq: header.seq + i as u64,
                max_txg,
            });
            v = if ring.next_pos(pos + size) == 0 {
                v - pos + ring.len
            } else {
                v + size
            };
        }
        st.head_v = v;
        st.next_seq = read.next_seq;
        drop(st);
        self.set_stats_ring(&ring);
    }

    /// For `pool check`: the chain's guid and the (ring position, sequence number,
    /// highest txg) of every block the log has acknowledged durable, taken when no
    /// batch is in flight (so every block listed was written and flushed). Must not be
    /// called under the pool's sync lock: a batch that falls back to a txg commit
    /// needs it before it ends.
    pub fn acknowledged_blocks(&self) -> AcknowledgedChain {
        let mut st = self.state.lock().unwrap();
        while st.writing.is_some() {
            st = self.cv.wait(st).unwrap();
        }
        let len = self.ring(st.kind).map_or(1, |r| r.len);
        let blocks = st
            .live
            .iter()
            .map(|b| AcknowledgedBlock {
                pos: b.v % len,
                seq: b.seq,
                max_txg: b.max_txg,
            })
            .collect();
        AcknowledgedChain {
            guid: st.guid,
            kind: st.kind,
            blocks,
        }
    }

    fn set_stats_ring(&self, ring: &Ring) {
        let mut stats = self.stats.lock().unwrap();
        stats.ring = match ring.kind {
            RingKind::None => "none",
            RingKind::Pool => "pool",
            RingKind::LogDevices => "log devices",
        }
        .into();
        stats.ring_bytes = ring.len;
    }

    /// The ring a new chain would use (log devices if usable, else the pool's).
    pub fn preferred_kind(&self) -> RingKind {
        self.preferred_ring().map_or(RingKind::None, |r| r.kind)
    }

    pub fn set_replaying(&self, on: bool) {
        self.state.lock().unwrap().replaying = on;
    }

    pub fn stats(&self) -> IntentLogStats {
        self.stats.lock().unwrap().clone()
    }

    pub fn note_replay(&self, records: u64, failures: u64) {
        let mut s = self.stats.lock().unwrap();
        s.records_replayed += records;
        s.replay_failures += failures;
    }

    /// Appends the records of one `Tx` (called as it ends, inside its txg).
    pub fn append(&self, txg: u64, ops: Vec<LogOp>) {
        if ops.is_empty() {
            return;
        }
        let mut st = self.state.lock().unwrap();
        if st.replaying {
            return;
        }
        debug_assert!(st.pending.back().is_none_or(|p| p.txg <= txg));
        for op in ops {
            let id = st.next_id;
            st.next_id += 1;
            st.pending.push_back(Pending { id, txg, op });
        }
    }

    /// The header a commit of `txg` records: the first block that may hold records of
    /// a later txg. Returns the virtual position the tail may move to once durable.
    pub fn header_for(&self, txg: u64, area: (u64, u64)) -> (LogHeader, u64) {
        let st = self.state.lock().unwrap();
        let len = self.ring(st.kind).map_or(1, |r| r.len);
        let (v, seq) = match st.live.iter().find(|b| b.max_txg > txg) {
            Some(b) => (b.v, b.seq),
            None => (st.head_v, st.next_seq),
        };
        (
            LogHeader {
                guid: st.guid,
                start: v % len,
                seq,
                kind: st.kind,
                area_offset: area.0,
                area_len: area.1,
            },
            v,
        )
    }

    /// `txg` is durable with the header `header_for` gave at virtual position `tail_v`:
    /// the ring space before it is free and the records of `txg` and older are moot.
    /// `None` when the txg wrote no uberblock (nothing changed).
    pub fn committed(&self, txg: u64, tail_v: Option<u64>) {
        let mut st = self.state.lock().unwrap();
        if let Some(tail_v) = tail_v {
            while st.live.front().is_some_and(|b| b.v < tail_v) {
                st.live.pop_front();
            }
            st.tail_v = st.tail_v.max(tail_v);
        }
        while st.pending.front().is_some_and(|p| p.txg <= txg) {
            st.pending.pop_front();
        }
        let mut safe = st.pending.front().map_or(st.next_id, |p| p.id);
        if let Some((first, max_txg)) = st.writing {
            if max_txg > txg {
                safe = safe.min(first);
            }
        }
        st.safe_upto = st.safe_upto.max(safe);
        st.wake();
        drop(st);
        self.cv.notify_all();
    }

    /// Makes every change appended so far durable; returns once it is.
    pub fn commit(&self, src: &dyn LogSource) -> Result<(), PoolError> {
        let mut st = self.state.lock().unwrap();
        let target = st.next_id;
        loop {
            if st.safe_upto >= target {
                return Ok(());
            }
            if st.writing.is_none() {
                break;
            }
            // Parked until `wake` says this caller's records are durable or it is to
            // write the next batch; a stray unpark only makes it look again.
            st.waiters.push((target, std::thread::current()));
            drop(st);
            std::thread::park();
            st = self.state.lock().unwrap();
            let me = std::thread::current().id();
            st.waiters.retain(|(_, t)| t.id() != me);
        }
        let batch: Vec<Pending> = st.pending.drain(..).collect();
        let end = st.next_id;
        let first = batch.first().map_or(end, |p| p.id);
        let max_txg = batch.iter().map(|p| p.txg).max().unwrap_or(0);
        st.writing = Some((first, max_txg));
        drop(st);
        self.stats.lock().unwrap().commits += 1;
        let logged = self.write_batch(src, &batch);
        let result = match logged {
            true => Ok(()),
            false => {
                // Still the only writer: nothing lands after a block that may be bad.
                self.stats.lock().unwrap().txg_fallbacks += 1;
                src.commit_txg()
            }
        };
        let mut st = self.state.lock().unwrap();
        st.writing = None;
        if result.is_ok() {
            st.safe_upto = st.safe_upto.max(end);
        }
        st.wake();
        drop(st);
        self.cv.notify_all();
        result
    }

    /// Writes one batch to the ring and flushes it. False when the batch must go to a
    /// txg instead (no usable ring, too large, ring full, or a write that failed).
    fn write_batch(&self, src: &dyn LogSource, batch: &[Pending]) -> bool {
        let kind = self.state.lock().unwrap().kind;
        let Some(ring) = self.ring(kind).filter(|r| r.usable()) else {
            return false;
        };
        let write_bytes: u64 = batch
            .iter()
            .map(|p| match p.op {
                LogOp::Write { len, .. } if len >= PLACE_MIN_BYTES => len,
                _ => 0,
            })
            .sum();
        let placing = kind == RingKind::Pool && write_bytes >= PLACE_BATCH_MIN_BYTES;
        let bytes: u64 = batch.iter().map(|p| p.op.log_bytes(placing)).sum();
        if bytes > ring.len / 2 {
            return false;
        }
        // Records are encoded straight into block payloads; one that does not fit
        // moves to the next block.
        let mut blocks: Vec<(Vec<u8>, u64, u64)> = Vec::new(); // payload, records, max txg
        let mut cur = (Vec::new(), 0u64, 0u64);
        let mut push = |cur: &mut (Vec<u8>, u64, u64), txg: u64, encode: &dyn Fn(&mut Vec<u8>)| {
            let start = cur.0.len();
            encode(&mut cur.0);
            if BLOCK_HEADER + cur.0.len() > LOG_BLOCK_MAX {
                let rec = cur.0.split_off(start);
                blocks.push(std::mem::replace(cur, (rec, 0, 0)));
            }
            cur.1 += 1;
            cur.2 = cur.2.max(txg);
        };
        let mut placed_blocks = 0u64;
        for p in batch {
            match &p.op {
                LogOp::Write {
                    os,
                    obj,
                    offset,
                    len,
                    ..
                } => {
                    let placed = if placing && *len >= PLACE_MIN_BYTES {
                        src.place_for_log(*os, *obj, *offset, *len, p.txg)
                    } else {
                        Vec::new()
                    };
                    placed_blocks += placed.len() as u64;
                    // In offset order: (from, to, the pointer when placed, else copied).
                    let mut segments = Vec::with_capacity(2 * placed.len() + 1);
                    let mut at = *offset;
                    for (poff, plen, bp) in placed {
                        if at < poff {
                            segments.push((at, poff, None));
                        }
                        segments.push((poff, poff + plen, Some(bp)));
                        at = poff + plen;
                    }
                    if at < offset + len {
                        segments.push((at, offset + len, None));
                    }
                    for (from, to, bp) in segments {
                        if let Some(bp) = bp {
                            let op = LogOp::WriteBlock {
                                os: *os,
                                obj: *obj,
                                offset: from,
                                bp,
                            };
                            push(&mut cur, p.txg, &|out| op.encode(p.txg, out));
                            continue;
                        }
                        let Some(data) = src.read_for_log(*os, *obj, from, (to - from) as usize)
                        else {
                            break; // the object is gone; its free is logged after this
                        };
                        for (i, chunk) in data.chunks(WRITE_CHUNK_MAX).enumerate() {
                            let chunk_at = from + (i * WRITE_CHUNK_MAX) as u64;
                            push(&mut cur, p.txg, &|out| {
                                encode_write(p.txg, *os, *obj, chunk_at, chunk, out)
                            });
                        }
                    }
                }
                op => push(&mut cur, p.txg, &|out| op.encode(p.txg, out)),
            }
        }
        if cur.1 > 0 {
            blocks.push(cur);
        }
        // A log block may name a placed block only once that block is durable.
        if placed_blocks > 0 {
            self.stats.lock().unwrap().blocks_placed += placed_blocks;
            if !src.flush_placed() {
                return false;
            }
        }
        let mut sealed: Vec<(u64, Arc<AlignedBuf>)> = Vec::with_capacity(blocks.len());
        let last = blocks.len().saturating_sub(1);
        for (i, (payload, records, max_txg)) in blocks.into_iter().enumerate() {
            let size = (BLOCK_HEADER + payload.len()).div_ceil(SECTOR_SIZE) * SECTOR_SIZE;
            let (pos, guid, seq) = {
                let mut st = self.state.lock().unwrap();
                let v = st.head_v;
                let pos = v % ring.len;
                let end_v = v + size as u64;
                let next = ring.next_pos(pos + size as u64);
                let next_v = if next == 0 { v - pos + ring.len } else { end_v };
                if next_v - st.tail_v > ring.len {
                    return false; // the ring is full until a txg commits
                }
                let seq = st.next_seq;
                st.next_seq += 1;
                st.head_v = next_v;
                st.live.push_back(LiveBlock { v, seq, max_txg });
                (pos, st.guid, seq)
            };
            sealed.push((
                pos,
                Arc::new(seal_block(&payload, records, max_txg, guid, seq, i == last)),
            ));
        }
        if sealed.is_empty() {
            return true;
        }
        let bytes: u64 = sealed.iter().map(|(_, b)| b.len() as u64).sum();
        {
            let mut s = self.stats.lock().unwrap();
            s.blocks_written += sealed.len() as u64;
            s.bytes_written += bytes;
        }
        ring.write_and_flush(sealed, self.parallel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_ops() -> Vec<LogOp> {
        vec![
            LogOp::CreateObjset {
                id: 3,
                name: "tank/a".into(),
                props: "{\"x\":1}".into(),
            },
            LogOp::SetObjsetProps {
                id: 3,
                props: "{}".into(),
            },
            LogOp::DestroyObjset { id: 9 },
            LogOp::CreateObject {
                os: 3,
                obj: 77,
                object_type: 33,
                block_size: 131072,
                compression: Compression::Lz4,
                checksum: ChecksumKind::Blake3,
            },
            LogOp::Write {
                os: 3,
                obj: 77,
                offset: 5,
                len: 4,
                data: b"abcd".to_vec(),
            },
            LogOp::FreeRange {
                os: 3,
                obj: 77,
                offset: 1,
                len: 2,
            },
            LogOp::FreeObject { os: 3, obj: 77 },
            LogOp::SetBonus {
                os: 3,
                obj: 78,
                bonus: vec![1, 2, 3],
                generation: Some(12),
            },
            LogOp::SetBonus {
                os: 3,
                obj: 78,
                bonus: vec![],
                generation: None,
            },
            LogOp::GrowBlockSize {
                os: 3,
                obj: 78,
                block_size: 4096,
            },
        ]
    }

    #[test]
    fn records_round_trip() {
        let mut buf = Vec::new();
        for (i, op) in all_ops().iter().enumerate() {
            op.encode(10 + i as u64, &mut buf);
        }
        let mut rest = &buf[..];
        for (i, op) in all_ops().iter().enumerate() {
            let (txg, got, used) = LogOp::decode(rest).expect("decodes");
            assert_eq!(txg, 10 + i as u64);
            assert_eq!(&got, op);
            rest = &rest[used..];
        }
        assert!(rest.is_empty());
    }

    #[test]
    fn truncated_or_unknown_records_are_refused() {
        let mut buf = Vec::new();
        all_ops()[0].encode(1, &mut buf);
        assert!(LogOp::decode(&buf[..buf.len() - 1]).is_none());
        let mut bad = buf.clone();
        bad[0] = 99;
        assert!(LogOp::decode(&bad).is_none());
    }

    #[test]
    fn blocks_verify_only_with_their_chain_and_seq() {
        let b = seal_block(b"payload", 1, 5, 42, 7, true);
        assert_eq!(
            verify_block(&b, 42, 7).unwrap(),
            (b"payload".to_vec(), true)
        );
        let mid = seal_block(b"payload", 1, 5, 42, 7, false);
        assert_eq!(
            verify_block(&mid, 42, 7).unwrap(),
            (b"payload".to_vec(), false)
        );
        assert!(verify_block(&b, 43, 7).is_none());
        assert!(verify_block(&b, 42, 8).is_none());
        let mut torn = b.clone();
        torn[100] ^= 1;
        assert!(verify_block(&torn, 42, 7).is_none());
    }

    /// A block sealed into a recycled buffer holds no byte of the buffer's old
    /// contents: the reserved header bytes and the padding after the payload are zero.
    #[test]
    fn sealed_blocks_carry_nothing_of_a_recycled_buffer() {
        let payload = vec![7u8; 9000];
        for _ in 0..4 {
            let mut dirty = AlignedBuf::for_overwrite(12 * 1024); // the sealed block's size
            dirty.fill(0xa5);
            drop(dirty);
            let b = seal_block(&payload, 1, 5, 42, 7, true);
            assert_eq!(verify_block(&b, 42, 7).unwrap(), (payload.clone(), true));
            assert!(b[60..64].iter().all(|&x| x == 0));
            assert!(b[BLOCK_HEADER + payload.len()..].iter().all(|&x| x == 0));
        }
    }
}
