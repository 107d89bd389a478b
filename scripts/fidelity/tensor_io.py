"""Read and write logits files: .safetensors (tensor `logits`, float32 [T, vocab]) or .npy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def save_logits(path: Path, logits: np.ndarray, tokens: list[int] | None = None) -> None:
    """Write float32 logits [T, vocab] (and optionally the int32 token ids) to .safetensors or .npy."""
    logits = np.ascontiguousarray(logits, dtype=np.float32)
    if logits.ndim != 2:
        raise ValueError(f"logits must be 2-D [T, vocab], got shape {logits.shape}")
    if path.suffix == ".npy":
        np.save(path, logits)
        return
    if path.suffix == ".safetensors":
        from safetensors.numpy import save_file

        tensors = {"logits": logits}
        if tokens is not None:
            tensors["tokens"] = np.asarray(tokens, dtype=np.int32)
        save_file(tensors, str(path))
        return
    raise ValueError(f"unsupported logits file extension {path.suffix!r} (use .safetensors or .npy)")


def load_logits(path: Path, name: str = "logits") -> np.ndarray:
    """Read float32 logits [T, vocab] from .safetensors (tensor `name`) or .npy."""
    if path.suffix == ".npy":
        arr = np.load(path)
    elif path.suffix == ".safetensors":
        from safetensors.numpy import load_file

        tensors = load_file(str(path))
        if name not in tensors:
            raise KeyError(f"{path}: no tensor named {name!r} (found {sorted(tensors)})")
        arr = tensors[name]
    else:
        raise ValueError(f"unsupported logits file extension {path.suffix!r}")
    if arr.ndim != 2:
        raise ValueError(f"{path}: logits must be 2-D [T, vocab], got shape {arr.shape}")
    if arr.dtype != np.float32:
        raise ValueError(f"{path}: logits must be float32, got {arr.dtype}")
    return arr


def load_token_ids(path: Path) -> list[int]:
    """Token ids from a JSON file: a list of ints, or an object with an `ids` list."""
    data = json.loads(path.read_text())
    ids = data["ids"] if isinstance(data, dict) else data
    if not isinstance(ids, list) or not all(isinstance(i, int) and i >= 0 for i in ids):
        raise ValueError(f"{path}: expected a list of non-negative integer token ids")
    return ids
