/* kf-op: aten::_softmax.default
 * softmax(x, dim=-1) over float32 rows of any layout; x is the op's only tensor argument
 * (dim and half_to_float are fixed for the task, so they are baked in here). */
#include <math.h>
#include <stdint.h>

/* Where row r of t starts, in elements: r spelled out over the leading dims, times their strides. */
static int64_t row_start(const kf_tensor *t, int64_t r) {
    int64_t offset = 0;
    for (int64_t d = t->ndim - 2; d >= 0; --d) {
        offset += (r % t->sizes[d]) * t->strides[d];
        r /= t->sizes[d];
    }
    return offset;
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1) return 1;
    const kf_tensor *x = &in[0], *y = &out[0];
    if (x->dtype != KF_F32 || y->dtype != KF_F32 || x->ndim < 1) return 2;
    int64_t last = x->ndim - 1, n = x->sizes[last], rows = 1;
    for (int64_t d = 0; d < last; ++d) rows *= x->sizes[d];
    int64_t xs = x->strides[last], ys = y->strides[last];
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = (const float *)x->data + row_start(x, r);
        float *yr = (float *)y->data + row_start(y, r);
        float m = -INFINITY;
        for (int64_t j = 0; j < n; ++j) m = fmaxf(m, xr[j * xs]);
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) { float e = expf(xr[j * xs] - m); yr[j * ys] = e; sum += e; }
        float scale = (float)(1.0 / sum);
        for (int64_t j = 0; j < n; ++j) yr[j * ys] *= scale;
    }
    return 0;
}
