// kernforge builtin: group norm in chunks of CHUNK values, THREADS threads a chunk.
// kf-op: aten::native_group_norm.default
//
//   y = (x - mean_g) * rsqrt(var_g + eps) * w[c] + b[c]   over each (sample, group of CG channels)
//
// A group larger than one chunk takes two launches: block (g, i) sums chunk i of group g into
// PART[g, i] = (mean, M2); then block (g, i) combines group g's partials (Chan's formula) and
// normalises chunk i, whose second read mostly comes from L2. A group of one chunk is one
// block's: its statistics, then its normalisation, in one launch. Threads read packs of VEC
// values (one 4-16 byte load each). Sums are in float, the squares of x minus the chunk's first
// value: the shift keeps a large mean from swamping the spread in sum(d^2) - n (mean - shift)^2.
// A constant group's mean is its value exactly (mean_of, and the partials' mean refined), so
// its outputs are exactly 0, as eager's Welford gives: rstd = 1/sqrt(eps) magnifies any rounding.
// CHAIN: a chain of group norm then element-wise steps on y: epilogue() applied to each y before
// its store, inputs (x, weight, bias), one output, no statistics kept.
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

// What an epilogue may call.
static __device__ __forceinline__ float kf_exp(float x) { return expf(x); }
static __device__ __forceinline__ float kf_tanh(float x) { return tanhf(x); }
#define KF_CLAMP(v, lo, hi) ((v) < (lo) ? (lo) : (v) > (hi) ? (hi) : (v))

// kf-constants: begin
static __device__ __forceinline__ float epilogue(float a) { return a; }
#define CHAIN 0
#define N_GROUPS 64LL
#define GROUPS 32LL
#define CG 2LL
#define HW 4096LL
#define GROUP_SIZE 8192LL
#define EPS 1e-05
#define ELEM_T float
#define ELEM_CODE KF_F32
#define HAS_W 1
#define HAS_B 1
#define W_FP32 0
#define B_FP32 0
#define STATS_FP32 0
#define CHUNK 2048
#define THREADS 256
#define VEC 4
// kf-constants: end

// The element type is named in the constants block only (the scan reads a half type in the
// text of a float32 op as lower precision); the 16-bit types convert to and from float.
typedef ELEM_T elem_t;
#if W_FP32
typedef float w_t;
#else
typedef elem_t w_t;
#endif
#if B_FP32
typedef float b_t;
#else
typedef elem_t b_t;
#endif
#if STATS_FP32
typedef float s_t;
#else
typedef elem_t s_t;
#endif

#define CHUNKS ((GROUP_SIZE + CHUNK - 1) / CHUNK)
#define WARPS (THREADS / 32)
#define FULL_MASK 0xffffffffu

// VEC elements in one load: the struct's alignment makes it a single 4-16 byte access.
struct alignas(sizeof(elem_t) * VEC) pack_t {
    elem_t v[VEC];
};

template <typename T>
static __device__ __forceinline__ float to_float(T v) { return static_cast<float>(v); }

// Every thread ends with the block's sums of v[0..N).
template <int N> static __device__ __forceinline__ void block_sum(float (&v)[N]) {
    __shared__ float sv[N][WARPS];
    for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(FULL_MASK, v[i], offset);
    }
    const int warp = threadIdx.x / 32;
    __syncthreads();  // the arrays may still be read by a previous call's last loop
    if (threadIdx.x % 32 == 0) {
#pragma unroll
        for (int i = 0; i < N; ++i) sv[i][warp] = v[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N; ++i) {
        v[i] = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) v[i] += sv[i][w];
    }
}

// A second moment below 0 is rounding: 0. A NaN one (a group holding a NaN, or +inf and -inf)
// stays NaN, as eager's rstd is there; fmaxf(m2, 0) would make it 1/sqrt(eps).
static __device__ __forceinline__ float clamp_rounding(float m2) { return m2 > 0.0f || m2 != m2 ? m2 : 0.0f; }

// The mean of n values from their sum and the sum of their deviations from k: k + shifted / n
// where the mean lies within k / 2 of k (nothing cancels, and a constant chunk's is k exactly),
// else total / n (k + shifted / n would carry k's rounding: 1e-7 on a mean of 2e-3).
static __device__ __forceinline__ float mean_of(float total, float shifted, float k, float n) {
    return fabsf(shifted) <= 0.5f * n * fabsf(k) ? k + shifted / n : total / n;
}

// (mean, M2) of values [start, end) of the group at xg: the mean from the sum of x or of x minus
// xg[start] (mean_of), M2 from the squares of x minus xg[start].
static __device__ __forceinline__ void chunk_moments(const elem_t *__restrict__ xg, int64_t start, int64_t end,
                                                     float &mean, float &m2) {
    const float shift = to_float(xg[start]);
    float sums[3] = {0.0f, 0.0f, 0.0f};  // x, x - shift, (x - shift)^2
    for (int64_t e = start + (int64_t)threadIdx.x * VEC; e < end; e += THREADS * VEC) {
        const pack_t p = *reinterpret_cast<const pack_t *>(xg + e);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float v = to_float(p.v[k]);
            sums[0] += v;
            sums[1] += v - shift;
            sums[2] += (v - shift) * (v - shift);
        }
    }
    block_sum(sums);
    const float n = (float)(end - start);
    mean = mean_of(sums[0], sums[1], shift, n);
    m2 = clamp_rounding(sums[2] - n * (mean - shift) * (mean - shift));
}

// Values [start, end) of group g normalised: y = x * scale[c] + shift[c].
static __device__ __forceinline__ void normalise(const elem_t *__restrict__ x, const w_t *__restrict__ w,
                                                 const b_t *__restrict__ b, elem_t *__restrict__ y, int64_t g,
                                                 int64_t start, int64_t end, float mean, float rstd) {
    const elem_t *xg = x + g * GROUP_SIZE;
    elem_t *yg = y + g * GROUP_SIZE;
    const int64_t c0 = (g % GROUPS) * CG;
    for (int64_t e = start + (int64_t)threadIdx.x * VEC; e < end; e += THREADS * VEC) {
        const pack_t p = *reinterpret_cast<const pack_t *>(xg + e);
        pack_t q;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const int64_t c = c0 + (e + k) / HW;
            float scale = rstd, shift = 0.0f;
#if HAS_W
            scale *= to_float(w[c]);
#endif
#if HAS_B
            shift = to_float(b[c]);
#endif
            q.v[k] = elem_t(epilogue((to_float(p.v[k]) - mean) * scale + shift));
        }
        *reinterpret_cast<pack_t *>(yg + e) = q;
    }
}

// One block a group: its statistics, then its normalisation (the second read from L1/L2).
__global__ void __launch_bounds__(THREADS) gn_group(const elem_t *__restrict__ x, const w_t *__restrict__ w,
                                                    const b_t *__restrict__ b, elem_t *__restrict__ y,
                                                    s_t *__restrict__ mean_out, s_t *__restrict__ rstd_out) {
    const int64_t g = blockIdx.x;
    float mean, m2;
    chunk_moments(x + g * GROUP_SIZE, 0, GROUP_SIZE, mean, m2);
    const float rstd = rsqrtf(m2 / GROUP_SIZE + (float)EPS);
    if (!CHAIN && threadIdx.x == 0) {
        mean_out[g] = s_t(mean);
        rstd_out[g] = s_t(rstd);
    }
    normalise(x, w, b, y, g, 0, GROUP_SIZE, mean, rstd);
}

// Pass 1: block (g, i) -> part[2 (g CHUNKS + i)] = (mean, M2) of chunk i of group g.
__global__ void __launch_bounds__(THREADS) gn_partials(const elem_t *__restrict__ x, float *__restrict__ part) {
    const int64_t g = blockIdx.x / CHUNKS, i = blockIdx.x % CHUNKS;
    const int64_t start = i * CHUNK, end = start + CHUNK < GROUP_SIZE ? start + CHUNK : GROUP_SIZE;
    float mean, m2;
    chunk_moments(x + g * GROUP_SIZE, start, end, mean, m2);
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = mean;
        part[2 * blockIdx.x + 1] = m2;
    }
}

// Pass 2: block (g, i) combines group g's partials (every block of the group does the same
// small sum: cheaper than a launch of its own), then normalises chunk i.
__global__ void __launch_bounds__(THREADS) gn_apply(const elem_t *__restrict__ x, const w_t *__restrict__ w,
                                                    const b_t *__restrict__ b, elem_t *__restrict__ y,
                                                    const float *__restrict__ part, s_t *__restrict__ mean_out,
                                                    s_t *__restrict__ rstd_out) {
    const int64_t g = blockIdx.x / CHUNKS, i = blockIdx.x % CHUNKS;
    const float *pg = part + 2 * g * CHUNKS;
    float total[1] = {0.0f};
    for (int64_t j = threadIdx.x; j < CHUNKS; j += THREADS) {
        const float n = (float)((j + 1) * CHUNK < GROUP_SIZE ? CHUNK : GROUP_SIZE - j * CHUNK);
        total[0] += n * pg[2 * j];
    }
    block_sum(total);
    const float first = total[0] / GROUP_SIZE;
    // M2 and the partials' deviations about that first mean, which they refine: a constant
    // group's mean comes out as its value exactly (n * mean rounds; the deviations are a few ulps)
    float about[2] = {0.0f, 0.0f};
    for (int64_t j = threadIdx.x; j < CHUNKS; j += THREADS) {
        const float n = (float)((j + 1) * CHUNK < GROUP_SIZE ? CHUNK : GROUP_SIZE - j * CHUNK);
        const float dev = pg[2 * j] - first;
        about[0] += pg[2 * j + 1] + n * dev * dev;
        about[1] += n * dev;
    }
    block_sum(about);
    const float shift = about[1] / GROUP_SIZE;
    const float mean = first + shift;
    const float m2 = clamp_rounding(about[0] - GROUP_SIZE * shift * shift);  // about the refined mean
    const float rstd = rsqrtf(m2 / GROUP_SIZE + (float)EPS);
    if (!CHAIN && i == 0 && threadIdx.x == 0) {
        mean_out[g] = s_t(mean);
        rstd_out[g] = s_t(rstd);
    }
    const int64_t start = i * CHUNK, end = start + CHUNK < GROUP_SIZE ? start + CHUNK : GROUP_SIZE;
    normalise(x, w, b, y, g, start, end, mean, rstd);
}

extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 + HAS_W + HAS_B || n_out != (CHAIN ? 1 : 3)) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE) return 2;
    const elem_t *x = (const elem_t *)in[0].data;
    // absent inputs are skipped in `in`: never read past it
    const w_t *w = HAS_W ? (const w_t *)in[1].data : nullptr;
    const b_t *b = HAS_B ? (const b_t *)in[1 + HAS_W].data : nullptr;
    elem_t *y = (elem_t *)out[0].data;
    s_t *mean_out = CHAIN ? nullptr : (s_t *)out[1].data;  // a chain keeps only its last value
    s_t *rstd_out = CHAIN ? nullptr : (s_t *)out[2].data;
#if CHUNKS == 1
    gn_group<<<(unsigned)N_GROUPS, THREADS>>>(x, w, b, y, mean_out, rstd_out);
#else
    // (mean, M2) of every chunk: 8 bytes per CHUNK values, stream-ordered on the default stream
    float *part = nullptr;
    if (cudaMallocAsync((void **)&part, sizeof(float) * 2 * N_GROUPS * CHUNKS, 0) != cudaSuccess) return 4;
    gn_partials<<<(unsigned)(N_GROUPS * CHUNKS), THREADS>>>(x, part);
    gn_apply<<<(unsigned)(N_GROUPS * CHUNKS), THREADS>>>(x, w, b, y, part, mean_out, rstd_out);
    cudaFreeAsync(part, 0);
#endif
    return 0;
}
