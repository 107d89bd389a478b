#!/usr/bin/env python3
"""Generate the committed GGUF test vectors under crates/tf-formats/tests/data/gguf/.

Requires the pinned `gguf` package (pip install gguf==0.19.0, which brings numpy).
Deterministic: running it again writes byte-identical files.

Outputs
-------
1. One dequantization vector per block format, `<format>.qvec` (e.g. `q4_k.qvec`), made of
   blocks of seeded random bytes whose f16/f32 scale fields are forced finite, dequantized by
   `gguf.quants.dequantize`. Binary, little-endian:

       offset  size           field
       0       4              magic b"TFQV"
       4       4   u32        format version (1)
       8       4   u32        ggml type id (as in GGUF tensor infos)
       12      4   u32        n_blocks
       16      4   u32        n_bytes     (= n_blocks * type_size)
       20      4   u32        n_elements  (= n_blocks * block_size)
       24      n_bytes        the raw blocks
       ...     4*n_elements   f32 expected values, in element order

   Q8_K has no dequantizer in gguf 0.19.0; its vector's expected values are computed here
   from the block layout (y = d * q, one f32 multiply) and the Rust test says so.

2. `writer_all_types.gguf`: written by `gguf.GGUFWriter` with one metadata key of every value
   type, arrays of every element type, an array of strings and nested arrays, and a few small
   tensors of several types; default alignment (32).
   `writer_align64.gguf`: the same writer with `general.alignment = 64` and three tensors.
   Each has a JSON twin (`<name>.json`) saying what it contains:
       {"version", "alignment", "metadata": [[key, type, value], ...] in file order,
        "tensors": [{"name", "type_id", "dims" (GGUF order, ne[0] first),
                     "rel_offset", "n_bytes", "sha256"}]}
   where `type` is the GGUF value type name; an array value is {"elem": TYPE, "items": [...]}
   (items nested the same way), and floats are stored as their bit patterns in hex strings
   ("f32:3f800000", "f64:...") so the comparison is exact.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V
from gguf.constants import GGML_QUANT_SIZES

PINNED_GGUF = "0.19.0"
OUT = Path(__file__).resolve().parent.parent / "crates" / "tf-formats" / "tests" / "data" / "gguf"

# (file stem, type, number of blocks, byte offsets of f16 scale fields within a block)
FORMATS = [
    ("f32", T.F32, 64, []),
    ("f16", T.F16, 64, "all_f16"),
    ("bf16", T.BF16, 64, "all_bf16"),
    ("q4_0", T.Q4_0, 8, [0]),
    ("q4_1", T.Q4_1, 8, [0, 2]),
    ("q5_0", T.Q5_0, 8, [0]),
    ("q5_1", T.Q5_1, 8, [0, 2]),
    ("q8_0", T.Q8_0, 8, [0]),
    ("q2_k", T.Q2_K, 4, [80, 82]),
    ("q3_k", T.Q3_K, 4, [108]),
    ("q4_k", T.Q4_K, 4, [0, 2]),
    ("q5_k", T.Q5_K, 4, [0, 2]),
    ("q6_k", T.Q6_K, 4, [208]),
    ("q8_k", T.Q8_K, 4, "f32_at_0"),
]


def finite_f16_bits(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random f16 bit patterns over the whole finite range (subnormals, zeros, both signs)."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    # Exponent 31 is inf/NaN: drop its top exponent bit, giving a large finite value.
    bad = (bits & 0x7C00) == 0x7C00
    bits[bad] &= np.uint16(0xBFFF)
    return bits


def moderate_f16_bits(rng: np.random.Generator, n: int) -> np.ndarray:
    """Scales like real checkpoints: |d| in about [2^-14, 2^2), both signs, some subnormal."""
    mags = np.exp2(rng.uniform(-16.0, 2.0, size=n)).astype(np.float16)
    signs = np.where(rng.integers(0, 2, size=n) == 1, -1.0, 1.0).astype(np.float16)
    return (mags * signs).view(np.uint16)


def make_blocks(rng: np.random.Generator, ty: T, n_blocks: int, scales) -> np.ndarray:
    block_size, type_size = GGML_QUANT_SIZES[ty]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint16).astype(np.uint8)
    if scales == "all_f16":
        raw = finite_f16_bits(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    elif scales == "all_bf16":
        bits = rng.integers(0, 1 << 16, size=n_blocks, dtype=np.uint32).astype(np.uint16)
        bits[(bits & 0x7F80) == 0x7F80] &= np.uint16(0xBFFF)  # no inf/NaN
        raw = bits.view(np.uint8).reshape(n_blocks, 2)
    elif scales == "f32_at_0":
        d = (np.exp2(rng.uniform(-20.0, 4.0, size=n_blocks)) * np.where(rng.integers(0, 2, size=n_blocks) == 1, -1, 1)).astype(np.float32)
        raw[:, 0:4] = d.view(np.uint8).reshape(n_blocks, 4)
    elif ty == T.F32:
        vals = (rng.standard_normal(n_blocks) * np.exp2(rng.uniform(-30, 30, n_blocks))).astype(np.float32)
        raw = vals.view(np.uint8).reshape(n_blocks, 4)
    else:
        for off in scales:
            # Half the blocks get realistic scales, half the full finite f16 range.
            half = n_blocks // 2
            bits = np.concatenate([moderate_f16_bits(rng, half), finite_f16_bits(rng, n_blocks - half)])
            raw[:, off : off + 2] = bits.view(np.uint8).reshape(n_blocks, 2)
    return np.ascontiguousarray(raw.reshape(-1))


def expected_q8_k(raw: np.ndarray, n_blocks: int) -> np.ndarray:
    """Q8_K by its block layout (no gguf dequantizer): d f32 at 0, i8 qs[256] at 4; y = d*q."""
    blocks = raw.reshape(n_blocks, 292)
    d = blocks[:, 0:4].copy().view(np.float32)  # (n, 1)
    q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
    return (d * q).astype(np.float32).reshape(-1)


def write_qvec(stem: str, ty: T, n_blocks: int, scales, rng: np.random.Generator) -> None:
    block_size, type_size = GGML_QUANT_SIZES[ty]
    raw = make_blocks(rng, ty, n_blocks, scales)
    if ty == T.Q8_K:
        try:
            gguf.quants.dequantize(raw, ty)
            raise SystemExit("gguf now has a Q8_K dequantizer: use it instead of expected_q8_k")
        except NotImplementedError:
            pass
        values = expected_q8_k(raw, n_blocks)
    else:
        values = np.asarray(gguf.quants.dequantize(raw, ty), dtype=np.float32).reshape(-1)
    n_elements = n_blocks * block_size
    assert values.shape == (n_elements,), (stem, values.shape)
    assert np.all(np.isfinite(values)), stem
    header = b"TFQV" + struct.pack("<5I", 1, int(ty), n_blocks, raw.nbytes, n_elements)
    (OUT / f"{stem}.qvec").write_bytes(header + raw.tobytes() + values.astype("<f4").tobytes())


# ---------------------------------------------------------------- writer-made GGUF files


def f32hex(x: float) -> str:
    return "f32:" + struct.pack(">f", x).hex()


def f64hex(x: float) -> str:
    return "f64:" + struct.pack(">d", x).hex()


def json_value(vtype: V, value, sub_type: V | None = None):
    if vtype == V.FLOAT32:
        return f32hex(value)
    if vtype == V.FLOAT64:
        return f64hex(value)
    if vtype == V.ARRAY:
        elem = sub_type if sub_type is not None else V.get_type(value[0])
        return {"elem": elem.name, "items": [json_value(elem, v) for v in value]}
    return value


def all_types_metadata() -> list[tuple[str, V, object, V | None]]:
    return [
        ("t.u8", V.UINT8, 200, None),
        ("t.i8", V.INT8, -100, None),
        ("t.u16", V.UINT16, 65000, None),
        ("t.i16", V.INT16, -32000, None),
        ("t.u32", V.UINT32, 4_000_000_000, None),
        ("t.i32", V.INT32, -2_000_000_000, None),
        ("t.f32", V.FLOAT32, 0.1, None),
        ("t.bool_true", V.BOOL, True, None),
        ("t.bool_false", V.BOOL, False, None),
        ("t.string", V.STRING, "héllo, GGUF ✓", None),
        ("t.u64", V.UINT64, 18_000_000_000_000_000_000, None),
        ("t.i64", V.INT64, -9_000_000_000_000_000_000, None),
        ("t.f64", V.FLOAT64, -1.0 / 3.0, None),
        ("t.arr_u8", V.ARRAY, [0, 1, 255], V.UINT8),
        ("t.arr_i8", V.ARRAY, [-128, 0, 127], V.INT8),
        ("t.arr_u16", V.ARRAY, [1, 65535], V.UINT16),
        ("t.arr_i16", V.ARRAY, [-32768, 32767], V.INT16),
        ("t.arr_u32", V.ARRAY, [7, 4_294_967_295], V.UINT32),
        ("t.arr_i32", V.ARRAY, [-1, 2, -3], None),
        ("t.arr_f32", V.ARRAY, [1.5, -0.25, 3.0e-5], None),
        ("t.arr_bool", V.ARRAY, [True, False, True], None),
        ("t.arr_u64", V.ARRAY, [0, 2**64 - 1], V.UINT64),
        ("t.arr_i64", V.ARRAY, [-(2**63), 2**63 - 1], V.INT64),
        ("t.arr_f64", V.ARRAY, [2.5, -1e300], V.FLOAT64),
        ("t.arr_string", V.ARRAY, ["a", "", "Ġthe", "<|im_end|>"], None),
        ("t.arr_nested", V.ARRAY, [[1, 2, 3], [4], [5, 6]], None),
        ("t.arr_nested_str", V.ARRAY, [["x", "y"], ["z"]], None),
        ("t.arr_nested2", V.ARRAY, [[[1, 2]], [[3], [4, 5]]], None),
    ]


def tensor_json(name: str, ty: T, data: np.ndarray, shape_gguf: list[int]) -> dict:
    return {
        "name": name,
        "type_id": int(ty),
        "dims": shape_gguf,
        "n_bytes": int(data.nbytes),
        "sha256": hashlib.sha256(data.tobytes()).hexdigest(),
    }


def write_gguf(stem: str, metadata, tensors, alignment: int | None) -> None:
    path = OUT / f"{stem}.gguf"
    w = gguf.GGUFWriter(str(path), arch="tfold-test")
    expected_meta = [["general.architecture", "STRING", "tfold-test"]]
    if alignment is not None:
        w.add_custom_alignment(alignment)
        expected_meta.append(["general.alignment", "UINT32", alignment])
    for key, vtype, value, sub in metadata:
        w.add_key_value(key, value, vtype, sub_type=sub)
        expected_meta.append([key, vtype.name, json_value(vtype, value, sub)])
    expected_tensors = []
    for name, ty, data, numpy_shape in tensors:
        if ty in (T.F32, T.F16):
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=ty)  # uint8 byte shape -> element shape
        expected_tensors.append(tensor_json(name, ty, data, list(reversed(numpy_shape))))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # Independent check with the package's reader, and relative offsets for the JSON.
    r = gguf.GGUFReader(str(path))
    align = alignment if alignment is not None else 32
    for t, exp in zip(r.tensors, expected_tensors):
        assert t.name == exp["name"]
        exp["rel_offset"] = int(t.data_offset - r.data_offset)
        assert exp["rel_offset"] % align == 0
    doc = {
        "version": 3,
        "alignment": align,
        "file_len": path.stat().st_size,
        "metadata": expected_meta,
        "tensors": expected_tensors,
    }
    (OUT / f"{stem}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


def quant_tensor(rng: np.random.Generator, ty: T, numpy_shape: list[int]) -> np.ndarray:
    block_size, _ = GGML_QUANT_SIZES[ty]
    n_blocks = int(np.prod(numpy_shape)) // block_size
    scales = {T.Q4_1: [0, 2], T.Q8_0: [0], T.Q4_K: [0, 2], T.Q6_K: [208]}[ty]
    raw = make_blocks(rng, ty, n_blocks, scales)
    row_bytes = numpy_shape[-1] // block_size * GGML_QUANT_SIZES[ty][1]
    return raw.reshape(*numpy_shape[:-1], row_bytes)


def main() -> None:
    from importlib.metadata import version

    found = version("gguf")
    if found != PINNED_GGUF:
        sys.exit(f"gguf=={PINNED_GGUF} is pinned, found {found}: pip install gguf=={PINNED_GGUF}")
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240611)
    for stem, ty, n_blocks, scales in FORMATS:
        write_qvec(stem, ty, n_blocks, scales, rng)

    tensors = [
        ("norm.weight", T.F32, rng.standard_normal(7).astype(np.float32), [7]),
        ("embd.weight", T.F16, rng.standard_normal((3, 5)).astype(np.float16), [3, 5]),
        ("blk.0.q4_1", T.Q4_1, quant_tensor(rng, T.Q4_1, [2, 64]), [2, 64]),
        ("blk.0.q8_0", T.Q8_0, quant_tensor(rng, T.Q8_0, [3, 32]), [3, 32]),
        ("blk.0.q4_k", T.Q4_K, quant_tensor(rng, T.Q4_K, [2, 256]), [2, 256]),
        ("cube", T.F32, rng.standard_normal((2, 3, 4)).astype(np.float32), [2, 3, 4]),
    ]
    write_gguf("writer_all_types", all_types_metadata(), tensors, alignment=None)
    small = [
        ("a", T.F32, rng.standard_normal(5).astype(np.float32), [5]),
        ("b", T.Q6_K, quant_tensor(rng, T.Q6_K, [1, 256]), [1, 256]),
        ("c", T.F16, rng.standard_normal((2, 2)).astype(np.float16), [2, 2]),
    ]
    meta = [("t.name", V.STRING, "aligned to 64", None), ("t.n", V.UINT32, 3, None)]
    write_gguf("writer_align64", meta, small, alignment=64)
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {len(list(OUT.iterdir()))} files, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
