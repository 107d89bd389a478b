//! kernels/select.cu compiled for the host with a C++ compiler (no GPU) and run under a small
//! SIMT emulation (one OS thread per CUDA thread, a barrier for `__syncthreads`, atomics for
//! `atomicAdd`): every row's candidates must equal [`RowCandidates::of_row`] bit for bit — rows
//! of distinct values, of heavy ties at the cut (the ranked-ties path), of NaN, infinities and
//! signed zeros, rows with fewer non-NaN logits than the capacity, all NaN, a subset of rows out
//! of order — at 512 threads (the launch's) and at 96 (chunks and strides that do not divide the
//! row); the planted control
//! (ties by the higher id) must differ. Skipped, with a message, when no C++ compiler runs
//! (`$CXX`, else `c++`); `TF_CUDA_REQUIRE_CXX=1` makes that a failure.

use std::io::Write;
use tf_kernels::contract::Rng;
use tf_models::RowCandidates;

/// The launch select.cu's harness uses: `blocks` blocks in a row, no dynamic shared memory.
const LAUNCH: &str = "template <class F> static void tf_launch(unsigned blocks, unsigned threads, F f) { tf_launch(D3{blocks, 1, 1}, threads, 0, f); }\n";

/// Reads cases from argv[1] (i32 n, vocab, cap, plant, threads, m, then n * vocab floats and m
/// row indices), writes each case's output (m * (2 + 2 * cap) i32) to argv[2] twice: by the
/// kernel's pool path (radix fallback for heavy ties), then with every row by the fallback.
const MAIN: &str = r#"
int main(int argc, char** argv) {
    FILE *fi, *fo;
    if (!tf_open_io(argc, argv, &fi, &fo)) return 2;
    int h[6];
    while (std::fread(h, 4, 6, fi) == 6) {
        const int n = h[0], vocab = h[1], cap = h[2], plant = h[3], threads = h[4], m = h[5];
        std::vector<float> x((size_t)n * vocab);
        if (std::fread(x.data(), 4, x.size(), fi) != x.size()) return 3;
        std::vector<int> rows(m);
        if (std::fread(rows.data(), 4, m, fi) != (size_t)m) return 3;
        for (int radix = 0; radix < 2; radix++) {
            std::vector<int> o((size_t)m * (2 + 2 * cap), 7777);
            tf_launch(m, threads, [&] {
                tf_select_topc(x.data(), rows.data(), vocab, cap, plant, radix, o.data());
            });
            std::fwrite(o.data(), 4, o.size(), fo);
        }
    }
    std::fclose(fo);
    return 0;
}
"#;

/// One emulated launch.
struct Case {
    label: String,
    rows: Vec<Vec<f32>>,
    /// The rows selected, in output order.
    pick: Vec<usize>,
    cap: usize,
    plant: bool,
    threads: i32,
}

/// One row's output as the kernel wrote it: (id, value bits) slots and (written, non-NaN).
type Out = (Vec<(i32, u32)>, (i32, i32));

/// Compiles select.cu for the host, runs every case, returns each row's output per case: by the
/// kernel's own path choice, then by the radix fallback.
fn run(cxx: &str, cases: &[Case]) -> Vec<[Vec<Out>; 2]> {
    let src = format!(
        "{}{LAUNCH}\n{}\n{MAIN}",
        crate::host_cxx::SIMT_PRELUDE,
        include_str!("../../kernels/select.cu")
    );
    let (dir, exe) = crate::host_cxx::build(cxx, "select", &src);
    let mut f = Vec::new();
    for c in cases {
        let vocab = c.rows[0].len();
        for v in [
            c.rows.len() as i32,
            vocab as i32,
            c.cap as i32,
            i32::from(c.plant),
            c.threads,
            c.pick.len() as i32,
        ] {
            f.write_all(&v.to_le_bytes()).unwrap();
        }
        for r in &c.rows {
            assert_eq!(r.len(), vocab);
            for x in r {
                f.write_all(&x.to_le_bytes()).unwrap();
            }
        }
        for &p in &c.pick {
            f.write_all(&(p as i32).to_le_bytes()).unwrap();
        }
    }
    let all = crate::host_cxx::run(&dir, &exe, "cases", &f);
    let _ = std::fs::remove_dir_all(&dir);
    let word = |i: usize| u32::from_le_bytes(all[4 * i..4 * i + 4].try_into().unwrap());
    let mut at = 0;
    let mut launch = |c: &Case| -> Vec<Out> {
        let (n, cap) = (c.pick.len(), c.cap);
        let base = at;
        at += n * (2 + 2 * cap);
        (0..n)
            .map(|r| {
                let slot = base + r * (2 + 2 * cap);
                let slots = (0..cap)
                    .map(|i| (word(slot + 2 + i) as i32, word(slot + 2 + cap + i)))
                    .collect();
                (slots, (word(slot) as i32, word(slot + 1) as i32))
            })
            .collect()
    };
    cases.iter().map(|c| [launch(c), launch(c)]).collect()
}

/// The output `row` must give: the reference candidates, then id -1 and value 0 slots.
fn want(row: &[f32], cap: usize) -> Out {
    let c = RowCandidates::of_row(row, cap);
    let mut slots: Vec<(i32, u32)> = c
        .top
        .iter()
        .map(|&(i, v)| (i as i32, v.to_bits()))
        .collect();
    let written = slots.len() as i32;
    slots.resize(cap, (-1, 0));
    (slots, (written, c.non_nan as i32))
}

/// Rows of one kind.
fn rows(rng: &mut Rng, kind: usize, n: usize, vocab: usize) -> Vec<Vec<f32>> {
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        -f32::NAN,
    ];
    (0..n)
        .map(|_| {
            (0..vocab)
                .map(|_| match kind {
                    // Distinct values.
                    0 => rng.normal() * 5.0,
                    // Three values: every cut falls inside a tie.
                    1 => rng.below(3) as f32,
                    // Quarter steps with specials.
                    2 => {
                        if rng.below(6) == 0 {
                            specials[rng.below(specials.len())]
                        } else {
                            (rng.normal() * 8.0).round() / 4.0
                        }
                    }
                    // Mostly NaN: fewer non-NaN logits than the capacity.
                    3 => {
                        if rng.below(40) == 0 {
                            (rng.normal() * 4.0).round()
                        } else {
                            f32::NAN
                        }
                    }
                    // One value everywhere.
                    4 => 1.5,
                    _ => f32::NAN,
                })
                .collect()
        })
        .collect()
}

#[test]
fn the_selection_on_the_host_equals_the_reference_candidates() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let mut rng = Rng::new(0x5e1ec7);
    let mut cases = Vec::new();
    for (threads, vocab) in [(512, 3001usize), (96, 1000)] {
        for kind in 0..6 {
            for cap in [256usize, 7, 1] {
                cases.push(Case {
                    label: format!("kind {kind} vocab {vocab} cap {cap} threads {threads}"),
                    rows: rows(&mut rng, kind, 2, vocab),
                    pick: vec![0, 1],
                    cap,
                    plant: false,
                    threads,
                });
            }
        }
    }
    cases.push(Case {
        label: "vocab 1".into(),
        rows: vec![vec![2.0], vec![f32::NAN]],
        pick: vec![0, 1],
        cap: 256,
        plant: false,
        threads: 512,
    });
    // Planted: ties ranked by the higher id (rows of three values tie everywhere).
    cases.push(Case {
        label: "planted ties by the higher id".into(),
        rows: rows(&mut rng, 1, 2, 1000),
        pick: vec![0, 1],
        cap: 256,
        plant: true,
        threads: 96,
    });
    // A subset of the rows, out of order and repeated (the wanted rows of a round).
    let mut mixed = rows(&mut rng, 0, 1, 2000);
    mixed.extend(rows(&mut rng, 2, 1, 2000));
    mixed.extend(rows(&mut rng, 1, 1, 2000));
    cases.push(Case {
        label: "rows 2, 0, 2 of 3".into(),
        rows: mixed,
        pick: vec![2, 0, 2],
        cap: 100,
        plant: false,
        threads: 512,
    });
    let outs = run(&cxx, &cases);
    for (c, out) in cases.iter().flat_map(|c| [c, c]).zip(outs.iter().flatten()) {
        let matches = c
            .pick
            .iter()
            .zip(out)
            .all(|(&p, o)| *o == want(&c.rows[p], c.cap));
        if c.plant {
            assert!(!matches, "{}: the planted control was not caught", c.label);
        } else {
            assert_eq!(out.len(), c.pick.len());
            for (&p, o) in c.pick.iter().zip(out) {
                assert_eq!(*o, want(&c.rows[p], c.cap), "{} row {p}", c.label);
            }
        }
    }
}
