// Candidate selection for the sampler (src/select.rs): for each row of an [n, vocab] f32 logits
// buffer, the `cap` largest non-NaN logits in f32 total order (Rust's f32::total_cmp, so
// -0 < +0), ties by the lower token id, as (id, value) pairs, the values copied from the row;
// and the row's count of non-NaN logits. Block b selects row rows[b] (any subset of the rows, in
// any order) into output slot b; a row's output never depends on the other rows selected.
//
// Method. Each thread takes the entries i = t (mod T); the cap-th largest of the T threads'
// largest keys, L, is a lower bound of the cap-th largest entry (those maxima are cap distinct
// entries), so the entries with keys >= L hold the answer whatever the thread count. They are
// usually a few hundred: they are gathered into a shared pool and sorted there. Only when more
// than the pool holds (heavy ties) does the block fall back to a radix select, 8 bits per pass
// on the order-preserving u32 key (counted per warp, then summed), which finds the key K of the
// cap-th entry and how many entries equal to K are taken (the lowest ids); one pass gathers the
// entries above K (and those equal to K) and they are sorted. Both paths compare integers only:
// the result is the same whatever order the threads run in, and is the row's exact top cap.

#define TF_SELECT_THREADS 512
#define TF_SELECT_CAP 256
#define TF_SELECT_POOL 2048  // entries the fast path sorts in shared memory
#define TF_SELECT_BATCH 16   // a thread's loads in flight together

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

// Sorts a[0..p) descending (p a power of two) with the block's threads; ends synchronized.
__device__ void tf_select_bitonic(u64* a, int p) {
    const int t = threadIdx.x, T = blockDim.x;
    for (int size = 2; size <= p; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = t; i < p / 2; i += T) {
                const int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
                const u64 x = a[lo], y = a[hi];
                if ((x < y) == ((lo & size) == 0)) {
                    a[lo] = y;
                    a[hi] = x;
                }
            }
            __syncthreads();
        }
    }
}

// The least power of two >= n (n >= 1).
__device__ __forceinline__ int tf_select_pow2(int n) {
    int p = 1;
    while (p < n) p <<= 1;
    return p;
}

// Entries b0 + u * T + t (u < TF_SELECT_BATCH) of a row into v, NaN past its end: thread t's
// next entries, their loads in flight together.
__device__ __forceinline__ void tf_select_batch(float* v, const float* __restrict__ row, int vocab,
                                                int b0, int t, int T) {
#pragma unroll
    for (int u = 0; u < TF_SELECT_BATCH; u++) {
        const int i = b0 + u * T + t;
        v[u] = i < vocab ? row[i] : __int_as_float(0x7fc00000);
    }
}

// logits [*, vocab]; rows [m] (row indices into logits; grid m blocks of at most
// TF_SELECT_THREADS threads, a multiple of 32); out [m, 2 + 2 * cap] (one download): per slot
// the entries written, the row's non-NaN logits, cap ids, then cap value bits. 1 <= cap <=
// TF_SELECT_CAP. Slots past the entries written get id -1 and value bits 0. radix = 1 takes the
// fallback path for every row (so the contract checks both paths).
extern "C" __global__ void __launch_bounds__(TF_SELECT_THREADS)
    tf_select_topc(const float* __restrict__ logits, const int* __restrict__ rows, int vocab,
                   int cap, int plant, int radix, int* __restrict__ out) {
    tf_follow();
    __shared__ u64 pool[TF_SELECT_POOL];
    __shared__ u32 hist[256];
    __shared__ u32 whist[TF_SELECT_THREADS / 32][256];  // per-warp counts (less contention)
    __shared__ u32 chunk_eq[TF_SELECT_THREADS];
    __shared__ u32 s_prefix, s_mask, s_need, s_eq, s_nonnan, s_all, s_fill, s_take;
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
        s_take = 0;
    }
    // The fast path: each thread's largest key (0: none; non-NaN keys are >= 0x007fffff).
    u32 best = 0, nonnan = 0;
    for (int b0 = 0; b0 < vocab; b0 += TF_SELECT_BATCH * T) {
        float v[TF_SELECT_BATCH];
        tf_select_batch(v, row, vocab, b0, t, T);
#pragma unroll
        for (int u = 0; u < TF_SELECT_BATCH; u++) {
            if (isnan(v[u])) continue;
            nonnan++;
            best = max(best, tf_select_key(v[u]));
        }
    }
    const int pt = tf_select_pow2(T);
    for (int i = t; i < pt; i += T) pool[i] = 0ull;
    __syncthreads();
    pool[t] = (u64)best << 32;
    atomicAdd(&s_nonnan, nonnan);
    __syncthreads();
    tf_select_bitonic(pool, pt);
    const u32 L = cap <= T ? (u32)(pool[cap - 1] >> 32) : 0u;
    __syncthreads();
    // Every entry with a key >= L into the pool (a warp's takers counted by one atomic).
    for (int b0 = 0; b0 < vocab && !radix; b0 += TF_SELECT_BATCH * T) {
        float v[TF_SELECT_BATCH];
        tf_select_batch(v, row, vocab, b0, t, T);
#pragma unroll
        for (int u = 0; u < TF_SELECT_BATCH; u++) {
            const u32 k = isnan(v[u]) ? 0u : tf_select_key(v[u]);
            const bool take = !isnan(v[u]) && k >= L;
            const u32 takers = __ballot_sync(TF_FULL_MASK, take);
            u32 base = 0;
            if ((t & 31) == 0 && takers) base = atomicAdd(&s_take, (u32)__popc(takers));
            base = __shfl_sync(TF_FULL_MASK, base, 0);
            const u32 at = base + (u32)__popc(takers & ((1u << (t & 31)) - 1u));
            if (take && at < TF_SELECT_POOL)
                pool[at] = tf_select_entry(k, (u32)(b0 + u * T + t), plant);
        }
    }
    __syncthreads();
    const u32 taken = s_take;
    int written;
    if (!radix && taken <= TF_SELECT_POOL) {
        const int p = tf_select_pow2(max((int)taken, 2));
        for (int i = (int)taken + t; i < p; i += T) pool[i] = 0ull;
        __syncthreads();
        tf_select_bitonic(pool, p);
        written = (int)min(taken, (u32)cap);
    } else {
        // The fallback: a radix select of the cap-th key into pool[0..cap), then sorted.
        for (int i = t; i < TF_SELECT_CAP; i += T) pool[i] = 0ull;
        if (t == 0) s_all = s_nonnan <= (u32)cap ? 1u : 0u;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = t; i < warps * 256; i += T) whist[i >> 8][i & 255] = 0u;
            __syncthreads();
            if (s_all) break;
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
        // Now K = s_prefix; s_eq entries equal K, of which the s_need lowest ids go in.
        const u32 K = s_prefix, need = s_need;
        const bool all = s_all != 0u, all_eq = all || s_eq == need;
        for (int i = t; i < vocab; i += T) {
            const float v = row[i];
            if (isnan(v)) continue;
            const u32 k = tf_select_key(v);
            if (all || k > K || (k == K && all_eq)) {
                const u32 at = atomicAdd(&s_fill, 1u);
                pool[at] = tf_select_entry(k, (u32)i, plant);
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
                    pool[at] = tf_select_entry(K, (u32)i, plant);
                    r++;
                }
            }
        }
        __syncthreads();
        tf_select_bitonic(pool, TF_SELECT_CAP);
        written = (int)min(s_fill, (u32)cap);
    }
    int* slot = out + (size_t)blockIdx.x * (size_t)(2 + 2 * cap);
    int* out_ids = slot + 2;
    int* out_vals = slot + 2 + cap;
    for (int i = t; i < cap; i += T) {
        if (i < written) {
            const u32 low = (u32)pool[i];
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
    tf_follow();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < m) out[j] = logits[(size_t)rows[j] * (size_t)vocab + (size_t)ids[j]];
}
