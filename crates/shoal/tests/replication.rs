//! Replication between two daemons on loopback, each with its own state directory and
//! pool: a filesystem with files, directories, hard links, symlinks, extended
//! attributes and holes is replicated in full and then incrementally over HTTPS, and
//! the replica is compared with the source by content and metadata through real FUSE
//! mounts; a wrong credential is refused; kill -9 of either side in the middle of a
//! transfer, then the next run, leaves them equal; failover: the replica promoted,
//! written over NFS, and replicated back to the demoted old primary. A volume written
//! over iSCSI is replicated in full and incrementally and reads byte for byte the same
//! through an iSCSI target on the replica, where it is write-protected. Holds and
//! schedules: `replication_holds.rs`; shared helpers: `common/replication.rs`.
//!
//! Needs root (FUSE mounts), /dev/fuse, openssl and libnfs-utils
//! (`.ci/test-deps.sh`).

mod common;
use common::replication::*;
use common::*;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// An extended attribute, set through the mount.
fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: both strings are NUL-terminated and live across the call; `value` is a
    // valid slice whose length is passed with it; no pointer is kept by the kernel.
    let r = unsafe {
        libc::lsetxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(r, 0, "setxattr {name} on {}", path.display());
}

/// Every extended attribute of `path` (not following a symlink), by name.
fn xattrs(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 4096];
    // SAFETY: `p` is NUL-terminated; the buffer is valid for `names.len()` bytes and
    // the kernel writes at most that many.
    let n = unsafe { libc::llistxattr(p.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "listxattr {}", path.display());
    let mut out = BTreeMap::new();
    for name in names[..n as usize]
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
    {
        let cname = CString::new(name).unwrap();
        let mut value = vec![0u8; 65536];
        // SAFETY: as above, for the attribute name and a 64 KiB value buffer.
        let len = unsafe {
            libc::lgetxattr(
                p.as_ptr(),
                cname.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        assert!(len >= 0, "getxattr on {}", path.display());
        value.truncate(len as usize);
        out.insert(String::from_utf8_lossy(name).into_owned(), value);
    }
    out
}

/// The first tree: every kind of object a replica must carry.
fn populate(root: &Path) {
    std::fs::create_dir_all(root.join("dir/sub")).unwrap();
    std::fs::write(root.join("dir/a.bin"), pattern(6_000_000, 1)).unwrap();
    std::fs::write(root.join("dir/sub/small.txt"), b"small file\n").unwrap();
    std::fs::write(root.join("text"), "compressible ".repeat(50_000)).unwrap();
    // Holes: data at 0, at 5 MiB and at the end of a 20 MiB file.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(root.join("sparse")).unwrap();
        f.write_all_at(&pattern(4096, 2), 0).unwrap();
        f.write_all_at(&pattern(70_000, 3), 5 << 20).unwrap();
        f.set_len(20 << 20).unwrap();
    }
    std::fs::hard_link(root.join("dir/a.bin"), root.join("hardlink")).unwrap();
    std::os::unix::fs::symlink("dir/sub/small.txt", root.join("symlink")).unwrap();
    std::os::unix::fs::symlink("/nowhere/at/all", root.join("dangling")).unwrap();
    set_xattr(&root.join("text"), "user.colour", b"blue");
    set_xattr(&root.join("dir"), "user.empty", b"");
    std::fs::set_permissions(
        root.join("dir/sub/small.txt"),
        PermissionsExt::from_mode(0o640),
    )
    .unwrap();
}

/// Changes for an incremental: rewrites, a removal, a rename, a truncate, new files,
/// an xattr changed, a hard link dropped.
fn change(root: &Path, round: u32) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(root.join("dir/a.bin"))
        .unwrap();
    f.write_all_at(&pattern(200_000, 10 + round), 300_000)
        .unwrap();
    drop(f);
    let _ = std::fs::remove_file(root.join("hardlink"));
    let _ = std::fs::remove_file(root.join("dir/sub/small.txt"));
    std::fs::write(
        root.join(format!("new-{round}")),
        pattern(900_000, 20 + round),
    )
    .unwrap();
    std::fs::create_dir_all(root.join(format!("d{round}/e"))).unwrap();
    std::fs::write(root.join(format!("d{round}/e/f")), b"deep").unwrap();
    let from = if round == 1 {
        root.join("text")
    } else {
        root.join(format!("moved-{}", round - 1))
    };
    std::fs::rename(from, root.join(format!("moved-{round}"))).unwrap();
    set_xattr(
        &root.join(format!("moved-{round}")),
        "user.colour",
        format!("round {round}").as_bytes(),
    );
    std::fs::OpenOptions::new()
        .write(true)
        .open(root.join("sparse"))
        .unwrap()
        .set_len((12 + round as u64) << 20)
        .unwrap();
}

/// What must be equal on a replica, for every path below `root`.
#[derive(Debug, PartialEq)]
struct Entry {
    kind: &'static str,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    nlink: u64,
    ino: u64,
    mtime: (i64, i64),
    /// blake3 of the content, or the symlink's target.
    content: String,
    xattrs: BTreeMap<String, Vec<u8>>,
}

fn tree(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if rel.starts_with(".shoal") {
                continue;
            }
            let m = std::fs::symlink_metadata(&path).unwrap();
            let (kind, content) = if m.is_dir() {
                todo.push(path.clone());
                ("dir", String::new())
            } else if m.file_type().is_symlink() {
                let t = std::fs::read_link(&path).unwrap();
                ("symlink", t.to_string_lossy().into_owned())
            } else {
                let bytes = std::fs::read(&path).unwrap();
                ("file", blake3::hash(&bytes).to_hex().to_string())
            };
            out.insert(
                rel,
                Entry {
                    kind,
                    mode: m.mode(),
                    uid: m.uid(),
                    gid: m.gid(),
                    size: m.size(),
                    nlink: m.nlink(),
                    ino: m.ino(),
                    mtime: (m.mtime(), m.mtime_nsec()),
                    content,
                    xattrs: xattrs(&path),
                },
            );
        }
    }
    out
}

/// Runs `f` on filesystem `fs` of `state` mounted through FUSE (no daemon may run).
fn with_mount<T>(state: &Path, fs: &str, f: impl FnOnce(&Path) -> T) -> T {
    let at = state.parent().unwrap().join("mnt");
    let m = Mount::start(state, fs, &at, &[]);
    let out = f(&at);
    ok(state, &["unmount", at.to_str().unwrap()]);
    m.wait();
    out
}

/// The tree of filesystem `fs` of `state` through a FUSE mount (no daemon may run), or
/// of its snapshot `snapshot` (under `.shoal/snapshot/`).
fn tree_of(state: &Path, fs: &str, snapshot: Option<&str>) -> BTreeMap<PathBuf, Entry> {
    with_mount(state, fs, |root| match snapshot {
        None => tree(root),
        Some(s) => tree(&root.join(".shoal/snapshot").join(s)),
    })
}

fn assert_same(a: &BTreeMap<PathBuf, Entry>, b: &BTreeMap<PathBuf, Entry>) {
    assert!(a.len() > 5, "the source holds the tree: {a:?}");
    for (path, ea) in a {
        assert_eq!(Some(ea), b.get(path), "{} differs", path.display());
    }
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
}

/// Adds target `name` (`replica` over HTTPS with `cert`) on `primary` with `credential`.
fn add_target(primary: &Path, name: &str, replica: &Served, credential: &str, cert: &Path) {
    ok(
        primary,
        &[
            "replication",
            "target",
            "add",
            name,
            "--address",
            &format!("localhost:{}", replica.api_port),
            "--credential",
            credential,
            "--certificate",
            cert.to_str().unwrap(),
        ],
    );
}

fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl (.ci/test-deps.sh installs it)");
    assert!(made.status.success(), "{made:?}");
    (cert, key)
}

#[test]
fn full_then_incremental_over_https_equal_by_content_and_metadata() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let p = appliance(&t.path().join("primary"), Some("tank/data"));
    let r = appliance(&t.path().join("replica"), None);
    with_mount(&p, "tank/data", populate);
    ok(&p, &["snapshot", "create", "tank/data@user1"]);

    let (cert, key) = self_signed(t.path());
    let tls = [
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    let mut primary = Served::start(&p, &t.path().join("p.log"), &[]);
    let mut replica = Served::start(&r, &t.path().join("r.log"), &tls);
    pair(&p, &replica, "vault", Some(&cert));
    let id = add_action(&p, "tank/data", "vault", "tank/copy", &[]);

    let first = run(&p, &id);
    assert_eq!(first["ok"], true, "{first}");
    assert!(first["base"].is_null(), "a full send first: {first}");
    assert_eq!(first["streams"], 2, "user1 and the replication snapshot");
    assert!(first["bytes"].as_u64().unwrap() > 6_000_000, "{first}");

    // A wrong credential is refused and leaves nothing behind.
    add_target(&p, "impostor", &replica, "0123456789abcdef", &cert);
    let bad = add_action(&p, "tank/data", "impostor", "tank/other", &[]);
    let out = shoal(&p, &["replication", "run", &bad, "--json"]);
    assert!(!out.status.success());
    let refused: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        refused["error"].as_str().unwrap().contains("HTTP 401"),
        "{refused}"
    );
    // A certificate other than the target's is refused too.
    let (other_cert, _) = self_signed(&t.path().join("other"));
    add_target(&p, "wrongcert", &replica, "0123456789abcdef", &other_cert);
    let wrong = add_action(&p, "tank/data", "wrongcert", "tank/other", &[]);
    assert!(!shoal(&p, &["replication", "run", &wrong]).status.success());
    let st = json(&r, &["fs", "list", "--json"]).to_string();
    assert!(!st.contains("tank/other"), "{st}");
    // Failed runs leave no snapshot on the source.
    assert_eq!(snapshots(&p, "tank/data").len(), 2);

    // Incremental: changes made with the daemon stopped, through a mount.
    primary.stop();
    with_mount(&p, "tank/data", |root| change(root, 1));
    ok(&p, &["snapshot", "create", "tank/data@user2"]);
    primary.restart();
    let second = run(&p, &id);
    assert_eq!(second["ok"], true, "{second}");
    assert_eq!(
        second["base"].as_str().unwrap(),
        format!("tank/data@{}", snapshots(&p, "tank/data")[1]),
        "{second}"
    );
    assert_eq!(
        second["streams"], 2,
        "user2 and the new replication snapshot"
    );
    assert!(
        second["bytes"].as_u64().unwrap() < first["bytes"].as_u64().unwrap() / 3,
        "only the changes travel: {first} then {second}"
    );
    let status = json(&p, &["replication", "status", "--json"]);
    let action = &status["actions"][0];
    assert_eq!(action["history"].as_array().unwrap().len(), 2, "{status}");
    assert!(action["lag_seconds"].as_u64().is_some(), "{status}");
    assert!(
        !status.to_string().contains(&"0123456789abcdef".to_string()),
        "credentials are never shown"
    );

    primary.stop();
    replica.stop();
    let replica_snaps = snapshots(&r, "tank/copy");
    assert!(
        replica_snaps.contains(&"user1".to_string())
            && replica_snaps.contains(&"user2".to_string()),
        "{replica_snaps:?}"
    );
    let source = tree_of(&p, "tank/data", None);
    assert_same(&source, &tree_of(&r, "tank/copy", None));
    // Every snapshot arrived whole, not only the newest.
    let source_user1 = tree_of(&p, "tank/data", Some("user1"));
    assert_same(&source_user1, &tree_of(&r, "tank/copy", Some("user1")));
    // Control: the comparison sees the changes between the two.
    let differing = source
        .iter()
        .filter(|(path, e)| source_user1.get(*path) != Some(e))
        .count();
    assert!(
        differing >= 5,
        "{differing} paths changed between user1 and now"
    );
    // The replica is read-only until promoted.
    let props = ok(&r, &["fs", "get", "tank/copy", "readonly"]);
    assert!(props.contains(" on"), "{props}");
}

/// `shoal replication run ID` started in the background on `primary`; returns once
/// `reached` holds. The caller waits for it (a failing test's exit reaps it
/// otherwise).
#[allow(clippy::zombie_processes)]
fn run_in_background(
    primary: &Path,
    id: &str,
    mut reached: impl FnMut() -> bool,
) -> std::process::Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["replication", "run", id, "--json"])
        .env("SHOAL_STATE_DIR", primary)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !reached() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the run never got where the test waits for");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child
}

/// The point a cut receive into `fs` reached, as the replica `state` records it.
fn resume_point(state: &Path, fs: &str) -> Option<serde_json::Value> {
    let st = json(state, &["replication", "status", "--json"]);
    let p = &st["incoming"][fs]["resume"];
    p.is_object().then(|| p.clone())
}

/// Bytes of `shoal send ARGS` through the daemon of `state`.
fn stream_size(state: &Path, args: &[&str]) -> usize {
    let mut all = vec!["send"];
    all.extend_from_slice(args);
    let out = shoal(state, &all);
    assert!(out.status.success(), "{out:?}");
    out.stdout.len()
}

#[test]
fn a_transfer_cut_by_kill9_on_either_side_resumes_and_ends_equal() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let p = appliance(&t.path().join("primary"), Some("tank/data"));
    let r = appliance(&t.path().join("replica"), None);
    with_mount(&p, "tank/data", |root| {
        populate(root);
        std::fs::write(root.join("big"), pattern(12_000_000, 7)).unwrap();
    });
    let mut primary = Served::start(&p, &t.path().join("p.log"), &[]);
    let mut replica = Served::start(&r, &t.path().join("r.log"), &[]);
    pair(&p, &replica, "vault", None);
    // 4 MB/s: an 18 MB stream takes seconds, long enough to be cut.
    let id = add_action(
        &p,
        "tank/data",
        "vault",
        "tank/copy",
        &["--bandwidth", "4M"],
    );

    // The replica dies in the middle of the full receive, once it has committed part.
    let cli = run_in_background(&p, &id, || resume_point(&r, "tank/copy").is_some());
    replica.kill9();
    let out = cli.wait_with_output().unwrap();
    assert!(!out.status.success(), "the run reports the lost target");
    replica.restart();
    let point = resume_point(&r, "tank/copy").expect("the point reached survives the crash");
    assert!(snapshots(&r, "tank/copy").is_empty(), "no snapshot yet");
    let status = json(&p, &["replication", "status", "--json"]);
    let cut = status["actions"][0]["history"][0]["snapshot"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        snapshots(&p, "tank/data").contains(&cut.split_once('@').unwrap().1.to_string()),
        "a run cut after bytes left keeps its snapshot for the resume"
    );
    let full = stream_size(&p, &[&cut]);
    let first = run(&p, &id);
    assert_eq!(first["ok"], true, "{first}");
    assert_eq!(first["base"].as_str(), Some(cut.as_str()), "{first}");
    assert_eq!(
        first["streams"], 2,
        "the rest of the cut stream, then the new snapshot"
    );
    assert!(
        (first["bytes"].as_u64().unwrap() as usize) + 3_000_000 < full,
        "what arrived before {point} is not sent again: {first}, a full stream is {full} bytes"
    );
    assert!(resume_point(&r, "tank/copy").is_none());

    // The primary dies in the middle of an incremental.
    primary.stop();
    with_mount(&p, "tank/data", |root| {
        change(root, 1);
        std::fs::write(root.join("big2"), pattern(12_000_000, 8)).unwrap();
    });
    primary.restart();
    let before = snapshots(&r, "tank/copy");
    let cli = run_in_background(&p, &id, || resume_point(&r, "tank/copy").is_some());
    primary.kill9();
    let _ = cli.wait_with_output();
    primary.restart();
    assert_eq!(
        snapshots(&r, "tank/copy"),
        before,
        "a cut stream adds no snapshot"
    );
    let cut2 = snapshots(&p, "tank/data")
        .last()
        .map(|s| format!("tank/data@{s}"))
        .unwrap();
    let incremental = stream_size(&p, &[&cut2, "--from", first["snapshot"].as_str().unwrap()]);
    let second = run(&p, &id);
    assert_eq!(second["ok"], true, "{second}");
    assert_eq!(second["base"].as_str(), Some(cut2.as_str()), "{second}");
    assert!(
        (second["bytes"].as_u64().unwrap() as usize) + 3_000_000 < incremental,
        "{second}: the incremental is {incremental} bytes"
    );

    primary.stop();
    replica.stop();
    assert_same(
        &tree_of(&p, "tank/data", None),
        &tree_of(&r, "tank/copy", None),
    );
    // Every snapshot of the source that the replica keeps is whole there.
    for snap in snapshots(&r, "tank/copy") {
        assert_same(
            &tree_of(&p, "tank/data", Some(&snap)),
            &tree_of(&r, "tank/copy", Some(&snap)),
        );
    }
}

/// The handle of `file` in `export` of `d`, over NFSv3 or NFSv4.1.
fn handle_of(
    d: &Served,
    version: bench::client::Version,
    export: &str,
    file: &str,
) -> bench::client::Fh {
    use bench::client::*;
    let target = Target {
        nfs: d.nfs(),
        mount: d.nfs(),
        bind: None,
        version,
        delegations: false,
    };
    let root = mount(&target, export, root_credential("test")).unwrap();
    let nfs = Nfs::connect(&target, root_credential("test")).unwrap();
    nfs.lookup(&root, file)
        .unwrap()
        .expect("the file is there")
        .0
}

/// Reads `len` bytes through handle `fh` at `d` (a handle another server gave).
fn read_by_handle(
    d: &Served,
    version: bench::client::Version,
    fh: &bench::client::Fh,
    len: u32,
) -> anyhow::Result<Vec<u8>> {
    use bench::client::*;
    let target = Target {
        nfs: d.nfs(),
        mount: d.nfs(),
        bind: None,
        version,
        delegations: false,
    };
    let nfs = Nfs::connect(&target, root_credential("test"))?;
    Ok(nfs.read(fh, 0, len)?.bytes().to_vec())
}

#[test]
fn failover_promote_write_and_replicate_back_to_the_old_primary() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let p = appliance(&t.path().join("primary"), Some("tank/data"));
    let r = appliance(&t.path().join("replica"), None);
    with_mount(&p, "tank/data", populate);
    let mut primary = Served::start(&p, &t.path().join("p.log"), &[]);
    let mut replica = Served::start(&r, &t.path().join("r.log"), &[]);
    let rw = "127.0.0.1(rw,no_root_squash,insecure)";
    ok(&p, &["share", "set", "tank/data", rw]);
    pair(&p, &replica, "vault", None);
    let id = add_action(&p, "tank/data", "vault", "tank/copy", &[]);
    assert_eq!(run(&p, &id)["ok"], true);

    // A replica shared read-only keeps being served across the next receive.
    ok(
        &r,
        &[
            "share",
            "set",
            "tank/copy",
            "127.0.0.1(ro,no_root_squash,insecure)",
        ],
    );
    nfs_put(&primary, "/tank/data", "second", b"second run");
    assert_eq!(run(&p, &id)["ok"], true);
    assert_eq!(
        nfs_get(&replica, "/tank/copy", "second").as_deref(),
        Some(&b"second run"[..])
    );
    // The replica serves the primary's file handles: a client's handles stay good
    // when it turns to the replica.
    use bench::client::Version;
    let handles: Vec<(Version, bench::client::Fh)> = [Version::V3, Version::V41]
        .into_iter()
        .map(|v| (v, handle_of(&primary, v, "/tank/data", "second")))
        .collect();
    for (v, fh) in &handles {
        assert_eq!(
            read_by_handle(&replica, *v, fh, 100).unwrap(),
            b"second run",
            "NFS {v:?}"
        );
    }

    // Written on the primary after its last replication, then the primary is lost.
    nfs_put(&primary, "/tank/data", "late", b"never replicated");
    primary.kill9();

    // Failover: the replica becomes writable and takes writes.
    let refused = shoal(&r, &["replication", "demote", "tank/nothere"]);
    assert!(!refused.status.success());
    ok(&r, &["replication", "promote", "tank/copy"]);
    ok(&r, &["share", "set", "tank/copy", rw]);
    nfs_put(
        &replica,
        "/tank/copy",
        "on-replica",
        b"written after the failover",
    );
    // A client goes on through the handles it had from the primary, writing too.
    {
        use bench::client::*;
        let target = Target {
            nfs: replica.nfs(),
            mount: replica.nfs(),
            bind: None,
            version: Version::V3,
            delegations: false,
        };
        let nfs = Nfs::connect(&target, root_credential("test")).unwrap();
        nfs.write(&handles[0].1, 0, b"SECOND", Stable::FileSync)
            .unwrap();
    }
    for (v, fh) in &handles {
        assert_eq!(
            read_by_handle(&replica, *v, fh, 100).unwrap(),
            b"SECOND run"
        );
    }

    // The old primary returns; it becomes the replica of its replica.
    primary.restart();
    assert_eq!(
        nfs_get(&primary, "/tank/data", "late").as_deref(),
        Some(&b"never replicated"[..]),
        "the old primary kept its last write"
    );
    let busy = shoal(&p, &["replication", "demote", "tank/data"]);
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("remove its actions first"),
        "{busy:?}"
    );
    ok(&p, &["replication", "remove", &id]);
    ok(&p, &["replication", "demote", "tank/data"]);
    pair(&r, &primary, "back", None);
    let back = add_action(&r, "tank/copy", "back", "tank/data", &[]);
    let reverse = run(&r, &back);
    assert_eq!(reverse["ok"], true, "{reverse}");
    assert!(
        reverse["base"]
            .as_str()
            .unwrap()
            .starts_with("tank/copy@repl-"),
        "only what changed since the last snapshot both hold: {reverse}"
    );
    assert_eq!(
        nfs_get(&primary, "/tank/data", "on-replica").as_deref(),
        Some(&b"written after the failover"[..])
    );
    assert_eq!(
        nfs_get(&primary, "/tank/data", "late"),
        None,
        "what the lost primary never replicated is discarded, as zfs receive -F does"
    );

    primary.stop();
    replica.stop();
    assert_same(
        &tree_of(&r, "tank/copy", None),
        &tree_of(&p, "tank/data", None),
    );
}

/// The total of analytics dataset `name` over the last two minutes at `d`, once the
/// collector has sealed the seconds up to now.
fn analytics_total(d: &Served, name: &str) -> u64 {
    std::thread::sleep(std::time::Duration::from_secs(3));
    let (code, body) = d.get(&format!(
        "/api/v1/analytics/data?name={}&seconds=120",
        name.replace('[', "%5B").replace(']', "%5D")
    ));
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["summary"]["total"].as_u64().unwrap()
}

#[test]
fn scheduled_runs_counted_in_analytics_on_both_sides() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let p = appliance(&t.path().join("primary"), Some("tank/data"));
    let r = appliance(&t.path().join("replica"), None);
    with_mount(&p, "tank/data", populate);
    let primary = Served::start(&p, &t.path().join("p.log"), &[]);
    let replica = Served::start(&r, &t.path().join("r.log"), &[]);
    for d in [&primary, &replica] {
        let (code, body) = d.post(
            "/api/v1/analytics/datasets",
            &serde_json::json!({"name": "replication.bytes[op]"}),
        );
        assert_eq!(code, 201, "{body}");
    }
    // A dataset counts from the second after it was enabled.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    pair(&p, &replica, "vault", None);
    let id = add_action(
        &p,
        "tank/data",
        "vault",
        "tank/copy",
        &["--every", "2", "--keep-local", "2", "--keep-remote", "2"],
    );
    // Nobody runs it: the schedule does, a run every two seconds when something
    // changed (a scheduled run with nothing to send is skipped).
    share_to_loopback(&p, "tank/data");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut changes = 0;
    let runs = loop {
        changes += 1;
        nfs_put(&primary, "/tank/data", &format!("change{changes}"), b"more");
        let st = json(&p, &["replication", "status", "--json"]);
        let h = st["actions"][0]["history"].as_array().unwrap().clone();
        if h.len() >= 3 && st["actions"][0]["running"].is_null() {
            let out = shoal(&p, &["replication", "remove", &id]);
            if out.status.success() {
                break h;
            }
        }
        assert!(std::time::Instant::now() < deadline, "{st}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(runs.iter().all(|r| r["ok"] == true), "{runs:?}");
    let sent: u64 = runs.iter().map(|r| r["bytes"].as_u64().unwrap()).sum();
    assert_eq!(analytics_total(&primary, "replication.bytes[op]"), sent);
    assert_eq!(analytics_total(&replica, "replication.bytes[op]"), sent);
    // Pruned to two replication snapshots on each side.
    assert_eq!(snapshots(&p, "tank/data").len(), 2);
    assert_eq!(snapshots(&r, "tank/copy").len(), 2);
}

/// Alerts of `kind` about `object` in the primary's list (acknowledged ones too).
fn alerts_of(state: &Path, kind: &str, object: &str) -> Vec<serde_json::Value> {
    json(state, &["alerts", "--all", "--json"])["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == kind && a["object"] == object)
        .cloned()
        .collect()
}

#[test]
fn a_target_behind_its_alert_lag_is_alerted_then_caught_up() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let p = appliance(&t.path().join("primary"), Some("tank/data"));
    ok(&p, &["fs", "create", "tank/quiet"]);
    let r = appliance(&t.path().join("replica"), None);
    let _primary = Served::start(&p, &t.path().join("p.log"), &[]);
    let mut replica = Served::start(&r, &t.path().join("r.log"), &[]);
    pair(&p, &replica, "vault", None);
    // The target goes away: every run fails and the lag grows from the first run.
    replica.kill9();
    let behind = add_action(
        &p,
        "tank/data",
        "vault",
        "tank/data",
        &["--every", "1", "--alert-lag", "3"],
    );
    // The control: the same schedule with lag alerts off.
    let quiet = add_action(
        &p,
        "tank/quiet",
        "vault",
        "tank/quiet",
        &["--every", "1", "--alert-lag", "0"],
    );
    let (behind_obj, quiet_obj) = (
        format!("replication {behind}"),
        format!("replication {quiet}"),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let lagging = loop {
        let a = alerts_of(&p, "replication.lagging", &behind_obj);
        if !a.is_empty() {
            break a;
        }
        assert!(std::time::Instant::now() < deadline, "no lag alert");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(lagging.len(), 1, "{lagging:?}");
    assert_eq!(lagging[0]["severity"], "warning");
    let text = lagging[0]["message"].as_str().unwrap();
    assert!(text.contains("alert past 3 s"), "{text}");
    // Alerted once, however long it stays behind; never for the action with alerts off.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(alerts_of(&p, "replication.lagging", &behind_obj).len(), 1);
    assert!(alerts_of(&p, "replication.lagging", &quiet_obj).is_empty());
    assert!(
        !alerts_of(&p, "replication.failed", &quiet_obj).is_empty(),
        "the control's runs fail too"
    );

    // The target comes back: the next run succeeds and the lag is under the limit.
    replica.restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while alerts_of(&p, "replication.caught_up", &behind_obj).is_empty() {
        assert!(std::time::Instant::now() < deadline, "never caught up");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(alerts_of(&p, "replication.lagging", &behind_obj).len(), 1);
}

#[test]
fn continuous_replication_runs_only_when_something_changed() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (p, r, primary, _replica) = primary_and_replica(t.path());
    add_action(&p, "tank/data", "vault", "tank/copy", &["--continuous"]);
    let settled = |want: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let st = json(&p, &["replication", "status", "--json"]);
            let a = &st["actions"][0];
            let h = a["history"].as_array().unwrap().clone();
            if h.len() >= want && a["running"].is_null() {
                assert!(h.iter().all(|r| r["ok"] == true), "{h:?}");
                return (h.len(), a["lag_seconds"].as_u64().unwrap());
            }
            assert!(std::time::Instant::now() < deadline, "{st}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let (runs, _) = settled(1);
    let snaps = snapshots(&p, "tank/data");
    // Idle: checked every half second, but no snapshot, no stream, no history.
    std::thread::sleep(std::time::Duration::from_secs(4));
    let (idle_runs, lag) = settled(runs);
    assert_eq!(idle_runs, runs, "runs while nothing changed");
    assert_eq!(snapshots(&p, "tank/data"), snaps);
    assert!(lag <= 2, "an idle target is current: lag {lag} s");
    // A change is replicated by the next check.
    nfs_put(&primary, "/tank/data", "new", b"changed");
    settled(runs + 1);
    assert!(snapshots(&p, "tank/data").len() > snaps.len());
    assert!(snapshots(&r, "tank/copy").contains(snapshots(&p, "tank/data").last().unwrap()));
}

/// The bytes of a volume of `blocks` 512-byte blocks through LUN 0 of `target` at
/// `port`, read in 1 MiB commands.
fn read_lun(port: u16, target: &str, blocks: u64) -> Vec<u8> {
    let mut c = lun_session(port, target);
    assert_eq!(c.capacity(0).unwrap(), (blocks, 512));
    let mut out = Vec::with_capacity(blocks as usize * 512);
    for lba in (0..blocks).step_by(2048) {
        let n = (blocks - lba).min(2048) as u32;
        out.extend(c.read(0, lba, n, 512).unwrap());
    }
    c.logout().unwrap();
    out
}

fn lun_session(port: u16, target: &str) -> iscsi::initiator::Initiator {
    iscsi::initiator::Initiator::login(
        format!("127.0.0.1:{port}").parse().unwrap(),
        &iscsi::initiator::LoginSpec {
            initiator: "iqn.2026-12.org.shoal:replication-test".into(),
            target: Some(target.into()),
            chap: None,
            mutual_chap: None,
        },
    )
    .unwrap()
}

/// Bytes no two places of a volume share: each 512-byte block names itself and `round`.
fn block_pattern(lba: u64, blocks: u64, round: u8) -> Vec<u8> {
    let mut v = Vec::with_capacity(blocks as usize * 512);
    for b in lba..lba + blocks {
        let seed = blake3::hash(&[&b.to_le_bytes()[..], &[round]].concat());
        for _ in 0..16 {
            v.extend_from_slice(seed.as_bytes());
        }
    }
    v
}

#[test]
fn a_volume_replicates_byte_for_byte_and_is_write_protected_on_the_replica() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let p = appliance(&t.path().join("primary"), None);
    let r = appliance(&t.path().join("replica"), None);
    ok(&p, &["volume", "create", "tank/vm", "--size", "16M"]);
    const BLOCKS: u64 = 16 << 11;
    let [pport, rport] = free_ports::<2>();
    let iscsi_at = |port: u16| format!("127.0.0.1:{port}");
    let mut primary = Served::start(&p, &t.path().join("p.log"), &["--iscsi", &iscsi_at(pport)]);
    let mut replica = Served::start(&r, &t.path().join("r.log"), &["--iscsi", &iscsi_at(rport)]);
    let source_iqn = "iqn.2026-12.org.shoal:vm";
    ok(
        &p,
        &[
            "iscsi",
            "target",
            "create",
            source_iqn,
            "--lun",
            "0=tank/vm",
        ],
    );

    // Written over iSCSI: the first 4 MiB and 1 MiB near the end; the rest is holes.
    let mut c = lun_session(pport, source_iqn);
    c.write(0, 0, &block_pattern(0, 8192, 1), 512).unwrap();
    c.write(
        0,
        BLOCKS - 4096,
        &block_pattern(BLOCKS - 4096, 2048, 1),
        512,
    )
    .unwrap();
    c.flush(0).unwrap();
    c.logout().unwrap();
    pair(&p, &replica, "vault", None);
    let id = add_action(&p, "tank/vm", "vault", "tank/vm-copy", &[]);
    let first = run(&p, &id);
    assert_eq!(first["ok"], true, "{first}");
    let after_first = read_lun(pport, source_iqn, BLOCKS);

    // An incremental carries only what changed: 1 MiB in the middle.
    let mut c = lun_session(pport, source_iqn);
    c.write(0, 12288, &block_pattern(12288, 2048, 2), 512)
        .unwrap();
    c.logout().unwrap();
    let second = run(&p, &id);
    assert_eq!(second["ok"], true, "{second}");
    assert!(!second["base"].is_null(), "an incremental: {second}");
    assert!(
        second["bytes"].as_u64().unwrap() < first["bytes"].as_u64().unwrap() / 2,
        "only the changes travel: {first} then {second}"
    );
    let source = read_lun(pport, source_iqn, BLOCKS);
    // Control: the comparison below sees a change of this size.
    assert_ne!(source, after_first, "the second write changed the volume");
    assert_eq!(&source[..4 << 20], &block_pattern(0, 8192, 1)[..]);

    // The replica, served by its own target, reads the same bytes and refuses writes.
    let replica_iqn = "iqn.2026-12.org.shoal:vm-copy";
    ok(
        &replica.state,
        &[
            "iscsi",
            "target",
            "create",
            replica_iqn,
            "--lun",
            "0=tank/vm-copy",
        ],
    );
    let copy = read_lun(rport, replica_iqn, BLOCKS);
    assert!(
        copy == source,
        "the replica's bytes differ from the source's"
    );
    let mut c = lun_session(rport, replica_iqn);
    let mut write16 = [0u8; 16];
    write16[0] = 0x8A;
    write16[13] = 1;
    let refused = c
        .command_past_attentions(0, &write16, &[0xEE; 512], 0)
        .unwrap();
    assert_eq!(refused.status, 2, "a write to the replica: CHECK CONDITION");
    assert_eq!(
        (refused.sense[2] & 0x0F, refused.sense[12]),
        (0x07, 0x27),
        "DATA PROTECT, WRITE PROTECTED"
    );
    c.logout().unwrap();
    primary.stop();
    replica.stop();
}
