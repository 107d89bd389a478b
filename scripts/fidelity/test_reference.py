#!/usr/bin/env python3
"""Checks of the reference forward on the real model, with a planted wrong rope pairing.

Needs the GGUF: env TF_FIDELITY_MODEL (skipped when unset or missing). Runs under pytest or
standalone (prints "N passed, N failed", exits non-zero on failure).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # see reference_forward.py

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import llama_forward as lf  # noqa: E402
from gguf_llama import load_llama  # noqa: E402

CASE = HERE.parent.parent / "fixtures" / "fidelity" / "paris_llamacpp.json"
_CACHE: dict[str, object] = {}


def _model_path() -> Path | None:
    p = os.environ.get("TF_FIDELITY_MODEL")
    return Path(p) if p and Path(p).is_file() else None


def _weights(order: str):
    if order not in _CACHE:
        _CACHE[order] = load_llama(_model_path(), qk_order=order)
    return _CACHE[order]


def _case() -> dict:
    return json.loads(CASE.read_text())


def _tf_agreement(w) -> int:
    c = _case()
    prompt, peer = c["prompt_ids"], c["llamacpp_greedy_ids"][: c["teacher_forced_steps"]]
    top = np.argmax(lf.logits(w, prompt + peer[:-1])[len(prompt) - 1:], axis=-1)
    return int((top == np.asarray(peer)).sum())


def test_paris_and_teacher_forced_agreement():
    w = _weights("hf")
    c = _case()
    assert lf.greedy(w, c["prompt_ids"], len(c["expected_greedy_prefix_ids"])) == c["expected_greedy_prefix_ids"]
    assert _tf_agreement(w) >= c["min_agreement"]


def test_both_rope_layouts_give_the_same_logits():
    ids = _case()["prompt_ids"] + _case()["llamacpp_greedy_ids"][:20]
    a = lf.logits(_weights("hf"), ids)
    b = lf.logits(_weights("gguf"), ids)
    assert float(np.abs(a - b).max()) < 1e-3


def test_planted_wrong_rope_pairing_is_caught():
    w = _weights("gguf")
    w.qk_order = "hf"  # planted: half-split rotation applied to GGUF (adjacent-pair) rows
    try:
        assert _tf_agreement(w) < _case()["min_agreement"]
    finally:
        w.qk_order = "gguf"


def _standalone() -> int:
    if _model_path() is None:
        print("skipped: set TF_FIDELITY_MODEL to the GGUF path")
        print("0 passed, 0 failed, 3 skipped")
        return 0
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    passed = failed = 0
    for name, fn in tests:
        try:
            fn()
            passed += 1
            print(f"ok   {name}")
        except Exception as e:  # noqa: BLE001 - report every failure and go on
            failed += 1
            print(f"FAIL {name}: {e!r}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_standalone())
