//! Random operations (write, truncate, punch, rename, link, unlink, mkdir, rmdir)
//! against a shadow copy kept in memory. Every few hundred operations the whole tree is
//! compared (names, kinds, link counts, sizes, bytes), and at the end the pool is
//! exported, imported and compared again. `SHOAL_SHADOW_OPS=N` runs more operations.
//! The pool keeps almost no clean objects in memory, so evicted objects are loaded
//! back all the time.

#[path = "../../pool/tests/common/mod.rs"]
mod common;
use common::*;

use fs::{Cred, Datasets, FsError, Kind, SetAttr};
use pool::pool::TopArg;
use pool::{Pool, PoolOptions};
use std::collections::BTreeMap;
use std::sync::Arc;
use vdev::{Layout, SimDevice};

/// The model: directories by path, files by a model id shared between hard links.
#[derive(Default)]
struct Model {
    dirs: BTreeMap<String, ()>,
    names: BTreeMap<String, usize>, // "dir/name" -> file id
    files: Vec<Vec<u8>>,
}

const DIRS: [&str; 3] = ["", "a", "b"];
const MAX_SIZE: u64 = 300 * 1024;

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

fn path_of(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// A random (directory, name, path) in a directory that exists.
fn pick_name(rng: &mut Rng, m: &Model) -> Option<(&'static str, String, String)> {
    let dir = DIRS[rng.below(3) as usize];
    if !m.dirs.contains_key(dir) {
        return None;
    }
    let name = format!("f{}", rng.below(12));
    let path = path_of(dir, &name);
    Some((dir, name, path))
}

fn resolve(fs: &fs::Filesystem, dir: &str) -> u64 {
    let mut ino = 1;
    for c in dir.split('/').filter(|c| !c.is_empty()) {
        ino = fs.lookup(ino, c.as_bytes()).unwrap().ino;
    }
    ino
}

fn pool_on(devs: &[Arc<SimDevice>], create: bool) -> Arc<Pool> {
    let args = args(devs);
    let opts = PoolOptions {
        arc_max_bytes: Some(32 << 20),
        txg_interval: std::time::Duration::from_millis(200),
        // Every txg drops all but a handful of clean objects, so the operations keep
        // loading evicted dnodes back while the sync thread evicts.
        object_cache_max: 8,
        ..PoolOptions::default()
    };
    if create {
        Pool::create(
            "tank",
            vec![TopArg {
                layout: Layout::RaidZ { nparity: 1 },
                devices: args,
            }],
            vec![],
            vec![],
            opts,
        )
        .unwrap()
    } else {
        Pool::import(args, Some("tank"), opts).unwrap()
    }
}

fn compare(fs: &fs::Filesystem, m: &Model) {
    let mut nlinks: BTreeMap<usize, u32> = BTreeMap::new();
    for id in m.names.values() {
        *nlinks.entry(*id).or_default() += 1;
    }
    for d in DIRS {
        if !m.dirs.contains_key(d) {
            continue;
        }
        let ino = resolve(fs, d);
        let mut listed = BTreeMap::new();
        let mut cookie = 0;
        loop {
            let page = fs.readdir(ino, cookie, 37).unwrap();
            let Some(last) = page.last() else { break };
            cookie = last.cookie;
            for e in page {
                if e.name != b"." && e.name != b".." {
                    let n = String::from_utf8(e.name).unwrap();
                    assert!(
                        listed.insert(n, (e.ino, e.kind)).is_none(),
                        "listed twice in '{d}'"
                    );
                }
            }
        }
        let prefix = if d.is_empty() {
            String::new()
        } else {
            format!("{d}/")
        };
        let want: Vec<String> = m
            .names
            .keys()
            .filter(|k| split(k).0 == d)
            .map(|k| k[prefix.len()..].to_string())
            .chain(
                m.dirs
                    .keys()
                    .filter(|k| !k.is_empty() && split(k).0 == d)
                    .map(|k| split(k).1.to_string()),
            )
            .collect();
        let got: Vec<String> = listed.keys().cloned().collect();
        let mut want_sorted = want.clone();
        want_sorted.sort();
        assert_eq!(got, want_sorted, "names in '{d}'");
        for (name, (ino, kind)) in listed {
            let path = format!("{prefix}{name}");
            let a = fs.getattr(ino).unwrap();
            assert_eq!(a.kind, kind);
            if let Some(&id) = m.names.get(&path) {
                assert_eq!(a.kind, Kind::File);
                let want = &m.files[id];
                assert_eq!(a.size, want.len() as u64, "size of {path}");
                assert_eq!(a.nlink, nlinks[&id], "links of {path}");
                let got = fs.read(ino, 0, want.len() + 10).unwrap();
                assert!(got == *want, "contents of {path} differ");
            } else {
                assert_eq!(a.kind, Kind::Dir);
            }
        }
    }
}

#[test]
fn random_operations_match_a_shadow_copy() {
    let ops: u64 = std::env::var("SHOAL_SHADOW_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let devs: Vec<Arc<SimDevice>> = (0..3).map(|i| SimDevice::new(256 << 20, 40 + i)).collect();
    let pool = pool_on(&devs, true);
    let ds = Datasets::new(pool.clone()).unwrap();
    ds.create("tank/fs", &[("recordsize".into(), "16K".into())])
        .unwrap();
    let fs = ds.open("tank/fs").unwrap();
    let cred = Cred::root();
    let mut m = Model::default();
    m.dirs.insert(String::new(), ());
    let mut rng = Rng(7);
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for i in 0..ops {
        let dir = DIRS[rng.below(3) as usize];
        if !m.dirs.contains_key(dir) {
            // mkdir
            let (parent, name) = split(dir);
            fs.create(
                resolve(&fs, parent),
                name.as_bytes(),
                Kind::Dir,
                0o755,
                0,
                &cred,
            )
            .unwrap();
            m.dirs.insert(dir.to_string(), ());
            *counts.entry("mkdir").or_default() += 1;
            continue;
        }
        let name = format!("f{}", rng.below(12));
        let path = path_of(dir, &name);
        let dino = resolve(&fs, dir);
        let op = rng.below(100);
        let exists = m.names.get(&path).copied();
        match (op, exists) {
            (0..=39, _) => {
                let off = rng.below(MAX_SIZE);
                let len = 1 + rng.below(12 * 1024) as usize;
                let byte = rng.next() as u8;
                let data: Vec<u8> = (0..len).map(|k| byte.wrapping_add(k as u8)).collect();
                let ino = match exists {
                    Some(_) => fs.lookup(dino, name.as_bytes()).unwrap().ino,
                    None => {
                        let a = fs
                            .create(dino, name.as_bytes(), Kind::File, 0o644, 0, &cred)
                            .unwrap();
                        m.files.push(Vec::new());
                        m.names.insert(path.clone(), m.files.len() - 1);
                        a.ino
                    }
                };
                let id = m.names[&path];
                assert_eq!(fs.write(ino, off, &data).unwrap(), len);
                let f = &mut m.files[id];
                let end = off as usize + len;
                if f.len() < end {
                    f.resize(end, 0);
                }
                f[off as usize..end].copy_from_slice(&data);
                *counts.entry("write").or_default() += 1;
            }
            (40..=49, Some(id)) => {
                let size = rng.below(MAX_SIZE);
                let ino = fs.lookup(dino, name.as_bytes()).unwrap().ino;
                fs.setattr(
                    ino,
                    &SetAttr {
                        size: Some(size),
                        ..Default::default()
                    },
                    &cred,
                )
                .unwrap();
                m.files[id].resize(size as usize, 0);
                *counts.entry("truncate").or_default() += 1;
            }
            (50..=57, Some(id)) => {
                let off = rng.below(MAX_SIZE);
                let len = rng.below(64 * 1024);
                let ino = fs.lookup(dino, name.as_bytes()).unwrap().ino;
                fs.punch(ino, off, len).unwrap();
                let f = &mut m.files[id];
                let s = (off as usize).min(f.len());
                let e = ((off + len) as usize).min(f.len());
                f[s..e].fill(0);
                *counts.entry("punch").or_default() += 1;
            }
            (58..=67, Some(_)) => {
                let Some((to_dir, to_name, to_path)) = pick_name(&mut rng, &m) else {
                    continue;
                };
                let tino = resolve(&fs, to_dir);
                fs.rename(
                    dino,
                    name.as_bytes(),
                    tino,
                    to_name.as_bytes(),
                    false,
                    &cred,
                )
                .unwrap();
                let id = m.names[&path];
                if m.names.get(&to_path) != Some(&id) {
                    m.names.remove(&path);
                    m.names.insert(to_path, id);
                }
                *counts.entry("rename").or_default() += 1;
            }
            (68..=75, Some(id)) => {
                let Some((to_dir, to_name, to_path)) = pick_name(&mut rng, &m) else {
                    continue;
                };
                let ino = fs.lookup(dino, name.as_bytes()).unwrap().ino;
                let r = fs.link(ino, resolve(&fs, to_dir), to_name.as_bytes(), &cred);
                match m.names.entry(to_path) {
                    std::collections::btree_map::Entry::Occupied(_) => assert!(
                        matches!(r, Err(FsError::Exists)),
                        "link over an existing name"
                    ),
                    std::collections::btree_map::Entry::Vacant(v) => {
                        r.unwrap();
                        v.insert(id);
                    }
                }
                *counts.entry("link").or_default() += 1;
            }
            (76..=89, Some(_)) => {
                fs.unlink(dino, name.as_bytes(), &cred).unwrap();
                m.names.remove(&path);
                *counts.entry("unlink").or_default() += 1;
            }
            (90..=94, None) => {
                assert!(matches!(
                    fs.unlink(dino, name.as_bytes(), &cred),
                    Err(FsError::NotFound(_))
                ));
                *counts.entry("unlink-missing").or_default() += 1;
            }
            (95..=99, _) if !dir.is_empty() => {
                let (parent, dname) = split(dir);
                let r = fs.rmdir(resolve(&fs, parent), dname.as_bytes(), &cred);
                let empty = !m.names.keys().any(|k| split(k).0 == dir);
                if empty {
                    r.unwrap();
                    m.dirs.remove(dir);
                } else {
                    assert!(matches!(r, Err(FsError::NotEmpty)));
                }
                *counts.entry("rmdir").or_default() += 1;
            }
            _ => continue,
        }
        if i % 2000 == 1999 {
            compare(&fs, &m);
        }
    }
    compare(&fs, &m);
    drop(fs);
    drop(ds);
    pool.export().unwrap();
    drop(pool);
    let pool = pool_on(&devs, false);
    let ds = Datasets::new(pool.clone()).unwrap();
    let fs = ds.open("tank/fs").unwrap();
    compare(&fs, &m);
    let report = pool.check().unwrap();
    assert!(
        report.problems.is_empty(),
        "pool check: {:?}",
        report.problems
    );
    println!("shadow: {ops} operations, no mismatch: {counts:?}");
}
