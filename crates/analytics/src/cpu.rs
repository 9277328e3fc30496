//! The daemon's CPU use by kind of work, for `cpu.daemon[work]` and
//! `shoal_cpu_seconds_total`.
//!
//! Once a second `CpuSampler` reads each thread's run time (`/proc/self/task/TID/
//! schedstat`, nanoseconds, from a file kept open per thread; `stat`'s utime + stime
//! in clock ticks where schedstat is missing) and its name (read once per thread),
//! maps the name to a kind of work (`work_of`), and reports the change since its last
//! reading in microseconds. Compression runs inside other
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
    ("disk-read", "device-io"),
    ("volatile-cache", "device-io"),
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

/// The calling thread's CPU time in nanoseconds (CLOCK_THREAD_CPUTIME_ID).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the whole call, and
    // CLOCK_THREAD_CPUTIME_ID exists on every Linux this runs on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
    /// tid → its `schedstat` file, kept open, and its kind of work. Opening two
    /// `/proc` files per thread every second (a path walk each) cost the daemon about
    /// a quarter of a percent of its CPU with its 135 threads under load; a file
    /// kept open is read again from offset 0 without a walk.
    threads: Mutex<HashMap<i32, (std::fs::File, &'static str)>>,
}

/// A thread's run time from its open `schedstat` file; None once the thread is gone.
fn read_run_time(file: &std::fs::File) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 96];
    let n = file.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n])
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The kind of work of thread `tid`, from its name.
fn work_of_tid(tid: &str) -> &'static str {
    let name = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap_or_default();
    work_of(name.trim_end())
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
        let mut threads = self.threads.lock().unwrap();
        for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let tid_s = entry.file_name().to_string_lossy().into_owned();
            let Ok(tid) = tid_s.parse::<i32>() else {
                continue;
            };
            // A thread named after it started may have been seen under its old
            // name: one not yet known as any kind of work is looked at again.
            let known = threads
                .get(&tid)
                .filter(|(_, work)| *work != "other")
                .and_then(|(file, work)| Some((read_run_time(file)?, *work)));
            let (run, work) = match known {
                Some(k) => k,
                None => {
                    // New, renamed, or a reused tid whose old file reads no more.
                    threads.remove(&tid);
                    let work = work_of_tid(&tid_s);
                    match std::fs::File::open(format!("/proc/self/task/{tid_s}/schedstat")) {
                        Ok(file) => {
                            let Some(run) = read_run_time(&file) else {
                                continue;
                            };
                            threads.insert(tid, (file, work));
                            (run, work)
                        }
                        // No schedstat (a kernel without it): stat's clock ticks.
                        Err(_) => match stat_cpu_ns(&format!("/proc/self/task/{tid_s}/stat")) {
                            Some(run) => (run, work),
                            None => continue,
                        },
                    }
                }
            };
            let comp = compression.get(&tid).copied().unwrap_or(0);
            now.insert(tid, (work, run, comp));
        }
        // Files of threads that ended.
        threads.retain(|tid, _| now.contains_key(tid));
        drop(threads);
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

    /// The kind of work the sampler holds for `tid`, if it keeps a file for it.
    fn kept(sampler: &CpuSampler, tid: i32) -> Option<&'static str> {
        sampler.threads.lock().unwrap().get(&tid).map(|(_, w)| *w)
    }

    #[test]
    fn thread_files_follow_renames_and_ends() {
        let sampler = CpuSampler::new();
        let (to_main, from_thread) = std::sync::mpsc::channel();
        let (to_thread, from_main) = std::sync::mpsc::channel::<()>();
        let t = std::thread::Builder::new()
            .name("starting".into())
            .spawn(move || {
                // SAFETY: gettid has no preconditions and cannot fail.
                let tid = unsafe { libc::gettid() };
                to_main.send(tid).unwrap();
                from_main.recv().unwrap();
                let name = std::ffi::CString::new("rpc-renamed").unwrap();
                // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16
                // bytes from the pointer, which `name` keeps alive for the call.
                let rc = unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) };
                assert_eq!(rc, 0, "prctl(PR_SET_NAME)");
                to_main.send(tid).unwrap();
                from_main.recv().unwrap();
            })
            .unwrap();
        let tid = from_thread.recv().unwrap();
        assert!(
            sampler.read().is_none(),
            "the first reading is the baseline"
        );
        assert_eq!(kept(&sampler, tid), Some("other"));
        to_thread.send(()).unwrap();
        from_thread.recv().unwrap();
        sampler.read().unwrap();
        assert_eq!(
            kept(&sampler, tid),
            Some("rpc"),
            "a renamed thread is looked at again"
        );
        to_thread.send(()).unwrap();
        t.join().unwrap();
        // The kernel may show the ended thread a moment longer.
        for _ in 0..1000 {
            sampler.read().unwrap();
            if kept(&sampler, tid).is_none() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(
            kept(&sampler, tid),
            None,
            "an ended thread's file is closed"
        );
    }

    #[test]
    fn busy_threads_show_up_under_their_work() {
        assert_eq!(work_of("rpc-worker-3"), "rpc");
        assert_eq!(work_of("txg-sync-tank"), "txg-sync");
        assert_eq!(work_of("disk-read-17"), "device-io");
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
                    while thread_cpu_ns() < 100_000_000 {
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
