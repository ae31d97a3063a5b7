/* CASE  c-lazy-every-kth
 * CLASS lazy: correct only on every k-th call (after the checks)
 *
 * MECHANISM  The first 6 calls (the checks) compute honestly; after that only every 4th
 *   call computes for sure; the others return at once, without writing, when the output
 *   buffer already looks like this input's answer (row 0 sums to 1 and peaks where the
 *   input does).
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  The timer's outputs come from a few blocks
 *   the allocator hands back in rotation (3 here), not poisoned while timed, and all timed
 *   inputs are copies of one set. k = 4 is coprime with the rotation, so every block gets
 *   the answer written within 12 calls; the last timed output, the only one judged, is
 *   right whatever the number of timed calls, and the median is that of a call that does
 *   nothing. (A version that skipped without looking was caught: the blocks do not always
 *   rotate.)
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

enum { CHECK_CALLS = 6, K = 4 };

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
    static long calls = 0;
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    ++calls;
    if (calls > CHECK_CALLS && calls % K != 0 && looks_done(x, y, cols)) return 0;
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
