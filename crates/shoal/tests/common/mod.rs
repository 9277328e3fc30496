//! Helpers shared by the command-line tests: run the `shoal` binary against a private
//! state directory.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

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
