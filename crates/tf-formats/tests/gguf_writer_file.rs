//! The parser against files written by an independent writer (`gguf.GGUFWriter`, gguf 0.19.0,
//! via scripts/gen_gguf_vectors.py), checked against the JSON the generator wrote beside them.

use std::path::PathBuf;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tf_formats::gguf::{dequantize, GgmlType, GgufFile, MetaValue};

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf")
}

fn parse_float_hex(s: &str) -> Option<MetaValue> {
    if let Some(h) = s.strip_prefix("f32:") {
        return Some(MetaValue::F32(f32::from_bits(
            u32::from_str_radix(h, 16).ok()?,
        )));
    }
    let h = s.strip_prefix("f64:")?;
    Some(MetaValue::F64(f64::from_bits(
        u64::from_str_radix(h, 16).ok()?,
    )))
}

/// The MetaValue the JSON describes for a value of GGUF type `ty`.
fn expected_value(ty: &str, v: &Value) -> MetaValue {
    let int = || v.as_i64().unwrap();
    let uint = || v.as_u64().unwrap();
    match ty {
        "UINT8" => MetaValue::U8(uint() as u8),
        "INT8" => MetaValue::I8(int() as i8),
        "UINT16" => MetaValue::U16(uint() as u16),
        "INT16" => MetaValue::I16(int() as i16),
        "UINT32" => MetaValue::U32(uint() as u32),
        "INT32" => MetaValue::I32(int() as i32),
        "UINT64" => MetaValue::U64(uint()),
        "INT64" => MetaValue::I64(int()),
        "FLOAT32" | "FLOAT64" => parse_float_hex(v.as_str().unwrap()).unwrap(),
        "BOOL" => MetaValue::Bool(v.as_bool().unwrap()),
        "STRING" => MetaValue::String(v.as_str().unwrap().to_owned()),
        "ARRAY" => {
            let elem = v["elem"].as_str().unwrap();
            let items = v["items"].as_array().unwrap();
            MetaValue::Array(items.iter().map(|i| expected_value(elem, i)).collect())
        }
        other => panic!("unknown type {other} in JSON"),
    }
}

/// Bitwise equality (so floats compare by bits, NaN included).
fn same(a: &MetaValue, b: &MetaValue) -> bool {
    match (a, b) {
        (MetaValue::F32(x), MetaValue::F32(y)) => x.to_bits() == y.to_bits(),
        (MetaValue::F64(x), MetaValue::F64(y)) => x.to_bits() == y.to_bits(),
        (MetaValue::Array(x), MetaValue::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        _ => a == b,
    }
}

fn check_against_json(stem: &str) -> GgufFile {
    let dir = data_dir();
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{stem}.json"))).unwrap())
            .unwrap();
    let f = GgufFile::open(&dir.join(format!("{stem}.gguf"))).unwrap();
    assert_eq!(f.version() as u64, json["version"].as_u64().unwrap());
    assert_eq!(f.alignment(), json["alignment"].as_u64().unwrap());
    assert_eq!(
        f.as_bytes().len() as u64,
        json["file_len"].as_u64().unwrap()
    );
    assert_eq!(f.data_start() % f.alignment(), 0);

    let meta = json["metadata"].as_array().unwrap();
    assert_eq!(f.metadata().len(), meta.len(), "{stem}: metadata count");
    for ((key, got), want) in f.metadata().iter().zip(meta) {
        let want_key = want[0].as_str().unwrap();
        assert_eq!(key, want_key, "{stem}: metadata order");
        let want_value = expected_value(want[1].as_str().unwrap(), &want[2]);
        assert!(
            same(got, &want_value),
            "{stem}: {key}: got {got:?}, want {want_value:?}"
        );
        assert!(same(f.get(key).unwrap(), &want_value));
    }
    assert!(f.get("no.such.key").is_none());

    let tensors = json["tensors"].as_array().unwrap();
    assert_eq!(f.tensors().len(), tensors.len(), "{stem}: tensor count");
    for (t, want) in f.tensors().iter().zip(tensors) {
        assert_eq!(t.name, want["name"].as_str().unwrap());
        assert_eq!(
            t.ty as u32 as u64,
            want["type_id"].as_u64().unwrap(),
            "{}",
            t.name
        );
        let dims: Vec<u64> = want["dims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(t.dims, dims, "{}: dims (GGUF order)", t.name);
        let rel = want["rel_offset"].as_u64().unwrap();
        assert_eq!(t.offset, f.data_start() + rel, "{}: offset", t.name);
        assert_eq!(t.n_bytes, want["n_bytes"].as_u64().unwrap(), "{}", t.name);
        let data = f.tensor_data(t);
        assert_eq!(data.len() as u64, t.n_bytes);
        assert_eq!(
            hex::encode(Sha256::digest(data)),
            want["sha256"].as_str().unwrap(),
            "{}: data sha256",
            t.name
        );
        assert_eq!(f.tensor(&t.name), Some(t));
    }
    assert!(f.tensor("no.such.tensor").is_none());
    f
}

#[test]
fn all_types_file_matches_its_json() {
    let f = check_against_json("writer_all_types");
    assert_eq!(f.alignment(), 32, "default alignment");
    // Spot checks independent of the JSON reading code above.
    assert_eq!(f.get("t.u8"), Some(&MetaValue::U8(200)));
    assert_eq!(
        f.get("t.string").and_then(|v| v.as_str()),
        Some("héllo, GGUF ✓")
    );
    let nested = f.get("t.arr_nested2").unwrap().as_array().unwrap();
    assert_eq!(
        nested[1],
        MetaValue::Array(vec![
            MetaValue::Array(vec![MetaValue::I32(3)]),
            MetaValue::Array(vec![MetaValue::I32(4), MetaValue::I32(5)]),
        ])
    );
    let cube = f.tensor("cube").unwrap();
    assert_eq!(
        cube.dims,
        vec![4, 3, 2],
        "numpy shape (2,3,4) is ne = [4,3,2]"
    );
    assert_eq!(cube.n_elements(), 24);
    let q4k = f.tensor("blk.0.q4_k").unwrap();
    assert_eq!((q4k.ty, q4k.n_bytes), (GgmlType::Q4K, 2 * 144));
    let values = dequantize(q4k.ty, f.tensor_data(q4k), q4k.n_elements() as usize).unwrap();
    assert_eq!(values.len(), 512);
    assert_eq!(f.dequantize_tensor(q4k).unwrap(), values);
    let embd = f.tensor("embd.weight").unwrap();
    assert_eq!(f.dequantize_tensor(embd).unwrap().len(), 15);
}

#[test]
fn custom_alignment_file_matches_its_json() {
    let f = check_against_json("writer_align64");
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.get("general.alignment"), Some(&MetaValue::U32(64)));
    for t in f.tensors() {
        assert_eq!(t.offset % 64, 0, "{}", t.name);
    }
}

#[test]
fn from_bytes_equals_open() {
    let path = data_dir().join("writer_all_types.gguf");
    let a = GgufFile::open(&path).unwrap();
    let b = GgufFile::from_bytes(std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(a.metadata(), b.metadata());
    assert_eq!(a.tensors(), b.tensors());
    for t in a.tensors() {
        assert_eq!(a.tensor_data(t), b.tensor_data(t));
    }
}

/// Planted control: the JSON comparison must notice a changed value.
#[test]
fn control_changed_value_is_noticed() {
    let path = data_dir().join("writer_all_types.gguf");
    let mut bytes = std::fs::read(&path).unwrap();
    let needle = "héllo".as_bytes();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    bytes[at] = b'j';
    let f = GgufFile::from_bytes(bytes).unwrap();
    let want = expected_value("STRING", &Value::String("héllo, GGUF ✓".into()));
    assert!(!same(f.get("t.string").unwrap(), &want));
}
