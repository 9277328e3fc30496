//! `shoal serve` against the Linux kernel's own NFS client: Debian's kernel booted
//! under qemu in a private network namespace (tests/nfsvm), mounting a share of a
//! raidz2 pool over NFSv3 (with port options and through the portmapper) and over
//! NFSv4.1 and 4.2 (with the real mount.nfs negotiating the version), with the server
//! restarted under the mount, locks between processes (NFSv3 ones through NLM, with
//! the guest's own rpcbind and rpc.statd), the share rolled back to a snapshot under
//! both clients' open files, and pjdfstest run over the v3 and the v4.1 mount.
//!
//! Needs root (network namespaces, port 111), qemu and the unpacked kernel; the harness
//! installs both on first use (`tests/nfsvm/harness/setup.sh`). pjdfstest comes from
//! `.ci/test-deps.sh` (`PJDFSTEST` may point at the binary).

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One guest at a time: each boots a 2-CPU emulated machine, and the machine has 2 cores.
static ONE_GUEST: Mutex<()> = Mutex::new(());

fn nfsvm_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/nfsvm")
}

/// A pool `tank` (raidz2 of six file devices) with an empty filesystem `tank/share`.
fn make_share(dir: &Path) -> PathBuf {
    let state = dir.join("state");
    create_tank(
        &state,
        dir,
        "256M",
        &["raidz2", "a", "b", "c", "d", "e", "f"],
    );
    ok(&state, &["fs", "create", "tank/share"]);
    state
}

/// Runs `guest` in the VM against `shoal serve` sharing tank/share; returns the
/// guest's output. Panics with the guest's and the server's output if the guest fails.
fn run_guest(state: &Path, guest: &str, extra_bins: &[&Path], env: &[(&str, &str)]) -> String {
    run_guest_with(state, guest, extra_bins, env, "")
}

/// `run_guest` with more `shoal serve` arguments.
fn run_guest_with(
    state: &Path,
    guest: &str,
    extra_bins: &[&Path],
    env: &[(&str, &str)],
    serve_args: &str,
) -> String {
    let _one = ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
    let vm = nfsvm_dir();
    let log = state.join("server.log");
    let server = format!(
        "SHOAL_STATE_DIR={state} SHOAL_LOG=info {wrapper} {shoal} --listen 10.99.0.1:2049 \
         --portmapper 10.99.0.1:111 --share 'tank/share=*(rw,no_root_squash)' {serve_args} \
         2>>{log}",
        state = state.display(),
        wrapper = vm.join("serve-restartable.sh").display(),
        shoal = env!("CARGO_BIN_EXE_shoal"),
        log = log.display(),
    );
    let mut cmd = Command::new(vm.join("harness/run.sh"));
    cmd.args(["-s", &server, "-p", "2049", "-t", "900"])
        .args(["-e", "EXPORT=/tank/share"]);
    for (k, v) in env {
        cmd.args(["-e", &format!("{k}={v}")]);
    }
    let bins: Vec<String> = extra_bins.iter().map(|p| p.display().to_string()).collect();
    cmd.env("EXTRA_BINS", bins.join(" "));
    cmd.arg(vm.join(guest));
    let out = cmd.output().expect("run tests/nfsvm/harness/run.sh");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    // The guest's own lines, without the kernel's console messages.
    let guest: String = stdout
        .lines()
        .filter(|l| !l.starts_with('['))
        .map(|l| format!("{}\n", l.trim_end_matches('\r')))
        .collect();
    println!("{guest}");
    assert!(
        out.status.success(),
        "guest {guest} failed ({}):\n{stdout}\n{}\nserver log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    guest
}

#[test]
fn kernel_client_mounts_reads_writes_and_survives_a_server_restart() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = make_share(t.path());
    let out = run_guest(&state, "kernel-client.sh", &[], &[]);
    for step in [
        "ok: mount v3 with port options",
        "ok: write 24 MiB, read back, checksum",
        "ok: create, rename, link, symlink, chmod, truncate, mknod, remove",
        "ok: tar unpack of",
        "ok: server restarted under the mount; handles still valid",
        "ok: unmount",
        "ok: mount v3 through the portmapper",
        "kernel client: all steps passed",
    ] {
        assert!(out.contains(step), "missing step {step:?} in:\n{out}");
    }
    let log = std::fs::read_to_string(state.join("server.log")).unwrap();
    assert_eq!(
        log.matches("and NFSv4.0, 4.1 and 4.2 on 10.99.0.1:2049")
            .count(),
        2,
        "the server should have run twice (one restart):\n{log}"
    );
    assert_eq!(log.matches("shoal: stopped").count(), 2, "{log}");
    // Everything the guest did is committed and consistent; it removed what it made.
    let check = ok(&state, &["pool", "check", "tank"]);
    assert!(check.contains("no problems found"), "{check}");
}

/// Builds tests/nfsvm/fcntl-lock.c statically (the guest has no C library).
fn fcntl_lock_binary(dir: &Path) -> PathBuf {
    let out = dir.join("fcntl-lock");
    let status = Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(nfsvm_dir().join("fcntl-lock.c"))
        .status()
        .expect("run gcc");
    assert!(status.success(), "building fcntl-lock failed");
    out
}

#[test]
fn kernel_client_v4_negotiates_locks_and_survives_a_server_restart() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = make_share(t.path());
    let lock = fcntl_lock_binary(t.path());
    let lock_text = lock.display().to_string();
    let out = run_guest(
        &state,
        "kernel-client-v4.sh",
        &[
            Path::new("/sbin/mount.nfs"),
            Path::new("/usr/bin/flock"),
            &lock,
        ],
        &[("FCNTL_LOCK", &lock_text)],
    );
    for step in [
        "ok: mount.nfs with no version option negotiates 4.2",
        "ok: pseudo-filesystem root lists the export",
        "ok: vers=4.1: write 24 MiB, read back, checksum",
        "ok: create, rename, link, symlink, chmod, chown, truncate, mknod, remove",
        "ok: tar round trip of",
        "ok: fcntl and flock locks conflict between mounts at the server and go at close",
        "ok: open file survives its unlink until close",
        "ok: vers=4.2: read, copy, punch hole",
        "ok: server restarted under the mount; open file and lock reclaimed",
        "ok: clean up and unmount",
        "kernel client v4: all steps passed",
    ] {
        assert!(out.contains(step), "missing step {step:?} in:\n{out}");
    }
    let check = ok(&state, &["pool", "check", "tank"]);
    assert!(check.contains("no problems found"), "{check}");
}

#[test]
fn kernel_client_v3_locks_through_nlm_and_reclaims_them_after_a_restart() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = make_share(t.path());
    let lock = fcntl_lock_binary(t.path());
    let lock_text = lock.display().to_string();
    let bins: Vec<&Path> = [
        "/sbin/mount.nfs",
        "/usr/bin/flock",
        "/sbin/rpcbind",
        "/sbin/rpc.statd",
        "/etc/netconfig",
        "/etc/protocols",
        "/etc/services",
    ]
    .iter()
    .map(Path::new)
    .chain([lock.as_path()])
    .collect();
    let out = run_guest_with(
        &state,
        "kernel-client-nlm.sh",
        &bins,
        &[("FCNTL_LOCK", &lock_text)],
        "--grace-period 15s",
    );
    for step in [
        "ok: rpcbind and rpc.statd running",
        "ok: mount vers=3 without nolock through the portmapper",
        "ok: fcntl and flock locks conflict between processes and mounts at the server and go at close",
        "ok: a waiting lock is granted when its holder lets go",
        "ok: v3 (NLM) and v4 locks conflict both ways",
        "ok: server restarted under the mount; the lock was reclaimed after SM_NOTIFY",
        "ok: unmount",
        "kernel client nlm: all steps passed",
    ] {
        assert!(out.contains(step), "missing step {step:?} in:\n{out}");
    }
    let log = std::fs::read_to_string(state.join("server.log")).unwrap();
    // The waiting lock came by the server's call back, not by the client polling.
    assert!(
        log.contains("a blocked lock was taken and its client told (GRANTED)"),
        "{log}"
    );
    // The restarted server told the guest, and was in its grace period.
    assert!(
        log.contains("told a lock client that the server restarted"),
        "{log}"
    );
    assert!(log.contains("NLM grace period"), "{log}");
    assert!(!log.contains("a call to an NLM client failed"), "{log}");
}

#[test]
fn kernel_client_v40_mounts_locks_and_reclaims_after_a_restart() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = make_share(t.path());
    let lock = fcntl_lock_binary(t.path());
    let lock_text = lock.display().to_string();
    let out = run_guest_with(
        &state,
        "kernel-client-v40.sh",
        &[
            Path::new("/sbin/mount.nfs"),
            Path::new("/usr/bin/flock"),
            &lock,
        ],
        &[("FCNTL_LOCK", &lock_text)],
        "--grace-period 15s",
    );
    for step in [
        "ok: mount vers=4.0",
        "ok: write 16 MiB, read back, checksum",
        "ok: create, rename, link, symlink, chmod, chown, truncate, remove",
        "ok: tar round trip of",
        "ok: fcntl and flock locks conflict between mounts at the server and go at close",
        "ok: read delegation recalled over the callback path for an NFSv3 write",
        "ok: server restarted under the mount; open file and lock reclaimed",
        "ok: unmount",
        "kernel client v4.0: all steps passed",
    ] {
        assert!(out.contains(step), "missing step {step:?} in:\n{out}");
    }
    // The recall went to the guest's callback service and was answered.
    let log = std::fs::read_to_string(state.join("server.log")).unwrap();
    assert!(
        log.contains("delegation recalled (CB_RECALL answered)"),
        "{log}"
    );
    let check = ok(&state, &["pool", "check", "tank"]);
    assert!(check.contains("no problems found"), "{check}");
}

#[test]
fn kernel_clients_see_their_share_rolled_back_under_open_files() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = make_share(t.path());
    let out = run_guest(&state, "kernel-client-rollback.sh", &[], &[]);
    for step in [
        "ok: snapshot taken under the mounts",
        "ok: rolled back while mounted over v4.1 and v3 with files open",
        "ok: both clients see the snapshot's files",
        "ok: a survivor keeps its handle, a vanished file's answers stale",
        "ok: the share works after it; clean up and unmount",
        "kernel client rollback: all steps passed",
    ] {
        assert!(out.contains(step), "missing step {step:?} in:\n{out}");
    }
    // The v4.1 client's open of the vanished file was revoked at the rollback.
    let log = std::fs::read_to_string(state.join("server.log")).unwrap();
    assert!(log.contains("NFSv4 state revoked by a rollback"), "{log}");
    let check = ok(&state, &["pool", "check", "tank"]);
    assert!(check.contains("no problems found"), "{check}");
}

/// Tests that cannot pass over NFSv3 whatever the server does (README, "pjdfstest
/// exclusions"), and tests pjdfstest itself skips.
const NFS_CLIENT_LIMITS: [&str; 2] = [
    // The client keeps an unlinked open file alive by renaming it (.nfsXXXX), so
    // fstat shows one link, not zero: NFSv3 has no open state on the server.
    "unlink::open_file_not_freed",
    // nfstime3 seconds are 32 bits: the client clamps 2^32 to 2^32-1.
    "utimensat::y2038",
];

#[test]
fn pjdfstest_passes_over_the_kernel_nfs_client() {
    pjdfstest_over("3", &NFS_CLIENT_LIMITS);
}

/// NFSv4.1 keeps an unlinked open file on the server and has 64-bit times: nothing
/// is excluded.
#[test]
fn pjdfstest_passes_over_the_kernel_nfs_v41_client() {
    pjdfstest_over("4.1", &[]);
}

/// NFSv4.0 has 64-bit times too, but no way for the server to say it keeps an
/// unlinked open file (OPEN4_RESULT_PRESERVE_UNLINKED is 4.1's): the client renames
/// it away (.nfsXXXX), as over NFSv3.
#[test]
fn pjdfstest_passes_over_the_kernel_nfs_v40_client() {
    pjdfstest_over("4.0", &["unlink::open_file_not_freed"]);
}

fn pjdfstest_over(version: &str, limits: &[&str]) {
    let bin = pjdfstest_binary();
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = make_share(t.path());
    let bin_text = bin.display().to_string();
    let out = run_guest(
        &state,
        "pjdfstest.sh",
        &[&bin],
        &[("PJDFSTEST", &bin_text), ("NFS_VERSION", version)],
    );
    let (main, erofs) = out
        .split_once("== pjdfstest run: erofs")
        .expect("both pjdfstest runs reported");
    let failed = |run: &str| -> Vec<String> {
        run.lines()
            .filter(|l| l.trim_end().ends_with("FAILED"))
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .collect()
    };
    let unexpected: Vec<String> = failed(main)
        .into_iter()
        .filter(|f| !limits.contains(&f.as_str()))
        .collect();
    assert!(unexpected.is_empty(), "pjdfstest failures: {unexpected:?}");
    assert!(failed(erofs).is_empty(), "EROFS failures:\n{erofs}");
    let skipped: Vec<&str> = main
        .lines()
        .filter(|l| l.trim_end().ends_with("skipped"))
        .map(|l| l.split_whitespace().next().unwrap())
        .filter(|s| !s.contains("erofs") && *s != "link::link_count_max")
        .collect();
    assert!(skipped.is_empty(), "unexpected skips: {skipped:?}");
    let summary = |run: &str| {
        run.lines()
            .find(|l| l.starts_with("Summary:"))
            .unwrap_or("")
            .to_string()
    };
    assert!(
        summary(erofs).contains(" 0 failed") && summary(erofs).contains(" 13 passed"),
        "{}",
        summary(erofs)
    );
    // All of pjdfstest 0.2.2 ran: everything but the client limits and skips passed.
    assert!(summary(main).ends_with(" 398 total"), "{}", summary(main));
    let check = ok(&state, &["pool", "check", "tank"]);
    assert!(check.contains("no problems found"), "{check}");
}
