//! Prompt cache tests on crafted states: the chunk plan (grid and message markers), resume
//! points, recurrent snapshots, LRU eviction.

use super::*;
use tf_kernels::ops::kv::{KvCache, LayerKv};
use tf_kernels::ops::mamba::MambaState;

/// An attention state of `len` positions whose rows hold their position (so a cut is visible).
fn attn(len: usize) -> StreamState {
    let mut layer = LayerKv::new(1, 2).expect("layer");
    for p in 0..len {
        layer
            .append(&[p as f32; 2], &[p as f32; 2])
            .expect("append");
    }
    StreamState {
        kv: KvCache::from_layers(vec![layer]),
        len,
        mamba: vec![],
        device: None,
    }
}

fn recurrent(len: usize) -> StreamState {
    let mut s = attn(len);
    s.mamba = vec![MambaState {
        conv: vec![len as f32; 3],
        ssm: vec![len as f32; 4],
    }];
    s
}

fn grid(c: usize) -> ChunkPlan {
    ChunkPlan::new(c, vec![])
}

fn toks(n: usize) -> Vec<u32> {
    (0..n as u32).map(|t| t * 7 + 1).collect()
}

#[test]
fn resumes_attention_at_the_grid_point_below_the_shared_prefix() {
    let mut c = PromptCache::new(1 << 20, grid(4));
    c.insert(&toks(11), attn(11));
    // The new prompt shares 11 tokens and goes on: resume at 8 (grid), not 11.
    let mut p = toks(11);
    p.extend([900, 901]);
    let r = c.lookup(&p).expect("a hit");
    assert_eq!((r.cached, r.state.len), (8, 8));
    assert_eq!(r.state.kv.layer(0).map(|l| l.len()), Some(8));
    // Diverging at 6: resume at 4.
    let mut q = toks(6);
    q.extend([5, 5, 5, 5]);
    assert_eq!(c.lookup(&q).map(|r| r.cached), Some(4));
    // Sharing fewer than one grid step: nothing.
    assert!(c.lookup(&[1, 8, 99, 99, 99, 99]).is_none());
    // Control: a prompt equal to the whole entry still leaves its last token to feed.
    assert_eq!(c.lookup(&toks(8)).map(|r| r.cached), Some(4));
    let s = c.stats();
    assert_eq!((s.hits, s.misses, s.reused_tokens), (3, 1, 16));
}

#[test]
fn recurrent_states_resume_only_whole_and_on_the_grid() {
    let mut c = PromptCache::new(1 << 20, grid(4));
    // Off the grid: not kept (it could never be resumed exactly).
    c.insert(&toks(10), recurrent(10));
    assert_eq!(c.stats().entries, 0);
    c.insert(&toks(8), recurrent(8));
    let mut p = toks(8);
    p.push(3);
    let r = c.lookup(&p).expect("a hit");
    assert_eq!(r.cached, 8);
    assert_eq!(r.state.mamba[0].ssm, vec![8.0; 4]);
    // A prompt that diverges inside the snapshot cannot use it (no cutting back Mamba state).
    let mut q = toks(6);
    q.extend([0, 0, 0, 0, 0]);
    assert!(c.lookup(&q).is_none());
}

#[test]
fn evicts_least_recently_used_within_the_budget() {
    let one = attn(8).bytes() + 8 * 4;
    let mut c = PromptCache::new((2 * one) as u64, grid(4));
    let a: Vec<u32> = (100..108).collect();
    let b: Vec<u32> = (200..208).collect();
    let d: Vec<u32> = (300..308).collect();
    c.insert(&a, attn(8));
    c.insert(&b, attn(8));
    // Touch a, so b is the least recently used when d arrives.
    let mut pa = a.clone();
    pa.push(1);
    assert!(c.lookup(&pa).is_some());
    c.insert(&d, attn(8));
    let s = c.stats();
    assert_eq!((s.entries, s.evictions), (2, 1));
    assert!(s.bytes <= 2 * one);
    let mut pb = b.clone();
    pb.push(1);
    assert!(c.lookup(&pb).is_none(), "b was evicted");
    assert!(c.lookup(&pa).is_some(), "a stays");
    // A state larger than the whole budget is not kept; a disabled cache keeps nothing.
    c.insert(&toks(64), attn(64));
    assert_eq!(c.stats().entries, 2);
    let mut off = PromptCache::new(0, grid(4));
    off.insert(&a, attn(8));
    assert!(off.lookup(&pa).is_none());
}

#[test]
fn a_longer_state_replaces_the_prefix_it_covers() {
    let mut c = PromptCache::new(1 << 20, grid(4));
    c.insert(&toks(8), attn(8));
    c.insert(&toks(12), attn(12));
    assert_eq!(c.stats().entries, 1);
    let mut p = toks(12);
    p.push(0);
    assert_eq!(c.lookup(&p).map(|r| r.cached), Some(12));
}

/// A conversation of messages, each opened by the marker [1, 2] and holding `lens[i]` tokens
/// of content (ids from 10 on, never the marker).
fn chat(lens: &[usize]) -> Vec<u32> {
    let mut t = Vec::new();
    for (i, &n) in lens.iter().enumerate() {
        t.extend([1, 2]);
        t.extend((0..n as u32).map(|k| 10 + (k * 3 + i as u32) % 50));
    }
    t
}

#[test]
fn the_plan_restarts_its_grid_at_every_message_start() {
    let plan = ChunkPlan::new(4, vec![1, 2]);
    // Messages of 2+7, 2+3 and 2+5 tokens start at 0, 9 and 14.
    let t = chat(&[7, 3, 5]);
    assert_eq!(plan.message_starts(&t), vec![9, 14]);
    assert_eq!(plan.boundaries(&t), vec![0, 4, 8, 9, 13, 14, 18, 21]);
    assert!(plan.is_boundary(&t, 9) && plan.is_boundary(&t, 13));
    assert!(!plan.is_boundary(&t, 12) && !plan.is_boundary(&t, 16));
    assert_eq!(plan.boundary_at_most(&t, 12), 9);
    assert_eq!(plan.boundary_at_most(&t, 20), 18);
    assert_eq!(plan.chunk_end(&t, 8), 9);
    assert_eq!(plan.chunk_end(&t, 18), 21);
    // The plan is a function of the tokens: a later turn keeps every boundary of the earlier
    // prefix (the resumed and the fresh request take the same chunks).
    let longer = chat(&[7, 3, 5, 6]);
    let b = plan.boundaries(&longer);
    assert!(b.starts_with(&[0, 4, 8, 9, 13, 14, 18]), "{b:?}");
    assert!(b.contains(&21), "the new message starts a chunk: {b:?}");
    // Without a marker: the plain grid.
    assert_eq!(grid(4).boundaries(&t), vec![0, 4, 8, 12, 16, 20, 21]);
    // A marker cut off at the end of the tokens is not a boundary yet.
    let mut cut = chat(&[3]);
    cut.push(1);
    assert!(plan.message_starts(&cut).is_empty());
}

#[test]
fn resumes_at_the_latest_message_start_where_the_grid_would_resume_earlier() {
    // The earlier turn's prompt: system (2+5), user (2+4), the assistant's opening (2) at 13;
    // the stream then generated 3 tokens. The next turn re-renders the reply differently
    // (a template need not give back the generated ids) and adds a user message.
    let prompt1 = chat(&[5, 4, 0]);
    assert_eq!(prompt1.len(), 15);
    let mut consumed = prompt1.clone();
    consumed.extend([40, 41, 42]);
    let mut turn2 = prompt1.clone();
    turn2.extend([43, 44]);
    turn2.extend(chat(&[3]));
    // Recurrent snapshots as the scheduler keeps them: with the marker, at the latest message
    // start (13) and the latest boundary; on the plain grid, at 8 and 16.
    let marked = ChunkPlan::new(8, vec![1, 2]);
    let mut m = PromptCache::new(1 << 20, marked.clone());
    m.insert(&consumed, recurrent(13));
    let mut g = PromptCache::new(1 << 20, grid(8));
    g.insert(&consumed, recurrent(8));
    g.insert(&consumed, recurrent(16));
    // Off-boundary snapshots are never kept.
    g.insert(&consumed, recurrent(13));
    m.insert(&consumed, recurrent(12));
    assert_eq!((m.stats().entries, g.stats().entries), (1, 2));
    assert_eq!(m.lookup(&turn2).map(|r| r.cached), Some(13));
    assert_eq!(g.lookup(&turn2).map(|r| r.cached), Some(8));
    // Attention: cut back to the latest boundary of the new prompt within the shared prefix
    // (15: the grid of the assistant's segment restarts at 13, so 15 is no boundary; 13 is).
    let mut a = PromptCache::new(1 << 20, marked);
    a.insert(&consumed, attn(consumed.len()));
    assert_eq!(a.lookup(&turn2).map(|r| r.cached), Some(13));
    let mut same = consumed.clone();
    same.extend(chat(&[3]));
    assert_eq!(a.lookup(&same).map(|r| r.cached), Some(18));
}

#[test]
fn message_end_tokens_are_boundaries_and_resume_a_stopped_reply_whole() {
    // Messages close with END (9): [1, 2] role content.. 9.
    let plan = ChunkPlan::new(8, vec![1, 2]).with_end_token(Some(9));
    let mut t = chat(&[5, 4]);
    t.insert(7, 9);
    t.push(9);
    // Starts at 0 and 8; ends at 7 and 14.
    assert_eq!(plan.message_starts(&t), vec![8]);
    assert_eq!(plan.boundaries(&t), vec![0, 7, 8, 14, 15]);
    assert!(plan.is_boundary(&t, 14) && !plan.is_boundary(&t, 13));
    assert_eq!(plan.boundary_at_most(&t, 14), 14);
    assert_eq!(plan.boundary_at_most(&t, 13), 8);
    // A recurrent state that stopped right before an end token (a reply that stopped on it):
    // the next turn resumes it whole; without the end token it was no boundary.
    let prompt = chat(&[5, 0]);
    let mut stopped = prompt.clone();
    stopped.extend([40, 41, 42, 43]);
    let mut next = stopped.clone();
    next.push(9);
    next.extend(chat(&[3]));
    let mut c = PromptCache::new(1 << 20, plan.clone());
    c.insert(&next, recurrent(stopped.len()));
    assert_eq!(c.lookup(&next).map(|r| r.cached), Some(stopped.len()));
    let mut g = PromptCache::new(1 << 20, ChunkPlan::new(8, vec![1, 2]));
    g.insert(&next, recurrent(stopped.len()));
    assert_eq!(
        g.stats().entries,
        0,
        "no boundary there without the end token"
    );
}
