//! Builders for safetensors files in tests: valid ones, and ones with a hand-written header.

#![allow(dead_code)]

use serde_json::{json, Map, Value};
use tf_formats::DType;

/// A file from a header JSON text and `data_len` bytes of data (bytes 0, 1, 2, ...).
pub fn raw_file(header: &str, data_len: usize) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend((0..data_len).map(|i| i as u8));
    out
}

/// A valid file holding `tensors` back to back, with optional `__metadata__`.
pub fn valid_file(tensors: &[(&str, DType, &[u64], Vec<u8>)], metadata: Option<Value>) -> Vec<u8> {
    let mut header = Map::new();
    if let Some(m) = metadata {
        header.insert("__metadata__".into(), m);
    }
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            name.to_string(),
            json!({"dtype": dtype.safetensors_name(), "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    }
    let mut text = serde_json::to_string(&Value::Object(header)).unwrap();
    while text.len() % 8 != 0 {
        text.push(' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&data);
    out
}

/// `n` f32 values `start, start+1, ...` as little-endian bytes.
pub fn f32_bytes(start: f32, n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| (start + i as f32).to_le_bytes())
        .collect()
}
