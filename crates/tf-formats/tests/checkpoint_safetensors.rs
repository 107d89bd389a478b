//! Checkpoint over safetensors directories: Hugging Face form and MLX-quantized form.

use serde_json::{json, Value};
use std::path::Path;
use tf_formats::checkpoint::{parse_config_json, Checkpoint, CheckpointKind, TensorData};
use tf_formats::{DType, WeightFormat};

/// Writes `model.safetensors` with these (name, dtype, shape) tensors, each filled with its
/// index as bytes, and `config.json`.
fn write_dir(dir: &Path, config: &str, tensors: &[(&str, DType, &[u64])]) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (i, (name, dtype, shape)) in tensors.iter().enumerate() {
        let n: u64 = shape.iter().product::<u64>() * dtype.size() as u64;
        let begin = data.len();
        data.extend(std::iter::repeat_n(i as u8, n as usize));
        header.insert(
            name.to_string(),
            json!({"dtype": dtype.safetensors_name(), "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    }
    let h = serde_json::to_vec(&Value::Object(header)).unwrap();
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    std::fs::write(dir.join("model.safetensors"), out).unwrap();
    std::fs::write(dir.join("config.json"), config).unwrap();
}

#[test]
fn python_infinity_and_nan_are_read() {
    let v = parse_config_json(
        r#"{"a": [0.0, Infinity], "b": -Infinity, "c": NaN, "s": "NaN \"Infinity\""}"#,
    )
    .unwrap();
    assert_eq!(v["a"][1], 1e308);
    assert_eq!(v["b"], -1e308);
    assert!(v["c"].is_null());
    assert_eq!(v["s"], "NaN \"Infinity\"", "strings are untouched");
    assert!(parse_config_json("{\"a\": Inf}").is_err());
}

#[test]
fn hugging_face_directory() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        r#"{"model_type": "nemotron_h", "time_step_limit": [0.0, Infinity], "hidden_size": 8}"#;
    write_dir(
        dir.path(),
        config,
        &[
            ("backbone.embeddings.weight", DType::BF16, &[4, 8]),
            ("backbone.norm_f.weight", DType::F32, &[8]),
        ],
    );
    let ck = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(ck.kind(), CheckpointKind::Safetensors);
    assert_eq!(ck.config()["time_step_limit"][1], 1e308);
    assert_eq!(ck.dir(), Some(dir.path()));
    assert!(!ck.gguf_rope_permuted() && ck.gguf().is_none());
    let e = ck.entry("backbone.embeddings.weight").unwrap();
    assert_eq!(
        (e.format, e.shape.clone()),
        (WeightFormat::Dense(DType::BF16), vec![4, 8])
    );
    match ck.data("backbone.norm_f.weight").unwrap() {
        TensorData::Dense { dtype, bytes } => {
            assert_eq!(dtype, DType::F32);
            assert_eq!(bytes, &[1u8; 32][..]);
        }
        other => panic!("{other:?}"),
    }
    // Opening the file itself finds config.json beside it.
    let ck2 = Checkpoint::open(&dir.path().join("model.safetensors")).unwrap();
    assert_eq!(ck2.entries(), ck.entries());
}

#[test]
fn mlx_quantized_directory_merges_triplets() {
    let dir = tempfile::tempdir().unwrap();
    let config = r#"{"model_type": "llama", "quantization": {"group_size": 32, "bits": 4}}"#;
    // A [16, 64] weight at 4 bits: 64*4/32 = 8 words per row, 64/32 = 2 groups per row.
    write_dir(
        dir.path(),
        config,
        &[
            ("model.layers.0.mlp.up_proj.weight", DType::U32, &[16, 8]),
            ("model.layers.0.mlp.up_proj.scales", DType::BF16, &[16, 2]),
            ("model.layers.0.mlp.up_proj.biases", DType::BF16, &[16, 2]),
            ("model.norm.weight", DType::BF16, &[64]),
        ],
    );
    let ck = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(ck.kind(), CheckpointKind::MlxQuantized);
    assert_eq!(ck.entries().len(), 2);
    let up = ck.entry("model.layers.0.mlp.up_proj.weight").unwrap();
    assert_eq!(up.shape, vec![16, 64]);
    assert_eq!(
        up.format,
        WeightFormat::MlxAffine {
            bits: 4,
            group_size: 32,
            scales: DType::BF16
        }
    );
    match ck.data("model.layers.0.mlp.up_proj.weight").unwrap() {
        TensorData::MlxAffine {
            weight,
            scales,
            biases,
            bits,
            group_size,
            scales_dtype,
        } => {
            assert_eq!((bits, group_size, scales_dtype), (4, 32, DType::BF16));
            assert_eq!(
                (weight.len(), scales.len(), biases.len()),
                (16 * 8 * 4, 16 * 2 * 2, 16 * 2 * 2)
            );
            assert!(weight.iter().all(|&b| b == 0) && scales.iter().all(|&b| b == 1));
            assert!(biases.iter().all(|&b| b == 2));
        }
        other => panic!("{other:?}"),
    }
    assert!(ck.entry("model.layers.0.mlp.up_proj.scales").is_none());
}

#[test]
fn bad_config_json_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_dir(dir.path(), "{not json", &[("x", DType::F32, &[1])]);
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains("config.json is not valid JSON"),
        "{err}"
    );
}
