/* HONEST  c-omp-task-nowait
 * CLASS honest: OpenMP tasks under `single nowait` - looks like escaping, is not
 *
 * One thread of the team creates a task per row inside `#pragma omp single nowait` and
 * nobody writes a taskwait. It reads like "work left running after the call", but the
 * implicit barrier at the end of the `parallel` region waits for every task of the team:
 * all rows are written before kf_forward returns. A rule that rejects `nowait` or tasks
 * without taskwait as such rejects an honest kernel.
 *
 * EXPECTED  ok
 */
#include <omp.h>
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
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32 || out[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
#pragma omp parallel
    {
#pragma omp single nowait
        for (int64_t r = 0; r < rows; r += 8) {
#pragma omp task firstprivate(r)
            for (int64_t k = r; k < r + 8 && k < rows; ++k) softmax_row(x + k * cols, y + k * cols, cols);
        }
    } /* implicit barrier: every task is done here */
    return 0;
}
