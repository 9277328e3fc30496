//! The clock of NFS calls' latencies and instants: `Ticks`, a reading of the CPU's
//! time-stamp counter where the kernel itself keeps time by it, else nanoseconds of
//! the monotonic clock.
//!
//! Why not `Instant::now()`: every NFS call reads the clock twice (when its record
//! arrives and when its reply is ready), and in the daemon's profile under 8K reads
//! from the ARC one `clock_gettime` cost about 90 ns of CPU per call, where a tight
//! loop of them costs 29 ns: the vDSO orders its counter read with a fence that
//! waits for every load before it, which in the middle of the I/O path is a long
//! wait. A plain RDTSC does not wait (12 ns in the same loop). A latency measured
//! with it may start or end a few instructions early or late, which is nothing
//! against the microseconds it measures. Written here rather than taken from a
//! crate because it is small and sits on the path whose cost analytics must keep
//! under 2%.
//!
//! Invariants:
//! - The counter is used only on x86_64 and only where the kernel's clocksource is
//!   `tsc`: the kernel chose it because it found the counter invariant (constant
//!   rate, running in every power state) and synchronized across CPUs, and keeps
//!   checking; elsewhere, or with `SHOAL_CLOCK=monotonic`, ticks are nanoseconds of
//!   the monotonic clock since the process's first reading, and every conversion
//!   below is exact.
//! - The counter's rate is measured once, against the monotonic clock over
//!   `CALIBRATION`, when the clock is first used (`Analytics::new` does it before
//!   any call). A latency (a difference of ticks) is off by the rate's error, about
//!   one part in 10^5, never by anything that accumulates.
//! - Ticks become instants only through a `Reference` (a reading of both clocks
//!   taken together, by the collector at each tick), so an event's instant is off by
//!   the rate's error over the event's age (under a second: microseconds), not over
//!   the daemon's uptime, and the monotonic clock's own adjustments are followed.
//! - Ticks compare only within one process.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the counter's rate is measured against the monotonic clock.
const CALIBRATION: Duration = Duration::from_millis(20);

/// One reading of the clock; see the module comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticks(u64);

struct Source {
    /// Ticks are the time-stamp counter (else monotonic nanoseconds since `origin`).
    counter: bool,
    /// Nanoseconds per tick, times 2^32 (exactly 2^32 without the counter).
    ns_per_tick_q32: u64,
    origin: Instant,
}

static SOURCE: OnceLock<Source> = OnceLock::new();

#[inline]
fn source() -> &'static Source {
    SOURCE.get_or_init(|| Source::new(counter_trusted()))
}

impl Ticks {
    /// Now.
    #[inline]
    pub fn now() -> Ticks {
        let s = source();
        if s.counter {
            Ticks(read_counter())
        } else {
            Ticks(s.origin.elapsed().as_nanos() as u64)
        }
    }

    /// Nanoseconds from `earlier` to `self`; 0 when `earlier` is not earlier (two
    /// CPUs' counters may differ by a few ticks).
    #[inline]
    pub fn ns_since(self, earlier: Ticks) -> u64 {
        let ticks = self.0.saturating_sub(earlier.0);
        ((ticks as u128 * source().ns_per_tick_q32 as u128) >> 32) as u64
    }

    /// The ticks of `instant`, for events made at a chosen instant (tests, replay).
    /// Exact without the counter; with it, through a reference taken now.
    pub fn at(instant: Instant) -> Ticks {
        Reference::now().ticks(instant)
    }

    /// Measures the counter's rate now rather than at the first reading.
    pub fn calibrate() {
        source();
    }

    /// Whether ticks are the CPU's time-stamp counter.
    pub fn from_counter() -> bool {
        source().counter
    }
}

/// A reading of the ticks and of the monotonic clock taken together: turns nearby
/// ticks into instants.
#[derive(Debug, Clone, Copy)]
pub struct Reference {
    ticks: Ticks,
    instant: Instant,
}

impl Reference {
    pub fn now() -> Reference {
        let instant = Instant::now();
        Reference {
            ticks: Ticks::now(),
            instant,
        }
    }

    /// The ticks of `instant` (the inverse of `instant`, to a tick).
    pub fn ticks(&self, instant: Instant) -> Ticks {
        let s = source();
        if !s.counter {
            return Ticks(instant.saturating_duration_since(s.origin).as_nanos() as u64);
        }
        let q = s.ns_per_tick_q32 as u128;
        if instant >= self.instant {
            let ns = instant.duration_since(self.instant).as_nanos();
            Ticks(self.ticks.0.saturating_add(((ns << 32) / q) as u64))
        } else {
            let ns = self.instant.duration_since(instant).as_nanos();
            Ticks(self.ticks.0.saturating_sub(((ns << 32) / q) as u64))
        }
    }

    /// The instant of `t`.
    #[inline]
    pub fn instant(&self, t: Ticks) -> Instant {
        let s = source();
        if !s.counter {
            return s.origin + Duration::from_nanos(t.0);
        }
        if t >= self.ticks {
            self.instant + Duration::from_nanos(t.ns_since(self.ticks))
        } else {
            let back = Duration::from_nanos(self.ticks.ns_since(t));
            self.instant.checked_sub(back).unwrap_or(self.instant)
        }
    }
}

impl Source {
    fn new(counter: bool) -> Source {
        let origin = Instant::now();
        let monotonic = Source {
            counter: false,
            ns_per_tick_q32: 1 << 32,
            origin,
        };
        if !counter {
            return monotonic;
        }
        let (i0, t0) = paired_reading();
        std::thread::sleep(CALIBRATION);
        let (i1, t1) = paired_reading();
        let ns = i1.duration_since(i0).as_nanos();
        let ticks = t1.saturating_sub(t0) as u128;
        // A counter that did not advance, or ran at under 1 MHz or over 100 GHz, is
        // not one to time calls by.
        if ticks == 0 || ns == 0 || ticks * 1000 < ns || ticks > ns * 100 {
            return monotonic;
        }
        Source {
            counter: true,
            ns_per_tick_q32: ((ns << 32) / ticks) as u64,
            origin,
        }
    }
}

/// An instant and a counter reading taken together: of five tries, the one whose
/// counter reading lies between the closest two instants (a thread preempted between
/// them would pair readings milliseconds apart).
fn paired_reading() -> (Instant, u64) {
    let mut best: Option<(Duration, Instant, u64)> = None;
    for _ in 0..5 {
        let before = Instant::now();
        let counter = read_counter();
        let after = Instant::now();
        let gap = after.duration_since(before);
        if best.is_none_or(|(g, _, _)| gap < g) {
            best = Some((gap, before + gap / 2, counter));
        }
    }
    let (_, instant, counter) = best.expect("five tries");
    (instant, counter)
}

/// Whether the counter may be used: see the module comment.
fn counter_trusted() -> bool {
    // The crate's own tests place events at exact instants.
    if cfg!(test) || !cfg!(target_arch = "x86_64") {
        return false;
    }
    if std::env::var_os("SHOAL_CLOCK").is_some_and(|v| v == "monotonic") {
        return false;
    }
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .is_ok_and(|s| s.trim() == "tsc")
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn read_counter() -> u64 {
    // SAFETY: RDTSC reads the counter into registers; it touches no memory and has
    // no precondition Rust could break. Every x86_64 CPU has the instruction, and it
    // is called only when the kernel keeps time by the counter (`counter_trusted`),
    // so user space is allowed to read it (the kernel's vDSO reads it there too).
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn read_counter() -> u64 {
    unreachable!("the time-stamp counter is used on x86_64 only")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_counter_ticks_are_exact_nanoseconds() {
        assert!(
            !Ticks::from_counter(),
            "the crate's tests use the monotonic clock"
        );
        let t0 = Instant::now();
        let a = Ticks::at(t0);
        let b = Ticks::at(t0 + Duration::from_micros(1500));
        assert_eq!(b.ns_since(a), 1_500_000);
        assert_eq!(a.ns_since(b), 0, "never negative");
        let r = Reference::now();
        assert_eq!(r.instant(b), t0 + Duration::from_micros(1500));
        let now = Ticks::now();
        assert!(now >= a);
    }

    /// The counter's calibration, where this machine's kernel keeps time by it.
    #[test]
    fn the_counter_measures_what_the_monotonic_clock_does() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let s = Source::new(true);
        if !s.counter {
            // Calibration refused the counter: then nothing reads it.
            return;
        }
        let ns_of = |ticks: u64| ((ticks as u128 * s.ns_per_tick_q32 as u128) >> 32) as u64;
        let (i0, t0) = paired_reading();
        std::thread::sleep(Duration::from_millis(30));
        let (i1, t1) = paired_reading();
        let monotonic = i1.duration_since(i0).as_nanos() as f64;
        let counted = ns_of(t1 - t0) as f64;
        assert!(
            (counted / monotonic - 1.0).abs() < 0.05,
            "30 ms by the counter: {counted} ns, by the monotonic clock {monotonic} ns"
        );
    }
}
