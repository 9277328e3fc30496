//! Analytics through the admin API: after a known load from two clients, the
//! per-client and per-file breakdowns match the load exactly, the latency heatmap
//! holds every operation, and `/metrics` carries the totals without client or file
//! labels.

mod common;

use common::http::{client_from, urlencode, Api};
use common::TestServer;
use std::collections::BTreeMap;
use std::time::Duration;

const READS: usize = 20;
const READ_BYTES: u32 = 65536;

#[test]
fn breakdowns_by_client_and_file_match_a_known_load() {
    let server = TestServer::start("127.0.0.0/8(rw,no_root_squash,insecure)");
    let api = Api::new(server.api_addr());

    // Two files with data, written by the first client.
    let mut one = client_from("127.0.0.1", server.addr);
    let mut two = client_from("127.0.0.2", server.addr);
    let (st, root) = one.mount("/tp/share");
    assert_eq!(st, 0);
    let data = vec![7u8; READ_BYTES as usize];
    let mut files = Vec::new();
    for name in ["alpha", "beta"] {
        let (st, fh) = one.create(&root, name);
        assert_eq!(st, 0);
        assert_eq!(one.write(&fh, 0, &data, 2).0, 0);
        files.push(fh);
    }

    let by_client = "nfs3.ops[op=read][client]";
    let by_file = "nfs3.ops[op=read][client=127.0.0.2][file]";
    let bytes = "nfs3.bytes[op=read][client]";
    let heat = "nfs3.ops[op=read][latency]";
    let since = [by_client, by_file, bytes, heat]
        .iter()
        .map(|n| api.enable(n))
        .max()
        .unwrap();
    // Datasets count from the second after they were enabled.
    while std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        < since
    {
        std::thread::sleep(Duration::from_millis(50));
    }

    // The load: the first client reads alpha READS times; the second reads alpha
    // READS times and beta 2 * READS times.
    for _ in 0..READS {
        assert_eq!(
            one.read(&files[0], 0, READ_BYTES).1.len(),
            READ_BYTES as usize
        );
        assert_eq!(
            two.read(&files[0], 0, READ_BYTES).1.len(),
            READ_BYTES as usize
        );
        for _ in 0..2 {
            assert_eq!(
                two.read(&files[1], 0, READ_BYTES).1.len(),
                READ_BYTES as usize
            );
        }
    }
    let n = READS as u64;

    let (total, keys, _) = api.settled(by_client, since, 4 * n);
    assert_eq!(total, 4 * n);
    assert_eq!(
        keys,
        BTreeMap::from([
            ("127.0.0.1".to_string(), n),
            ("127.0.0.2".to_string(), 3 * n)
        ])
    );
    let (total, keys, _) = api.settled(by_file, since, 3 * n);
    assert_eq!(total, 3 * n);
    assert_eq!(
        keys,
        BTreeMap::from([
            ("/tp/share/alpha".to_string(), n),
            ("/tp/share/beta".to_string(), 2 * n)
        ])
    );
    let (total, keys, _) = api.settled(bytes, since, 4 * n * READ_BYTES as u64);
    assert_eq!(total, 4 * n * READ_BYTES as u64);
    assert_eq!(keys["127.0.0.2"], 3 * n * READ_BYTES as u64);
    let (total, _, in_buckets) = api.settled(heat, since, 4 * n);
    assert_eq!((total, in_buckets), (4 * n, 4 * n));

    // The range summary: the average per second is the total over the seconds.
    let (_, v) = api.get(&format!(
        "/api/v1/analytics/data?name={}&start={since}&end={}",
        urlencode(by_client),
        since + 3599
    ));
    let summary = &v["summary"];
    let secs = summary["seconds"].as_u64().unwrap();
    assert!(secs > 0);
    assert_eq!(summary["total"].as_u64().unwrap(), 4 * n);
    let avg = summary["average"].as_f64().unwrap();
    assert!((avg - (4 * n) as f64 / secs as f64).abs() < 1e-9);
    assert!(summary["max"].as_f64().unwrap() >= avg);

    // Device I/O is counted too (the files were written), by pool device path.
    let (total, keys, _) = api.settled("io.bytes[device]", 0, 1);
    assert!(total > 0);
    assert!(keys.keys().all(|k| k.contains(".img")), "{keys:?}");

    // Prometheus: totals by op and share, never by client or file.
    let (code, text) = api.text("/metrics");
    assert_eq!(code, 200);
    let reads: u64 = text
        .lines()
        .find(|l| {
            l.starts_with(
                "shoal_nfs_operations_total{version=\"3\",op=\"read\",share=\"tp/share\"}",
            )
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no read counter in:\n{text}"));
    assert_eq!(reads, 4 * n);
    assert!(text.contains("shoal_arc_size_bytes{pool=\"tp\"}"));
    assert!(!text.contains("127.0.0.2") && !text.contains("alpha"));

    // Bad names and unknown datasets get clear errors.
    let (code, v) = api.post(
        "/api/v1/analytics/datasets",
        r#"{"name":"nfs3.ops[colour]"}"#,
    );
    assert_eq!(code, 400);
    assert!(v["error"]
        .as_str()
        .unwrap()
        .contains("no dimension 'colour'"));
    let (code, _) = api.get("/api/v1/analytics/data?name=nfs3.ops%5Bclient%5D");
    assert_eq!(code, 404);
    assert_eq!(
        api.delete("/api/v1/analytics/datasets?name=nfs3.ops%5Bop%5D"),
        409
    );
    assert_eq!(
        api.delete(&format!(
            "/api/v1/analytics/datasets?name={}",
            urlencode(by_file)
        )),
        204
    );
    let (code, v) = api.get("/api/v1/analytics/status");
    assert_eq!(code, 200);
    assert_eq!(v["events_dropped"], 0);
}
