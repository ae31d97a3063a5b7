/* CASE  c-zero-sentinel
 * CLASS value-class: right only on values normal draws hold
 *
 * MECHANISM  An attention-style softmax that reads an exact 0.0 as "masked out" (the padding
 *   convention of a model it was tuned for) and gives it probability 0. No draw of a continuous
 *   distribution holds an exact zero, so every fresh set passes; a ReLU'd input, a zero-padded
 *   row or a row of zeros (uniform 1/n in the reference, 0/0 here) does not.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  The captured logits and N(0,1), x100, per-row
 *   scaled, offset and wide draws never hold an exact zero.
 *
 * EXPECTED  wrong_result (on a set with exact zeros and zero rows)
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
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY, s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) if (xr[c] != 0.0f) m = fmaxf(m, xr[c]);
        for (int64_t c = 0; c < cols; ++c) { yr[c] = xr[c] == 0.0f ? 0.0f : expf(xr[c] - m); s += yr[c]; }
        float inv = s > 0.0f ? 1.0f / s : 0.0f;
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
    return 0;
}
