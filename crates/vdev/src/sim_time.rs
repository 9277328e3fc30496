//! Wall-clock time and fresh identifiers, which a deterministic simulation replaces.
//!
//! Timestamps (inode times, uberblock times) and random identifiers (pool, device and
//! log chain guids) end up inside blocks, so they change checksums, compressed sizes
//! and with them the number and placement of device writes. A simulation that replays
//! a seed exactly (the whole-system simulator) calls `simulate(seed)` on its thread:
//! from then on, on that thread only, time starts at a fixed instant and moves one
//! microsecond a reading, and identifiers come from a generator seeded by `seed`.
//! Every other thread, and every thread of the daemon, sees the real clock and real
//! randomness; the cost there is one thread-local read.

use std::cell::Cell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// 2026-01-01T00:00:00Z, where simulated time starts.
const SIMULATED_EPOCH_NS: u64 = 1_767_225_600_000_000_000;

thread_local! {
    /// (next reading in nanoseconds since the Unix epoch, identifier generator state)
    static SIMULATED: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

/// Simulated time and seeded identifiers on this thread, until `stop`.
pub fn simulate(seed: u64) {
    SIMULATED.with(|s| s.set(Some((SIMULATED_EPOCH_NS, seed))));
}

/// Back to the real clock and real randomness on this thread.
pub fn stop() {
    SIMULATED.with(|s| s.set(None));
}

/// Time since the Unix epoch: the real clock, or the simulated one.
pub fn since_epoch() -> Duration {
    SIMULATED.with(|s| match s.get() {
        Some((ns, ids)) => {
            s.set(Some((ns + 1_000, ids)));
            Duration::from_nanos(ns)
        }
        None => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default(),
    })
}

/// The next seeded identifier when simulating; `None` means "use real randomness".
pub fn seeded_id() -> Option<u64> {
    SIMULATED.with(|s| {
        s.get().map(|(ns, state)| {
            let state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            s.set(Some((ns, state)));
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_time_and_ids_repeat_per_seed_and_stay_on_their_thread() {
        simulate(7);
        let a = (since_epoch(), since_epoch(), seeded_id(), seeded_id());
        simulate(7);
        let b = (since_epoch(), since_epoch(), seeded_id(), seeded_id());
        assert_eq!(a, b);
        assert!(a.1 > a.0 && a.2 != a.3);
        let other = std::thread::spawn(|| (seeded_id(), since_epoch()))
            .join()
            .unwrap();
        assert_eq!(other.0, None);
        assert!(other.1 > a.1, "another thread sees the real clock");
        stop();
        assert_eq!(seeded_id(), None);
    }
}
