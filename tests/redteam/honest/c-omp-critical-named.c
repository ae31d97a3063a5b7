/* HONEST  c-omp-critical-named
 * CLASS honest: OpenMP named critical section, atomics, a max reduction and sections
 *
 * Rows split over an OpenMP team; each thread counts the rows it did under
 * `#pragma omp atomic`, folds its largest row maximum into a shared one with a max
 * reduction, and records the first bad dtype under a named critical section
 * (`#pragma omp critical(kf_status)`). gcc makes the name a lock word the OpenMP runtime
 * owns (a common symbol `.gomp_critical_user_kf_status`): not the kernel's state, no value
 * of the call survives in it. A scan that calls every writable symbol "global state"
 * rejects it; what the lock word can hold is decided by libgomp, not by the candidate.
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
    if (n_in != 1 || n_out != 1) return 1;
    int status = 0;
#pragma omp parallel sections
    {
#pragma omp section
        { if (in[0].dtype != KF_F32) {
#pragma omp critical(kf_status)
            status = status ? status : 2; } }
#pragma omp section
        { if (out[0].dtype != KF_F32) {
#pragma omp critical(kf_status)
            status = status ? status : 3; } }
    }
    if (status) return status;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    int64_t done = 0;
    float peak = -INFINITY;
#pragma omp parallel for schedule(static) reduction(max:peak)
    for (int64_t r = 0; r < rows; ++r) {
        softmax_row(x + r * cols, y + r * cols, cols);
        for (int64_t c = 0; c < cols; ++c) peak = fmaxf(peak, y[r * cols + c]);
#pragma omp atomic
        done += 1;
    }
    return done == rows && peak <= 1.0f ? 0 : 4;
}
