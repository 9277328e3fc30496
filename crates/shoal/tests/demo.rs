//! `shoal demo` end to end: from an empty folder it makes a pool, a filesystem and a
//! share, serves them, and prints mount instructions that work (the libnfs line is
//! used as printed); Ctrl-C commits; a second run reuses the pool and its data.

mod common;
use common::signal;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Starts the demo in `dir`; returns it with the lines it printed up to "serving".
fn start_demo(dir: &Path) -> (Child, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args([
            "demo",
            "--size",
            "128M",
            "--listen",
            "127.0.0.1:0",
            "--api",
            "127.0.0.1:0",
        ])
        .current_dir(dir)
        .env_remove("SHOAL_STATE_DIR")
        .env("SHOAL_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start shoal demo");
    let mut lines = Vec::new();
    let out = BufReader::new(child.stdout.take().unwrap());
    for line in out.lines() {
        let line = line.unwrap();
        let done = line.starts_with("serving until Ctrl-C");
        lines.push(line);
        if done {
            return (child, lines);
        }
    }
    let status = child.wait().unwrap();
    panic!("shoal demo ended early ({status}): {lines:#?}");
}

fn interrupt(mut child: Child) {
    signal(&child, "INT");
    let status = child.wait().unwrap();
    assert!(status.success(), "shoal demo exited with {status}");
}

/// The libnfs URL the demo printed, with `file` appended to the export path.
fn libnfs_url(lines: &[String], file: &str) -> String {
    let line = lines
        .iter()
        .find(|l| l.trim_start().starts_with("libnfs:"))
        .expect("a libnfs line");
    let url = line.split('\'').nth(1).expect("a quoted URL");
    let (base, query) = url.split_once('?').unwrap();
    format!("{base}/{file}?{query}")
}

#[test]
fn the_demo_serves_a_share_and_comes_back_to_it() {
    let t = tempfile::tempdir().unwrap();
    let (demo, lines) = start_demo(t.path());
    let text = lines.join("\n");
    assert!(text.contains("created pool 'demo'"), "{text}");
    for what in ["Linux:", "macOS:", "libnfs:", "UI:     http://127.0.0.1:"] {
        assert!(text.contains(what), "{what} missing from:\n{text}");
    }
    let payload = t.path().join("payload");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&payload, &data).unwrap();
    let url = libnfs_url(&lines, "payload");
    let cp = Command::new("nfs-cp")
        .arg(&payload)
        .arg(&url)
        .output()
        .expect("nfs-cp (libnfs-utils)");
    assert!(cp.status.success(), "nfs-cp {url}: {cp:?}");
    interrupt(demo);
    assert!(t.path().join("shoal-demo/devices").is_dir());

    let (demo, lines) = start_demo(t.path());
    let text = lines.join("\n");
    assert!(
        !text.contains("created pool"),
        "the pool is reused:\n{text}"
    );
    let url = libnfs_url(&lines, "payload");
    let cat = Command::new("nfs-cat").arg(&url).output().unwrap();
    assert!(cat.status.success(), "nfs-cat {url}: {cat:?}");
    assert!(
        cat.stdout == data,
        "the file written in the first run reads back"
    );
    interrupt(demo);
}
