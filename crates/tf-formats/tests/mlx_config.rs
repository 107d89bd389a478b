//! MLX quantization settings, bit unpacking and the grouping of triplets into logical entries.

use serde_json::json;
use tf_formats::mlx_affine::{
    dequantize, logical_entries, unpack, unpack_value, GroupParams, MlxError, QuantSpec,
    QuantizationConfig,
};
use tf_formats::safetensors::SafeTensorInfo;
use tf_formats::{DType, WeightFormat};

fn qcfg(v: serde_json::Value) -> Result<Option<QuantizationConfig>, MlxError> {
    QuantizationConfig::from_config(&v)
}

#[test]
fn reads_quantization_or_quantization_config() {
    assert_eq!(qcfg(json!({"model_type": "llama"})).unwrap(), None);
    let q = qcfg(json!({"quantization_config": {"bits": 3, "group_size": 128}}))
        .unwrap()
        .unwrap();
    assert_eq!(
        q.default,
        QuantSpec {
            bits: 3,
            group_size: 128
        }
    );
    // `quantization` wins when both exist.
    let q = qcfg(json!({"quantization": {"bits": 6, "group_size": 32}, "quantization_config": {"quant_method": "gptq"}}))
        .unwrap()
        .unwrap();
    assert_eq!(
        q.default,
        QuantSpec {
            bits: 6,
            group_size: 32
        }
    );
    // mx.quantize defaults.
    let q = qcfg(json!({"quantization": {}})).unwrap().unwrap();
    assert_eq!(
        q.default,
        QuantSpec {
            bits: 4,
            group_size: 64
        }
    );
}

#[test]
fn per_module_overrides() {
    let q = qcfg(json!({"quantization": {
        "bits": 4, "group_size": 64,
        "model.layers.0.mlp.gate": false,
        "model.embed_tokens": {"bits": 8, "group_size": 32},
        "lm_head": {"bits": 5}
    }}))
    .unwrap()
    .unwrap();
    assert_eq!(q.spec_for("model.layers.0.mlp.gate"), None);
    assert_eq!(
        q.spec_for("model.embed_tokens"),
        Some(QuantSpec {
            bits: 8,
            group_size: 32
        })
    );
    assert_eq!(
        q.spec_for("lm_head"),
        Some(QuantSpec {
            bits: 5,
            group_size: 64
        })
    );
    assert_eq!(
        q.spec_for("model.layers.3.mlp.up_proj"),
        Some(QuantSpec {
            bits: 4,
            group_size: 64
        })
    );
}

#[test]
fn refusals_are_named() {
    let e = |v| qcfg(v).unwrap_err();
    assert_eq!(
        e(json!({"quantization": {"bits": 7}})),
        MlxError::UnsupportedBits { bits: 7 }
    );
    assert_eq!(
        e(json!({"quantization": {"bits": 1}})),
        MlxError::UnsupportedBits { bits: 1 }
    );
    assert_eq!(
        e(json!({"quantization": {"group_size": 16}})),
        MlxError::UnsupportedGroupSize { group_size: 16 }
    );
    assert_eq!(
        e(json!({"quantization": {"mode": "mxfp4"}})),
        MlxError::UnsupportedMode {
            mode: "mxfp4".into()
        }
    );
    assert_eq!(
        e(json!({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}})),
        MlxError::UnsupportedQuantMethod {
            method: "awq".into()
        }
    );
    assert!(
        matches!(e(json!({"quantization": {"bits": "4"}})), MlxError::InvalidQuantizationConfig { key, .. } if key == "quantization.bits")
    );
    assert!(
        matches!(e(json!({"quantization": {"lm_head": true}})), MlxError::InvalidQuantizationConfig { key, .. } if key == "lm_head")
    );
    assert!(matches!(
        e(json!({"quantization": {"lm_head": {"bits": 9}}})),
        MlxError::UnsupportedBits { bits: 9 }
    ));
    assert!(matches!(
        e(json!({"quantization": 4})),
        MlxError::InvalidQuantizationConfig { .. }
    ));
}

/// Packs values into a little-endian bit stream, written independently of the reader.
fn pack(bits: u8, values: &[u8]) -> Vec<u32> {
    let mut stream: Vec<bool> = Vec::new();
    for &v in values {
        for b in 0..bits {
            stream.push((v >> b) & 1 == 1);
        }
    }
    stream
        .chunks(32)
        .map(|c| {
            c.iter()
                .enumerate()
                .fold(0u32, |w, (i, &bit)| w | ((bit as u32) << i))
        })
        .collect()
}

#[test]
fn unpacks_every_width_including_straddles() {
    for bits in [2u8, 3, 4, 5, 6, 8] {
        let n = 32 * 3; // 3*bits words: whole words for every width
        let values: Vec<u8> = (0..n).map(|i| ((i * 7 + 3) % (1 << bits)) as u8).collect();
        let packed = pack(bits, &values);
        assert_eq!(packed.len(), n * bits as usize / 32);
        assert_eq!(unpack(bits, &packed), values, "{bits}-bit");
        assert_eq!(unpack_value(bits, &packed, n), None);
    }
    // 4-bit: element j is nibble j % 8 of word j / 8, least significant first.
    assert_eq!(unpack(4, &[0x7654_3210]), [0, 1, 2, 3, 4, 5, 6, 7]);
    // 3-bit: value 10 spans bits 30..33, straddling words 0 and 1.
    let packed = [0b11 << 30, 0b1];
    assert_eq!(unpack_value(3, &packed, 10), Some(0b111));
}

#[test]
fn dequantize_checks_lengths() {
    let spec = QuantSpec::new(4, 32).unwrap();
    let packed = vec![0u32; 4]; // one row of 32 values
    let s = 2.0f32.to_le_bytes();
    let b = (-1.0f32).to_le_bytes();
    let scales = GroupParams::new("scales", DType::F32, &s).unwrap();
    let biases = GroupParams::new("biases", DType::F32, &b).unwrap();
    let out = dequantize(spec, 32, &packed, scales, biases, DType::F32).unwrap();
    assert_eq!(out, vec![-1.0; 32]);
    assert!(matches!(
        dequantize(spec, 32, &packed[..3], scales, biases, DType::F32),
        Err(MlxError::LengthMismatch { .. })
    ));
    assert!(matches!(
        dequantize(spec, 64, &packed, scales, biases, DType::F32),
        Err(MlxError::LengthMismatch { .. })
    ));
    assert!(matches!(
        dequantize(spec, 32, &packed, scales, biases, DType::I32),
        Err(MlxError::ParamDtype { .. })
    ));
    assert!(matches!(
        GroupParams::new("scales", DType::U8, &s),
        Err(MlxError::ParamDtype { .. })
    ));
    let h = [0u8; 2];
    let half = GroupParams::new("biases", DType::F16, &h).unwrap();
    assert!(matches!(
        dequantize(spec, 32, &packed, scales, half, DType::F32),
        Err(MlxError::ParamDtypeMismatch { .. })
    ));
}

fn info(name: &str, dtype: DType, shape: &[u64]) -> SafeTensorInfo {
    SafeTensorInfo {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
        shard: 0,
    }
}

fn triplet(module: &str, packed: &[u64], groups: &[u64], scales: DType) -> Vec<SafeTensorInfo> {
    vec![
        info(&format!("{module}.weight"), DType::U32, packed),
        info(&format!("{module}.scales"), scales, groups),
        info(&format!("{module}.biases"), scales, groups),
    ]
}

fn default_cfg() -> QuantizationConfig {
    qcfg(json!({"quantization": {"bits": 4, "group_size": 64, "lm_head": {"bits": 6, "group_size": 32},
        "mlp.gate": false}}))
    .unwrap()
    .unwrap()
}

#[test]
fn groups_triplets_into_logical_entries() {
    let mut t = vec![info("norm.weight", DType::BF16, &[512])];
    t.extend(triplet("q_proj", &[1024, 64], &[1024, 8], DType::BF16)); // 4-bit: in = 64*8 = 512
    t.extend(triplet("lm_head", &[100, 96], &[100, 16], DType::F16)); // 6-bit: in = 96*32/6 = 512
    t.extend(triplet("experts", &[4, 256, 64], &[4, 256, 8], DType::F32)); // stacked experts
    t.push(info("mlp.gate.weight", DType::F32, &[8, 512]));
    let e = logical_entries(&t, Some(&default_cfg())).unwrap();
    let names: Vec<_> = e.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "norm.weight",
            "q_proj.weight",
            "lm_head.weight",
            "experts.weight",
            "mlp.gate.weight"
        ]
    );
    assert_eq!(e[0].format, WeightFormat::Dense(DType::BF16));
    assert_eq!(
        e[1].format,
        WeightFormat::MlxAffine {
            bits: 4,
            group_size: 64,
            scales: DType::BF16
        }
    );
    assert_eq!(e[1].shape, [1024, 512]);
    assert_eq!(
        e[2].format,
        WeightFormat::MlxAffine {
            bits: 6,
            group_size: 32,
            scales: DType::F16
        }
    );
    assert_eq!(e[2].shape, [100, 512]);
    assert_eq!(e[3].shape, [4, 256, 512]);
    assert_eq!(e[4].format, WeightFormat::Dense(DType::F32));
    // Without scales, nothing is quantized even with a config.
    let dense = logical_entries(&[info("w", DType::U32, &[2, 2])], None).unwrap();
    assert_eq!(dense[0].format, WeightFormat::Dense(DType::U32));
}

#[test]
fn triplet_defects_are_named() {
    let cfg = default_cfg();
    let run = |t: Vec<SafeTensorInfo>| logical_entries(&t, Some(&cfg)).unwrap_err();
    // Scales with a group count that disagrees with the packed width.
    let e = run(triplet("q", &[16, 64], &[16, 4], DType::BF16));
    assert!(
        matches!(&e, MlxError::ParamShapeMismatch { module, what: "scales", expected, .. } if module == "q" && expected == &[16, 8]),
        "{e}"
    );
    let mut t = triplet("q", &[16, 64], &[16, 8], DType::BF16);
    t[2].shape = vec![17, 8];
    assert!(matches!(
        run(t),
        MlxError::ParamShapeMismatch { what: "biases", .. }
    ));
    let mut t = triplet("q", &[16, 64], &[16, 8], DType::BF16);
    t.pop();
    assert!(matches!(run(t), MlxError::MissingBiases { module } if module == "q"));
    let t = triplet("q", &[16, 64], &[16, 8], DType::BF16)[1..].to_vec();
    assert!(matches!(run(t), MlxError::MissingWeight { .. }));
    let mut t = triplet("q", &[16, 64], &[16, 8], DType::BF16);
    t[0].dtype = DType::I32;
    assert!(matches!(
        run(t),
        MlxError::PackedNotU32 {
            dtype: DType::I32,
            ..
        }
    ));
    let mut t = triplet("q", &[16, 64], &[16, 8], DType::BF16);
    t[2].dtype = DType::F16;
    assert!(matches!(run(t), MlxError::ParamDtypeMismatch { .. }));
    // 6-bit with a packed width that is not whole values (in*6 % 32 != 0).
    assert!(matches!(
        run(triplet("lm_head", &[4, 7], &[4, 1], DType::BF16)),
        MlxError::PackedShapeInvalid { .. }
    ));
    assert!(matches!(
        run(triplet("q", &[64], &[8], DType::BF16)),
        MlxError::PackedShapeInvalid { .. }
    ));
    assert!(matches!(
        run(triplet("mlp.gate", &[8, 64], &[8, 8], DType::BF16)),
        MlxError::QuantizationDisabled { .. }
    ));
    let t = triplet("q", &[16, 64], &[16, 8], DType::BF16);
    assert!(
        matches!(logical_entries(&t, None), Err(MlxError::MissingQuantizationConfig { tensor }) if tensor == "q.weight")
    );
    // Control: the well-formed triplet is accepted.
    assert!(logical_entries(&triplet("q", &[16, 64], &[16, 8], DType::BF16), Some(&cfg)).is_ok());
}
