//! `shoal bench` (the load generator: `run` a job here or on agents, or be an `agent`)
//! and `shoal plan` (the capacity model of a pool layout). The work is in the `bench`
//! crate; this is the command line: options over the job file, progress, output.

use anyhow::{bail, Context, Result};
use bench::agent::{local_agent, run_on_agents, serve_agent, AgentOptions, Progress};
use bench::job::{Expect, JobFile};
use bench::report::Report;
use bench::server_side::{compare, Counters, ShoalApi};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::Duration;

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
    /// The whole file set: bytes (`2G`) or a multiple of the ARC (`4xARC`).
    #[arg(long)]
    working_set: Option<String>,
    /// ARC size for `--working-set NxARC` when not asked from --shoal-api.
    #[arg(long)]
    arc: Option<String>,
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
    /// Where reads should come from (`disk` or `cache`); checked with --shoal-api.
    #[arg(long, value_parser = ["disk", "cache"])]
    expect: Option<String>,
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
    if args.verify {
        f.verify = Some(true);
    }
    if let Some(e) = &args.expect {
        f.expect = Some(if e == "disk" {
            Expect::Disk
        } else {
            Expect::Cache
        });
    }
    Ok(f)
}

struct Bar {
    bar: indicatif::ProgressBar,
    api: Option<ShoalApi>,
    before: Option<Result<Counters>>,
}

impl Progress for Bar {
    fn preparing(&mut self, files_done: u64, files_total: u64) {
        self.bar.set_message(format!(
            "preparing the file set: {files_done}/{files_total} files"
        ));
    }
    fn starting(&mut self) {
        if let Some(api) = &self.api {
            self.before = Some(api.counters());
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
    let needs_arc = file
        .working_set
        .as_deref()
        .is_some_and(|w| w.to_ascii_lowercase().ends_with("xarc"))
        && file.arc.is_none();
    let arc = match (&api, needs_arc) {
        (Some(api), true) => Some(api.arc_bytes(file.export.as_deref().unwrap_or("/"))?),
        _ => None,
    };
    let job = file.resolve(arc)?;
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
        api: api.clone(),
        before: None,
    };
    let results = run_on_agents(&job, &agents, &mut progress)?;
    let server = match (&api, progress.before.take()) {
        (Some(api), Some(before)) => {
            let after = api.settled_counters();
            match (before, after) {
                (Ok(b), Ok(a)) => Some(compare(&b, &a, job.expect)),
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("shoal bench: the server's side is unknown: {e:#}");
                    None
                }
            }
        }
        _ => None,
    };
    if let (Some(expect), None) = (job.expect, &server) {
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
    /// Capacity of one disk (e.g. 4T), for the usable capacity.
    #[arg(long, value_parser = crate::units::parse_size)]
    disk_size: Option<u64>,
    #[arg(long)]
    json: bool,
}

pub fn plan(args: PlanArgs) -> Result<()> {
    if !(args.disk_mbps > 0.0 && args.disk_iops > 0.0) {
        bail!("--disk-mbps and --disk-iops must be positive");
    }
    let layout = bench::plan::parse_layout(&args.layout)?;
    let p = bench::plan::predict(layout, args.disk_mbps, args.disk_iops, args.disk_size);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(());
    }
    println!("{}: {} disks", args.layout, p.disks);
    println!(
        "  streaming read   {:>8.0} MB/s  ({} disks' bandwidth)",
        p.streaming_read_mb_per_s, p.read_disks
    );
    println!(
        "  streaming write  {:>8.0} MB/s  ({} disks' bandwidth)",
        p.streaming_write_mb_per_s, p.write_disks
    );
    println!("  random reads     {:>8.0} IOPS", p.random_read_iops);
    if let Some(u) = p.usable_bytes {
        println!("  usable capacity  {:>8}", crate::units::human(u));
    }
    Ok(())
}
