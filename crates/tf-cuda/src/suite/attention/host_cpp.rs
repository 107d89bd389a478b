//! kernels/attention.cu compiled for the host with a C++ compiler (no GPU) and run under a
//! small SIMT emulation (one OS thread per CUDA thread, barriers for `__syncthreads` and the
//! warp shuffles): rows over several scores tiles (the long-context path, forced here with small
//! tiles: multiples of 16 and not, a sliding window, head_dim 64 / 37 / 128) must give the CPU
//! kernel's bits, as must the one-tile path; the planted kernels (a key skipped; tile sums added
//! in another order) must differ. Skipped, with a message, when no C++ compiler is found
//! (`$CXX`, else `c++`); `TF_CUDA_REQUIRE_CXX=1` makes that a failure.

use crate::host_cxx::{differing, extract, floats, run};
use tf_kernels::contract::Rng;
use tf_kernels::ops::{attend as cpu_attend, AttnParams, AttnScratch, LayerKv};

/// Host stand-ins for the CUDA names the kernel uses, and the emulated launch.
const PRELUDE: &str = crate::host_cxx::SIMT_PRELUDE;

/// Reads a case (layout in [`Case::input`]), runs each (kernel, tile) launch, writes the outputs.
const MAIN: &str = r#"
typedef void (*AttFn)(const float*, const float*, const float*, const int*, const int*, float*,
                      int, int, int, int, int, int, float, int, int, int);
int main(int argc, char** argv) {
    if (argc < 3) return 2;
    FILE* fi = std::fopen(argv[1], "rb");
    if (!fi) return 2;
    TfIn in;
    if (!tf_read_all(fi, &in)) return 3;
    const int heads = in.i(), kvh = in.i(), hd = in.i(), slots = in.i(), cap = in.i();
    const int window = in.i(), n = in.i(), runs = in.i();
    const float scale = in.f();
    auto slot = in.vi(n); auto pos = in.vi(n);
    auto q = in.vf((size_t)n * heads * hd);
    const size_t pool = (size_t)slots * cap * kvh * hd;
    auto k = in.vf(pool); auto v = in.vf(pool);
    FILE* fo = std::fopen(argv[2], "wb");
    if (!fo) return 2;
    for (int r = 0; r < runs; r++) {
        const int kind = in.i(), tile = in.i();
        AttFn f = kind == 0 ? static_cast<AttFn>(tf_attend) : kind == 1 ? static_cast<AttFn>(tf_plant_attend_short) : static_cast<AttFn>(tf_plant_attend_tile_sum);
        std::vector<float> out((size_t)n * heads * hd, NAN);
        const size_t smem = 4 * ((size_t)tile + ((hd + 3) & ~3) + 2 * ATT_CHUNK * hd);
        tf_launch(D3{(unsigned)n, (unsigned)heads, 1}, ATT_THREADS, smem, [&] {
            f(q.data(), k.data(), v.data(), slot.data(), pos.data(), out.data(), heads, kvh, hd,
              1, 0, cap, scale, window, heads * hd, tile);
        });
        std::fwrite(out.data(), 4, out.size(), fo);
    }
    std::fclose(fo);
    return 0;
}
"#;

/// The host program's source: the stand-ins, common.cuh's helpers, attention.cu, the driver.
fn host_source() -> String {
    let common = include_str!("../../../kernels/common.cuh");
    let mut source = String::from(PRELUDE);
    for head in [
        "__device__ __forceinline__ float tf_bits(",
        "__device__ __forceinline__ float tf_exp(",
        "__device__ __forceinline__ float tf_max_op(",
        "__device__ __forceinline__ float tf_fold16_sum(",
        "__device__ __forceinline__ float tf_fold16_max(",
    ] {
        source.push_str(&extract(common, head));
        source.push('\n');
    }
    let att = include_str!("../../../kernels/attention.cu").replace(
        "extern __shared__ __align__(16) float att_smem[];",
        "float* att_smem = (float*)tf_dyn_smem;",
    );
    assert!(
        att.contains("tf_dyn_smem"),
        "attention.cu's dynamic shared memory moved"
    );
    source.push_str(&att);
    source.push_str(MAIN);
    source
}

/// One shape: streams of `lengths` keys, rows (slot, position, query), and the launches.
struct Case {
    label: &'static str,
    params: AttnParams,
    caches: Vec<LayerKv>,
    capacity: usize,
    rows: Vec<(usize, usize, Vec<f32>)>,
    /// (kernel: 0 tf_attend, 1 short plant, 2 tile-sum plant; tile).
    runs: Vec<(i32, usize)>,
}

impl Case {
    fn new(
        label: &'static str,
        seed: u64,
        (heads, kv_heads, hd): (usize, usize, usize),
        window: Option<usize>,
        lengths: &[usize],
        runs: Vec<(i32, usize)>,
    ) -> Case {
        let mut r = Rng::new(seed);
        let rw = kv_heads * hd;
        let caches: Vec<LayerKv> = lengths
            .iter()
            .map(|&len| {
                let mut lk = LayerKv::new(kv_heads, hd).expect("layer kv");
                lk.append(&r.vec_normal(len * rw, 1.0), &r.vec_normal(len * rw, 1.0))
                    .expect("append");
                lk
            })
            .collect();
        // The end of every stream, then a few random positions.
        let mut rows: Vec<(usize, usize, Vec<f32>)> = lengths
            .iter()
            .enumerate()
            .map(|(s, &len)| (s, len - 1, r.vec_normal(heads * hd, 1.0)))
            .collect();
        for _ in 0..2 {
            let s = r.below(lengths.len());
            rows.push((s, r.below(lengths[s]), r.vec_normal(heads * hd, 1.0)));
        }
        Case {
            label,
            params: AttnParams {
                n_heads: heads,
                n_kv_heads: kv_heads,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
                window,
                softcap: None,
            },
            caches,
            capacity: lengths.iter().copied().max().unwrap_or(1) + 3,
            rows,
            runs,
        }
    }

    fn input(&self) -> Vec<u8> {
        let p = &self.params;
        let rw = p.n_kv_heads * p.head_dim;
        let mut b = Vec::new();
        let put = |b: &mut Vec<u8>, v: i32| b.extend_from_slice(&v.to_le_bytes());
        for v in [
            p.n_heads,
            p.n_kv_heads,
            p.head_dim,
            self.caches.len(),
            self.capacity,
            p.window.unwrap_or(0),
            self.rows.len(),
            self.runs.len(),
        ] {
            put(&mut b, v as i32);
        }
        b.extend_from_slice(&p.scale.to_le_bytes());
        self.rows.iter().for_each(|r| put(&mut b, r.0 as i32));
        self.rows.iter().for_each(|r| put(&mut b, r.1 as i32));
        let floats = |b: &mut Vec<u8>, v: &[f32]| {
            v.iter().for_each(|f| b.extend_from_slice(&f.to_le_bytes()))
        };
        self.rows.iter().for_each(|r| floats(&mut b, &r.2));
        // Pools [slot][pos][rw] (one layer), positions past a stream's length poisoned.
        for pick in [LayerKv::keys, LayerKv::values] {
            for c in &self.caches {
                let mut slab = vec![f32::NAN; self.capacity * rw];
                slab[..c.len() * rw].copy_from_slice(pick(c));
                floats(&mut b, &slab);
            }
        }
        for &(kind, tile) in &self.runs {
            put(&mut b, kind);
            put(&mut b, tile as i32);
        }
        b
    }

    fn cpu(&self) -> Vec<f32> {
        let w = self.params.n_heads * self.params.head_dim;
        let mut out = vec![0f32; self.rows.len() * w];
        let mut scratch = AttnScratch::new();
        for (r, o) in self.rows.iter().zip(out.chunks_exact_mut(w)) {
            cpu_attend(&r.2, &self.caches[r.0], r.1, &self.params, o, &mut scratch)
                .expect("cpu attend");
        }
        out
    }
}

#[test]
fn attention_emulated_on_the_host_gives_the_cpu_bits_for_any_tile() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let (dir, exe) = crate::host_cxx::build(&cxx, "attention", &host_source());
    let whole = |lens: &[usize]| (lens.iter().max().copied().unwrap_or(1) + 3).div_ceil(4) * 4;
    let l64 = [1usize, 17, 64, 129, 301];
    let cases = [
        Case::new(
            "4q/2kv x 64",
            1,
            (4, 2, 64),
            None,
            &l64,
            vec![(0, whole(&l64)), (0, 48), (0, 20), (1, 48), (2, 48)],
        ),
        Case::new(
            "4q/2kv x 64, window 50",
            2,
            (4, 2, 64),
            Some(50),
            &l64,
            vec![(0, 16), (0, 36), (2, 20)],
        ),
        Case::new(
            "MHA 3 x 37",
            3,
            (3, 3, 37),
            None,
            &[5, 90, 211],
            vec![(0, 32), (0, 4), (2, 32)],
        ),
        Case::new(
            "MQA 2q/1kv x 128, 1000 keys",
            4,
            (2, 1, 128),
            None,
            &[1000, 70],
            vec![(0, whole(&[1000, 70])), (0, 256), (2, 256)],
        ),
    ];
    for (ci, c) in cases.iter().enumerate() {
        let got = floats(&run(&dir, &exe, &format!("case{ci}"), &c.input()));
        let want = c.cpu();
        assert_eq!(got.len(), c.runs.len() * want.len(), "{}", c.label);
        for (&(kind, tile), g) in c.runs.iter().zip(got.chunks_exact(want.len())) {
            let bad = differing(g, &want);
            if kind == 0 {
                assert_eq!(
                    bad,
                    0,
                    "{}, tile {tile}: {bad} of {} differ from the CPU",
                    c.label,
                    want.len()
                );
            } else {
                assert!(
                    bad > 0,
                    "{}: planted kernel {kind} gave the CPU's bits",
                    c.label
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
