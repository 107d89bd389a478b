//! Host tests of the synthetic device layouts against the tf-formats generator.
use super::*;
use tf_formats::checkpoint::synthetic::rand64;
use tf_formats::checkpoint::synthetic::{host_tensor, HostTensor};
use tf_formats::gguf::GgmlType;

fn entry(format: WeightFormat, shape: &[u64]) -> TensorEntry {
    TensorEntry {
        name: "model.layers.0.mlp.up_proj.weight".into(),
        format,
        shape: shape.to_vec(),
    }
}

#[test]
fn gguf_and_dense_device_bytes_are_the_checkpoint_bytes() {
    for f in [
        WeightFormat::Gguf(GgmlType::Q4_0),
        WeightFormat::Gguf(GgmlType::Q4_1),
        WeightFormat::Gguf(GgmlType::Q8_0),
        WeightFormat::Gguf(GgmlType::Q6K),
        WeightFormat::Dense(DType::BF16),
        WeightFormat::Gguf(GgmlType::F32),
    ] {
        let e = entry(f, &[3, 256]);
        let HostTensor::Bytes(all) = host_tensor(&e, 4).unwrap() else {
            panic!()
        };
        assert_eq!(host_device_bytes(&e, 4, 0, 768).unwrap(), all, "{f}");
        // A sample from the middle equals the same bytes of the whole.
        let l = device_layout(f).unwrap();
        let part = host_device_bytes(&e, 4, 256, 256).unwrap();
        let at = l.bytes(256) as usize;
        assert_eq!(&all[at..at + part.len()], &part[..], "{f}");
    }
}

#[test]
fn mlx_device_units_are_the_relaid_triplet() {
    let (bits, g) = (4u8, 64u32);
    let f = WeightFormat::MlxAffine {
        bits,
        group_size: g,
        scales: DType::BF16,
    };
    let e = entry(f, &[2, 128]);
    let HostTensor::MlxAffine {
        weight,
        scales,
        biases,
    } = host_tensor(&e, 8).unwrap()
    else {
        panic!()
    };
    let dev = host_device_bytes(&e, 8, 0, 256).unwrap();
    let ub = 4 * bits as usize + 8;
    assert_eq!(dev.len(), 8 * ub);
    for u in 0..8 {
        let unit = &dev[u * ub..(u + 1) * ub];
        assert_eq!(
            &unit[..16],
            &weight[u * 16..(u + 1) * 16],
            "unit {u} stream"
        );
        let grp = u * 32 / g as usize;
        let bf = |b: &[u8]| half::bf16::from_le_bytes([b[2 * grp], b[2 * grp + 1]]).to_f32();
        let f32_at =
            |o: usize| f32::from_le_bytes([unit[o], unit[o + 1], unit[o + 2], unit[o + 3]]);
        assert_eq!(f32_at(16), bf(&scales), "unit {u} scale");
        assert_eq!(f32_at(20), bf(&biases), "unit {u} bias");
    }
    // Planted control: a unit layout whose groups are one unit long disagrees.
    let wrong = BlockLayout {
        group_blocks: 1,
        ..mlx_unit_layout(bits, g)
    };
    let mut w = vec![0u8; 8 * ub];
    let k = keys(8, &e.name);
    wrong.write(
        k,
        wrong.scale_exp(init_for(&e.name).amplitude_log2()),
        0,
        &mut w,
    );
    assert_ne!(w, dev);
}

#[test]
fn gpu_formats_follow_the_stored_format() {
    let mlx = |bits| WeightFormat::MlxAffine {
        bits,
        group_size: 64,
        scales: DType::BF16,
    };
    for (f, want) in [
        (WeightFormat::Gguf(GgmlType::Q4_0), GpuFormat::Q4_0),
        (WeightFormat::Gguf(GgmlType::Q8_0), GpuFormat::Q8_0),
        (WeightFormat::Gguf(GgmlType::Q4_1), GpuFormat::Q4_1),
        (WeightFormat::Gguf(GgmlType::Q4K), GpuFormat::Q4K),
        (WeightFormat::Gguf(GgmlType::Q6K), GpuFormat::Q6K),
        (WeightFormat::Gguf(GgmlType::F32), GpuFormat::F32),
        (WeightFormat::Dense(DType::BF16), GpuFormat::Bf16),
        (mlx(4), GpuFormat::Mlx4),
        (mlx(6), GpuFormat::Mlx6),
    ] {
        let e = entry(f, &[512, 3, 256]);
        assert_eq!(gpu_format(&e).unwrap(), want, "{f}");
        // The device bytes the generator writes are the GPU format's rows.
        let l = device_layout(f).unwrap();
        assert_eq!(l.bytes(256) as usize, want.row_bytes(256), "{f}");
    }
    let e = entry(WeightFormat::Gguf(GgmlType::Q5_0), &[2, 32]);
    assert!(gpu_format(&e).is_err());
}

#[test]
fn unsupported_formats_and_partial_blocks_are_refused() {
    let e = entry(WeightFormat::Gguf(GgmlType::Q5_0), &[1, 32]);
    assert!(matches!(
        host_device_bytes(&e, 1, 0, 32),
        Err(CudaError::UnsupportedFormat { .. })
    ));
    let e = entry(WeightFormat::Gguf(GgmlType::Q4_0), &[1, 64]);
    assert!(host_device_bytes(&e, 1, 16, 32).is_err());
    assert!(host_device_bytes(&e, 1, 32, 64).is_err());
}

#[test]
fn kernel_hash_constants_match_the_host_generator() {
    // The constants kernels/synthetic.cu spells out (a typo there changes every byte).
    let src = include_str!("../../kernels/synthetic.cu");
    for c in [
        "0xBF58476D1CE4E5B9ull",
        "0x94D049BB133111EBull",
        "0x9E3779B97F4A7C15ull",
    ] {
        assert!(src.contains(c), "{c}");
    }
    assert_eq!(rand64(0, 0), 0xe220_a839_7b1d_cdaf);
}
