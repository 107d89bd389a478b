// Candidate selection for the sampler (src/select.rs): for each row of an [n, vocab] f32 logits
// buffer, the `cap` largest non-NaN logits in f32 total order (Rust's f32::total_cmp, so
// -0 < +0), ties by the lower token id, as (id, value) pairs, the values copied from the row;
// and the row's count of non-NaN logits. Block b selects row rows[b] (any subset of the rows, in
// any order) into output slot b; a row's output never depends on the other rows selected.
//
// Method: a radix select, 8 bits per pass on the order-preserving u32 key (counted per warp,
// then summed), finds the key K of the cap-th entry and how many entries equal to K are taken
// (the lowest ids); one pass gathers the entries above K (and those equal to K), and a bitonic
// sort of (key, ~id) orders them. Only integer counts and comparisons: the result is the same
// whatever order the threads run in.

#define TF_SELECT_THREADS 512
#define TF_SELECT_CAP 256

// Order-preserving key of a non-NaN float: a < b in total order iff key(a) < key(b).
__device__ __forceinline__ u32 tf_select_key(float v) {
    const u32 b = (u32)__float_as_int(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Sort entry of (key, id): larger entries rank first; `plant` (a planted control) ranks ties
// by the higher id instead of the lower.
__device__ __forceinline__ u64 tf_select_entry(u32 key, u32 id, int plant) {
    return ((u64)key << 32) | (u64)(plant ? id : ~id);
}

// logits [*, vocab]; rows [m] (row indices into logits; grid m blocks of at most
// TF_SELECT_THREADS threads); out [m, 2 + 2 * cap] (one download): per slot the entries
// written, the row's non-NaN logits, cap ids, then cap value bits. 1 <= cap <= TF_SELECT_CAP.
// Slots past the entries written get id -1 and value bits 0.
extern "C" __global__ void __launch_bounds__(TF_SELECT_THREADS)
    tf_select_topc(const float* __restrict__ logits, const int* __restrict__ rows, int vocab,
                   int cap, int plant, int* __restrict__ out) {
    __shared__ u32 hist[256];
    __shared__ u32 whist[TF_SELECT_THREADS / 32][256];  // per-warp counts (less contention)
    __shared__ u64 sorted[TF_SELECT_CAP];
    __shared__ u32 chunk_eq[TF_SELECT_THREADS];
    __shared__ u32 s_prefix, s_mask, s_need, s_eq, s_nonnan, s_all, s_fill;
    const int t = threadIdx.x, T = blockDim.x, warps = (T + 31) / 32;
    u32* mine = whist[t >> 5];
    const float* row = logits + (size_t)rows[blockIdx.x] * (size_t)vocab;
    if (t == 0) {
        s_prefix = 0;
        s_mask = 0;
        s_need = (u32)cap;
        s_eq = 0;
        s_nonnan = 0;
        s_all = 0;
        s_fill = 0;
    }
    for (int i = t; i < TF_SELECT_CAP; i += T) sorted[i] = 0ull;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = t; i < warps * 256; i += T) whist[i >> 8][i & 255] = 0u;
        __syncthreads();
        const u32 prefix = s_prefix, mask = s_mask;
        for (int i = t; i < vocab; i += T) {
            const float v = row[i];
            if (isnan(v)) continue;
            const u32 k = tf_select_key(v);
            if ((k & mask) == prefix) atomicAdd(&mine[(k >> shift) & 255u], 1u);
        }
        __syncthreads();
        for (int b = t; b < 256; b += T) {
            u32 c = 0;
            for (int w = 0; w < warps; w++) c += whist[w][b];
            hist[b] = c;
        }
        __syncthreads();
        if (t == 0) {
            if (shift == 24) {
                u32 total = 0;
                for (int b = 0; b < 256; b++) total += hist[b];
                s_nonnan = total;
                s_all = total <= (u32)cap ? 1u : 0u;
            }
            if (!s_all) {
                // The bin holding the need-th largest entry among those matching the prefix.
                u32 need = s_need;
                for (int b = 255; b >= 0; b--) {
                    if (hist[b] >= need) {
                        s_prefix = prefix | ((u32)b << shift);
                        s_mask = mask | (255u << shift);
                        s_eq = hist[b];
                        break;
                    }
                    need -= hist[b];
                }
                s_need = need;
            }
        }
        __syncthreads();
        if (s_all) break;
    }
    // After the passes: K = s_prefix; s_eq entries equal K, of which the s_need lowest ids go in.
    const u32 K = s_prefix, need = s_need;
    const bool all = s_all != 0u, all_eq = all || s_eq == need;
    for (int i = t; i < vocab; i += T) {
        const float v = row[i];
        if (isnan(v)) continue;
        const u32 k = tf_select_key(v);
        if (all || k > K || (k == K && all_eq)) {
            const u32 at = atomicAdd(&s_fill, 1u);
            sorted[at] = tf_select_entry(k, (u32)i, plant);
        }
    }
    if (!all_eq) {
        // More entries equal K than are taken: rank them by id (thread t scans a contiguous
        // chunk; the chunks' counts are prefix-summed in order).
        const int per = (vocab + T - 1) / T;
        const int lo = t * per, hi = min(vocab, lo + per);
        u32 c = 0;
        for (int i = lo; i < hi; i++) {
            const float v = row[i];
            if (!isnan(v) && tf_select_key(v) == K) c++;
        }
        chunk_eq[t] = c;
        __syncthreads();
        if (t == 0) {
            u32 run = 0;
            for (int u = 0; u < T; u++) {
                const u32 x = chunk_eq[u];
                chunk_eq[u] = run;
                run += x;
            }
        }
        __syncthreads();
        u32 r = chunk_eq[t];
        for (int i = lo; i < hi && r < need; i++) {
            const float v = row[i];
            if (!isnan(v) && tf_select_key(v) == K) {
                const u32 at = atomicAdd(&s_fill, 1u);
                sorted[at] = tf_select_entry(K, (u32)i, plant);
                r++;
            }
        }
    }
    __syncthreads();
    // Bitonic sort, descending (empty slots hold 0, below every entry: keys are >= 0x007fffff).
    for (int size = 2; size <= TF_SELECT_CAP; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = t; i < TF_SELECT_CAP / 2; i += T) {
                const int a = 2 * i - (i & (stride - 1)), b = a + stride;
                const u64 x = sorted[a], y = sorted[b];
                if ((x < y) == ((a & size) == 0)) {
                    sorted[a] = y;
                    sorted[b] = x;
                }
            }
            __syncthreads();
        }
    }
    const int written = (int)min(s_fill, (u32)cap);
    int* slot = out + (size_t)blockIdx.x * (size_t)(2 + 2 * cap);
    int* out_ids = slot + 2;
    int* out_vals = slot + 2 + cap;
    for (int i = t; i < cap; i += T) {
        if (i < written) {
            const u32 low = (u32)sorted[i];
            const u32 id = plant ? low : ~low;
            out_ids[i] = (int)id;
            out_vals[i] = __float_as_int(row[id]);
        } else {
            out_ids[i] = -1;
            out_vals[i] = 0;
        }
    }
    if (t == 0) {
        slot[0] = written;
        slot[1] = (int)s_nonnan;
    }
}

// out[j] = logits[rows[j] * vocab + ids[j]] for j < m (the raw logits of penalised tokens).
extern "C" __global__ void tf_select_gather(const float* __restrict__ logits, int vocab,
                                            const int* __restrict__ rows,
                                            const int* __restrict__ ids, int m,
                                            float* __restrict__ out) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < m) out[j] = logits[(size_t)rows[j] * (size_t)vocab + (size_t)ids[j]];
}
