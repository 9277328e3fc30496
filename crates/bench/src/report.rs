//! The results of a run: the aggregate over clients (with first-done "stonewall" and
//! last-done figures), the per-second series, and the forms they are printed in: a
//! table, JSON (documented in docs/bench.md), CSV, and an HTML page with SVG charts.
//!
//! Invariant: the aggregate's operation and byte counts are the sums of the clients'
//! (the report is built from the clients' results and nothing else).

use crate::job::{Job, Workload};
use crate::plan::Prediction;
use crate::server_side::ServerSide;
use crate::stats::{ClientResult, Hist, HistWire, Latency, OpFigures, Second};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

pub const FORMAT: &str = "shoal-bench/1";

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Rate {
    pub seconds: f64,
    pub ops: f64,
    pub bytes: f64,
    pub mb_per_s: f64,
    pub iops: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Aggregate {
    pub clients: usize,
    pub threads: usize,
    pub ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    /// Every client's work up to when the first client finished.
    pub stonewall: Rate,
    /// All the work, up to when the last client finished.
    pub last_done: Rate,
    pub slowest_client: String,
    pub latency: Latency,
    pub per_op: BTreeMap<String, OpFigures>,
}

/// One second of the whole run.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct SecondPoint {
    pub t: usize,
    pub mb_per_s: f64,
    pub read_mb_per_s: f64,
    pub write_mb_per_s: f64,
    pub iops: f64,
    pub mean_latency_us: f64,
    pub max_latency_us: f64,
}

impl SecondPoint {
    fn of(t: usize, s: &Second) -> SecondPoint {
        SecondPoint {
            t,
            mb_per_s: (s.read_bytes + s.write_bytes) as f64 / 1e6,
            read_mb_per_s: s.read_bytes as f64 / 1e6,
            write_mb_per_s: s.write_bytes as f64 / 1e6,
            iops: s.ops as f64,
            mean_latency_us: if s.ops == 0 {
                0.0
            } else {
                s.latency_sum_ns as f64 / s.ops as f64 / 1000.0
            },
            max_latency_us: s.latency_max_ns as f64 / 1000.0,
        }
    }
}

/// Predicted against measured, for the workload's main figure.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Compared {
    pub prediction: Prediction,
    pub figure: String,
    pub predicted: f64,
    pub measured: f64,
    pub measured_over_predicted: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub format: String,
    pub job: Job,
    pub aggregate: Aggregate,
    pub clients: Vec<ClientResult>,
    pub seconds: Vec<SecondPoint>,
    pub server: Option<ServerSide>,
    pub predicted: Option<Compared>,
}

/// Work a client did in its first `t` seconds (the per-second series, interpolated
/// within the second `t` falls in).
fn work_by(c: &ClientResult, t: f64) -> (f64, f64) {
    let mut ops = 0.0;
    let mut bytes = 0.0;
    for (i, s) in c.seconds.iter().enumerate() {
        // Second i covers [i, i + 1), cut short by the client's end.
        let (from, to) = (i as f64, (i as f64 + 1.0).min(c.done_s));
        let share = if to <= from {
            f64::from(u8::from(t >= from))
        } else {
            ((t - from) / (to - from)).clamp(0.0, 1.0)
        };
        ops += s.ops as f64 * share;
        bytes += (s.read_bytes + s.write_bytes) as f64 * share;
    }
    (ops, bytes)
}

fn rate(seconds: f64, ops: f64, bytes: f64) -> Rate {
    let s = seconds.max(1e-9);
    Rate {
        seconds,
        ops,
        bytes,
        mb_per_s: bytes / 1e6 / s,
        iops: ops / s,
    }
}

impl Report {
    pub fn build(job: &Job, mut clients: Vec<ClientResult>, server: Option<ServerSide>) -> Report {
        clients.sort_by(|a, b| a.client.cmp(&b.client));
        let mut agg = Aggregate {
            clients: clients.len(),
            ..Aggregate::default()
        };
        let mut per_op: BTreeMap<String, (Hist, u64)> = BTreeMap::new();
        let mut seconds: Vec<Second> = Vec::new();
        let mut all = Hist::default();
        for c in &clients {
            agg.threads += c.threads;
            agg.ops += c.ops;
            agg.read_bytes += c.read_bytes;
            agg.write_bytes += c.write_bytes;
            agg.errors += c.errors;
            for (op, f) in &c.per_op {
                let h = Hist::from(&f.histogram);
                all.merge(&h);
                let e = per_op.entry(op.clone()).or_default();
                e.0.merge(&h);
                e.1 += f.bytes;
            }
            if seconds.len() < c.seconds.len() {
                seconds.resize(c.seconds.len(), Second::default());
            }
            for (a, b) in seconds.iter_mut().zip(&c.seconds) {
                a.merge(b);
            }
        }
        agg.latency = all.summary();
        agg.per_op = per_op
            .into_iter()
            .map(|(op, (h, bytes))| {
                let f = OpFigures {
                    ops: h.count(),
                    bytes,
                    latency: h.summary(),
                    histogram: HistWire::from(&h),
                };
                (op, f)
            })
            .collect();
        if let Some(first) = clients.iter().map(|c| c.done_s).min_by(f64::total_cmp) {
            let (ops, bytes) = clients
                .iter()
                .map(|c| work_by(c, first))
                .fold((0.0, 0.0), |a, w| (a.0 + w.0, a.1 + w.1));
            agg.stonewall = rate(first, ops, bytes);
        }
        if let Some(slowest) = clients.iter().max_by(|a, b| a.done_s.total_cmp(&b.done_s)) {
            agg.slowest_client = slowest.client.clone();
            agg.last_done = rate(
                slowest.done_s,
                agg.ops as f64,
                (agg.read_bytes + agg.write_bytes) as f64,
            );
        }
        let predicted = prediction(job, &agg);
        Report {
            format: FORMAT.into(),
            job: job.clone(),
            aggregate: agg,
            clients,
            seconds: seconds
                .iter()
                .enumerate()
                .map(|(t, s)| SecondPoint::of(t, s))
                .collect(),
            server,
            predicted,
        }
    }

    /// The human form: per-client lines, the aggregate, the server's side.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let j = &self.job;
        let _ = writeln!(
            out,
            "{} ({}): {} clients x {} threads, depth {}, I/O {} bytes, file set {} x {} bytes = {:.1} MB",
            j.name,
            j.workload.name(),
            self.aggregate.clients,
            j.threads,
            j.depth,
            j.io_size,
            j.files,
            j.file_size,
            j.set_bytes() as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "{:<28} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}",
            "client", "done s", "MB/s", "IOPS", "mean us", "p99 us", "max us", "errors"
        );
        let line = |out: &mut String,
                    name: &str,
                    done: f64,
                    mbs: f64,
                    iops: f64,
                    l: &Latency,
                    errors: u64| {
            let _ = writeln!(
                out,
                "{:<28} {:>8.2} {:>10.1} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>7}",
                name, done, mbs, iops, l.mean_us, l.p99_us, l.max_us, errors
            );
        };
        for c in &self.clients {
            line(
                &mut out, &c.client, c.done_s, c.mb_per_s, c.iops, &c.latency, c.errors,
            );
        }
        let a = &self.aggregate;
        line(
            &mut out,
            "all (last done)",
            a.last_done.seconds,
            a.last_done.mb_per_s,
            a.last_done.iops,
            &a.latency,
            a.errors,
        );
        let _ = writeln!(
            out,
            "{:<28} {:>8.2} {:>10.1} {:>10.0}   (slowest client: {})",
            "all (stonewall)",
            a.stonewall.seconds,
            a.stonewall.mb_per_s,
            a.stonewall.iops,
            a.slowest_client
        );
        for (op, f) in &a.per_op {
            let _ = writeln!(
                out,
                "  {op:<8} {:>10} ops {:>12.1} MB  mean {:.0} us  p50 {:.0}  p99 {:.0}  p99.9 {:.0}",
                f.ops,
                f.bytes as f64 / 1e6,
                f.latency.mean_us,
                f.latency.p50_us,
                f.latency.p99_us,
                f.latency.p999_us
            );
        }
        if let Some(s) = &self.server {
            let _ = writeln!(
                out,
                "server: NFS read {:.1} MB, disks read {:.1} MB, cache devices read {:.1} MB, NFS write {:.1} MB, disks wrote {:.1} MB, NFS records out {:.1} MB, ARC hit ratio {}",
                s.nfs_read_bytes as f64 / 1e6,
                s.device_read_bytes as f64 / 1e6,
                s.cache_device_read_bytes as f64 / 1e6,
                s.nfs_write_bytes as f64 / 1e6,
                s.device_write_bytes as f64 / 1e6,
                s.network_out_bytes as f64 / 1e6,
                s.arc_hit_ratio.map(|r| format!("{:.1}%", r * 100.0)).unwrap_or_else(|| "-".into())
            );
            let _ = writeln!(
                out,
                "server CPU: {:.2} s ({:.0}% of one CPU), {} per GB moved; host CPUs {:.0}% busy; host network in {:.1} MB, out {:.1} MB",
                s.server_cpu_seconds,
                s.server_cpu_percent,
                s.server_cpu_seconds_per_gb
                    .map(|c| format!("{c:.2} s"))
                    .unwrap_or_else(|| "-".into()),
                s.host_cpu_busy_percent,
                s.host_net_in_bytes as f64 / 1e6,
                s.host_net_out_bytes as f64 / 1e6
            );
            if let Some(c) = &s.cache_check {
                let _ = writeln!(out, "cache check ({:?} claimed): {}", c.claimed, c.message);
            }
        }
        if let Some(p) = &self.predicted {
            let _ = writeln!(
                out,
                "plan: {} predicted {:.1}, measured {:.1} ({:.0}% of the model)",
                p.figure,
                p.predicted,
                p.measured,
                p.measured_over_predicted * 100.0
            );
        }
        for c in &self.clients {
            for e in &c.error_samples {
                let _ = writeln!(out, "error on {}: {e}", c.client);
            }
        }
        out
    }

    /// One line a second: the aggregate, then each client's MB/s.
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "t,mb_per_s,read_mb_per_s,write_mb_per_s,iops,mean_latency_us,max_latency_us",
        );
        for c in &self.clients {
            let _ = write!(out, ",{}_mb_per_s", c.client.replace(',', "_"));
        }
        out.push('\n');
        for p in &self.seconds {
            let _ = write!(
                out,
                "{},{:.3},{:.3},{:.3},{:.0},{:.1},{:.1}",
                p.t,
                p.mb_per_s,
                p.read_mb_per_s,
                p.write_mb_per_s,
                p.iops,
                p.mean_latency_us,
                p.max_latency_us
            );
            for c in &self.clients {
                let b = c
                    .seconds
                    .get(p.t)
                    .map(|s| s.read_bytes + s.write_bytes)
                    .unwrap_or(0);
                let _ = write!(out, ",{:.3}", b as f64 / 1e6);
            }
            out.push('\n');
        }
        out
    }

    /// A self-contained HTML page: throughput (aggregate and per client) and latency
    /// (mean and max) over time, as inline SVG.
    pub fn html(&self) -> String {
        let t: Vec<f64> = self.seconds.iter().map(|p| p.t as f64 + 0.5).collect();
        let mut through = vec![(
            "all".to_string(),
            t.iter()
                .copied()
                .zip(self.seconds.iter().map(|p| p.mb_per_s))
                .collect::<Vec<_>>(),
        )];
        for c in &self.clients {
            let pts = c
                .seconds
                .iter()
                .enumerate()
                .map(|(i, s)| (i as f64 + 0.5, (s.read_bytes + s.write_bytes) as f64 / 1e6))
                .collect();
            through.push((c.client.clone(), pts));
        }
        let lat = vec![
            (
                "mean".to_string(),
                t.iter()
                    .copied()
                    .zip(self.seconds.iter().map(|p| p.mean_latency_us))
                    .collect::<Vec<_>>(),
            ),
            (
                "max".to_string(),
                t.iter()
                    .copied()
                    .zip(self.seconds.iter().map(|p| p.max_latency_us))
                    .collect::<Vec<_>>(),
            ),
        ];
        let esc = |s: &str| {
            s.replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
        };
        format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>shoal bench: {name}</title>\
<style>body{{font-family:sans-serif;margin:2em;color:#222}}pre{{background:#f4f4f4;padding:1em;overflow:auto}}</style></head><body>\
<h1>shoal bench: {name}</h1>{t1}{t2}<pre>{table}</pre></body></html>\n",
            name = esc(&self.job.name),
            t1 = svg_chart("Throughput (MB/s)", &through),
            t2 = svg_chart("Latency (us)", &lat),
            table = esc(&self.table()),
        )
    }
}

fn prediction(job: &Job, agg: &Aggregate) -> Option<Compared> {
    let layout = crate::plan::parse_layout(job.layout.as_deref()?).ok()?;
    let p = crate::plan::predict(layout, job.disk_mbps?, job.disk_iops?, None);
    let (figure, predicted, measured) = match job.workload {
        Workload::Read => (
            "streaming read MB/s",
            p.streaming_read_mb_per_s,
            agg.last_done.mb_per_s,
        ),
        Workload::Write => (
            "streaming write MB/s",
            p.streaming_write_mb_per_s,
            agg.last_done.mb_per_s,
        ),
        Workload::Randread => ("random read IOPS", p.random_read_iops, agg.last_done.iops),
        _ => return None,
    };
    Some(Compared {
        prediction: p,
        figure: figure.into(),
        predicted,
        measured,
        measured_over_predicted: measured / predicted.max(1e-9),
    })
}

const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// A line chart of named series of (x, y) points.
fn svg_chart(title: &str, series: &[(String, Vec<(f64, f64)>)]) -> String {
    let (w, h, left, bottom) = (900.0, 280.0, 70.0, 30.0);
    let xmax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let x = |v: f64| left + v / xmax * (w - left - 10.0);
    let y = |v: f64| h - bottom - v / ymax * (h - bottom - 10.0);
    let mut svg = format!("<h2>{title}</h2><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-size=\"11\">");
    let _ = write!(
        svg,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>",
        y(0.0),
        w - 10.0,
        y(0.0)
    );
    let _ = write!(
        svg,
        "<line x1=\"{left}\" y1=\"10\" x2=\"{left}\" y2=\"{}\" stroke=\"#888\"/>",
        y(0.0)
    );
    for i in 0..=4 {
        let v = ymax / 1.1 * i as f64 / 4.0;
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{v:.0}</text>",
            left - 4.0,
            y(v) + 4.0
        );
    }
    for i in 0..=5 {
        let v = xmax * i as f64 / 5.0;
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{v:.0}s</text>",
            x(v),
            h - 10.0
        );
    }
    for (k, (name, pts)) in series.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|(a, b)| format!("{:.1},{:.1}", x(*a), y(*b)))
            .collect();
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
            path.join(" ")
        );
        let name = name.replace('&', "&amp;").replace('<', "&lt;");
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" fill=\"{colour}\">{name}</text>",
            left + 10.0 + 140.0 * (k % 6) as f64,
            12.0 + 12.0 * (k / 6) as f64
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobFile;

    fn client(name: &str, done: f64, per_second: &[u64]) -> ClientResult {
        let seconds: Vec<Second> = per_second
            .iter()
            .map(|b| Second {
                ops: b / 100,
                read_bytes: *b,
                ..Second::default()
            })
            .collect();
        let bytes: u64 = per_second.iter().sum();
        ClientResult {
            client: name.into(),
            threads: 2,
            done_s: done,
            ops: bytes / 100,
            read_bytes: bytes,
            seconds,
            ..ClientResult::default()
        }
    }

    #[test]
    fn aggregate_sums_clients_and_stonewall_stops_at_the_first_done() {
        let job = JobFile::parse("server = \"127.0.0.1:1\"\nexport = \"/t\"\n")
            .unwrap()
            .resolve(crate::job::Sizing::default())
            .unwrap();
        let a = client("a", 2.0, &[1000, 1000]);
        let b = client("b", 3.5, &[500, 500, 500, 500]);
        let r = Report::build(&job, vec![b, a], None);
        assert_eq!(r.aggregate.read_bytes, 4000);
        assert_eq!(r.aggregate.ops, 40);
        assert_eq!(r.aggregate.slowest_client, "b");
        assert_eq!(r.aggregate.stonewall.bytes, 3000.0);
        assert_eq!(r.aggregate.stonewall.seconds, 2.0);
        assert_eq!(r.aggregate.last_done.seconds, 3.5);
        assert_eq!(r.seconds[0].read_mb_per_s, 1500.0 / 1e6);
        let csv = r.csv();
        assert!(csv.starts_with("t,mb_per_s"));
        assert_eq!(csv.lines().count(), 5);
        assert!(r.html().contains("<svg"));
        assert!(r.table().contains("slowest client: b"));
    }
}
