/* CASE  c-flush-small
 * CLASS error-measure: every small element wrong (flushed to zero)
 *
 * MECHANISM  "exp() only where it matters": elements more than ln(1e6) = 13.8 below the row
 *   maximum are written as exactly 0 without computing exp. Every output element under
 *   1e-6 of its row's largest is 100% wrong (0 instead of up to 1e-6); on the large and mixed
 *   inputs that is most of the elements.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  The error is max|out - oracle| / max|oracle|
 *   over the whole tensor, and max|oracle| of a softmax is close to 1: an absolute error of
 *   1e-6 is 0.1 of the 1e-5 allowed. A consumer that takes log() of the probabilities (a
 *   cross-entropy, a KL term) gets -inf where the reference gives -14 to -100.
 *
 * EXPECTED  wrong_result (small elements wrong relative to themselves)
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

#define CUT (-13.815510558f) /* ln(1e-6) */

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) {
            float d = xr[c] - m;
            yr[c] = d < CUT ? 0.0f : expf(d);
            s += yr[c];
        }
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
    return 0;
}
