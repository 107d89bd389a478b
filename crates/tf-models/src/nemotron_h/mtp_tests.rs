//! The MTP head against the float64 numpy reference of fixtures/nemotron_h/mtp/gen.py, fed one
//! call and row by row; the draft notes of checkpoints with and without MTP weights.

use crate::model::{Model, Row};
use crate::{load, LoadOptions};
use std::path::PathBuf;
use tf_formats::safetensors::SafetensorsCheckpoint;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/nemotron_h")
        .join(name)
}

fn open(name: &str) -> Box<dyn Model> {
    load(&fixture(name), &LoadOptions { threads: 2 }).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// (hidden `[T, H]`, tokens `[T]`, reference logits `[T, V]`).
fn reference(name: &str) -> (Vec<f32>, Vec<u32>, Vec<f32>) {
    let st = SafetensorsCheckpoint::open(&fixture(name).join("mtp_reference.safetensors")).unwrap();
    let words = |n: &str| -> Vec<[u8; 4]> {
        let t = st.tensor(n).unwrap();
        t.data
            .chunks_exact(4)
            .map(|b| [b[0], b[1], b[2], b[3]])
            .collect()
    };
    (
        words("hidden")
            .into_iter()
            .map(f32::from_le_bytes)
            .collect(),
        words("tokens")
            .into_iter()
            .map(|b| i32::from_le_bytes(b) as u32)
            .collect(),
        words("logits")
            .into_iter()
            .map(f32::from_le_bytes)
            .collect(),
    )
}

/// Max over rows of max |ours - ref| / (max - min of the ref row), and top-1 agreement.
fn distance(ours: &[f32], reference: &[f32], vocab: usize) -> (f64, f64) {
    let (mut worst, mut agree, mut rows) = (0f64, 0usize, 0usize);
    for (a, b) in ours.chunks_exact(vocab).zip(reference.chunks_exact(vocab)) {
        let (lo, hi) = b
            .iter()
            .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
        let d = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        worst = worst.max(d as f64 / (hi - lo) as f64);
        let top = |r: &[f32]| (0..vocab).fold(0, |m, i| if r[i] > r[m] { i } else { m });
        agree += usize::from(top(a) == top(b));
        rows += 1;
    }
    (worst, agree as f64 / rows.max(1) as f64)
}

/// The head's logits for `tokens` conditioned on `hidden`, fed in chunks of `chunk`.
fn run(m: &mut dyn Model, hidden: &[f32], tokens: &[u32], chunk: usize) -> Vec<f32> {
    let head = m.draft_head().expect("the fixture carries an MTP head");
    let width = head.hidden_size();
    let mut state = head.new_draft_state().unwrap();
    let (mut all, mut out, mut logits) = (Vec::new(), Vec::new(), Vec::new());
    for (c, part) in tokens.chunks(chunk).enumerate() {
        let rows: Vec<Row> = part
            .iter()
            .enumerate()
            .map(|(i, &token)| Row {
                stream: 0,
                pos: c * chunk + i,
                token,
                logits: true,
            })
            .collect();
        let h = &hidden[c * chunk * width..(c * chunk + part.len()) * width];
        head.draft_forward(&rows, h, &mut [&mut state], &mut out, &mut logits)
            .unwrap();
        all.extend_from_slice(&logits);
    }
    all
}

/// Checks the head of fixture `name` against its reference.
fn check_against_reference(name: &str) {
    let mut m = open(name);
    let vocab = m.info().vocab_size;
    let (hidden, tokens, want) = reference(name);
    let whole = run(m.as_mut(), &hidden, &tokens, tokens.len());
    let (rel, top1) = distance(&whole, &want, vocab);
    eprintln!("{name}: MTP head vs float64 reference: rel {rel:.2e}, top-1 {top1:.3}");
    assert!(rel <= 1e-5 && top1 == 1.0, "rel {rel:e}, top-1 {top1}");
    // One call == row by row == chunks of 5, bit for bit.
    for chunk in [1, 5] {
        assert_eq!(
            run(m.as_mut(), &hidden, &tokens, chunk),
            whole,
            "chunk {chunk}"
        );
    }
    // Planted controls: the token one position late, or the hidden one position early, must
    // fail the bar (a misaligned head).
    let late: Vec<u32> = tokens.iter().skip(1).copied().chain([tokens[0]]).collect();
    let (rel_late, _) = distance(&run(m.as_mut(), &hidden, &late, 12), &want, vocab);
    let width = hidden.len() / tokens.len();
    let mut early = hidden[width..].to_vec();
    early.extend_from_slice(&hidden[..width]);
    let (rel_early, _) = distance(&run(m.as_mut(), &early, &tokens, 12), &want, vocab);
    eprintln!(
        "{name}: controls: token one late rel {rel_late:.2e}, hidden one early rel {rel_early:.2e}"
    );
    assert!(
        rel_late > 1e-2 && rel_early > 1e-2,
        "controls {rel_late:e} {rel_early:e}"
    );
}

#[test]
fn mtp_head_matches_the_numpy_reference() {
    check_against_reference("mtp/random");
}

#[test]
fn mtp_head_with_a_mamba_block_matches_the_numpy_reference() {
    check_against_reference("mtp/hybrid");
}

#[test]
fn forward_exposes_final_normed_hidden_rows_with_an_mtp_head() {
    let mut m = open("mtp/random");
    let mut state = m.new_state();
    let rows: Vec<Row> = (0..4)
        .map(|pos| Row {
            stream: 0,
            pos,
            token: 5 + pos as u32,
            logits: pos == 3,
        })
        .collect();
    let mut logits = Vec::new();
    m.forward(&rows, &mut [&mut state], &mut logits).unwrap();
    let head = m.draft_head().unwrap();
    let h = head.target_hidden().to_vec();
    assert_eq!(h.len(), 4 * head.hidden_size());
    // Final-normed: each row has RMS near the norm_f gain's (not 0, not the raw residual's).
    assert!(h.iter().all(|v| v.is_finite()) && h.iter().any(|&v| v != 0.0));
}

#[test]
fn draft_notes_name_the_source() {
    let mut with = open("mtp/random");
    assert!(with.draft_head().is_some());
    assert_eq!(
        with.draft_note(),
        "nemotron_h: MTP head (1 stored step(s), blocks *E); drafts from MTP"
    );
    let mut without = open("plain_moe/f32_hf");
    assert!(without.draft_head().is_none());
    assert_eq!(
        without.draft_note(),
        "nemotron_h: no MTP weights (num_nextn_predict_layers = 0); drafts use context copies"
    );
}
