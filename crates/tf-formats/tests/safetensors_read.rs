//! Reading safetensors: a file written by the Python `safetensors` package (all 12 dtypes),
//! and sharded checkpoints written here, with each index defect giving its named error.

mod safetensors_support;

use safetensors_support::{f32_bytes, valid_file};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use tf_formats::safetensors::{SafetensorsCheckpoint, SafetensorsError as E, INDEX_FILE};
use tf_formats::DType;

/// Decodes little-endian elements to u64 bit patterns / integers (sign-extended for ints).
fn decode(dtype: DType, data: &[u8]) -> Vec<i128> {
    data.chunks_exact(dtype.size())
        .map(|c| {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            let u = u64::from_le_bytes(b);
            match dtype {
                DType::I64 => u as i64 as i128,
                DType::I32 => u as u32 as i32 as i128,
                DType::I16 => u as u16 as i16 as i128,
                DType::I8 => u as u8 as i8 as i128,
                _ => u as i128,
            }
        })
        .collect()
}

#[test]
fn reads_python_written_file_with_all_dtypes() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/safetensors");
    let ck = SafetensorsCheckpoint::open(&data.join("all_dtypes.safetensors")).unwrap();
    let sidecar: Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("all_dtypes.json")).unwrap())
            .unwrap();
    let sidecar = sidecar.as_object().unwrap();
    assert_eq!(ck.len(), sidecar.len());
    let mut dtypes = BTreeSet::new();
    for (name, want) in sidecar {
        let v = ck.tensor(name).unwrap_or_else(|| panic!("{name} missing"));
        let dtype = DType::from_safetensors_name(want["dtype"].as_str().unwrap()).unwrap();
        assert_eq!(v.dtype, dtype, "{name}");
        let shape: Vec<u64> = want["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(v.shape, shape.as_slice(), "{name}");
        let values: Vec<i128> = want["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                x.as_i64()
                    .map(i128::from)
                    .unwrap_or_else(|| x.as_u64().unwrap() as i128)
            })
            .collect();
        assert_eq!(decode(dtype, v.data), values, "{name}");
        dtypes.insert(dtype.safetensors_name());
    }
    assert_eq!(dtypes.len(), 12, "{dtypes:?}");
    // Spot checks independent of the sidecar.
    let f32s = ck.tensor("f32").unwrap();
    assert_eq!(
        f32::from_le_bytes(f32s.data[12..16].try_into().unwrap()),
        -2.5
    );
    assert_eq!(
        ck.tensor("bf16").unwrap().data[..2],
        0x3F80u16.to_le_bytes()
    );
    assert_eq!(ck.tensor("scalar_f32").unwrap().shape, &[] as &[u64]);
    assert_eq!(ck.tensor("empty_i32").unwrap().data.len(), 0);
    assert_eq!(
        ck.tensor("i64").unwrap().data[16..24],
        i64::MAX.to_le_bytes()
    );
    assert_eq!(ck.metadata()["format"], "np");
    assert_eq!(ck.files().len(), 1);
    assert!(ck.tensor("nope").is_none());
}

/// Writes a two-shard checkpoint; `tweak` may edit the index before it is written.
fn sharded(dir: &Path, tweak: impl FnOnce(&mut Value)) {
    let s1 = valid_file(
        &[
            ("a.weight", DType::F32, &[2, 2], f32_bytes(0.0, 4)),
            ("b.bias", DType::BF16, &[3], vec![1, 2, 3, 4, 5, 6]),
        ],
        Some(json!({"format": "pt"})),
    );
    let s2 = valid_file(
        &[("c.weight", DType::F32, &[3], f32_bytes(10.0, 3))],
        Some(json!({"format": "mlx"})),
    );
    std::fs::write(dir.join("model-00001-of-00002.safetensors"), s1).unwrap();
    std::fs::write(dir.join("model-00002-of-00002.safetensors"), s2).unwrap();
    let mut index = json!({
        "metadata": {"total_size": 34},
        "weight_map": {
            "a.weight": "model-00001-of-00002.safetensors",
            "b.bias": "model-00001-of-00002.safetensors",
            "c.weight": "model-00002-of-00002.safetensors",
        }
    });
    tweak(&mut index);
    std::fs::write(dir.join(INDEX_FILE), serde_json::to_vec(&index).unwrap()).unwrap();
}

#[test]
fn reads_sharded_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    sharded(dir.path(), |_| {});
    let ck = SafetensorsCheckpoint::open(dir.path()).unwrap();
    assert_eq!(ck.files().len(), 2);
    assert!(ck.files()[1].ends_with("model-00002-of-00002.safetensors"));
    let names: Vec<_> = ck.tensor_names().collect();
    assert_eq!(names, ["a.weight", "b.bias", "c.weight"]);
    let c = ck.tensor("c.weight").unwrap();
    assert_eq!(c.data, f32_bytes(10.0, 3).as_slice());
    assert_eq!(ck.info("c.weight").unwrap().shard, 1);
    assert_eq!(ck.tensor("b.bias").unwrap().data, &[1, 2, 3, 4, 5, 6]);
    assert_eq!(ck.tensor("a.weight").unwrap().shape, &[2, 2]);
    assert_eq!(ck.metadata()["format"], "pt");
    assert_eq!(ck.shard_metadata(1).unwrap()["format"], "mlx");
    assert_eq!(ck.index_metadata().unwrap()["total_size"], 34);
    // The index file itself opens the same checkpoint.
    assert_eq!(
        SafetensorsCheckpoint::open(&dir.path().join(INDEX_FILE))
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn missing_shard_is_named() {
    let dir = tempfile::tempdir().unwrap();
    sharded(dir.path(), |i| {
        i["weight_map"]["c.weight"] = json!("model-00003-of-00003.safetensors")
    });
    let e = SafetensorsCheckpoint::open(dir.path()).unwrap_err();
    assert!(
        matches!(&e, E::MissingShard { shard, .. } if shard == "model-00003-of-00003.safetensors"),
        "{e}"
    );
    assert!(e.to_string().contains("model-00003-of-00003.safetensors"));
}

#[test]
fn tensor_missing_from_its_shard() {
    let dir = tempfile::tempdir().unwrap();
    sharded(dir.path(), |i| {
        i["weight_map"]["d.weight"] = json!("model-00002-of-00002.safetensors")
    });
    let e = SafetensorsCheckpoint::open(dir.path()).unwrap_err();
    assert!(
        matches!(&e, E::TensorMissingFromShard { tensor, shard } if tensor == "d.weight" && shard == "model-00002-of-00002.safetensors"),
        "{e}"
    );
}

#[test]
fn shard_tensor_absent_from_index() {
    let dir = tempfile::tempdir().unwrap();
    sharded(dir.path(), |i| {
        i["weight_map"].as_object_mut().unwrap().remove("b.bias");
    });
    let e = SafetensorsCheckpoint::open(dir.path()).unwrap_err();
    assert!(
        matches!(&e, E::UnindexedTensor { tensor, .. } if tensor == "b.bias"),
        "{e}"
    );
    // Mapped to the wrong shard: the shard that holds it is not the one the index names.
    let dir = tempfile::tempdir().unwrap();
    sharded(dir.path(), |i| {
        i["weight_map"]["b.bias"] = json!("model-00002-of-00002.safetensors")
    });
    assert!(matches!(
        SafetensorsCheckpoint::open(dir.path()).unwrap_err(),
        E::UnindexedTensor { .. }
    ));
}

#[test]
fn bad_index_and_shard_names() {
    let dir = tempfile::tempdir().unwrap();
    sharded(dir.path(), |i| {
        i["weight_map"]["c.weight"] = json!("../model-00002-of-00002.safetensors")
    });
    assert!(matches!(
        SafetensorsCheckpoint::open(dir.path()).unwrap_err(),
        E::InvalidShardName { .. }
    ));
    sharded(dir.path(), |i| {
        i["weight_map"]["c.weight"] = json!("/etc/passwd")
    });
    assert!(matches!(
        SafetensorsCheckpoint::open(dir.path()).unwrap_err(),
        E::InvalidShardName { .. }
    ));
    sharded(dir.path(), |i| *i = json!({"metadata": {}}));
    assert!(matches!(
        SafetensorsCheckpoint::open(dir.path()).unwrap_err(),
        E::InvalidIndex { .. }
    ));
    std::fs::write(dir.path().join(INDEX_FILE), b"{not json").unwrap();
    assert!(matches!(
        SafetensorsCheckpoint::open(dir.path()).unwrap_err(),
        E::InvalidIndex { .. }
    ));
}

#[test]
fn a_bad_shard_names_its_file() {
    let dir = tempfile::tempdir().unwrap();
    sharded(dir.path(), |_| {});
    let shard = dir.path().join("model-00002-of-00002.safetensors");
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes.pop();
    std::fs::write(&shard, bytes).unwrap();
    let e = SafetensorsCheckpoint::open(dir.path()).unwrap_err();
    assert!(
        matches!(&e, E::InFile { path, .. } if path == &shard),
        "{e}"
    );
    assert!(matches!(e.root(), E::OffsetsOutOfRange { .. }));
}

#[test]
fn duplicate_tensor_across_shards() {
    let dir = tempfile::tempdir().unwrap();
    sharded(dir.path(), |_| {});
    let dup = valid_file(&[("a.weight", DType::F32, &[1], f32_bytes(0.0, 1))], None);
    std::fs::write(dir.path().join("model-00002-of-00002.safetensors"), dup).unwrap();
    let e = SafetensorsCheckpoint::open(dir.path()).unwrap_err();
    assert!(
        matches!(&e, E::DuplicateTensor { tensor } if tensor == "a.weight"),
        "{e}"
    );
}

#[test]
fn directory_forms() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        SafetensorsCheckpoint::open(dir.path()).unwrap_err(),
        E::NoSafetensors { .. }
    ));
    let f = valid_file(&[("x", DType::I8, &[2], vec![1, 255])], None);
    std::fs::write(dir.path().join("model.safetensors"), f).unwrap();
    let ck = SafetensorsCheckpoint::open(dir.path()).unwrap();
    assert_eq!(ck.tensor("x").unwrap().data, &[1, 255]);
    assert!(ck.metadata().is_empty());
    assert!(ck.index_metadata().is_none());
}
