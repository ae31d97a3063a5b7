// kf-op: aten::_softmax.default
// softmax(x, dim=-1) over contiguous float32 rows: one warp a row, 8 rows a block.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

__global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t n) {
    int64_t row = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float *xr = x + row * n;
    float *yr = y + row * n;
    float m = -INFINITY, sum = 0.0f;
    for (int64_t j = lane; j < n; j += 32) m = fmaxf(m, xr[j]);
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    for (int64_t j = lane; j < n; j += 32) sum += expf(xr[j] - m);
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int64_t j = lane; j < n; j += 32) yr[j] = expf(xr[j] - m) / sum;
}

/* 1 if t is contiguous (row-major, no gaps) */
static int contiguous(const kf_tensor *t) {
    int64_t expected = 1;
    for (int64_t d = t->ndim - 1; d >= 0; --d) {
        if (t->sizes[d] > 1 && t->strides[d] != expected) return 0;
        expected *= t->sizes[d];
    }
    return 1;
}

extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1) return 1;
    if (in[0].dtype != KF_F32 || in[0].ndim < 1 || !contiguous(&in[0]) || !contiguous(&out[0])) return 2;
    int64_t n = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    softmax_rows<<<(unsigned)((rows + 7) / 8), 256>>>((const float *)in[0].data, (float *)out[0].data, rows, n);
    return 0;
}
