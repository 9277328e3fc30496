//! What the layers report: one event per NFS operation and per device I/O.
//!
//! Events are plain `Copy` values with no heap data (names are `&'static str`, files
//! are (fsid, object) pairs, devices are registration numbers), so recording one is
//! a copy into a queue; turning ids into names happens later, on the collector
//! thread, once per distinct value per second.

use std::net::IpAddr;
use std::time::Instant;

/// One NFSv3 (or MOUNT) call, reported when its reply is ready.
#[derive(Debug, Clone, Copy)]
pub struct NfsEvent {
    /// Procedure name in lower case (`read`, `write`, `getattr`, ...).
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
    /// Bytes of the request record and of the reply, as on the wire.
    pub request_bytes: u32,
    pub reply_bytes: u32,
    /// From the request's arrival to its reply being ready.
    pub latency_ns: u64,
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

#[derive(Debug, Clone, Copy)]
pub enum Event {
    Nfs(NfsEvent),
    Io(IoEvent),
}

impl Event {
    pub fn at(&self) -> Instant {
        match self {
            Event::Nfs(e) => e.at,
            Event::Io(e) => e.at,
        }
    }
}
