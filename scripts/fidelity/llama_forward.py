"""A plain float32 llama forward in numpy, teacher-forced over a whole token sequence.

Arithmetic: every activation, matmul and softmax is float32 (numpy/BLAS float32
accumulation, in whatever order the BLAS picks); rope angles are computed in float64 and
their cos/sin rounded once to float32. No KV cache: each call recomputes the full causal
sequence, which is what a teacher-forced reference needs.

Rope layouts (both are implemented so each can check the other):
- "hf": Q/K rows un-permuted to Hugging Face order, rotate pairs (i, i + head_dim/2).
- "gguf": Q/K rows as stored in GGUF, rotate adjacent pairs (2i, 2i+1) (llama.cpp's
  "normal" rope). The two are the same function of the weights.
"""

from __future__ import annotations

import numpy as np

from gguf_llama import LlamaWeights


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: np.float32) -> np.ndarray:
    """x * rsqrt(mean(x^2) + eps) * weight, in float32, over the last axis."""
    ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
    return (x * (np.float32(1.0) / np.sqrt(ms + eps))) * weight


def rope_tables(n_pos: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin [n_pos, head_dim/2] for frequency index i = theta^(-2i/head_dim)."""
    i = np.arange(head_dim // 2, dtype=np.float64)
    inv_freq = theta ** (-2.0 * i / head_dim)
    ang = np.arange(n_pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str) -> np.ndarray:
    """Rotate x [T, heads, head_dim] by position; layout "hf" (half split) or "gguf" (adjacent)."""
    c = cos[:, None, :]
    s = sin[:, None, :]
    if layout == "hf":
        half = x.shape[-1] // 2
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)
    if layout == "gguf":
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = b * c + a * s
        return out
    raise ValueError(f"unknown rope layout {layout!r}")


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x) in float32 (exp overflow for very negative x gives -0, as intended)."""
    with np.errstate(over="ignore"):
        return x / (np.float32(1.0) + np.exp(-x))


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, n_rep: int) -> np.ndarray:
    """Causal softmax attention with grouped KV heads; q [T,H,D], k/v [T,Hkv,D] -> [T,H*D]."""
    t, n_head, d = q.shape
    scale = np.float32(1.0 / np.sqrt(d))
    mask = np.triu(np.ones((t, t), dtype=bool), k=1)
    out = np.empty((t, n_head, d), dtype=np.float32)
    for h in range(n_head):
        g = h // n_rep  # head h reads KV head h // (n_head / n_head_kv)
        scores = (q[:, h, :] @ k[:, g, :].T) * scale
        scores[mask] = -np.inf
        scores -= scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=-1, keepdims=True, dtype=np.float32)
        out[:, h, :] = p @ v[:, g, :]
    return out.reshape(t, n_head * d)


def hidden_states(w: LlamaWeights, ids: list[int]) -> np.ndarray:
    """Final-normed hidden states [T, n_embd] for the token ids (positions 0..T-1)."""
    cfg = w.config
    if not ids:
        raise ValueError("empty token list")
    bad = [i for i in ids if not 0 <= i < cfg.n_vocab]
    if bad:
        raise ValueError(f"token ids out of range [0, {cfg.n_vocab}): {bad[:5]}")
    t = len(ids)
    layout = w.qk_order
    cos, sin = rope_tables(t, cfg.head_dim, cfg.rope_theta)
    n_rep = cfg.n_head // cfg.n_head_kv
    x = w.token_embd[np.asarray(ids)].astype(np.float32)
    for layer in w.layers:
        h = rms_norm(x, layer["attn_norm"], cfg.rms_eps)
        q = (h @ layer["wq"].T).reshape(t, cfg.n_head, cfg.head_dim)
        k = (h @ layer["wk"].T).reshape(t, cfg.n_head_kv, cfg.head_dim)
        v = (h @ layer["wv"].T).reshape(t, cfg.n_head_kv, cfg.head_dim)
        q = apply_rope(q, cos, sin, layout)
        k = apply_rope(k, cos, sin, layout)
        x = x + causal_attention(q, k, v, n_rep) @ layer["wo"].T
        h = rms_norm(x, layer["ffn_norm"], cfg.rms_eps)
        x = x + (silu(h @ layer["w_gate"].T) * (h @ layer["w_up"].T)) @ layer["w_down"].T
    return rms_norm(x, w.output_norm, cfg.rms_eps)


def logits(w: LlamaWeights, ids: list[int]) -> np.ndarray:
    """Teacher-forced logits [T, vocab] float32: row t scores the token at position t+1."""
    return np.ascontiguousarray(hidden_states(w, ids) @ w.output.T, dtype=np.float32)


def greedy(w: LlamaWeights, prompt: list[int], n: int) -> list[int]:
    """Greedy continuation (argmax, lowest id on ties) by recomputing the sequence each step."""
    ids = list(prompt)
    out: list[int] = []
    for _ in range(n):
        last = hidden_states(w, ids)[-1]
        tok = int(np.argmax(last @ w.output.T))
        out.append(tok)
        ids.append(tok)
    return out
