//! Storage configured in the browser while the appliance serves: headless Chromium
//! runs `ui/tests/storage.mjs` against `shoal serve` with a device directory of six
//! empty device files and fault injection on. The script builds a pool with a hot
//! spare on the Pools page (its layout's figures checked against `shoal plan
//! --json`, run here), a filesystem and a share, then prints `LOAD`; this harness
//! then writes files into the share over NFS without pause, while the script fails a
//! device, sees the alert and the spare take over by itself, then fails another and
//! replaces it from the page. After `DONE` every write must have succeeded and every
//! file must read back. Screenshots land in `target/artifacts/storage-screenshots/`.
//!
//! Needs node, `ui/node_modules`, `/usr/bin/chromium` and libnfs-utils
//! (`.ci/test-deps.sh`).

mod common;
use common::*;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const DEVICE_BYTES: u64 = 256 << 20;
/// Files the writer writes at most (256 KiB each: 300 MiB, well inside the pool).
const FILES: u32 = 1200;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn a_pool_built_in_the_browser_survives_a_failed_device_replaced_there() {
    let ui = repo().join("ui");
    assert!(
        ui.join("node_modules/playwright-core").exists(),
        "ui/node_modules is missing: run `npm ci` in ui/ (.ci/test-deps.sh does)"
    );
    let shots = match std::env::var_os("SHOAL_ARTIFACTS") {
        Some(d) => PathBuf::from(d),
        None => repo().join("target/artifacts"),
    }
    .join("storage-screenshots");
    let _ = std::fs::remove_dir_all(&shots);

    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let devs = t.path().join("devs");
    std::fs::create_dir_all(&devs).unwrap();
    let devs = std::fs::canonicalize(&devs).unwrap();
    for name in ["a", "b", "c", "d", "e", "f", "g", "h"] {
        std::fs::File::create(devs.join(name))
            .unwrap()
            .set_len(DEVICE_BYTES)
            .unwrap();
    }
    let state = t.path().join("state");
    let d = Served::start(
        &state,
        &t.path().join("serve.log"),
        &["--device-dir", devs.to_str().unwrap(), "--fault-injection"],
    );
    // What the page must show for the layout the script picks.
    let plan: serde_json::Value = serde_json::from_str(&ok(
        &state,
        &[
            "plan",
            "2x2mirror",
            "--disk-mbps",
            "120",
            "--disk-iops",
            "90",
            "--disk-size",
            &DEVICE_BYTES.to_string(),
            "--json",
        ],
    ))
    .unwrap();
    let expect = serde_json::json!({"mbps": 120, "iops": 90, "plan": plan});

    let mut child = Command::new("node")
        .arg(ui.join("tests/storage.mjs"))
        .current_dir(&ui)
        .env("SHOAL_URL", format!("http://127.0.0.1:{}", d.api_port))
        .env("SHOT_DIR", &shots)
        .env("DEVICE_DIR", &devs)
        .env("EXPECT_PLAN", expect.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("running node");
    let stop = Arc::new(AtomicBool::new(false));
    let mut writer = None;
    let mut done = false;
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        println!("browser: {line}");
        if let Some(share) = line.strip_prefix("LOAD ") {
            let export = format!("/{}", share.trim());
            let (port, scratch, stop) = (d.nfs_port, t.path().to_path_buf(), stop.clone());
            // Writes without pause until told to stop; nfs_put_at fails the thread on
            // any error the client sees.
            // A file every 40 ms or so, at most FILES (the pool must not fill up).
            writer = Some(std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) && i < FILES {
                    nfs_put_at(
                        port,
                        &scratch,
                        &export,
                        &format!("f{i}"),
                        &pattern(256 << 10, i),
                    );
                    i += 1;
                    std::thread::sleep(std::time::Duration::from_millis(30));
                }
                (export, i)
            }));
        }
        if line.trim() == "DONE" {
            done = true;
        }
    }
    let status = child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    let (export, written) = writer
        .expect("the script never asked for the load")
        .join()
        .expect("an NFS write failed");
    assert!(status.success(), "the browser test failed ({status})");
    assert!(done, "the browser test ended without DONE");
    assert!(written > 10, "only {written} files were written");
    for i in 0..written {
        assert_eq!(
            nfs_get(&d, &export, &format!("f{i}")).as_deref(),
            Some(&pattern(256 << 10, i)[..]),
            "file f{i} of {written}"
        );
    }
    println!("{written} files written across the failures and the resilvers, all read back");
    let check: serde_json::Value =
        serde_json::from_str(&ok(&state, &["pool", "check", "vault", "--json"])).unwrap();
    assert_eq!(check["problems"].as_array().unwrap().len(), 0, "{check}");
}
