//! How much of one stream's read-ahead is at the devices at once.
//!
//! The read-ahead workers take jobs from one queue in the order streams issued them.
//! Without a bound per stream, a lone stream of 4 MiB jobs had all 16 workers reading
//! its window at once (64 MiB in flight), and a device serves what it holds together:
//! the job the reader needs next came back no sooner than the 15 behind it, about as
//! late as the reader got there, so the reader caught up and waited. Bounded per
//! stream, the jobs beyond the bound wait their turn in shoal, in order, and the disk
//! still has enough in flight to stream (24 MiB; this VM's disk streams at 4 MiB in
//! flight). Four streams still use every worker, as four need (a pool-wide bound
//! measured worse for them).
//!
//! A stream here is one of the stream detector's (`prefetch::StreamId`), so readers
//! of different parts of one file, each a stream of its own, have a bound each. Keyed
//! by object, four readers of a quarter of one 4 GiB file had one bound between them
//! and read 1,481-1,637 MB/s from this VM's disk in 1.3 MiB requests; keyed by stream,
//! 1,669-1,724 in 2.6 MiB requests (three rounds, builds alternating).
//!
//! Invariants: a stream's entry exists while it has a job running or waiting; its
//! running bytes are the sum of the jobs `admit` or `finish` let start and that have
//! not finished; a job waits only behind a running job of its own stream, so every
//! waiting job is started by a `finish`, never stranded.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// A stream: the detector's id for it.
pub(crate) type StreamKey = crate::prefetch::StreamId;

/// Per stream, the read-ahead running and the jobs in line behind it.
pub(crate) struct StreamGate<J> {
    limit_bytes: u64,
    streams: Mutex<HashMap<StreamKey, Line<J>>>,
}

struct Line<J> {
    running_bytes: u64,
    waiting: VecDeque<(J, u64)>,
}

impl<J> StreamGate<J> {
    /// A gate letting each stream have `limit_bytes` of jobs running (always one job,
    /// however large).
    pub(crate) fn new(limit_bytes: u64) -> Self {
        StreamGate {
            limit_bytes,
            streams: Mutex::new(HashMap::new()),
        }
    }

    /// `job` (of `bytes`) may start now: it is handed back, counted as running.
    /// Otherwise it joins the end of its stream's line and `None` is answered.
    pub(crate) fn admit(&self, key: StreamKey, job: J, bytes: u64) -> Option<J> {
        let mut streams = self.streams.lock().unwrap();
        let line = streams.entry(key).or_insert_with(|| Line {
            running_bytes: 0,
            waiting: VecDeque::new(),
        });
        let fits =
            line.running_bytes == 0 || line.running_bytes.saturating_add(bytes) <= self.limit_bytes;
        if fits && line.waiting.is_empty() {
            line.running_bytes += bytes;
            Some(job)
        } else {
            line.waiting.push_back((job, bytes));
            None
        }
    }

    /// A running job of `key` (of `bytes`) has ended: the next jobs in its line that
    /// now fit are counted as running and handed back, to be run by the caller.
    pub(crate) fn finish(&self, key: StreamKey, bytes: u64) -> Vec<(J, u64)> {
        let mut streams = self.streams.lock().unwrap();
        let Some(line) = streams.get_mut(&key) else {
            unreachable!("a job finished for stream {key:?}, which has none running");
        };
        assert!(
            line.running_bytes >= bytes,
            "stream {key:?} ends {bytes} bytes of {} running",
            line.running_bytes
        );
        line.running_bytes -= bytes;
        let mut start = Vec::new();
        while let Some(&(_, next)) = line.waiting.front() {
            let fits = line.running_bytes == 0
                || line.running_bytes.saturating_add(next) <= self.limit_bytes;
            if !fits {
                break;
            }
            line.running_bytes += next;
            start.push(line.waiting.pop_front().unwrap());
        }
        if line.running_bytes == 0 && line.waiting.is_empty() {
            streams.remove(&key);
        }
        start
    }

    /// Streams with read-ahead running or waiting.
    #[cfg(test)]
    fn streams(&self) -> usize {
        self.streams.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_stream_runs_up_to_its_bound_and_the_rest_wait_in_order() {
        let gate = StreamGate::new(24 * MIB);
        let a = 1;
        let started: Vec<Option<u32>> = (0..8).map(|j| gate.admit(a, j, 4 * MIB)).collect();
        assert_eq!(
            started,
            [
                Some(0),
                Some(1),
                Some(2),
                Some(3),
                Some(4),
                Some(5),
                None,
                None
            ]
        );
        // Another stream is not held up by the first one's line.
        assert_eq!(gate.admit(2, 100, 4 * MIB), Some(100));
        // Each job that ends lets the next in line start, in the order they came.
        assert_eq!(gate.finish(a, 4 * MIB), vec![(6, 4 * MIB)]);
        assert_eq!(gate.finish(a, 4 * MIB), vec![(7, 4 * MIB)]);
        assert!(gate.finish(a, 4 * MIB).is_empty());
        for _ in 0..5 {
            assert!(gate.finish(a, 4 * MIB).is_empty());
        }
        assert_eq!(gate.streams(), 1, "stream b still runs; a is forgotten");
        assert!(gate.finish(2, 4 * MIB).is_empty());
        assert_eq!(gate.streams(), 0);
    }

    #[test]
    fn small_jobs_fill_the_bound_and_a_large_one_still_runs_alone() {
        let gate = StreamGate::new(24 * MIB);
        let a = 3;
        let small = (0..30).filter(|&j| gate.admit(a, j, MIB).is_some()).count();
        assert_eq!(small, 24);
        // A job larger than the bound waits until the stream has nothing running, and
        // one that comes after it waits behind it, even when it would fit sooner.
        assert_eq!(gate.admit(a, 99, 64 * MIB), None);
        assert_eq!(gate.admit(a, 100, MIB), None);
        let mut started = Vec::new();
        for _ in 0..24 {
            started.extend(gate.finish(a, MIB));
        }
        // The six small ones waiting started as room came; the large one waits for them.
        assert_eq!(started.len(), 6);
        assert!(started.iter().all(|&(j, _)| j != 99));
        let mut last = Vec::new();
        for _ in 0..6 {
            last.extend(gate.finish(a, MIB));
        }
        assert_eq!(last, vec![(99, 64 * MIB)]);
        assert_eq!(gate.finish(a, 64 * MIB), vec![(100, MIB)]);
        assert!(gate.finish(a, MIB).is_empty());
        assert_eq!(gate.streams(), 0);
    }
}
