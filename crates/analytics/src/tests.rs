use super::*;
use std::net::{IpAddr, Ipv4Addr};

struct TestNames;
impl Names for TestNames {
    fn share(&self, fsid: u64) -> Option<String> {
        (fsid == 7).then(|| "tank/home".to_string())
    }
    fn file(&self, fsid: u64, ino: u64) -> Option<String> {
        (fsid == 7).then(|| format!("/tank/home/f{ino}"))
    }
}

fn client(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

fn nfs(a: &Analytics, second: u64, op: &'static str, c: u8, ino: u64, bytes: u32, latency_us: u64) {
    a.record(Event::Nfs(NfsEvent {
        version: 3,
        minor: 0,
        op,
        client: client(c),
        fsid: 7,
        ino,
        bytes,
        offset: 4096,
        request_bytes: 100,
        reply_bytes: 100 + bytes,
        latency_ns: latency_us * 1000,
        at: Ticks::at(a.epoch + Duration::from_secs(second)),
    }));
}

/// An instance whose clock starts at a whole second, and that second.
fn instance() -> (Arc<Analytics>, u64) {
    let a = Analytics::new();
    a.set_names(Arc::new(TestNames));
    let t0 = a.unix_second(a.epoch);
    (a, t0)
}

/// Enables each dataset and returns the first Unix second all of them count.
/// Counting starts with the next whole second after enabling, and the wall
/// clock may pass a second boundary between two calls, so tests place their
/// events from this second on rather than at a fixed offset from `t0`.
fn enable_all(a: &Analytics, names: &[&str]) -> u64 {
    names
        .iter()
        .map(|name| a.enable(name).unwrap().since)
        .max()
        .expect("at least one dataset")
}

fn counts(p: &Point) -> BTreeMap<String, u64> {
    p.breakdown
        .iter()
        .map(|k| (k.key.clone(), k.count))
        .collect()
}

#[test]
fn breakdowns_by_client_and_file_match_the_load_exactly() {
    let (a, t0) = instance();
    let since = enable_all(
        &a,
        &[
            "nfs3.ops[client]",
            "nfs3.ops[op=read][client=10.0.0.2][file]",
            "nfs3.bytes[client]",
        ],
    );
    let first = since - t0;
    for s in first..first + 3 {
        for _ in 0..5 {
            nfs(&a, s, "read", 1, 11, 8192, 150);
        }
        for _ in 0..3 {
            nfs(&a, s, "read", 2, 12, 4096, 2500);
            nfs(&a, s, "read", 2, 13, 4096, 2500);
        }
        nfs(&a, s, "getattr", 2, 12, 0, 40);
    }
    a.tick(since + 10);
    let by_client = a.query("nfs3.ops[client]", since, since + 2, None).unwrap();
    assert_eq!(by_client.points.len(), 3);
    for p in &by_client.points {
        assert_eq!(p.total, 12);
        assert_eq!(
            counts(p),
            BTreeMap::from([("10.0.0.1".into(), 5), ("10.0.0.2".into(), 7)])
        );
    }
    assert_eq!(by_client.summary.average, 12.0);
    assert_eq!((by_client.summary.min, by_client.summary.max), (12.0, 12.0));

    let drill = a
        .query(
            "nfs3.ops[client=10.0.0.2][op=read][file]",
            since,
            since + 2,
            None,
        )
        .unwrap();
    assert_eq!(
        drill.dataset.name,
        "nfs3.ops[op=read][client=10.0.0.2][file]"
    );
    for p in &drill.points {
        assert_eq!(
            counts(p),
            BTreeMap::from([("/tank/home/f12".into(), 3), ("/tank/home/f13".into(), 3)])
        );
    }
    let bytes = a
        .query("nfs3.bytes[client]", since, since + 2, None)
        .unwrap();
    assert_eq!(
        counts(&bytes.points[0]),
        BTreeMap::from([("10.0.0.1".into(), 5 * 8192), ("10.0.0.2".into(), 6 * 4096)])
    );

    // The built-in latency heatmap: 150 µs, 2500 µs and 40 µs columns.
    let heat = a.query("nfs3.ops[latency]", since, since, None).unwrap();
    let buckets: Vec<(u64, u64, u64)> = heat.points[0]
        .buckets
        .iter()
        .map(|b| (b.low, b.high, b.count))
        .collect();
    assert_eq!(buckets, [(40, 50, 1), (100, 200, 5), (2000, 3000, 6)]);
    assert_eq!(heat.dataset.breakdown_unit, Some("microseconds"));

    let net = a.query("net.bytes[direction]", since, since, None).unwrap();
    let want_out = 12 * 100 + 5 * 8192 + 6 * 4096;
    assert_eq!(
        counts(&net.points[0]),
        BTreeMap::from([("in".into(), 1200), ("out".into(), want_out)])
    );
}

/// After a restart, seconds restored from disk are not sealed again: a user dataset
/// counts from its old `since`, but sealing resumes after its newest restored second.
#[test]
fn restored_seconds_are_not_sealed_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (a, t0) = instance();
    a.open_history(dir.path(), 1 << 20).unwrap();
    let since = enable_all(&a, &["nfs3.ops[client]"]);
    nfs(&a, since - t0, "read", 1, 11, 8192, 150);
    a.tick(since + 5);
    let before = a.query("nfs3.ops[client]", since, since + 3, None).unwrap();
    assert_eq!(before.points.len(), 4);
    drop(a);

    let (b, _) = instance();
    b.open_history(dir.path(), 1 << 20).unwrap();
    // The first tick of a new instance knows of nothing sealed and looks back an hour.
    b.tick(since + 7);
    let after = b.query("nfs3.ops[client]", since, since + 5, None).unwrap();
    let seconds: Vec<u64> = after.points.iter().map(|p| p.t).collect();
    assert_eq!(seconds, (since..=since + 5).collect::<Vec<_>>());
    assert_eq!(after.points[..4], before.points[..]);
    assert_eq!(after.points.iter().map(|p| p.total).sum::<u64>(), 1);
}

/// History of a dataset no longer kept (a statistic an upgrade renamed) is removed at
/// the next start; every kept dataset's history stays.
#[test]
fn history_of_datasets_no_longer_kept_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (a, t0) = instance();
    a.open_history(dir.path(), 16 << 20).unwrap();
    nfs(&a, 1, "read", 1, 11, 8192, 150);
    a.tick(t0 + 5);
    drop(a);
    // A file as a dataset of an older version would have left.
    let stale = dir.path().join("0123456789abcdef.s");
    std::fs::write(&stale, b"old").unwrap();
    let unrelated = dir.path().join("notes.txt");
    std::fs::write(&unrelated, b"mine").unwrap();
    let (b, _) = instance();
    b.open_history(dir.path(), 16 << 20).unwrap();
    assert!(!stale.exists(), "the stale history stayed");
    assert!(unrelated.exists(), "a file that is not history was removed");
    let kept = b.query("nfs3.ops", t0 + 1, t0 + 1, None).unwrap().points;
    assert_eq!(
        kept.iter().map(|p| p.total).sum::<u64>(),
        1,
        "kept history was lost"
    );
}

/// History written under a clock that was set ahead (by more than a minute) is
/// dropped at restore: kept, it would hold sealing back until the clock caught up.
#[test]
fn history_dated_after_now_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (a, t0) = instance();
    a.open_history(dir.path(), 16 << 20).unwrap();
    a.tick(t0 + 100_000);
    drop(a);

    let (b, t1) = instance();
    b.open_history(dir.path(), 16 << 20).unwrap();
    nfs(&b, 1, "read", 1, 11, 8192, 150);
    b.tick(t1 + 5);
    let points = b.query("nfs3.ops", t1 + 1, t1 + 1, None).unwrap().points;
    assert_eq!(points.len(), 1);
    assert_eq!(points[0].total, 1);
}

#[test]
fn sealed_seconds_never_change_and_late_events_are_counted() {
    let (a, t0) = instance();
    nfs(&a, 1, "read", 1, 1, 10, 10);
    a.tick(t0 + 5);
    let before = a.query("nfs3.ops", t0, t0 + 3, None).unwrap();
    let totals: Vec<u64> = before.points.iter().map(|p| p.total).collect();
    assert_eq!(totals, [0, 1, 0, 0]);
    nfs(&a, 1, "read", 1, 1, 10, 10);
    nfs(&a, 5, "read", 1, 1, 10, 10);
    a.tick(t0 + 8);
    let after = a.query("nfs3.ops", t0, t0 + 6, None).unwrap();
    let totals: Vec<u64> = after.points.iter().map(|p| p.total).collect();
    assert_eq!(totals, [0, 1, 0, 0, 0, 1, 0]);
    assert_eq!(a.status().events_late, 1);
    assert_eq!(a.status().sealed_upto, Some(t0 + 6));
}

#[test]
fn events_from_many_threads_all_arrive() {
    let (a, t0) = instance();
    std::thread::scope(|s| {
        for c in 0..8u8 {
            let a = &a;
            s.spawn(move || {
                for _ in 0..1000 {
                    nfs(a, 1, "write", c, 1, 1, 1);
                }
            });
        }
    });
    a.tick(t0 + 5);
    let p = &a
        .query("nfs3.ops[op]", t0 + 1, t0 + 1, None)
        .unwrap()
        .points[0];
    assert_eq!(p.total, 8000);
    assert_eq!(counts(p), BTreeMap::from([("write".into(), 8000)]));
    assert_eq!(a.status().events_dropped, 0);
}

#[test]
fn a_full_buffer_drops_and_counts_instead_of_blocking() {
    let (a, t0) = instance();
    for _ in 0..recording::THREAD_EVENTS + 10 {
        nfs(&a, 1, "read", 1, 1, 1, 1);
    }
    assert_eq!(a.status().events_dropped, 10);
    a.tick(t0 + 5);
    let p = &a.query("nfs3.ops", t0 + 1, t0 + 1, None).unwrap().points[0];
    assert_eq!(p.total, recording::THREAD_EVENTS as u64);
}

#[test]
fn devices_break_down_by_path_and_pool() {
    let (a, t0) = instance();
    let d0 = a.register_device("tank", "/dev/sda", "data");
    let d1 = a.register_device("tank", "/dev/sdb", "cache");
    assert_eq!(a.register_device("tank", "/dev/sda", "data"), d0);
    let since = enable_all(&a, &["io.bytes[pool]", "io.ops[role=cache][device]"]);
    for (d, n) in [(d0, 3u32), (d1, 1)] {
        for _ in 0..n {
            a.record(Event::Io(IoEvent {
                device: d,
                write: false,
                bytes: 131072,
                offset: 0,
                latency_ns: 300_000,
                at: a.epoch + Duration::from_secs(since - t0),
            }));
        }
    }
    a.tick(since + 5);
    let p = &a
        .query("io.bytes[device]", since, since, None)
        .unwrap()
        .points[0];
    assert_eq!(
        counts(p),
        BTreeMap::from([("/dev/sda".into(), 3 * 131072), ("/dev/sdb".into(), 131072)])
    );
    let p = &a
        .query("io.bytes[pool]", since, since, None)
        .unwrap()
        .points[0];
    assert_eq!(counts(p), BTreeMap::from([("tank".into(), 4 * 131072)]));
    let p = &a
        .query("io.bytes[role]", since, since, None)
        .unwrap()
        .points[0];
    assert_eq!(
        counts(p),
        BTreeMap::from([("data".into(), 3 * 131072), ("cache".into(), 131072)])
    );
    let p = &a
        .query("io.ops[role=cache][device]", since, since, None)
        .unwrap()
        .points[0];
    assert_eq!(counts(p), BTreeMap::from([("/dev/sdb".into(), 1)]));
    let text = a.prometheus();
    assert!(
        text.contains(
            "shoal_device_bytes_total{pool=\"tank\",device=\"/dev/sda\",role=\"data\",op=\"read\"} 393216"
        ),
        "{text}"
    );
    assert!(text.contains("shoal_device_operation_duration_seconds_bucket{pool=\"tank\",device=\"/dev/sdb\",role=\"cache\",op=\"read\",le=\"0.0005\"} 1"));
    // A spare that replaced a data device is data from its next registration on.
    let d2 = a.register_device("tank", "/dev/sdc", "spare");
    assert_eq!(a.register_device("tank", "/dev/sdc", "data"), d2);
    a.record(Event::Io(IoEvent {
        device: d2,
        write: true,
        bytes: 4096,
        offset: 0,
        latency_ns: 1000,
        at: a.epoch + Duration::from_secs(since + 10 - t0),
    }));
    a.tick(since + 20);
    let text = a.prometheus();
    assert!(
        text.contains("device=\"/dev/sdc\",role=\"data\",op=\"write\""),
        "{text}"
    );
}

#[test]
fn prometheus_has_no_client_or_file_labels() {
    let (a, t0) = instance();
    nfs(&a, 1, "read", 1, 11, 8192, 150);
    nfs(&a, 1, "read", 2, 12, 8192, 150);
    a.tick(t0 + 5);
    let text = a.prometheus();
    assert!(
        text.contains(
            "shoal_nfs_operations_total{version=\"3\",op=\"read\",share=\"tank/home\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains(
        "shoal_nfs_payload_bytes_total{version=\"3\",op=\"read\",share=\"tank/home\"} 16384"
    ));
    assert!(
        text.contains("shoal_nfs_operation_duration_seconds_count{version=\"3\",op=\"read\"} 2")
    );
    assert!(!text.contains("10.0.0.") && !text.contains("/tank/home/f"));
}

fn iscsi(
    a: &Analytics,
    second: u64,
    op: &'static str,
    initiator: &str,
    lun: &'static str,
    bytes: u32,
) {
    a.record(Event::Iscsi(IscsiEvent {
        op,
        initiator: intern(initiator),
        target: intern("iqn.2026-12.org.example:vm"),
        lun,
        bytes,
        offset: 8192,
        latency_ns: 300_000,
        at: Ticks::at(a.epoch + Duration::from_secs(second)),
    }));
}

#[test]
fn iscsi_commands_break_down_by_initiator_and_lun_and_reach_prometheus() {
    let (a, t0) = instance();
    let since = enable_all(
        &a,
        &[
            "iscsi.ops[initiator]",
            "iscsi.ops[op=write][lun]",
            "iscsi.bytes[op]",
        ],
    );
    let first = since - t0;
    let (host1, host2) = (
        "iqn.2026-12.org.example:host1",
        "iqn.2026-12.org.example:host2",
    );
    for s in first..first + 2 {
        for _ in 0..4 {
            iscsi(&a, s, "write", host1, "0", 4096);
        }
        iscsi(&a, s, "write", host2, "1", 65536);
        iscsi(&a, s, "read", host2, "1", 16384);
        iscsi(&a, s, "test_unit_ready", host2, "1", 0);
    }
    a.tick(since + 10);
    let by_initiator = a
        .query("iscsi.ops[initiator]", since, since + 1, None)
        .unwrap();
    for p in &by_initiator.points {
        assert_eq!(
            counts(p),
            BTreeMap::from([(host1.into(), 4), (host2.into(), 3)])
        );
    }
    let writes = a
        .query("iscsi.ops[op=write][lun]", since, since + 1, None)
        .unwrap();
    assert_eq!(
        counts(&writes.points[0]),
        BTreeMap::from([("0".into(), 4), ("1".into(), 1)])
    );
    let bytes = a.query("iscsi.bytes[op]", since, since, None).unwrap();
    assert_eq!(
        counts(&bytes.points[0]),
        BTreeMap::from([("write".into(), 4 * 4096 + 65536), ("read".into(), 16384)])
    );
    // The built-in latency heatmap counts every command (300 µs each).
    let heat = a.query("iscsi.ops[latency]", since, since, None).unwrap();
    assert_eq!(heat.points[0].total, 7);
    // /metrics: by target and command, never by initiator.
    let text = a.prometheus();
    assert!(
        text.contains(
            "shoal_iscsi_commands_total{target=\"iqn.2026-12.org.example:vm\",op=\"write\"} 10"
        ),
        "{text}"
    );
    assert!(text.contains(
        "shoal_iscsi_payload_bytes_total{target=\"iqn.2026-12.org.example:vm\",op=\"read\"} 32768"
    ));
    assert!(text.contains("shoal_iscsi_command_duration_seconds_count{op=\"write\"} 10"));
    assert!(!text.contains(host1));
}

#[test]
fn interned_names_are_shared_and_bounded() {
    let a = intern("iqn.2026-12.org.example:same");
    let b = intern(&String::from("iqn.2026-12.org.example:same"));
    assert!(std::ptr::eq(a, b));
    // A set of its own: the process-wide one is shared with the other tests.
    let names = Interner::new(8);
    let first = names.get("iqn.2026-12.org.example:first");
    for i in 0..20 {
        names.get(&format!("iqn.2026-12.org.example:made-up-{i}"));
    }
    assert_eq!(
        names.get("iqn.2026-12.org.example:one-too-many"),
        OTHER_NAME
    );
    assert!(std::ptr::eq(
        names.get("iqn.2026-12.org.example:first"),
        first
    ));
    assert_eq!(names.names.lock().unwrap().len(), 8);
}

#[test]
fn datasets_are_enabled_once_and_built_ins_stay() {
    let (a, _) = instance();
    let first = a.enable("nfs3.ops[file][]").map(|_| ()).unwrap_err();
    assert!(first.to_string().contains("must be the last"), "{first}");
    a.enable("nfs3.ops[op=read][file]").unwrap();
    a.enable("nfs3.ops[op=read][file]").unwrap();
    let user: Vec<String> = a
        .datasets()
        .into_iter()
        .filter(|d| !d.builtin)
        .map(|d| d.name)
        .collect();
    assert_eq!(user, ["nfs3.ops[op=read][file]"]);
    assert!(matches!(
        a.disable("nfs3.ops[op]"),
        Err(AnalyticsError::BuiltIn(_))
    ));
    assert!(matches!(
        a.disable("nfs3.ops[client]"),
        Err(AnalyticsError::NotEnabled(_))
    ));
    a.disable("nfs3.ops[op=read][file]").unwrap();
    assert!(matches!(
        a.query("nfs3.ops[op=read][file]", 0, 1, None),
        Err(AnalyticsError::NotEnabled(_))
    ));
    for i in 0..MAX_USER_DATASETS {
        a.enable(&format!("nfs3.ops[client=10.0.{}.{}]", i / 256, i % 256))
            .unwrap();
    }
    assert!(matches!(
        a.enable("nfs3.ops[client]"),
        Err(AnalyticsError::TooMany)
    ));
}

#[test]
fn numeric_ranges_keep_exactly_the_band_a_heatmap_shows() {
    let (a, t0) = instance();
    let since = enable_all(
        &a,
        &[
            "nfs3.ops[latency=1000..2000][file]",
            "nfs3.ops[latency=2000..][latency]",
            "nfs3.bytes[size=..8192][op]",
        ],
    );
    let s = since - t0;
    for (ino, latency_us, n) in [
        (1, 999, 4),
        (2, 1000, 3),
        (3, 1999, 2),
        (4, 2000, 5),
        (5, 9000, 1),
    ] {
        for _ in 0..n {
            nfs(&a, s, "read", 1, ino, 4096 * ino as u32, latency_us);
        }
    }
    a.tick(since + 5);
    let q = |name: &str| a.query(name, since, since, None).unwrap().points[0].clone();
    let band = q("nfs3.ops[latency=1000..2000][file]");
    assert_eq!(band.total, 5);
    assert_eq!(
        counts(&band),
        BTreeMap::from([("/tank/home/f2".into(), 3), ("/tank/home/f3".into(), 2)])
    );
    // A band zoomed: its own heatmap, only buckets at or above 2000 us.
    let slow = q("nfs3.ops[latency=2000..][latency]");
    assert_eq!(slow.total, 6);
    let lows: Vec<u64> = slow.buckets.iter().map(|b| b.low).collect();
    assert_eq!(lows, [2000, 9000]);
    // Sizes below 8192: files 1 (4096 bytes), not 2 (8192) and above.
    assert_eq!(q("nfs3.bytes[size=..8192][op]").total, 4 * 4096);
    let info = a
        .datasets()
        .into_iter()
        .find(|d| d.name == "nfs3.ops[latency=1000..2000][file]")
        .unwrap();
    assert_eq!(
        info.filters,
        [("latency".to_string(), "1000..2000".to_string())]
    );
}

#[test]
fn host_cpu_and_interfaces_break_down_by_their_labels() {
    let (a, t0) = instance();
    let since = enable_all(
        &a,
        &[
            "cpu.utilization[cpu]",
            "cpu.utilization[cpu=cpu1][mode]",
            "net.interface.bytes[interface=lo][direction]",
        ],
    );
    let at = a.epoch + Duration::from_secs(since - t0);
    let meter = |meter, labels, value| {
        a.record(Event::Meter(MeterEvent {
            meter,
            subject: 0,
            labels,
            value,
            latency_ns: 0,
            at,
        }))
    };
    for (cpu, user, idle) in [("cpu0", 300_000, 700_000), ("cpu1", 900_000, 100_000)] {
        meter(Meter::HostCpu, [cpu, "user", ""], user);
        meter(Meter::HostCpu, [cpu, "idle", ""], idle);
    }
    meter(Meter::InterfaceBytes, ["lo", "in", ""], 5000);
    meter(Meter::InterfaceBytes, ["lo", "out", ""], 5000);
    meter(Meter::InterfaceBytes, ["eth0", "out", ""], 777);
    a.tick(since + 5);
    let q = |name: &str| a.query(name, since, since, None).unwrap().points[0].clone();
    let per_cpu = q("cpu.utilization[cpu]");
    assert_eq!(per_cpu.total, 2_000_000, "two CPUs, a second each");
    assert_eq!(
        counts(&per_cpu),
        BTreeMap::from([("cpu0".into(), 1_000_000), ("cpu1".into(), 1_000_000)])
    );
    assert_eq!(
        counts(&q("cpu.utilization[cpu=cpu1][mode]")),
        BTreeMap::from([("user".into(), 900_000), ("idle".into(), 100_000)])
    );
    assert_eq!(
        counts(&q("net.interface.bytes[interface=lo][direction]")),
        BTreeMap::from([("in".into(), 5000), ("out".into(), 5000)])
    );
    let text = a.prometheus();
    for line in [
        "shoal_host_cpu_seconds_total{mode=\"user\"} 1.2",
        "shoal_host_cpu_seconds_total{mode=\"idle\"} 0.8",
        "shoal_host_network_bytes_total{interface=\"eth0\",direction=\"out\"} 777",
        "shoal_host_network_bytes_total{interface=\"lo\",direction=\"in\"} 5000",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
}

#[test]
fn history_memory_stays_within_its_byte_bound() {
    let (a, t0) = instance();
    let since = enable_all(&a, &["nfs3.ops[file]"]);
    let first = since - t0;
    a.set_memory_limit(400_000);
    for s in first..first + 400 {
        for ino in 0..20 {
            nfs(&a, s, "read", 1, ino, 4096, 100);
        }
        a.tick(t0 + s + 2);
    }
    let st = a.status();
    assert!(st.points_trimmed > 0, "nothing was trimmed: {st:?}");
    assert!(
        st.memory_bytes <= 400_000,
        "{} bytes kept over a bound of 400000",
        st.memory_bytes
    );
    // The newest seconds are still there.
    let newest = a
        .query("nfs3.ops[file]", t0 + first + 390, t0 + first + 397, None)
        .unwrap();
    assert_eq!(newest.points.len(), 8);
    assert!(newest.points.iter().all(|p| p.total == 20));
    // A window reaching back past the trimmed seconds is answered in minutes.
    let whole = a
        .query("nfs3.ops[file]", t0 + first, t0 + first + 399, None)
        .unwrap();
    assert_eq!(whole.resolution, Resolution::Minute);
    assert!(!whole.points.is_empty());
}

/// A dataset enabled a moment ago, asked from before it counted: its seconds ring
/// starts at its enabling and was never trimmed, so the answer stays in seconds
/// (a coarser ring would drop the minute that began before the window).
#[test]
fn a_new_dataset_is_answered_in_seconds_from_before_it_counted() {
    let (a, t0) = instance();
    let since = enable_all(&a, &["nfs3.ops[client]"]);
    nfs(&a, since - t0, "read", 1, 1, 4096, 100);
    a.tick(since + 3);
    let q = a
        .query("nfs3.ops[client]", since - 100, since + 1, None)
        .unwrap();
    assert_eq!(q.resolution, Resolution::Second);
    assert_eq!(q.points.iter().map(|p| p.total).sum::<u64>(), 1);
}

/// One step of `chunked_counting_matches_counting_event_by_event`.
#[derive(Debug, Clone)]
enum Step {
    /// Events as (kind, second after `since`, op, client, object, size class,
    /// latency class).
    Record(Vec<(u8, u64, usize, u8, u64, u32, u64)>),
    Tick(u64),
}

/// Feeds `steps` to `a` and returns every dataset's points from `since` on.
fn run_steps(a: &Analytics, since: u64, t0: u64, steps: &[Step]) -> Vec<(String, Vec<Point>)> {
    const OPS: [&str; 3] = ["read", "write", "getattr"];
    let device = a.register_device("tank", "/dev/sda", "data");
    let at = |second: u64| a.epoch + Duration::from_secs(since + second - t0);
    for step in steps {
        match step {
            Step::Record(events) => {
                for &(kind, second, op, c, ino, size, latency) in events {
                    let bytes = [0, 4096, 131072][size as usize];
                    let latency_ns =
                        [50_000, 150_000, 900_000, 2_000_000, 40_000][latency as usize];
                    a.record(match kind {
                        0 | 1 => Event::Nfs(NfsEvent {
                            version: if kind == 0 { 3 } else { 4 },
                            minor: (op % 3) as u8,
                            op: OPS[op],
                            client: client(c),
                            fsid: if ino == 0 { 0 } else { 7 },
                            ino,
                            bytes,
                            offset: ino * 8192,
                            request_bytes: 100 + bytes,
                            reply_bytes: 100,
                            latency_ns,
                            at: Ticks::at(at(second)),
                        }),
                        2 => Event::Io(IoEvent {
                            device,
                            write: op == 1,
                            bytes,
                            offset: ino * 4096,
                            latency_ns,
                            at: at(second),
                        }),
                        _ => Event::Meter(MeterEvent {
                            meter: Meter::ArcAccess,
                            subject: 0,
                            labels: [
                                ["hit", "miss", "hit"][op],
                                "demand",
                                ["data", "metadata"][c as usize % 2],
                            ],
                            value: ino + 1,
                            latency_ns: 0,
                            at: at(second),
                        }),
                    });
                }
            }
            Step::Tick(now) => a.tick(since + now),
        }
    }
    a.tick(since + 20);
    let mut all: Vec<(String, Vec<Point>)> = a
        .datasets()
        .into_iter()
        .map(|d| {
            let points = a.query(&d.name, since, since + 10, None).unwrap().points;
            (d.name, points)
        })
        .collect();
    all.sort_by(|x, y| x.0.cmp(&y.0));
    all
}

/// Counting chunk by chunk, each dataset over a chunk's runs of one second, must give
/// what counting event by event gives: built-in and user datasets (filters, ranges,
/// breakdowns), events of every route, late events, ticks in any order.
#[test]
fn chunked_counting_matches_counting_event_by_event() {
    use proptest::prelude::*;
    let user = [
        "nfs3.ops[op=read][client]",
        "nfs3.ops[latency=100..1000][op]",
        "nfs3.ops[file]",
        "net.bytes[client]",
        "io.ops[op=write][latency]",
        "arc.accesses[result=hit][content]",
        // Unfiltered, as the built-ins, so each specialised NFS counting is compared.
        "nfs3.ops[size]",
        "nfs3.ops[offset]",
        "nfs3.bytes[size]",
        "nfs4.bytes[offset]",
        "nfs4.bytes",
        "net.bytes",
    ];
    let event = (
        0u8..4,
        0u64..6,
        0usize..3,
        0u8..3,
        0u64..4,
        0u32..3,
        0u64..5,
    );
    let step = prop_oneof![
        3 => proptest::collection::vec(event, 0..400).prop_map(Step::Record),
        1 => (0u64..9).prop_map(Step::Tick),
    ];
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 48,
        ..Default::default()
    });
    runner
        .run(&proptest::collection::vec(step, 1..10), |steps| {
            let (chunked, t0) = instance();
            let (reference, r0) = instance();
            reference.engine.lock().unwrap().per_event_reference = true;
            let since = enable_all(&chunked, &user).max(enable_all(&reference, &user));
            let got = run_steps(&chunked, since, t0, &steps);
            let want = run_steps(&reference, since, r0, &steps);
            prop_assert_eq!(got.len(), BUILTIN_DATASETS.len() + user.len());
            // Not vacuous: what is recorded before the first tick is never late.
            if let Some(Step::Record(first)) = steps.first() {
                let nfs3 = first.iter().filter(|e| e.0 == 0).count() as u64;
                let counted: u64 = got
                    .iter()
                    .find(|(n, _)| n == "nfs3.ops")
                    .unwrap()
                    .1
                    .iter()
                    .map(|p| p.total)
                    .sum();
                prop_assert!(
                    counted >= nfs3,
                    "{} of {} NFSv3 calls counted",
                    counted,
                    nfs3
                );
            }
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(chunked.status().events_late, reference.status().events_late);
            Ok(())
        })
        .unwrap();
}

/// The negative control of `chunked_counting_matches_counting_event_by_event`: one
/// event more on one side is seen.
#[test]
fn negative_control_one_event_more_is_seen_by_the_comparison() {
    let steps = vec![Step::Record(vec![(0, 1, 0, 1, 1, 1, 1)])];
    let (a, t0) = instance();
    let (b, b0) = instance();
    let since = enable_all(&a, &["nfs3.ops[op=read][client]"])
        .max(enable_all(&b, &["nfs3.ops[op=read][client]"]));
    let mut more = steps.clone();
    more.push(Step::Record(vec![(0, 2, 0, 1, 1, 1, 1)]));
    assert_ne!(
        run_steps(&a, since, t0, &steps),
        run_steps(&b, since, b0, &more)
    );
}

#[test]
fn nfs4_operations_break_down_by_minor_version() {
    let (a, t0) = instance();
    let since = enable_all(&a, &["nfs4.ops[minor]", "nfs4.ops[minor=0][op]"]);
    let at = a.epoch + Duration::from_secs(since - t0);
    for (minor, op, n) in [(0u8, "open", 2), (1, "read", 3), (2, "read", 1)] {
        for _ in 0..n {
            a.record(Event::Nfs(NfsEvent {
                version: 4,
                minor,
                op,
                client: client(1),
                fsid: 7,
                ino: 1,
                bytes: 0,
                offset: 0,
                request_bytes: 100,
                reply_bytes: 100,
                latency_ns: 1000,
                at: Ticks::at(at),
            }));
        }
    }
    // NFSv3 events have no minor version: they are not NFSv4's anyway.
    nfs(&a, since - t0, "read", 1, 1, 0, 1);
    a.tick(since + 10);
    let by_minor = a.query("nfs4.ops[minor]", since, since, None).unwrap();
    assert_eq!(
        counts(&by_minor.points[0]),
        BTreeMap::from([("0".into(), 2), ("1".into(), 3), ("2".into(), 1)])
    );
    let v40 = a
        .query("nfs4.ops[minor=0][op]", since, since, None)
        .unwrap();
    assert_eq!(counts(&v40.points[0]), BTreeMap::from([("open".into(), 2)]));
}
