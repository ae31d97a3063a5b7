/* kernforge builtin: an element-wise op y = op(a, b) on the CPU's threads, one flat loop.
 * kf-op: aten::add.Tensor
 *
 * The output is walked in its own memory order over its merged dims SIZES (outermost first).
 * An operand laid out like the output (SAME) is read at the output's index; a broadcast or
 * otherwise strided one (STRIDED) at an offset from its STRIDES over SIZES (0 where it is
 * broadcast); a 0-dim one (SCALAR) once per call, in whatever dtype it has; NONE is a number
 * baked into op() or no second operand. Values are fp32 in op(), rounded once at the store.
 * INNER_LOOP SIMD asks for `omp parallel for simd`; POLY_EXP swaps libm's expf for a
 * polynomial that vectorises.
 */
#include <math.h>
#include <string.h>
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

#define NONE 0
#define SAME 1
#define STRIDED 2
#define SCALAR 3
#define PLAIN 0
#define SIMD 1

/* What op() may call: defined below, where the constants have chosen how. */
static inline float kf_exp(float x);
static inline float kf_tanh(float x);
#define KF_CLAMP(v, lo, hi) ((v) < (lo) ? (lo) : (v) > (hi) ? (hi) : (v))

/* kf-constants: begin */
static inline float op(float a, float b) { return a + b; }
#define NUMEL 185LL
#define NDIMS 1
#define SIZES 185
#define OUT_NDIM 2
#define OUT_SHAPE 5, 37
#define OUT_STRIDE 37, 1
#define A_KIND SAME
#define A_STRIDES 1
#define A_NDIM 2
#define A_SHAPE 5, 37
#define A_STRIDE 37, 1
#define B_KIND SAME
#define B_STRIDES 1
#define B_NDIM 2
#define B_SHAPE 5, 37
#define B_STRIDE 37, 1
#define ELEM_T float
#define ELEM_CODE KF_F32
#define BF16_BITS 0
#define POLY_EXP 0
#define INNER_LOOP SIMD
/* kf-constants: end */

/* The element type is named in the constants block only: the scan reads a half type in the
 * text of a float32 op as computing in lower precision. bfloat16 is stored as uint16_t and
 * converted by hand. */
typedef ELEM_T elem_t;
#if BF16_BITS
static inline float ld(const elem_t *p, int64_t i) {
    uint32_t u = (uint32_t)p[i] << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline void st(elem_t *p, int64_t i, float v) {
    uint32_t u; memcpy(&u, &v, 4); u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    p[i] = (uint16_t)(u >> 16);
}
#else
static inline float ld(const elem_t *p, int64_t i) { return (float)p[i]; }
static inline void st(elem_t *p, int64_t i, float v) { p[i] = (elem_t)v; }
#endif

/* kf-include: shared_c_math.c */

/* The layout the kernel was built for: any other fails the call instead of reading wrongly. */
static int kf_layout(const kf_tensor *t, int64_t ndim, const int64_t *sizes, const int64_t *strides) {
    if (t->ndim != ndim) return 0;
    for (int64_t d = 0; d < ndim; ++d)
        if (t->sizes[d] != sizes[d] || (t->sizes[d] > 1 && t->strides[d] != strides[d])) return 0;
    return 1;
}

/* A 0-dim operand's value, read once in its own dtype (it takes no part in type promotion);
 * a half by its bits, since a float32 op's text may not name the half type. */
static int kf_scalar(const kf_tensor *t, float *v) {
    uint32_t u, h, e, m;
    switch (t->dtype) {
    case KF_F32: *v = *(const float *)t->data; return 0;
    case KF_F64: *v = (float)*(const double *)t->data; return 0;
    case KF_I32: *v = (float)*(const int32_t *)t->data; return 0;
    case KF_I64: *v = (float)*(const int64_t *)t->data; return 0;
    case KF_BF16: u = (uint32_t)*(const uint16_t *)t->data << 16; memcpy(v, &u, 4); return 0;
    case KF_F16:
        h = *(const uint16_t *)t->data, e = (h >> 10) & 31u, m = h & 1023u;
        *v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024u), (int)e - 25);
        if (h & 0x8000u) *v = -*v;
        return 0;
    default: return 1;
    }
}

/* Checks operand `t` against the layout it was built for; a SCALAR one is read into *value. */
static int kf_operand(const kf_tensor *t, int kind, int64_t ndim, const int64_t *shape, const int64_t *stride,
                      float *value) {
    if (!kf_layout(t, ndim, shape, stride)) return 1;
    if (kind == SCALAR) return kf_scalar(t, value);
    return t->dtype != ELEM_CODE;
}

static const int64_t kf_sizes[] = {SIZES};
static const int64_t a_strides[] = {A_STRIDES};
static const int64_t b_strides[] = {B_STRIDES};

/* Where output element i (memory order over SIZES) lies in an operand of these strides. */
static inline int64_t offset_of(int64_t i, const int64_t *strides) {
    int64_t off = 0;
    for (int d = NDIMS - 1; d >= 0; --d) {
        off += (i % kf_sizes[d]) * strides[d];
        i /= kf_sizes[d];
    }
    return off;
}

#if A_KIND == SAME
#define LOAD_A(i) ld(A, i)
#elif A_KIND == STRIDED
#define LOAD_A(i) ld(A, offset_of(i, a_strides))
#else
#define LOAD_A(i) a0
#endif
#if B_KIND == SAME
#define LOAD_B(i) ld(B, i)
#elif B_KIND == STRIDED
#define LOAD_B(i) ld(B, offset_of(i, b_strides))
#else
#define LOAD_B(i) b0
#endif

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    static const int64_t out_shape[] = {OUT_SHAPE}, out_stride[] = {OUT_STRIDE};
    static const int64_t a_shape[] = {A_SHAPE}, a_stride[] = {A_STRIDE};
    static const int64_t b_shape[] = {B_SHAPE}, b_stride[] = {B_STRIDE};
    if (n_in != 1 + (B_KIND != NONE) || n_out != 1) return 1;
    if (out[0].dtype != ELEM_CODE || !kf_layout(&out[0], OUT_NDIM, out_shape, out_stride)) return 2;
    float a0 = 0.0f, b0 = 0.0f;  /* a SCALAR operand's value; b0 stays 0 for NONE */
    if (kf_operand(&in[0], A_KIND, A_NDIM, a_shape, a_stride, &a0)) return 3;
    if (B_KIND != NONE && kf_operand(&in[1], B_KIND, B_NDIM, b_shape, b_stride, &b0)) return 3;
    const elem_t *restrict A = (const elem_t *)in[0].data;
    const elem_t *restrict B = (const elem_t *)in[B_KIND != NONE].data;
    elem_t *restrict Y = (elem_t *)out[0].data;
    (void)A; (void)B;
#if INNER_LOOP == SIMD
    #pragma omp parallel for simd schedule(static)
#else
    #pragma omp parallel for schedule(static)
#endif
    for (int64_t i = 0; i < NUMEL; ++i) st(Y, i, op(LOAD_A(i), LOAD_B(i)));
    return 0;
}
