//! The sampler's candidate selection on the GPU against the host reference
//! ([`RowCandidates::of_row`]), bit for bit, at real vocabulary sizes (49152, 131072) and 1..=64
//! rows of the same 64-row buffer and a subset of it out of order (so each row is also checked
//! for row invariance: its candidates are the same whatever rows are selected with it); the logit gather
//! against the host's values; the planted control (ties ranked by the higher id) must differ.
//!
//! Rows mix distinct logits, heavy ties at the cut, NaN / infinities / signed zeros, rows with
//! fewer non-NaN logits than the capacity, and an all-NaN row.

use super::{CaseResult, ControlResult, CpuBits, Depth, SuiteResult};
use crate::device::Gpu;
use crate::error::Result;
use crate::select::{gather, select_with, GpuCandidates, SELECT_CAP};
use cudarc::driver::CudaSlice;
use tf_kernels::contract::{Report, Rng};
use tf_models::RowCandidates;

/// Rows in the buffer (the largest selection).
const ROWS: usize = 64;

/// The vocabularies checked (the default model's and a 128K one).
pub const VOCABS: [usize; 2] = [49_152, 131_072];

/// Runs the selection cases and the control.
pub fn run(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    for (i, vocab) in VOCABS.into_iter().enumerate() {
        let rows = test_rows(vocab, 0x5e1ec7 + i as u64);
        let dev = gpu.upload(&rows.concat())?;
        let want: Vec<RowCandidates> = rows
            .iter()
            .map(|r| RowCandidates::of_row(r, SELECT_CAP))
            .collect();
        for radix in [false, true] {
            out.cases.push(case(gpu, &dev, vocab, &want, depth, radix)?);
        }
        out.cases.push(gather_case(gpu, &dev, &rows, vocab)?);
        if i == 0 {
            out.controls.push(control(gpu, &dev, vocab, &want)?);
        }
    }
    Ok(())
}

/// The row counts a depth checks.
pub fn row_counts(depth: Depth) -> Vec<usize> {
    match depth {
        Depth::Full => (1..=ROWS).collect(),
        Depth::Quick => vec![1, 2, 3, 5, 8, 16, 33, 64],
    }
}

/// `ROWS` rows of `vocab` logits of mixed kinds (row r's kind is r % 8).
pub fn test_rows(vocab: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed);
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        -f32::NAN,
    ];
    (0..ROWS)
        .map(|r| {
            (0..vocab)
                .map(|_| match r % 8 {
                    // Logit-like: distinct values.
                    0 | 1 => rng.normal() * 4.0,
                    // Quarter steps: ties everywhere, a few at the top.
                    2 | 3 => (rng.normal() * 12.0).round() / 4.0,
                    // Three values: the cut falls inside a tie of thousands.
                    4 => rng.below(3) as f32,
                    // Specials among quarter steps.
                    5 => {
                        if rng.below(50) == 0 {
                            specials[rng.below(specials.len())]
                        } else {
                            (rng.normal() * 12.0).round() / 4.0
                        }
                    }
                    // Fewer non-NaN logits than the capacity.
                    6 => {
                        if rng.below(vocab / 64) == 0 {
                            rng.normal()
                        } else {
                            f32::NAN
                        }
                    }
                    _ if r == ROWS - 1 => f32::NAN,
                    _ => rng.normal() * 2.0 - 30.0,
                })
                .collect()
        })
        .collect()
}

/// Rows of `got` that differ from `want` (ids or value bits or counts).
pub fn differing(got: &[RowCandidates], want: &[RowCandidates]) -> usize {
    let bits = |c: &RowCandidates| {
        (
            c.non_nan,
            c.top
                .iter()
                .map(|&(i, v)| (i, v.to_bits()))
                .collect::<Vec<_>>(),
        )
    };
    got.iter()
        .zip(want)
        .filter(|(g, w)| bits(g) != bits(w))
        .count()
        + got.len().abs_diff(want.len())
}

fn case(
    gpu: &Gpu,
    dev: &CudaSlice<f32>,
    vocab: usize,
    want: &[RowCandidates],
    depth: Depth,
    radix: bool,
) -> Result<CaseResult> {
    let mut cands = GpuCandidates::new(gpu, ROWS, SELECT_CAP)?;
    let (mut compared, mut bad, mut calls) = (0, 0, 0);
    let mut first_bad = None;
    for n in row_counts(depth) {
        let rows: Vec<usize> = (0..n).collect();
        select_with(gpu, dev, &rows, vocab, false, radix, &mut cands)?;
        let got = cands.download(gpu, n)?;
        calls += 1;
        let d = differing(&got, &want[..n]);
        if d > 0 && first_bad.is_none() {
            first_bad = Some(n);
        }
        bad += d;
        compared += n;
    }
    // A subset out of order (the wanted rows of a round): every third row, last first.
    let subset: Vec<usize> = (0..ROWS).rev().step_by(3).collect();
    select_with(gpu, dev, &subset, vocab, false, radix, &mut cands)?;
    let got = cands.download(gpu, subset.len())?;
    let picked: Vec<RowCandidates> = subset.iter().map(|&r| want[r].clone()).collect();
    let d = differing(&got, &picked);
    if d > 0 && first_bad.is_none() {
        first_bad = Some(subset.len());
    }
    bad += d;
    compared += subset.len();
    calls += 1;
    let verdict = match first_bad {
        None => Ok(Report {
            max_abs_err: 0.0,
            max_tol_ratio: 0.0,
            rows_compared: compared,
            calls,
        }),
        Some(n) => Err(format!(
            "{bad} of {compared} rows differ from the host selection (first at {n} rows)"
        )),
    };
    Ok(CaseResult {
        op: "select".into(),
        case: format!(
            "vocab {vocab}, top {SELECT_CAP}, {} calls (1..=64 rows and a subset){}",
            calls,
            if radix {
                ", every row by the radix fallback"
            } else {
                ""
            }
        ),
        verdict,
        cpu_bits: Some(CpuBits {
            compared: compared * SELECT_CAP,
            differing: bad,
            max_abs_diff: 0.0,
        }),
    })
}

fn gather_case(
    gpu: &Gpu,
    dev: &CudaSlice<f32>,
    rows: &[Vec<f32>],
    vocab: usize,
) -> Result<CaseResult> {
    let mut rng = Rng::new(vocab as u64);
    let at: Vec<(usize, u32)> = (0..4096)
        .map(|_| (rng.below(rows.len()), rng.below(vocab) as u32))
        .collect();
    let got = gather(gpu, dev, vocab, &at)?;
    let want: Vec<f32> = at.iter().map(|&(r, i)| rows[r][i as usize]).collect();
    let bits = super::compare_bits(&got, &want);
    let verdict = if bits.differing == 0 {
        Ok(Report {
            max_abs_err: 0.0,
            max_tol_ratio: 0.0,
            rows_compared: 0,
            calls: 1,
        })
    } else {
        Err(format!(
            "{} of {} gathered logits differ",
            bits.differing, bits.compared
        ))
    };
    Ok(CaseResult {
        op: "select gather".into(),
        case: format!("vocab {vocab}, {} logits", at.len()),
        verdict,
        cpu_bits: Some(bits),
    })
}

fn control(
    gpu: &Gpu,
    dev: &CudaSlice<f32>,
    vocab: usize,
    want: &[RowCandidates],
) -> Result<ControlResult> {
    let mut cands = GpuCandidates::new(gpu, ROWS, SELECT_CAP)?;
    let rows: Vec<usize> = (0..ROWS).collect();
    select_with(gpu, dev, &rows, vocab, true, false, &mut cands)?;
    let d = differing(&cands.download(gpu, ROWS)?, want);
    Ok(ControlResult {
        control: format!("select with ties ranked by the higher id (vocab {vocab}, {ROWS} rows)"),
        caught: if d > 0 {
            Ok(format!("{d} of {ROWS} rows differ from the host selection"))
        } else {
            Err("every row matched".into())
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_rows_hold_the_kinds_the_check_needs() {
        let rows = test_rows(VOCABS[0], 1);
        let of = |r: usize| RowCandidates::of_row(&rows[r], SELECT_CAP);
        // Distinct logits: a full selection, not the whole row.
        assert!(!of(0).complete() && of(0).top.len() == SELECT_CAP);
        // Three values: the cut falls inside a tie.
        let c = of(4);
        let cut = c.top.last().unwrap().1;
        assert!(rows[4].iter().filter(|&&v| v == cut).count() > SELECT_CAP);
        // Specials present; a short row; the all-NaN row.
        assert!(rows[5].iter().any(|v| v.is_nan()) && rows[5].iter().any(|v| v.is_infinite()));
        assert!(of(6).complete() && of(6).non_nan > 0);
        assert_eq!(of(ROWS - 1).non_nan, 0);
    }

    #[test]
    fn differing_counts_a_planted_change() {
        let rows = test_rows(VOCABS[0], 2);
        let want: Vec<RowCandidates> = rows[..4]
            .iter()
            .map(|r| RowCandidates::of_row(r, SELECT_CAP))
            .collect();
        let mut got = want.clone();
        assert_eq!(differing(&got, &want), 0);
        // A changed value, and two entries swapped.
        got[2].top[0].1 = -got[2].top[0].1;
        got[3].top.swap(0, 1);
        assert_eq!(differing(&got, &want), 2);
        assert_eq!(differing(&got[..3], &want), 2);
    }
}
