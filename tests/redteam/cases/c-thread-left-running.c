/* CASE  c-thread-left-running
 * CLASS async: a thread started by the first call and left running, no header for it
 *
 * MECHANISM  pthread_create declared by hand (no <pthread.h>, no extern: a plain prototype,
 *   which C treats as extern) and started on the first call; the thread spins, recomputing
 *   the last output in the background, and is never joined. Calls return at once after the
 *   first; the thread lives as long as the worker.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  A header list sees no <pthread.h>; a check for
 *   extern declarations sees none.
 *
 * EXPECTED  cheat (the scan's threads rule names pthread_create; the object scan refuses the
 *   symbol; at run time the thread count changed over a call, and a thread left running)
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

typedef struct { uint64_t opaque[8]; } thread_handle;
int pthread_create(thread_handle *thread, const void *attr, void *(*start)(void *), void *arg);

static volatile int started;

static void *spin(void *arg) {
    volatile float *sink = (volatile float *)arg;
    for (;;) *sink += 1.0f;
    return 0;
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
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
    if (!started) {
        static float sink;
        thread_handle t;
        started = 1;
        pthread_create(&t, 0, spin, &sink);
    }
    return 0;
}
