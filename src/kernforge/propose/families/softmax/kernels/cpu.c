/* kernforge builtin: softmax over the last dim, row by row on the CPU's threads.
 * kf-op: aten::_softmax.default
 *
 * ALGORITHM  STORE_EXP  three passes, exp() written to the output and scaled in place
 *                       (exact only for fp32 softmax: the output holds the exps);
 *            RECOMPUTE  exp() computed again in the last pass instead of stored;
 *            ONLINE     running max and sum in blocks of 64: the row read twice.
 * POLY_EXP   a polynomial exp the compiler vectorises (error near 1e-7), else libm's expf.
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

#define STORE_EXP 1
#define RECOMPUTE 2
#define ONLINE 3

/* kf-constants: begin */
#define ROWS 7LL
#define COLS 37LL
#define ELEM_T float
#define ELEM_CODE KF_F32
#define BF16_BITS 0
#define LOG 0
#define ALGORITHM ONLINE
#define POLY_EXP 1
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

/* A plain compare, not fmaxf: fmaxf's NaN rules kept gcc 12 from vectorising the max
 * reduction (about 4x slower on an AMD EPYC with AVX-512); a NaN input still ends as a
 * NaN row via exp(). */
#define KF_MAX(a, b) ((a) > (b) ? (a) : (b))

#if POLY_EXP
/* Cephes-style expf: x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial for e^r, 2^n put
 * straight into the exponent bits. n is rounded with the 1.5 * 2^23 trick and the bits
 * moved through a union: floorf() and memcpy() kept gcc 12 from vectorising the loop.
 * Inputs here are x - max <= 0. */
static inline float kf_exp(float x) {
    x = x < -87.0f ? -87.0f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { int32_t i; float f; } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return p * scale.f;
}
#else
static inline float kf_exp(float x) { return expf(x); }
#endif

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE) return 2;
    if (in[0].strides[in[0].ndim - 1] != 1 || out[0].strides[out[0].ndim - 1] != 1) return 3;
    const elem_t *x = (const elem_t *)in[0].data;
    elem_t *y = (elem_t *)out[0].data;
    #pragma omp parallel for schedule(SCHEDULE)
    for (int64_t r = 0; r < ROWS; ++r) {
        const elem_t *restrict xr = x + r * COLS;
        elem_t *restrict yr = y + r * COLS;
#if ALGORITHM == ONLINE
        /* Blocks of 64: the block's max, then the running sum rescaled once per block, so
         * the inner loops stay vectorisable. */
        float m = -INFINITY, s = 0.0f;
        for (int64_t c0 = 0; c0 < COLS; c0 += 64) {
            int64_t c1 = c0 + 64 < COLS ? c0 + 64 : COLS;
            float bm = -INFINITY;
            SIMD(reduction(max:bm))
            for (int64_t c = c0; c < c1; ++c) bm = KF_MAX(bm, ld(xr, c));
            float nm = KF_MAX(m, bm);
            if (nm == -INFINITY) continue;
            float bs = 0.0f;
            SIMD(reduction(+:bs))
            for (int64_t c = c0; c < c1; ++c) bs += kf_exp(ld(xr, c) - nm);
            s = (m == -INFINITY ? 0.0f : s * kf_exp(m - nm)) + bs;
            m = nm;
        }
#else
        float m = -INFINITY;
        SIMD(reduction(max:m))
        for (int64_t c = 0; c < COLS; ++c) m = KF_MAX(m, ld(xr, c));
        float s = 0.0f;
#if ALGORITHM == STORE_EXP
        SIMD(reduction(+:s))
        for (int64_t c = 0; c < COLS; ++c) { float e = kf_exp(ld(xr, c) - m); st(yr, c, e); s += e; }
#else
        SIMD(reduction(+:s))
        for (int64_t c = 0; c < COLS; ++c) s += kf_exp(ld(xr, c) - m);
#endif
#endif
#if LOG
        float shift = m + logf(s);
        SIMD()
        for (int64_t c = 0; c < COLS; ++c) st(yr, c, ld(xr, c) - shift);
#elif ALGORITHM == STORE_EXP
        float inv = 1.0f / s;
        SIMD()
        for (int64_t c = 0; c < COLS; ++c) st(yr, c, ld(yr, c) * inv);
#else
        float inv = 1.0f / s;
        SIMD()
        for (int64_t c = 0; c < COLS; ++c) st(yr, c, kf_exp(ld(xr, c) - m) * inv);
#endif
    }
    return 0;
}
