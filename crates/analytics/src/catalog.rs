//! The statistics shoal keeps, their dimensions, and the dataset names users write.
//!
//! A statistic counts something per second (NFS operations, bytes), or is a level
//! read once a second (a gauge: ARC size, CPU use); either way a point's value is
//! its sum over its seconds, so a minute of a gauge divided by 60 is its average
//! level. A dataset is a
//! statistic, optionally narrowed by filters on its categorical dimensions and
//! optionally broken down by one dimension: categorical dimensions give a count per
//! value, numeric ones (latency, size, offset) a heatmap column of log-linear
//! buckets. Dataset names follow the original appliance's drill-down style:
//!
//! `nfs3.ops`, `nfs3.ops[op]`, `nfs3.ops[op=read][client=10.0.0.2][file]`,
//! `nfs3.ops[latency]`.
//!
//! Filters come first, the breakdown (a bare dimension) last. The canonical name
//! sorts the filters by dimension, so two spellings of one dataset are one dataset.

use crate::event::{Event, Meter};
use std::fmt;
use std::net::IpAddr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    Op,
    /// NFSv4's minor version: `0`, `1`, `2`.
    Minor,
    Client,
    Share,
    File,
    Device,
    Pool,
    Direction,
    Result,
    Access,
    Content,
    Work,
    Reason,
    Role,
    Interface,
    Cpu,
    Mode,
    /// An iSCSI initiator's name, target's name, and LUN.
    Initiator,
    Target,
    Lun,
    Latency,
    Size,
    Offset,
}

impl Dim {
    pub const ALL: [Dim; 23] = [
        Dim::Op,
        Dim::Minor,
        Dim::Client,
        Dim::Share,
        Dim::File,
        Dim::Device,
        Dim::Pool,
        Dim::Direction,
        Dim::Result,
        Dim::Access,
        Dim::Content,
        Dim::Work,
        Dim::Reason,
        Dim::Role,
        Dim::Interface,
        Dim::Cpu,
        Dim::Mode,
        Dim::Initiator,
        Dim::Target,
        Dim::Lun,
        Dim::Latency,
        Dim::Size,
        Dim::Offset,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Dim::Op => "op",
            Dim::Minor => "minor",
            Dim::Client => "client",
            Dim::Share => "share",
            Dim::File => "file",
            Dim::Device => "device",
            Dim::Pool => "pool",
            Dim::Direction => "direction",
            Dim::Result => "result",
            Dim::Access => "access",
            Dim::Content => "content",
            Dim::Work => "work",
            Dim::Reason => "reason",
            Dim::Role => "role",
            Dim::Interface => "interface",
            Dim::Cpu => "cpu",
            Dim::Mode => "mode",
            Dim::Initiator => "initiator",
            Dim::Target => "target",
            Dim::Lun => "lun",
            Dim::Latency => "latency",
            Dim::Size => "size",
            Dim::Offset => "offset",
        }
    }

    pub fn parse(s: &str) -> Option<Dim> {
        Dim::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Numeric dimensions break down into heatmap buckets.
    pub fn numeric(self) -> bool {
        matches!(self, Dim::Latency | Dim::Size | Dim::Offset)
    }

    /// The unit of a numeric dimension's bucket bounds.
    pub fn unit(self) -> Option<&'static str> {
        match self {
            Dim::Latency => Some("microseconds"),
            Dim::Size | Dim::Offset => Some("bytes"),
            _ => None,
        }
    }
}

/// What a statistic counts per event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counts {
    /// One per NFS call (v3) or COMPOUND operation (v4) of this major version.
    NfsOps(u8),
    /// READ and WRITE payload bytes of this major version.
    NfsBytes(u8),
    /// Request bytes in and reply bytes out: two samples per call.
    NetBytes,
    /// One per refused call.
    Refusals,
    /// One per device I/O.
    IoOps,
    /// Device I/O bytes.
    IoBytes,
    /// One per SCSI command over iSCSI.
    IscsiOps,
    /// iSCSI READ and WRITE-style payload bytes.
    IscsiBytes,
    /// The value of each reading of a meter.
    Meter(Meter),
}

/// A statistic: what is counted, in what unit, by which dimensions.
#[derive(Debug, Clone, Copy)]
pub struct Statistic {
    pub name: &'static str,
    pub counts: Counts,
    pub description: &'static str,
    /// Unit of the value: per second for counts, as is for gauges.
    pub unit: &'static str,
    /// A level read once a second rather than a count of events.
    pub gauge: bool,
    /// What a value is divided by to be shown in `unit` (CPU and busy time are kept
    /// in microseconds and shown as percent: 10 000).
    pub divisor: u64,
    pub dims: &'static [Dim],
}

pub const STATISTICS: &[Statistic] = &[
    Statistic {
        name: "nfs3.ops",
        counts: Counts::NfsOps(3),
        description: "NFSv3 operations",
        unit: "operations",
        gauge: false,
        divisor: 1,
        dims: &[
            Dim::Op,
            Dim::Client,
            Dim::Share,
            Dim::File,
            Dim::Latency,
            Dim::Size,
            Dim::Offset,
        ],
    },
    Statistic {
        name: "nfs3.bytes",
        counts: Counts::NfsBytes(3),
        description: "NFSv3 READ and WRITE payload",
        unit: "bytes",
        gauge: false,
        divisor: 1,
        dims: &[
            Dim::Op,
            Dim::Client,
            Dim::Share,
            Dim::File,
            Dim::Size,
            Dim::Offset,
        ],
    },
    Statistic {
        name: "nfs4.ops",
        counts: Counts::NfsOps(4),
        description: "NFSv4 operations (each operation of a COMPOUND)",
        unit: "operations",
        gauge: false,
        divisor: 1,
        dims: &[
            Dim::Op,
            Dim::Minor,
            Dim::Client,
            Dim::Share,
            Dim::File,
            Dim::Latency,
            Dim::Size,
            Dim::Offset,
        ],
    },
    Statistic {
        name: "nlm.ops",
        counts: Counts::NfsOps(crate::event::NLM_VERSION),
        description: "NLM lock calls of NFSv3 clients (lock, test, unlock, cancel, share)",
        unit: "operations",
        gauge: false,
        divisor: 1,
        dims: &[Dim::Op, Dim::Client, Dim::Share, Dim::File, Dim::Latency],
    },
    Statistic {
        name: "nfs4.bytes",
        counts: Counts::NfsBytes(4),
        description: "NFSv4 READ and WRITE payload",
        unit: "bytes",
        gauge: false,
        divisor: 1,
        dims: &[
            Dim::Op,
            Dim::Minor,
            Dim::Client,
            Dim::Share,
            Dim::File,
            Dim::Size,
            Dim::Offset,
        ],
    },
    Statistic {
        name: "iscsi.ops",
        counts: Counts::IscsiOps,
        description: "SCSI commands served over iSCSI",
        unit: "operations",
        gauge: false,
        divisor: 1,
        dims: &[
            Dim::Op,
            Dim::Initiator,
            Dim::Target,
            Dim::Lun,
            Dim::Latency,
            Dim::Size,
            Dim::Offset,
        ],
    },
    Statistic {
        name: "iscsi.bytes",
        counts: Counts::IscsiBytes,
        description: "iSCSI READ and WRITE payload (Data-In and Data-Out)",
        unit: "bytes",
        gauge: false,
        divisor: 1,
        dims: &[
            Dim::Op,
            Dim::Initiator,
            Dim::Target,
            Dim::Lun,
            Dim::Size,
            Dim::Offset,
        ],
    },
    Statistic {
        name: "net.bytes",
        counts: Counts::NetBytes,
        description: "NFS traffic on the network (RPC records in and out)",
        unit: "bytes",
        gauge: false,
        divisor: 1,
        dims: &[Dim::Direction, Dim::Client, Dim::Share],
    },
    Statistic {
        name: "net.interface.bytes",
        counts: Counts::Meter(Meter::InterfaceBytes),
        description: "Bytes through the host's network interfaces (all traffic, not only NFS)",
        unit: "bytes",
        gauge: false,
        divisor: 1,
        dims: &[Dim::Interface, Dim::Direction],
    },
    Statistic {
        name: "net.interface.packets",
        counts: Counts::Meter(Meter::InterfacePackets),
        description: "Packets through the host's network interfaces",
        unit: "packets",
        gauge: false,
        divisor: 1,
        dims: &[Dim::Interface, Dim::Direction],
    },
    Statistic {
        name: "nfs.refusals",
        counts: Counts::Refusals,
        description: "Calls refused by export rules, permissions or handle checks, and why",
        unit: "calls",
        gauge: false,
        divisor: 1,
        dims: &[Dim::Reason, Dim::Op, Dim::Client, Dim::Share],
    },
    Statistic {
        name: "io.ops",
        counts: Counts::IoOps,
        description: "Device I/O operations",
        unit: "operations",
        gauge: false,
        divisor: 1,
        dims: &[
            Dim::Op,
            Dim::Device,
            Dim::Role,
            Dim::Pool,
            Dim::Latency,
            Dim::Size,
            Dim::Offset,
        ],
    },
    Statistic {
        name: "io.bytes",
        counts: Counts::IoBytes,
        description: "Device I/O bytes",
        unit: "bytes",
        gauge: false,
        divisor: 1,
        dims: &[
            Dim::Op,
            Dim::Device,
            Dim::Role,
            Dim::Pool,
            Dim::Size,
            Dim::Offset,
        ],
    },
    Statistic {
        name: "io.utilization",
        counts: Counts::Meter(Meter::DeviceBusy),
        description: "Device utilisation: the share of each second a device had I/O in flight",
        unit: "percent",
        gauge: true,
        divisor: 10_000,
        dims: &[Dim::Device, Dim::Role, Dim::Pool],
    },
    Statistic {
        name: "arc.accesses",
        counts: Counts::Meter(Meter::ArcAccess),
        description: "ARC lookups by hit or miss, demand or prefetch, data or metadata",
        unit: "accesses",
        gauge: false,
        divisor: 1,
        dims: &[Dim::Result, Dim::Access, Dim::Content, Dim::Pool],
    },
    Statistic {
        name: "arc.size",
        counts: Counts::Meter(Meter::ArcSize),
        description: "Bytes cached in the ARC",
        unit: "bytes",
        gauge: true,
        divisor: 1,
        dims: &[Dim::Pool],
    },
    Statistic {
        name: "l2arc.accesses",
        counts: Counts::Meter(Meter::L2Access),
        description: "L2ARC lookups (ARC misses tried on cache devices) by hit or miss",
        unit: "accesses",
        gauge: false,
        divisor: 1,
        dims: &[Dim::Result, Dim::Pool],
    },
    Statistic {
        name: "zil.commits",
        counts: Counts::Meter(Meter::LogCommit),
        description: "Intent log commits (fsync, stable writes) and their latency",
        unit: "commits",
        gauge: false,
        divisor: 1,
        dims: &[Dim::Pool, Dim::Latency],
    },
    Statistic {
        name: "txg.syncs",
        counts: Counts::Meter(Meter::TxgSync),
        description: "Transaction groups synced and the time each sync took",
        unit: "syncs",
        gauge: false,
        divisor: 1,
        dims: &[Dim::Pool, Dim::Latency],
    },
    Statistic {
        name: "pool.dirty",
        counts: Counts::Meter(Meter::PoolDirty),
        description: "Dirty data waiting for the next transaction group",
        unit: "bytes",
        gauge: true,
        divisor: 1,
        dims: &[Dim::Pool],
    },
    Statistic {
        name: "pool.used",
        counts: Counts::Meter(Meter::PoolUsed),
        description: "Allocated space of the pool",
        unit: "bytes",
        gauge: true,
        divisor: 1,
        dims: &[Dim::Pool],
    },
    Statistic {
        name: "pool.repair",
        counts: Counts::Meter(Meter::RepairProgress),
        description: "Progress of a running scrub or resilver",
        unit: "percent",
        gauge: true,
        divisor: 100,
        dims: &[Dim::Pool, Dim::Op],
    },
    Statistic {
        name: "replication.bytes",
        counts: Counts::Meter(Meter::ReplicationBytes),
        description: "Replication stream bytes sent to targets and received as a replica",
        unit: "bytes",
        gauge: false,
        divisor: 1,
        dims: &[Dim::Pool, Dim::Op],
    },
    Statistic {
        name: "replication.lag",
        counts: Counts::Meter(Meter::ReplicationLag),
        description: "Age of the newest snapshot a pool's replication actions delivered",
        unit: "seconds",
        gauge: true,
        divisor: 1,
        dims: &[Dim::Pool],
    },
    Statistic {
        name: "cpu.utilization",
        counts: Counts::Meter(Meter::HostCpu),
        description: "The host's CPUs by mode (100 is one CPU; a CPU's modes add up to 100)",
        unit: "percent",
        gauge: true,
        divisor: 10_000,
        dims: &[Dim::Cpu, Dim::Mode],
    },
    Statistic {
        name: "cpu.daemon",
        counts: Counts::Meter(Meter::Cpu),
        description: "The daemon's own CPU use by kind of work (100 is one CPU)",
        unit: "percent",
        gauge: true,
        divisor: 10_000,
        dims: &[Dim::Work],
    },
];

/// Datasets every daemon keeps from the start and archives; they cannot be removed.
pub const BUILTIN_DATASETS: &[&str] = &[
    "nfs3.ops",
    "nfs3.ops[op]",
    "nfs3.ops[latency]",
    "nfs3.bytes[op]",
    "nfs4.ops",
    "nfs4.ops[op]",
    "nfs4.ops[latency]",
    "nfs4.bytes[op]",
    "nfs.refusals[reason]",
    "iscsi.ops[op]",
    "iscsi.ops[latency]",
    "iscsi.bytes[op]",
    "net.bytes[direction]",
    "net.interface.bytes[direction]",
    "io.ops[op]",
    "io.ops[latency]",
    "io.ops[device]",
    "io.bytes[device]",
    "io.bytes[role]",
    "io.utilization[device]",
    "arc.accesses[result]",
    "arc.size",
    "zil.commits[latency]",
    "txg.syncs[latency]",
    "pool.dirty",
    "pool.used",
    "cpu.utilization[mode]",
    "cpu.daemon[work]",
];

/// The value of one dimension of one sample, before it is turned into a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RawKey {
    Name(&'static str),
    /// A client's address as IPv6 (IPv4 mapped), in two words: aligned like the
    /// other keys' payloads, so a key is copied and compared in whole words (an
    /// `IpAddr`, 17 bytes aligned to 1, made every copy of a key in the collector
    /// unaligned, and its loads stalled on the stores before them).
    Client([u64; 2]),
    Share(u64),
    File(u64, u64),
    Device(u32),
    Direction(bool),
    Bucket(u32),
    /// A pool by its registration number.
    Pool(u32),
}

impl RawKey {
    pub fn client(ip: IpAddr) -> RawKey {
        let v6 = match ip {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        let bits = v6.to_bits();
        RawKey::Client([(bits >> 64) as u64, bits as u64])
    }

    /// The address of a `Client` key, IPv4 shown as such.
    pub fn client_ip(words: [u64; 2]) -> IpAddr {
        let bits = ((words[0] as u128) << 64) | words[1] as u128;
        IpAddr::V6(std::net::Ipv6Addr::from_bits(bits)).to_canonical()
    }
}

/// One contribution of an event to a statistic: `value` plus the event it came
/// from (an event can contribute twice, as net.bytes does for in and out).
#[derive(Debug, Clone, Copy)]
pub struct Sample<'a> {
    pub value: u64,
    pub event: &'a Event,
    /// For net.bytes: true for bytes out (replies).
    pub outbound: bool,
}

impl Sample<'_> {
    /// The sample's value of `dim`, or None when the dimension does not apply.
    /// `Dim::Pool` and `Dim::Role` yield the device, which the engine maps to its
    /// pool and role.
    #[inline(always)]
    pub fn key(&self, dim: Dim) -> Option<RawKey> {
        if dim.numeric() {
            return self
                .number(dim)
                .map(|v| RawKey::Bucket(crate::buckets::index(v)));
        }
        match (self.event, dim) {
            (Event::Nfs(e), Dim::Op) => Some(RawKey::Name(e.op)),
            (Event::Nfs(e), Dim::Minor) if e.version == 4 => ["0", "1", "2"]
                .get(e.minor as usize)
                .map(|m| RawKey::Name(m)),
            (Event::Nfs(e), Dim::Client) => Some(RawKey::client(e.client)),
            (Event::Nfs(e), Dim::Share) => (e.fsid != 0).then_some(RawKey::Share(e.fsid)),
            (Event::Nfs(e), Dim::File) => (e.fsid != 0).then_some(RawKey::File(e.fsid, e.ino)),
            (Event::Nfs(_), Dim::Direction) => Some(RawKey::Direction(self.outbound)),
            (Event::Iscsi(e), Dim::Op) => Some(RawKey::Name(e.op)),
            (Event::Iscsi(e), Dim::Initiator) => Some(RawKey::Name(e.initiator)),
            (Event::Iscsi(e), Dim::Target) => Some(RawKey::Name(e.target)),
            (Event::Iscsi(e), Dim::Lun) => Some(RawKey::Name(e.lun)),
            (Event::Refusal(e), Dim::Reason) => Some(RawKey::Name(e.reason)),
            (Event::Refusal(e), Dim::Op) => Some(RawKey::Name(e.op)),
            (Event::Refusal(e), Dim::Client) => Some(RawKey::client(e.client)),
            (Event::Refusal(e), Dim::Share) => (e.fsid != 0).then_some(RawKey::Share(e.fsid)),
            (Event::Io(e), Dim::Op) => Some(RawKey::Name(if e.write { "write" } else { "read" })),
            (Event::Io(e), Dim::Device | Dim::Pool | Dim::Role) => Some(RawKey::Device(e.device)),
            (Event::Meter(e), Dim::Device | Dim::Pool | Dim::Role)
                if e.meter == Meter::DeviceBusy =>
            {
                Some(RawKey::Device(e.subject))
            }
            (Event::Meter(e), Dim::Pool) => Some(RawKey::Pool(e.subject)),
            (Event::Meter(e), Dim::Result | Dim::Work | Dim::Op | Dim::Interface | Dim::Cpu) => {
                label(e.labels[0])
            }
            (Event::Meter(e), Dim::Access | Dim::Mode | Dim::Direction) => label(e.labels[1]),
            (Event::Meter(e), Dim::Content) => label(e.labels[2]),
            _ => None,
        }
    }

    /// The sample's value of a numeric dimension in the dimension's unit
    /// (microseconds, bytes), or None when it does not apply.
    #[inline]
    pub fn number(&self, dim: Dim) -> Option<u64> {
        match (self.event, dim) {
            (Event::Nfs(e), Dim::Latency) => Some(e.latency_ns / 1000),
            (Event::Nfs(e), Dim::Size) => Some(e.bytes as u64),
            (Event::Nfs(e), Dim::Offset) => Some(e.offset),
            (Event::Iscsi(e), Dim::Latency) => Some(e.latency_ns / 1000),
            (Event::Iscsi(e), Dim::Size) => Some(e.bytes as u64),
            (Event::Iscsi(e), Dim::Offset) => Some(e.offset),
            (Event::Io(e), Dim::Latency) => Some(e.latency_ns / 1000),
            (Event::Io(e), Dim::Size) => Some(e.bytes as u64),
            (Event::Io(e), Dim::Offset) => Some(e.offset),
            (Event::Meter(e), Dim::Latency) => Some(e.latency_ns / 1000),
            _ => None,
        }
    }
}

fn label(l: &'static str) -> Option<RawKey> {
    (!l.is_empty()).then_some(RawKey::Name(l))
}

/// Calls `f` for each contribution of `event` to statistic `stat`.
/// Which events a statistic can take: 0 NFSv3 calls, 1 NFSv4 operations, 2 device
/// I/O, 3 refusals, 4 iSCSI commands, 5 and up one meter each. `samples` never yields a sample for an
/// event of another route, which lets the collector offer each event only to the
/// datasets of its route.
impl Counts {
    pub fn routes(&self) -> std::ops::Range<usize> {
        match self {
            Counts::NfsOps(3) | Counts::NfsBytes(3) => 0..1,
            Counts::NfsOps(_) | Counts::NfsBytes(_) => 1..2,
            // Both NFS routes, which is why they are adjacent.
            Counts::NetBytes => 0..2,
            Counts::IoOps | Counts::IoBytes => 2..3,
            Counts::Refusals => 3..4,
            Counts::IscsiOps | Counts::IscsiBytes => 4..5,
            Counts::Meter(m) => 5 + *m as usize..6 + *m as usize,
        }
    }
}

/// The route of an event (see `Counts::routes`).
#[inline]
pub fn route(event: &Event) -> usize {
    match event {
        Event::Nfs(e) if e.version == 3 => 0,
        Event::Nfs(_) => 1,
        Event::Io(_) => 2,
        Event::Refusal(_) => 3,
        Event::Iscsi(_) => 4,
        Event::Meter(m) => 5 + m.meter as usize,
    }
}

#[inline]
pub fn samples<'a>(stat: usize, event: &'a Event, mut f: impl FnMut(Sample<'a>)) {
    let one = |value, outbound| Sample {
        value,
        event,
        outbound,
    };
    match (STATISTICS[stat].counts, event) {
        (Counts::NfsOps(v), Event::Nfs(e)) if e.version == v => f(one(1, false)),
        (Counts::NfsBytes(v), Event::Nfs(e)) if e.version == v && e.bytes > 0 => {
            f(one(e.bytes as u64, false))
        }
        (Counts::NetBytes, Event::Nfs(e)) => {
            f(one(e.request_bytes as u64, false));
            f(one(e.reply_bytes as u64, true));
        }
        (Counts::Refusals, Event::Refusal(_)) => f(one(1, false)),
        (Counts::IscsiOps, Event::Iscsi(_)) => f(one(1, false)),
        (Counts::IscsiBytes, Event::Iscsi(e)) if e.bytes > 0 => f(one(e.bytes as u64, false)),
        (Counts::IoOps, Event::Io(_)) => f(one(1, false)),
        (Counts::IoBytes, Event::Io(e)) => f(one(e.bytes as u64, false)),
        (Counts::Meter(m), Event::Meter(e)) if e.meter == m => f(one(e.value, false)),
        _ => {}
    }
}

/// A parsed dataset name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Spec {
    pub stat: usize,
    /// (categorical dimension, value as shown in breakdowns), sorted by dimension,
    /// at most one each.
    pub filters: Vec<(Dim, String)>,
    /// Numeric ranges a sample's value must lie in, sorted by dimension, at most one
    /// each: `[latency=1000..10000]` keeps samples with 1000 <= latency < 10000
    /// microseconds. A range may be combined with a breakdown by its own dimension
    /// (a heatmap band, zoomed).
    pub ranges: Vec<Range>,
    pub breakdown: Option<Dim>,
}

/// `[dim=LOW..HIGH]`: LOW <= value < HIGH, either side open when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Range {
    pub dim: Dim,
    pub low: Option<u64>,
    pub high: Option<u64>,
}

impl Range {
    pub fn contains(&self, v: u64) -> bool {
        self.low.is_none_or(|l| v >= l) && self.high.is_none_or(|h| v < h)
    }

    /// As written in dataset names: `1000..10000`, `1000..`, `..4096`.
    pub fn value(&self) -> String {
        let side = |b: Option<u64>| b.map(|v| v.to_string()).unwrap_or_default();
        format!("{}..{}", side(self.low), side(self.high))
    }

    fn parse(dim: Dim, v: &str) -> Result<Range, String> {
        let unit = dim.unit().unwrap_or("");
        let Some((low, high)) = v.split_once("..") else {
            return Err(format!(
                "a filter on {} is a range LOW..HIGH in {unit} (either side may be left out), not '{v}'",
                dim.name()
            ));
        };
        let bound = |s: &str| -> Result<Option<u64>, String> {
            if s.is_empty() {
                return Ok(None);
            }
            s.parse::<u64>().map(Some).map_err(|_| {
                format!(
                    "'{s}' in the range on {} is not a whole number of {unit}",
                    dim.name()
                )
            })
        };
        let r = Range {
            dim,
            low: bound(low)?,
            high: bound(high)?,
        };
        match (r.low, r.high) {
            (None, None) => Err(format!("the range on {} has no bound", dim.name())),
            (Some(l), Some(h)) if l >= h => Err(format!(
                "the range on {} is empty: {l} is not below {h}",
                dim.name()
            )),
            _ => Ok(r),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dataset '{name}': {why}")]
pub struct SpecError {
    pub name: String,
    pub why: String,
}

impl Spec {
    pub fn parse(name: &str) -> Result<Spec, SpecError> {
        let err = |why: String| SpecError {
            name: name.to_string(),
            why,
        };
        let (stat_name, mut rest) = match name.find('[') {
            Some(i) => (&name[..i], &name[i..]),
            None => (name, ""),
        };
        let stat = STATISTICS
            .iter()
            .position(|s| s.name == stat_name)
            .ok_or_else(|| {
                let known: Vec<&str> = STATISTICS.iter().map(|s| s.name).collect();
                err(format!(
                    "unknown statistic '{stat_name}' (known: {})",
                    known.join(", ")
                ))
            })?;
        let info = &STATISTICS[stat];
        let mut filters: Vec<(Dim, String)> = Vec::new();
        let mut ranges: Vec<Range> = Vec::new();
        let mut breakdown = None;
        while !rest.is_empty() {
            let Some(body) = rest.strip_prefix('[') else {
                return Err(err(format!("expected '[' at '{rest}'")));
            };
            let Some(end) = body.find(']') else {
                return Err(err("a '[' without its ']'".into()));
            };
            let part = &body[..end];
            rest = &body[end + 1..];
            if breakdown.is_some() {
                return Err(err("the breakdown must be the last bracket".into()));
            }
            let (dim_name, value) = match part.split_once('=') {
                Some((d, v)) => (d, Some(v)),
                None => (part, None),
            };
            let dim = Dim::parse(dim_name)
                .filter(|d| info.dims.contains(d))
                .ok_or_else(|| {
                    let dims: Vec<&str> = info.dims.iter().map(|d| d.name()).collect();
                    err(format!(
                        "{} has no dimension '{dim_name}' (it has: {})",
                        info.name,
                        dims.join(", ")
                    ))
                })?;
            match value {
                Some(v) => {
                    if v.is_empty() {
                        return Err(err(format!("empty value for {}", dim.name())));
                    }
                    if filters.iter().any(|(d, _)| *d == dim) || ranges.iter().any(|r| r.dim == dim)
                    {
                        return Err(err(format!("two filters on {}", dim.name())));
                    }
                    if dim.numeric() {
                        ranges.push(Range::parse(dim, v).map_err(err)?);
                    } else {
                        filters.push((dim, v.to_string()));
                    }
                }
                None => breakdown = Some(dim),
            }
        }
        if let Some(b) = breakdown {
            if filters.iter().any(|(d, _)| *d == b) {
                return Err(err(format!(
                    "breaking down by {} after filtering on it shows one value",
                    b.name()
                )));
            }
        }
        filters.sort_by_key(|f| f.0);
        ranges.sort_by_key(|r| r.dim);
        Ok(Spec {
            stat,
            filters,
            ranges,
            breakdown,
        })
    }

    pub fn statistic(&self) -> &'static Statistic {
        &STATISTICS[self.stat]
    }

    /// Every filter, categorical or range, as (dimension, value as written), in the
    /// order of the canonical name.
    pub fn all_filters(&self) -> Vec<(Dim, String)> {
        let mut all: Vec<(Dim, String)> = self.filters.clone();
        all.extend(self.ranges.iter().map(|r| (r.dim, r.value())));
        all.sort_by_key(|f| f.0);
        all
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(STATISTICS[self.stat].name)?;
        for (d, v) in &self.all_filters() {
            write!(f, "[{}={}]", d.name(), v)?;
        }
        if let Some(b) = self.breakdown {
            write!(f, "[{}]", b.name())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_keys_keep_the_address_and_tell_clients_apart() {
        for text in [
            "10.0.0.2",
            "2001:db8::7",
            "::1",
            "0.0.0.0",
            "255.255.255.255",
        ] {
            let ip: IpAddr = text.parse().unwrap();
            let RawKey::Client(words) = RawKey::client(ip) else {
                panic!("not a client key")
            };
            assert_eq!(RawKey::client_ip(words), ip);
            assert_eq!(RawKey::client_ip(words).to_string(), text);
        }
        let a = RawKey::client("10.0.0.2".parse().unwrap());
        assert_ne!(a, RawKey::client("10.0.0.3".parse().unwrap()));
        // The same client over IPv4 and as an IPv4-mapped IPv6 peer is one client.
        assert_eq!(a, RawKey::client("::ffff:10.0.0.2".parse().unwrap()));
    }

    #[test]
    fn every_statistic_takes_only_events_of_its_route() {
        use crate::event::*;
        let at = std::time::Instant::now();
        let mut events = Vec::new();
        for version in [3, 4, NLM_VERSION] {
            events.push(Event::Nfs(NfsEvent {
                version,
                minor: 0,
                op: "read",
                client: "10.0.0.2".parse().unwrap(),
                fsid: 1,
                ino: 2,
                bytes: 8192,
                offset: 0,
                request_bytes: 100,
                reply_bytes: 8300,
                latency_ns: 1000,
                at: crate::Ticks::at(at),
            }));
        }
        for write in [false, true] {
            events.push(Event::Io(IoEvent {
                device: 0,
                write,
                bytes: 4096,
                offset: 0,
                latency_ns: 1000,
                at,
            }));
        }
        events.push(Event::Refusal(RefusalEvent {
            reason: "not_allowed",
            op: "mnt",
            client: "10.0.0.2".parse().unwrap(),
            fsid: 0,
            at,
        }));
        events.push(Event::Iscsi(IscsiEvent {
            op: "write",
            initiator: "iqn.2026-12.org.example:host",
            target: "iqn.2026-12.org.example:vm",
            lun: "0",
            bytes: 4096,
            offset: 0,
            latency_ns: 1000,
            at: crate::Ticks::at(at),
        }));
        for stat in STATISTICS {
            if let Counts::Meter(meter) = stat.counts {
                events.push(Event::Meter(MeterEvent {
                    meter,
                    subject: 0,
                    labels: ["a", "b", "c"],
                    value: 1,
                    latency_ns: 1,
                    at,
                }));
            }
        }
        for (i, stat) in STATISTICS.iter().enumerate() {
            let mut taken = 0;
            for e in &events {
                let mut n = 0;
                samples(i, e, |_| n += 1);
                if n > 0 {
                    assert!(
                        stat.counts.routes().contains(&route(e)),
                        "{} took {e:?}",
                        stat.name
                    );
                    taken += 1;
                }
            }
            assert!(taken > 0, "{} took none of the events", stat.name);
        }
    }

    #[test]
    fn names_parse_to_one_canonical_form() {
        let a = Spec::parse("nfs3.ops[op=read][client=10.0.0.2][file]").unwrap();
        let b = Spec::parse("nfs3.ops[client=10.0.0.2][op=read][file]").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "nfs3.ops[op=read][client=10.0.0.2][file]");
        assert_eq!(a.breakdown, Some(Dim::File));
        for name in BUILTIN_DATASETS {
            assert_eq!(Spec::parse(name).unwrap().to_string(), *name);
        }
    }

    #[test]
    fn numeric_ranges_filter_and_print_in_the_canonical_order() {
        let s = Spec::parse("nfs3.ops[size=..4096][op=read][latency=10000..][file]").unwrap();
        assert_eq!(
            s.to_string(),
            "nfs3.ops[op=read][latency=10000..][size=..4096][file]"
        );
        assert_eq!(s.ranges.len(), 2);
        let band = Spec::parse("io.ops[latency=1000..2000][latency]").unwrap();
        assert_eq!(band.breakdown, Some(Dim::Latency));
        let r = band.ranges[0];
        assert!(!r.contains(999) && r.contains(1000) && r.contains(1999) && !r.contains(2000));
        assert_eq!(
            Spec::parse("io.bytes[role=cache][device]")
                .unwrap()
                .to_string(),
            "io.bytes[role=cache][device]"
        );
    }

    #[test]
    fn bad_names_say_what_is_wrong() {
        for (name, why) in [
            ("nfs5.ops", "unknown statistic"),
            ("nfs3.ops[colour]", "no dimension 'colour'"),
            ("io.ops[client]", "no dimension 'client'"),
            ("nfs3.ops[file][op]", "must be the last"),
            ("nfs3.ops[op=read", "without its ']'"),
            (
                "nfs3.ops[latency=5]",
                "is a range LOW..HIGH in microseconds",
            ),
            ("nfs3.ops[latency=..]", "has no bound"),
            ("nfs3.ops[latency=10..10]", "is empty"),
            ("nfs3.ops[size=1k..]", "not a whole number of bytes"),
            ("nfs3.ops[latency=1..][latency=2..]", "two filters"),
            ("nfs3.ops[op=]", "empty value"),
            ("nfs3.ops[op=read][op=write]", "two filters"),
            ("nfs3.ops[op=read][op]", "shows one value"),
            ("nfs3.opsx", "unknown statistic"),
            ("nfs3.ops x", "unknown statistic"),
            ("nfs3.ops[op]x", "expected '['"),
        ] {
            let e = Spec::parse(name).unwrap_err();
            assert!(e.to_string().contains(why), "{name}: {e}");
        }
    }
}
