//! Receipts over HTTP on the Muse Spark fixtures (sliding and full attention, MoE), with the
//! fixture's own chat template: resumed == fresh over multi-turn chats (greedy and seeded,
//! plain and tool turns) with the chunk grid restarted at message starts (`<|start|>`),
//! drafted == plain, each with a planted control that must fail.

mod fixture_chat;

use fixture_chat::*;
use tf_server::drafts_receipt::{drafts, DraftsPlan};
use tf_server::resume_receipt::{resume_with, ResumePlan, ResumeReport, Script};

fn fixture(path: &'static str) -> ChatFixture {
    ChatFixture {
        path,
        vocab: 256,
        template: muse_template(),
    }
}

const FIXTURES: [&str; 2] = ["muse_spark/mlx-f32", "muse_spark/mlx-4bit"];

fn plan() -> ResumePlan {
    ResumePlan {
        turns: 3,
        max_tokens: 16,
    }
}

fn receipt(f: &ChatFixture, cached: &Setup) -> ResumeReport {
    let a = start(f, cached);
    let b = start(f, &Setup::default());
    resume_with(
        &client(&a),
        &client(&b),
        &plan(),
        &Script::default(),
        |_| {},
    )
    .expect("the receipt runs")
}

#[test]
fn resumed_equals_fresh_over_chat_turns_resuming_at_message_starts() {
    let marker = marker(&fixture(FIXTURES[0])).expect("a marker");
    assert_eq!(
        marker,
        b"<|start|>".iter().map(|&b| b as u32).collect::<Vec<_>>()
    );
    // `<|eot|>` closes each message, but spelled in bytes its first token, `<`, also opens
    // every message: no end token.
    assert_eq!(end_token(&fixture(FIXTURES[0])), None);
    for path in FIXTURES {
        let f = fixture(path);
        let report = receipt(
            &f,
            &Setup {
                cache_bytes: 64 << 20,
                message_starts: true,
                ..Setup::default()
            },
        );
        eprintln!("{path}\n{}", report.render());
        // Tool turns run too: the template maps over `function.arguments`, which the server
        // parses from the client's JSON string before rendering.
        assert!(report.skipped.is_empty(), "{:?}", report.skipped);
        let turns = 12;
        assert_eq!(report.score(), (turns, turns), "{path}: resumed == fresh");
        assert_eq!(report.resumed_turns(), turns * 2 / 3, "{path}");
    }
}

#[test]
fn planted_control_a_stale_cache_makes_resumed_differ_from_fresh() {
    let report = receipt(
        &fixture(FIXTURES[0]),
        &Setup {
            cache_bytes: 64 << 20,
            message_starts: true,
            planted_stale_cache: true,
            ..Setup::default()
        },
    );
    let (equal, total) = report.score();
    assert!(equal < total, "the planted stale cache went unnoticed");
}

#[test]
fn drafted_equals_plain_over_chat_and_the_planted_control_fails() {
    for path in FIXTURES {
        let f = fixture(path);
        let setup = Setup {
            draft_match: 1,
            ..Setup::default()
        };
        let server = start(&f, &setup);
        let report = drafts(&client(&server), &DraftsPlan { max_tokens: 24 }, |_| {})
            .expect("the receipt runs");
        eprintln!("{path}\n{}", report.render());
        assert_eq!(report.score(), (6, 6), "{path}: drafted == plain");
        assert!(report.rows.iter().map(|r| r.proposed).sum::<u64>() > 0);
    }
    let planted = start(
        &fixture(FIXTURES[0]),
        &Setup {
            draft_match: 1,
            planted_unverified_drafts: true,
            ..Setup::default()
        },
    );
    let bad = drafts(&client(&planted), &DraftsPlan { max_tokens: 24 }, |_| {})
        .expect("the receipt runs");
    let (equal, total) = bad.score();
    assert!(equal < total, "the planted unverified draft went unnoticed");
}
