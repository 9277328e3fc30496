//! The daemon's CPU use by kind of work, for `cpu.daemon[work]` and
//! `shoal_cpu_seconds_total`.
//!
//! Once a second `CpuSampler` reads each thread's run time (`/proc/self/task/TID/
//! schedstat`, nanoseconds; `stat`'s utime + stime in clock ticks where schedstat is
//! missing) and its name, maps the name to a kind of work (`work_of`), and reports
//! the change since its last reading in microseconds. Compression runs inside other
//! work (a txg sync compresses, a read decompresses), so the code that compresses
//! charges its time to its own thread's counter (`charge_compression`, two clock
//! reads and one relaxed atomic add, no lock after a thread's first call), and the
//! sampler moves that time from the thread's kind to `compression`.
//!
//! A thread that ends between two readings loses its last partial second; the
//! first reading only sets the baseline.

use crate::event::{Event, Meter, MeterEvent};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

/// Kinds of work, by thread name prefix (names are cut to 15 bytes by the kernel).
const WORK_BY_THREAD: &[(&str, &str)] = &[
    ("rpc-", "rpc"),
    ("txg-sync", "txg-sync"),
    ("prefetch", "device-io"),
    ("log-replica", "device-io"),
    ("l2arc-feed", "device-io"),
    ("shoal-api", "api"),
    ("analytics", "analytics"),
];

pub fn work_of(thread_name: &str) -> &'static str {
    WORK_BY_THREAD
        .iter()
        .find(|(prefix, _)| thread_name.starts_with(prefix))
        .map_or("other", |(_, work)| work)
}

/// Threads that have compressed: (tid, their nanoseconds of compression).
static COMPRESSING: Mutex<Vec<(i32, Weak<AtomicU64>)>> = Mutex::new(Vec::new());

thread_local! {
    static MY_COMPRESSION: Arc<AtomicU64> = {
        let counter = Arc::new(AtomicU64::new(0));
        // SAFETY: gettid has no preconditions and cannot fail.
        let tid = unsafe { libc::gettid() };
        let mut all = COMPRESSING.lock().unwrap();
        all.retain(|(_, w)| w.strong_count() > 0);
        all.push((tid, Arc::downgrade(&counter)));
        counter
    };
}

/// Runs `f` (a compression or decompression) and charges its time to this thread's
/// compression counter.
#[inline]
pub fn charge_compression<T>(f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let r = f();
    let ns = started.elapsed().as_nanos() as u64;
    MY_COMPRESSION.with(|c| c.fetch_add(ns, Ordering::Relaxed));
    r
}

/// A thread's run time in nanoseconds.
fn run_time_ns(tid: &str) -> Option<u64> {
    if let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")) {
        return s.split_whitespace().next()?.parse().ok();
    }
    stat_cpu_ns(&format!("/proc/self/task/{tid}/stat"))
}

/// utime + stime of a `/proc/.../stat` file, in nanoseconds.
fn stat_cpu_ns(path: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(ticks * 1_000_000_000 / hz)
}

/// CPU seconds (user + system) this process has used so far, all threads, ended
/// ones included: for a benchmark to report its own share of the host's CPU.
pub fn process_seconds() -> f64 {
    stat_cpu_ns("/proc/self/stat").unwrap_or(0) as f64 / 1e9
}

/// CPU seconds (user + system) process `pid` has used so far, all threads; None when
/// there is no such process.
pub fn pid_seconds(pid: u32) -> Option<f64> {
    stat_cpu_ns(&format!("/proc/{pid}/stat")).map(|ns| ns as f64 / 1e9)
}

#[derive(Default)]
pub struct CpuSampler {
    /// tid → (run time, compression time) at the last reading.
    last: Mutex<Option<HashMap<i32, (u64, u64)>>>,
}

impl CpuSampler {
    pub fn new() -> Arc<CpuSampler> {
        Arc::new(CpuSampler::default())
    }

    /// Microseconds of CPU by kind of work since the last call (None the first time).
    pub fn read(&self) -> Option<Vec<(&'static str, u64)>> {
        let compression: HashMap<i32, u64> = COMPRESSING
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(tid, w)| Some((*tid, w.upgrade()?.load(Ordering::Relaxed))))
            .collect();
        // tid → (work, run time, compression time)
        let mut now: HashMap<i32, (&'static str, u64, u64)> = HashMap::new();
        for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let tid_s = entry.file_name().to_string_lossy().into_owned();
            let Ok(tid) = tid_s.parse::<i32>() else {
                continue;
            };
            let Some(run) = run_time_ns(&tid_s) else {
                continue;
            };
            let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            let comp = compression.get(&tid).copied().unwrap_or(0);
            now.insert(tid, (work_of(name.trim_end()), run, comp));
        }
        let mut last = self.last.lock().unwrap();
        let before = last.replace(now.iter().map(|(t, (_, r, c))| (*t, (*r, *c))).collect())?;
        let mut by_work: HashMap<&'static str, u64> = HashMap::new();
        for (tid, (work, run, comp)) in now {
            let (run0, comp0) = before.get(&tid).copied().unwrap_or((0, 0));
            let run_d = run.saturating_sub(run0);
            let comp_d = comp.saturating_sub(comp0).min(run_d);
            *by_work.entry(work).or_default() += (run_d - comp_d) / 1000;
            if comp_d > 0 {
                *by_work.entry("compression").or_default() += comp_d / 1000;
            }
        }
        let mut v: Vec<_> = by_work.into_iter().collect();
        v.sort();
        Some(v)
    }
}

impl crate::Sampler for CpuSampler {
    fn sample(&self, at: Instant, out: &mut Vec<Event>) {
        for (work, us) in self.read().unwrap_or_default() {
            out.push(Event::Meter(MeterEvent {
                meter: Meter::Cpu,
                subject: 0,
                labels: [work, "", ""],
                value: us,
                latency_ns: 0,
                at,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPU time of the calling thread, in microseconds.
    fn thread_cpu_us() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the whole call, and
        // CLOCK_THREAD_CPUTIME_ID exists on every Linux this runs on.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime");
        ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
    }

    #[test]
    fn busy_threads_show_up_under_their_work() {
        assert_eq!(work_of("rpc-worker-3"), "rpc");
        assert_eq!(work_of("txg-sync-tank"), "txg-sync");
        assert_eq!(work_of("cargo-test"), "other");
        let sampler = CpuSampler::new();
        assert!(
            sampler.read().is_none(),
            "the first reading is the baseline"
        );
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spun = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        // Each thread spins until it has had 100 ms of CPU, however long a loaded
        // machine takes to give it that, then idles until the reading is taken.
        let spin = |name: &str, compress: bool| {
            let (stop, spun) = (stop.clone(), spun.clone());
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    let mut x = 0u64;
                    while thread_cpu_us() < 100_000 {
                        let mut step = || {
                            for i in 0..10_000u64 {
                                x = x.wrapping_mul(31).wrapping_add(i);
                            }
                        };
                        if compress {
                            charge_compression(step);
                        } else {
                            step();
                        }
                    }
                    std::hint::black_box(x);
                    spun.fetch_add(1, Ordering::SeqCst);
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                })
                .unwrap()
        };
        let threads = [spin("rpc-worker-0", false), spin("txg-sync-t", true)];
        while spun.load(Ordering::SeqCst) < threads.len() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Read while they still run: a thread that ended before a reading is not seen.
        let v: HashMap<_, _> = sampler.read().unwrap().into_iter().collect();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        // 100 ms each; the compressing thread spends a little of it outside the charge.
        let get = |k: &str| v.get(k).copied().unwrap_or(0);
        assert!(get("rpc") >= 80_000, "{v:?}");
        assert!(get("compression") >= 50_000, "{v:?}");
        // The compressing thread's time went to compression, not to its own kind.
        assert!(get("txg-sync") < get("compression"), "{v:?}");
    }
}
