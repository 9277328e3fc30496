//! `shoal mount` end to end: real device files, a real FUSE mount driven by ordinary
//! system calls and by pjdfstest, SIGTERM and `shoal unmount` that commit, and the data
//! there again after the pool is reopened.
//!
//! Needs root (to mount), /dev/fuse, and the pjdfstest runner with its dummy users
//! (`.ci/test-deps.sh` installs them; `PJDFSTEST` may point at the binary).

mod common;
use common::*;

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Unmounts a plain (non-shoal) mount when dropped, also when a test fails.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn make_pool(dir: &Path, state: &Path) {
    create_tank(state, dir, "512M", &["raidz1", "a", "b", "c"]);
}

/// Allocated bytes of pool `tank`, after the commits a free needs to show.
fn allocated(state: &Path) -> u64 {
    let st = ok(state, &["pool", "status", "tank", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&st).unwrap();
    v[0]["allocated_bytes"].as_u64().unwrap()
}

/// Write, snapshot, overwrite and delete through the mount; the snapshot under
/// `.shoal/snapshot/NAME/` still reads the old bytes and refuses changes; destroying it
/// gives its space back; rollback restores it.
#[test]
fn snapshots_read_back_unchanged_under_dot_shoal() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = t.path().join("state");
    make_pool(t.path(), &state);
    ok(
        &state,
        &["fs", "create", "tank/data", "-o", "recordsize=64K"],
    );
    let mnt = t.path().join("mnt");
    let old: Vec<u8> = (0..8_000_000u32)
        .map(|i| (i * 13 + i / 777) as u8)
        .collect();
    let m = Mount::start(&state, "tank/data", &mnt, &[]);
    std::fs::write(mnt.join("big"), &old).unwrap();
    std::fs::create_dir(mnt.join("dir")).unwrap();
    std::fs::write(mnt.join("dir/note"), b"first").unwrap();
    Command::new("umount").arg(&mnt).status().unwrap();
    m.wait();
    let before_snap = allocated(&state);
    let out = ok(&state, &["snapshot", "create", "tank/data@monday"]);
    assert!(out.contains("tank/data@monday"), "{out}");
    // O(1): taking it wrote next to nothing.
    assert!(allocated(&state) < before_snap + (1 << 20));

    let m = Mount::start(&state, "tank/data", &mnt, &[]);
    let new: Vec<u8> = old.iter().map(|b| b ^ 0x5a).collect();
    std::fs::write(mnt.join("big"), &new).unwrap();
    std::fs::remove_file(mnt.join("dir/note")).unwrap();
    let snap = mnt.join(".shoal/snapshot/monday");
    assert!(std::fs::read(snap.join("big")).unwrap() == old);
    assert_eq!(std::fs::read(snap.join("dir/note")).unwrap(), b"first");
    assert!(std::fs::read(mnt.join("big")).unwrap() == new);
    let names: Vec<String> = std::fs::read_dir(mnt.join(".shoal/snapshot"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["monday"]);
    // Hidden from the root listing, and read-only.
    assert!(std::fs::read_dir(&mnt)
        .unwrap()
        .all(|e| e.unwrap().file_name() != ".shoal"));
    let erofs = |r: std::io::Result<()>| r.unwrap_err().raw_os_error() == Some(libc::EROFS);
    assert!(erofs(std::fs::write(snap.join("big"), b"x")));
    assert!(erofs(std::fs::remove_file(snap.join("dir/note"))));
    assert!(erofs(std::fs::create_dir(snap.join("new"))));
    Command::new("umount").arg(&mnt).status().unwrap();
    m.wait();

    // The overwrite left the old 8 MB to the snapshot alone; destroying it frees them.
    let list = ok(&state, &["snapshot", "list", "tank/data", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&list).unwrap();
    let unique = v[0]["unique_bytes"].as_u64().unwrap();
    assert!(
        unique >= 8_000_000,
        "the snapshot alone holds {unique} bytes"
    );
    ok(&state, &["snapshot", "create", "tank/data@tuesday"]);
    let before = allocated(&state);
    ok(&state, &["snapshot", "destroy", "tank/data@monday"]);
    let freed = before - allocated(&state);
    assert!(freed >= unique, "destroy freed {freed} of {unique}");

    // Rollback to tuesday after more changes.
    let m = Mount::start(&state, "tank/data", &mnt, &[]);
    std::fs::write(mnt.join("big"), b"short").unwrap();
    Command::new("umount").arg(&mnt).status().unwrap();
    m.wait();
    ok(&state, &["snapshot", "rollback", "tank/data@tuesday"]);
    let m = Mount::start(&state, "tank/data", &mnt, &[]);
    assert!(std::fs::read(mnt.join("big")).unwrap() == new);
    std::fs::write(mnt.join("later"), b"after tuesday").unwrap();
    Command::new("umount").arg(&mnt).status().unwrap();
    m.wait();

    // Back past two newer snapshots: refused naming them, refused while one is held,
    // then done with -r, which destroys them.
    ok(&state, &["snapshot", "create", "tank/data@wednesday"]);
    ok(&state, &["snapshot", "create", "tank/data@thursday"]);
    let refused = shoal(&state, &["snapshot", "rollback", "tank/data@tuesday"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && err.contains("newer ones (tank/data@wednesday, tank/data@thursday)"),
        "{err}"
    );
    ok(&state, &["snapshot", "hold", "keep", "tank/data@thursday"]);
    let holds = ok(&state, &["snapshot", "holds", "tank/data", "--json"]);
    let holds: serde_json::Value = serde_json::from_str(&holds).unwrap();
    assert_eq!(holds[0]["snapshot"], "tank/data@thursday");
    assert_eq!(holds[0]["tag"], "keep");
    let refused = shoal(&state, &["snapshot", "rollback", "-r", "tank/data@tuesday"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("'tank/data@thursday' is held (keep)"),
        "{err}"
    );
    ok(
        &state,
        &["snapshot", "release", "keep", "tank/data@thursday"],
    );
    ok(&state, &["snapshot", "rollback", "-r", "tank/data@tuesday"]);
    let list = ok(&state, &["snapshot", "list", "tank/data", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["name"], "tank/data@tuesday");
    let m = Mount::start(&state, "tank/data", &mnt, &[]);
    assert!(std::fs::read(mnt.join("big")).unwrap() == new);
    assert!(!mnt.join("later").exists());
    Command::new("umount").arg(&mnt).status().unwrap();
    m.wait();
    let report = ok(&state, &["pool", "check", "tank"]);
    assert!(report.contains("no problems found"), "{report}");
}

#[test]
fn files_survive_unmount_signal_and_reopen() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = t.path().join("state");
    make_pool(t.path(), &state);
    ok(
        &state,
        &[
            "fs",
            "create",
            "tank/home",
            "-o",
            "compression=lz4",
            "-o",
            "recordsize=32K",
        ],
    );
    let got = ok(&state, &["fs", "get", "tank/home", "recordsize", "--json"]);
    assert!(got.contains("\"32K\"") && got.contains("local"), "{got}");
    let mnt = t.path().join("mnt");
    let m = Mount::start(&state, "tank/home", &mnt, &[]);
    let data: Vec<u8> = (0..5_000_000u32).map(|i| (i * 7 + i / 999) as u8).collect();
    std::fs::write(mnt.join("big"), &data).unwrap();
    std::fs::create_dir(mnt.join("dir")).unwrap();
    std::fs::write(mnt.join("dir/small"), b"x").unwrap();
    std::fs::hard_link(mnt.join("dir/small"), mnt.join("hard")).unwrap();
    std::os::unix::fs::symlink("dir/small", mnt.join("sym")).unwrap();
    std::fs::set_permissions(mnt.join("big"), std::fs::Permissions::from_mode(0o600)).unwrap();
    {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(mnt.join("dir/small"))
            .unwrap();
        f.write_all(b"yz").unwrap();
        f.sync_all().unwrap();
    }
    for i in 0..300 {
        std::fs::write(mnt.join(format!("dir/n{i}")), i.to_string()).unwrap();
    }
    assert_eq!(std::fs::read_dir(mnt.join("dir")).unwrap().count(), 301);
    let st = std::fs::metadata(mnt.join("hard")).unwrap();
    assert_eq!((st.nlink(), st.len()), (2, 3));
    // SIGTERM unmounts and commits.
    assert!(Command::new("kill")
        .arg("-TERM")
        .arg(m.pid().to_string())
        .status()
        .unwrap()
        .success());
    m.wait();

    let m = Mount::start(&state, "tank/home", &mnt, &[]);
    assert!(std::fs::read(mnt.join("big")).unwrap() == data);
    assert_eq!(std::fs::read(mnt.join("hard")).unwrap(), b"xyz");
    assert_eq!(
        std::fs::read_link(mnt.join("sym")).unwrap(),
        Path::new("dir/small")
    );
    assert_eq!(
        std::fs::metadata(mnt.join("big")).unwrap().mode() & 0o7777,
        0o600
    );
    assert_eq!(
        std::fs::read_to_string(mnt.join("dir/n299")).unwrap(),
        "299"
    );
    std::fs::remove_file(mnt.join("big")).unwrap();
    ok(&state, &["unmount", mnt.to_str().unwrap()]);
    m.wait();

    // A read-only mount refuses changes.
    let m = Mount::start(&state, "tank/home", &mnt, &["-o", "ro"]);
    assert!(!mnt.join("big").exists());
    let e = std::fs::write(mnt.join("new"), b"no").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ReadOnlyFilesystem);
    ok(&state, &["unmount", mnt.to_str().unwrap()]);
    m.wait();
    let check = ok(&state, &["pool", "check", "tank"]);
    assert!(check.contains("no problems found"), "{check}");
}

/// The kernel finishes closing a FUSE file (RELEASE) asynchronously, so right after a
/// runner exits its files may still count as open for writing and a read-only remount
/// fails with EBUSY. Waits (at most 30 s) until one succeeds, then remounts read-write.
fn wait_until_remountable(mnt: &Path) {
    let remount = |opt: &str| {
        Command::new("mount")
            .args(["-o", opt])
            .arg(mnt)
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !remount("remount,ro") {
        assert!(Instant::now() < deadline, "{} stays busy", mnt.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        remount("remount,rw"),
        "remounting {} read-write",
        mnt.display()
    );
}

#[test]
fn pjdfstest_passes_on_a_fuse_mount() {
    let bin = pjdfstest_binary();
    // pjdfstest remounts with mount(8); with a mount.fuse helper installed (packages
    // fuse, fuse3), mount(8) hands FUSE remounts to it and they fail.
    let helpers: Vec<&str> = [
        "/sbin/mount.fuse",
        "/sbin/mount.fuse3",
        "/usr/sbin/mount.fuse",
        "/usr/sbin/mount.fuse3",
    ]
    .into_iter()
    .filter(|p| Path::new(p).exists())
    .collect();
    assert!(
        helpers.is_empty(),
        "{helpers:?} would take over pjdfstest's read-only remounts: remove the fuse and fuse3 packages"
    );
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // pjdfstest switches to unprivileged users: they must reach the mount point.
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = t.path().join("state");
    make_pool(t.path(), &state);
    ok(&state, &["fs", "create", "tank/pjd"]);
    let mnt = t.path().join("pjd");
    // EXDEV tests need a second file system: a small tmpfs.
    let mnt2 = t.path().join("other");
    let m = Mount::start(&state, "tank/pjd", &mnt, &["-o", "allow_other"]);
    std::fs::set_permissions(&mnt, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::create_dir_all(&mnt2).unwrap();
    let _secondary_guard = Unmount(mnt2.clone());
    let secondary = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16m", "shoal-pjd-secondary"])
        .arg(&mnt2)
        .status()
        .unwrap();
    assert!(secondary.success(), "mounting the secondary tmpfs");
    std::fs::set_permissions(&mnt2, std::fs::Permissions::from_mode(0o777)).unwrap();
    let configs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/pjdfstest");
    // Two runs: every test with remounts off, then the EROFS tests (which remount the
    // file system read-only) in a process of their own, because the kernel refuses a
    // read-only remount while the runner still holds files open from earlier tests.
    let mut skipped = Vec::new();
    for (config, pattern) in [("fuse.toml", None), ("fuse-erofs.toml", Some("erofs"))] {
        let mut cmd = Command::new(&bin);
        cmd.arg("-c")
            .arg(configs.join(config))
            .arg("-p")
            .arg(&mnt)
            .arg("-s")
            .arg(&mnt2)
            .current_dir(&mnt);
        if let Some(p) = pattern {
            wait_until_remountable(&mnt);
            cmd.arg(p);
        }
        let out = cmd.output().expect("run pjdfstest");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let failures: Vec<&str> = stdout
            .lines()
            .filter(|l| l.trim_end().ends_with("FAILED"))
            .collect();
        let summary = stdout
            .lines()
            .find(|l| l.starts_with("Summary:"))
            .unwrap_or("no summary");
        println!("pjdfstest on FUSE ({config}): {summary}");
        skipped.extend(
            stdout
                .lines()
                .filter(|l| l.trim_end().ends_with("skipped"))
                .map(|l| l.split_whitespace().next().unwrap_or("").to_string()),
        );
        assert!(
            out.status.success() && failures.is_empty() && summary.contains(" 0 failed"),
            "pjdfstest failed: {failures:?}\n{summary}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Only the EROFS tests may be skipped in the first run (they ran in the second),
    // and link_count_max, which cannot learn a FUSE file system's LINK_MAX.
    let unexpected: Vec<&String> = skipped
        .iter()
        .filter(|s| !s.contains("erofs") && s.as_str() != "link::link_count_max")
        .collect();
    assert!(unexpected.is_empty(), "unexpected skips: {unexpected:?}");
    ok(&state, &["unmount", mnt.to_str().unwrap()]);
    m.wait();
    let check = ok(&state, &["pool", "check", "tank"]);
    assert!(check.contains("no problems found"), "{check}");
}

/// Removes the `/sbin/mount.shoal` link this test made, also when it fails.
struct HelperLink(PathBuf);

impl Drop for HelperLink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Waits until nothing is mounted on `at` and the pool's lock is free (the detached
/// mount process committed and exited).
fn wait_released(state: &Path, at: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while is_mounted(at) || !shoal(state, &["pool", "status", "tank"]).status.success() {
        assert!(
            Instant::now() < deadline,
            "the mount of {} did not end",
            at.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn mount_t_shoal_and_fstab_lines_mount_through_the_helper() {
    // mount(8) runs helpers from /sbin only: the test links the binary under test there.
    let link = PathBuf::from("/sbin/mount.shoal");
    if link.symlink_metadata().is_ok() {
        panic!(
            "{} exists already; this test will not replace it",
            link.display()
        );
    }
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_shoal"), &link).unwrap();
    let _link = HelperLink(link);

    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = t.path().join("state");
    make_pool(&t.path().join("devs"), &state);
    ok(&state, &["fs", "create", "tank/home"]);
    let at = t.path().join("home");
    std::fs::create_dir_all(&at).unwrap();
    let at = at.canonicalize().unwrap();

    // An fstab line, mounted by its mount point as at boot (`mount -T` reads this file
    // instead of /etc/fstab); options mount(8) and fstab use are taken.
    let fstab = t.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "tank/home {} shoal rw,nofail,x-test.option 0 0\n",
            at.display()
        ),
    )
    .unwrap();
    let out = Command::new("mount")
        .arg("-T")
        .arg(&fstab)
        .arg(&at)
        .env("SHOAL_STATE_DIR", &state)
        .output()
        .unwrap();
    assert!(out.status.success(), "mount -T fstab: {out:?}");
    assert!(is_mounted(&at), "mount returned before the mount was there");
    std::fs::write(at.join("from-fstab"), b"mounted by mount(8)").unwrap();
    // `umount` ends the detached mount process, which commits first.
    let out = Command::new("umount").arg(&at).output().unwrap();
    assert!(out.status.success(), "umount: {out:?}");
    wait_released(&state, &at);

    // mount -t shoal, read-only: the file committed above is there, writes refused.
    let out = Command::new("mount")
        .args(["-t", "shoal", "-o", "ro", "tank/home"])
        .arg(&at)
        .env("SHOAL_STATE_DIR", &state)
        .output()
        .unwrap();
    assert!(out.status.success(), "mount -t shoal: {out:?}");
    let _unmount = Unmount(at.clone());
    assert_eq!(
        std::fs::read(at.join("from-fstab")).unwrap(),
        b"mounted by mount(8)"
    );
    assert!(std::fs::write(at.join("refused"), b"x").is_err());
    let out = Command::new("umount").arg(&at).output().unwrap();
    assert!(out.status.success(), "umount: {out:?}");
    wait_released(&state, &at);

    // Wrong requests fail with mount(8)'s failure status and say why.
    let out = Command::new("mount")
        .args(["-t", "shoal", "-o", "sync", "tank/home"])
        .arg(&at)
        .env("SHOAL_STATE_DIR", &state)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(32), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown mount option 'sync'"));
    let out = Command::new("mount")
        .args(["-t", "shoal", "tank/nope"])
        .arg(&at)
        .env("SHOAL_STATE_DIR", &state)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(32), "{out:?}");
    assert!(!is_mounted(&at));
}
