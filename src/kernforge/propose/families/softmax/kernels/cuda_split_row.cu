// kernforge builtin: softmax over the last dim, each row split across blocks.
// kf-op: aten::_softmax.default
//
// For few long rows, too few to fill the GPU one per block: block (chunk, row) finds its
// CHUNK elements' max and sum of exp(x - max) and writes them to a float32 scratch; a
// second kernel's block (chunk, row) combines its row's partials (a few KB, from L2) and
// writes its chunk, reading x again (from L2 when the rows fit it).
#include <cuda_runtime.h>
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
#define ROWS 8LL
#define COLS 262144LL
#define ELEM_T float
#define ELEM_CODE KF_F32
#define LOG 0
#define THREADS 256
#define VEC 4
#define CHUNK 4096
// kf-constants: end

typedef ELEM_T elem_t;
static __device__ __forceinline__ float to_float(elem_t v) { return static_cast<float>(v); }
static __device__ __forceinline__ elem_t from_float(float v) { return elem_t(v); }

#define CHUNKS ((COLS + CHUNK - 1) / CHUNK)
#define WARPS (THREADS / 32)
#define FULL_MASK 0xffffffffu
#define LOG2E 1.4426950408889634f

struct alignas(sizeof(elem_t) * VEC) pack_t {
    elem_t v[VEC];
};

static __device__ __forceinline__ float fast_exp(float x) { return exp2f(x * LOG2E); }

static __device__ __forceinline__ void merge(float &m, float &s, float om, float os) {
    float nm = fmaxf(m, om);
    float a = m == -INFINITY ? 0.0f : s * fast_exp(m - nm);
    float b = om == -INFINITY ? 0.0f : os * fast_exp(om - nm);
    m = nm;
    s = a + b;
}

// Every thread of the block ends with the block's (max, sum).
static __device__ __forceinline__ void block_reduce(float &m, float &s) {
    __shared__ float warp_m[WARPS], warp_s[WARPS];
    for (int offset = 16; offset > 0; offset >>= 1)
        merge(m, s, __shfl_xor_sync(FULL_MASK, m, offset), __shfl_xor_sync(FULL_MASK, s, offset));
    if (WARPS > 1) {
        if (threadIdx.x % 32 == 0) {
            warp_m[threadIdx.x / 32] = m;
            warp_s[threadIdx.x / 32] = s;
        }
        __syncthreads();
        m = warp_m[0];
        s = warp_s[0];
        for (int w = 1; w < WARPS; ++w) merge(m, s, warp_m[w], warp_s[w]);
    }
}

// This thread's (max, sum) over its packs of the chunk.
static __device__ __forceinline__ void chunk_stats(const elem_t *xr, int64_t start, float &m, float &s) {
    const int64_t end = start + CHUNK < COLS ? start + CHUNK : COLS;
    for (int64_t c = start + (int64_t)threadIdx.x * VEC; c < end; c += THREADS * VEC) {
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
}

__global__ void __launch_bounds__(THREADS) softmax_partials(const elem_t *__restrict__ x,
                                                           float *__restrict__ part) {
    const int64_t row = blockIdx.y;
    float m = -INFINITY, s = 0.0f;
    chunk_stats(x + row * COLS, (int64_t)blockIdx.x * CHUNK, m, s);
    block_reduce(m, s);
    if (threadIdx.x == 0) {
        part[(row * CHUNKS + blockIdx.x) * 2] = m;
        part[(row * CHUNKS + blockIdx.x) * 2 + 1] = s;
    }
}

__global__ void __launch_bounds__(THREADS) softmax_finish(const elem_t *__restrict__ x,
                                                         const float *__restrict__ part,
                                                         elem_t *__restrict__ y) {
    const int64_t row = blockIdx.y;
    float m = -INFINITY, s = 0.0f;
    for (int k = threadIdx.x; k < CHUNKS; k += THREADS)
        merge(m, s, part[(row * CHUNKS + k) * 2], part[(row * CHUNKS + k) * 2 + 1]);
    block_reduce(m, s);
    const elem_t *xr = x + row * COLS;
    elem_t *yr = y + row * COLS;
    const int64_t start = (int64_t)blockIdx.x * CHUNK;
    const int64_t end = start + CHUNK < COLS ? start + CHUNK : COLS;
    // Once per block: 1/sum (a multiply per element, not a division), or max + log(sum).
    const float scale = LOG ? m + logf(s) : 1.0f / s;
    for (int64_t c = start + (int64_t)threadIdx.x * VEC; c < end; c += THREADS * VEC) {
        const pack_t p = *reinterpret_cast<const pack_t *>(xr + c);
        pack_t q;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float v = to_float(p.v[k]);
#if LOG
            q.v[k] = from_float(v - scale);
#else
            q.v[k] = from_float(fast_exp(v - m) * scale);
#endif
        }
        *reinterpret_cast<pack_t *>(yr + c) = q;
    }
}

extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE) return 2;
    if (in[0].strides[in[0].ndim - 1] != 1 || out[0].strides[out[0].ndim - 1] != 1) return 3;
    float *part = nullptr;
    // Scratch on the stream's pool, freed in stream order: nothing outlives the call.
    if (cudaMallocAsync((void **)&part, sizeof(float) * 2 * ROWS * CHUNKS, 0) != cudaSuccess) return 4;
    const dim3 grid((unsigned)CHUNKS, (unsigned)ROWS);
    softmax_partials<<<grid, THREADS>>>((const elem_t *)in[0].data, part);
    softmax_finish<<<grid, THREADS>>>((const elem_t *)in[0].data, part, (elem_t *)out[0].data);
    cudaFreeAsync(part, 0);
    return 0;
}
