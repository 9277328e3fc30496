//! A job: which server, which workload, how many threads, which file set, for how
//! long. Read from TOML (`shoal bench run JOB.toml`), overridable from the command
//! line, and sent whole to every agent, so all clients run exactly the same job.
//!
//! The file set belongs to the job, not to the clients: `files` files of `file_size`
//! bytes under `<dir>/set-<files>x<file_size>/`, the same whether one client or fifty
//! run it, so cache behaviour does not change with the number of clients. Clients
//! split the set between them (for preparing and for streaming); workloads that make
//! and delete files do so in each thread's own directory under `<dir>/work/`.

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The workloads. The Filebench names are approximations of those personalities
/// (docs/bench.md says what each does and where it differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Streaming read: each thread reads its share of the file set in order.
    Read,
    /// Streaming write: each thread writes its share (UNSTABLE, COMMIT at the end).
    Write,
    /// Random reads of `io_size` (8 KiB by default) anywhere in the file set.
    Randread,
    /// Random FILE_SYNC writes of `io_size` anywhere in the file set.
    Randwrite,
    /// Create, stat and delete small files, each thread in its own directory.
    Metadata,
    /// Small files through their life, each thread in its own directory: create one
    /// with `io_size` bytes on stable storage, stat it, open, read and close it,
    /// delete it. Each step is timed as one operation however many calls the protocol
    /// needs for it (see `Nfs::create_with_data` and `Nfs::open_read_close`).
    Smallfiles,
    Fileserver,
    Varmail,
    Webserver,
    Videoserver,
    Oltp,
}

impl Workload {
    pub const ALL: [Workload; 11] = [
        Workload::Read,
        Workload::Write,
        Workload::Randread,
        Workload::Randwrite,
        Workload::Metadata,
        Workload::Smallfiles,
        Workload::Fileserver,
        Workload::Varmail,
        Workload::Webserver,
        Workload::Videoserver,
        Workload::Oltp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Read => "read",
            Workload::Write => "write",
            Workload::Randread => "randread",
            Workload::Randwrite => "randwrite",
            Workload::Metadata => "metadata",
            Workload::Smallfiles => "smallfiles",
            Workload::Fileserver => "fileserver",
            Workload::Varmail => "varmail",
            Workload::Webserver => "webserver",
            Workload::Videoserver => "videoserver",
            Workload::Oltp => "oltp",
        }
    }

    pub fn parse(s: &str) -> Result<Workload> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Workload::ALL.iter().map(|w| w.name()).collect();
                anyhow!("unknown workload '{s}' (one of {})", names.join(", "))
            })
    }

    /// (files, file size, I/O size) when the job does not say.
    fn defaults(self) -> (u64, u64, u64) {
        const K: u64 = 1024;
        const M: u64 = 1024 * K;
        match self {
            Workload::Read | Workload::Write => (16, 64 * M, 128 * K),
            Workload::Randread | Workload::Randwrite => (16, 64 * M, 8 * K),
            Workload::Metadata => (0, 0, 0),
            Workload::Smallfiles => (0, 0, 4 * K),
            Workload::Fileserver => (1000, 128 * K, 16 * K),
            Workload::Varmail | Workload::Webserver => (1000, 16 * K, 16 * K),
            Workload::Videoserver => (16, 64 * M, 256 * K),
            Workload::Oltp => (8, 128 * M, 8 * K),
        }
    }

    /// Whether the run reads the file set (so it must be filled first).
    pub fn reads_the_set(self) -> bool {
        !matches!(
            self,
            Workload::Write | Workload::Metadata | Workload::Smallfiles
        )
    }

    /// Whether the run has a file set at all (the small-file workloads make and
    /// delete their own files only).
    pub fn has_file_set(self) -> bool {
        !matches!(self, Workload::Metadata | Workload::Smallfiles)
    }
}

/// What the job claims about where its reads are served from; with shoal's API the
/// run checks the claim against the server's own counters per tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Expect {
    /// The pool's disks served the reads.
    Disk,
    /// The DRAM cache (ARC) served them: neither disks nor cache devices were read.
    #[serde(alias = "cache")]
    Arc,
    /// The cache devices (L2ARC) served most of them.
    L2arc,
}

impl Expect {
    pub fn parse(s: &str) -> Result<Expect> {
        match s {
            "disk" => Ok(Expect::Disk),
            "arc" | "cache" => Ok(Expect::Arc),
            "l2arc" => Ok(Expect::L2arc),
            _ => bail!("expect '{s}': one of arc, l2arc, disk"),
        }
    }
}

/// A job as written in TOML (sizes and durations as strings, e.g. `"8K"`, `"30s"`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    pub name: Option<String>,
    /// NFS server, `host:port` (port 2049 when left out).
    pub server: Option<String>,
    /// MOUNT port, when not the NFS port.
    pub mount_port: Option<u16>,
    /// The protocol: "3" (the default) or "4.1".
    pub nfs_version: Option<String>,
    pub export: Option<String>,
    pub workload: Option<String>,
    /// Threads per client, each with its own connection.
    pub threads: Option<usize>,
    /// Calls in flight per thread for streaming and random I/O.
    pub depth: Option<usize>,
    pub io_size: Option<String>,
    /// Largest READ and WRITE for whole-file transfers (default 128K).
    pub rsize: Option<String>,
    pub wsize: Option<String>,
    pub files: Option<u64>,
    pub file_size: Option<String>,
    /// The whole file set: bytes (`"2G"`), or a multiple of the server's cache tiers:
    /// the ARC (`"4xARC"`), the cache devices (`"0.5xL2ARC"`) or both
    /// (`"0.8xARC+L2ARC"`).
    pub working_set: Option<String>,
    /// The ARC size for `working_set = "NxARC"` when not asked from shoal's API.
    pub arc: Option<String>,
    /// The cache devices' size for `working_set = "NxL2ARC"` when not asked from
    /// shoal's API.
    pub l2arc: Option<String>,
    pub duration: Option<String>,
    /// Bytes per client for the streaming workloads (instead of a duration).
    pub bytes: Option<String>,
    pub seed: Option<u64>,
    /// Share of each 4 KiB the server could compress away (0 to 0.99).
    pub compressible: Option<f64>,
    /// Read the whole file set once before the measured run.
    pub warmup: Option<bool>,
    /// NFSv4.1: take the delegations the server offers and serve what they cover
    /// (stats, opens and reads of files this client wrote) without calls.
    pub delegations: Option<bool>,
    pub expect: Option<Expect>,
    /// Directory under the export for the file set and the threads' own files.
    pub dir: Option<String>,
    /// Check every byte read against what the generator wrote.
    pub verify: Option<bool>,
    /// Clients each agent runs (each with `threads` threads).
    pub clients_per_agent: Option<usize>,
    /// shoal's admin API, for the server's side of the run and the cache check.
    pub shoal_api: Option<String>,
    /// The pool layout (as for `shoal plan`), to print predicted against measured.
    pub layout: Option<String>,
    pub disk_mbps: Option<f64>,
    pub disk_iops: Option<f64>,
}

/// A job with every default filled in and every size resolved: what agents run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub name: String,
    pub server: String,
    pub mount_port: Option<u16>,
    #[serde(default)]
    pub nfs_version: crate::client::Version,
    pub export: String,
    pub workload: Workload,
    pub threads: usize,
    pub depth: usize,
    pub io_size: u64,
    pub rsize: u64,
    pub wsize: u64,
    pub files: u64,
    pub file_size: u64,
    pub duration_s: Option<f64>,
    pub bytes_per_client: Option<u64>,
    pub seed: u64,
    pub compressible: f64,
    pub warmup: bool,
    #[serde(default)]
    pub delegations: bool,
    pub expect: Option<Expect>,
    pub dir: String,
    pub verify: bool,
    pub clients_per_agent: usize,
    pub shoal_api: Option<String>,
    pub layout: Option<String>,
    pub disk_mbps: Option<f64>,
    pub disk_iops: Option<f64>,
}

/// `8K`, `1.5M`, `4G`, `4096` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let digits = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let value: f64 = num
        .parse()
        .map_err(|_| anyhow!("'{s}' is not a size (like 8K, 1M, 4G)"))?;
    let shift = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => bail!("'{s}': unknown unit (K, M, G or T)"),
    };
    Ok((value * (1u64 << shift) as f64).round() as u64)
}

/// `30s`, `2m`, `500ms`, `1h`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow!("'{s}' is not a duration (like 30s, 2m, 500ms)"))?;
    if !(v.is_finite() && v >= 0.0) {
        bail!("'{s}' is not a duration");
    }
    Ok(Duration::from_secs_f64(v * scale))
}

/// A working set: bytes, or a multiple of cache tiers (`4xARC`, `0.5xL2ARC`,
/// `0.8xARC+L2ARC`; case does not matter).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WorkingSet {
    Bytes(u64),
    Multiple { of: f64, arc: bool, l2arc: bool },
}

impl WorkingSet {
    /// Whether the size depends on the server's cache tiers.
    pub fn needs_tiers(self) -> (bool, bool) {
        match self {
            WorkingSet::Bytes(_) => (false, false),
            WorkingSet::Multiple { arc, l2arc, .. } => (arc, l2arc),
        }
    }
}

pub fn parse_working_set(s: &str) -> Result<WorkingSet> {
    let lower = s.trim().to_ascii_lowercase();
    let tiers = [
        ("xarc+l2arc", true, true),
        ("xl2arc+arc", true, true),
        ("xl2arc", false, true),
        ("xarc", true, false),
    ];
    for (suffix, arc, l2arc) in tiers {
        if let Some(m) = lower.strip_suffix(suffix) {
            let v: f64 = m
                .parse()
                .map_err(|_| anyhow!("'{s}': expected like 4xARC, 0.5xL2ARC or 0.8xARC+L2ARC"))?;
            if !(v > 0.0 && v.is_finite()) {
                bail!("'{s}': the multiple must be positive");
            }
            return Ok(WorkingSet::Multiple { of: v, arc, l2arc });
        }
    }
    Ok(WorkingSet::Bytes(parse_size(s)?))
}

/// What a job is sized against: the server's cache tiers (asked of shoal's API by
/// the caller when the job's working set names them and the job does not give
/// them), and how many clients run it (a per-client export gives each client its
/// own file set, so the working set is split between them).
#[derive(Debug, Clone, Copy, Default)]
pub struct Sizing {
    pub arc_bytes: Option<u64>,
    pub l2arc_bytes: Option<u64>,
    pub clients: usize,
}

impl Sizing {
    pub fn arc(bytes: u64) -> Sizing {
        Sizing {
            arc_bytes: Some(bytes),
            ..Sizing::default()
        }
    }
}

impl JobFile {
    pub fn parse(text: &str) -> Result<JobFile> {
        toml::from_str(text).map_err(|e| anyhow!("{e}"))
    }

    /// The job every agent runs, sized by `sizing`.
    pub fn resolve(&self, sizing: Sizing) -> Result<Job> {
        let workload = Workload::parse(self.workload.as_deref().unwrap_or("read"))?;
        let (def_files, def_file_size, def_io) = workload.defaults();
        let opt_size = |v: &Option<String>, what: &str| -> Result<Option<u64>> {
            v.as_deref()
                .map(|s| parse_size(s).with_context(|| what.to_string()))
                .transpose()
        };
        let server = self
            .server
            .clone()
            .ok_or_else(|| anyhow!("the job names no server (server = \"host:port\")"))?;
        let export = self
            .export
            .clone()
            .ok_or_else(|| anyhow!("the job names no export (export = \"/pool/fs\")"))?;
        let io_size = opt_size(&self.io_size, "io_size")?.unwrap_or(def_io);
        let rsize = opt_size(&self.rsize, "rsize")?.unwrap_or(128 << 10);
        let wsize = opt_size(&self.wsize, "wsize")?.unwrap_or(128 << 10);
        let mut files = self.files.unwrap_or(def_files);
        let mut file_size = opt_size(&self.file_size, "file_size")?.unwrap_or(def_file_size);
        if let Some(ws) = &self.working_set {
            let total = match parse_working_set(ws)? {
                WorkingSet::Bytes(b) => b,
                WorkingSet::Multiple { of, arc, l2arc } => {
                    let tier = |given: &Option<String>, asked: Option<u64>, what: &str| {
                        match given {
                            Some(a) => parse_size(a).context(what.to_string()),
                            None => asked.ok_or_else(|| {
                                anyhow!("working_set {ws} needs the {} size: give {what} = \"1G\" or shoal_api", what.to_uppercase())
                            }),
                        }
                    };
                    let mut base = 0;
                    if arc {
                        base += tier(&self.arc, sizing.arc_bytes, "arc")?;
                    }
                    if l2arc {
                        let l2 = tier(&self.l2arc, sizing.l2arc_bytes, "l2arc")?;
                        if l2 == 0 {
                            bail!("working_set {ws}: the server has no cache devices (its L2ARC holds 0 bytes)");
                        }
                        base += l2;
                    }
                    (base as f64 * of) as u64
                }
            };
            if !workload.has_file_set() {
                bail!("the {} workload has no file set to size", workload.name());
            }
            if files == 0 {
                files = 1;
            }
            let sets = if export.contains(CLIENT_TOKEN) {
                sizing.clients.max(1) as u64
            } else {
                1
            };
            file_size = total / files / sets;
        }
        let duration_s = self
            .duration
            .as_deref()
            .map(|d| parse_duration(d).map(|d| d.as_secs_f64()))
            .transpose()?;
        let bytes_per_client = opt_size(&self.bytes, "bytes")?;
        if duration_s.is_some() && bytes_per_client.is_some() {
            bail!("give a duration or bytes, not both");
        }
        let streaming = matches!(workload, Workload::Read | Workload::Write);
        if bytes_per_client.is_some() && !streaming {
            bail!("bytes applies to the streaming workloads (read, write); give a duration");
        }
        let duration_s = match (duration_s, bytes_per_client) {
            // Streaming runs default to one pass over the file set.
            (None, None) if !streaming => Some(10.0),
            (d, _) => d,
        };
        let job = Job {
            name: self
                .name
                .clone()
                .unwrap_or_else(|| workload.name().to_string()),
            server,
            mount_port: self.mount_port,
            nfs_version: self
                .nfs_version
                .as_deref()
                .map(str::parse)
                .transpose()?
                .unwrap_or_default(),
            export,
            workload,
            threads: self.threads.unwrap_or(1),
            depth: self
                .depth
                .unwrap_or(if streaming || workload == Workload::Videoserver {
                    8
                } else {
                    1
                }),
            io_size,
            rsize,
            wsize,
            files,
            file_size,
            duration_s,
            bytes_per_client,
            seed: self.seed.unwrap_or(1),
            compressible: self.compressible.unwrap_or(0.0),
            warmup: self.warmup.unwrap_or(false),
            delegations: self.delegations.unwrap_or(false),
            expect: self.expect,
            dir: self.dir.clone().unwrap_or_else(|| "shoal-bench".into()),
            verify: self.verify.unwrap_or(false),
            clients_per_agent: self.clients_per_agent.unwrap_or(1),
            shoal_api: self.shoal_api.clone(),
            layout: self.layout.clone(),
            disk_mbps: self.disk_mbps,
            disk_iops: self.disk_iops,
        };
        job.check()?;
        Ok(job)
    }
}

/// In an export, stands for the client's number: `/tank/c{client}` gives each client
/// its own filesystem (and its own file set), as the original appliance's runs gave
/// each client its own share.
pub const CLIENT_TOKEN: &str = "{client}";

impl Job {
    /// The export client `client` (numbered from 0 over all agents) mounts.
    pub fn export_for(&self, client: usize) -> String {
        self.export.replace(CLIENT_TOKEN, &client.to_string())
    }

    /// Whether each client has its own export (and file set).
    pub fn per_client_export(&self) -> bool {
        self.export.contains(CLIENT_TOKEN)
    }

    /// Refuses jobs that cannot run, with the reason.
    pub fn check(&self) -> Result<()> {
        let max = crate::data::MAX_IO as u64;
        if self.threads == 0 || self.threads > 1024 {
            bail!("threads must be 1 to 1024");
        }
        if self.depth == 0 || self.depth > 256 {
            bail!("depth must be 1 to 256");
        }
        if self.clients_per_agent == 0 || self.clients_per_agent > 256 {
            bail!("clients_per_agent must be 1 to 256");
        }
        for (what, v) in [
            ("io_size", self.io_size),
            ("rsize", self.rsize),
            ("wsize", self.wsize),
        ] {
            let needed = self.workload.has_file_set()
                || (self.workload == Workload::Smallfiles && what == "io_size");
            if needed && (v == 0 || v > max) {
                bail!("{what} must be 1 byte to 1M");
            }
        }
        if self.delegations && self.nfs_version != crate::client::Version::V41 {
            bail!("delegations are NFSv4.1's: add nfs_version = \"4.1\" (--nfs-version 4.1)");
        }
        if !(0.0..1.0).contains(&self.compressible) {
            bail!("compressible must be at least 0 and below 1");
        }
        if self.workload.has_file_set() {
            if self.files == 0 || self.files > 10_000_000 {
                bail!("files must be 1 to 10000000");
            }
            if self.file_size < self.io_size {
                bail!(
                    "file_size ({}) is smaller than io_size ({})",
                    self.file_size,
                    self.io_size
                );
            }
        }
        if let Some(d) = self.duration_s {
            if d <= 0.0 {
                bail!("duration must be positive");
            }
        }
        if !self.export.starts_with('/') {
            bail!("export must be an absolute path, like /tank/fs");
        }
        if self.dir.split('/').any(|p| p == "..") {
            bail!("dir may not contain '..'");
        }
        crate::client::resolve_server(&self.server, self.mount_port)?;
        Ok(())
    }

    /// The directory of the file set, named by its shape so runs of one shape share it.
    pub fn set_dir(&self) -> String {
        format!("{}/set-{}x{}", self.dir, self.files, self.file_size)
    }

    pub fn set_bytes(&self) -> u64 {
        self.files * self.file_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("8K").unwrap(), 8192);
        assert_eq!(parse_size("1.5M").unwrap(), 3 << 19);
        assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("8Q").is_err());
        assert!(parse_size("lots").is_err());
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn jobs_resolve_with_defaults_and_arc_multiples() {
        let f = JobFile::parse(
            "server = \"127.0.0.1:2049\"\nexport = \"/tank/b\"\nworkload = \"randread\"\nworking_set = \"0.5xARC\"\nfiles = 4\n",
        )
        .unwrap();
        let j = f.resolve(Sizing::arc(1 << 30)).unwrap();
        assert_eq!((j.io_size, j.file_size, j.files), (8192, 128 << 20, 4));
        assert_eq!(j.duration_s, Some(10.0));
        assert!(
            f.resolve(Sizing::default()).is_err(),
            "NxARC needs the ARC size"
        );
        let read = JobFile::parse("server = \"127.0.0.1:1\"\nexport = \"/t\"\n").unwrap();
        assert_eq!(
            read.resolve(Sizing::default()).unwrap().duration_s,
            None,
            "one pass"
        );
    }

    #[test]
    fn working_sets_size_against_arc_and_cache_devices_and_split_per_client() {
        assert_eq!(
            parse_working_set("0.8xARC+L2ARC").unwrap(),
            WorkingSet::Multiple {
                of: 0.8,
                arc: true,
                l2arc: true
            }
        );
        assert_eq!(
            parse_working_set("2xl2arc").unwrap().needs_tiers(),
            (false, true)
        );
        assert!(parse_working_set("fewxARC").is_err());
        let f = JobFile::parse(
            "server = \"127.0.0.1:1\"\nexport = \"/tank/c{client}\"\nworking_set = \"0.5xARC+L2ARC\"\nfiles = 2\n",
        )
        .unwrap();
        let sizing = Sizing {
            arc_bytes: Some(64 << 20),
            l2arc_bytes: Some(192 << 20),
            clients: 4,
        };
        let j = f.resolve(sizing).unwrap();
        // Half of 256 MiB, over 4 clients' sets of 2 files each.
        assert_eq!(j.file_size, 16 << 20);
        assert!(j.per_client_export());
        assert_eq!(j.export_for(3), "/tank/c3");
        let none = Sizing {
            l2arc_bytes: Some(0),
            ..sizing
        };
        let e = f.resolve(none).unwrap_err().to_string();
        assert!(e.contains("no cache devices"), "{e}");
    }

    #[test]
    fn bad_jobs_are_refused_with_the_reason() {
        let bad = [
            (
                "server = \"h:1\"\nexport = \"/t\"\nthreads = 0\n",
                "threads",
            ),
            (
                "server = \"h:1\"\nexport = \"/t\"\nworkload = \"scan\"\n",
                "unknown workload",
            ),
            ("server = \"h:1\"\nexport = \"t\"\n", "absolute"),
            (
                "server = \"h:1\"\nexport = \"/t\"\nio_size = \"2M\"\n",
                "io_size",
            ),
            (
                "server = \"h:1\"\nexport = \"/t\"\nduration = \"1s\"\nbytes = \"1G\"\n",
                "not both",
            ),
            ("export = \"/t\"\n", "no server"),
        ];
        for (text, why) in bad {
            let e = JobFile::parse(text)
                .and_then(|f| f.resolve(Sizing::default()))
                .unwrap_err();
            assert!(format!("{e:#}").contains(why), "{text}: {e:#}");
        }
        assert!(
            JobFile::parse("serverr = \"x\"\n").is_err(),
            "unknown keys are refused"
        );
    }
}
