/* kernforge builtin: batch norm in inference on the CPU's threads.
 * kf-op: aten::native_batch_norm.default
 *
 * y = x * scale[c] + shift[c], scale = w / sqrt(running_var + eps), shift = b - running_mean * scale,
 * the C scales and shifts computed once. Contiguous (NCHW) input: a thread per (sample, channel)
 * plane of HW values, scale and shift two scalars. Channels-last (NHWC): a thread per position,
 * its C channels against the scale and shift vectors.
 */
#include <math.h>
#include <stdlib.h>
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
#define HW 35LL
#define EPS 1e-05
#define ELEM_T float
#define ELEM_CODE KF_F32
#define BF16_BITS 0
#define CHANNELS_LAST 0
#define HAS_W 1
#define HAS_B 1
#define W_FP32 0
#define B_FP32 0
#define RM_FP32 0
#define RV_FP32 0
#define SAVED 0
#define SAVED_FP32 0
#define N_OUT 3
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

/* Weights and statistics are the input's dtype or float32 (mixed precision): FP32 is a
 * compile-time constant, so each call inlines to one plain load. */
static inline float ld_aux(const void *p, int fp32, int64_t i) {
    return fp32 ? ((const float *)p)[i] : ld((const elem_t *)p, i);
}
static inline void st_aux(void *p, int fp32, int64_t i, float v) {
    if (fp32) ((float *)p)[i] = v; else st((elem_t *)p, i, v);
}

#define KF_STR(s) #s
#if SIMD_LOOPS
#define SIMD(clause) _Pragma(KF_STR(omp simd clause))
#else
#define SIMD(clause)
#endif

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 3 + HAS_W + HAS_B || n_out != N_OUT) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE) return 2;
    /* absent inputs (None) are skipped in `in` */
    int k = 1;
    const void *w = HAS_W ? in[k++].data : NULL;
    const void *b = HAS_B ? in[k++].data : NULL;
    const void *rm = in[k++].data;
    const void *rv = in[k++].data;
    const elem_t *x = (const elem_t *)in[0].data;
    elem_t *y = (elem_t *)out[0].data;
    float *scale = (float *)malloc(sizeof(float) * 2 * C);
    if (!scale) return 4;
    float *shift = scale + C;
    for (int64_t c = 0; c < C; ++c) {
        float sc = (float)(1.0 / sqrt((double)ld_aux(rv, RV_FP32, c) + EPS));
        if (HAS_W) sc *= ld_aux(w, W_FP32, c);
        scale[c] = sc;
        shift[c] = (HAS_B ? ld_aux(b, B_FP32, c) : 0.0f) - ld_aux(rm, RM_FP32, c) * sc;
        /* CUDA's eval-mode saved statistics, where the task lists them: running_mean and
         * 1/sqrt(running_var + eps); on the CPU (and for cuDNN) they are empty */
        if (SAVED) {
            st_aux(out[1].data, SAVED_FP32, c, ld_aux(rm, RM_FP32, c));
            st_aux(out[2].data, SAVED_FP32, c, (float)(1.0 / sqrt((double)ld_aux(rv, RV_FP32, c) + EPS)));
        }
    }
#if CHANNELS_LAST
    #pragma omp parallel for schedule(SCHEDULE)
    for (int64_t pos = 0; pos < N * HW; ++pos) {
        const elem_t *restrict xp = x + pos * C;
        elem_t *restrict yp = y + pos * C;
        SIMD()
        for (int64_t c = 0; c < C; ++c) st(yp, c, ld(xp, c) * scale[c] + shift[c]);
    }
#else
    #pragma omp parallel for schedule(SCHEDULE)
    for (int64_t pl = 0; pl < N * C; ++pl) {
        const float sc = scale[pl % C], sh = shift[pl % C];
        const elem_t *restrict xp = x + pl * HW;
        elem_t *restrict yp = y + pl * HW;
        SIMD()
        for (int64_t p = 0; p < HW; ++p) st(yp, p, ld(xp, p) * sc + sh);
    }
#endif
    free(scale);
    return 0;
}
