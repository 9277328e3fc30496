//! `shoal serve` against the Linux kernel's iSCSI initiator: Debian's kernel booted
//! under qemu in a private network namespace (tests/nfsvm) with iscsi_tcp and sd_mod,
//! open-iscsi's iscsid and iscsiadm carried in from the host. The guest
//! (`tests/nfsvm/iscsi-client.sh`) discovers the target, logs in with mutual CHAP and
//! CRC32C digests, makes ext4 on the LUN, runs fio with verification, has the server
//! killed (kill -9; in the second test with the daemon's simulated power loss, so the
//! kill loses every write not flushed) under fsync'ed writes and verifies them after,
//! checks the filesystem with e2fsck, then deletes 96 MiB and trims; the host then
//! finds the volume's referenced bytes below what was written (the pool took the space
//! back). The negative control runs the power cut with flushes that do nothing and must
//! see the guest find lost data.
//!
//! Needs root (network namespaces), qemu, the unpacked kernel (the harness installs
//! both on first use), open-iscsi, e2fsprogs, util-linux and fio (`.ci/test-deps.sh`).

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One guest at a time: each boots a 2-CPU emulated machine, and the machine has 2 cores.
static ONE_GUEST: Mutex<()> = Mutex::new(());

const TARGET: &str = "iqn.2026-12.org.shoal:kernel";
const MIB: u64 = 1 << 20;

fn nfsvm_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/nfsvm")
}

/// A pool with a 256 MiB volume exported as `TARGET` with mutual CHAP: the target is
/// made through a daemon on loopback, which is then stopped (the guest's daemon runs
/// in the namespace and finds it in its state).
fn make_target(dir: &Path) -> PathBuf {
    let state = dir.join("state");
    create_tank(&state, dir, "256M", &["raidz1", "a", "b", "c"]);
    ok(&state, &["volume", "create", "tank/vm1", "--size", "256M"]);
    let [port] = free_ports::<1>();
    let mut d = Served::start(
        &state,
        &dir.join("setup.log"),
        &["--iscsi", &format!("127.0.0.1:{port}")],
    );
    let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["iscsi", "target", "create", TARGET, "--lun", "0=tank/vm1"])
        .args(["--chap", "guest-user", "--mutual-chap", "shoal-target"])
        .env("SHOAL_STATE_DIR", &state)
        .env("SHOAL_CHAP_SECRET", "initiator-secret-1")
        .env("SHOAL_MUTUAL_CHAP_SECRET", "target-secret-22")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    d.stop();
    state
}

fn referenced(state: &Path) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&ok(
        state,
        &["volume", "get", "tank/vm1", "referenced", "--json"],
    ))
    .unwrap();
    v[0]["value"].as_str().unwrap().parse().unwrap()
}

fn run_guest(state: &Path, serve_args: &str) -> String {
    let (ok, guest, details) = run_guest_outcome(state, serve_args);
    assert!(ok, "guest failed:\n{guest}\n{details}");
    guest
}

/// Runs the guest; answers whether it passed, its own lines, and the whole console
/// with the server's log.
fn run_guest_outcome(state: &Path, serve_args: &str) -> (bool, String, String) {
    let _one = ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
    let vm = nfsvm_dir();
    let log = state.join("server.log");
    let server = format!(
        "SHOAL_STATE_DIR={state} SHOAL_LOG=info RESTART_SIGNAL=KILL {wrapper} {shoal} \
         --listen 10.99.0.1:2049 --portmapper off --api off --iscsi 10.99.0.1:3260 \
         {serve_args} 2>>{log}",
        state = state.display(),
        wrapper = vm.join("serve-restartable.sh").display(),
        shoal = env!("CARGO_BIN_EXE_shoal"),
        log = log.display(),
    );
    let bins = [
        "/usr/sbin/iscsid",
        "/usr/sbin/iscsiadm",
        "/usr/sbin/mkfs.ext4",
        "/usr/sbin/e2fsck",
        "/usr/sbin/fstrim",
        "/usr/bin/fio",
    ];
    let out = Command::new(vm.join("harness/run.sh"))
        .args(["-s", &server, "-p", "3260", "-t", "1200"])
        .args(["-e", &format!("TARGET={TARGET}")])
        .args([
            "-e",
            "CHAP_USER=guest-user",
            "-e",
            "CHAP_SECRET=initiator-secret-1",
        ])
        .args([
            "-e",
            "MUTUAL_USER=shoal-target",
            "-e",
            "MUTUAL_SECRET=target-secret-22",
        ])
        .env("EXTRA_BINS", bins.join(" "))
        .env("NFSVM_MODULES", "iscsi_tcp sd_mod")
        .arg(vm.join("iscsi-client.sh"))
        .output()
        .expect("run tests/nfsvm/harness/run.sh");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let guest: String = stdout
        .lines()
        .filter(|l| !l.starts_with('['))
        .map(|l| format!("{}\n", l.trim_end_matches('\r')))
        .collect();
    println!("{guest}");
    let details = format!(
        "{}:\n{stdout}\n{}\nserver log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    (out.status.success(), guest, details)
}

fn check(state: &Path, guest: &str) {
    for step in [
        "ok: discovery lists the target",
        "ok: login with mutual CHAP and CRC32C header and data digests",
        "ok: mkfs.ext4 and mount",
        "ok: fio random writes at depth 8 read back and verify",
        "ok: fsync'ed writes survive a server restart under I/O",
        "ok: the filesystem checks clean",
        "ok: fstrim",
        "ok: logout",
        "iSCSI kernel client: all steps passed",
    ] {
        assert!(guest.contains(step), "missing '{step}' in:\n{guest}");
    }
    // 96 MiB of random data went to the volume and were trimmed: the pool holds
    // little more than the filesystem's metadata.
    let r = referenced(state);
    assert!(
        r < 64 * MIB,
        "the volume still references {r} bytes after fstrim"
    );
}

#[test]
fn the_kernel_initiator_survives_kill_9_under_io() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = make_target(t.path());
    let guest = run_guest(&state, "");
    check(&state, &guest);
}

#[test]
fn the_kernel_initiator_survives_a_power_cut_under_io() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = make_target(t.path());
    let guest = run_guest(&state, "--simulate-power-loss 7");
    check(&state, &guest);
}

/// The negative control: the same run with device flushes that do nothing (so the
/// power cut loses what the initiator was told is durable) must report the loss.
#[test]
fn with_flushes_that_lie_the_same_run_reports_lost_writes() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = make_target(t.path());
    let (ok, guest, details) =
        run_guest_outcome(&state, "--simulate-power-loss 7 --simulate-lying-flush");
    assert!(
        !ok,
        "no loss reported with lying flushes:\n{guest}\n{details}"
    );
    assert!(
        [
            "verify after the restart",
            "fio under the restart",
            "e2fsck",
            "mount"
        ]
        .iter()
        .any(|s| guest.contains(&format!("FAILED: {s}"))),
        "the run failed, but not on lost data:\n{guest}\n{details}"
    );
}
