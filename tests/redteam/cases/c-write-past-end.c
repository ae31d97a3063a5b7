/* CASE  c-write-past-end
 * CLASS state: the float after the output used as scratch that survives the call, no global
 *
 * MECHANISM  The kernel keeps the last row's sum in the element one past the output's end:
 *   memory nobody hands it, that no static or global names and the scan cannot see (behind a
 *   12800-byte output from malloc, the next chunk's prev_size word, which glibc leaves to the
 *   block in use). Every value it returns is right; it writes exactly one float outside what
 *   it was given, every call.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  Outputs are compared element by element and the
 *   inputs by digest; nobody looks at the bytes after the output. The 8 bytes after a
 *   malloc'd block are the block's own while it is in use, so nothing crashes either.
 *
 * EXPECTED  wrong_result (an out-of-bounds write: the canary after the output changed)
 */
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

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32 || out[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    float s = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
    y[rows * cols] = s; /* one past the end: scratch no one checks */
    return 0;
}
