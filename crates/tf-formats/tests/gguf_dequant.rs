//! Each reference dequantizer against vectors made by the `gguf` Python package
//! (scripts/gen_gguf_vectors.py, gguf==0.19.0), compared bit for bit.
//!
//! Q8_K is the exception: gguf 0.19.0 has no Q8_K dequantizer, so its expected values were
//! computed by the generator from the block layout (y = d * q, one f32 multiply); this test
//! also recomputes a hand-made Q8_K block below.

use std::path::PathBuf;

use tf_formats::gguf::{dequantize, dequantize_into, GgmlType, GgufError};

/// One `.qvec` file: raw blocks and the values they must dequantize to.
struct Vector {
    ty: GgmlType,
    raw: Vec<u8>,
    expected: Vec<f32>,
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf")
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn load(stem: &str) -> Vector {
    let bytes = std::fs::read(data_dir().join(format!("{stem}.qvec"))).unwrap();
    assert_eq!(&bytes[0..4], b"TFQV", "{stem}: magic");
    assert_eq!(u32_at(&bytes, 4), 1, "{stem}: vector format version");
    let ty = GgmlType::from_id(u32_at(&bytes, 8)).unwrap();
    let n_blocks = u32_at(&bytes, 12) as usize;
    let n_bytes = u32_at(&bytes, 16) as usize;
    let n_elements = u32_at(&bytes, 20) as usize;
    assert_eq!(n_bytes, n_blocks * ty.type_size(), "{stem}: byte count");
    assert_eq!(
        n_elements,
        n_blocks * ty.block_size(),
        "{stem}: element count"
    );
    assert_eq!(
        bytes.len(),
        24 + n_bytes + 4 * n_elements,
        "{stem}: file length"
    );
    let raw = bytes[24..24 + n_bytes].to_vec();
    let expected = bytes[24 + n_bytes..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    Vector { ty, raw, expected }
}

/// Index of the first element whose bits differ, if any.
fn first_bit_mismatch(got: &[f32], want: &[f32]) -> Option<usize> {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits())
}

fn check(stem: &str, ty: GgmlType) {
    let v = load(stem);
    assert_eq!(v.ty, ty, "{stem}: type in file");
    let got = dequantize(v.ty, &v.raw, v.expected.len()).unwrap();
    if let Some(i) = first_bit_mismatch(&got, &v.expected) {
        panic!(
            "{stem}: element {i} (block {}): got {:e} ({:#010x}), want {:e} ({:#010x})",
            i / ty.block_size(),
            got[i],
            got[i].to_bits(),
            v.expected[i],
            v.expected[i].to_bits()
        );
    }
    // dequantize_into writes the same values into a caller's buffer.
    let mut out = vec![f32::NAN; v.expected.len()];
    dequantize_into(v.ty, &v.raw, &mut out).unwrap();
    assert_eq!(first_bit_mismatch(&out, &v.expected), None, "{stem}: into");
    // Planted control: disturbing one byte in the middle of the last block (a quant byte in
    // every block format) must be caught.
    let mut bad = v.raw.clone();
    let at = bad.len() - ty.type_size() / 2 - 1;
    bad[at] ^= 0x11;
    let got_bad = dequantize(v.ty, &bad, v.expected.len()).unwrap();
    assert!(
        first_bit_mismatch(&got_bad, &v.expected).is_some(),
        "{stem}: a corrupted byte went unnoticed"
    );
}

#[test]
fn f32_matches_gguf() {
    check("f32", GgmlType::F32);
}

#[test]
fn f16_matches_gguf() {
    check("f16", GgmlType::F16);
}

#[test]
fn bf16_matches_gguf() {
    check("bf16", GgmlType::BF16);
}

#[test]
fn q4_0_matches_gguf() {
    check("q4_0", GgmlType::Q4_0);
}

#[test]
fn q4_1_matches_gguf() {
    check("q4_1", GgmlType::Q4_1);
}

#[test]
fn q5_0_matches_gguf() {
    check("q5_0", GgmlType::Q5_0);
}

#[test]
fn q5_1_matches_gguf() {
    check("q5_1", GgmlType::Q5_1);
}

#[test]
fn q8_0_matches_gguf() {
    check("q8_0", GgmlType::Q8_0);
}

#[test]
fn q2_k_matches_gguf() {
    check("q2_k", GgmlType::Q2K);
}

#[test]
fn q3_k_matches_gguf() {
    check("q3_k", GgmlType::Q3K);
}

#[test]
fn q4_k_matches_gguf() {
    check("q4_k", GgmlType::Q4K);
}

#[test]
fn q5_k_matches_gguf() {
    check("q5_k", GgmlType::Q5K);
}

#[test]
fn q6_k_matches_gguf() {
    check("q6_k", GgmlType::Q6K);
}

/// Q8_K: the vector's expected values come from the generator's own layout-based formula
/// (gguf 0.19.0 has none), so also check one block computed by hand here.
#[test]
fn q8_k_matches_layout_vector_and_hand_block() {
    check("q8_k", GgmlType::Q8K);
    let mut block = vec![0u8; 292];
    block[0..4].copy_from_slice(&0.5f32.to_le_bytes());
    block[4] = 3; // q[0] = 3
    block[5] = 0xFF; // q[1] = -1
    block[6] = 0x80; // q[2] = -128
    block[259] = 127; // q[255] = 127
    block[260..292].fill(0xAB); // bsums are ignored
    let y = dequantize(GgmlType::Q8K, &block, 256).unwrap();
    assert_eq!(&y[0..4], &[1.5, -0.5, -64.0, 0.0]);
    assert_eq!(y[255], 63.5);
}

/// A hand-made Q4_1 block: d = 0.5, m = -1, nibbles 0..15 then 15..0.
#[test]
fn q4_1_hand_block() {
    let mut block = vec![0u8; 20];
    block[0..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
    block[2..4].copy_from_slice(&half::f16::from_f32(-1.0).to_bits().to_le_bytes());
    for j in 0..16u8 {
        block[4 + j as usize] = j | (15 - j) << 4;
    }
    let y = dequantize(GgmlType::Q4_1, &block, 32).unwrap();
    for j in 0..16 {
        assert_eq!(y[j], 0.5 * j as f32 - 1.0);
        assert_eq!(y[16 + j], 0.5 * (15 - j) as f32 - 1.0);
    }
}

#[test]
fn size_errors_are_named() {
    let block = vec![0u8; 18];
    assert!(matches!(
        dequantize(GgmlType::Q4_0, &block, 31),
        Err(GgufError::PartialBlock { block_size: 32, .. })
    ));
    assert!(matches!(
        dequantize(GgmlType::Q4_0, &block, 64),
        Err(GgufError::DataSizeMismatch {
            expected: 36,
            actual: 18,
            ..
        })
    ));
    let mut out = vec![0f32; 32];
    assert!(matches!(
        dequantize_into(GgmlType::Q4_0, &block[..17], &mut out),
        Err(GgufError::DataSizeMismatch { .. })
    ));
    assert!(matches!(
        dequantize(GgmlType::Q8_1, &[0u8; 36], 32),
        Err(GgufError::UnsupportedDequant { ty: GgmlType::Q8_1 })
    ));
    assert_eq!(
        dequantize(GgmlType::Q4_0, &[], 0).unwrap(),
        Vec::<f32>::new()
    );
}
