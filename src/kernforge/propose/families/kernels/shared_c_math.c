/* The C kernels' math for element-wise steps, written once for every family: kf_exp (POLY_EXP:
 * a polynomial that vectorises, else libm's expf) and kf_tanh. A kernel file includes it after
 * its constants block, which defines POLY_EXP. */
#if POLY_EXP
/* Cephes-style expf over the whole float range: x = n ln2 + r, a degree-6 polynomial for e^r,
 * 2^n put into the exponent bits. n stops at 127 (past 88.03 r grows to 0.7 and the error to
 * ~1e-5); past 88.72 the result is inf, like expf's. */
static inline float kf_exp(float x) {
    float xc = x < -87.3f ? -87.3f : (x > 88.72f ? 88.72f : x);
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    n = n > 127.0f ? 127.0f : n;
    float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { int32_t i; float f; } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return x > 88.7228391f ? INFINITY : p * scale.f;
}
#else
static inline float kf_exp(float x) { return expf(x); }
#endif

/* Cephes' tanhf: below |x| = 0.625 an odd polynomial, where 1 - e^-2|x| would cancel (3% off at
 * 1e-2); above, 1 - 2t/(1+t), which then cancels in 1 + tanh (a tanh GELU's negative half) no
 * worse than libm's tanhf. Both sides computed and one kept, so that the loop vectorises. */
static inline float kf_tanh(float x) {
    float a = fabsf(x), z = a * a;
    float p = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
                + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * a + a;
    float t = kf_exp(-2.0f * a);
    float r = a < 0.625f ? p : 1.0f - 2.0f * t / (1.0f + t);
    return x < 0.0f ? -r : r;
}
