//! Where events wait between the I/O path and the collector: one buffer per
//! recording thread, swapped out whole by the collector every tick.
//!
//! Why not a ring: events used to go into bounded lock-free rings (crossbeam's
//! `ArrayQueue`, 8192 slots of about 100 bytes per shard). A ring is written slot
//! after slot around its whole capacity, so every push landed on memory last touched
//! thousands of events before, long out of the core's caches: under 8K random reads
//! from the ARC the push was a third of analytics' cost, nearly all of it in the load
//! of the slot's stamp and the store of the event (`perf annotate`). A thread's
//! vector is written only as far as one tick's events, into memory the collector read
//! one tick before.
//!
//! Why a mutex: each buffer's lock is taken by its own thread once per event, and by
//! the collector once per tick to swap the vector, so it is nearly never contended and
//! its cache line stays with the recording thread's core; an uncontended lock and
//! unlock cost about what the ring's compare-and-swap did.
//!
//! Invariants:
//! - an event recorded is in exactly one buffer until the collector takes it, and is
//!   taken exactly once (the swap happens under the buffer's lock);
//! - a buffer holds at most `THREAD_EVENTS` events; beyond, `record` drops the event
//!   and counts it, and never blocks;
//! - a thread's buffer outlives the thread: the collector drains it once more after
//!   the thread ended, then forgets it;
//! - each `Recorder` (one per `Analytics`) has its own buffers: a thread recording
//!   into two instances keeps their events apart.

use crate::event::Event;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Events one thread's buffer holds between two drains: at the collector's tick of
/// 100 ms, 160,000 events a second from one thread before any is dropped. A buffer's
/// vector grows only as far as it is filled, so the bound costs nothing until used.
pub const THREAD_EVENTS: usize = 16_384;

/// One recording thread's events not yet taken by the collector.
struct ThreadBuffer {
    events: Mutex<Vec<Event>>,
}

impl ThreadBuffer {
    fn lock(&self) -> MutexGuard<'_, Vec<Event>> {
        // Nothing panics while the lock is held (a push into a vector with room, a
        // swap), so a poisoned lock still guards whole events.
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The buffers of one `Analytics` instance.
pub(crate) struct Recorder {
    /// Tells this instance's buffers from other instances' in a thread's list.
    id: u64,
    buffers: Mutex<Vec<Arc<ThreadBuffer>>>,
    /// Events dropped: beyond a full buffer, or recorded by a thread while it was
    /// being torn down (after its list of buffers was). Rare, so one counter shared
    /// by all threads costs nothing on the way of events that are kept.
    dropped: AtomicU64,
}

static NEXT_RECORDER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's buffers, one per instance it recorded into, the last used first.
    static MINE: RefCell<Vec<(u64, Arc<ThreadBuffer>)>> = const { RefCell::new(Vec::new()) };
}

impl Recorder {
    pub(crate) fn new() -> Recorder {
        Recorder {
            id: NEXT_RECORDER.fetch_add(1, Ordering::Relaxed),
            buffers: Mutex::default(),
            dropped: AtomicU64::new(0),
        }
    }

    /// Adds `events` to this thread's buffer, as many as fit; counts the rest as dropped.
    #[inline]
    pub(crate) fn record<I: ExactSizeIterator<Item = Event>>(&self, events: I) {
        let mut events = Some(events);
        let pushed = MINE.try_with(|mine| {
            let Ok(mine) = mine.try_borrow() else {
                return false;
            };
            match mine.first() {
                Some((id, buffer)) if *id == self.id => {
                    self.push(buffer, events.take().expect("events are taken once"));
                    true
                }
                _ => false,
            }
        });
        if let Some(events) = events {
            if pushed.is_ok() {
                self.record_slow(events);
            } else {
                self.count_dropped(events.len());
            }
        }
    }

    /// `record` when this instance's buffer is not first in the thread's list: it is
    /// found (and moved first) or made and registered.
    #[cold]
    fn record_slow<I: ExactSizeIterator<Item = Event>>(&self, events: I) {
        let n = events.len();
        let mut events = Some(events);
        let _ = MINE.try_with(|mine| {
            let Ok(mut mine) = mine.try_borrow_mut() else {
                return;
            };
            // Buffers of instances that are gone are held by this list alone.
            mine.retain(|(_, b)| Arc::strong_count(b) > 1);
            let at = match mine.iter().position(|(id, _)| *id == self.id) {
                Some(i) => i,
                None => {
                    let buffer = Arc::new(ThreadBuffer {
                        events: Mutex::new(Vec::new()),
                    });
                    self.lock_buffers().push(buffer.clone());
                    mine.push((self.id, buffer));
                    mine.len() - 1
                }
            };
            mine.swap(0, at);
            self.push(&mine[0].1, events.take().expect("events are taken once"));
        });
        if events.is_some() {
            self.count_dropped(n);
        }
    }

    /// Adds `events` to `buffer`, as many as fit; counts the rest as dropped.
    #[inline]
    fn push<I: ExactSizeIterator<Item = Event>>(&self, buffer: &ThreadBuffer, events: I) {
        let n = events.len();
        let mut v = buffer.lock();
        let room = THREAD_EVENTS.saturating_sub(v.len());
        v.extend(events.take(room));
        drop(v);
        if n > room {
            self.count_dropped(n - room);
        }
    }

    /// Counts `n` events dropped: beyond a full buffer, or recorded while the
    /// thread's list of buffers was torn down (at the thread's end) or in use further
    /// up the stack.
    #[cold]
    fn count_dropped(&self, n: usize) {
        self.dropped.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn lock_buffers(&self) -> MutexGuard<'_, Vec<Arc<ThreadBuffer>>> {
        self.buffers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes every buffer's events and hands them to `each`, one buffer's at a time.
    /// `spare` is an empty vector given to a thread in place of the one taken (its
    /// capacity kept, so threads rarely grow theirs); it comes back empty.
    pub(crate) fn drain(&self, spare: &mut Vec<Event>, mut each: impl FnMut(&[Event])) {
        debug_assert!(spare.is_empty());
        let buffers = self.lock_buffers().clone();
        let mut ended = Vec::new();
        for buffer in &buffers {
            // Held by the list, this copy and the thread: with only two, the thread
            // is gone and can record no more, so once drained it is done with.
            if Arc::strong_count(buffer) == 2 {
                ended.push(buffer.clone());
            }
            std::mem::swap(&mut *buffer.lock(), spare);
            if !spare.is_empty() {
                each(spare);
            }
            spare.clear();
        }
        if !ended.is_empty() {
            self.lock_buffers()
                .retain(|b| !ended.iter().any(|gone| Arc::ptr_eq(b, gone)));
        }
    }

    /// `drain` done wrong, for the negative control of the test that no event is
    /// lost or counted twice: the events are copied under the lock and the buffer
    /// cleared under a second one, so what a thread records in between is lost.
    #[cfg(test)]
    fn drain_copy_then_clear(&self, mut each: impl FnMut(&[Event])) {
        let buffers = self.lock_buffers().clone();
        for buffer in &buffers {
            let copy = buffer.lock().clone();
            std::thread::yield_now();
            buffer.lock().clear();
            each(&copy);
        }
    }

    /// Events dropped so far, by every thread that recorded.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Threads with a buffer: those that recorded and were not yet seen gone.
    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        self.lock_buffers().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::IoEvent;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    fn io(bytes: u32) -> Event {
        Event::Io(IoEvent {
            device: 0,
            write: false,
            bytes,
            offset: 0,
            latency_ns: 0,
            at: Instant::now(),
        })
    }

    fn bytes(events: &[Event]) -> u64 {
        events
            .iter()
            .map(|e| match e {
                Event::Io(io) => io.bytes as u64,
                _ => panic!("only I/O events are recorded here"),
            })
            .sum()
    }

    /// Four threads record events of 1 byte while the collector drains without pause;
    /// returns (bytes recorded, bytes the drains saw plus events dropped at the bound).
    fn record_while_draining(drain: impl Fn(&Recorder, &mut u64) + Sync) -> (u64, u64) {
        let r = Recorder::new();
        let done = AtomicBool::new(false);
        let mut seen = 0;
        let recorded: u64 = std::thread::scope(|s| {
            let writers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let mut n = 0;
                        for _ in 0..200_000 {
                            r.record(std::iter::once(io(1)));
                            n += 1;
                            if n % 1000 == 0 {
                                std::thread::yield_now();
                            }
                        }
                        n
                    })
                })
                .collect();
            let drainer = s.spawn(|| {
                let mut seen = 0;
                while !done.load(Ordering::Acquire) {
                    drain(&r, &mut seen);
                }
                seen
            });
            let recorded = writers.into_iter().map(|w| w.join().unwrap()).sum();
            done.store(true, Ordering::Release);
            seen = drainer.join().unwrap();
            recorded
        });
        // The writers ended: one more drain takes what they left.
        drain(&r, &mut seen);
        (recorded, seen + r.dropped())
    }

    #[test]
    fn every_event_recorded_while_the_collector_drains_is_taken_exactly_once() {
        let (recorded, seen) = record_while_draining(|r, seen| {
            let mut spare = Vec::new();
            r.drain(&mut spare, |e| *seen += bytes(e));
            assert!(spare.is_empty());
        });
        assert_eq!(seen, recorded);
    }

    #[test]
    fn negative_control_a_drain_that_copies_then_clears_loses_events() {
        let (recorded, seen) = record_while_draining(|r, seen| {
            r.drain_copy_then_clear(|e| *seen += bytes(e));
        });
        assert!(
            seen < recorded,
            "the harness must see the loss: {seen} of {recorded}"
        );
    }

    #[test]
    fn a_thread_that_ended_is_drained_once_more_then_forgotten_keeping_its_drops() {
        let r = Recorder::new();
        std::thread::scope(|s| {
            s.spawn(|| r.record((0..THREAD_EVENTS + 3).map(|_| io(2))));
        });
        assert_eq!(r.threads(), 1);
        assert_eq!(r.dropped(), 3);
        let mut seen = 0;
        let mut spare = Vec::new();
        r.drain(&mut spare, |e| seen += bytes(e));
        assert_eq!(seen, 2 * THREAD_EVENTS as u64);
        // A scope's join may return before the thread's locals are torn down, so
        // the buffer is forgotten at this drain or a later one.
        for _ in 0..10_000 {
            if r.threads() == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            r.drain(&mut spare, |_| panic!("nothing is left"));
        }
        assert_eq!(r.threads(), 0, "the ended thread's buffer is forgotten");
        assert_eq!(r.dropped(), 3, "its drops still count");
    }

    #[test]
    fn a_live_thread_keeps_its_buffer_between_drains() {
        let r = Recorder::new();
        r.record(std::iter::once(io(5)));
        let mut spare = Vec::with_capacity(64);
        let mut seen = 0;
        r.drain(&mut spare, |e| seen += bytes(e));
        r.drain(&mut spare, |e| seen += bytes(e));
        assert_eq!((seen, r.threads()), (5, 1));
        r.record(std::iter::once(io(7)));
        r.drain(&mut spare, |e| seen += bytes(e));
        assert_eq!(seen, 12);
    }

    #[test]
    fn one_thread_recording_into_two_instances_keeps_their_events_apart() {
        let (a, b) = (Recorder::new(), Recorder::new());
        for i in 0..10 {
            a.record(std::iter::once(io(1)));
            b.record([io(100), io(100)].into_iter());
            if i == 5 {
                // A third instance that comes and goes: its buffer leaves this
                // thread's list at the next registration.
                let c = Recorder::new();
                c.record(std::iter::once(io(1000)));
            }
        }
        let (mut sa, mut sb) = (0, 0);
        let mut spare = Vec::new();
        a.drain(&mut spare, |e| sa += bytes(e));
        b.drain(&mut spare, |e| sb += bytes(e));
        assert_eq!((sa, sb), (10, 2000));
        let d = Recorder::new();
        d.record(std::iter::once(io(1)));
        MINE.with(|mine| assert_eq!(mine.borrow().len(), 3, "a, b and d; c is gone"));
    }
}
