//! What the layers report: one event per NFS operation and per device I/O, and
//! refused calls, and meter readings: one per intent-log commit and per txg sync (with their latency),
//! and the once-a-second readings of samplers (ARC counters, CPU, pool levels).
//!
//! Events are plain `Copy` values with no heap data (names are `&'static str`, files
//! are (fsid, object) pairs, devices are registration numbers), so recording one is
//! a copy into a queue; turning ids into names happens later, on the collector
//! thread, once per distinct value per second.

use crate::clock::{Reference, Ticks};
use std::net::IpAddr;
use std::time::Instant;

/// The `version` of NLM calls' events (counted in `nlm.ops`).
pub const NLM_VERSION: u8 = 0;

/// One NFSv3 call, one operation of an NFSv4 COMPOUND, or one NLM call, reported when
/// it is done.
#[derive(Debug, Clone, Copy)]
pub struct NfsEvent {
    /// The protocol's major version: 3 (counted in `nfs3.*`), 4 (`nfs4.*`), or
    /// `NLM_VERSION` for NLM (`nlm.ops`).
    pub version: u8,
    /// NFSv4's minor version (0, 1 or 2: the `minor` dimension of `nfs4.*`); 0 for
    /// NFSv3 and NLM.
    pub minor: u8,
    /// Procedure or operation name in lower case (`read`, `write`, `getattr`, ...).
    pub op: &'static str,
    pub client: IpAddr,
    /// The share's file-system id (as in FSINFO); 0 when the call named no file.
    pub fsid: u64,
    /// The object (inode) the call named; meaningful only when `fsid != 0`.
    pub ino: u64,
    /// READ or WRITE payload bytes (0 for other operations).
    pub bytes: u32,
    /// READ or WRITE file offset.
    pub offset: u64,
    /// Bytes of the request record and of the reply, as on the wire (for NFSv4, on
    /// the first operation of a COMPOUND only, so records are counted once).
    pub request_bytes: u32,
    pub reply_bytes: u32,
    /// From the request's arrival to its reply being ready.
    pub latency_ns: u64,
    /// When the reply was ready: a `Ticks` reading, which costs the I/O path far
    /// less than an `Instant` (`clock`).
    pub at: Ticks,
}

/// One SCSI command served over iSCSI, reported when its status is sent.
#[derive(Debug, Clone, Copy)]
pub struct IscsiEvent {
    /// The command in lower case (`read`, `write`, `unmap`, `inquiry`, ...).
    pub op: &'static str,
    /// The initiator's iSCSI name and the target's, interned (`crate::intern`).
    pub initiator: &'static str,
    pub target: &'static str,
    /// The LUN, interned as its decimal text.
    pub lun: &'static str,
    /// Data-In or Data-Out payload bytes of a READ or WRITE-style command (0 for
    /// others).
    pub bytes: u32,
    /// The byte offset a READ or WRITE-style command addresses.
    pub offset: u64,
    /// From the command's arrival (its data gathered) to its status being sent.
    pub latency_ns: u64,
    pub at: Ticks,
}

/// A call the server refused for who or what it named rather than for what the file
/// system said: a client the export does not list, a write under a read-only rule, a
/// squashed root, a handle that fails its check, a path that leaves the export.
/// Reported in addition to the call's `NfsEvent` (MOUNT calls report only this).
#[derive(Debug, Clone, Copy)]
pub struct RefusalEvent {
    /// Why, in snake case (`not_allowed`, `read_only`, `root_squashed`, ...).
    pub reason: &'static str,
    /// Procedure name in lower case (`mnt`, `write`, ...).
    pub op: &'static str,
    pub client: IpAddr,
    /// The share's file-system id; 0 when the call named none that could be trusted.
    pub fsid: u64,
    pub at: Instant,
}

/// One leaf device I/O (after aggregation: what the device was asked to do).
#[derive(Debug, Clone, Copy)]
pub struct IoEvent {
    /// From `Analytics::register_device`.
    pub device: u32,
    pub write: bool,
    pub bytes: u32,
    /// Byte offset on the device.
    pub offset: u64,
    pub latency_ns: u64,
    pub at: Instant,
}

/// What a meter reading measures; each is the source of one statistic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Meter {
    /// ARC lookups in the last second; labels: result, access, content.
    ArcAccess,
    /// Bytes in the ARC (a level); label 0: the list (mru, mfu).
    ArcSize,
    /// L2ARC lookups in the last second; label 0: result.
    L2Access,
    /// One intent-log commit (what an fsync waited for), with its latency.
    LogCommit,
    /// One transaction group synced, with the time it took.
    TxgSync,
    /// Dirty bytes waiting for the next txg (a level).
    PoolDirty,
    /// Allocated bytes of the pool (a level).
    PoolUsed,
    /// Scrub or resilver progress in hundredths of a percent (a level); label 0:
    /// scrub or resilver.
    RepairProgress,
    /// CPU microseconds in the last second; label 0: the kind of work.
    Cpu,
    /// Microseconds a device was busy in the last second; `subject` is a device.
    DeviceBusy,
    /// Replication stream bytes; `subject` is a pool; label 0: sent or received.
    ReplicationBytes,
    /// Seconds since the newest snapshot replicated from a pool was taken (a level).
    ReplicationLag,
    /// Bytes through a host network interface in the last second; labels:
    /// interface, direction (in, out).
    InterfaceBytes,
    /// Packets through a host network interface; labels as `InterfaceBytes`.
    InterfacePackets,
    /// Microseconds one host CPU spent in one mode in the last second; labels: cpu
    /// (cpu0, cpu1, ...), mode (user, kernel, iowait, idle, steal).
    HostCpu,
}

/// One meter reading.
#[derive(Debug, Clone, Copy)]
pub struct MeterEvent {
    pub meter: Meter,
    /// A pool (`Analytics::register_pool`), or a device for `DeviceBusy`; unused by Cpu.
    pub subject: u32,
    /// Values of the meter's categorical dimensions: [result|list|work|op|interface|cpu,
    /// access|direction|mode, content]; "" where none.
    pub labels: [&'static str; 3],
    pub value: u64,
    pub latency_ns: u64,
    pub at: Instant,
}

#[derive(Debug, Clone, Copy)]
pub enum Event {
    Nfs(NfsEvent),
    Io(IoEvent),
    Meter(MeterEvent),
    Refusal(RefusalEvent),
    Iscsi(IscsiEvent),
}

impl Event {
    /// When the event happened; `r` turns an NFS event's ticks into an instant.
    #[inline]
    pub fn at(&self, r: &Reference) -> Instant {
        match self {
            Event::Nfs(e) => r.instant(e.at),
            Event::Io(e) => e.at,
            Event::Meter(e) => e.at,
            Event::Refusal(e) => e.at,
            Event::Iscsi(e) => r.instant(e.at),
        }
    }
}
