//! Local FUSE mounts the daemon serves (`POST /api/v1/mounts`), over real FUSE.
//!
//! Beside an NFSv4.1 client that holds a write delegation of a file, reading or writing
//! that file through the mount recalls the delegation (CB_RECALL on the client's back
//! channel) and waits until the client gives it back, then sees and makes what the
//! client wrote; nothing goes ahead while the client may still cache the file as its
//! own. The control mounts the same way with a daemon whose mounts ignore delegations:
//! the same harness must then see the local access go ahead under a delegation nobody
//! recalled.
//!
//! A plain `umount DIR` of such a mount ends it for the daemon too: the directory can
//! be mounted again, and the pool is no longer held. A rollback of the mounted (and
//! shared) filesystem leaves the mount in place showing the snapshot.
//!
//! Needs root and /dev/fuse (as `crates/shoal/tests/fuse.rs`).

mod common;

use bench::client::{root_credential, Fh, Nfs, Target, Version};
use common::http::Api;
use common::TestServer;
use server::mounts::{FuseHost, MountHandle, MountHost};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The control's mounts: FUSE sessions whose access never waits for a delegation.
struct IgnoringDelegations;

struct NeverInTheWay;

impl fuse::Delegations for NeverInTheWay {
    fn clear(&self, _: u64, _: fuse::LocalAccess) -> bool {
        true
    }
    fn wait_limit(&self) -> Duration {
        Duration::ZERO
    }
}

impl MountHost for IgnoringDelegations {
    fn mount(
        &self,
        datasets: Arc<fs::Datasets>,
        dataset: &str,
        dir: &Path,
        options: &[String],
        _delegations: Arc<dyn fuse::Delegations>,
    ) -> Result<Box<dyn MountHandle>, String> {
        FuseHost.mount(datasets, dataset, dir, options, Arc::new(NeverInTheWay))
    }
}

/// What the harness saw of one local access to a file an NFS client holds a write
/// delegation of.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// The client was called back while the access waited, and the access finished
    /// only after the client gave the delegation back.
    WaitedForTheRecall,
    /// The access finished with the delegation still held and never recalled.
    WentAheadUnderTheDelegation,
}

/// A daemon sharing `tp/share` over NFS and mounting it on a directory through the
/// API, its mounts run by `host`; the mount point.
fn daemon_with_mount(host: Arc<dyn MountHost>) -> (TestServer, PathBuf) {
    let server = TestServer::start_with_mounts("127.0.0.1(rw,no_root_squash,insecure)", host);
    let mnt = server.dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    mount(&api(&server), &mnt);
    (server, mnt)
}

/// The daemon's API, with its local token.
fn api(server: &TestServer) -> Api {
    Api {
        addr: server.api_addr(),
        token: server::auth::local_token(&server.state_dir()),
    }
}

/// Mounts `tp/share` on `dir` through the API.
fn mount(api: &Api, dir: &Path) {
    let (code, body) = api.post(
        "/api/v1/mounts",
        &serde_json::json!({ "dataset": "tp/share", "dir": dir.display().to_string() }).to_string(),
    );
    assert_eq!(code, 201, "mounting through the API: {body}");
}

/// An NFSv4.1 client of `server` that takes the delegations offered; its handle of
/// the share.
fn nfs_client(server: &TestServer) -> (Nfs, Fh) {
    let target = Target {
        nfs: server.addr,
        mount: server.addr,
        bind: None,
        version: Version::V41,
        delegations: true,
    };
    let nfs = Nfs::connect(&target, root_credential("deleg-client")).unwrap();
    let root = nfs.v4_mount("/tp/share").unwrap();
    (nfs, root)
}

/// The client makes file `name` holding `data` and keeps the write delegation it is
/// given; `access` then runs on the file through the mount, on a thread of its own.
/// When the client is called back first, it checks that the access still waits and
/// gives the delegation back. Returns what it saw, once the access has finished.
fn local_access_under_write_delegation(
    nfs: &Nfs,
    root: &Fh,
    mnt: &Path,
    name: &str,
    data: &[u8],
    access: impl FnOnce(PathBuf) + Send + 'static,
) -> Seen {
    let (fh, deleg) = nfs.create_with_data(root, name, data).unwrap();
    let deleg = deleg.expect("a write delegation: the file has one opener");
    let path = mnt.join(name);
    let local = std::thread::spawn(move || access(path));
    let deadline = Instant::now() + Duration::from_secs(60);
    let seen = loop {
        if nfs.conn.recalled(&fh.0) {
            let waiting = !local.is_finished();
            nfs.delegreturn(&fh, &deleg).unwrap();
            nfs.conn.returned(&fh.0);
            assert!(
                waiting,
                "the delegation was recalled, but the local access finished before it came back"
            );
            break Seen::WaitedForTheRecall;
        }
        if local.is_finished() {
            break Seen::WentAheadUnderTheDelegation;
        }
        assert!(
            Instant::now() < deadline,
            "neither a recall nor the local access came within a minute"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    local.join().expect("the local access");
    seen
}

/// Reads `name` through the mount while the client holds a write delegation of it,
/// then writes to a second file the same way; what each saw, and the second file's
/// bytes as the client reads them afterwards.
fn read_and_write_through_the_mount(host: Arc<dyn MountHost>) -> (Seen, Seen, Vec<u8>) {
    let (server, mnt) = daemon_with_mount(host);
    let (nfs, root) = nfs_client(&server);

    let written: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let expected = written.clone();
    let read =
        local_access_under_write_delegation(&nfs, &root, &mnt, "read-me", &written, move |path| {
            assert_eq!(
                std::fs::read(&path).unwrap(),
                expected,
                "the mount reads what the client wrote"
            );
        });

    let wrote = local_access_under_write_delegation(
        &nfs,
        &root,
        &mnt,
        "write-me",
        b"from the client;",
        |path| {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(b" from the mount").unwrap();
        },
    );
    let (fh, _) = nfs.lookup(&root, "write-me").unwrap().expect("write-me");
    let after = nfs.read(&fh, 0, 4096).unwrap().bytes().to_vec();
    drop(server);
    (read, wrote, after)
}

#[test]
fn local_access_waits_for_the_recall_of_a_write_delegation() {
    let (read, wrote, after) = read_and_write_through_the_mount(Arc::new(FuseHost));
    assert_eq!(read, Seen::WaitedForTheRecall, "a read through the mount");
    assert_eq!(wrote, Seen::WaitedForTheRecall, "a write through the mount");
    assert_eq!(after, b"from the client; from the mount");
}

/// The control: the same harness, with mounts that ignore delegations, sees both
/// accesses go ahead while the client still holds its write delegation.
#[test]
fn control_mounts_ignoring_delegations_go_ahead_under_them() {
    let (read, wrote, after) = read_and_write_through_the_mount(Arc::new(IgnoringDelegations));
    assert_eq!(
        read,
        Seen::WentAheadUnderTheDelegation,
        "a read through the mount"
    );
    assert_eq!(
        wrote,
        Seen::WentAheadUnderTheDelegation,
        "a write through the mount"
    );
    assert_eq!(after, b"from the client; from the mount");
}

/// After a plain `umount DIR`, the daemon lists the mount no more (once the session
/// has seen the kernel let go), mounts the same directory again, and what was written
/// before is there.
#[test]
fn a_plain_umount_ends_the_mount_for_the_daemon_too() {
    let (server, mnt) = daemon_with_mount(Arc::new(FuseHost));
    let api = api(&server);
    std::fs::write(mnt.join("kept"), b"written before the umount").unwrap();
    let status = Command::new("umount").arg(&mnt).status().unwrap();
    assert!(status.success(), "umount {}: {status}", mnt.display());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, listed) = api.get("/api/v1/mounts");
        assert_eq!(code, 200);
        if listed.as_array().is_some_and(|a| a.is_empty()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon still lists a mount that umount ended: {listed}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    mount(&api, &mnt);
    assert_eq!(
        std::fs::read(mnt.join("kept")).unwrap(),
        b"written before the umount"
    );
}

/// A rollback through the API of a filesystem the daemon has mounted (and shared):
/// the mount stays, and shows the snapshot's files once its attribute time (1 s)
/// passes; a file open across it whose object survives reads the snapshot's bytes,
/// one whose object vanished answers an error.
#[test]
fn a_mounted_filesystem_rolls_back_under_its_mount() {
    let (server, mnt) = daemon_with_mount(Arc::new(FuseHost));
    let api = api(&server);
    std::fs::write(mnt.join("kept"), b"as in the snapshot").unwrap();
    let (code, body) = api.post(
        "/api/v1/snapshots",
        &serde_json::json!({ "name": "tp/share@before" }).to_string(),
    );
    assert_eq!(code, 201, "{body}");
    std::fs::write(mnt.join("kept"), b"changed afterwards").unwrap();
    std::fs::write(mnt.join("new"), b"born afterwards").unwrap();
    let survivor = std::fs::File::open(mnt.join("kept")).unwrap();
    let vanished = std::fs::File::open(mnt.join("new")).unwrap();
    let (code, body) = api.post(
        "/api/v1/rollback",
        &serde_json::json!({ "name": "tp/share@before" }).to_string(),
    );
    assert_eq!(
        code, 204,
        "rolling back a mounted, shared filesystem: {body}"
    );
    let (_, mounts) = api.get("/api/v1/mounts");
    assert_eq!(mounts.as_array().map(Vec::len), Some(1), "{mounts}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while mnt.join("new").exists()
        || std::fs::read(mnt.join("kept")).unwrap() != b"as in the snapshot"
    {
        assert!(
            Instant::now() < deadline,
            "the mount still shows the later files"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 64];
    let n = survivor.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"as in the snapshot");
    assert!(
        vanished.read_at(&mut buf, 0).is_err(),
        "the vanished file still reads"
    );
    drop((survivor, vanished));
    let status = Command::new("umount").arg(&mnt).status().unwrap();
    assert!(status.success());
}
