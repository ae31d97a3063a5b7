// kernforge builtin: softmax over the last dim, THREADS_PER_ROW threads per row.
// kf-op: aten::_softmax.default
//
// A block holds ROWS_PER_BLOCK rows; each row's threads read it in packs of VEC elements
// (one 4-16 byte load each). CACHE_ROW keeps the row's packs in registers, so the row
// is read once (the memory floor); without it each thread keeps a running max and sum,
// and the row is read again to write the outputs. The row's threads combine their max and
// sum with warp shuffles, and through shared memory when a row spans several warps.
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
#define ELEM_T float
#define ELEM_CODE KF_F32
#define LOG 0
#define THREADS_PER_ROW 32
#define ROWS_PER_BLOCK 4
#define VEC 4
#define CACHE_ROW 1
// kf-constants: end

// The element type is named in the constants block only (the scan reads a half type in the
// text of a float32 op as lower precision); __half and __nv_bfloat16 convert to and from float.
typedef ELEM_T elem_t;
static __device__ __forceinline__ float to_float(elem_t v) { return static_cast<float>(v); }
static __device__ __forceinline__ elem_t from_float(float v) { return elem_t(v); }

#define BLOCK_THREADS (THREADS_PER_ROW * ROWS_PER_BLOCK)
#define WARPS_PER_ROW (THREADS_PER_ROW / 32)
#define ITEMS ((COLS + THREADS_PER_ROW * VEC - 1) / (THREADS_PER_ROW * VEC))
#define FULL_MASK 0xffffffffu
#define LOG2E 1.4426950408889634f

// VEC elements in one load: the struct's alignment makes it a single 4-16 byte access.
struct alignas(sizeof(elem_t) * VEC) pack_t {
    elem_t v[VEC];
};

// exp as Triton's tl.exp computes it: a scale by log2(e) and the hardware's exp2.
static __device__ __forceinline__ float fast_exp(float x) { return exp2f(x * LOG2E); }

// Two (max, sum of exp(x - max)) pairs as one; an empty side (max -inf) adds nothing.
static __device__ __forceinline__ void merge(float &m, float &s, float om, float os) {
    float nm = fmaxf(m, om);
    float a = m == -INFINITY ? 0.0f : s * fast_exp(m - nm);
    float b = om == -INFINITY ? 0.0f : os * fast_exp(om - nm);
    m = nm;
    s = a + b;
}

// Every thread of a row ends with the row's (max, sum).
static __device__ __forceinline__ void row_reduce(float &m, float &s) {
    for (int offset = 16; offset > 0; offset >>= 1)
        merge(m, s, __shfl_xor_sync(FULL_MASK, m, offset), __shfl_xor_sync(FULL_MASK, s, offset));
#if WARPS_PER_ROW > 1
    __shared__ float warp_m[ROWS_PER_BLOCK][WARPS_PER_ROW];
    __shared__ float warp_s[ROWS_PER_BLOCK][WARPS_PER_ROW];
    const int group = threadIdx.x / THREADS_PER_ROW;
    const int warp = (threadIdx.x % THREADS_PER_ROW) / 32;
    if (threadIdx.x % 32 == 0) {
        warp_m[group][warp] = m;
        warp_s[group][warp] = s;
    }
    __syncthreads();
    m = warp_m[group][0];
    s = warp_s[group][0];
#pragma unroll
    for (int w = 1; w < WARPS_PER_ROW; ++w) merge(m, s, warp_m[group][w], warp_s[group][w]);
#endif
}

// y from x and the row's max m; `scale` is computed once per row by row_constant: 1/sum for
// softmax (a multiply per element instead of a division), m + log(sum) for log-softmax.
static __device__ __forceinline__ float row_constant(float m, float s) {
#if LOG
    return m + logf(s);
#else
    return 1.0f / s;
#endif
}

static __device__ __forceinline__ float output(float x, float m, float scale) {
#if LOG
    return x - scale;
#else
    return fast_exp(x - m) * scale;
#endif
}

__global__ void __launch_bounds__(BLOCK_THREADS) softmax_rows(const elem_t *__restrict__ x,
                                                             elem_t *__restrict__ y) {
    const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / THREADS_PER_ROW;
    const int t = threadIdx.x % THREADS_PER_ROW;
    // Threads past the last row still take part in the reductions' barriers; they read
    // row 0 and write nothing.
    const bool live = row < ROWS;
    const elem_t *xr = x + (live ? row : 0) * COLS;
    elem_t *yr = y + row * COLS;
    float m = -INFINITY, s = 0.0f;
#if CACHE_ROW
    float v[ITEMS][VEC];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int64_t c = ((int64_t)i * THREADS_PER_ROW + t) * VEC;
        if (c < COLS) {
            const pack_t p = *reinterpret_cast<const pack_t *>(xr + c);
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[i][k] = to_float(p.v[k]);
        } else {
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[i][k] = -INFINITY;
        }
    }
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        float pm = -INFINITY;
#pragma unroll
        for (int k = 0; k < VEC; ++k) pm = fmaxf(pm, v[i][k]);
        float ps = 0.0f;
#pragma unroll
        for (int k = 0; k < VEC; ++k) ps += v[i][k] == -INFINITY ? 0.0f : fast_exp(v[i][k] - pm);
        merge(m, s, pm, ps);
    }
    row_reduce(m, s);
    if (!live) return;
    const float scale = row_constant(m, s);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int64_t c = ((int64_t)i * THREADS_PER_ROW + t) * VEC;
        if (c < COLS) {
            pack_t p;
#pragma unroll
            for (int k = 0; k < VEC; ++k) p.v[k] = from_float(output(v[i][k], m, scale));
            *reinterpret_cast<pack_t *>(yr + c) = p;
        }
    }
#else
    for (int64_t c = (int64_t)t * VEC; c < COLS; c += THREADS_PER_ROW * VEC) {
        const pack_t p = *reinterpret_cast<const pack_t *>(xr + c);
        float pm = -INFINITY;
#pragma unroll
        for (int k = 0; k < VEC; ++k) pm = fmaxf(pm, to_float(p.v[k]));
        float ps = 0.0f;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float e = to_float(p.v[k]);
            ps += e == -INFINITY ? 0.0f : fast_exp(e - pm);
        }
        merge(m, s, pm, ps);
    }
    row_reduce(m, s);
    if (!live) return;
    const float scale = row_constant(m, s);
    for (int64_t c = (int64_t)t * VEC; c < COLS; c += THREADS_PER_ROW * VEC) {
        const pack_t p = *reinterpret_cast<const pack_t *>(xr + c);
        pack_t q;
#pragma unroll
        for (int k = 0; k < VEC; ++k) q.v[k] = from_float(output(to_float(p.v[k]), m, scale));
        *reinterpret_cast<pack_t *>(yr + c) = q;
    }
#endif
}

extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE) return 2;
    if (in[0].strides[in[0].ndim - 1] != 1 || out[0].strides[out[0].ndim - 1] != 1) return 3;
    const int64_t blocks = (ROWS + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    softmax_rows<<<(unsigned)blocks, BLOCK_THREADS>>>((const elem_t *)in[0].data, (elem_t *)out[0].data);
    return 0;
}
