//! Objects on a pool of simulated devices: writes, reads, holes, frees, persistence
//! across export/import, every compression and checksum, and a clean ENOSPC.

mod common;

use common::*;
use pool::checksum::ChecksumKind;
use pool::compress::Compression;
use pool::PoolError;
use std::sync::Arc;
use vdev::Layout;

#[test]
fn write_sync_import_read_back_on_every_layout() {
    for (layout, n) in [
        (Layout::Disk, 1),
        (Layout::Mirror, 2),
        (Layout::Mirror, 3),
        (Layout::RaidZ { nparity: 1 }, 3),
        (Layout::RaidZ { nparity: 2 }, 6),
        (Layout::RaidZ { nparity: 3 }, 7),
    ] {
        let devs = sim_devices(n, 1, None);
        let pool = create_pool(layout, &devs);
        let os = pool.create_objset("tank/fs", "{}").unwrap();
        let mut rng = Rng(n as u64);
        let a = new_file(&pool, os, 128 * 1024, Compression::Off);
        let b = new_file(&pool, os, 4096, Compression::Lz4);
        let data_a = rng.bytes(1_000_003);
        let data_b = rng.mixed(300_000);
        pool.write(os, a, 0, &data_a).unwrap();
        pool.write(os, b, 12345, &data_b).unwrap();
        // Visible before the sync.
        assert_eq!(pool.read(os, a, 0, data_a.len()).unwrap(), data_a);
        pool.sync().unwrap();
        assert_eq!(pool.read(os, b, 12345, data_b.len()).unwrap(), data_b);
        pool.export().unwrap();
        drop(pool);

        let pool = import(&devs);
        let os2 = pool.objset_id("tank/fs").unwrap();
        assert_eq!(os2, os);
        assert_eq!(
            pool.read(os, a, 0, data_a.len()).unwrap(),
            data_a,
            "{layout:?}"
        );
        let got = pool.read(os, b, 0, 12345 + data_b.len()).unwrap();
        assert!(got[..12345].iter().all(|&x| x == 0));
        assert_eq!(&got[12345..], &data_b[..]);
        let report = pool.check().unwrap();
        assert!(
            report.problems.is_empty(),
            "{layout:?}: {:?}",
            report.problems
        );
    }
}

#[test]
fn every_compression_and_checksum_round_trips() {
    let devs = sim_devices(3, 2, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let os = pool.create_objset("tank", "{}").unwrap();
    let mut rng = Rng(7);
    let algs: Vec<Compression> = [
        "off", "lzjb", "gzip-1", "gzip-6", "gzip-9", "lz4", "zstd", "zstd-19",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    let mut files = Vec::new();
    for (i, alg) in algs.iter().enumerate() {
        for ck in [ChecksumKind::Fletcher4, ChecksumKind::Blake3] {
            let obj = pool.create_object(os, 19, 32 * 1024, *alg, ck).unwrap();
            let data = if i % 2 == 0 {
                rng.mixed(200_000)
            } else {
                rng.bytes(100_000)
            };
            pool.write(os, obj, 0, &data).unwrap();
            files.push((obj, data));
        }
    }
    pool.sync().unwrap();
    pool.export().unwrap();
    drop(pool);
    let pool = import(&devs);
    for (obj, data) in &files {
        assert_eq!(&pool.read(os, *obj, 0, data.len()).unwrap(), data);
    }
    // Compressible data really was stored smaller.
    let st = pool.status();
    assert!(st.allocated_bytes > 0);
    assert!(pool.check().unwrap().problems.is_empty());
}

#[test]
fn holes_overwrites_and_frees() {
    let devs = sim_devices(2, 3, None);
    let pool = create_pool(Layout::Mirror, &devs);
    let os = pool.create_objset("tank", "{}").unwrap();
    let f = new_file(&pool, os, 8192, Compression::Off);
    let mut rng = Rng(3);
    let mut shadow = vec![0u8; 4 << 20];
    // A sparse write far out forces a multi-level tree.
    let far = 8192u64 * 3000;
    let tail = rng.bytes(8192);
    pool.write(os, f, far, &tail).unwrap();
    for round in 0..6 {
        for _ in 0..40 {
            let off = rng.below(shadow.len() as u64 - 20_000) as usize;
            let len = 1 + rng.below(20_000) as usize;
            let d = rng.bytes(len);
            shadow[off..off + len].copy_from_slice(&d);
            pool.write(os, f, off as u64, &d).unwrap();
        }
        let off = rng.below(shadow.len() as u64 / 2) as usize;
        let len = rng.below(200_000) as usize;
        shadow[off..off + len].fill(0);
        pool.free_range(os, f, off as u64, len as u64).unwrap();
        if round % 2 == 0 {
            pool.sync().unwrap();
        }
        assert_eq!(pool.read(os, f, 0, shadow.len()).unwrap(), shadow);
    }
    pool.sync().unwrap();
    assert_eq!(pool.read(os, f, far, 8192).unwrap(), tail);
    let before = pool.status().allocated_bytes;
    pool.free_object(os, f).unwrap();
    assert!(matches!(
        pool.read(os, f, 0, 1),
        Err(PoolError::NotFound(_))
    ));
    for _ in 0..4 {
        pool.sync().unwrap();
    }
    let after = pool.status().allocated_bytes;
    assert!(
        after < before / 2,
        "freeing the object returned space ({before} -> {after})"
    );
    let report = pool.check().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn full_pool_reports_enospc_and_stays_usable() {
    let devs = sim_devices(1, 4, None);
    let pool = create_pool(Layout::Disk, &devs);
    let os = pool.create_objset("tank", "{}").unwrap();
    let f = new_file(&pool, os, 128 * 1024, Compression::Off);
    let mut rng = Rng(4);
    let chunk = rng.bytes(1 << 20);
    let mut written = 0u64;
    let err = loop {
        match pool.write(os, f, written, &chunk) {
            Ok(()) => written += chunk.len() as u64,
            Err(e) => break e,
        }
        assert!(
            written < DEV_SIZE,
            "a 64 MiB device cannot take {written} bytes"
        );
    };
    assert!(matches!(err, PoolError::NoSpace), "{err}");
    assert!(written > 16 << 20);
    pool.sync().unwrap();
    // Freeing makes room again, and the pool still commits.
    pool.free_range(os, f, 0, written).unwrap();
    for _ in 0..4 {
        pool.sync().unwrap();
    }
    pool.write(os, f, 0, &chunk).unwrap();
    pool.sync().unwrap();
    assert_eq!(pool.read(os, f, 0, chunk.len()).unwrap(), chunk);
    assert!(pool.check().unwrap().problems.is_empty());
}

#[test]
fn many_small_objects_and_objset_destroy() {
    let devs = sim_devices(3, 5, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let os = pool
        .create_objset("tank/many", "{\"compression\":\"lz4\"}")
        .unwrap();
    let mut objs = Vec::new();
    for i in 0..500u32 {
        let o = new_file(&pool, os, 512, Compression::Lz4);
        pool.write(os, o, 0, &i.to_le_bytes()).unwrap();
        pool.set_bonus(os, o, &i.to_be_bytes(), Some(i as u64))
            .unwrap();
        objs.push(o);
    }
    pool.sync().unwrap();
    pool.export().unwrap();
    drop(pool);
    let pool = import(&devs);
    for (i, o) in objs.iter().enumerate() {
        assert_eq!(pool.read(os, *o, 0, 4).unwrap(), (i as u32).to_le_bytes());
        let info = pool.object_info(os, *o).unwrap();
        assert_eq!(info.bonus, (i as u32).to_be_bytes());
        assert_eq!(info.generation, i as u64);
    }
    let used = pool.status().allocated_bytes;
    pool.destroy_objset(os).unwrap();
    for _ in 0..4 {
        pool.sync().unwrap();
    }
    assert!(pool.status().allocated_bytes < used);
    assert!(pool.objset_id("tank/many").is_none());
    assert!(pool.check().unwrap().problems.is_empty());
}

/// The object cache bound of the eviction tests: also the smallest share an object
/// set gets, so the one filesystem of these tests has all of it.
const OBJECT_CACHE_BOUND: usize = 1024;

/// A RAID-Z1 pool of three sim devices (from `seed`) holding at most `bound` objects.
fn pool_with_object_cache(seed: u64, bound: usize) -> (Vec<Arc<vdev::SimDevice>>, Arc<pool::Pool>) {
    let devs = sim_devices(3, seed, None);
    let pool = create_pool_with(
        Layout::RaidZ { nparity: 1 },
        &devs,
        pool::PoolOptions {
            object_cache_max: bound,
            ..opts()
        },
    );
    (devs, pool)
}

/// Loaded objects stay within the pool's object cache bound after each txg (reads
/// alone load objects too); evicted objects read back with their contents and
/// attributes, and can be changed again and survive an import.
#[test]
fn clean_objects_are_evicted_past_the_cache_bound() {
    const BOUND: usize = OBJECT_CACHE_BOUND;
    let (devs, pool) = pool_with_object_cache(9, BOUND);
    let os = pool.create_objset("tank/many", "{}").unwrap();
    let n = 3 * BOUND as u32;
    let objs: Vec<u64> = (0..n)
        .map(|i| {
            let o = new_file(&pool, os, 512, Compression::Off);
            pool.write(os, o, 0, &i.to_le_bytes()).unwrap();
            pool.set_bonus(os, o, &i.to_be_bytes(), Some(i as u64))
                .unwrap();
            o
        })
        .collect();
    // Objects with changes are never dropped.
    assert!(pool.loaded_objects(os).unwrap() >= n as usize);
    pool.sync().unwrap();
    assert!(pool.loaded_objects(os).unwrap() <= BOUND);
    let check = |pool: &pool::Pool, first: u32| {
        for (i, &o) in objs.iter().enumerate() {
            let v = if (i as u32) < 100 {
                first + i as u32
            } else {
                i as u32
            };
            assert_eq!(
                pool.read(os, o, 0, 4).unwrap(),
                v.to_le_bytes(),
                "object {o}"
            );
            let info = pool.object_info(os, o).unwrap();
            assert_eq!(info.bonus, (i as u32).to_be_bytes());
            assert_eq!(info.generation, i as u64);
        }
    };
    check(&pool, 0);
    assert!(
        pool.loaded_objects(os).unwrap() > BOUND,
        "reads load objects"
    );
    pool.sync().unwrap(); // nothing changed; the bound still holds
    assert!(pool.loaded_objects(os).unwrap() <= BOUND);
    // The first objects were read longest ago, so they are the evicted ones: writing
    // them loads each again.
    let loaded = pool.loaded_objects(os).unwrap();
    for (i, &o) in objs.iter().take(100).enumerate() {
        pool.write(os, o, 0, &(1_000_000 + i as u32).to_le_bytes())
            .unwrap();
    }
    assert_eq!(pool.loaded_objects(os).unwrap(), loaded + 100);
    pool.sync().unwrap();
    pool.export().unwrap();
    drop(pool);
    let pool = import(&devs);
    check(&pool, 1_000_000);
    assert!(pool.check().unwrap().problems.is_empty());
}

/// Objects created since the last sync count as the most recently used: past the
/// bound, the eviction after that sync drops older objects, never the new files.
#[test]
fn new_objects_are_not_the_first_evicted() {
    const BOUND: usize = OBJECT_CACHE_BOUND;
    let (_devs, pool) = pool_with_object_cache(12, BOUND);
    let os = pool.create_objset("tank/new", "{}").unwrap();
    let old: Vec<u64> = (0..BOUND)
        .map(|_| new_file(&pool, os, 512, Compression::Off))
        .collect();
    pool.sync().unwrap();
    for &o in &old {
        pool.object_info(os, o).unwrap();
    }
    assert_eq!(pool.loaded_objects(os).unwrap(), BOUND);
    let new: Vec<u64> = (0..BOUND / 2)
        .map(|_| new_file(&pool, os, 512, Compression::Off))
        .collect();
    pool.sync().unwrap();
    let loaded = pool.loaded_objects(os).unwrap();
    assert!(loaded <= BOUND, "{loaded} objects stay loaded");
    // Every new object is still in memory: changing each one loads nothing.
    for (i, &o) in new.iter().enumerate() {
        pool.write(os, o, 0, &(i as u32).to_le_bytes()).unwrap();
    }
    assert_eq!(pool.loaded_objects(os).unwrap(), loaded);
    // The evicted ones were old: touching every old object loads them back.
    for &o in &old {
        pool.object_info(os, o).unwrap();
    }
    assert_eq!(
        pool.loaded_objects(os).unwrap(),
        BOUND + BOUND / 2,
        "old objects come back"
    );
}

/// A dnode not in memory is read before the object set's lock is taken to load it (as
/// read-ahead, so other callers need not wait on that device read): loading a cold
/// object then finds its dnode block in the ARC.
#[test]
fn cold_dnodes_are_read_before_the_objset_lock_is_taken() {
    let devs = sim_devices(3, 11, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let os = pool.create_objset("tank/cold", "{}").unwrap();
    let objs: Vec<u64> = (0..200u32)
        .map(|i| {
            let o = new_file(&pool, os, 4096, Compression::Off);
            pool.set_bonus(os, o, &i.to_le_bytes(), Some(i as u64))
                .unwrap();
            o
        })
        .collect();
    pool.sync().unwrap();
    pool.export().unwrap();
    drop(pool);
    let pool = import(&devs); // an empty ARC, nothing loaded
    for (i, &o) in objs.iter().enumerate().step_by(37) {
        let before = pool.status().arc;
        let info = pool.object_info(os, o).unwrap();
        let after = pool.status().arc;
        assert_eq!(info.bonus, (i as u32).to_le_bytes());
        // Indirect blocks on the way count as demand reads; the dnode block itself is
        // read ahead of the load, then found in the ARC by it.
        assert!(
            after.prefetch_misses > before.prefetch_misses,
            "object {o}: the dnode block was not read ahead of the load"
        );
        assert!(after.demand_hits > before.demand_hits);
        let again = pool.status().arc;
        pool.object_info(os, o).unwrap();
        let last = pool.status().arc;
        assert_eq!(
            (last.demand_misses, last.prefetch_misses),
            (again.demand_misses, again.prefetch_misses),
            "object {o}: a loaded object reads nothing"
        );
    }
}

/// Writes racing the sync of their object's free are refused, never taken: a write
/// taken between that txg's quiesce and its install was dropped with the object and
/// left it listed as dirty, and the next quiesce panicked.
#[test]
fn writes_racing_the_sync_of_a_free_are_refused() {
    let devs = sim_devices(3, 21, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let os = pool.create_objset("tank/race", "{}").unwrap();
    let mut refused = 0u64;
    for round in 0..100 {
        let obj = new_file(&pool, os, 4096, Compression::Off);
        pool.write(os, obj, 0, b"x").unwrap();
        pool.sync().unwrap();
        pool.free_object(os, obj).unwrap();
        std::thread::scope(|scope| {
            let syncing = scope.spawn(|| pool.sync());
            while !syncing.is_finished() {
                match pool.write(os, obj, 0, b"late") {
                    Err(PoolError::NotFound(_)) => refused += 1,
                    other => panic!("round {round}: a write to a freed object: {other:?}"),
                }
            }
            syncing.join().unwrap().unwrap();
        });
    }
    assert!(refused > 0);
    pool.sync().unwrap();
    assert!(pool.check().unwrap().problems.is_empty());
}

#[test]
fn bad_arguments_are_refused() {
    let devs = sim_devices(2, 6, None);
    assert!(pool::Pool::create(
        "9bad",
        vec![pool::pool::TopArg {
            layout: Layout::Mirror,
            devices: args(&devs)
        }],
        vec![],
        vec![],
        opts()
    )
    .is_err());
    let pool = create_pool(Layout::Mirror, &devs);
    // Devices of a live pool cannot be reused.
    assert!(matches!(
        pool::Pool::create(
            "other",
            vec![pool::pool::TopArg {
                layout: Layout::Mirror,
                devices: args(&devs)
            }],
            vec![],
            vec![],
            opts()
        ),
        Err(PoolError::Exists(_))
    ));
    let os = pool.create_objset("tank", "{}").unwrap();
    assert!(pool.create_objset("tank", "{}").is_err());
    assert!(pool
        .create_object(os, 19, 1000, Compression::Off, ChecksumKind::Fletcher4)
        .is_err());
    assert!(pool.read(os, 99, 0, 10).is_err());
    assert!(pool.read(777, 1, 0, 10).is_err());
}

#[test]
fn l2arc_serves_evicted_blocks_and_survives_a_bad_cache_device() {
    let devs = sim_devices(3, 30, None);
    let cache = vdev::SimDevice::new(DEV_SIZE, 31);
    let mut o = opts();
    o.arc_max_bytes = Some(2 << 20);
    o.prefetch = false;
    let pool = pool::Pool::create(
        "tank",
        vec![pool::pool::TopArg {
            layout: Layout::RaidZ { nparity: 1 },
            devices: args(&devs),
        }],
        vec![],
        vec![pool::pool::DeviceArg {
            path: "cache0".into(),
            device: cache.clone(),
        }],
        o,
    )
    .unwrap();
    let os = pool.create_objset("tank/fs", "{}").unwrap();
    let f = new_file(&pool, os, 128 * 1024, Compression::Off);
    let mut rng = Rng(30);
    let data = rng.bytes(16 << 20);
    pool.write(os, f, 0, &data).unwrap();
    pool.sync().unwrap();
    // Reading 16 MiB through a 2 MiB ARC evicts most blocks toward the cache device,
    // whose writer thread feeds it in the background: read until it has, and has
    // served, or a minute has passed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        assert_eq!(pool.read(os, f, 0, data.len()).unwrap(), data);
        let l2 = pool.status().l2arc.unwrap();
        if (l2.written_bytes > 4 << 20 && l2.hits > 0) || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let l2 = pool.status().l2arc.unwrap();
    assert!(l2.written_bytes > 4 << 20, "{l2:?}");
    assert!(l2.hits > 0, "{l2:?}");
    // A cache device that returns garbage costs speed, never correctness. The feed
    // thread may still be writing blocks the last pass evicted (a loaded machine lags),
    // and what it writes after the corruption is good again: corrupt and read until a
    // read has met garbage, every pass returning the right data.
    let (start, len) = label_area(&cache);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        cache.corrupt_range(start, len, 7);
        assert_eq!(pool.read(os, f, 0, data.len()).unwrap(), data);
        let l2 = pool.status().l2arc.unwrap();
        if l2.bad_reads > 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{l2:?}");
    }
}

fn label_area(dev: &vdev::SimDevice) -> (u64, u64) {
    use vdev::Device;
    vdev::label::data_area(dev.size_bytes())
}

/// A file of `bytes` random bytes in 128K records on a new pool of `layout` over `n`
/// simulated devices, written and the pool imported again (nothing in its ARC), with
/// read-ahead on or off: (devices, pool, objset, file, the bytes).
type ColdFile = (
    Vec<Arc<vdev::SimDevice>>,
    Arc<pool::Pool>,
    u64,
    u64,
    Vec<u8>,
);
fn cold_file(layout: Layout, n: usize, seed: u64, bytes: usize, prefetch: bool) -> ColdFile {
    let devs = sim_devices(n, seed, None);
    let pool = create_pool(layout, &devs);
    let os = pool.create_objset("tank/fs", "{}").unwrap();
    let f = new_file(&pool, os, 128 * 1024, Compression::Off);
    let data = Rng(seed).bytes(bytes);
    pool.write(os, f, 0, &data).unwrap();
    pool.sync().unwrap();
    pool.export().unwrap();
    drop(pool);
    let mut o = opts();
    o.prefetch = prefetch;
    let pool = pool::Pool::import(args(&devs), Some("tank"), o).unwrap();
    (devs, pool, os, f, data)
}

fn sequential_read_hits(prefetch: bool) -> u64 {
    let (_devs, pool, os, f, data) =
        cold_file(Layout::RaidZ { nparity: 1 }, 3, 40, 32 << 20, prefetch);
    let before = pool.status().arc;
    let mut off = 0;
    while off < data.len() {
        let got = pool.read(os, f, off as u64, 128 * 1024).unwrap();
        assert_eq!(got, &data[off..off + 128 * 1024]);
        off += 128 * 1024;
        // Give read-ahead a moment, as a client's think time would.
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    pool.status().arc.demand_hits - before.demand_hits
}

#[test]
fn sequential_reads_are_prefetched() {
    let without = sequential_read_hits(false);
    let with = sequential_read_hits(true);
    // 256 data blocks: with read-ahead most of them are already in the ARC.
    assert!(
        with >= without + 200,
        "read-ahead hits: {with} with, {without} without"
    );
}

/// The read-ahead that a stream of 8 MiB of 128K reads leaves unread in an ARC of
/// `arc_mib`, once the read-ahead threads are done.
fn unread_read_ahead_after_a_stream(arc_mib: u64) -> u64 {
    let (devs, pool, os, f, data) = cold_file(Layout::RaidZ { nparity: 1 }, 4, 43, 96 << 20, true);
    drop(pool);
    let mut o = opts();
    o.arc_max_bytes = Some(arc_mib << 20);
    let pool = pool::Pool::import(args(&devs), Some("tank"), o).unwrap();
    for off in (0..8usize << 20).step_by(128 * 1024) {
        let got = pool.read(os, f, off as u64, 128 * 1024).unwrap();
        assert_eq!(got, &data[off..off + 128 * 1024]);
    }
    // Settled: the unread figure has not moved for half a second.
    let mut last = u64::MAX;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let now = pool.status().arc.prefetch_unread_bytes;
        if now == last || std::time::Instant::now() > deadline {
            // Every job has ended and given its bytes back.
            assert_eq!(pool.read_ahead_pending_bytes(), 0);
            return now;
        }
        last = now;
    }
}

/// A lone stream reads up to 64 MiB ahead while the read-ahead budget (half the
/// ARC) has room, and the normal 32 MiB when it has none.
#[test]
fn read_ahead_reaches_further_while_the_arc_has_room() {
    let roomy = unread_read_ahead_after_a_stream(512);
    assert!(
        roomy > 40 << 20,
        "{} MiB read ahead in a 512 MiB ARC",
        roomy >> 20
    );
    assert!(roomy <= 64 << 20, "{} MiB read ahead", roomy >> 20);
    // Half of 48 MiB is less than the normal distance: no room to go further.
    let tight = unread_read_ahead_after_a_stream(48);
    assert!(
        tight > 16 << 20,
        "{} MiB read ahead in a 48 MiB ARC",
        tight >> 20
    );
    assert!(
        tight <= 32 << 20,
        "{} MiB read ahead in a 48 MiB ARC",
        tight >> 20
    );
}

/// Reads held at the disk of a one-disk pool once each of `streams` readers of one
/// 96 MiB file (each reading its own part of it in order, from the part's start), gone
/// through its read-ahead, waits on the disk. The disk has a head, so read-ahead jobs
/// are 4 MiB (a 1 MiB job is held by the worker count first).
fn read_ahead_at_the_disk(per_stream_bytes: u64, streams: usize) -> usize {
    // One disk large enough for the file (the common devices are 64 MiB).
    let devs = vec![vdev::SimDevice::new(160 << 20, 44)];
    let pool = create_pool(Layout::Disk, &devs);
    let os = pool.create_objset("tank/fs", "{}").unwrap();
    let f = new_file(&pool, os, 128 * 1024, Compression::Off);
    let data = Rng(44).bytes(96 << 20);
    pool.write(os, f, 0, &data).unwrap();
    pool.export().unwrap();
    drop(pool);
    devs[0].set_speed(Some(vdev::SpeedLimit {
        bytes_per_sec: None,
        iops: None,
        seek: std::time::Duration::from_micros(1),
    }));
    let mut o = opts();
    o.arc_max_bytes = Some(512 << 20);
    o.read_ahead_per_stream_bytes = per_stream_bytes;
    let pool = pool::Pool::import(args(&devs), Some("tank"), o).unwrap();
    let mib = 1 << 20;
    let part = 96 * mib / streams;
    let data = Arc::new(data);
    let read = move |pool: &pool::Pool, data: &[u8], off: usize| {
        assert_eq!(
            pool.read(os, f, off as u64, mib).unwrap(),
            &data[off..off + mib]
        );
    };
    // Each stream starts and its window grows; what they read ahead lands.
    for off in (0..8 * mib).step_by(mib) {
        for s in 0..streams {
            read(&pool, &data, s * part + off);
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let landed = |pool: &pool::Pool| {
        while pool.read_ahead_pending_bytes() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    landed(&pool);
    // From here the disk holds every read: each reader goes through what is cached,
    // each read sending more read-ahead, and stops at the first block not in memory.
    devs[0].hold_reads(true);
    let readers: Vec<_> = (0..streams)
        .map(|s| {
            let (pool, data) = (pool.clone(), data.clone());
            std::thread::spawn(move || {
                for off in (s * part + 8 * mib..(s + 1) * part).step_by(mib) {
                    read(&pool, &data, off);
                }
            })
        })
        .collect();
    // Settled: the count has not moved for half a second.
    let mut last = usize::MAX;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let now = devs[0].held_reads();
        if now == last || std::time::Instant::now() > deadline {
            break;
        }
        last = now;
    }
    let held = devs[0].held_reads();
    devs[0].hold_reads(false);
    for reader in readers {
        reader.join().unwrap();
    }
    // A job's bytes leave the count just after its blocks wake their reader.
    landed(&pool);
    assert_eq!(
        pool.read_ahead_pending_bytes(),
        0,
        "every job gave its bytes back"
    );
    held
}

/// A stream has at most `READ_AHEAD_PER_STREAM_BYTES` (six 4 MiB jobs) of read-ahead
/// at the disk; the rest of its window waits its turn in order, so the next job its
/// reader needs is not shared with the whole window at the disk. Without the bound
/// every worker reads for the one stream. The file's blocks still all arrive.
#[test]
fn one_stream_keeps_a_bounded_read_ahead_at_the_disk() {
    let bounded = read_ahead_at_the_disk(pool::READ_AHEAD_PER_STREAM_BYTES, 1);
    assert!(
        (4..=7).contains(&bounded),
        "{bounded} reads at the disk (six jobs and the reader's own at most)"
    );
    // Control: without the bound, all 16 workers hold a job of it.
    let unbounded = read_ahead_at_the_disk(u64::MAX, 1);
    assert!(
        unbounded >= 12,
        "{unbounded} reads at the disk without the bound"
    );
}

/// Two readers of one file, each reading its own half in order, are two streams with
/// a bound each: together they hold more at the disk than one stream's bound lets it
/// (six jobs and its reader's own read), which is what they held when the bound was
/// per file.
#[test]
fn two_readers_of_one_file_have_a_bound_each() {
    let held = read_ahead_at_the_disk(pool::READ_AHEAD_PER_STREAM_BYTES, 2);
    assert!(
        (9..=14).contains(&held),
        "{held} reads at the disk for two streams (six jobs and a reader's own each at most)"
    );
}

/// Reads held at a one-disk pool's device while `pool` reads block 1 of a file it has
/// read block 0 of (so the read continues a stream and its block size is known).
fn reads_held_while_a_stream_continues(prefetch: bool) -> usize {
    let (devs, pool, os, f, data) = cold_file(Layout::Disk, 1, 42, 4 << 20, prefetch);
    assert_eq!(
        pool.read(os, f, 0, 128 * 1024).unwrap(),
        &data[..128 * 1024]
    );
    devs[0].hold_reads(true);
    let reader = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.read(os, f, 128 * 1024, 128 * 1024).unwrap())
    };
    // The demand read reaches the gate; with read-ahead, so does the read-ahead it
    // asked for (blocks 2 and 3). Without, nothing else ever comes: the check then
    // gives the pool a quarter second to show a second read, and releases.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let want = if prefetch { 2 } else { 1 };
    while devs[0].held_reads() < want && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    if !prefetch {
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let held = devs[0].held_reads();
    devs[0].hold_reads(false);
    assert_eq!(reader.join().unwrap(), &data[128 * 1024..256 * 1024]);
    held
}

/// A read that must wait for the disk has queued its read-ahead first: a client that
/// caught up with read-ahead keeps the disk busy ahead of it while it waits, rather
/// than the window standing still until the one slow read comes back.
#[test]
fn a_read_that_waits_on_the_disk_has_queued_its_read_ahead_first() {
    assert_eq!(
        reads_held_while_a_stream_continues(true),
        2,
        "the demand read and its read-ahead are both at the disk"
    );
    // Control: without read-ahead only the demand read is there.
    assert_eq!(reads_held_while_a_stream_continues(false), 1);
}

/// The bytes of a read are the ARC's own buffers: a second read of a cached block
/// hands out the same memory, so a server can send it without copying.
#[test]
fn reads_of_cached_blocks_share_the_arc_buffers() {
    let devs = sim_devices(3, 41, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let os = pool.create_objset("tank/fs", "{}").unwrap();
    let f = new_file(&pool, os, 128 * 1024, Compression::Lz4);
    let data = Rng(41).mixed(300_000);
    pool.write(os, f, 4096, &data).unwrap();
    // Before the sync the bytes come from the dirty buffers, after it from the ARC.
    for synced in [false, true] {
        if synced {
            pool.sync().unwrap();
        }
        let first = pool.read_parts(os, f, 0, 400_000).unwrap();
        let second = pool.read_parts(os, f, 0, 400_000).unwrap();
        assert_eq!(first.len(), 400_000);
        let bytes = first.to_vec();
        assert!(
            bytes[..4096].iter().all(|&b| b == 0),
            "the hole reads as zeros"
        );
        assert_eq!(&bytes[4096..4096 + data.len()], &data[..]);
        assert!(bytes[4096 + data.len()..].iter().all(|&b| b == 0));
        let pointers = |r: &pool::ReadBuf| -> Vec<*const u8> {
            r.slices()
                .filter(|s| s.iter().any(|&b| b != 0))
                .map(|s| s.as_ptr())
                .collect()
        };
        let shared = pointers(&first);
        assert_eq!(shared.len(), 3, "three blocks hold data (synced: {synced})");
        assert_eq!(shared, pointers(&second), "synced: {synced}");
    }
}

/// A cached-only read (what a server thread that must not block asks for) never
/// touches a device: it answers only when every block is in the ARC, with the same
/// bytes as an ordinary read, and a refused one counts no miss, so the ordinary read
/// that follows counts each miss once.
#[test]
fn cached_only_reads_answer_from_the_arc_alone() {
    let devs = sim_devices(3, 42, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let os = pool.create_objset("tank/fs", "{}").unwrap();
    let f = new_file(&pool, os, 128 * 1024, Compression::Off);
    let data = Rng(42).mixed(1 << 20);
    pool.write(os, f, 0, &data).unwrap();
    // Dirty data is in memory: answered before any sync.
    let dirty = pool.read_parts_cached(os, f, 1000, 5000).unwrap();
    assert_eq!(
        dirty.expect("dirty data is cached").to_vec(),
        &data[1000..6000]
    );
    pool.sync().unwrap();
    pool.export().unwrap();
    drop(pool);
    let mut o = opts();
    o.prefetch = false;
    let pool = pool::Pool::import(args(&devs), Some("tank"), o).unwrap();
    let device_reads = || devs.iter().map(|d| d.stats().reads).sum::<u64>();
    // The dnode itself is not loaded yet.
    let (reads, arc) = (device_reads(), pool.status().arc);
    assert!(pool.read_parts_cached(os, f, 0, 4096).unwrap().is_none());
    assert_eq!(device_reads(), reads, "a cached-only read reads no device");
    assert_eq!(pool.status().arc, arc, "and counts nothing");
    // Block 1 read the ordinary way; a read of blocks 1 and 2 is still refused whole.
    let block = 128 * 1024;
    assert_eq!(
        pool.read(os, f, block, 10).unwrap(),
        &data[block as usize..][..10]
    );
    let (reads, arc) = (device_reads(), pool.status().arc);
    assert!(pool
        .read_parts_cached(os, f, block, 2 * block as usize)
        .unwrap()
        .is_none());
    assert_eq!(device_reads(), reads);
    assert_eq!(pool.status().arc, arc);
    let got = pool.read_parts_cached(os, f, block + 7, 1000).unwrap();
    assert_eq!(
        got.expect("block 1 is cached").to_vec(),
        &data[block as usize + 7..][..1000]
    );
    let after = pool.status().arc;
    assert!(after.demand_hits > arc.demand_hits);
    assert_eq!(after.demand_misses, arc.demand_misses);
    assert_eq!(device_reads(), reads);
    // It counts as the same ordinary read does.
    pool.read(os, f, block + 7, 1000).unwrap();
    let ordinary = pool.status().arc;
    assert_eq!(
        ordinary.demand_hits - after.demand_hits,
        after.demand_hits - arc.demand_hits
    );
    let after = ordinary;
    // The ordinary read of the refused range counts one miss for block 2 only.
    assert_eq!(
        pool.read(os, f, block, 2 * block as usize).unwrap(),
        &data[block as usize..3 * block as usize]
    );
    assert_eq!(pool.status().arc.demand_misses, after.demand_misses + 1);
    let whole = pool
        .read_parts_cached(os, f, block, 2 * block as usize)
        .unwrap();
    assert_eq!(
        whole.expect("both cached now").to_vec(),
        &data[block as usize..3 * block as usize]
    );
}

/// Writers held at the dirty-data limit wake a few times per txg they wait through.
/// Each woken writer used to notify all the others, which notified again: on slow
/// disks the held writers spun through every sync (two thirds of the CPU of eight
/// streams). Eight writers on slow simulated disks with a small limit: wake-ups per
/// txg stay within a bound the old ping-pong exceeded by orders of magnitude.
#[test]
fn writers_held_at_the_dirty_limit_do_not_spin() {
    const WRITERS: u64 = 8;
    const PER_WRITER: usize = 8 << 20;
    let devs = sim_devices(3, 77, None);
    for d in &devs {
        d.set_speed(Some(vdev::SpeedLimit {
            bytes_per_sec: Some(40_000_000),
            iops: None,
            seek: std::time::Duration::from_micros(500),
        }));
    }
    let p = create_pool_with(
        Layout::RaidZ { nparity: 1 },
        &devs,
        pool::PoolOptions {
            sync_thread: true,
            deterministic_io: false,
            dirty_sync_bytes: 1 << 20,
            dirty_max_bytes: 4 << 20,
            ..opts()
        },
    );
    let os = p.create_objset("tank/held", "{}").unwrap();
    let objs: Vec<u64> = (0..WRITERS)
        .map(|_| new_file(&p, os, 128 << 10, Compression::Off))
        .collect();
    let first_txg = p.synced_txg();
    std::thread::scope(|s| {
        for (i, &obj) in objs.iter().enumerate() {
            let p = &p;
            s.spawn(move || {
                let data = Rng(i as u64 + 5).bytes(128 << 10);
                for off in (0..PER_WRITER).step_by(128 << 10) {
                    p.write(os, obj, off as u64, &data).unwrap();
                }
            });
        }
    });
    p.sync().unwrap();
    let txgs = p.synced_txg() - first_txg;
    let wakeups = p.throttle_wakeups();
    // Per txg a held writer is woken by: the limit's request, the threshold crossed,
    // the quiesce, the commit, and its own 100 ms timeouts.
    let bound = WRITERS * 8 * txgs.max(1);
    eprintln!("held writers: {wakeups} wake-ups over {txgs} txgs");
    assert!(txgs >= 4, "the limit never held the writers: {txgs} txgs");
    assert!(
        wakeups <= bound,
        "{wakeups} wake-ups of held writers over {txgs} txgs (bound {bound})"
    );
    for (i, &obj) in objs.iter().enumerate() {
        let data = Rng(i as u64 + 5).bytes(128 << 10);
        assert_eq!(
            p.read(os, obj, PER_WRITER as u64 - (128 << 10), 128 << 10)
                .unwrap(),
            data
        );
    }
}

/// Space a walk kept from reuse (`hold_frees`, as a reader's pin does) returns the
/// moment the walk ends, not at the next commit: a writer waiting for space on an idle
/// pool would otherwise wait for a commit nothing else asks for, and get ENOSPC.
#[test]
fn frees_held_back_by_a_walk_return_when_it_ends() {
    let devs = sim_devices(3, 4, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let os = pool.create_objset("tank/fs", "{}").unwrap();
    let obj = new_file(&pool, os, 128 * 1024, Compression::Off);
    pool.write(os, obj, 0, &Rng(4).bytes(4 << 20)).unwrap();
    pool.sync().unwrap();
    let hold = pool.hold_frees();
    pool.free_object(os, obj).unwrap();
    for _ in 0..4 {
        pool.sync().unwrap();
    }
    let held = pool.check().unwrap();
    assert!(held.problems.is_empty(), "{:?}", held.problems);
    assert!(held.deferred_bytes >= 4 << 20, "{held:?}");
    drop(hold);
    let after = pool.check().unwrap();
    assert!(after.problems.is_empty(), "{:?}", after.problems);
    assert_eq!(after.deferred_bytes, 0, "released without another commit");
}
