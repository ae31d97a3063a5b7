// kernforge builtin: 2-D average pooling (avg_pool2d, adaptive_avg_pool2d), outputs per thread.
// kf-op: aten::avg_pool2d.default
//
// y[n, c, oh, ow] = the sum of x[n, c, ih, iw] over the window of (oh, ow), over its divisor.
// avg_pool2d: the window starts at oh * SH - PH and spans KH rows, clipped to the input; its
// divisor is the window clipped to the padded input (COUNT_PAD), the part inside the input,
// or DIVISOR when set. Adaptive (ADAPTIVE): rows [floor(oh H / OH), ceil((oh + 1) H / OH)).
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
#define ADAPTIVE 0
#define COUNT_PAD 1
#define DIVISOR 0
#define CHANNELS_LAST 1
#define ELEM_T float
#define ELEM_CODE KF_F32
#define THREADS 256
#define ITEMS 1
#define VEC 4
// kf-constants: end

// The element type is named in the constants block only (the scan reads a half type in the
// text of a float32 op as lower precision); __half and __nv_bfloat16 convert to and from float.
typedef ELEM_T elem_t;
static __device__ __forceinline__ float to_float(elem_t v) { return static_cast<float>(v); }
static __device__ __forceinline__ elem_t from_float(float v) { return elem_t(v); }

#define GROUPS (N * C * OH * OW / VEC)

// VEC elements in one load: the struct's alignment makes it a single 4-16 byte access.
struct alignas(sizeof(elem_t) * VEC) pack_t {
    elem_t v[VEC];
};

struct window_t {
    int64_t lo, hi;  // the rows (or columns) read: the window clipped to the input
    int64_t span;    // the window clipped to the padded input: count_include_pad's count
};

static __device__ __forceinline__ window_t window(int64_t o, int64_t size, int64_t out, int64_t k,
                                                  int64_t s, int64_t p) {
    window_t win;
#if ADAPTIVE
    win.lo = (o * size) / out;
    win.hi = ((o + 1) * size + out - 1) / out;
    win.span = win.hi - win.lo;
#else
    win.lo = o * s - p;
    win.hi = min(win.lo + k, size + p);
    win.span = win.hi - win.lo;
    win.lo = max(win.lo, (int64_t)0);
    win.hi = min(win.hi, size);
#endif
    return win;
}

static __device__ __forceinline__ float divisor(window_t wh, window_t ww) {
#if DIVISOR
    return (float)DIVISOR;
#elif ADAPTIVE || COUNT_PAD
    return (float)(wh.span * ww.span);
#else
    return (float)((wh.hi - wh.lo) * (ww.hi - ww.lo));
#endif
}

__global__ void __launch_bounds__(THREADS) pool2d(const elem_t *__restrict__ x, elem_t *__restrict__ y) {
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
        const window_t wh = window(oh, H, OH, KH, SH, PH);
        const window_t ww = window(ow, W, OW, KW, SW, PW);
        float acc[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc[k] = 0.0f;
        for (int64_t ih = wh.lo; ih < wh.hi; ++ih)
            for (int64_t iw = ww.lo; iw < ww.hi; ++iw) {
                const pack_t p = *reinterpret_cast<const pack_t *>(xq + (ih * W + iw) * pixel);
#pragma unroll
                for (int k = 0; k < VEC; ++k) acc[k] += to_float(p.v[k]);
            }
        const float d = divisor(wh, ww);
        pack_t q;
#pragma unroll
        for (int k = 0; k < VEC; ++k) q.v[k] = from_float(acc[k] / d);
        *reinterpret_cast<pack_t *>(y + o) = q;
    }
}

extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE) return 2;
    const int64_t blocks = (GROUPS + (int64_t)THREADS * ITEMS - 1) / ((int64_t)THREADS * ITEMS);
    pool2d<<<(unsigned)blocks, THREADS>>>((const elem_t *)in[0].data, (elem_t *)out[0].data);
    return 0;
}
