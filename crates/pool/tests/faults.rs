//! Fault tests: silent corruption on up to `nparity` devices of a RAID-Z group or on all
//! but one side of a mirror, read errors, misdirected writes and dead devices. Every
//! read must return the right bytes, scrub must repair everything, and the per-device
//! checksum counters must equal exactly what was injected.

mod common;

use common::*;
use pool::blkptr::BlockPointer;
use pool::compress::Compression;
use std::collections::BTreeMap;
use std::sync::Arc;
use vdev::raidz_map::raidz_map;
use vdev::{label, Device, Fault, Health, Layout, SimDevice, SECTOR_SIZE};

type Files = Vec<(u64, Vec<u8>)>;

fn fill(pool: &pool::Pool, os: u64, seed: u64) -> Files {
    let mut rng = Rng(seed);
    let mut files = Vec::new();
    for (bs, comp, len) in [
        (131072u32, Compression::Off, 2_000_000usize),
        (16384, Compression::Lz4, 700_000),
        (4096, Compression::Gzip(6), 90_000),
        (131072, Compression::Zstd(3), 1_500_000),
        (512, Compression::Off, 3_000),
    ] {
        let obj = new_file(pool, os, bs, comp);
        let data = if comp == Compression::Off {
            rng.bytes(len)
        } else {
            rng.mixed(len)
        };
        pool.write(os, obj, 0, &data).unwrap();
        files.push((obj, data));
    }
    pool.sync().unwrap();
    files
}

fn verify_files(pool: &pool::Pool, os: u64, files: &Files) {
    for (obj, data) in files {
        assert_eq!(
            &pool.read(os, *obj, 0, data.len()).unwrap(),
            data,
            "object {obj}"
        );
    }
}

fn data_start(dev: &SimDevice) -> u64 {
    label::data_area(dev.size_bytes()).0
}

fn cksum_errors(pool: &pool::Pool) -> Vec<u64> {
    pool.status().vdevs[0]
        .children
        .iter()
        .map(|c| c.cksum_errors)
        .collect()
}

/// Creates, fills and exports a pool; returns its devices, object set and files.
fn prepared(
    layout: Layout,
    ndev: usize,
    seed: u64,
) -> (Vec<Arc<SimDevice>>, u64, Files, Vec<BlockPointer>) {
    let devs = sim_devices(ndev, seed, None);
    let pool = create_pool(layout, &devs);
    let os = pool.create_objset("tank/data", "{}").unwrap();
    let files = fill(&pool, os, seed);
    let blocks = pool.committed_blocks().unwrap();
    pool.export().unwrap();
    (devs, os, files, blocks)
}

#[test]
fn raidz_silent_corruption_on_up_to_nparity_devices() {
    for nparity in 1..=3usize {
        let ndev = nparity + 4;
        let (devs, os, files, blocks) = prepared(Layout::RaidZ { nparity }, ndev, nparity as u64);
        let mut rng = Rng(100 + nparity as u64);
        // The devices that will carry corruption.
        let mut victims: Vec<usize> = Vec::new();
        while victims.len() < nparity {
            let v = rng.below(ndev as u64) as usize;
            if !victims.contains(&v) {
                victims.push(v);
            }
        }
        let mut expected = vec![0u64; ndev];
        for bp in &blocks {
            for dva in bp.copies() {
                if rng.below(2) == 0 {
                    continue;
                }
                let map = raidz_map(ndev, nparity, dva.offset, bp.io_size());
                for col in &map.columns {
                    if victims.contains(&col.child) && rng.below(3) != 0 {
                        // Byte 0 of a column always lies inside the checksummed bytes.
                        let dev = &devs[col.child];
                        let offset = data_start(dev) + col.child_offset;
                        dev.inject(Fault::BitFlip {
                            offset,
                            bit: rng.below(8) as u8,
                        });
                        expected[col.child] += 1;
                    }
                }
            }
        }
        let injected: u64 = expected.iter().sum();
        assert!(
            injected > 20,
            "the test must inject real damage ({injected})"
        );

        let pool = import(&devs);
        verify_files(&pool, os, &files);
        let summary = pool.scrub(&|_| {}).unwrap();
        assert_eq!(summary.errors, 0);
        assert_eq!(
            cksum_errors(&pool),
            expected,
            "raidz{nparity}: counters must match the injection"
        );
        let second = pool.scrub(&|_| {}).unwrap();
        assert_eq!(
            second.bad_copies, 0,
            "raidz{nparity}: the first scrub repaired everything"
        );
        assert_eq!(cksum_errors(&pool), expected);
        assert!(pool.check().unwrap().problems.is_empty());
        pool.export().unwrap();
        drop(pool);
        let pool = import(&devs);
        verify_files(&pool, os, &files);
        assert_eq!(
            cksum_errors(&pool),
            vec![0; ndev],
            "repairs were written back"
        );
    }
}

#[test]
fn mirror_corruption_on_all_but_one_side() {
    let ndev = 3;
    let (devs, os, files, blocks) = prepared(Layout::Mirror, ndev, 9);
    let mut rng = Rng(9);
    let mut expected = vec![0u64; ndev];
    for bp in &blocks {
        for dva in bp.copies() {
            if rng.below(2) == 0 {
                continue;
            }
            let survivor = rng.below(ndev as u64) as usize;
            for (i, dev) in devs.iter().enumerate() {
                if i != survivor {
                    let len = bp.io_size().min(SECTOR_SIZE as u64);
                    dev.corrupt_range(data_start(dev) + dva.offset, len, rng.next());
                    expected[i] += 1;
                }
            }
        }
    }
    let pool = import(&devs);
    verify_files(&pool, os, &files);
    let summary = pool.scrub(&|_| {}).unwrap();
    assert_eq!(summary.errors, 0);
    assert_eq!(cksum_errors(&pool), expected);
    assert_eq!(pool.scrub(&|_| {}).unwrap().bad_copies, 0);
    assert!(pool.check().unwrap().problems.is_empty());
}

#[test]
fn read_errors_and_misdirected_writes_heal() {
    let devs = sim_devices(5, 11, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let os = pool.create_objset("tank/data", "{}").unwrap();
    let mut files = fill(&pool, os, 11);
    // A misdirected write: reported done, landed 1 MiB away.
    devs[2].inject(Fault::MisdirectNextWrite {
        delta_bytes: 1 << 20,
    });
    let mut rng = Rng(12);
    let obj = new_file(&pool, os, 131072, Compression::Off);
    let data = rng.bytes(3_000_000);
    pool.write(os, obj, 0, &data).unwrap();
    files.push((obj, data));
    pool.sync().unwrap();
    pool.export().unwrap();
    drop(pool);
    let pool = import(&devs);
    verify_files(&pool, os, &files);
    let summary = pool.scrub(&|_| {}).unwrap();
    assert_eq!(summary.errors, 0);
    assert!(pool.status().vdevs[0].children[2].cksum_errors > 0);
    pool.export().unwrap();
    drop(pool);
    // Then read errors over a wide range of another device, a few times each.
    let pool = import(&devs);
    devs[4].inject(Fault::ReadError {
        offset: 0,
        len: 1 << 30,
        times: 10,
    });
    verify_files(&pool, os, &files);
    let summary = pool.scrub(&|_| {}).unwrap();
    assert_eq!(summary.errors, 0);
    assert!(pool.status().vdevs[0].children[4].read_errors > 0);
    assert_eq!(pool.scrub(&|_| {}).unwrap().bad_copies, 0);
    verify_files(&pool, os, &files);
    assert!(pool.check().unwrap().problems.is_empty());
}

#[test]
fn dead_devices_degrade_then_fault_without_wrong_data() {
    let devs = sim_devices(6, 13, None);
    let pool = create_pool(Layout::RaidZ { nparity: 2 }, &devs);
    let os = pool.create_objset("tank/data", "{}").unwrap();
    let files = fill(&pool, os, 13);
    pool.export().unwrap();
    drop(pool);
    devs[1].inject(Fault::Dead);
    devs[4].inject(Fault::Dead);
    let pool = import(&devs);
    verify_files(&pool, os, &files);
    // Writes and commits go on while degraded.
    let mut rng = Rng(14);
    let obj = new_file(&pool, os, 131072, Compression::Off);
    let data = rng.bytes(1_000_000);
    pool.write(os, obj, 0, &data).unwrap();
    pool.sync().unwrap();
    assert_eq!(pool.read(os, obj, 0, data.len()).unwrap(), data);
    assert_eq!(pool.health(), Health::Degraded);
    let st = pool.status();
    let states: Vec<&str> = st.vdevs[0]
        .children
        .iter()
        .map(|c| c.health.as_str())
        .collect();
    assert_eq!(
        states.iter().filter(|s| **s != "ONLINE").count(),
        2,
        "{states:?}"
    );
    // A third death exceeds raidz2: reads fail cleanly, never return wrong bytes.
    devs[0].inject(Fault::Dead);
    let fresh = import_result(&devs);
    assert!(
        fresh.is_err(),
        "a raidz2 missing three devices must not import"
    );
    let mut wrong = 0;
    let mut failed = 0;
    for (obj, data) in &files {
        match pool.read(os, *obj, 0, data.len()) {
            Ok(got) if &got == data => {}
            Ok(_) => wrong += 1,
            Err(_) => failed += 1,
        }
    }
    assert_eq!(wrong, 0);
    let _ = failed; // cached blocks may still read; uncached ones fail
}

fn import_result(devs: &[Arc<SimDevice>]) -> Result<Arc<pool::Pool>, pool::PoolError> {
    pool::Pool::import(args(devs), Some("tank"), opts())
}

#[test]
fn metadata_copies_are_spread() {
    let devs = sim_devices(2, 15, None);
    let pool = pool::Pool::create(
        "tank",
        vec![
            pool::pool::TopArg {
                layout: Layout::Disk,
                devices: args(&devs[0..1]),
            },
            pool::pool::TopArg {
                layout: Layout::Disk,
                devices: vec![pool::pool::DeviceArg {
                    path: "sim1".into(),
                    device: devs[1].clone(),
                }],
            },
        ],
        vec![],
        vec![],
        opts(),
    )
    .unwrap();
    let os = pool.create_objset("tank/data", "{}").unwrap();
    let files = fill(&pool, os, 15);
    let blocks = pool.committed_blocks().unwrap();
    let mut per_vdev: BTreeMap<u32, u64> = BTreeMap::new();
    for bp in blocks.iter().filter(|b| b.block_type.is_metadata()) {
        let vdevs: Vec<u32> = bp.copies().map(|d| d.vdev).collect();
        assert_eq!(vdevs.len(), 2, "metadata has two copies");
        assert_ne!(vdevs[0], vdevs[1], "on different vdevs when there are two");
        for v in vdevs {
            *per_vdev.entry(v).or_default() += 1;
        }
    }
    // Lose all data on one plain disk: metadata survives on the other; data on the
    // lost disk is unreadable (no redundancy), which reads report instead of lying.
    pool.export().unwrap();
    drop(pool);
    devs[1].corrupt_range(data_start(&devs[1]), 32 << 20, 1);
    let pool = import(&devs);
    for (obj, data) in &files {
        if let Ok(got) = pool.read(os, *obj, 0, data.len()) {
            assert_eq!(&got, data);
        }
    }
    assert!(per_vdev.len() == 2);
}

#[test]
fn replace_a_dead_device_and_resilver_only_allocated_space() {
    for (layout, ndev) in [(Layout::RaidZ { nparity: 2 }, 6), (Layout::Mirror, 2)] {
        let devs = sim_devices(ndev, 21, None);
        let pool = create_pool(layout, &devs);
        let os = pool.create_objset("tank/data", "{}").unwrap();
        let files = fill(&pool, os, 21);
        pool.export().unwrap();
        drop(pool);
        devs[1].inject(Fault::Dead);
        let pool = import(&devs);
        assert_eq!(pool.health(), Health::Degraded);
        let fresh = SimDevice::new(DEV_SIZE, 999);
        let arg = pool::pool::DeviceArg {
            path: "fresh".into(),
            device: fresh.clone(),
        };
        let summary = pool.replace("sim1", arg, &|_| {}).unwrap();
        assert_eq!(summary.errors, 0);
        assert_eq!(pool.health(), Health::Online, "{layout:?}");
        let written = fresh.stats().bytes_written;
        assert!(written > 0);
        assert!(
            written < DEV_SIZE / 2,
            "{layout:?}: resilver copied {written} bytes, more than allocated space"
        );
        pool.export().unwrap();
        drop(pool);
        // The new device now carries its share: lose every other device the layout
        // allows (for the mirror: the only other side) and read everything back.
        let mut set: Vec<Arc<SimDevice>> = devs.clone();
        set[1] = fresh.clone();
        let tolerance = match layout {
            Layout::RaidZ { nparity } => nparity,
            _ => ndev - 1,
        };
        for d in set
            .iter()
            .filter(|d| !Arc::ptr_eq(d, &fresh))
            .take(tolerance)
        {
            d.inject(Fault::Dead);
        }
        let pool = import(&set);
        verify_files(&pool, os, &files);
        assert_eq!(pool.status().unrecoverable_reads, 0);
    }
}

#[test]
fn scrub_runs_while_txgs_commit() {
    let devs = sim_devices(3, 41, None);
    let pool = create_pool(Layout::RaidZ { nparity: 1 }, &devs);
    let os = pool.create_objset("tank/data", "{}").unwrap();
    let files = fill(&pool, os, 41);
    // Slow disks make the scrub long enough to commit txgs in the middle of it.
    for d in &devs {
        d.set_speed(Some(vdev::SpeedLimit {
            bytes_per_sec: None,
            iops: Some(150),
            seek: std::time::Duration::ZERO,
        }));
    }
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    let started_tx = std::sync::Mutex::new(Some(started_tx));
    let mut rng = Rng(42);
    let extra = rng.bytes(300_000);
    let obj = new_file(&pool, os, 16384, Compression::Off);
    std::thread::scope(|s| {
        let scrub = s.spawn(|| {
            pool.scrub(&|p| {
                if p.bytes_done > 0 {
                    if let Some(tx) = started_tx.lock().unwrap().take() {
                        let _ = tx.send(());
                    }
                }
            })
        });
        started_rx.recv().expect("scrub reports progress");
        // Writes and two commits while the scrub walks.
        pool.write(os, obj, 0, &extra).unwrap();
        pool.sync().unwrap();
        pool.free_range(os, obj, 0, 100_000).unwrap();
        pool.sync().unwrap();
        assert!(
            pool.status().last_scrub.is_none() && !scrub.is_finished(),
            "the syncs ran while the scrub was walking"
        );
        let summary = scrub.join().unwrap().unwrap();
        assert_eq!(summary.errors, 0);
        assert_eq!(summary.bad_copies, 0);
    });
    for d in &devs {
        d.set_speed(None);
    }
    verify_files(&pool, os, &files);
    let mut expect = extra.clone();
    expect[..100_000].fill(0);
    assert_eq!(pool.read(os, obj, 0, expect.len()).unwrap(), expect);
    for _ in 0..3 {
        pool.sync().unwrap();
    }
    assert!(pool.check().unwrap().problems.is_empty());
}

/// A scrub's repairs are durable when it returns: with every copy on one side of a
/// mirror damaged and repaired by a scrub, a power cut right after it (every unflushed
/// write dropped, no txg in between) and then the loss of the other side leave every
/// byte readable. (Repairs were once left in the devices' caches until some later txg
/// flushed them, so the damage came back with the power.)
#[test]
fn scrub_repairs_survive_a_power_cut_right_after_the_scrub() {
    let devs = sim_devices(2, 71, None);
    let pool = create_pool(Layout::Mirror, &devs);
    let os = pool.create_objset("tank/data", "{}").unwrap();
    let files = fill(&pool, os, 71);
    pool.sync().unwrap();
    let (start, len) = label::data_area(devs[0].size_bytes());
    devs[0].corrupt_range(start, len.min(16 << 20) / 4096 * 4096, 5);
    let s = pool.scrub(&|_| {}).unwrap();
    assert!(s.repaired_bytes > 0 && s.errors == 0, "{s:?}");
    drop(pool);
    let after: Vec<Arc<SimDevice>> = devs
        .iter()
        .map(|d| d.restart(vdev::CrashPolicy::DropAll))
        .collect();
    after[1].inject(Fault::Dead);
    let pool = import(&after);
    for (obj, data) in &files {
        let got = pool
            .read(os, *obj, 0, data.len())
            .unwrap_or_else(|e| panic!("object {obj} unreadable after the power cut: {e}"));
        assert!(got == *data, "object {obj} differs after the power cut");
    }
}

/// A device that stops the first write overlapping an armed range until released, so a
/// test can hold a read repair in mid-flight.
#[derive(Debug)]
struct GatedDevice {
    inner: Arc<SimDevice>,
    armed: std::sync::Mutex<Option<(u64, u64)>>,
    reached: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
    go: std::sync::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl GatedDevice {
    fn new(inner: Arc<SimDevice>) -> Arc<GatedDevice> {
        Arc::new(GatedDevice {
            inner,
            armed: Default::default(),
            reached: Default::default(),
            go: Default::default(),
        })
    }

    /// Returns (the write has arrived, let it go on).
    fn arm(
        &self,
        offset: u64,
        len: u64,
    ) -> (std::sync::mpsc::Receiver<()>, std::sync::mpsc::Sender<()>) {
        let (reached_tx, reached_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel();
        *self.reached.lock().unwrap() = Some(reached_tx);
        *self.go.lock().unwrap() = Some(go_rx);
        *self.armed.lock().unwrap() = Some((offset, len));
        (reached_rx, go_tx)
    }

    fn gate(&self, offset: u64, len: usize) {
        let hit = {
            let mut armed = self.armed.lock().unwrap();
            match *armed {
                Some((o, l)) if offset < o + l && o < offset + len as u64 => armed.take(),
                _ => None,
            }
        };
        if hit.is_some() {
            let _ = self.reached.lock().unwrap().take().unwrap().send(());
            let go = self.go.lock().unwrap().take().unwrap();
            let _ = go.recv();
        }
    }
}

impl Device for GatedDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.gate(offset, buf.len());
        self.inner.write_at(offset, buf)
    }
    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> std::io::Result<()> {
        self.gate(offset, bufs.iter().map(|b| b.len()).sum());
        self.inner.write_vectored_at(offset, bufs)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn io_mode(&self) -> vdev::IoMode {
        self.inner.io_mode()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// What `stale_repair` saw: whether the freed space was reused while the repair was
/// held, what the held read returned, and the bad copies a scrub found afterwards.
struct StaleRepair {
    reused: bool,
    read_back_right: bool,
    bad_copies: u64,
}

/// A read finds a bad copy of a block and stops just before writing the good data
/// over it; meanwhile the block is rewritten (freed) and txgs commit until its old
/// space is reused or the pool is two-thirds full; then the repair goes on.
fn stale_repair(pin_reads: bool) -> StaleRepair {
    const BS: usize = 131072;
    let sims = sim_devices(2, 61, None);
    let gated: Vec<Arc<GatedDevice>> = sims.iter().map(|d| GatedDevice::new(d.clone())).collect();
    let args: Vec<pool::pool::DeviceArg> = gated
        .iter()
        .enumerate()
        .map(|(i, d)| pool::pool::DeviceArg {
            path: format!("sim{i}"),
            device: d.clone(),
        })
        .collect();
    let options = pool::PoolOptions {
        pin_reads,
        ..opts()
    };
    let p = create_pool_with(Layout::Mirror, &sims, options.clone());
    let os = p.create_objset("tank/data", "{}").unwrap();
    let obj = new_file(&p, os, BS as u32, Compression::Off);
    let mut rng = Rng(61);
    let old = rng.bytes(BS);
    p.write(os, obj, 0, &old).unwrap();
    p.sync().unwrap();
    let bp = p
        .committed_blocks()
        .unwrap()
        .into_iter()
        .find(|b| b.level == 0 && b.lsize as usize == BS)
        .expect("the file's block");
    p.export().unwrap();
    let at = data_start(&sims[0]) + bp.dvas[0].offset;
    let p = pool::Pool::import(args, Some("tank"), options).unwrap();
    // The file's dnode is read now, so the block's read is the next I/O, and the side
    // it tries first (`TopVdev::read_order`: queue and head position) holds the damage.
    p.object_info(os, obj).unwrap();
    let first = p.storage.tops()[0].read_order(bp.dvas[0].offset)[0];
    let second = 1 - first;
    sims[first].corrupt_range(at, SECTOR_SIZE as u64, 7);
    let (reached, go) = gated[first].arm(at, BS as u64);
    let mut reused = false;
    let read = std::thread::scope(|s| {
        // Lets the repair go on however this scope ends, so a failure cannot hang it.
        struct Release(std::sync::mpsc::Sender<()>);
        impl Drop for Release {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let release = Release(go);
        let reader = s.spawn(|| p.read(os, obj, 0, BS));
        reached.recv().expect("the read repairs the damaged side");
        // Until the pool is full (with the pin, nothing freed since is reusable).
        while p.write(os, obj, 0, &rng.bytes(BS)).is_ok() {
            p.sync().unwrap();
            let mut now = vec![0u8; BS];
            sims[second].read_at(at, &mut now).unwrap();
            if now != old {
                reused = true;
                break;
            }
        }
        drop(release);
        reader.join().unwrap()
    });
    let read_back_right = read.as_deref().ok() == Some(&old[..]);
    let bad_copies = p.scrub(&|_| {}).unwrap().bad_copies;
    StaleRepair {
        reused,
        read_back_right,
        bad_copies,
    }
}

/// A reader that found a bad copy keeps the block's space from reuse until its repair
/// is written: with read pins the freed space is not reused under the held repair and
/// the pool stays whole; without them (the negative control) the space is reused and
/// the late repair damages the new block, which a scrub then finds.
#[test]
fn a_late_read_repair_never_overwrites_reused_space() {
    let pinned = stale_repair(true);
    assert!(pinned.read_back_right, "the held read returns its block");
    assert!(
        !pinned.reused,
        "space freed after the read began was reused"
    );
    assert_eq!(pinned.bad_copies, 0, "the repair damaged a live block");
    let unpinned = stale_repair(false);
    assert!(unpinned.reused, "control: the freed space was never reused");
    assert!(
        unpinned.bad_copies > 0,
        "control: the late repair over reused space went unnoticed"
    );
}

/// Blocks the intent log placed on the devices ahead of their txg (a large write made
/// durable by a log commit) before a device was replaced are on the new device after
/// the resilver: with the other side of the mirror then dead, every byte still reads.
/// (They were once left out: written to the old device before the swap, committed
/// only after the resilver listed its blocks.)
#[test]
fn blocks_placed_by_the_log_before_a_replace_reach_the_new_device() {
    let devs = sim_devices(2, 63, None);
    let pool = create_pool(Layout::Mirror, &devs);
    let os = pool.create_objset("tank/data", "{}").unwrap();
    let obj = new_file(&pool, os, 131072, Compression::Off);
    pool.sync().unwrap();
    let data = Rng(63).bytes(1_200_000);
    pool.write(os, obj, 0, &data).unwrap();
    pool.log_commit().unwrap();
    assert!(
        pool.intent_log_stats().blocks_placed > 0,
        "the write's blocks were placed"
    );
    let fresh = SimDevice::new(DEV_SIZE, 6_300);
    let summary = pool
        .replace(
            "sim1",
            pool::pool::DeviceArg {
                path: "sim1-new".into(),
                device: fresh.clone(),
            },
            &|_| {},
        )
        .unwrap();
    assert_eq!(summary.errors, 0);
    // Nothing cached: the bytes come from the new device alone.
    pool.export().unwrap();
    let pool = pool::Pool::import(
        vec![
            pool::pool::DeviceArg {
                path: "sim0".into(),
                device: devs[0].clone(),
            },
            pool::pool::DeviceArg {
                path: "sim1-new".into(),
                device: fresh,
            },
        ],
        Some("tank"),
        opts(),
    )
    .unwrap();
    devs[0].inject(Fault::Dead);
    assert_eq!(
        pool.read(os, obj, 0, data.len()).unwrap(),
        data,
        "read from the new device alone"
    );
}

/// What became of a mirror side that died, missed writes, and came back for the next
/// import, and of the data once the other side then died.
struct ComeBack {
    /// Pool and device health right after the import.
    pool_health: Health,
    device_health: String,
    /// Whether the harness found the device FAULTED and cleared it, as an operator would.
    cleared: bool,
    /// Files (of those written while the device was dead) lost with the other side.
    lost: usize,
}

fn device_back_after_missed_writes(record_faults: bool) -> ComeBack {
    let devs = sim_devices(2, 67, None);
    let options = pool::PoolOptions {
        record_faults,
        ..opts()
    };
    let p = create_pool_with(Layout::Mirror, &devs, options.clone());
    let os = p.create_objset("tank/data", "{}").unwrap();
    let before = fill(&p, os, 67);
    devs[1].inject(Fault::Dead);
    let during = fill(&p, os, 68);
    assert_eq!(p.health(), Health::Degraded, "the dead side faulted");
    // Power off (no export); the disk is back when it comes on.
    drop(p);
    devs[1].revive();
    let p = pool::Pool::import(args(&devs), Some("tank"), options).unwrap();
    let pool_health = p.health();
    let device_health = p.status().vdevs[0].children[1].health.clone();
    let cleared = device_health == "FAULTED";
    if cleared {
        let summary = p.clear("sim1", &|_| {}).unwrap();
        assert_eq!(summary.errors, 0);
        assert_eq!(p.health(), Health::Online);
    }
    p.export().unwrap();
    drop(p);
    devs[0].inject(Fault::Dead);
    let p = import(&devs);
    verify_files(&p, os, &before);
    let lost = during
        .iter()
        .filter(|(obj, data)| p.read(os, *obj, 0, data.len()).ok().as_ref() != Some(data))
        .count();
    ComeBack {
        pool_health,
        device_health,
        cleared,
        lost,
    }
}

/// A device that missed writes stays FAULTED across import, so the pool reports the
/// redundancy it lacks and `clear` restores it: with the other side dead afterwards,
/// nothing is lost. Negative control: without the fault recorded, the device comes
/// back ONLINE, the pool claims full redundancy, nothing prompts a repair, and the
/// files written while it was dead die with the other side.
#[test]
fn a_device_that_missed_writes_stays_faulted_until_cleared() {
    let recorded = device_back_after_missed_writes(true);
    assert_eq!(recorded.pool_health, Health::Degraded);
    assert_eq!(recorded.device_health, "FAULTED");
    assert!(recorded.cleared);
    assert_eq!(recorded.lost, 0, "files lost after clear and resilver");
    let unrecorded = device_back_after_missed_writes(false);
    assert_eq!(
        unrecorded.pool_health,
        Health::Online,
        "control: the stale device was not trusted"
    );
    assert!(!unrecorded.cleared);
    assert!(
        unrecorded.lost > 0,
        "control: the stale device held everything"
    );
}

/// Why `clear` of `device` was refused (it must be).
fn clear_refused(p: &pool::Pool, device: &str) -> String {
    p.clear(device, &|_| {}).unwrap_err().to_string()
}

/// `clear` refuses what it cannot do, with the reason.
#[test]
fn clear_refuses_a_healthy_or_unknown_device() {
    let devs = sim_devices(2, 69, None);
    let p = create_pool(Layout::Mirror, &devs);
    let healthy = clear_refused(&p, "sim1");
    assert!(healthy.contains("not FAULTED"), "{healthy}");
    let unknown = clear_refused(&p, "nope");
    assert!(unknown.contains("no data device 'nope'"), "{unknown}");
}

/// A cache device that faulted is put back in service by `clear`, and the L2ARC writes
/// to it again. Control: revived but not cleared, it stays FAULTED and nothing is
/// written to it. A spare is refused.
#[test]
fn clear_puts_a_faulted_cache_device_back_in_service() {
    let devs = sim_devices(4, 71, None);
    let options = pool::PoolOptions {
        arc_max_bytes: Some(4 << 20),
        ..opts()
    };
    let p = create_pool_with(Layout::Mirror, &devs[..2], options);
    p.add_cache(device_arg("cache0", &devs[2])).unwrap();
    p.add_spare(device_arg("spare0", &devs[3])).unwrap();
    let os = p.create_objset("tank/data", "{}").unwrap();
    let obj = new_file(&p, os, 131072, Compression::Off);
    let data = Rng(71).bytes(16 << 20);
    p.write(os, obj, 0, &data).unwrap();
    p.sync().unwrap();
    // Each pass pushes the file through the 4 MiB ARC: what it evicts feeds the L2ARC.
    let read_all = || assert_eq!(p.read(os, obj, 0, data.len()).unwrap(), data);
    let cache_health = || p.status().cache[0].health.clone();
    let until = |what: &str, done: &dyn Fn() -> bool| {
        for _ in 0..200 {
            read_all();
            if done() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("{what}: not within 200 passes");
    };

    devs[2].inject(Fault::Dead);
    until("the dead cache device faulted", &|| {
        cache_health() == "FAULTED"
    });
    devs[2].revive();
    let writes = devs[2].stats().writes;
    for _ in 0..5 {
        read_all();
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(cache_health(), "FAULTED", "control: revived, not cleared");
    assert_eq!(
        devs[2].stats().writes,
        writes,
        "control: nothing written to a FAULTED cache device"
    );

    p.clear("cache0", &|_| {}).unwrap();
    assert_eq!(cache_health(), "ONLINE");
    until("the L2ARC writing to the cleared device", &|| {
        devs[2].stats().writes > writes
    });
    let again = clear_refused(&p, "cache0");
    assert!(again.contains("not FAULTED"), "{again}");

    let spare = clear_refused(&p, "spare0");
    assert!(spare.contains("is a spare"), "{spare}");
}

/// A log device that faulted is cleared by removing it and adding it again: it comes
/// back ONLINE and empty, the intent log moves back onto it, and what is logged there
/// afterwards survives a power cut. Control: revived but not cleared, it stays FAULTED
/// and nothing is logged on it.
#[test]
fn clear_puts_a_faulted_log_device_back_with_the_log_on_it() {
    let devs = sim_devices(3, 73, None);
    let p = create_pool(Layout::Mirror, &devs[..2]);
    p.add_log(device_arg("log0", &devs[2])).unwrap();
    let os = p.create_objset("tank/data", "{}").unwrap();
    let log_health = |p: &pool::Pool| p.status().log[0].health.clone();
    let logged = |p: &pool::Pool, seed: u64| {
        let obj = new_file(p, os, 131072, Compression::Off);
        let data = Rng(seed).bytes(50_000);
        p.write(os, obj, 0, &data).unwrap();
        p.log_commit().unwrap();
        (obj, data)
    };

    devs[2].inject(Fault::Dead);
    let during = logged(&p, 1);
    assert_eq!(
        log_health(&p),
        "FAULTED",
        "a failed log write faults the device"
    );
    devs[2].revive();
    let writes = devs[2].stats().writes;
    let after_revive = logged(&p, 2);
    assert_eq!(log_health(&p), "FAULTED", "control: revived, not cleared");
    assert_eq!(
        devs[2].stats().writes,
        writes,
        "control: nothing logged on a FAULTED log device"
    );

    p.clear("log0", &|_| {}).unwrap();
    assert_eq!(log_health(&p), "ONLINE");
    assert_eq!(p.status().intent_log.ring, "log devices");
    let writes = devs[2].stats().writes;
    let after_clear = logged(&p, 3);
    assert!(
        devs[2].stats().writes > writes,
        "nothing logged on the cleared device"
    );
    let again = clear_refused(&p, "log0");
    assert!(again.contains("not FAULTED"), "{again}");

    // Power off (no export, no sync since the writes): import replays the log.
    drop(p);
    let p = pool::Pool::import(args(&devs), Some("tank"), opts()).unwrap();
    for (obj, data) in [during, after_revive, after_clear] {
        assert_eq!(p.read(os, obj, 0, data.len()).unwrap(), data);
    }
    assert!(p.check().unwrap().problems.is_empty());
}
