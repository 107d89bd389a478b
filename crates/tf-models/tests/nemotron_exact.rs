//! Exactness receipts on every Nemotron-H fixture: one call == token by token == chunks of any
//! size, bit for bit; one thread == two; several streams in one round == each stream alone;
//! truncation of a recurrent stream restarts it.

mod nemotron_support;

use nemotron_support::{model, score, tokens, FIXTURES};
use tf_models::{Model, Row, StreamState};

fn bits_equal(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn full_serial_and_chunked_are_bit_identical_on_every_fixture() {
    for (fx, forms) in FIXTURES {
        let toks = tokens(fx);
        for form in *forms {
            let mut m = model(fx, form, 2);
            let serial = score(m.as_mut(), &toks, 1);
            for chunk in [toks.len(), 2, 3, 5, 7, 16] {
                let got = score(m.as_mut(), &toks, chunk);
                assert!(
                    bits_equal(&got, &serial),
                    "{fx}/{form}: chunk {chunk} != serial"
                );
            }
            let mut one = model(fx, form, 1);
            let single = score(one.as_mut(), &toks, toks.len());
            assert!(
                bits_equal(&single, &serial),
                "{fx}/{form}: 1 thread != 2 threads"
            );
            // Planted control: the same comparison sees a one-token change.
            let mut other = toks.clone();
            other[toks.len() / 2] ^= 1;
            let moved = score(m.as_mut(), &other, 1);
            assert!(
                !bits_equal(&moved, &serial),
                "{fx}/{form}: control not caught"
            );
        }
    }
}

/// Feeds several streams through shared rounds: each round takes a few rows of each unfinished
/// stream (`take[s]` rows of stream s, cycling through the schedule), streams interleaved.
fn run_mixed(m: &mut dyn Model, seqs: &[Vec<u32>], schedule: &[&[usize]]) -> Vec<Vec<f32>> {
    let vocab = m.info().vocab_size;
    let mut states: Vec<StreamState> = seqs.iter().map(|_| m.new_state()).collect();
    let mut out: Vec<Vec<f32>> = seqs.iter().map(|_| Vec::new()).collect();
    let mut next = vec![0usize; seqs.len()];
    let mut logits = Vec::new();
    let mut round = 0;
    while next.iter().zip(seqs).any(|(n, s)| *n < s.len()) {
        let take = schedule[round % schedule.len()];
        let mut rows = Vec::new();
        // Interleave: one row of each stream at a time, up to its quota.
        let mut quota: Vec<usize> = take.to_vec();
        loop {
            let mut any = false;
            for (s, seq) in seqs.iter().enumerate() {
                if quota[s] > 0 && next[s] < seq.len() {
                    rows.push(Row {
                        stream: s,
                        pos: next[s],
                        token: seq[next[s]],
                        logits: true,
                    });
                    next[s] += 1;
                    quota[s] -= 1;
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        let mut refs: Vec<&mut StreamState> = states.iter_mut().collect();
        m.forward(&rows, &mut refs, &mut logits).unwrap();
        for (i, r) in rows.iter().enumerate() {
            out[r.stream].extend_from_slice(&logits[i * vocab..(i + 1) * vocab]);
        }
        round += 1;
    }
    out
}

#[test]
fn rows_of_other_streams_do_not_change_a_stream() {
    for (fx, forms) in FIXTURES {
        let base = tokens(fx);
        let seqs: Vec<Vec<u32>> = vec![
            base.clone(),
            base.iter().rev().copied().collect(),
            base[..13].iter().map(|&t| 3 + (t * 7) % 90).collect(),
        ];
        let schedule: &[&[usize]] = &[&[1, 6, 2], &[4, 1, 1], &[2, 3, 5], &[1, 1, 1]];
        for form in *forms {
            let mut m = model(fx, form, 2);
            let solo: Vec<Vec<f32>> = seqs.iter().map(|s| score(m.as_mut(), s, 1)).collect();
            let mixed = run_mixed(m.as_mut(), &seqs, schedule);
            for (s, (a, b)) in mixed.iter().zip(&solo).enumerate() {
                assert!(bits_equal(a, b), "{fx}/{form}: stream {s} mixed != solo");
            }
        }
    }
}

#[test]
fn shared_recurrent_state_is_caught() {
    // Planted control of the test above: two streams forced onto one state object diverge
    // from their solo runs (the check can fail).
    let mut m = model("plain_moe", "f32_hf", 1);
    let toks = tokens("plain_moe");
    let vocab = m.info().vocab_size;
    let solo = score(m.as_mut(), &toks[..8], 1);
    let mut st = m.new_state();
    let mut logits = Vec::new();
    let mut got = Vec::new();
    for (pos, &t) in toks[..8].iter().enumerate() {
        let row = Row {
            stream: 0,
            pos: 2 * pos,
            token: t,
            logits: true,
        };
        let other = Row {
            stream: 0,
            pos: 2 * pos + 1,
            token: 5,
            logits: false,
        };
        m.forward(&[row, other], &mut [&mut st], &mut logits)
            .unwrap();
        got.extend_from_slice(&logits[..vocab]);
    }
    assert!(!bits_equal(&got, &solo));
}

#[test]
fn truncating_a_recurrent_stream_restarts_it() {
    let mut m = model("latent_grouped", "q4g64", 1);
    let toks = tokens("latent_grouped");
    let solo = score(m.as_mut(), &toks, 1);
    let vocab = m.info().vocab_size;
    let mut st = m.new_state();
    let empty_bytes = st.bytes();
    let mut logits = Vec::new();
    let rows: Vec<Row> = toks[..10]
        .iter()
        .enumerate()
        .map(|(pos, &token)| Row {
            stream: 0,
            pos,
            token,
            logits: true,
        })
        .collect();
    m.forward(&rows, &mut [&mut st], &mut logits).unwrap();
    assert!(st.bytes() > empty_bytes, "KV grows with tokens");
    st.truncate(10);
    assert_eq!(
        st.len, 10,
        "truncating to the current length keeps the stream"
    );
    st.truncate(4);
    assert_eq!(
        st.len, 0,
        "recurrent state cannot roll back: the stream restarts"
    );
    let gap = Row {
        stream: 0,
        pos: 4,
        token: toks[4],
        logits: true,
    };
    assert!(m.forward(&[gap], &mut [&mut st], &mut logits).is_err());
    let rows: Vec<Row> = toks
        .iter()
        .enumerate()
        .map(|(pos, &token)| Row {
            stream: 0,
            pos,
            token,
            logits: true,
        })
        .collect();
    m.forward(&rows, &mut [&mut st], &mut logits).unwrap();
    assert!(bits_equal(&logits, &solo), "refed stream == fresh stream");
    assert_eq!(logits.len(), toks.len() * vocab);
}

#[test]
fn bad_rows_and_foreign_states_are_refused() {
    let mut m = model("puzzle", "q4g64", 1);
    let mut s = m.new_state();
    let mut logits = Vec::new();
    let oov = Row {
        stream: 0,
        pos: 0,
        token: 96,
        logits: true,
    };
    assert!(m.forward(&[oov], &mut [&mut s], &mut logits).is_err());
    let lost = Row {
        stream: 1,
        pos: 0,
        token: 3,
        logits: true,
    };
    assert!(m.forward(&[lost], &mut [&mut s], &mut logits).is_err());
    // A state made by another model (different layer counts) is refused, not misused.
    let other = model("plain_moe", "f32_hf", 1);
    let mut foreign = other.new_state();
    foreign.mamba.pop();
    let ok = Row {
        stream: 0,
        pos: 0,
        token: 3,
        logits: true,
    };
    assert!(m.forward(&[ok], &mut [&mut foreign], &mut logits).is_err());
}
