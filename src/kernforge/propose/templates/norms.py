"""Normalisations: layer norm, RMS norm, group norm, and batch norm in inference.

    layer:  y = (x - mean(x)) * rsqrt(var(x) + eps) * w + b      over the trailing normalized_shape
    rms:    y = x * rsqrt(mean(x^2) + eps) * w                    over the trailing normalized_shape
    group:  y = (x - mean_g) * rsqrt(var_g + eps) * w[c] + b[c]   over each (sample, group of C/G channels)
    batch:  y = (x - running_mean[c]) * rsqrt(running_var[c] + eps) * w[c] + b[c]

All four are memory-bound: one read of x and one write of y is the floor (4 bytes
per element in bf16, 8 in fp32). The statistics outputs (mean, rstd) take the
shapes and dtypes the task lists (they differ between devices: CPU layer norm
keeps bf16 statistics, CUDA's are fp32), so every template reads them from
task.outputs instead of assuming.

Variance: where a row or chunk sits in registers it is exact two-pass (mean, then
sum of squared deviations); where it is read in blocks, each block's (count,
mean, M2) is merged into a running one with Chan's formula, which keeps the
precision of two-pass without the cancellation of sum(x^2) - n mean^2 on rows
whose mean is large against their spread.
"""

from __future__ import annotations

import math
from typing import Any

from kernforge.backends.native import C_PRELUDE
from kernforge.propose.builtin.family import LegacyFamily as Family
from kernforge.propose.families.common import (
    C_LOAD_STORE,
    C_TYPES,
    ITEMSIZE,
    SUPPORTED_DTYPES,
    TRITON_SM_COUNT,
    c_simd_macro,
    contiguous_strides,
    gpu_sms,
    is_tensor,
    next_pow2,
)
from kernforge.tasks import KernelTask

LAYER_NORM_OP = "aten::native_layer_norm.default"
RMS_NORM_OP = "aten::_fused_rms_norm.default"
GROUP_NORM_OP = "aten::native_group_norm.default"
BATCH_NORM_OPS = ("aten::native_batch_norm.default", "aten::_native_batch_norm_legit_no_training.default",
                  "aten::cudnn_batch_norm.default")
# torch's _fused_rms_norm with eps=None uses the epsilon of its float32 accumulation type for
# fp32, bf16 and fp16 inputs alike (checked on torch 2.14's CPU kernel: bf16 rstd of 1e-3 inputs
# is 945.709, which finfo(bfloat16).eps = 7.8e-3 would have made 11.3).
RMS_DEFAULT_EPS = 1.1920928955078125e-07
# Register budget of one Triton program: past ~16K fp32 values in a tile the H200 spills.
MAX_TILE = 16384


# ---------------------------------------------------------------- shared helpers


def _short(dtype: str) -> str:
    return dtype.replace("torch.", "")


def _aux_dtype_reason(name: str, desc: Any, x_dtype: str) -> str | None:
    """Weights and statistics may be the input's dtype or float32 (mixed-precision models); the
    templates know those two cases only."""
    if desc is None:
        return None
    if not is_tensor(desc):
        return f"{name} is not a tensor"
    if desc["dtype"] not in (x_dtype, "torch.float32"):
        return f"{name} of dtype {desc['dtype']} beside a {x_dtype} input has no built-in template"
    if desc["stride"] != contiguous_strides(desc["shape"]) and math.prod(desc["shape"]) > 1:
        return f"a non-contiguous {name} has no built-in template"
    return None


def _outputs(task: KernelTask) -> list[dict[str, Any]]:
    return [{"shape": list(o["shape"]), "stride": list(o["stride"]), "dtype": _short(o["dtype"])}
            for o in task.outputs]


def _common_x(task: KernelTask, label: str) -> dict[str, Any] | str:
    x = task.args[0] if task.args else None
    if not is_tensor(x):
        return f"{label} without a tensor input"
    if x["dtype"] not in SUPPORTED_DTYPES:
        return f"{label} on {x['dtype']} has no built-in template"
    if math.prod(x["shape"]) == 0:
        return f"{label} on an empty tensor has no built-in template"
    return x


def _explain_number(name: str, old: Any, new: Any) -> str:
    up = new > old
    texts = {
        "rows_per_program": ("more rows per program: the weight is loaded once for several rows",
                             "fewer rows per program: more programs to spread over the SMs"),
        "num_warps": ("more warps keep more loads in flight and fewer values per thread",
                      "fewer warps: less cross-warp reduction work and more programs per SM"),
        "num_stages": ("deeper software pipelining of the loop's loads", "shallower pipelining: fewer registers"),
        "block": ("larger blocks: fewer loop trips and wider loads", "smaller blocks: fewer registers, less masking"),
        "chunk": ("larger chunks: fewer programs and fewer partial results to combine",
                  "smaller chunks: more programs, so few groups still fill every SM"),
    }
    if name in texts:
        return texts[name][0 if up else 1]
    return "try a neighbouring value"


EXPLAIN = {
    "variant": {
        "single_tile": "whole rows in registers: one read of x, exact two-pass statistics",
        "loop": "rows read in blocks with running (Chan) statistics: rows of any length, two reads",
        "split": "each group split across many programs (partials, then combine): fills the SMs when "
                 "there are few groups",
        "per_group": "one program per group, looping twice over it: no partial buffer, for many small groups",
        "resident": "one program per SM, a few groups at a time: a group's programs wait for each other's "
                    "statistics, then normalise what they just read, from L2: x crosses DRAM about once",
        "queue": "programs take chunks from a queue, normalising a group a few groups behind reading its "
                 "statistics: no wave barrier, reads and writes overlap, the second read from L2",
        "held": "the whole GPU holds a group in registers, a chunk a program, the next groups loading: "
                "x crosses DRAM once and is never read twice",
        "flat": "one flat index over every element, the channel recomputed per element: no tail waste",
        "plane": "programs inside one (sample, channel) plane: scale and shift loaded once as scalars",
        "tile": "[positions x channels] tiles of the channels-last layout: scale and shift loaded once "
                "per tile as vectors",
    },
    "persistent": {True: "one program per SM slot looping over rows: the weight stays in registers",
                   False: "one program per row block: simplest schedule, no loop overhead"},
    "reverse": {True: "the second pass walks the groups backwards, so it first re-reads what the first "
                      "pass read last (still in L2)",
                False: "both passes walk the groups in the same order"},
    "wave_groups": {0: "both passes over every group at once: two launches",
                    8: "both passes over 8 groups at a time: a wave's second read comes from L2, "
                       "at two launches per wave",
                    4: "waves of 4 groups: more of the second read from L2, more launches",
                    2: "waves of 2 groups: the second read almost all from L2, the most launches"},
    "unroll": {1: "one block a loop trip (held: the chunk as one row)",
               2: "two blocks a loop trip, loaded together: twice the bytes in flight per program (held: the "
                  "chunk as two rows, whose per-thread sums run side by side)",
               4: "four blocks a loop trip: for one program per SM, more loads in flight hide DRAM latency "
                  "(held: four rows)",
               8: "eight blocks a loop trip: the most bytes in flight, the most registers (held: eight rows)"},
    "pipeline": {True: "resident: the next wave's statistics before this wave is normalised; held: statistics "
                       "published two groups ahead (four chunks in registers), so a group's partials are two "
                       "iterations old when it is normalised",
                  False: "resident: a wave at a time; held: statistics one group ahead, three chunks in registers"},
    "per_sm": {1: "one program per SM: the most registers each",
               2: "two programs per SM: one loads while the other waits for its group (resident ones are "
                  "launched cooperatively, so a grid that cannot all be resident is an error, not a hang)",
               4: "four programs per SM (the queue, the held variant): more loads in flight, fewer registers each",
               8: "eight programs per SM (the queue): the most loads in flight, the fewest registers each"},
    "lead": {1: "the queue normalises a group right after its statistics: the least L2 held, the most waiting",
             2: "normalise two groups behind the statistics: the wait is usually over (held: only the "
                "groups loading into registers, no L2 prefetch)",
             3: "three groups behind (held: L2 prefetches three groups ahead, bytes in flight that hold no "
                "registers; with pipeline, only the groups loading into registers)",
             4: "four groups behind: no waiting, more of L2 held (held: L2 prefetches four groups ahead)",
             8: "eight groups behind: the second read may fall out of L2 (held: prefetches eight groups ahead)"},
    "stats": {"two_pass": "mean first, then squared deviations: exact in float, reads the data twice",
              "one_pass_double": "sum and sum of squares in double in one read: fewer passes, still "
                                 "precise for large-mean data",
              "float": "sum of squares in float: vectorises at full width",
              "double": "sum of squares in double: precise on long rows of large values"},
    "parallel": {"groups": "a thread per group: each group read by one core",
                 "planes": "a thread per (sample, channel) plane: spreads few groups over every core"},
    "schedule": {"static": "equal ranges per thread: no scheduling cost",
                 "dynamic": "threads take work as they free up: better when cores are uneven"},
    "simd": {True: "ask the compiler to vectorise the inner loops",
             False: "scalar inner loops"},
}


def explain(name: str, old: Any, new: Any) -> str:
    text = EXPLAIN.get(name, {}).get(new)
    return text or _explain_number(name, old, new)


def _c_head(title: str, op: str, params: dict[str, Any], dtype: str) -> str:
    ctype, _ = C_TYPES[dtype]
    described = " ".join(f"{k}={v}" for k, v in params.items())
    return f"""/* kernforge builtin: {title}
 * kf-op: {op}
 * {described}
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
{C_PRELUDE}
typedef {ctype} elem_t;
{c_simd_macro(params.get('simd', True))}
{C_LOAD_STORE[dtype]}"""


def _c_aux(name: str, dtype: str, x_dtype: str) -> str:
    """A pointer type and load/store macros for an auxiliary tensor (weight, statistics) that is
    either the input's dtype (through ld/st) or float32 (plain access)."""
    if dtype == x_dtype:
        return (f"typedef elem_t {name}_t;\n#define LD_{name.upper()}(p, i) ld(p, i)\n"
                f"#define ST_{name.upper()}(p, i, v) st(p, i, v)\n")
    return (f"typedef float {name}_t;\n#define LD_{name.upper()}(p, i) ((p)[i])\n"
            f"#define ST_{name.upper()}(p, i, v) ((p)[i] = (v))\n")


def _c_in_ptr(name: str, present: bool, index: int) -> str:
    """The pointer of an optional input; absent inputs are skipped in `in`, so never read past it."""
    value = f"(const {name}_t *)in[{index}].data" if present else "NULL"
    return f"    const {name}_t *{name} = {value};\n    (void){name};\n"


def _torch_dtype(dtype: str) -> str:
    return f"torch.{dtype}"


def _alloc_lines(outputs: list[dict[str, Any]], names: list[str], like: str) -> str:
    """Outputs allocated with exactly the reference's shapes, strides and dtypes."""
    lines = []
    for name, o in zip(names, outputs):
        lines.append(f"    {name} = torch.empty_strided({tuple(o['shape'])}, {tuple(o['stride'])}, "
                     f"dtype={_torch_dtype(o['dtype'])}, device={like}.device)")
    return "\n".join(lines)


# ================================================================ layer norm and RMS norm

def match_row_norm(task: KernelTask, kind: str) -> dict[str, Any] | str:
    op = LAYER_NORM_OP if kind == "layer" else RMS_NORM_OP
    if task.op != op:
        return f"no built-in template for {task.op}"
    label = "layer norm" if kind == "layer" else "rms norm"
    x = _common_x(task, label)
    if isinstance(x, str):
        return x
    args = list(task.args) + [None] * 5
    normalized, weight = args[1], args[2]
    bias, eps = (args[3], args[4]) if kind == "layer" else (None, args[3])
    if not isinstance(normalized, list) or not normalized or x["shape"][-len(normalized):] != normalized:
        return f"{label} whose normalized_shape is not the input's trailing dims"
    if x["stride"] != contiguous_strides(x["shape"]):
        return f"{label} on a non-contiguous input has no built-in template yet"
    for name, desc in (("weight", weight), ("bias", bias)):
        why = _aux_dtype_reason(name, desc, x["dtype"])
        if why:
            return f"{label}: {why}"
        if desc is not None and desc["shape"] != normalized:
            return f"{label} with a {name} not of normalized_shape"
    outputs = _outputs(task)
    for o in outputs[1:]:
        if o["dtype"] not in (_short(x["dtype"]), "float32"):
            return f"{label} with {o['dtype']} statistics has no built-in template"
    cols = math.prod(normalized)
    return {"op": op, "kind": kind, "rows": math.prod(x["shape"]) // cols, "cols": cols,
            "dtype": _short(x["dtype"]), "has_weight": weight is not None, "has_bias": bias is not None,
            "w_dtype": _short(weight["dtype"]) if weight else _short(x["dtype"]),
            "b_dtype": _short(bias["dtype"]) if bias else _short(x["dtype"]),
            "eps": float(RMS_DEFAULT_EPS if eps is None else eps), "outputs": outputs}


def space_row_norm(facts: dict[str, Any], backend: str) -> dict[str, list[Any]]:
    if backend == "cpu":
        stats = ["two_pass", "one_pass_double"] if facts["kind"] == "layer" else ["float", "double"]
        return {"stats": stats, "schedule": ["static", "dynamic"], "simd": [False, True]}
    if backend == "triton":
        return {"variant": ["single_tile", "loop"], "rows_per_program": [1, 2, 4, 8, 16],
                "persistent": [False, True], "block": [128, 256, 512, 1024, 2048, 4096, 8192, 16384],
                "num_warps": [1, 2, 4, 8, 16], "num_stages": [1, 2, 3]}
    return {}


def _whole_row(facts: dict[str, Any]) -> int:
    return max(128, next_pow2(facts["cols"]))


def initial_row_norm(facts: dict[str, Any], backend: str) -> dict[str, Any]:
    if backend == "cpu":
        # Two passes over a row that sits in L1/L2: exact, and the second read is cheap.
        return {"stats": "two_pass" if facts["kind"] == "layer" else "float", "schedule": "static",
                "simd": True}
    whole = _whole_row(facts)
    if whole <= 8192:
        # (8192, 4096) bf16 on the H200: a whole row per program, 4 warps (32 values a thread),
        # rows_per_program filling ~4K values for short rows so each program moves enough bytes.
        rows = max(1, min(16, 4096 // whole))
        while rows > 1 and facts["rows"] < rows * gpu_sms() * 2:
            rows //= 2  # keep at least two waves of programs over the SMs
        # (8192, 4096) bf16 layer norm in the H200 search, a row per program: 4 warps 38.4 us,
        # 8 warps 40.2, 16 warps 47.5 (bench/results/h200/search/part3)
        warps = 4 if whole * rows <= 4096 else 8 if whole * rows <= 8192 else 16
        return {"variant": "single_tile", "rows_per_program": rows, "persistent": False, "block": whole,
                "num_warps": warps, "num_stages": 1}
    return {"variant": "loop", "rows_per_program": 1, "persistent": False, "block": 4096,
            "num_warps": 8, "num_stages": 2}


def valid_row_norm(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> bool:
    if backend == "cpu":
        return True
    threads = 32 * params["num_warps"]
    if params["variant"] == "single_tile":
        tile = params["rows_per_program"] * params["block"]
        # the tile holds whole rows; at most 64 fp32 values a thread (no spill), at least one
        return (params["block"] == _whole_row(facts) and params["num_stages"] == 1 and tile <= MAX_TILE
                and threads <= tile and tile // threads <= 64)
    block = params["block"]
    return (params["rows_per_program"] == 1 and not params["persistent"] and 512 <= block < 2 * facts["cols"]
            and threads <= block and block // threads <= 32)


# ---------------------------------------------------------------- row norms: C

def _c_row_stats(facts: dict[str, Any], stats: str) -> str:
    if facts["kind"] == "rms":
        acc = "double" if stats == "double" else "float"
        return f"""        {acc} ss = 0;
        SIMD(reduction(+:ss))
        for (int64_t c = 0; c < COLS; ++c) {{ {acc} v = ld(xr, c); ss += v * v; }}
        float mean = 0.0f;
        float rstd = 1.0f / sqrtf((float)(ss / COLS) + EPS);
"""
    if stats == "two_pass":
        return """        float s = 0.0f;
        SIMD(reduction(+:s))
        for (int64_t c = 0; c < COLS; ++c) s += ld(xr, c);
        float mean = s / COLS;
        float ss = 0.0f;
        SIMD(reduction(+:ss))
        for (int64_t c = 0; c < COLS; ++c) { float d = ld(xr, c) - mean; ss += d * d; }
        float rstd = 1.0f / sqrtf(ss / COLS + EPS);
"""
    return """        double s = 0.0, ss = 0.0;
        SIMD(reduction(+:s, ss))
        for (int64_t c = 0; c < COLS; ++c) { double v = ld(xr, c); s += v; ss += v * v; }
        double dmean = s / COLS;
        double var = ss / COLS - dmean * dmean;
        float mean = (float)dmean;
        float rstd = 1.0f / sqrtf((float)(var > 0.0 ? var : 0.0) + EPS);
"""


def render_row_norm_c(facts: dict[str, Any], params: dict[str, Any]) -> str:
    layer = facts["kind"] == "layer"
    outs = facts["outputs"]
    affine = "(ld(xr, c) - mean) * rstd" if layer else "ld(xr, c) * rstd"
    if facts["has_weight"]:
        affine = f"({affine}) * LD_W(w, c)"
    if facts["has_bias"]:
        affine = f"{affine} + LD_B(b, c)"
    n_in = 1 + facts["has_weight"] + facts["has_bias"]
    w_idx, b_idx = 1, 1 + facts["has_weight"]
    stat_stores = ("            ST_S1(mean_out, r, mean);\n            ST_S2(rstd_out, r, rstd);\n" if layer
                   else "            ST_S1(rstd_out, r, rstd);\n")
    stat_ptrs = ("    s1_t *mean_out = (s1_t *)out[1].data;\n    s2_t *rstd_out = (s2_t *)out[2].data;\n" if layer
                 else "    s1_t *rstd_out = (s1_t *)out[1].data;\n")
    return f"""{_c_head(f"{facts['kind']} norm, {facts['rows']} rows x {facts['cols']} cols, {facts['dtype']}",
                  facts['op'], params, facts['dtype'])}
{_c_aux("w", facts["w_dtype"], facts["dtype"])}{_c_aux("b", facts["b_dtype"], facts["dtype"])}\
{_c_aux("s1", outs[1]["dtype"], facts["dtype"])}{_c_aux("s2", outs[-1]["dtype"], facts["dtype"])}
#define ROWS {facts['rows']}LL
#define COLS {facts['cols']}LL
#define EPS {facts['eps']!r}f

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {{
    if (n_in != {n_in} || n_out != {len(outs)}) return 1;
    const elem_t *x = (const elem_t *)in[0].data;
{_c_in_ptr("w", facts["has_weight"], w_idx)}{_c_in_ptr("b", facts["has_bias"], b_idx)}    elem_t *y = (elem_t *)out[0].data;
{stat_ptrs}    #pragma omp parallel for schedule({params['schedule']})
    for (int64_t r = 0; r < ROWS; ++r) {{
        const elem_t *restrict xr = x + r * COLS;
        elem_t *restrict yr = y + r * COLS;
{_c_row_stats(facts, params['stats'])}        (void)mean;
        SIMD()
        for (int64_t c = 0; c < COLS; ++c) st(yr, c, {affine});
{stat_stores}    }}
    return 0;
}}
"""


# ---------------------------------------------------------------- row norms: Triton

_TRITON_ROWS_TILE = '''
@triton.jit
def norm_rows(X, W, B, Y, MEAN, RSTD, n_rows, n_cols, eps, iters,
              BLOCK_N: tl.constexpr, ROWS: tl.constexpr, RMS: tl.constexpr,
              HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # ROWS whole rows per program in registers: x is read once; the weight once per program.
    # A persistent launch (iters > 1) walks row blocks pid, pid + grid, ... keeping w and b.
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if HAS_W:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    if HAS_B:
        b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)
    for it in range(0, iters):
        block = tl.program_id(0) + it * tl.num_programs(0)
        rows = block * ROWS + tl.arange(0, ROWS)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        offsets = rows[:, None].to(tl.int64) * n_cols + cols[None, :]
        x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
        if RMS:
            rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
            y = x * rstd[:, None]
        else:
            mean = tl.sum(x, axis=1) / n_cols
            d = tl.where(mask, x - mean[:, None], 0.0)
            rstd = tl.rsqrt(tl.sum(d * d, axis=1) / n_cols + eps)
            y = d * rstd[:, None]
            tl.store(MEAN + rows, mean.to(MEAN.dtype.element_ty), mask=row_ok)
        if HAS_W:
            y = y * w[None, :]
        if HAS_B:
            y = y + b[None, :]
        tl.store(Y + offsets, y.to(Y.dtype.element_ty), mask=mask)
        tl.store(RSTD + rows, rstd.to(RSTD.dtype.element_ty), mask=row_ok)


def launch(x, w, b, y, mean, rstd, n_rows, n_cols, eps):
    blocks = triton.cdiv(n_rows, ROWS_PER_PROGRAM)
    grid = min(blocks, PROGRAMS_PER_SM * sm_count(x.device)) if PERSISTENT else blocks
    norm_rows[(grid,)](x, w, b, y, mean, rstd, n_rows, n_cols, eps, triton.cdiv(blocks, grid),
                       BLOCK_N=BLOCK_N, ROWS=ROWS_PER_PROGRAM, RMS=RMS, HAS_W=HAS_W, HAS_B=HAS_B,
                       num_warps=NUM_WARPS)
'''

_TRITON_ROWS_LOOP = '''
@triton.jit
def norm_rows_loop(X, W, B, Y, MEAN, RSTD, n_cols, eps, BLOCK_N: tl.constexpr, RMS: tl.constexpr,
                   HAS_W: tl.constexpr, HAS_B: tl.constexpr, STAGES: tl.constexpr):
    # One row per program, read in blocks: statistics first (each block's mean and M2 merged
    # into the running ones, Chan's formula), then a second read to normalise.
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = X + row * n_cols, Y + row * n_cols
    count = tl.zeros([], tl.float32)
    mean = tl.zeros([], tl.float32)
    m2 = tl.zeros([], tl.float32)
    for start in tl.range(0, n_cols, BLOCK_N, num_stages=STAGES):
        cols = start + tl.arange(0, BLOCK_N)
        ok = cols < n_cols
        x = tl.load(x_row + cols, mask=ok, other=0.0).to(tl.float32)
        if RMS:
            m2 += tl.sum(x * x, axis=0)
        else:
            n_b = tl.minimum(n_cols - start, BLOCK_N).to(tl.float32)
            mean_b = tl.sum(x, axis=0) / n_b
            d = tl.where(ok, x - mean_b, 0.0)
            total = count + n_b
            delta = mean_b - mean
            mean += delta * (n_b / total)
            m2 += tl.sum(d * d, axis=0) + delta * delta * (count * n_b / total)
            count = total
    rstd = tl.rsqrt(m2 / n_cols + eps)
    if not RMS:
        tl.store(MEAN + row, mean.to(MEAN.dtype.element_ty))
    tl.store(RSTD + row, rstd.to(RSTD.dtype.element_ty))
    for start in tl.range(0, n_cols, BLOCK_N, num_stages=STAGES):
        cols = start + tl.arange(0, BLOCK_N)
        ok = cols < n_cols
        x = tl.load(x_row + cols, mask=ok, other=0.0).to(tl.float32)
        y = x * rstd if RMS else (x - mean) * rstd
        if HAS_W:
            y = y * tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
        if HAS_B:
            y = y + tl.load(B + cols, mask=ok, other=0.0).to(tl.float32)
        tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=ok)


def launch(x, w, b, y, mean, rstd, n_rows, n_cols, eps):
    norm_rows_loop[(n_rows,)](x, w, b, y, mean, rstd, n_cols, eps, BLOCK_N=BLOCK_N, RMS=RMS,
                              HAS_W=HAS_W, HAS_B=HAS_B, STAGES=NUM_STAGES, num_warps=NUM_WARPS)
'''


def render_row_norm_triton(facts: dict[str, Any], params: dict[str, Any]) -> str:
    layer = facts["kind"] == "layer"
    tile = params["variant"] == "single_tile"
    if tile:
        described = (f"variant=single_tile rows_per_program={params['rows_per_program']} "
                     f"persistent={params['persistent']} block={params['block']} num_warps={params['num_warps']}")
        consts = (f"ROWS_PER_PROGRAM = {params['rows_per_program']}\nPERSISTENT = {params['persistent']}\n"
                  "PROGRAMS_PER_SM = 4  # enough resident programs to hide the load latency\n")
        body = _TRITON_ROWS_TILE + TRITON_SM_COUNT
    else:
        described = (f"variant=loop block={params['block']} num_warps={params['num_warps']} "
                     f"num_stages={params['num_stages']}")
        consts = f"NUM_STAGES = {params['num_stages']}\n"
        body = _TRITON_ROWS_LOOP
    names = ["y", "mean", "rstd"] if layer else ["y", "rstd"]
    signature = ("input, normalized_shape, weight, bias, eps" if layer
                 else "input, normalized_shape, weight=None, eps=None")
    result = "y, mean, rstd" if layer else "y, rstd"
    mean_arg = "mean" if layer else "rstd"  # RMS has no mean: the kernel never stores through it
    return f'''"""kernforge builtin: {facts['kind']} norm, {facts['rows']} rows x {facts['cols']} cols, {facts['dtype']}.

kf-op: {facts['op']}
{described}
"""
import torch
import triton
import triton.language as tl

BLOCK_N = {params['block']}
NUM_WARPS = {params['num_warps']}
RMS = {not layer}
HAS_W = {facts['has_weight']}
HAS_B = {facts['has_bias']}
EPS = {facts['eps']!r}
{consts}{body}

def kf_forward({signature}):
    x = input
{_alloc_lines(facts['outputs'], names, "x")}
    w = weight if HAS_W else x
    b = {"bias" if layer else "x"} if HAS_B else x
    launch(x, w, b, y, {mean_arg}, rstd, {facts['rows']}, {facts['cols']}, EPS)
    return {result}
'''


def render_row_norm(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> str:
    return render_row_norm_c(facts, params) if backend == "cpu" else render_row_norm_triton(facts, params)


def _row_norm_family(kind: str) -> Family:
    return Family(name=f"{kind}_norm", match=lambda task: match_row_norm(task, kind), space=space_row_norm,
                  initial=initial_row_norm, render=render_row_norm, valid=valid_row_norm, explain=explain)


# ================================================================ group norm

def match_group_norm(task: KernelTask) -> dict[str, Any] | str:
    if task.op != GROUP_NORM_OP:
        return f"no built-in template for {task.op}"
    x = _common_x(task, "group norm")
    if isinstance(x, str):
        return x
    if len(task.args) < 8:
        return "group norm with fewer arguments than aten::native_group_norm takes"
    weight, bias, n, c, hw, groups, eps = task.args[1:8]
    if not all(isinstance(v, int) for v in (n, c, hw, groups)) or groups <= 0 or c % groups:
        return "group norm whose channels do not split into whole groups"
    if n * c * hw != math.prod(x["shape"]):
        return "group norm whose N*C*HxW is not the input's size"
    if x["stride"] != contiguous_strides(x["shape"]):
        # A channels-last group spans Cg channels at every position: a [positions x Cg] tile. Skipped
        # for now: the SD3.5 VAE's group norms (the target) run on NCHW-contiguous tensors.
        return "group norm on a non-contiguous (e.g. channels-last) input has no built-in template yet"
    for name, desc in (("weight", weight), ("bias", bias)):
        why = _aux_dtype_reason(name, desc, x["dtype"])
        if why:
            return f"group norm: {why}"
    outputs = _outputs(task)
    if any(o["dtype"] not in (_short(x["dtype"]), "float32") for o in outputs[1:]):
        return "group norm with statistics in another dtype has no built-in template"
    return {"op": GROUP_NORM_OP, "n": n, "c": c, "hw": hw, "groups": groups, "group_size": c // groups * hw,
            "dtype": _short(x["dtype"]), "has_weight": weight is not None, "has_bias": bias is not None,
            "w_dtype": _short(weight["dtype"]) if weight else _short(x["dtype"]),
            "b_dtype": _short(bias["dtype"]) if bias else _short(x["dtype"]),
            "eps": float(eps), "outputs": outputs}


def space_group_norm(facts: dict[str, Any], backend: str) -> dict[str, list[Any]]:
    if backend == "cpu":
        return {"parallel": ["groups", "planes"], "stats": ["two_pass", "one_pass_double"],
                "simd": [False, True]}
    if backend == "triton":
        return {"variant": ["split", "per_group", "resident", "queue", "held"],
                "chunk": [2048, 4096, 8192, 16384, 32768, 65536],
                "block": [256, 512, 1024, 2048, 4096, 8192, 16384], "num_warps": [2, 4, 8, 16, 32],
                "reverse": [False, True], "wave_groups": [0, 8, 4, 2], "unroll": [1, 2, 4, 8],
                "pipeline": [False, True], "per_sm": [1, 2, 4, 8], "lead": [1, 2, 3, 4, 8]}
    return {}


def _gn_chunks(facts: dict[str, Any], chunk: int) -> int:
    return -(-facts["group_size"] // chunk)


# The moves added after the first group-norm points were recorded, and their values there
# (a resumed run's points lack them).
_GN_DEFAULTS = {"unroll": 1, "pipeline": False, "per_sm": 1, "lead": 2}


def initial_group_norm(facts: dict[str, Any], backend: str) -> dict[str, Any]:
    if backend == "cpu":
        # Few groups (32 in SD3.5's VAE) against many cores: spread planes, not groups.
        few = facts["n"] * facts["groups"] < 64
        return {"parallel": "planes" if few else "groups", "stats": "one_pass_double" if few else "two_pass",
                "simd": True}
    n_groups = facts["n"] * facts["groups"]
    size = facts["group_size"]
    if size < 4096 or (n_groups >= 2 * gpu_sms() and size <= 16384):
        # small groups, or enough groups to fill two waves of SMs: one program per group
        block = min(4096, max(256, next_pow2(size)))
        warps = 2 if block <= 512 else 4 if block <= 1024 else 8
        return {"variant": "per_group", "chunk": 2048, "block": block, "num_warps": warps, "reverse": False,
                "wave_groups": 0, "unroll": 1, "pipeline": False, "per_sm": 1, "lead": 2}
    # More than the L2 holds (50 MB on the H100 and H200): the held variant, where a group fits
    # the GPU's registers two programs an SM, 128 bytes of a chunk a thread; else the queue. On
    # (1,256,512,512) bf16 the H200 probe timed the held start at 0.0853 ms, the queue at 0.0994
    # in the same call (bench/results/h200/probe/probe14.log); with statistics two groups ahead
    # (pipeline) 0.0785 ms, against 0.0922 one group ahead in the same call (probe20.log).
    larger_than_l2 = n_groups * size * ITEMSIZE[facts["dtype"]] > 50 * 2**20
    held = _held_start(facts) if larger_than_l2 else None
    if held is not None:
        return held
    if larger_than_l2 and _gn_chunks(facts, 8192) >= 2:
        # the queue: the second read from L2, no wave, programs need not all be resident. On the
        # large row above, 0.0995-0.0997 ms in two probes against 0.1009-0.1031 for two resident
        # programs an SM (probe5.log to probe7.log)
        return {"variant": "queue", "chunk": 8192, "block": 4096, "num_warps": 4, "reverse": False,
                "wave_groups": 0, "unroll": 1, "pipeline": False, "per_sm": 8, "lead": 4}
    # Split: chunks of 16K elements, so (1,256,512,512) gives 32 x 128 = 4096 programs and
    # (1,512,128,128) 32 x 16 = 512 (at least ~4 programs per SM); a smaller chunk for smaller
    # groups keeps that count up. Blocks of 4096 with 8 warps: 16 values a thread per load.
    chunk = 16384
    while chunk > 2048 and n_groups * _gn_chunks(facts, chunk) < 3 * gpu_sms():
        chunk //= 2
    block = min(4096, chunk)
    return {"variant": "split", "chunk": chunk, "block": block, "num_warps": 8 if block >= 2048 else 4,
            "reverse": True, "wave_groups": 0, "unroll": 1, "pipeline": False, "per_sm": 1, "lead": 2}


def valid_group_norm(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> bool:
    if backend == "cpu":
        # the planes split combines per-plane sums and sums of squares: one-pass by construction
        return params["parallel"] == "groups" or params["stats"] == "one_pass_double"
    params = {**_GN_DEFAULTS, **params}
    if params["variant"] == "held":
        return _valid_held(facts, params)
    block, threads = params["block"], 32 * params["num_warps"]
    waiting = params["variant"] in ("resident", "queue")
    if params["unroll"] > 1 and (not waiting or block * params["unroll"] > params["chunk"]
                                 or block * params["unroll"] // threads > 64):
        return False  # tiles of several blocks are the waiting variants', within a chunk
    if (params["per_sm"] > 1 and not waiting) or (params["pipeline"] and params["variant"] != "resident"):
        return False  # only their programs wait for each other, so only they can overlap the wait
    if params["variant"] != "queue" and params["lead"] != _GN_DEFAULTS["lead"]:
        return False  # only the queue and the held variant have a lead
    if params["variant"] == "resident" and params["per_sm"] * params["num_warps"] > 32:
        return False  # two programs of 32 warps would need every thread slot and half the registers each
    if params["per_sm"] * params["num_warps"] > 64:
        return False  # an SM holds 64 warps
    if threads > block or block // threads > 32 or block > max(256, 2 * next_pow2(facts["group_size"])):
        return False
    if params["variant"] == "per_group":
        return params["chunk"] == 2048 and not params["reverse"] and params["wave_groups"] == 0
    if params["variant"] == "resident":
        # every program of a wave must be resident at once (one per SM), and a group needs at
        # least two of them for the wait to be worth it
        chunks = _gn_chunks(facts, params["chunk"])
        return (not params["reverse"] and params["wave_groups"] == 0 and params["chunk"] >= params["block"]
                and params["per_sm"] <= 2 and 2 <= chunks <= params["per_sm"] * gpu_sms())
    if params["variant"] == "queue":
        # any number of programs: none waits for one that has not started (see the kernel)
        return (not params["reverse"] and params["wave_groups"] == 0 and params["chunk"] >= params["block"]
                and _gn_chunks(facts, params["chunk"]) >= 2)
    if params["wave_groups"] and params["wave_groups"] * 2 > facts["n"] * facts["groups"]:
        return False  # a wave of more than half the groups is hardly a wave
    chunk = params["chunk"]
    # the combine step loads every chunk's partials as one vector: at most 4096 of them
    return block <= chunk < 2 * facts["group_size"] and _gn_chunks(facts, chunk) <= 4096

def _held_early(params: dict[str, Any]) -> int:
    """How many groups ahead of normalising a held program publishes its statistics."""
    return 2 if params["pipeline"] else 1


def _valid_held(facts: dict[str, Any], params: dict[str, Any]) -> bool:
    # One program per chunk of a group, all resident at once (at most four an SM), each holding
    # three chunks in registers (four with pipeline: statistics two groups ahead): at most 128
    # bytes of each a thread. The block is not read (a chunk is one tile): held points keep a
    # block of 4096, the held start's, so that no two of them render the same source.
    threads = 32 * params["num_warps"]
    chunks = _gn_chunks(facts, params["chunk"])
    itemsize = ITEMSIZE[facts["dtype"]]
    # unroll: the chunk as rows, at least one 16-byte vector a thread a row
    rows_fit = params["unroll"] == 1 or params["chunk"] // params["unroll"] >= threads * 16 // itemsize
    plain = rows_fit and not params["reverse"] and params["wave_groups"] == 0
    # ptxas (sm_90a) gives ~250 registers a thread at 128 bytes of a chunk a thread (16K bf16, 8
    # warps); per_sm programs an SM are compiled to at most their share of the register file (maxnreg)
    per_thread = params["chunk"] // threads * itemsize
    # lead: the group loading into registers (3, or 2 without pipeline), no prefetch; further,
    # bulk L2 prefetches of 16-byte multiples that never run past the group, so chunks that divide it
    loading = _held_early(params) + 1
    prefetch = params["lead"] == loading or (params["lead"] > loading and _held_piece_bytes(facts, params) % 16 == 0
                                             and facts["group_size"] % params["chunk"] == 0)
    # an SM's programs hold their chunks and float copies: 32 KB of chunk an SM fills the registers
    # (four an SM of 16 KB chunks took 0.20-0.21 ms, bench/results/h200/search/run_held_gn). The
    # fourth chunk of pipeline fits too: ptxas (sm_90) gives the start's point 247 registers and
    # no spills, 16-bit values held as pairs or not
    fits = params["per_sm"] * params["chunk"] * itemsize <= 32768
    return (plain and params["block"] == 4096 and params["per_sm"] <= 4 and params["per_sm"] * params["num_warps"] <= 32
            and threads <= params["chunk"] and per_thread <= 128 and prefetch and fits
            and 2 <= chunks <= params["per_sm"] * gpu_sms())


def _held_start(facts: dict[str, Any]) -> dict[str, Any] | None:
    """Two held programs an SM, chunks of 128 bytes a thread (about 250 registers; more a thread
    spills), statistics two groups ahead (pipeline), L2 prefetches 4 groups ahead, else none; None where that
    cannot be (a group too large for the GPU's registers at that size, or in float32, which needs
    8 warps a program and spills)."""
    chunk = next_pow2(-(-facts["group_size"] // (2 * gpu_sms())))
    warps = chunk * ITEMSIZE[facts["dtype"]] // (128 * 32)
    params = {"variant": "held", "chunk": chunk, "block": 4096, "num_warps": warps, "reverse": False,
              "wave_groups": 0, "unroll": 1, "pipeline": True, "per_sm": 2, "lead": 4}
    if not 1 <= warps <= 4:
        return None
    # no prefetch where chunks do not divide the group (lead 3 is the chunk loading)
    return next((p for p in (params, {**params, "lead": 3}) if valid_group_norm(facts, "triton", p)), None)


def _held_piece_bytes(facts: dict[str, Any], params: dict[str, Any]) -> int:
    """The bytes of a chunk each warp of a held program prefetches into L2."""
    return params["chunk"] // params["num_warps"] * ITEMSIZE[facts["dtype"]]


# ---------------------------------------------------------------- group norm: C

def _c_group_stats(stats: str) -> str:
    if stats == "two_pass":
        # double sums: a group holds up to millions of values, where float sums lose digits
        return """        double s = 0.0;
        SIMD(reduction(+:s))
        for (int64_t i = 0; i < S; ++i) s += ld(xg, i);
        double dmean = s / S;
        double ss = 0.0;
        SIMD(reduction(+:ss))
        for (int64_t i = 0; i < S; ++i) { double d = ld(xg, i) - dmean; ss += d * d; }
        float mean = (float)dmean, rstd = (float)(1.0 / sqrt(ss / S + EPS));
"""
    return """        double s = 0.0, ss = 0.0;
        SIMD(reduction(+:s, ss))
        for (int64_t i = 0; i < S; ++i) { double v = ld(xg, i); s += v; ss += v * v; }
        double dmean = s / S, var = ss / S - dmean * dmean;
        float mean = (float)dmean, rstd = (float)(1.0 / sqrt((var > 0.0 ? var : 0.0) + EPS));
"""


_C_GN_AFFINE = """static inline void channel_affine(const w_t *w, const b_t *b, int64_t c, float mean, float rstd,
                                  float *scale, float *shift) {
    float sc = rstd, sh = 0.0f;
    if (w) sc *= LD_W(w, c);
    if (b) sh = LD_B(b, c);
    *scale = sc;
    *shift = sh - mean * sc;
}
"""

_C_GN_GROUPS = """    #pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < NG; ++g) {
        const elem_t *restrict xg = x + g * S;
        elem_t *restrict yg = y + g * S;
{stats}        int64_t c0 = (g % G) * CG;
        for (int64_t cc = 0; cc < CG; ++cc) {
            float sc, sh;
            channel_affine(w, b, c0 + cc, mean, rstd, &sc, &sh);
            SIMD()
            for (int64_t p = cc * HW; p < (cc + 1) * HW; ++p) st(yg, p, ld(xg, p) * sc + sh);
        }
        ST_S1(mean_out, g, mean);
        ST_S2(rstd_out, g, rstd);
    }
"""

_C_GN_PLANES = """    /* sums per (sample, channel) plane in parallel, combined per group, then planes normalised */
    double *sums = (double *)malloc(sizeof(double) * 2 * NG * CG);
    float *stat = (float *)malloc(sizeof(float) * 2 * NG);
    if (!sums || !stat) { free(sums); free(stat); return 4; }
    #pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < NG * CG; ++pl) {
        const elem_t *restrict xp = x + pl * HW;
        double s = 0.0, ss = 0.0;
        SIMD(reduction(+:s, ss))
        for (int64_t p = 0; p < HW; ++p) { double v = ld(xp, p); s += v; ss += v * v; }
        sums[2 * pl] = s;
        sums[2 * pl + 1] = ss;
    }
    for (int64_t g = 0; g < NG; ++g) {
        double s = 0.0, ss = 0.0;
        for (int64_t cc = 0; cc < CG; ++cc) { s += sums[2 * (g * CG + cc)]; ss += sums[2 * (g * CG + cc) + 1]; }
        double dmean = s / S, var = ss / S - dmean * dmean;
        stat[2 * g] = (float)dmean;
        stat[2 * g + 1] = (float)(1.0 / sqrt((var > 0.0 ? var : 0.0) + EPS));
        ST_S1(mean_out, g, stat[2 * g]);
        ST_S2(rstd_out, g, stat[2 * g + 1]);
    }
    #pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < NG * CG; ++pl) {
        int64_t g = pl / CG;
        float sc, sh;
        channel_affine(w, b, pl % C, stat[2 * g], stat[2 * g + 1], &sc, &sh);
        const elem_t *restrict xp = x + pl * HW;
        elem_t *restrict yp = y + pl * HW;
        SIMD()
        for (int64_t p = 0; p < HW; ++p) st(yp, p, ld(xp, p) * sc + sh);
    }
    free(sums);
    free(stat);
"""


def render_group_norm_c(facts: dict[str, Any], params: dict[str, Any]) -> str:
    outs = facts["outputs"]
    n_in = 1 + facts["has_weight"] + facts["has_bias"]
    body = (_C_GN_GROUPS.replace("{stats}", _c_group_stats(params["stats"])) if params["parallel"] == "groups"
            else _C_GN_PLANES)
    title = (f"group norm, N={facts['n']} C={facts['c']} HxW={facts['hw']} groups={facts['groups']}, "
             f"{facts['dtype']}")
    return f"""{_c_head(title, GROUP_NORM_OP, params, facts['dtype'])}
{_c_aux("w", facts["w_dtype"], facts["dtype"])}{_c_aux("b", facts["b_dtype"], facts["dtype"])}\
{_c_aux("s1", outs[1]["dtype"], facts["dtype"])}{_c_aux("s2", outs[2]["dtype"], facts["dtype"])}
#define C {facts['c']}LL
#define G {facts['groups']}LL
#define CG {facts['c'] // facts['groups']}LL
#define NG {facts['n'] * facts['groups']}LL
#define HW {facts['hw']}LL
#define S {facts['group_size']}LL
#define EPS {facts['eps']!r}
{_C_GN_AFFINE}
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {{
    if (n_in != {n_in} || n_out != 3) return 1;
    const elem_t *x = (const elem_t *)in[0].data;
{_c_in_ptr("w", facts["has_weight"], 1)}{_c_in_ptr("b", facts["has_bias"], 1 + facts["has_weight"])}\
    elem_t *y = (elem_t *)out[0].data;
    s1_t *mean_out = (s1_t *)out[1].data;
    s2_t *rstd_out = (s2_t *)out[2].data;
{body}    return 0;
}}
"""


# ---------------------------------------------------------------- group norm: Triton

# What the variants whose programs wait for each other start each call from: their counters
# at 0 (resident, queue) or their partials at -1 (held), in a launch of its own, as the waiting
# kernel cannot clear them itself without a second wait
_TRITON_GN_FILL = '''
@triton.jit
def fill(PTR, n, value, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(PTR + idx, tl.zeros([BLOCK], tl.int32) + value, mask=idx < n)
'''

# y = x * scale + shift, with w and b folded into the group's statistics: every Triton group
# norm's last step
_TRITON_GN_AFFINE = '''
@triton.jit
def affine(W, B, c, ok, mean, rstd, IN_CHANNEL: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    scale = rstd
    shift = 0.0
    if HAS_W:
        scale = rstd * tl.load(W + c, mask=ok if not IN_CHANNEL else None).to(tl.float32)
    if HAS_B:
        shift = tl.load(B + c, mask=ok if not IN_CHANNEL else None).to(tl.float32)
    return scale, shift - mean * scale
'''

_TRITON_GN_COMMON = _TRITON_GN_AFFINE + '''

@triton.jit
def group_stats(PART, g, chunks, group_size, eps, CHUNK: tl.constexpr, CHUNKS_P2: tl.constexpr,
                FROM_L2: tl.constexpr):
    # Group g's mean and rstd from its chunks' (mean, M2) partials in PART (Chan's formula).
    j = tl.arange(0, CHUNKS_P2)
    ok = j < chunks
    part = PART + 2 * (g * chunks + j)
    if FROM_L2:  # written by other SMs in this same launch: from L2, never from a stale L1 line
        means = tl.load(part, mask=ok, other=0.0, cache_modifier=".cg")
        m2s = tl.load(part + 1, mask=ok, other=0.0, cache_modifier=".cg")
    else:
        means = tl.load(part, mask=ok, other=0.0)
        m2s = tl.load(part + 1, mask=ok, other=0.0)
    counts = tl.where(ok, tl.minimum(tl.maximum(group_size - j * CHUNK, 0), CHUNK), 0).to(tl.float32)
    mean = tl.sum(counts * means, axis=0) / group_size
    dev = means - mean
    return mean, tl.rsqrt(tl.sum(m2s + counts * dev * dev, axis=0) / group_size + eps)


@triton.jit
def merge(count, mean, m2, x, ok, n_b):
    # Chan's formula: fold one block's (n_b, mean_b, M2_b) into the running statistics.
    n_b = n_b.to(tl.float32)
    mean_b = tl.sum(x, axis=0) / tl.maximum(n_b, 1.0)
    d = tl.where(ok, x - mean_b, 0.0)
    total = count + n_b
    delta = mean_b - mean
    share = n_b / tl.maximum(total, 1.0)
    return total, mean + delta * share, m2 + tl.sum(d * d, axis=0) + delta * delta * count * share


@triton.jit
def normalise_block(X, W, B, Y, g, start, group_size, hw, mean, rstd, BLOCK: tl.constexpr,
                    GROUPS: tl.constexpr, CG: tl.constexpr, IN_CHANNEL: tl.constexpr,
                    HAS_W: tl.constexpr, HAS_B: tl.constexpr, ROWS: tl.constexpr, EVICT: tl.constexpr):
    # (ROWS and EVICT have no defaults: triton 3.6 passes a defaulted string to tl.load as a str,
    # not a constexpr, and fails to compile)
    # ROWS > 1: ROWS consecutive blocks as one [ROWS, BLOCK] tile, all loaded before any is used
    if ROWS == 1:
        idx = start + tl.arange(0, BLOCK)
    else:
        idx = start + tl.arange(0, ROWS)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    ok = idx < group_size
    base = g.to(tl.int64) * group_size
    x = tl.load(X + base + idx, mask=ok, other=0.0, eviction_policy=EVICT).to(tl.float32)
    c0 = (g % GROUPS) * CG
    # HxW a multiple of the tile: a tile lies inside one channel, so w and b are scalars
    c = c0 + start // hw if IN_CHANNEL else c0 + idx // hw
    scale, shift = affine(W, B, c, ok, mean, rstd, IN_CHANNEL, HAS_W, HAS_B)
    tl.store(Y + base + idx, (x * scale + shift).to(Y.dtype.element_ty), mask=ok)


@triton.jit
def chunk_apply(X, W, B, Y, PART, MEAN, RSTD, g, i, chunks, group_size, hw, eps, CHUNK: tl.constexpr,
                BLOCK: tl.constexpr, UNROLL: tl.constexpr, CHUNKS_P2: tl.constexpr,
                FROM_L2: tl.constexpr, GROUPS: tl.constexpr, CG: tl.constexpr, IN_CHANNEL: tl.constexpr,
                HAS_W: tl.constexpr, HAS_B: tl.constexpr, EVICT: tl.constexpr):
    # Pass 2 of chunk i of group g: the group's statistics from its chunks' partials (every
    # program of the group does the same small sum: cheaper than a launch of its own), then
    # normalise the chunk, UNROLL blocks a loop trip.
    mean, rstd = group_stats(PART, g, chunks, group_size, eps, CHUNK, CHUNKS_P2, FROM_L2)
    tl.store(MEAN + g, mean.to(MEAN.dtype.element_ty), mask=i == 0)
    tl.store(RSTD + g, rstd.to(RSTD.dtype.element_ty), mask=i == 0)
    for off in range(0, CHUNK, BLOCK * UNROLL):
        normalise_block(X, W, B, Y, g, i * CHUNK + off, group_size, hw, mean, rstd, BLOCK,
                        GROUPS, CG, IN_CHANNEL, HAS_W, HAS_B, UNROLL, EVICT)
'''

_TRITON_GN_SPLIT = '''
@triton.jit
def gn_partials(X, PART, group_size, chunks, g0, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    # Pass 1, program (g, i) of a wave starting at group g0: Chan statistics of chunk i of
    # group g -> PART[g, i] = (mean, M2).
    pid = tl.program_id(0)
    g, i = g0 + pid // chunks, pid % chunks
    base = g.to(tl.int64) * group_size
    count = tl.zeros([], tl.float32)
    mean = tl.zeros([], tl.float32)
    m2 = tl.zeros([], tl.float32)
    for off in range(0, CHUNK, BLOCK):
        start = i * CHUNK + off
        idx = start + tl.arange(0, BLOCK)
        ok = idx < group_size
        x = tl.load(X + base + idx, mask=ok, other=0.0).to(tl.float32)
        n_b = tl.minimum(tl.maximum(group_size - start, 0), BLOCK)
        count, mean, m2 = merge(count, mean, m2, x, ok, n_b)
    tl.store(PART + 2 * (g * chunks + i), mean)
    tl.store(PART + 2 * (g * chunks + i) + 1, m2)


@triton.jit
def gn_apply(X, W, B, Y, PART, MEAN, RSTD, group_size, chunks, hw, eps, g0, n_programs,
             CHUNK: tl.constexpr, BLOCK: tl.constexpr, CHUNKS_P2: tl.constexpr, REVERSE: tl.constexpr,
             GROUPS: tl.constexpr, CG: tl.constexpr, IN_CHANNEL: tl.constexpr,
             HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # Pass 2, program (g, i): normalise chunk i of group g.
    pid = tl.program_id(0)
    if REVERSE:
        pid = n_programs - 1 - pid
    g, i = g0 + pid // chunks, pid % chunks
    chunk_apply(X, W, B, Y, PART, MEAN, RSTD, g, i, chunks, group_size, hw, eps, CHUNK, BLOCK, 1, CHUNKS_P2, False,
                GROUPS, CG, IN_CHANNEL, HAS_W, HAS_B, "")


def launch(x, w, b, y, mean, rstd):
    chunks = triton.cdiv(GROUP_SIZE, CHUNK)
    # (mean, M2) of every chunk: 8 bytes per CHUNK elements, 0.03% of x's traffic at CHUNK=16K
    part = torch.empty((2 * N_GROUPS * chunks,), dtype=torch.float32, device=x.device)
    # Both passes over a wave of WAVE_GROUPS groups (0: all), then the next wave: the second
    # pass re-reads a wave that pass 1 has just read, from L2 when the wave fits there.
    wave = WAVE_GROUPS or N_GROUPS
    for g0 in range(0, N_GROUPS, wave):
        programs = min(wave, N_GROUPS - g0) * chunks
        gn_partials[(programs,)](x, part, GROUP_SIZE, chunks, g0, CHUNK=CHUNK, BLOCK=BLOCK,
                                 num_warps=NUM_WARPS)
        gn_apply[(programs,)](x, w, b, y, part, mean, rstd, GROUP_SIZE, chunks, HW, EPS, g0, programs,
                              CHUNK=CHUNK, BLOCK=BLOCK, CHUNKS_P2=triton.next_power_of_2(chunks),
                              REVERSE=REVERSE, GROUPS=GROUPS, CG=CG, IN_CHANNEL=IN_CHANNEL, HAS_W=HAS_W,
                              HAS_B=HAS_B, num_warps=NUM_WARPS)
'''

_TRITON_GN_WAITING = '''
@triton.jit
def chunk_stats(X, PART, g, i, group_size, CHUNK: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr,
                CHUNKS: tl.constexpr, EVICT: tl.constexpr):
    # Pass 1 of chunk i of group g: (mean, M2) to PART. Sums per lane, reduced across the program
    # once at the end: a block's loads never wait on a reduction, which one program per SM cannot
    # afford. Sums of x minus the chunk's first value, so that a large mean does not swamp the variance.
    base = g.to(tl.int64) * group_size
    shift = tl.load(X + base + i * CHUNK).to(tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    ss = tl.zeros([BLOCK], tl.float32)
    for off in range(0, CHUNK, BLOCK * UNROLL):
        # UNROLL blocks a trip, loaded as one tile: more bytes in flight per SM, which one
        # program per SM needs; the sum over the tile's rows stays in each thread
        if UNROLL == 1:
            idx = i * CHUNK + off + tl.arange(0, BLOCK)
        else:
            idx = i * CHUNK + off + tl.arange(0, UNROLL)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
        ok = idx < group_size
        x = tl.load(X + base + idx, mask=ok, other=0.0, eviction_policy=EVICT)
        d = tl.where(ok, x.to(tl.float32) - shift, 0.0)
        if UNROLL == 1:
            s += d
            ss += d * d
        else:
            s += tl.sum(d, axis=0)
            ss += tl.sum(d * d, axis=0)
    n = tl.minimum(group_size - i * CHUNK, CHUNK).to(tl.float32)
    s_all = tl.sum(s, axis=0)
    tl.store(PART + 2 * (g * CHUNKS + i), shift + s_all / n)
    tl.store(PART + 2 * (g * CHUNKS + i) + 1, tl.maximum(tl.sum(ss, axis=0) - s_all * s_all / n, 0.0))


@triton.jit
def arrive(ARRIVED, g):
    tl.debug_barrier()  # the whole program's stores precede its arrival
    tl.atomic_add(ARRIVED + g, 1, sem="release", scope="gpu")


@triton.jit
def wait_for_group(ARRIVED, g, CHUNKS: tl.constexpr):
    arrived = tl.atomic_add(ARRIVED + g, 0, sem="acquire", scope="gpu")
    while arrived < CHUNKS:
        arrived = tl.atomic_add(ARRIVED + g, 0, sem="acquire", scope="gpu")

''' + _TRITON_GN_FILL

_TRITON_GN_RESIDENT = '''
@triton.jit
def gn_resident(X, W, B, Y, PART, ARRIVED, MEAN, RSTD, n_groups, wave, group_size, hw, eps,
                CHUNK: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr, CHUNKS: tl.constexpr,
                CHUNKS_P2: tl.constexpr, PHASE: tl.constexpr, PIPELINE: tl.constexpr, GROUPS: tl.constexpr,
                CG: tl.constexpr, IN_CHANNEL: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # PER_SM programs per SM, all resident at once. Program p takes chunk p % CHUNKS of one group of
    # each wave: pass 1 reads the chunk (statistics to PART), the group's programs wait for each
    # other (ARRIVED[g] counts them in), then pass 2 re-reads the chunk, which pass 1 has just
    # left in L2, to normalise it. x crosses DRAM about once. PHASE 0 does both passes with the
    # wait; 1 and 2 do one pass each, as two launches, where programs run one after another
    # (the CPU interpreter, or a GPU with too few SMs for a wave).
    pid = tl.program_id(0)
    i = pid % CHUNKS
    if PIPELINE and PHASE == 0:
        # Pass 1 of wave w before pass 2 of wave w - 1: by the time a program needs the last
        # wave's statistics its group has long arrived, so the wait costs one atomic read instead
        # of a stall while the slowest SM catches up, and DRAM reads go on through it. Pass 1
        # asks L2 to keep its lines (evict_last) and pass 2 lets them go (evict_first), as two
        # waves are in L2 at once.
        # One step past the last wave: there only the last wave's pass 2 is left.
        prev = pid * 0 - 1
        for g0 in range(0, n_groups + wave, wave):
            g = g0 + pid // CHUNKS
            if g < n_groups:
                chunk_stats(X, PART, g, i, group_size, CHUNK, BLOCK, UNROLL, CHUNKS, "evict_last")
                arrive(ARRIVED, g)
            if (prev >= 0) & (prev < n_groups):
                wait_for_group(ARRIVED, prev, CHUNKS)
                chunk_apply(X, W, B, Y, PART, MEAN, RSTD, prev, i, CHUNKS, group_size, hw, eps, CHUNK, BLOCK, UNROLL,
                            CHUNKS_P2, True, GROUPS, CG, IN_CHANNEL, HAS_W, HAS_B, "evict_first")
            prev = g
    else:
        for g0 in range(0, n_groups, wave):
            g = g0 + pid // CHUNKS
            if g < n_groups:
                if PHASE != 2:
                    chunk_stats(X, PART, g, i, group_size, CHUNK, BLOCK, UNROLL, CHUNKS, "")
                if PHASE == 0:
                    arrive(ARRIVED, g)
                    wait_for_group(ARRIVED, g, CHUNKS)
                if PHASE != 1:
                    chunk_apply(X, W, B, Y, PART, MEAN, RSTD, g, i, CHUNKS, group_size, hw, eps, CHUNK, BLOCK,
                                UNROLL, CHUNKS_P2, PHASE == 0, GROUPS, CG, IN_CHANNEL, HAS_W, HAS_B, "")


def launch(x, w, b, y, mean, rstd):
    chunks = triton.cdiv(GROUP_SIZE, CHUNK)
    slots = PER_SM * sm_count(x.device)
    wave = max(1, min(N_GROUPS, slots // chunks))  # groups per wave: every program resident at once
    part = torch.empty((2 * N_GROUPS * chunks,), dtype=torch.float32, device=x.device)
    arrived = torch.empty((N_GROUPS,), dtype=torch.int32, device=x.device)
    common = dict(CHUNK=CHUNK, BLOCK=BLOCK, UNROLL=UNROLL, CHUNKS=chunks, CHUNKS_P2=triton.next_power_of_2(chunks),
                  PIPELINE=PIPELINE, GROUPS=GROUPS, CG=CG, IN_CHANNEL=IN_CHANNEL, HAS_W=HAS_W, HAS_B=HAS_B,
                  num_warps=NUM_WARPS)
    args = (x, w, b, y, part, arrived, mean, rstd, N_GROUPS, wave, GROUP_SIZE, HW, EPS)
    if x.device.type == "cuda" and chunks <= slots:
        fill[(triton.cdiv(N_GROUPS, 1024),)](arrived, N_GROUPS, 0, BLOCK=1024)
        # One program per SM always fits once it compiles. Two might not (registers, shared
        # memory): a cooperative launch refuses a grid that cannot be resident all at once,
        # where a plain one would leave programs waiting for SMs that never free up.
        gn_resident[(wave * chunks,)](*args, PHASE=0, launch_cooperative_grid=PER_SM > 1, **common)
    else:  # programs that cannot all be resident would wait forever: one launch per pass instead
        gn_resident[(wave * chunks,)](*args, PHASE=1, **common)
        gn_resident[(wave * chunks,)](*args, PHASE=2, **common)
'''

_TRITON_GN_QUEUE = '''
@triton.jit
def ticket_work(t, n_work, lead):
    # Ticket t -> (pass 1?, work item k), item k being chunk k % CHUNKS of group k // CHUNKS. The
    # first `lead` tickets are pass 1 of items 0..lead-1; then pass 2 of item a and pass 1 of item
    # lead + a alternate; then the last passes 2. Pass 2 of item a comes after pass 1 of every
    # item below lead + a, so of its whole group when lead >= CHUNKS.
    paired = 2 * (n_work - lead)
    u = t - lead
    first = (t < lead) | ((u < paired) & (u % 2 == 1))
    k = tl.where(t < lead, t, tl.where(u < paired, tl.where(u % 2 == 1, lead + u // 2, u // 2),
                                       n_work - lead + (u - paired)))
    return first, k


@triton.jit
def gn_queue(X, W, B, Y, PART, ARRIVED, MEAN, RSTD, n_groups, n_work, lead, group_size, hw, eps,
             CHUNK: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr, CHUNKS: tl.constexpr,
             CHUNKS_P2: tl.constexpr, GROUPS: tl.constexpr, CG: tl.constexpr, IN_CHANNEL: tl.constexpr,
             HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # Every program takes tickets from one counter (ARRIVED[n_groups]) until none is left, each
    # ticket one pass over one chunk. A pass 2 waits only for passes 1 whose tickets were taken
    # before its own, by programs that are running and never wait in pass 1: no wave barrier,
    # no deadlock whether or not every program is resident, and SMs read one group while they
    # write another. Pass 1 asks L2 to keep its lines for pass 2, `lead` chunks later. Each pass 2
    # sums the group's partials itself: a form in which the group's last pass 1 did it once, for
    # all, was slower on the H200 (0.1062 ms against 0.0995, bench/results/h200/probe/probe8.log).
    ticket = ARRIVED + n_groups
    t = tl.atomic_add(ticket, 1, sem="relaxed")
    while t < 2 * n_work:
        first, k = ticket_work(t, n_work, lead)
        g = k // CHUNKS
        i = k % CHUNKS
        if first:
            chunk_stats(X, PART, g, i, group_size, CHUNK, BLOCK, UNROLL, CHUNKS, "evict_last")
            arrive(ARRIVED, g)
        else:
            wait_for_group(ARRIVED, g, CHUNKS)
            chunk_apply(X, W, B, Y, PART, MEAN, RSTD, g, i, CHUNKS, group_size, hw, eps, CHUNK, BLOCK, UNROLL,
                        CHUNKS_P2, True, GROUPS, CG, IN_CHANNEL, HAS_W, HAS_B, "evict_first")
        t = tl.atomic_add(ticket, 1, sem="relaxed")


def launch(x, w, b, y, mean, rstd):
    chunks = triton.cdiv(GROUP_SIZE, CHUNK)
    n_work = N_GROUPS * chunks
    part = torch.empty((2 * n_work,), dtype=torch.float32, device=x.device)
    counters = torch.empty((N_GROUPS + 1,), dtype=torch.int32, device=x.device)  # arrivals, then the ticket
    fill[(triton.cdiv(N_GROUPS + 1, 1024),)](counters, N_GROUPS + 1, 0, BLOCK=1024)
    programs = min(n_work, PER_SM * sm_count(x.device))
    gn_queue[(programs,)](x, w, b, y, part, counters, mean, rstd, N_GROUPS, n_work, min(LEAD * chunks, n_work),
                          GROUP_SIZE, HW, EPS, CHUNK=CHUNK, BLOCK=BLOCK, UNROLL=UNROLL, CHUNKS=chunks,
                          CHUNKS_P2=triton.next_power_of_2(chunks), GROUPS=GROUPS, CG=CG, IN_CHANNEL=IN_CHANNEL,
                          HAS_W=HAS_W, HAS_B=HAS_B, num_warps=NUM_WARPS)
'''


# 16-bit values held as 32-bit pairs (the held variant's PAIRS): the two values of a word as
# floats, and two floats rounded to the output type as a word, one cvt instruction a pair on a
# GPU (CVT), casts and shifts on the interpreter, which has no inline assembly. Written for the
# source's own type only, and only where HxW is even (a word's two values then share their
# channel): other sources have none and never hold pairs.
_PAIR_UNPACK = {
    "bfloat16": """    # bfloat16 is float32's upper half
    return (v << 16).to(tl.float32, bitcast=True), (v & -65536).to(tl.float32, bitcast=True)""",
    "float16": """    return (v.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32),
            (v >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32))""",
}
_PAIR_CVT = {"bfloat16": "cvt.rn.bf16x2.f32 $0, $2, $1;", "float16": "cvt.rn.f16x2.f32 $0, $2, $1;"}


def _held_pairs(dtype: str, hw: int) -> str:
    if dtype not in _PAIR_UNPACK or hw % 2:
        return "\nPAIR_CVT = None  # values held one a register: no pairs of this type and HxW\n"
    return f'''
PAIR_CVT = {_PAIR_CVT[dtype]!r}


@triton.jit
def unpack(v):
{_PAIR_UNPACK[dtype]}


@triton.jit
def pack(lo, hi, TY: tl.constexpr, CVT: tl.constexpr):
    if CVT != "":
        return tl.inline_asm_elementwise(CVT, "=r,r,r", [lo, hi], dtype=tl.int32, is_pure=True, pack=1)
    return ((lo.to(TY).to(tl.int16, bitcast=True).to(tl.int32) & 65535)
            | (hi.to(TY).to(tl.int16, bitcast=True).to(tl.int32) << 16))

'''


_TRITON_GN_HELD = '''
@triton.jit
def add_triples(a, b, c, d, e, f):
    return tl.maximum(a, d), b + e, c + f


@triton.jit
def publish_slice(PART, x, k, ok, n, g, pid, CHUNKS: tl.constexpr, EVEN: tl.constexpr, ROWS: tl.constexpr,
                  PAIRS: tl.constexpr):
    # (mean, M2) of one program's chunk of group g to PART[g] as bits, with one reduction across
    # the program: the sum of x, for the mean, and of (x - k)^2, k a value of the chunk, for M2,
    # so that a large mean cancels nothing. Returns the mean. PART[g] holds the chunks' means,
    # then their M2s. The bits are their own flag: PART starts as -1 (a NaN that no arithmetic
    # gives; a result with those bits is stored as another NaN), so a reader that finds no -1 has
    # them all, with no counter and no fence: a release fence would wait for every load the
    # program has in flight, the next groups' too. PAIRS: x is 32-bit words of two 16-bit values.
    if PAIRS:
        lo, hi = unpack(x)
        dl = lo - k
        dh = hi - k
        if not EVEN:
            dl = tl.where(ok, dl, 0.0)
            dh = tl.where(ok, dh, 0.0)
        s, q = sum_pairs(lo + hi, dl * dl + dh * dh, ROWS)  # masked-off words hold 0
    else:
        x = x.to(tl.float32)
        d = x - k
        if not EVEN:
            d = tl.where(ok, d, 0.0)
        s, q = sum_pairs(x, d * d, ROWS)  # masked-off lanes of x hold 0
    mean = s / n
    mean_bits = mean.to(tl.int32, bitcast=True)
    m2_bits = tl.maximum(q - n * (mean - k) * (mean - k), 0.0).to(tl.int32, bitcast=True)
    tl.store(PART + 2 * g * CHUNKS + pid, tl.where(mean_bits == -1, 0x7FC00000, mean_bits))
    tl.store(PART + (2 * g + 1) * CHUNKS + pid, tl.where(m2_bits == -1, 0x7FC00000, m2_bits))
    return mean


@triton.jit
def add_pairs(a, b, c, d):
    return a + c, b + d


@triton.jit
def sum_pairs(a, b, ROWS: tl.constexpr):
    # Sums of two [ROWS, C] tiles: over the rows first, in each thread ROWS-long chains side by
    # side, then across the program (a [CHUNK] tile would add a thread's values in one long chain)
    if ROWS > 1:
        a, b = tl.reduce((a, b), 0, add_pairs)
    return tl.reduce((a, b), 0, add_pairs)


@triton.jit
def peek(PART, g, CHUNKS: tl.constexpr, CHUNKS_P2: tl.constexpr):
    # Group g's partials as they are now, from L2 (volatile: never a stale copy). Issued before the
    # program's own statistics of the next group, so that their latency hides behind that work.
    j = tl.arange(0, CHUNKS_P2)
    at = PART + 2 * g * CHUNKS + j
    return (tl.load(at, mask=j < CHUNKS, other=0, volatile=True),
            tl.load(at + CHUNKS, mask=j < CHUNKS, other=0, volatile=True))


@triton.jit
def gather(mean_bits, m2_bits, k, counts):
    # One reduction: partials still missing (-1), the group's sum, and Chan's M2 sum about k
    means = mean_bits.to(tl.float32, bitcast=True)
    dev = means - k
    return tl.reduce((((mean_bits == -1) | (m2_bits == -1)).to(tl.int32), counts * means,
                      m2_bits.to(tl.float32, bitcast=True) + counts * dev * dev), 0, add_triples)


@triton.jit
def settle(PART, g, mean_bits, m2_bits, k, group_size, eps, CHUNK: tl.constexpr, CHUNKS: tl.constexpr,
           CHUNKS_P2: tl.constexpr):
    # Group g's mean and rstd once no partial is -1: a program that has not published yet is
    # waited for by looking again (on the interpreter they are all there at the first look).
    # Chan's formula about k (the program's own chunk's mean), not the group's mean, so that one
    # reduction gives the sums (and the count of missing partials): the group's variance includes
    # its chunks' spread, so k - mean is a few standard deviations and nothing cancels.
    j = tl.arange(0, CHUNKS_P2)
    counts = tl.where(j < CHUNKS, tl.minimum(tl.maximum(group_size - j * CHUNK, 0), CHUNK), 0).to(tl.float32)
    missing, a, b = gather(mean_bits, m2_bits, k, counts)
    while missing > 0:
        mean_bits, m2_bits = peek(PART, g, CHUNKS, CHUNKS_P2)
        missing, a, b = gather(mean_bits, m2_bits, k, counts)
    mean = a / group_size
    return mean, tl.rsqrt(tl.maximum(b / group_size - (mean - k) * (mean - k), 0.0) + eps)


@triton.jit
def own_mean(PART, g, pid, CHUNKS: tl.constexpr):
    # the mean this program published for its chunk of group g
    return tl.load(PART + 2 * g * CHUNKS + pid).to(tl.float32, bitcast=True)


'''


def _rotation(name: str, count: int) -> str:
    """The loop's last line for one rotation: name0, .., name{count-1} = name1, .., name{count}."""
    return (f"\n        {', '.join(f'{name}{i}' for i in range(count))}"
            f" = {', '.join(f'{name}{i}' for i in range(1, count + 1))}")


def _held_kernel(lead: int, piece_bytes: int, early: int) -> str:
    """gn_held, whose programs publish their statistics `early` groups (1 or 2) before they
    normalise that group, so hold early + 1 chunks and load one more. Beyond the chunks that
    load into registers, for lead > early + 1 each warp asks L2 for its piece (piece_bytes) of its
    program's chunk of group g + lead with one bulk prefetch: bytes in flight that hold no
    registers. The warp's lanes give the same address, so the prefetch, an instruction of one
    address a warp, issues once. The rotation of held chunks (x0 the group normalised, x{early}
    the one published, x{early + 1} the one loading) is written out for each depth."""
    last = early + 1  # the chunk loading
    prefetch = "" if lead <= last else f'''
        if PREFETCH:
            ahead = tl.minimum(g + {lead}, n_groups - 1)  # the last group again past the end: harmless
            piece = X + ahead * values + pid * CHUNK + tl.arange(0, THREADS) // 32 * (CHUNK // (THREADS // 32))
            tl.inline_asm_elementwise("cp.async.bulk.prefetch.L2.global [$1], {piece_bytes}; mov.u32 $0, 0;",
                                      "=r,l", [piece], dtype=tl.int32, is_pure=False, pack=1)'''
    first_loads = "".join(f'''
    x{i} = tl.load(XH + {i} * group + idx, mask=ok & (n_groups > {i}), other=0, eviction_policy="evict_first")
    k{i} = tl.load(X + {i} * values + pid * CHUNK, mask=n_groups > {i}, other=0.0).to(tl.float32)'''
                          for i in range(1, last))
    first_means = "".join(f"\n    m{i} = 0.0" for i in range(early))
    publish = "m{0} = publish_slice(PART, x{0}, k{0}, ok, n, {0}, pid, CHUNKS, EVEN, ROWS, PAIRS)"
    first_publish = f"\n        {publish.format(0)}" + "".join(
        f"\n        if n_groups > {i}:\n            {publish.format(i)}" for i in range(1, early))
    rotate = "".join(_rotation(name, count) for name, count in (("x", last), ("k", last), ("m", early)))
    return f'''
@triton.jit
def gn_held(X, W, B, Y, PART, MEAN, RSTD, n_groups, group_size, hw, eps,
            CHUNK: tl.constexpr, CHUNKS: tl.constexpr, CHUNKS_P2: tl.constexpr, PHASE: tl.constexpr,
            EVEN: tl.constexpr, ROWS: tl.constexpr, THREADS: tl.constexpr, PREFETCH: tl.constexpr,
            PAIRS: tl.constexpr, CVT: tl.constexpr, GROUPS: tl.constexpr,
            CG: tl.constexpr, IN_CHANNEL: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # The whole GPU holds a group: program p keeps chunk p of every group in registers, CHUNKS
    # programs all resident. x is read from DRAM once and never again, from L2 or anywhere. Each
    # iteration a program starts loading group g + {last} (x{last}), looks at group g's partials,
    # publishes its own of group g + {early} (x{early}), then (group g's partials published
    # {"an iteration" if early == 1 else f"{early} iterations"} ago, so the wait is usually over)
    # normalises the chunk of group g (x0) it already holds. The whole GPU works on one group at a
    # time, so the bytes in flight are those of the groups loading ahead.
    # EVEN: chunks divide the group, so nothing is masked. ROWS: the chunk as a [ROWS, CHUNK / ROWS]
    # tile. PREFETCH: on a GPU, x 16-byte aligned.
    # PAIRS: 16-bit x and y are loaded and held as 32-bit words of two values. Held as 16-bit
    # tensors, the chunks are carried across the loop a value a register and repacked each
    # iteration (ptxas, sm_90: 293 PRMT an iteration at the start's point); as words they need
    # no repacking, and y packs with one cvt a pair (CVT): 0.5-2% faster in probe19, 0.6-22% with
    # statistics two groups ahead in probe23.
    # PHASE 0 does it all; 1 and 2 (statistics, then normalising) are two launches for programs
    # that run one after another (the CPU interpreter), which would wait forever in one.
    pid = tl.program_id(0)
    UNIT: tl.constexpr = 2 if PAIRS else 1  # values a held element
    WIDTH: tl.constexpr = CHUNK // UNIT  # held elements a chunk
    if PAIRS:
        XH = X.to(tl.pointer_type(tl.int32))
        YH = Y.to(tl.pointer_type(tl.int32))
    else:
        XH = X
        YH = Y
    if ROWS == 1:
        idx = pid * WIDTH + tl.arange(0, WIDTH)
    else:
        idx = pid * WIDTH + tl.arange(0, ROWS)[:, None] * (WIDTH // ROWS) + tl.arange(0, WIDTH // ROWS)[None, :]
    ok = idx < group_size // UNIT
    values = group_size.to(tl.int64)
    group = values // UNIT  # held elements a group
    if EVEN:
        x0 = tl.load(XH + idx, eviction_policy="evict_first")
    else:
        x0 = tl.load(XH + idx, mask=ok, other=0, eviction_policy="evict_first")
    # the chunk's first value in each group, as every thread's shift for that group's statistics
    k0 = tl.load(X + pid * CHUNK).to(tl.float32){first_loads}
    n = tl.minimum(group_size - pid * CHUNK, CHUNK).to(tl.float32)
    # this program's chunk means of groups g..: the k of each group's statistics{first_means}
    if PHASE != 2:{first_publish}
    for g in range(0, n_groups):{prefetch}
        x{last} = tl.load(XH + (g + {last}) * group + idx, mask=ok & (g + {last} < n_groups), other=0,
                     eviction_policy="evict_first")
        k{last} = tl.load(X + (g + {last}) * values + pid * CHUNK, mask=g + {last} < n_groups,
                     other=0.0).to(tl.float32)
        if PHASE != 1:
            mean_bits, m2_bits = peek(PART, g, CHUNKS, CHUNKS_P2)
        m{early} = m{early - 1}
        if PHASE != 2:
            if g + {early} < n_groups:
                m{early} = publish_slice(PART, x{early}, k{early}, ok, n, g + {early}, pid, CHUNKS, EVEN, ROWS,
                                   PAIRS)
        if PHASE != 1:
            if PHASE == 2:  # the two-launch form: the mean that pass 1 published
                m0 = own_mean(PART, g, pid, CHUNKS)
            mean, rstd = settle(PART, g, mean_bits, m2_bits, m0, group_size, eps, CHUNK, CHUNKS, CHUNKS_P2)
            tl.store(MEAN + g, mean.to(MEAN.dtype.element_ty), mask=pid == 0)
            tl.store(RSTD + g, rstd.to(RSTD.dtype.element_ty), mask=pid == 0)
            c0 = (g % GROUPS) * CG
            # HxW a multiple of the chunk: the chunk lies inside one channel, so w and b are scalars
            # (pairs need HxW even: a word's two values then share their channel)
            c = c0 + pid * CHUNK // hw if IN_CHANNEL else c0 + idx * UNIT // hw
            scale, shift = affine(W, B, c, ok, mean, rstd, IN_CHANNEL, HAS_W, HAS_B)
            if PAIRS:
                lo, hi = unpack(x0)
                y = pack(lo * scale + shift, hi * scale + shift, Y.dtype.element_ty, CVT)
            else:
                y = (x0.to(tl.float32) * scale + shift).to(Y.dtype.element_ty)
            # y streams out (evict_first): the L2 keeps the groups prefetched ahead
            if EVEN:
                tl.store(YH + g * group + idx, y, eviction_policy="evict_first")
            else:
                tl.store(YH + g * group + idx, y, mask=ok, eviction_policy="evict_first"){rotate}


'''


_TRITON_GN_HELD_LAUNCH = '''
def launch(x, w, b, y, mean, rstd):
    chunks = triton.cdiv(GROUP_SIZE, CHUNK)
    part = torch.empty((2 * N_GROUPS * chunks,), dtype=torch.int32, device=x.device)  # (mean, M2) bits
    fill[(triton.cdiv(part.numel(), 1024),)](part, part.numel(), -1, BLOCK=1024)  # nothing published
    # 16-bit values held and stored as pairs where x and y are 4-byte aligned
    pairs = PAIR_CVT is not None and x.data_ptr() % 4 == 0 and y.data_ptr() % 4 == 0
    common = dict(CHUNK=CHUNK, CHUNKS=chunks, CHUNKS_P2=triton.next_power_of_2(chunks),
                  EVEN=GROUP_SIZE % CHUNK == 0, ROWS=UNROLL, THREADS=32 * NUM_WARPS, PAIRS=pairs,
                  CVT=PAIR_CVT if pairs and x.device.type == "cuda" else "", GROUPS=GROUPS, CG=CG,
                  IN_CHANNEL=IN_CHANNEL, HAS_W=HAS_W, HAS_B=HAS_B, num_warps=NUM_WARPS, num_stages=1,
                  # PER_SM programs share an SM's 64K registers
                  maxnreg=min(255, 65536 // (PER_SM * 32 * NUM_WARPS) // 8 * 8))
    args = (x, w, b, y, part, mean, rstd, N_GROUPS, GROUP_SIZE, HW, EPS)
    if x.device.type == "cuda" and chunks <= PER_SM * sm_count(x.device):
        # every program must be resident at once: a cooperative launch refuses a grid that
        # cannot be (registers, a GPU with fewer SMs), where a plain one would hang
        gn_held[(chunks,)](*args, PHASE=0, PREFETCH=x.data_ptr() % 16 == 0, launch_cooperative_grid=True,
                           **common)
    else:  # programs that cannot all be resident would wait forever: one launch per pass instead
        gn_held[(chunks,)](*args, PHASE=1, PREFETCH=False, **common)
        gn_held[(chunks,)](*args, PHASE=2, PREFETCH=False, **common)
'''

_TRITON_GN_PER_GROUP = '''
@triton.jit
def gn_group(X, W, B, Y, MEAN, RSTD, group_size, hw, eps, BLOCK: tl.constexpr, GROUPS: tl.constexpr,
             CG: tl.constexpr, IN_CHANNEL: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # One program per group: Chan statistics over the group in blocks, then a second read to normalise.
    g = tl.program_id(0)
    base = g.to(tl.int64) * group_size
    count = tl.zeros([], tl.float32)
    mean = tl.zeros([], tl.float32)
    m2 = tl.zeros([], tl.float32)
    for start in range(0, group_size, BLOCK):
        idx = start + tl.arange(0, BLOCK)
        ok = idx < group_size
        x = tl.load(X + base + idx, mask=ok, other=0.0).to(tl.float32)
        count, mean, m2 = merge(count, mean, m2, x, ok, tl.minimum(group_size - start, BLOCK))
    rstd = tl.rsqrt(m2 / group_size + eps)
    tl.store(MEAN + g, mean.to(MEAN.dtype.element_ty))
    tl.store(RSTD + g, rstd.to(RSTD.dtype.element_ty))
    for start in range(0, group_size, BLOCK):
        normalise_block(X, W, B, Y, g, start, group_size, hw, mean, rstd, BLOCK, GROUPS, CG, IN_CHANNEL,
                        HAS_W, HAS_B, 1, "")


def launch(x, w, b, y, mean, rstd):
    gn_group[(N_GROUPS,)](x, w, b, y, mean, rstd, GROUP_SIZE, HW, EPS, BLOCK=BLOCK, GROUPS=GROUPS, CG=CG,
                          IN_CHANNEL=IN_CHANNEL, HAS_W=HAS_W, HAS_B=HAS_B, num_warps=NUM_WARPS)
'''

# Where the second look at x comes from: (1,256,512,512) bf16 is 128 MB, more than the H200's
# 50 MB of L2 and the ~33 MB of all its registers, so x cannot wait on chip whole for its
# statistics. The split one walks the groups in reverse (reverse=True), so the last ~20-40 MB
# that pass 1 read are still in L2, or runs both passes over waves of a few groups
# (wave_groups), at two launches a wave; the resident one has a group's programs wait for
# each other, so the second read is of what each just read; the queue runs pass 2 of a group a
# few groups behind its pass 1, with no wave barrier. Those read x twice, the second time from
# L2, and the queue is bound by L2 (ncu: 87-89% L2 throughput). The held one keeps a group, not
# x, on chip: the whole GPU holds one group at a time in registers and reads x once. On the
# H200 it is the best, 0.0768 ms, 1.21x the floor, with statistics two groups ahead; the queue
# reached 0.0990, 1.57x (bench/results/h200/search/table_all.md, bench/results/h200/probe/README.md).


# Per variant: the parameters its source reads as constants besides BLOCK and NUM_WARPS, which
# every variant reads (a parameter a variant ignores is left out, so that it does not make a new
# source). Its header states them all, in _GN_ORDER.
_GN_CONSTANTS = {"split": ("chunk", "reverse", "wave_groups"), "resident": ("chunk", "unroll", "pipeline", "per_sm"),
                 "queue": ("chunk", "unroll", "per_sm", "lead"), "per_group": (),
                 "held": ("chunk", "unroll", "pipeline", "per_sm", "lead")}
_GN_ORDER = ("chunk", "block", "unroll", "num_warps", "reverse", "wave_groups", "pipeline", "per_sm", "lead")


def render_group_norm_triton(facts: dict[str, Any], params: dict[str, Any]) -> str:
    params = {**_GN_DEFAULTS, **params}
    variant = params["variant"]
    # the held variant has no blocks: a program's whole chunk is one tile
    tile = ("num_warps",) if variant == "held" else ("block", "num_warps")
    shown = [k for k in _GN_ORDER if k in tile or k in _GN_CONSTANTS[variant]]
    described = f"variant={variant} " + " ".join(f"{k}={params[k]}" for k in shown)
    constants = "".join(f"{k.upper()} = {params[k]}\n" for k in _GN_CONSTANTS[variant])
    block = "" if variant == "held" else f"BLOCK = {params['block']}\n"
    tile_size = params["chunk"] if variant == "held" else params["block"] * params["unroll"]
    if variant == "held":  # its own statistics and waiting: of the shared code only the last step
        body = (_TRITON_GN_AFFINE + _TRITON_GN_FILL + _held_pairs(facts["dtype"], facts["hw"]) + _TRITON_GN_HELD
                + _held_kernel(params["lead"], _held_piece_bytes(facts, params), _held_early(params))
                + _TRITON_GN_HELD_LAUNCH
                + TRITON_SM_COUNT)
    else:
        body = _TRITON_GN_COMMON + {"split": _TRITON_GN_SPLIT, "per_group": _TRITON_GN_PER_GROUP,
                                    "resident": _TRITON_GN_WAITING + _TRITON_GN_RESIDENT + TRITON_SM_COUNT,
                                    "queue": _TRITON_GN_WAITING + _TRITON_GN_QUEUE + TRITON_SM_COUNT}[variant]
    return f'''"""kernforge builtin: group norm, N={facts['n']} C={facts['c']} HxW={facts['hw']} \
groups={facts['groups']}, {facts['dtype']}.

kf-op: {GROUP_NORM_OP}
{described}
"""
import torch
import triton
import triton.language as tl

N_GROUPS = {facts['n'] * facts['groups']}
GROUPS = {facts['groups']}
CG = {facts['c'] // facts['groups']}
HW = {facts['hw']}
GROUP_SIZE = {facts['group_size']}
EPS = {facts['eps']!r}
HAS_W = {facts['has_weight']}
HAS_B = {facts['has_bias']}
{block}NUM_WARPS = {params['num_warps']}
IN_CHANNEL = {facts['hw'] % tile_size == 0}
{constants}{body}

def kf_forward(input, weight, bias, N, C, HxW, group, eps):
    x = input
{_alloc_lines(facts['outputs'], ["y", "mean", "rstd"], "x")}
    launch(x, weight if HAS_W else x, bias if HAS_B else x, y, mean, rstd)
    return y, mean, rstd
'''


def render_group_norm(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> str:
    return render_group_norm_c(facts, params) if backend == "cpu" else render_group_norm_triton(facts, params)


# ================================================================ batch norm (inference)

# Where each op keeps its arguments: (weight, bias, running_mean, running_var, training or None, eps).
_BN_LAYOUT = {
    "aten::native_batch_norm.default": (1, 2, 3, 4, 5, 7),
    "aten::_native_batch_norm_legit_no_training.default": (1, 2, 3, 4, None, 6),
    "aten::cudnn_batch_norm.default": (1, 2, 3, 4, 5, 7),
}


def _bn_layout(x: dict[str, Any]) -> str | None:
    shape, stride = x["shape"], x["stride"]
    if stride == contiguous_strides(shape):
        return "nchw"
    if len(shape) == 4:
        _, c, h, w = shape
        want = [h * w * c, 1, w * c, c]
        if all(s == t for s, t, size in zip(stride, want, shape) if size > 1):
            return "nhwc"
    return None


def match_batch_norm(task: KernelTask) -> dict[str, Any] | str:
    if task.op not in BATCH_NORM_OPS:
        return f"no built-in template for {task.op}"
    x = _common_x(task, "batch norm")
    if isinstance(x, str):
        return x
    w_i, b_i, rm_i, rv_i, train_i, eps_i = _BN_LAYOUT[task.op]
    if len(task.args) <= eps_i:
        return f"batch norm with fewer arguments than {task.op} takes"
    if train_i is not None and task.args[train_i]:
        # training updates running_mean/var in place and returns batch statistics: another kernel
        return "batch norm in training mode (batch statistics, running stats updated in place) has no " \
               "built-in template; only inference (training=False) is supported"
    if len(x["shape"]) < 2:
        return "batch norm on an input without a channel dim"
    layout = _bn_layout(x)
    if layout is None:
        return "batch norm on an input neither contiguous nor channels-last has no built-in template"
    args = task.args
    params = {name: args[i] for name, i in (("weight", w_i), ("bias", b_i), ("running_mean", rm_i),
                                             ("running_var", rv_i))}
    if params["running_mean"] is None or params["running_var"] is None:
        return "batch norm in inference without running statistics has no built-in template"
    c = x["shape"][1]
    for name, desc in params.items():
        why = _aux_dtype_reason(name, desc, x["dtype"])
        if why:
            return f"batch norm: {why}"
        if desc is not None and math.prod(desc["shape"]) != c:
            return f"batch norm with a {name} not of C={c} values"
    # The saved statistics are empty on CPU in eval mode (and for cuDNN); CUDA's native kernels return
    # [C] fp32 copies of running_mean and 1/sqrt(running_var + eps) (seen on the H200, torch 2.11):
    # written when task.outputs lists them non-empty.
    outputs = _outputs(task)
    saved = outputs[1:3]
    has_saved = len(saved) == 2 and all(math.prod(o["shape"]) == c for o in saved)
    if not has_saved and any(math.prod(o["shape"]) for o in saved):
        return "batch norm inference whose saved statistics are neither empty nor [C] has no built-in template"
    if has_saved and any(o["dtype"] not in (_short(x["dtype"]), "float32") for o in saved):
        return "batch norm with saved statistics in another dtype has no built-in template"
    return {"op": task.op, "n": x["shape"][0], "c": c, "hw": math.prod(x["shape"][2:]), "layout": layout,
            "has_saved": has_saved,
            "dtype": _short(x["dtype"]), "eps": float(args[eps_i]), "outputs": outputs,
            **{f"has_{k}": v is not None for k, v in params.items() if k in ("weight", "bias")},
            **{f"{k}_dtype": _short(v["dtype"]) if v else _short(x["dtype"]) for k, v in params.items()}}


def space_batch_norm(facts: dict[str, Any], backend: str) -> dict[str, list[Any]]:
    if backend == "cpu":
        return {"schedule": ["static", "dynamic"], "simd": [False, True]}
    if backend == "triton":
        layout_variant = "plane" if facts["layout"] == "nchw" else "tile"
        return {"variant": ["flat", layout_variant], "block": [512, 1024, 2048, 4096, 8192],
                "num_warps": [2, 4, 8, 16]}
    return {}


def initial_batch_norm(facts: dict[str, Any], backend: str) -> dict[str, Any]:
    if backend == "cpu":
        return {"schedule": "static", "simd": True}
    if facts["layout"] == "nhwc":
        # ResNet-50 channels-last: C in 64..2048, a [positions x channels] tile with the channel
        # vectors loaded once per program.
        block = min(4096, max(512, next_pow2(facts["n"] * facts["c"] * facts["hw"])))
        return {"variant": "tile", "block": block, "num_warps": 8 if block >= 2048 else 4}
    if facts["hw"] >= 1024:
        # a (sample, channel) plane of >= 1K values: scalar scale/shift, blocks of up to 4K
        block = min(4096, max(512, next_pow2(facts["hw"])))
        return {"variant": "plane", "block": block, "num_warps": 4 if block <= 1024 else 8}
    # 7x7 or 14x14 planes would leave most of a plane program masked: flat, the channel per element
    # (32,2048,7,7) fp32 on the H200: block 1024 with 8 warps 14.8 us, 2048 16.2, 4096 20.0 (eager 49;
    # timed by hand while the family was written, not kept in bench/results)
    block = min(1024, max(512, next_pow2(facts["n"] * facts["c"] * facts["hw"])))
    return {"variant": "flat", "block": block, "num_warps": 8 if block >= 1024 else 4}


def valid_batch_norm(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> bool:
    if backend == "cpu":
        return True
    threads = 32 * params["num_warps"]
    numel = facts["n"] * facts["c"] * facts["hw"]
    block = params["block"]
    if threads > block or block // threads > 32 or block > max(512, next_pow2(numel)):
        return False
    # a plane program's block past the plane's size would be mostly masked
    return params["variant"] != "plane" or block <= max(512, next_pow2(facts["hw"]))


# ---------------------------------------------------------------- batch norm: C

def _c_bn_inputs(facts: dict[str, Any]) -> tuple[str, int]:
    """Pointers in `in` order: x, [weight], [bias], running_mean, running_var (None args skipped)."""
    lines, index = [], 1
    for name, present in (("w", facts["has_weight"]), ("b", facts["has_bias"]), ("rm", True), ("rv", True)):
        lines.append(_c_in_ptr(name, present, index))
        index += present
    return "".join(lines), index


def _c_bn_saved(facts: dict[str, Any]) -> str:
    """CUDA's eval-mode saved statistics when the task lists them: running_mean, 1/sqrt(running_var + eps)."""
    if not facts["has_saved"]:
        return "    /* the saved statistics (and cuDNN's reserve) are empty in inference: nothing to write */\n"
    outs = facts["outputs"]
    return f"""    for (int64_t c = 0; c < C; ++c) {{
        float m = LD_RM(rm, c), inv = (float)(1.0 / sqrt((double)LD_RV(rv, c) + EPS));
        {_c_store_to("out[1].data", outs[1]["dtype"], facts["dtype"], "m")}
        {_c_store_to("out[2].data", outs[2]["dtype"], facts["dtype"], "inv")}
    }}
"""


def _c_store_to(ptr: str, dtype: str, x_dtype: str, value: str) -> str:
    if dtype == x_dtype:
        return f"st((elem_t *){ptr}, c, {value});"
    return f"((float *){ptr})[c] = {value};"


def render_batch_norm_c(facts: dict[str, Any], params: dict[str, Any]) -> str:
    pointers, n_in = _c_bn_inputs(facts)
    aux = "".join(_c_aux(name, facts[f"{key}_dtype"], facts["dtype"])
                  for name, key in (("w", "weight"), ("b", "bias"), ("rm", "running_mean"),
                                    ("rv", "running_var")))
    if facts["layout"] == "nchw":
        body = f"""    #pragma omp parallel for schedule({params['schedule']})
    for (int64_t pl = 0; pl < N * C; ++pl) {{
        float sc, sh;
        channel_affine(w, b, rm, rv, pl % C, &sc, &sh);
        const elem_t *restrict xp = x + pl * HW;
        elem_t *restrict yp = y + pl * HW;
        SIMD()
        for (int64_t p = 0; p < HW; ++p) st(yp, p, ld(xp, p) * sc + sh);
    }}
"""
    else:
        body = f"""    /* channels-last: the channel is the fastest index; scale and shift as vectors */
    float *sc = (float *)malloc(sizeof(float) * 2 * C);
    if (!sc) return 4;
    float *sh = sc + C;
    for (int64_t c = 0; c < C; ++c) channel_affine(w, b, rm, rv, c, &sc[c], &sh[c]);
    #pragma omp parallel for schedule({params['schedule']})
    for (int64_t pos = 0; pos < N * HW; ++pos) {{
        const elem_t *restrict xp = x + pos * C;
        elem_t *restrict yp = y + pos * C;
        SIMD()
        for (int64_t c = 0; c < C; ++c) st(yp, c, ld(xp, c) * sc[c] + sh[c]);
    }}
    free(sc);
"""
    title = f"batch norm inference, N={facts['n']} C={facts['c']} HW={facts['hw']} {facts['layout']}, {facts['dtype']}"
    return f"""{_c_head(title, facts['op'], params, facts['dtype'])}
{aux}
#define N {facts['n']}LL
#define C {facts['c']}LL
#define HW {facts['hw']}LL
#define EPS {facts['eps']!r}

static inline void channel_affine(const w_t *w, const b_t *b, const rm_t *rm, const rv_t *rv, int64_t c,
                                  float *scale, float *shift) {{
    float sc = (float)(1.0 / sqrt((double)LD_RV(rv, c) + EPS));
    if (w) sc *= LD_W(w, c);
    *scale = sc;
    *shift = (b ? LD_B(b, c) : 0.0f) - LD_RM(rm, c) * sc;
}}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {{
    if (n_in != {n_in} || n_out != {len(facts['outputs'])}) return 1;
    const elem_t *x = (const elem_t *)in[0].data;
{pointers}    elem_t *y = (elem_t *)out[0].data;
{_c_bn_saved(facts)}{body}    return 0;
}}
"""


# ---------------------------------------------------------------- batch norm: Triton

_TRITON_BN_COMMON = '''
@triton.jit
def scale_shift(W, B, RM, RV, c, eps, mask, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # y = x * scale + shift with scale = w / sqrt(var + eps), shift = b - mean * scale
    scale = tl.rsqrt(tl.load(RV + c, mask=mask, other=1.0).to(tl.float32) + eps)
    if HAS_W:
        scale = scale * tl.load(W + c, mask=mask, other=0.0).to(tl.float32)
    shift = -tl.load(RM + c, mask=mask, other=0.0).to(tl.float32) * scale
    if HAS_B:
        shift = shift + tl.load(B + c, mask=mask, other=0.0).to(tl.float32)
    return scale, shift
'''

_TRITON_BN_SAVED = '''
@triton.jit
def store_saved(RM, RV, SM, SI, c, eps, mask, HAS_SAVED: tl.constexpr):
    # CUDA's eval-mode saved statistics: running_mean and 1/sqrt(running_var + eps), per channel
    if HAS_SAVED:
        tl.store(SM + c, tl.load(RM + c, mask=mask).to(SM.dtype.element_ty), mask=mask)
        inv = tl.rsqrt(tl.load(RV + c, mask=mask, other=1.0).to(tl.float32) + eps)
        tl.store(SI + c, inv.to(SI.dtype.element_ty), mask=mask)
'''

_TRITON_BN_FLAT = '''
@triton.jit
def bn_flat(X, W, B, RM, RV, Y, SM, SI, numel, C, HW, eps, BLOCK: tl.constexpr, CHANNELS_LAST: tl.constexpr,
            HAS_W: tl.constexpr, HAS_B: tl.constexpr, HAS_SAVED: tl.constexpr, BIG: tl.constexpr):
    # One flat index over the tensor; the channel is i % C (channels-last) or (i // HW) % C. 32-bit
    # indices below 2^31 elements: 64-bit division is emulated and made this kernel 3x slower.
    pid = tl.program_id(0).to(tl.int64) if BIG else tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    ok = offs < numel
    q = offs // HW
    c = (offs % C if CHANNELS_LAST else q % C).to(tl.int32)
    scale, shift = scale_shift(W, B, RM, RV, c, eps, ok, HAS_W, HAS_B)
    x = tl.load(X + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(Y + offs, (x * scale + shift).to(Y.dtype.element_ty), mask=ok)
    # the elements of the first sample that start a channel write its saved statistics
    first = offs < C if CHANNELS_LAST else (offs == q * HW) & (q < C)
    store_saved(RM, RV, SM, SI, c, eps, ok & first, HAS_SAVED)


def launch(x, w, b, rm, rv, y, sm, si):
    numel = N * C * HW
    bn_flat[(triton.cdiv(numel, BLOCK),)](x, w, b, rm, rv, y, sm, si, numel, C, HW, EPS, BLOCK=BLOCK,
                                          CHANNELS_LAST=CHANNELS_LAST, HAS_W=HAS_W, HAS_B=HAS_B,
                                          HAS_SAVED=HAS_SAVED, BIG=numel + BLOCK >= 2**31, num_warps=NUM_WARPS)
'''

_TRITON_BN_PLANE = '''
@triton.jit
def bn_plane(X, W, B, RM, RV, Y, SM, SI, C, HW, eps, BLOCK: tl.constexpr, HAS_W: tl.constexpr,
             HAS_B: tl.constexpr, HAS_SAVED: tl.constexpr):
    # Program (plane, j): block j of one (sample, channel) plane; scale and shift are scalars.
    plane = tl.program_id(0)
    c = plane % C
    scale, shift = scale_shift(W, B, RM, RV, c, eps, c < C, HAS_W, HAS_B)  # a mask that always holds
    p = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = p < HW
    offs = plane.to(tl.int64) * HW + p
    x = tl.load(X + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(Y + offs, (x * scale + shift).to(Y.dtype.element_ty), mask=ok)
    store_saved(RM, RV, SM, SI, c, eps, (plane < C) & (tl.program_id(1) == 0), HAS_SAVED)


def launch(x, w, b, rm, rv, y, sm, si):
    bn_plane[(N * C, triton.cdiv(HW, BLOCK))](x, w, b, rm, rv, y, sm, si, C, HW, EPS, BLOCK=BLOCK, HAS_W=HAS_W,
                                               HAS_B=HAS_B, HAS_SAVED=HAS_SAVED, num_warps=NUM_WARPS)
'''

_TRITON_BN_TILE = '''
@triton.jit
def bn_tile(X, W, B, RM, RV, Y, SM, SI, positions, C, eps, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
            HAS_W: tl.constexpr, HAS_B: tl.constexpr, HAS_SAVED: tl.constexpr):
    # Channels-last: a [BLOCK_P positions x BLOCK_C channels] tile; scale/shift as vectors per tile.
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = c < C
    scale, shift = scale_shift(W, B, RM, RV, c, eps, c_ok, HAS_W, HAS_B)
    ok = (p < positions)[:, None] & c_ok[None, :]
    offs = p[:, None].to(tl.int64) * C + c[None, :]
    x = tl.load(X + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(Y + offs, (x * scale[None, :] + shift[None, :]).to(Y.dtype.element_ty), mask=ok)
    store_saved(RM, RV, SM, SI, c, eps, c_ok & (tl.program_id(0) == 0), HAS_SAVED)


def launch(x, w, b, rm, rv, y, sm, si):
    block_c = min(triton.next_power_of_2(C), BLOCK)
    block_p = BLOCK // block_c
    grid = (triton.cdiv(N * HW, block_p), triton.cdiv(C, block_c))
    bn_tile[grid](x, w, b, rm, rv, y, sm, si, N * HW, C, EPS, BLOCK_P=block_p, BLOCK_C=block_c, HAS_W=HAS_W,
                  HAS_B=HAS_B, HAS_SAVED=HAS_SAVED, num_warps=NUM_WARPS)
'''

_BN_SIGNATURES = {
    "aten::native_batch_norm.default": "input, weight, bias, running_mean, running_var, training, momentum, eps",
    "aten::_native_batch_norm_legit_no_training.default":
        "input, weight, bias, running_mean, running_var, momentum, eps",
    "aten::cudnn_batch_norm.default":
        "input, weight, bias, running_mean, running_var, training, exponential_average_factor, epsilon",
}


def render_batch_norm_triton(facts: dict[str, Any], params: dict[str, Any]) -> str:
    body = {"flat": _TRITON_BN_FLAT, "plane": _TRITON_BN_PLANE, "tile": _TRITON_BN_TILE}[params["variant"]]
    names = ["y"] + [f"extra{i}" for i in range(1, len(facts["outputs"]))]
    return f'''"""kernforge builtin: batch norm inference, N={facts['n']} C={facts['c']} HW={facts['hw']} \
{facts['layout']}, {facts['dtype']}.

kf-op: {facts['op']}
variant={params['variant']} block={params['block']} num_warps={params['num_warps']}
"""
import torch
import triton
import triton.language as tl

N = {facts['n']}
C = {facts['c']}
HW = {facts['hw']}
EPS = {facts['eps']!r}
CHANNELS_LAST = {facts['layout'] == 'nhwc'}
HAS_W = {facts['has_weight']}
HAS_B = {facts['has_bias']}
HAS_SAVED = {facts['has_saved']}
BLOCK = {params['block']}
NUM_WARPS = {params['num_warps']}
{_TRITON_BN_COMMON}{_TRITON_BN_SAVED}{body}

def kf_forward({_BN_SIGNATURES[facts['op']]}):
    x = input
    # y with x's layout; saved statistics as the task lists them (empty on CPU and for cuDNN)
{_alloc_lines(facts['outputs'], names, "x")}
    launch(x, weight if HAS_W else x, bias if HAS_B else x, running_mean, running_var, y,
           extra1 if HAS_SAVED else x, extra2 if HAS_SAVED else x)
    return {", ".join(names)}
'''


def render_batch_norm(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> str:
    return render_batch_norm_c(facts, params) if backend == "cpu" else render_batch_norm_triton(facts, params)


FAMILIES = [
    _row_norm_family("layer"),
    _row_norm_family("rms"),
    Family(name="group_norm", match=match_group_norm, space=space_group_norm, initial=initial_group_norm,
           render=render_group_norm, valid=valid_group_norm, explain=explain),
    Family(name="batch_norm", match=match_batch_norm, space=space_batch_norm, initial=initial_batch_norm,
           render=render_batch_norm, valid=valid_batch_norm, explain=explain),
]
