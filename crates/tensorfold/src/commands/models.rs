//! `tensorfold models`: the families and formats this build serves.

use clap::Parser;
use std::process::ExitCode;

/// Arguments of `tensorfold models`.
#[derive(Parser)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `tensorfold models`.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    let families = tf_families::families();
    if args.json {
        println!("{}", serde_json::to_string_pretty(families)?);
        return Ok(ExitCode::SUCCESS);
    }
    for f in families {
        println!("{}", f.name);
        println!("  config.json model_type: {}", f.model_types.join(", "));
        if !f.gguf_architectures.is_empty() {
            println!(
                "  GGUF architecture:      {}",
                f.gguf_architectures.join(", ")
            );
        }
        let dense: Vec<String> = f.dense.iter().map(|d| d.to_string()).collect();
        println!("  safetensors:            {}", dense.join(", "));
        let gguf = |ts: &[tf_formats::gguf::GgmlType]| {
            ts.iter()
                .map(|t| format!("{t:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!("  GGUF fast kernels:      {}", gguf(f.gguf_fast));
        println!("  GGUF slower kernels:    {}", gguf(f.gguf_slow));
        let bits: Vec<String> = f.mlx_bits.iter().map(|b| b.to_string()).collect();
        let groups: Vec<String> = f.mlx_group_sizes.iter().map(|g| g.to_string()).collect();
        println!(
            "  MLX affine:             {} bits, group sizes {}",
            bits.join("/"),
            groups.join("/")
        );
    }
    println!("\nBackends: cpu (this build). CUDA is planned.");
    Ok(ExitCode::SUCCESS)
}
