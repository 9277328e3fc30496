//! The server's side of a run, when the server is shoal: its `/metrics` read before
//! and after the run, so the report can set device bytes against NFS bytes and ARC
//! hits against misses, and flag a run whose claim about where reads came from is
//! false ("streaming read from disk" that the ARC served).
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
    pub device_read_bytes: f64,
    pub device_write_bytes: f64,
    pub network_out_bytes: f64,
    pub arc_demand_hits: f64,
    pub arc_demand_misses: f64,
    pub arc_max_bytes: BTreeMap<String, f64>,
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
        match (name, label(labels, "op"), label(labels, "kind")) {
            ("shoal_nfs_payload_bytes_total", Some("read"), _) => c.nfs_read_bytes += v,
            ("shoal_nfs_payload_bytes_total", Some("write"), _) => c.nfs_write_bytes += v,
            ("shoal_device_bytes_total", Some("read"), _) => c.device_read_bytes += v,
            ("shoal_device_bytes_total", Some("write"), _) => c.device_write_bytes += v,
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

    /// The ARC bound of the pool holding `export` (its first path component), or the
    /// sum over pools when no pool is named so.
    pub fn arc_bytes(&self, export: &str) -> Result<u64> {
        let c = self.counters()?;
        let pool = export
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or("");
        let v = match c.arc_max_bytes.get(pool) {
            Some(v) => *v,
            None => c.arc_max_bytes.values().sum(),
        };
        Ok(v as u64)
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
    pub network_out_bytes: u64,
    pub arc_demand_hits: u64,
    pub arc_demand_misses: u64,
    /// Device bytes read per byte read over NFS (parity and read-ahead included).
    pub device_reads_per_nfs_read: Option<f64>,
    pub arc_hit_ratio: Option<f64>,
    pub cache_check: Option<CacheCheck>,
}

/// Device reads below this share of NFS reads mean the reads were served from cache.
pub const FROM_DISK_AT_LEAST: f64 = 0.5;
/// Device reads above this share mean a "cached" run went to the disks.
pub const FROM_CACHE_AT_MOST: f64 = 0.1;

pub fn compare(before: &Counters, after: &Counters, claimed: Option<Expect>) -> ServerSide {
    let d = |a: f64, b: f64| (a - b).max(0.0) as u64;
    let nfs_read = d(after.nfs_read_bytes, before.nfs_read_bytes);
    let dev_read = d(after.device_read_bytes, before.device_read_bytes);
    let hits = d(after.arc_demand_hits, before.arc_demand_hits);
    let misses = d(after.arc_demand_misses, before.arc_demand_misses);
    let share = (nfs_read > 0).then(|| dev_read as f64 / nfs_read as f64);
    let hit_ratio = (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64);
    let mb = |b: u64| b as f64 / 1e6;
    let cache_check = claimed.map(|claimed| {
        let (passed, verdict) = match (claimed, share) {
            (_, None) => (false, "nothing was read over NFS".to_string()),
            (Expect::Disk, Some(s)) if s >= FROM_DISK_AT_LEAST => (true, "reads came from the devices".into()),
            (Expect::Disk, Some(_)) => (false, "NOT FROM DISK: the reads were served from the cache".into()),
            (Expect::Cache, Some(s)) if s <= FROM_CACHE_AT_MOST => (true, "reads came from the cache".into()),
            (Expect::Cache, Some(_)) => (false, "NOT FROM CACHE: the reads went to the devices".into()),
        };
        CacheCheck {
            claimed,
            passed,
            message: format!(
                "{verdict}: devices read {:.1} MB for {:.1} MB read over NFS ({:.0}%), ARC demand hits {hits}, misses {misses}",
                mb(dev_read),
                mb(nfs_read),
                share.unwrap_or(0.0) * 100.0
            ),
        }
    });
    ServerSide {
        nfs_read_bytes: nfs_read,
        nfs_write_bytes: d(after.nfs_write_bytes, before.nfs_write_bytes),
        device_read_bytes: dev_read,
        device_write_bytes: d(after.device_write_bytes, before.device_write_bytes),
        network_out_bytes: d(after.network_out_bytes, before.network_out_bytes),
        arc_demand_hits: hits,
        arc_demand_misses: misses,
        device_reads_per_nfs_read: share,
        arc_hit_ratio: hit_ratio,
        cache_check,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP x\n\
shoal_nfs_payload_bytes_total{op=\"read\",share=\"tank/a\"} 1000000\n\
shoal_nfs_payload_bytes_total{op=\"read\",share=\"tank/b\"} 1000000\n\
shoal_nfs_payload_bytes_total{op=\"write\",share=\"tank/a\"} 5\n\
shoal_device_bytes_total{pool=\"tank\",device=\"/d/1\",op=\"read\"} 300000\n\
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
        let s = compare(&Counters::default(), &after, Some(Expect::Disk));
        let check = s.cache_check.unwrap();
        assert!(
            !check.passed && check.message.starts_with("NOT FROM DISK"),
            "{check:?}"
        );
        assert_eq!(s.arc_hit_ratio, Some(0.9));
        let s = compare(&Counters::default(), &after, Some(Expect::Cache));
        assert!(
            !s.cache_check.unwrap().passed,
            "15% from the devices is not a cached run"
        );
        let mut disk = after.clone();
        disk.device_read_bytes = 2.4e6;
        assert!(
            compare(&Counters::default(), &disk, Some(Expect::Disk))
                .cache_check
                .unwrap()
                .passed
        );
    }
}
