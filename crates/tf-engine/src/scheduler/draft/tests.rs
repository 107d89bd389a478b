//! MTP drafts through the scheduler, on the fixtures of fixtures/nemotron_h/mtp/: drafted ==
//! plain (greedy, seeded, penalties, with the prompt cache), acceptance reported; a head that
//! reproduces the model's next prediction (`bigram`) is accepted almost always, a random head
//! seldom; a checkpoint without MTP weights drafts by context copies and says so. A planted
//! control (the first drafted token kept unverified) shows the comparison can fail.

use super::super::{Scheduler, SchedulerConfig, Snapshot, StreamEvent, StreamRequest};
use super::{DraftSource, Drafter};
use crate::sampler::SamplingParams;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/nemotron_h")
        .join(name)
}

fn load(path: &Path) -> Box<dyn tf_models::Model> {
    tf_models::load(path, &tf_models::LoadOptions { threads: 2 }).expect("load")
}

fn start(path: &Path, draft_tokens: usize, planted: bool, cache_bytes: u64) -> Scheduler {
    let cfg = SchedulerConfig {
        parallel: 4,
        draft_tokens,
        planted_unverified_drafts: planted,
        prompt_cache_bytes: cache_bytes,
        // A small grid so the recurrent model's state is snapshotted within short prompts.
        prefill_chunk: 8,
        round_prefill_tokens: 8,
        ..Default::default()
    };
    Scheduler::start(load(path), cfg).expect("start")
}

/// Greedy when `seed` is None, else seeded at temperature 0.9; `penalty` adds penalties.
fn request(prompt: Vec<u32>, seed: Option<u64>, penalty: bool, max_tokens: usize) -> StreamRequest {
    StreamRequest {
        prompt,
        params: SamplingParams {
            temperature: if seed.is_some() { 0.9 } else { 0.0 },
            seed: seed.unwrap_or(7),
            frequency_penalty: if penalty { 0.3 } else { 0.0 },
            repetition_penalty: if penalty { 1.1 } else { 1.0 },
            ..Default::default()
        },
        max_tokens,
        stop_ids: vec![],
        top_logprobs: None,
        draft: true,
    }
}

fn prompt(len: u32, salt: u32) -> Vec<u32> {
    (0..len).map(|t| (t * 37 + salt * 11) % 58 + 3).collect()
}

fn collect(rx: mpsc::Receiver<StreamEvent>) -> Vec<u32> {
    let mut ids = Vec::new();
    for ev in rx {
        match ev {
            StreamEvent::Token(t) => ids.push(t.id),
            StreamEvent::Finished(_) => return ids,
            StreamEvent::Failed(e) => panic!("stream failed: {e}"),
        }
    }
    panic!("no Finished event");
}

/// Runs all `reqs` at once on `s`; their tokens in order.
fn run_all(s: &Scheduler, reqs: &[StreamRequest]) -> Vec<Vec<u32>> {
    let rxs: Vec<_> = reqs
        .iter()
        .map(|r| {
            let (tx, rx) = mpsc::channel();
            s.handle().submit(r.clone(), Box::new(tx)).expect("submit");
            rx
        })
        .collect();
    rxs.into_iter().map(collect).collect()
}

fn idle(s: &Scheduler) -> Snapshot {
    let t = std::time::Instant::now();
    while s.handle().snapshot().running > 0 {
        assert!(t.elapsed().as_secs() < 60, "a stream is still running");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    s.handle().snapshot()
}

fn mixed(max_tokens: usize) -> Vec<StreamRequest> {
    vec![
        request(prompt(9, 1), None, false, max_tokens),
        request(prompt(13, 2), Some(11), false, max_tokens),
        request(prompt(5, 3), None, true, max_tokens),
        request(prompt(40, 4), Some(12), false, max_tokens),
    ]
}

/// drafted == plain on `name` for `reqs`; returns the drafting scheduler's counters.
fn drafted_equals_plain(name: &str, reqs: &[StreamRequest]) -> Snapshot {
    let plain = start(&fixture(name), 0, false, 0);
    let drafted = start(&fixture(name), 4, false, 0);
    let want = run_all(&plain, reqs);
    let got = run_all(&drafted, reqs);
    for (i, (a, b)) in want.iter().zip(&got).enumerate() {
        assert_eq!(a, b, "{name}: request {i}: drafted != plain");
        assert_eq!(a.len(), reqs[i].max_tokens);
    }
    let m = idle(&drafted);
    eprintln!(
        "{name}: MTP drafts proposed {}, accepted {} ({:.1}%), {} tokens in {} decode steps",
        m.draft_proposed,
        m.draft_accepted,
        100.0 * m.draft_accepted as f64 / m.draft_proposed.max(1) as f64,
        m.generated_tokens,
        m.decode_steps
    );
    m
}

#[test]
fn the_draft_source_follows_the_checkpoint_and_is_logged() {
    let d = Drafter::new(load(&fixture("mtp/random")).as_mut());
    assert_eq!(d.source(), DraftSource::Mtp);
    assert!(d.note().ends_with("drafts from MTP"), "{}", d.note());
    let d = Drafter::new(load(&fixture("plain_moe/f32_hf")).as_mut());
    assert_eq!(d.source(), DraftSource::ContextCopy);
    assert_eq!(
        d.note(),
        "nemotron_h: no MTP weights (num_nextn_predict_layers = 0); drafts use context copies"
    );
}

#[test]
fn a_head_that_predicts_the_model_is_accepted_and_changes_nothing() {
    let greedy: Vec<StreamRequest> = (1..5)
        .map(|i| request(prompt(4 + 5 * i, i), None, false, 24))
        .collect();
    let m = drafted_equals_plain("mtp/bigram", &greedy);
    assert!(m.draft_proposed >= 40, "too few MTP drafts: {m:?}");
    // The head reproduces the model's next prediction up to rounding: greedy drafts are kept.
    assert!(
        m.draft_accepted * 10 >= m.draft_proposed * 9,
        "a right head was rejected (misaligned positions?): {m:?}"
    );
    assert!(
        m.decode_steps * 2 < m.generated_tokens,
        "drafts saved no forward: {m:?}"
    );
    // Seeded sampling and penalties: still exact.
    drafted_equals_plain("mtp/bigram", &mixed(24));
}

#[test]
fn a_random_head_changes_nothing_either() {
    // "hybrid" has a Mamba block in its head: chained rows restore its recurrent state.
    for name in ["mtp/random", "mtp/hybrid"] {
        let m = drafted_equals_plain(name, &mixed(32));
        assert!(m.draft_proposed > 0, "{name}: nothing was drafted: {m:?}");
        assert!(
            m.draft_accepted < m.draft_proposed,
            "{name}: no rejection: {m:?}"
        );
    }
}

#[test]
fn mtp_drafts_with_the_prompt_cache_resume_exactly() {
    let path = fixture("mtp/bigram");
    let plain = start(&path, 0, false, 0);
    let drafted = start(&path, 4, false, 1 << 30);
    let first = request(prompt(20, 5), None, false, 12);
    let a = run_all(&plain, std::slice::from_ref(&first)).remove(0);
    assert_eq!(run_all(&drafted, std::slice::from_ref(&first)).remove(0), a);
    idle(&drafted);
    // The next turn extends the first: it resumes from the cache (the head starts there).
    let mut longer = first.prompt.clone();
    longer.extend_from_slice(&a);
    longer.extend(prompt(7, 6));
    let second = request(longer, None, false, 16);
    let want = run_all(&plain, std::slice::from_ref(&second)).remove(0);
    assert_eq!(
        run_all(&drafted, std::slice::from_ref(&second)).remove(0),
        want
    );
    let m = idle(&drafted);
    assert!(m.cache_hits > 0, "the second turn did not resume: {m:?}");
    assert!(m.draft_accepted > 0, "no MTP draft after a resume: {m:?}");
}

#[test]
fn planted_control_an_unverified_mtp_draft_makes_drafted_differ() {
    let path = fixture("mtp/random");
    let plain = start(&path, 0, false, 0);
    let planted = start(&path, 4, true, 0);
    let reqs = mixed(24);
    assert_ne!(
        run_all(&plain, &reqs),
        run_all(&planted, &reqs),
        "the planted unverified draft went unnoticed"
    );
}
