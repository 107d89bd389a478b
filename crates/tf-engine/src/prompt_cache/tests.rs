//! Prompt cache tests on crafted states: grid resume points, recurrent snapshots, LRU eviction.

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

fn toks(n: usize) -> Vec<u32> {
    (0..n as u32).map(|t| t * 7 + 1).collect()
}

#[test]
fn resumes_attention_at_the_grid_point_below_the_shared_prefix() {
    let mut c = PromptCache::new(1 << 20, 4);
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
    let mut c = PromptCache::new(1 << 20, 4);
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
    let mut c = PromptCache::new((2 * one) as u64, 4);
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
    let mut off = PromptCache::new(0, 4);
    off.insert(&a, attn(8));
    assert!(off.lookup(&pa).is_none());
}

#[test]
fn a_longer_state_replaces_the_prefix_it_covers() {
    let mut c = PromptCache::new(1 << 20, 4);
    c.insert(&toks(8), attn(8));
    c.insert(&toks(12), attn(12));
    assert_eq!(c.stats().entries, 1);
    let mut p = toks(12);
    p.push(0);
    assert_eq!(c.lookup(&p).map(|r| r.cached), Some(12));
}
