//! Analytics of what lies outside the NFS path, through the admin API: a cache
//! device's I/O appears under its own name and role with exactly the figures the
//! L2ARC counted; the host's loopback interface shows the bytes this test sent over
//! it; the host's per-CPU figures add up to its CPUs' time, as /proc/stat counts it.
//!
//! The tests run one at a time (`SERIAL`): the interface test counts every byte on
//! loopback, and the other tests' NFS traffic would be in it.

mod common;

use common::http::{client_from, Api};
use pool::pool::{DeviceArg, TopArg};
use pool::{Pool, PoolOptions};
use server::config::{ServeConfig, ShareConfig};
use server::Daemon;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use vdev::{FileDevice, Layout};

static SERIAL: Mutex<()> = Mutex::new(());

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn wait_until(second: u64) {
    while unix_now() < second {
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Served {
    _dir: tempfile::TempDir,
    pool: Arc<Pool>,
    daemon: Option<Daemon>,
    cache_path: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(d) = self.daemon.take() {
            let _ = d.stop();
        }
    }
}

/// A RAID-Z pool of three file devices and one cache device, with a 4 MiB ARC so
/// reads spill to the cache device, served with `tp/share` shared to loopback.
fn serve_with_cache_device() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let dev = |name: &str| {
        let p = dir.path().join(name);
        DeviceArg {
            path: p.display().to_string(),
            device: Arc::new(FileDevice::create(&p, 256 << 20).unwrap()),
        }
    };
    let cache = dev("cache.img");
    let cache_path = cache.path.clone();
    let pool = Pool::create(
        "tp",
        vec![TopArg {
            layout: Layout::RaidZ { nparity: 1 },
            devices: vec![dev("d0.img"), dev("d1.img"), dev("d2.img")],
        }],
        vec![],
        vec![cache],
        PoolOptions {
            arc_max_bytes: Some(4 << 20),
            prefetch: false,
            ..PoolOptions::default()
        },
    )
    .unwrap();
    let ds = fs::Datasets::new(pool.clone()).unwrap();
    ds.create("tp/share", &[]).unwrap();
    drop(ds);
    let mut config = ServeConfig::default();
    config.iscsi.listen = server::config::IscsiListen::Off;
    config.nfs.listen = "127.0.0.1:0".parse().unwrap();
    config.api.listen = Some("127.0.0.1:0".parse().unwrap());
    config.shares = vec![ShareConfig {
        dataset: "tp/share".into(),
        rules: "127.0.0.0/8(rw,no_root_squash,insecure)".into(),
    }];
    let daemon = Daemon::start(
        &config,
        vec![pool.clone()],
        &dir.path().join("state"),
        None,
        None,
    )
    .unwrap();
    Served {
        _dir: dir,
        pool,
        daemon: Some(daemon),
        cache_path,
    }
}

#[test]
fn cache_device_io_appears_under_its_name_and_role_with_the_l2arcs_figures() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let served = serve_with_cache_device();
    let daemon = served.daemon.as_ref().unwrap();
    let api = Api::new(daemon.api_addr().unwrap());
    let by_op = "io.ops[role=cache][op]";
    let bytes_by_op = "io.bytes[role=cache][op]";
    let by_device = "io.bytes[role=cache][device]";
    let since = [by_op, bytes_by_op, by_device]
        .iter()
        .map(|n| api.enable(n))
        .max()
        .unwrap();
    wait_until(since);
    let before = served.pool.status().l2arc.expect("the pool has an L2ARC");

    let mut c = client_from("127.0.0.1", daemon.nfs_addrs()[0]);
    let (st, root) = c.mount("/tp/share");
    assert_eq!(st, 0);
    let (st, fh) = c.create(&root, "big");
    assert_eq!(st, 0);
    const CHUNK: u32 = 65536;
    const FILE: u64 = 24 << 20;
    let block: Vec<u8> = (0..CHUNK).map(|i| (i % 251) as u8).collect();
    for off in (0..FILE).step_by(CHUNK as usize) {
        assert_eq!(c.write(&fh, off, &block, 2).0, 0);
    }
    // Reading 24 MiB through a 4 MiB ARC evicts blocks toward the cache device;
    // read until it has served some, or a minute has passed.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for off in (0..FILE).step_by(CHUNK as usize) {
            let (st, data, _) = c.read(&fh, off, CHUNK);
            assert_eq!((st, data.len()), (0, CHUNK as usize));
            assert_eq!(data, block);
        }
        let l2 = served.pool.status().l2arc.unwrap();
        if (l2.hits > before.hits && l2.written_bytes > before.written_bytes)
            || Instant::now() > deadline
        {
            break;
        }
    }
    // Quiet: the cache's writer may still be writing what the last reads evicted.
    let mut l2 = served.pool.status().l2arc.unwrap();
    loop {
        std::thread::sleep(Duration::from_millis(1500));
        let now = served.pool.status().l2arc.unwrap();
        if (now.written_bytes, now.hits, now.bad_reads) == (l2.written_bytes, l2.hits, l2.bad_reads)
        {
            break;
        }
        l2 = now;
    }
    assert!(
        l2.hits > before.hits,
        "the cache device served nothing: {l2:?}"
    );
    let reads = l2.hits + l2.bad_reads - before.hits - before.bad_reads;
    let written = l2.written_bytes - before.written_bytes;
    // Settle on the read key: the cache's writes may be more ops than whole MiB, so a
    // total could be reached before the last second of reads is sealed.
    let (total, ops, _) = api.settled_key(by_op, since, "read", reads);
    assert_eq!(
        ops.get("read").copied().unwrap_or(0),
        reads,
        "cache device reads by analytics vs hits the L2ARC counted ({l2:?}); all: {ops:?}"
    );
    assert_eq!(ops.values().sum::<u64>(), total);
    let (_, bytes, _) = api.settled_key(bytes_by_op, since, "write", written);
    assert_eq!(
        bytes.get("write").copied().unwrap_or(0),
        written,
        "bytes written to the cache device by analytics vs the L2ARC's count"
    );
    let (_, devices, _) = api.sum(by_device, since);
    assert_eq!(
        devices.keys().collect::<Vec<_>>(),
        [&served.cache_path],
        "cache I/O is not all under the cache device's path"
    );
    // The built-in role breakdown shows the cache beside the data devices.
    let (_, roles, _) = api.sum("io.bytes[role]", since);
    assert!(
        roles.get("cache").copied().unwrap_or(0) >= written,
        "{roles:?}"
    );
    assert!(roles.get("data").copied().unwrap_or(0) > 0, "{roles:?}");
    let (_, text) = api.text("/metrics");
    assert!(
        text.contains(&format!(
            "shoal_device_bytes_total{{pool=\"tp\",device=\"{}\",role=\"cache\",op=\"write\"}}",
            served.cache_path
        )),
        "{text}"
    );
}

/// Bytes received on `lo` so far, by the kernel's count.
fn lo_rx_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/net/dev").unwrap();
    analytics::host::parse_net_dev(&text)
        .into_iter()
        .find(|(name, _)| *name == "lo")
        .expect("a loopback interface")
        .1[0]
}

#[test]
fn loopback_interface_bytes_match_what_the_test_sent() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let served = serve_with_cache_device();
    let api = Api::new(served.daemon.as_ref().unwrap().api_addr().unwrap());
    let name = "net.interface.bytes[interface=lo][direction]";
    // Before anything the dataset can count: every byte it counts is in the kernel's
    // count from here to the end.
    let outer_before = lo_rx_bytes();
    let since = api.enable(name);
    // A reading covers the second before it: start sending once the readings of
    // the dataset's first seconds are taken.
    wait_until(since + 2);
    let kernel_before = lo_rx_bytes();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let sink = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        loop {
            match s.read(&mut buf).unwrap() {
                0 => return got,
                n => got += n as u64,
            }
        }
    });
    const SENT: u64 = 256 << 20;
    let mut out = std::net::TcpStream::connect(addr).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    for _ in 0..SENT >> 20 {
        out.write_all(&chunk).unwrap();
    }
    drop(out);
    assert_eq!(sink.join().unwrap(), SENT);
    let kernel = lo_rx_bytes() - kernel_before;
    let end = unix_now() + 2;
    // Sealed a couple of seconds after they end.
    wait_until(end + 3);
    let (total, dirs, _) = api.sum(name, since);
    let got_in = dirs.get("in").copied().unwrap_or(0);
    let got_out = dirs.get("out").copied().unwrap_or(0);
    assert_eq!(got_in + got_out, total);
    // At least what was sent (headers and acknowledgements add under 1%), and no
    // more than the kernel counted on loopback over a window holding every reading
    // the dataset summed (other processes' loopback traffic is in both). Loopback
    // receives what it sends.
    let outer = lo_rx_bytes() - outer_before;
    for (dir, got) in [("in", got_in), ("out", got_out)] {
        assert!(
            (SENT..=outer).contains(&got),
            "loopback {dir}: {got} bytes by analytics for {SENT} sent; the kernel counted {kernel} during the send and {outer} over the whole window"
        );
    }
}

/// (user + kernel, all modes) clock ticks of the whole host from /proc/stat's
/// aggregate line.
fn host_ticks() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap();
    let line = text.lines().find(|l| l.starts_with("cpu ")).unwrap();
    let c: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    let busy = c[0] + c[1] + c[2] + c[5] + c[6];
    (busy, c[..8].iter().sum())
}

#[test]
fn per_cpu_figures_add_up_to_the_hosts_cpu_time() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let served = serve_with_cache_device();
    let api = Api::new(served.daemon.as_ref().unwrap().api_addr().unwrap());
    let by_cpu = "cpu.utilization[cpu]";
    let busy_by_mode = "cpu.utilization[mode]";
    let since = api.enable(by_cpu).max(api.enable(busy_by_mode));
    wait_until(since + 1);
    // A steady load: one thread spinning for the whole window.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut x = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            x
        })
    };
    const SECONDS: u64 = 8;
    let first = unix_now() + 1;
    wait_until(first);
    let (busy0, all0) = host_ticks();
    wait_until(first + SECONDS);
    let (busy1, all1) = host_ticks();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    spinner.join().unwrap();
    wait_until(first + SECONDS + 4);
    // A reading stamped second s covers s-1..s: the window's readings are stamped
    // first+1 ..= first+SECONDS.
    let q = |name: &str| {
        let (code, v) = api.get(&format!(
            "/api/v1/analytics/data?name={}&start={}&end={}&resolution=second",
            common::http::urlencode(name),
            first + 1,
            first + SECONDS
        ));
        assert_eq!(code, 200, "{v}");
        let mut total = 0;
        let mut keys = std::collections::BTreeMap::<String, u64>::new();
        for p in v["points"].as_array().unwrap() {
            total += p["total"].as_u64().unwrap();
            for k in p["breakdown"].as_array().into_iter().flatten() {
                *keys.entry(k["key"].as_str().unwrap().into()).or_default() +=
                    k["count"].as_u64().unwrap();
            }
        }
        (total, keys)
    };
    let (cpu_total, cpus) = q(by_cpu);
    let (mode_total, modes) = q(busy_by_mode);
    let ncpu = std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count() as u64;
    assert_eq!(cpus.len() as u64, ncpu, "{cpus:?}");
    assert_eq!(cpus.values().sum::<u64>(), cpu_total);
    assert_eq!(mode_total, cpu_total, "by CPU and by mode disagree");
    // Every CPU's modes add up to its time: a second per second (ticks are 10 ms,
    // and the collector reads once a second, give or take its scheduling).
    let window_us = SECONDS * 1_000_000;
    for (cpu, us) in &cpus {
        assert!(
            us.abs_diff(window_us) <= window_us / 10,
            "{cpu}: {us} us of time over {SECONDS} s"
        );
    }
    // The busy share matches the host's own aggregate line over the same window.
    let hz = (all1 - all0) as f64 / (SECONDS * ncpu) as f64;
    let host_busy_us = (busy1 - busy0) as f64 * 1e6 / hz.max(1.0);
    let busy_us = (modes.get("user").copied().unwrap_or(0)
        + modes.get("kernel").copied().unwrap_or(0)) as f64;
    assert!(
        busy_us >= host_busy_us * 0.85 - 0.05e6 * SECONDS as f64
            && busy_us <= host_busy_us * 1.15 + 0.05e6 * SECONDS as f64,
        "busy CPU time {busy_us} us by analytics, {host_busy_us} us by /proc/stat; modes {modes:?}"
    );
    // The spinner alone kept a CPU busy.
    assert!(
        busy_us >= 0.8e6 * SECONDS as f64,
        "{busy_us} us busy with a spinning thread"
    );
}
