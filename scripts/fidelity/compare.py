#!/usr/bin/env python3
"""Compare an engine's teacher-forced logits with a reference's, position by position.

Inputs: two logits files (.safetensors with float32 tensor `logits` [T, vocab], or .npy),
rows aligned (row t scores the token at position t+1). Token ids for the NLL come from
--tokens (JSON list or {"ids": [...]}) or from a `tokens` tensor in the reference file.

Metrics (softmax in float64): top-1 agreement, KL(ref || ours) mean / p99 / max over
positions, mean next-token NLL both sides, logit RMS difference and max |delta logit|.

Exit status: 0 all thresholds met; 1 a threshold exceeded or non-finite logits; 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from tensor_io import load_logits, load_token_ids

CHUNK_ROWS = 64


def log_softmax64(x: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64."""
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def per_position(ref: np.ndarray, ours: np.ndarray, next_ids: np.ndarray | None) -> dict[str, np.ndarray]:
    """Per-row KL(ref||ours), top-1 of each, NLL of next token each side, squared / max abs delta."""
    t = ref.shape[0]
    kl = np.empty(t)
    top_ref = np.empty(t, dtype=np.int64)
    top_ours = np.empty(t, dtype=np.int64)
    nll_ref = np.full(t, np.nan)
    nll_ours = np.full(t, np.nan)
    sq = np.empty(t)
    mx = np.empty(t)
    for s in range(0, t, CHUNK_ROWS):
        e = min(t, s + CHUNK_ROWS)
        a, b = ref[s:e], ours[s:e]
        la, lb = log_softmax64(a), log_softmax64(b)
        kl[s:e] = np.maximum((np.exp(la) * (la - lb)).sum(axis=-1), 0.0)
        top_ref[s:e] = np.argmax(a, axis=-1)  # lowest id on ties
        top_ours[s:e] = np.argmax(b, axis=-1)
        d = a.astype(np.float64) - b.astype(np.float64)
        sq[s:e] = (d * d).mean(axis=-1)
        mx[s:e] = np.abs(d).max(axis=-1)
        if next_ids is not None:
            rows = np.arange(s, min(e, len(next_ids)))
            if rows.size:
                nll_ref[rows] = -la[rows - s, next_ids[rows]]
                nll_ours[rows] = -lb[rows - s, next_ids[rows]]
    return {"kl": kl, "top_ref": top_ref, "top_ours": top_ours, "nll_ref": nll_ref,
            "nll_ours": nll_ours, "sq": sq, "maxabs": mx}


def summarize(ref: np.ndarray, ours: np.ndarray, tokens: list[int] | None) -> dict:
    """All summary metrics as a JSON-ready dict."""
    next_ids = None
    if tokens is not None:
        if len(tokens) != ref.shape[0]:
            raise ValueError(f"{len(tokens)} token ids for {ref.shape[0]} logits rows")
        next_ids = np.asarray(tokens[1:], dtype=np.int64)
    p = per_position(ref, ours, next_ids)
    kl = p["kl"]
    agree = p["top_ref"] == p["top_ours"]
    worst = int(np.argmax(kl))
    out = {
        "positions": int(ref.shape[0]),
        "vocab": int(ref.shape[1]),
        "top1_agree": int(agree.sum()),
        "top1_agreement": float(agree.mean()),
        "top1_disagree_positions": [int(i) for i in np.flatnonzero(~agree)],
        "kl_mean": float(kl.mean()),
        "kl_p99": float(np.percentile(kl, 99)),
        "kl_max": float(kl.max()),
        "kl_max_position": worst,
        "logit_rms_diff": float(np.sqrt(p["sq"].mean())),
        "max_abs_dlogit": float(p["maxabs"].max()),
    }
    if next_ids is not None:
        n = len(next_ids)
        out["nll_positions"] = n
        out["nll_mean_ref"] = float(np.mean(p["nll_ref"][:n]))
        out["nll_mean_ours"] = float(np.mean(p["nll_ours"][:n]))
        out["nll_mean_delta"] = out["nll_mean_ours"] - out["nll_mean_ref"]
    return out


THRESHOLDS = [
    # (flag, metric key, "max" or "min")
    ("max_kl_mean", "kl_mean", "max"),
    ("max_kl_p99", "kl_p99", "max"),
    ("max_kl_max", "kl_max", "max"),
    ("min_top1", "top1_agreement", "min"),
    ("max_logit_rms", "logit_rms_diff", "max"),
    ("max_abs_dlogit", "max_abs_dlogit", "max"),
    ("max_nll_delta", "nll_mean_delta", "absmax"),
]


def check(summary: dict, args) -> list[str]:
    """Threshold violations as human-readable lines (empty when all pass)."""
    bad = []
    for flag, key, kind in THRESHOLDS:
        limit = getattr(args, flag)
        if limit is None:
            continue
        if key not in summary:
            bad.append(f"{key}: not computed (no token ids) but --{flag.replace('_', '-')} was given")
            continue
        v = summary[key]
        if (kind == "max" and v > limit) or (kind == "min" and v < limit) or \
                (kind == "absmax" and abs(v) > limit):
            bad.append(f"{key} = {v:.6g} violates --{flag.replace('_', '-')} {limit:g}")
    return bad


def _tokens(args, ref_path: Path) -> list[int] | None:
    if args.tokens:
        return load_token_ids(Path(args.tokens))
    if ref_path.suffix == ".safetensors":
        try:
            return [int(i) for i in load_logits_tokens(ref_path)]
        except KeyError:
            return None
    return None


def load_logits_tokens(path: Path) -> np.ndarray:
    """The `tokens` tensor of a .safetensors logits file (KeyError if absent)."""
    from safetensors.numpy import load_file

    tensors = load_file(str(path))
    if "tokens" not in tensors:
        raise KeyError("tokens")
    return tensors["tokens"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", required=True, help="reference logits (.safetensors `logits` or .npy)")
    p.add_argument("--ours", required=True, help="engine logits (.safetensors `logits` or .npy)")
    p.add_argument("--tokens", help="token ids JSON for the NLL (default: `tokens` tensor of --ref)")
    p.add_argument("--json", help="also write the summary to this JSON file")
    p.add_argument("--label", default="", help="free text stored in the JSON (e.g. engine build)")
    for flag, key, kind in THRESHOLDS:
        p.add_argument("--" + flag.replace("_", "-"), type=float, default=None,
                       help=f"fail if {key} {'<' if kind == 'min' else '>'} this"
                       + (" (absolute value)" if kind == "absmax" else ""))
    args = p.parse_args(argv)
    ref_path, ours_path = Path(args.ref), Path(args.ours)
    try:
        ref = load_logits(ref_path)
        ours = load_logits(ours_path)
        if ref.shape != ours.shape:
            raise ValueError(f"shape mismatch: ref {ref.shape} vs ours {ours.shape}")
        tokens = _tokens(args, ref_path)
    except (OSError, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    nonfinite = [name for name, a in (("ref", ref), ("ours", ours)) if not np.isfinite(a).all()]
    if nonfinite:
        print(f"FAIL: non-finite logits in {', '.join(nonfinite)}")
        return 1
    try:
        summary = summarize(ref, ours, tokens)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary["label"] = args.label
    summary["ref"], summary["ours"] = str(ref_path), str(ours_path)
    for k, v in summary.items():
        if k == "top1_disagree_positions":
            v = v[:20] + (["..."] if len(v) > 20 else [])
        print(f"{k}: {v}")
    bad = check(summary, args)
    summary["violations"] = bad
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    for line in bad:
        print("FAIL: " + line)
    if not bad:
        print("PASS" if any(getattr(args, f) is not None for f, _, _ in THRESHOLDS) else "(no thresholds given)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
