//! A queue of work for a fixed set of worker threads: a `VecDeque` under a mutex, idle
//! workers asleep on a condvar, and a count of the sleepers so that a push wakes a
//! worker only when one is asleep.
//!
//! Why not a channel: std's `Condvar::notify_one` makes a futex system call whether or
//! not anyone waits, and crossbeam's channel spins and `sched_yield`s in every idle
//! receiver before it sleeps. On a stream from disk the read-ahead, disk reader and RPC
//! worker hand-offs come thousands of times a second; those system calls and yields
//! were CPU the client and the busy workers needed on a small machine. Here a push to
//! busy workers costs a lock and a `VecDeque::push_back`, and an idle worker costs
//! nothing.
//!
//! Invariants: `pop` returns `None` only once the queue is empty and every
//! `QueueSender` is gone (so workers drain what was queued before they exit); a push
//! that finds a sleeper wakes exactly one; `try_push` never blocks and refuses work
//! beyond the bound.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

struct State<T> {
    jobs: VecDeque<T>,
    senders: usize,
    sleeping: usize,
}

/// The workers' end: `pop` waits for work.
pub struct WorkQueue<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    bound: usize,
}

/// The producers' end; the queue closes when the last one is dropped.
pub struct QueueSender<T>(Arc<WorkQueue<T>>);

impl<T> WorkQueue<T> {
    /// A queue holding at most `bound` jobs for `try_push` (`push` ignores it).
    pub fn new(bound: usize) -> (QueueSender<T>, Arc<WorkQueue<T>>) {
        let q = Arc::new(WorkQueue {
            state: Mutex::new(State {
                jobs: VecDeque::new(),
                senders: 1,
                sleeping: 0,
            }),
            ready: Condvar::new(),
            bound,
        });
        (QueueSender(q.clone()), q)
    }

    /// The next job; `None` once the queue is empty and closed.
    pub fn pop(&self) -> Option<T> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(job) = st.jobs.pop_front() {
                return Some(job);
            }
            if st.senders == 0 {
                return None;
            }
            st.sleeping += 1;
            st = self.ready.wait(st).unwrap_or_else(|e| e.into_inner());
            st.sleeping -= 1;
        }
    }
}

impl<T> QueueSender<T> {
    /// Queues `job` whatever the queue's length.
    pub fn push(&self, job: T) {
        let wake = {
            let mut st = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
            st.jobs.push_back(job);
            st.sleeping > 0
        };
        if wake {
            self.0.ready.notify_one();
        }
    }

    /// Queues `job` unless the queue already holds its bound; gives it back if not.
    pub fn try_push(&self, job: T) -> Result<(), T> {
        let wake = {
            let mut st = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
            if st.jobs.len() >= self.0.bound {
                return Err(job);
            }
            st.jobs.push_back(job);
            st.sleeping > 0
        };
        if wake {
            self.0.ready.notify_one();
        }
        Ok(())
    }
}

impl<T> Clone for QueueSender<T> {
    fn clone(&self) -> QueueSender<T> {
        self.0
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .senders += 1;
        QueueSender(self.0.clone())
    }
}

impl<T> Drop for QueueSender<T> {
    fn drop(&mut self) {
        let mut st = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        st.senders -= 1;
        if st.senders == 0 {
            self.0.ready.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn workers_take_every_job_then_end_when_the_senders_are_gone() {
        let (tx, rx) = WorkQueue::<usize>::new(usize::MAX);
        let sum = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (rx, sum) = (rx.clone(), sum.clone());
                std::thread::spawn(move || {
                    while let Some(j) = rx.pop() {
                        sum.fetch_add(j, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let tx2 = tx.clone();
        for j in 1..=1000 {
            if j % 2 == 0 { &tx } else { &tx2 }.push(j);
        }
        drop(tx);
        drop(tx2);
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(sum.load(Ordering::Relaxed), 500_500);
    }

    #[test]
    fn try_push_refuses_beyond_the_bound_and_pop_drains_after_close() {
        let (tx, rx) = WorkQueue::new(2);
        assert!(tx.try_push(1).is_ok());
        assert!(tx.try_push(2).is_ok());
        assert_eq!(tx.try_push(3), Err(3));
        tx.push(4); // push ignores the bound
        drop(tx);
        let got: Vec<i32> = std::iter::from_fn(|| rx.pop()).collect();
        assert_eq!(got, vec![1, 2, 4]);
    }

    #[test]
    fn a_push_wakes_a_sleeping_worker() {
        let (tx, rx) = WorkQueue::new(8);
        let worker = std::thread::spawn(move || rx.pop());
        // Wait until the worker sleeps, so the push must wake it.
        while tx.0.state.lock().unwrap().sleeping == 0 {
            std::thread::yield_now();
        }
        tx.push(7);
        assert_eq!(worker.join().unwrap(), Some(7));
    }
}
