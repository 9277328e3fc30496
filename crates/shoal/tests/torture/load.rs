//! Many pipelined connections at once: no errors, and memory bounded.

use super::*;

/// One pipelined client of the load test: its own directory and file, a region read
/// back against what preparation wrote, a region written at random, and metadata.
struct LoadClient {
    nfs: Nfs,
    dir: Fh,
    file: Fh,
    seed: u64,
}

const READ_REGION: u64 = 1 << 20;
const WRITE_REGION: u64 = 1 << 20;
const LOAD_IO: usize = 32 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum LoadOp {
    Read,
    Write,
    Getattr,
    Lookup,
    Create,
    Remove,
    Readdirplus,
    Commit,
}

const LOAD_CYCLE: [LoadOp; 8] = [
    LoadOp::Write,
    LoadOp::Read,
    LoadOp::Getattr,
    LoadOp::Create,
    LoadOp::Read,
    LoadOp::Lookup,
    LoadOp::Remove,
    LoadOp::Readdirplus,
];

/// Latencies in microseconds per operation, and the blocks written (to check after).
#[derive(Default)]
struct LoadTally {
    latency_us: BTreeMap<LoadOp, Vec<u32>>,
    written: std::collections::BTreeSet<u64>,
    ops: u64,
}

fn run_load_client(
    c: &LoadClient,
    depth: usize,
    deadline: Instant,
    rng: &mut Rng,
) -> anyhow::Result<LoadTally> {
    let mut tally = LoadTally::default();
    let mut window: VecDeque<(LoadOp, u64, Instant, bench::client::Call)> = VecDeque::new();
    let mut k: u64 = 0;
    let mut created: VecDeque<u64> = VecDeque::new();
    loop {
        while window.len() < depth && Instant::now() < deadline {
            let mut op = LOAD_CYCLE[(k % LOAD_CYCLE.len() as u64) as usize];
            if op == LoadOp::Remove && created.len() < 2 * depth {
                op = LoadOp::Commit;
            }
            let mut arg = 0;
            let call = match op {
                LoadOp::Read => {
                    arg = rng.below(READ_REGION / LOAD_IO as u64) * LOAD_IO as u64;
                    c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 6, |e| {
                        e.opaque(&c.file.0).u64(arg).u32(LOAD_IO as u32);
                    })?
                }
                LoadOp::Write => {
                    arg = READ_REGION + rng.below(WRITE_REGION / LOAD_IO as u64) * LOAD_IO as u64;
                    let data = pattern(c.seed, arg, LOAD_IO);
                    c.nfs.start_write(&c.file, arg, &data, Stable::Unstable)?
                }
                LoadOp::Getattr => c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 1, |e| {
                    e.opaque(&c.file.0);
                })?,
                LoadOp::Lookup => c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 3, |e| {
                    e.opaque(&c.dir.0).opaque(b"f");
                })?,
                LoadOp::Create => {
                    arg = k;
                    created.push_back(k);
                    c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 8, |e| {
                        e.opaque(&c.dir.0).opaque(format!("t{arg}").as_bytes());
                        e.u32(1); // GUARDED: a name made twice would be an error
                        nfs::proto::encode_sattr(e, &nfs::proto::Sattr::default());
                    })?
                }
                LoadOp::Remove => {
                    // Made at least two windows ago, so its CREATE has been answered.
                    arg = created.pop_front().unwrap();
                    c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 12, |e| {
                        e.opaque(&c.dir.0).opaque(format!("t{arg}").as_bytes());
                    })?
                }
                LoadOp::Readdirplus => c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 17, |e| {
                    e.opaque(&c.dir.0)
                        .u64(0)
                        .fixed(&[0; 8])
                        .u32(4096)
                        .u32(16384);
                })?,
                LoadOp::Commit => c.nfs.conn.start(NFS_PROGRAM, NFS_V3, 21, |e| {
                    e.opaque(&c.file.0).u64(0).u32(0);
                })?,
            };
            if op == LoadOp::Write {
                tally.written.insert(arg);
            }
            window.push_back((op, arg, Instant::now(), call));
            k += 1;
        }
        let Some((op, arg, sent, call)) = window.pop_front() else {
            return Ok(tally);
        };
        let reply = call.wait()?;
        let us = sent.elapsed().as_micros().min(u32::MAX as u128) as u32;
        tally.latency_us.entry(op).or_default().push(us);
        tally.ops += 1;
        if op == LoadOp::Read {
            let data = Nfs::finish_read(reply)?;
            anyhow::ensure!(data.bytes().len() == LOAD_IO, "short READ at {arg}");
            anyhow::ensure!(
                data.bytes() == pattern(c.seed, arg, LOAD_IO).as_slice(),
                "READ at {arg} returned other bytes"
            );
        } else {
            let st = reply.decoder().u32()?;
            anyhow::ensure!(st == 0, "{op:?} ({arg}) answered NFS status {st}");
        }
    }
}

fn percentiles(v: &mut [u32]) -> Value {
    v.sort_unstable();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    json!({
        "count": v.len(),
        "p50_us": at(0.5),
        "p90_us": at(0.9),
        "p99_us": at(0.99),
        "p999_us": at(0.999),
        "max_us": v[v.len() - 1],
    })
}

/// The documented memory bound over the ARC maximum (`docs/reliability.md`): dirty
/// data of the open and of the syncing transaction group, the NFS request budget, and
/// 256 MiB for the rest (code, threads, metadata, analytics, allocator slack).
fn rss_over_arc() -> u64 {
    2 * pool::PoolOptions::default().dirty_max_bytes
        + nfs::transport::MAX_BUFFERED_BYTES as u64
        + (256 << 20)
}

#[test]
fn load_of_256_connections_16_deep_without_errors_in_bounded_memory() {
    let connections = 256;
    let depth = 16;
    let seconds = std::env::var("SHOAL_TORTURE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if soak() { 600 } else { 60 });
    let arc: u64 = 256 << 20;
    let dir = tempfile::tempdir().unwrap();
    let (served, t, root) = serve_share(
        dir.path(),
        "1G",
        &["raidz1", "a", "b", "c"],
        "load",
        &["--arc-max", "256M"],
    );
    let base = seed();

    // Each client's directory and file, its read region written and committed.
    let clients: Vec<LoadClient> = {
        let made = Mutex::new(Vec::new());
        let next = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= connections as u64 {
                            break;
                        }
                        let d = nfs.mkdir_p(&root, &format!("c{i}")).unwrap();
                        let f = nfs.create(&d, "f", true).unwrap();
                        let seed = base ^ (i << 40);
                        let mut window = VecDeque::new();
                        for off in (0..READ_REGION).step_by(LOAD_IO) {
                            let data = pattern(seed, off, LOAD_IO);
                            window.push_back(
                                nfs.start_write(&f, off, &data, Stable::Unstable).unwrap(),
                            );
                            if window.len() >= 8 {
                                let r = window.pop_front().unwrap().wait().unwrap();
                                Nfs::finish_write(r, LOAD_IO, Stable::Unstable).unwrap();
                            }
                        }
                        for w in window {
                            Nfs::finish_write(w.wait().unwrap(), LOAD_IO, Stable::Unstable)
                                .unwrap();
                        }
                        nfs.commit(&f).unwrap();
                        made.lock().unwrap().push((i, d, f, seed));
                    }
                });
            }
        });
        let mut made = made.into_inner().unwrap();
        made.sort_by_key(|m| m.0);
        made.into_iter()
            .map(|(_, dir, file, seed)| LoadClient {
                nfs: Nfs::connect(&t, root_credential("torture")).unwrap(),
                dir,
                file,
                seed,
            })
            .collect()
    };

    let pid = served.pid();
    let done = AtomicBool::new(false);
    let rss_max = AtomicU64::new(0);
    let arc_size_max = AtomicU64::new(0);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let results: Vec<anyhow::Result<LoadTally>> = std::thread::scope(|s| {
        s.spawn(|| {
            let mut ticks = 0u64;
            while !done.load(Ordering::Relaxed) {
                rss_max.fetch_max(rss_bytes(pid), Ordering::Relaxed);
                if ticks.is_multiple_of(5) {
                    let arc = metric(&served, "shoal_arc_size_bytes");
                    arc_size_max.fetch_max(arc, Ordering::Relaxed);
                }
                ticks += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let handles: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                std::thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn_scoped(s, move || {
                        let mut rng = Rng::new(base ^ (i as u64 * 0x51ed_2701));
                        run_load_client(c, depth, deadline, &mut rng)
                    })
                    .unwrap()
            })
            .collect();
        let r = handles.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::Relaxed);
        r
    });
    let elapsed = start.elapsed().as_secs_f64();

    let mut errors = Vec::new();
    let mut all: BTreeMap<LoadOp, Vec<u32>> = BTreeMap::new();
    let mut ops = 0;
    let mut written = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(t) => {
                ops += t.ops;
                for (op, mut v) in t.latency_us {
                    all.entry(op).or_default().append(&mut v);
                }
                written.push(t.written);
            }
            Err(e) => errors.push(format!("client {i}: {e:#}")),
        }
    }
    assert!(
        errors.is_empty(),
        "{} clients failed: {errors:?}",
        errors.len()
    );

    // What was written reads back: each written block its pattern, the rest zeros.
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    for (c, blocks) in clients.iter().zip(&written) {
        let got = read_all(&nfs, &c.file, READ_REGION, WRITE_REGION as usize);
        for (j, chunk) in got.chunks(LOAD_IO).enumerate() {
            let off = READ_REGION + (j * LOAD_IO) as u64;
            if blocks.contains(&off) {
                assert!(
                    chunk == pattern(c.seed, off, LOAD_IO),
                    "block {off} differs"
                );
            } else {
                assert!(
                    chunk.iter().all(|&b| b == 0),
                    "unwritten block {off} is not zero"
                );
            }
        }
    }
    let rss = rss_max.load(Ordering::Relaxed);
    let mut latency = serde_json::Map::new();
    for (op, v) in all.iter_mut() {
        latency.insert(format!("{op:?}").to_lowercase(), percentiles(v));
    }
    save_figures(
        "load",
        &json!({
            "connections": connections,
            "depth": depth,
            "seconds": elapsed,
            "operations": ops,
            "operations_per_second": ops as f64 / elapsed,
            "errors": 0,
            "rss_max_bytes": rss,
            "arc_size_max_bytes": arc_size_max.load(Ordering::Relaxed),
            "arc_max_bytes": arc,
            "rss_bound_bytes": arc + rss_over_arc(),
            "latency": latency,
        }),
    );
    assert!(rss > 0, "RSS was never read");
    assert!(
        rss <= arc + rss_over_arc(),
        "RSS {} MiB over the bound {} MiB",
        rss >> 20,
        (arc + rss_over_arc()) >> 20
    );
}
