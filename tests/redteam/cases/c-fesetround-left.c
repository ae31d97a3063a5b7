/* CASE  c-fesetround-left
 * CLASS state: the rounding mode changed with fesetround and left changed
 *
 * MECHANISM  The first call sets FE_TOWARDZERO (fesetround from <fenv.h>) and never restores
 *   it; the softmax stays within tolerance, every later computation of the thread is
 *   truncated. The portable spelling of c-mxcsr-round-left.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  The values are right and nothing reads the FP
 *   state after a call.
 *
 * EXPECTED  cheat (refused by the scan: <fenv.h> is not a kernel's header; were it allowed,
 *   the guard's FP state check after each call)
 */
#include <math.h>
#include <fenv.h>
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

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32 || out[0].dtype != KF_F32) return 1;
    fesetround(FE_TOWARDZERO); /* never restored */
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
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
    return 0;
}
