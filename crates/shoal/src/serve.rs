//! `shoal serve`: the daemon. Imports every registered pool, shares the configured
//! datasets (and those shared through the API before) over NFS, serves the admin API,
//! and runs until SIGTERM or SIGINT, when it stops the API, drains in-flight requests
//! and commits every pool before exiting.

use crate::pool_cmd::open_registered_long_lived;
use crate::registry::{lock_pool, state_dir, Registry};
use anyhow::{Context, Result};
use server::config::{ServeConfig, ShareConfig};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Configuration file (TOML); the options below override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address for NFS and MOUNT (default 0.0.0.0:2049).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Where the portmapper answers: `auto` (port 111 beside NFS on 2049, when
    /// free; the default), `off`, or an address such as 0.0.0.0:111.
    #[arg(long)]
    portmapper: Option<server::config::Portmapper>,
    /// How long clients that held locks before a restart have to reclaim them
    /// (default 90s), e.g. `30s`.
    #[arg(long, value_parser = server::config::parse_duration)]
    grace_period: Option<std::time::Duration>,
    /// How long past its lease a silent NFSv4 client keeps its opens and locks
    /// while no other client needs them (default 1d), or `off`.
    #[arg(long, value_parser = server::config::parse_duration_or_off)]
    courtesy: Option<std::time::Duration>,
    /// The port client machines' portmappers answer on (tests run theirs elsewhere
    /// than 111).
    #[arg(long, hide = true)]
    client_portmapper: Option<u16>,
    /// iSCSI portals: `auto` (0.0.0.0:3260 when free; the default), `off`, or
    /// addresses such as 0.0.0.0:3260, several separated by commas (multipath).
    #[arg(long)]
    iscsi: Option<server::config::IscsiListen>,
    /// Admin HTTP API address (default 127.0.0.1:8080), or `off`.
    #[arg(long)]
    api: Option<String>,
    /// Require a login for the UI and API even on loopback (beyond loopback it always is).
    #[arg(long)]
    login_required: bool,
    /// PEM certificate chain for HTTPS (with --tls-key).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for HTTPS (with --tls-cert).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Share a dataset: `pool/fs` or `pool/fs=RULES` (RULES as in /etc/exports,
    /// default `*(rw)`); repeatable.
    #[arg(long = "share")]
    shares: Vec<String>,
    /// A directory of device files the API may create pools on and import from
    /// (`[storage] device_dirs`); repeatable.
    #[arg(long = "device-dir")]
    device_dirs: Vec<PathBuf>,
    /// Each pool's ARC bound, e.g. `4G` (default: a quarter of memory).
    #[arg(long, value_parser = crate::units::parse_size)]
    arc_max: Option<u64>,
    /// Record analytics (`on`, the default) or not (`off`).
    #[arg(long, value_parser = ["on", "off"])]
    analytics: Option<String>,
    /// Make every device behave as a disk of this speed, e.g. `72MB/s,90iops` (for
    /// scaling experiments with `shoal bench`; never for real service).
    #[arg(long, value_parser = |s: &str| vdev::SpeedLimit::parse(s))]
    simulate_disk: Option<vdev::SpeedLimit>,
    /// Let the admin API fail and revive devices (`POST /api/v1/pools/POOL/inject`),
    /// for fault testing; never for real service.
    #[arg(long)]
    fault_injection: bool,
    /// Keep every write the devices have not been told to flush only in this
    /// process's memory, written back in a random subset and order (seeded by SEED),
    /// as a disk's volatile write cache does: `kill -9` of the daemon then loses what
    /// a power cut would. For power-loss tests; never for real service.
    #[arg(long, value_name = "SEED")]
    simulate_power_loss: Option<u64>,
    /// With --simulate-power-loss: device flushes do nothing (the power-loss tests'
    /// negative control, which must then report losses).
    #[arg(long, requires = "simulate_power_loss", hide = true)]
    simulate_lying_flush: bool,
}

pub fn run(args: ServeArgs) -> Result<()> {
    init_logs();
    if let Some(speed) = args.simulate_disk {
        crate::pool_cmd::simulate_disks(speed);
        eprintln!("shoal: every device is a simulated disk of {speed}");
    }
    if let Some(seed) = args.simulate_power_loss {
        crate::pool_cmd::simulate_power_loss(seed, args.simulate_lying_flush);
        eprintln!(
            "shoal: SIMULATED POWER LOSS (seed {seed}{}): unflushed writes live only in this \
             process; not for real service",
            if args.simulate_lying_flush {
                ", flushes do nothing"
            } else {
                ""
            }
        );
    }
    if args.fault_injection {
        crate::pool_cmd::enable_fault_injection();
        eprintln!("shoal: fault injection is on: the API can fail devices");
    }
    let mut config = match &args.config {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            ServeConfig::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?
        }
        None => ServeConfig::default(),
    };
    if let Some(l) = args.listen {
        config.nfs.listen = l;
    }
    if let Some(iscsi) = args.iscsi {
        config.iscsi.listen = iscsi;
    }
    if let Some(api) = &args.api {
        config.api.listen =
            server::config::parse_api_listen(api).map_err(|e| anyhow::anyhow!("--api: {e}"))?;
    }
    if args.login_required {
        config.api.login = server::config::LoginMode::Required;
    }
    if args.tls_cert.is_some() || args.tls_key.is_some() {
        config.api.tls_cert = args.tls_cert.clone();
        config.api.tls_key = args.tls_key.clone();
    }
    for d in &args.device_dirs {
        let d =
            std::fs::canonicalize(d).with_context(|| format!("--device-dir {}", d.display()))?;
        if !config.storage.device_dirs.contains(&d) {
            config.storage.device_dirs.push(d);
        }
    }
    if args.arc_max.is_some() {
        config.cache.arc_max = args.arc_max;
    }
    if let Some(a) = &args.analytics {
        config.analytics.enabled = a == "on";
    }
    if let Some(p) = args.portmapper {
        config.nfs.portmapper = p;
    }
    if let Some(g) = args.grace_period {
        config.nfs.grace_period = g;
    }
    if let Some(c) = args.courtesy {
        config.nfs.courtesy = c;
    }
    if let Some(p) = args.client_portmapper {
        config.nfs.client_portmapper = p;
    }
    for s in &args.shares {
        let (dataset, rules) = match s.split_once('=') {
            Some((d, r)) => (d.to_string(), r.to_string()),
            None => (s.clone(), server::config::default_rules()),
        };
        config.shares.retain(|c| c.dataset != dataset);
        config.shares.push(ShareConfig { dataset, rules });
    }
    serve(&config, |daemon| {
        // NFS first, then the portmapper's addresses (`Daemon::nfs_addrs`).
        let addrs = daemon.nfs_addrs();
        if let Some(a) = addrs.first() {
            eprintln!("shoal: serving NFSv3 (locks through NLM) and NFSv4.0, 4.1 and 4.2 on {a}");
        }
        for a in addrs.iter().skip(1) {
            eprintln!("shoal: portmapper on {a}");
        }
        if let Some(a) = daemon.api_addr() {
            let tls = daemon.state().auth.secure();
            let scheme = if tls { "https" } else { "http" };
            eprintln!("shoal: browser UI and admin API on {scheme}://{a}/");
            if daemon.state().auth.required() {
                eprintln!("shoal: the UI and API require a login (`shoal passwd` sets it)");
            }
        }
        for a in &daemon.state().iscsi_addrs {
            eprintln!("shoal: serving iSCSI on {a}");
        }
        for s in daemon.service().shares() {
            eprintln!("shoal: sharing {} as {} to {}", s.dataset, s.path, s.rules);
        }
    })
}

/// Imports every registered pool, starts the daemon, calls `ready`, and runs until
/// SIGTERM or SIGINT; then stops the daemon (drain, commit) and releases the pools.
pub fn serve(config: &ServeConfig, ready: impl FnOnce(&server::Daemon)) -> Result<()> {
    let registry = Registry::load()?;
    let mut locks = std::collections::HashMap::new();
    let mut pools = Vec::new();
    for name in registry.pools.keys() {
        locks.insert(name.clone(), lock_pool(name)?);
        pools.push(
            open_registered_long_lived(name, config.cache.arc_max)
                .with_context(|| format!("importing pool {name}"))?,
        );
    }
    // Signals are caught before anything is served, so none is lost in between.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])?;
    // The host holds the pools' locks from here on: a pool exported through the API
    // is unlocked then, one created or imported is locked while the daemon holds it.
    let host = Arc::new(crate::pool_host::DaemonPoolHost::new(
        config.cache.arc_max,
        locks,
    ));
    let daemon = server::Daemon::start(
        config,
        pools,
        &state_dir(),
        Some(host as Arc<dyn server::pools_admin::PoolHost>),
        Some(Arc::new(server::mounts::FuseHost) as Arc<dyn server::mounts::MountHost>),
    )?;
    ready(&daemon);
    if let Some(sig) = signals.forever().next() {
        tracing::info!(signal = sig, "stopping: draining requests and committing");
    }
    daemon.stop()?;
    eprintln!("shoal: stopped");
    Ok(())
}

pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SHOAL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
