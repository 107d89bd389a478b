"""Read a llama-architecture GGUF into float32 numpy weights (the reference's loader).

Every tensor is dequantized with the `gguf` package's own `gguf.quants.dequantize`
(independent of TensorFold's Rust kernels). Q and K projection rows are stored in GGUF
permuted for llama.cpp's rope; `unpermute_qk` restores Hugging Face order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np


@dataclass(frozen=True)
class LlamaConfig:
    """Hyper-parameters read from GGUF metadata."""

    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_vocab: int
    rope_theta: float
    rms_eps: np.float32
    bos_id: int
    eos_id: int


@dataclass
class LlamaWeights:
    """Dequantized float32 weights, matrices as [out, in] (numpy row-major)."""

    config: LlamaConfig
    token_embd: np.ndarray  # [vocab, n_embd]
    output: np.ndarray  # [vocab, n_embd]; the same array as token_embd when tied
    output_norm: np.ndarray
    layers: list[dict[str, np.ndarray]]
    tied_head: bool
    qk_order: str  # "hf" (un-permuted) or "gguf" (as stored)
    tokens: list[str]


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _field(reader: gguf.GGUFReader, key: str):
    field = reader.fields.get(key)
    if field is None:
        raise KeyError(f"GGUF metadata key {key!r} is missing")
    return field.contents()


def read_config(reader: gguf.GGUFReader) -> LlamaConfig:
    """Build the config from `llama.*` metadata; refuses other architectures."""
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"architecture {arch!r} is not supported by this reference (need 'llama')")
    n_embd = int(_field(reader, "llama.embedding_length"))
    n_head = int(_field(reader, "llama.attention.head_count"))
    n_vocab_field = reader.fields.get("llama.vocab_size")
    n_vocab = (
        int(n_vocab_field.contents())
        if n_vocab_field is not None
        else len(_field(reader, "tokenizer.ggml.tokens"))
    )
    rope_dim_field = reader.fields.get("llama.rope.dimension_count")
    head_dim = n_embd // n_head
    if rope_dim_field is not None and int(rope_dim_field.contents()) != head_dim:
        raise ValueError("partial rope (rope.dimension_count != head_dim) is not supported")
    return LlamaConfig(
        n_layer=int(_field(reader, "llama.block_count")),
        n_embd=n_embd,
        n_ff=int(_field(reader, "llama.feed_forward_length")),
        n_head=n_head,
        n_head_kv=int(_field(reader, "llama.attention.head_count_kv")),
        head_dim=head_dim,
        n_vocab=n_vocab,
        rope_theta=float(_field(reader, "llama.rope.freq_base")),
        # stored as f32 in GGUF; keep that exact value
        rms_eps=np.float32(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        bos_id=int(_field(reader, "tokenizer.ggml.bos_token_id")),
        eos_id=int(_field(reader, "tokenizer.ggml.eos_token_id")),
    )


def dequantize_tensor(t) -> np.ndarray:
    """Dequantize one GGUF tensor to float32 with numpy shape [out, in] (GGUF ne reversed)."""
    w = gguf.quants.dequantize(t.data, t.tensor_type)
    shape = tuple(int(d) for d in reversed(t.shape))
    return np.ascontiguousarray(w.reshape(shape), dtype=np.float32)


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation: GGUF rows (head, i, pair) -> HF rows (head, pair, i)."""
    rows, cols = w.shape
    head_dim = rows // n_head
    return np.ascontiguousarray(
        w.reshape(n_head, head_dim // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)
    )


def load_llama(path: Path, qk_order: str = "hf") -> LlamaWeights:
    """Load and dequantize a llama GGUF. qk_order "hf" un-permutes Q/K rows, "gguf" keeps them."""
    if qk_order not in ("hf", "gguf"):
        raise ValueError(f"qk_order must be 'hf' or 'gguf', got {qk_order!r}")
    reader = gguf.GGUFReader(str(path))
    cfg = read_config(reader)
    by_name = {t.name: t for t in reader.tensors}

    def get(name: str) -> np.ndarray:
        if name not in by_name:
            raise KeyError(f"tensor {name!r} is missing from the GGUF")
        return dequantize_tensor(by_name[name])

    token_embd = get("token_embd.weight")
    tied = "output.weight" not in by_name
    output = token_embd if tied else get("output.weight")
    layers = []
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        wq, wk = get(p + "attn_q.weight"), get(p + "attn_k.weight")
        if qk_order == "hf":
            wq, wk = unpermute_qk(wq, cfg.n_head), unpermute_qk(wk, cfg.n_head_kv)
        layers.append(
            {
                "attn_norm": get(p + "attn_norm.weight"),
                "wq": wq,
                "wk": wk,
                "wv": get(p + "attn_v.weight"),
                "wo": get(p + "attn_output.weight"),
                "ffn_norm": get(p + "ffn_norm.weight"),
                "w_gate": get(p + "ffn_gate.weight"),
                "w_up": get(p + "ffn_up.weight"),
                "w_down": get(p + "ffn_down.weight"),
            }
        )
    tokens = [str(s) for s in _field(reader, "tokenizer.ggml.tokens")]
    return LlamaWeights(
        config=cfg,
        token_embd=token_embd,
        output=output,
        output_norm=get("output_norm.weight"),
        layers=layers,
        tied_head=tied,
        qk_order=qk_order,
        tokens=tokens,
    )


def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's byte-to-printable-unicode map (byte-level BPE vocabularies)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def detokenize(tokens: list[str], ids: list[int]) -> str:
    """Decode ids of a byte-level BPE (gpt2-style) vocabulary to text, for display only."""
    dec = _byte_decoder()
    out = bytearray()
    for i in ids:
        for ch in tokens[i]:
            if ch in dec:
                out.append(dec[ch])
            else:
                out.extend(ch.encode("utf-8"))
    return out.decode("utf-8", errors="replace")
