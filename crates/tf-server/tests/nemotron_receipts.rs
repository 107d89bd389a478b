//! Receipts over HTTP on the Nemotron-H fixture (Mamba2 + attention + MoE; recurrent state is
//! resumed from snapshots): resumed == fresh over multi-turn chats (greedy and seeded, plain and
//! tool turns) with the chunk grid restarted at message starts, drafted == plain, the prompt
//! cache's /metrics, each with a planted control that must fail.

mod fixture_chat;

use fixture_chat::*;
use tf_server::drafts_receipt::{drafts, DraftsPlan};
use tf_server::resume_receipt::{resume_with, ResumePlan, ResumeReport, Script};

fn fixture() -> ChatFixture {
    ChatFixture {
        path: "nemotron_h/plain_moe/f32_hf",
        vocab: 96,
        template: COMPACT_TEMPLATE.into(),
    }
}

/// The fixture's context is 256 tokens: short messages, three turns.
fn plan() -> ResumePlan {
    ResumePlan {
        turns: 3,
        max_tokens: 12,
    }
}

fn receipt(cached: &Setup) -> (ResumeReport, f64, f64) {
    let f = fixture();
    let a = start(&f, cached);
    let b = start(&f, &Setup::default());
    let report = resume_with(&client(&a), &client(&b), &plan(), &Script::brief(), |_| {})
        .expect("the receipt runs");
    let hits = metric(&a, "tensorfold_prompt_cache_hits_total");
    let reused = metric(&a, "tensorfold_prompt_cache_reused_tokens_total");
    // Every cache series is there; the budget is the configured one; the held bytes within it.
    let budget = metric(&a, "tensorfold_prompt_cache_budget_bytes");
    assert_eq!(budget as u64, cached.cache_bytes);
    assert!(metric(&a, "tensorfold_prompt_cache_bytes") <= budget);
    assert!(metric(&a, "tensorfold_prompt_cache_entries") >= 1.0);
    assert!(metric(&a, "tensorfold_prompt_cache_misses_total") >= 1.0);
    assert_eq!(metric(&a, "tensorfold_prompt_cache_evictions_total"), 0.0);
    assert_eq!(metric(&b, "tensorfold_prompt_cache_hits_total"), 0.0);
    (report, hits, reused)
}

#[test]
fn resumed_equals_fresh_over_chat_turns_resuming_at_message_starts() {
    assert_eq!(marker(&fixture()), Some(vec![b'@' as u32 - 0x20 + 1]));
    assert_eq!(
        end_token(&fixture()),
        Some(0),
        "the newline closes each message"
    );
    let cache = 64 << 20;
    let marked = Setup {
        cache_bytes: cache,
        message_starts: true,
        ..Setup::default()
    };
    let (report, hits, reused) = receipt(&marked);
    eprintln!("{}", report.render());
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    let (equal, total) = report.score();
    assert_eq!((equal, total), (12, 12), "resumed == fresh");
    // Every later turn resumed something, and /metrics agrees with the replies' usage.
    assert_eq!(report.resumed_turns(), 8, "{}", report.render());
    assert!(hits >= 8.0);
    assert_eq!(reused as u64, report.cached_tokens());
    // The same receipt on the plain grid: equal too; it reuses no more than message starts do.
    let (grid, _, _) = receipt(&Setup {
        cache_bytes: cache,
        ..Setup::default()
    });
    assert_eq!(grid.score(), (12, 12), "resumed == fresh on the plain grid");
    eprintln!(
        "cached tokens over the receipt: message starts {}, plain grid {}",
        report.cached_tokens(),
        grid.cached_tokens()
    );
    assert!(report.cached_tokens() >= grid.cached_tokens());
}

#[test]
fn planted_control_a_stale_cache_makes_resumed_differ_from_fresh() {
    let (report, _, _) = receipt(&Setup {
        cache_bytes: 64 << 20,
        message_starts: true,
        planted_stale_cache: true,
        ..Setup::default()
    });
    let (equal, total) = report.score();
    assert!(equal < total, "the planted stale cache went unnoticed");
}

#[test]
fn drafted_equals_plain_over_chat_and_the_planted_control_fails() {
    let f = fixture();
    // The random fixture seldom repeats three tokens: match on one, so drafts are proposed.
    let setup = Setup {
        draft_match: 1,
        ..Setup::default()
    };
    let server = start(&f, &setup);
    let report =
        drafts(&client(&server), &DraftsPlan { max_tokens: 24 }, |_| {}).expect("the receipt runs");
    eprintln!("{}", report.render());
    let (equal, total) = report.score();
    assert_eq!((equal, total), (6, 6), "drafted == plain");
    assert!(report.rows.iter().map(|r| r.proposed).sum::<u64>() > 0);
    let planted = start(
        &f,
        &Setup {
            planted_unverified_drafts: true,
            ..setup
        },
    );
    let bad = drafts(&client(&planted), &DraftsPlan { max_tokens: 24 }, |_| {})
        .expect("the receipt runs");
    let (equal, total) = bad.score();
    assert!(equal < total, "the planted unverified draft went unnoticed");
}
