// kernforge builtin: 2-D max pooling with indices (max_pool2d_with_indices), outputs per thread.
// kf-op: aten::max_pool2d_with_indices.default
//
// y[n, c, oh, ow] = the largest x[n, c, ih, iw] over the window of (oh, ow), and i[...] its
// position ih * W + iw in the plane. The window's rows are oh * SH - PH + k * DH for k < KH
// (dilation DH), those inside the input only (padding acts as -inf), the same for columns.
// Eager's rules: positions are scanned row by row and the first of equal maxima wins; a NaN
// wins over any number (the last NaN seen); a window of -inf gives -inf at its first position.
//
// A thread computes ITEMS groups of VEC outputs, groups numbered in the output's memory order
// and spaced THREADS apart, so a warp's stores are coalesced. In channels-last (NHWC) a group
// is VEC neighbouring channels of one output pixel, read with one 4-16 byte load per window
// position; in NCHW a group is one output (VEC is 1).
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
#define N 32LL
#define C 256LL
#define H 56LL
#define W 56LL
#define OH 28LL
#define OW 28LL
#define KH 3LL
#define KW 3LL
#define SH 2LL
#define SW 2LL
#define PH 1LL
#define PW 1LL
#define DH 1LL
#define DW 1LL
#define CHANNELS_LAST 1
#define ELEM_T float
#define ELEM_CODE KF_F32
#define THREADS 256
#define ITEMS 1
#define VEC 4
// kf-constants: end

// The element type is named in the constants block only (the scan reads a half type in the
// text of a float32 op as lower precision); __half and __nv_bfloat16 convert to float exactly,
// so comparing in float picks the same element as comparing in the type.
typedef ELEM_T elem_t;
static __device__ __forceinline__ float to_float(elem_t v) { return static_cast<float>(v); }
static __device__ __forceinline__ elem_t from_float(float v) { return elem_t(v); }

#define GROUPS (N * C * OH * OW / VEC)

// VEC elements in one load: the struct's alignment makes it a single 4-16 byte access.
struct alignas(sizeof(elem_t) * VEC) pack_t {
    elem_t v[VEC];
};

struct window_t {
    int64_t lo, hi;  // the first row (or column) inside the input, and the end of the window
};

static __device__ __forceinline__ window_t window(int64_t o, int64_t size, int64_t k, int64_t s,
                                                  int64_t p, int64_t d) {
    window_t win;
    win.lo = o * s - p;
    win.hi = min(win.lo + (k - 1) * d + 1, size);
    while (win.lo < 0) win.lo += d;
    return win;
}

__global__ void __launch_bounds__(THREADS) max_pool2d(const elem_t *__restrict__ x, elem_t *__restrict__ y,
                                                     int64_t *__restrict__ yi) {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int64_t g = ((int64_t)blockIdx.x * ITEMS + i) * THREADS + threadIdx.x;
        if (g >= GROUPS) return;
        const int64_t o = g * VEC;  // the group's first output, in memory order
#if CHANNELS_LAST
        const int64_t c = o % C, ow = (o / C) % OW, oh = (o / (C * OW)) % OH, n = o / (C * OW * OH);
        const elem_t *xq = x + n * H * W * C + c;
        const int64_t pixel = C;  // elements between neighbouring pixels
#else
        const int64_t ow = o % OW, oh = (o / OW) % OH, plane = o / (OW * OH);
        const elem_t *xq = x + plane * H * W;
        const int64_t pixel = 1;
#endif
        const window_t wh = window(oh, H, KH, SH, PH, DH);
        const window_t ww = window(ow, W, KW, SW, PW, DW);
        float best[VEC];
        int64_t at[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            best[k] = -INFINITY;
            at[k] = wh.lo * W + ww.lo;
        }
        for (int64_t ih = wh.lo; ih < wh.hi; ih += DH)
            for (int64_t iw = ww.lo; iw < ww.hi; iw += DW) {
                const pack_t p = *reinterpret_cast<const pack_t *>(xq + (ih * W + iw) * pixel);
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float v = to_float(p.v[k]);
                    if (v > best[k] || isnan(v)) {
                        best[k] = v;
                        at[k] = ih * W + iw;
                    }
                }
            }
        pack_t q;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            q.v[k] = from_float(best[k]);
            yi[o + k] = at[k];
        }
        *reinterpret_cast<pack_t *>(y + o) = q;
    }
}

extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 2) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE || out[1].dtype != KF_I64) return 2;
    const int64_t blocks = (GROUPS + (int64_t)THREADS * ITEMS - 1) / ((int64_t)THREADS * ITEMS);
    max_pool2d<<<(unsigned)blocks, THREADS>>>((const elem_t *)in[0].data, (elem_t *)out[0].data,
                                              (int64_t *)out[1].data);
    return 0;
}
