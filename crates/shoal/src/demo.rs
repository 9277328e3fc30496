//! `shoal demo`: the first thing a new user types. With no arguments it creates (or
//! reuses) everything under ./shoal-demo: a state directory, a raidz2 pool `demo` of
//! six sparse device files, a filesystem `demo/share` with lz4 compression, and an NFS
//! share of it; then it serves (NFSv3, the browser UI and the admin API) until Ctrl-C,
//! and prints how to mount the share from Linux, macOS and libnfs.
//!
//! Safe by default: everything listens on loopback and the share admits only
//! 127.0.0.1; `--listen 0.0.0.0:2049 --clients 10.0.0.0/8` opens it up. Running it
//! again reuses the pool and its data.

use crate::admin::Admin;
use crate::registry::Registry;
use anyhow::{bail, Context, Result};
use server::config::{ServeConfig, ShareConfig};
use std::net::SocketAddr;
use std::path::PathBuf;

const POOL: &str = "demo";
const FILESYSTEM: &str = "demo/share";

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Where the demo keeps its devices and state.
    #[arg(long, default_value = "shoal-demo")]
    dir: PathBuf,
    /// Size of each of the six device files (sparse: they take only what is written).
    #[arg(long, default_value = "1G")]
    size: String,
    /// NFS address (MOUNT shares the port).
    #[arg(long, default_value = "127.0.0.1:2049")]
    listen: SocketAddr,
    /// Admin API address, or `off`.
    #[arg(long, default_value = "127.0.0.1:8080")]
    api: String,
    /// Who may mount the share (a host, a CIDR, or `*`).
    #[arg(long, default_value = "127.0.0.1")]
    clients: String,
}

pub fn run(args: DemoArgs) -> Result<()> {
    crate::serve::init_logs();
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let dir = std::fs::canonicalize(&args.dir)?;
    let state = dir.join("state");
    if std::env::var_os("SHOAL_STATE_DIR").is_some_and(|s| s != state.as_os_str()) {
        bail!(
            "SHOAL_STATE_DIR is set: the demo keeps its own state in {}",
            state.display()
        );
    }
    // Only this process and the commands it prints use the demo's state directory;
    // set before any other thread starts.
    std::env::set_var("SHOAL_STATE_DIR", &state);

    if Registry::load()?.pools.contains_key(POOL) {
        eprintln!("shoal demo: reusing pool '{POOL}' in {}", dir.display());
    } else {
        let devices = dir.join("devices");
        if devices.exists() {
            bail!(
                "{} holds devices but {} knows no pool: remove {} to start over",
                devices.display(),
                state.display(),
                dir.display()
            );
        }
        let layout: Vec<String> = ["raidz2", "d1", "d2", "d3", "d4", "d5", "d6"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        crate::pool_cmd::create(Some(devices), Some(args.size.clone()), POOL, &layout)?;
    }
    let admin = Admin::connect()?;
    if !admin
        .fs_list(Some(POOL))?
        .iter()
        .any(|d| d.name == FILESYSTEM)
    {
        admin.fs_create(FILESYSTEM, &[("compression".into(), "lz4".into())])?;
    }

    let mut config = ServeConfig::default();
    config.nfs.listen = args.listen;
    // The demo shows files; its own iSCSI portal would take 3260 from a real daemon.
    config.iscsi.listen = server::config::IscsiListen::Off;
    config.api.listen =
        server::config::parse_api_listen(&args.api).map_err(|e| anyhow::anyhow!("--api: {e}"))?;
    config.shares.push(ShareConfig {
        dataset: FILESYSTEM.into(),
        // insecure: macOS and libnfs use unprivileged ports; no_root_squash so root on
        // the client owns what it writes, as on a local disk.
        rules: format!("{}(rw,no_root_squash,insecure)", args.clients),
    });
    crate::serve::serve(&config, |daemon| {
        let nfs = daemon.nfs_addrs()[0];
        let host = if nfs.ip().is_unspecified() {
            "SERVER".to_string()
        } else {
            nfs.ip().to_string()
        };
        let port = nfs.port();
        let export = format!("/{FILESYSTEM}");
        println!(
            "shoal demo: pool '{POOL}' (raidz2 of six device files in {}/devices)",
            dir.display()
        );
        println!(
            "  filesystem {FILESYSTEM} (lz4), shared over NFSv3 at {host}:{export} to {}",
            args.clients
        );
        println!();
        println!("mount it:");
        println!(
            "  Linux:  sudo mount -t nfs -o vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp,nolock {host}:{export} /mnt"
        );
        println!(
            "          sudo mount -t nfs4 -o port={port} {host}:{export} /mnt   (NFSv4: locks work)"
        );
        println!(
            "  macOS:  sudo mount -t nfs -o vers=3,tcp,port={port},mountport={port},nolocks {host}:{export} /Volumes/share"
        );
        println!(
            "  libnfs: nfs-ls 'nfs://{host}{export}?version=3&nfsport={port}&mountport={port}'"
        );
        match daemon.api_addr() {
            Some(a) => println!(
                "  UI:     http://{a}/ (the browser UI and Analytics; the admin API is under /api/v1)"
            ),
            None => println!("  UI:     off (the admin API is off)"),
        }
        println!("  CLI:    SHOAL_STATE_DIR={} shoal status", state.display());
        println!();
        println!("serving until Ctrl-C (run `shoal demo` again to come back to the same data)");
    })
}
