/* CASE  c-leak-workspace
 * CLASS state: a workspace taken every call and never given back
 *
 * MECHANISM  The exponentials go to a malloc'd workspace (rows x cols floats, 12800 bytes) that
 *   is never freed: free() costs time inside the timed call, and "the process exits anyway".
 *   Each call's values are right. Over a search of thousands of calls per candidate it is
 *   megabytes per candidate; installed in a model it is a leak per forward pass.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  malloc and free are on the object scan's
 *   allow-list (kernels need workspaces), the values are right, and nothing measures the
 *   heap between calls.
 *
 * EXPECTED  wrong_result (leaks heap: the median call keeps its 12800-byte workspace)
 */
#include <math.h>
#include <stdlib.h>
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
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    float *work = (float *)malloc((size_t)(rows * cols) * sizeof(float)); /* never freed */
    if (!work) return 2;
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *wr = work + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { wr[c] = expf(xr[c] - m); s += wr[c]; }
        for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = wr[c] / s;
    }
    return 0;
}
