#!/usr/bin/env python3
"""Optional second reference: the same llama forward in MLX (CPU, float32), for cross-checking.

Independent of the numpy reference in everything but the architecture description:
weights come from `mx.load` (MLX's own GGUF reader: Q4_1/Q8_0 as affine triplets, group 32,
dequantized here with `mx.dequantize` on float32 scales/biases), Q/K stay in GGUF order and
use MLX's traditional (adjacent-pair) rope, and norms / attention are MLX's fused
`mx.fast.rms_norm`, `mx.fast.rope`, `mx.fast.scaled_dot_product_attention` (causal, GQA).

Writes logits like reference_forward.py; compare the two with compare.py.
Needs: pip install -r scripts/fidelity/requirements-mlx.txt
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gguf_llama import read_config  # noqa: E402  (metadata only; weights come from MLX)
from tensor_io import load_token_ids, save_logits  # noqa: E402

GROUP = 32


def _dense(d: dict, name: str) -> mx.array:
    """A weight as float32 [out, in]: dequantized from an affine triplet or taken as stored."""
    w = d[name + ".weight"]
    if name + ".scales" not in d:
        return w.astype(mx.float32)
    scales = d[name + ".scales"].astype(mx.float32)
    biases = d[name + ".biases"].astype(mx.float32)
    n_in = scales.shape[-1] * GROUP
    bits = w.shape[-1] * 32 // n_in
    return mx.dequantize(w, scales, biases, group_size=GROUP, bits=bits)


def forward(d: dict, cfg, ids: list[int]) -> np.ndarray:
    """Teacher-forced logits [T, vocab] float32."""
    t = len(ids)
    emb = _dense(d, "token_embd")
    x = emb[mx.array(ids)][None]  # [1, T, E]
    eps = float(cfg.rms_eps)

    def heads(y, n):
        return y.reshape(1, t, n, cfg.head_dim).transpose(0, 2, 1, 3)

    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        h = mx.fast.rms_norm(x, d[p + "attn_norm.weight"], eps)
        q = heads(h @ _dense(d, p + "attn_q").T, cfg.n_head)
        k = heads(h @ _dense(d, p + "attn_k").T, cfg.n_head_kv)
        v = heads(h @ _dense(d, p + "attn_v").T, cfg.n_head_kv)
        q = mx.fast.rope(q, cfg.head_dim, traditional=True, base=cfg.rope_theta, scale=1.0, offset=0)
        k = mx.fast.rope(k, cfg.head_dim, traditional=True, base=cfg.rope_theta, scale=1.0, offset=0)
        a = mx.fast.scaled_dot_product_attention(q, k, v, scale=cfg.head_dim ** -0.5, mask="causal")
        a = a.transpose(0, 2, 1, 3).reshape(1, t, cfg.n_head * cfg.head_dim)
        x = x + a @ _dense(d, p + "attn_output").T
        h = mx.fast.rms_norm(x, d[p + "ffn_norm.weight"], eps)
        g = h @ _dense(d, p + "ffn_gate").T
        x = x + ((g * mx.sigmoid(g)) * (h @ _dense(d, p + "ffn_up").T)) @ _dense(d, p + "ffn_down").T
        mx.eval(x)
    x = mx.fast.rms_norm(x, d["output_norm.weight"], eps)
    head = _dense(d, "output") if "output.weight" in d else emb
    out = (x @ head.T)[0]
    mx.eval(out)
    return np.array(out, dtype=np.float32)


def main(argv: list[str] | None = None) -> int:
    import gguf

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--tokens", required=True, help="JSON list of ids or {\"ids\": [...]}")
    p.add_argument("--out", required=True, help=".safetensors or .npy")
    args = p.parse_args(argv)
    mx.set_default_device(mx.cpu)
    cfg = read_config(gguf.GGUFReader(args.model))
    ids = load_token_ids(Path(args.tokens))
    t0 = time.perf_counter()
    d = mx.load(args.model)
    logits = forward(d, cfg, ids)
    save_logits(Path(args.out), logits, ids)
    print(f"mlx {mx.__version__}: scored {len(ids)} tokens in {time.perf_counter() - t0:.1f}s -> {args.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
