/* CASE  c-ties-shortcut
 * CLASS value-class: right only on values normal draws hold
 *
 * MECHANISM  A "constant row" fast path: if a row's first two elements are equal the row is
 *   taken as constant and written as 1/n without reading the rest (cheap on a masked or padded
 *   batch). A tie between two neighbours is a constant row only when every other element ties
 *   too; a row of five levels, or any row with equal first elements, comes out uniform and wrong.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  Two equal float32 values from a continuous draw
 *   have probability ~0: the captured logits and every fresh draw take the honest path.
 *
 * EXPECTED  wrong_result (on a set with ties)
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
        if (cols > 1 && xr[0] == xr[1]) {
            for (int64_t c = 0; c < cols; ++c) yr[c] = 1.0f / (float)cols;
            continue;
        }
        float m = -INFINITY, s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
        float inv = 1.0f / s;
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
    return 0;
}
