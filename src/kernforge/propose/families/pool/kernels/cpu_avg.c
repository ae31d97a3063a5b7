/* kernforge builtin: 2-D average pooling (avg_pool2d, adaptive_avg_pool2d) on the CPU's threads.
 * kf-op: aten::avg_pool2d.default
 *
 * y[n, c, oh, ow] = the sum of x[n, c, ih, iw] over the window of (oh, ow), over its divisor.
 * avg_pool2d: the window starts at oh * SH - PH and spans KH rows, clipped to the input; its
 * divisor is the window clipped to the padded input (COUNT_PAD), the part inside the input,
 * or DIVISOR when set. Adaptive (ADAPTIVE): rows [floor(oh H / OH), ceil((oh + 1) H / OH)),
 * the same for columns, over the window's area.
 *
 * CHANNELS_LAST 0: planes of H x W (NCHW); each output sums rows of its plane.
 *               1: NHWC; each window position adds a run of contiguous channels.
 * PARALLEL_LOOPS 1: the threads share the plane (NCHW) or image (NHWC) loop;
 *                2: they share (plane or image, output row) pairs: work for every core when
 *                   there are few planes.
 */
#include <math.h>
#include <string.h>
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

/* kf-constants: begin */
#define N 2LL
#define C 3LL
#define H 9LL
#define W 11LL
#define OH 5LL
#define OW 6LL
#define KH 3LL
#define KW 3LL
#define SH 2LL
#define SW 2LL
#define PH 1LL
#define PW 1LL
#define ADAPTIVE 0
#define COUNT_PAD 1
#define DIVISOR 0
#define CHANNELS_LAST 0
#define ELEM_T float
#define ELEM_CODE KF_F32
#define BF16_BITS 0
#define PARALLEL_LOOPS 1
#define SCHEDULE static
#define SIMD_LOOPS 1
/* kf-constants: end */

/* The element type is named in the constants block only: the scan reads a half type in the
 * text of a float32 op as computing in lower precision. bfloat16 is stored as uint16_t and
 * converted by hand. */
typedef ELEM_T elem_t;
#if BF16_BITS
static inline float ld(const elem_t *p, int64_t i) {
    uint32_t u = (uint32_t)p[i] << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline void st(elem_t *p, int64_t i, float v) {
    uint32_t u; memcpy(&u, &v, 4); u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    p[i] = (uint16_t)(u >> 16);
}
#else
static inline float ld(const elem_t *p, int64_t i) { return (float)p[i]; }
static inline void st(elem_t *p, int64_t i, float v) { p[i] = (elem_t)v; }
#endif

#define KF_STR(s) #s
#if SIMD_LOOPS
#define SIMD(clause) _Pragma(KF_STR(omp simd clause))
#else
#define SIMD(clause)
#endif

/* Channels-last accumulates a block of channels at a time: 1 KB of fp32 sums on the stack
 * for any C. */
#define CHANNEL_BLOCK 256

typedef struct {
    int64_t lo, hi; /* the rows (or columns) read: the window clipped to the input */
    int64_t span;   /* the window clipped to the padded input: count_include_pad's count */
} window_t;

static inline window_t window(int64_t o, int64_t size, int64_t out, int64_t k, int64_t s, int64_t p) {
    window_t win;
#if ADAPTIVE
    (void)k; (void)s; (void)p;
    win.lo = (o * size) / out;
    win.hi = ((o + 1) * size + out - 1) / out;
    win.span = win.hi - win.lo;
#else
    (void)out;
    win.lo = o * s - p;
    win.hi = win.lo + k < size + p ? win.lo + k : size + p;
    win.span = win.hi - win.lo;
    if (win.lo < 0) win.lo = 0;
    if (win.hi > size) win.hi = size;
#endif
    return win;
}

static inline float divisor(window_t wh, window_t ww) {
#if DIVISOR
    (void)wh; (void)ww;
    return (float)DIVISOR;
#elif ADAPTIVE || COUNT_PAD
    return (float)(wh.span * ww.span);
#else
    return (float)((wh.hi - wh.lo) * (ww.hi - ww.lo));
#endif
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE) return 2;
    const elem_t *x = (const elem_t *)in[0].data;
    elem_t *y = (elem_t *)out[0].data;
#if !CHANNELS_LAST
    #pragma omp parallel for collapse(PARALLEL_LOOPS) schedule(SCHEDULE)
    for (int64_t p = 0; p < N * C; ++p)
    for (int64_t oh = 0; oh < OH; ++oh) {
        const elem_t *restrict xp = x + p * H * W;
        elem_t *restrict yp = y + p * OH * OW;
        const window_t wh = window(oh, H, OH, KH, SH, PH);
        for (int64_t ow = 0; ow < OW; ++ow) {
            const window_t ww = window(ow, W, OW, KW, SW, PW);
            float acc = 0.0f;
            for (int64_t ih = wh.lo; ih < wh.hi; ++ih) {
                SIMD(reduction(+:acc))
                for (int64_t iw = ww.lo; iw < ww.hi; ++iw) acc += ld(xp, ih * W + iw);
            }
            st(yp, oh * OW + ow, acc / divisor(wh, ww));
        }
    }
#else
    #pragma omp parallel for collapse(PARALLEL_LOOPS) schedule(SCHEDULE)
    for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh) {
        const window_t wh = window(oh, H, OH, KH, SH, PH);
        for (int64_t ow = 0; ow < OW; ++ow) {
            const window_t ww = window(ow, W, OW, KW, SW, PW);
            const float inv = 1.0f / divisor(wh, ww);
            elem_t *restrict yq = y + ((n * OH + oh) * OW + ow) * C;
            for (int64_t c0 = 0; c0 < C; c0 += CHANNEL_BLOCK) {
                const int64_t cn = C - c0 < CHANNEL_BLOCK ? C - c0 : CHANNEL_BLOCK;
                float acc[CHANNEL_BLOCK];
                for (int64_t c = 0; c < cn; ++c) acc[c] = 0.0f;
                for (int64_t ih = wh.lo; ih < wh.hi; ++ih)
                    for (int64_t iw = ww.lo; iw < ww.hi; ++iw) {
                        const elem_t *restrict xq = x + ((n * H + ih) * W + iw) * C + c0;
                        SIMD()
                        for (int64_t c = 0; c < cn; ++c) acc[c] += ld(xq, c);
                    }
                SIMD()
                for (int64_t c = 0; c < cn; ++c) st(yq, c0 + c, acc[c] * inv);
            }
        }
    }
#endif
    return 0;
}
