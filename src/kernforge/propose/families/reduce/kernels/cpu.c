/* kernforge builtin: a reduction (sum, mean, amax, amin) on the CPU's threads, in float32.
 * kf-op: aten::sum.dim_IntList
 *
 * x is read in memory order as [OUTER, R1, MID, R2, INNER], reduced over R1 and R2:
 * y[o, m, i] = op over (r1, r2) of x[o, r1, m, r2, i]. One block of reduced dims has MID = R2 = 1.
 * STRATEGY  ROWS        INNER == 1: a row of R1 per thread, reduced by the SIMD lanes in blocks;
 *           SPLIT_ROWS  few long rows: each row's runs spread over the threads, OpenMP combines them;
 *           COLUMNS     jobs of BLOCK_C contiguous inner positions, each step of the reduced dims
 *                       adding one contiguous run of x into BLOCK_C accumulators.
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

#define SUM 1
#define MEAN 2
#define AMAX 3
#define AMIN 4
#define ROWS 1
#define SPLIT_ROWS 2
#define COLUMNS 3

/* kf-constants: begin */
#define OUTER 3LL
#define R1 50LL
#define MID 1LL
#define R2 1LL
#define INNER 37LL
#define ELEM_T float
#define ELEM_CODE KF_F32
#define BF16_BITS 0
#define OP SUM
#define STRATEGY COLUMNS
#define BLOCK_C 64
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

/* amax and amin keep a NaN, as eager does. A plain compare (not fmaxf) still vectorises; the
 * OpenMP max/min that combines the lanes and threads may drop a NaN, so rows also OR together
 * a NaN flag (KEEPS_NAN), folded away for sums. */
#if OP == AMAX
#define INIT (-INFINITY)
#define COMBINE(a, b) ((a) > (b) || (a) != (a) ? (a) : (b))
#define OMP_OP max
#elif OP == AMIN
#define INIT INFINITY
#define COMBINE(a, b) ((a) < (b) || (a) != (a) ? (a) : (b))
#define OMP_OP min
#else
#define INIT 0.0f
#define COMBINE(a, b) ((a) + (b))
#define OMP_OP +
#endif
#define KEEPS_NAN (OP == AMAX || OP == AMIN)
#define FINAL(acc, nan) ((nan) ? NAN : OP == MEAN ? (acc) / (float)(R1 * R2) : (acc))

/* BLOCK reduced positions per partial: eager sums a row as a cascade, and one float32 running
 * sum of thousands of terms errs ~30x more; partials of 256 keep every sum short. */
#define BLOCK 256

/* A contiguous run of n elements (n <= BLOCK * BLOCK): blocks of BLOCK reduced by the SIMD lanes,
 * their results combined. *nan collects whether a NaN was seen. */
static inline float reduce_run(const elem_t *restrict xr, int64_t n, int *nan) {
    float total = INIT;
    for (int64_t b0 = 0; b0 < n; b0 += BLOCK) {
        int64_t b1 = b0 + BLOCK < n ? b0 + BLOCK : n;
        float acc = INIT;
        int seen = 0;
        SIMD(reduction(OMP_OP:acc) reduction(|:seen))
        for (int64_t r = b0; r < b1; ++r) {
            float v = ld(xr, r);
            acc = COMBINE(acc, v);
            if (KEEPS_NAN) seen |= v != v;
        }
        total = COMBINE(total, acc);
        *nan |= seen;
    }
    return total;
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE) return 2;
    const elem_t *x = (const elem_t *)in[0].data;
    elem_t *y = (elem_t *)out[0].data;
    const int64_t run = BLOCK * BLOCK;
#if STRATEGY == ROWS
    #pragma omp parallel for schedule(SCHEDULE)
    for (int64_t o = 0; o < OUTER; ++o) {
        float acc = INIT;
        int nan = 0;
        for (int64_t r0 = 0; r0 < R1; r0 += run)
            acc = COMBINE(acc, reduce_run(x + o * R1 + r0, R1 - r0 < run ? R1 - r0 : run, &nan));
        st(y, o, FINAL(acc, nan));
    }
#elif STRATEGY == SPLIT_ROWS
    /* Each row's runs of 16 blocks go to the threads; OpenMP combines their results. */
    const int64_t part = 16 * BLOCK;
    for (int64_t o = 0; o < OUTER; ++o) {
        float acc = INIT;
        int nan = 0;
        #pragma omp parallel for schedule(SCHEDULE) reduction(OMP_OP:acc) reduction(|:nan)
        for (int64_t r0 = 0; r0 < R1; r0 += part)
            acc = COMBINE(acc, reduce_run(x + o * R1 + r0, R1 - r0 < part ? R1 - r0 : part, &nan));
        st(y, o, FINAL(acc, nan));
    }
#else
    /* BLOCK_C accumulators per job; every BLOCK steps of the reduced dims fold into the totals.
     * The NaN rule needs no flag here: COMBINE keeps a NaN and no OpenMP reduction is involved. */
    const int64_t blocks = (INNER + BLOCK_C - 1) / BLOCK_C;
    #pragma omp parallel for schedule(SCHEDULE)
    for (int64_t job = 0; job < OUTER * MID * blocks; ++job) {
        int64_t om = job / blocks, c0 = (job % blocks) * BLOCK_C;
        int64_t o = om / MID, m = om % MID;
        int64_t n = INNER - c0 < BLOCK_C ? INNER - c0 : BLOCK_C;
        float total[BLOCK_C], acc[BLOCK_C];
        for (int64_t c = 0; c < BLOCK_C; ++c) total[c] = acc[c] = INIT;
        for (int64_t r = 0; r < R1 * R2; ++r) {
            int64_t r1 = r / R2, r2 = r % R2;
            const elem_t *restrict xr = x + (((o * R1 + r1) * MID + m) * R2 + r2) * INNER + c0;
            SIMD()
            for (int64_t c = 0; c < n; ++c) acc[c] = COMBINE(acc[c], ld(xr, c));
            if ((r + 1) % BLOCK == 0 || r + 1 == R1 * R2) {
                for (int64_t c = 0; c < n; ++c) { total[c] = COMBINE(total[c], acc[c]); acc[c] = INIT; }
            }
        }
        SIMD()
        for (int64_t c = 0; c < n; ++c) st(y, om * INNER + c0 + c, FINAL(total[c], 0));
    }
#endif
    return 0;
}
