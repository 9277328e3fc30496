//! The SCSI target's commands against a real volume on a pool of simulated devices:
//! what initiators (and libiscsi's conformance suite) send, and the exact status,
//! data and sense each gets back: identification, capacity, reads and writes with
//! every range rule, verification, WRITE SAME and UNMAP with what GET LBA STATUS then
//! reports, COMPARE AND WRITE (atomic across two nexuses), mode pages and software
//! write protect, unit attentions, SPC-2 and persistent reservations (kept by the
//! store and restored), a sparse volume that runs out of space, and random CDBs that
//! never panic.

#[path = "../../pool/tests/common/mod.rs"]
mod common;
use common::*;

use fs::{Datasets, VolumeSpec};
use scsi::{LogicalUnit, LuConfig, Nexus, Reply, Status};
use std::sync::{Arc, Mutex};
use vdev::Layout;

const MIB: u64 = 1 << 20;
const BS: usize = 512;

fn nexus(i: u8) -> Nexus {
    Nexus {
        initiator_port: format!("iqn.2026-12.org.example:host{i},i,0x00023d00000{i}"),
        target_port: 1,
    }
}

struct Setup {
    ds: Datasets,
    lu: LogicalUnit,
    stored: Arc<Mutex<Vec<u8>>>,
}

fn setup_with(volsize: u64, sparse: bool) -> Setup {
    let devs = sim_devices(3, 21, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let ds = Datasets::new(pool).unwrap();
    ds.create_volume(
        "tank/lun",
        &VolumeSpec {
            volsize,
            volblocksize: None,
            sparse,
        },
        &[],
    )
    .unwrap();
    let stored = Arc::new(Mutex::new(Vec::new()));
    let lu = lu_over(&ds, &stored);
    Setup { ds, lu, stored }
}

fn lu_over(ds: &Datasets, stored: &Arc<Mutex<Vec<u8>>>) -> LogicalUnit {
    let vol = ds.open_volume("tank/lun").unwrap();
    let keep = stored.clone();
    let initial = stored.lock().unwrap().clone();
    LogicalUnit::new(
        vol,
        LuConfig {
            block_size: BS as u32,
            identity: 0x0012_3456_789A_BCDE,
            product: "VOLUME".into(),
        },
        &initial,
        Some(Box::new(move |b: &[u8]| {
            *keep.lock().unwrap() = b.to_vec();
            Ok(())
        })),
    )
    .unwrap()
}

fn setup() -> Setup {
    setup_with(16 * MIB, false)
}

/// Runs a command, clearing the new nexus's power-on attention first.
fn run(lu: &LogicalUnit, n: &Nexus, cdb: &[u8], data: &[u8]) -> Reply {
    lu.execute(n, cdb, data)
}

fn ready(lu: &LogicalUnit, n: &Nexus) {
    for _ in 0..10 {
        if run(lu, n, &[0; 6], &[]).status == Status::Good {
            return;
        }
    }
    panic!("unit attentions never cleared");
}

fn good(r: &Reply) -> Vec<u8> {
    assert_eq!(r.status, Status::Good, "{r:?}");
    r.data.to_vec()
}

fn sense(r: &Reply) -> (u8, u8, u8) {
    assert_eq!(r.status, Status::CheckCondition, "{r:?}");
    let s = r.sense.as_ref().unwrap();
    (s.key, s.asc, s.ascq)
}

fn rw10(op: u8, lba: u32, blocks: u16, flags: u8) -> Vec<u8> {
    let mut c = vec![0u8; 10];
    c[0] = op;
    c[1] = flags;
    c[2..6].copy_from_slice(&lba.to_be_bytes());
    c[7..9].copy_from_slice(&blocks.to_be_bytes());
    c
}

fn rw16(op: u8, lba: u64, blocks: u32, flags: u8) -> Vec<u8> {
    let mut c = vec![0u8; 16];
    c[0] = op;
    c[1] = flags;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

fn inquiry(evpd: bool, page: u8, alloc: u16) -> Vec<u8> {
    let mut c = vec![0x12, u8::from(evpd), page, 0, 0, 0];
    c[3..5].copy_from_slice(&alloc.to_be_bytes());
    c
}

#[test]
fn identification_capacity_and_attentions() {
    let s = setup();
    let (lu, a) = (&s.lu, nexus(1));
    // INQUIRY passes a pending attention; the next command reports it, once.
    let std = run(lu, &a, &inquiry(false, 0, 255), &[]);
    let d = good(&std);
    assert_eq!(
        (d[0], d[2], d[3] & 0x0F, d[4] as usize),
        (0, 6, 2, d.len() - 5)
    );
    assert_eq!(&d[8..13], b"SHOAL");
    assert!(
        d[58..66].windows(2).any(|w| w == [0x04, 0xC0]),
        "SBC-3 claimed"
    );
    assert_eq!(sense(&run(lu, &a, &[0; 6], &[])), (6, 0x29, 0));
    good(&run(lu, &a, &[0; 6], &[]));
    // Allocation length cuts; EVPD=0 with a page code is an invalid field.
    assert_eq!(good(&run(lu, &a, &inquiry(false, 0, 5), &[])).len(), 5);
    assert_eq!(
        sense(&run(lu, &a, &inquiry(false, 1, 255), &[])),
        (5, 0x24, 0)
    );

    let pages = good(&run(lu, &a, &inquiry(true, 0, 255), &[])).to_vec();
    assert_eq!(&pages[4..], &[0x00, 0x80, 0x83, 0xB0, 0xB1, 0xB2]);
    for &p in &pages[4..] {
        let d = good(&run(lu, &a, &inquiry(true, p, 255), &[])).to_vec();
        assert_eq!(d[1], p);
        assert_eq!(
            u16::from_be_bytes([d[2], d[3]]) as usize,
            d.len() - 4,
            "page {p:#x}"
        );
    }
    let ids = good(&run(lu, &a, &inquiry(true, 0x83, 255), &[])).to_vec();
    assert_eq!(&ids[4..8], &[0x01, 0x03, 0x00, 0x08]);
    assert_eq!(ids[8] >> 4, 3, "NAA locally assigned");
    let limits = good(&run(lu, &a, &inquiry(true, 0xB0, 255), &[])).to_vec();
    assert_eq!(limits.len(), 64);
    assert_eq!(
        u16::from_be_bytes([limits[6], limits[7]]),
        32,
        "16K of 512-byte blocks"
    );
    let lbp = good(&run(lu, &a, &inquiry(true, 0xB2, 255), &[])).to_vec();
    assert_eq!(lbp[5] & 0xE4, 0xE4, "LBPU, LBPWS, LBPWS10, LBPRZ");
    assert_eq!(lbp[6] & 7, 1, "a thick volume is resource provisioned");

    let cap = good(&run(lu, &a, &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[])).to_vec();
    assert_eq!(u32::from_be_bytes(cap[..4].try_into().unwrap()), 32767);
    assert_eq!(u32::from_be_bytes(cap[4..].try_into().unwrap()), 512);
    let mut rc16 = vec![0u8; 16];
    rc16[0] = 0x9E;
    rc16[1] = 0x10;
    rc16[13] = 32;
    let cap = good(&run(lu, &a, &rc16, &[])).to_vec();
    assert_eq!(u64::from_be_bytes(cap[..8].try_into().unwrap()), 32767);
    assert_eq!(cap[14] & 0xC0, 0xC0, "LBPME and LBPRZ");
    for alloc in 0..16u8 {
        rc16[13] = alloc;
        assert_eq!(good(&run(lu, &a, &rc16, &[])).len(), alloc as usize);
    }

    // A resize is news to every nexus, once.
    let b = nexus(2);
    ready(lu, &b);
    s.ds.set("tank/lun", "volsize", Some("32M")).unwrap();
    assert_eq!(sense(&run(lu, &a, &[0; 6], &[])), (6, 0x2A, 0x09));
    good(&run(lu, &a, &[0; 6], &[]));
    assert_eq!(sense(&run(lu, &b, &[0; 6], &[])), (6, 0x2A, 0x09));
    assert_eq!(lu.blocks(), 65536);

    // A LUN reset is news to every nexus, the one that asked for it too. REQUEST
    // SENSE reports and clears; then NO SENSE.
    lu.reset();
    assert_eq!(sense(&run(lu, &b, &[0; 6], &[])), (6, 0x29, 0x03));
    good(&run(lu, &b, &[0; 6], &[]));
    let rs = good(&run(lu, &a, &[0x03, 0, 0, 0, 18, 0], &[])).to_vec();
    assert_eq!((rs[2], rs[12], rs[13]), (6, 0x29, 0x03));
    let rs = good(&run(lu, &a, &[0x03, 0, 0, 0, 18, 0], &[])).to_vec();
    assert_eq!((rs[2], rs[12]), (0, 0));
    // Unknown operation codes, and bad service actions of known ones.
    assert_eq!(
        sense(&run(lu, &a, &[0xC5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[])),
        (5, 0x20, 0)
    );
    rc16[1] = 0x11;
    assert_eq!(sense(&run(lu, &a, &rc16, &[])).1, 0x24);
    assert_eq!(
        sense(&run(lu, &a, &[0x28, 0], &[])),
        (5, 0x24, 0),
        "a short CDB"
    );
}

#[test]
fn reads_writes_and_every_range_rule() {
    let s = setup();
    let (lu, a) = (&s.lu, nexus(1));
    ready(lu, &a);
    let last = lu.blocks() - 1;
    let data = Rng(1).bytes(8 * BS);
    good(&run(lu, &a, &rw10(0x2A, 100, 8, 0), &data));
    assert_eq!(good(&run(lu, &a, &rw10(0x28, 100, 8, 0), &[])), &data[..]);
    // FUA and DPO are accepted; protection fields are not.
    good(&run(lu, &a, &rw16(0x8A, last, 1, 0x18), &data[..BS]));
    assert_eq!(
        good(&run(lu, &a, &rw16(0x88, last, 1, 0x10), &[])),
        &data[..BS]
    );
    assert_eq!(
        sense(&run(lu, &a, &rw10(0x28, 0, 1, 0x20), &[])),
        (5, 0x24, 0)
    );
    // READ(6) length 0 means 256 blocks.
    assert_eq!(
        good(&run(lu, &a, &[0x08, 0, 0, 0, 0, 0], &[])).len(),
        256 * BS
    );
    // Past the end, spanning it, at huge LBAs and zero-length past it: 05/21/00.
    for cdb in [
        rw10(0x28, (last + 1) as u32, 1, 0),
        rw10(0x28, last as u32, 2, 0),
        rw10(0x28, u32::MAX, 1, 0),
        rw10(0x28, (last + 2) as u32, 0, 0),
        rw16(0x88, 1 << 63, 1, 0),
        rw16(0x88, u64::MAX, 1, 0),
        rw16(0x8A, last, 2, 0),
        rw10(0x2F, (last + 1) as u32, 0, 0),
    ] {
        assert_eq!(
            sense(&run(lu, &a, &cdb, &vec![0; 2 * BS])),
            (5, 0x21, 0),
            "{cdb:?}"
        );
    }
    good(&run(lu, &a, &rw10(0x28, 0, 0, 0), &[]));
    // Beyond the largest transfer: an invalid field.
    assert_eq!(sense(&run(lu, &a, &rw16(0x88, 0, 32768, 0), &[])).1, 0x24);
    // A write given fewer bytes than it names writes the whole blocks it got.
    let half = Rng(2).bytes(BS + 100);
    good(&run(lu, &a, &rw10(0x2A, 200, 2, 0), &half));
    let back = good(&run(lu, &a, &rw10(0x28, 200, 2, 0), &[])).to_vec();
    assert_eq!(&back[..BS], &half[..BS]);
    assert!(back[BS..].iter().all(|&b| b == 0));

    // VERIFY: BYTCHK 0 reads, 1 compares (a mismatch names its offset), 3 compares
    // one block with each.
    good(&run(lu, &a, &rw10(0x2F, 100, 8, 0), &[]));
    good(&run(lu, &a, &rw10(0x2F, 100, 8, 0x02), &data));
    let mut wrong = data.clone();
    wrong[3 * BS + 7] ^= 1;
    let r = run(lu, &a, &rw10(0x2F, 100, 8, 0x02), &wrong);
    assert_eq!(sense(&r), (0xE, 0x1D, 0));
    assert_eq!(r.sense.unwrap().information, Some((3 * BS + 7) as u64));
    good(&run(lu, &a, &rw10(0x2E, 300, 2, 0x02), &data[..2 * BS]));
    let same = vec![0xA5u8; BS];
    good(&run(lu, &a, &rw10(0x2A, 400, 3, 0), &same.repeat(3)));
    good(&run(lu, &a, &rw10(0x2F, 400, 3, 0x06), &same));

    // ORWRITE ORs into what is there; WRITE ATOMIC writes whole, up to its limit.
    good(&run(lu, &a, &rw10(0x2A, 500, 1, 0), &vec![0xA5; BS]));
    good(&run(lu, &a, &rw16(0x8B, 500, 1, 0), &vec![0x5A; BS]));
    assert!(good(&run(lu, &a, &rw10(0x28, 500, 1, 0), &[]))
        .iter()
        .all(|&b| b == 0xFF));
    let atomic = |lba: u64, blocks: u16, boundary: u16| {
        let mut c = vec![0u8; 16];
        c[0] = 0x9C;
        c[2..10].copy_from_slice(&lba.to_be_bytes());
        c[10..12].copy_from_slice(&boundary.to_be_bytes());
        c[12..14].copy_from_slice(&blocks.to_be_bytes());
        c
    };
    let block8 = Rng(3).bytes(8 * BS);
    good(&run(lu, &a, &atomic(600, 8, 0), &block8));
    assert_eq!(good(&run(lu, &a, &rw10(0x28, 600, 8, 0), &[])), &block8[..]);
    assert_eq!(sense(&run(lu, &a, &atomic(600, 8, 4), &block8)).1, 0x24);
    assert_eq!(sense(&run(lu, &a, &atomic(0, 4096, 0), &[])).1, 0x24);
    assert_eq!(sense(&run(lu, &a, &atomic(last, 2, 0), &block8)).1, 0x21);

    // SYNCHRONIZE CACHE and PRE-FETCH check their range too.
    good(&run(lu, &a, &rw10(0x35, 0, 0, 0), &[]));
    assert_eq!(
        sense(&run(lu, &a, &rw16(0x91, last + 1, 1, 0), &[])).1,
        0x21
    );
    good(&run(lu, &a, &rw10(0x34, 0, 16, 0), &[]));
}

#[test]
fn write_same_unmap_and_lba_status() {
    let s = setup();
    let (lu, a) = (&s.lu, nexus(1));
    ready(lu, &a);
    let status = |lba: u64| {
        let mut c = vec![0u8; 16];
        c[0] = 0x9E;
        c[1] = 0x12;
        c[2..10].copy_from_slice(&lba.to_be_bytes());
        c[13] = 255;
        let d = good(&run(lu, &a, &c, &[])).to_vec();
        let first = &d[8..24];
        (
            u64::from_be_bytes(first[..8].try_into().unwrap()),
            u32::from_be_bytes(first[8..12].try_into().unwrap()),
            first[12],
        )
    };
    assert_eq!(status(0), (0, 32768, 1), "all unmapped at first");
    // WRITE SAME of a pattern over 1000 blocks.
    let block = vec![0x5Au8; BS];
    good(&run(lu, &a, &rw16(0x93, 0, 1000, 0), &block));
    let back = good(&run(lu, &a, &rw10(0x28, 0, 1000, 0), &[])).to_vec();
    assert!(back.iter().all(|&b| b == 0x5A));
    let (lba, n, st) = status(0);
    assert_eq!((lba, st), (0, 0));
    assert!(n >= 1000, "{n}");
    // WRITE SAME with UNMAP: unmapped whatever the block holds, reads zeros.
    good(&run(lu, &a, &rw16(0x93, 256, 512, 0x08), &vec![0xEEu8; BS]));
    assert_eq!(status(256), (256, 512, 1));
    assert!(good(&run(lu, &a, &rw10(0x28, 256, 512, 0), &[]))
        .iter()
        .all(|&b| b == 0));
    // The wrong Data-Out size and ANCHOR are invalid fields.
    assert_eq!(
        sense(&run(lu, &a, &rw16(0x93, 0, 4, 0), &vec![1u8; BS / 2])).1,
        0x24
    );
    assert_eq!(
        sense(&run(lu, &a, &rw16(0x93, 0, 4, 0x18), &vec![0u8; BS])).1,
        0x24
    );

    // UNMAP: descriptors are checked, then applied.
    let unmap = |descs: &[(u64, u32)]| {
        let mut p = vec![0u8; 8];
        p[0..2].copy_from_slice(&((6 + 16 * descs.len()) as u16).to_be_bytes());
        p[2..4].copy_from_slice(&((16 * descs.len()) as u16).to_be_bytes());
        for (lba, n) in descs {
            p.extend_from_slice(&lba.to_be_bytes());
            p.extend_from_slice(&n.to_be_bytes());
            p.extend_from_slice(&[0; 4]);
        }
        let mut c = vec![0u8; 10];
        c[0] = 0x42;
        c[7..9].copy_from_slice(&(p.len() as u16).to_be_bytes());
        (c, p)
    };
    good(&run(lu, &a, &rw16(0x93, 2000, 2048, 0), &block));
    let (c, p) = unmap(&[(2048, 1024), (5000, 0)]);
    good(&run(lu, &a, &c, &p));
    assert_eq!(status(2048), (2048, 1024, 1));
    assert_eq!(status(3072).2, 0);
    let (c, p) = unmap(&[(100, 4), (lu.blocks(), 1)]);
    assert_eq!(sense(&run(lu, &a, &c, &p)).1, 0x21);
    assert_eq!(status(100).2, 0, "a refused UNMAP changes nothing");
    let (c, _) = unmap(&[]);
    good(&run(lu, &a, &c, &[0u8; 8]));
    assert_eq!(
        sense(&run(lu, &a, &[0x42, 0, 0, 0, 0, 0, 0, 0, 4, 0], &[0; 4])).1,
        0x1A
    );
    // GET LBA STATUS past the end.
    let mut c = vec![0u8; 16];
    c[0] = 0x9E;
    c[1] = 0x12;
    c[2..10].copy_from_slice(&lu.blocks().to_be_bytes());
    c[13] = 24;
    assert_eq!(sense(&run(lu, &a, &c, &[])), (5, 0x21, 0));
}

#[test]
fn compare_and_write_is_one_step_for_two_nexuses() {
    let s = setup();
    let (lu, a, b) = (&s.lu, nexus(1), nexus(2));
    ready(lu, &a);
    ready(lu, &b);
    let caw = |lba: u64, blocks: u8| {
        let mut c = vec![0u8; 16];
        c[0] = 0x89;
        c[2..10].copy_from_slice(&lba.to_be_bytes());
        c[13] = blocks;
        c
    };
    good(&run(lu, &a, &rw10(0x2A, 10, 2, 0), &vec![b'A'; 2 * BS]));
    let mut both = vec![b'A'; 2 * BS];
    both.extend(vec![b'B'; 2 * BS]);
    good(&run(lu, &a, &caw(10, 2), &both));
    assert!(good(&run(lu, &a, &rw10(0x28, 10, 2, 0), &[]))
        .iter()
        .all(|&x| x == b'B'));
    // A miscompare writes nothing and names the first differing byte.
    let r = run(lu, &a, &caw(10, 2), &both);
    assert_eq!(sense(&r), (0xE, 0x1D, 0));
    assert_eq!(r.sense.unwrap().information, Some(0));
    assert!(good(&run(lu, &a, &rw10(0x28, 10, 2, 0), &[]))
        .iter()
        .all(|&x| x == b'B'));
    assert_eq!(sense(&run(lu, &a, &caw(10, 2), &both[..3 * BS])).1, 0x24);

    // Two nexuses each take a counter from n to n+1 with COMPARE AND WRITE, 300
    // times, retrying on a miscompare: no increment is lost.
    good(&run(lu, &a, &rw10(0x2A, 50, 1, 0), &vec![0u8; BS]));
    std::thread::scope(|sc| {
        for n in [&a, &b] {
            sc.spawn(move || {
                let mut done = 0;
                while done < 300 {
                    let now = good(&run(lu, n, &rw10(0x28, 50, 1, 0), &[])).to_vec();
                    let v = u64::from_le_bytes(now[..8].try_into().unwrap());
                    let mut next = now.clone();
                    next[..8].copy_from_slice(&(v + 1).to_le_bytes());
                    let r = run(lu, n, &caw(50, 1), &[now, next].concat());
                    match r.status {
                        Status::Good => done += 1,
                        _ => assert_eq!(r.sense.unwrap().key, 0xE),
                    }
                }
            });
        }
    });
    let end = good(&run(lu, &a, &rw10(0x28, 50, 1, 0), &[])).to_vec();
    assert_eq!(u64::from_le_bytes(end[..8].try_into().unwrap()), 600);
}

#[test]
fn mode_pages_and_software_write_protect() {
    let s = setup();
    let (lu, a, b) = (&s.lu, nexus(1), nexus(2));
    ready(lu, &a);
    ready(lu, &b);
    let all = good(&run(lu, &a, &[0x1A, 0, 0x3F, 0, 255, 0], &[])).to_vec();
    assert_eq!(all[0] as usize, all.len() - 1);
    assert_eq!(all[2], 0x10, "DPOFUA, not write protected");
    assert_eq!(all[3], 8, "one block descriptor");
    let caching = &all[12..32];
    assert_eq!(
        (caching[0], caching[2] & 0x04),
        (0x08, 0),
        "write-through: WCE off"
    );
    // sync=disabled promises nothing: a volatile cache, said so.
    s.ds.set("tank/lun", "sync", Some("disabled")).unwrap();
    let again = good(&run(lu, &a, &[0x1A, 0, 0x08, 0, 255, 0], &[])).to_vec();
    assert_eq!(again[4 + 8 + 2] & 0x04, 0x04, "WCE on with sync=disabled");
    s.ds.set("tank/lun", "sync", None).unwrap();
    let control = all[32..44].to_vec();
    assert_eq!(control[0], 0x0A);
    let direct = good(&run(lu, &a, &[0x1A, 0x08, 0x0A, 0, 255, 0], &[])).to_vec();
    assert_eq!(&direct[4..], &control[..]);
    let ten = good(&run(lu, &a, &[0x5A, 0, 0x3F, 0, 0, 0, 0, 1, 0, 0], &[])).to_vec();
    assert_eq!(u16::from_be_bytes([ten[0], ten[1]]) as usize, ten.len() - 2);
    assert_eq!(
        sense(&run(lu, &a, &[0x1A, 0, 0x3F | 0xC0, 0, 255, 0], &[])),
        (5, 0x39, 0)
    );
    assert_eq!(
        sense(&run(lu, &a, &[0x1A, 0, 0x19, 0, 255, 0], &[])).1,
        0x24
    );

    // SWP through MODE SELECT(6): writes are then refused 07/27/02, reads go on, and
    // the other nexus hears the mode change.
    let mut page = control.clone();
    page[4] |= 0x08;
    let mut params = vec![0u8, 0, 0, 0];
    params.extend_from_slice(&page);
    let select = [0x15, 0x10, 0, 0, params.len() as u8, 0];
    good(&run(lu, &a, &select, &params));
    assert_eq!(
        sense(&run(lu, &a, &rw10(0x2A, 0, 1, 0), &[0; BS])),
        (7, 0x27, 2)
    );
    good(&run(lu, &a, &rw10(0x28, 0, 1, 0), &[]));
    assert_eq!(sense(&run(lu, &b, &[0; 6], &[])), (6, 0x2A, 0x01));
    let hdr = good(&run(lu, &b, &[0x1A, 0, 0x3F, 0, 255, 0], &[])).to_vec();
    assert_eq!(hdr[2] & 0x80, 0x80, "WP shown");
    // Anything but SWP is not changeable; PF=0 and SP=1 are refused.
    let mut bad = params.clone();
    bad[4 + 3] ^= 0x10;
    assert_eq!(sense(&run(lu, &a, &select, &bad)), (5, 0x26, 0));
    assert_eq!(
        sense(&run(lu, &a, &[0x15, 0, 0, 0, 16, 0], &params)).1,
        0x24
    );
    assert_eq!(
        sense(&run(lu, &a, &[0x15, 0x11, 0, 0, 16, 0], &params)).1,
        0x24
    );
    // A LUN reset clears SWP.
    lu.reset();
    ready(lu, &a);
    good(&run(lu, &a, &rw10(0x2A, 0, 1, 0), &[0; BS]));
}

fn prout(action: u8, kind: u8, key: u64, sa_key: u64) -> (Vec<u8>, Vec<u8>) {
    let mut c = vec![0u8; 10];
    c[0] = 0x5F;
    c[1] = action;
    c[2] = kind;
    c[8] = 24;
    let mut p = vec![0u8; 24];
    p[..8].copy_from_slice(&key.to_be_bytes());
    p[8..16].copy_from_slice(&sa_key.to_be_bytes());
    (c, p)
}

fn prin(lu: &LogicalUnit, n: &Nexus, action: u8) -> Vec<u8> {
    let c = [0x5E, action, 0, 0, 0, 0, 0, 0x10, 0, 0];
    good(&lu.execute(n, &c, &[])).to_vec()
}

fn pr(lu: &LogicalUnit, n: &Nexus, action: u8, kind: u8, key: u64, sa_key: u64) -> Reply {
    let (c, p) = prout(action, kind, key, sa_key);
    lu.execute(n, &c, &p)
}

#[test]
fn spc2_reservations_hold_the_unit_for_one_nexus() {
    let s = setup();
    let (lu, a, b) = (&s.lu, nexus(1), nexus(2));
    ready(lu, &a);
    ready(lu, &b);
    good(&run(lu, &a, &[0x16, 0, 0, 0, 0, 0], &[]));
    good(&run(lu, &a, &[0x16, 0, 0, 0, 0, 0], &[]));
    assert_eq!(
        run(lu, &b, &[0x16, 0, 0, 0, 0, 0], &[]).status,
        Status::ReservationConflict
    );
    assert_eq!(
        run(lu, &b, &[0x1A, 0, 0x3F, 0, 255, 0], &[]).status,
        Status::ReservationConflict
    );
    good(&run(lu, &b, &[0x17, 0, 0, 0, 0, 0], &[]));
    good(&run(lu, &b, &inquiry(false, 0, 36), &[]));
    good(&run(lu, &a, &[0x1A, 0, 0x3F, 0, 255, 0], &[]));
    // The holder's nexus is lost: the reservation goes with it.
    lu.nexus_lost(&a);
    good(&run(lu, &b, &[0x16, 0, 0, 0, 0, 0], &[]));
    good(&run(lu, &b, &[0x17, 0, 0, 0, 0, 0], &[]));
}

#[test]
fn persistent_reservations_follow_spc4_and_survive_a_restart() {
    let s = setup();
    let (lu, a, b, c) = (&s.lu, nexus(1), nexus(2), nexus(3));
    for n in [&a, &b, &c] {
        ready(lu, n);
    }
    let gen = |lu: &LogicalUnit| u32::from_be_bytes(prin(lu, &a, 0)[..4].try_into().unwrap());
    let g0 = gen(lu);
    // REGISTER rules: an unregistered nexus must name key 0; a registered one its own.
    good(&pr(lu, &a, 0, 0, 0, 0xA));
    assert_eq!(pr(lu, &a, 0, 0, 0, 0xB).status, Status::ReservationConflict);
    good(&pr(lu, &b, 6, 0, 0x999, 0xB)); // REGISTER AND IGNORE EXISTING KEY
    assert_eq!(gen(lu), g0 + 2);
    let keys = prin(lu, &a, 0);
    assert_eq!(u32::from_be_bytes(keys[4..8].try_into().unwrap()), 16);

    // WRITE EXCLUSIVE REGISTRANTS ONLY by A: B (registered) writes, C reads only.
    good(&pr(lu, &a, 1, 5, 0xA, 0));
    assert_eq!(gen(lu), g0 + 2, "RESERVE does not bump the generation");
    let res = prin(lu, &a, 1);
    assert_eq!(u64::from_be_bytes(res[8..16].try_into().unwrap()), 0xA);
    assert_eq!(res[21], 5);
    good(&run(lu, &b, &rw10(0x2A, 1, 1, 0), &[1; BS]));
    good(&run(lu, &c, &rw10(0x28, 1, 1, 0), &[]));
    assert_eq!(
        run(lu, &c, &rw10(0x2A, 1, 1, 0), &[1; BS]).status,
        Status::ReservationConflict
    );
    // B cannot reserve another type nor release A's.
    assert_eq!(pr(lu, &b, 1, 3, 0xB, 0).status, Status::ReservationConflict);
    good(&pr(lu, &b, 2, 5, 0xB, 0));
    assert_eq!(prin(lu, &a, 1)[21], 5, "still A's");
    // Release with the wrong type: 05/26/04.
    assert_eq!(sense(&pr(lu, &a, 2, 1, 0xA, 0)), (5, 0x26, 0x04));

    // B preempts A: A's registration goes, B holds EXCLUSIVE ACCESS, A hears of it.
    good(&pr(lu, &b, 4, 3, 0xB, 0xA));
    assert_eq!(sense(&run(lu, &a, &[0; 6], &[])), (6, 0x2A, 0x05));
    assert_eq!(
        run(lu, &a, &rw10(0x28, 1, 1, 0), &[]).status,
        Status::ReservationConflict
    );
    assert_eq!(
        run(lu, &c, &rw10(0x28, 1, 1, 0), &[]).status,
        Status::ReservationConflict
    );
    good(&run(lu, &b, &rw10(0x28, 1, 1, 0), &[]));
    let caps = prin(lu, &a, 2);
    assert_eq!(u16::from_be_bytes([caps[0], caps[1]]), 8);
    let full = prin(lu, &a, 3);
    assert_eq!(
        u32::from_be_bytes(full[4..8].try_into().unwrap()) as usize,
        full.len() - 8
    );
    assert_eq!(full[8 + 12], 1, "B is the holder");
    // Service actions past 3 of PRIN are invalid fields, not unknown commands.
    assert_eq!(
        sense(&lu.execute(&a, &[0x5E, 4, 0, 0, 0, 0, 0, 0x10, 0, 0], &[])),
        (5, 0x24, 0)
    );
    // SPC-2 RESERVE conflicts while persistent reservations exist.
    assert_eq!(
        run(lu, &c, &[0x16, 0, 0, 0, 0, 0], &[]).status,
        Status::ReservationConflict
    );

    // A restart (a new unit over the stored state): the same registrations and holder.
    let before = prin(lu, &b, 3);
    drop(s.lu);
    let lu2 = lu_over(&s.ds, &s.stored);
    for n in [&a, &b, &c] {
        ready(&lu2, n);
    }
    assert_eq!(prin(&lu2, &b, 3), before);
    assert_eq!(
        run(&lu2, &c, &rw10(0x28, 1, 1, 0), &[]).status,
        Status::ReservationConflict
    );
    // CLEAR: nothing left, generation bumped once.
    let g = gen(&lu2);
    good(&pr(&lu2, &b, 3, 0, 0xB, 0));
    assert_eq!(gen(&lu2), g + 1);
    assert_eq!(
        u32::from_be_bytes(prin(&lu2, &a, 0)[4..8].try_into().unwrap()),
        0
    );
    good(&run(&lu2, &c, &rw10(0x2A, 1, 1, 0), &[2; BS]));
    // The parameter list must be 24 bytes.
    let (mut cdb, p) = prout(0, 0, 0, 1);
    cdb[8] = 20;
    assert_eq!(sense(&lu2.execute(&a, &cdb, &p)), (5, 0x1A, 0));
}

#[test]
fn a_sparse_volume_out_of_space_answers_space_allocation_failed() {
    let s = setup_with(512 * MIB, true);
    let (lu, a) = (&s.lu, nexus(1));
    ready(lu, &a);
    let chunk = Rng(9).bytes(MIB as usize);
    let mut failed = None;
    for i in 0..512u64 {
        let r = run(lu, &a, &rw16(0x8A, i * 2048, 2048, 0), &chunk);
        if r.status != Status::Good {
            failed = Some(r);
            break;
        }
    }
    let r = failed.expect("a 512M sparse volume on a small pool fills it");
    assert_eq!(sense(&r), (7, 0x27, 0x07));
    // Reads of what was written go on.
    assert_eq!(good(&run(lu, &a, &rw16(0x88, 0, 2048, 0), &[])), &chunk[..]);
}

#[test]
fn report_supported_operation_codes_agrees_with_dispatch() {
    let s = setup();
    let (lu, a) = (&s.lu, nexus(1));
    ready(lu, &a);
    let rsoc = |opts: u8, op: u8, sa: u16| {
        let mut c = vec![0u8; 12];
        c[0] = 0xA3;
        c[1] = 0x0C;
        c[2] = opts;
        c[3] = op;
        c[4..6].copy_from_slice(&sa.to_be_bytes());
        c[6..10].copy_from_slice(&65535u32.to_be_bytes());
        lu.execute(&a, &c, &[])
    };
    let all = good(&rsoc(0x80, 0, 0)).to_vec();
    let n = u32::from_be_bytes(all[..4].try_into().unwrap()) as usize / 20;
    assert_eq!(n, scsi::opcodes::SERVED.len());
    for i in 0..n {
        let d = &all[4 + 20 * i..4 + 20 * (i + 1)];
        let (op, sa, servactv) = (d[0], u16::from_be_bytes([d[2], d[3]]), d[5] & 1 == 1);
        assert_eq!(d[5] & 2, 2, "CTDP with RCTD");
        assert_eq!(u16::from_be_bytes([d[8], d[9]]), 0x0A);
        if servactv {
            assert_eq!(sense(&rsoc(1, op, 0)), (5, 0x24, 0));
            let one = good(&rsoc(2, op, sa)).to_vec();
            assert_eq!((one[1] & 7, one[4]), (3, op));
        } else {
            assert_eq!(sa, 0);
            let one = good(&rsoc(1, op, 0)).to_vec();
            assert_eq!((one[1] & 7, one[4]), (3, op));
            assert_eq!(sense(&rsoc(2, op, 0)), (5, 0x24, 0));
        }
        // Every listed command is dispatched: never INVALID COMMAND OPERATION CODE.
        let mut cdb = vec![0u8; scsi::cdb::cdb_len(op).unwrap()];
        cdb[0] = op;
        if servactv {
            cdb[1] = sa as u8;
        }
        let r = lu.execute(&a, &cdb, &[]);
        if let Some(s) = &r.sense {
            assert_ne!(
                (s.key, s.asc),
                (5, 0x20),
                "{op:#x}/{sa:#x} listed but not served"
            );
        }
    }
    // An unlisted opcode is reported unsupported.
    assert_eq!(good(&rsoc(1, 0xC5, 0))[1] & 7, 1);
    let rsoc_bad = rsoc(5, 0, 0);
    let sk = rsoc_bad.sense.clone().unwrap();
    assert_eq!((sk.asc, sk.field.map(|f| f.1)), (0x24, Some(2)));
}

#[test]
fn random_cdbs_and_parameter_lists_never_panic() {
    let s = setup();
    let (lu, a) = (&s.lu, nexus(1));
    let mut rng = Rng(77);
    let served: Vec<u8> = scsi::opcodes::SERVED.iter().map(|c| c.opcode).collect();
    for i in 0..20_000 {
        let len = rng.below(18) as usize;
        let mut cdb = rng.bytes(len);
        if !cdb.is_empty() && i % 2 == 0 {
            cdb[0] = served[rng.below(served.len() as u64) as usize];
        }
        // Keep transfers small, so the test stays quick.
        if cdb.len() >= 10 && i % 3 != 0 {
            cdb[7] = 0;
        }
        let dlen = rng.below(3 * BS as u64) as usize;
        let data = rng.bytes(dlen);
        let r = lu.execute(&a, &cdb, &data);
        assert!(
            r.status != Status::Good || r.sense.is_none(),
            "GOOD with sense for {cdb:?}"
        );
    }
}
