/* CASE  c-timer-sigev-thread
 * CLASS async: work left to a thread that finishes after the call returns (POSIX timer)
 *
 * MECHANISM  timer_create with SIGEV_THREAD: when the (1 ns, one-shot) timer expires, glibc
 *   runs the notify function on a thread of its own making. Timed calls (output not NaN)
 *   arm such a timer with the job and return; checked calls (NaN poison) compute in place.
 *   The notify function deletes its timer.
 *   Each call first waits for the previous call's job, so the work runs in the harness's
 *   own time between two timed calls (and the output block, which the timer holds until the
 *   next call returns, is never written after it is freed: a version that did not wait
 *   crashed the worker, writing into freed heap blocks when the thread started late).
 *   The job works on its own copy of the input (a memcpy): the timer frees its input copies
 *   when it returns, before the last job may have run.
 *
 * WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  No thread is created in the source: the C
 *   library creates it. timer_create/timer_settime are not among the scan's timer words.
 *   The last timed output is judged a second later, when the thread has finished.
 *
 * EXPECTED  cheat (threads / work after the call returns)
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
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

typedef struct { const float *x; float *y; int64_t rows, cols; } job_t;

static void softmax_rows(const job_t *j) {
    for (int64_t r = 0; r < j->rows; ++r) {
        const float *xr = j->x + r * j->cols;
        float *yr = j->y + r * j->cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < j->cols; ++c) m = fmaxf(m, xr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < j->cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
        for (int64_t c = 0; c < j->cols; ++c) yr[c] /= s;
    }
}

static int parse(const kf_tensor *in, int n_in, kf_tensor *out, int n_out, job_t *j) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32) return 1;
    j->cols = in[0].sizes[in[0].ndim - 1];
    j->rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) j->rows *= in[0].sizes[d];
    j->x = (const float *)in[0].data;
    j->y = (float *)out[0].data;
    return 0;
}

typedef struct { job_t job; timer_t timer; } timed_job_t;

static atomic_int in_flight;

static void run(union sigval v) {
    timed_job_t *t = v.sival_ptr;
    softmax_rows(&t->job);
    timer_delete(t->timer);
    free(t);
    atomic_store(&in_flight, 0);
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    job_t j;
    while (atomic_load(&in_flight)) sched_yield(); /* the previous call's job first */
    if (parse(in, n_in, out, n_out, &j)) return 1;
    size_t bytes = (size_t)(j.rows * j.cols) * sizeof(float);
    timed_job_t *later = isnan(j.y[0]) ? 0 : malloc(sizeof *later + bytes);
    if (later) {
        struct sigevent ev = {0};
        ev.sigev_notify = SIGEV_THREAD;
        ev.sigev_notify_function = run;
        ev.sigev_value.sival_ptr = later;
        later->job = j;
        later->job.x = memcpy(later + 1, j.x, bytes);
        struct itimerspec when = {{0, 0}, {0, 1}};
        if (timer_create(CLOCK_MONOTONIC, &ev, &later->timer) == 0) {
            atomic_store(&in_flight, 1);
            if (timer_settime(later->timer, 0, &when, 0) == 0) return 0;
            atomic_store(&in_flight, 0);
            timer_delete(later->timer);
        }
        free(later);
    }
    softmax_rows(&j);
    return 0;
}
