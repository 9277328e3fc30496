//! Snapshot streams between two pools: a full stream and an incremental one recreate
//! every object with its id, attributes and bytes (holes, truncations, deletions and
//! block size growth included); a damaged, truncated or misapplied stream is refused
//! and leaves the target as it was.

mod common;

use common::*;
use pool::compress::Compression;
use pool::send::{receiver::receive, writer::send};
use pool::{Pool, PoolError};
use std::collections::BTreeMap;
use vdev::Layout;

/// Objects the source holds, for comparison: id -> (info, bytes).
type Snapshot = BTreeMap<u64, (pool::objset::ObjectInfo, Vec<u8>)>;

fn state(p: &Pool, os: u64, ids: &[u64]) -> Snapshot {
    let mut out = BTreeMap::new();
    for &obj in ids {
        match p.object_info(os, obj) {
            Ok(info) => {
                let len = (info.nblocks * info.block_size as u64) as usize;
                let bytes = p.read(os, obj, 0, len).unwrap();
                out.insert(obj, (info, bytes));
            }
            Err(PoolError::NotFound(_)) => {}
            Err(e) => panic!("object {obj}: {e}"),
        }
    }
    out
}

/// A source pool (a mirror) and a target pool (raidz1) and the target's devices.
fn pools(
    seed: u64,
) -> (
    std::sync::Arc<Pool>,
    std::sync::Arc<Pool>,
    Vec<std::sync::Arc<vdev::SimDevice>>,
) {
    let a = create_pool(Layout::Mirror, &sim_devices(2, seed, None));
    let b_devs = sim_devices(3, seed + 1, None);
    let b = create_pool(Layout::RaidZ { nparity: 1 }, &b_devs);
    (a, b, b_devs)
}

/// The source's first state: files of several block sizes and compressions, with
/// holes, bonus buffers and generations. Returns the object ids.
fn first_state(a: &Pool, os: u64, rng: &mut Rng) -> Vec<u64> {
    let mut ids = Vec::new();
    for (bs, comp, len, at) in [
        (131072u32, Compression::Off, 600_000usize, 0u64),
        (16384, Compression::Lz4, 200_000, 0),
        (4096, Compression::Zstd(3), 50_000, 10_000_000), // a hole before its data
        (512, Compression::Off, 300, 0),
        (131072, Compression::Gzip(6), 300_000, 0),
    ] {
        let obj = new_file(a, os, bs, comp);
        let data = if comp == Compression::Off {
            rng.bytes(len)
        } else {
            rng.mixed(len)
        };
        a.write(os, obj, at, &data).unwrap();
        a.set_bonus(os, obj, &rng.bytes(40 + obj as usize), Some(obj * 7))
            .unwrap();
        ids.push(obj);
    }
    // An object with no blocks, only attributes.
    let empty = new_file(a, os, 4096, Compression::Off);
    a.set_bonus(os, empty, b"attributes only", Some(3)).unwrap();
    ids.push(empty);
    ids
}

/// Changes after the first snapshot: rewrites, a punched hole, a truncation, a
/// deletion, a grown block size, new objects.
fn change(a: &Pool, os: u64, ids: &mut Vec<u64>, rng: &mut Rng) {
    a.write(os, ids[0], 131072, &rng.bytes(131072)).unwrap();
    a.free_range(os, ids[1], 16384, 3 * 16384).unwrap();
    a.free_range(os, ids[4], 131072, 300_000 - 131072).unwrap(); // a truncation
    a.free_object(os, ids[2]).unwrap();
    a.begin(0)
        .unwrap()
        .grow_block_size(os, ids[3], 8192)
        .unwrap();
    a.write(os, ids[3], 0, &rng.bytes(8192)).unwrap();
    a.set_bonus(os, ids[5], b"changed", Some(4)).unwrap();
    for _ in 0..3 {
        let obj = new_file(a, os, 65536, Compression::Lz4);
        a.write(os, obj, 0, &rng.mixed(150_000)).unwrap();
        ids.push(obj);
    }
}

fn send_bytes(p: &Pool, snap: u64, from: Option<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    let summary = send(p, snap, from, &mut out).unwrap();
    assert_eq!(
        summary.bytes,
        out.len() as u64,
        "the summary counts the stream"
    );
    out
}

#[test]
fn full_then_incremental_streams_recreate_every_object() {
    let (a, b, b_devs) = pools(71);
    let mut rng = Rng(71);
    let os = a
        .create_objset("tank/src", r#"{"recordsize":131072}"#)
        .unwrap();
    let mut ids = first_state(&a, os, &mut rng);
    let s1 = a.snapshot_create(os, "one").unwrap();
    let one = state(&a, s1, &ids);
    change(&a, os, &mut ids, &mut rng);
    let s2 = a.snapshot_create(os, "two").unwrap();
    let two = state(&a, s2, &ids);
    assert_ne!(one, two);

    let full = send_bytes(&a, s1, None);
    let got = receive(&b, "tank/replica", &mut full.as_slice(), &|_| Ok(())).unwrap();
    assert_eq!(got.name, "tank/replica@one");
    assert_eq!(
        state(&b, got.snapshot, &ids),
        one,
        "the full stream's snapshot"
    );
    assert_eq!(
        state(&b, got.dataset, &ids),
        one,
        "the dataset after a full stream"
    );
    assert_eq!(b.snapshot_guid(got.snapshot), a.snapshot_guid(s1));
    let props = b
        .list_objsets()
        .into_iter()
        .find(|(id, ..)| *id == got.dataset)
        .unwrap()
        .2;
    assert_eq!(props, r#"{"recordsize":131072}"#);

    let incr = send_bytes(&a, s2, Some(s1));
    assert!(
        incr.len() * 2 < full.len(),
        "the incremental ({} bytes) carries only changes (full: {})",
        incr.len(),
        full.len()
    );
    let got2 = receive(&b, "tank/replica", &mut incr.as_slice(), &|_| Ok(())).unwrap();
    assert!(got2.incremental);
    assert_eq!(
        state(&b, got2.snapshot, &ids),
        two,
        "the incremental's snapshot"
    );
    assert_eq!(
        state(&b, got.snapshot, &ids),
        one,
        "the first snapshot stays"
    );
    // New objects on the replica never take an id the source used.
    let next = b
        .create_object(
            got2.dataset,
            19,
            4096,
            Compression::Off,
            pool::checksum::ChecksumKind::Fletcher4,
        )
        .unwrap();
    assert!(next > *ids.iter().max().unwrap());

    // Both pools stay whole.
    for p in [&a, &b] {
        assert!(p.check().unwrap().problems.is_empty());
    }
    // The replica, its snapshots and their identities survive an export and import.
    let guid2 = b.snapshot_guid(got2.snapshot);
    b.export().unwrap();
    let b = import(&b_devs);
    assert_eq!(state(&b, got.snapshot, &ids), one);
    assert_eq!(state(&b, got2.snapshot, &ids), two);
    assert_eq!(b.snapshot_guid(got2.snapshot), guid2);
    assert_eq!(guid2, a.snapshot_guid(s2));
}

#[test]
fn damaged_truncated_or_misapplied_streams_leave_the_target_as_it_was() {
    let (a, b, _) = pools(81);
    let mut rng = Rng(81);
    let os = a.create_objset("tank/src", "{}").unwrap();
    let mut ids = first_state(&a, os, &mut rng);
    let s1 = a.snapshot_create(os, "one").unwrap();
    change(&a, os, &mut ids, &mut rng);
    let s2 = a.snapshot_create(os, "two").unwrap();
    let full = send_bytes(&a, s1, None);
    let incr = send_bytes(&a, s2, Some(s1));

    // Full streams: damaged in the middle, truncated, or not a stream at all.
    let mut damaged = full.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x40;
    let truncated = &full[..full.len() - 100];
    for (what, bytes) in [
        ("damaged", &damaged[..]),
        ("truncated", truncated),
        ("garbage", &b"not a stream at all, just bytes"[..]),
    ] {
        let e = receive(&b, "tank/replica", &mut &bytes[..], &|_| Ok(())).unwrap_err();
        assert!(e.to_string().contains("stream refused"), "{what}: {e}");
        assert!(
            b.objset_id("tank/replica").is_none(),
            "{what}: the dataset is gone"
        );
    }

    // The good full stream, then a damaged and a truncated incremental.
    let got = receive(&b, "tank/replica", &mut full.as_slice(), &|_| Ok(())).unwrap();
    let one = state(&b, got.dataset, &ids);
    let mut damaged = incr.clone();
    let mid = damaged.len() * 2 / 3;
    damaged[mid] ^= 1;
    for (what, bytes) in [
        ("damaged", &damaged[..]),
        ("truncated", &incr[..incr.len() / 2]),
    ] {
        let e = receive(&b, "tank/replica", &mut &bytes[..], &|_| Ok(())).unwrap_err();
        assert!(e.to_string().contains("stream refused"), "{what}: {e}");
        assert_eq!(
            state(&b, got.dataset, &ids),
            one,
            "{what}: the replica is as it was"
        );
        assert_eq!(
            b.snapshot_names(got.dataset).len(),
            1,
            "{what}: no new snapshot"
        );
    }

    // A full stream onto an existing dataset, and an incremental whose base the
    // target does not have, are refused.
    assert!(matches!(
        receive(&b, "tank/replica", &mut full.as_slice(), &|_| Ok(())),
        Err(PoolError::Exists(_))
    ));
    let other = b.create_objset("tank/other", "{}").unwrap();
    b.snapshot_create(other, "unrelated").unwrap();
    let e = receive(&b, "tank/other", &mut incr.as_slice(), &|_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("not the stream's base"), "{e}");

    // The good incremental still applies.
    receive(&b, "tank/replica", &mut incr.as_slice(), &|_| Ok(())).unwrap();
    assert_eq!(state(&b, got.dataset, &ids), state(&a, s2, &ids));
    assert!(b.check().unwrap().problems.is_empty());
}

/// A writer that stops at its first write until told to go on.
struct Held {
    reached: Option<std::sync::mpsc::Sender<()>>,
    go: std::sync::mpsc::Receiver<()>,
    bytes: Vec<u8>,
}

impl std::io::Write for Held {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(reached) = self.reached.take() {
            let _ = reached.send(());
            let _ = self.go.recv();
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_snapshot_being_sent_cannot_be_destroyed() {
    let (a, b, _) = pools(85);
    let mut rng = Rng(85);
    let os = a.create_objset("tank/src", "{}").unwrap();
    let ids = first_state(&a, os, &mut rng);
    let s1 = a.snapshot_create(os, "one").unwrap();
    let (reached_tx, reached) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    let mut out = Held {
        reached: Some(reached_tx),
        go: go_rx,
        bytes: Vec::new(),
    };
    std::thread::scope(|s| {
        // Lets the send go on however this scope ends, so a failure cannot hang it.
        struct Go(std::sync::mpsc::Sender<()>);
        impl Drop for Go {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let go = Go(go);
        let sender = s.spawn(|| send(&a, s1, None, &mut out).map(|_| ()));
        reached.recv().unwrap();
        let destroyed = a.snapshot_destroy(s1);
        drop(go);
        let e = destroyed.expect_err("a snapshot being sent was destroyed");
        assert!(e.to_string().contains("being sent"), "{e}");
        sender.join().unwrap().unwrap();
    });
    let got = receive(&b, "tank/copy", &mut out.bytes.as_slice(), &|_| Ok(())).unwrap();
    assert_eq!(state(&b, got.snapshot, &ids), state(&a, s1, &ids));
    a.snapshot_destroy(s1).unwrap();
}

/// A send reads runs of blocks in aggregated I/Os; a block whose copy there is bad is
/// read again through every copy (and healed), so the stream still carries every byte.
#[test]
fn a_send_reads_around_damaged_copies() {
    let a_devs = sim_devices(2, 75, None);
    let a = create_pool(Layout::Mirror, &a_devs);
    let b = create_pool(Layout::Mirror, &sim_devices(2, 77, None));
    let os = a
        .create_objset("tank/src", r#"{"recordsize":131072}"#)
        .unwrap();
    let mut rng = Rng(75);
    let obj = new_file(&a, os, 131072, Compression::Off);
    a.write(os, obj, 0, &rng.bytes(4 << 20)).unwrap();
    let snap = a.snapshot_create(os, "one").unwrap();
    let want = state(&a, snap, &[obj]);
    let data: Vec<_> = a
        .committed_blocks()
        .unwrap()
        .into_iter()
        .filter(|bp| bp.level == 0 && bp.lsize == 131072)
        .collect();
    assert!(data.len() >= 32);
    // Every fourth block damaged, on alternating sides: whichever side a batch reads,
    // some of its blocks fail to verify there.
    let start = vdev::label::data_area(vdev::Device::size_bytes(&*a_devs[0])).0;
    let mut damaged = 0;
    for (i, bp) in data.iter().step_by(4).enumerate() {
        a_devs[i % 2].corrupt_range(start + bp.dvas[0].offset, 4096, i as u64);
        damaged += 1;
    }
    let stream = send_bytes(&a, snap, None);
    let got = receive(&b, "tank/replica", &mut stream.as_slice(), &|_| Ok(())).unwrap();
    assert_eq!(state(&b, got.snapshot, &[obj]), want);
    // The send healed the bad copies it met (the others it never read).
    let scrub = a.scrub(&|_| {}).unwrap();
    assert!(scrub.bad_copies < damaged, "none healed: {scrub:?}");
}

/// A source of about 24 MiB in three objects: several checkpoints in its stream.
fn big_source(a: &Pool, rng: &mut Rng) -> (u64, Vec<u64>) {
    let os = a.create_objset("tank/big", "{}").unwrap();
    let mut ids = Vec::new();
    for (bs, len) in [
        (131072u32, 9_000_000usize),
        (16384, 7_000_000),
        (131072, 8_000_000),
    ] {
        let obj = new_file(a, os, bs, Compression::Off);
        a.write(os, obj, 0, &rng.bytes(len)).unwrap();
        ids.push(obj);
    }
    (a.snapshot_create(os, "one").unwrap(), ids)
}

/// Every block of the target's objects is either not written yet (zeros) or the
/// source's: no damaged byte was applied.
fn nothing_foreign(a: &Pool, snap: u64, b: &Pool, os: u64, ids: &[u64]) {
    for &obj in ids {
        let Ok(info) = b.object_info(os, obj) else {
            continue;
        };
        let bs = info.block_size as usize;
        let want = a.read(snap, obj, 0, (info.nblocks as usize) * bs).unwrap();
        let got = b.read(os, obj, 0, (info.nblocks as usize) * bs).unwrap();
        for (i, (g, w)) in got.chunks(bs).zip(want.chunks(bs)).enumerate() {
            assert!(
                g == w || g.iter().all(|&x| x == 0),
                "object {obj} block {i} holds bytes the source never had"
            );
        }
    }
}

#[test]
fn a_cut_receive_resumes_where_it_reported_and_ends_equal() {
    use pool::send::receiver::{receive_with, Resumable, ResumePoint};
    use pool::send::writer::send_from;
    let (a, b, _) = pools(91);
    let mut rng = Rng(91);
    let (s1, ids) = big_source(&a, &mut rng);
    let full = send_bytes(&a, s1, None);
    let want = state(&a, s1, &ids);
    let mut damaged = full.clone();
    let at = full.len() / 2;
    damaged[at] ^= 0x10;
    for (what, stream, cut) in [
        ("cut in the first third", &full, full.len() / 3),
        ("cut in the last third", &full, full.len() * 2 / 3),
        ("cut before the end record", &full, full.len() - 10),
        ("damaged in the middle", &damaged, damaged.len()),
    ] {
        let target = format!("tank/r{cut}");
        let mut points: Vec<ResumePoint> = Vec::new();
        let e = receive_with(
            &b,
            &target,
            &mut &stream[..cut],
            &|_| Ok(()),
            Some(Resumable {
                expect: None,
                progress: &mut |p| points.push(p),
                report_every: std::time::Duration::ZERO,
            }),
        )
        .unwrap_err();
        assert!(e.to_string().contains("stream refused"), "{what}: {e}");
        let os = b.objset_id(&target).expect("what arrived stays");
        nothing_foreign(&a, s1, &b, os, &ids);
        let point = *points.last().expect("checkpoints before the cut");

        // The rest, from the point reached: not what arrived before it.
        let mut rest = Vec::new();
        send_from(&a, s1, None, Some(point.at), &mut rest).unwrap();
        let reached = cut.min(at);
        assert!(
            rest.len() < full.len() - reached + 2 * pool::send::CHECKPOINT_BYTES as usize,
            "{what}: {} bytes resent of {} after {reached} arrived",
            rest.len(),
            full.len()
        );
        // A stream resumed elsewhere than the point reached is refused.
        let mut wrong = Vec::new();
        let elsewhere = pool::send::Position {
            obj: point.at.obj,
            blkid: point.at.blkid + 1,
        };
        send_from(&a, s1, None, Some(elsewhere), &mut wrong).unwrap();
        let e = receive_with(
            &b,
            &target,
            &mut wrong.as_slice(),
            &|_| Ok(()),
            Some(Resumable {
                expect: Some(point),
                progress: &mut |_| {},
                report_every: std::time::Duration::ZERO,
            }),
        )
        .unwrap_err();
        assert!(e.to_string().contains("resumes at"), "{what}: {e}");
        let got = receive_with(
            &b,
            &target,
            &mut rest.as_slice(),
            &|_| Ok(()),
            Some(Resumable {
                expect: Some(point),
                progress: &mut |_| {},
                report_every: std::time::Duration::ZERO,
            }),
        )
        .unwrap();
        assert_eq!(got.name, format!("{target}@one"));
        assert_eq!(state(&b, got.snapshot, &ids), want, "{what}");
        assert_eq!(b.snapshot_guid(got.snapshot), a.snapshot_guid(s1));
    }
    // Without a resumable receive a resumed stream is refused.
    let mut rest = Vec::new();
    let from = pool::send::Position {
        obj: ids[1],
        blkid: 0,
    };
    send_from(&a, s1, None, Some(from), &mut rest).unwrap();
    let e = receive(&b, "tank/rnone", &mut rest.as_slice(), &|_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("not"), "{e}");
    assert!(b.check().unwrap().problems.is_empty());
}

/// How a block is stored: what a raw receive must keep from the sender.
fn stored_form(
    bp: &pool::blkptr::BlockPointer,
) -> (
    Compression,
    u32,
    u32,
    pool::checksum::ChecksumKind,
    pool::checksum::Checksum,
) {
    (
        bp.compression,
        bp.lsize,
        bp.psize,
        bp.checksum_kind,
        bp.checksum,
    )
}

#[test]
fn received_blocks_are_stored_as_the_sender_stored_them() {
    let (a, b, _) = pools(91);
    let mut rng = Rng(91);
    let os = a.create_objset("tank/src", "{}").unwrap();
    let ids = first_state(&a, os, &mut rng);
    let s1 = a.snapshot_create(os, "one").unwrap();
    let full = send_bytes(&a, s1, None);
    let got = receive(&b, "tank/replica", &mut full.as_slice(), &|_| Ok(())).unwrap();
    b.sync().unwrap();
    let mut compressed = 0;
    for &obj in &ids {
        let info = a.object_info(s1, obj).unwrap();
        for blkid in 0..info.nblocks {
            let sent = a.committed_block(s1, obj, blkid).unwrap();
            let kept = b.committed_block(got.dataset, obj, blkid).unwrap();
            assert_eq!(
                sent.as_ref().map(stored_form),
                kept.as_ref().map(stored_form),
                "object {obj} block {blkid}"
            );
            compressed += sent.is_some_and(|bp| bp.compression != Compression::Off) as u32;
        }
    }
    assert!(
        compressed >= 10,
        "the source has compressed blocks ({compressed})"
    );
    assert_eq!(state(&b, got.dataset, &ids), state(&a, s1, &ids));
}

#[test]
fn a_stored_block_keeps_its_compression_and_reads_back() {
    use pool::storage::StoredBlock;
    use std::sync::Arc;
    let devs = sim_devices(2, 93, None);
    let p = create_pool(Layout::Mirror, &devs);
    let os = p.create_objset("tank/fs", "{}").unwrap();
    let mut rng = Rng(93);
    let bs = 16384u32;
    // An lz4 object given a gzip-9 block: stored as given, not recompressed with lz4.
    let obj = new_file(&p, os, bs, Compression::Lz4);
    let logical = rng.mixed(bs as usize);
    let gz = pool::compress::compress(Compression::Gzip(9), &logical, bs as usize - 512)
        .expect("mixed bytes compress");
    let block = StoredBlock::new(Compression::Gzip(9), bs, &gz).unwrap();
    p.write_stored(os, obj, 2, Arc::new(block)).unwrap();
    // Read before the sync (from the dirty block), and a partial write over it.
    assert_eq!(
        p.read(os, obj, 2 * bs as u64, bs as usize).unwrap(),
        logical
    );
    assert_eq!(
        p.read(os, obj, 0, bs as usize).unwrap(),
        vec![0; bs as usize]
    );
    let obj2 = new_file(&p, os, bs, Compression::Lz4);
    let block = StoredBlock::new(Compression::Gzip(9), bs, &gz).unwrap();
    p.write_stored(os, obj2, 0, Arc::new(block)).unwrap();
    p.write(os, obj2, 100, b"patched").unwrap();
    let mut patched = logical.clone();
    patched[100..107].copy_from_slice(b"patched");
    p.sync().unwrap();

    let bp = p
        .committed_block(os, obj, 2)
        .unwrap()
        .expect("block 2 written");
    assert_eq!(bp.compression, Compression::Gzip(9));
    assert_eq!(bp.psize as usize, gz.len());
    assert_eq!(
        p.committed_block(os, obj, 1).unwrap(),
        None,
        "a hole before it"
    );
    assert_eq!(
        p.committed_block(os, obj2, 0).unwrap().unwrap().compression,
        Compression::Lz4,
        "a block written over is compressed by its object's setting"
    );
    assert_eq!(p.object_info(os, obj).unwrap().nblocks, 3);
    assert_eq!(
        p.read(os, obj, 2 * bs as u64, bs as usize).unwrap(),
        logical
    );
    assert_eq!(p.read(os, obj2, 0, bs as usize).unwrap(), patched);
    assert!(p.check().unwrap().problems.is_empty());
    p.export().unwrap();
    let p = import(&devs);
    assert_eq!(
        p.read(os, obj, 2 * bs as u64, bs as usize).unwrap(),
        logical
    );

    // What cannot be right is refused before anything is written.
    assert!(StoredBlock::new(Compression::Off, bs, &logical[..100]).is_err());
    assert!(StoredBlock::new(Compression::Lz4, 100, &logical[..200]).is_err());
    let wrong_size = StoredBlock::new(Compression::Gzip(9), 2 * bs, &gz).unwrap();
    assert!(matches!(
        p.write_stored(os, obj, 0, Arc::new(wrong_size)),
        Err(PoolError::InvalidArgument(_))
    ));
    // Bytes that do not decompress read as an error, never as data.
    let garbage = StoredBlock::new(Compression::Lz4, bs, &rng.bytes(4000)).unwrap();
    p.write_stored(os, obj, 0, Arc::new(garbage)).unwrap();
    assert!(p.read(os, obj, 0, bs as usize).is_err());
    p.sync().unwrap();
    assert!(p.read(os, obj, 0, bs as usize).is_err());
    assert_eq!(
        p.read(os, obj, 2 * bs as u64, bs as usize).unwrap(),
        logical
    );
}

#[test]
fn a_handed_over_block_reads_back_as_written_and_a_wrong_size_is_refused() {
    let devs = sim_devices(2, 95, None);
    let p = create_pool(Layout::Mirror, &devs);
    let os = p.create_objset("tank/fs", "{}").unwrap();
    let mut rng = Rng(95);
    let bs = 16384u32;
    let obj = new_file(&p, os, bs, Compression::Lz4);
    let data = rng.mixed(bs as usize);
    p.write_block(os, obj, 3, vdev::AlignedBuf::from_slice(&data))
        .unwrap();
    // Before the sync (the dirty block), after it, and after an import.
    assert_eq!(p.read(os, obj, 3 * bs as u64, bs as usize).unwrap(), data);
    assert_eq!(p.object_info(os, obj).unwrap().nblocks, 4);
    p.sync().unwrap();
    assert_eq!(
        p.committed_block(os, obj, 3).unwrap().unwrap().compression,
        Compression::Lz4,
        "compressed by its object's setting like any write"
    );
    let short = vdev::AlignedBuf::from_slice(&data[..bs as usize / 2]);
    let e = p.write_block(os, obj, 0, short).unwrap_err();
    assert!(e.to_string().contains("8192-byte block"), "{e}");
    assert_eq!(
        p.object_info(os, obj).unwrap().nblocks,
        4,
        "nothing changed"
    );
    assert!(p.check().unwrap().problems.is_empty());
    p.export().unwrap();
    let p = import(&devs);
    assert_eq!(p.read(os, obj, 3 * bs as u64, bs as usize).unwrap(), data);
    assert_eq!(
        p.read(os, obj, 0, 3 * bs as usize).unwrap(),
        vec![0; 3 * bs as usize],
        "the holes before it"
    );
}
