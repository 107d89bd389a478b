//! A small persistent thread pool for the CPU kernels: `pool.run(n_tasks, |task| ...)`.
//!
//! The calling thread works too; `threads - 1` workers spin briefly on the job counter after
//! each job (so back-to-back matmuls dispatch in about a microsecond) and then park. Tasks
//! are claimed dynamically, so which thread runs a task varies; kernels therefore make each
//! task's result independent of who runs it (matmul splits output columns, never `k`).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Spin iterations a worker waits for the next job before parking.
const SPIN_ITERS: u32 = 1 << 16;

/// A job as the workers see it: the caller's closure, type-erased.
type Job<'a> = dyn Fn(usize) + Sync + 'a;

/// State word: generation (24 bits) | n_tasks (20 bits) | next task (20 bits).
const FIELD: u64 = (1 << 20) - 1;
/// Largest task count one `run` call dispatches at once (more are run in rounds).
const MAX_TASKS: usize = FIELD as usize;

struct Shared {
    state: AtomicU64,
    /// Points at a `&Job` on the caller's stack, valid while a job of the current generation
    /// has unfinished tasks.
    job: AtomicPtr<&'static Job<'static>>,
    done: AtomicUsize,
    panicked: AtomicBool,
    sleepers: AtomicUsize,
    shutdown: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

/// A persistent pool of `threads` threads (the caller counts as one).
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
    /// Serializes concurrent `run` calls from different threads.
    caller: Mutex<()>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.threads)
            .finish()
    }
}

fn unpack(s: u64) -> (u64, usize, usize) {
    (s >> 40, ((s >> 20) & FIELD) as usize, (s & FIELD) as usize)
}

impl Shared {
    /// Claims and runs tasks of the current job until none is left. Returns whether a job of
    /// generation `gen` was seen (false if the state moved to another generation).
    fn work(&self, gen: u64) {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            let (g, n, next) = unpack(s);
            if g != gen || next >= n {
                return;
            }
            match self
                .state
                .compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    // SAFETY: we claimed task `next` of generation `gen`; the caller of `run`
                    // does not return (so the closure stays alive) until `done` counts it.
                    let job: &Job = unsafe { *self.job.load(Ordering::Acquire) };
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(next)));
                    if r.is_err() {
                        self.panicked.store(true, Ordering::Relaxed);
                    }
                    self.done.fetch_add(1, Ordering::AcqRel);
                    s = self.state.load(Ordering::Acquire);
                }
                Err(cur) => s = cur,
            }
        }
    }

    fn worker_loop(&self) {
        let mut seen = unpack(self.state.load(Ordering::Acquire)).0;
        loop {
            // Spin, then park, until a new generation appears.
            let mut spins = 0u32;
            let gen = loop {
                if self.shutdown.load(Ordering::Acquire) {
                    return;
                }
                let g = unpack(self.state.load(Ordering::Acquire)).0;
                if g != seen {
                    break g;
                }
                if spins < SPIN_ITERS {
                    spins += 1;
                    std::hint::spin_loop();
                    continue;
                }
                self.sleepers.fetch_add(1, Ordering::SeqCst);
                let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                while unpack(self.state.load(Ordering::SeqCst)).0 == seen
                    && !self.shutdown.load(Ordering::SeqCst)
                {
                    guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                drop(guard);
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                spins = 0;
            };
            seen = gen;
            self.work(gen);
        }
    }

    fn notify(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_all();
        }
    }
}

impl Pool {
    /// A pool of `threads` threads in total (at least 1; 1 runs everything on the caller).
    pub fn new(threads: usize) -> Pool {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let workers = (1..threads)
            .map(|i| {
                let sh = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("tf-pool-{i}"))
                    .spawn(move || sh.worker_loop())
                    .expect("spawning a pool thread")
            })
            .collect();
        Pool {
            shared,
            workers,
            threads,
            caller: Mutex::new(()),
        }
    }

    /// Threads in the pool, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f(task)` for every task in `0..n_tasks`, spread over the pool's threads, and
    /// returns when all have finished. Panics (after all tasks finished) if a task panicked.
    pub fn run<F: Fn(usize) + Sync>(&self, n_tasks: usize, f: F) {
        if n_tasks == 0 {
            return;
        }
        if self.threads == 1 || n_tasks == 1 {
            (0..n_tasks).for_each(f);
            return;
        }
        // One job at a time: a concurrent caller, or a task calling `run` again (nested), runs
        // its tasks serially on its own thread instead of waiting (which could deadlock).
        let _one_caller = match self.caller.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                (0..n_tasks).for_each(f);
                return;
            }
        };
        let mut start = 0;
        while start < n_tasks {
            let count = (n_tasks - start).min(MAX_TASKS);
            let shifted = |t: usize| f(start + t);
            self.run_round(count, &shifted);
            start += count;
        }
    }

    fn run_round(&self, n: usize, f: &Job) {
        let sh = &*self.shared;
        // SAFETY (lifetime erasure): `job` is only dereferenced for tasks of this generation,
        // and this function waits until all of them are done before returning.
        let erased: &'static Job<'static> =
            unsafe { std::mem::transmute::<&Job, &'static Job<'static>>(f) };
        let mut slot = erased;
        sh.job.store(&mut slot as *mut _, Ordering::Release);
        sh.done.store(0, Ordering::Relaxed);
        let gen = (unpack(sh.state.load(Ordering::Relaxed)).0 + 1) & ((1 << 24) - 1);
        sh.state
            .store((gen << 40) | ((n as u64) << 20), Ordering::SeqCst);
        sh.notify();
        sh.work(gen);
        let mut spins = 0u32;
        while sh.done.load(Ordering::Acquire) < n {
            spins = spins.wrapping_add(1);
            if spins & 1023 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        if sh.panicked.swap(false, Ordering::Relaxed) {
            panic!("a pool task panicked");
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _g = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
