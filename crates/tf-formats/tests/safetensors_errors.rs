//! Crafted bad safetensors files: each defect gives its named error; a good file parses.

mod safetensors_support;

use safetensors_support::{f32_bytes, raw_file, valid_file};
use tf_formats::safetensors::{parse_header, SafetensorsCheckpoint, SafetensorsError as E};
use tf_formats::DType;

fn err(bytes: &[u8]) -> E {
    parse_header(bytes).expect_err("crafted file must be refused")
}

#[test]
fn control_well_formed_crafted_file_parses() {
    let h = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}}"#;
    let header = parse_header(&raw_file(h, 11)).unwrap();
    let names: Vec<_> = header.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(header.data_start, 8 + h.len() as u64);
    assert_eq!(header.data_len, 11);
}

#[test]
fn too_short_for_length_prefix() {
    assert!(matches!(err(&[1, 2, 3]), E::TooShort { file_len: 3 }));
    assert!(matches!(err(&[]), E::TooShort { file_len: 0 }));
}

#[test]
fn header_length_past_end() {
    let mut f = raw_file("{}", 0);
    f[..8].copy_from_slice(&1000u64.to_le_bytes());
    assert!(matches!(
        err(&f),
        E::HeaderLengthPastEnd {
            header_len: 1000,
            ..
        }
    ));
    f[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(err(&f), E::HeaderTooLarge { .. }));
}

#[test]
fn header_not_json() {
    assert!(matches!(
        err(&raw_file("not json", 0)),
        E::HeaderNotJson { .. }
    ));
    assert!(matches!(
        err(&raw_file("[1,2]", 0)),
        E::HeaderNotJson { .. }
    ));
    assert!(matches!(
        err(&raw_file("{\"a\":", 0)),
        E::HeaderNotJson { .. }
    ));
    assert!(matches!(
        err(&raw_file("\u{0}\u{0}", 0)),
        E::HeaderNotJson { .. }
    ));
}

#[test]
fn offsets_out_of_range() {
    let h = r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
    let e = err(&raw_file(h, 8));
    assert!(
        matches!(&e, E::OffsetsOutOfRange { tensor, end: 16, data_len: 8, .. } if tensor == "a"),
        "{e}"
    );
    let h = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}"#;
    assert!(matches!(
        err(&raw_file(h, 8)),
        E::OffsetsReversed {
            begin: 8,
            end: 4,
            ..
        }
    ));
}

#[test]
fn overlapping_tensors() {
    let h = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    let e = err(&raw_file(h, 12));
    assert!(
        matches!(&e, E::Overlapping { first, second, first_end: 8, second_begin: 4 } if first == "a" && second == "b"),
        "{e}"
    );
}

#[test]
fn non_contiguous_tensors() {
    let h = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#;
    let e = err(&raw_file(h, 12));
    assert!(
        matches!(&e, E::NonContiguous { after: Some(a), gap_begin: 4, gap_end: 8 } if a == "a"),
        "{e}"
    );
    // A gap before the first tensor.
    let h = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
    assert!(matches!(
        err(&raw_file(h, 8)),
        E::NonContiguous {
            after: None,
            gap_begin: 0,
            gap_end: 4
        }
    ));
    // Bytes after the last tensor.
    let h = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
    assert!(matches!(
        err(&raw_file(h, 6)),
        E::TrailingData {
            used: 4,
            data_len: 6
        }
    ));
}

#[test]
fn data_length_not_shape_times_dtype() {
    let h = r#"{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]}}"#;
    let e = err(&raw_file(h, 10));
    assert!(
        matches!(
            &e,
            E::DataLengthMismatch {
                expected: 12,
                found: 10,
                dtype: DType::BF16,
                ..
            }
        ),
        "{e}"
    );
    let h = r#"{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}}"#;
    assert!(matches!(err(&raw_file(h, 0)), E::ShapeOverflow { .. }));
}

#[test]
fn unknown_dtype() {
    for dtype in ["F8_E4M3", "U64", "C64", "f32", ""] {
        let h = format!(r#"{{"a":{{"dtype":"{dtype}","shape":[1],"data_offsets":[0,1]}}}}"#);
        let e = err(&raw_file(&h, 1));
        assert!(
            matches!(&e, E::UnknownDtype { tensor, dtype: d } if tensor == "a" && d == dtype),
            "{e}"
        );
    }
}

#[test]
fn malformed_entries_and_metadata() {
    let cases = [
        r#"{"a":{"shape":[1],"data_offsets":[0,4]}}"#,
        r#"{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#,
        r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}"#,
        r#"{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}"#,
        r#"{"a":[1,2]}"#,
    ];
    for h in cases {
        assert!(
            matches!(err(&raw_file(h, 4)), E::InvalidTensorEntry { .. }),
            "{h}"
        );
    }
    let h = r#"{"__metadata__":{"format":1},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#;
    assert!(matches!(err(&raw_file(h, 1)), E::InvalidMetadata { .. }));
    let h = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
    assert!(matches!(err(&raw_file(h, 2)), E::DuplicateTensor { tensor } if tensor == "a"));
}

#[test]
fn zero_sized_tensors_and_padding() {
    let f = valid_file(
        &[
            ("empty", DType::F32, &[0, 4], vec![]),
            ("x", DType::F32, &[2], f32_bytes(1.0, 2)),
        ],
        Some(serde_json::json!({"format": "pt"})),
    );
    let h = parse_header(&f).unwrap();
    assert_eq!(h.tensors.len(), 2);
    assert_eq!(h.metadata["format"], "pt");
}

#[test]
fn open_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.safetensors");
    let h = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    std::fs::write(&path, raw_file(h, 12)).unwrap();
    let e = SafetensorsCheckpoint::open(&path).unwrap_err();
    assert!(matches!(&e, E::InFile { path: p, .. } if p == &path));
    assert!(matches!(e.root(), E::Overlapping { .. }));
    assert!(e.to_string().contains("bad.safetensors"), "{e}");
    std::fs::write(&path, [0u8; 4]).unwrap();
    assert!(matches!(
        SafetensorsCheckpoint::open(&path).unwrap_err().root(),
        E::TooShort { file_len: 4 }
    ));
    let missing = dir.path().join("nope.safetensors");
    assert!(matches!(
        SafetensorsCheckpoint::open(&missing).unwrap_err(),
        E::Io { .. }
    ));
}
