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

/// The connection of a client that reconnects whenever the daemon dies: the open
/// one, or a new one; `None` (after a pause) while the daemon does not answer.
fn connected<'a>(conn: &'a mut Option<Nfs>, t: &Target) -> Option<&'a Nfs> {
    if conn.is_none() {
        match Nfs::connect(t, root_credential("torture")) {
            Ok(c) => *conn = Some(c),
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                return None;
            }
        }
    }
    conn.as_ref()
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
        let Some(c) = connected(&mut conn, t) else {
            continue;
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
        // Paced, so the soak's kills fit its pool (4 writers never rewrite a byte)
        // and the pool check after each restart stays short.
        std::thread::sleep(Duration::from_millis(if soak() { 200 } else { 20 }));
    }
    acked
}

/// Namespace changes the server answered: names that must exist (created, or renamed
/// to) and names that must not (removed, or renamed from). A change whose answer was
/// lost with its connection counts in neither.
#[derive(Default)]
struct Names {
    exist: std::collections::BTreeSet<String>,
    gone: std::collections::BTreeSet<String>,
}

/// Creates `n{k}` in `dir`, renames every third to `m{k}` and removes every third
/// (CREATE, RENAME and REMOVE answer only once their change is stable), reconnecting
/// whenever the daemon dies, until `stop`.
fn namespace_worker(t: &Target, dir: &Fh, stop: &AtomicBool) -> Names {
    let mut names = Names::default();
    let mut conn: Option<Nfs> = None;
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = connected(&mut conn, t) else {
            continue;
        };
        k += 1;
        let (n, m) = (format!("n{k}"), format!("m{k}"));
        // An NFS error fails the test; a dead connection leaves the change unknown.
        let dead = |r: anyhow::Result<()>, what: &str| match r {
            Ok(()) => false,
            Err(e) if NfsStatus::of(&e).is_some() => panic!("{what}: {e:#}"),
            Err(_) => true,
        };
        if dead(c.create(dir, &n, false).map(|_| ()), "CREATE") {
            conn = None;
            continue;
        }
        names.exist.insert(n.clone());
        let changed = match k % 3 {
            1 => {
                names.exist.remove(&n);
                let lost = dead(c.rename(dir, &n, dir, &m), "RENAME");
                if !lost {
                    names.gone.insert(n);
                    names.exist.insert(m);
                }
                !lost
            }
            2 => {
                names.exist.remove(&n);
                let lost = dead(c.remove(dir, &n).map(|_| ()), "REMOVE");
                if !lost {
                    names.gone.insert(n);
                }
                !lost
            }
            _ => true,
        };
        if !changed {
            conn = None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    names
}

/// What a run of `kill_under_load` found.
pub(super) struct KillRun {
    pub kills: usize,
    pub writers: usize,
    pub acked_writes: usize,
    pub acked_bytes: u64,
    /// Namespace changes answered (and checked after the last kill).
    pub names_checked: usize,
    pub per_generation: BTreeMap<u64, u64>,
    /// Acknowledged writes that read back differently (or not at all), described.
    pub lost: Vec<String>,
    /// Why the daemon did not come back after the last kill, if it did not.
    pub not_back: Option<String>,
    /// The pool, its log and the daemon's log, kept when something was lost.
    pub kept: Option<std::path::PathBuf>,
    /// Files the NFSv4.1 client created and wrote FILE_SYNC (checked after the last
    /// kill), and the opens and locks it reclaimed after restarts.
    pub v4_files: usize,
    pub v4_reclaimed_opens: u64,
    pub v4_reclaimed_locks: u64,
    /// Imports checked (`pool check` through the API right after each restart), and
    /// what the checks found wrong.
    pub imports_checked: usize,
    pub import_problems: Vec<String>,
}

/// `pool check` of the restarted daemon's pool: its problems, or why it could not run.
fn check_after_import(served: &Served, restart: usize) -> Vec<String> {
    let (code, body) = served.get("/api/v1/pools/tank/check");
    if code != 200 {
        return vec![format!(
            "after restart {restart}: check answered {code}: {body}"
        )];
    }
    let report: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    match report["problems"].as_array() {
        Some(problems) => problems
            .iter()
            .map(|p| format!("after restart {restart}: {p}"))
            .collect(),
        None => vec![format!("after restart {restart}: no report: {body}")],
    }
}

/// `writers` clients append to their own files of a raidz1 pool served by `shoal
/// serve EXTRA`, writing FILE_SYNC, DATA_SYNC and UNSTABLE+COMMIT; the daemon is
/// killed with SIGKILL `kills` times at random moments (each time after the last
/// instance acknowledged something) and restarted, then, once the writers stopped,
/// once more; then every write acknowledged as stable is read back through the same
/// handles, byte for byte.
pub(super) fn kill_under_load(extra: &[&str], kills: usize, writers: usize, size: &str) -> KillRun {
    let dir = tempfile::tempdir().unwrap();
    let (mut served, t, root) =
        serve_share(dir.path(), size, &["raidz1", "a", "b", "c"], "k", extra);
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
    let mut import_problems = Vec::new();
    let mut imports_checked = 0;
    let (acked, names, v4): (Vec<Acked>, Names, super::v4_state::V4Run) = std::thread::scope(|s| {
        let namer = {
            let (t, root, stop) = (&t, &root, &stop);
            s.spawn(move || namespace_worker(t, root, stop))
        };
        let v4 = {
            let (t, stop, restarts) = (&t, &stop, &restarts);
            s.spawn(move || {
                super::v4_state::v4_state_worker(t, "tank/k", base ^ 0x4411, stop, restarts)
            })
        };
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
            let restart = restarts.fetch_add(1, Ordering::SeqCst) as usize + 1;
            served.restart();
            import_problems.extend(check_after_import(&served, restart));
            imports_checked += 1;
        }
        // Clients carry on after the last restart, then stop.
        if acked_every_generation && wait_for_ack(restarts.load(Ordering::SeqCst)) {
            std::thread::sleep(Duration::from_millis(1500 + rng.below(1500)));
        }
        stop.store(true, Ordering::Relaxed);
        let acked = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        (acked, namer.join().unwrap(), v4.join().unwrap())
    });
    // Kill once more, right after the writers stopped, so what is read back comes
    // from the pool and its log, not memory.
    let not_back = served.try_restart().err();
    if not_back.is_none() {
        import_problems.extend(check_after_import(&served, kills + 1));
        imports_checked += 1;
    }

    let per_generation = per_generation.into_inner().unwrap();
    for g in 0..=kills as u64 {
        assert!(
            per_generation.get(&g).copied().unwrap_or(0) > 0,
            "no write was acknowledged after restart {g}: {per_generation:?}"
        );
    }
    // The same handles, never looked up again, read back every acknowledged byte.
    let mut lost = Vec::new();
    let mut bytes = 0u64;
    let nfs = if not_back.is_none() {
        Nfs::connect(&t, root_credential("torture")).ok()
    } else {
        None
    };
    for a in &acked {
        bytes += a.len as u64;
        let want = pattern(base ^ ((a.file as u64 + 1) << 48), a.offset, a.len);
        let got = nfs
            .as_ref()
            .map(|n| try_read_all(n, &files[a.file], a.offset, a.len));
        let what = match got {
            None => "unreadable: the daemon is not back".to_string(),
            Some(Err(e)) => format!("READ failed: {e:#}"),
            Some(Ok(got)) if got == want => continue,
            Some(Ok(got)) => {
                let first = got.iter().zip(&want).position(|(g, w)| g != w);
                let zeros = got.iter().filter(|&&b| b == 0).count();
                format!(
                    "{} bytes read, first difference at +{first:?}, {zeros} zero bytes",
                    got.len()
                )
            }
        };
        lost.push(format!(
            "file w{} bytes {}..{} ({:?}, after restart {}): {what}",
            a.file,
            a.offset,
            a.offset + a.len as u64,
            a.stable,
            a.generation,
        ));
    }
    for (name, must_exist) in names
        .exist
        .iter()
        .map(|n| (n, true))
        .chain(names.gone.iter().map(|n| (n, false)))
    {
        let found = nfs.as_ref().map(|n| n.lookup(&root, name));
        let wrong = match found {
            None => "unknown: the daemon is not back".to_string(),
            Some(Err(e)) => format!("LOOKUP failed: {e:#}"),
            Some(Ok(f)) if f.is_some() == must_exist => continue,
            Some(Ok(_)) if must_exist => "created, then missing".to_string(),
            Some(Ok(_)) => "removed or renamed, then back".to_string(),
        };
        lost.push(format!("name {name}: {wrong}"));
    }
    for (name, seed) in &v4.created {
        let want = pattern(*seed, 0, 4096);
        let got = nfs.as_ref().map(|n| {
            n.lookup(&root, name)
                .and_then(|f| f.ok_or_else(|| anyhow::anyhow!("missing")))
                .and_then(|(fh, _)| try_read_all(n, &fh, 0, want.len()))
        });
        let wrong = match got {
            None => "unknown: the daemon is not back".to_string(),
            Some(Ok(got)) if got == want => continue,
            Some(Ok(_)) => "created by NFSv4.1 OPEN and written FILE_SYNC, then different".into(),
            Some(Err(e)) => format!("created by NFSv4.1 OPEN and written FILE_SYNC, then {e:#}"),
        };
        lost.push(format!("v4 file {name}: {wrong}"));
    }
    lost.extend(v4.refused.iter().map(|r| format!("NFSv4.1 reclaim: {r}")));
    drop(nfs);
    if not_back.is_none() {
        served.stop();
    }
    let kept = (!lost.is_empty() || !import_problems.is_empty()).then(|| dir.keep());
    KillRun {
        kills,
        writers,
        acked_writes: acked.len(),
        acked_bytes: bytes,
        names_checked: names.exist.len() + names.gone.len(),
        per_generation,
        lost,
        not_back,
        kept,
        imports_checked,
        import_problems,
        v4_files: v4.created.len(),
        v4_reclaimed_opens: v4.reclaimed_opens,
        v4_reclaimed_locks: v4.reclaimed_locks,
    }
}

/// The figures of a run, and its first losses when there are any.
pub(super) fn report(r: &KillRun) -> Value {
    json!({
        "kills": r.kills,
        "writers": r.writers,
        "acknowledged_writes": r.acked_writes,
        "acknowledged_bytes": r.acked_bytes,
        "acknowledged_namespace_changes_checked": r.names_checked,
        "acknowledged_per_server_instance": r.per_generation,
        "lost": r.lost.len(),
        "first_losses": r.lost.iter().take(5).collect::<Vec<_>>(),
        "not_back_after_the_last_kill": r.not_back,
        "imports_checked": r.imports_checked,
        "nfs4_files_created_and_checked": r.v4_files,
        "nfs4_opens_reclaimed": r.v4_reclaimed_opens,
        "nfs4_locks_reclaimed": r.v4_reclaimed_locks,
        "import_problems": r.import_problems.iter().take(5).collect::<Vec<_>>(),
        "kept": r.kept,
    })
}

#[test]
fn kill_9_under_load_loses_no_acknowledged_write() {
    let kills = std::env::var("SHOAL_TORTURE_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if soak() { 50 } else { 5 });
    let size = if soak() { "4G" } else { "1G" };
    let r = kill_under_load(&[], kills, 4, size);
    let figures = report(&r);
    save_figures("kill9", &figures);
    assert!(r.not_back.is_none(), "{figures:#}");
    assert!(r.lost.is_empty(), "acknowledged writes lost: {figures:#}");
    assert!(r.import_problems.is_empty(), "{figures:#}");
}
