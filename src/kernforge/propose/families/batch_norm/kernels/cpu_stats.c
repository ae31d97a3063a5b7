/* kernforge builtin: batch norm with batch statistics on the CPU's threads.
 * kf-op: aten::native_batch_norm.default
 *
 * Training mode without running statistics (and instance norm, which torch runs as this op on a
 * [1, N*C, H, W] view): per channel c, over the N x HW positions,
 *     mean[c] = mean(x[:, c]),  var[c] = mean((x[:, c] - mean[c])^2)   (biased)
 *     y = (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c]
 * and the saved mean and invstd = 1/sqrt(var + eps). Sums in double.
 *
 * STATS  TWO_PASS         the mean, then the squared deviations from it: x read three times;
 *        ONE_PASS_DOUBLE  sum and sum of squares in one read: double keeps var = E[x^2] - mean^2
 *                         precise for float inputs whose mean is up to ~1e4 times their spread.
 * Contiguous (NCHW): a thread per channel, its N planes contiguous runs. Channels-last (NHWC): a
 * thread per range of positions, partial sums per channel, added in thread order (the same
 * result on every run with the same thread count).
 */
#include <math.h>
#include <omp.h>
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

#define TWO_PASS 1
#define ONE_PASS_DOUBLE 2

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
#define SAVED_FP32 0
#define STATS TWO_PASS
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

/* Weights and saved statistics are the input's dtype or float32: FP32 is a compile-time
 * constant, so each call inlines to one plain access. */
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

#define M (N * HW) /* values per channel */

/* mean and variance from sums over the M values of a channel */
static inline void finish(double s, double q, double *mean, double *var) {
    *mean = s / (double)M;
#if STATS == TWO_PASS
    *var = q / (double)M; /* q: the squared deviations */
#else
    double v = q / (double)M - *mean * *mean;
    *var = v > 0.0 || v != v ? v : 0.0; /* below 0 is rounding; NaN (a NaN or +-inf in the channel) stays, as eager's */
#endif
}

#if CHANNELS_LAST
/* per-channel sums of x (and of x^2, or of (x - mean)^2 where mean is given) over positions
 * [p0, p1), added into acc[0..C) and acc[C..2C) */
static void position_sums(const elem_t *x, int64_t p0, int64_t p1, const double *mean, double *acc) {
    for (int64_t pos = p0; pos < p1; ++pos) {
        const elem_t *restrict xp = x + pos * C;
        if (mean) {
            SIMD()
            for (int64_t c = 0; c < C; ++c) { double d = (double)ld(xp, c) - mean[c]; acc[C + c] += d * d; }
        } else {
            SIMD()
            for (int64_t c = 0; c < C; ++c) { double v = ld(xp, c); acc[c] += v; acc[C + c] += v * v; }
        }
    }
}

/* sums over every position, a range per thread, the ranges' partials added in order */
static int channel_sums(const elem_t *x, const double *mean, double *total) {
    int64_t parts = omp_get_max_threads();
    if (parts > M) parts = M;
    double *acc = (double *)calloc((size_t)(parts * 2 * C), sizeof(double));
    if (!acc) return 1;
    #pragma omp parallel for schedule(SCHEDULE)
    for (int64_t t = 0; t < parts; ++t)
        position_sums(x, M * t / parts, M * (t + 1) / parts, mean, acc + t * 2 * C);
    memset(total, 0, sizeof(double) * 2 * C);
    for (int64_t t = 0; t < parts; ++t)
        for (int64_t i = 0; i < 2 * C; ++i) total[i] += acc[t * 2 * C + i];
    free(acc);
    return 0;
}
#endif

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 + HAS_W + HAS_B || n_out != 3) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE) return 2;
    int k = 1; /* absent inputs (None) are skipped in `in` */
    const void *w = HAS_W ? in[k++].data : NULL;
    const void *b = HAS_B ? in[k++].data : NULL;
    const elem_t *x = (const elem_t *)in[0].data;
    elem_t *y = (elem_t *)out[0].data;
    double *stats = (double *)malloc(sizeof(double) * 4 * C); /* sums, then mean and var */
    float *scale = (float *)malloc(sizeof(float) * 2 * C);
    if (!stats || !scale) { free(stats); free(scale); return 4; }
    double *mean = stats + 2 * C, *var = stats + 3 * C;
    float *shift = scale + C;
#if CHANNELS_LAST
    if (channel_sums(x, NULL, stats)) { free(stats); free(scale); return 4; }
    for (int64_t c = 0; c < C; ++c) finish(stats[c], stats[C + c], &mean[c], &var[c]);
#if STATS == TWO_PASS
    if (channel_sums(x, mean, stats)) { free(stats); free(scale); return 4; }
    for (int64_t c = 0; c < C; ++c) var[c] = stats[C + c] / (double)M;
#endif
#else
    #pragma omp parallel for schedule(SCHEDULE)
    for (int64_t c = 0; c < C; ++c) {
        double s = 0.0, q = 0.0;
        for (int64_t n = 0; n < N; ++n) {
            const elem_t *restrict xp = x + (n * C + c) * HW;
#if STATS == TWO_PASS
            SIMD(reduction(+:s))
            for (int64_t p = 0; p < HW; ++p) s += ld(xp, p);
#else
            SIMD(reduction(+:s, q))
            for (int64_t p = 0; p < HW; ++p) { double v = ld(xp, p); s += v; q += v * v; }
#endif
        }
#if STATS == TWO_PASS
        const double mu = s / (double)M;
        for (int64_t n = 0; n < N; ++n) {
            const elem_t *restrict xp = x + (n * C + c) * HW;
            SIMD(reduction(+:q))
            for (int64_t p = 0; p < HW; ++p) { double d = (double)ld(xp, p) - mu; q += d * d; }
        }
#endif
        finish(s, q, &mean[c], &var[c]);
    }
#endif
    for (int64_t c = 0; c < C; ++c) {
        const double invstd = 1.0 / sqrt(var[c] + EPS);
        st_aux(out[1].data, SAVED_FP32, c, (float)mean[c]);
        st_aux(out[2].data, SAVED_FP32, c, (float)invstd);
        const double sc = HAS_W ? invstd * ld_aux(w, W_FP32, c) : invstd;
        scale[c] = (float)sc;
        shift[c] = (float)((HAS_B ? ld_aux(b, B_FP32, c) : 0.0) - mean[c] * sc);
    }
#if CHANNELS_LAST
    #pragma omp parallel for schedule(SCHEDULE)
    for (int64_t pos = 0; pos < M; ++pos) {
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
    free(stats);
    free(scale);
    return 0;
}
