// Mixture-of-experts kernels (src/moe.rs) and the small row operators of the Muse Spark forward.
//
// Routing mirrors the two CPU routines bit for bit, one block per row with thread 0 running the
// CPU's selection loop literally over scores kept in shared memory:
// - tf_moe_route_grouped: tf_kernels ops::moe::route (sigmoid, correction bias, grouped top-k,
//   insertion top-k with ties to the lower id, weights normalised in pick order, then scaled);
// - tf_moe_route_muse: tf_models muse_spark::moe::route (logit * multiplier, the mirrored
//   sigmoid, bias, k rounds of argmax with strictly-greater so ties keep the lower id, NaN never
//   wins; weights s / (total + 1e-15) * scale).
// Picks are stored per slot (row i, pick j) at i * top_k + j; a missing pick is expert -1.
// tf_moe_sort lists the slots of each expert (counting sort, slot order inside an expert), and
// the expert matmuls run TF_MATMUL_IMPL (matmul.cu; MLX 4-bit and bf16: tf_slices, slices.cu)
// on each expert's contiguous group of gathered rows: the matmul is row-invariant, so a slot's
// bits do not depend on the group.
// tf_moe_combine adds the picks of a row in pick order from 0, each term rounded then added (the
// CPU's combine).

__device__ __forceinline__ float tf_moe_sigmoid(float x) { return 1.0f / (1.0f + tf_exp(-x)); }

// Muse Spark's router sigmoid: y = 1 / (1 + exp(|x|)), mirrored for x >= 0.
__device__ __forceinline__ float tf_muse_score(float x) {
    const float y = 1.0f / (1.0f + tf_exp(fabsf(x)));
    return x < 0.0f ? y : 1.0f - y;
}

// tf_kernels' ranks_before: larger score first, then the lower id; NaN ranks last.
// PLANT = 1 (planted control) breaks equal scores toward the higher id.
template <int PLANT>
__device__ __forceinline__ bool tf_moe_ranks_before(float a, int ia, float b, int ib) {
    const bool na = isnan(a), nb = isnan(b);
    if (na && nb) return ia < ib;
    if (na) return false;
    if (nb) return true;
    return a > b || (a == b && (PLANT == 1 ? ia > ib : ia < ib));
}

// tf_moe_ranks_before as one unsigned order: key(a, ia) > key(b, ib) exactly when (a, ia)
// ranks before (b, ib). High word: the score's order (NaN lowest, -0 as +0); low word: the id,
// inverted so the lower id is larger (PLANT = 1: the higher id, except between NaNs, as in
// tf_moe_ranks_before). Distinct ids give distinct keys.
template <int PLANT>
__device__ __forceinline__ unsigned long long tf_moe_rank_key(float s, int e) {
    const int b = __float_as_int(s == 0.0f ? 0.0f : s);
    const int o = isnan(s) ? (int)0x80000000 : (b >= 0 ? b : b ^ 0x7fffffff);
    const unsigned hi = (unsigned)o ^ 0x80000000u;
    const unsigned lo = PLANT == 1 && !isnan(s) ? (unsigned)e : ~(unsigned)e;
    return ((unsigned long long)hi << 32) | lo;
}

// Pick j's weight of a row from its picks' probabilities (the CPU's order): w = probs[pick_j],
// then (norm_topk, k > 1) w / (sum + 1e-20) with the sum of all k in pick order, then
// w * scaling. Each of the row's k threads takes one pick and repeats the sum.
__device__ __forceinline__ float tf_moe_pick_weight(const int* pick, const float* probs, int j,
                                                    int k, int norm_topk, float scaling) {
    float w = probs[pick[j]];
    if (norm_topk && k > 1) {
        float sum = 0.0f;
        for (int t = 0; t < k; t++) sum = sum + probs[pick[t]];
        w = w / (sum + 1e-20f);
    }
    return w * scaling;
}

// Dynamic shared memory: keys[E32] (8-byte aligned first; E32 = n_experts rounded up to 32),
// probs[n_experts], scores[n_experts], group scores[n_group], candidate ids[E32]. Returns where
// the row's picks are, visible to the whole block (shared memory for k <= 32; else
// `experts`); the weights are made from them, a thread a pick.
template <int PLANT>
__device__ __forceinline__ const int* tf_moe_route_grouped(const float* __restrict__ logits,
                                                     const float* __restrict__ corr, int* experts,
                                                     float* weights, int n_experts, int top_k,
                                                     int n_group, int topk_group, float scaling,
                                                     int norm_topk, float fill) {
    extern __shared__ unsigned long long rt_keys[];
    const int nch = (n_experts + 31) >> 5;  // chunks of 32 experts
    float* probs = (float*)(rt_keys + 32 * nch);
    float* scores = probs + n_experts;
    float* gs = scores + n_experts;
    int* cid = (int*)(gs + n_group);
    const int i = blockIdx.x;
    const float* lr = logits + (size_t)i * n_experts;
    for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
        const float p = tf_moe_sigmoid(lr[e]);
        probs[e] = p;
        scores[e] = p + corr[e];
    }
    __syncthreads();
    tf_mark("~route:scored");
    if (n_group > 1 && threadIdx.x == 0) {
        const int per = n_experts / n_group;
        for (int g = 0; g < n_group; g++) {
            const float* s = scores + g * per;
            float a = s[0];
            int ia = 0;
            for (int t = 1; t < per; t++)
                if (tf_moe_ranks_before<PLANT>(s[t], t, a, ia)) { a = s[t]; ia = t; }
            float b = __int_as_float(0x7fc00000);
            int ib = -1;
            for (int t = 0; t < per; t++)
                if (t != ia && (ib < 0 || tf_moe_ranks_before<PLANT>(s[t], t, b, ib))) {
                    b = s[t];
                    ib = t;
                }
            gs[g] = a + b;
        }
        // A group is dropped when topk_group or more groups rank before it (the CPU's stable
        // sort by the same total order).
        for (int g = 0; g < n_group; g++) {
            int rank = 0;
            for (int h = 0; h < n_group; h++)
                if (h != g && tf_moe_ranks_before<PLANT>(gs[h], h, gs[g], g)) rank++;
            if (rank >= topk_group)
                for (int t = g * per; t < (g + 1) * per; t++) scores[t] = fill;
        }
    }
    __syncthreads();  // the group masking is done
    // The CPU's insertion top-k keeps the k experts that rank first, in rank order, and
    // ranks_before is a strict total order (ties by id, NaN last), so each expert's place is
    // the number of experts ranking before it. For k <= 32, each warp first sorts its chunks of
    // 32 keys (bitonic, by shuffles) and keeps each chunk's first k as candidates: every expert
    // ranking before a top-k expert is itself in the top k, so a candidate's rank among the
    // candidates is its rank among all experts. Otherwise every expert counts against all.
    int* pk = experts + (size_t)i * top_k;
    float* pw = weights + (size_t)i * top_k;
    const int k = top_k;
    __shared__ int rt_pick[32];
    if (k <= 32) {
        const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
        for (int ch = threadIdx.x >> 5; ch < nch; ch += nw) {
            const int e = 32 * ch + lane;
            // Past the last expert: key 0, below every expert's.
            unsigned long long key = e < n_experts ? tf_moe_rank_key<PLANT>(scores[e], e) : 0ull;
            int id = e;
#pragma unroll
            for (int size = 2; size <= 32; size <<= 1)
#pragma unroll
                for (int stride = size >> 1; stride > 0; stride >>= 1) {
                    const unsigned long long ok = __shfl_xor_sync(TF_FULL_MASK, key, stride);
                    const int oid = __shfl_xor_sync(TF_FULL_MASK, id, stride);
                    // Blocks of `size` alternate descending / ascending; the last one descends.
                    const bool keep_max = ((lane & stride) == 0) == ((lane & size) == 0);
                    if (keep_max ? ok > key : ok < key) key = ok, id = oid;
                }
            if (lane < k) rt_keys[ch * k + lane] = key, cid[ch * k + lane] = id;
        }
        __syncthreads();
        const int nc = nch * k;
        for (int c = threadIdx.x; c < nc; c += blockDim.x) {
            const unsigned long long me = rt_keys[c];
            int rank = 0;
            for (int t = 0; t < nc; t++) rank += rt_keys[t] > me ? 1 : 0;
            if (rank < k) pk[rank] = cid[c], rt_pick[rank] = cid[c];
        }
    } else {
        for (int e = threadIdx.x; e < n_experts; e += blockDim.x)
            rt_keys[e] = tf_moe_rank_key<PLANT>(scores[e], e);
        __syncthreads();
        for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
            const unsigned long long me = rt_keys[e];
            int rank = 0;
#pragma unroll 8
            for (int t = 0; t < n_experts; t++) rank += rt_keys[t] > me ? 1 : 0;
            if (rank < k) pk[rank] = e;
        }
    }
    __syncthreads();  // every pick is placed
    const int* picks = k <= 32 ? rt_pick : pk;
    for (int j = threadIdx.x; j < k; j += blockDim.x)
        pw[j] = tf_moe_pick_weight(picks, probs, j, k, norm_topk, scaling);
    return picks;
}

extern "C" __global__ void tf_moe_route_grouped(const float* logits, const float* corr,
                                                int* experts, float* weights, int n_experts,
                                                int top_k, int n_group, int topk_group,
                                                float scaling, int norm_topk, float fill) {
    tf_follow();
    tf_moe_route_grouped<0>(logits, corr, experts, weights, n_experts, top_k, n_group,
                            topk_group, scaling, norm_topk, fill);
}

extern "C" __global__ void tf_plant_moe_route_tie_high(const float* logits, const float* corr,
                                                       int* experts, float* weights,
                                                       int n_experts, int top_k, int n_group,
                                                       int topk_group, float scaling,
                                                       int norm_topk, float fill) {
    tf_follow();
    tf_moe_route_grouped<1>(logits, corr, experts, weights, n_experts, top_k, n_group,
                            topk_group, scaling, norm_topk, fill);
}

// Lists each expert's slots: offsets[e]..offsets[e + 1] of `order` hold the slots picking e (in
// slot order); where_[slot] is the slot's position in `order` (-1 without a pick). One block:
// the block counts each expert's slots and scans the counts into offsets; then its first warp
// places the slots 32 at a time in slot order (a slot's place among its expert's slots in the
// chunk from __match_any_sync). smem: a cursor per expert, then 32 warp sums (n_experts + 32
// ints). blockDim: a multiple of 32, at most 1024.
__device__ __forceinline__ void tf_moe_sort_block(const int* experts, int* offsets, int* order,
                                                  int* where_, int slots, int n_experts,
                                                  int* smem) {
    int* cursor = smem;
    int* wsum = smem + n_experts;
    const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5;
    auto valid = [&](int e) { return e >= 0 && e < n_experts; };
    for (int e = tid; e < n_experts; e += nt) cursor[e] = 0;
    __syncthreads();
    for (int s = tid; s < slots; s += nt)
        if (valid(experts[s])) atomicAdd(&cursor[experts[s]], 1);
    __syncthreads();
    // Exclusive scan: thread tid takes the experts lo..hi - 1.
    const int per = (n_experts + nt - 1) / nt;
    const int lo = min(tid * per, n_experts), hi = min(lo + per, n_experts);
    int sum = 0;
    for (int e = lo; e < hi; e++) sum += cursor[e];
    int inc = sum;  // inclusive over the warp's lanes
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int v = __shfl_up_sync(TF_FULL_MASK, inc, off);
        if (lane >= off) inc += v;
    }
    if (lane == 31) wsum[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        const int v = lane < (nt >> 5) ? wsum[lane] : 0;
        int w = v;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const int u = __shfl_up_sync(TF_FULL_MASK, w, off);
            if (lane >= off) w += u;
        }
        __syncwarp();
        wsum[lane] = w - v;  // the warps before this one
    }
    __syncthreads();
    int acc = wsum[warp] + inc - sum;
    for (int e = lo; e < hi; e++) {
        const int c = cursor[e];
        offsets[e] = acc;
        cursor[e] = acc;
        acc += c;
    }
    if (tid == nt - 1) offsets[n_experts] = acc;
    __syncthreads();
    if (warp != 0) return;
    for (int s0 = 0; s0 < slots; s0 += 32) {
        const int s = s0 + lane;
        const int e = s < slots ? experts[s] : -1;
        const bool ok = valid(e);
        const unsigned m = __match_any_sync(TF_FULL_MASK, ok ? e : -1 - lane);
        const int rank = __popc(m & ((1u << lane) - 1u)), count = __popc(m);
        if (ok) {
            const int p = cursor[e] + rank;
            order[p] = s;
            where_[s] = p;
        } else if (s < slots) {
            where_[s] = -1;
        }
        __syncwarp();
        if (ok && rank == count - 1) cursor[e] += count;  // the chunk's last slot of e
        __syncwarp();
    }
}

// One row's expert lists, as tf_moe_sort_block makes them from its k picks (picks: visible to
// every thread of the block), without its counts and scans: offsets[e] is the number of valid
// picks of an expert below e (offsets[n_experts] all of them), and a valid slot's place in
// `order` the number of valid picks before it in (expert, slot) order.
__device__ __forceinline__ void tf_moe_sort_one(const int* picks, int* offsets, int* order,
                                                int* where_, int k, int n_experts) {
    auto valid = [&](int e) { return e >= 0 && e < n_experts; };
    for (int e = threadIdx.x; e <= n_experts; e += blockDim.x) {
        int below = 0;
        for (int t = 0; t < k; t++) below += valid(picks[t]) && picks[t] < e ? 1 : 0;
        offsets[e] = below;
    }
    for (int s = threadIdx.x; s < k; s += blockDim.x) {
        const int e = picks[s];
        int p = -1;
        if (valid(e)) {
            p = 0;
            for (int t = 0; t < k; t++) {
                const int f = picks[t];
                p += valid(f) && (f < e || (f == e && t < s)) ? 1 : 0;
            }
            order[p] = s;
        }
        where_[s] = p;
    }
}

// A round of one row: tf_moe_route_grouped, then its expert lists (tf_moe_sort_one), in one
// block and one launch (the same picks and weights, the lists tf_moe_sort makes). Dynamic
// shared memory: the routing's.
__device__ __forceinline__ void tf_moe_route_sorted(const float* logits, const float* corr,
                                                    int* experts, float* weights, int n_experts,
                                                    int top_k, int n_group, int topk_group,
                                                    float scaling, int norm_topk, float fill,
                                                    int* offsets, int* order, int* where_) {
    const int* picks = tf_moe_route_grouped<0>(logits, corr, experts, weights, n_experts, top_k,
                                               n_group, topk_group, scaling, norm_topk, fill);
    tf_mark("~route:picked");
    tf_moe_sort_one(picks, offsets, order, where_, top_k, n_experts);
    tf_mark("~route:sorted");
}

#define TF_MOE_ROUTE_SORTED_ARGS                                                               \
    const float *logits, const float *corr, int *experts, float *weights, int n_experts,       \
        int top_k, int n_group, int topk_group, float scaling, int norm_topk, float fill,      \
        int *offsets, int *order, int *where_
#define TF_MOE_ROUTE_SORTED_CALL                                                               \
    tf_moe_route_sorted(logits, corr, experts, weights, n_experts, top_k, n_group, topk_group, \
                        scaling, norm_topk, fill, offsets, order, where_)
extern "C" __global__ void tf_moe_route_grouped_sorted(TF_MOE_ROUTE_SORTED_ARGS) {
    tf_follow();
    TF_MOE_ROUTE_SORTED_CALL;
}

// The same, letting the experts' first launch (which reads nothing before its wait) launch now,
// so its blocks are resident when the routing ends (unless TF_CUDA_ROUTE_LEAD=0).
extern "C" __global__ void tf_moe_route_grouped_sorted_lead(TF_MOE_ROUTE_SORTED_ARGS) {
    tf_follow();
    tf_lead();
    TF_MOE_ROUTE_SORTED_CALL;
}

// Dynamic shared memory: scores[n_experts], biased[n_experts], picked[top_k].
extern "C" __global__ void tf_moe_route_muse(const float* logits, const float* bias, int* experts,
                                             float* weights, int n_experts, int top_k,
                                             float multiplier, float scale) {
    tf_follow();
    extern __shared__ float muse_smem[];
    float* scores = muse_smem;
    float* biased = muse_smem + n_experts;
    float* picked = biased + n_experts;
    const int i = blockIdx.x;
    const float* lr = logits + (size_t)i * n_experts;
    for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
        const float s = tf_muse_score(lr[e] * multiplier);
        scores[e] = s;
        biased[e] = s + bias[e];
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    int* pk = experts + (size_t)i * top_k;
    float* pw = weights + (size_t)i * top_k;
    int count = 0;
    for (int r = 0; r < top_k; r++) {
        int at = -1;
        for (int e = 0; e < n_experts; e++) {
            const float v = biased[e];
            if (!isnan(v) && (at < 0 || v > biased[at])) at = e;
        }
        if (at < 0) break;
        pk[r] = at;
        picked[r] = scores[at];
        biased[at] = __int_as_float(0xff800000);
        count++;
    }
    float total = 0.0f;
    for (int r = 0; r < count; r++) total = total + picked[r];
    for (int r = 0; r < count; r++) pw[r] = picked[r] / (total + 1e-15f) * scale;
    for (int r = count; r < top_k; r++) {
        pk[r] = -1;
        pw[r] = 0.0f;
    }
}

extern "C" __global__ void tf_moe_sort(const int* experts, int* offsets, int* order, int* where_,
                                       int slots, int n_experts) {
    tf_follow();
    extern __shared__ int sort_smem[];
    tf_moe_sort_block(experts, offsets, order, where_, slots, n_experts, sort_smem);
}

// Gathers the routed rows: xg[p] = x[order[p] / top_k] for p < offsets[n_experts]. One block per
// position (the grid covers every slot; positions past the total return).
// Gathered row p (of `width`) copied from its token's row of x into xg by the block; that
// source row returned.
__device__ __forceinline__ const float* tf_moe_gather_row(const float* x, const int* order,
                                                          float* xg, int p, int top_k,
                                                          int width) {
    const float* src = x + (size_t)(order[p] / top_k) * width;
    float* dst = xg + (size_t)p * width;
    for (int c = threadIdx.x; c < width; c += blockDim.x) dst[c] = src[c];
    return src;
}

extern "C" __global__ void tf_moe_gather(const float* x, const int* order, const int* offsets,
                                         float* xg, int top_k, int width, int n_experts) {
    tf_follow();
    tf_lead();
    const int p = blockIdx.x;
    if (p >= offsets[n_experts]) return;
    tf_moe_gather_row(x, order, xg, p, top_k, width);
}

// The id of the y-th expert (ascending ids) whose group offsets[e]..offsets[e + 1] is not empty,
// or -1. Every thread of the block calls it (blockDim.x a multiple of 32, at most 1024).
__device__ __forceinline__ int tf_moe_block_expert(const int* __restrict__ offsets,
                                                   int n_experts, int y) {
    __shared__ int counts[32];
    __shared__ int found;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (threadIdx.x == 0) found = -1;
    int before = 0;  // non-empty experts in earlier passes
    for (int e0 = 0; e0 < n_experts; e0 += blockDim.x) {
        const int e = e0 + threadIdx.x;
        const bool full = e < n_experts && offsets[e + 1] > offsets[e];
        const u32 m = __ballot_sync(TF_FULL_MASK, full);
        __syncthreads();  // counts of the previous pass read
        if (lane == 0) counts[warp] = __popc(m);
        __syncthreads();
        int rank = before + __popc(m & ((1u << lane) - 1u));
        int total = 0;
        for (int w = 0; w < nw; w++) {
            if (w < warp) rank += counts[w];
            total += counts[w];
        }
        if (full && rank == y) found = e;
        before += total;
    }
    __syncthreads();
    return found;
}

// Expert matmuls: block row y takes the y-th expert e with a non-empty group (the launcher sizes
// the grid's y to min(n_experts, slots), the most groups a round can have, so no block waits on
// an empty expert); its rows of the stacked weight [E * rows, cols] multiply its group of
// gathered rows, yg[p, j] for p in offsets[e]..offsets[e + 1], through TF_MATMUL_IMPL
// (matmul.cu): tf_matmul's arithmetic, the same bits as the plain matmul of those rows.
template <int FMT, int PLANT, int MMQ>
__device__ __forceinline__ void tf_moe_matmul(const u8* __restrict__ W, const float* __restrict__ xg,
                                              float* __restrict__ yg, const int* __restrict__ offsets,
                                              int rows, int cols, int n_experts) {
    const int e = tf_moe_block_expert(offsets, n_experts, blockIdx.y);
    if (e < 0) return;
    const int off = offsets[e];
    const int cnt = offsets[e + 1] - off;
    TF_MATMUL_IMPL<FMT, PLANT, MMQ>(W + (size_t)e * rows * tf_row_bytes(FMT, cols),
                                    xg + (size_t)off * cols, yg + (size_t)off * rows, cnt, rows, cols);
}

#define TF_MOE_MATMUL_ENTRY(NAME, FMT, PLANT)                                                 \
    extern "C" __global__ void NAME(const u8* W, const float* xg, float* yg, const int* offsets, \
                                    int rows, int cols, int n_experts) { tf_follow();         \
        tf_moe_matmul<FMT, PLANT, 0>(W, xg, yg, offsets, rows, cols, n_experts);              \
    }
// NAME and NAME_mmq (tf_mmq's geometry), for tf_mmq's formats.
#define TF_MOE_MATMUL_ENTRIES(NAME, FMT, PLANT)                                               \
    TF_MOE_MATMUL_ENTRY(NAME, FMT, PLANT)                                                     \
    extern "C" __global__ void NAME##_mmq(const u8* W, const float* xg, float* yg,           \
                                          const int* offsets, int rows, int cols,             \
                                          int n_experts) { tf_follow();                       \
        tf_moe_matmul<FMT, PLANT, 1>(W, xg, yg, offsets, rows, cols, n_experts);              \
    }

TF_MOE_MATMUL_ENTRY(tf_moe_matmul_f32, FMT_F32, 0)
TF_MOE_MATMUL_ENTRY(tf_moe_matmul_f16, FMT_F16, 0)
TF_MOE_MATMUL_ENTRY(tf_moe_matmul_bf16, FMT_BF16, 0)
TF_MOE_MATMUL_ENTRIES(tf_moe_matmul_q4_0, FMT_Q4_0, 0)
TF_MOE_MATMUL_ENTRIES(tf_moe_matmul_q4_1, FMT_Q4_1, 0)
TF_MOE_MATMUL_ENTRIES(tf_moe_matmul_q8_0, FMT_Q8_0, 0)
TF_MOE_MATMUL_ENTRIES(tf_plant_moe_matmul_q4_1_rowvar, FMT_Q4_1, 1)
// The K-quants and MLX affine widths (decoders in common.cuh; MLX rows re-laid as in quant.cu).
TF_MOE_MATMUL_ENTRY(tf_moe_matmul_q4_k, FMT_Q4_K, 0)
TF_MOE_MATMUL_ENTRY(tf_moe_matmul_q6_k, FMT_Q6_K, 0)
TF_MOE_MATMUL_ENTRIES(tf_moe_matmul_mlx2, FMT_MLX2, 0)
TF_MOE_MATMUL_ENTRIES(tf_moe_matmul_mlx3, FMT_MLX3, 0)
TF_MOE_MATMUL_ENTRIES(tf_moe_matmul_mlx4, FMT_MLX4, 0)
TF_MOE_MATMUL_ENTRIES(tf_moe_matmul_mlx5, FMT_MLX5, 0)
TF_MOE_MATMUL_ENTRIES(tf_moe_matmul_mlx6, FMT_MLX6, 0)
TF_MOE_MATMUL_ENTRIES(tf_moe_matmul_mlx8, FMT_MLX8, 0)

// Expert matmuls in the GPU's own order (tf_slices, slices.cu), MLX 4-bit and bf16: block row
// y takes the y-th non-empty expert as tf_moe_matmul does and runs tf_slices on its matrix and
// group (NAME, any group size), or tf_slices_one (NAME_one, for rounds of one token, where each
// group is one row; 128 threads a block, as slices.rs launches it, held to 96 registers so
// five blocks fit an SM): the bits of tf_slices on that expert's matrix and rows.
template <int FMT, int ONE>
__device__ __forceinline__ void tf_moe_slices(const u8* __restrict__ W, const float* __restrict__ xg,
                                              float* __restrict__ yg, const int* __restrict__ offsets,
                                              int rows, int cols, int n_experts) {
    const int e = tf_moe_block_expert(offsets, n_experts, blockIdx.y);
    if (e < 0) return;  // the whole block
    const int off = offsets[e];
    const u8* we = W + (size_t)e * rows * ((cols >> 5) * 4 * tf_slice_words(FMT));
    if (ONE)
        tf_slices_one<FMT, 0>(we, xg + (size_t)off * cols, yg + (size_t)off * rows, rows, cols, 1);
    else
        tf_slices<FMT, 0>(we, xg + (size_t)off * cols, yg + (size_t)off * rows,
                          offsets[e + 1] - off, rows, cols);
}

#define TF_MOE_SLICES_ENTRIES(NAME, FMT)                                                      \
    extern "C" __global__ void NAME(const u8* W, const float* xg, float* yg, const int* offsets, \
                                    int rows, int cols, int n_experts) { tf_follow();         \
        tf_moe_slices<FMT, 0>(W, xg, yg, offsets, rows, cols, n_experts);                     \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(128, 5)                                      \
        NAME##_one(const u8* W, const float* xg, float* yg, const int* offsets, int rows,    \
                   int cols, int n_experts) { tf_follow();                                    \
        tf_moe_slices<FMT, 1>(W, xg, yg, offsets, rows, cols, n_experts);                     \
    }

TF_MOE_SLICES_ENTRIES(tf_moe_slices_mlx4, FMT_MLX4)
TF_MOE_SLICES_ENTRIES(tf_moe_slices_bf16, FMT_BF16)

// relu²: out = max(x, 0)², as tf_kernels' relu2 (r = x > 0 ? x : 0; r * r).
extern "C" __global__ void tf_moe_relu2(const float* x, float* out, int len) {
    tf_follow();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < len) {
        const float v = x[t];
        const float r = v > 0.0f ? v : 0.0f;
        out[t] = r * r;
    }
}

// Weighted combine, block row i for row i (one block with the norm; else block y takes columns
// y blockDim.x, ..., one a thread): out[i] = 0, then for each pick j in order with a
// position p = where_[i * top_k + j] >= 0: out[i] = out[i] + w_j * f(yg[p]), with f the identity
// (norm = 0) or Muse Spark's post-expert norm (norm = 1): v = yg[p] * gain, f = v * inv_rms(v)
// (the RMSNorm of ops.cu with a unit gain). PLANT = 1 adds the picks in reverse order.
#define MOE_PICK_BATCH 32  // picks whose positions, weights and norms a block holds at once
#define MOE_PICK_AHEAD 16  // picks whose terms a thread loads at once (without the norm)

// Without the norm: column c of row i (the picks' positions and weights read by each thread:
// the same few words for all, no barrier), MOE_PICK_AHEAD picks' terms loaded before any is
// added, so a column waits on two round trips, not one a pick; the same additions in order.
template <int PLANT>
__device__ __forceinline__ float tf_moe_combine_column(const float* __restrict__ yg,
                                                       const int* __restrict__ where_,
                                                       const float* __restrict__ weights, int i,
                                                       int c, int top_k, int width) {
    float acc = 0.0f;
    for (int j0 = 0; j0 < top_k; j0 += MOE_PICK_AHEAD) {
        int p[MOE_PICK_AHEAD];
        float wt[MOE_PICK_AHEAD], v[MOE_PICK_AHEAD];
#pragma unroll
        for (int u = 0; u < MOE_PICK_AHEAD; u++) {
            const int jj = j0 + u, j = PLANT == 1 ? top_k - 1 - jj : jj;
            p[u] = jj < top_k ? where_[(size_t)i * top_k + j] : -1;
            wt[u] = jj < top_k ? weights[(size_t)i * top_k + j] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < MOE_PICK_AHEAD; u++)
            v[u] = p[u] >= 0 ? yg[(size_t)p[u] * width + c] : 0.0f;
#pragma unroll
        for (int u = 0; u < MOE_PICK_AHEAD; u++)
            if (p[u] >= 0) acc = acc + wt[u] * v[u];
    }
    return acc;
}

template <int PLANT>
__device__ __forceinline__ void tf_moe_combine(const float* __restrict__ yg,
                                               const int* __restrict__ where_,
                                               const float* __restrict__ weights,
                                               const float* __restrict__ gain, float* out,
                                               int top_k, int width, int norm, float eps) {
    if (!norm) {
        const int c = blockIdx.y * blockDim.x + threadIdx.x;
        if (c < width)
            out[(size_t)blockIdx.x * width + c] =
                tf_moe_combine_column<PLANT>(yg, where_, weights, blockIdx.x, c, top_k, width);
        return;
    }
    __shared__ int pos[MOE_PICK_BATCH];
    __shared__ float wt[MOE_PICK_BATCH], rn[MOE_PICK_BATCH];
    const int i = blockIdx.x;
    float* orow = out + (size_t)i * width;
    // With the norm, the block takes the row. Picks in batches (in pick order, reversed for the
    // plant); within a batch each column adds its terms in a register, the batch's first term
    // to 0 (or to the previous batch's sum read back): the same additions in the same order.
    for (int j0 = 0; j0 < top_k; j0 += MOE_PICK_BATCH) {
        const int nb = min(MOE_PICK_BATCH, top_k - j0);
        __syncthreads();  // the previous batch is consumed
        for (int b = threadIdx.x; b < nb; b += blockDim.x) {
            const int jj = j0 + b;
            const int j = PLANT == 1 ? top_k - 1 - jj : jj;
            pos[b] = where_[(size_t)i * top_k + j];
            wt[b] = weights[(size_t)i * top_k + j];
        }
        __syncthreads();
        for (int b = 0; b < nb; b++) {
            if (pos[b] < 0) continue;
            const float* d = yg + (size_t)pos[b] * width;
            const float ss = tf_block_sumsq16([&](int c) { return d[c] * gain[c]; }, width);
            if (threadIdx.x == 0) rn[b] = tf_inv_rms(ss, width, eps);
        }
        __syncthreads();
        for (int c = threadIdx.x; c < width; c += blockDim.x) {
            float acc = j0 == 0 ? 0.0f : orow[c];
            for (int b = 0; b < nb; b++) {
                const int p = pos[b];
                if (p < 0) continue;
                const float v = yg[(size_t)p * width + c];
                acc = acc + ((v * gain[c]) * rn[b]) * wt[b];
            }
            orow[c] = acc;
        }
    }
}

extern "C" __global__ void tf_moe_combine(const float* yg, const int* where_, const float* weights,
                                          const float* gain, float* out, int top_k, int width,
                                          int norm, float eps) {
    tf_follow();
    tf_lead();
    tf_moe_combine<0>(yg, where_, weights, gain, out, top_k, width, norm, eps);
}

extern "C" __global__ void tf_plant_moe_combine_reversed(const float* yg, const int* where_,
                                                         const float* weights, const float* gain,
                                                         float* out, int top_k, int width,
                                                         int norm, float eps) {
    tf_follow();
    tf_moe_combine<1>(yg, where_, weights, gain, out, top_k, width, norm, eps);
}

// ---- row operators of the Muse Spark forward ----

// dst[i, c] = src[i * src_stride + offset + c] for c < width. One block per row.
extern "C" __global__ void tf_moe_take_cols(const float* src, float* dst, int src_stride,
                                            int offset, int width) {
    tf_follow();
    const int i = blockIdx.x;
    const float* s = src + (size_t)i * src_stride + offset;
    float* d = dst + (size_t)i * width;
    for (int c = threadIdx.x; c < width; c += blockDim.x) d[c] = s[c];
}

// x = x * s.
extern "C" __global__ void tf_moe_scale(float* x, float s, int len) {
    tf_follow();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < len) x[t] = x[t] * s;
}

// x[i, c] = x[i, c] * g[c] (rows of `width`).
extern "C" __global__ void tf_moe_mul_cols(float* x, const float* g, int width, int len) {
    tf_follow();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < len) x[t] = x[t] * g[t % width];
}

// o = o * sigmoid(g), sigmoid(g) = 1 / (1 + exp(-g)).
extern "C" __global__ void tf_muse_sigmoid_mul(float* o, const float* g, int len) {
    tf_follow();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < len) o[t] = o[t] * tf_moe_sigmoid(g[t]);
}

// h[i, c] = alpha[c] * h[i, c] + beta[c] * v[i, c] (each product rounded, then added).
extern "C" __global__ void tf_muse_gated_add(float* h, const float* v, const float* alpha,
                                             const float* beta, int width, int len) {
    tf_follow();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < len) {
        const int c = t % width;
        h[t] = alpha[c] * h[t] + beta[c] * v[t];
    }
}

// x = cap * tanh((x * mult) / cap), tanh in double rounded to float (the CPU's softcap).
extern "C" __global__ void tf_muse_softcap(float* x, float mult, float cap, int len) {
    tf_follow();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < len) {
        const float v = x[t] * mult;
        x[t] = cap * (float)tanh((double)(v / cap));
    }
}

// The grouped expert products on the tensor cores (kernels/mma.cu's body, MMA_MOE_KW warps a
// block): block row y takes the y-th non-empty expert e, its tiles RT x .. of rows / 16 (the
// stacked matrix's tiles of expert e: `rows` a multiple of 16) against its group's rows, 4F at
// a time. STAGED: x staged in shared memory (one-row rounds: every group one row). SB: the tiles'
// scale pairs (mma.cu: float2, or u32 in the compact tiles of the NAME_b16 entries). RELU2: the
// outputs also relu²'d and split into act and aparts (tf_mma_body), at yg's rows.
template <int RT, int STAGED, int F, class SB, int RELU2 = 0>
__device__ __forceinline__ void tf_moe_mma_group(const u8* __restrict__ W, int e, int cnt,
                                                 int rows, int cols, int n_experts,
                                                 const float* __restrict__ xg,
                                                 float* __restrict__ yg,
                                                 const uint4* __restrict__ xp,
                                                 const float* __restrict__ xsum,
                                                 float* __restrict__ act = nullptr,
                                                 uint4* __restrict__ aparts = nullptr) {
    const int tiles = rows >> 4;
    const size_t first = (size_t)e * tiles * (cols >> 6);  // expert e's first (tile, group)
    const uint4* wq = (const uint4*)W + first * 32;
    const SB* sb = tf_mma_scales<SB>(W, (size_t)n_experts * tiles, cols) + first * 16;
    for (int j0 = 0; j0 < cnt; j0 += 4 * F)
        tf_mma_body<RT, MMA_MOE_KW, STAGED, 0, F, SB, RELU2>(
            wq, sb, xg, yg, cnt, j0, blockIdx.x * RT, rows, cols, xp, xsum, act, aparts);
}

// The group's rows (x at xg, or split at xp, xsum; y at yg) from the first at offsets[e].
template <int RT, int STAGED, int F, class SB>
__device__ __forceinline__ void tf_moe_mma(const u8* __restrict__ W, const float* __restrict__ xg,
                                           float* __restrict__ yg, const int* __restrict__ offsets,
                                           int rows, int cols, int n_experts,
                                           const uint4* __restrict__ xp = nullptr,
                                           const float* __restrict__ xsum = nullptr) {
    // offsets were written two kernels back or earlier (a gather, relu² or product between), so
    // the block finds its expert before the wait, while the kernel before it runs.
    const int e = tf_moe_block_expert(offsets, n_experts, blockIdx.y);
    tf_follow();
    if (e < 0) return;  // the whole block
    const int off = offsets[e], cnt = offsets[e + 1] - off;
    const size_t groups = cols >> 6;
    tf_moe_mma_group<RT, STAGED, F, SB>(
        W, e, cnt, rows, cols, n_experts, xg + (size_t)off * cols, yg + (size_t)off * rows,
        STAGED >= 2 ? xp + off * groups * 16 : nullptr, STAGED == 2 ? xsum + off * groups : nullptr);
}

#define TF_MOE_MMA_ENTRY_SB(NAME, RT, STAGED, F, SB)                                           \
    extern "C" __global__ void __launch_bounds__(32 * MMA_MOE_KW)                              \
        NAME(const u8* W, const float* xg, float* yg, const int* offsets, int rows, int cols,    \
             int n_experts) {                                                                  \
        tf_moe_mma<RT, STAGED, F, SB>(W, xg, yg, offsets, rows, cols, n_experts);              \
    }
#define TF_MOE_MMA_ENTRY(NAME, RT, STAGED, F)                                                  \
    TF_MOE_MMA_ENTRY_SB(NAME, RT, STAGED, F, float2)                                           \
    TF_MOE_MMA_ENTRY_SB(NAME##_b16, RT, STAGED, F, u32)
TF_MOE_MMA_ENTRY(tf_moe_mma_mlx4, 2, 0, 2)
TF_MOE_MMA_ENTRY(tf_moe_mma_mlx4_staged, 2, 1, 1)

// The same products of the gathered rows split once (parts xp, sums xsum: tf_moe_gather_split,
// tf_moe_relu2_split), two tiles a block and (_r1) one; a group's rows 8 at a time, or (_x4,
// for rounds of at most four tokens) 4.
#define TF_MOE_MMA_SPLIT_ENTRY_ST(NAME, RT, F, SB, ST)                                         \
    extern "C" __global__ void __launch_bounds__(32 * MMA_MOE_KW)                              \
        NAME(const u8* W, const uint4* xp, const float* xsum, float* yg, const int* offsets,    \
             int rows, int cols, int n_experts) {                                              \
        tf_moe_mma<RT, ST, F, SB>(W, nullptr, yg, offsets, rows, cols, n_experts, xp, xsum);   \
    }
#define TF_MOE_MMA_SPLIT_ENTRY(NAME, RT, F)                                                    \
    TF_MOE_MMA_SPLIT_ENTRY_ST(NAME, RT, F, float2, 2)                                          \
    TF_MOE_MMA_SPLIT_ENTRY_ST(NAME##_b16, RT, F, u32, 2)
TF_MOE_MMA_SPLIT_ENTRY(tf_moe_mma_mlx4_split, 2, 2)
TF_MOE_MMA_SPLIT_ENTRY(tf_moe_mma_mlx4_split_r1, 1, 2)
TF_MOE_MMA_SPLIT_ENTRY(tf_moe_mma_mlx4_split_x4, 2, 1)
TF_MOE_MMA_SPLIT_ENTRY(tf_moe_mma_mlx4_split_r1_x4, 1, 1)

// The same of a split whose sums were not made (the _one_relu2 entries' outputs): X summed in
// place from the parts (mma.cu's STAGED 3), the same bits; xsum unused.
#define TF_MOE_MMA_XIN_ENTRY(NAME, RT, F)                                                      \
    TF_MOE_MMA_SPLIT_ENTRY_ST(NAME, RT, F, float2, 3)                                          \
    TF_MOE_MMA_SPLIT_ENTRY_ST(NAME##_b16, RT, F, u32, 3)
TF_MOE_MMA_XIN_ENTRY(tf_moe_mma_mlx4_split_x4_xin, 2, 1)
TF_MOE_MMA_XIN_ENTRY(tf_moe_mma_mlx4_split_r1_x4_xin, 1, 1)

// tf_moe_mma_mlx4_split[_r1]_x4 of a one-token round whose row is split once at xp, xsum (the
// norm's split, or the latent's): block row y takes pick y (its expert picks[y], its one row at
// where_[y]) and reads that row, not a gathered copy; the same outputs where they were. The
// routing just before wrote the picks, so they are read after the wait.
#define TF_MOE_MMA_ONE_ENTRY_SB(NAME, RT, SB)                                                  \
    extern "C" __global__ void __launch_bounds__(32 * MMA_MOE_KW)                              \
        NAME(const u8* W, const uint4* xp, const float* xsum, float* yg, const int* picks,      \
             const int* where_, int rows, int cols, int n_experts) {                           \
        tf_follow();                                                                           \
        const int e = picks[blockIdx.y], p = where_[blockIdx.y];                               \
        if (e < 0) return; /* the whole block */                                               \
        tf_moe_mma_group<RT, 2, 1, SB>(W, e, 1, rows, cols, n_experts, nullptr,                \
                                       yg + (size_t)p * rows, xp, xsum);                       \
    }
#define TF_MOE_MMA_ONE_ENTRY(NAME, RT)                                                         \
    TF_MOE_MMA_ONE_ENTRY_SB(NAME, RT, float2)                                                  \
    TF_MOE_MMA_ONE_ENTRY_SB(NAME##_b16, RT, u32)
TF_MOE_MMA_ONE_ENTRY(tf_moe_mma_mlx4_split_r1_x4_one, 1)
TF_MOE_MMA_ONE_ENTRY(tf_moe_mma_mlx4_split_x4_one, 2)

// The same, each output also relu²'d and split as it is stored (act, aparts: the picks' rows
// where yg's are, `rows` a multiple of 64): tf_moe_relu2_split's act and parts, without its
// sums, so the down product reads them through the _xin entries.
#define TF_MOE_MMA_ONE_RELU2_ENTRY_SB(NAME, RT, SB)                                            \
    extern "C" __global__ void __launch_bounds__(32 * MMA_MOE_KW)                              \
        NAME(const u8* W, const uint4* xp, const float* xsum, float* yg, const int* picks,      \
             const int* where_, int rows, int cols, int n_experts, float* act, uint4* aparts) { \
        tf_follow();                                                                           \
        const int e = picks[blockIdx.y], p = where_[blockIdx.y];                               \
        if (e < 0) return; /* the whole block */                                               \
        tf_moe_mma_group<RT, 2, 1, SB, 1>(W, e, 1, rows, cols, n_experts, nullptr,             \
                                          yg + (size_t)p * rows, xp, xsum,                     \
                                          act + (size_t)p * rows,                              \
                                          aparts + (size_t)p * (rows >> 6) * 16);              \
    }
#define TF_MOE_MMA_ONE_RELU2_ENTRY(NAME, RT)                                                   \
    TF_MOE_MMA_ONE_RELU2_ENTRY_SB(NAME, RT, float2)                                            \
    TF_MOE_MMA_ONE_RELU2_ENTRY_SB(NAME##_b16, RT, u32)
TF_MOE_MMA_ONE_RELU2_ENTRY(tf_moe_mma_mlx4_split_r1_x4_one_relu2, 1)
TF_MOE_MMA_ONE_RELU2_ENTRY(tf_moe_mma_mlx4_split_x4_one_relu2, 2)

// The split kernels below: block (row, gb) takes groups 4 gb .. 4 gb + 3 of its row, a warp
// each (blockDim 128); the group of this warp, or -1.
__device__ __forceinline__ int tf_moe_split_group(int width) {
    const int G = 4 * blockIdx.y + (threadIdx.x >> 5);
    return G < (width >> 6) ? G : -1;
}

// tf_moe_gather, each gathered row also split (from its source row, the same values).
extern "C" __global__ void tf_moe_gather_split(const float* x, const int* order,
                                               const int* offsets, float* xg, uint4* parts,
                                               float* sums, int top_k, int width,
                                               int n_experts) {
    tf_follow();
    tf_lead();
    const int p = blockIdx.x, G = tf_moe_split_group(width), groups = width >> 6;
    if (p >= offsets[n_experts] || G < 0) return;  // the whole warp
    const float* src = x + (size_t)(order[p] / top_k) * width + 64 * G;
    float* dst = xg + (size_t)p * width + 64 * G;
    const int c = 2 * (threadIdx.x & 31);
    *(float2*)(dst + c) = *(const float2*)(src + c);
    tf_mma_split_group<0>(src, width, 1, G, groups, parts + (size_t)p * groups * 16,
                          sums + (size_t)p * groups);
}

// tf_moe_relu2 of row blockIdx.x (of `width`), also split: each warp's group computed into a
// copy in shared memory, then split from it.
extern "C" __global__ void tf_moe_relu2_split(const float* x, float* out, uint4* parts,
                                              float* sums, int width) {
    tf_follow();
    tf_lead();
    __shared__ float copy[4][64];
    const int G = tf_moe_split_group(width), groups = width >> 6;
    if (G < 0) return;  // the whole warp
    const size_t base = (size_t)blockIdx.x * width + 64 * G;
    float* own = copy[threadIdx.x >> 5];
    for (int c = threadIdx.x & 31; c < 64; c += 32) {
        const float v = x[base + c];
        const float r = v > 0.0f ? v : 0.0f;
        own[c] = r * r;
        out[base + c] = r * r;
    }
    __syncwarp();
    tf_mma_split_group<0>(own, width, 1, G, groups, parts + (size_t)blockIdx.x * groups * 16,
                          sums + (size_t)blockIdx.x * groups);
}
