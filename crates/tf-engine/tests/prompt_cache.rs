//! resumed == fresh through the scheduler: multi-turn conversations on a scheduler with the
//! prompt cache equal the same turns on one without, on the default model (attention) and on
//! the tiny Nemotron-H fixture (recurrent snapshots); an eviction mid-conversation and a
//! cancelled request leave the next request exact. A planted control (a resumed state advanced
//! by one wrong token) shows the comparison can fail.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use tf_engine::sampler::SamplingParams;
use tf_engine::scheduler::{Finished, Scheduler, SchedulerConfig, StreamEvent, StreamRequest};

use tf_testkit::default_model;

fn nemotron_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/nemotron_h/plain_moe/f32_hf")
}

fn start(path: &Path, cache_bytes: u64, chunk: usize) -> Scheduler {
    start_with(path, cache_bytes, chunk, false)
}

fn start_with(path: &Path, cache_bytes: u64, chunk: usize, planted: bool) -> Scheduler {
    let model = tf_models::load(path, &tf_models::LoadOptions { threads: 2 }).expect("load");
    let cfg = SchedulerConfig {
        parallel: 4,
        prefill_chunk: chunk,
        round_prefill_tokens: chunk,
        prompt_cache_bytes: cache_bytes,
        planted_cache_ignores_tokens: planted,
        ..Default::default()
    };
    Scheduler::start(model, cfg).expect("start")
}

fn ask(
    s: &Scheduler,
    prompt: &[u32],
    seed: Option<u64>,
    max_tokens: usize,
) -> (Vec<u32>, Finished) {
    let (tx, rx) = mpsc::channel();
    let req = StreamRequest {
        prompt: prompt.to_vec(),
        params: SamplingParams {
            temperature: if seed.is_some() { 0.9 } else { 0.0 },
            seed: seed.unwrap_or(7),
            ..Default::default()
        },
        max_tokens,
        stop_ids: vec![],
        top_logprobs: None,
        draft: true,
    };
    s.handle().submit(req, Box::new(tx)).expect("submit");
    let mut ids = Vec::new();
    for ev in rx {
        match ev {
            StreamEvent::Token(t) => ids.push(t.id),
            StreamEvent::Finished(f) => return (ids, f),
            StreamEvent::Failed(e) => panic!("stream failed: {e}"),
        }
    }
    panic!("no Finished event");
}

/// Waits until the scheduler has retired every stream (the cache is filled on retirement).
fn idle(s: &Scheduler) {
    let t = std::time::Instant::now();
    while s.handle().snapshot().running > 0 {
        assert!(t.elapsed().as_secs() < 30, "a stream is still running");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

fn words(n: usize, salt: u32, vocab: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|t| (t * 131 + salt * 17) % (vocab - 20) + 10)
        .collect()
}

/// Runs `turns` turns of a conversation on `cached` and `fresh`; returns how many turns were
/// equal, and the cached tokens reported per turn.
fn conversation(
    cached: &Scheduler,
    fresh: &Scheduler,
    seed: Option<u64>,
    turns: usize,
    vocab: u32,
    between: impl Fn(usize),
) -> (usize, Vec<usize>) {
    let mut prompt = words(37, seed.unwrap_or(0) as u32, vocab);
    let (mut equal, mut reused) = (0, Vec::new());
    for turn in 0..turns {
        between(turn);
        let (a, fa) = ask(cached, &prompt, seed, 9);
        let (b, fb) = ask(fresh, &prompt, seed, 9);
        assert_eq!(fb.cached_tokens, 0, "the reference has no cache");
        assert_eq!(fa.prompt_tokens, prompt.len());
        equal += usize::from(a == b);
        reused.push(fa.cached_tokens);
        idle(cached);
        prompt.extend_from_slice(&a);
        prompt.extend(words(11 + turn, 50 + turn as u32, vocab));
    }
    (equal, reused)
}

#[test]
fn resumed_equals_fresh_on_the_default_model_greedy_and_seeded() {
    let Some(path) = default_model() else { return };
    let cached = start(&path, 1 << 30, 16);
    let fresh = start(&path, 0, 16);
    let vocab = cached.handle().info().vocab_size as u32;
    for seed in [None, Some(1234)] {
        let (equal, reused) = conversation(&cached, &fresh, seed, 4, vocab, |_| {});
        assert_eq!(equal, 4, "resumed == fresh ({seed:?})");
        assert_eq!(reused[0], 0);
        // Later turns resume the whole grid-aligned previous conversation.
        assert!(
            reused[1..].iter().all(|&r| r > 0 && r % 16 == 0),
            "{reused:?}"
        );
    }
}

#[test]
fn eviction_mid_conversation_and_a_cancelled_request_leave_the_next_turn_exact() {
    let Some(path) = default_model() else { return };
    // A budget of about one conversation's state: the other conversation evicts it.
    let per_token = {
        let m = tf_models::load(&path, &tf_models::LoadOptions { threads: 1 }).expect("load");
        m.info().state_bytes_per_token as u64
    };
    let cached = start(&path, per_token * 100, 16);
    let fresh = start(&path, 0, 16);
    let vocab = cached.handle().info().vocab_size as u32;
    let evict = |turn: usize| {
        if turn == 2 {
            ask(&cached, &words(90, 999, vocab), None, 4);
            idle(&cached);
        }
    };
    let (equal, reused) = conversation(&cached, &fresh, Some(5), 4, vocab, evict);
    assert_eq!(equal, 4);
    assert_eq!(reused[2], 0, "turn 2 came after the eviction: {reused:?}");
    assert!(reused[1] > 0 && reused[3] > 0, "{reused:?}");

    // A cancelled request (its receiver dropped after the first token) leaves a state the
    // next request resumes exactly.
    let big = start(&path, 1 << 30, 16);
    let p = words(70, 3, vocab);
    let (tx, rx) = mpsc::channel();
    let req = StreamRequest {
        prompt: p.clone(),
        params: SamplingParams::default(),
        max_tokens: 200,
        stop_ids: vec![],
        top_logprobs: None,
        draft: true,
    };
    big.handle().submit(req, Box::new(tx)).expect("submit");
    let first = rx.iter().find(|e| matches!(e, StreamEvent::Token(_)));
    assert!(first.is_some());
    drop(rx);
    idle(&big);
    let mut next = p.clone();
    next.extend(words(20, 77, vocab));
    let (a, fa) = ask(&big, &next, Some(9), 8);
    let (b, _) = ask(&fresh, &next, Some(9), 8);
    assert_eq!(a, b, "after a cancel: resumed == fresh");
    assert_eq!(fa.cached_tokens, 64);
}

#[test]
fn resumed_equals_fresh_on_a_recurrent_family_from_grid_snapshots() {
    let path = nemotron_fixture();
    let cached = start(&path, 1 << 26, 8);
    let fresh = start(&path, 0, 8);
    let vocab = cached.handle().info().vocab_size as u32;
    for seed in [None, Some(31)] {
        let (equal, reused) = conversation(&cached, &fresh, seed, 3, vocab, |_| {});
        assert_eq!(equal, 3, "resumed == fresh on nemotron_h ({seed:?})");
        assert!(
            reused[1..].iter().all(|&r| r > 0 && r % 8 == 0),
            "{reused:?}"
        );
    }
}

#[test]
fn planted_control_a_wrongly_keyed_cache_makes_resumed_differ_from_fresh() {
    let Some(path) = default_model() else { return };
    let planted = start_with(&path, 1 << 30, 16, true);
    let fresh = start(&path, 0, 16);
    let vocab = planted.handle().info().vocab_size as u32;
    // Conversation one fills the cache; conversation two's first turn then resumes one's state.
    let one = words(60, 1, vocab);
    ask(&planted, &one, None, 4);
    idle(&planted);
    let two = words(60, 2, vocab);
    let (a, fa) = ask(&planted, &two, None, 9);
    let (b, _) = ask(&fresh, &two, None, 9);
    assert!(
        fa.cached_tokens > 0,
        "the planted cache resumed the other conversation"
    );
    assert_ne!(
        a, b,
        "the receipt's comparison catches a wrongly resumed state"
    );
}
