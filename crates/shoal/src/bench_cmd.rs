//! `shoal bench` (the load generator: `run` a job here or on agents, or be an `agent`)
//! and `shoal plan` (the capacity model of a pool layout). The work is in the `bench`
//! crate; this is the command line: options over the job file, progress, output.

use anyhow::{bail, Context, Result};
use bench::agent::{local_agent, run_on_agents, serve_agent, AgentOptions, Progress};
use bench::job::{parse_working_set, Expect, JobFile, Sizing};
use bench::report::Report;
use bench::server_side::{compare, Counters, ShoalApi, Span};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Run a job (a TOML file, and/or the options below) from this host or from agents.
    Run(Box<RunArgs>),
    /// Be a client host for `shoal bench run --agents`: serve controllers until killed.
    Agent {
        /// Address to listen on for the controller, e.g. 0.0.0.0:7070 (port 0: any).
        #[arg(long)]
        listen: SocketAddr,
        /// Local address to send NFS traffic from.
        #[arg(long)]
        bind: Option<IpAddr>,
        /// Name of this host's clients in results (default: the listening address).
        #[arg(long)]
        name: Option<String>,
    },
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// The job file (TOML; docs/bench.md lists its keys). Options override it.
    job: Option<PathBuf>,
    /// Agents to run the clients on (`host:port,host:port`); without, clients run here.
    #[arg(long, value_delimiter = ',')]
    agents: Vec<SocketAddr>,
    /// Clients per agent (or here), each with `--threads` threads.
    #[arg(long)]
    clients: Option<usize>,
    /// Local address to send NFS traffic from (runs without agents).
    #[arg(long)]
    bind: Option<IpAddr>,
    #[arg(long)]
    server: Option<String>,
    #[arg(long)]
    mount_port: Option<u16>,
    /// NFS version: 3 (the default) or 4.1.
    #[arg(long)]
    nfs_version: Option<String>,
    #[arg(long)]
    export: Option<String>,
    /// read, write, randread, randwrite, metadata, fileserver, varmail, webserver,
    /// videoserver or oltp.
    #[arg(long)]
    workload: Option<String>,
    #[arg(long)]
    threads: Option<usize>,
    #[arg(long)]
    depth: Option<usize>,
    #[arg(long)]
    io_size: Option<String>,
    #[arg(long)]
    files: Option<u64>,
    #[arg(long)]
    file_size: Option<String>,
    /// The whole file set: bytes (`2G`), or a multiple of the server's cache tiers:
    /// `4xARC`, `0.5xL2ARC`, `0.8xARC+L2ARC`. With a per-client export (`{client}` in
    /// --export) it is split between the clients' sets.
    #[arg(long)]
    working_set: Option<String>,
    /// ARC size for `--working-set NxARC` when not asked from --shoal-api.
    #[arg(long)]
    arc: Option<String>,
    /// Cache devices' size for `--working-set NxL2ARC` when not asked from --shoal-api.
    #[arg(long)]
    l2arc: Option<String>,
    #[arg(long)]
    duration: Option<String>,
    /// Bytes per client (streaming workloads).
    #[arg(long)]
    bytes: Option<String>,
    #[arg(long)]
    seed: Option<u64>,
    /// Directory under the export for the file set and the threads' files.
    #[arg(long)]
    dir: Option<String>,
    #[arg(long)]
    compressible: Option<f64>,
    /// Read the file set once before the measured run.
    #[arg(long)]
    warmup: bool,
    /// NFSv4.1: take the delegations the server offers, and answer what they cover
    /// (stats, opens and reads of files this client just wrote) without a call.
    #[arg(long)]
    delegations: bool,
    /// Where reads should come from: `arc` (DRAM; `cache` is the same), `l2arc` (the
    /// cache devices) or `disk`; checked against shoal's counters with --shoal-api.
    #[arg(long, value_parser = ["arc", "cache", "l2arc", "disk"])]
    expect: Option<String>,
    /// The server's process ids when it is not shoal (a peer on this host): its CPU
    /// and the host's network over the run are read from /proc.
    #[arg(long, value_delimiter = ',')]
    server_pid: Vec<u32>,
    /// Check every byte read.
    #[arg(long)]
    verify: bool,
    /// shoal's admin API (http://host:port): the server's side and the cache check.
    #[arg(long)]
    shoal_api: Option<String>,
    /// Pool layout for predicted against measured (as for `shoal plan`).
    #[arg(long)]
    layout: Option<String>,
    #[arg(long)]
    disk_mbps: Option<f64>,
    #[arg(long)]
    disk_iops: Option<f64>,
    /// Print the report as JSON (the table goes to stderr).
    #[arg(long)]
    json: bool,
    /// Write the per-second series as CSV.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write an HTML page with throughput and latency charts.
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Run(args) => run_job(*args),
        BenchCommand::Agent { listen, bind, name } => {
            let listener =
                TcpListener::bind(listen).with_context(|| format!("listening on {listen}"))?;
            // The address goes to stdout, flushed, so scripts can start agents on port 0.
            println!("shoal bench agent listening on {}", listener.local_addr()?);
            use std::io::Write;
            std::io::stdout().flush()?;
            serve_agent(listener, AgentOptions { name, bind })
        }
    }
}

fn job_file(args: &RunArgs) -> Result<JobFile> {
    let mut f = match &args.job {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            JobFile::parse(&text).with_context(|| format!("{}", p.display()))?
        }
        None => JobFile::default(),
    };
    macro_rules! over {
        ($($field:ident),*) => { $( if args.$field.is_some() { f.$field = args.$field.clone(); } )* };
    }
    over!(
        server,
        mount_port,
        nfs_version,
        export,
        workload,
        threads,
        depth,
        io_size,
        files,
        file_size,
        working_set,
        arc,
        l2arc,
        duration,
        bytes,
        seed,
        dir,
        compressible,
        shoal_api,
        layout,
        disk_mbps,
        disk_iops
    );
    if args.clients.is_some() {
        f.clients_per_agent = args.clients;
    }
    if args.warmup {
        f.warmup = Some(true);
    }
    if args.delegations {
        f.delegations = Some(true);
    }
    if args.verify {
        f.verify = Some(true);
    }
    if let Some(e) = &args.expect {
        f.expect = Some(Expect::parse(e)?);
    }
    Ok(f)
}

/// Where the server's counters come from: shoal's API, or /proc for a peer.
#[derive(Clone)]
enum ServerCounters {
    Shoal(ShoalApi),
    Proc(Vec<u32>),
}

impl ServerCounters {
    fn read(&self) -> Result<Counters> {
        match self {
            ServerCounters::Shoal(api) => api.counters(),
            ServerCounters::Proc(pids) => Counters::from_proc(pids),
        }
    }

    fn read_settled(&self) -> Result<Counters> {
        match self {
            ServerCounters::Shoal(api) => api.settled_counters(),
            ServerCounters::Proc(pids) => Counters::from_proc(pids),
        }
    }
}

struct Bar {
    bar: indicatif::ProgressBar,
    server: Option<ServerCounters>,
    before: Option<(Result<Counters>, Instant)>,
}

impl Progress for Bar {
    fn preparing(&mut self, files_done: u64, files_total: u64) {
        self.bar.set_message(format!(
            "preparing the file set: {files_done}/{files_total} files"
        ));
    }
    fn starting(&mut self) {
        if let Some(server) = &self.server {
            self.before = Some((server.read(), Instant::now()));
        }
        self.bar.set_message("starting");
    }
    fn running(&mut self, elapsed: Duration, ops: u64, bytes: u64, errors: u64) {
        let s = elapsed.as_secs_f64().max(1e-3);
        self.bar.set_message(format!(
            "{:>5.0}s  {:>9.1} MB/s  {:>8.0} IOPS  {errors} errors",
            s,
            bytes as f64 / 1e6 / s,
            ops as f64 / s
        ));
    }
    fn finish(&mut self) {
        self.bar.finish_and_clear();
    }
}

fn run_job(args: RunArgs) -> Result<()> {
    let file = job_file(&args)?;
    let api = file.shoal_api.as_deref().map(ShoalApi::new).transpose()?;
    if api.is_some() && !args.server_pid.is_empty() {
        bail!("--server-pid is for servers that are not shoal: shoal's CPU comes from --shoal-api");
    }
    let (needs_arc, needs_l2arc) = match file.working_set.as_deref() {
        Some(ws) => parse_working_set(ws)?.needs_tiers(),
        None => (false, false),
    };
    let mut sizing = Sizing {
        clients: args.agents.len().max(1) * file.clients_per_agent.unwrap_or(1),
        ..Sizing::default()
    };
    if let Some(api) = &api {
        if (needs_arc && file.arc.is_none()) || (needs_l2arc && file.l2arc.is_none()) {
            // The pool of the export's first component; a per-client export names it
            // before its `{client}`.
            let (arc, l2arc) = api.cache_tiers(file.export.as_deref().unwrap_or("/"))?;
            sizing.arc_bytes = Some(arc);
            sizing.l2arc_bytes = Some(l2arc);
        }
    }
    let job = file.resolve(sizing)?;
    let server = match (&api, args.server_pid.is_empty()) {
        (Some(api), _) => Some(ServerCounters::Shoal(api.clone())),
        (None, false) => Some(ServerCounters::Proc(args.server_pid.clone())),
        (None, true) => None,
    };
    let agents = if args.agents.is_empty() {
        vec![local_agent(args.bind)?]
    } else {
        if args.bind.is_some() {
            bail!("--bind is for runs without agents: give each agent its own --bind");
        }
        args.agents.clone()
    };
    let bar = indicatif::ProgressBar::new_spinner();
    bar.enable_steady_tick(Duration::from_millis(200));
    let mut progress = Bar {
        bar,
        server: server.clone(),
        before: None,
    };
    let results = run_on_agents(&job, &agents, &mut progress)?;
    let ended = Instant::now();
    let server = match (&server, progress.before.take()) {
        (Some(counters), Some((before, started))) => {
            let after = counters.read_settled();
            let span = Span {
                run_s: ended.duration_since(started).as_secs_f64(),
                window_s: started.elapsed().as_secs_f64(),
            };
            // Only shoal's counters can check where reads came from.
            let claim = if api.is_some() { job.expect } else { None };
            match (before, after) {
                (Ok(b), Ok(a)) => Some(compare(&b, &a, claim, span)),
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("shoal bench: the server's side is unknown: {e:#}");
                    None
                }
            }
        }
        _ => None,
    };
    if let (Some(expect), None) = (job.expect, &api) {
        eprintln!("shoal bench: expect = {expect:?} is not checked without shoal_api");
    }
    let report = Report::build(&job, results, server);
    if args.json {
        eprint!("{}", report.table());
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    if let Some(p) = &args.csv {
        std::fs::write(p, report.csv()).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &args.plot {
        std::fs::write(p, report.html()).with_context(|| format!("writing {}", p.display()))?;
    }
    if report.aggregate.errors > 0 {
        bail!(
            "{} operations failed (see the errors above)",
            report.aggregate.errors
        );
    }
    if let Some(c) = report.server.as_ref().and_then(|s| s.cache_check.as_ref()) {
        if !c.passed {
            bail!("cache check failed: {}", c.message);
        }
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct PlanArgs {
    /// The layout: 3x(4+1)raidz, 2x(4+2)raidz2, 7x2mirror, 6stripe.
    layout: String,
    /// Streaming bandwidth of one disk, MB/s.
    #[arg(long)]
    disk_mbps: f64,
    /// Random IOPS of one disk.
    #[arg(long)]
    disk_iops: f64,
    /// Capacity of one disk (e.g. 4T), for the usable capacity: decimal units as
    /// disk vendors write them (4T is 4 000 000 000 000 bytes), binary with --binary.
    #[arg(long)]
    disk_size: Option<String>,
    /// Hot spares: disks that add neither bandwidth nor capacity.
    #[arg(long, default_value_t = 0)]
    spares: u32,
    /// What the bus or controllers can move, all disks together, MB/s.
    #[arg(long)]
    bus_mbps: Option<f64>,
    /// Sizes in binary units (K = 1024, TiB) rather than decimal (k = 1000, TB).
    #[arg(long)]
    binary: bool,
    #[arg(long)]
    json: bool,
}

/// `4T`, `500G`, `1.92T`: decimal (vendors' units) unless `binary`.
fn plan_size(s: &str, binary: bool) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("--disk-size '{s}': like 4T, 960G or 1.92T"))?;
    let unit = unit.trim().to_ascii_uppercase();
    let unit = unit.trim_end_matches('B');
    // An explicit binary unit (TiB) is binary whatever --binary says.
    let (unit, binary) = match unit.strip_suffix('I') {
        Some(u) => (u, true),
        None => (unit, binary),
    };
    let power = match unit {
        "" => 0,
        "K" => 1,
        "M" => 2,
        "G" => 3,
        "T" => 4,
        "P" => 5,
        _ => bail!("--disk-size '{s}': unknown unit (K, M, G, T, P)"),
    };
    let base: f64 = if binary { 1024.0 } else { 1000.0 };
    Ok((v * base.powi(power)).round() as u64)
}

/// Bytes as TB (decimal) or TiB (binary), three significant digits.
fn plan_bytes(b: u64, binary: bool) -> String {
    let (base, units): (f64, [&str; 6]) = if binary {
        (1024.0, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"])
    } else {
        (1000.0, ["B", "kB", "MB", "GB", "TB", "PB"])
    };
    let mut v = b as f64;
    let mut u = 0;
    while v >= base && u < units.len() - 1 {
        v /= base;
        u += 1;
    }
    format!("{v:.3} {}", units[u])
        .replace(".000 ", " ")
        .trim_end()
        .to_string()
}

pub fn plan(args: PlanArgs) -> Result<()> {
    if !(args.disk_mbps > 0.0 && args.disk_iops > 0.0) {
        bail!("--disk-mbps and --disk-iops must be positive");
    }
    if args.bus_mbps.is_some_and(|b| b.is_nan() || b <= 0.0) {
        bail!("--bus-mbps must be positive");
    }
    let layout = bench::plan::parse_layout(&args.layout)?;
    let disk_size = args
        .disk_size
        .as_deref()
        .map(|s| plan_size(s, args.binary))
        .transpose()?;
    let p = bench::plan::predict_with(
        layout,
        args.disk_mbps,
        args.disk_iops,
        disk_size,
        bench::plan::Extras {
            spares: args.spares,
            bus_mbps: args.bus_mbps,
        },
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(());
    }
    let spares = if p.spares > 0 {
        format!(" ({} hot spares)", p.spares)
    } else {
        String::new()
    };
    println!("{}: {} disks{spares}", args.layout, p.disks);
    let bound = |bus: bool, disks: u32| {
        if bus {
            format!("the bus's {:.0} MB/s", p.bus_mb_per_s.unwrap_or(0.0))
        } else {
            format!("{disks} disks' bandwidth")
        }
    };
    println!(
        "  streaming read   {:>8.0} MB/s  ({}; {:.2} device bytes per byte read)",
        p.streaming_read_mb_per_s,
        bound(p.bus_bound_read, p.read_disks),
        p.device_bytes_per_read_byte
    );
    println!(
        "  streaming write  {:>8.0} MB/s  ({}; {:.2} device bytes per byte written)",
        p.streaming_write_mb_per_s,
        bound(p.bus_bound_write, p.write_disks),
        p.device_bytes_per_write_byte
    );
    println!("  random reads     {:>8.0} IOPS", p.random_read_iops);
    println!(
        "  random writes    {:>8.0} IOPS  (without a log device or write coalescing)",
        p.random_write_iops
    );
    if let Some(u) = p.usable_bytes {
        println!("  usable capacity  {:>8}", plan_bytes(u, args.binary));
    }
    Ok(())
}
