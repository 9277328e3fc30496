//! Threads that run a batch's reads on several disks at once (`TopVdev::read_many` on
//! devices with a head), borrowing the batch's buffers.
//!
//! Why not `std::thread::scope`: a thread spawned per leaf read cost about 80-100 us
//! of CPU on a VM (pool-bench, 3x(4+1) on simulated disks: CPU per GB read up 50%),
//! and a read-ahead stream issues hundreds of batches a second. Why not a work-stealing
//! pool: its idle workers spin, and 80 of them doubled the CPU of the same run. These
//! threads sleep on a queue when idle and cost nothing.
//!
//! The caller runs the last task itself rather than wait idle: one hand-off fewer per
//! batch, and a batch on two leaves wakes one thread, not two. Threads take tasks from
//! a `WorkQueue` and the latch wakes the caller only when it is asleep: a futex call
//! per task and per finish (std's condvar makes one even with nobody waiting) was a
//! large part of the read-ahead threads' CPU on a stream from disk.
//!
//! Invariant: `run_all` returns (or unwinds) only after every task it was given has
//! finished, so tasks may borrow from the caller's stack (the proof is at the one
//! `unsafe`). A task never waits for another task, so the threads always drain.

use crate::work_queue::{QueueSender, WorkQueue};
use std::panic::{catch_unwind, AssertUnwindSafe};
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
    /// (tasks left, whether the caller sleeps on `done`)
    left: Mutex<(usize, bool)>,
    done: Condvar,
    panicked: std::sync::atomic::AtomicBool,
}

impl Latch {
    fn count_down(&self) {
        let mut left = self.left.lock().unwrap_or_else(|e| e.into_inner());
        left.0 -= 1;
        if left.0 == 0 && left.1 {
            self.done.notify_all();
        }
    }

    fn wait(&self) {
        let mut left = self.left.lock().unwrap_or_else(|e| e.into_inner());
        while left.0 > 0 {
            left.1 = true;
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

fn sender() -> &'static QueueSender<Task> {
    static SENDER: OnceLock<QueueSender<Task>> = OnceLock::new();
    SENDER.get_or_init(|| {
        let (tx, rx) = WorkQueue::<Task>::new(usize::MAX);
        for i in 0..THREADS {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("disk-read-{i}"))
                .stack_size(STACK_BYTES)
                .spawn(move || {
                    while let Some(task) = rx.pop() {
                        task();
                    }
                })
                .expect("start a disk reader thread");
        }
        tx
    })
}

/// Runs every task, the last on the calling thread and the others on the disk reader
/// threads, and returns when all have finished. A task that panics does not stop the
/// others; `run_all` panics after they finish.
pub fn run_all<'a>(mut tasks: Vec<Box<dyn FnOnce() + Send + 'a>>) {
    let Some(mine) = tasks.pop() else {
        return;
    };
    let latch = Arc::new(Latch::default());
    latch.left.lock().unwrap().0 = tasks.len();
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
        // last step, after its body finished or panicked (caught above). The queue
        // never refuses a `push` and its threads run until the process ends (the
        // sender is static), so every task sent is run.
        let wrapped: Task =
            unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'a>, Task>(wrapped) };
        sender().push(wrapped);
    }
    if catch_unwind(AssertUnwindSafe(mine)).is_err() {
        latch
            .panicked
            .store(true, std::sync::atomic::Ordering::Relaxed);
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
        // Task 0 runs on a reader thread, task 3 (the last) on the calling thread.
        for panicking in [0, 3] {
            let finished = std::sync::atomic::AtomicUsize::new(0);
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                let tasks: Vec<Box<dyn FnOnce() + Send + '_>> = (0..4)
                    .map(|i| {
                        let finished = &finished;
                        Box::new(move || {
                            if i == panicking {
                                panic!("injected");
                            }
                            std::thread::sleep(std::time::Duration::from_millis(5));
                            finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }) as Box<dyn FnOnce() + Send + '_>
                    })
                    .collect();
                run_all(tasks);
            }));
            assert!(result.is_err(), "task {panicking} panicked");
            assert_eq!(finished.load(std::sync::atomic::Ordering::SeqCst), 3);
        }
    }

    #[test]
    fn no_tasks_and_one_task_need_no_thread() {
        run_all(Vec::new());
        let mut hit = false;
        run_all(vec![
            Box::new(|| hit = true) as Box<dyn FnOnce() + Send + '_>
        ]);
        assert!(hit);
    }
}
