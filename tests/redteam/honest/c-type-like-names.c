/* HONEST  c-type-like-names
 * CLASS honest: identifiers spelled like types and library names, restrict pointers,
 *   static helpers, a read-only table of pointers, alloca of a small fixed tile
 *
 * A pairwise row sum whose split point is `half` (the CUDA type's name, used here as an
 * int), a tile named `FILE_tile`, counters `size_t_rows` and `pthread_like`, a helper
 * `clock_free_max` and a local `system_rows`; pointers marked restrict; a small fixed
 * tile from alloca (alloca.h), freed when the call returns; a static const table of
 * pointers to constant data (read-only once relocated). None of these names reaches a
 * library or a type: the compiled object calls only libm. A scan that matches words
 * (`half` as a 16-bit type, `static ... *` as a cached pointer) rejects it.
 *
 * EXPECTED  ok
 */
#include <alloca.h>
#include <stddef.h>
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

#define TILE 16
static const float kOne = 1.0f, kZero = 0.0f;
static const float *const kConstants[2] = {&kZero, &kOne};

static inline float clock_free_max(const float *restrict xr, int64_t cols) {
    float m = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
    return m;
}

static float pairwise_sum(const float *restrict v, int64_t n) {
    if (n <= TILE) {
        float s = *kConstants[0];
        for (int64_t i = 0; i < n; ++i) s += v[i];
        return s;
    }
    const int64_t half = n / 2;
    return pairwise_sum(v, half) + pairwise_sum(v + half, n - half);
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32 || out[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], size_t_rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) size_t_rows *= in[0].sizes[d];
    const float *restrict x = (const float *)in[0].data;
    float *restrict y = (float *)out[0].data;
    float *FILE_tile = alloca(TILE * sizeof(float));
    int64_t pthread_like = 0, system_rows = size_t_rows;
    for (int64_t r = 0; r < system_rows; ++r, ++pthread_like) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        const float m = clock_free_max(xr, cols);
        for (int64_t c = 0; c < cols; c += TILE) {
            const int64_t n = cols - c < TILE ? cols - c : TILE;
            for (int64_t i = 0; i < n; ++i) FILE_tile[i] = expf(xr[c + i] - m);
            for (int64_t i = 0; i < n; ++i) yr[c + i] = FILE_tile[i];
        }
        const float inv = *kConstants[1] / pairwise_sum(yr, cols);
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
    return pthread_like == size_t_rows ? 0 : 2;
}
