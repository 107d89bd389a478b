// Mamba2 recurrent step (tf_kernels::ops::mamba) and the Nemotron-H row helpers.
//
// A round holds rows of any number of stream slots; a slot's rows come in ascending position.
// The recurrent kernels give each thread (conv) or half-warp (SSM) one channel and walk the
// round's rows in order, so a slot's state advances token by token exactly as the CPU's
// mamba_step does, whatever the rows were grouped into. A row at position 0 starts its slot from
// the zero state (the stored state is not read), which is how a slot is reset.
//
// State pools: conv [slot][slot_stride] with layer l's (kernel - 1) x conv_dim floats at
// layer_off (oldest column first); SSM [slot][slot_stride] with [heads][head_dim][state] at
// layer_off.

// Largest conv kernel and SSM state the kernels hold in registers (checked by the host).
#define MAMBA_MAX_KERNEL 8
#define MAMBA_MAX_STATE 256
#define MAMBA_LANE_STATE (MAMBA_MAX_STATE / 16)
#define MAMBA_SSM_THREADS 128  // the scan's block (src/mamba.rs SSM_THREADS)

// Causal depthwise conv1d of every row of a round, one thread per channel c:
// acc = 0; acc = fmaf(w[c][t], window[t], acc) for t ascending (window = state columns, then x);
// acc + bias; silu. The state drops its oldest column and appends x.
// x of row i is proj[i * proj_stride + x_off + c]; the result goes to out[i * cd + c].
// The window of the slot of the current run of rows stays in registers (loaded when the slot
// changes, stored when it changes again and at the end): the same values as reading and writing
// the pool at every row.
// PLANT = 1 is a planted control: the taps are applied newest first (reversed kernel).
template <int PLANT>
__device__ __forceinline__ void tf_mamba_conv(const float* __restrict__ proj, int proj_stride,
                                              int x_off, const float* __restrict__ w,
                                              const float* __restrict__ bias, int has_bias,
                                              float* __restrict__ pool, const int* slots,
                                              const int* pos, int n_slots, int slot_stride,
                                              int layer_off, int n, int cd, int kernel,
                                              float* __restrict__ out) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cd) return;
    const float* wc = w + (size_t)c * kernel;
    const int taps = kernel - 1;  // state columns
    // The channel's weights (the window's taps, then x's) and bias, read once: they do not
    // depend on the rows, so their loads fly with the first row's.
    float wv[MAMBA_MAX_KERNEL - 1], win[MAMBA_MAX_KERNEL - 1];
#pragma unroll
    for (int t = 0; t < MAMBA_MAX_KERNEL - 1; t++) {
        wv[t] = t < taps ? wc[PLANT == 1 ? taps - t : t] : 0.0f;
        win[t] = 0.0f;
    }
    const float wx = wc[PLANT == 1 ? 0 : taps];
    const float bc = has_bias ? bias[c] : 0.0f;
    int held = -1;
    for (int i = 0; i < n; i++) {
        const int s = slots[i];
        if (s < 0 || s >= n_slots) continue;  // never: the host checks slots
        const bool fresh = pos[i] == 0;
        const float x = proj[(size_t)i * proj_stride + x_off + c];
        if (s != held) {
            if (held >= 0) {
                float* st = pool + (size_t)held * slot_stride + layer_off + c;
#pragma unroll
                for (int t = 0; t < MAMBA_MAX_KERNEL - 1; t++)
                    if (t < taps) st[(size_t)t * cd] = win[t];
            }
            // Read even for a fresh row (then dropped), so the loads wait on the slot alone.
            const float* st = pool + (size_t)s * slot_stride + layer_off + c;
#pragma unroll
            for (int t = 0; t < MAMBA_MAX_KERNEL - 1; t++)
                if (t < taps) {
                    const float v = st[(size_t)t * cd];
                    win[t] = fresh ? 0.0f : v;
                }
            held = s;
        } else if (fresh) {
#pragma unroll
            for (int t = 0; t < MAMBA_MAX_KERNEL - 1; t++) win[t] = 0.0f;
        }
        float acc = 0.0f;
#pragma unroll
        for (int t = 0; t < MAMBA_MAX_KERNEL - 1; t++)
            if (t < taps) acc = fmaf(wv[t], win[t], acc);
        acc = fmaf(wx, x, acc);
        if (has_bias) acc = acc + bc;
        out[(size_t)i * cd + c] = tf_silu(acc);
#pragma unroll
        for (int t = 0; t < MAMBA_MAX_KERNEL - 1; t++) {
            if (t + 1 < taps) win[t] = win[t + 1];
            else if (t + 1 == taps) win[t] = x;
        }
    }
    if (held >= 0) {
        float* st = pool + (size_t)held * slot_stride + layer_off + c;
#pragma unroll
        for (int t = 0; t < MAMBA_MAX_KERNEL - 1; t++)
            if (t < taps) st[(size_t)t * cd] = win[t];
    }
}

#define TF_MAMBA_CONV_ENTRY(NAME, PLANT)                                                         \
    extern "C" __global__ void NAME(const float* proj, int proj_stride, int x_off, const float* w, \
                                    const float* bias, int has_bias, float* pool,                \
                                    const int* slots, const int* pos, int n_slots,               \
                                    int slot_stride, int layer_off, int n, int cd, int kernel,   \
                                    float* out) { tf_follow();                                   \
        tf_mamba_conv<PLANT>(proj, proj_stride, x_off, w, bias, has_bias, pool, slots, pos,     \
                             n_slots, slot_stride, layer_off, n, cd, kernel, out);               \
    }

TF_MAMBA_CONV_ENTRY(tf_mamba_conv, 0)
TF_MAMBA_CONV_ENTRY(tf_plant_mamba_conv_reversed, 1)

// softplus(v) = max(v, 0) + log1p(exp(-|v|)) in double, rounded once (tf_kernels::ops::softplus).
__device__ __forceinline__ float tf_softplus(float v) {
    const double d = (double)v;
    return (float)(fmax(d, 0.0) + log1p(exp(-fabs(d))));
}

// The SSM update of every row of a round. One half-warp per (head h, channel p); lane l owns
// the state elements k = l (mod 16), held in registers while consecutive rows share a slot.
// Per row, in order:
//   dt = min(max(softplus(dt_raw + dt_bias[h]), lo), hi); dA = exp(dt * a[h]); dtx = dt * x;
//   s[k] = dA * s[k] + dtx * B[g][k]  (three roundings, no fma);
//   y = fold16(fmaf(s[k], C[g][k], .)) + x * D[h].
// xbc row i is the conv output [x | B | C] at xbc[i * cd]; dt_raw at proj[i * proj_stride +
// dt_off + h]; y goes to y[i * heads * head_dim + h * head_dim + p]. Needs ns <= MAMBA_MAX_STATE.
// PLANT = 1: no dt clamp (a planted control). PLANT = 2: y read from the state before the
// update (a planted control).
template <int PLANT, int LANE>
__device__ __forceinline__ void tf_mamba_ssm(
    const float* __restrict__ xbc, int cd, const float* __restrict__ proj, int proj_stride,
    int dt_off, const float* __restrict__ a, const float* __restrict__ dskip,
    const float* __restrict__ dt_bias, float dt_lo, float dt_hi, float* __restrict__ pool,
    const int* slots, const int* pos, int n_slots, int slot_stride, int layer_off, int n,
    int heads, int head_dim, int groups, int ns, float* __restrict__ y) {
    const int lane = threadIdx.x & 15;
    const int hp = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 4);
    const int inner = heads * head_dim;
    const bool active = hp < inner;
    const int h = active ? hp / head_dim : 0;
    const int g = h / (heads / groups);
    // The head's parameters, read once: they do not depend on the rows.
    const float ah = a[h], dh = dskip[h], bh = dt_bias[h];
    float reg[LANE];
#pragma unroll
    for (int j = 0; j < LANE; j++) reg[j] = 0.0f;
    int held = -1;
    for (int i = 0; i < n; i++) {
        float acc = 0.0f;
        float xi = 0.0f;
        const int s = slots[i];
        const bool ok = active && s >= 0 && s < n_slots;  // the host checks slots
        if (ok) {
            const bool fresh = pos[i] == 0;
            if (s != held) {
                if (held >= 0) {
                    float* st = pool + (size_t)held * slot_stride + layer_off + (size_t)hp * ns;
#pragma unroll
                    for (int j = 0; j < LANE; j++)
                        if (lane + 16 * j < ns) st[lane + 16 * j] = reg[j];
                }
                // Read even for a fresh row (then dropped): the loads wait on the slot alone.
                const float* st = pool + (size_t)s * slot_stride + layer_off + (size_t)hp * ns;
#pragma unroll
                for (int j = 0; j < LANE; j++)
                    if (lane + 16 * j < ns) {
                        const float v = st[lane + 16 * j];
                        reg[j] = fresh ? 0.0f : v;
                    }
                held = s;
            } else if (fresh) {
#pragma unroll
                for (int j = 0; j < LANE; j++) reg[j] = 0.0f;
            }
            const float* row = xbc + (size_t)i * cd;
            xi = row[hp];
            const float* bg = row + inner + (size_t)g * ns;
            const float* cg = row + inner + (size_t)(groups + g) * ns;
            // B and C asked for before the softplus, so their loads fly while it runs.
            float bv[LANE], cv[LANE];
#pragma unroll
            for (int j = 0; j < LANE; j++) {
                const int k = lane + 16 * j;
                bv[j] = k < ns ? bg[k] : 0.0f;
                cv[j] = k < ns ? cg[k] : 0.0f;
            }
            float dt = tf_softplus(proj[(size_t)i * proj_stride + dt_off + h] + bh);
            if (PLANT != 1) dt = fminf(fmaxf(dt, dt_lo), dt_hi);
            const float da = tf_exp(dt * ah);
            const float dtx = dt * xi;
#pragma unroll
            for (int j = 0; j < LANE; j++) {
                const int k = lane + 16 * j;
                if (k < ns) {
                    const float old = reg[j];
                    const float sn = da * old + dtx * bv[j];
                    reg[j] = sn;
                    acc = fmaf(PLANT == 2 ? old : sn, cv[j], acc);
                }
            }
        }
        const float sum = tf_fold16_sum(acc);
        if (ok && lane == 0) y[(size_t)i * inner + hp] = sum + xi * dh;
    }
    tf_mark("~ssm:summed");
    if (held >= 0) {
        float* st = pool + (size_t)held * slot_stride + layer_off + (size_t)hp * ns;
#pragma unroll
        for (int j = 0; j < LANE; j++)
            if (lane + 16 * j < ns) st[lane + 16 * j] = reg[j];
    }
}

// The entries hold a lane's state in LANE registers: 8 for states of up to 128 (fewer
// registers, so B and C are read ahead), else 16; the same arithmetic either way.
#define TF_MAMBA_SSM_ARGS                                                                         \
    xbc, cd, proj, proj_stride, dt_off, a, dskip, dt_bias, dt_lo, dt_hi, pool, slots, pos,       \
        n_slots, slot_stride, layer_off, n, heads, head_dim, groups, ns, y
#define TF_MAMBA_SSM_ENTRY(NAME, PLANT, BOUNDS)                                                  \
    extern "C" __global__ void BOUNDS NAME(const float* xbc, int cd, const float* proj,          \
                                    int proj_stride, int dt_off, const float* a,                 \
                                    const float* dskip,                                          \
                                    const float* dt_bias, float dt_lo, float dt_hi, float* pool, \
                                    const int* slots, const int* pos, int n_slots,               \
                                    int slot_stride, int layer_off, int n, int heads,            \
                                    int head_dim, int groups, int ns, float* y) { tf_follow();   \
        if (ns <= 128) tf_mamba_ssm<PLANT, 8>(TF_MAMBA_SSM_ARGS);                                \
        else tf_mamba_ssm<PLANT, MAMBA_LANE_STATE>(TF_MAMBA_SSM_ARGS);                           \
    }

TF_MAMBA_SSM_ENTRY(tf_mamba_ssm, 0, )
TF_MAMBA_SSM_ENTRY(tf_plant_mamba_ssm_unclamped, 1, )
TF_MAMBA_SSM_ENTRY(tf_plant_mamba_ssm_stale, 2, )
// The same, held to 64 registers so that 8 blocks of 128 fit an SM: Bolt's 1,024 blocks (128
// heads of 64 channels) then take one wave of 132 SMs instead of 1.1 (at 72 registers, 7 an SM).
TF_MAMBA_SSM_ENTRY(tf_mamba_ssm_wave, 0, __launch_bounds__(MAMBA_SSM_THREADS, 8))

// Grouped gated RMSNorm (tf_kernels::ops::rms_norm_gated), one block per (row, group):
// h = silu(z) * y (rounded), r = 1 / sqrt(dot16(h, h) / gs + eps) per group, out = g * (h * r).
// z of row i is at z[i * z_stride]; y and out are [n, width]. PLANT = 1 is a planted control:
// the sum of squares leaves out each group's last element.
template <int PLANT>
__device__ __forceinline__ void tf_mamba_gated_norm(const float* y, const float* z, int z_stride,
                                                    const float* gain, float eps, int width,
                                                    int groups, float* out) {
    const int i = blockIdx.x, grp = blockIdx.y;
    const int gs = width / groups;
    const size_t base = (size_t)i * width + (size_t)grp * gs;
    const float* zr = z + (size_t)i * z_stride + (size_t)grp * gs;
    const float* gr = gain + (size_t)grp * gs;
    if (gs <= TF_HOLD * (int)blockDim.x) {
        // h and the gains held, their loads all issued at once; the same bits.
        float h[TF_HOLD], gv[TF_HOLD];
#pragma unroll
        for (int j = 0; j < TF_HOLD; j++) {
            const int k = threadIdx.x + j * blockDim.x;
            h[j] = k < gs ? tf_silu(zr[k]) * y[base + k] : 0.0f;
            gv[j] = k < gs ? gr[k] : 0.0f;
        }
        const float r = tf_inv_rms(tf_held_sumsq16(h, PLANT ? gs - 1 : gs), gs, eps);
#pragma unroll
        for (int j = 0; j < TF_HOLD; j++) {
            const int k = threadIdx.x + j * blockDim.x;
            if (k < gs) out[base + k] = gv[j] * (h[j] * r);
        }
        return;
    }
    // h is written to out, then read back (by the threads that wrote it) for the sum of squares.
    const float ss = tf_block_sumsq16(
        [&](int k) {
            const float h = tf_silu(zr[k]) * y[base + k];
            out[base + k] = h;
            return PLANT && k == gs - 1 ? 0.0f : h;
        },
        gs);
    const float r = tf_inv_rms(ss, gs, eps);
    for (int k = threadIdx.x; k < gs; k += blockDim.x)
        out[base + k] = gr[k] * (out[base + k] * r);
}

#define TF_MAMBA_GATED_NORM_ENTRY(NAME, PLANT)                                                   \
    extern "C" __global__ void NAME(const float* y, const float* z, int z_stride,                \
                                    const float* gain, float eps, int width, int groups,         \
                                    float* out) {                                                \
        tf_follow();                                                                             \
        tf_lead();                                                                               \
        tf_mamba_gated_norm<PLANT>(y, z, z_stride, gain, eps, width, groups, out);               \
    }

TF_MAMBA_GATED_NORM_ENTRY(tf_mamba_gated_norm, 0)
TF_MAMBA_GATED_NORM_ENTRY(tf_plant_mamba_gated_norm_short, 1)

// relu^2: out = r * r with r = x if x > 0 else 0 (tf_kernels::ops::relu2), element-wise.
extern "C" __global__ void tf_nh_relu2(const float* x, float* out, int len) {
    tf_follow();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < len) {
        const float v = x[t];
        const float r = v > 0.0f ? v : 0.0f;
        out[t] = r * r;
    }
}

// Bias add over rows: y[i, j] = y[i, j] + bias[j] for len = n * width elements.
extern "C" __global__ void tf_nh_add_bias(float* y, const float* bias, int width, int len) {
    tf_follow();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < len) y[t] = y[t] + bias[t % width];
}
