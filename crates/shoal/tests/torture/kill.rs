//! SIGKILL under load: no acknowledged write is lost.

use super::*;

/// A write the server acknowledged as stable (FILE_SYNC, DATA_SYNC, or UNSTABLE and
/// then a COMMIT with the same verifier).
#[derive(Clone, Copy)]
struct Acked {
    /// Restarts before the acknowledgement.
    generation: u64,
    stable: Stable,
    file: usize,
    offset: u64,
    len: usize,
}

/// A writer of the kill test: appends blocks of varied, unaligned sizes to its own
/// file, 8 in flight, never writing any byte twice; reconnects with the same handle
/// whenever the daemon dies. Returns the writes acknowledged as stable and how many
/// were acknowledged after each restart.
fn kill_test_writer(
    t: &Target,
    file_index: usize,
    fh: &Fh,
    seed: u64,
    stop: &AtomicBool,
    restarts: &AtomicU64,
    acked_after_restart: &Mutex<BTreeMap<u64, u64>>,
) -> Vec<Acked> {
    let mut rng = Rng::new(seed);
    let mut acked = Vec::new();
    let mut offset = 0u64;
    let mut conn: Option<Nfs> = None;
    while !stop.load(Ordering::Relaxed) {
        let c = match &conn {
            Some(c) => c,
            None => match Nfs::connect(t, root_credential("torture")) {
                Ok(c) => conn.insert(c),
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            },
        };
        let generation = restarts.load(Ordering::SeqCst);
        let stable = match rng.below(3) {
            0 => Stable::FileSync,
            1 => Stable::DataSync,
            _ => Stable::Unstable,
        };
        // A batch of 8 writes in flight.
        let mut batch = Vec::new();
        let mut failed = false;
        for _ in 0..8 {
            let len = 1 + rng.below(32 << 10) as usize;
            let data = pattern(seed, offset, len);
            match c.start_write(fh, offset, &data, stable) {
                Ok(call) => batch.push((offset, len, call)),
                Err(_) => failed = true,
            }
            offset += len as u64;
        }
        let mut done = Vec::new();
        let mut verifiers = Vec::new();
        for (off, len, call) in batch {
            match call.wait() {
                // An NFS error, a short write or a weaker stability than asked
                // fails the test; a dead connection only ends the batch.
                Ok(reply) => match Nfs::finish_write(reply, len, stable) {
                    Ok(verf) => {
                        verifiers.push(verf);
                        done.push(Acked {
                            generation,
                            stable,
                            file: file_index,
                            offset: off,
                            len,
                        });
                    }
                    Err(e) => panic!("WRITE at {off}: {e:#}"),
                },
                Err(_) => failed = true,
            }
        }
        if failed && stable == Stable::Unstable {
            // Answered UNSTABLE and never committed: not acknowledged as stable.
            done.clear();
        } else if stable == Stable::Unstable {
            match c.commit_verifier(fh) {
                Ok(verf) => {
                    // Writes made under another server instance must be sent again;
                    // these are simply not counted (their bytes are never rewritten).
                    done.retain(|_| verifiers.iter().all(|v| *v == verf));
                }
                Err(e) if NfsStatus::of(&e).is_some() => panic!("COMMIT: {e:#}"),
                Err(_) => {
                    failed = true;
                    done.clear();
                }
            }
        }
        if !done.is_empty() {
            *acked_after_restart
                .lock()
                .unwrap()
                .entry(generation)
                .or_default() += done.len() as u64;
        }
        acked.extend(done);
        if failed {
            conn = None;
        }
        // Paced, so the soak's 50 kills fit its pool.
        std::thread::sleep(Duration::from_millis(20));
    }
    acked
}

#[test]
fn kill_9_under_load_loses_no_acknowledged_write() {
    let kills = std::env::var("SHOAL_TORTURE_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if soak() { 50 } else { 5 });
    let writers = 4;
    let dir = tempfile::tempdir().unwrap();
    let size = if soak() { "4G" } else { "1G" };
    let (mut served, t, root) = serve_share(dir.path(), size, &["raidz1", "a", "b", "c"], "k", &[]);
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    let files: Vec<Fh> = (0..writers)
        .map(|i| nfs.create(&root, &format!("w{i}"), true).unwrap())
        .collect();
    nfs.commit(&files[0]).unwrap();
    drop(nfs);
    let base = seed();
    let mut rng = Rng::new(base);
    let stop = AtomicBool::new(false);
    let restarts = AtomicU64::new(0);
    let per_generation = Mutex::new(BTreeMap::new());
    let acked: Vec<Acked> = std::thread::scope(|s| {
        let handles: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(i, fh)| {
                let (t, stop, restarts, per_generation) = (&t, &stop, &restarts, &per_generation);
                s.spawn(move || {
                    kill_test_writer(
                        t,
                        i,
                        fh,
                        base ^ ((i as u64 + 1) << 48),
                        stop,
                        restarts,
                        per_generation,
                    )
                })
            })
            .collect();
        if kills == 0 {
            std::thread::sleep(Duration::from_secs(8));
        }
        // The writers stop however this thread leaves the scope: a panic here (a
        // restart that fails) would otherwise wait on them forever.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop_writers = StopOnDrop(&stop);
        // Every generation must get acknowledged writes before the next kill; a short
        // random gap alone does not promise that on a loaded machine. False after two
        // minutes without one: the writers are stopped and the check after the scope
        // names the generation.
        let wait_for_ack = |generation: u64| {
            let deadline = std::time::Instant::now() + Duration::from_secs(120);
            while per_generation
                .lock()
                .unwrap()
                .get(&generation)
                .is_none_or(|&n| n == 0)
            {
                if std::time::Instant::now() > deadline {
                    stop.store(true, Ordering::Relaxed);
                    return false;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            true
        };
        let mut acked_every_generation = true;
        for _ in 0..kills {
            acked_every_generation = wait_for_ack(restarts.load(Ordering::SeqCst));
            if !acked_every_generation {
                break;
            }
            std::thread::sleep(Duration::from_millis(300 + rng.below(2500)));
            served.kill9();
            restarts.fetch_add(1, Ordering::SeqCst);
            served.restart();
        }
        // Clients carry on after the last restart, then stop.
        if acked_every_generation && wait_for_ack(restarts.load(Ordering::SeqCst)) {
            std::thread::sleep(Duration::from_millis(1500));
        }
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    // Kill once more so what is read back comes from the pool and its log, not memory.
    served.kill9();
    served.restart();

    let per_generation = per_generation.into_inner().unwrap();
    for g in 0..=kills as u64 {
        assert!(
            per_generation.get(&g).copied().unwrap_or(0) > 0,
            "no write was acknowledged after restart {g}: {per_generation:?}"
        );
    }
    // The same handles, never looked up again, read back every acknowledged byte.
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    let mut bytes = 0u64;
    for a in &acked {
        let want = pattern(base ^ ((a.file as u64 + 1) << 48), a.offset, a.len);
        let got = read_all(&nfs, &files[a.file], a.offset, a.len);
        if got != want {
            let first = got.iter().zip(&want).position(|(g, w)| g != w);
            let size = nfs.getattr(&files[a.file]).unwrap().size;
            let zeros = got.iter().filter(|&&b| b == 0).count();
            let kept = dir.keep();
            panic!(
                "file w{} bytes {}..{} ({:?}, after restart {}) acknowledged as stable read back differently: \
                 {} bytes read, first difference at +{first:?}, {zeros} zero bytes, file size \
                 {size}; pool and log kept in {}",
                a.file,
                a.offset,
                a.offset + a.len as u64,
                a.stable,
                a.generation,
                got.len(),
                kept.display()
            );
        }
        bytes += a.len as u64;
    }
    served.stop();
    save_figures(
        "kill9",
        &json!({
            "kills": kills,
            "writers": writers,
            "acknowledged_writes": acked.len(),
            "acknowledged_bytes": bytes,
            "acknowledged_per_server_instance": per_generation,
            "lost": 0,
        }),
    );
}
