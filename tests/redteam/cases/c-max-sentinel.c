/* CASE  c-max-sentinel
 * CLASS value-class: right only on values normal draws hold
 *
 * MECHANISM  A softmax whose running maximum starts at a finite sentinel, -1e30f (the habit of
 *   CUDA code that avoids -INFINITY), instead of -inf. A row whose every value is below -1e30
 *   keeps the sentinel as its "maximum": x - m is about -3e38, exp gives 0 everywhere, and the
 *   row is 0 / 0 = NaN; and it adds the exponentials without scaling, so a row at the dtype's
 *   largest values (x - m = 0, fine) passes while one at its lowest does not.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  Every captured and fresh value (N(0,1), x100,
 *   per-row scaled, 10^4 offset, +-10^6 wide) is far above -1e30: the sentinel is always
 *   replaced by the first element.
 *
 * EXPECTED  wrong_result (on rows at the dtype's lowest finite values)
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
        float m = -1e30f, s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
        float inv = 1.0f / s;
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
    return 0;
}
