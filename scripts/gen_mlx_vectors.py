#!/usr/bin/env python3
"""Generate the committed test vectors of the tf-formats crate.

Requirements (pinned):  pip install mlx==0.32.4 mlx-cpu==0.32.4 safetensors==0.8.0 numpy

Writes
  crates/tf-formats/tests/data/mlx/vectors.safetensors
      For every bits in {2,3,4,5,6,8} x group size in {32,64,128} x scale dtype in
      {bf16,f16,f32}: a deterministic random float32 matrix cast to the scale dtype,
      quantized with mx.quantize (affine), and dequantized with mx.dequantize on the CPU.
      Tensors per case "b{bits}_g{gs}_{dtype}": .weight (U32 packed), .scales, .biases,
      .dequant (mx.dequantize output, dtype = scale dtype). A few extra cases also store
      .dequant_<out> = mx.dequantize(..., dtype=<out>) for another output dtype.
      Written by mx.save_safetensors (an MLX-written file for the reader to open).
  crates/tf-formats/tests/data/safetensors/all_dtypes.safetensors (+ all_dtypes.json)
      One tensor per safetensors dtype (12), written by the Python `safetensors` package;
      the JSON sidecar lists each tensor's dtype, shape and values (floats as bit patterns).

Regeneration with the pinned versions is byte-identical (the safetensors package orders
header metadata by hash, so all_dtypes carries a single metadata key).
"""

import json
import os
import sys

import mlx.core as mx
import numpy as np
import safetensors
from safetensors import TensorSpec, serialize

MLX_VERSION = "0.32.4"
SAFETENSORS_VERSION = "0.8.0"
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "crates", "tf-formats", "tests", "data")

BITS = [2, 3, 4, 5, 6, 8]
GROUP_SIZES = [32, 64, 128]
DTYPES = {"bf16": mx.bfloat16, "f16": mx.float16, "f32": mx.float32}
ROWS, COLS = 8, 256


def source_matrix(seed: int) -> np.ndarray:
    """Rows of different magnitudes and offsets, plus an all-zero and a near-constant row."""
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    for r in range(ROWS - 2):
        m[r] = m[r] * np.float32(10.0 ** (r - 3)) + np.float32(rng.uniform(-1, 1) * 10.0 ** (r - 4))
    m[ROWS - 2] = 0.0
    m[ROWS - 1] = np.float32(0.75) + rng.standard_normal(COLS).astype(np.float32) * np.float32(1e-4)
    return m


def gen_mlx_vectors() -> None:
    out = {}
    seed = 1000
    for bits in BITS:
        for gs in GROUP_SIZES:
            for dname, dtype in DTYPES.items():
                seed += 1
                w = mx.array(source_matrix(seed)).astype(dtype)
                wq, scales, biases = mx.quantize(w, group_size=gs, bits=bits, mode="affine")
                assert wq.dtype == mx.uint32 and scales.dtype == dtype and biases.dtype == dtype
                deq = mx.dequantize(wq, scales, biases, group_size=gs, bits=bits, mode="affine")
                assert deq.dtype == dtype
                name = f"b{bits}_g{gs}_{dname}"
                out[f"{name}.weight"] = wq
                out[f"{name}.scales"] = scales
                out[f"{name}.biases"] = biases
                out[f"{name}.dequant"] = deq
                # Output-dtype casts: computed in the scale dtype, then cast.
                if gs == 64 and bits in (3, 4):
                    for oname, odtype in DTYPES.items():
                        if oname != dname:
                            out[f"{name}.dequant_{oname}"] = mx.dequantize(
                                wq, scales, biases, group_size=gs, bits=bits, mode="affine", dtype=odtype
                            )
    mx.eval(out)
    meta = {
        "generator": "scripts/gen_mlx_vectors.py",
        "mlx": mx.__version__,
        "rows": str(ROWS),
        "cols": str(COLS),
    }
    path = os.path.join(DATA, "mlx", "vectors.safetensors")
    mx.save_safetensors(path, out, metadata=meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(out)} tensors)")


def float_bits(a: np.ndarray, uint) -> list:
    return [int(x) for x in a.view(uint).ravel()]


def gen_all_dtypes() -> None:
    f32_special = [0.0, -0.0, 1.0, -2.5, 3.4028235e38, 1.4e-45, float("inf"), float("-inf"), 0.1, -7.0e-3, 65504.0, 1e-8]
    # bf16 bit patterns: 1.0, -2.0, 0.5, smallest subnormal, inf, -0.0, 3.140625, max finite
    bf16_bits = np.array([0x3F80, 0xC000, 0x3F00, 0x0001, 0x7F80, 0x8000, 0x4049, 0x7F7F], dtype=np.uint16)
    tensors = {
        "f64": (np.array([[0.0, -1.5, 1e300], [5e-324, -np.inf, 2.0 ** 0.5]], dtype=np.float64), "F64"),
        "f32": (np.array(f32_special, dtype=np.float32).reshape(3, 2, 2), "F32"),
        "f16": (np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 6e-8, np.inf, 0.1], dtype=np.float16).reshape(2, 4), "F16"),
        "bf16": (bf16_bits.reshape(4, 2), "BF16"),
        "i64": (np.array([0, -1, 2**63 - 1, -(2**63), 42], dtype=np.int64), "I64"),
        "i32": (np.array([[0, -1], [2**31 - 1, -(2**31)]], dtype=np.int32), "I32"),
        "u32": (np.array([0, 1, 2**32 - 1, 0xDEADBEEF], dtype=np.uint32), "U32"),
        "i16": (np.array([0, -1, 32767, -32768, 12345], dtype=np.int16), "I16"),
        "u16": (np.array([0, 1, 65535, 0xBEEF], dtype=np.uint16), "U16"),
        "i8": (np.array([0, -1, 127, -128, 7, -7], dtype=np.int8).reshape(2, 3), "I8"),
        "u8": (np.array([0, 1, 255, 128, 17], dtype=np.uint8), "U8"),
        "bool": (np.array([True, False, False, True, True], dtype=np.bool_), "BOOL"),
        "scalar_f32": (np.array(1.25, dtype=np.float32), "F32"),
        "empty_i32": (np.zeros((0, 3), dtype=np.int32), "I32"),
    }
    specs = {}
    sidecar = {}
    names = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
             "I32": "int32", "U32": "uint32", "I16": "int16", "U16": "uint16", "I8": "int8", "U8": "uint8",
             "BOOL": "bool"}
    for name, (arr, st_dtype) in tensors.items():
        arr = np.require(arr, requirements="C")  # keeps 0-d arrays 0-d
        specs[name] = TensorSpec(dtype=names[st_dtype], shape=arr.shape, data_ptr=arr.ctypes.data, data_len=arr.nbytes)
        if st_dtype == "F64":
            values = float_bits(arr, np.uint64)
        elif st_dtype == "F32":
            values = float_bits(arr, np.uint32)
        elif st_dtype in ("F16", "BF16"):
            values = float_bits(arr, np.uint16)
        else:
            values = [int(x) for x in arr.ravel()]
        sidecar[name] = {"dtype": st_dtype, "shape": list(arr.shape), "values": values}
    data = bytes(serialize(specs, metadata={"format": "np"}))
    path = os.path.join(DATA, "safetensors", "all_dtypes.safetensors")
    with open(path, "wb") as f:
        f.write(data)
    with open(os.path.join(DATA, "safetensors", "all_dtypes.json"), "w") as f:
        json.dump(sidecar, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {path} ({len(data)} bytes)")


def main() -> None:
    if mx.__version__ != MLX_VERSION or safetensors.__version__ != SAFETENSORS_VERSION:
        sys.exit(f"need mlx=={MLX_VERSION} and safetensors=={SAFETENSORS_VERSION}, "
                 f"found {mx.__version__} and {safetensors.__version__}")
    mx.set_default_device(mx.cpu)
    gen_mlx_vectors()
    gen_all_dtypes()


if __name__ == "__main__":
    main()
