"""Softmax and log-softmax over the last dimension, row by row:
    softmax      y = exp(x - max(x)) / sum(exp(x - max(x)))
    log-softmax  y = x - max(x) - log(sum(exp(x - max(x))))

Memory-bound: one read of x and one write of y is the floor (8 bytes per element
in fp32). The variants differ in how many times they re-read a row, where the
row lives between passes, and how rows map onto programs: many short rows
packed into one program, one row per program, or one long row split across
programs (when there are too few rows to fill the GPU).
"""

from __future__ import annotations

import math
from typing import Any

from kernforge.backends.native import C_PRELUDE
from kernforge.propose.builtin import Family
from kernforge.propose.templates.common import (
    C_LOAD_STORE,
    C_TYPES,
    SUPPORTED_DTYPES,
    c_simd_macro,
    contiguous_strides,
    gpu_sms,
    is_tensor,
    next_pow2,
)
from kernforge.tasks import KernelTask

MAX_CHUNKS = 1024  # split_row: the most chunks one row is split into


OPS = {"aten::_softmax.default": False, "aten::_log_softmax.default": True}  # op -> log


def match(task: KernelTask) -> dict[str, Any] | str:
    if task.op not in OPS:
        return f"no built-in template for {task.op}"
    x, dim, half_to_float = (task.args + [None, None, None])[:3]
    if not is_tensor(x):
        return "softmax without a tensor input"
    shape, stride = x["shape"], x["stride"]
    ndim = len(shape)
    if ndim == 0 or dim not in (-1, ndim - 1):
        return "softmax over a dimension other than the last has no built-in template yet"
    if half_to_float:
        return "softmax with half_to_float has no built-in template yet"
    if x["dtype"] not in SUPPORTED_DTYPES:
        return f"softmax on {x['dtype']} has no built-in template"
    if stride != contiguous_strides(shape):
        return "softmax on a non-contiguous input has no built-in template yet"
    cols = shape[-1]
    rows = math.prod(shape[:-1])
    return {"rows": rows, "cols": cols, "dtype": x["dtype"].replace("torch.", ""),
            "log": OPS[task.op], "op": task.op}


# ---------------------------------------------------------------- parameter space

def space(facts: dict[str, Any], backend: str) -> dict[str, list[Any]]:
    if backend == "cpu":
        return {
            "algorithm": ["store_exp", "recompute", "online"],
            "exp": ["libm", "poly"],
            "schedule": ["static", "dynamic"],
            "simd": [False, True],
        }
    if backend == "triton":
        return {
            "variant": ["single_tile", "online_loop", "split_row"],
            "rows_per_program": [1, 2, 4, 8, 16, 32, 64],
            "block_n": [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
            "num_warps": [1, 2, 4, 8, 16],
        }
    return {}


def initial(facts: dict[str, Any], backend: str) -> dict[str, Any]:
    if backend == "cpu":
        # The best guess measured on a Zen 4 CPU: exp() stored once, vectorised.
        store = "store_exp" if facts["dtype"] == "float32" and not facts["log"] else "recompute"
        return {"algorithm": store, "exp": "poly", "schedule": "static", "simd": True}
    rows, cols = facts["rows"], facts["cols"]
    whole_row = max(16, next_pow2(cols))
    if rows < 2 * gpu_sms() and cols >= 8192:
        # Too few rows to fill the SMs: split each row into chunks of 4096.
        return {"variant": "split_row", "rows_per_program": 1, "block_n": 4096, "num_warps": 8}
    if whole_row <= 8192:
        # Pack short rows up to ~4K values per program, but keep at least 4 programs per SM.
        packed = max(1, min(64, 4096 // whole_row))
        while packed > 1 and rows // packed < 4 * gpu_sms():
            packed //= 2
        tile = packed * whole_row
        return {"variant": "single_tile", "rows_per_program": packed, "block_n": whole_row,
                "num_warps": 4 if tile <= 2048 else 8}
    return {"variant": "online_loop", "rows_per_program": 1, "block_n": 4096, "num_warps": 8}


def valid(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> bool:
    if backend == "cpu":
        # store_exp keeps exp() in the output between passes: exact only when the output is fp32,
        # and only for softmax (log-softmax needs x again at the end).
        return params["algorithm"] != "store_exp" or (facts["dtype"] == "float32" and not facts["log"])
    cols, block, rpp = facts["cols"], params["block_n"], params["rows_per_program"]
    if params["variant"] == "single_tile":
        # A tile holds whole rows; past 16K fp32 values per program the registers spill.
        return block == max(16, next_pow2(cols)) and rpp * block <= 16384
    if rpp != 1 or block < 256:
        return False
    if params["variant"] == "online_loop":
        return block < cols * 2
    # split_row: at least two chunks per row, at most MAX_CHUNKS (their partials fit one tile).
    return cols > block and math.ceil(cols / block) <= MAX_CHUNKS


def explain(name: str, old: Any, new: Any) -> str:
    reasons = {
        "algorithm": {
            "store_exp": "three passes, exp() written to the output and scaled in place: exp once per element",
            "recompute": "exp() computed twice instead of re-reading a stored value: fewer writes",
            "online": "running max and sum in one pass: the row is read twice instead of three times",
        },
        "exp": {"libm": "the C library's expf: exact, but a call per element that does not vectorise",
                "poly": "a polynomial exp that the compiler vectorises; error near 1e-7"},
        "schedule": {"static": "equal row ranges per thread: no scheduling cost",
                     "dynamic": "threads take rows as they free up: better when cores are uneven"},
        "simd": {True: "ask the compiler to vectorise the inner loops",
                 False: "scalar inner loops: no vector reductions"},
        "variant": {"single_tile": "whole rows in registers: one read, one write",
                    "online_loop": "loop over the row in blocks with a running max: rows of any length",
                    "split_row": "each row split across programs (partial max and sum, then a combine): "
                                 "fills the GPU when there are few long rows"},
        "rows_per_program": {},
        "block_n": {},
        "num_warps": {},
    }
    text = reasons.get(name, {}).get(new)
    if text:
        return text
    if name == "rows_per_program":
        return "more rows per program amortise the launch of short rows" if new > old else \
            "fewer rows per program give more programs to spread over the SMs"
    if name == "num_warps":
        return "more warps keep more loads in flight" if new > old else \
            "fewer warps mean less cross-warp reduction work per row"
    if name == "block_n":
        return "larger blocks: fewer loop trips" if new > old else "smaller blocks: fewer registers"
    return "try a neighbouring value"


# ---------------------------------------------------------------- C (cpu backend)

_C_EXP = {
    "libm": "static inline float kf_exp(float x) { return expf(x); }\n",
    # Cephes-style expf: x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial for e^r,
    # 2^n put straight into the exponent bits. n is rounded with the 1.5 * 2^23 trick
    # and the bits moved through a union: floorf() and memcpy() kept gcc 12 from
    # vectorising the loop. Inputs here are x - max <= 0.
    "poly": """static inline float kf_exp(float x) {
    x = x < -87.0f ? -87.0f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { int32_t i; float f; } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return p * scale.f;
}
""",
}

_C_ROW = {
    "store_exp": """        float m = -INFINITY;
        SIMD(reduction(max:m))
        for (int64_t c = 0; c < COLS; ++c) m = KF_MAX(m, ld(xr, c));
        float s = 0.0f;
        SIMD(reduction(+:s))
        for (int64_t c = 0; c < COLS; ++c) { float e = kf_exp(ld(xr, c) - m); st(yr, c, e); s += e; }
        float inv = 1.0f / s;
        SIMD()
        for (int64_t c = 0; c < COLS; ++c) st(yr, c, ld(yr, c) * inv);
""",
    "recompute": """        float m = -INFINITY;
        SIMD(reduction(max:m))
        for (int64_t c = 0; c < COLS; ++c) m = KF_MAX(m, ld(xr, c));
        float s = 0.0f;
        SIMD(reduction(+:s))
        for (int64_t c = 0; c < COLS; ++c) s += kf_exp(ld(xr, c) - m);
        float inv = 1.0f / s;
        SIMD()
        for (int64_t c = 0; c < COLS; ++c) st(yr, c, kf_exp(ld(xr, c) - m) * inv);
""",
    # Blocks of 64: the block's max, then the running sum rescaled once per block,
    # so the inner loops stay vectorisable.
    "online": """        float m = -INFINITY, s = 0.0f;
        for (int64_t c0 = 0; c0 < COLS; c0 += 64) {
            int64_t c1 = c0 + 64 < COLS ? c0 + 64 : COLS;
            float bm = -INFINITY;
            SIMD(reduction(max:bm))
            for (int64_t c = c0; c < c1; ++c) bm = KF_MAX(bm, ld(xr, c));
            float nm = KF_MAX(m, bm);
            if (nm == -INFINITY) continue;
            float bs = 0.0f;
            SIMD(reduction(+:bs))
            for (int64_t c = c0; c < c1; ++c) bs += kf_exp(ld(xr, c) - nm);
            s = (m == -INFINITY ? 0.0f : s * kf_exp(m - nm)) + bs;
            m = nm;
        }
        float inv = 1.0f / s;
        SIMD()
        for (int64_t c = 0; c < COLS; ++c) st(yr, c, kf_exp(ld(xr, c) - m) * inv);
""",
}


# The last pass of recompute/online, and its log-softmax form: y = x - (max + log(sum)).
_C_SCALE = """        float inv = 1.0f / s;
        SIMD()
        for (int64_t c = 0; c < COLS; ++c) st(yr, c, kf_exp(ld(xr, c) - m) * inv);
"""
_C_LOG_SHIFT = """        float shift = m + logf(s);
        SIMD()
        for (int64_t c = 0; c < COLS; ++c) st(yr, c, ld(xr, c) - shift);
"""
assert all(_C_SCALE in _C_ROW[a] for a in ("recompute", "online"))


def render_c(facts: dict[str, Any], params: dict[str, Any]) -> str:
    ctype, code = C_TYPES[facts["dtype"]]
    simd_macro = c_simd_macro(params["simd"])
    row_code = _C_ROW[params["algorithm"]]
    if facts["log"]:
        row_code = row_code.replace(_C_SCALE, _C_LOG_SHIFT)
    what = "log-softmax" if facts["log"] else "softmax"
    return f"""/* kernforge builtin: {what} over the last dim, {facts['rows']} rows x {facts['cols']} cols, {facts['dtype']}
 * kf-op: {facts['op']}
 * algorithm={params['algorithm']} exp={params['exp']} schedule={params['schedule']} simd={params['simd']}
 */
#include <math.h>
#include <string.h>
{C_PRELUDE}
#define ROWS {facts['rows']}LL
#define COLS {facts['cols']}LL
/* A plain compare, not fmaxf: fmaxf's NaN rules kept gcc 12 from vectorising the
 * max reduction (about 4x slower here, on an AMD EPYC with AVX-512); a NaN input still ends as a NaN row via exp(). */
#define KF_MAX(a, b) ((a) > (b) ? (a) : (b))
typedef {ctype} elem_t;
{simd_macro}
{C_LOAD_STORE[facts['dtype']]}
{_C_EXP[params['exp']]}
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {{
    if (n_in != 1 || n_out != 1) return 1;
    if (in[0].dtype != {code} || out[0].dtype != {code}) return 2;
    if (in[0].strides[in[0].ndim - 1] != 1 || out[0].strides[out[0].ndim - 1] != 1) return 3;
    const elem_t *x = (const elem_t *)in[0].data;
    elem_t *y = (elem_t *)out[0].data;
    #pragma omp parallel for schedule({params['schedule']})
    for (int64_t r = 0; r < ROWS; ++r) {{
        const elem_t *restrict xr = x + r * COLS;
        elem_t *restrict yr = y + r * COLS;
{row_code}    }}
    return 0;
}}
"""


# ---------------------------------------------------------------- Triton

_TRITON_SINGLE = '''
@triton.jit
def softmax_rows(X, Y, n_rows, n_cols, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, LOG: tl.constexpr):
    # ROWS whole rows per program, each row in registers: one read of x, one write of y.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offsets = rows[:, None].to(tl.int64) * n_cols + cols[None, :]
    x = tl.load(X + offsets, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=1)
    e = tl.exp(x - m[:, None])
    if LOG:
        y = (x - m[:, None]) - tl.log(tl.sum(e, axis=1))[:, None]
    else:
        y = e / tl.sum(e, axis=1)[:, None]
    tl.store(Y + offsets, y.to(Y.dtype.element_ty), mask=mask)


def launch(x, y, n_rows, n_cols):
    grid = (triton.cdiv(n_rows, ROWS_PER_PROGRAM),)
    softmax_rows[grid](x, y, n_rows, n_cols, BLOCK_N=BLOCK_N, ROWS=ROWS_PER_PROGRAM, LOG=LOG,
                       num_warps=NUM_WARPS)
'''

_TRITON_ONLINE = '''
@triton.jit
def softmax_online(X, Y, n_cols, BLOCK_N: tl.constexpr, LOG: tl.constexpr):
    # One row per program, read in blocks; each lane keeps a running max and sum,
    # merged at the end: two reads of x, one write of y, rows of any length.
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = X + row * n_cols, Y + row * n_cols
    m = tl.full([BLOCK_N], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        alive = m_new != -float("inf")
        s = tl.where(alive, s * tl.exp(m - m_new) + tl.exp(x - m_new), 0.0)
        m = m_new
    m_row = tl.max(m, axis=0)
    s_row = tl.sum(tl.where(m != -float("inf"), s * tl.exp(m - m_row), 0.0), axis=0)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        if LOG:
            y = (x - m_row) - tl.log(s_row)
        else:
            y = tl.exp(x - m_row) / s_row
        tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=cols < n_cols)


def launch(x, y, n_rows, n_cols):
    softmax_online[(n_rows,)](x, y, n_cols, BLOCK_N=BLOCK_N, LOG=LOG, num_warps=NUM_WARPS)
'''

_TRITON_SPLIT = '''
@triton.jit
def softmax_partials(X, M, S, n_cols, n_chunks, BLOCK_N: tl.constexpr):
    # Program (row, chunk): the chunk's max and sum of exp(x - max), one read of the chunk.
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(X + row * n_cols + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    s = tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - m)), axis=0)
    tl.store(M + row * n_chunks + chunk, m)
    tl.store(S + row * n_chunks + chunk, s)


@triton.jit
def softmax_finish(X, Y, M, S, n_cols, n_chunks, BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr,
                   LOG: tl.constexpr):
    # Every program combines its row's partials (a few KB, cached), then writes its chunk.
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    k = tl.arange(0, CHUNKS)
    m_k = tl.load(M + row * n_chunks + k, mask=k < n_chunks, other=-float("inf"))
    s_k = tl.load(S + row * n_chunks + k, mask=k < n_chunks, other=0.0)
    m = tl.max(m_k, axis=0)
    s = tl.sum(tl.where(m_k == -float("inf"), 0.0, s_k * tl.exp(m_k - m)), axis=0)
    cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(X + row * n_cols + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    if LOG:
        y = (x - m) - tl.log(s)
    else:
        y = tl.exp(x - m) / s
    tl.store(Y + row * n_cols + cols, y.to(Y.dtype.element_ty), mask=cols < n_cols)


def launch(x, y, n_rows, n_cols):
    n_chunks = triton.cdiv(n_cols, BLOCK_N)
    partial_max = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
    partial_sum = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
    grid = (n_rows, n_chunks)
    softmax_partials[grid](x, partial_max, partial_sum, n_cols, n_chunks, BLOCK_N=BLOCK_N,
                           num_warps=NUM_WARPS)
    softmax_finish[grid](x, y, partial_max, partial_sum, n_cols, n_chunks, BLOCK_N=BLOCK_N,
                         CHUNKS=triton.next_power_of_2(n_chunks), LOG=LOG, num_warps=NUM_WARPS)
'''

_TRITON_BODIES = {"single_tile": _TRITON_SINGLE, "online_loop": _TRITON_ONLINE, "split_row": _TRITON_SPLIT}


def render_triton(facts: dict[str, Any], params: dict[str, Any]) -> str:
    single = params["variant"] == "single_tile"
    rows_line = f"ROWS_PER_PROGRAM = {params['rows_per_program']}\n" if single else ""
    what = "log-softmax" if facts["log"] else "softmax"
    return f'''\"\"\"kernforge builtin: {what} over the last dim, {facts['rows']} rows x {facts['cols']} cols, {facts['dtype']}.

kf-op: {facts['op']}
variant={params['variant']} block_n={params['block_n']} num_warps={params['num_warps']}{
        f" rows_per_program={params['rows_per_program']}" if single else ""}
\"\"\"
import torch
import triton
import triton.language as tl

BLOCK_N = {params['block_n']}
NUM_WARPS = {params['num_warps']}
LOG = {facts['log']}
{rows_line}{_TRITON_BODIES[params['variant']]}

def kf_forward(x, dim, half_to_float):
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    y = torch.empty_like(x)
    launch(x, y, n_rows, n_cols)
    return y
'''


def render(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> str:
    return render_c(facts, params) if backend == "cpu" else render_triton(facts, params)


FAMILY = Family(name="softmax", match=match, space=space, initial=initial, render=render,
                valid=valid, explain=explain)
FAMILIES = [FAMILY]
