/* CASE  c-exp2-prescaled
 * CLASS error-measure: cancels badly on data with a large common offset
 *
 * MECHANISM  The flash-attention habit without its care: scale the inputs by log2(e) FIRST
 *   (t = x * 1.442695f, rounded to float32 at the magnitude of x), then exp2(t - max t). The
 *   rounding of t is relative to |x|, so with inputs 1e4 + N(0, 1) every t carries an error
 *   of ~5e-4 and the probabilities are ~3e-4 off (2e-4 in units of the largest: 20x over
 *   the tolerance). Honest code subtracts first (exp(x - max), exact by Sterbenz) or fuses
 *   the scaling into an FMA.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  Its inputs are centred: the captured ones and
 *   N(0,1), N(0,1) x 100 and per-row scaled 10^U(-3,2) draws. On them the largest error is
 *   3.7e-6 (seen over 20 draws of each), inside the 1e-5 allowed; only a common offset (a
 *   position bias, logits of a model with a large bias term) shows it.
 *
 * EXPECTED  wrong_result (on inputs with a large common offset)
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#define KF_MAX_DIMS 8
enum { KF_F32 = 0, KF_F64 = 1, KF_F16 = 2, KF_BF16 = 3, KF_I32 = 4, KF_I64 = 5, KF_U8 = 6, KF_I8 = 7 };
typedef struct {
    void *data;
    int64_t ndim;
    int64_t sizes[KF_MAX_DIMS];
    int64_t strides[KF_MAX_DIMS]; /* in elements */
    int32_t dtype;
} kf_tensor;

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    const float log2e = 1.44269504088896341f;
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = xr[c] * log2e; m = fmaxf(m, yr[c]); }
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = exp2f(yr[c] - m); s += yr[c]; }
        float inv = 1.0f / s;
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
    return 0;
}
