//! `shoal pool ...`: create, status, scrub, check, export, import, destroy, replace,
//! clear, spare (the device changes of an imported pool: `pool_devices_cmd.rs`).
//!
//! Every command validates all of its arguments before it writes anything, and
//! `create` removes the files it made if anything fails, so a wrong argument never
//! leaves a half-made pool behind.

use crate::admin::Api;
use crate::registry::{lock_pool, Registry};
use crate::units::{human, parse_size};
use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use pool::pool::{DeviceArg, PoolStatus, TopArg};
use pool::{Pool, PoolOptions};
use server::pool_devices::ParsedLayout;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vdev::{Device, FileDevice};

#[derive(Subcommand)]
pub enum PoolCommand {
    /// Create a pool: LAYOUT reads like zpool's, e.g. `raidz2 a b c d e f log x cache y
    /// spare z`.
    Create {
        /// Directory for relative device paths.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Create missing device files of this size (e.g. 1G). They are sparse, except
        /// the intent log's space, which is written once: up to 4G of a log device, and
        /// up to 64M of the first data devices.
        #[arg(long)]
        size: Option<String>,
        name: String,
        #[arg(required = true, num_args = 1..)]
        layout: Vec<String>,
    },
    /// Show pool health, devices and error counters.
    Status {
        name: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Verify every allocated block and repair from redundancy.
    Scrub {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Walk every block and report problems (checksums, overlaps, leaks).
    Check {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Commit everything and mark the pool exported, so it can be imported elsewhere.
    Export { name: String },
    /// Find pools on the devices in DIR and import one.
    Import {
        #[arg(long)]
        dir: Option<PathBuf>,
        name: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Destroy a pool: its devices' labels are wiped.
    Destroy { name: String },
    /// Replace a data device (by path or guid) with NEW and resilver onto it.
    Replace {
        name: String,
        old: String,
        new: PathBuf,
        /// Create NEW as a file of this size if it does not exist.
        #[arg(long)]
        size: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Bring a FAULTED data device (by path or guid) back: resilver it in place from
    /// the rest of its vdev. A device that faulted missed writes and stays FAULTED
    /// across restarts until cleared or replaced.
    Clear {
        name: String,
        device: String,
        #[arg(long)]
        json: bool,
    },
    /// Add or remove a hot spare. A running daemon puts a spare in place of a data
    /// device that faults or goes missing, and resilvers it.
    Spare {
        #[command(subcommand)]
        action: SpareAction,
    },
    /// Grow a pool or give it log, cache and spare devices while it serves: LAYOUT as
    /// for create, e.g. `mirror c d`, `log e`, `cache f`.
    Add {
        /// Directory for relative device paths.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Create missing device files of this size (e.g. 1G).
        #[arg(long)]
        size: Option<String>,
        name: String,
        #[arg(required = true, num_args = 1..)]
        layout: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Remove a log, cache or spare device (by path or guid).
    Remove {
        name: String,
        device: String,
        #[arg(long)]
        json: bool,
    },
    /// Attach NEW beside DEVICE (a plain disk becomes a mirror, a mirror gains a side)
    /// and resilver it.
    Attach {
        name: String,
        device: String,
        new: PathBuf,
        /// Create NEW as a file of this size if it does not exist.
        #[arg(long)]
        size: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Detach a side of a mirror (by path or guid); another side must be whole.
    Detach {
        name: String,
        device: String,
        #[arg(long)]
        json: bool,
    },
    /// Take a data device out of service (it stays OFFLINE across restarts); its vdev
    /// must stay readable without it.
    Offline {
        name: String,
        device: String,
        #[arg(long)]
        json: bool,
    },
    /// Bring an OFFLINE device back: it is resilvered with what it missed.
    Online {
        name: String,
        device: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum SpareAction {
    /// Add DEVICE to pool NAME as a hot spare.
    Add {
        name: String,
        device: PathBuf,
        /// Create DEVICE as a file of this size if it does not exist.
        #[arg(long)]
        size: Option<String>,
    },
    /// Remove spare DEVICE (its path or guid) from pool NAME.
    Remove { name: String, device: String },
}

pub fn run(cmd: PoolCommand) -> Result<()> {
    match cmd {
        PoolCommand::Create {
            dir,
            size,
            name,
            layout,
        } => create(dir, size, &name, &layout),
        PoolCommand::Status { name, json } => status(name, json),
        PoolCommand::Scrub { name, json } => scrub(&name, json),
        PoolCommand::Check { name, json } => check(&name, json),
        PoolCommand::Export { name } => export(&name),
        PoolCommand::Import { dir, name, json } => import(dir, name, json),
        PoolCommand::Destroy { name } => destroy(&name),
        PoolCommand::Replace {
            name,
            old,
            new,
            size,
            json,
        } => replace(&name, &old, &new, size, json),
        PoolCommand::Clear { name, device, json } => clear(&name, &device, json),
        PoolCommand::Spare { action } => spare(action),
        PoolCommand::Add {
            dir,
            size,
            name,
            layout,
            json,
        } => crate::pool_devices_cmd::add(dir, size, &name, &layout, json),
        PoolCommand::Remove { name, device, json } => {
            crate::pool_devices_cmd::remove(&name, &device, json)
        }
        PoolCommand::Attach {
            name,
            device,
            new,
            size,
            json,
        } => crate::pool_devices_cmd::attach(&name, &device, &new, size, json),
        PoolCommand::Detach { name, device, json } => {
            crate::pool_devices_cmd::detach(&name, &device, json)
        }
        PoolCommand::Offline { name, device, json } => {
            crate::pool_devices_cmd::offline(&name, &device, json)
        }
        PoolCommand::Online { name, device, json } => {
            crate::pool_devices_cmd::online(&name, &device, json)
        }
    }
}

fn cli_options() -> PoolOptions {
    PoolOptions {
        sync_thread: false,
        ..PoolOptions::default()
    }
}

/// A layout as `create` takes it: at least one data vdev.
fn parse_layout(words: &[String], dir: &Path) -> Result<ParsedLayout> {
    let out = server::pool_devices::parse_layout(words, dir).map_err(|e| anyhow!(e))?;
    if out.tops.is_empty() {
        bail!("no data devices: give at least one device, mirror or raidz group");
    }
    Ok(out)
}

/// Set by `shoal serve --simulate-disk`: every device the daemon opens behaves as a
/// disk of this speed (for scaling experiments on one machine).
static SIMULATED_DISK: std::sync::OnceLock<vdev::SpeedLimit> = std::sync::OnceLock::new();

pub(crate) fn simulate_disks(speed: vdev::SpeedLimit) {
    let _ = SIMULATED_DISK.set(speed);
}

static FAULT_INJECTION: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `shoal serve --fault-injection`: devices the daemon opens can be failed through the API.
pub(crate) fn enable_fault_injection() {
    FAULT_INJECTION.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Set by `shoal serve --simulate-power-loss SEED`: every device the daemon opens
/// keeps unflushed writes in a volatile cache (seeded), and with `lying_flush` its
/// flushes do nothing (the negative control of the power-loss tests).
static SIMULATED_POWER_LOSS: std::sync::OnceLock<(u64, bool)> = std::sync::OnceLock::new();

pub(crate) fn simulate_power_loss(seed: u64, lying_flush: bool) {
    let _ = SIMULATED_POWER_LOSS.set((seed, lying_flush));
}

/// `dev` (opened from `path`) as the simulation options of `shoal serve` make it.
fn simulated_disk(dev: Arc<dyn Device>, path: &str) -> Arc<dyn Device> {
    let dev = match SIMULATED_POWER_LOSS.get() {
        Some(&(seed, lying)) => {
            // Each device its own choices, the same for the same seed and path.
            let salt = path.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
            });
            Arc::new(vdev::VolatileCacheDevice::new(dev, seed ^ salt, lying))
        }
        None => dev,
    };
    match SIMULATED_DISK.get() {
        Some(speed) => Arc::new(vdev::ThrottledDevice::new(dev, *speed)),
        None => dev,
    }
}

/// Opens a device as the daemon's options make it (simulation, fault injection).
fn open_device(path: &Path) -> Result<Arc<dyn Device>> {
    let dev = FileDevice::open(path).with_context(|| format!("opening {}", path.display()))?;
    let name = std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string();
    let mut device = simulated_disk(Arc::new(dev), &name);
    if FAULT_INJECTION.load(std::sync::atomic::Ordering::SeqCst) {
        device = vdev::fault_injection::register(&name, device);
    }
    Ok(device)
}

pub(crate) fn create(
    dir: Option<PathBuf>,
    size: Option<String>,
    name: &str,
    words: &[String],
) -> Result<()> {
    let dir = dir.unwrap_or_else(|| PathBuf::from("."));
    let size = size.map(|s| parse_size(&s)).transpose()?;
    let capacity = if let Some(api) = Api::running()? {
        // The daemon takes device paths as they are: make them absolute here.
        let cwd = std::env::current_dir()?;
        let layout: Vec<String> = words
            .iter()
            .map(|w| match w.as_str() {
                "mirror" | "raidz" | "raidz1" | "raidz2" | "raidz3" | "log" | "cache" | "spare" => {
                    w.clone()
                }
                _ => cwd.join(&dir).join(w).display().to_string(),
            })
            .collect();
        let st: PoolStatus = api.post(
            "/pools",
            &server::pools_admin::NewPool {
                name: name.to_string(),
                layout,
                size,
            },
        )?;
        st.capacity_bytes
    } else {
        let _lock = lock_pool(name)?;
        create_registered(&dir, size, name, words, cli_options())?
            .status()
            .capacity_bytes
    };
    println!(
        "created pool '{}' ({} usable before redundancy)",
        name,
        human(capacity)
    );
    Ok(())
}

/// Creates pool `name` (LAYOUT words, device names relative to `dir`), creating
/// missing device files of `size`, and registers it; the caller holds its lock. A
/// failure removes the files it made.
pub(crate) fn create_registered(
    dir: &Path,
    size: Option<u64>,
    name: &str,
    words: &[String],
    options: PoolOptions,
) -> Result<Arc<Pool>> {
    let layout = parse_layout(words, dir)?;
    let mut registry = Registry::load()?;
    if registry.pools.contains_key(name) {
        bail!("pool '{name}' already exists");
    }
    let all: Vec<PathBuf> = layout
        .tops
        .iter()
        .flat_map(|(_, d)| d.iter().cloned())
        .chain(layout.log.iter().cloned())
        .chain(layout.cache.iter().cloned())
        .chain(layout.spares.iter().cloned())
        .collect();
    // Validate everything before touching the disk.
    let mut seen = std::collections::HashSet::new();
    for p in &all {
        if !seen.insert(p.clone()) {
            bail!("device {} named twice", p.display());
        }
    }
    let mut to_create = Vec::new();
    for p in &all {
        if !p.exists() {
            match size {
                Some(_) => to_create.push(p.clone()),
                None => bail!(
                    "{} does not exist (give --size to create device files)",
                    p.display()
                ),
            }
        }
    }
    if let Some(s) = size {
        if s < vdev::label::MIN_DEVICE_BYTES {
            bail!("--size {} is below the 64M minimum device size", human(s));
        }
    }
    let mut created: Vec<PathBuf> = Vec::new();
    let result = (|| -> Result<Arc<Pool>> {
        let size = size.map(|s| s / vdev::SECTOR_SIZE as u64 * vdev::SECTOR_SIZE as u64);
        if let Some(parent) = to_create.first().and_then(|p| p.parent()) {
            std::fs::create_dir_all(parent).ok();
        }
        for p in &to_create {
            FileDevice::create(p, size.unwrap())
                .with_context(|| format!("creating {}", p.display()))?;
            created.push(p.clone());
        }
        let arg = |p: &PathBuf| -> Result<DeviceArg> {
            let abs = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
            Ok(DeviceArg {
                path: abs.display().to_string(),
                device: open_device(p)?,
            })
        };
        let tops = layout
            .tops
            .iter()
            .map(|(l, devs)| {
                Ok(TopArg {
                    layout: *l,
                    devices: devs.iter().map(arg).collect::<Result<_>>()?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let log = layout.log.iter().map(arg).collect::<Result<Vec<_>>>()?;
        let cache = layout.cache.iter().map(arg).collect::<Result<Vec<_>>>()?;
        let spares = layout.spares.iter().map(arg).collect::<Result<Vec<_>>>()?;
        let pool = Pool::create(name, tops, log, cache, options)?;
        for s in spares {
            if let Err(e) = pool.add_spare(s) {
                let _ = pool.destroy();
                return Err(e.into());
            }
        }
        Ok(pool)
    })();
    let pool = match result {
        Ok(p) => p,
        Err(e) => {
            for p in created {
                let _ = std::fs::remove_file(p);
            }
            return Err(e);
        }
    };
    let paths: Vec<String> = all
        .iter()
        .map(|p| {
            std::fs::canonicalize(p)
                .unwrap_or_else(|_| p.clone())
                .display()
                .to_string()
        })
        .collect();
    registry.pools.insert(name.to_string(), paths);
    registry.save()?;
    Ok(pool)
}

/// Imports a registered pool for the duration of one command.
pub(crate) fn open_registered(name: &str) -> Result<Arc<Pool>> {
    open_registered_with(name, cli_options())
}

/// For processes that keep a pool open (the daemon, a FUSE mount): the background
/// sync thread commits a txg every few seconds, as it would in the appliance.
/// `arc_max_bytes`: the ARC's bound, `None` for the pool's default.
pub(crate) fn open_registered_long_lived(
    name: &str,
    arc_max_bytes: Option<u64>,
) -> Result<Arc<Pool>> {
    open_registered_with(
        name,
        PoolOptions {
            arc_max_bytes,
            ..PoolOptions::default()
        },
    )
}

fn open_registered_with(name: &str, options: PoolOptions) -> Result<Arc<Pool>> {
    let registry = Registry::load()?;
    let paths = registry.pools.get(name).ok_or_else(|| {
        anyhow!("no pool named '{name}' (see `shoal pool status`, or `shoal pool import`)")
    })?;
    let mut devices = Vec::new();
    for p in paths {
        match FileDevice::open(Path::new(p)) {
            Ok(d) => {
                let mut device = simulated_disk(Arc::new(d), p);
                if FAULT_INJECTION.load(std::sync::atomic::Ordering::SeqCst) {
                    device = vdev::fault_injection::register(p, device);
                }
                devices.push(DeviceArg {
                    path: p.clone(),
                    device,
                })
            }
            Err(e) => eprintln!("warning: cannot open {p}: {e}"),
        }
    }
    Ok(Pool::import(devices, Some(name), options)?)
}

pub(crate) fn print_status(st: &PoolStatus) {
    println!("  pool: {}", st.name);
    println!(" state: {}", st.health);
    if let Some(s) = &st.suspended {
        println!("status: SUSPENDED: {s}");
    }
    println!("   txg: {}", st.txg);
    let faulted: Vec<&str> = st
        .vdevs
        .iter()
        .flat_map(|t| t.children.iter())
        .filter(|l| l.health == "FAULTED")
        .map(|l| l.path.as_str())
        .collect();
    for path in faulted {
        println!(
            "action: {path} missed writes; `shoal pool clear {} {path}` resilvers it in \
             place, `shoal pool replace` swaps it",
            st.name
        );
    }
    println!(
        "  size: {}  allocated: {}  free: {}",
        human(st.capacity_bytes),
        human(st.allocated_bytes),
        human(st.free_bytes)
    );
    if let Some(s) = &st.last_scrub {
        println!(
            " scrub: repaired {} in {:.1}s with {} errors",
            human(s.repaired_bytes),
            s.seconds,
            s.errors
        );
    }
    println!("config:\n");
    println!(
        "\t{:<40} {:<8} {:>5} {:>5} {:>5}  IO",
        "NAME", "STATE", "READ", "WRITE", "CKSUM"
    );
    println!("\t{:<40} {:<8}", st.name, st.health);
    let leaf = |indent: &str, l: &pool::pool::LeafStatus| {
        println!(
            "\t{indent}{:<w$} {:<8} {:>5} {:>5} {:>5}  {}",
            l.path,
            l.health,
            l.read_errors,
            l.write_errors,
            l.cksum_errors,
            l.io_mode,
            w = 40 - indent.len()
        );
    };
    for t in &st.vdevs {
        if t.layout == "disk" {
            leaf("  ", &t.children[0]);
            continue;
        }
        let errs = |f: fn(&pool::pool::LeafStatus) -> u64| t.children.iter().map(f).sum::<u64>();
        println!(
            "\t  {:<38} {:<8} {:>5} {:>5} {:>5}",
            format!("{}-{}", t.layout, t.id),
            t.health,
            errs(|l| l.read_errors),
            errs(|l| l.write_errors),
            errs(|l| l.cksum_errors)
        );
        for l in &t.children {
            leaf("    ", l);
        }
    }
    if !st.log.is_empty() {
        println!("\tlogs");
        for l in &st.log {
            leaf("  ", l);
        }
    }
    if !st.cache.is_empty() {
        println!("\tcache");
        for l in &st.cache {
            leaf("  ", l);
        }
    }
    println!();
}

fn status(name: Option<String>, json: bool) -> Result<()> {
    let names: Vec<String> = match name {
        Some(n) => vec![n],
        None => Registry::load()?.pools.keys().cloned().collect(),
    };
    let mut all = Vec::new();
    if let Some(api) = Api::running()? {
        all = api.get::<Vec<PoolStatus>>("/pools")?;
        all.retain(|p| names.contains(&p.name));
        if let Some(missing) = names.iter().find(|n| !all.iter().any(|p| &p.name == *n)) {
            bail!("no imported pool named '{missing}'");
        }
    } else {
        for n in &names {
            let _lock = lock_pool(n)?;
            let pool = open_registered(n)?;
            all.push(pool.status());
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else if all.is_empty() {
        println!("no pools");
    } else {
        for st in &all {
            print_status(st);
        }
    }
    Ok(())
}

fn scrub(name: &str, json: bool) -> Result<()> {
    let summary = if let Some(api) = Api::running()? {
        // The daemon answers when the scrub is done.
        let bar = progress_bar(json, "scrub (in the daemon)");
        let s: pool::pool::ScrubSummary = api.post(&format!("/pools/{name}/scrub"), &())?;
        bar.finish_and_clear();
        s
    } else {
        let _lock = lock_pool(name)?;
        let pool = open_registered(name)?;
        let bar = progress_bar(json, "scrub");
        let summary = pool.scrub(&|p| {
            bar.set_length(p.bytes_total);
            bar.set_position(p.bytes_done);
        })?;
        bar.finish_and_clear();
        pool.storage.flush_all();
        summary
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "scrub repaired {} in {:.1}s with {} errors ({} blocks, {} bad copies found)",
            human(summary.repaired_bytes),
            summary.seconds,
            summary.errors,
            summary.blocks,
            summary.bad_copies
        );
    }
    if summary.errors > 0 {
        bail!("{} blocks could not be read from any copy", summary.errors);
    }
    Ok(())
}

fn check(name: &str, json: bool) -> Result<()> {
    let report: pool::pool::CheckReport = if let Some(api) = Api::running()? {
        api.get(&format!("/pools/{name}/check"))?
    } else {
        let _lock = lock_pool(name)?;
        let pool = open_registered(name)?;
        pool.check()?
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "checked {} blocks (checksums, allocated space, overlaps): {} referenced, {} \
             allocated, {} awaiting free",
            report.blocks,
            human(report.referenced_bytes),
            human(report.allocated_bytes),
            human(report.deferred_bytes)
        );
        println!(
            "recounted {} datasets and snapshots: referenced bytes and dead lists",
            report.datasets
        );
        println!(
            "replayed {} space map blocks: {} allocated on disk, compared range by range \
             with the block tree",
            report.space_map_blocks,
            human(report.space_map_bytes)
        );
        println!(
            "read the intent log chain as import would: {} blocks, {} records, {} to replay",
            report.log_blocks, report.log_records, report.log_records_to_replay
        );
        for p in &report.problems {
            println!("problem: {p}");
        }
        if report.problems.is_empty() {
            println!("no problems found");
        }
    }
    if !report.problems.is_empty() {
        bail!("{} problems found", report.problems.len());
    }
    Ok(())
}

fn export(name: &str) -> Result<()> {
    if let Some(api) = Api::running()? {
        api.post::<serde_json::Value>(&format!("/pools/{name}/export?confirm={name}"), &())?;
    } else {
        let _lock = lock_pool(name)?;
        let pool = open_registered(name)?;
        pool.export()?;
        forget(name)?;
    }
    println!("exported pool '{name}'");
    Ok(())
}

/// Drops pool `name` from the registry (exported or destroyed).
pub(crate) fn forget(name: &str) -> Result<()> {
    let mut registry = Registry::load()?;
    registry.pools.remove(name);
    registry.save()
}

/// Imports the pool on the devices in `dir` (`name` when several are there) and
/// registers it; the caller holds a lock.
pub(crate) fn import_registered(
    dir: &Path,
    name: Option<&str>,
    options: PoolOptions,
) -> Result<Arc<Pool>> {
    let devices = scan_dir(dir)?;
    let mut registry = Registry::load()?;
    if let Some(n) = name {
        if registry.pools.contains_key(n) {
            bail!("pool '{n}' is already imported");
        }
    }
    let devices = devices
        .into_iter()
        .map(|d| {
            let mut device = simulated_disk(d.device, &d.path);
            if FAULT_INJECTION.load(std::sync::atomic::Ordering::SeqCst) {
                device = vdev::fault_injection::register(&d.path, device);
            }
            DeviceArg {
                path: d.path,
                device,
            }
        })
        .collect();
    let pool = Pool::import(devices, name, options)?;
    if registry.pools.contains_key(&pool.name) {
        bail!("pool '{}' is already imported", pool.name);
    }
    let paths = device_paths(&pool.status());
    registry.pools.insert(pool.name.clone(), paths);
    registry.save()?;
    Ok(pool)
}

/// Records the device paths of `pool` in the registry (after a replacement).
pub(crate) fn record_devices(pool: &Pool) -> Result<()> {
    let mut registry = Registry::load()?;
    registry
        .pools
        .insert(pool.name.clone(), device_paths(&pool.status()));
    registry.save()
}

/// Every device path of a pool, as the registry records them.
fn device_paths(st: &PoolStatus) -> Vec<String> {
    st.vdevs
        .iter()
        .flat_map(|t| t.children.iter().map(|c| c.path.clone()))
        .chain(st.log.iter().map(|l| l.path.clone()))
        .chain(st.cache.iter().map(|l| l.path.clone()))
        .chain(st.spares.iter().map(|l| l.path.clone()))
        .collect()
}

fn scan_dir(dir: &Path) -> Result<Vec<DeviceArg>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for e in entries.flatten() {
        let p = e.path();
        let Ok(meta) = std::fs::metadata(&p) else {
            continue;
        };
        use std::os::unix::fs::FileTypeExt;
        let ft = meta.file_type();
        if !(ft.is_file() || ft.is_block_device())
            || (ft.is_file() && meta.len() < vdev::label::MIN_DEVICE_BYTES)
        {
            continue;
        }
        if let Ok(d) = FileDevice::open(&p) {
            let abs = std::fs::canonicalize(&p).unwrap_or(p);
            out.push(DeviceArg {
                path: abs.display().to_string(),
                device: Arc::new(d),
            });
        }
    }
    Ok(out)
}

fn import(dir: Option<PathBuf>, name: Option<String>, json: bool) -> Result<()> {
    let dir = dir.unwrap_or_else(|| PathBuf::from("."));
    let st = if let Some(api) = Api::running()? {
        let abs = std::env::current_dir()?.join(&dir);
        let abs = std::fs::canonicalize(&abs).unwrap_or(abs);
        api.post(
            "/pools/import",
            &server::pools_admin::ImportPool {
                dir: Some(abs.display().to_string()),
                name,
            },
        )?
    } else {
        let lock_name = name.clone().unwrap_or_else(|| "import".into());
        let _lock = lock_pool(&lock_name)?;
        import_registered(&dir, name.as_deref(), cli_options())?.status()
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&st)?);
    } else {
        println!(
            "imported pool '{}' at txg {} ({})",
            st.name, st.txg, st.health
        );
    }
    Ok(())
}

pub(crate) fn progress_bar(hidden: bool, what: &str) -> indicatif::ProgressBar {
    if hidden {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(0);
    b.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{what} {{bar:40}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} eta {{eta}}"
        ))
        .unwrap(),
    );
    b
}

fn replace(name: &str, old: &str, new: &Path, size: Option<String>, json: bool) -> Result<()> {
    let size = size.map(|s| parse_size(&s)).transpose()?;
    if let Some(api) = Api::running()? {
        let bar = spinner(json, "resilver (in the daemon)");
        let summary: pool::pool::ResilverSummary = api.post(
            &format!("/pools/{name}/replace"),
            &server::pools_admin::ReplaceDevice {
                old: old.to_string(),
                new: std::env::current_dir()?.join(new).display().to_string(),
                size,
            },
        )?;
        bar.finish_and_clear();
        return report_resilver(&summary, json);
    }
    resilver_onto_new(name, new, size, json, |pool, arg, progress| {
        pool.replace(old, arg, progress)
    })
}

/// Without a daemon: `resilver` onto the device `new` (made with `size` bytes if it is
/// missing) in pool `name`, with a progress bar (`replace`, `attach`); a device file
/// made here is removed again if the pool did not take it.
pub(crate) fn resilver_onto_new(
    name: &str,
    new: &Path,
    size: Option<u64>,
    json: bool,
    resilver: impl FnOnce(
        &Pool,
        DeviceArg,
        &dyn Fn(pool::pool::ScrubProgress),
    ) -> std::result::Result<pool::pool::ResilverSummary, pool::PoolError>,
) -> Result<()> {
    let _lock = lock_pool(name)?;
    let pool = open_registered(name)?;
    let (arg, created) = new_device(new, size)?;
    let bar = progress_bar(json, "resilver");
    let result = resilver(&pool, arg, &|p| {
        bar.set_length(p.bytes_total);
        bar.set_position(p.bytes_done);
    });
    bar.finish_and_clear();
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            if created {
                let _ = std::fs::remove_file(new);
            }
            return Err(e.into());
        }
    };
    record_devices(&pool)?;
    report_resilver(&summary, json)
}

fn clear(name: &str, device: &str, json: bool) -> Result<()> {
    resilver_device(name, device, "clear", json, |pool, progress| {
        pool.clear(device, progress)
    })
}

/// A resilver of `device` in place (`clear`, `online`): through the daemon's `route`
/// when one runs (a spinner), else `direct` on the pool (a progress bar).
pub(crate) fn resilver_device(
    name: &str,
    device: &str,
    route: &str,
    json: bool,
    direct: impl FnOnce(
        &Pool,
        &dyn Fn(pool::pool::ScrubProgress),
    ) -> std::result::Result<pool::pool::ResilverSummary, pool::PoolError>,
) -> Result<()> {
    if let Some(api) = Api::running()? {
        let bar = spinner(json, "resilver (in the daemon)");
        let summary: pool::pool::ResilverSummary = api.post(
            &format!("/pools/{name}/{route}"),
            &server::pools_admin::DeviceName {
                device: device.to_string(),
            },
        )?;
        bar.finish_and_clear();
        return report_resilver(&summary, json);
    }
    let _lock = lock_pool(name)?;
    let pool = open_registered(name)?;
    let bar = progress_bar(json, "resilver");
    let result = direct(&pool, &|p| {
        bar.set_length(p.bytes_total);
        bar.set_position(p.bytes_done);
    });
    bar.finish_and_clear();
    let summary = result?;
    report_resilver(&summary, json)
}

pub(crate) fn report_resilver(summary: &pool::pool::ResilverSummary, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(summary)?);
    } else {
        println!(
            "resilvered {} in {:.1}s with {} errors ({} blocks)",
            human(summary.bytes_written),
            summary.seconds,
            summary.errors,
            summary.blocks
        );
    }
    if summary.errors > 0 {
        bail!("{} blocks could not be rebuilt", summary.errors);
    }
    Ok(())
}

fn destroy(name: &str) -> Result<()> {
    if let Some(api) = Api::running()? {
        api.delete(&format!("/pools/{name}?confirm={name}"))?;
    } else {
        let _lock = lock_pool(name)?;
        let pool = open_registered(name)?;
        pool.destroy()?;
        forget(name)?;
    }
    println!("destroyed pool '{name}'");
    Ok(())
}

fn spare(action: SpareAction) -> Result<()> {
    match action {
        SpareAction::Add { name, device, size } => {
            let size = size.map(|s| parse_size(&s)).transpose()?;
            let path = std::env::current_dir()?.join(&device);
            if let Some(api) = Api::running()? {
                api.post::<PoolStatus>(
                    &format!("/pools/{name}/spares"),
                    &server::pools_admin::NewSpare {
                        device: path.display().to_string(),
                        size,
                    },
                )?;
            } else {
                let _lock = lock_pool(&name)?;
                let pool = open_registered(&name)?;
                let (arg, created) = new_device(&path, size)?;
                if let Err(e) = pool.add_spare(arg) {
                    if created {
                        let _ = std::fs::remove_file(&path);
                    }
                    return Err(e.into());
                }
                record_devices(&pool)?;
            }
            println!("added spare {} to pool '{name}'", path.display());
        }
        SpareAction::Remove { name, device } => {
            if let Some(api) = Api::running()? {
                api.post::<PoolStatus>(
                    &format!("/pools/{name}/spares/remove"),
                    &server::pools_admin::DeviceName {
                        device: device.clone(),
                    },
                )?;
            } else {
                let _lock = lock_pool(&name)?;
                let pool = open_registered(&name)?;
                pool.remove_spare(&device)?;
                record_devices(&pool)?;
            }
            println!("removed spare {device} from pool '{name}'");
        }
    }
    Ok(())
}

/// Opens `path` as a device (simulation and fault injection as the daemon's options
/// say), creating a file of `size` bytes if none is there; true when it was created.
pub(crate) fn new_device(path: &Path, size: Option<u64>) -> Result<(DeviceArg, bool)> {
    let created = !path.exists();
    if created {
        let Some(size) = size else {
            bail!(
                "{} does not exist (give a size to create it)",
                path.display()
            );
        };
        FileDevice::create(
            path,
            size / vdev::SECTOR_SIZE as u64 * vdev::SECTOR_SIZE as u64,
        )
        .with_context(|| format!("creating {}", path.display()))?;
    }
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    match open_device(path) {
        Ok(device) => Ok((
            DeviceArg {
                path: abs.display().to_string(),
                device,
            },
            created,
        )),
        Err(e) => {
            if created {
                let _ = std::fs::remove_file(path);
            }
            Err(e)
        }
    }
}

/// A spinner for work the daemon does and answers when done.
pub(crate) fn spinner(hidden: bool, what: &str) -> indicatif::ProgressBar {
    if hidden {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new_spinner().with_message(what.to_string());
    b.enable_steady_tick(std::time::Duration::from_millis(200));
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use vdev::Layout;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn layouts_parse_like_zpool() {
        let l = parse_layout(&words("raidz2 a b c d e f log x cache y"), Path::new("/d")).unwrap();
        assert_eq!(l.tops.len(), 1);
        assert_eq!(l.tops[0].0, Layout::RaidZ { nparity: 2 });
        assert_eq!(l.tops[0].1.len(), 6);
        assert_eq!(l.log, vec![PathBuf::from("/d/x")]);
        assert_eq!(l.cache, vec![PathBuf::from("/d/y")]);
        let l = parse_layout(&words("mirror a b mirror c d"), Path::new("/d")).unwrap();
        assert_eq!(l.tops.len(), 2);
        let l = parse_layout(&words("a /abs/b"), Path::new("/d")).unwrap();
        assert_eq!(l.tops[1].1[0], PathBuf::from("/abs/b"));
    }

    #[test]
    fn bad_layouts_are_refused() {
        assert!(parse_layout(&words("mirror a"), Path::new(".")).is_err());
        assert!(parse_layout(&words("raidz2 a b c"), Path::new(".")).is_err());
        assert!(parse_layout(&words("log x"), Path::new(".")).is_err());
        assert!(parse_layout(&words("log mirror a b"), Path::new(".")).is_err());
    }
}
