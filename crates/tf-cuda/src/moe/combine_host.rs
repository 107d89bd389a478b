//! kernels/moe.cu's combine without the norm compiled for the host with a C++ compiler (no GPU)
//! and run under the SIMT emulation: each row's columns must equal tf_kernels' `combine` over
//! its picks in order, bit for bit — 9 picks (one batch of terms loaded ahead), 20 (two), picks
//! missing (position -1), a width that is no multiple of the block; the planted control (picks
//! added in reverse) must differ. Skipped, with a message, when no C++ compiler runs (`$CXX`,
//! else `c++`); `TF_CUDA_REQUIRE_CXX=1` makes that a failure.

use crate::host_cxx::{build, differing, extract, floats, run};
use tf_kernels::contract::Rng;
use tf_kernels::ops::{combine, Pick};

/// Threads a block of the emulated launches.
const THREADS: usize = 128;

/// Reads one case (i32 n, top_k, width, positions, plant; then n * top_k positions (i32), as many
/// weights, positions * width outputs (f32)) and writes out (n * width f32).
const MAIN: &str = r#"
int main(int argc, char** argv) {
    FILE *fi, *fo;
    if (!tf_open_io(argc, argv, &fi, &fo)) return 2;
    TfIn in;
    if (!tf_read_all(fi, &in)) return 3;
    const int n = in.i(), k = in.i(), width = in.i(), slots = in.i(), plant = in.i();
    auto where = in.vi((size_t)n * k);
    auto w = in.vf((size_t)n * k);
    auto yg = in.vf((size_t)slots * width);
    std::vector<float> out((size_t)n * width, -7.0f);
    const unsigned t = THREADS, cols = (unsigned)((width + t - 1) / t);
    tf_launch(D3{(unsigned)n, cols, 1}, t, 0, [&] {
        if (plant) tf_plant_moe_combine_reversed(yg.data(), where.data(), w.data(), w.data(), out.data(), k, width, 0, 0.0f);
        else tf_moe_combine(yg.data(), where.data(), w.data(), w.data(), out.data(), k, width, 0, 0.0f);
    });
    std::fwrite(out.data(), 4, out.size(), fo);
    std::fclose(fo);
    return 0;
}
"#;

/// moe.cu's combine and its entries with the host's stand-ins.
fn host_source() -> String {
    let moe = include_str!("../../kernels/moe.cu");
    let define = |name: &str| {
        let at = moe
            .find(&format!("#define {name} "))
            .expect("a define of moe.cu");
        moe[at..].lines().next().unwrap_or_default().to_string()
    };
    let mut s = format!(
        "{}{}\n#define THREADS {THREADS}\n",
        crate::host_cxx::SIMT_PRELUDE,
        crate::host_cxx::common()
    );
    for line in [define("MOE_PICK_BATCH"), define("MOE_PICK_AHEAD")] {
        s.push_str(&line);
        s.push('\n');
    }
    for head in [
        "template <int PLANT>\n__device__ __forceinline__ float tf_moe_combine_column(",
        "template <int PLANT>\n__device__ __forceinline__ void tf_moe_combine(",
        "extern \"C\" __global__ void tf_moe_combine(",
        "extern \"C\" __global__ void tf_plant_moe_combine_reversed(",
    ] {
        s.push_str(&extract(moe, head));
        s.push('\n');
    }
    s.push_str(MAIN);
    s
}

/// One launch's rows: each row's picks (position into the outputs, or -1; weight).
struct Case {
    k: usize,
    width: usize,
    picks: Vec<Vec<(i32, f32)>>,
    outs: Vec<f32>,
}

impl Case {
    /// `n` rows of `k` picks each over `width` columns, every `gap`-th pick missing (0: none).
    fn new(seed: u64, n: usize, k: usize, width: usize, gap: usize) -> Case {
        let mut r = Rng::new(seed);
        let slots = n * k;
        let outs = r.vec_normal(slots * width, 1.0);
        // Row i's pick j is output i + n j: the rows' terms interleaved, as the experts group
        // them.
        let picks = (0..n)
            .map(|i| {
                (0..k)
                    .map(|j| {
                        let missing = gap > 0 && (i + j) % gap == 0;
                        let pos = if missing { -1 } else { (i + n * j) as i32 };
                        (pos, r.vec_normal(1, 0.5)[0])
                    })
                    .collect()
            })
            .collect();
        Case {
            k,
            width,
            picks,
            outs,
        }
    }

    fn input(&self, plant: bool) -> Vec<u8> {
        let n = self.picks.len();
        let head = [
            n,
            self.k,
            self.width,
            self.outs.len() / self.width,
            plant as usize,
        ];
        let mut b: Vec<u8> = head
            .iter()
            .flat_map(|&v| (v as i32).to_le_bytes())
            .collect();
        b.extend(self.picks.iter().flatten().flat_map(|p| p.0.to_le_bytes()));
        b.extend(self.picks.iter().flatten().flat_map(|p| p.1.to_le_bytes()));
        b.extend(self.outs.iter().flat_map(|v| v.to_le_bytes()));
        b
    }

    /// tf_kernels' combine of each row's present picks, in order.
    fn cpu(&self) -> Vec<f32> {
        let w = self.width;
        let mut out = vec![0f32; self.picks.len() * w];
        for (row, o) in self.picks.iter().zip(out.chunks_exact_mut(w)) {
            let present: Vec<_> = row.iter().filter(|p| p.0 >= 0).collect();
            let picks: Vec<Pick> = present
                .iter()
                .map(|p| Pick {
                    expert: 0,
                    weight: p.1,
                })
                .collect();
            let outs: Vec<f32> = present
                .iter()
                .flat_map(|p| &self.outs[p.0 as usize * w..(p.0 as usize + 1) * w])
                .copied()
                .collect();
            combine(&picks, &outs, o).expect("cpu combine");
        }
        out
    }
}

#[test]
fn combine_emulated_on_the_host_gives_the_cpu_bits() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let (dir, exe) = build(&cxx, "combine", &host_source());
    let cases = [
        Case::new(1, 1, 9, 1024, 0),
        Case::new(2, 3, 9, 300, 4),
        Case::new(3, 2, 20, 200, 7),
    ];
    for (ci, c) in cases.iter().enumerate() {
        let got = floats(&run(&dir, &exe, &format!("case{ci}"), &c.input(false)));
        assert_eq!(
            differing(&got, &c.cpu()),
            0,
            "case {ci}: the combine's bits"
        );
        let planted = floats(&run(&dir, &exe, &format!("plant{ci}"), &c.input(true)));
        assert!(
            differing(&planted, &c.cpu()) > 0,
            "case {ci}: the reversed plant was not caught"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
