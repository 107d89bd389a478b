//! The thread pool under the matmul: every task runs exactly once, back-to-back jobs, nested
//! and concurrent calls, panics.

use std::sync::atomic::{AtomicUsize, Ordering};
use tf_kernels::pool::Pool;

fn counts(pool: &Pool, n: usize) -> Vec<usize> {
    let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
    pool.run(n, |t| {
        hits[t].fetch_add(1, Ordering::Relaxed);
    });
    hits.into_iter().map(|h| h.into_inner()).collect()
}

#[test]
fn every_task_runs_exactly_once() {
    for threads in 1..=4 {
        let pool = Pool::new(threads);
        for n in [0usize, 1, 2, 3, 7, 64, 1000] {
            assert_eq!(counts(&pool, n), vec![1; n], "threads={threads} n={n}");
        }
    }
}

#[test]
fn many_back_to_back_jobs() {
    let pool = Pool::new(3);
    let total = AtomicUsize::new(0);
    for _ in 0..20_000 {
        pool.run(5, |t| {
            total.fetch_add(t + 1, Ordering::Relaxed);
        });
    }
    assert_eq!(total.into_inner(), 20_000 * 15);
}

#[test]
fn nested_and_concurrent_calls_complete() {
    let pool = Pool::new(2);
    let total = AtomicUsize::new(0);
    pool.run(4, |_| {
        pool.run(3, |_| {
            total.fetch_add(1, Ordering::Relaxed);
        });
    });
    assert_eq!(total.load(Ordering::Relaxed), 12);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for _ in 0..200 {
                    pool.run(4, |_| {
                        total.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
        }
    });
    assert_eq!(total.into_inner(), 12 + 3 * 200 * 4);
}

#[test]
fn a_panicking_task_is_reported_and_the_pool_survives() {
    let pool = Pool::new(2);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.run(8, |t| {
            if t == 5 {
                panic!("planted task failure");
            }
        })
    }));
    assert!(r.is_err(), "the panic must reach the caller");
    assert_eq!(counts(&pool, 9), vec![1; 9]);
}

#[test]
fn parked_workers_wake_up() {
    let pool = Pool::new(3);
    assert_eq!(counts(&pool, 6), vec![1; 6]);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(counts(&pool, 6), vec![1; 6]);
}
