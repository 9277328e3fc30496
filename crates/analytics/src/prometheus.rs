//! Cumulative counters for Prometheus, kept by the collector from the same events.
//!
//! Labels are low-cardinality only (operation, share, pool, device, direction): never
//! a client or a file, which belong to datasets. Names follow Prometheus practice:
//! base units (seconds, bytes) and `_total` for counters.

use crate::event::{Event, Meter};
use crate::fasthash::FastMap;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Latency histogram bounds in nanoseconds, so events are counted without floating
/// point; rendered in seconds (`le_seconds`).
const LATENCY_LE_NS: [u64; 12] = [
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
];

/// Counts per bucket, not cumulative: one increment per event; `cumulative` turns
/// them into Prometheus' `le` counts when rendered.
#[derive(Default)]
struct Histogram {
    buckets: [u64; LATENCY_LE_NS.len()],
    count: u64,
    sum_ns: u128,
}

impl Histogram {
    fn add(&mut self, ns: u64) {
        let i = LATENCY_LE_NS.partition_point(|&le| le < ns);
        if let Some(b) = self.buckets.get_mut(i) {
            *b += 1;
        }
        self.count += 1;
        self.sum_ns += ns as u128;
    }

    fn merge(&mut self, other: &Histogram) {
        for (b, o) in self.buckets.iter_mut().zip(other.buckets) {
            *b += o;
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
    }

    fn cumulative(&self) -> [u64; LATENCY_LE_NS.len()] {
        let mut sum = 0;
        self.buckets.map(|b| {
            sum += b;
            sum
        })
    }
}

/// A bound as Prometheus shows it: seconds (50_000 ns is `0.00005`).
fn le_seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A map's entries in key order, so the rendering is stable.
fn sorted<K: Ord, V>(m: &FastMap<K, V>) -> Vec<(&K, &V)> {
    let mut v: Vec<(&K, &V)> = m.iter().collect();
    v.sort_unstable_by(|a, b| a.0.cmp(b.0));
    v
}

/// An NFS operation's counters on one share.
type NfsKey = (u8, &'static str, u64);

/// What `Totals` counts for one (version, operation, share).
#[derive(Default)]
struct NfsTotal {
    ops: u64,
    payload_bytes: u64,
    latency: Histogram,
}

#[derive(Default)]
pub(crate) struct Totals {
    /// Every (version, op, fsid) seen, in the order first seen; `nfs_index` finds
    /// them and `nfs_last` is the one counted last. Events mostly repeat the last
    /// key (every 8K random read is a READ of one share), and comparing it (the
    /// operation's name as `same_name` does) costs far less than hashing the key and
    /// probing a map: two map entries per event were a fifth of the collector's CPU
    /// under 8K random reads.
    nfs: Vec<(NfsKey, NfsTotal)>,
    nfs_index: FastMap<NfsKey, usize>,
    nfs_last: usize,
    /// [in, out]
    net_bytes: [u64; 2],
    /// Refusal reason → calls.
    refusals: BTreeMap<&'static str, u64>,
    /// (device, write) → (operations, bytes)
    io: FastMap<(u32, bool), (u64, u64)>,
    io_latency: FastMap<(u32, bool), Histogram>,
    /// Work kind → CPU microseconds.
    cpu_us: BTreeMap<&'static str, u64>,
    /// Device → busy microseconds.
    busy_us: BTreeMap<u32, u64>,
    /// Pool → intent log commit latency, txg sync time.
    log_commits: BTreeMap<u32, Histogram>,
    txg_syncs: BTreeMap<u32, Histogram>,
    /// The host's CPU mode → microseconds, all CPUs.
    host_cpu_us: BTreeMap<&'static str, u64>,
    /// (interface, direction) → (bytes, packets).
    host_net: BTreeMap<(&'static str, &'static str), (u64, u64)>,
    /// iSCSI commands by (target, op): count, payload bytes, latency.
    iscsi: BTreeMap<(&'static str, &'static str), (u64, u64, Histogram)>,
}

/// A label value with `\`, `"` and newlines escaped.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The `# HELP` and `# TYPE` lines that open a metric family.
pub fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn histogram(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    for (b, le) in h.cumulative().iter().zip(LATENCY_LE_NS.map(le_seconds)) {
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {b}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum_ns as f64 / 1e9);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

impl Totals {
    #[inline]
    fn nfs_total(&mut self, key: NfsKey) -> &mut NfsTotal {
        let last_matches = self
            .nfs
            .get(self.nfs_last)
            .is_some_and(|((v, op, fsid), _)| {
                *v == key.0 && *fsid == key.2 && crate::counting::same_name(op, key.1)
            });
        if !last_matches {
            let next = self.nfs.len();
            let i = *self.nfs_index.entry(key).or_insert(next);
            if i == next {
                self.nfs.push((key, NfsTotal::default()));
            }
            self.nfs_last = i;
        }
        &mut self.nfs[self.nfs_last].1
    }

    pub(crate) fn add(&mut self, e: &Event) {
        match e {
            Event::Nfs(n) => {
                let t = self.nfs_total((n.version, n.op, n.fsid));
                t.ops += 1;
                t.payload_bytes += n.bytes as u64;
                t.latency.add(n.latency_ns);
                self.net_bytes[0] += n.request_bytes as u64;
                self.net_bytes[1] += n.reply_bytes as u64;
            }
            Event::Refusal(r) => *self.refusals.entry(r.reason).or_default() += 1,
            Event::Iscsi(c) => {
                let t = self.iscsi.entry((c.target, c.op)).or_default();
                t.0 += 1;
                t.1 += c.bytes as u64;
                t.2.add(c.latency_ns);
            }
            Event::Io(io) => {
                let t = self.io.entry((io.device, io.write)).or_default();
                t.0 += 1;
                t.1 += io.bytes as u64;
                self.io_latency
                    .entry((io.device, io.write))
                    .or_default()
                    .add(io.latency_ns);
            }
            Event::Meter(m) => match m.meter {
                Meter::Cpu => *self.cpu_us.entry(m.labels[0]).or_default() += m.value,
                Meter::DeviceBusy => *self.busy_us.entry(m.subject).or_default() += m.value,
                Meter::LogCommit => self
                    .log_commits
                    .entry(m.subject)
                    .or_default()
                    .add(m.latency_ns),
                Meter::TxgSync => self
                    .txg_syncs
                    .entry(m.subject)
                    .or_default()
                    .add(m.latency_ns),
                Meter::HostCpu => *self.host_cpu_us.entry(m.labels[1]).or_default() += m.value,
                Meter::InterfaceBytes => {
                    self.host_net
                        .entry((m.labels[0], m.labels[1]))
                        .or_default()
                        .0 += m.value
                }
                Meter::InterfacePackets => {
                    self.host_net
                        .entry((m.labels[0], m.labels[1]))
                        .or_default()
                        .1 += m.value
                }
                // Pool levels and ARC counters are read from the pools themselves.
                _ => {}
            },
        }
    }

    pub(crate) fn render(
        &self,
        share: &dyn Fn(u64) -> String,
        pools: &[String],
        devices: &[crate::RegisteredDevice],
        dropped: u64,
        late: u64,
    ) -> String {
        let mut out = String::new();
        let op_share = |version: u8, op: &str, fsid: u64| {
            let share = if fsid == 0 {
                String::new()
            } else {
                share(fsid)
            };
            format!(
                "version=\"{version}\",op=\"{op}\",share=\"{}\"",
                escape(&share)
            )
        };
        header(
            &mut out,
            "shoal_nfs_operations_total",
            "counter",
            "NFS operations served.",
        );
        let mut nfs: Vec<&(NfsKey, NfsTotal)> = self.nfs.iter().collect();
        nfs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for ((version, op, fsid), NfsTotal { ops, .. }) in nfs.iter().copied() {
            let _ = writeln!(
                out,
                "shoal_nfs_operations_total{{{}}} {ops}",
                op_share(*version, op, *fsid)
            );
        }
        header(
            &mut out,
            "shoal_nfs_payload_bytes_total",
            "counter",
            "NFS READ and WRITE payload bytes.",
        );
        for ((version, op, fsid), t) in nfs.iter().copied() {
            let bytes = t.payload_bytes;
            if bytes > 0 {
                let _ = writeln!(
                    out,
                    "shoal_nfs_payload_bytes_total{{{}}} {bytes}",
                    op_share(*version, op, *fsid)
                );
            }
        }
        header(
            &mut out,
            "shoal_nfs_operation_duration_seconds",
            "histogram",
            "Time from an NFS request's arrival to its reply.",
        );
        // Histograms are labelled by operation only (a share's would multiply the
        // series by the shares): the shares' are added up here.
        let mut latency: BTreeMap<(u8, &str), Histogram> = BTreeMap::new();
        for ((version, op, _), t) in &self.nfs {
            latency.entry((*version, op)).or_default().merge(&t.latency);
        }
        for ((version, op), h) in &latency {
            histogram(
                &mut out,
                "shoal_nfs_operation_duration_seconds",
                &format!("version=\"{version}\",op=\"{op}\""),
                h,
            );
        }
        header(
            &mut out,
            "shoal_nfs_refusals_total",
            "counter",
            "NFS and MOUNT calls refused by export rules, permissions or handle checks.",
        );
        for (reason, calls) in &self.refusals {
            let _ = writeln!(
                out,
                "shoal_nfs_refusals_total{{reason=\"{reason}\"}} {calls}"
            );
        }
        header(
            &mut out,
            "shoal_iscsi_commands_total",
            "counter",
            "SCSI commands served over iSCSI, by target and command.",
        );
        let target_op =
            |target: &str, op: &str| format!("target=\"{}\",op=\"{op}\"", escape(target));
        for ((target, op), (n, _, _)) in &self.iscsi {
            let _ = writeln!(
                out,
                "shoal_iscsi_commands_total{{{}}} {n}",
                target_op(target, op)
            );
        }
        header(
            &mut out,
            "shoal_iscsi_payload_bytes_total",
            "counter",
            "iSCSI READ and WRITE payload bytes, by target and command.",
        );
        for ((target, op), (_, bytes, _)) in &self.iscsi {
            if *bytes > 0 {
                let _ = writeln!(
                    out,
                    "shoal_iscsi_payload_bytes_total{{{}}} {bytes}",
                    target_op(target, op)
                );
            }
        }
        header(
            &mut out,
            "shoal_iscsi_command_duration_seconds",
            "histogram",
            "Time from an iSCSI command's arrival (its data gathered) to its status.",
        );
        let mut latency: BTreeMap<&str, Histogram> = BTreeMap::new();
        for ((_, op), (_, _, h)) in &self.iscsi {
            latency.entry(op).or_default().merge(h);
        }
        for (op, h) in &latency {
            histogram(
                &mut out,
                "shoal_iscsi_command_duration_seconds",
                &format!("op=\"{op}\""),
                h,
            );
        }
        header(
            &mut out,
            "shoal_network_bytes_total",
            "counter",
            "NFS RPC record bytes received (in) and sent (out).",
        );
        for (dir, bytes) in ["in", "out"].iter().zip(self.net_bytes) {
            let _ = writeln!(
                out,
                "shoal_network_bytes_total{{direction=\"{dir}\"}} {bytes}"
            );
        }
        // `pool="..",device="..",role=".."` of a registered device.
        let device = |d: u32| {
            let (pool, path, role) = devices
                .get(d as usize)
                .map(|dev| {
                    (
                        pools.get(dev.pool).cloned().unwrap_or_default(),
                        dev.path.clone(),
                        dev.role,
                    )
                })
                .unwrap_or_default();
            format!(
                "pool=\"{}\",device=\"{}\",role=\"{role}\"",
                escape(&pool),
                escape(&path)
            )
        };
        let device_labels = |d: u32, write: bool| {
            format!(
                "{},op=\"{}\"",
                device(d),
                if write { "write" } else { "read" }
            )
        };
        header(
            &mut out,
            "shoal_device_operations_total",
            "counter",
            "I/O operations issued to pool devices.",
        );
        for ((d, w), (ops, _)) in sorted(&self.io) {
            let _ = writeln!(
                out,
                "shoal_device_operations_total{{{}}} {ops}",
                device_labels(*d, *w)
            );
        }
        header(
            &mut out,
            "shoal_device_bytes_total",
            "counter",
            "Bytes read from and written to pool devices.",
        );
        for ((d, w), (_, bytes)) in sorted(&self.io) {
            let _ = writeln!(
                out,
                "shoal_device_bytes_total{{{}}} {bytes}",
                device_labels(*d, *w)
            );
        }
        header(
            &mut out,
            "shoal_device_operation_duration_seconds",
            "histogram",
            "Pool device I/O latency.",
        );
        for ((d, w), h) in sorted(&self.io_latency) {
            histogram(
                &mut out,
                "shoal_device_operation_duration_seconds",
                &device_labels(*d, *w),
                h,
            );
        }
        header(
            &mut out,
            "shoal_device_busy_seconds_total",
            "counter",
            "Time each device had I/O in flight (its utilisation is the rate).",
        );
        for (d, us) in &self.busy_us {
            let _ = writeln!(
                out,
                "shoal_device_busy_seconds_total{{{}}} {}",
                device(*d),
                *us as f64 / 1e6
            );
        }
        header(
            &mut out,
            "shoal_cpu_seconds_total",
            "counter",
            "CPU time of the daemon by kind of work (rpc, txg-sync, device-io, compression, api, analytics, other).",
        );
        for (work, us) in &self.cpu_us {
            let _ = writeln!(
                out,
                "shoal_cpu_seconds_total{{work=\"{work}\"}} {}",
                *us as f64 / 1e6
            );
        }
        header(
            &mut out,
            "shoal_host_cpu_seconds_total",
            "counter",
            "CPU time of the whole host by mode (user, kernel, iowait, idle, steal), all CPUs, since the daemon started.",
        );
        for (mode, us) in &self.host_cpu_us {
            let _ = writeln!(
                out,
                "shoal_host_cpu_seconds_total{{mode=\"{mode}\"}} {}",
                *us as f64 / 1e6
            );
        }
        for (name, help, packets) in [
            (
                "shoal_host_network_bytes_total",
                "Bytes through the host's network interfaces, all traffic, since the daemon started.",
                false,
            ),
            (
                "shoal_host_network_packets_total",
                "Packets through the host's network interfaces since the daemon started.",
                true,
            ),
        ] {
            header(&mut out, name, "counter", help);
            for ((interface, direction), (bytes, n)) in &self.host_net {
                let _ = writeln!(
                    out,
                    "{name}{{interface=\"{}\",direction=\"{direction}\"}} {}",
                    escape(interface),
                    if packets { n } else { bytes }
                );
            }
        }
        for (name, help, family) in [
            (
                "shoal_intent_log_commit_duration_seconds",
                "Time an intent log commit (an fsync or stable write) waited for its log write.",
                &self.log_commits,
            ),
            (
                "shoal_txg_sync_duration_seconds",
                "Time each transaction group took to sync.",
                &self.txg_syncs,
            ),
        ] {
            header(&mut out, name, "histogram", help);
            for (p, h) in family {
                let pool = pools.get(*p as usize).cloned().unwrap_or_default();
                histogram(&mut out, name, &format!("pool=\"{}\"", escape(&pool)), h);
            }
        }
        header(
            &mut out,
            "shoal_analytics_events_dropped_total",
            "counter",
            "Events lost because a recording queue was full.",
        );
        let _ = writeln!(out, "shoal_analytics_events_dropped_total {dropped}");
        header(
            &mut out,
            "shoal_analytics_events_late_total",
            "counter",
            "Events that arrived after their second was sealed.",
        );
        let _ = writeln!(out, "shoal_analytics_events_late_total {late}");
        out
    }
}

#[cfg(test)]
mod histogram_tests {
    use super::*;

    #[test]
    fn bounds_agree_and_buckets_are_cumulative() {
        let shown: Vec<String> = LATENCY_LE_NS.map(|ns| le_seconds(ns).to_string()).into();
        assert_eq!(
            shown,
            [
                "0.00005", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01",
                "0.025", "0.1", "1", "10"
            ]
        );
        let mut h = Histogram::default();
        // On a bound counts in it (le is <=); past the last bound only in +Inf.
        for ns in [1, 50_000, 50_001, 1_000_000, 20_000_000_000] {
            h.add(ns);
        }
        let c = h.cumulative();
        assert_eq!(&c[..5], &[2, 3, 3, 3, 4]);
        assert_eq!(c[11], 4);
        assert_eq!(h.count, 5);
    }

    /// `Totals` counts NFS events exactly as a plain map keyed by (version, op,
    /// share) would, whatever the order: through the last-key shortcut, the index,
    /// and operation names equal in content but at different addresses (one key).
    #[test]
    fn nfs_totals_count_every_key_as_a_plain_map() {
        use crate::event::NfsEvent;
        use proptest::prelude::*;
        let read_a: &'static str = "read";
        let read_b: &'static str = Box::leak(String::from("read").into_boxed_str());
        assert!(!std::ptr::eq(read_a, read_b));
        let keys: [NfsKey; 6] = [
            (3, read_a, 1),
            (3, read_b, 1),
            (3, read_a, 2),
            (4, read_a, 1),
            (3, "write", 1),
            (3, "getattr", 0),
        ];
        /// (version, op, share) → (operations, bytes, latency count, latency sum).
        type Counted = BTreeMap<(u8, String, u64), (u64, u64, u64, u128)>;
        let at = std::time::Instant::now();
        proptest::test_runner::TestRunner::default()
            .run(
                &proptest::collection::vec((0..keys.len(), 0u32..1 << 20, 1u64..1 << 34), 0..200),
                |seq| {
                    let mut totals = Totals::default();
                    let mut plain: Counted = BTreeMap::new();
                    for &(k, bytes, latency_ns) in &seq {
                        let (version, op, fsid) = keys[k];
                        totals.add(&Event::Nfs(NfsEvent {
                            version,
                            minor: 0,
                            op,
                            client: std::net::Ipv4Addr::LOCALHOST.into(),
                            fsid,
                            ino: 1,
                            bytes,
                            offset: 0,
                            request_bytes: 100,
                            reply_bytes: 100,
                            latency_ns,
                            at: crate::Ticks::at(at),
                        }));
                        let p = plain.entry((version, op.to_string(), fsid)).or_default();
                        p.0 += 1;
                        p.1 += bytes as u64;
                        p.2 += 1;
                        p.3 += latency_ns as u128;
                    }
                    let got: Counted = totals
                        .nfs
                        .iter()
                        .map(|((v, op, fsid), t)| {
                            let value = (t.ops, t.payload_bytes, t.latency.count, t.latency.sum_ns);
                            ((*v, op.to_string(), *fsid), value)
                        })
                        .collect();
                    prop_assert_eq!(got.len(), totals.nfs.len(), "one entry per key");
                    prop_assert_eq!(got, plain);
                    Ok(())
                },
            )
            .unwrap();
    }
}
