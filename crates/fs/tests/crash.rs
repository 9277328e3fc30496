//! Crash tests of a filesystem through the intent log: a seeded sequence of POSIX
//! changes (create, write, truncate, rename, link, unlink, mkdir) with fsyncs runs on
//! simulated devices until a crash clock fires at a chosen device write or flush.
//! Unflushed writes are kept, dropped or torn; the pool is imported and the filesystem
//! opened. Then:
//! - the pool checks clean and the unlinked set is empty;
//! - the tree (names, kinds, sizes, link counts, bytes) equals the model after some
//!   prefix of the sequence that includes every change before the last fsync that
//!   returned: no fsync lost, nothing half-applied, nothing invented.
//!
//! Every crash point of every sequence is tried. `SHOAL_CRASH_SEEDS=N` runs more.

#[path = "../../pool/tests/common/mod.rs"]
mod common;
use common::*;

use fs::{Cred, Datasets, Kind, SetAttr};
use pool::Pool;
use std::collections::BTreeMap;
use std::sync::Arc;
use vdev::{CrashClock, SimDevice};

/// What a path holds, as both the model and the recovered tree describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir,
    File { nlink: u32, data: Vec<u8> },
}

type Tree = BTreeMap<String, Node>;

/// The model: names to shared file ids (hard links), plus directories.
#[derive(Clone, Default)]
struct Model {
    dirs: Vec<String>,
    names: BTreeMap<String, usize>,
    files: Vec<Vec<u8>>,
}

impl Model {
    fn tree(&self) -> Tree {
        let mut t = Tree::new();
        for d in &self.dirs {
            t.insert(d.clone(), Node::Dir);
        }
        for (path, id) in &self.names {
            let nlink = self.names.values().filter(|i| *i == id).count() as u32;
            t.insert(
                path.clone(),
                Node::File {
                    nlink,
                    data: self.files[*id].clone(),
                },
            );
        }
        t
    }
}

fn read_tree(fs: &fs::Filesystem) -> Tree {
    let mut t = Tree::new();
    let mut stack = vec![(1u64, String::new())];
    while let Some((ino, prefix)) = stack.pop() {
        let mut cookie = 0;
        loop {
            let page = fs.readdir(ino, cookie, 64).unwrap();
            let Some(last) = page.last() else { break };
            cookie = last.cookie;
            for e in page {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let path = format!("{prefix}{}", String::from_utf8(e.name).unwrap());
                let a = fs.getattr(e.ino).unwrap();
                match a.kind {
                    Kind::Dir => {
                        t.insert(path.clone(), Node::Dir);
                        stack.push((e.ino, format!("{path}/")));
                    }
                    Kind::File => {
                        let data = fs.read(e.ino, 0, a.size as usize + 1).unwrap();
                        assert_eq!(data.len() as u64, a.size, "{path}: size and data differ");
                        t.insert(
                            path,
                            Node::File {
                                nlink: a.nlink,
                                data,
                            },
                        );
                    }
                    k => panic!("{path}: unexpected {k:?}"),
                }
            }
        }
    }
    t
}

fn resolve(fs: &fs::Filesystem, path: &str) -> u64 {
    let mut ino = 1;
    for c in path.split('/').filter(|c| !c.is_empty()) {
        ino = fs.lookup(ino, c.as_bytes()).unwrap().ino;
    }
    ino
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

struct Run {
    states: Vec<Tree>,
    acked: usize,
    fsyncs: u64,
}

/// The sequence; stops at the first error (the crash).
fn workload(fs: &fs::Filesystem, seed: u64) -> Run {
    let mut rng = Rng(seed);
    let cred = Cred::root();
    let mut m = Model::default();
    let mut run = Run {
        states: vec![m.tree()],
        acked: 0,
        fsyncs: 0,
    };
    let dirs = ["", "d"];
    for _ in 0..100 {
        let dir = dirs[rng.below(2) as usize];
        if !dir.is_empty() && !m.dirs.iter().any(|d| d == dir) {
            if fs
                .create(1, dir.as_bytes(), Kind::Dir, 0o755, 0, &cred)
                .is_err()
            {
                return run;
            }
            m.dirs.push(dir.to_string());
        } else {
            let name = format!("f{}", rng.below(6));
            let path = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            let dino = resolve(fs, dir);
            let exists = m.names.get(&path).copied();
            let r: fs::Result<()> = match (rng.below(10), exists) {
                (0..=3, _) => {
                    let off = rng.below(200_000);
                    let len = 1 + rng.below(20_000) as usize;
                    let b = rng.next() as u8;
                    let data: Vec<u8> = (0..len).map(|k| b.wrapping_add(k as u8)).collect();
                    let ino = match exists {
                        Some(_) => Ok(fs.lookup(dino, name.as_bytes()).unwrap().ino),
                        None => fs
                            .create(dino, name.as_bytes(), Kind::File, 0o644, 0, &cred)
                            .map(|a| a.ino),
                    };
                    ino.and_then(|ino| {
                        if exists.is_none() {
                            m.files.push(Vec::new());
                            m.names.insert(path.clone(), m.files.len() - 1);
                            // The create alone is a state of its own.
                            run.states.push(m.tree());
                        }
                        fs.write(ino, off, &data).map(|_| {
                            let f = &mut m.files[m.names[&path]];
                            let end = off as usize + len;
                            if f.len() < end {
                                f.resize(end, 0);
                            }
                            f[off as usize..end].copy_from_slice(&data);
                        })
                    })
                }
                (4, Some(id)) => {
                    let size = rng.below(200_000);
                    let ino = fs.lookup(dino, name.as_bytes()).unwrap().ino;
                    let set = SetAttr {
                        size: Some(size),
                        ..Default::default()
                    };
                    fs.setattr(ino, &set, &cred)
                        .map(|_| m.files[id].resize(size as usize, 0))
                }
                (5, Some(id)) => {
                    let to = format!("g{}", rng.below(4));
                    if m.names.contains_key(&to) {
                        continue;
                    }
                    let ino = fs.lookup(dino, name.as_bytes()).unwrap().ino;
                    fs.link(ino, 1, to.as_bytes(), &cred).map(|_| {
                        m.names.insert(to, id);
                    })
                }
                (6 | 7, Some(id)) => {
                    let to_dir = dirs[rng.below(2) as usize];
                    if !to_dir.is_empty() && !m.dirs.iter().any(|d| d == to_dir) {
                        continue;
                    }
                    let to_name = format!("f{}", rng.below(6));
                    let to_path = if to_dir.is_empty() {
                        to_name.clone()
                    } else {
                        format!("{to_dir}/{to_name}")
                    };
                    let tino = resolve(fs, to_dir);
                    fs.rename(
                        dino,
                        name.as_bytes(),
                        tino,
                        to_name.as_bytes(),
                        false,
                        &cred,
                    )
                    .map(|_| {
                        if m.names.get(&to_path) != Some(&id) {
                            m.names.remove(&path);
                            m.names.insert(to_path, id);
                        }
                    })
                }
                (8, Some(_)) => fs.unlink(dino, name.as_bytes(), &cred).map(|_| {
                    m.names.remove(&path);
                }),
                _ => continue,
            };
            if r.is_err() {
                return run;
            }
        }
        run.states.push(m.tree());
        if rng.below(15) == 0 {
            // A txg now and then, so replay starts from varied committed states.
            if fs.pool().sync().is_err() {
                return run;
            }
            run.acked = run.states.len() - 1;
        } else if rng.below(3) == 0 {
            let target = m.names.keys().next().map_or(1, |p| {
                let (d, n) = split(p);
                fs.lookup(resolve(fs, d), n.as_bytes()).map_or(1, |a| a.ino)
            });
            if fs.fsync(target).is_err() {
                return run;
            }
            run.acked = run.states.len() - 1;
            run.fsyncs += 1;
        }
    }
    run
}

fn setup(seed: u64, clock: &Arc<CrashClock>) -> (Vec<Arc<SimDevice>>, Arc<Pool>) {
    let (devs, pool) = dataset_crash_pool(seed, clock);
    let ds = Datasets::new(pool.clone()).unwrap();
    ds.create("tank/fs", &[("recordsize".into(), "16K".into())])
        .unwrap();
    pool.sync().unwrap();
    (devs, pool)
}

#[test]
fn every_returned_fsync_survives_a_crash_at_any_point() {
    let seeds: u64 = std::env::var("SHOAL_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let mut points = 0u64;
    let mut replayed = 0u64;
    for seed in 0..seeds {
        let clock = CrashClock::new();
        let (_devs, pool) = setup(seed, &clock);
        let start = clock.ops();
        let fs = Datasets::new(pool.clone())
            .unwrap()
            .open("tank/fs")
            .unwrap();
        let dry = workload(&fs, seed);
        assert!(dry.fsyncs > 3, "seed {seed}: too few fsyncs to test");
        let total = clock.ops() - start;
        drop(fs);
        drop(pool);
        for point in 1..=total {
            let clock = CrashClock::new();
            let (devs, pool) = setup(seed, &clock);
            let fs = Datasets::new(pool.clone())
                .unwrap()
                .open("tank/fs")
                .unwrap();
            clock.arm(point);
            let run = workload(&fs, seed);
            drop(fs);
            drop(pool);
            let policy = crash_policy(point);
            let after: Vec<Arc<SimDevice>> = devs.iter().map(|d| d.restart(policy)).collect();
            let pool =
                Pool::import(args(&after), Some("tank"), dataset_crash_opts()).expect("import");
            if pool.intent_log_stats().records_replayed > 0 {
                replayed += 1;
            }
            assert_eq!(pool.intent_log_stats().replay_failures, 0);
            let ds = Datasets::new(pool.clone()).unwrap();
            let fs = ds.open("tank/fs").unwrap();
            let tree = read_tree(&fs);
            let found = (run.acked..run.states.len())
                .rev()
                .find(|&k| run.states[k] == tree);
            assert!(
                found.is_some(),
                "seed {seed} point {point}/{total}: the tree is no state at or after the \
                 last returned fsync (state {} of {}):\n{tree:#?}",
                run.acked,
                run.states.len() - 1
            );
            // After opening, nothing is left in the unlinked set.
            assert!(
                fs.readdir(fs::filesystem::UNLINKED_INO, 0, 10)
                    .unwrap()
                    .iter()
                    .all(|e| e.name == b"." || e.name == b".."),
                "seed {seed} point {point}: unlinked set not empty"
            );
            let report = pool.check().unwrap();
            assert!(
                report.problems.is_empty(),
                "seed {seed} point {point}: {:?}",
                report.problems
            );
            points += 1;
        }
    }
    println!("filesystem crash test: {points} crash points, {replayed} replayed the intent log");
    assert!(points > 300);
    assert!(replayed > points / 10, "the log was rarely replayed");
}
