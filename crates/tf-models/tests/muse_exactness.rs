//! Muse Spark receipts on the fixtures, bit for bit: full == serial == chunk:N (prompts several
//! times the sliding window, so sliding layers wrap), and streams in one round == solo.
mod muse_common;
use muse_common::*;

const FORMS: [&str; 3] = ["hf-f32", "mlx-f32", "mlx-4bit"];

/// A deterministic token sequence of `len` ids in 4..256.
fn long_tokens(len: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            4 + ((s >> 33) % 252) as u32
        })
        .collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn chunked_equals_serial_past_the_window() {
    let window = 8; // fixtures' sliding_window; the sequences below are 4-7 windows long
    for form in FORMS {
        let mut m = model(&fixture(form), 2);
        let mut seqs = Refs::open().tokens();
        seqs.push(long_tokens(57, 3));
        for seq in &seqs {
            assert!(seq.len() > 3 * window);
            let serial = run_chunked(m.as_mut(), seq, 1);
            for chunk in [2, 3, 7, 8, 9, 16, seq.len()] {
                let got = run_chunked(m.as_mut(), seq, chunk);
                assert_eq!(bits(&got), bits(&serial), "{form}: chunk {chunk} != serial");
            }
        }
    }
}

#[test]
fn chunked_check_catches_a_planted_difference() {
    // The comparison itself is able to fail: a different stream differs.
    let mut m = model(&fixture("mlx-f32"), 1);
    let a = run_chunked(m.as_mut(), &long_tokens(20, 1), 4);
    let mut t = long_tokens(20, 1);
    t[3] ^= 1; // one token changed: every later position must differ somewhere
    let b = run_chunked(m.as_mut(), &t, 4);
    assert_eq!(
        bits(&a[..3 * 256]),
        bits(&b[..3 * 256]),
        "positions before the change"
    );
    assert_ne!(
        bits(&a[19 * 256..]),
        bits(&b[19 * 256..]),
        "a position after the change"
    );
}

#[test]
fn concurrent_equals_solo() {
    for form in FORMS {
        let mut m = model(&fixture(form), 2);
        let mut seqs = Refs::open().tokens();
        seqs.push(long_tokens(41, 9));
        seqs.push(long_tokens(13, 5));
        let solo: Vec<Vec<f32>> = seqs.iter().map(|s| run_chunked(m.as_mut(), s, 1)).collect();
        for (step, offset) in [(1, 0), (3, 1), (5, 2), (64, 0)] {
            let together = run_concurrent(m.as_mut(), &seqs, step, offset);
            for (i, (a, b)) in together.iter().zip(&solo).enumerate() {
                assert_eq!(
                    bits(a),
                    bits(b),
                    "{form}: stream {i} with step {step}, offset {offset}"
                );
            }
        }
    }
}

#[test]
fn thread_count_does_not_change_logits() {
    let seq = long_tokens(30, 11);
    let one = run_chunked(model(&fixture("mlx-4bit"), 1).as_mut(), &seq, 5);
    let two = run_chunked(model(&fixture("mlx-4bit"), 2).as_mut(), &seq, 5);
    assert_eq!(bits(&one), bits(&two));
}

#[test]
fn bad_rows_are_refused_by_name() {
    let mut m = model(&fixture("mlx-f32"), 1);
    let mut st = m.new_state();
    let mut out = Vec::new();
    let row = |pos, token| tf_models::Row {
        stream: 0,
        pos,
        token,
        logits: true,
    };
    let e = m
        .forward(&[row(1, 5)], &mut [&mut st], &mut out)
        .unwrap_err();
    assert!(
        matches!(e, tf_models::ModelError::PositionGap { .. }),
        "{e}"
    );
    let e = m
        .forward(&[row(0, 256)], &mut [&mut st], &mut out)
        .unwrap_err();
    assert!(
        matches!(e, tf_models::ModelError::TokenOutOfRange { .. }),
        "{e}"
    );
    let e = m
        .forward(
            &[tf_models::Row {
                stream: 1,
                ..row(0, 5)
            }],
            &mut [&mut st],
            &mut out,
        )
        .unwrap_err();
    assert!(
        matches!(e, tf_models::ModelError::NoSuchStream { .. }),
        "{e}"
    );
}
