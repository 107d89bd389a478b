#!/usr/bin/env python3
"""Independent float32 reference forward of a llama GGUF (numpy + the `gguf` package).

Subcommands:
  score     teacher-forced logits [T, vocab] float32 over a token-id list -> .safetensors/.npy
  greedy    greedy continuation of a prompt (ids and text)
  validate  the reference's own checks against a llama.cpp case file (see docs/fidelity.md)

BLAS threads default to 1 (OPENBLAS_NUM_THREADS etc.; set them to override): on a busy
2-core machine threaded OpenBLAS was ~5x slower for these small matrices.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import llama_forward as lf  # noqa: E402
from gguf_llama import detokenize, load_llama, sha256_file  # noqa: E402
from tensor_io import load_token_ids, save_logits  # noqa: E402

DEFAULT_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def _load(args):
    path = Path(args.model)
    if not path.is_file():
        sys.exit(f"model file not found: {path}")
    if args.sha256 != "skip":
        got = sha256_file(path)
        if got != args.sha256:
            sys.exit(f"sha256 mismatch for {path}: got {got}, expected {args.sha256}")
    t0 = time.perf_counter()
    w = load_llama(path, qk_order=args.rope)
    print(f"loaded+dequantized {path.name} in {time.perf_counter() - t0:.1f}s "
          f"(rope layout {args.rope}, tied head {w.tied_head})", file=sys.stderr)
    return w


def _parse_ids(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s.strip()]


def cmd_score(args) -> int:
    ids = load_token_ids(Path(args.tokens))
    w = _load(args)
    t0 = time.perf_counter()
    out = lf.logits(w, ids)
    dt = time.perf_counter() - t0
    save_logits(Path(args.out), out, ids)
    print(f"scored {len(ids)} tokens in {dt:.2f}s -> {args.out} {out.shape}", file=sys.stderr)
    return 0


def cmd_greedy(args) -> int:
    w = _load(args)
    prompt = _parse_ids(args.ids)
    out = lf.greedy(w, prompt, args.n)
    print(json.dumps({"prompt": prompt, "ids": out, "text": detokenize(w.tokens, out)}))
    return 0


def teacher_forced_agreement(w, prompt: list[int], cont: list[int]) -> list[int]:
    """Reference top-1 at each step of `cont`, teacher-forced along prompt + cont."""
    full = lf.logits(w, prompt + cont[:-1])
    return [int(i) for i in np.argmax(full[len(prompt) - 1:], axis=-1)]


def cmd_validate(args) -> int:
    case = json.loads(Path(args.case).read_text())
    w = _load(args)
    prompt, peer = case["prompt_ids"], case["llamacpp_greedy_ids"]
    ok = True
    # 1. free-running greedy: must begin with the expected prefix
    want = case["expected_greedy_prefix_ids"]
    got = lf.greedy(w, prompt, len(want))
    text = detokenize(w.tokens, got)
    good = got == want
    ok &= good
    print(f"greedy prefix: {got} {text!r} {'OK' if good else 'MISMATCH, expected ' + str(want)}")
    # 2. teacher-forced along llama.cpp's text
    n = case["teacher_forced_steps"]
    mine = teacher_forced_agreement(w, prompt, peer[:n])
    agree = sum(a == b for a, b in zip(mine, peer[:n]))
    diffs = [(i, peer[i], mine[i]) for i in range(n) if mine[i] != peer[i]]
    good = agree >= case["min_agreement"]
    ok &= good
    print(f"teacher-forced top-1 == llama.cpp: {agree}/{n} (need >= {case['min_agreement']}) "
          f"{'OK' if good else 'FAIL'}; differing steps (step, llama.cpp, ref): {diffs}")
    full_n = len(peer)
    mine_all = teacher_forced_agreement(w, prompt, peer)
    agree_all = sum(a == b for a, b in zip(mine_all, peer))
    print(f"  (informative) all {full_n} llama.cpp steps: {agree_all}/{full_n} agree")
    for i, a, b in diffs:
        print(f"  step {i}: llama.cpp {detokenize(w.tokens, [a])!r} vs reference "
              f"{detokenize(w.tokens, [b])!r}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=os.environ.get("TF_FIDELITY_MODEL"),
                   required="TF_FIDELITY_MODEL" not in os.environ,
                   help="GGUF path (or env TF_FIDELITY_MODEL)")
    p.add_argument("--sha256", default=DEFAULT_SHA256,
                   help="expected sha256 of the model file ('skip' to skip); default: SmolLM2-135M-Instruct Q4_1")
    p.add_argument("--rope", choices=("hf", "gguf"), default="hf",
                   help="hf: un-permute Q/K rows and rotate (i, i+d/2); gguf: stored rows, rotate (2i, 2i+1)")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score", help="teacher-forced logits to a file")
    s.add_argument("--tokens", required=True, help="JSON: list of ids or {\"ids\": [...]}")
    s.add_argument("--out", required=True, help="output .safetensors (tensor `logits`, plus `tokens`) or .npy")
    s.set_defaults(fn=cmd_score)
    g = sub.add_parser("greedy", help="greedy continuation")
    g.add_argument("--ids", required=True, help="comma-separated prompt ids")
    g.add_argument("-n", type=int, default=40)
    g.set_defaults(fn=cmd_greedy)
    v = sub.add_parser("validate", help="Paris check + teacher-forced agreement with llama.cpp")
    v.add_argument("--case", required=True, help="case JSON, e.g. fixtures/fidelity/paris_llamacpp.json")
    v.set_defaults(fn=cmd_validate)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
