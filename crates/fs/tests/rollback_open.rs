//! A rollback of a filesystem that stays open (as a share or a mount holds it), with
//! other threads creating, writing and reading in it the whole time: it pauses them
//! and never deadlocks; afterwards the files are the snapshot's, the instance the
//! holders keep shows them, files that exist in both keep their (object,
//! generation) names, the open files that no longer exist are reported, and the
//! unlinked set is the snapshot's: an open file unlinked after the snapshot has its
//! name back, one unlinked before it is still freed on its last close. The pool
//! checks clean, and again after an export and import.

#[path = "../../pool/tests/common/mod.rs"]
mod common;
use common::*;

use fs::{Cred, Datasets, FsError, Kind};
use pool::Pool;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vdev::Layout;

fn file(fs: &fs::Filesystem, name: &str, data: &[u8]) -> fs::Attr {
    let a = fs
        .create(1, name.as_bytes(), Kind::File, 0o644, 0, &Cred::root())
        .unwrap();
    fs.write(a.ino, 0, data).unwrap();
    fs.getattr(a.ino).unwrap()
}

fn names(fs: &fs::Filesystem) -> Vec<String> {
    let mut v: Vec<String> = fs
        .readdir(1, 0, 10_000)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .filter(|n| n != "." && n != "..")
        .collect();
    v.sort();
    v
}

#[test]
fn a_filesystem_in_use_rolls_back_in_place_under_load() {
    let devs = sim_devices(3, 11, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let ds = Datasets::new(pool.clone()).unwrap();
    ds.create("tank/home", &[]).unwrap();
    let fs = ds.open("tank/home").unwrap();
    let root = Cred::root();
    let kept = file(&fs, "kept", b"as in the snapshot");
    // Unlinked while open before the snapshot: an orphan in it.
    let early = file(&fs, "early-orphan", b"orphan");
    fs.opened(early.ino);
    fs.unlink(1, b"early-orphan", &root).unwrap();
    let renamed_back = file(&fs, "unlinked-later", b"has a name in the snapshot");
    ds.snapshot("tank/home@before").unwrap();

    fs.write(kept.ino, 0, b"CHANGED after the snapshot")
        .unwrap();
    let new = file(&fs, "new", b"born after the snapshot");
    fs.opened(new.ino);
    fs.opened(kept.ino);
    fs.opened(renamed_back.ino);
    fs.unlink(1, b"unlinked-later", &root).unwrap();
    assert_eq!(names(&fs), ["kept", "new"]);

    // Load from other threads for the whole rollback.
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let (fs, stop) = (fs.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("w{t}-{n}");
                    if let Ok(a) =
                        fs.create(1, name.as_bytes(), Kind::File, 0o644, 0, &Cred::root())
                    {
                        let _ = fs.write(a.ino, 0, &[t as u8; 3000]);
                        let _ = fs.read(a.ino, 0, 3000);
                    }
                    let _ = fs.getattr(kept.ino);
                    let _ = fs.read(kept.ino, 0, 64);
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut reported = Vec::new();
    let gone = ds
        .rollback_with("tank/home@before", false, &mut |f, g| {
            assert_eq!(f.name(), "tank/home");
            reported = g.to_vec();
        })
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let ops: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(ops > 10, "the load ran ({ops} rounds)");
    assert_eq!(gone, [new.ino]);
    assert_eq!(reported, gone);

    // The holders' instance shows the snapshot (plus what the load created since).
    let after = names(&fs);
    let before_load: Vec<&String> = after.iter().filter(|n| !n.starts_with('w')).collect();
    assert_eq!(before_load, ["kept", "unlinked-later"]);
    assert_eq!(fs.read(kept.ino, 0, 100).unwrap(), b"as in the snapshot");
    // Same object, same generation: its handles stay good; the new file's do not.
    assert!(fs.getattr_gen(kept.ino, kept.generation).is_ok());
    assert!(fs
        .getattr_gen(renamed_back.ino, renamed_back.generation)
        .is_ok());
    assert!(matches!(
        fs.getattr_gen(new.ino, new.generation),
        Err(FsError::NotFound(_))
    ));
    // The file unlinked after the snapshot has its name back and is no orphan: its
    // last close keeps it. The one unlinked before is freed on its last close.
    fs.released(renamed_back.ino).unwrap();
    assert!(fs.lookup(1, b"unlinked-later").is_ok());
    assert!(fs.getattr(early.ino).is_ok());
    fs.released(early.ino).unwrap();
    assert!(fs.getattr(early.ino).is_err());
    // The vanished file's open is forgotten; releasing it is harmless.
    fs.released(new.ino).unwrap();
    fs.released(kept.ino).unwrap();
    // It keeps working: a write after the rollback. A new file does not get the id of
    // one that vanished (or of one the load made before the rollback).
    fs.write(kept.ino, 0, b"written after").unwrap();
    let fresh = file(&fs, "fresh", b"new after the rollback");
    assert!(fresh.ino > new.ino, "{} reuses a vanished id", fresh.ino);
    drop(fs);
    pool.sync().unwrap();
    assert!(pool.check().unwrap().problems.is_empty());
    drop(ds);
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import(args(&devs), Some("tank"), opts()).unwrap();
    assert!(pool.check().unwrap().problems.is_empty());
    let ds = Datasets::new(pool.clone()).unwrap();
    let fs = ds.open("tank/home").unwrap();
    assert_eq!(fs.read(kept.ino, 0, 13).unwrap(), b"written after");
}

#[test]
fn a_volume_in_use_refuses_a_rollback() {
    let devs = sim_devices(3, 12, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let ds = Datasets::new(pool.clone()).unwrap();
    ds.create_volume(
        "tank/vol",
        &fs::VolumeSpec {
            volsize: 1 << 20,
            volblocksize: None,
            sparse: false,
        },
        &[],
    )
    .unwrap();
    ds.snapshot("tank/vol@s").unwrap();
    let lun = ds.open_volume("tank/vol").unwrap();
    assert!(matches!(
        ds.rollback_to("tank/vol@s", false),
        Err(FsError::Busy(m)) if m.contains("LUN")
    ));
    drop(lun);
    ds.rollback_to("tank/vol@s", false).unwrap();
}
