//! Hostile and broken GGUF input: every refusal is a named error, never a panic, never a
//! giant allocation. Files are built byte by byte with a small writer kept here.

use std::path::PathBuf;

use tf_formats::gguf::{GgufError, GgufFile, MAX_ARRAY_DEPTH};

/// A GGUF byte builder (little-endian, no validation, so it can write broken files).
#[derive(Default)]
struct B(Vec<u8>);

impl B {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> B {
        let mut b = B::default();
        b.0.extend_from_slice(b"GGUF");
        b.u32(version).u64(n_tensors).u64(n_kv);
        b
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(4).u32(v)
    }
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, rel: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(rel)
    }
    /// Pads to `align` and appends `n` data bytes.
    fn data(&mut self, align: usize, n: usize) -> &mut Self {
        while self.0.len() % align != 0 {
            self.0.push(0);
        }
        self.0.extend(std::iter::repeat_n(0x3C, n));
        self
    }
    fn parse(&self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(self.0.clone())
    }
}

/// A valid file with two F32 tensors of 8 elements (32 bytes each).
fn valid() -> B {
    let mut b = B::header(3, 2, 1);
    b.kv_u32("k", 7)
        .tensor("a", &[8], 0, 0)
        .tensor("b", &[8], 0, 32)
        .data(32, 64);
    b
}

#[test]
fn control_valid_file_parses() {
    let f = valid().parse().unwrap();
    assert_eq!(f.tensors().len(), 2);
    assert_eq!(f.tensor_data(f.tensor("b").unwrap()), &[0x3C; 32]);
    let mut v2 = valid();
    v2.0[4] = 2;
    assert_eq!(v2.parse().unwrap().version(), 2);
}

fn writer_file() -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf/writer_all_types.gguf");
    std::fs::read(p).unwrap()
}

#[test]
fn truncated_at_every_offset_is_an_error() {
    let full = writer_file();
    assert!(
        GgufFile::from_bytes(full.clone()).is_ok(),
        "control: whole file parses"
    );
    for cut in 0..full.len() {
        let r = GgufFile::from_bytes(full[..cut].to_vec());
        assert!(r.is_err(), "file cut to {cut} bytes parsed");
    }
}

#[test]
fn bad_magic_and_versions() {
    let mut b = valid();
    b.0[0..4].copy_from_slice(b"GGML");
    assert!(matches!(b.parse(), Err(GgufError::BadMagic { .. })));
    assert!(matches!(
        B(vec![b'G']).parse(),
        Err(GgufError::BadMagic { .. })
    ));
    let mut v1 = valid();
    v1.0[4] = 1;
    assert!(matches!(
        v1.parse(),
        Err(GgufError::UnsupportedVersion { version: 1 })
    ));
    let mut v4 = valid();
    v4.0[4] = 4;
    assert!(matches!(
        v4.parse(),
        Err(GgufError::UnsupportedVersion { version: 4 })
    ));
    let mut be = valid();
    be.0[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(matches!(
        be.parse(),
        Err(GgufError::BigEndian { version: 3 })
    ));
}

#[test]
fn counts_and_lengths_past_the_end_are_truncated() {
    // Metadata count that cannot fit.
    let b = B::header(3, 0, u64::MAX);
    assert!(matches!(b.parse(), Err(GgufError::Truncated { .. })));
    // Tensor count that cannot fit.
    let mut b = B::header(3, 1 << 40, 0);
    b.data(32, 64);
    assert!(matches!(b.parse(), Err(GgufError::Truncated { .. })));
    // Key length past the end.
    let mut b = B::header(3, 0, 1);
    b.u64(1 << 50).u32(0);
    assert!(matches!(b.parse(), Err(GgufError::Truncated { .. })));
    // String value length past the end.
    let mut b = B::header(3, 0, 1);
    b.str("s").u32(8).u64(u64::MAX).data(1, 16);
    assert!(matches!(b.parse(), Err(GgufError::Truncated { .. })));
    // Array count past the end (u64 elements: 8 bytes each, only 16 bytes left).
    let mut b = B::header(3, 0, 1);
    b.str("a").u32(9).u32(10).u64(3).data(1, 16);
    assert!(matches!(b.parse(), Err(GgufError::Truncated { .. })));
    // Tensor name length past the end.
    let mut b = B::header(3, 1, 0);
    b.u64(u64::MAX - 3);
    assert!(matches!(b.parse(), Err(GgufError::Truncated { .. })));
}

#[test]
fn metadata_errors_are_named() {
    let mut b = B::header(3, 0, 1);
    b.str("k").u32(13).u32(0);
    assert!(matches!(
        b.parse(),
        Err(GgufError::UnknownValueType { type_id: 13, .. })
    ));
    let mut b = B::header(3, 0, 1);
    b.str("k").u32(9).u32(99).u64(0);
    assert!(matches!(
        b.parse(),
        Err(GgufError::UnknownValueType { type_id: 99, .. })
    ));
    let mut b = B::header(3, 0, 1);
    b.str("k").u32(7).0.push(2);
    assert!(matches!(
        b.parse(),
        Err(GgufError::InvalidBool { value: 2, .. })
    ));
    let mut b = B::header(3, 0, 1);
    b.u64(2).0.extend_from_slice(&[0xC3, 0x28]);
    b.u32(4).u32(0);
    assert!(matches!(b.parse(), Err(GgufError::InvalidUtf8 { .. })));
    let mut b = B::header(3, 0, 2);
    b.kv_u32("k", 1).kv_u32("k", 2);
    assert!(matches!(b.parse(), Err(GgufError::DuplicateKey { .. })));
    for bad in [0u32, 48, 3] {
        let mut b = B::header(3, 0, 1);
        b.kv_u32("general.alignment", bad);
        assert!(
            matches!(b.parse(), Err(GgufError::BadAlignment { .. })),
            "alignment {bad}"
        );
    }
}

#[test]
fn nesting_is_bounded() {
    // Arrays of arrays, each holding one array, deeper than allowed.
    let depth = MAX_ARRAY_DEPTH;
    let mut b = B::header(3, 0, 1);
    b.str("deep").u32(9);
    for _ in 0..depth {
        b.u32(9).u64(1);
    }
    b.u32(0).u64(0);
    assert!(matches!(b.parse(), Err(GgufError::NestingTooDeep { .. })));
    // Control: exactly the allowed depth parses.
    let mut b = B::header(3, 0, 1);
    b.str("deep").u32(9);
    for _ in 0..MAX_ARRAY_DEPTH - 1 {
        b.u32(9).u64(1);
    }
    b.u32(0).u64(0);
    b.parse().unwrap();
}

#[test]
fn tensor_offset_out_of_range() {
    let mut b = B::header(3, 1, 0);
    b.tensor("t", &[8], 0, 32).data(32, 32);
    assert!(matches!(
        b.parse(),
        Err(GgufError::TensorOutOfRange { size: 32, .. })
    ));
    let mut b = B::header(3, 1, 0);
    b.tensor("t", &[8], 0, u64::MAX - 31).data(32, 32);
    assert!(matches!(b.parse(), Err(GgufError::TensorOutOfRange { .. })));
    // Missing data section entirely.
    let mut b = B::header(3, 1, 0);
    b.tensor("t", &[8], 0, 0);
    assert!(matches!(b.parse(), Err(GgufError::TensorOutOfRange { .. })));
}

#[test]
fn misaligned_tensor() {
    let mut b = B::header(3, 1, 0);
    b.tensor("t", &[8], 0, 4).data(32, 64);
    assert!(matches!(
        b.parse(),
        Err(GgufError::MisalignedTensor {
            offset: 4,
            alignment: 32,
            ..
        })
    ));
    // With general.alignment = 4 the same offset is fine.
    let mut b = B::header(3, 1, 1);
    b.kv_u32("general.alignment", 4)
        .tensor("t", &[8], 0, 4)
        .data(4, 64);
    assert_eq!(b.parse().unwrap().alignment(), 4);
}

#[test]
fn overlapping_tensors() {
    let mut b = B::header(3, 2, 0);
    b.tensor("a", &[16], 0, 0)
        .tensor("b", &[8], 0, 32)
        .data(32, 64);
    match b.parse() {
        Err(GgufError::OverlappingTensors { a, b }) => {
            assert_eq!((a.as_str(), b.as_str()), ("a", "b"))
        }
        other => panic!("expected OverlappingTensors, got {other:?}"),
    }
    // Same start, listed in either order.
    let mut b = B::header(3, 2, 0);
    b.tensor("x", &[8], 0, 0)
        .tensor("y", &[8], 0, 0)
        .data(32, 64);
    assert!(matches!(
        b.parse(),
        Err(GgufError::OverlappingTensors { .. })
    ));
    // A small tensor inside a big one, after a third.
    let mut b = B::header(3, 3, 0);
    b.tensor("big", &[32], 0, 0)
        .tensor("mid", &[8], 0, 64)
        .tensor("in", &[8], 0, 96)
        .data(32, 128);
    assert!(matches!(
        b.parse(),
        Err(GgufError::OverlappingTensors { .. })
    ));
}

#[test]
fn tensor_type_and_shape_errors() {
    let mut b = B::header(3, 1, 0);
    b.tensor("t", &[8], 4, 0).data(32, 64);
    assert!(matches!(
        b.parse(),
        Err(GgufError::UnknownTensorType { type_id: 4, .. })
    ));
    let mut b = B::header(3, 1, 0);
    b.tensor("t", &[16], 2, 0).data(32, 64);
    assert!(matches!(
        b.parse(),
        Err(GgufError::ShapeNotBlockMultiple {
            ne0: 16,
            block_size: 32,
            ..
        })
    ));
    let mut b = B::header(3, 1, 0);
    b.tensor("t", &[1, 1, 1, 1, 1], 0, 0).data(32, 64);
    assert!(matches!(
        b.parse(),
        Err(GgufError::TooManyDims { n_dims: 5, .. })
    ));
    let mut b = B::header(3, 1, 0);
    b.tensor("t", &[1 << 32, 1 << 32, 2], 0, 0).data(32, 64);
    assert!(matches!(b.parse(), Err(GgufError::ShapeOverflow { .. })));
    let mut b = B::header(3, 2, 0);
    b.tensor("t", &[8], 0, 0)
        .tensor("t", &[8], 0, 32)
        .data(32, 64);
    assert!(matches!(b.parse(), Err(GgufError::DuplicateTensor { .. })));
}

#[test]
fn huge_tensor_count_costs_no_memory() {
    // A count of 2^61 tensor infos in a tiny file is refused before any allocation.
    let mut b = B::header(3, 1 << 61, 0);
    b.data(1, 100);
    assert!(matches!(b.parse(), Err(GgufError::Truncated { .. })));
}

#[test]
fn errors_have_useful_messages() {
    let mut b = B::header(3, 1, 0);
    b.tensor("blk.0.ffn_up.weight", &[8], 0, 4).data(32, 64);
    let msg = b.parse().unwrap_err().to_string();
    assert!(
        msg.contains("blk.0.ffn_up.weight") && msg.contains("alignment 32"),
        "{msg}"
    );
}
