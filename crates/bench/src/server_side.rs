//! The server's side of a run, when the server is shoal: its `/metrics` read before
//! and after the run, so the report can set device bytes against NFS bytes and ARC
//! hits against misses, and flag a run whose claim about where reads came from is
//! false ("streaming read from disk" that the ARC served, "from the cache device"
//! that the disks served). It also gives the server's CPU (the daemon's own, and the
//! host's busy share) and the host's network bytes in and out over the run, as the
//! original appliance's result tables did, and CPU-seconds per GB moved.
//!
//! For a server that is not shoal (a peer on this host), `Counters::from_proc` reads
//! the same CPU and network figures from /proc: the server's processes' utime and
//! stime, /proc/stat and /proc/net/dev.
//!
//! Only shoal's public admin API is used (plain HTTP; a bearer token from
//! `SHOAL_API_TOKEN` when the API needs a login), never its internals.

use crate::job::Expect;
use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The counters the check needs, summed over pools, shares and devices.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    pub nfs_read_bytes: f64,
    pub nfs_write_bytes: f64,
    /// Reads and writes of the pool's devices but its cache devices.
    pub device_read_bytes: f64,
    pub device_write_bytes: f64,
    /// Reads of cache (L2ARC) devices.
    pub cache_device_read_bytes: f64,
    pub network_out_bytes: f64,
    pub arc_demand_hits: f64,
    pub arc_demand_misses: f64,
    pub arc_max_bytes: BTreeMap<String, f64>,
    /// What each pool's cache devices can hold.
    pub l2arc_capacity_bytes: BTreeMap<String, f64>,
    /// The server's own CPU seconds (shoal's, or the processes `from_proc` was given).
    pub server_cpu_seconds: f64,
    /// The host's CPU seconds in user and kernel mode, and in every mode, all CPUs.
    pub host_cpu_busy_seconds: f64,
    pub host_cpu_all_seconds: f64,
    /// Bytes through the host's interfaces, all of them.
    pub host_net_in_bytes: f64,
    pub host_net_out_bytes: f64,
}

fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("{key}=\"");
    let at = labels.find(&pat)? + pat.len();
    let end = labels[at..].find('"')?;
    Some(&labels[at..at + end])
}

/// Reads the Prometheus text format (only the families above; the rest is skipped).
pub fn parse_metrics(text: &str) -> Counters {
    let mut c = Counters::default();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (series, ""),
        };
        let cache = label(labels, "role") == Some("cache");
        match (name, label(labels, "op"), label(labels, "kind")) {
            ("shoal_nfs_payload_bytes_total", Some("read"), _) => c.nfs_read_bytes += v,
            ("shoal_nfs_payload_bytes_total", Some("write"), _) => c.nfs_write_bytes += v,
            ("shoal_device_bytes_total", Some("read"), _) if cache => {
                c.cache_device_read_bytes += v
            }
            ("shoal_device_bytes_total", Some("read"), _) => c.device_read_bytes += v,
            ("shoal_device_bytes_total", Some("write"), _) if !cache => c.device_write_bytes += v,
            ("shoal_cpu_seconds_total", _, _) => c.server_cpu_seconds += v,
            ("shoal_host_cpu_seconds_total", _, _) => {
                c.host_cpu_all_seconds += v;
                if matches!(label(labels, "mode"), Some("user" | "kernel")) {
                    c.host_cpu_busy_seconds += v;
                }
            }
            ("shoal_host_network_bytes_total", _, _) => match label(labels, "direction") {
                Some("in") => c.host_net_in_bytes += v,
                Some("out") => c.host_net_out_bytes += v,
                _ => {}
            },
            ("shoal_l2arc_capacity_bytes", _, _) => {
                let pool = label(labels, "pool").unwrap_or("").to_string();
                *c.l2arc_capacity_bytes.entry(pool).or_default() += v;
            }
            ("shoal_network_bytes_total", _, _) if label(labels, "direction") == Some("out") => {
                c.network_out_bytes += v
            }
            ("shoal_arc_hits_total", _, Some("demand")) => c.arc_demand_hits += v,
            ("shoal_arc_misses_total", _, Some("demand")) => c.arc_demand_misses += v,
            ("shoal_arc_max_bytes", _, _) => {
                let pool = label(labels, "pool").unwrap_or("").to_string();
                *c.arc_max_bytes.entry(pool).or_default() += v;
            }
            _ => {}
        }
    }
    c
}

impl Counters {
    /// The server's CPU (processes `pids`, their threads included) and the host's CPU
    /// and network from /proc, for a server that is not shoal, on this host.
    pub fn from_proc(pids: &[u32]) -> Result<Counters> {
        let mut c = Counters::default();
        for pid in pids {
            c.server_cpu_seconds += analytics::cpu::pid_seconds(*pid).ok_or_else(|| {
                anyhow!("/proc/{pid}/stat: is the server's process {pid} running?")
            })?;
        }
        let hz = analytics::host::clock_ticks_per_second() as f64;
        let stat = std::fs::read_to_string("/proc/stat").context("/proc/stat")?;
        let (busy, all) = analytics::host::busy_and_all_ticks(&stat);
        c.host_cpu_busy_seconds = busy as f64 / hz;
        c.host_cpu_all_seconds = all as f64 / hz;
        let dev = std::fs::read_to_string("/proc/net/dev").context("/proc/net/dev")?;
        let (inb, outb) = analytics::host::net_bytes_in_out(&dev);
        c.host_net_in_bytes = inb as f64;
        c.host_net_out_bytes = outb as f64;
        Ok(c)
    }
}

/// shoal's admin API.
#[derive(Debug, Clone)]
pub struct ShoalApi {
    base: String,
}

impl ShoalApi {
    pub fn new(url: &str) -> Result<ShoalApi> {
        let base = url.trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            return Err(anyhow!("shoal_api '{url}': give an http:// address (the bench speaks plain HTTP to the API)"));
        }
        Ok(ShoalApi { base })
    }

    pub fn counters(&self) -> Result<Counters> {
        let url = format!("{}/metrics", self.base);
        let mut req = ureq::get(&url);
        if let Ok(token) = std::env::var("SHOAL_API_TOKEN") {
            req = req.header("Authorization", &format!("Bearer {token}"));
        }
        let text = req
            .call()
            .with_context(|| format!("GET {url}"))?
            .body_mut()
            .read_to_string()
            .with_context(|| format!("reading {url}"))?;
        let c = parse_metrics(&text);
        if c.arc_max_bytes.is_empty() {
            return Err(anyhow!(
                "{url} has no shoal_arc_max_bytes: is this shoal, with a pool?"
            ));
        }
        Ok(c)
    }

    /// The counters once they stop moving: analytics fold events in each second, so
    /// the last second of a run shows up a moment after it ends.
    pub fn settled_counters(&self) -> Result<Counters> {
        let deadline = Instant::now() + Duration::from_secs(6);
        let mut last = self.counters()?;
        loop {
            std::thread::sleep(Duration::from_millis(1200));
            let now = self.counters()?;
            let same = now.nfs_read_bytes == last.nfs_read_bytes
                && now.nfs_write_bytes == last.nfs_write_bytes
                && now.device_read_bytes == last.device_read_bytes;
            if same || Instant::now() > deadline {
                return Ok(now);
            }
            last = now;
        }
    }

    /// The ARC bound and the cache devices' capacity of the pool holding `export`
    /// (its first path component), or the sums over pools when no pool is named so.
    pub fn cache_tiers(&self, export: &str) -> Result<(u64, u64)> {
        let c = self.counters()?;
        let pool = export
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or("");
        let of = |m: &BTreeMap<String, f64>| match m.get(pool) {
            Some(v) => *v as u64,
            None => m.values().sum::<f64>() as u64,
        };
        Ok((of(&c.arc_max_bytes), of(&c.l2arc_capacity_bytes)))
    }
}

/// The claim about where reads came from, checked.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CacheCheck {
    pub claimed: Expect,
    pub passed: bool,
    pub message: String,
}

/// The server's side of one run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ServerSide {
    pub nfs_read_bytes: u64,
    pub nfs_write_bytes: u64,
    pub device_read_bytes: u64,
    pub device_write_bytes: u64,
    /// Bytes read from cache (L2ARC) devices.
    #[serde(default)]
    pub cache_device_read_bytes: u64,
    pub network_out_bytes: u64,
    pub arc_demand_hits: u64,
    pub arc_demand_misses: u64,
    /// Device bytes read per byte read over NFS (parity and read-ahead included).
    pub device_reads_per_nfs_read: Option<f64>,
    pub arc_hit_ratio: Option<f64>,
    pub cache_check: Option<CacheCheck>,
    /// The server's CPU seconds over the run, and as a percent of one CPU.
    #[serde(default)]
    pub server_cpu_seconds: f64,
    #[serde(default)]
    pub server_cpu_percent: f64,
    /// The server's CPU seconds per GB (1e9 bytes) of NFS payload moved; None when
    /// the server's NFS bytes are unknown (a peer) or nothing moved.
    #[serde(default)]
    pub server_cpu_seconds_per_gb: Option<f64>,
    /// The host's CPUs busy (user and kernel) over the run, percent of all of them
    /// (shoal reads the host's CPUs once a second: runs of a few seconds or less are
    /// rounded by up to a second's busy time).
    #[serde(default)]
    pub host_cpu_busy_percent: f64,
    /// Bytes through the host's interfaces over the run.
    #[serde(default)]
    pub host_net_in_bytes: u64,
    #[serde(default)]
    pub host_net_out_bytes: u64,
}

/// Device reads below this share of NFS reads mean the reads were served from cache.
pub const FROM_DISK_AT_LEAST: f64 = 0.5;
/// Device reads above this share mean a "cached" run went to the disks.
pub const FROM_CACHE_AT_MOST: f64 = 0.1;

/// Reads from cache devices above this share of NFS reads: the cache device served them.
pub const FROM_CACHE_DEVICE_AT_LEAST: f64 = 0.5;

/// How long the run took, and how long passed between the two readings of the
/// counters (the run, and the wait for them to settle after it).
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub run_s: f64,
    pub window_s: f64,
}

impl Span {
    pub fn exact(seconds: f64) -> Span {
        Span {
            run_s: seconds,
            window_s: seconds,
        }
    }
}

/// The server's side of a run between two readings of its counters.
pub fn compare(
    before: &Counters,
    after: &Counters,
    claimed: Option<Expect>,
    span: Span,
) -> ServerSide {
    let seconds = span.run_s;
    let d = |a: f64, b: f64| (a - b).max(0.0) as u64;
    let nfs_read = d(after.nfs_read_bytes, before.nfs_read_bytes);
    let dev_read = d(after.device_read_bytes, before.device_read_bytes);
    let cache_read = d(
        after.cache_device_read_bytes,
        before.cache_device_read_bytes,
    );
    let hits = d(after.arc_demand_hits, before.arc_demand_hits);
    let misses = d(after.arc_demand_misses, before.arc_demand_misses);
    let share = (nfs_read > 0).then(|| dev_read as f64 / nfs_read as f64);
    let cache_share = (nfs_read > 0).then(|| cache_read as f64 / nfs_read as f64);
    let hit_ratio = (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64);
    let mb = |b: u64| b as f64 / 1e6;
    let cache_check = claimed.map(|claimed| {
        let (passed, verdict) = match (claimed, share, cache_share) {
            (_, None, _) | (_, _, None) => (false, "nothing was read over NFS".to_string()),
            (Expect::Disk, Some(s), _) if s >= FROM_DISK_AT_LEAST => (true, "reads came from the devices".into()),
            (Expect::Disk, Some(_), _) => (false, "NOT FROM DISK: the reads were served from the cache".into()),
            (Expect::Arc, Some(s), Some(c)) if s + c <= FROM_CACHE_AT_MOST => (true, "reads came from the ARC".into()),
            (Expect::Arc, Some(_), _) => (false, "NOT FROM THE ARC: the reads went to the devices".into()),
            (Expect::L2arc, _, Some(c)) if c >= FROM_CACHE_DEVICE_AT_LEAST => (true, "reads came from the cache devices".into()),
            (Expect::L2arc, _, Some(_)) => (false, "NOT FROM THE CACHE DEVICES: the reads were served by the ARC or the pool's disks".into()),
        };
        CacheCheck {
            claimed,
            passed,
            message: format!(
                "{verdict}: disks read {:.1} MB and cache devices {:.1} MB for {:.1} MB read over NFS ({:.0}% and {:.0}%), ARC demand hits {hits}, misses {misses}",
                mb(dev_read),
                mb(cache_read),
                mb(nfs_read),
                share.unwrap_or(0.0) * 100.0,
                cache_share.unwrap_or(0.0) * 100.0
            ),
        }
    });
    let nfs_write = d(after.nfs_write_bytes, before.nfs_write_bytes);
    let cpu = (after.server_cpu_seconds - before.server_cpu_seconds).max(0.0);
    let moved = (nfs_read + nfs_write) as f64 / 1e9;
    let host_all = after.host_cpu_all_seconds - before.host_cpu_all_seconds;
    let host_busy = after.host_cpu_busy_seconds - before.host_cpu_busy_seconds;
    ServerSide {
        nfs_read_bytes: nfs_read,
        nfs_write_bytes: nfs_write,
        device_read_bytes: dev_read,
        device_write_bytes: d(after.device_write_bytes, before.device_write_bytes),
        cache_device_read_bytes: cache_read,
        network_out_bytes: d(after.network_out_bytes, before.network_out_bytes),
        arc_demand_hits: hits,
        arc_demand_misses: misses,
        device_reads_per_nfs_read: share,
        arc_hit_ratio: hit_ratio,
        cache_check,
        server_cpu_seconds: cpu,
        server_cpu_percent: if seconds > 0.0 {
            cpu / seconds * 100.0
        } else {
            0.0
        },
        server_cpu_seconds_per_gb: (moved > 0.0).then(|| cpu / moved),
        // The host's CPUs, counted over the window: busy time, nearly all of it in
        // the run, over the run's time on every CPU.
        host_cpu_busy_percent: if host_all > 0.0 && span.window_s > 0.0 && seconds > 0.0 {
            let cpus = host_all / span.window_s;
            (host_busy / (cpus * seconds) * 100.0).clamp(0.0, 100.0)
        } else {
            0.0
        },
        host_net_in_bytes: d(after.host_net_in_bytes, before.host_net_in_bytes),
        host_net_out_bytes: d(after.host_net_out_bytes, before.host_net_out_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP x\n\
shoal_nfs_payload_bytes_total{op=\"read\",share=\"tank/a\"} 1000000\n\
shoal_nfs_payload_bytes_total{op=\"read\",share=\"tank/b\"} 1000000\n\
shoal_nfs_payload_bytes_total{op=\"write\",share=\"tank/a\"} 5\n\
shoal_device_bytes_total{pool=\"tank\",device=\"/d/1\",role=\"data\",op=\"read\"} 300000\n\
shoal_device_bytes_total{pool=\"tank\",device=\"/d/c\",role=\"cache\",op=\"read\"} 1500000\n\
shoal_device_bytes_total{pool=\"tank\",device=\"/d/c\",role=\"cache\",op=\"write\"} 99\n\
shoal_cpu_seconds_total{work=\"rpc\"} 1.5\n\
shoal_cpu_seconds_total{work=\"other\"} 0.5\n\
shoal_host_cpu_seconds_total{mode=\"user\"} 3\n\
shoal_host_cpu_seconds_total{mode=\"kernel\"} 1\n\
shoal_host_cpu_seconds_total{mode=\"idle\"} 4\n\
shoal_host_network_bytes_total{interface=\"lo\",direction=\"in\"} 7000\n\
shoal_host_network_bytes_total{interface=\"eth0\",direction=\"in\"} 1000\n\
shoal_host_network_bytes_total{interface=\"lo\",direction=\"out\"} 7000\n\
shoal_l2arc_capacity_bytes{pool=\"tank\"} 2000000\n\
shoal_device_bytes_total{pool=\"tank\",device=\"/d/2\",op=\"write\"} 7\n\
shoal_arc_hits_total{pool=\"tank\",kind=\"demand\"} 90\n\
shoal_arc_hits_total{pool=\"tank\",kind=\"prefetch\"} 1000\n\
shoal_arc_misses_total{pool=\"tank\",kind=\"demand\"} 10\n\
shoal_arc_max_bytes{pool=\"tank\"} 1073741824\n";

    #[test]
    fn metrics_are_summed_and_a_false_disk_claim_is_flagged() {
        let after = parse_metrics(TEXT);
        assert_eq!(after.nfs_read_bytes, 2e6);
        assert_eq!(after.device_read_bytes, 3e5);
        assert_eq!(after.arc_demand_hits, 90.0);
        assert_eq!(after.arc_max_bytes["tank"], 1073741824.0);
        assert_eq!(after.cache_device_read_bytes, 1.5e6);
        assert_eq!(
            after.device_write_bytes, 7.0,
            "cache device writes are not the pool's"
        );
        assert_eq!(after.l2arc_capacity_bytes["tank"], 2e6);
        let s = compare(
            &Counters::default(),
            &after,
            Some(Expect::Disk),
            Span::exact(4.0),
        );
        assert_eq!(s.server_cpu_seconds, 2.0);
        assert_eq!(s.server_cpu_percent, 50.0);
        assert_eq!(s.server_cpu_seconds_per_gb, Some(2.0 / (2e6 + 5.0) * 1e9));
        assert_eq!(s.host_cpu_busy_percent, 50.0);
        assert_eq!((s.host_net_in_bytes, s.host_net_out_bytes), (8000, 7000));
        let check = s.cache_check.unwrap();
        assert!(
            !check.passed && check.message.starts_with("NOT FROM DISK"),
            "{check:?}"
        );
        assert_eq!(s.arc_hit_ratio, Some(0.9));
        let s = compare(
            &Counters::default(),
            &after,
            Some(Expect::Arc),
            Span::exact(4.0),
        );
        assert!(
            !s.cache_check.unwrap().passed,
            "15% from the disks and 75% from cache devices is not an ARC run"
        );
        let l2 = compare(
            &Counters::default(),
            &after,
            Some(Expect::L2arc),
            Span::exact(4.0),
        );
        assert!(l2.cache_check.as_ref().unwrap().passed, "{l2:?}");
        let mut no_cache = after.clone();
        no_cache.cache_device_read_bytes = 0.0;
        let l2 = compare(
            &Counters::default(),
            &no_cache,
            Some(Expect::L2arc),
            Span::exact(4.0),
        );
        let check = l2.cache_check.unwrap();
        assert!(
            !check.passed && check.message.starts_with("NOT FROM THE CACHE DEVICES"),
            "{check:?}"
        );
        let mut disk = after.clone();
        disk.device_read_bytes = 2.4e6;
        assert!(
            compare(
                &Counters::default(),
                &disk,
                Some(Expect::Disk),
                Span::exact(4.0)
            )
            .cache_check
            .unwrap()
            .passed
        );
    }

    #[test]
    fn proc_counters_see_this_process_and_the_host() {
        let c = Counters::from_proc(&[std::process::id()]).unwrap();
        assert!(c.host_cpu_all_seconds > 0.0 && c.host_cpu_busy_seconds <= c.host_cpu_all_seconds);
        assert!(c.host_net_in_bytes >= 0.0);
        assert!(Counters::from_proc(&[u32::MAX]).is_err(), "no such process");
    }
}
