/* kernforge builtin: group norm on the CPU's threads.
 * kf-op: aten::native_group_norm.default
 *
 *   y = (x - mean_g) * rsqrt(var_g + eps) * w[c] + b[c]   over each (sample, group of CG channels)
 *
 * PLANES 0  a thread per group: the group's statistics (TWO_PASS: mean, then squared
 *           deviations; else sum and sum of squares in one read), then its channels normalised;
 * PLANES 1  a thread per (sample, channel) plane: sums per plane, combined per group, then the
 *           planes normalised. Spreads few groups (32 in SD3.5's VAE) over every core.
 * CHAIN 1   a chain of group norm then element-wise steps on y: epilogue() applied to each y
 *           before its one store, inputs (x, weight, bias), one output, no statistics kept.
 * Sums are in double: a group holds up to millions of values, where float sums lose digits,
 * and double keeps sum(x^2) - n mean^2 precise on large-mean data.
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

/* What an epilogue may call: defined below, where the constants have chosen how. */
static inline float kf_exp(float x);
static inline float kf_tanh(float x);
#define KF_CLAMP(v, lo, hi) ((v) < (lo) ? (lo) : (v) > (hi) ? (hi) : (v))

/* kf-constants: begin */
static inline float epilogue(float a) { return a; }
#define CHAIN 0
#define POLY_EXP 1
#define N_GROUPS 6LL
#define GROUPS 3LL
#define CG 2LL
#define HW 35LL
#define GROUP_SIZE 70LL
#define EPS 1e-05
#define ELEM_T float
#define ELEM_CODE KF_F32
#define BF16_BITS 0
#define HAS_W 1
#define HAS_B 1
#define W_FP32 0
#define B_FP32 0
#define STATS_FP32 0
#define PLANES 0
#define TWO_PASS 1
#define SIMD_LOOPS 1
/* kf-constants: end */

/* kf-include: shared_c_math.c */

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

/* Weights and statistics are the input's type, or float32 beside a 16-bit input (mixed
 * precision models; CUDA's statistics). */
#if W_FP32
typedef float w_t;
#define LD_W(p, i) ((p)[i])
#else
typedef elem_t w_t;
#define LD_W(p, i) ld(p, i)
#endif
#if B_FP32
typedef float b_t;
#define LD_B(p, i) ((p)[i])
#else
typedef elem_t b_t;
#define LD_B(p, i) ld(p, i)
#endif
#if STATS_FP32
typedef float s_t;
#define ST_S(p, i, v) ((p)[i] = (v))
#else
typedef elem_t s_t;
#define ST_S(p, i, v) st(p, i, v)
#endif

#define KF_STR(s) #s
#if SIMD_LOOPS
#define SIMD(clause) _Pragma(KF_STR(omp simd clause))
#else
#define SIMD(clause)
#endif

/* y = (x - mean) * scale + shift for channel c: w folded into the scale, b the shift. Centred
 * first: x * scale + (b - mean * scale) cancels two large terms when the mean is far from 0. */
static inline void channel_affine(const w_t *w, const b_t *b, int64_t c, float rstd, float *scale, float *shift) {
    float sc = rstd, sh = 0.0f;
    if (w) sc *= LD_W(w, c);
    if (b) sh = LD_B(b, c);
    *scale = sc;
    *shift = sh;
}

/* A negative variance is rounding: clamped to 0. A NaN one (a group holding a NaN, or +inf and
 * -inf) stays NaN, as eager's rstd does: `var > 0.0 ? var : 0.0` alone made it 1/sqrt(eps). */
static inline float rstd_of(double var) { return (float)(1.0 / sqrt((var > 0.0 || var != var ? var : 0.0) + EPS)); }

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 + HAS_W + HAS_B || n_out != (CHAIN ? 1 : 3)) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE) return 2;
    const elem_t *x = (const elem_t *)in[0].data;
    /* absent inputs are skipped in `in`: never read past it */
    const w_t *w = HAS_W ? (const w_t *)in[1].data : NULL;
    const b_t *b = HAS_B ? (const b_t *)in[1 + HAS_W].data : NULL;
    elem_t *y = (elem_t *)out[0].data;
    s_t *mean_out = CHAIN ? NULL : (s_t *)out[1].data;  /* a chain keeps only its last value */
    s_t *rstd_out = CHAIN ? NULL : (s_t *)out[2].data;
#if PLANES
    double *sums = (double *)malloc(sizeof(double) * 2 * N_GROUPS * CG);
    float *stat = (float *)malloc(sizeof(float) * 2 * N_GROUPS);
    if (!sums || !stat) { free(sums); free(stat); return 4; }
    #pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < N_GROUPS * CG; ++pl) {
        const elem_t *restrict xp = x + pl * HW;
        double s = 0.0, ss = 0.0;
        SIMD(reduction(+:s, ss))
        for (int64_t p = 0; p < HW; ++p) { double v = ld(xp, p); s += v; ss += v * v; }
        sums[2 * pl] = s;
        sums[2 * pl + 1] = ss;
    }
    for (int64_t g = 0; g < N_GROUPS; ++g) {
        double s = 0.0, ss = 0.0;
        for (int64_t cc = 0; cc < CG; ++cc) { s += sums[2 * (g * CG + cc)]; ss += sums[2 * (g * CG + cc) + 1]; }
        double mean = s / GROUP_SIZE;
        stat[2 * g] = (float)mean;
        stat[2 * g + 1] = rstd_of(ss / GROUP_SIZE - mean * mean);
        if (!CHAIN) {
            ST_S(mean_out, g, stat[2 * g]);
            ST_S(rstd_out, g, stat[2 * g + 1]);
        }
    }
    #pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < N_GROUPS * CG; ++pl) {
        int64_t g = pl / CG;
        float sc, sh;
        const float mean = stat[2 * g];
        channel_affine(w, b, pl % (GROUPS * CG), stat[2 * g + 1], &sc, &sh);
        const elem_t *restrict xp = x + pl * HW;
        elem_t *restrict yp = y + pl * HW;
        SIMD()
        for (int64_t p = 0; p < HW; ++p) st(yp, p, epilogue((ld(xp, p) - mean) * sc + sh));
    }
    free(sums);
    free(stat);
#else
    #pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < N_GROUPS; ++g) {
        const elem_t *restrict xg = x + g * GROUP_SIZE;
        elem_t *restrict yg = y + g * GROUP_SIZE;
#if TWO_PASS
        double s = 0.0;
        SIMD(reduction(+:s))
        for (int64_t i = 0; i < GROUP_SIZE; ++i) s += ld(xg, i);
        double dmean = s / GROUP_SIZE;
        double ss = 0.0;
        SIMD(reduction(+:ss))
        for (int64_t i = 0; i < GROUP_SIZE; ++i) { double d = ld(xg, i) - dmean; ss += d * d; }
        float mean = (float)dmean, rstd = rstd_of(ss / GROUP_SIZE);
#else
        double s = 0.0, ss = 0.0;
        SIMD(reduction(+:s, ss))
        for (int64_t i = 0; i < GROUP_SIZE; ++i) { double v = ld(xg, i); s += v; ss += v * v; }
        double dmean = s / GROUP_SIZE;
        float mean = (float)dmean, rstd = rstd_of(ss / GROUP_SIZE - dmean * dmean);
#endif
        int64_t c0 = (g % GROUPS) * CG;
        for (int64_t cc = 0; cc < CG; ++cc) {
            float sc, sh;
            channel_affine(w, b, c0 + cc, rstd, &sc, &sh);
            SIMD()
            for (int64_t p = cc * HW; p < (cc + 1) * HW; ++p) st(yg, p, epilogue((ld(xg, p) - mean) * sc + sh));
        }
        if (!CHAIN) {
            ST_S(mean_out, g, mean);
            ST_S(rstd_out, g, rstd);
        }
    }
#endif
    return 0;
}
