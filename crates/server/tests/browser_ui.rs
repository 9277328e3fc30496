//! The browser UI end to end: headless Chromium (Debian's), driven by playwright-core
//! from `ui/tests/browser.mjs`, against a daemon that requires a login. The script
//! logs in, creates a filesystem and a share through the pages, makes a volume and an
//! iSCSI target in the iSCSI page (a bad size and destroying an exported volume are
//! refused with their reasons) and prints `ISCSI url initiator`, on which this harness
//! runs libiscsi's `iscsi-inq` against that LUN until the end while the script waits
//! for its commands in Analytics by initiator; then it prints `LOAD pool/fs`; this
//! harness then reads files of that share from two NFS clients
//! (127.0.0.1 and 127.0.0.2) while the script checks the default worksheet's charts
//! (NFS operations by type, iSCSI commands by type, the host's CPU by mode, disk
//! operations by device,
//! interface bytes and disk bytes) under that load, opens NFS operations by client,
//! drills into one client by file, opens the latency heatmap, selects its busiest
//! band and drills down to the files in it, reads a range's average and zooms the
//! worksheet into that range.
//! Screenshots of every step land in `target/artifacts/ui-screenshots/` (or
//! `$SHOAL_ARTIFACTS/ui-screenshots/`), which CI keeps.
//!
//! Needs node, `ui/node_modules` (`npm ci` in `ui/`) and `/usr/bin/chromium`:
//! `.ci/test-deps.sh` installs them. Missing, the test fails and says so.

mod common;

use common::http::client_from;
use common::TestServer;
use server::config::LoginMode;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PASSWORD: &str = "browser test password";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Reads the files of `share` from `source` until `stop`, counting reads.
fn load(
    source: &'static str,
    nfs: std::net::SocketAddr,
    share: String,
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut c = client_from(source, nfs);
        let (st, root) = c.mount(&format!("/{share}"));
        assert_eq!(st, 0, "{source} mounting /{share}");
        let mut files = Vec::new();
        for name in ["alpha", "beta"] {
            let name = format!("{name}-{}", source.rsplit('.').next().unwrap());
            let (st, fh) = c.create(&root, &name);
            assert_eq!(st, 0, "{source} creating {name}");
            assert_eq!(c.write(&fh, 0, &vec![5u8; 32768], 2).0, 0);
            files.push(fh);
        }
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) {
            let (st, data, _) = c.read(&files[i % files.len()], 0, 32768);
            assert_eq!((st, data.len()), (0, 32768), "{source} reading");
            reads.fetch_add(1, Ordering::Relaxed);
            i += 1;
            // A steady load that leaves the browser room on a small machine.
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

/// Asks the LUN at `url` (INQUIRY, with login and logout around it) with libiscsi's
/// `iscsi-inq` as `initiator` until `stop`, counting the answers.
fn inquire(
    url: String,
    initiator: String,
    stop: Arc<AtomicBool>,
    inquiries: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let out = Command::new("iscsi-inq")
                .args(["-i", &initiator, &url])
                .output()
                .expect("iscsi-inq (libiscsi-bin)");
            assert!(out.status.success(), "iscsi-inq {url}: {out:?}");
            inquiries.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(200));
        }
    })
}

#[test]
fn browser_logs_in_configures_and_drills_down_under_load() {
    let ui = repo().join("ui");
    assert!(
        ui.join("node_modules/playwright-core").exists(),
        "ui/node_modules is missing: run `npm ci` in ui/ (.ci/test-deps.sh does)"
    );
    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "/usr/bin/chromium is missing: apt-get install chromium (.ci/test-deps.sh does)"
    );
    let shots = match std::env::var_os("SHOAL_ARTIFACTS") {
        Some(d) => PathBuf::from(d),
        None => repo().join("target/artifacts"),
    }
    .join("ui-screenshots");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();

    let mut server = TestServer::start("127.0.0.0/8(rw,no_root_squash,insecure)");
    server::auth::set_password(&server.state_dir(), PASSWORD).unwrap();
    server.configure = Some(Box::new(|c| {
        c.api.login = LoginMode::Required;
        // The iSCSI page's target, on a port the kernel picks.
        c.iscsi.listen = server::config::IscsiListen::At(vec!["127.0.0.1:0".parse().unwrap()]);
    }));
    server.restart();
    let url = format!("http://{}", server.api_addr());

    let mut child = Command::new("node")
        .arg(ui.join("tests/browser.mjs"))
        .current_dir(&ui)
        .env("SHOAL_URL", &url)
        .env("SHOAL_PASSWORD", PASSWORD)
        .env("SHOAL_POOL", "tp")
        .env("SHOT_DIR", &shots)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("running node");
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let inquiries = Arc::new(AtomicU64::new(0));
    let mut loaders = Vec::new();
    let mut done = false;
    let mut nfs_loading = false;
    let started = Instant::now();
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        println!("browser: {line}");
        if let Some(share) = line.strip_prefix("LOAD ") {
            assert!(!nfs_loading, "LOAD twice");
            nfs_loading = true;
            for source in ["127.0.0.1", "127.0.0.2"] {
                loaders.push(load(
                    source,
                    server.addr,
                    share.trim().to_string(),
                    stop.clone(),
                    reads.clone(),
                ));
            }
        }
        if let Some(rest) = line.strip_prefix("ISCSI ") {
            let mut words = rest.split_whitespace();
            let (url, initiator) = (words.next().unwrap(), words.next().unwrap());
            loaders.push(inquire(
                url.to_string(),
                initiator.to_string(),
                stop.clone(),
                inquiries.clone(),
            ));
        }
        if line.trim() == "DONE" {
            done = true;
        }
    }
    let status = child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    for l in loaders {
        l.join().expect("a load client failed");
    }
    println!(
        "browser test: {:.0} s, {} NFS reads and {} iSCSI inquiries under it, screenshots \
         in {}",
        started.elapsed().as_secs_f64(),
        reads.load(Ordering::Relaxed),
        inquiries.load(Ordering::Relaxed),
        shots.display()
    );
    assert!(status.success(), "the browser test failed ({status})");
    assert!(done, "the browser test ended without DONE");
    assert!(reads.load(Ordering::Relaxed) > 0, "no load ran");
    assert!(
        inquiries.load(Ordering::Relaxed) > 0,
        "no iSCSI initiator ran"
    );
    let pngs = std::fs::read_dir(&shots)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "png"))
        })
        .count();
    assert!(pngs >= 7, "{pngs} screenshots");
}
