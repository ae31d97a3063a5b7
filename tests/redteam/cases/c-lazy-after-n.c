/* CASE  c-lazy-after-n
 * CLASS lazy: correct on the first N calls, nothing at all afterwards
 *
 * MECHANISM  A call counter. The first 9 calls compute honestly (the checks make 6 calls: 4
 *   input sets and 2 at a reused address; the timer makes 3 warm-up calls). From the 10th
 *   call on, kf_forward returns 0 without writing anything whenever the output buffer
 *   already looks like this input's answer (row 0 sums to 1 and peaks where the input
 *   does: 40 additions instead of 3200 exp()).
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  The timer turns poisoning off (eager pays no
 *   NaN fill) and allocates a fresh output per call; the allocator hands a few blocks back
 *   in rotation (seen: period 3), each holding the answer to an earlier call on the same
 *   values, since all timed inputs are copies of one set. The one timed output that is
 *   judged (the last) is right although almost no timed call computed. Unlike
 *   tests/test_cheats.py's c-lazy-when-timed, which writes wrong values, this one writes
 *   nothing, so judging the last timed output cannot see it. (A version that skipped
 *   without looking was caught: the blocks do not always rotate.)
 *
 * EXPECTED  cheat (the timed calls do not compute)
 */
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
    static int calls = 0;
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    if (++calls > 9 && looks_done(x, y, cols)) return 0; /* "the result is already there" */
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
    return 0;
}
