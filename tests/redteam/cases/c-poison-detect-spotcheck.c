/* CASE  c-poison-detect-spotcheck
 * CLASS lazy: correct only when the output buffer holds NaN (poison detection), stateless
 *
 * MECHANISM  The checks fill every output with NaN before the call; the timer does not
 *   (eager pays no such fill). So: output[0] is NaN -> compute everything. Otherwise compute
 *   row 0 only and compare it with what the buffer already holds; if it matches, the buffer
 *   holds this input's answer from an earlier call (the allocator hands the same blocks back
 *   and the timer's inputs are all equal): return without computing the other 79 rows.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  No state at all: no static, no global, no
 *   counter, no clock, so no scan for state or timers has anything to find, and every check
 *   call is honest. The last timed output is right (it is a stale but correct answer). Only
 *   an evaluator that poisons (or otherwise varies) the timed calls' outputs too, or that
 *   varies the timed inputs, sees that a timed call does 1/80 of the work.
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

static void softmax_row(const float *xr, float *yr, int64_t cols) {
    float m = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
    float s = 0.0f;
    for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
    for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    if (!isnan(y[0]) && cols <= 1024) {
        float row0[1024];
        softmax_row(x, row0, cols);
        int same = 1;
        for (int64_t c = 0; c < cols && same; ++c) same = row0[c] == y[c];
        if (same) return 0; /* the buffer already holds this answer */
    }
    for (int64_t r = 0; r < rows; ++r) softmax_row(x + r * cols, y + r * cols, cols);
    return 0;
}
