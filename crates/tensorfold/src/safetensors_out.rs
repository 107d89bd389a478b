//! Writing one float32 tensor as a safetensors file (what `score` emits).

use std::io::Write;
use std::path::Path;

/// Writes `data` (shape `shape`) as the single F32 tensor `name` of a safetensors file.
pub fn write_f32(path: &Path, name: &str, shape: &[usize], data: &[f32]) -> std::io::Result<()> {
    let n_bytes = data.len() * 4;
    let header = serde_json::json!({
        name: { "dtype": "F32", "shape": shape, "data_offsets": [0, n_bytes] }
    })
    .to_string();
    // The data section starts 8-byte aligned: pad the header with spaces.
    let padded = header.len().div_ceil(8) * 8;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    out.write_all(&(padded as u64).to_le_bytes())?;
    out.write_all(header.as_bytes())?;
    out.write_all(&vec![b' '; padded - header.len()])?;
    for v in data {
        out.write_all(&v.to_le_bytes())?;
    }
    out.flush()
}
