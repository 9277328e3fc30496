//! The operation gate of one filesystem. Every public operation passes it; a rollback
//! of the filesystem while it is open (shared, mounted) closes it: operations that
//! arrive wait, the ones inside finish, the rollback runs alone, and the gate opens
//! again, so no operation ever sees half of a rollback or writes into the rolled-back
//! object set with what it read before.
//!
//! Passing costs two atomic additions and a thread-local lookup. An operation that
//! calls another public operation of the same filesystem (most call `getattr`) passes
//! again without waiting: the thread is already inside, and the closer is waiting for
//! it to leave, so waiting there would deadlock. The closer's own thread is inside too,
//! so the rollback's own calls pass.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

static NEXT_GATE_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The gates this thread is inside, innermost last (a handful at most).
    static INSIDE: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

pub(crate) struct Gate {
    id: u64,
    /// Operations inside (those that passed first on their thread).
    inside: AtomicUsize,
    closed: AtomicBool,
    lock: Mutex<()>,
    changed: Condvar,
}

/// Why `Gate::close` did not close the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotClosed {
    /// Another thread holds it closed.
    ClosedAlready,
    /// Operations were still inside when the wait ran out.
    StillInside,
    /// The caller is inside an operation of this filesystem.
    FromInside,
}

/// Being inside the gate; leaving on drop.
pub(crate) struct Pass<'a> {
    gate: &'a Gate,
    /// The first pass of this thread (it counts in `inside`).
    first: bool,
}

impl Gate {
    pub(crate) fn new() -> Gate {
        Gate {
            id: NEXT_GATE_ID.fetch_add(1, Ordering::Relaxed),
            inside: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            lock: Mutex::new(()),
            changed: Condvar::new(),
        }
    }

    fn this_thread_inside(&self) -> bool {
        INSIDE.with(|v| v.borrow().contains(&self.id))
    }

    /// Passes the gate, waiting while it is closed (unless this thread is inside).
    pub(crate) fn pass(&self) -> Pass<'_> {
        if self.this_thread_inside() {
            return Pass {
                gate: self,
                first: false,
            };
        }
        loop {
            // Counted first, then the flag read: a closer sets the flag first, then
            // reads the count (both SeqCst), so one of the two sees the other.
            self.inside.fetch_add(1, Ordering::SeqCst);
            if !self.closed.load(Ordering::SeqCst) {
                break;
            }
            self.leave();
            let mut g = self.lock.lock().unwrap();
            while self.closed.load(Ordering::SeqCst) {
                g = self.changed.wait(g).unwrap();
            }
        }
        INSIDE.with(|v| v.borrow_mut().push(self.id));
        Pass {
            gate: self,
            first: true,
        }
    }

    fn leave(&self) {
        if self.inside.fetch_sub(1, Ordering::SeqCst) == 1 && self.closed.load(Ordering::SeqCst) {
            let _g = self.lock.lock().unwrap();
            self.changed.notify_all();
        }
    }

    /// Closes the gate and waits until every operation inside has left, for at most
    /// `wait`: past it the gate opens again and `StillInside` is answered; a gate
    /// another thread has closed answers `ClosedAlready` and stays as it is. While
    /// closed, the calling thread passes freely; `open` must follow on it.
    pub(crate) fn close(&self, wait: Duration) -> Result<(), NotClosed> {
        if self.this_thread_inside() {
            return Err(NotClosed::FromInside);
        }
        let deadline = Instant::now() + wait;
        let mut g = self.lock.lock().unwrap();
        if self.closed.swap(true, Ordering::SeqCst) {
            return Err(NotClosed::ClosedAlready);
        }
        while self.inside.load(Ordering::SeqCst) > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.closed.store(false, Ordering::SeqCst);
                self.changed.notify_all();
                return Err(NotClosed::StillInside);
            }
            g = self.changed.wait_timeout(g, left).unwrap().0;
        }
        drop(g);
        INSIDE.with(|v| v.borrow_mut().push(self.id));
        Ok(())
    }

    /// Opens the gate closed by this thread.
    pub(crate) fn open(&self) {
        INSIDE.with(|v| v.borrow_mut().retain(|id| *id != self.id));
        self.open_locked();
    }

    fn open_locked(&self) {
        let _g = self.lock.lock().unwrap();
        self.closed.store(false, Ordering::SeqCst);
        self.changed.notify_all();
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if self.first {
            INSIDE.with(|v| {
                let mut v = v.borrow_mut();
                let at = v.iter().rposition(|id| *id == self.gate.id);
                debug_assert!(at.is_some(), "a pass leaves the gate it entered");
                if let Some(at) = at {
                    v.remove(at);
                }
            });
            self.gate.leave();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_closed_gate_waits_for_those_inside_and_holds_newcomers() {
        let gate = Arc::new(Gate::new());
        let opened = Arc::new(AtomicBool::new(false));
        let inside = gate.pass();
        // Re-entry on the same thread never waits.
        drop(gate.pass());
        let (g2, opened2) = (gate.clone(), opened.clone());
        let (tx, rx) = std::sync::mpsc::channel::<bool>();
        let closer = std::thread::spawn(move || {
            let closed = g2.close(Duration::from_secs(10)).is_ok();
            // Inside while closed: the closer's own calls pass.
            drop(g2.pass());
            tx.send(closed).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            opened2.store(true, Ordering::SeqCst);
            g2.open();
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            rx.try_recv().is_err(),
            "closed while an operation was inside"
        );
        drop(inside);
        assert!(rx.recv().unwrap(), "the close drained");
        // A newcomer passes only once the gate is open again.
        let g3 = gate.clone();
        let newcomer = std::thread::spawn(move || {
            drop(g3.pass());
            opened.load(Ordering::SeqCst)
        });
        assert!(newcomer.join().unwrap(), "passed a closed gate");
        closer.join().unwrap();
        assert_eq!(gate.inside.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_close_that_cannot_drain_gives_up_and_a_second_closer_is_refused() {
        let gate = Arc::new(Gate::new());
        let g2 = gate.clone();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _p = g2.pass();
            rx.recv().unwrap();
        });
        while gate.inside.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        assert_eq!(
            gate.close(Duration::from_millis(30)),
            Err(NotClosed::StillInside)
        );
        assert!(!gate.closed.load(Ordering::SeqCst));
        // A second closer is told so, and the first one's close stands.
        drop(gate.pass());
        tx.send(()).unwrap();
        holder.join().unwrap();
        assert_eq!(gate.close(Duration::from_secs(1)), Ok(()));
        let g3 = gate.clone();
        let second = std::thread::spawn(move || g3.close(Duration::from_secs(1)));
        assert_eq!(second.join().unwrap(), Err(NotClosed::ClosedAlready));
        assert!(gate.closed.load(Ordering::SeqCst));
        gate.open();
        drop(gate.pass());
    }
}
