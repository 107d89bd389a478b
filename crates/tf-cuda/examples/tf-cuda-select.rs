//! `tf-cuda-select [--quick] [--iters N] [--model PATH]`: the sampler's candidate selection on
//! GPU 0. Checks the GPU candidates against the host selection bit for bit (vocabularies 49152
//! and 131072, 1..=64 rows, the logit gather, the planted ties-by-higher-id control caught),
//! then times, per vocabulary and row count, downloading whole logits rows against selecting
//! and downloading candidates (median wall time of N rounds, each ending in a synchronizing
//! download), and the selection kernel alone on logit-like rows, by its pool path and by its
//! radix fallback (device time of N back-to-back launches). With `--model`, the CUDA backend's `forward_candidates` on that checkpoint against
//! its `forward` on the same rows (prefill rounds of one and of several launch chunks, decode
//! rounds): candidates == the host selection of the whole rows, `candidate_row` and the rows
//! carried whole == the whole row, the carried logits == the row's, bit for bit (reported as off when the GPU model does
//! not expose its logits). Prints PASS/FAIL last. Exit status: 0 pass, 1 fail, 2 no usable GPU.

use std::process::ExitCode;
use std::time::Instant;
use tf_cuda::select::{select, select_with, GpuCandidates, SELECT_CAP};
use tf_cuda::suite::select::{test_rows, VOCABS};
use tf_cuda::suite::{Depth, SuiteResult};
use tf_cuda::Gpu;
use tf_models::{Row, RowCandidates, RowWant};

/// The model check's verdict: Ok(None) when the selection is off, Ok(Some(report)) when every
/// comparison held, Err(what differed or failed).
fn model_check(path: &str) -> Result<Option<String>, String> {
    let ck = tf_formats::checkpoint::Checkpoint::open(std::path::Path::new(path))
        .map_err(|e| format!("{path}: {e}"))?;
    let plan = tf_families::plan(ck.config(), ck.entries()).map_err(|r| format!("{r:?}"))?;
    let opts = tf_cuda::backend::CudaOptions {
        slots: 8,
        context: Some(512),
        ..Default::default()
    };
    let mut m = tf_cuda::backend::load(&ck, &plan, &opts).map_err(|e| e.to_string())?;
    if m.candidate_capacity() == 0 {
        return Ok(None);
    }
    let vocab = m.info().vocab_size;
    let streams = 4;
    let (mut a, mut b): (Vec<_>, Vec<_>) =
        (0..streams).map(|_| (m.new_state(), m.new_state())).unzip();
    let tok = |s: usize, p: usize| ((p * 131 + s * 977 + 11) % vocab) as u32;
    // Rounds: a 3-token prefill each (one chunk), then 80 tokens each (320 rows: several
    // chunks), then decode rows (graphed) and a mixed 70-row round (eager).
    let mut plans: Vec<Vec<(usize, usize, bool)>> = vec![
        (0..streams)
            .flat_map(|s| (0..3).map(move |p| (s, p, p == 2)))
            .collect(),
        (0..streams)
            .flat_map(|s| (3..83).map(move |p| (s, p, p == 82)))
            .collect(),
    ];
    for d in 0..4 {
        plans.push((0..streams).map(|s| (s, 83 + d, true)).collect());
    }
    plans.push(
        (0..streams)
            .flat_map(|s| (87..87 + 17 + s).map(move |p| (s, p, true)))
            .collect(),
    );
    let (mut whole, mut cands, mut row) = (Vec::new(), Vec::new(), Vec::new());
    let (mut rows_checked, mut rounds) = (0, 0);
    let (mut t_whole, mut t_cand) = (0f64, 0f64);
    for plan in &plans {
        let rows: Vec<Row> = plan
            .iter()
            .map(|&(s, p, l)| Row {
                stream: s,
                pos: p,
                token: tok(s, p),
                logits: l,
            })
            .collect();
        let wanted = rows.iter().filter(|r| r.logits).count();
        // Every row carries 8 logits; every third row comes whole.
        let wants: Vec<RowWant> = (0..wanted)
            .map(|k| RowWant {
                extra: (0..8)
                    .map(|i| ((k * 7919 + i * 104_729) % vocab) as u32)
                    .collect(),
                whole: k % 3 == 2,
            })
            .collect();
        let t0 = Instant::now();
        let mut sa: Vec<&mut _> = a.iter_mut().collect();
        m.forward(&rows, &mut sa, &mut whole)
            .map_err(|e| e.to_string())?;
        t_whole += t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let mut sb: Vec<&mut _> = b.iter_mut().collect();
        m.forward_candidates(&rows, &mut sb, &wants, &mut cands)
            .map_err(|e| e.to_string())?;
        t_cand += t0.elapsed().as_secs_f64();
        if cands.len() != wanted || whole.len() != wanted * vocab {
            return Err(format!(
                "{} candidate rows, {} whole floats for {wanted} rows",
                cands.len(),
                whole.len()
            ));
        }
        for k in 0..wanted {
            let w = &whole[k * vocab..(k + 1) * vocab];
            let mut want = if wants[k].whole {
                RowCandidates {
                    non_nan: w.iter().filter(|x| !x.is_nan()).count(),
                    whole: w.to_vec(),
                    ..Default::default()
                }
            } else {
                RowCandidates::of_row(w, tf_cuda::select::SELECT_CAP)
            };
            want.extra = wants[k].extra.iter().map(|&i| (i, w[i as usize])).collect();
            let bits = |c: &RowCandidates| {
                let f =
                    |v: &[(u32, f32)]| v.iter().map(|&(i, x)| (i, x.to_bits())).collect::<Vec<_>>();
                let whole: Vec<u32> = c.whole.iter().map(|x| x.to_bits()).collect();
                (c.non_nan, f(&c.top), f(&c.extra), whole)
            };
            if bits(&cands[k]) != bits(&want) {
                return Err(format!(
                    "round {rounds} wanted row {k}: candidates differ from the whole row's"
                ));
            }
            m.candidate_row(k, &mut row).map_err(|e| e.to_string())?;
            if row
                .iter()
                .map(|x| x.to_bits())
                .ne(w.iter().map(|x| x.to_bits()))
            {
                return Err(format!(
                    "round {rounds} wanted row {k}: candidate_row differs from forward's row"
                ));
            }
            rows_checked += 1;
        }
        rounds += 1;
    }
    Ok(Some(format!(
        "model check: {rows_checked} wanted rows over {rounds} rounds: candidates, candidate_row and carried logits == forward's rows bit for bit; forward {:.1} ms, forward_candidates {:.1} ms in all",
        t_whole * 1e3,
        t_cand * 1e3
    )))
}

fn median_us(mut f: impl FnMut() -> tf_cuda::Result<()>, iters: usize) -> tf_cuda::Result<f64> {
    f()?; // warm-up
    let mut t = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

/// Device µs per launch of `launch`, over `iters` back-to-back launches between two events.
fn device_us(
    gpu: &Gpu,
    iters: usize,
    mut launch: impl FnMut() -> tf_cuda::Result<()>,
) -> Result<f64, String> {
    let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    launch().map_err(|e| e.to_string())?; // warm-up
    let t0 = gpu
        .stream()
        .record_event(flags)
        .map_err(|e| e.to_string())?;
    for _ in 0..iters {
        launch().map_err(|e| e.to_string())?;
    }
    let t1 = gpu
        .stream()
        .record_event(flags)
        .map_err(|e| e.to_string())?;
    t1.synchronize().map_err(|e| e.to_string())?;
    Ok(t0.elapsed_ms(&t1).map_err(|e| e.to_string())? as f64 * 1e3 / iters as f64)
}

fn timings(gpu: &Gpu, iters: usize) -> Result<String, String> {
    let mut s = String::from(
        "| vocab | rows | download rows (us) | select + download candidates (us) | select kernel, device (us) | radix fallback kernel, device (us) |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let err = |e: tf_cuda::CudaError| e.to_string();
    for vocab in VOCABS {
        let dev = gpu.upload(&test_rows(vocab, 9).concat()).map_err(err)?;
        let mut cands = GpuCandidates::new(gpu, 64, SELECT_CAP).map_err(err)?;
        // Logit-like rows only (the test rows' kinds 0 and 1): what decoding selects from.
        let rows: Vec<usize> = (0..64).filter(|r| r % 8 < 2).cycle().take(64).collect();
        for n in [1usize, 8, 64] {
            let full = median_us(|| gpu.download(&dev, n * vocab).map(drop), iters).map_err(err)?;
            let sel = median_us(
                || {
                    select(gpu, &dev, &rows[..n], vocab, &mut cands)?;
                    cands.download(gpu, n).map(drop)
                },
                iters,
            )
            .map_err(err)?;
            let mut kernel = |radix: bool| {
                device_us(gpu, iters, || {
                    select_with(gpu, &dev, &rows[..n], vocab, false, radix, &mut cands)
                })
            };
            let (pool, radix) = (kernel(false)?, kernel(true)?);
            s.push_str(&format!(
                "| {vocab} | {n} | {full:.1} | {sel:.1} | {pool:.1} | {radix:.1} |\n"
            ));
        }
    }
    Ok(s)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let depth = if args.iter().any(|a| a == "--quick") {
        Depth::Quick
    } else {
        Depth::Full
    };
    let iters = args
        .iter()
        .position(|a| a == "--iters")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(50usize)
        .max(1);
    let gpu = match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("tf-cuda-select: {e}");
            return ExitCode::from(2);
        }
    };
    println!("device: {} ({})", gpu.info().name, gpu.info().arch);
    let mut result = SuiteResult::default();
    if let Err(e) = tf_cuda::suite::select::run(&gpu, depth, &mut result) {
        eprintln!("tf-cuda-select: {e}");
        println!("FAIL: {e}");
        return ExitCode::from(1);
    }
    println!("{}", result.table());
    match timings(&gpu, iters) {
        Ok(t) => println!("{t}"),
        Err(e) => {
            println!("FAIL: timing: {e}");
            return ExitCode::from(1);
        }
    }
    let mut model_ok = true;
    if let Some(path) = args
        .iter()
        .position(|a| a == "--model")
        .and_then(|i| args.get(i + 1))
    {
        match model_check(path) {
            Ok(Some(report)) => println!("{report}"),
            Ok(None) => println!(
                "model check: candidate selection off (the GPU model does not expose its logits)"
            ),
            Err(e) => {
                println!("model check FAILED: {e}");
                model_ok = false;
            }
        }
    }
    if result.passed() && model_ok {
        println!(
            "PASS: GPU candidates == host selection bit for bit; the planted control was caught"
        );
        ExitCode::SUCCESS
    } else {
        println!("FAIL");
        ExitCode::from(1)
    }
}
