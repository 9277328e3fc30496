//! What the collector reads from each pool once a second (`analytics::Sampler`):
//! ARC lookups by hit or miss, demand or prefetch, data or metadata; the ARC's size;
//! L2ARC hits and misses; dirty and allocated bytes; scrub or resilver progress; and
//! each device's busy time. Counters become per-second deltas here; levels are
//! reported as read. The I/O path only bumps atomics: nothing here runs on it.

use analytics::{Event, Meter, MeterEvent};
use pool::arc::AccessKind;
use pool::storage::access_of;
use pool::Pool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

pub struct PoolSampler {
    /// Weak: a pool exported or destroyed while the daemon runs is not kept alive by
    /// its sampler, which then samples nothing.
    pool: Weak<Pool>,
    id: u32,
    last: Mutex<Option<Counters>>,
}

#[derive(Clone, Default)]
struct Counters {
    arc: [u64; 8],
    l2: (u64, u64),
    /// Device number → busy nanoseconds.
    busy: HashMap<u32, u64>,
}

impl PoolSampler {
    pub fn new(pool: &Arc<Pool>, analytics: &analytics::Analytics) -> Arc<PoolSampler> {
        let id = analytics.register_pool(&pool.name);
        Arc::new(PoolSampler {
            pool: Arc::downgrade(pool),
            id,
            last: Mutex::new(None),
        })
    }

    fn read(&self, pool: &Pool) -> Counters {
        let c = &pool.storage.counters;
        let l2 = pool
            .storage
            .l2
            .get()
            .map(|l| {
                let s = l.stats();
                (s.hits, s.misses)
            })
            .unwrap_or_default();
        Counters {
            arc: std::array::from_fn(|i| {
                c.arc_accesses[i].load(std::sync::atomic::Ordering::Relaxed)
            }),
            l2,
            busy: pool.leaves().iter().filter_map(|l| l.busy_ns()).collect(),
        }
    }
}

impl analytics::Sampler for PoolSampler {
    fn sample(&self, at: Instant, out: &mut Vec<Event>) {
        let Some(pool) = self.pool.upgrade() else {
            return;
        };
        let mut push = |meter, subject, labels, value| {
            out.push(Event::Meter(MeterEvent {
                meter,
                subject,
                labels,
                value,
                latency_ns: 0,
                at,
            }))
        };
        let id = self.id;
        push(
            Meter::ArcSize,
            id,
            ["", "", ""],
            pool.storage.arc.resident_bytes(),
        );
        push(Meter::PoolDirty, id, ["", "", ""], pool.dirty_bytes());
        let allocated = {
            let a = pool.storage.alloc.lock().unwrap();
            a.capacity().saturating_sub(a.free_bytes())
        };
        push(Meter::PoolUsed, id, ["", "", ""], allocated);
        if let Some((kind, done, total)) = pool.repair.get() {
            let hundredths = (done as u128 * 10_000 / total.max(1) as u128).min(10_000);
            push(Meter::RepairProgress, id, [kind, "", ""], hundredths as u64);
        }
        let now = self.read(&pool);
        let Some(before) = self.last.lock().unwrap().replace(now.clone()) else {
            return;
        };
        for (i, (n, n0)) in now.arc.iter().zip(before.arc).enumerate() {
            if *n > n0 {
                let (hit, kind, metadata) = access_of(i);
                let labels = [
                    if hit { "hit" } else { "miss" },
                    match kind {
                        AccessKind::Demand => "demand",
                        AccessKind::Prefetch => "prefetch",
                    },
                    if metadata { "metadata" } else { "data" },
                ];
                push(Meter::ArcAccess, id, labels, n - n0);
            }
        }
        for (result, n, n0) in [
            ("hit", now.l2.0, before.l2.0),
            ("miss", now.l2.1, before.l2.1),
        ] {
            if n > n0 {
                push(Meter::L2Access, id, [result, "", ""], n - n0);
            }
        }
        for (device, busy) in &now.busy {
            let busy0 = before.busy.get(device).copied().unwrap_or(*busy);
            // Microseconds, at most the second that passed.
            push(
                Meter::DeviceBusy,
                *device,
                ["", "", ""],
                (busy.saturating_sub(busy0) / 1000).min(1_000_000),
            );
        }
    }
}
