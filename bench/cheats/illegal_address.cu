// kf-op: aten::_softmax.default
// BROKEN: writes far past the end of the output (an illegal address).
#include <stdint.h>
#include <math.h>
typedef struct { void *data; int64_t ndim; int64_t sizes[8]; int64_t strides[8]; int32_t dtype; } kf_tensor;

__global__ void softmax_rows(const float *x, float *y, int64_t cols) {
    __shared__ float red[32];
    const float *xr = x + blockIdx.x * cols;
    float *yr = y + blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < (blockDim.x >> 5); ++w) m = fmaxf(m, red[w]);
    __syncthreads();
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += __expf(xr[c] - m);
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    s = 0.f;
    for (int w = 0; w < (blockDim.x >> 5); ++w) s += red[w];
    float inv = 1.f / s;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c + ((int64_t)1 << 40)] = __expf(xr[c] - m) * inv;
}

extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int d = 0; d < in[0].ndim - 1; ++d) rows *= in[0].sizes[d];
    softmax_rows<<<rows, 128>>>((const float *)in[0].data, (float *)out[0].data, cols);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
