//! Scheduler tests: the round planner on crafted streams, and concurrent == solo on the real
//! model (skipped with a note when the model is absent, unless TENSORFOLD_REQUIRE_MODEL is set).

use super::engine::{plan_round, StreamView};
use super::*;
use crate::generate::{generate, FinishReason, GenerateRequest};
use crate::prompt_cache::ChunkPlan;
use crate::sampler::SamplingParams;
use std::path::PathBuf;
use std::sync::mpsc;

fn view(prompt: &[u32], prefilled: usize, pending: Option<u32>) -> StreamView<'_> {
    StreamView {
        prompt,
        prefilled,
        state_len: prefilled,
        pending,
        draft: &[],
    }
}

#[test]
fn plan_puts_decode_rows_first_and_chunks_on_the_grid() {
    let long: Vec<u32> = (0..10).collect();
    let short = [7u32, 8, 9];
    let streams = [
        view(&long, 4, None),
        view(&short, 3, Some(42)),
        view(&short, 0, None),
    ];
    let plan = plan_round(&streams, &ChunkPlan::new(4, vec![]), 4);
    assert_eq!(plan.decode_rows, 1);
    assert_eq!(plan.rows[0].stream, 1);
    assert_eq!(plan.rows[0].token, 42);
    assert_eq!(plan.rows[0].pos, 3);
    // Stream 0 takes its chunk [4, 8): the budget (4) is spent, stream 2 waits.
    let pos0: Vec<usize> = plan.rows[1..].iter().map(|r| r.pos).collect();
    assert_eq!(pos0, vec![4, 5, 6, 7]);
    assert!(plan.rows[1..].iter().all(|r| r.stream == 0 && !r.logits));
    assert_eq!(plan.owners, vec![1]);
    assert_eq!(plan.advances, vec![(0, 8)]);
    // Next round: stream 0's last chunk [8, 10) ends the prompt and wants logits; stream 2's
    // chunk [0, 3) does not fit the rest of the budget (2) and waits.
    let streams = [view(&long, 8, None), view(&short, 0, None)];
    let plan = plan_round(&streams, &ChunkPlan::new(4, vec![]), 4);
    assert_eq!(plan.advances, vec![(0, 10)]);
    assert_eq!(plan.owners, vec![0]);
    assert!(plan.rows.last().is_some_and(|r| r.logits && r.pos == 9));
}

#[test]
fn plan_always_takes_one_chunk_even_past_the_budget() {
    let long: Vec<u32> = (0..10).collect();
    let plan = plan_round(&[view(&long, 0, None)], &ChunkPlan::new(8, vec![]), 2);
    assert_eq!(plan.advances, vec![(0, 8)]);
}

use tf_testkit::default_model;

fn load(path: &std::path::Path) -> Box<dyn tf_models::Model> {
    tf_models::load(path, &tf_models::LoadOptions { threads: 2 }).expect("load the model")
}

fn collect(rx: mpsc::Receiver<StreamEvent>) -> (Vec<u32>, Finished) {
    let mut ids = Vec::new();
    for ev in rx {
        match ev {
            StreamEvent::Token(t) => ids.push(t.id),
            StreamEvent::Finished(f) => return (ids, f),
            StreamEvent::Failed(e) => panic!("stream failed: {e}"),
        }
    }
    panic!("the stream ended without a Finished event");
}

fn requests() -> Vec<StreamRequest> {
    (0..4)
        .map(|i| StreamRequest {
            prompt: (0..(3 + 37 * i))
                .map(|t| (t * 131 + 17 * i) % 49000 + 10)
                .collect(),
            params: SamplingParams {
                temperature: if i % 2 == 0 { 0.0 } else { 0.8 },
                seed: 1000 + i as u64,
                ..Default::default()
            },
            max_tokens: 6,
            stop_ids: vec![],
            top_logprobs: None,
            draft: true,
        })
        .collect()
}

/// Waits (up to 30 s) until no stream runs: the gauges update just after the last event.
fn wait_idle(h: &SchedulerHandle) {
    let t = std::time::Instant::now();
    while h.snapshot().running > 0 {
        assert!(t.elapsed().as_secs() < 30, "a stream is still running");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn concurrent_equals_solo_and_generate_on_the_real_model() {
    let Some(path) = default_model() else { return };
    let reqs = requests();
    // Reference: the single-stream loop.
    let mut model = load(&path);
    let solo: Vec<Vec<u32>> = reqs
        .iter()
        .map(|r| {
            let g = GenerateRequest {
                prompt: r.prompt.clone(),
                params: r.params.clone(),
                max_tokens: r.max_tokens,
                stop_ids: r.stop_ids.clone(),
            };
            generate(model.as_mut(), &g, |_| true)
                .expect("generate")
                .generated
        })
        .collect();
    // Small chunks so prefill spans rounds shared with decode rows.
    let run = |planted: bool| -> Vec<Vec<u32>> {
        let cfg = SchedulerConfig {
            prefill_chunk: 16,
            round_prefill_tokens: 16,
            planted_crosstalk: planted,
            ..Default::default()
        };
        let sched = Scheduler::start(load(&path), cfg).expect("start");
        let rxs: Vec<_> = reqs
            .iter()
            .map(|r| {
                let (tx, rx) = mpsc::channel();
                sched
                    .handle()
                    .submit(r.clone(), Box::new(tx))
                    .expect("submit");
                rx
            })
            .collect();
        let out: Vec<Vec<u32>> = rxs
            .into_iter()
            .map(|rx| {
                let (ids, f) = collect(rx);
                assert_eq!(f.reason, FinishReason::Length);
                assert_eq!(f.generated_tokens, ids.len());
                ids
            })
            .collect();
        wait_idle(&sched.handle());
        assert_eq!(sched.handle().snapshot().finished, reqs.len() as u64);
        out
    };
    assert_eq!(run(false), solo, "concurrent != solo");
    // Planted control: mixing another stream's logits in must change some stream's tokens.
    assert_ne!(run(true), solo, "the planted crosstalk went unnoticed");
}

#[test]
fn dropped_receiver_cancels_and_frees_the_slot() {
    let Some(path) = default_model() else { return };
    let sched = Scheduler::start(load(&path), SchedulerConfig::default()).expect("start");
    let mut req = requests().remove(0);
    req.max_tokens = 10_000;
    let (tx, rx) = mpsc::channel();
    sched.handle().submit(req, Box::new(tx)).expect("submit");
    assert!(matches!(rx.recv(), Ok(StreamEvent::Token(_))));
    drop(rx);
    wait_idle(&sched.handle());
    assert_eq!(sched.handle().snapshot().cancelled, 1);
}

#[test]
fn queue_full_and_never_fits_are_refused() {
    let Some(path) = default_model() else { return };
    let model = load(&path);
    let info = model.info().clone();
    let cfg = SchedulerConfig {
        parallel: 1,
        queue: 1,
        memory_budget_bytes: (info.weight_bytes as u64) * 4,
        ..Default::default()
    };
    let sched = Scheduler::start(model, cfg).expect("start");
    let h = sched.handle();
    let mut req = requests().remove(0);
    req.max_tokens = info.context;
    let err = h.submit(req.clone(), Box::new(mpsc::channel().0));
    assert!(matches!(err, Err(SubmitError::NeverFits { .. })), "{err:?}");
    req.max_tokens = 200;
    let (tx1, rx1) = mpsc::channel();
    h.submit(req.clone(), Box::new(tx1)).expect("first");
    // Wait until the first runs, so the second waits and the third finds the queue full.
    assert!(matches!(rx1.recv(), Ok(StreamEvent::Token(_))));
    let (tx2, _rx2) = mpsc::channel();
    h.submit(req.clone(), Box::new(tx2)).expect("second waits");
    let err = h.submit(req, Box::new(mpsc::channel().0));
    assert!(matches!(err, Err(SubmitError::QueueFull { .. })), "{err:?}");
    let mut empty = requests().remove(0);
    empty.prompt.clear();
    assert_eq!(
        h.submit(empty, Box::new(mpsc::channel().0)),
        Err(SubmitError::EmptyPrompt)
    );
}

/// The tiny Nemotron-H fixture (Mamba2 + attention + MoE), committed.
fn nemotron_fixture() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/nemotron_h/plain_moe/f32_hf")
}

/// Token-level chat framing for the fixture (vocabulary 96): a message is MARKER, a role id,
/// its content, then END.
const MARKER: [u32; 2] = [5, 6];
const END: u32 = 7;
const ASSISTANT: u32 = 8;

fn message(role: u32, content: &[u32]) -> Vec<u32> {
    let mut m = MARKER.to_vec();
    m.push(role);
    m.extend_from_slice(content);
    m.push(END);
    m
}

fn content(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|t| (t * 37 + salt * 11) % 80 + 10)
        .collect()
}

fn start_fixture(cache_bytes: u64, marker: &[u32]) -> Scheduler {
    let cfg = SchedulerConfig {
        parallel: 2,
        prefill_chunk: 16,
        round_prefill_tokens: 16,
        prompt_cache_bytes: cache_bytes,
        message_marker: marker.to_vec(),
        ..Default::default()
    };
    Scheduler::start(load(&nemotron_fixture()), cfg).expect("start")
}

fn ask(s: &Scheduler, prompt: &[u32], seed: Option<u64>, max_tokens: usize) -> (Vec<u32>, usize) {
    ask_until(s, prompt, seed, max_tokens, vec![])
}

fn ask_until(
    s: &Scheduler,
    prompt: &[u32],
    seed: Option<u64>,
    max_tokens: usize,
    stop_ids: Vec<u32>,
) -> (Vec<u32>, usize) {
    let (tx, rx) = mpsc::channel();
    let req = StreamRequest {
        prompt: prompt.to_vec(),
        params: SamplingParams {
            temperature: if seed.is_some() { 0.9 } else { 0.0 },
            seed: seed.unwrap_or(3),
            ..Default::default()
        },
        max_tokens,
        stop_ids,
        top_logprobs: None,
        draft: true,
    };
    s.handle().submit(req, Box::new(tx)).expect("submit");
    let (ids, f) = collect(rx);
    wait_idle(&s.handle());
    (ids, f.cached_tokens)
}

/// A chat conversation of `turns` turns at the token level; each turn's prompt ends with the
/// assistant's opening, and the next turn renders the reply back without its first token (as
/// templates that drop earlier reasoning do), so the new prompt leaves the cached one right
/// after the assistant's opening. Returns each turn's tokens and cached tokens.
fn chat_turns(s: &Scheduler, seed: Option<u64>, turns: usize) -> (Vec<Vec<u32>>, Vec<usize>) {
    let mut prompt = message(1, &content(21, 1));
    let (mut out, mut cached) = (Vec::new(), Vec::new());
    for turn in 0..turns {
        prompt.extend(message(2, &content(9 + 4 * turn, 2 + turn as u32)));
        prompt.extend(MARKER);
        prompt.push(ASSISTANT);
        let (reply, c) = ask(s, &prompt, seed, 10);
        prompt.extend_from_slice(&reply[1..]);
        prompt.push(END);
        out.push(reply);
        cached.push(c);
    }
    (out, cached)
}

#[test]
fn message_starts_resume_recurrent_state_further_than_the_plain_grid() {
    let marked = start_fixture(1 << 26, &MARKER);
    let grid = start_fixture(1 << 26, &[]);
    let fresh = start_fixture(0, &MARKER);
    for seed in [None, Some(17)] {
        let (want, none) = chat_turns(&fresh, seed, 4);
        assert!(none.iter().all(|&c| c == 0));
        let (got_m, cached_m) = chat_turns(&marked, seed, 4);
        let (got_g, cached_g) = chat_turns(&grid, seed, 4);
        assert_eq!(got_m, want, "resumed (message starts) == fresh ({seed:?})");
        assert_eq!(got_g, want, "resumed (plain grid) == fresh ({seed:?})");
        eprintln!(
            "cached tokens per turn ({seed:?}): message starts {cached_m:?}, grid {cached_g:?}"
        );
        // Each later turn resumes exactly at the previous turn's assistant opening.
        let mut prompt_len = message(1, &content(21, 1)).len();
        for turn in 0..4 {
            prompt_len += message(2, &content(9 + 4 * turn, 2 + turn as u32)).len();
            if turn + 1 < 4 {
                assert_eq!(cached_m[turn + 1], prompt_len, "turn {}", turn + 1);
            }
            prompt_len += MARKER.len() + 1 + 10;
        }
        let (m, g): (usize, usize) = (cached_m.iter().sum(), cached_g.iter().sum());
        assert!(m > g, "message starts {cached_m:?} vs grid {cached_g:?}");
    }
}

fn start_drafting(cache_bytes: u64) -> Scheduler {
    let cfg = SchedulerConfig {
        parallel: 2,
        prefill_chunk: 16,
        round_prefill_tokens: 16,
        prompt_cache_bytes: cache_bytes,
        message_marker: MARKER.to_vec(),
        // Matching two tokens, the fixture's greedy loops give windows accepted in part.
        draft_match_tokens: 2,
        ..Default::default()
    };
    Scheduler::start(load(&nemotron_fixture()), cfg).expect("start")
}

/// The serial reference: no cache, no drafts.
fn start_reference() -> Scheduler {
    let cfg = SchedulerConfig {
        prefill_chunk: 16,
        round_prefill_tokens: 16,
        draft_tokens: 0,
        ..Default::default()
    };
    Scheduler::start(load(&nemotron_fixture()), cfg).expect("start")
}

/// A first turn's prompt: a system and a user message, then the assistant's opening.
fn first_turn(salt: u32) -> Vec<u32> {
    let mut p = message(1, &content(20, salt));
    p.extend(message(2, &content(9, salt + 1)));
    p.extend(MARKER);
    p.push(ASSISTANT);
    p
}

/// The next turn: `prompt`, the reply, its end, a user message and the assistant's opening.
fn next_turn(prompt: &[u32], reply: &[u32], salt: u32) -> Vec<u32> {
    let mut p = prompt.to_vec();
    p.extend_from_slice(reply);
    p.push(END);
    p.extend(message(2, &content(7, salt)));
    p.extend(MARKER);
    p.push(ASSISTANT);
    p
}

#[test]
fn recurrent_state_is_exact_after_partial_windows_a_cancel_and_an_eviction() {
    let reference = start_reference();
    // Partially accepted draft windows across two cached turns (greedy loops, long replies).
    let s = start_drafting(1 << 26);
    for salt in 1..3 {
        let p0 = first_turn(salt);
        let (r0, c0) = ask(&s, &p0, None, 90);
        assert_eq!((r0.clone(), 0), ask(&reference, &p0, None, 90), "turn 0");
        let p1 = next_turn(&p0, &r0, salt + 5);
        let (r1, c1) = ask(&s, &p1, None, 90);
        assert_eq!(r1, ask(&reference, &p1, None, 90).0, "turn 1 (salt {salt})");
        assert!(c0 == 0 || salt > 1, "{c0}");
        assert!(c1 >= p0.len() - 3, "turn 1 resumes the opening: {c1}");
    }
    let m = s.handle().snapshot();
    assert!(
        m.draft_accepted > 0 && m.draft_accepted < m.draft_proposed,
        "no partially accepted window: {m:?}"
    );

    // A client leaves after five tokens: the next turn (built on what it received) is exact
    // and resumes the cancelled stream's snapshot at the assistant's opening.
    let p0 = first_turn(9);
    let (tx, rx) = mpsc::channel();
    let req = StreamRequest {
        prompt: p0.clone(),
        params: SamplingParams::default(),
        max_tokens: 120,
        stop_ids: vec![],
        top_logprobs: None,
        draft: true,
    };
    // The client is gone at the sixth token, however fast the stream runs.
    let sink = LeavesAfter { tokens: 5, tx };
    s.handle().submit(req, Box::new(sink)).expect("submit");
    let got: Vec<u32> = rx
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Token(t) => Some(t.id),
            _ => None,
        })
        .collect();
    assert_eq!(got.len(), 5);
    wait_idle(&s.handle());
    assert_eq!(s.handle().snapshot().cancelled, 1);
    let p1 = next_turn(&p0, &got, 3);
    let (a, cached) = ask(&s, &p1, Some(8), 20);
    assert_eq!(a, ask(&reference, &p1, Some(8), 20).0, "after the cancel");
    assert!(
        cached >= p0.len() - 3,
        "resumed the cancelled turn: {cached}"
    );

    // A budget of one and a half times what one first turn leaves: another conversation's
    // first turn evicts (part of) it mid-conversation.
    let x0 = first_turn(20);
    let one_turn = {
        let probe = start_drafting(1 << 26);
        ask(&probe, &x0, Some(1), 12);
        probe.handle().snapshot().cache_bytes
    };
    assert!(one_turn > 0);
    let small = start_drafting(one_turn * 3 / 2);
    let (rx0, _) = ask(&small, &x0, Some(1), 12);
    let y0 = first_turn(30);
    ask(&small, &y0, Some(2), 12);
    let evicted = small.handle().snapshot().cache_evictions;
    assert!(evicted > 0, "nothing was evicted");
    let x1 = next_turn(&x0, &rx0, 21);
    let (a, x_cached) = ask(&small, &x1, Some(1), 12);
    assert_eq!(a, ask(&reference, &x1, Some(1), 12).0, "after the eviction");
    assert_eq!(x_cached, 0, "the first conversation's prefix was evicted");
    let y1 = next_turn(&y0, &[40, 41], 31);
    let (b, cached) = ask(&small, &y1, Some(2), 12);
    assert_eq!(
        b,
        ask(&reference, &y1, Some(2), 12).0,
        "the evicting conversation"
    );
    eprintln!(
        "eviction: {evicted} evicted; the evicted conversation resumed {x_cached}, the other {cached}"
    );
}

#[test]
fn a_reply_stopped_on_the_end_token_resumes_whole_in_the_next_turn() {
    let reference = start_reference();
    // The end token: one the greedy reply produces a few tokens in (and not before, nor in
    // the prompt), so a reply that stops on it ends there.
    let p0 = first_turn(4);
    let (probe, _) = ask(&reference, &p0, None, 16);
    let (k, end) = probe
        .iter()
        .enumerate()
        .skip(2)
        .find(|&(k, t)| !probe[..k].contains(t) && !p0.contains(t))
        .map(|(k, &t)| (k, t))
        .expect("a token new to the reply");
    let start = |end_token: Option<u32>| {
        let cfg = SchedulerConfig {
            prefill_chunk: 16,
            round_prefill_tokens: 16,
            prompt_cache_bytes: 1 << 26,
            message_marker: MARKER.to_vec(),
            message_end_token: end_token,
            ..Default::default()
        };
        Scheduler::start(load(&nemotron_fixture()), cfg).expect("start")
    };
    let mut cached = Vec::new();
    for end_token in [Some(end), None] {
        let s = start(end_token);
        let (r0, _) = ask_until(&s, &p0, None, 16, vec![end]);
        assert_eq!(r0, probe[..k], "the reply stopped on the end token");
        let mut p1 = p0.clone();
        p1.extend_from_slice(&r0);
        p1.push(end);
        p1.extend(message(2, &content(6, 9)));
        p1.extend(MARKER);
        p1.push(ASSISTANT);
        for seed in [None, Some(4)] {
            let (a, c) = ask(&s, &p1, seed, 8);
            assert_eq!(a, ask(&reference, &p1, seed, 8).0, "resumed == fresh");
            cached.push(c);
        }
    }
    eprintln!(
        "end token: cached {:?} (with, with, without, without)",
        &cached
    );
    // With the end token the whole previous turn resumes; without, its assistant opening.
    assert_eq!(cached[0], p0.len() + k);
    assert_eq!(cached[2], p0.len() - 3);
}

/// A client that leaves after `tokens` tokens: its sink refuses the next one (a dropped
/// connection noticed at that send), whatever the timing.
struct LeavesAfter {
    tokens: usize,
    tx: mpsc::Sender<StreamEvent>,
}

impl EventSink for LeavesAfter {
    fn send(&mut self, event: StreamEvent) -> bool {
        if matches!(event, StreamEvent::Token(_)) {
            if self.tokens == 0 {
                return false;
            }
            self.tokens -= 1;
        }
        self.tx.send(event).is_ok()
    }
}
