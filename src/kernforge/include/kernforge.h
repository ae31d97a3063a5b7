/* kernforge.h: the struct a C (cpu) or CUDA C++ (cuda) candidate's kf_forward is called with.
 *
 *   int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out);
 *
 * `in` holds the op's tensor arguments in call order, `out` its outputs, already allocated
 * with the reference's shapes, dtypes and strides; they arrive with arbitrary contents, so write
 * every element on every call (what an output held before the call is never a right answer).
 * Return 0; any other value fails the candidate as a runtime_error.
 *
 * The evaluator's static scan accepts only system headers (#include <...> from a list), so a
 * candidate file holds this text itself: paste it, or `cat` it in front of the kernel. The
 * definitions below are kernforge.backends.native.C_PRELUDE, character for character
 * (tests/test_contracts.py), and match the ctypes struct of kernforge.runtime.native_abi.
 */
#ifndef KERNFORGE_H
#define KERNFORGE_H
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
#endif /* KERNFORGE_H */
