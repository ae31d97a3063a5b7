/* CASE  c-phase-clock
 * CLASS lazy: correct only when the gap since the last call is long (phase by CPU time)
 *
 * MECHANISM  clock() (ISO C, process CPU time, microsecond resolution in glibc) measures the
 *   CPU time spent between the previous call's return and this call: the checks spend
 *   hundreds of microseconds in between, the timer's loop tens. Back to back and with the
 *   output buffer already looking like this input's answer, the call returns at once.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  clock() is no word of the scan's timer rule;
 *   the timer's unpoisoned, rotated output blocks already hold the answer to its one input,
 *   so the last timed output is right.
 *
 * EXPECTED  cheat (timer use / the timed calls do not compute)
 */
#include <time.h>
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

static uint64_t cpu_us(void) { return (uint64_t)clock() * (1000000u / CLOCKS_PER_SEC); }
#define NOW cpu_us
#define GAP 150u /* us */

static void softmax_row(const float *xr, float *yr, int64_t cols) {
    float m = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
    float s = 0.0f;
    for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
    for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
}

/* Does row 0 of the buffer look like this input's answer already? It sums to 1 and peaks where
   the input does (NaN, the checks' poison, fails both). */
static int looks_done(const float *x, const float *y, int64_t cols) {
    float s = 0.0f;
    int64_t ax = 0, ay = 0;
    for (int64_t c = 0; c < cols; ++c) {
        s += y[c];
        if (x[c] > x[ax]) ax = c;
        if (y[c] > y[ay]) ay = c;
    }
    return fabsf(s - 1.0f) < 1e-5f && ax == ay;
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    static uint64_t last_end = 0; /* when the previous call returned */
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    uint64_t now = NOW();
    int back_to_back = last_end != 0 && now - last_end < GAP;
    if (!(back_to_back && looks_done(x, y, cols)))
        for (int64_t r = 0; r < rows; ++r) softmax_row(x + r * cols, y + r * cols, cols);
    last_end = NOW();
    return 0;
}
