#!/usr/bin/env python3
"""Tests of compare.py on synthetic logits, each with a planted perturbation it must catch.

Runs under pytest, or standalone (`python3 scripts/fidelity/test_compare.py`, prints
"N passed, N failed" and exits non-zero on failure). Needs numpy and safetensors only.
"""

from __future__ import annotations

import contextlib
import io
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # noqa: E402
from tensor_io import save_logits  # noqa: E402

T, V = 24, 512


def _logits(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((T, V)) * 3.0).astype(np.float32)


def _tokens(seed: int = 1) -> list[int]:
    return [int(i) for i in np.random.default_rng(seed).integers(0, V, T)]


def _run(ref: np.ndarray, ours: np.ndarray, *flags: str, tokens=True) -> tuple[int, dict]:
    with tempfile.TemporaryDirectory() as d:
        rp, op, jp = Path(d) / "ref.safetensors", Path(d) / "ours.npy", Path(d) / "s.json"
        save_logits(rp, ref, _tokens() if tokens else None)
        save_logits(op, ours)
        sink = io.StringIO()  # keep compare's report out of the test runner's output
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            rc = compare.main(["--ref", str(rp), "--ours", str(op), "--json", str(jp), *flags])
        import json

        summary = json.loads(jp.read_text()) if jp.exists() else {}
    return rc, summary


def test_identical_passes_tight_thresholds():
    a = _logits()
    rc, s = _run(a, a.copy(), "--max-kl-max", "0", "--min-top1", "1", "--max-abs-dlogit", "0",
                 "--max-nll-delta", "0")
    assert rc == 0
    assert s["kl_max"] == 0.0 and s["max_abs_dlogit"] == 0.0 and s["top1_agreement"] == 1.0


def test_planted_noise_on_one_row_trips_kl_max():
    a = _logits()
    b = a.copy()
    b[7] += np.random.default_rng(9).standard_normal(V).astype(np.float32) * 2.0  # planted
    rc, s = _run(a, b, "--max-kl-max", "0.01")
    assert rc == 1, s
    assert s["kl_max_position"] == 7
    assert s["kl_max"] > 0.01
    # the other rows are untouched: the mean is the one row's KL spread over T rows
    assert math.isclose(s["kl_mean"], s["kl_max"] / T, rel_tol=1e-9)
    # the same data passes a threshold above its KL max (the check is not stuck at failing)
    rc2, _ = _run(a, b, "--max-kl-max", str(s["kl_max"] * 1.01))
    assert rc2 == 0


def test_constant_shift_is_free_for_kl_but_not_for_logit_diff():
    a = _logits()
    rc, s = _run(a, a + np.float32(0.5), "--max-kl-max", "1e-9")
    assert rc == 0 and s["kl_max"] < 1e-9
    rc, s = _run(a, a + np.float32(0.5), "--max-logit-rms", "0.1")
    assert rc == 1 and abs(s["logit_rms_diff"] - 0.5) < 1e-6


def test_planted_top1_swap_is_counted():
    a = _logits()
    b = a.copy()
    row = 3
    b[row, int(np.argmax(a[row]))] -= 100.0  # planted: knock out the top token
    rc, s = _run(a, b, "--min-top1", "1.0")
    assert rc == 1
    assert s["top1_disagree_positions"] == [row]
    assert s["top1_agree"] == T - 1


def test_kl_and_nll_match_hand_computation():
    a = _logits()
    b = _logits(seed=5)
    _, s = _run(a, b)
    pa = np.exp(a.astype(np.float64) - a.max(1, keepdims=True))
    pa /= pa.sum(1, keepdims=True)
    pb = np.exp(b.astype(np.float64) - b.max(1, keepdims=True))
    pb /= pb.sum(1, keepdims=True)
    kl = (pa * np.log(pa / pb)).sum(1)
    assert math.isclose(s["kl_mean"], kl.mean(), rel_tol=1e-9)
    assert math.isclose(s["kl_max"], kl.max(), rel_tol=1e-9)
    nxt = _tokens()[1:]
    nll = -np.log(pa[np.arange(T - 1), nxt]).mean()
    assert math.isclose(s["nll_mean_ref"], nll, rel_tol=1e-9)
    assert s["nll_positions"] == T - 1


def test_nll_threshold_without_tokens_fails_loudly():
    a = _logits()
    rc, s = _run(a, a.copy(), "--max-nll-delta", "1", tokens=False)
    assert rc == 1 and "nll_mean_ours" not in s


def test_nonfinite_fails():
    a = _logits()
    b = a.copy()
    b[2, 5] = np.nan  # planted
    rc, _ = _run(a, b)
    assert rc == 1


def test_shape_mismatch_is_bad_input():
    a = _logits()
    rc, _ = _run(a, a[:-1].copy())
    assert rc == 2


def _standalone() -> int:
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
