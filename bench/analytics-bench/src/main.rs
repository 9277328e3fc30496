//! analytics-bench: the analytics collector's CPU per event, without a daemon. Threads
//! record the events of 8K random reads from 8 clients' worth of streams (NFSv3 READ:
//! op, client, file, offset, size, latency), the way the RPC threads do, and the
//! collector's `tick` counts them into the built-in datasets; its thread CPU time
//! (CLOCK_THREAD_CPUTIME_ID) per event is reported for each repetition. Isolates the
//! collector from the network and the file system, whose drift on this VM hides
//! changes of a few nanoseconds per call in the daemon. A benchmark, never a test.
//!
//!   cargo run --release -p analytics-bench -- --repeat 9

#[path = "../../../crates/shoal/src/allocator.rs"]
mod allocator;
use analytics::cpu::thread_cpu_ns;
use analytics::{Analytics, Event, NfsEvent, Ticks};
use clap::Parser;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

#[derive(Parser)]
struct Args {
    /// Threads recording events, as the RPC threads of that many connections.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Events recorded between two ticks (the collector ticks every 100 ms: 4000 is
    /// 40,000 calls a second).
    #[arg(long, default_value_t = 4000)]
    events_per_tick: usize,
    /// Ticks per repetition (ten a second of simulated time).
    #[arg(long, default_value_t = 200)]
    ticks: u64,
    #[arg(long, default_value_t = 5)]
    repeat: usize,
}

/// One repetition: the collector's CPU nanoseconds per event.
fn run(args: &Args, seed: u64) -> f64 {
    let a = Analytics::new();
    let start = a.unix_now();
    let per_thread = args.events_per_tick / args.threads;
    let mut collector_ns = 0;
    let mut events = 0;
    for t in 0..args.ticks {
        let tick_start = a.epoch() + Duration::from_millis(100 * t);
        std::thread::scope(|s| {
            for th in 0..args.threads {
                let a = &a;
                s.spawn(move || {
                    let mut r = seed ^ (th as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ t;
                    for i in 0..per_thread {
                        r = r
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        a.record(Event::Nfs(NfsEvent {
                            version: 3,
                            minor: 0,
                            op: "read",
                            client: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
                            fsid: 7,
                            ino: 100 + th as u64,
                            bytes: 8192,
                            offset: (r >> 20) & !8191,
                            request_bytes: 140,
                            reply_bytes: 8320,
                            latency_ns: 15_000 + (r >> 48),
                            at: Ticks::at(
                                tick_start
                                    + Duration::from_micros(i as u64 * 100_000 / per_thread as u64),
                            ),
                        }));
                    }
                });
            }
        });
        // The collector's clock: this tick's second, as `start_collector` passes it.
        let now = start + (100 * t + 99) / 1000;
        let before = thread_cpu_ns();
        a.tick(now);
        collector_ns += thread_cpu_ns() - before;
        events += (per_thread * args.threads) as u64;
    }
    collector_ns as f64 / events as f64
}

fn main() {
    allocator::tune();
    let args = Args::parse();
    assert!(
        args.threads > 0 && args.events_per_tick >= args.threads,
        "at least one event per thread and tick"
    );
    let mut per_event: Vec<f64> = (0..args.repeat).map(|i| run(&args, i as u64)).collect();
    let runs = per_event.clone();
    per_event.sort_by(f64::total_cmp);
    let median = per_event[per_event.len() / 2];
    println!(
        "{}",
        serde_json::json!({
            "benchmark": "analytics collector CPU per event (8K random reads, built-in datasets)",
            "threads": args.threads,
            "events_per_tick": args.events_per_tick,
            "ticks": args.ticks,
            "collector_ns_per_event": runs.iter().map(|v| (v * 10.0).round() / 10.0).collect::<Vec<_>>(),
            "median_ns_per_event": (median * 10.0).round() / 10.0,
            "min_ns_per_event": (per_event[0] * 10.0).round() / 10.0,
            "max_ns_per_event": (per_event[per_event.len() - 1] * 10.0).round() / 10.0,
        })
    );
}
