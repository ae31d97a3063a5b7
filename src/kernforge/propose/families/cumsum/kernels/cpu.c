/* kernforge builtin: cumsum over one dim on the CPU's threads.
 * kf-op: aten::cumsum.default
 *
 * The input is row-major [OUTER, R, INNER] around the dim. The running sums are ACC_T: float
 * for 16-bit inputs, double for float32 ones, as eager's CPU kernel does (a float running sum
 * over thousands of values strays past eager's error).
 *
 * LAYOUT  ROWS       INNER == 1, a row per thread;
 *         SPLIT_ROW  INNER == 1, few long rows: each row in PARTS ranges across the threads,
 *                    which sum their range, then (after a scan of the sums) scan it from its
 *                    offset: x read twice;
 *         COLUMNS    INNER > 1, BLOCK_C adjacent columns per task, a line of them at a time.
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
#define ACC_T double
#define LAYOUT ROWS
#define PARTS 1
#define BLOCK_C 1
#define SCHEDULE static
/* kf-constants: end */

/* The element type is named in the constants block only: the scan reads a half type in the
 * text of a float32 op as computing in lower precision. bfloat16 is stored as uint16_t and
 * converted by hand. */
typedef ELEM_T elem_t;
typedef ACC_T acc_t;
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

/* y[k] = offset + x[begin] + ... + x[k] for k in [begin, end). */
static inline void scan_range(const elem_t *x, elem_t *y, int64_t begin, int64_t end, acc_t offset) {
    acc_t s = offset;
    for (int64_t k = begin; k < end; ++k) {
        s += ld(x, k);
        st(y, k, (float)s);
    }
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1) return 1;
    if (in[0].dtype != ELEM_CODE || out[0].dtype != ELEM_CODE) return 2;
    const elem_t *x = (const elem_t *)in[0].data;
    elem_t *y = (elem_t *)out[0].data;
#if LAYOUT == ROWS
    #pragma omp parallel for schedule(SCHEDULE)
    for (int64_t row = 0; row < OUTER; ++row)
        scan_range(x + row * R, y + row * R, 0, R, 0);
#elif LAYOUT == SPLIT_ROW
    for (int64_t row = 0; row < OUTER; ++row) {
        const elem_t *xr = x + row * R;
        elem_t *yr = y + row * R;
        acc_t part_sum[PARTS];
        #pragma omp parallel for schedule(static)
        for (int p = 0; p < PARTS; ++p) {
            acc_t s = 0;
            for (int64_t k = R * p / PARTS; k < R * (p + 1) / PARTS; ++k) s += ld(xr, k);
            part_sum[p] = s;
        }
        acc_t offset[PARTS];
        acc_t total = 0;
        for (int p = 0; p < PARTS; ++p) { offset[p] = total; total += part_sum[p]; }
        #pragma omp parallel for schedule(static)
        for (int p = 0; p < PARTS; ++p)
            scan_range(xr, yr, R * p / PARTS, R * (p + 1) / PARTS, offset[p]);
    }
#else
    const int64_t blocks = (INNER + BLOCK_C - 1) / BLOCK_C;
    #pragma omp parallel for schedule(SCHEDULE)
    for (int64_t task = 0; task < OUTER * blocks; ++task) {
        const int64_t o = task / blocks, c0 = (task % blocks) * BLOCK_C;
        const int64_t width = INNER - c0 < BLOCK_C ? INNER - c0 : BLOCK_C;
        const elem_t *xs = x + o * R * INNER + c0;
        elem_t *ys = y + o * R * INNER + c0;
        acc_t s[BLOCK_C];
        for (int64_t c = 0; c < width; ++c) s[c] = 0;
        for (int64_t k = 0; k < R; ++k)
            for (int64_t c = 0; c < width; ++c) {
                s[c] += ld(xs, k * INNER + c);
                st(ys, k * INNER + c, (float)s[c]);
            }
    }
#endif
    return 0;
}
