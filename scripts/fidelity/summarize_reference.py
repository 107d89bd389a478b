#!/usr/bin/env python3
"""Write fixtures/fidelity/reference_summary.json: per-position facts of the reference logits.

Small enough to commit, so a test without Python can hold an engine's top-1 against the
reference and judge each disagreement by the reference's own top-1/top-2 margin.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from compare import log_softmax64
from tensor_io import load_logits, load_token_ids

ABOUT = (
    "Summary of the numpy float32 reference (scripts/fidelity/reference_forward.py) on {tokens}, "
    "model sha256 {sha}. Row t scores position t+1. ref_top1: argmax (lowest id on ties); "
    "ref_top1_margin: top-1 minus top-2 logit; ref_next_nll: -log softmax(ref)[t, ids[t+1]] "
    "(float64 softmax); peer_top1: argmax of the peer's logits ({peer}). "
    "Regenerate with the commands in docs/fidelity.md."
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ref", required=True, help="reference logits (.safetensors/.npy)")
    p.add_argument("--tokens", required=True, help="token ids JSON")
    p.add_argument("--peer", help="optional peer logits (.npy/.safetensors), e.g. llama.cpp's")
    p.add_argument("--peer-label", default="none")
    p.add_argument("--model-sha256", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    ids = load_token_ids(Path(args.tokens))
    ref = load_logits(Path(args.ref))
    if ref.shape[0] != len(ids):
        sys.exit(f"{len(ids)} ids for {ref.shape[0]} rows")
    top2 = np.sort(ref, axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    ls = log_softmax64(ref)
    nll = [-float(ls[t, ids[t + 1]]) for t in range(len(ids) - 1)]
    doc = {
        "about": ABOUT.format(tokens=args.tokens, sha=args.model_sha256, peer=args.peer_label),
        "model_sha256": args.model_sha256,
        "positions": len(ids),
        "ref_top1": np.argmax(ref, axis=1).tolist(),
        "ref_top1_margin": [round(float(m), 5) for m in margin],
        "ref_next_nll": [round(x, 6) for x in nll],
        "ref_nll_mean": float(np.mean(nll)),
    }
    if args.peer:
        peer = load_logits(Path(args.peer))
        if peer.shape != ref.shape:
            sys.exit(f"peer shape {peer.shape} != ref shape {ref.shape}")
        doc["peer_top1"] = np.argmax(peer, axis=1).tolist()
    # one key per line, lists inline: reviewable diffs without a 1000-line file
    text = "{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items()) + "\n}\n"
    Path(args.out).write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
