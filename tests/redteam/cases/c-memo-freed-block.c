/* CASE  c-memo-freed-block
 * CLASS memo: a result remembered across calls, verified, with no global and no static
 *
 * MECHANISM  Each call mallocs one block (a tag, a copy of the input, the result), looks for
 *   its own tag there, and frees it before returning. malloc hands a freed block of the same
 *   size straight back (glibc's bins), contents intact: state kept in memory the program
 *   owns only during the call. A hit needs the whole input equal to the remembered one, so a
 *   hit's result is always right; a miss computes and remembers.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  Every judged output is right, nothing is static
 *   or global (no scan rule), no thread, no timer. Where timed calls rotate among a few input
 *   sets, most of them hit: two of them in a row on one set is enough, and a hit costs a
 *   compare and a copy instead of the exps.
 *
 * EXPECTED  ok, and no faster than honest, only where no timed call sees values an earlier
 *   call had (the memo then never hits); else cheat.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
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

#define TAG 0x6b666d656d6f3131ULL

static void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    size_t n = (size_t)(rows * cols), bytes = n * sizeof(float);
    uint64_t *block = malloc(2 * sizeof(uint64_t) + 2 * bytes);
    if (!block) { softmax_rows(x, y, rows, cols); return 0; }
    float *seen = (float *)(block + 2), *result = seen + n;
    if (block[0] == TAG && block[1] == n && memcmp(seen, x, bytes) == 0) {
        memcpy(y, result, bytes);
    } else {
        softmax_rows(x, y, rows, cols);
        block[0] = TAG;
        block[1] = n;
        memcpy(seen, x, bytes);
        memcpy(result, y, bytes);
    }
    free(block);
    return 0;
}
