//! Matmul throughput on the default model's shapes (SmolLM2-135M Q4_1 GGUF), printing
//! µs per call, GB/s of packed weights read and GFLOP/s, for n = 1 and n = 512 rows and
//! 1 and 2 threads, plus the sum over one forward (`bf16` as an argument: the opt-in
//! bf16-activation variant). With 1 thread the rates use the main
//! thread's on-CPU time (robust to a busy machine); with 2 threads, wall time. Run:
//! `cargo bench -p tf-kernels --bench matmul` (optional args: `n=1,512 threads=1,2`).

#[path = "../tests/matmul_support/mod.rs"]
mod matmul_support;

use matmul_support::{Fmt, Owned, Rng};
use std::time::Instant;
use tf_formats::gguf::GgmlType;
use tf_kernels::matmul::{matmul, matmul_bf16_activations, PackedMatrix, SimdLevel};
use tf_kernels::pool::Pool;

/// (name, format, rows, cols, uses per decode step)
const SHAPES: [(&str, GgmlType, usize, usize, usize); 5] = [
    ("attn_q/o 576x576", GgmlType::Q4_1, 576, 576, 60),
    ("attn_k/v 192x576", GgmlType::Q4_1, 192, 576, 60),
    ("ffn_gate/up 1536x576", GgmlType::Q4_1, 1536, 576, 60),
    ("ffn_down 576x1536", GgmlType::Q4_1, 576, 1536, 30),
    ("head 49152x576 (Q8_0)", GgmlType::Q8_0, 49152, 576, 1),
];

/// Nanoseconds the calling thread has spent on a CPU (Linux; 0 elsewhere), so that a busy
/// shared machine's waiting time can be told apart from the kernel's own time.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn list(args: &[String], key: &str, default: &[usize]) -> Vec<usize> {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("{key}=")))
        .map(|v| v.split(',').filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ns = list(&args, "n", &[1, 512]);
    let threads = list(&args, "threads", &[1, 2]);
    // `bf16` benches the opt-in bf16-activation variant instead of the default f32 path.
    let bf16 = args.iter().any(|a| a == "bf16");
    let mm = |m: &PackedMatrix, x: &[f32], n: usize, y: &mut [f32], pool: &Pool| {
        if bf16 {
            matmul_bf16_activations(m, x, n, y, pool).expect("bf16 matmul")
        } else {
            matmul(m, x, n, y, pool).expect("matmul")
        }
    };
    println!(
        "level {:?}{}",
        SimdLevel::detect(),
        if bf16 { ", bf16 activations" } else { "" }
    );
    let mut rng = Rng(42);
    let weights: Vec<Owned> = SHAPES
        .iter()
        .map(|&(_, ty, r, c, _)| Owned::random(Fmt::Gguf(ty), r, c, &mut rng))
        .collect();
    for &t in &threads {
        let pool = Pool::new(t);
        let (iters, start) = (20_000u32, Instant::now());
        for _ in 0..iters {
            pool.run(t, |task| {
                std::hint::black_box(task);
            });
        }
        println!(
            "threads={t} empty pool.run({t} tasks): {:.2} us per call",
            start.elapsed().as_secs_f64() * 1e6 / iters as f64
        );
        for &n in &ns {
            let mut step_s = 0.0;
            for (s, w) in SHAPES.iter().zip(&weights) {
                let m = w.matrix();
                let x = rng.vec(n * w.cols);
                let mut y = vec![0f32; n * w.rows];
                mm(&m, &x, n, &mut y, &pool);
                let (mut iters, start, cpu0) = (0u64, Instant::now(), thread_cpu_ns());
                while start.elapsed().as_secs_f64() < 0.4 || iters < 3 {
                    mm(&m, &x, n, &mut y, &pool);
                    iters += 1;
                }
                let per = start.elapsed().as_secs_f64() / iters as f64;
                let cpu = (thread_cpu_ns() - cpu0) as f64 * 1e-9 / iters as f64;
                // With one thread, on-CPU time is the kernel's time net of waiting for a core.
                let t_eff = if t == 1 && cpu > 0.0 { cpu } else { per };
                step_s += t_eff * s.4 as f64;
                println!(
                    "threads={t} n={n:<4} {:<24} wall {:>9.1} us  cpu {:>9.1} us  {:>6.2} GB/s  {:>6.1} GFLOP/s",
                    s.0,
                    per * 1e6,
                    cpu * 1e6,
                    m.storage_bytes() as f64 / t_eff / 1e9,
                    2.0 * (w.rows * w.cols * n) as f64 / t_eff / 1e9
                );
            }
            println!(
                "threads={t} n={n:<4} all matmuls of one forward: {:.2} ms  ({:.0} tok/s if matmuls were all)",
                step_s * 1e3,
                n as f64 / step_s
            );
        }
    }
}
