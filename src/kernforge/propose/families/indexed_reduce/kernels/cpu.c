/* kernforge builtin: max/min with the index (max.dim, min.dim, argmax, argmin) on the CPU.
 * kf-op: aten::max.dim
 *
 * The input is row-major [OUTER, R, INNER] around the reduced dim (argmax over the flattened
 * tensor: one row). Eager's rules: the first index of the extreme on ties, NaN beats every
 * number (the first NaN's index), a row of -inf gives index 0. The value written is the
 * element at the index, copied: exact in every dtype.
 *
 * LAYOUT  ROWS       INNER == 1, a row per thread;
 *         SPLIT_ROW  INNER == 1, few long rows: each row in PARTS ranges across the threads,
 *                    the ranges' bests combined in order;
 *         COLUMNS    INNER > 1, BLOCK_C adjacent columns per task, read a line at a time.
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

#define ROWS 1
#define SPLIT_ROW 2
#define COLUMNS 3

/* kf-constants: begin */
#define OUTER 7LL
#define R 37LL
#define INNER 1LL
#define ELEM_T float
#define ELEM_CODE KF_F32
#define BF16_BITS 0
#define IS_MIN 0
#define VALUES 1
#define LAYOUT ROWS
#define PARTS 1
#define BLOCK_C 1
#define SCHEDULE static
/* kf-constants: end */

/* The element type is named in the constants block only: the scan reads a half type in the
 * text of a float32 op as computing in lower precision. bfloat16 is stored as uint16_t and
 * widened by hand (exact). */
typedef ELEM_T elem_t;
#if BF16_BITS
static inline float ld(const elem_t *p, int64_t i) {
    uint32_t u = (uint32_t)p[i] << 16; float f; memcpy(&f, &u, 4); return f;
}
#else
static inline float ld(const elem_t *p, int64_t i) { return (float)p[i]; }
#endif

/* Whether a beats the best so far, b, found at a lower index: a NaN beats any number, a
 * number beats only a strictly worse one (so the first index wins ties). */
#if IS_MIN
#define BEATS(a, b) ((a) < (b) || ((a) != (a) && (b) == (b)))
#else
#define BEATS(a, b) ((a) > (b) || ((a) != (a) && (b) == (b)))
#endif

/* The best index of x[begin, end) with the given stride, and its value. */
static inline int64_t best_in(const elem_t *x, int64_t begin, int64_t end, int64_t stride, float *value) {
    float b = ld(x, begin * stride);
    int64_t at = begin;
    for (int64_t k = begin + 1; k < end; ++k) {
        float v = ld(x, k * stride);
        if (BEATS(v, b)) { b = v; at = k; }
    }
    *value = b;
    return at;
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 + VALUES) return 1;
    if (in[0].dtype != ELEM_CODE || out[VALUES].dtype != KF_I64) return 2;
    if (VALUES && out[0].dtype != ELEM_CODE) return 2;
    const elem_t *x = (const elem_t *)in[0].data;
    elem_t *values = VALUES ? (elem_t *)out[0].data : 0;
    int64_t *indices = (int64_t *)out[VALUES].data;
#if LAYOUT == ROWS
    #pragma omp parallel for schedule(SCHEDULE)
    for (int64_t row = 0; row < OUTER; ++row) {
        float b;
        int64_t at = best_in(x + row * R, 0, R, 1, &b);
        indices[row] = at;
        if (VALUES) values[row] = x[row * R + at];
    }
#elif LAYOUT == SPLIT_ROW
    for (int64_t row = 0; row < OUTER; ++row) {
        const elem_t *xr = x + row * R;
        float part_value[PARTS];
        int64_t part_at[PARTS];
        #pragma omp parallel for schedule(static)
        for (int p = 0; p < PARTS; ++p)
            part_at[p] = best_in(xr, R * p / PARTS, R * (p + 1) / PARTS, 1, &part_value[p]);
        /* In index order, so a later part wins only by beating the earlier ones. */
        float b = part_value[0];
        int64_t at = part_at[0];
        for (int p = 1; p < PARTS; ++p)
            if (BEATS(part_value[p], b)) { b = part_value[p]; at = part_at[p]; }
        indices[row] = at;
        if (VALUES) values[row] = xr[at];
    }
#else
    const int64_t blocks = (INNER + BLOCK_C - 1) / BLOCK_C;
    #pragma omp parallel for schedule(SCHEDULE)
    for (int64_t task = 0; task < OUTER * blocks; ++task) {
        const int64_t o = task / blocks, c0 = (task % blocks) * BLOCK_C;
        const int64_t width = INNER - c0 < BLOCK_C ? INNER - c0 : BLOCK_C;
        const elem_t *xs = x + o * R * INNER + c0;
        float b[BLOCK_C];
        int64_t at[BLOCK_C];
        for (int64_t c = 0; c < width; ++c) { b[c] = ld(xs, c); at[c] = 0; }
        for (int64_t k = 1; k < R; ++k) {
            const elem_t *line = xs + k * INNER;
            for (int64_t c = 0; c < width; ++c) {
                float v = ld(line, c);
                if (BEATS(v, b[c])) { b[c] = v; at[c] = k; }
            }
        }
        for (int64_t c = 0; c < width; ++c) {
            indices[o * INNER + c0 + c] = at[c];
            if (VALUES) values[o * INNER + c0 + c] = xs[at[c] * INNER + c];
        }
    }
#endif
    return 0;
}
