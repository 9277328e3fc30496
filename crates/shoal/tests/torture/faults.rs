//! Device faults under a live daemon: corrupted blocks never reach a client, failed
//! devices lose nothing.

use super::*;

/// Overwrites `count` random 4 KiB blocks of the device file at `path` (between
/// `margin` from either end, so the labels stay) with random bytes, as a failing disk
/// or a stray write would, and makes the damage reach the disk.
fn corrupt_device(path: &Path, count: usize, margin: u64, rng: &mut Rng) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let size = f.metadata().unwrap().len();
    let blocks = (size - 2 * margin) / 4096;
    for _ in 0..count {
        let at = margin + rng.below(blocks) * 4096;
        let junk = pattern(rng.below(u64::MAX), at, 4096);
        f.write_all_at(&junk, at).unwrap();
    }
    f.sync_all().unwrap();
}

#[test]
fn corrupted_blocks_of_a_live_pool_never_reach_a_client() {
    let dir = tempfile::tempdir().unwrap();
    let (mut served, t, root) = serve_share(
        dir.path(),
        "128M",
        &["raidz2", "a", "b", "c", "d", "e", "f"],
        "c",
        &["--arc-max", "64M"],
    );
    let devices: Vec<_> = ["a", "b"]
        .iter()
        .map(|d| dir.path().join("devs").join(d))
        .collect();
    assert!(devices.iter().all(|d| d.exists()), "{devices:?}");
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    let base = seed();
    let file_bytes = 24usize << 20;
    // More data than the ARC holds, so reads go to the devices.
    let files = write_files(&nfs, &root, "data", base, file_bytes, Stable::Unstable);
    // Let the transaction group put the data in its final place.
    std::thread::sleep(Duration::from_secs(6));

    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let mut rng = Rng::new(base);
    std::thread::scope(|s| {
        for r in 0..2 {
            let (t, files, stop, reads) = (&t, &files, &stop, &reads);
            s.spawn(move || {
                let nfs = Nfs::connect(t, root_credential("torture")).unwrap();
                let mut k = r;
                while !stop.load(Ordering::Relaxed) {
                    let (fh, seed) = &files[k % files.len()];
                    let want = pattern(*seed, 0, file_bytes);
                    for off in (0..file_bytes).step_by(1 << 20) {
                        let got = nfs.read(fh, off as u64, 1 << 20).unwrap();
                        assert!(
                            got.bytes() == &want[off..off + (1 << 20)],
                            "a client read corrupted data at {off}"
                        );
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                    k += 1;
                }
            });
        }
        // A writer keeps the pool changing while it is damaged.
        let (t, root, stop) = (&t, &root, &stop);
        s.spawn(move || {
            let nfs = Nfs::connect(t, root_credential("torture")).unwrap();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let fh = nfs.create(root, &format!("live{}", i % 8), true).unwrap();
                nfs.write(&fh, 0, &pattern(i, 0, 1 << 20), Stable::FileSync)
                    .unwrap();
                i += 1;
            }
        });
        for _ in 0..3 {
            std::thread::sleep(Duration::from_secs(3));
            for d in &devices {
                corrupt_device(d, 300, 16 << 20, &mut rng);
            }
        }
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
    });

    // A scrub repairs what the reads did not reach; nothing is unrecoverable.
    let scrub = scrub_pool(&served);
    assert_eq!(scrub["errors"], 0, "{scrub}");
    let status = pool_status(&served);
    let cksum_errors: u64 = status["vdevs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| v["children"].as_array().unwrap())
        .map(|l| l["cksum_errors"].as_u64().unwrap())
        .sum();
    assert_eq!(status["unrecoverable_reads"], 0, "{status}");
    assert!(cksum_errors > 0, "the damage was never seen: {status}");
    // Everything reads back, and again from the devices after a kill -9.
    for pass in 0..2 {
        let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
        for (fh, seed) in &files {
            assert!(
                read_all(&nfs, fh, 0, file_bytes) == pattern(*seed, 0, file_bytes),
                "data differs after the scrub (pass {pass})"
            );
        }
        served.restart();
    }
    let scrub_again = scrub_pool(&served);
    assert_eq!(scrub_again["errors"], 0, "{scrub_again}");
    assert_eq!(
        scrub_again["bad_copies"], 0,
        "the first scrub left damage: {scrub_again}"
    );
    save_figures(
        "corruption",
        &json!({
            "devices_damaged": devices.len(),
            "blocks_overwritten": 3 * 300 * devices.len(),
            "client_reads_verified": reads.load(Ordering::Relaxed),
            "checksum_errors_seen": cksum_errors,
            "scrub": scrub,
            "lost": 0,
        }),
    );
}

/// Scrubs pool `tank` through the API; its summary.
fn scrub_pool(s: &Served) -> Value {
    let (code, body) = s.post("/api/v1/pools/tank/scrub", &json!({}));
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn pool_status(s: &Served) -> Value {
    let (code, body) = s.get("/api/v1/pools/tank");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn failed_devices_under_load_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut served, t, root) = serve_share(
        dir.path(),
        "128M",
        &["raidz2", "a", "b", "c", "d", "e", "f"],
        "f",
        &["--arc-max", "64M", "--fault-injection"],
    );
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    let base = seed();
    let file_bytes = 16usize << 20;
    let files = write_files(&nfs, &root, "data", base, file_bytes, Stable::FileSync);
    let leaves: Vec<String> = pool_status(&served)["vdevs"][0]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["path"].as_str().unwrap().to_string())
        .collect();
    // Bad requests are refused with a reason.
    let (code, _) = served.post(
        "/api/v1/pools/tank/inject",
        &json!({"device": "/nope", "fault": "fail"}),
    );
    assert_eq!(code, 404);
    let (code, _) = served.post(
        "/api/v1/pools/tank/inject",
        &json!({"device": leaves[0], "fault": "melt"}),
    );
    assert_eq!(code, 400);

    let stop = AtomicBool::new(false);
    let written = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for r in 0..2 {
            let (t, files, stop) = (&t, &files, &stop);
            s.spawn(move || {
                let nfs = Nfs::connect(t, root_credential("torture")).unwrap();
                let mut k = r;
                while !stop.load(Ordering::Relaxed) {
                    let (fh, seed) = &files[k % files.len()];
                    let want = pattern(*seed, 0, file_bytes);
                    for off in (0..file_bytes).step_by(1 << 20) {
                        let got = nfs
                            .read(fh, off as u64, 1 << 20)
                            .unwrap_or_else(|e| panic!("READ with failed devices: {e:#}"));
                        assert!(got.bytes() == &want[off..off + (1 << 20)]);
                    }
                    k += 1;
                }
            });
        }
        let (t, root, stop, written) = (&t, &root, &stop, &written);
        s.spawn(move || {
            let nfs = Nfs::connect(t, root_credential("torture")).unwrap();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if i >= 200 {
                    // 50 MiB is plenty; a full pool is another test.
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                let fh = nfs.create(root, &format!("new{i}"), true).unwrap();
                let data = pattern(base ^ (500 + i), 0, 256 << 10);
                nfs.write(&fh, 0, &data, Stable::FileSync)
                    .unwrap_or_else(|e| panic!("WRITE with failed devices: {e:#}"));
                written.lock().unwrap().push((fh, base ^ (500 + i)));
                i += 1;
                std::thread::sleep(Duration::from_millis(40));
            }
        });
        // Two of six devices die, one after the other: RAID-Z2 carries on.
        for dead in &leaves[..2] {
            std::thread::sleep(Duration::from_secs(3));
            let (code, body) = served.post(
                "/api/v1/pools/tank/inject",
                &json!({"device": dead, "fault": "fail"}),
            );
            assert_eq!(code, 200, "{body}");
        }
        std::thread::sleep(Duration::from_secs(4));
        stop.store(true, Ordering::Relaxed);
    });
    let status = pool_status(&served);
    assert_ne!(status["health"], "ONLINE", "{status}");
    assert_eq!(status["unrecoverable_reads"], 0, "{status}");
    let written = written.into_inner().unwrap();
    assert!(!written.is_empty());
    let check = |nfs: &Nfs| {
        for (fh, seed) in &files {
            assert!(read_all(nfs, fh, 0, file_bytes) == pattern(*seed, 0, file_bytes));
        }
        for (fh, seed) in &written {
            assert!(read_all(nfs, fh, 0, 256 << 10) == pattern(*seed, 0, 256 << 10));
        }
    };
    check(&Nfs::connect(&t, root_credential("torture")).unwrap());
    // After a kill -9 the devices are back (the fault lived in the old process; those
    // a txg recorded as faulted stay FAULTED); the pool imports, and the data is all
    // there.
    served.restart();
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    check(&nfs);
    served.stop();
    save_figures(
        "device-failure",
        &json!({
            "devices_failed": 2,
            "layout": "raidz2 of 6",
            "files_written_while_failing": written.len(),
            "health_after": status["health"],
            "lost": 0,
        }),
    );
}
