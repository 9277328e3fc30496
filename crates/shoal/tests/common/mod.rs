//! Helpers shared by the command-line tests: run the `shoal` binary against a private
//! state directory.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

pub fn shoal(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(args)
        .env("SHOAL_STATE_DIR", state)
        .output()
        .expect("run shoal")
}

/// Runs a command that must succeed; returns its standard output.
pub fn ok(state: &Path, args: &[&str]) -> String {
    let out = shoal(state, args);
    assert!(
        out.status.success(),
        "shoal {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Creates pool `tank` from device files of `size` made under `dir/devs`; `layout`
/// as `shoal pool create` reads it (e.g. `["raidz1", "a", "b", "c"]`).
pub fn create_tank(state: &Path, dir: &Path, size: &str, layout: &[&str]) {
    let devs = dir.join("devs");
    let mut args = vec![
        "pool",
        "create",
        "--dir",
        devs.to_str().unwrap(),
        "--size",
        size,
        "tank",
    ];
    args.extend_from_slice(layout);
    ok(state, &args);
}

/// Sends `signal` (`TERM`, `INT`) to a child process.
pub fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal} {}", child.id());
}

/// The pjdfstest runner: `$PJDFSTEST`, else what `.ci/test-deps.sh` installed.
pub fn pjdfstest_binary() -> PathBuf {
    if let Ok(p) = std::env::var("PJDFSTEST") {
        return PathBuf::from(p);
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let cargo_bin = Path::new(&home).join(".cargo/bin/pjdfstest");
    assert!(
        cargo_bin.exists(),
        "pjdfstest is not installed: run .ci/test-deps.sh (or set PJDFSTEST)"
    );
    cargo_bin
}
