//! Volumes: made with a checked geometry and properties of their own, written and read
//! as a run of blocks, unmapped (space comes back), grown online and never shrunk,
//! snapshotted, rolled back, sent and received byte for byte. A thick volume's writes
//! and overwrites never fail for space however full other datasets make the pool (with
//! a sparse volume in the same place as the negative control, which does fail), and a
//! snapshot it could not honour is refused. Compare-and-write is atomic against
//! another writer.

#[path = "../../pool/tests/common/mod.rs"]
mod common;
use common::*;

use fs::{Cred, Datasets, Durability, FsError, Kind, VolumeSpec};
use pool::Pool;
use std::sync::Arc;
use vdev::Layout;

const MIB: u64 = 1 << 20;

fn setup() -> (Arc<Pool>, Datasets) {
    let devs = sim_devices(3, 11, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let ds = Datasets::new(pool.clone()).unwrap();
    (pool, ds)
}

fn spec(volsize: u64, sparse: bool) -> VolumeSpec {
    VolumeSpec {
        volsize,
        volblocksize: None,
        sparse,
    }
}

fn prop(ds: &Datasets, name: &str, p: &str) -> String {
    ds.info(name)
        .unwrap()
        .prop(p)
        .unwrap_or_else(|| panic!("{name} has no {p}"))
        .to_string()
}

fn check_clean(pool: &Pool) {
    for _ in 0..3 {
        pool.sync().unwrap();
    }
    let r = pool.check().unwrap();
    assert!(r.problems.is_empty(), "check: {:?}", r.problems);
}

#[test]
fn geometry_and_properties_are_checked_and_shown() {
    let (_pool, ds) = setup();
    let bad = |s: VolumeSpec| ds.create_volume("tank/v", &s, &[]).unwrap_err();
    for s in [
        spec(0, false),
        spec(MIB + 512, false),
        spec(2 << 50, true),
        VolumeSpec {
            volsize: MIB,
            volblocksize: Some(2048),
            sparse: false,
        },
        VolumeSpec {
            volsize: MIB,
            volblocksize: Some(256 << 10),
            sparse: false,
        },
        VolumeSpec {
            volsize: MIB,
            volblocksize: Some(12 << 10),
            sparse: false,
        },
    ] {
        assert!(matches!(bad(s.clone()), FsError::Invalid(_)), "{s:?}");
    }
    let err = ds
        .create_volume(
            "tank/v",
            &spec(MIB, false),
            &[("recordsize".into(), "8K".into())],
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("a volume has no recordsize"),
        "{err}"
    );

    let info = ds
        .create_volume(
            "tank/v",
            &VolumeSpec {
                volsize: 8 * MIB,
                volblocksize: Some(8192),
                sparse: false,
            },
            &[("compression".into(), "lz4".into())],
        )
        .unwrap();
    assert_eq!(info.prop("type"), Some("volume"));
    assert_eq!(info.prop("volsize"), Some("8M"));
    assert_eq!(info.prop("volblocksize"), Some("8K"));
    assert_eq!(info.prop("compression"), Some("lz4"));
    assert!(info.prop("recordsize").is_none() && info.prop("quota").is_none());
    let refres: u64 = fs::props::parse_size(info.prop("refreservation").unwrap()).unwrap();
    assert_eq!(refres, fs::volume::thick_refreservation(8 * MIB, 8192));
    assert!(refres > 8 * MIB && refres < 9 * MIB, "{refres}");
    // Held at once: the volume uses its refreservation before any write.
    assert!(prop(&ds, "tank/v", "used").parse::<u64>().unwrap() >= 8 * MIB);
    assert_eq!(prop(&ds, "tank", "type"), "filesystem");

    // A volume is no filesystem, has no children, and its own properties stay its own.
    assert!(matches!(ds.open("tank/v"), Err(FsError::Invalid(_))));
    assert!(matches!(ds.open_volume("tank"), Err(FsError::Invalid(_))));
    assert!(matches!(
        ds.create("tank/v/child", &[]),
        Err(FsError::Invalid(_))
    ));
    for (p, v) in [
        ("volblocksize", Some("16K")),
        ("atime", Some("off")),
        ("quota", Some("1G")),
        ("volsize", None),
        ("volsize", Some("4M")),
        ("volsize", Some("9000000")),
    ] {
        assert!(
            matches!(ds.set("tank/v", p, v), Err(FsError::Invalid(_))),
            "{p}={v:?}"
        );
    }
    assert!(matches!(
        ds.set("tank", "volsize", Some("1G")),
        Err(FsError::Invalid(_))
    ));
    assert_eq!(prop(&ds, "tank/v", "volsize"), "8M");

    // A new compression and checksum apply to the blocks written next, open or not.
    let pool = ds.pool().clone();
    let os = ds.info("tank/v").unwrap().objset;
    let codec = || {
        let i = pool.object_info(os, fs::volume::VOLUME_OBJ).unwrap();
        (i.compression.name(), i.checksum.name().to_string())
    };
    assert_eq!(codec(), ("lz4".to_string(), "fletcher4".to_string()));
    let v = ds.open_volume("tank/v").unwrap();
    ds.set("tank/v", "compression", Some("zstd")).unwrap();
    ds.set("tank/v", "checksum", Some("blake3")).unwrap();
    assert_eq!(codec(), ("zstd-3".to_string(), "blake3".to_string()));
    v.write(0, &[7u8; 8192], Durability::Stable).unwrap();
    assert_eq!(v.read(0, 8192).unwrap().to_vec(), [7u8; 8192]);
}

#[test]
fn blocks_read_back_unmap_frees_and_the_volume_grows_online() {
    let (pool, ds) = setup();
    ds.create_volume("tank/v", &spec(16 * MIB, true), &[])
        .unwrap();
    let v = ds.open_volume("tank/v").unwrap();
    assert_eq!((v.size(), v.block_size()), (16 * MIB, 16384));
    assert!(
        v.is_sparse() && !v.write_cache(),
        "write-through unless sync=disabled"
    );
    // Never written: zeros.
    assert!(v.read(0, 65536).unwrap().to_vec().iter().all(|&b| b == 0));

    let data = Rng(1).bytes(8 * MIB as usize);
    v.write(0, &data, Durability::Cached).unwrap();
    // Unaligned, across block edges.
    let odd = Rng(2).bytes(5000);
    v.write(16384 - 100, &odd, Durability::Stable).unwrap();
    let mut model = data.clone();
    model[16384 - 100..16384 - 100 + 5000].copy_from_slice(&odd);
    assert!(v.read(0, model.len()).unwrap().to_vec() == model);
    // Past the end: refused, nothing written.
    for (off, len) in [(16 * MIB - 10, 11u64), (16 * MIB, 1), (u64::MAX - 5, 10)] {
        assert!(
            matches!(
                v.write(off, &vec![1u8; len as usize], Durability::Cached),
                Err(FsError::Invalid(_))
            ),
            "{off}+{len}"
        );
        assert!(matches!(
            v.read(off, len as usize),
            Err(FsError::Invalid(_))
        ));
    }
    pool.sync().unwrap();
    let used = |ds: &Datasets| prop(ds, "tank/v", "referenced").parse::<u64>().unwrap();
    let full = used(&ds);
    assert!(full >= 8 * MIB, "{full}");

    // Unmap 4 MiB (not block aligned at its start): zeros, and the space is back.
    v.unmap(MIB + 1000, 4 * MIB, Durability::Cached).unwrap();
    model[(MIB + 1000) as usize..(5 * MIB + 1000) as usize].fill(0);
    assert!(v.read(0, model.len()).unwrap().to_vec() == model);
    pool.sync().unwrap();
    pool.sync().unwrap();
    let after = used(&ds);
    assert!(
        after + 3 * MIB < full,
        "unmapping 4 MiB freed only {} bytes",
        full - after
    );

    // What is mapped: data up to the unmapped range's first whole block, holes
    // from there to where the writes resume, data again; holes past what was written.
    let (mapped, len) = v.mapping_at(0, 16 * MIB).unwrap();
    assert!(mapped);
    assert_eq!(
        len,
        MIB + 16384,
        "the block the unmap began in keeps its data"
    );
    let (mapped, len) = v.mapping_at(MIB + 16384, 16 * MIB).unwrap();
    assert!(!mapped);
    assert_eq!(len, 4 * MIB - 16384);
    assert_eq!(v.mapping_at(5 * MIB, 100).unwrap(), (true, 100));
    assert_eq!(v.mapping_at(12 * MIB, 64 * MIB).unwrap(), (false, 4 * MIB));
    assert!(v.mapping_at(16 * MIB, 1).is_err());

    // Grows online: the open volume sees the new size, the new end reads zeros.
    ds.set("tank/v", "volsize", Some("32M")).unwrap();
    assert_eq!(v.size(), 32 * MIB);
    assert!(v
        .read(31 * MIB, 65536)
        .unwrap()
        .to_vec()
        .iter()
        .all(|&b| b == 0));
    v.write(32 * MIB - 4096, &[9u8; 4096], Durability::Cached)
        .unwrap();
    assert!(matches!(
        ds.set("tank/v", "volsize", Some("16M")),
        Err(FsError::Invalid(_))
    ));
    assert_eq!(v.size(), 32 * MIB);
    check_clean(&pool);

    // Read-only refuses writes and unmaps, and reads on.
    ds.set("tank/v", "readonly", Some("on")).unwrap();
    assert!(matches!(
        v.write(0, &[1], Durability::Cached),
        Err(FsError::ReadOnly)
    ));
    assert!(matches!(
        v.unmap(0, 4096, Durability::Cached),
        Err(FsError::ReadOnly)
    ));
    assert!(v.read(0, 4096).unwrap().to_vec() == model[..4096]);
}

#[test]
fn a_thick_volume_never_runs_out_and_a_sparse_one_does() {
    let (pool, ds) = setup();
    ds.create("tank/hog", &[]).unwrap();
    // More than the pool could ever hold is refused at once.
    assert!(matches!(
        ds.create_volume("tank/huge", &spec(1 << 30, false), &[]),
        Err(FsError::NoSpace)
    ));
    ds.create_volume("tank/thick", &spec(24 * MIB, false), &[])
        .unwrap();
    ds.create_volume("tank/sparse", &spec(24 * MIB, true), &[])
        .unwrap();
    let thick = ds.open_volume("tank/thick").unwrap();
    let sparse = ds.open_volume("tank/sparse").unwrap();
    assert!(!thick.is_sparse());

    // Another dataset takes everything it can.
    let hog = ds.open("tank/hog").unwrap();
    let ino = hog
        .create(1, b"f", Kind::File, 0o644, 0, &Cred::root())
        .unwrap()
        .ino;
    let chunk = Rng(3).bytes(MIB as usize);
    let mut at = 0;
    let err = loop {
        match hog.write(ino, at, &chunk) {
            Ok(n) => at += n as u64,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, FsError::NoSpace), "{err:?}");

    // The thick volume is written whole, then overwritten whole, twice.
    for round in 0..3u64 {
        for blk in 0..24 {
            let data = Rng(100 * round + blk).bytes(MIB as usize);
            thick
                .write(blk * MIB, &data, Durability::Cached)
                .unwrap_or_else(|e| panic!("round {round} block {blk}: {e}"));
        }
        thick.flush().unwrap();
    }
    for blk in 0..24 {
        let want = Rng(200 + blk).bytes(MIB as usize);
        assert!(thick.read(blk * MIB, MIB as usize).unwrap().to_vec() == want);
    }
    // A snapshot would need another 24 MiB held for the volume: refused.
    assert!(matches!(ds.snapshot("tank/thick@s"), Err(FsError::NoSpace)));
    // The negative control: the sparse volume, same pool, runs out.
    let mut failed = None;
    for blk in 0..24 {
        if let Err(e) = sparse.write(blk * MIB, &chunk, Durability::Cached) {
            failed = Some((blk, e));
            break;
        }
    }
    assert!(
        matches!(failed, Some((_, FsError::NoSpace))),
        "a sparse volume in a full pool: {failed:?}"
    );
    check_clean(&pool);

    // Freed space lets the snapshot be taken; overwrites after it still never fail.
    hog.unlink(1, b"f", &Cred::root()).unwrap();
    for _ in 0..4 {
        pool.sync().unwrap();
    }
    ds.snapshot("tank/thick@s").unwrap();
    let hog2 = hog
        .create(1, b"g", Kind::File, 0o644, 0, &Cred::root())
        .unwrap()
        .ino;
    let mut at = 0;
    while hog.write(hog2, at, &chunk).is_ok() {
        at += MIB;
    }
    for blk in 0..24 {
        thick
            .write(
                blk * MIB,
                &Rng(300 + blk).bytes(MIB as usize),
                Durability::Cached,
            )
            .unwrap_or_else(|e| panic!("after the snapshot, block {blk}: {e}"));
    }
    thick.flush().unwrap();
    check_clean(&pool);
}

#[test]
fn snapshots_roll_back_and_streams_arrive_byte_for_byte() {
    let (_pool, ds) = setup();
    ds.create_volume(
        "tank/v",
        &VolumeSpec {
            volsize: 8 * MIB,
            volblocksize: Some(4096),
            sparse: false,
        },
        &[("compression".into(), "lz4".into())],
    )
    .unwrap();
    let v = ds.open_volume("tank/v").unwrap();
    let first = Rng(7).mixed(6 * MIB as usize);
    v.write(4096, &first, Durability::Stable).unwrap();
    ds.snapshot("tank/v@one").unwrap();
    let second = Rng(8).bytes(MIB as usize);
    v.write(2 * MIB, &second, Durability::Stable).unwrap();
    v.unmap(5 * MIB, MIB, Durability::Stable).unwrap();
    ds.snapshot("tank/v@two").unwrap();
    let image = |v: &fs::Volume| v.read(0, v.size() as usize).unwrap().to_vec();
    let at_two = image(&v);

    // The snapshot reads as it was; the volume is in use and cannot roll back.
    let one = ds.open_volume("tank/v@one").unwrap();
    let mut at_one = vec![0u8; 8 * MIB as usize];
    at_one[4096..4096 + first.len()].copy_from_slice(&first);
    assert!(image(&one) == at_one);
    assert!(matches!(
        one.write(0, &[1], Durability::Cached),
        Err(FsError::ReadOnly)
    ));
    assert!(matches!(ds.rollback("tank/v@two"), Err(FsError::Busy(_))));

    // A full stream and an incremental recreate it elsewhere byte for byte.
    let (_pool2, other) = setup();
    let mut full = Vec::new();
    ds.send("tank/v@one", None, &mut full).unwrap();
    let mut incr = Vec::new();
    ds.send("tank/v@two", Some("@one"), &mut incr).unwrap();
    other.receive("tank/copy", &mut &full[..]).unwrap();
    assert_eq!(prop(&other, "tank/copy", "type"), "volume");
    assert_eq!(prop(&other, "tank/copy", "volsize"), "8M");
    assert_eq!(prop(&other, "tank/copy", "volblocksize"), "4K");
    {
        let copy = other.open_volume("tank/copy").unwrap();
        assert!(image(&copy) == at_one);
    }
    other.close("tank/copy");
    other.receive("tank/copy", &mut &incr[..]).unwrap();
    let copy = other.open_volume("tank/copy").unwrap();
    assert!(image(&copy) == at_two);

    // Rolled back once no one serves it.
    v.write(0, &[0xEE; 4096], Durability::Stable).unwrap();
    drop(v);
    ds.close("tank/v");
    ds.destroy_snapshot("tank/v@two").unwrap();
    ds.rollback("tank/v@one").unwrap();
    let v = ds.open_volume("tank/v").unwrap();
    assert!(image(&v) == at_one);
}

#[test]
fn reservation_state_is_kept_durably_and_read_back_after_import() {
    let devs = sim_devices(3, 12, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let ds = Datasets::new(pool.clone()).unwrap();
    ds.create_volume(
        "tank/v",
        &spec(MIB, false),
        &[("sync".into(), "disabled".into())],
    )
    .unwrap();
    let v = ds.open_volume("tank/v").unwrap();
    assert!(v.load_reservations().unwrap().is_empty());
    v.store_reservations(b"first, and longer than the second")
        .unwrap();
    v.store_reservations(b"second").unwrap();
    assert_eq!(v.load_reservations().unwrap(), b"second");
    assert!(v.store_reservations(&vec![0; 300 * 1024]).is_err());
    // Durable without a txg commit, even with sync=disabled: the log holds it when
    // a power cut drops every unflushed device write.
    drop(v);
    drop(ds);
    drop(pool);
    let after: Vec<_> = devs
        .iter()
        .map(|d| d.restart(vdev::CrashPolicy::DropAll))
        .collect();
    let pool = Pool::import(args(&after), Some("tank"), opts()).unwrap();
    assert!(pool.intent_log_stats().records_replayed > 0);
    let ds = Datasets::new(pool).unwrap();
    let v = ds.open_volume("tank/v").unwrap();
    assert_eq!(v.load_reservations().unwrap(), b"second");
    // The volume's blocks are untouched by it.
    assert!(v.read(0, 4096).unwrap().to_vec().iter().all(|&b| b == 0));
}

#[test]
fn compare_and_write_is_atomic_against_other_writers() {
    let (_pool, ds) = setup();
    ds.create_volume("tank/v", &spec(MIB, true), &[]).unwrap();
    let v = ds.open_volume("tank/v").unwrap();
    // A mismatch names its first differing byte and writes nothing.
    v.write(0, &[1, 2, 3, 4], Durability::Cached).unwrap();
    assert_eq!(
        v.compare_and_write(0, &[1, 2, 9, 4], &[5, 5, 5, 5], Durability::Cached)
            .unwrap(),
        Some(2)
    );
    assert_eq!(v.read(0, 4).unwrap().to_vec(), [1, 2, 3, 4]);
    assert!(v
        .compare_and_write(0, &[1, 2, 3], &[5, 5, 5, 5], Durability::Cached)
        .is_err());

    // Four threads each add 1 to a counter 200 times by compare-and-write, retrying
    // on a mismatch, while plain writes hammer the block beside it: every increment
    // counts.
    v.write(0, &0u64.to_le_bytes(), Durability::Cached).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let v = v.clone();
            s.spawn(move || {
                for _ in 0..200 {
                    loop {
                        let now = v.read(0, 8).unwrap().to_vec();
                        let n = u64::from_le_bytes(now.clone().try_into().unwrap());
                        let next = (n + 1).to_le_bytes();
                        match v
                            .compare_and_write(0, &now, &next, Durability::Cached)
                            .unwrap()
                        {
                            None => break,
                            Some(at) => assert!(at < 8),
                        }
                    }
                }
            });
        }
        let v = v.clone();
        s.spawn(move || {
            for i in 0..400u64 {
                v.write(8, &i.to_le_bytes(), Durability::Cached).unwrap();
            }
        });
    });
    let end = u64::from_le_bytes(v.read(0, 8).unwrap().to_vec().try_into().unwrap());
    assert_eq!(end, 800);
}
