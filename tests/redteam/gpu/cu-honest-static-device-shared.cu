/* HONEST  cu-honest-static-device-shared
 * CLASS honest: static __device__ helpers, __shared__ arrays, a variable named `half`
 *
 * One block per row: `static __device__` warp and block reductions (static, so nvcc makes
 * no host stub for them), a static __shared__ array of partial results and the
 * dynamic `extern __shared__` row cache, `__launch_bounds__`, a local `half` (the warp
 * count divided in two, an int) and an `#pragma unroll`. Nothing here keeps state across
 * calls or touches another stream: shared memory lives for one block of one launch.
 * A scan that matches `half` as the 16-bit type, or `extern` as a hand-written
 * declaration, rejects it.
 *
 * EXPECTED  ok
 */
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

#define THREADS 128
#define WARPS (THREADS / 32)

static __device__ __forceinline__ float warp_reduce(float v, bool is_max) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    return v;
}

static __device__ float block_reduce(float v, bool is_max) {
    __shared__ float part[WARPS];
    v = warp_reduce(v, is_max);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    const int half = WARPS / 2;
    if (threadIdx.x < half) part[threadIdx.x] = is_max ? fmaxf(part[threadIdx.x], part[threadIdx.x + half])
                                                      : part[threadIdx.x] + part[threadIdx.x + half];
    __syncthreads();
    float r = part[0];
    for (int k = 1; k < half; ++k) r = is_max ? fmaxf(r, part[k]) : r + part[k];
    __syncthreads();
    return r;
}

__global__ void __launch_bounds__(THREADS) softmax_rows(const float *__restrict__ x, float *__restrict__ y,
                                                         int64_t cols) {
    extern __shared__ float row_cache[];
    const float *xr = x + blockIdx.x * cols;
    float *yr = y + blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) { row_cache[c] = xr[c]; m = fmaxf(m, row_cache[c]); }
    m = block_reduce(m, true);
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) { row_cache[c] = expf(row_cache[c] - m); s += row_cache[c]; }
    s = block_reduce(s, false);
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) yr[c] = row_cache[c] / s;
}

extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32 || out[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    if (cols * sizeof(float) > 48 * 1024) return 2;
    softmax_rows<<<(unsigned)rows, THREADS, cols * sizeof(float)>>>((const float *)in[0].data,
                                                                    (float *)out[0].data, cols);
    return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
