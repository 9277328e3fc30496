//! Threads that run a batch's reads on several disks at once (`TopVdev::read_many` on
//! devices with a head), borrowing the batch's buffers.
//!
//! Why not `std::thread::scope`: a thread spawned per leaf read cost about 80-100 us
//! of CPU on a VM (pool-bench, 3x(4+1) on simulated disks: CPU per GB read up 50%),
//! and a read-ahead stream issues hundreds of batches a second. Why not a work-stealing
//! pool: its idle workers spin, and 80 of them doubled the CPU of the same run. These
//! threads block on a channel when idle and cost nothing.
//!
//! Invariant: `run_all` returns (or unwinds) only after every task it was given has
//! finished, so tasks may borrow from the caller's stack (the proof is at the one
//! `unsafe`). A task never waits for another task, so the threads always drain.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

type Task = Box<dyn FnOnce() + Send + 'static>;

/// 16 read-ahead workers times the 5 leaves of a 4+1 group: enough that every worker
/// can have a read on each leaf of a wide group at once.
const THREADS: usize = 80;
/// A reader only sorts pieces and reads into them.
const STACK_BYTES: usize = 64 << 10;

/// Counts a `run_all` call's unfinished tasks.
#[derive(Default)]
struct Latch {
    left: Mutex<usize>,
    done: Condvar,
    panicked: std::sync::atomic::AtomicBool,
}

impl Latch {
    fn count_down(&self) {
        let mut left = self.left.lock().unwrap_or_else(|e| e.into_inner());
        *left -= 1;
        if *left == 0 {
            self.done.notify_all();
        }
    }

    fn wait(&self) {
        let mut left = self.left.lock().unwrap_or_else(|e| e.into_inner());
        while *left > 0 {
            left = self.done.wait(left).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Waits for the latch however the caller leaves `run_all`, unwinding included.
struct WaitOnDrop<'l>(&'l Latch);

impl Drop for WaitOnDrop<'_> {
    fn drop(&mut self) {
        self.0.wait();
    }
}

fn sender() -> &'static Sender<Task> {
    static SENDER: OnceLock<Sender<Task>> = OnceLock::new();
    SENDER.get_or_init(|| {
        let (tx, rx) = channel::<Task>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..THREADS {
            let rx: Arc<Mutex<Receiver<Task>>> = rx.clone();
            std::thread::Builder::new()
                .name(format!("disk-read-{i}"))
                .stack_size(STACK_BYTES)
                .spawn(move || loop {
                    let task = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    match task {
                        Ok(task) => task(),
                        Err(_) => return,
                    }
                })
                .expect("start a disk reader thread");
        }
        tx
    })
}

/// Runs every task on the disk reader threads and returns when all have finished.
/// A task that panics does not stop the others; `run_all` panics after they finish.
pub fn run_all<'a>(tasks: Vec<Box<dyn FnOnce() + Send + 'a>>) {
    let latch = Arc::new(Latch::default());
    *latch.left.lock().unwrap() = tasks.len();
    let waiter = WaitOnDrop(&latch);
    for task in tasks {
        let mine = latch.clone();
        let wrapped: Box<dyn FnOnce() + Send + 'a> = Box::new(move || {
            if catch_unwind(AssertUnwindSafe(task)).is_err() {
                mine.panicked
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            mine.count_down();
        });
        // SAFETY: the task borrows data that lives for 'a, which outlasts this call.
        // The transmute only erases that lifetime (same layout: a boxed trait object).
        // The borrowed data is used only while the task runs, and this call cannot
        // return or unwind before the task has finished: `waiter` waits, in its drop,
        // for the latch to count every task down, and each task counts down as its
        // last step, after its body finished or panicked (caught above). A task that
        // was never sent (send failed) is run right here instead, so it counts down too.
        let wrapped: Task =
            unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'a>, Task>(wrapped) };
        let sent = sender().send(wrapped);
        if let Err(unsent) = sent {
            (unsent.0)();
        }
    }
    drop(waiter);
    assert!(
        !latch.panicked.load(std::sync::atomic::Ordering::Relaxed),
        "a disk reader task panicked"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_borrow_the_callers_buffers_and_all_finish_before_return() {
        let mut bufs = vec![vec![0u8; 4096]; 12];
        let tasks: Vec<Box<dyn FnOnce() + Send + '_>> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| {
                Box::new(move || {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    b.fill(i as u8 + 1);
                }) as Box<dyn FnOnce() + Send + '_>
            })
            .collect();
        run_all(tasks);
        for (i, b) in bufs.iter().enumerate() {
            assert!(b.iter().all(|&x| x == i as u8 + 1), "task {i} unfinished");
        }
    }

    #[test]
    fn a_panicking_task_lets_the_others_finish_then_panics_the_caller() {
        let finished = std::sync::atomic::AtomicUsize::new(0);
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let tasks: Vec<Box<dyn FnOnce() + Send + '_>> = (0..4)
                .map(|i| {
                    let finished = &finished;
                    Box::new(move || {
                        if i == 0 {
                            panic!("injected");
                        }
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }) as Box<dyn FnOnce() + Send + '_>
                })
                .collect();
            run_all(tasks);
        }));
        assert!(result.is_err());
        assert_eq!(finished.load(std::sync::atomic::Ordering::SeqCst), 3);
    }
}
