//! Clients the exports refuse: refused, logged and counted, every one.

use super::*;

#[test]
fn export_rules_refuse_log_and_count_every_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let state = tank(
        dir.path(),
        "128M",
        &["mirror", "a", "b"],
        &["tank/nobody", "tank/ro", "tank/squash", "tank/private"],
    );
    let served = Served::start(
        &state,
        &dir.path().join("serve.log"),
        &[
            "--share",
            "tank/nobody=10.9.9.9(rw)",
            "--share",
            "tank/ro=127.0.0.1(ro)",
            "--share",
            "tank/squash=*(rw)",
        ],
    );
    let t = target(&served);
    let root = root_credential("torture");
    let nfs = Nfs::connect(&t, root.clone()).unwrap();

    // An unlisted client, a path that leaves the export, a dataset not shared.
    assert_eq!(status(mount(&t, "/tank/nobody", root.clone())), Some(13));
    assert_eq!(
        status(mount(&t, "/tank/squash/../private", root.clone())),
        Some(13)
    );
    assert_eq!(status(mount(&t, "/tank/private", root.clone())), Some(2));
    // A read-only client writing.
    let ro = mount(&t, "/tank/ro", root.clone()).unwrap();
    assert_eq!(status(nfs.create(&ro, "new", false)), Some(30), "ROFS");
    // A squashed root writing the root-owned 0755 root directory.
    let sq = mount(&t, "/tank/squash", root.clone()).unwrap();
    assert_eq!(status(nfs.create(&sq, "new", false)), Some(13), "ACCES");
    // A forged handle: one flipped bit.
    let mut forged = sq.clone();
    forged.0[10] ^= 0x04;
    assert_eq!(status(nfs.getattr(&forged)), Some(10001), "BADHANDLE");
    // Nothing was made.
    assert!(nfs.lookup(&ro, "new").unwrap().is_none());
    assert!(nfs.lookup(&sq, "new").unwrap().is_none());

    let want: BTreeMap<String, u64> = [
        "bad_handle",
        "not_allowed",
        "not_exported",
        "path_escape",
        "read_only",
        "root_squashed",
    ]
    .iter()
    .map(|r| (r.to_string(), 1))
    .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = refusals(&served);
    while got != want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        got = refusals(&served);
    }
    assert_eq!(got, want, "nfs.refusals[reason]");
    let (_, metrics) = served.get("/metrics");
    assert!(
        metrics.contains("shoal_nfs_refusals_total{reason=\"read_only\"} 1"),
        "{metrics}"
    );
    let log = served.log_text();
    for reason in want.keys() {
        let logged = log
            .lines()
            .any(|l| l.contains("refused") && l.contains(reason.as_str()));
        assert!(logged, "no log line for {reason}:\n{log}");
    }
}
