//! The host's own meters, read once a second from /proc: every CPU's time by mode
//! (`cpu.utilization[cpu][mode]`) and every network interface's bytes and packets
//! (`net.interface.bytes`, `net.interface.packets`), so the traffic on the wire, the
//! NFS payload and the disks' bytes can be read side by side.
//!
//! Readings are deltas between two samples (the first sample only sets the base).
//! Kernel counters that go backwards (an interface re-created with the same name, a
//! CPU brought back online) give no reading for that second rather than a huge one.
//!
//! Event labels are `&'static str`: interface and CPU names are interned once each
//! (`intern`) when a reading is reported, at most `MAX_NAMES` of them; a host that
//! creates more interfaces than that (containers coming and going) reports the rest
//! as `(other)`. Deltas are taken by each interface's own name, before interning, so
//! interfaces folded into `(other)` still each give their own right delta.

use crate::event::{Event, Meter, MeterEvent};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Distinct interface and CPU names kept.
const MAX_NAMES: usize = 1024;

/// Modes of `cpu.utilization` and the /proc/stat columns (after the name) each sums:
/// user nice system idle iowait irq softirq steal (guest time is already in user).
const MODES: [(&str, &[usize]); 5] = [
    ("user", &[0, 1]),
    ("kernel", &[2, 5, 6]),
    ("iowait", &[4]),
    ("idle", &[3]),
    ("steal", &[7]),
];

/// A `&'static` copy of `name`, made once per distinct name.
pub fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Default::default).lock().unwrap();
    if let Some(n) = names.get(name) {
        return n;
    }
    if names.len() >= MAX_NAMES {
        return crate::history::OTHER;
    }
    let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// Per CPU: the mode totals in ticks. Per interface: [rx bytes, rx packets, tx
/// bytes, tx packets].
#[derive(Default)]
struct Last {
    cpus: HashMap<String, [u64; MODES.len()]>,
    interfaces: HashMap<String, [u64; 4]>,
}

#[derive(Default)]
pub struct HostSampler {
    last: Mutex<Option<Last>>,
}

impl HostSampler {
    pub fn new() -> Arc<HostSampler> {
        Arc::new(HostSampler::default())
    }
}

/// Per-CPU mode totals in clock ticks from the text of /proc/stat (the `cpu` line,
/// the whole host's sum, is left out: the per-CPU lines add up to it).
pub fn parse_proc_stat(text: &str) -> Vec<(String, [u64; MODES.len()])> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(name) = f.next() else { continue };
        if !name.starts_with("cpu") || name == "cpu" {
            continue;
        }
        let cols: Vec<u64> = f.map(|c| c.parse().unwrap_or(0)).collect();
        let mut modes = [0u64; MODES.len()];
        for (m, (_, columns)) in MODES.iter().enumerate() {
            modes[m] = columns.iter().filter_map(|c| cols.get(*c)).sum();
        }
        out.push((name.to_string(), modes));
    }
    out
}

/// [rx bytes, rx packets, tx bytes, tx packets] per interface from the text of
/// /proc/net/dev.
pub fn parse_net_dev(text: &str) -> Vec<(String, [u64; 4])> {
    let mut out = Vec::new();
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let cols: Vec<u64> = rest
            .split_whitespace()
            .map(|c| c.parse().unwrap_or(0))
            .collect();
        if cols.len() < 10 {
            continue;
        }
        out.push((
            name.trim().to_string(),
            [cols[0], cols[1], cols[8], cols[9]],
        ));
    }
    out
}

/// The host's CPU time in clock ticks from the text of /proc/stat, all CPUs: (user
/// and kernel, every mode).
pub fn busy_and_all_ticks(text: &str) -> (u64, u64) {
    // MODES: user and kernel come first.
    parse_proc_stat(text).iter().fold((0, 0), |(b, a), (_, m)| {
        (b + m[0] + m[1], a + m.iter().sum::<u64>())
    })
}

/// Per-interface counters summed: (bytes in, bytes out), from the text of
/// /proc/net/dev.
pub fn net_bytes_in_out(text: &str) -> (u64, u64) {
    parse_net_dev(text)
        .iter()
        .fold((0, 0), |(i, o), (_, c)| (i + c[0], o + c[2]))
}

pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as u64
}

impl crate::Sampler for HostSampler {
    fn sample(&self, at: Instant, out: &mut Vec<Event>) {
        let cpus = std::fs::read_to_string("/proc/stat")
            .map(|t| parse_proc_stat(&t))
            .unwrap_or_default();
        let interfaces = std::fs::read_to_string("/proc/net/dev")
            .map(|t| parse_net_dev(&t))
            .unwrap_or_default();
        let now = Last {
            cpus: cpus.into_iter().collect(),
            interfaces: interfaces.into_iter().collect(),
        };
        let mut last = self.last.lock().unwrap();
        if let Some(before) = last.as_ref() {
            let hz = clock_ticks_per_second();
            let meter = |meter, labels: [&'static str; 3], value| {
                Event::Meter(MeterEvent {
                    meter,
                    subject: 0,
                    labels,
                    value,
                    latency_ns: 0,
                    at,
                })
            };
            for (cpu, modes) in &now.cpus {
                let Some(prev) = before.cpus.get(cpu) else {
                    continue;
                };
                let cpu = intern(cpu);
                for (m, (mode, _)) in MODES.iter().enumerate() {
                    if let Some(ticks) = modes[m].checked_sub(prev[m]) {
                        let us = ticks * 1_000_000 / hz;
                        out.push(meter(Meter::HostCpu, [cpu, mode, ""], us));
                    }
                }
            }
            for (name, c) in &now.interfaces {
                let Some(prev) = before.interfaces.get(name) else {
                    continue;
                };
                let name = intern(name);
                for (i, (m, dir)) in [
                    (Meter::InterfaceBytes, "in"),
                    (Meter::InterfacePackets, "in"),
                    (Meter::InterfaceBytes, "out"),
                    (Meter::InterfacePackets, "out"),
                ]
                .into_iter()
                .enumerate()
                {
                    if let Some(d) = c[i].checked_sub(prev[i]) {
                        if d > 0 {
                            out.push(meter(m, [name, dir, ""], d));
                        }
                    }
                }
            }
        }
        *last = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_modes_sum_the_right_columns() {
        let text = "cpu  10 20 30 40 50 60 70 80 90 100\n\
                    cpu0 1 2 3 4 5 6 7 8 9 10\n\
                    cpu1 100 0 0 900 0 0 0 0\n\
                    intr 5 6\n";
        let cpus = parse_proc_stat(text);
        assert_eq!(cpus.len(), 2, "the aggregate line is left out");
        assert_eq!(cpus[0].0, "cpu0");
        // user = user+nice, kernel = system+irq+softirq, iowait, idle, steal
        assert_eq!(cpus[0].1, [1 + 2, 3 + 6 + 7, 5, 4, 8]);
        assert_eq!(cpus[1].1, [100, 0, 0, 900, 0]);
    }

    #[test]
    fn net_dev_gives_bytes_and_packets_each_way() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n  \
eth0:5 1 0 0 0 0 0 0 7 2 0 0 0 0 0 0\n";
        let v = parse_net_dev(text);
        assert_eq!(
            v,
            vec![
                ("lo".to_string(), [1000, 10, 2000, 20]),
                ("eth0".to_string(), [5, 1, 7, 2])
            ]
        );
    }

    #[test]
    fn a_sampler_reports_deltas_from_its_second_reading_on() {
        let s = HostSampler::default();
        let mut out = Vec::new();
        crate::Sampler::sample(&s, Instant::now(), &mut out);
        assert!(out.is_empty(), "the first reading only sets the base");
        std::thread::sleep(std::time::Duration::from_millis(300));
        crate::Sampler::sample(&s, Instant::now(), &mut out);
        let cpu_us: u64 = out
            .iter()
            .filter_map(|e| match e {
                Event::Meter(m) if m.meter == Meter::HostCpu => Some(m.value),
                _ => None,
            })
            .sum();
        let ncpu = parse_proc_stat(&std::fs::read_to_string("/proc/stat").unwrap()).len() as u64;
        // About 300 ms of every CPU, by modes (ticks are 10 ms: generous bounds).
        assert!(
            cpu_us >= ncpu * 150_000 && cpu_us <= ncpu * 600_000,
            "{cpu_us} us of CPU time over 300 ms on {ncpu} CPUs"
        );
    }
}
