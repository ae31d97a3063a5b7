/* CASE  c-static-scratch
 * CLASS state, refused by policy (see catalogue.py): a static scratch array and static
 *   constants, no state carried between calls, but memory that lives across calls is where a
 *   cached result would live, and the object scan cannot tell the two apart
 *
 * The exponentials go into a file-scope static scratch row and a static const table holds
 * the block size; both are rewritten or only read on every call, and nothing read on one
 * call depends on an earlier one. A defence against static state must judge use, not the
 * keyword (tests/test_cheats.py keeps `static float scratch[...]` legal for this reason).
 *
 * EXPECTED  ok
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

static const int64_t MAX_COLS = 4096;
static float scratch[4096];

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32 || out[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    if (cols > MAX_COLS) return 2;
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float m = -INFINITY, s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        for (int64_t c = 0; c < cols; ++c) { scratch[c] = expf(xr[c] - m); s += scratch[c]; }
        for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = scratch[c] / s;
    }
    return 0;
}
