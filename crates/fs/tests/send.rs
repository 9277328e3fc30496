//! Filesystems through snapshot streams: a full stream and then an incremental one,
//! received into another pool, give a tree equal to the sender's snapshot in every
//! name, inode number, attribute (times and link counts included), byte, hole,
//! symlink target and extended attribute.

#[path = "../../pool/tests/common/mod.rs"]
mod common;
use common::*;

use fs::{Attr, Cred, Datasets, Filesystem, Kind};
use std::collections::BTreeMap;
use std::sync::Arc;
use vdev::Layout;

#[derive(Debug, PartialEq, Eq)]
struct Node {
    attr: Attr,
    bytes: Vec<u8>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// Every path of a filesystem with what it holds.
fn tree(fs: &Filesystem) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(String::new(), 1u64)];
    while let Some((path, ino)) = stack.pop() {
        let mut attr = fs.getattr(ino).unwrap();
        attr.used_bytes = 0; // allocation differs between layouts
        let bytes = match attr.kind {
            Kind::File => fs.read(ino, 0, attr.size as usize).unwrap(),
            Kind::Symlink => fs.readlink(ino).unwrap(),
            _ => Vec::new(),
        };
        let xattrs = fs
            .listxattr(ino)
            .unwrap()
            .into_iter()
            .map(|n| {
                let v = fs.getxattr(ino, &n).unwrap();
                (n, v)
            })
            .collect();
        if attr.kind == Kind::Dir {
            let mut cookie = 0;
            loop {
                let entries = fs.readdir(ino, cookie, 100).unwrap();
                let Some(last) = entries.last() else { break };
                cookie = last.cookie;
                for e in entries {
                    if e.name != b"." && e.name != b".." {
                        let name = String::from_utf8(e.name).unwrap();
                        stack.push((format!("{path}/{name}"), e.ino));
                    }
                }
            }
        }
        out.insert(
            path,
            Node {
                attr,
                bytes,
                xattrs,
            },
        );
    }
    out
}

fn populate(fs: &Filesystem, rng: &mut Rng) {
    let root = Cred::root();
    let docs = fs.create(1, b"docs", Kind::Dir, 0o755, 0, &root).unwrap();
    let deep = fs
        .create(docs.ino, b"deep", Kind::Dir, 0o700, 0, &root)
        .unwrap();
    for i in 0..20u64 {
        let f = fs
            .create(
                deep.ino,
                format!("f{i}").as_bytes(),
                Kind::File,
                0o644,
                0,
                &root,
            )
            .unwrap();
        fs.write(f.ino, 0, &rng.mixed(1000 + i as usize * 7000))
            .unwrap();
    }
    let big = fs.create(1, b"big", Kind::File, 0o600, 0, &root).unwrap();
    fs.write(big.ino, 0, &rng.bytes(1_000_000)).unwrap();
    let sparse = fs
        .create(1, b"sparse", Kind::File, 0o644, 0, &root)
        .unwrap();
    fs.write(sparse.ino, 5_000_000, b"after a hole").unwrap();
    fs.link(big.ino, docs.ino, b"big-link", &root).unwrap();
    fs.symlink(docs.ino, b"to-big", b"../big", &root).unwrap();
    fs.setxattr(big.ino, b"user.origin", Some(b"primary"), true, false)
        .unwrap();
    fs.create(1, b"fifo", Kind::Fifo, 0o644, 0, &root).unwrap();
}

fn modify(fs: &Filesystem, rng: &mut Rng) {
    let root = Cred::root();
    let big = fs.lookup(1, b"big").unwrap();
    fs.write(big.ino, 300_000, &rng.bytes(50_000)).unwrap();
    fs.punch(big.ino, 600_000, 200_000).unwrap();
    let docs = fs.lookup(1, b"docs").unwrap();
    let deep = fs.lookup(docs.ino, b"deep").unwrap();
    for i in 0..5u64 {
        fs.unlink(deep.ino, format!("f{i}").as_bytes(), &root)
            .unwrap();
    }
    fs.rename(deep.ino, b"f10", 1, b"moved", false, &root)
        .unwrap();
    let new = fs
        .create(docs.ino, b"new", Kind::File, 0o640, 0, &root)
        .unwrap();
    fs.write(new.ino, 0, &rng.mixed(300_000)).unwrap();
    fs.setxattr(big.ino, b"user.origin", Some(b"changed"), false, true)
        .unwrap();
    fs.unlink(docs.ino, b"big-link", &root).unwrap();
}

fn datasets(seed: u64, layout: Layout, n: usize) -> Datasets {
    let pool: Arc<pool::Pool> = create_pool(layout, &sim_devices(n, seed, None));
    Datasets::new(pool).unwrap()
}

fn stream(ds: &Datasets, snap: &str, from: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    let summary = ds.send(snap, from, &mut out).unwrap();
    assert_eq!(summary.bytes, out.len() as u64);
    out
}

#[test]
fn a_filesystem_and_its_changes_arrive_whole() {
    let src = datasets(91, Layout::Mirror, 2);
    let dst = datasets(92, Layout::RaidZ { nparity: 1 }, 3);
    let mut rng = Rng(91);
    src.create("tank/home", &[("compression".into(), "lz4".into())])
        .unwrap();
    let fs = src.open("tank/home").unwrap();
    populate(&fs, &mut rng);
    src.snapshot("tank/home@one").unwrap();
    modify(&fs, &mut rng);
    src.snapshot("tank/home@two").unwrap();
    let one = tree(&src.open("tank/home@one").unwrap());
    let two = tree(&src.open("tank/home@two").unwrap());
    assert!(one != two, "the changes changed the tree");

    dst.receive(
        "tank/home",
        &mut stream(&src, "tank/home@one", None).as_slice(),
    )
    .unwrap();
    assert!(
        tree(&dst.open("tank/home@one").unwrap()) == one,
        "tank/home@one differs from the sender's one"
    );
    assert_eq!(
        dst.info("tank/home").unwrap().prop("compression"),
        Some("lz4")
    );

    let incr = stream(&src, "tank/home@two", Some("@one"));
    dst.receive("tank/home", &mut incr.as_slice()).unwrap();
    assert!(
        tree(&dst.open("tank/home@two").unwrap()) == two,
        "tank/home@two differs from the sender's two"
    );
    assert!(
        tree(&dst.open("tank/home").unwrap()) == two,
        "tank/home differs from the sender's two"
    );
    assert!(
        tree(&dst.open("tank/home@one").unwrap()) == one,
        "tank/home@one differs from the sender's one"
    );

    // Not into a filesystem open here (mounted or shared): an incremental rolls it back.
    fs.write(fs.lookup(1, b"big").unwrap().ino, 0, b"third")
        .unwrap();
    src.snapshot("tank/home@three").unwrap();
    let third = stream(&src, "tank/home@three", Some("@two"));
    let held = dst.open("tank/home").unwrap();
    let e = dst.receive("tank/home", &mut third.as_slice()).unwrap_err();
    assert!(e.to_string().contains("in use"), "{e}");
    assert_eq!(dst.snapshot_names("tank/home").unwrap().len(), 2);
    // Once nobody holds it (the share or mount let go), the same stream is taken.
    drop(held);
    dst.receive("tank/home", &mut third.as_slice()).unwrap();
    assert_eq!(dst.snapshot_names("tank/home").unwrap().len(), 3);
    assert!(tree(&dst.open("tank/home").unwrap()) == tree(&fs));
}

/// A replicated send (`send -R`) carries every snapshot up to the one named, each on
/// the one before; received in one go, the replica holds them all, equal; with a base,
/// only the snapshots after it travel.
#[test]
fn a_replicated_stream_brings_every_snapshot() {
    let src = datasets(93, Layout::Mirror, 2);
    let dst = datasets(94, Layout::Mirror, 2);
    let mut rng = Rng(93);
    src.create("tank/home", &[]).unwrap();
    let fs = src.open("tank/home").unwrap();
    populate(&fs, &mut rng);
    src.snapshot("tank/home@a").unwrap();
    modify(&fs, &mut rng);
    src.snapshot("tank/home@b").unwrap();
    let big = fs.lookup(1, b"big").unwrap().ino;
    fs.write(big, 0, &rng.bytes(70_000)).unwrap();
    src.snapshot("tank/home@c").unwrap();
    fs.write(big, 900_000, &rng.bytes(10_000)).unwrap();
    src.snapshot("tank/home@d").unwrap();
    let trees: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|s| tree(&src.open(&format!("tank/home@{s}")).unwrap()))
        .collect();

    // Up to c: a in full, b and c as incrementals.
    let mut up_to_c = Vec::new();
    let sent = src
        .send_replicated("tank/home@c", None, &mut up_to_c)
        .unwrap();
    assert_eq!(sent.len(), 3);
    let got = dst
        .receive_all("tank/home", &mut up_to_c.as_slice())
        .unwrap();
    let names: Vec<_> = got.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["tank/home@a", "tank/home@b", "tank/home@c"]);
    for (i, s) in ["a", "b", "c"].iter().enumerate() {
        assert!(
            tree(&dst.open(&format!("tank/home@{s}")).unwrap()) == trees[i],
            "tank/home@{s} differs from the sender's"
        );
    }
    // Then from c on: d alone.
    let mut after_c = Vec::new();
    let sent = src
        .send_replicated("tank/home@d", Some("@c"), &mut after_c)
        .unwrap();
    assert_eq!(sent.len(), 1);
    dst.receive_all("tank/home", &mut after_c.as_slice())
        .unwrap();
    assert!(tree(&dst.open("tank/home@d").unwrap()) == trees[3]);
    assert_eq!(dst.snapshot_names("tank/home").unwrap().len(), 4);

    // An empty input is no stream at all; a stream cut short after whole ones keeps
    // what arrived before it.
    let e = dst.receive_all("tank/other", &mut (&[][..])).unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
    let mut two_and_a_half = Vec::new();
    src.send_replicated("tank/home@c", None, &mut two_and_a_half)
        .unwrap();
    let cut = two_and_a_half.len() - 100;
    let e = dst
        .receive_all("tank/copy", &mut &two_and_a_half[..cut])
        .unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
    assert_eq!(dst.snapshot_names("tank/copy").unwrap().len(), 2);
}

/// A stream of version 2 (blake3-hashed), written by the shoal of 2026-11-28 before
/// streams moved to fletcher4, is still received whole; the same stream with one byte
/// of a data block changed is refused, so its hash is really checked. The fixture was
/// made with that build: a filesystem with lz4, `hello.txt`, `docs/pattern.bin` (byte
/// i is (7i + i/4096) mod 251, 300,000 bytes) and `docs/link` -> `../hello.txt`,
/// snapshot `v2`.
#[test]
fn a_version_2_stream_of_an_earlier_shoal_is_still_received() {
    let old = include_bytes!("fixtures/home-v2.stream");
    assert_eq!(
        &old[0..12],
        b"SHOALSND\x02\x00\x00\x00",
        "the fixture is version 2"
    );

    let mut damaged = old.to_vec();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x10;
    let refused = datasets(95, Layout::Mirror, 2);
    let e = refused
        .receive("tank/home", &mut damaged.as_slice())
        .unwrap_err();
    assert!(e.to_string().contains("stream refused"), "{e}");
    assert!(refused.open("tank/home@v2").is_err(), "nothing of it stays");

    let dst = datasets(96, Layout::Mirror, 2);
    dst.receive("tank/home", &mut old.as_slice()).unwrap();
    let fs = dst.open("tank/home@v2").unwrap();
    let hello = fs.lookup(1, b"hello.txt").unwrap();
    assert_eq!(
        fs.read(hello.ino, 0, 100).unwrap(),
        b"hello from a version 2 stream\n"
    );
    let docs = fs.lookup(1, b"docs").unwrap();
    let pattern = fs.lookup(docs.ino, b"pattern.bin").unwrap();
    let want: Vec<u8> = (0..300_000u32)
        .map(|i| ((i * 7 + i / 4096) % 251) as u8)
        .collect();
    assert_eq!(fs.read(pattern.ino, 0, 400_000).unwrap(), want);
    let link = fs.lookup(docs.ino, b"link").unwrap();
    assert_eq!(fs.readlink(link.ino).unwrap(), b"../hello.txt");
    assert_eq!(
        dst.info("tank/home").unwrap().prop("compression"),
        Some("lz4")
    );
}
