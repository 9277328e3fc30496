//! Power loss, not just kill -9: the daemon's devices sit behind a simulated volatile
//! write cache (`shoal serve --simulate-power-loss SEED`), so SIGKILL loses every
//! write the devices were not told to flush, except a random subset already written
//! back, as a power cut would. The host's page cache, which keeps whatever a killed
//! process wrote, no longer hides a missing flush.
//!
//! The negative control runs the same harness with device flushes that do nothing
//! (`--simulate-lying-flush`): a server that never makes anything durable. It must
//! report losses (or a pool that does not come back), proving the harness can fail.

use super::kill::{kill_under_load, report};
use super::*;

fn power_loss_seed() -> String {
    // The torture seed picks the kill moments; this one the cache's write-backs.
    (seed() >> 1).to_string()
}

#[test]
fn power_loss_under_load_loses_no_acknowledged_write() {
    let kills = std::env::var("SHOAL_TORTURE_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if soak() { 200 } else { 4 });
    let size = if soak() { "4G" } else { "1G" };
    let seed = power_loss_seed();
    let r = kill_under_load(&["--simulate-power-loss", &seed], kills, 4, size);
    let figures = report(&r);
    save_figures("power_loss", &figures);
    assert!(r.not_back.is_none(), "{figures:#}");
    assert!(r.lost.is_empty(), "acknowledged writes lost: {figures:#}");
    assert!(r.import_problems.is_empty(), "{figures:#}");
    assert_eq!(r.imports_checked, kills + 1, "{figures:#}");
}

#[test]
fn power_loss_with_flushes_that_do_nothing_reports_losses() {
    let seed = power_loss_seed();
    let r = kill_under_load(
        &["--simulate-power-loss", &seed, "--simulate-lying-flush"],
        0,
        4,
        "1G",
    );
    let figures = report(&r);
    save_figures("power_loss_negative_control", &figures);
    if let Some(kept) = &r.kept {
        // Nothing to inspect: the losses are the point.
        let _ = std::fs::remove_dir_all(kept);
    }
    assert!(
        r.not_back.is_some() || !r.lost.is_empty(),
        "flushes did nothing, yet nothing acknowledged was lost: the harness cannot \
         see a missing flush: {figures:#}"
    );
}
