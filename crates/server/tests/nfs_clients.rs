//! The daemon against real NFS clients (libnfs's `nfs-cp`, `nfs-cat`, `nfs-ls` from
//! Debian's libnfs-utils) and against the project's own codec: files round-trip byte
//! for byte, big directories list completely, handles survive a restart, many calls
//! run at once on one connection, retransmissions are answered from the
//! duplicate-request cache, and bad input gets an error or a closed connection while
//! the server stays up and no data changes.

mod common;

use common::*;
use nfs::xdr::Encoder;
use std::collections::BTreeSet;
use std::io::Write;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    let mut x = 0x9e37_79b9_u32 ^ seed as u32;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn libnfs_tools_round_trip_files_byte_for_byte() {
    let server = TestServer::start("*(rw,no_root_squash)");
    let local = tempfile::tempdir().unwrap();
    for (i, size) in [0usize, 1, (1 << 20) + 1, 256 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(size, i as u8);
        let src = local.path().join(format!("in{i}"));
        std::fs::write(&src, &data).unwrap();
        let remote = server.url(&format!("/tp/share/file{i}"));
        libnfs("nfs-cp", &[src.to_str().unwrap(), &remote]);
        let back = libnfs("nfs-cat", &[&remote]);
        assert!(back == data, "nfs-cat of {size} bytes differs");
        let copy = local.path().join(format!("out{i}"));
        libnfs("nfs-cp", &[&remote, copy.to_str().unwrap()]);
        assert!(
            std::fs::read(&copy).unwrap() == data,
            "nfs-cp back of {size} bytes differs"
        );
        // And what the filesystem itself holds.
        let fs = server.filesystem("tp/share");
        let a = fs.lookup(1, format!("file{i}").as_bytes()).unwrap();
        assert_eq!(a.size, size as u64);
    }
    // A file in a subdirectory, reached by mounting the subdirectory.
    let fs = server.filesystem("tp/share");
    fs.create(1, b"sub", fs::Kind::Dir, 0o755, 0, &fs::Cred::root())
        .unwrap();
    let src = local.path().join("in0");
    libnfs(
        "nfs-cp",
        &[src.to_str().unwrap(), &server.url("/tp/share/sub/x")],
    );
    let listing = String::from_utf8(libnfs("nfs-ls", &[&server.url("/tp/share/sub")])).unwrap();
    assert!(listing.lines().any(|l| l.ends_with(" x")), "{listing}");
}

#[test]
fn a_directory_of_ten_thousand_entries_lists_completely() {
    let server = TestServer::start("*(rw,no_root_squash)");
    let fs = server.filesystem("tp/share");
    let dir = fs
        .create(1, b"many", fs::Kind::Dir, 0o755, 0, &fs::Cred::root())
        .unwrap()
        .ino;
    let mut want = BTreeSet::new();
    for i in 0..10_000 {
        let name = format!("entry-{i:05}-{}", "x".repeat(i % 40));
        fs.create(
            dir,
            name.as_bytes(),
            fs::Kind::File,
            0o644,
            0,
            &fs::Cred::root(),
        )
        .unwrap();
        want.insert(name);
    }
    let out = String::from_utf8(libnfs("nfs-ls", &[&server.url("/tp/share/many")])).unwrap();
    let names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|n| *n != "." && *n != "..")
        .collect();
    let unique: BTreeSet<String> = names.iter().map(|s| s.to_string()).collect();
    assert_eq!(names.len(), unique.len(), "duplicates in the listing");
    assert_eq!(unique, want);
}

#[test]
fn handles_survive_a_restart_and_the_write_verifier_changes() {
    let mut server = TestServer::start("*(rw,no_root_squash)");
    let mut c = server.client();
    let (st, root) = c.mount("/tp/share");
    assert_eq!(st, 0);
    let (st, fh) = c.create(&root, "kept");
    assert_eq!(st, 0);
    let data = pattern(300_000, 9);
    let (st, n, committed, verf1) = c.write(&fh, 0, &data, 0);
    assert_eq!((st, n, committed), (0, data.len() as u32, 0));
    // COMMIT makes the unstable write durable.
    let mut e = Encoder::new();
    e.opaque(&fh).u64(0).u32(0);
    assert_eq!(c.nfs(21, &e).status(), 0);
    drop(c);
    server.restart();
    let mut c = server.client();
    let (st, got, eof) = c.read(&fh, 0, 1 << 20);
    assert_eq!(st, 0);
    assert!(eof);
    assert!(got == data, "data read through the old handle differs");
    let (_, _, committed, verf2) = c.write(&fh, 0, b"x", 2);
    assert_eq!(committed, 2, "FILE_SYNC");
    assert_ne!(verf1, verf2, "a restart changes the write verifier");
}

#[test]
fn many_calls_in_flight_on_one_connection() {
    let server = TestServer::start("*(rw,no_root_squash)");
    let mut c = server.client();
    let (_, root) = c.mount("/tp/share");
    let (_, fh) = c.create(&root, "f");
    let data = pattern(1 << 20, 3);
    assert_eq!(c.write(&fh, 0, &data, 2).0, 0);
    pipelined_reads(&mut c, &fh, &data, 48, 16384);
}

/// Sends `calls` READs of `size` bytes covering `data` from its start back to back
/// before reading any reply, then checks every reply's bytes and that each call was
/// answered once.
fn pipelined_reads(c: &mut Client, fh: &[u8], data: &[u8], calls: u32, size: u32) {
    let mut sent = Vec::new();
    for i in 0..calls {
        let xid = 1000 + i;
        let mut call = nfs::rpc::encode_call(xid, 100003, 3, 6, &root_cred());
        call.opaque(fh).u64(i as u64 * size as u64).u32(size);
        c.rpc.send_raw(&call.buf).unwrap();
        sent.push(xid);
    }
    let mut seen = BTreeSet::new();
    for _ in 0..calls {
        let reply = c.rpc.read_reply().unwrap();
        let xid = u32::from_be_bytes(reply[0..4].try_into().unwrap());
        let a = Answer::parse(reply);
        assert_eq!(a.status(), 0);
        let mut d = a.results();
        d.u32().unwrap();
        skip_post_op_attr(&mut d);
        d.u32().unwrap();
        d.bool().unwrap();
        let got = d.opaque(1 << 20).unwrap();
        let at = (xid - 1000) as usize * size as usize;
        assert!(
            got == &data[at..at + size as usize],
            "reply {xid} carries the wrong bytes"
        );
        assert!(seen.insert(xid));
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), sent);
}

/// A READ whose data is cached is answered on the connection's reader thread, one
/// that needs the disk by a worker: pipelined reads of a file after a restart (from
/// disk, some blocks already read ahead) and again (all from the ARC) carry the same
/// bytes, and the second pass finds everything cached.
#[test]
fn reads_from_disk_and_from_cache_answer_alike() {
    let mut server = TestServer::start("*(rw,no_root_squash)");
    let mut c = server.client();
    let (_, root) = c.mount("/tp/share");
    let (_, fh) = c.create(&root, "f");
    let data = pattern(2 << 20, 5);
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        assert_eq!(c.write(&fh, (i << 20) as u64, chunk, 2).0, 0);
    }
    drop(c);
    server.restart();
    let mut c = server.client();
    let cold = server.pool.status().arc;
    pipelined_reads(&mut c, &fh, &data, 32, 65536);
    let warm = server.pool.status().arc;
    assert!(
        warm.demand_misses + warm.prefetch_misses > cold.demand_misses + cold.prefetch_misses,
        "the first pass reads the disk"
    );
    pipelined_reads(&mut c, &fh, &data, 32, 65536);
    let after = server.pool.status().arc;
    assert_eq!(
        after.demand_misses, warm.demand_misses,
        "the second pass is answered from the ARC"
    );
    assert!(after.demand_hits >= warm.demand_hits + 32);
}

fn root_cred() -> nfs::rpc::Credential {
    root()
}

#[test]
fn a_retransmitted_remove_gets_the_first_reply() {
    let server = TestServer::start("*(rw,no_root_squash)");
    let mut c = server.client();
    let (_, root) = c.mount("/tp/share");
    assert_eq!(c.create(&root, "gone").0, 0);
    let mut call = nfs::rpc::encode_call(777, 100003, 3, 12, &root_cred());
    call.opaque(&root).opaque(b"gone");
    c.rpc.send_raw(&call.buf).unwrap();
    let first = c.rpc.read_reply().unwrap();
    c.rpc.send_raw(&call.buf).unwrap();
    let second = c.rpc.read_reply().unwrap();
    assert_eq!(Answer::parse(first.clone()).status(), 0);
    assert_eq!(
        first, second,
        "the retransmission is answered from the cache"
    );
    // A new call (new xid) really runs: the file is gone.
    assert_eq!(c.remove(&root, "gone").status(), 2);
}

#[test]
fn bad_input_gets_errors_and_changes_nothing() {
    let server = TestServer::start("*(rw,no_root_squash)");
    let mut c = server.client();
    let (_, root) = c.mount("/tp/share");
    let (_, fh) = c.create(&root, "precious");
    let data = pattern(100_000, 5);
    c.write(&fh, 0, &data, 2);

    // Forged handles: a flipped byte, a short one, random bytes.
    let mut forged = fh.clone();
    forged[12] ^= 0x40;
    assert_eq!(c.getattr(&forged).status(), 10001, "BADHANDLE");
    assert_eq!(c.getattr(&fh[..20]).status(), 10001);
    assert_eq!(c.getattr(&pattern(41, 1)).status(), 10001);
    let (st, _, _, _) = c.write(&forged, 0, b"evil", 2);
    assert_eq!(st, 10001);
    // A handle of a deleted file is stale.
    let (_, doomed) = c.create(&root, "doomed");
    assert_eq!(c.remove(&root, "doomed").status(), 0);
    assert_eq!(c.getattr(&doomed).status(), 70, "STALE");
    // Outside the export: unshared datasets, "..", paths that do not exist.
    assert_eq!(c.mount("/tp/private").0, 2);
    assert_eq!(c.mount("/tp").0, 2);
    assert_eq!(c.mount("/tp/share/../private").0, 13);
    assert_eq!(c.mount("/nope").0, 2);
    // ".." of the share's root is the root itself.
    let (st, up) = c.lookup(&root, "..");
    assert_eq!(st, 0);
    let root_attr = c.getattr(&root).bytes;
    let up_attr = c.getattr(&up).bytes;
    assert_eq!(
        root_attr[24..],
        up_attr[24..],
        "'..' of the root is the root"
    );
    // Names with a slash are refused.
    assert_eq!(c.create(&root, "a/b").0, 22, "INVAL");

    // Garbage arguments: GARBAGE_ARGS; an unknown procedure: PROC_UNAVAIL; an
    // unknown program: PROG_UNAVAIL; a wrong version: PROG_MISMATCH.
    let mut e = Encoder::new();
    e.u32(0xffff_ffff);
    assert_eq!(c.nfs(1, &e).accept, Some(4));
    assert_eq!(c.nfs(99, &Encoder::new()).accept, Some(3));
    assert_eq!(c.call(200000, 0, &Encoder::new()).accept, Some(1));
    let bytes = c.rpc.call(100003, 2, 0, &root_cred(), &[]).unwrap();
    assert_eq!(Answer::parse(bytes).accept, Some(2));
    // A credential flavor we do not speak is denied.
    let bytes = c
        .rpc
        .call(100003, 3, 0, &nfs::rpc::Credential::Other(6), &[])
        .unwrap();
    assert_eq!(Answer::parse(bytes).accept, None);

    // Framing attacks, each on its own connection: a truncated record, an oversize
    // length, random bytes.
    {
        let mut raw = std::net::TcpStream::connect(server.addr).unwrap();
        raw.write_all(&(0x8000_0000u32 | 100).to_be_bytes())
            .unwrap();
        raw.write_all(&[1, 2, 3]).unwrap();
    }
    {
        let mut raw = std::net::TcpStream::connect(server.addr).unwrap();
        raw.write_all(&0xffff_ffffu32.to_be_bytes()).unwrap();
        let mut buf = [0u8; 16];
        use std::io::Read;
        // The server closes the connection rather than read 2 GiB.
        assert_eq!(raw.read(&mut buf).unwrap_or(0), 0);
    }
    {
        let mut raw = std::net::TcpStream::connect(server.addr).unwrap();
        let junk = pattern(4096, 77);
        raw.write_all(&(0x8000_0000u32 | junk.len() as u32).to_be_bytes())
            .unwrap();
        raw.write_all(&junk).unwrap();
    }

    // The server is up, and the data is as it was.
    let mut c = server.client();
    assert_eq!(c.nfs(0, &Encoder::new()).accept, Some(0));
    let (st, got, _) = c.read(&fh, 0, 200_000);
    assert_eq!(st, 0);
    assert!(got == data, "data changed");
}

#[test]
fn a_client_the_rules_refuse_reaches_nothing() {
    let server = TestServer::start("10.9.9.9(rw,no_root_squash)");
    let mut c = server.client();
    assert_eq!(c.mount("/tp/share").0, 13, "MNT3ERR_ACCES");
    let out = std::process::Command::new("nfs-cat")
        .arg(server.url("/tp/share/f"))
        .output()
        .expect("nfs-cat (libnfs-utils) must be installed");
    assert!(!out.status.success(), "nfs-cat must fail");

    // A handle obtained while the client was allowed stops working once the rules
    // no longer name it.
    let service = server.daemon.as_ref().unwrap().service().clone();
    let fs = server.filesystem("tp/share");
    let share = |rules: &str| nfs::Share {
        pool: "tp".into(),
        dataset: "tp/share".into(),
        fs: fs.clone(),
        rules: nfs::ExportRules::parse(rules).unwrap(),
        handle_identity: None,
    };
    service.add_share(share("*(rw,no_root_squash)"));
    let (st, root) = c.mount("/tp/share");
    assert_eq!(st, 0);
    let (_, fh) = c.create(&root, "f");
    assert_eq!(c.write(&fh, 0, b"secret", 2).0, 0);
    service.add_share(share("10.9.9.9(rw,no_root_squash)"));
    assert_eq!(c.getattr(&fh).status(), 13, "ACCES");
    assert_eq!(c.read(&fh, 0, 100).0, 13);
    assert_eq!(c.write(&fh, 0, b"changed", 2).0, 13);
    assert_eq!(c.remove(&root, "f").status(), 13);
    assert_eq!(
        fs.read(fs.lookup(1, b"f").unwrap().ino, 0, 100).unwrap(),
        b"secret"
    );
}

#[test]
fn read_only_rules_and_root_squash_are_enforced() {
    let server = TestServer::start("127.0.0.1(ro) *(rw)");
    let mut c = server.client();
    let (st, root) = c.mount("/tp/share");
    assert_eq!(st, 0);
    assert_eq!(c.create(&root, "nope").0, 30, "ROFS");
    let server = TestServer::start("*(rw)");
    let mut c = server.client();
    let (_, root) = c.mount("/tp/share");
    // root is squashed to nobody, who may not write the root-owned 0755 root.
    assert_eq!(c.create(&root, "nope").0, 13, "ACCES");
    let fs = server.filesystem("tp/share");
    fs.setattr(
        1,
        &fs::SetAttr {
            perm: Some(0o777),
            ..fs::SetAttr::default()
        },
        &fs::Cred::root(),
    )
    .unwrap();
    let (st, fh) = c.create(&root, "mine");
    assert_eq!(st, 0);
    let d = c.getattr(&fh);
    let mut r = d.results();
    r.u32().unwrap();
    r.u32().unwrap(); // type
    r.u32().unwrap(); // mode
    r.u32().unwrap(); // nlink
    assert_eq!(r.u32().unwrap(), 65534, "created as nobody");
    // Another user may not write nobody's 0644 file.
    c.cred = user(1234);
    assert_eq!(c.write(&fh, 0, b"x", 2).0, 13);
}

/// A host name in the rules matches the addresses it resolves to (localhost: from
/// /etc/hosts, no query leaves the machine); other clients are refused at mount.
#[test]
fn a_host_name_rule_admits_its_addresses_only() {
    let server = TestServer::start("localhost(ro)");
    let mut c = common::http::client_from("127.0.0.1", server.addr);
    let (st, root) = c.mount("/tp/share");
    assert_eq!(st, 0);
    assert_eq!(c.create(&root, "nope").0, 30, "the rule says ro");
    let mut other = common::http::client_from("127.0.0.2", server.addr);
    assert_ne!(other.mount("/tp/share").0, 0, "127.0.0.2 is not localhost");
}
