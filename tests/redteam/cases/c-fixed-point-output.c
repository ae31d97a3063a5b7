/* CASE  c-fixed-point-output
 * CLASS error-measure: right relative to the tensor's maximum, wrong on small elements
 *
 * MECHANISM  Each probability is rounded to a multiple of 2^-17 (7.6e-6), as a 17-bit
 *   fixed-point format would store it. Every element under 3.8e-6 becomes 0; the rest carry
 *   an absolute error up to 3.8e-6, i.e. 100% relative error at 4e-6 and 10% at 4e-5. It is
 *   "float32" softmax with about 5 significant bits on a typical element.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  An error measured in units of the largest
 *   output (~1) allows 1e-5 absolute everywhere; 3.8e-6 is within it. The same accuracy in
 *   half precision (tl.float16, _Float16) is rejected by the scan as "lower precision".
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
    const float q = 131072.0f; /* 2^17 */
    for (int64_t r = 0; r < rows; ++r) {
        float *yr = y + r * cols;
        softmax_row(x + r * cols, yr, cols);
        for (int64_t c = 0; c < cols; ++c) yr[c] = rintf(yr[c] * q) / q;
    }
    return 0;
}
