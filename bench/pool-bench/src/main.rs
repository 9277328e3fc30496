//! pool-bench: drives the pool engine directly (no NFS) through one workload on real
//! device files and prints one JSON object. `bench/pool.sh` runs it next to fio on the
//! raw disk and computes the ratios. This is a benchmark, never a test.

#[path = "../../../crates/shoal/src/allocator.rs"]
mod allocator;
use clap::Parser;
use pool::checksum::ChecksumKind;
use pool::compress::Compression;
use pool::pool::{DeviceArg, TopArg};
use pool::{Pool, PoolOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vdev::{DiskStats, FileDevice, Layout, ThrottledDevice};

#[derive(Parser)]
struct Args {
    /// Directory for the device files (on the disk under test).
    #[arg(long)]
    dir: PathBuf,
    /// raidz1:N, raidz2:N, raidz3:N, mirror:N or disk.
    #[arg(long, default_value = "raidz2:6")]
    layout: String,
    /// Size of each device file in MiB.
    #[arg(long, default_value_t = 2048)]
    dev_mib: u64,
    /// seqwrite, seqread, randread, arcread or syncwrite (8K writes each made durable
    /// by an intent-log commit before the next, as NFS FILE_SYNC writes are).
    #[arg(long)]
    workload: String,
    /// syncwrite: a log device file of this many MiB beside the data devices.
    #[arg(long)]
    log_mib: Option<u64>,
    /// syncwrite: the file's record size in bytes.
    #[arg(long, default_value_t = 8192)]
    record: u32,
    /// Start a txg sync at this much dirty data (MiB; default the pool's); writers
    /// wait at four times it.
    #[arg(long)]
    dirty_sync_mib: Option<u64>,
    /// Data written or read, MiB.
    #[arg(long, default_value_t = 4096)]
    data_mib: u64,
    /// ARC size in MiB.
    #[arg(long, default_value_t = 256)]
    arc_mib: u64,
    /// Threads for randread.
    #[arg(long, default_value_t = 32)]
    threads: usize,
    /// Seconds for randread.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Top-level vdevs of the layout: `--layout raidz1:5 --groups 3` is 3x(4+1).
    #[arg(long, default_value_t = 1)]
    groups: usize,
    /// Every device behind the disk model of `shoal serve --simulate-disk`
    /// (72MB/s,90iops); the report then adds what the model charged: seeks by cause.
    #[arg(long)]
    simulate_disk: Option<String>,
    /// seqwrite/seqread: files written or read at once, one thread each (seqwrite
    /// decides; seqread reads what it wrote).
    #[arg(long, default_value_t = 1)]
    streams: usize,
}

/// The simulated disks of the pool opened last, for the report.
static DISKS: std::sync::Mutex<Vec<(String, Arc<ThrottledDevice>)>> =
    std::sync::Mutex::new(Vec::new());

/// What the disk model charged, summed over the devices, and each device's seeks.
fn disk_model_report() -> Option<serde_json::Value> {
    let disks = DISKS.lock().unwrap();
    if disks.is_empty() {
        return None;
    }
    let mut sum = DiskStats::default();
    let mut per_device = serde_json::Map::new();
    for (name, d) in disks.iter() {
        let st = d.stats();
        sum += st;
        per_device.insert(
            name.clone(),
            serde_json::json!({"ios": st.ios, "seeks": st.seeks,
            "busy_s": st.busy.as_secs_f64()}),
        );
    }
    let n = disks.len() as f64;
    Some(serde_json::json!({
        "disks": disks.len(), "ios": sum.ios, "bytes": sum.bytes,
        "mean_io_kib": sum.bytes as f64 / 1024.0 / sum.ios.max(1) as f64,
        "continued": sum.continued, "gap_bytes": sum.gap_bytes, "seeks": sum.seeks,
        "seek_reads": sum.seek_reads, "seek_writes": sum.seek_writes,
        "seeks_to_labels": sum.seeks_to_labels, "seeks_small": sum.seeks_small,
        "seeks_idle": sum.seeks_idle, "seeks_short_1mib": sum.seeks_short,
        "busy_s_per_disk": sum.busy.as_secs_f64() / n,
        "seek_s_per_disk": sum.seek_time.as_secs_f64() / n,
        "per_device": per_device,
    }))
}

fn layout_of(s: &str) -> (Layout, usize) {
    let (kind, n) = s.split_once(':').unwrap_or((s, "1"));
    let n: usize = n.parse().expect("device count");
    let layout = match kind {
        "disk" => Layout::Disk,
        "mirror" => Layout::Mirror,
        "raidz1" => Layout::RaidZ { nparity: 1 },
        "raidz2" => Layout::RaidZ { nparity: 2 },
        "raidz3" => Layout::RaidZ { nparity: 3 },
        _ => panic!("unknown layout {kind}"),
    };
    (layout, n)
}

fn devices(dir: &Path, n: usize, dev_mib: u64, create: bool) -> Vec<DeviceArg> {
    let disk = args().simulate_disk.as_deref().map(|spec| {
        vdev::SpeedLimit::parse(spec).unwrap_or_else(|e| panic!("--simulate-disk: {e}"))
    });
    let mut disks = DISKS.lock().unwrap();
    disks.clear();
    (0..n)
        .map(|i| {
            let p = dir.join(format!("dev{i}.img"));
            let dev = if create {
                let _ = std::fs::remove_file(&p);
                FileDevice::create(&p, dev_mib << 20).expect("create device file")
            } else {
                FileDevice::open(&p).expect("open device file")
            };
            let device: Arc<dyn vdev::Device> = match disk {
                Some(speed) => {
                    let t = Arc::new(ThrottledDevice::new(Arc::new(dev), speed));
                    disks.push((format!("dev{i}"), t.clone()));
                    t
                }
                None => Arc::new(dev),
            };
            DeviceArg {
                path: p.display().to_string(),
                device,
            }
        })
        .collect()
}

fn args() -> &'static Args {
    static ARGS: std::sync::OnceLock<Args> = std::sync::OnceLock::new();
    ARGS.get_or_init(Args::parse)
}

/// The layout's top-level vdevs: `groups` of `n` devices each.
fn tops(layout: Layout, n: usize, devices: Vec<DeviceArg>) -> Vec<TopArg> {
    let mut devices = devices.into_iter();
    (0..args().groups)
        .map(|_| TopArg {
            layout,
            devices: devices.by_ref().take(n).collect(),
        })
        .collect()
}

/// The pool's options with this ARC bound and, when given, this sync threshold (the
/// writers' limit kept four times it, as the defaults are).
fn opts(arc_mib: u64, dirty_sync_mib: Option<u64>) -> PoolOptions {
    let d = PoolOptions::default();
    let sync = dirty_sync_mib.map_or(d.dirty_sync_bytes, |m| m << 20);
    PoolOptions {
        arc_max_bytes: Some(arc_mib << 20),
        dirty_sync_bytes: sync,
        dirty_max_bytes: d.dirty_max_bytes.max(4 * sync),
        ..d
    }
}

fn random_buffer(len: usize) -> Vec<u8> {
    let mut x = 0x2545F4914F6CDD1Du64;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// A fresh pool on newly created device files.
fn create_pool(name: &str, layout: Layout, a: &Args, n: usize) -> Arc<Pool> {
    let devices = devices(&a.dir, n * a.groups, a.dev_mib, true);
    Pool::create(
        name,
        tops(layout, n, devices),
        vec![],
        vec![],
        opts(a.arc_mib, a.dirty_sync_mib),
    )
    .unwrap()
}

/// 64 MiB of random bytes, made once (outside any timed section).
fn data_source() -> &'static [u8] {
    static BUF: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BUF.get_or_init(|| random_buffer(64 << 20))
}

/// Writes `bytes` of incompressible data to an object in 1 MiB writes.
fn fill(pool: &Pool, os: u64, obj: u64, bytes: u64) {
    let buf = data_source();
    let chunk = 1usize << 20;
    let mut off = 0u64;
    while off < bytes {
        let at = (off as usize / chunk * 4099) % (buf.len() - chunk);
        pool.write(os, obj, off, &buf[at..at + chunk]).unwrap();
        off += chunk as u64;
    }
}

fn main() {
    allocator::tune();
    let a = args();
    std::fs::create_dir_all(&a.dir).unwrap();
    let (layout, n) = layout_of(&a.layout);
    let data_bytes = a.data_mib << 20;
    let chunk = 1usize << 20;
    let result = match a.workload.as_str() {
        "seqwrite" => {
            let pool = create_pool("bench", layout, a, n);
            let os = pool.create_objset("bench/fs", "{}").unwrap();
            let objs: Vec<u64> = (0..a.streams)
                .map(|_| {
                    pool.create_object(os, 19, 128 << 10, Compression::Off, ChecksumKind::Fletcher4)
                        .unwrap()
                })
                .collect();
            std::fs::write(
                a.dir.join("objects.json"),
                serde_json::to_vec(&objs).unwrap(),
            )
            .unwrap();
            data_source();
            let cpu0 = analytics::cpu::process_seconds();
            let t = Instant::now();
            let per_stream = data_bytes / a.streams as u64;
            std::thread::scope(|s| {
                for &obj in &objs {
                    let pool = &pool;
                    s.spawn(move || fill(pool, os, obj, per_stream));
                }
            });
            pool.sync().unwrap();
            let secs = t.elapsed().as_secs_f64();
            let cpu = analytics::cpu::process_seconds() - cpu0;
            pool.export().unwrap();
            serde_json::json!({"workload": "seqwrite", "layout": a.layout, "bytes": data_bytes, "seconds": secs,
                "mb_per_s": data_bytes as f64 / 1e6 / secs, "cpu_seconds": cpu})
        }
        "seqread" | "arcread" => {
            let pool = Pool::import(
                devices(&a.dir, n * a.groups, a.dev_mib, false),
                Some("bench"),
                opts(a.arc_mib, a.dirty_sync_mib),
            )
            .unwrap();
            let os = pool.objset_id("bench/fs").unwrap();
            let objs: Vec<u64> = match std::fs::read(a.dir.join("objects.json")) {
                Ok(b) => serde_json::from_slice(&b).unwrap(),
                Err(_) => vec![1],
            };
            let obj = objs[0];
            let passes = if a.workload == "arcread" { 4 } else { 1 };
            if a.workload == "arcread" {
                // Warm the ARC with the first data_mib.
                let mut off = 0;
                while off < data_bytes {
                    pool.read(os, obj, off, chunk).unwrap();
                    off += chunk as u64;
                }
            }
            let cpu0 = analytics::cpu::process_seconds();
            let t = Instant::now();
            let total = AtomicU64::new(0);
            let per_stream = data_bytes / objs.len() as u64;
            std::thread::scope(|s| {
                for &obj in &objs {
                    let (pool, total) = (&pool, &total);
                    s.spawn(move || {
                        let mut buf = vec![0u8; chunk];
                        for _ in 0..passes {
                            let mut off = 0;
                            while off < per_stream {
                                pool.read_into(os, obj, off, &mut buf).unwrap();
                                off += chunk as u64;
                                total.fetch_add(chunk as u64, Ordering::Relaxed);
                            }
                        }
                    });
                }
            });
            let total = total.into_inner();
            let secs = t.elapsed().as_secs_f64();
            let cpu = analytics::cpu::process_seconds() - cpu0;
            let arc = pool.status().arc;
            serde_json::json!({"workload": a.workload, "layout": a.layout, "bytes": total, "seconds": secs,
                "mb_per_s": total as f64 / 1e6 / secs, "cpu_seconds": cpu,
                "cpu_seconds_per_gb": cpu / (total as f64 / 1e9),
                "arc_max_mib": a.arc_mib, "arc_demand_hits": arc.demand_hits, "arc_demand_misses": arc.demand_misses,
                "arc_prefetch_hits": arc.prefetch_hits})
        }
        "randread" => {
            // A file of 8K records, then random 8K reads from many threads.
            let pool = create_pool("bench8k", layout, a, n);
            let os = pool.create_objset("bench8k/fs", "{}").unwrap();
            let obj = pool
                .create_object(os, 19, 8192, Compression::Off, ChecksumKind::Fletcher4)
                .unwrap();
            fill(&pool, os, obj, data_bytes);
            pool.export().unwrap();
            drop(pool);
            let pool = Arc::new(
                Pool::import(
                    devices(&a.dir, n * a.groups, a.dev_mib, false),
                    Some("bench8k"),
                    PoolOptions {
                        prefetch: false,
                        ..opts(a.arc_mib, a.dirty_sync_mib)
                    },
                )
                .unwrap(),
            );
            let ops = Arc::new(AtomicU64::new(0));
            let cpu0 = analytics::cpu::process_seconds();
            let deadline = Instant::now() + Duration::from_secs(a.seconds);
            let blocks = data_bytes / 8192;
            std::thread::scope(|s| {
                for t in 0..a.threads {
                    let pool = pool.clone();
                    let ops = ops.clone();
                    s.spawn(move || {
                        let mut x = 0x9E3779B97F4A7C15u64 ^ (t as u64 + 1);
                        let mut buf = vec![0u8; 8192];
                        while Instant::now() < deadline {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let b = x % blocks;
                            pool.read_into(os, obj, b * 8192, &mut buf).unwrap();
                            ops.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            });
            let n_ops = ops.load(Ordering::Relaxed);
            let cpu = analytics::cpu::process_seconds() - cpu0;
            let arc = pool.status().arc;
            serde_json::json!({"workload": "randread", "layout": a.layout, "ops": n_ops, "seconds": a.seconds,
                "iops": n_ops as f64 / a.seconds as f64, "threads": a.threads,
                "cpu_us_per_op": cpu * 1e6 / n_ops.max(1) as f64,
                "arc_demand_hits": arc.demand_hits, "arc_demand_misses": arc.demand_misses})
        }
        "syncwrite" => {
            let log = a.log_mib.map(|mib| {
                let p = a.dir.join("log.img");
                let _ = std::fs::remove_file(&p);
                DeviceArg {
                    path: p.display().to_string(),
                    device: Arc::new(FileDevice::create(&p, mib << 20).expect("log device")),
                }
            });
            let pool = Arc::new(
                Pool::create(
                    "benchsync",
                    tops(layout, n, devices(&a.dir, n * a.groups, a.dev_mib, true)),
                    log.into_iter().collect(),
                    vec![],
                    opts(a.arc_mib, a.dirty_sync_mib),
                )
                .unwrap(),
            );
            let os = pool.create_objset("benchsync/fs", "{}").unwrap();
            let objs: Vec<u64> = (0..a.threads)
                .map(|_| {
                    let o = pool
                        .create_object(os, 19, a.record, Compression::Off, ChecksumKind::Fletcher4)
                        .unwrap();
                    fill(&pool, os, o, data_bytes / a.threads as u64);
                    o
                })
                .collect();
            pool.sync().unwrap();
            let before = pool.status();
            let ops = Arc::new(AtomicU64::new(0));
            let lat = Arc::new(std::sync::Mutex::new(Vec::new()));
            let cpu0 = analytics::cpu::process_seconds();
            let t0 = Instant::now();
            let deadline = t0 + Duration::from_secs(a.seconds);
            let blocks = (data_bytes / a.threads as u64 / 8192).max(1);
            std::thread::scope(|s| {
                for (t, &obj) in objs.iter().enumerate() {
                    let (pool, ops, lat) = (pool.clone(), ops.clone(), lat.clone());
                    s.spawn(move || {
                        let mut x = 0x9E3779B97F4A7C15u64 ^ (t as u64 + 1);
                        let buf = &data_source()[..8192];
                        let mut mine = Vec::new();
                        while Instant::now() < deadline {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let at = Instant::now();
                            pool.write(os, obj, (x % blocks) * 8192, buf).unwrap();
                            pool.log_commit().unwrap();
                            mine.push(at.elapsed().as_nanos() as u64);
                            ops.fetch_add(1, Ordering::Relaxed);
                        }
                        lat.lock().unwrap().extend(mine);
                    });
                }
            });
            let secs = t0.elapsed().as_secs_f64();
            let n_ops = ops.load(Ordering::Relaxed).max(1);
            let cpu = analytics::cpu::process_seconds() - cpu0;
            let mut lat = std::mem::take(&mut *lat.lock().unwrap());
            lat.sort_unstable();
            let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize] as f64 / 1e3;
            let after = pool.status();
            let writes = |st: &pool::pool::PoolStatus, log: bool| -> u64 {
                let leaves: Vec<&pool::pool::LeafStatus> = if log {
                    st.log.iter().collect()
                } else {
                    st.vdevs.iter().flat_map(|v| v.children.iter()).collect()
                };
                leaves.iter().map(|l| l.write_ops).sum()
            };
            let il = after.intent_log.clone();
            serde_json::json!({"workload": "syncwrite", "layout": a.layout, "log_device": a.log_mib.is_some(),
                "record": a.record, "threads": a.threads, "ops": n_ops, "seconds": secs,
                "iops": n_ops as f64 / secs, "latency_us_p50": pct(0.5), "latency_us_p99": pct(0.99),
                "cpu_us_per_op": cpu * 1e6 / n_ops as f64,
                "log_commits_per_op": (il.commits - before.intent_log.commits) as f64 / n_ops as f64,
                "log_blocks_per_op": (il.blocks_written - before.intent_log.blocks_written) as f64 / n_ops as f64,
                "data_device_writes_per_op": (writes(&after, false) - writes(&before, false)) as f64 / n_ops as f64,
                "log_device_writes_per_op": (writes(&after, true) - writes(&before, true)) as f64 / n_ops as f64,
                "txg_fallbacks": il.txg_fallbacks - before.intent_log.txg_fallbacks})
        }
        other => panic!("unknown workload {other}"),
    };
    let mut result = result;
    if let Some(disks) = disk_model_report() {
        result["disk_model"] = disks;
        result["groups"] = a.groups.into();
        result["streams"] = a.streams.into();
    }
    println!("{result}");
}
