// kernforge builtin: layer norm (or RMS norm) over the trailing dims, THREADS_PER_ROW threads per row.
// kf-op: aten::native_layer_norm.default
//
// y = (x - mean) * rstd * w + b, with mean and rstd written per row (RMS: mean is 0, only
// rstd is written, no bias). A block holds ROWS_PER_BLOCK rows; each row's threads read it
// in packs of VEC elements (one 4-16 byte load each). Each thread takes its own elements into
// (count, mean, M2) by Welford's update; the row's threads merge theirs with Chan's formula
// (warp shuffles, then shared memory when a row spans several warps), as ATen's CPU layer
// norm does: a constant row's means are all its value exactly, so its outputs are exactly 0
// (a sum / n is off by the sum's rounding, which rstd = 1/sqrt(eps) magnified to 0.0003).
// CACHE_ROW keeps the row's packs in registers, so x is read once (the memory floor);
// without it each pack's statistics are merged as it is read, and the row is read again to
// write y. Weight, bias and statistics are the input's dtype or float32 (W_F32, B_F32,
// STATS_F32; CUDA's own kernels keep float32 statistics).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#define KF_MAX_DIMS 8
enum { KF_F32 = 0, KF_F64 = 1, KF_F16 = 2, KF_BF16 = 3, KF_I32 = 4, KF_I64 = 5, KF_U8 = 6, KF_I8 = 7 };
typedef struct {
    void *data;
    int64_t ndim;
    int64_t sizes[KF_MAX_DIMS];
    int64_t strides[KF_MAX_DIMS]; /* in elements */
    int32_t dtype;
} kf_tensor;

// kf-constants: begin
#define ROWS 4096LL
#define COLS 1024LL
#define RMS 0
#define HAS_W 1
#define HAS_B 1
#define W_F32 0
#define B_F32 0
#define STATS_F32 1
#define EPS 1e-05f
#define ELEM_T float
#define ELEM_CODE KF_F32
#define THREADS_PER_ROW 32
#define ROWS_PER_BLOCK 4
#define VEC 4
#define CACHE_ROW 1
// kf-constants: end

// The element type is named in the constants block only (the scan reads a half type in the
// text of a float32 op as lower precision); __half and __nv_bfloat16 convert to and from float.
typedef ELEM_T elem_t;
#if W_F32
typedef float w_t;
#else
typedef elem_t w_t;
#endif
#if B_F32
typedef float b_t;
#else
typedef elem_t b_t;
#endif
#if STATS_F32
typedef float s_t;
#else
typedef elem_t s_t;
#endif
template <typename T> static __device__ __forceinline__ float to_float(T v) { return static_cast<float>(v); }
template <typename T> static __device__ __forceinline__ T from_float(float v) { return T(v); }

#define BLOCK_THREADS (THREADS_PER_ROW * ROWS_PER_BLOCK)
#define WARPS_PER_ROW (THREADS_PER_ROW / 32)
#define ITEMS ((COLS + THREADS_PER_ROW * VEC - 1) / (THREADS_PER_ROW * VEC))
#define FULL_MASK 0xffffffffu

// VEC elements in one load: the struct's alignment makes it a single access (kf_forward
// checks that the pointers allow it).
template <typename T> struct alignas(sizeof(T) * VEC) pack_t {
    T v[VEC];
};
template <typename T> static __device__ __forceinline__ pack_t<T> load_pack(const T *p, int64_t c) {
    return *reinterpret_cast<const pack_t<T> *>(p + c);
}

// Two (count, mean, M2) triples as one (Chan et al.); an empty side adds nothing. RMS
// triples have mean 0, so M2 is just the sum of squares.
static __device__ __forceinline__ void merge(float &n, float &mean, float &m2, float on, float omean, float om2) {
    const float total = n + on;
    if (total == 0.0f) return;
    const float delta = omean - mean;
    const float share = on / total;
    mean += delta * share;
    m2 += om2 + delta * delta * n * share;
    n = total;
}

// Welford's update by the value that is the `count`th of (mean, M2); RMS: the mean stays 0.
static __device__ __forceinline__ void welford(float v, int count, float &mean, float &m2) {
#if RMS
    m2 += v * v;
#else
    const float d = v - mean;
    mean += d * (1.0f / count);  // count is a constant of an unrolled loop: no division
    m2 += d * (v - mean);
#endif
}

#if !CACHE_ROW
// Merge one pack's (VEC, mean, M2), Welford over its values, into a thread's running triple.
static __device__ __forceinline__ void add_pack(const float *v, float &n, float &mean, float &m2) {
    float pack_mean = 0.0f, pack_m2 = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; ++k) welford(v[k], k + 1, pack_mean, pack_m2);
    merge(n, mean, m2, (float)VEC, pack_mean, pack_m2);
}
#endif

// Every thread of a row ends with the row's (count, mean, M2).
static __device__ __forceinline__ void row_reduce(float &n, float &mean, float &m2) {
    for (int offset = 16; offset > 0; offset >>= 1)
        merge(n, mean, m2, __shfl_xor_sync(FULL_MASK, n, offset), __shfl_xor_sync(FULL_MASK, mean, offset),
              __shfl_xor_sync(FULL_MASK, m2, offset));
#if WARPS_PER_ROW > 1
    __shared__ float warp_n[ROWS_PER_BLOCK][WARPS_PER_ROW];
    __shared__ float warp_mean[ROWS_PER_BLOCK][WARPS_PER_ROW];
    __shared__ float warp_m2[ROWS_PER_BLOCK][WARPS_PER_ROW];
    const int group = threadIdx.x / THREADS_PER_ROW;
    const int warp = (threadIdx.x % THREADS_PER_ROW) / 32;
    if (threadIdx.x % 32 == 0) {
        warp_n[group][warp] = n;
        warp_mean[group][warp] = mean;
        warp_m2[group][warp] = m2;
    }
    __syncthreads();
    n = warp_n[group][0];
    mean = warp_mean[group][0];
    m2 = warp_m2[group][0];
#pragma unroll
    for (int w = 1; w < WARPS_PER_ROW; ++w) merge(n, mean, m2, warp_n[group][w], warp_mean[group][w], warp_m2[group][w]);
#endif
}

// One pack of y from one pack of x.
static __device__ __forceinline__ pack_t<elem_t> normalise(const float *v, int64_t c, float mean, float rstd,
                                                          const w_t *__restrict__ w, const b_t *__restrict__ b) {
    float out[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = (v[k] - mean) * rstd;
#if HAS_W
    const pack_t<w_t> pw = load_pack(w, c);
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] *= to_float(pw.v[k]);
#endif
#if HAS_B
    const pack_t<b_t> pb = load_pack(b, c);
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] += to_float(pb.v[k]);
#endif
    pack_t<elem_t> p;
#pragma unroll
    for (int k = 0; k < VEC; ++k) p.v[k] = from_float<elem_t>(out[k]);
    return p;
}

__global__ void __launch_bounds__(BLOCK_THREADS) norm_rows(const elem_t *__restrict__ x, const w_t *__restrict__ w,
                                                           const b_t *__restrict__ b, elem_t *__restrict__ y,
                                                           s_t *__restrict__ mean_out, s_t *__restrict__ rstd_out) {
    const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / THREADS_PER_ROW;
    const int t = threadIdx.x % THREADS_PER_ROW;
    // Threads past the last row still take part in the reductions' barriers; they read
    // row 0 and write nothing.
    const bool live = row < ROWS;
    const elem_t *xr = x + (live ? row : 0) * COLS;
    elem_t *yr = y + row * COLS;
    float n = 0.0f, mean = 0.0f, m2 = 0.0f;
#if CACHE_ROW
    // Indexed only by unrolled constants, so v stays in registers.
    float v[ITEMS][VEC];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int64_t c = ((int64_t)i * THREADS_PER_ROW + t) * VEC;
        if (c < COLS) {
            const pack_t<elem_t> p = load_pack(xr, c);
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[i][k] = to_float(p.v[k]);
        }
    }
    // This thread's values by Welford's update: the packs it holds are its first ones (c grows
    // with i), so the value (i, k) is its (i * VEC + k + 1)th.
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        if (((int64_t)i * THREADS_PER_ROW + t) * VEC < COLS) {
            n += VEC;
#pragma unroll
            for (int k = 0; k < VEC; ++k) welford(v[i][k], i * VEC + k + 1, mean, m2);
        }
    }
#else
    for (int64_t c = (int64_t)t * VEC; c < COLS; c += THREADS_PER_ROW * VEC) {
        const pack_t<elem_t> p = load_pack(xr, c);
        float v[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = to_float(p.v[k]);
        add_pack(v, n, mean, m2);
    }
#endif
    row_reduce(n, mean, m2);
    if (!live) return;
    const float rstd = rsqrtf(m2 / COLS + EPS);
    if (t == 0) {
#if !RMS
        mean_out[row] = from_float<s_t>(mean);
#endif
        rstd_out[row] = from_float<s_t>(rstd);
    }
#if CACHE_ROW
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int64_t c = ((int64_t)i * THREADS_PER_ROW + t) * VEC;
        if (c < COLS) *reinterpret_cast<pack_t<elem_t> *>(yr + c) = normalise(v[i], c, mean, rstd, w, b);
    }
#else
    for (int64_t c = (int64_t)t * VEC; c < COLS; c += THREADS_PER_ROW * VEC) {
        const pack_t<elem_t> p = load_pack(xr, c);
        float v[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = to_float(p.v[k]);
        *reinterpret_cast<pack_t<elem_t> *>(yr + c) = normalise(v, c, mean, rstd, w, b);
    }
#endif
}

static bool packs_aligned(const void *p, size_t item) { return (uintptr_t)p % (item * VEC) == 0; }

extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    // Absent weight and bias are not in `in`: the bias follows the weight when there is one.
    if (n_in != 1 + HAS_W + HAS_B || n_out != (RMS ? 2 : 3)) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE) return 2;
    const elem_t *x = (const elem_t *)in[0].data;
    const w_t *w = HAS_W ? (const w_t *)in[1].data : nullptr;
    const b_t *b = HAS_B ? (const b_t *)in[1 + HAS_W].data : nullptr;
    elem_t *y = (elem_t *)out[0].data;
    s_t *mean = RMS ? nullptr : (s_t *)out[1].data;
    s_t *rstd = (s_t *)out[n_out - 1].data;
    // A view that starts mid-pack cannot take the packed loads.
    if (!packs_aligned(x, sizeof(elem_t)) || !packs_aligned(y, sizeof(elem_t))) return 3;
    if ((HAS_W && !packs_aligned(w, sizeof(w_t))) || (HAS_B && !packs_aligned(b, sizeof(b_t)))) return 3;
    const int64_t blocks = (ROWS + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    norm_rows<<<(unsigned)blocks, BLOCK_THREADS>>>(x, w, b, y, mean, rstd);
    return 0;
}
