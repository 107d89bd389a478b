//! The llama forward on the real default model: greedy text, and the exactness receipts
//! chunked == serial and concurrent == solo, bit for bit.

mod common;

use tf_models::{load, LoadOptions, Model, Row, StreamState};

fn model(threads: usize) -> Option<Box<dyn Model>> {
    let path = common::default_model()?;
    Some(load(&path, &LoadOptions { threads }).expect("the default model loads"))
}

/// "The capital of France is" tokenized without BOS (reference ids from the notes).
const PROMPT: [u32; 5] = [504, 3575, 282, 4649, 314];

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Feeds `tokens` to a fresh stream in chunks of `chunk`; returns every position's logits.
fn run_chunked(m: &mut dyn Model, tokens: &[u32], chunk: usize) -> Vec<f32> {
    let mut state = m.new_state();
    let mut all = Vec::new();
    let mut logits = Vec::new();
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
        m.forward(&rows, &mut [&mut state], &mut logits).unwrap();
        all.extend_from_slice(&logits);
    }
    all
}

#[test]
fn greedy_continuation_of_the_capital_of_france() {
    let Some(mut m) = model(2) else { return };
    let vocab = m.info().vocab_size;
    assert_eq!(vocab, 49152);
    let mut state = m.new_state();
    let mut logits = Vec::new();
    let rows: Vec<Row> = PROMPT
        .iter()
        .enumerate()
        .map(|(pos, &token)| Row {
            stream: 0,
            pos,
            token,
            logits: pos + 1 == PROMPT.len(),
        })
        .collect();
    m.forward(&rows, &mut [&mut state], &mut logits).unwrap();
    let mut out = Vec::new();
    for pos in PROMPT.len()..PROMPT.len() + 5 {
        let t = argmax(&logits[..vocab]);
        out.push(t);
        let row = Row {
            stream: 0,
            pos,
            token: t,
            logits: true,
        };
        m.forward(&[row], &mut [&mut state], &mut logits).unwrap();
    }
    // " Paris" "." "\n" "\n" "The" in the default model's vocabulary: " Paris.\n\nThe".
    assert_eq!(out, vec![7042, 30, 198, 198, 504]);
}

#[test]
fn chunked_equals_serial_bit_for_bit() {
    let Some(mut m) = model(2) else { return };
    let tokens: Vec<u32> = (0..70u32).map(|i| (i * 7919 + 11) % 49152).collect();
    let serial = run_chunked(m.as_mut(), &tokens, 1);
    for chunk in [70, 16, 7] {
        let got = run_chunked(m.as_mut(), &tokens, chunk);
        assert!(
            got.iter()
                .zip(&serial)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "chunk {chunk} differs from serial"
        );
    }
    // Planted control: the same check sees a different sequence as different.
    let mut other = tokens.clone();
    other[30] += 1;
    let moved = run_chunked(m.as_mut(), &other, 70);
    assert!(moved
        .iter()
        .zip(&serial)
        .any(|(a, b)| a.to_bits() != b.to_bits()));
}

#[test]
fn rows_of_other_streams_do_not_change_a_stream() {
    let Some(mut m) = model(2) else { return };
    let vocab = m.info().vocab_size;
    let a: Vec<u32> = (0..9u32).map(|i| 100 + i * 31).collect();
    let b: Vec<u32> = (0..23u32).map(|i| 2000 + i * 17).collect();
    let solo = run_chunked(m.as_mut(), &a, 1);
    // Round 1: all of b's prompt beside a's first token; then a's tokens one per round beside
    // b's decode rows.
    let (mut sa, mut sb): (StreamState, StreamState) = (m.new_state(), m.new_state());
    let mut logits = Vec::new();
    let mut rows = vec![Row {
        stream: 0,
        pos: 0,
        token: a[0],
        logits: true,
    }];
    rows.extend(b.iter().enumerate().map(|(pos, &token)| Row {
        stream: 1,
        pos,
        token,
        logits: true,
    }));
    m.forward(&rows, &mut [&mut sa, &mut sb], &mut logits)
        .unwrap();
    let mut mixed = logits[..vocab].to_vec();
    for (pos, &token) in a.iter().enumerate().skip(1) {
        let rows = [
            Row {
                stream: 1,
                pos: b.len() + pos - 1,
                token: 5,
                logits: false,
            },
            Row {
                stream: 0,
                pos,
                token,
                logits: true,
            },
        ];
        m.forward(&rows, &mut [&mut sa, &mut sb], &mut logits)
            .unwrap();
        mixed.extend_from_slice(&logits[..vocab]);
    }
    assert!(mixed
        .iter()
        .zip(&solo)
        .all(|(x, y)| x.to_bits() == y.to_bits()));
}

#[test]
fn bad_rows_are_refused_without_panic() {
    let Some(mut m) = model(1) else { return };
    let mut s = m.new_state();
    let mut logits = Vec::new();
    let gap = Row {
        stream: 0,
        pos: 3,
        token: 1,
        logits: true,
    };
    assert!(m.forward(&[gap], &mut [&mut s], &mut logits).is_err());
    let oov = Row {
        stream: 0,
        pos: 0,
        token: 49152,
        logits: true,
    };
    assert!(m.forward(&[oov], &mut [&mut s], &mut logits).is_err());
    let lost = Row {
        stream: 1,
        pos: 0,
        token: 1,
        logits: true,
    };
    assert!(m.forward(&[lost], &mut [&mut s], &mut logits).is_err());
}
