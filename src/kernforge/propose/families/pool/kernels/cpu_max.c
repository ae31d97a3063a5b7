/* kernforge builtin: 2-D max pooling with indices (max_pool2d_with_indices) on the CPU's threads.
 * kf-op: aten::max_pool2d_with_indices.default
 *
 * y[n, c, oh, ow] = the largest x[n, c, ih, iw] over the window of (oh, ow), and i[...] its
 * position ih * W + iw in the plane. The window's rows are oh * SH - PH + k * DH for k < KH
 * (dilation DH), those inside the input only (padding acts as -inf), the same for columns.
 * Eager's rules: positions are scanned row by row and the first of equal maxima wins; a NaN
 * wins over any number (the last NaN seen); a window of -inf gives -inf at its first position.
 *
 * CHANNELS_LAST 0: planes of H x W (NCHW); 1: NHWC, a run of contiguous channels a position.
 * PARALLEL_LOOPS 1: the threads share the planes (NCHW) or images (NHWC); 2: (plane or image,
 *                output row) pairs, for when there are few planes.
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
#define DH 1LL
#define DW 1LL
#define CHANNELS_LAST 0
#define ELEM_T float
#define ELEM_CODE KF_F32
#define BF16_BITS 0
#define PARALLEL_LOOPS 1
#define SCHEDULE static
/* kf-constants: end */

/* The element type is named in the constants block only: the scan reads a half type in the
 * text of a float32 op as computing in lower precision. bfloat16 is stored as uint16_t and
 * converted by hand; every value of a 16-bit type is exact in float, so comparisons in float
 * pick the same element as comparisons in the type. */
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

/* Channels-last keeps a block of channels' maxima at a time: any C fits on the stack. */
#define CHANNEL_BLOCK 256

typedef struct {
    int64_t lo, hi; /* the first row (or column) inside the input, and the end of the window */
} window_t;

static inline window_t window(int64_t o, int64_t size, int64_t k, int64_t s, int64_t p, int64_t d) {
    window_t win;
    win.lo = o * s - p;
    win.hi = win.lo + (k - 1) * d + 1 < size ? win.lo + (k - 1) * d + 1 : size;
    while (win.lo < 0) win.lo += d;
    return win;
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 2) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE || out[1].dtype != KF_I64) return 2;
    const elem_t *x = (const elem_t *)in[0].data;
    elem_t *y = (elem_t *)out[0].data;
    int64_t *yi = (int64_t *)out[1].data;
#if !CHANNELS_LAST
    #pragma omp parallel for collapse(PARALLEL_LOOPS) schedule(SCHEDULE)
    for (int64_t p = 0; p < N * C; ++p)
    for (int64_t oh = 0; oh < OH; ++oh) {
        const elem_t *restrict xp = x + p * H * W;
        const window_t wh = window(oh, H, KH, SH, PH, DH);
        for (int64_t ow = 0; ow < OW; ++ow) {
            const window_t ww = window(ow, W, KW, SW, PW, DW);
            float best = -INFINITY;
            int64_t at = wh.lo * W + ww.lo;
            for (int64_t ih = wh.lo; ih < wh.hi; ih += DH)
                for (int64_t iw = ww.lo; iw < ww.hi; iw += DW) {
                    const float v = ld(xp, ih * W + iw);
                    if (v > best || isnan(v)) { best = v; at = ih * W + iw; }
                }
            st(y, (p * OH + oh) * OW + ow, best);
            yi[(p * OH + oh) * OW + ow] = at;
        }
    }
#else
    #pragma omp parallel for collapse(PARALLEL_LOOPS) schedule(SCHEDULE)
    for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh) {
        const window_t wh = window(oh, H, KH, SH, PH, DH);
        for (int64_t ow = 0; ow < OW; ++ow) {
            const window_t ww = window(ow, W, KW, SW, PW, DW);
            const int64_t o = ((n * OH + oh) * OW + ow) * C;
            for (int64_t c0 = 0; c0 < C; c0 += CHANNEL_BLOCK) {
                const int64_t cn = C - c0 < CHANNEL_BLOCK ? C - c0 : CHANNEL_BLOCK;
                float best[CHANNEL_BLOCK];
                int64_t at[CHANNEL_BLOCK];
                for (int64_t c = 0; c < cn; ++c) { best[c] = -INFINITY; at[c] = wh.lo * W + ww.lo; }
                for (int64_t ih = wh.lo; ih < wh.hi; ih += DH)
                    for (int64_t iw = ww.lo; iw < ww.hi; iw += DW) {
                        const elem_t *restrict xq = x + ((n * H + ih) * W + iw) * C + c0;
                        for (int64_t c = 0; c < cn; ++c) {
                            const float v = ld(xq, c);
                            if (v > best[c] || isnan(v)) { best[c] = v; at[c] = ih * W + iw; }
                        }
                    }
                for (int64_t c = 0; c < cn; ++c) { st(y, o + c0 + c, best[c]); yi[o + c0 + c] = at[c]; }
            }
        }
    }
#endif
    return 0;
}
