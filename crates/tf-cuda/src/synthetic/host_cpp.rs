//! kernels/synthetic.cu compiled for the host with a C++ compiler (no GPU): its grid-stride
//! loops run as one thread, and every byte it writes must equal the tf-formats reference
//! generator's (through [`host_device_bytes`] / [`vector_host`]'s values), for each format's
//! layout; a planted wrong argument must differ. Skipped, with a message, when no C++ compiler
//! runs (`$CXX`, else `c++`); `TF_CUDA_REQUIRE_CXX=1` makes that a failure.

use super::*;
use tf_formats::gguf::GgmlType;

/// Host stand-ins for the CUDA names synthetic.cu uses.
const PRELUDE: &str = r#"
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#define TF_SYNTH_HOST 1
#define __global__
#define __device__
#define __forceinline__ inline
static inline void tf_follow() {}
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
struct Dim3 { unsigned x; };
static Dim3 blockIdx{0}, threadIdx{0}, blockDim{1}, gridDim{1};
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
static inline float tf_bf16(u16 h) { return __int_as_float(((u32)h) << 16); }
static inline float tf_f16(u16 h) { _Float16 x; std::memcpy(&x, &h, 2); return (float)x; }
static inline u32 tf_synth_f16_rn(float v) { _Float16 x = (_Float16)v; u16 h; std::memcpy(&h, &x, 2); return h; }
"#;

/// Reads cases from argv[1] (one per line: `D bytes n key out_kind store_kind center qbits exp`
/// or `B bytes n key scale_key` and ten ints), writes each case's output bytes to argv[2].
const MAIN: &str = r#"
int main(int argc, char** argv) {
    FILE* in = std::fopen(argv[1], "r");
    FILE* out = std::fopen(argv[2], "wb");
    if (!in || !out) return 2;
    char kind;
    while (std::fscanf(in, " %c", &kind) == 1) {
        unsigned long long bytes, n, key;
        if (std::fscanf(in, "%llu %llu %llu", &bytes, &n, &key) != 3) return 3;
        std::vector<u8> buf(bytes + 8, 0xA5);
        if (kind == 'D') {
            int ok, sk, q, e; unsigned c;
            if (std::fscanf(in, "%d %d %u %d %d", &ok, &sk, &c, &q, &e) != 5) return 4;
            tf_synth_dense(buf.data(), n, key, ok, sk, c, q, e);
        } else {
            unsigned long long sk; int a[10];
            if (std::fscanf(in, "%llu", &sk) != 1) return 5;
            for (int i = 0; i < 10; i++) if (std::fscanf(in, "%d", &a[i]) != 1) return 6;
            tf_synth_blocks(buf.data(), n, key, sk, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9]);
        }
        for (int i = 0; i < 8; i++) if (buf[bytes + i] != 0xA5) return 7;  // no write past the end
        std::fwrite(buf.data(), 1, bytes, out);
    }
    std::fclose(out);
    return 0;
}
"#;

/// One case line and its output byte count.
fn case_line(args: &FillArgs, bytes: u64) -> String {
    match *args {
        FillArgs::Dense {
            n,
            key,
            out_kind,
            store_kind,
            center_bits,
            qbits,
            exp,
        } => format!("D {bytes} {n} {key} {out_kind} {store_kind} {center_bits} {qbits} {exp}"),
        FillArgs::Blocks {
            n,
            key,
            scale_key,
            ints,
        } => {
            let ints: Vec<String> = ints.iter().map(|v| v.to_string()).collect();
            format!("B {bytes} {n} {key} {scale_key} {}", ints.join(" "))
        }
    }
}

/// Compiles synthetic.cu for the host and runs `cases`; returns each case's bytes.
fn run(cxx: &str, cases: &[(FillArgs, u64)]) -> Vec<Vec<u8>> {
    let src = format!(
        "{PRELUDE}\n{}\n{MAIN}",
        include_str!("../../kernels/synthetic.cu")
    );
    let (dir, exe) = crate::host_cxx::build(cxx, "synth", &src);
    let lines: String = cases
        .iter()
        .map(|(a, bytes)| format!("{}\n", case_line(a, *bytes)))
        .collect();
    let all = crate::host_cxx::run(&dir, &exe, "cases", lines.as_bytes());
    let _ = std::fs::remove_dir_all(&dir);
    let mut at = 0;
    cases
        .iter()
        .map(|(_, b)| {
            let v = all[at..at + *b as usize].to_vec();
            at += *b as usize;
            v
        })
        .collect()
}

fn entry(name: &str, format: WeightFormat, shape: &[u64]) -> TensorEntry {
    TensorEntry {
        name: name.into(),
        format,
        shape: shape.to_vec(),
    }
}

#[test]
fn fill_kernels_on_the_host_write_the_reference_bytes() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let mlx = |bits, group_size, scales| WeightFormat::MlxAffine {
        bits,
        group_size,
        scales,
    };
    let w = "model.layers.2.self_attn.o_proj.weight";
    let matrices = [
        entry(w, WeightFormat::Gguf(GgmlType::Q4_0), &[3, 512]),
        entry(w, WeightFormat::Gguf(GgmlType::Q4_1), &[3, 512]),
        entry(w, WeightFormat::Gguf(GgmlType::Q8_0), &[3, 512]),
        entry(w, WeightFormat::Gguf(GgmlType::Q4K), &[3, 512]),
        entry(w, WeightFormat::Gguf(GgmlType::Q6K), &[3, 512]),
        entry(w, mlx(4, 64, DType::BF16), &[3, 512]),
        entry(w, mlx(3, 32, DType::F16), &[3, 512]),
        entry(w, mlx(6, 128, DType::F32), &[2, 256]),
        entry(w, WeightFormat::Dense(DType::F32), &[3, 64]),
        entry(w, WeightFormat::Dense(DType::F16), &[3, 64]),
        entry(w, WeightFormat::Dense(DType::BF16), &[3, 64]),
        entry(
            "backbone.layers.0.mixer.A_log",
            WeightFormat::Dense(DType::BF16),
            &[64],
        ),
    ];
    let mut cases = Vec::new();
    for e in &matrices {
        cases.push((
            fill_args(e, 11, None).unwrap(),
            layout_of(e).unwrap().bytes(e.elements()),
        ));
    }
    // Vectors: stored values widened to f32.
    let vectors = [
        entry("model.norm.weight", WeightFormat::Dense(DType::BF16), &[96]),
        entry(
            "backbone.layers.3.mixer.D",
            WeightFormat::Dense(DType::F16),
            &[96],
        ),
        entry(
            "model.layers.0.self_attn.q_proj.bias",
            WeightFormat::Dense(DType::F32),
            &[96],
        ),
    ];
    for e in &vectors {
        cases.push((
            fill_args(e, 11, Some(FloatKind::F32)).unwrap(),
            4 * e.elements(),
        ));
    }
    // Planted control: the Q4_1 case with its min field's exponent off by one.
    let mut planted = fill_args(&matrices[1], 11, None).unwrap();
    if let FillArgs::Blocks { ints, .. } = &mut planted {
        ints[8] += 1;
    }
    cases.push((planted, layout_of(&matrices[1]).unwrap().bytes(3 * 512)));
    let out = run(&cxx, &cases);
    for (e, got) in matrices.iter().zip(&out) {
        let want = host_device_bytes(e, 11, 0, e.elements()).unwrap();
        assert!(
            *got == want,
            "{}: kernel bytes differ from the reference",
            e.format
        );
    }
    for (e, got) in vectors.iter().zip(&out[matrices.len()..]) {
        let ck = Checkpoint::synthetic(
            tf_formats::checkpoint::parse_config_json("{}").unwrap(),
            vec![e.clone()],
            11,
        )
        .unwrap();
        let want: Vec<u8> = vector_host(&ck, e)
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert!(
            *got == want,
            "{}: kernel vector differs from the reference",
            e.name
        );
    }
    let reference = host_device_bytes(&matrices[1], 11, 0, 3 * 512).unwrap();
    assert!(
        out.last().unwrap() != &reference,
        "planted control not caught"
    );
}
