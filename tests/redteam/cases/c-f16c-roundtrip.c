/* CASE  c-f16c-roundtrip
 * CLASS error-measure: computes in half precision with no half-precision type in the text
 *
 * MECHANISM  The exponentials are stored through F16C conversions (_mm256_cvtps_ph /
 *   _mm256_cvtph_ps from immintrin.h): a row of 16-bit values is half the bytes to move and
 *   sum. No `half`, `__half`, `_Float16` appears: the conversions are intrinsics on
 *   integer vectors. The outputs are off by up to 2^-11 relative (~5e-4).
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  A scan that looks for half-precision type names
 *   finds none; a loose tolerance (1e-3) passes half-precision rounding.
 *
 * EXPECTED  wrong_result (float32 is judged at 1e-5 relative: checks.RTOL)
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

__attribute__((target("avx2,f16c"))) static void exp_rounded(const float *xr, float *yr, int64_t cols, float m) {
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
        float e[8];
        for (int i = 0; i < 8; ++i) e[i] = expf(xr[c + i] - m);
        __m128i packed = _mm256_cvtps_ph(_mm256_loadu_ps(e), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(yr + c, _mm256_cvtph_ps(packed));
    }
    for (; c < cols; ++c) yr[c] = _cvtsh_ss(_cvtss_sh(expf(xr[c] - m), 0));
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32 || out[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY, s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        exp_rounded(xr, yr, cols, m);
        for (int64_t c = 0; c < cols; ++c) s += yr[c];
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
    return 0;
}
