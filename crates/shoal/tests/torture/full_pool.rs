//! A full pool refuses only what does not fit and keeps everything stored.

use super::*;

/// FSSTAT: (total bytes, available bytes) of the share.
fn fsstat(conn: &Connection, fh: &Fh) -> (u64, u64) {
    let r = conn
        .call(NFS_PROGRAM, NFS_V3, 18, |e| {
            e.opaque(&fh.0);
        })
        .unwrap();
    let mut d = r.decoder();
    assert_eq!(d.u32().unwrap(), 0, "FSSTAT");
    post_op_attr(&mut d).unwrap();
    let total = d.u64().unwrap();
    let _free = d.u64().unwrap();
    (total, d.u64().unwrap())
}

#[test]
fn a_full_pool_refuses_only_what_does_not_fit_and_keeps_everything_stored() {
    let dir = tempfile::tempdir().unwrap();
    let (mut served, t, root) = serve_share(dir.path(), "160M", &["mirror", "a", "b"], "full", &[]);
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    let (total, available_at_start) = fsstat(&nfs.conn, &root);
    let base = seed();

    // Stored before the pool fills: must survive everything below.
    let precious = write_files(&nfs, &root, "precious", base, 4 << 20, Stable::FileSync);

    // Fill with 1 MiB stable writes until the pool says NOSPC.
    let mut stored: Vec<(Fh, u64, u64)> = Vec::new(); // file, seed, bytes stored
    let mut accepted = 0u64;
    let mut nospc = None;
    'fill: for i in 0.. {
        let fh = match nfs.create(&root, &format!("fill{i}"), true) {
            Ok(fh) => fh,
            Err(e) => {
                nospc = NfsStatus::of(&e);
                break;
            }
        };
        let seed = base ^ (1000 + i);
        let mut len = 0u64;
        let whole = pattern(seed, 0, 16 << 20);
        for (j, data) in whole.chunks(1 << 20).enumerate() {
            match nfs.write(&fh, (j << 20) as u64, data, Stable::FileSync) {
                Ok(()) => {
                    len += 1 << 20;
                    accepted += 1 << 20;
                }
                Err(e) => {
                    nospc = NfsStatus::of(&e);
                    stored.push((fh, seed, len));
                    break 'fill;
                }
            }
        }
        stored.push((fh, seed, len));
    }
    assert_eq!(nospc, Some(28), "the fill ends with NFS3ERR_NOSPC");
    let (_, available_at_nospc) = fsstat(&nfs.conn, &root);
    eprintln!(
        "pool of {} MiB: {} MiB available at start, {} MiB accepted, {} MiB available at NOSPC",
        total >> 20,
        available_at_start >> 20,
        accepted >> 20,
        available_at_nospc >> 20
    );
    // NOSPC only where there truly was no room: nearly all that FSSTAT offered was
    // taken, and what it still offers is less than one more write's worth of slack.
    assert!(
        accepted + (16 << 20) >= available_at_start * 9 / 10,
        "NOSPC after {} MiB of {} MiB available",
        accepted >> 20,
        available_at_start >> 20
    );
    assert!(
        available_at_nospc < 8 << 20,
        "{available_at_nospc} bytes still available"
    );

    let check = |nfs: &Nfs| {
        for (fh, seed) in &precious {
            assert!(read_all(nfs, fh, 0, 4 << 20) == pattern(*seed, 0, 4 << 20));
        }
        for (i, (fh, seed, len)) in stored.iter().enumerate() {
            let got = read_all(nfs, fh, 0, *len as usize);
            let want = pattern(*seed, 0, *len as usize);
            if got != want {
                let first = got.iter().zip(&want).position(|(g, w)| g != w);
                let size = nfs.getattr(fh).unwrap().size;
                panic!(
                    "fill{i} changed: {} of {len} bytes read, first difference at {first:?}, \
                     size {size}, {} zero bytes",
                    got.len(),
                    got.iter().filter(|&&b| b == 0).count()
                );
            }
        }
    };
    check(&nfs);
    // A crash on a full pool: it imports, replays, and everything is still there.
    drop(nfs);
    served.restart();
    let nfs = Nfs::connect(&t, root_credential("torture")).unwrap();
    check(&nfs);

    // Freeing space makes room again (once the frees commit).
    for i in 0..stored.len() / 2 {
        assert!(nfs.remove(&root, &format!("fill{i}")).unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let again = nfs.create(&root, "after", true).unwrap();
    loop {
        match nfs.write(&again, 0, &pattern(7, 0, 1 << 20), Stable::FileSync) {
            Ok(()) => break,
            Err(e) if NfsStatus::of(&e) == Some(28) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("writing after frees: {e:#}"),
        }
    }
    for (fh, seed) in &precious {
        assert!(read_all(&nfs, fh, 0, 4 << 20) == pattern(*seed, 0, 4 << 20));
    }
    served.stop();
    assert!(
        !served.log_text().contains("panicked"),
        "{}",
        served.log_text()
    );
    save_figures(
        "enospc",
        &json!({
            "pool_bytes": total,
            "available_at_start": available_at_start,
            "accepted_bytes": accepted,
            "available_at_nospc": available_at_nospc,
            "lost": 0,
        }),
    );
}
