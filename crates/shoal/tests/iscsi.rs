//! The block service through the running daemon: targets made with the CLI and used
//! with libiscsi's tools (`iscsi-inq`, `iscsi-readcapacity16`); CHAP, mutual CHAP and
//! initiator lists refusing who they must; exported volumes guarded; targets kept
//! across a kill -9; and libiscsi's conformance suite, `iscsi-test-cu --dataloss
//! --test=ALL`, run against a shoal LUN (every test passes; the tests it skips are
//! exactly those docs/iscsi.md lists, with their reasons) and against tgt on a file in the
//! same job, both results printed and written to `target/artifacts/iscsi-conformance.json`.
//!
//! Needs libiscsi-bin and tgt (`.ci/test-deps.sh`), and root for tgtd.

mod common;
use common::*;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

const SUITE_TESTS: u64 = 230;

fn json(state: &Path, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(state, args)).unwrap()
}

/// A daemon over a fresh raidz1 pool with two iSCSI portals (one portal group, for
/// multipath) on loopback ports; answers the first portal's port and the second's.
fn daemon(t: &Path) -> (std::path::PathBuf, Served, u16, u16) {
    let state = t.join("state");
    create_tank(&state, t, "256M", &["raidz1", "a", "b", "c"]);
    let [port, second] = free_ports::<2>();
    let d = Served::start(
        &state,
        &t.join("log"),
        &["--iscsi", &format!("127.0.0.1:{port},127.0.0.1:{second}")],
    );
    (state, d, port, second)
}

fn url(port: u16, auth: &str, target: &str, lun: u32) -> String {
    format!("iscsi://{auth}127.0.0.1:{port}/{target}/{lun}")
}

fn inq(url: &str) -> std::process::Output {
    Command::new("iscsi-inq")
        .arg(url)
        .output()
        .expect("iscsi-inq (libiscsi-bin)")
}

/// What one iscsi-test-cu run said: (tests ran, passed, failed, failed test names,
/// skipped test names as Suite.Test).
struct SuiteRun {
    ran: u64,
    passed: u64,
    failed: u64,
    failures: Vec<String>,
    skipped: BTreeSet<String>,
}

/// Runs the suite against `url`, with `multipath` as the second path to the same LUN
/// (its MultipathIO tests run over both).
fn run_suite(url: &str, multipath: &str, log: &Path) -> SuiteRun {
    let out = Command::new("iscsi-test-cu")
        .args(["--dataloss", "--test=ALL", url, multipath])
        .stdin(Stdio::null())
        .output()
        .expect("iscsi-test-cu (libiscsi-bin)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    std::fs::write(log, &text).unwrap();
    let mut suite = String::new();
    let mut test = String::new();
    let mut skipped = BTreeSet::new();
    let mut failures = Vec::new();
    let (mut ran, mut passed, mut failed) = (0, 0, 0);
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(s) = t.strip_prefix("Suite: ") {
            suite = s.trim().to_string();
        } else if let Some(rest) = t.strip_prefix("Test: ") {
            test = rest.split(" ...").next().unwrap_or("").trim().to_string();
        }
        if line.contains("[SKIPPED]") {
            skipped.insert(format!("{suite}.{test}"));
        }
        if t.starts_with("Test: ") && line.ends_with("FAILED") || t == "FAILED" {
            failures.push(format!("{suite}.{test}"));
        }
        if let Some(rest) = t.strip_prefix("tests ") {
            let n: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            if n.len() >= 4 {
                (ran, passed, failed) = (n[1], n[2], n[3]);
            }
        }
    }
    failures.dedup();
    assert!(ran > 0, "iscsi-test-cu printed no summary:\n{text}");
    SuiteRun {
        ran,
        passed,
        failed,
        failures,
        skipped,
    }
}

/// The skipped tests docs/iscsi.md lists (the table after "<!-- iscsi-test-cu skips -->").
fn documented_skips() -> BTreeSet<String> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/iscsi.md"))
            .unwrap();
    let table = doc
        .split("<!-- iscsi-test-cu skips -->")
        .nth(1)
        .expect("docs/iscsi.md lists the conformance suite's skips");
    let mut out = BTreeSet::new();
    for line in table
        .lines()
        .map(str::trim_start)
        .skip_while(|l| !l.starts_with('|'))
    {
        if !line.starts_with('|') {
            break;
        }
        let cell = line.split('|').nth(1).unwrap_or("").trim();
        for name in cell.split(',') {
            let name = name.trim().trim_matches('`');
            if name.contains('.') {
                out.insert(name.to_string());
            }
        }
    }
    out
}

#[test]
fn the_conformance_suite_passes_and_tgt_runs_it_beside() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (state, mut d, port, second) = daemon(t.path());
    ok(&state, &["volume", "create", "tank/lun0", "--size", "64M"]);
    let target = "iqn.2026-12.org.shoal:conformance";
    ok(
        &state,
        &["iscsi", "target", "create", target, "--lun", "0=tank/lun0"],
    );
    // The second path goes through the second portal.
    let shoal = run_suite(
        &url(port, "", target, 0),
        &url(second, "", target, 0),
        &t.path().join("shoal-cu.log"),
    );
    d.stop();

    // tgt, Debian's user-space target, on a file of the same size.
    let tgt = {
        let img = t.path().join("tgt.img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let [tport] = free_ports::<1>();
        let control = (std::process::id() % 1000 + 100).to_string();
        let tgtd = Kill(
            Command::new("tgtd")
                .args([
                    "-f",
                    "--iscsi",
                    &format!("portal=127.0.0.1:{tport}"),
                    "-C",
                    &control,
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("tgtd (tgt)"),
        );
        let tgtadm = |args: &[&str]| {
            for _ in 0..50 {
                let out = Command::new("tgtadm")
                    .args(["-C", &control, "--lld", "iscsi"])
                    .args(args)
                    .output()
                    .unwrap();
                if out.status.success() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            panic!("tgtadm {args:?} kept failing");
        };
        let tname = "iqn.2026-12.org.shoal:tgt";
        tgtadm(&["--op", "new", "--mode", "target", "--tid", "1", "-T", tname]);
        tgtadm(&[
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            "1",
            "--lun",
            "1",
            "-b",
            img.to_str().unwrap(),
        ]);
        tgtadm(&[
            "--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL",
        ]);
        // tgt serves one portal here: its second path is a second session to it.
        let tgt_url = url(tport, "", tname, 1);
        let run = run_suite(&tgt_url, &tgt_url, &t.path().join("tgt-cu.log"));
        drop(tgtd);
        run
    };

    let report = serde_json::json!({
        "suite": "iscsi-test-cu --dataloss --test=ALL (libiscsi)",
        "shoal": {"ran": shoal.ran, "passed": shoal.passed, "failed": shoal.failed,
                  "skipped": shoal.skipped.len(), "failures": shoal.failures},
        "tgt": {"ran": tgt.ran, "passed": tgt.passed, "failed": tgt.failed,
                "skipped": tgt.skipped.len(), "failures": tgt.failures},
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::write(
        artifacts.join("iscsi-conformance.json"),
        serde_json::to_vec_pretty(&report).unwrap(),
    )
    .unwrap();

    assert_eq!(shoal.ran, SUITE_TESTS, "every test of the suite ran");
    assert_eq!(
        (shoal.failed, shoal.failures.len()),
        (0, 0),
        "shoal failed: {:?}",
        shoal.failures
    );
    assert_eq!(shoal.passed, SUITE_TESTS);
    let listed = documented_skips();
    assert_eq!(
        shoal.skipped,
        listed,
        "skipped but not in docs/iscsi.md: {:?}; in docs/iscsi.md but not skipped: {:?}",
        shoal.skipped.difference(&listed).collect::<Vec<_>>(),
        listed.difference(&shoal.skipped).collect::<Vec<_>>()
    );
    // The peer really ran it.
    assert_eq!(tgt.ran, SUITE_TESTS, "tgt ran the suite");
}

#[test]
fn targets_are_guarded_authenticated_and_kept() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (state, mut d, port, second) = daemon(t.path());
    ok(&state, &["volume", "create", "tank/vm1", "--size", "32M"]);
    ok(
        &state,
        &["volume", "create", "tank/vm2", "--size", "16M", "--sparse"],
    );
    ok(&state, &["fs", "create", "tank/files"]);
    let open = "iqn.2026-12.org.shoal:open";
    let made = json(
        &state,
        &[
            "iscsi",
            "target",
            "create",
            open,
            "--lun",
            "0=tank/vm1",
            "--json",
        ],
    );
    assert_eq!(made["luns"][0]["online"], true, "{made}");
    assert_eq!(made["luns"][0]["size_bytes"], 32 << 20);
    let out = inq(&url(port, "", open, 0));
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Vendor:SHOAL") && text.contains("SBC-3"),
        "{text}"
    );
    // Discovery through either portal names both (one portal group, for multipath).
    for via in [port, second] {
        let out = Command::new("iscsi-ls")
            .args(["-s", &format!("iscsi://127.0.0.1:{via}")])
            .output()
            .expect("iscsi-ls (libiscsi-bin)");
        let text = String::from_utf8_lossy(&out.stdout);
        for p in [port, second] {
            assert!(
                text.contains(&format!("127.0.0.1:{p}")),
                "via {via}: {text}"
            );
        }
    }

    // Refusals, each with its reason.
    let refused = |args: &[&str], says: &str| {
        let out = shoal_with_env(&state, args, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
    };
    refused(
        &[
            "iscsi",
            "target",
            "create",
            "Target-1",
            "--lun",
            "0=tank/vm2",
        ],
        "not an iSCSI name",
    );
    refused(
        &["iscsi", "target", "create", open, "--lun", "0=tank/vm2"],
        "exists",
    );
    refused(
        &[
            "iscsi",
            "target",
            "create",
            "iqn.2026-12.org.shoal:x",
            "--lun",
            "0=tank/vm1",
        ],
        "already",
    );
    refused(
        &[
            "iscsi",
            "target",
            "create",
            "iqn.2026-12.org.shoal:x",
            "--lun",
            "0=tank/files",
        ],
        "is a filesystem",
    );
    refused(
        &[
            "iscsi",
            "target",
            "create",
            "iqn.2026-12.org.shoal:x",
            "--lun",
            "0=tank/none",
        ],
        "dataset",
    );
    refused(
        &["volume", "destroy", "tank/vm1"],
        "destroy the target first",
    );
    ok(&state, &["snapshot", "create", "tank/vm1@s"]);
    refused(
        &["snapshot", "rollback", "tank/vm1@s"],
        "destroy the target first",
    );

    // CHAP, mutual CHAP and an initiator list.
    let chap = "iqn.2026-12.org.shoal:chap";
    let out = shoal_with_env(
        &state,
        &[
            "iscsi",
            "target",
            "create",
            chap,
            "--lun",
            "0=tank/vm2",
            "--chap",
            "alice",
            "--mutual-chap",
            "tgt",
            "--allow",
            "iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-inq",
        ],
        &[
            ("SHOAL_CHAP_SECRET", "alice-secret-1"),
            ("SHOAL_MUTUAL_CHAP_SECRET", "target-secret-2"),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let listed = ok(&state, &["iscsi", "target", "show", chap]);
    assert!(
        listed.contains("user alice, mutual as tgt") && !listed.contains("secret"),
        "{listed}"
    );
    let no_auth = inq(&url(port, "", chap, 0));
    assert!(!no_auth.status.success());
    let wrong = inq(&url(port, "alice%not-the-secret@", chap, 0));
    assert!(!wrong.status.success());
    let right = inq(&url(port, "alice%alice-secret-1@", chap, 0));
    assert!(right.status.success(), "{right:?}");
    let mutual = inq(&format!(
        "{}?target_user=tgt&target_password=target-secret-2",
        url(port, "alice%alice-secret-1@", chap, 0)
    ));
    assert!(mutual.status.success(), "{mutual:?}");
    let forged = inq(&format!(
        "{}?target_user=tgt&target_password=guessed-wrong",
        url(port, "alice%alice-secret-1@", chap, 0)
    ));
    assert!(
        !forged.status.success(),
        "the initiator caught a target without the secret"
    );
    let other = Command::new("iscsi-inq")
        .args(["-i", "iqn.2026-12.org.example:someone-else"])
        .arg(url(port, "alice%alice-secret-1@", chap, 0))
        .output()
        .unwrap();
    assert!(!other.status.success(), "an initiator not on the list");

    // Discovery behind CHAP: anonymous and wrong-secret SendTargets are refused, the
    // right user (and mutual CHAP, through shoal's own initiator) lists the targets;
    // normal logins to an open target are unaffected.
    let set = shoal_with_env(
        &state,
        &[
            "iscsi",
            "discovery",
            "set",
            "--chap",
            "finder",
            "--mutual-chap",
            "portal",
            "--json",
        ],
        &[
            ("SHOAL_CHAP_SECRET", "finder-secret-3"),
            ("SHOAL_MUTUAL_CHAP_SECRET", "portal-secret-4"),
        ],
    );
    assert!(set.status.success(), "{set:?}");
    let shown: serde_json::Value = serde_json::from_slice(&set.stdout).unwrap();
    assert_eq!(shown["chap_user"], "finder", "{shown}");
    assert!(!String::from_utf8_lossy(&set.stdout).contains("secret-3"));
    let list = |auth: &str| {
        Command::new("iscsi-ls")
            .arg(format!("iscsi://{auth}127.0.0.1:{port}"))
            .output()
            .expect("iscsi-ls (libiscsi-bin)")
    };
    assert!(!list("").status.success(), "anonymous discovery");
    assert!(!list("finder%wrong-secret-0@").status.success());
    let found = list("finder%finder-secret-3@");
    assert!(found.status.success(), "{found:?}");
    assert!(String::from_utf8_lossy(&found.stdout).contains(open));
    let discover = |secret: &str, mutual: &str| {
        iscsi::initiator::Initiator::login(
            format!("127.0.0.1:{port}").parse().unwrap(),
            &iscsi::initiator::LoginSpec {
                initiator: "iqn.2026-12.org.shoal:finder".into(),
                target: None,
                chap: Some(("finder".into(), secret.into())),
                mutual_chap: Some(("portal".into(), mutual.into())),
            },
        )
    };
    let mut session = discover("finder-secret-3", "portal-secret-4").unwrap();
    let targets = session.send_targets().unwrap();
    let names: Vec<&str> = targets.iter().map(|t| t.0.as_str()).collect();
    // The CHAP target admits listed initiators only, and is not shown to others.
    assert_eq!(names, [open], "{targets:?}");
    assert!(
        targets.iter().all(|t| t.1.len() == 2),
        "both portals: {targets:?}"
    );
    session.logout().unwrap();
    assert!(
        discover("finder-secret-3", "a-forged-portal-secret").is_err(),
        "the initiator catches a portal without the mutual secret"
    );
    assert!(inq(&url(port, "", open, 0)).status.success());

    // A resize shows in READ CAPACITY.
    ok(&state, &["volume", "set", "tank/vm1", "volsize=48M"]);
    let cap = Command::new("iscsi-readcapacity16")
        .arg(url(port, "", open, 0))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&cap.stdout);
    assert!(
        text.contains(&format!("Total size:{}", 48u64 << 20)),
        "{text}"
    );

    // Kept across a kill -9, refusals and all.
    d.restart();
    let again = json(&state, &["iscsi", "target", "list", "--json"]);
    assert_eq!(again.as_array().unwrap().len(), 2, "{again}");
    assert!(inq(&url(port, "", open, 0)).status.success());
    assert!(!inq(&url(port, "", chap, 0)).status.success());
    assert!(!list("").status.success(), "discovery CHAP is kept");
    let cleared = json(&state, &["iscsi", "discovery", "set", "--json"]);
    assert!(cleared["chap_user"].is_null(), "{cleared}");
    assert!(
        list("").status.success(),
        "anonymous discovery once cleared"
    );

    // A destroyed target frees its volume.
    ok(&state, &["iscsi", "target", "destroy", open]);
    assert!(!inq(&url(port, "", open, 0)).status.success());
    ok(&state, &["snapshot", "rollback", "tank/vm1@s"]);
    ok(&state, &["snapshot", "destroy", "tank/vm1@s"]);
    ok(&state, &["volume", "destroy", "tank/vm1"]);
    d.stop();
}

fn shoal_with_env(state: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_shoal"));
    c.args(args)
        .env("SHOAL_STATE_DIR", state)
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}
