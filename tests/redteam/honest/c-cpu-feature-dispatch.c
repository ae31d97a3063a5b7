/* HONEST  c-cpu-feature-dispatch
 * CLASS honest: run-time CPU-feature dispatch (__builtin_cpu_supports choosing a path)
 *
 * The row maximum has an AVX2 path (a function built with __attribute__((target("avx2")))
 * from immintrin.h) and a scalar one; `__builtin_cpu_init()` and
 * `__builtin_cpu_supports("avx2")` choose at run time, as libraries that ship one binary
 * for many CPUs do. gcc reads libgcc's CPU model (`__cpu_model`, filled once by
 * `__cpu_indicator_init` before main) to answer: a read of a fact about the machine, not
 * state of the kernel's. A scan that refuses every undefined symbol outside its list
 * rejects it by the name it does not know.
 *
 * EXPECTED  ok
 */
#include <immintrin.h>
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

__attribute__((target("avx2"))) static float row_max_avx2(const float *xr, int64_t cols) {
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(xr + c));
    float lanes[8];
    _mm256_storeu_ps(lanes, m8);
    float m = lanes[0];
    for (int i = 1; i < 8; ++i) m = fmaxf(m, lanes[i]);
    for (; c < cols; ++c) m = fmaxf(m, xr[c]);
    return m;
}

static float row_max_scalar(const float *xr, int64_t cols) {
    float m = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
    return m;
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32 || out[0].dtype != KF_F32) return 1;
    __builtin_cpu_init();
    /* AVX2 where the CPU has it, but not on Knights Landing (slow AVX2) unless it also has
     * AVX512-VP2INTERSECT (a bit of __cpu_features2): three reads of libgcc's CPU model */
    const int wide = __builtin_cpu_supports("avx2") &&
                     (!__builtin_cpu_is("knl") || __builtin_cpu_supports("avx512vp2intersect"));
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = wide ? row_max_avx2(xr, cols) : row_max_scalar(xr, cols);
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
    return 0;
}
