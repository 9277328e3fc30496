//! Snapshots at the pool level: a snapshot keeps reading what was there when it was
//! taken while the dataset is overwritten, truncated and deleted from; its space is
//! accounted by birth time; destroying snapshots in any order frees exactly what only
//! they held (the pool checks clean and allocation returns to the dataset's own); a
//! rollback restores the snapshot's contents; all of it survives export and import.

mod common;

use common::*;
use pool::checksum::ChecksumKind;
use pool::compress::Compression;
use pool::{Pool, PoolError};
use vdev::Layout;

fn allocated(pool: &Pool) -> u64 {
    pool.sync().unwrap();
    pool.sync().unwrap();
    pool.sync().unwrap();
    let r = pool.check().unwrap();
    assert!(r.problems.is_empty(), "check: {:?}", r.problems);
    r.referenced_bytes
}

#[test]
fn snapshots_keep_their_contents_and_give_space_back() {
    let devs = sim_devices(3, 1, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let os = pool.create_objset("tank/fs", "{}").unwrap();
    let obj = pool
        .create_object(os, 19, 16384, Compression::Off, ChecksumKind::Blake3)
        .unwrap();
    let gone = pool
        .create_object(os, 19, 16384, Compression::Off, ChecksumKind::Blake3)
        .unwrap();
    let v1 = Rng(1).bytes(2 << 20);
    pool.write(os, obj, 0, &v1).unwrap();
    pool.write(os, gone, 0, &v1[..100_000]).unwrap();
    let base = allocated(&pool);

    let s1 = pool.snapshot_create(os, "one").unwrap();
    assert!(matches!(
        pool.snapshot_create(os, "one"),
        Err(PoolError::Exists(_))
    ));
    // Taking a snapshot writes no data.
    assert!(allocated(&pool) < base + (256 << 10));

    // Overwrite half, delete the other object.
    let v2 = Rng(2).bytes(1 << 20);
    pool.write(os, obj, 0, &v2).unwrap();
    pool.free_object(os, gone).unwrap();
    let s2 = pool.snapshot_create(os, "two").unwrap();
    let v3 = Rng(3).bytes(1 << 20);
    pool.write(os, obj, 1 << 20, &v3).unwrap();
    pool.free_range(os, obj, 0, 65536).unwrap();

    // Each snapshot reads what it held.
    assert_eq!(pool.read(s1, obj, 0, v1.len()).unwrap(), v1);
    assert_eq!(pool.read(s1, gone, 0, 100_000).unwrap(), &v1[..100_000]);
    let mut at2 = v2.clone();
    at2.extend_from_slice(&v1[1 << 20..]);
    assert_eq!(pool.read(s2, obj, 0, at2.len()).unwrap(), at2);
    assert!(matches!(
        pool.read(s2, gone, 0, 1),
        Err(PoolError::NotFound(_))
    ));
    let mut live = vec![0u8; 65536];
    live.extend_from_slice(&v2[65536..]);
    live.extend_from_slice(&v3);
    assert_eq!(pool.read(os, obj, 0, live.len()).unwrap(), live);
    // Snapshots are read-only.
    assert!(matches!(
        pool.write(s1, obj, 0, b"x"),
        Err(PoolError::ReadOnly(_))
    ));
    // The dataset cannot go while snapshots hold it.
    assert!(pool.destroy_objset(os).is_err());

    // Space by birth time, as of the last commit: "one" alone holds the first MiB of
    // v1 and the deleted object; "two" alone holds only v2's first 64K (v1's second
    // MiB, overwritten since, is shared by both).
    pool.sync().unwrap();
    let snaps = pool.list_snapshots(Some(os)).unwrap();
    assert_eq!(
        snaps.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["tank/fs@one", "tank/fs@two"]
    );
    let one_unique = snaps[0].unique_bytes;
    let two_unique = snaps[1].unique_bytes;
    assert!(one_unique >= (1 << 20) + 100_000, "one holds {one_unique}");
    assert!(two_unique >= 65536, "two holds {two_unique}");
    assert!(two_unique < 512 << 10, "two holds {two_unique}");

    // Survives export/import.
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import(args(&devs), Some("tank"), opts()).unwrap();
    assert_eq!(pool.read(s1, obj, 0, v1.len()).unwrap(), v1);
    assert_eq!(pool.read(s2, obj, 0, at2.len()).unwrap(), at2);
    assert_eq!(pool.read(os, obj, 0, live.len()).unwrap(), live);

    // Destroying the older one frees what it alone held; the newer still reads.
    let before = allocated(&pool);
    pool.snapshot_destroy(s1).unwrap();
    let after = allocated(&pool);
    assert!(
        before - after >= one_unique,
        "destroy freed {} of {one_unique}",
        before - after
    );
    assert_eq!(pool.read(s2, obj, 0, at2.len()).unwrap(), at2);
    assert!(pool.read(s1, obj, 0, 1).is_err());
    // "two" now alone holds v1's second MiB, which it shared with "one".
    let two_now = pool.list_snapshots(Some(os)).unwrap()[0].unique_bytes;
    assert!(two_now >= two_unique + (1 << 20), "two now holds {two_now}");

    // Rollback to "two": the live data is what "two" held, later blocks are freed.
    pool.snapshot_rollback(s2).unwrap();
    assert_eq!(pool.read(os, obj, 0, at2.len()).unwrap(), at2);
    assert!(matches!(
        pool.read(os, gone, 0, 1),
        Err(PoolError::NotFound(_))
    ));
    // The rolled-back dataset takes writes again without touching the snapshot.
    pool.write(os, obj, 0, b"new life").unwrap();
    assert_eq!(pool.read(s2, obj, 0, at2.len()).unwrap(), at2);

    // Destroying the last snapshot leaves only the dataset's own blocks.
    pool.snapshot_destroy(s2).unwrap();
    let own = allocated(&pool);
    pool.destroy_objset(os).unwrap();
    let empty = allocated(&pool);
    assert!(
        own - empty >= 2 << 20,
        "the dataset's 2 MiB were freed with it"
    );
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import(args(&devs), Some("tank"), opts()).unwrap();
    assert!(pool.check().unwrap().problems.is_empty());
    assert!(pool.list_snapshots(None).unwrap().is_empty());
}

/// Random overwrites with snapshots taken and destroyed in random order: after every
/// step each remaining snapshot reads back exactly, and the pool checks clean.
#[test]
fn random_snapshot_churn_stays_consistent() {
    let devs = sim_devices(2, 5, None);
    let pool = create_pool(Layout::Mirror, &devs);
    let os = pool.create_objset("tank/fs", "{}").unwrap();
    let obj = pool
        .create_object(os, 19, 4096, Compression::Lz4, ChecksumKind::Fletcher4)
        .unwrap();
    let mut rng = Rng(11);
    let mut model = vec![0u8; 512 << 10];
    pool.write(os, obj, 0, &model).unwrap();
    let mut snaps: Vec<(u64, Vec<u8>)> = Vec::new();
    for step in 0..60 {
        for _ in 0..4 {
            let off = rng.below(model.len() as u64 - 20_000) as usize;
            let len = 1 + rng.below(20_000) as usize;
            let data = rng.mixed(len);
            pool.write(os, obj, off as u64, &data).unwrap();
            model[off..off + data.len()].copy_from_slice(&data);
        }
        match rng.below(3) {
            0 => {
                let id = pool.snapshot_create(os, &format!("s{step}")).unwrap();
                snaps.push((id, model.clone()));
            }
            1 if !snaps.is_empty() => {
                let (id, _) = snaps.remove(rng.below(snaps.len() as u64) as usize);
                pool.snapshot_destroy(id).unwrap();
            }
            _ => pool.sync().map(|_| ()).unwrap(),
        }
        for (id, want) in &snaps {
            assert!(
                pool.read(*id, obj, 0, want.len()).unwrap() == *want,
                "step {step}: snapshot {id} changed"
            );
        }
        assert!(pool.read(os, obj, 0, model.len()).unwrap() == model);
        if step % 10 == 9 {
            let r = pool.check().unwrap();
            assert!(r.problems.is_empty(), "step {step}: {:?}", r.problems);
        }
    }
    for (id, _) in snaps.drain(..) {
        pool.snapshot_destroy(id).unwrap();
    }
    let r = pool.check().unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
}

fn space_of(pool: &Pool, os: u64) -> pool::pool::DatasetSpace {
    pool.dataset_spaces()
        .into_iter()
        .find(|(id, _, _)| *id == os)
        .expect("dataset listed")
        .2
}

/// Space figures: a 128K record counts 128K whatever the layout (parity is not
/// charged); unsynced writes show as pending; overwriting after a snapshot moves the
/// old records to the snapshot's share; destroying the snapshot frees it; and all of it
/// is the same after export and import.
#[test]
fn dataset_space_follows_writes_snapshots_and_import() {
    for layout in [Layout::RaidZ { nparity: 2 }, Layout::Mirror] {
        let devs = sim_devices(6, 3, None);
        let pool = create_pool(layout, &devs);
        let os = pool.create_objset("tank/fs", "{}").unwrap();
        let obj = pool
            .create_object(os, 19, 128 * 1024, Compression::Off, ChecksumKind::Blake3)
            .unwrap();
        let data = Rng(5).bytes(4 << 20);
        pool.write(os, obj, 0, &data).unwrap();
        let pending = space_of(&pool, os);
        assert!(
            pending.pending >= 4 << 20,
            "{layout:?}: unsynced writes are charged: {pending:?}"
        );
        allocated(&pool);
        let synced = space_of(&pool, os);
        assert_eq!(synced.pending, 0, "{layout:?}");
        assert_eq!(synced.snapshots, 0, "{layout:?}");
        assert_eq!(
            synced.unique, synced.referenced,
            "{layout:?}: no snapshot yet"
        );
        // 32 records of 128K plus a little metadata (dnodes, one indirect block, in
        // two copies each).
        assert!(
            synced.referenced >= 4 << 20 && synced.referenced < (4 << 20) + (1 << 20),
            "{layout:?}: {synced:?}"
        );

        let snap = pool.snapshot_create(os, "before").unwrap();
        pool.write(os, obj, 0, &Rng(6).bytes(2 << 20)).unwrap();
        allocated(&pool);
        let after = space_of(&pool, os);
        assert!(
            after.snapshots >= 2 << 20 && after.snapshots < (2 << 20) + (256 << 10),
            "{layout:?}: the overwritten half is the snapshot's: {after:?}"
        );
        // Unique: the 2 MiB written since the snapshot plus rewritten metadata, not
        // the 2 MiB both still share.
        assert!(
            after.unique >= 2 << 20 && after.unique < (2 << 20) + (512 << 10),
            "{layout:?}: {after:?}"
        );
        let listed = pool.list_snapshots(Some(os)).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].unique_bytes >= 2 << 20, "{listed:?}");

        pool.export().unwrap();
        drop(pool);
        let pool = import(&devs);
        assert_eq!(
            space_of(&pool, os),
            after,
            "{layout:?}: figures survive import"
        );
        pool.snapshot_destroy(snap).unwrap();
        allocated(&pool);
        let freed = space_of(&pool, os);
        assert_eq!(freed.snapshots, 0, "{layout:?}");
        assert!(freed.referenced.abs_diff(synced.referenced) < 256 << 10);
        pool.free_object(os, obj).unwrap();
        allocated(&pool);
        assert!(
            space_of(&pool, os).referenced < 256 << 10,
            "{layout:?}: {:?}",
            space_of(&pool, os)
        );
    }
}

/// Holds keep a snapshot from every way of destroying it and survive export and
/// import; a rollback to an older snapshot names the newer ones and destroys them
/// only when asked, never a held one, and frees what only they and the later
/// changes held.
#[test]
fn holds_and_rollback_to_an_older_snapshot() {
    let devs = sim_devices(3, 7, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let os = pool.create_objset("tank/fs", "{}").unwrap();
    let obj = pool
        .create_object(os, 19, 16384, Compression::Off, ChecksumKind::Blake3)
        .unwrap();
    let mut rng = Rng(7);
    let v1 = rng.bytes(1 << 20);
    pool.write(os, obj, 0, &v1).unwrap();
    let s1 = pool.snapshot_create(os, "one").unwrap();
    let at_one = allocated(&pool);
    pool.write(os, obj, 0, &rng.bytes(1 << 20)).unwrap();
    let s2 = pool.snapshot_create(os, "two").unwrap();
    pool.write(os, obj, 0, &rng.bytes(1 << 20)).unwrap();
    let s3 = pool.snapshot_create(os, "three").unwrap();
    pool.write(os, obj, 0, &rng.bytes(1 << 20)).unwrap();

    // Holds: placed once per tag, refused twice, listed, kept across import.
    pool.snapshot_hold(s2, "keep").unwrap();
    pool.snapshot_hold(s2, "backup job").unwrap();
    assert!(matches!(
        pool.snapshot_hold(s2, "keep"),
        Err(PoolError::Exists(_))
    ));
    for bad in ["", " padded", &"x".repeat(65), "tab\there"] {
        assert!(
            matches!(
                pool.snapshot_hold(s2, bad),
                Err(PoolError::InvalidArgument(_))
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        pool.snapshot_hold(os, "keep"),
        Err(PoolError::InvalidArgument(_))
    ));
    assert!(matches!(
        pool.snapshot_release(s3, "keep"),
        Err(PoolError::NotFound(_))
    ));
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import(args(&devs), Some("tank"), opts()).unwrap();
    let tags: Vec<String> = pool
        .snapshot_holds(s2)
        .unwrap()
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert_eq!(tags, ["backup job", "keep"]);
    let listed = pool.list_snapshots(Some(os)).unwrap();
    assert_eq!(listed[1].holds, ["backup job", "keep"]);
    assert!(listed[0].holds.is_empty() && listed[2].holds.is_empty());

    // A held snapshot is not destroyed, by hand or by a rollback past it.
    let e = pool.snapshot_destroy(s2).unwrap_err();
    assert!(
        matches!(&e, PoolError::Busy(m) if m.contains("backup job, keep")),
        "{e}"
    );
    // Without destroy_newer the newer snapshots are named and nothing changes.
    let e = pool.snapshot_rollback_to(s1, false).unwrap_err();
    assert!(
        matches!(&e, PoolError::InvalidArgument(m) if m.contains("tank/fs@two, tank/fs@three")),
        "{e}"
    );
    let e = pool.snapshot_rollback_to(s1, true).unwrap_err();
    assert!(
        matches!(&e, PoolError::Busy(m) if m.contains("tank/fs@two")),
        "{e}"
    );
    assert_eq!(pool.snapshot_names(os).len(), 3);

    // Released, the rollback goes through and takes both newer snapshots with it.
    pool.snapshot_release(s2, "keep").unwrap();
    pool.snapshot_release(s2, "backup job").unwrap();
    let before = allocated(&pool);
    pool.snapshot_rollback_to(s1, true).unwrap();
    assert_eq!(
        pool.snapshot_names(os),
        vec![(s1, "tank/fs@one".to_string())]
    );
    assert_eq!(pool.read(os, obj, 0, v1.len()).unwrap(), v1);
    assert_eq!(pool.read(s1, obj, 0, v1.len()).unwrap(), v1);
    assert!(pool.read(s3, obj, 0, 1).is_err());
    // Everything the newer snapshots and later writes held is free again: three
    // MiB of data (and their parity); what is left is within the metadata the
    // directory and space log grew by.
    let after = allocated(&pool);
    assert!(before - after >= 3 << 20, "freed {}", before - after);
    assert!(
        after < at_one + (512 << 10),
        "{after} after, {at_one} at 'one'"
    );
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import(args(&devs), Some("tank"), opts()).unwrap();
    assert_eq!(pool.read(os, obj, 0, v1.len()).unwrap(), v1);
    assert_eq!(pool.snapshot_names(os).len(), 1);
    assert!(pool.check().unwrap().problems.is_empty());
}
