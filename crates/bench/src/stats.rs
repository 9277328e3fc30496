//! What a run measures: per-operation latency histograms, per-second series, and the
//! per-client and aggregate summaries that the JSON report carries.
//!
//! The histogram is log-linear: 8 buckets per power of two of nanoseconds, so any
//! percentile is within 1/16 (6%) of the true value, and two histograms merge by
//! adding counts, which is how per-thread figures become per-client and aggregate
//! ones without keeping every sample. Each worker thread owns its `Recorder` (no
//! sharing on the I/O path); only the two live counters are shared, for progress.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

const SUB_BUCKETS: u64 = 8;
const BUCKETS: usize = 320;

/// A latency histogram in nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hist {
    counts: Vec<u64>,
    count: u64,
    sum_ns: u64,
    max_ns: u64,
}

impl Default for Hist {
    fn default() -> Hist {
        Hist {
            counts: vec![0; BUCKETS],
            count: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }
}

fn bucket_of(ns: u64) -> usize {
    if ns < SUB_BUCKETS {
        return ns as usize;
    }
    let msb = 63 - ns.leading_zeros() as u64;
    let sub = (ns >> (msb - 3)) & (SUB_BUCKETS - 1);
    (((msb - 2) * SUB_BUCKETS + sub) as usize).min(BUCKETS - 1)
}

/// The middle of a bucket's range.
fn bucket_value(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB_BUCKETS {
        return i;
    }
    let msb = i / SUB_BUCKETS + 2;
    let width = 1u64 << (msb - 3);
    (SUB_BUCKETS + i % SUB_BUCKETS) * width + width / 2
}

impl Hist {
    pub fn record(&mut self, ns: u64) {
        self.counts[bucket_of(ns)] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    pub fn merge(&mut self, other: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.count += other.count;
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64
        }
    }

    /// The value below which a fraction `q` of the samples lie (the maximum for 1.0).
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_value(i).min(self.max_ns);
            }
        }
        self.max_ns
    }

    pub fn summary(&self) -> Latency {
        let us = |ns: u64| ns as f64 / 1000.0;
        Latency {
            mean_us: self.mean_ns() / 1000.0,
            p50_us: us(self.quantile_ns(0.50)),
            p90_us: us(self.quantile_ns(0.90)),
            p99_us: us(self.quantile_ns(0.99)),
            p999_us: us(self.quantile_ns(0.999)),
            max_us: us(self.max_ns),
        }
    }
}

/// Sparse form for the wire and the JSON report: `[bucket, count]` pairs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HistWire {
    pub buckets: Vec<(u32, u64)>,
    pub count: u64,
    pub sum_ns: u64,
    pub max_ns: u64,
}

impl From<&Hist> for HistWire {
    fn from(h: &Hist) -> HistWire {
        HistWire {
            buckets: h
                .counts
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(|(i, c)| (i as u32, *c))
                .collect(),
            count: h.count,
            sum_ns: h.sum_ns,
            max_ns: h.max_ns,
        }
    }
}

impl From<&HistWire> for Hist {
    fn from(w: &HistWire) -> Hist {
        let mut h = Hist::default();
        for (i, c) in &w.buckets {
            h.counts[(*i as usize).min(BUCKETS - 1)] += c;
        }
        h.count = w.count;
        h.sum_ns = w.sum_ns;
        h.max_ns = w.max_ns;
        h
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// The NFS operations a workload issues (what per-operation figures are keyed by).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    Read,
    Write,
    Commit,
    Create,
    Remove,
    Getattr,
    Lookup,
    /// A stat a client answered itself, from attributes it holds under an NFSv4
    /// delegation (no call to the server).
    GetattrDelegated,
    /// An open, read and close a client served itself under an NFSv4 delegation, from
    /// the data it wrote (no call to the server; no bytes counted as moved).
    ReadDelegated,
}

impl Op {
    pub const ALL: [Op; 9] = [
        Op::Read,
        Op::Write,
        Op::Commit,
        Op::Create,
        Op::Remove,
        Op::Getattr,
        Op::Lookup,
        Op::GetattrDelegated,
        Op::ReadDelegated,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Commit => "commit",
            Op::Create => "create",
            Op::Remove => "remove",
            Op::Getattr => "getattr",
            Op::Lookup => "lookup",
            Op::GetattrDelegated => "getattr_delegated",
            Op::ReadDelegated => "read_delegated",
        }
    }
}

/// One second of one client (or of all of them).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Second {
    pub ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub latency_sum_ns: u64,
    pub latency_max_ns: u64,
}

impl Second {
    pub fn merge(&mut self, o: &Second) {
        self.ops += o.ops;
        self.read_bytes += o.read_bytes;
        self.write_bytes += o.write_bytes;
        self.latency_sum_ns += o.latency_sum_ns;
        self.latency_max_ns = self.latency_max_ns.max(o.latency_max_ns);
    }
}

/// Counters a client's threads share with the progress reporter.
#[derive(Debug, Default)]
pub struct Live {
    pub ops: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
}

/// One worker thread's measurements.
pub struct Recorder {
    start: Instant,
    pub per_op: BTreeMap<Op, (Hist, u64)>,
    pub seconds: Vec<Second>,
    pub errors: u64,
    live: Arc<Live>,
}

impl Recorder {
    pub fn new(start: Instant, live: Arc<Live>) -> Recorder {
        Recorder {
            start,
            per_op: BTreeMap::new(),
            seconds: Vec::new(),
            errors: 0,
            live,
        }
    }

    /// One operation, sent at `sent` and finished now, that moved `bytes` (one clock
    /// read gives both its latency and its second).
    pub fn record(&mut self, op: Op, bytes: u64, sent: Instant) {
        self.record_at(op, bytes, sent, Instant::now());
    }

    fn record_at(&mut self, op: Op, bytes: u64, sent: Instant, now: Instant) {
        let ns = now
            .saturating_duration_since(sent)
            .as_nanos()
            .min(u64::MAX as u128) as u64;
        let entry = self.per_op.entry(op).or_default();
        entry.0.record(ns);
        entry.1 += bytes;
        let sec = now.saturating_duration_since(self.start).as_secs() as usize;
        if self.seconds.len() <= sec {
            self.seconds.resize(sec + 1, Second::default());
        }
        let s = &mut self.seconds[sec];
        s.ops += 1;
        match op {
            Op::Read => s.read_bytes += bytes,
            _ => s.write_bytes += bytes,
        }
        s.latency_sum_ns += ns;
        s.latency_max_ns = s.latency_max_ns.max(ns);
        self.live.ops.fetch_add(1, Ordering::Relaxed);
        self.live.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn error(&mut self) {
        self.errors += 1;
        self.live.errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Per-operation figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct OpFigures {
    pub ops: u64,
    pub bytes: u64,
    pub latency: Latency,
    pub histogram: HistWire,
}

/// One client's whole run: what an agent sends back.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClientResult {
    /// `agent-address#index`, or `local#index`.
    pub client: String,
    /// The local address its connections came from, when it chose one.
    pub source: Option<String>,
    pub threads: usize,
    /// Seconds from the common start to when its last thread finished.
    pub done_s: f64,
    pub ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    /// Over `done_s`.
    pub mb_per_s: f64,
    pub iops: f64,
    pub latency: Latency,
    pub per_op: BTreeMap<String, OpFigures>,
    pub seconds: Vec<Second>,
    /// Errors seen, first few only, for the report.
    pub error_samples: Vec<String>,
}

impl ClientResult {
    /// Folds the threads' recorders into one client's figures.
    pub fn from_threads(
        client: String,
        source: Option<String>,
        recorders: Vec<Recorder>,
        done_s: f64,
        error_samples: Vec<String>,
    ) -> ClientResult {
        let threads = recorders.len();
        let mut per_op: BTreeMap<Op, (Hist, u64)> = BTreeMap::new();
        let mut seconds: Vec<Second> = Vec::new();
        let mut errors = 0;
        for r in recorders {
            errors += r.errors;
            for (op, (h, b)) in r.per_op {
                let e = per_op.entry(op).or_default();
                e.0.merge(&h);
                e.1 += b;
            }
            if seconds.len() < r.seconds.len() {
                seconds.resize(r.seconds.len(), Second::default());
            }
            for (a, b) in seconds.iter_mut().zip(&r.seconds) {
                a.merge(b);
            }
        }
        let mut all = Hist::default();
        let mut out = ClientResult {
            client,
            source,
            threads,
            done_s,
            errors,
            seconds,
            error_samples,
            ..ClientResult::default()
        };
        for (op, (h, bytes)) in &per_op {
            all.merge(h);
            out.ops += h.count();
            if *op == Op::Read {
                out.read_bytes += bytes;
            } else {
                out.write_bytes += bytes;
            }
            out.per_op.insert(
                op.name().to_string(),
                OpFigures {
                    ops: h.count(),
                    bytes: *bytes,
                    latency: h.summary(),
                    histogram: h.into(),
                },
            );
        }
        out.latency = all.summary();
        let secs = done_s.max(1e-9);
        out.mb_per_s = (out.read_bytes + out.write_bytes) as f64 / 1e6 / secs;
        out.iops = out.ops as f64 / secs;
        out
    }

    pub fn bytes(&self) -> u64 {
        self.read_bytes + self.write_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    proptest! {
        #[test]
        fn quantiles_are_within_a_sixteenth(mut v in proptest::collection::vec(1u64..10_000_000_000, 1..400), q in 0.0f64..1.0) {
            let mut h = Hist::default();
            for x in &v { h.record(*x); }
            v.sort_unstable();
            let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
            let exact = v[rank - 1] as f64;
            let got = h.quantile_ns(q) as f64;
            prop_assert!((got - exact).abs() <= exact / 16.0 + 1.0, "q {} exact {} got {}", q, exact, got);
            let wire = HistWire::from(&h);
            prop_assert_eq!(Hist::from(&wire), h);
        }
    }

    #[test]
    fn buckets_are_monotonic_and_cover_their_values() {
        let mut last = 0;
        for ns in [
            0u64,
            1,
            7,
            8,
            15,
            16,
            17,
            1000,
            1 << 20,
            (1 << 20) + 12345,
            1 << 40,
        ] {
            let b = bucket_of(ns);
            assert!(b >= last);
            last = b;
            let v = bucket_value(b);
            if ns >= 8 && b < BUCKETS - 1 {
                assert!(
                    (v as f64 - ns as f64).abs() <= ns as f64 / 16.0 + 1.0,
                    "{ns} -> {v}"
                );
            }
        }
    }

    #[test]
    fn client_figures_are_the_sum_of_their_threads() {
        let start = Instant::now();
        let live = Arc::new(Live::default());
        let mut a = Recorder::new(start, live.clone());
        let mut b = Recorder::new(start, live.clone());
        let now = Instant::now();
        a.record_at(Op::Read, 8192, now - Duration::from_micros(100), now);
        a.record_at(Op::Read, 8192, now - Duration::from_micros(300), now);
        b.record_at(Op::Write, 4096, now - Duration::from_micros(200), now);
        b.error();
        let c = ClientResult::from_threads("c".into(), None, vec![a, b], 2.0, vec![]);
        assert_eq!(
            (c.ops, c.read_bytes, c.write_bytes, c.errors),
            (3, 16384, 4096, 1)
        );
        assert_eq!(c.per_op["read"].ops, 2);
        assert!((c.latency.mean_us - 200.0).abs() < 1.0);
        assert_eq!(live.ops.load(Ordering::Relaxed), 3);
        assert!((c.mb_per_s - 20480.0 / 1e6 / 2.0).abs() < 1e-9);
    }
}
