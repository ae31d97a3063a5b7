"""Layer norm and RMS norm over the trailing normalized_shape, row by row:
    layer  y = (x - mean(x)) * rsqrt(var(x) + eps) * w + b     (outputs y, mean, rstd)
    rms    y = x * rsqrt(mean(x^2) + eps) * w                  (outputs y, rstd)

Memory-bound: one read of x and one write of y is the floor (4 bytes per element in bf16,
8 in fp32). The statistics take the dtypes the task lists: CPU layer norm keeps bf16 ones
beside a bf16 input, CUDA's are float32, so the kernels read them from the task's outputs.

Variance: where a row sits in registers it is exact two-pass (mean, then squared
deviations); where it is read in blocks, each block's (count, mean, M2) is merged into the
running one with Chan's formula, which keeps two-pass precision without the cancellation of
sum(x^2) - n mean^2 on rows whose mean is large against their spread. The C kernel keeps
Welford's running (mean, M2) in vector lanes, merged with Chan's formula, as ATen's CPU layer
norm. Either way a constant row's mean is its value exactly, so its outputs are exactly 0, as
eager's: rstd = 1/sqrt(eps) there magnifies any rounding of the mean (a plain sum / n gave
0.0003 on the value-class sets, evaluate/classes.py).
"""

from __future__ import annotations

import math
from typing import Any

from kernforge.propose.builtin import kernel_file
from kernforge.propose.builtin.family import Family, Hardware, Writer, Writers
from kernforge.propose.builtin.space import Param, Space, Variant
from kernforge.propose.families.common import (
    ITEMSIZE,
    aux_dtype_reason,
    c_element,
    contiguous_strides,
    cuda_element,
    next_pow2,
    norm_input,
    output_descs,
    short_dtype,
)
from kernforge.records.task import KernelTask

OPS = {"layer": "aten::native_layer_norm.default", "rms": "aten::_fused_rms_norm.default"}
LABELS = {"layer": "layer norm", "rms": "rms norm"}
# torch's _fused_rms_norm with eps=None uses the epsilon of its float32 accumulation type for
# fp32, bf16 and fp16 inputs alike (checked on torch 2.14's CPU kernel: bf16 rstd of 1e-3 inputs
# is 945.709, which finfo(bfloat16).eps = 7.8e-3 would have made 11.3).
RMS_DEFAULT_EPS = 1.1920928955078125e-07
MAX_TILE = 16384  # triton: past ~16K fp32 values in one program's tile the H200 spills
CUDA_MAX_CACHED = 64  # cuda: fp32 values per thread held in registers when the row is cached


def match(task: KernelTask, kind: str) -> dict[str, Any] | str:
    op, label = OPS[kind], LABELS[kind]
    if task.op != op:
        return f"no built-in template for {task.op}"
    x = norm_input(task, label)
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
        why = aux_dtype_reason(name, desc, x["dtype"])
        if why:
            return f"{label}: {why}"
        if desc is not None and desc["shape"] != normalized:
            return f"{label} with a {name} not of normalized_shape"
    outputs = output_descs(task)
    dtype = short_dtype(x["dtype"])
    stats = {o["dtype"] for o in outputs[1:]}
    if not stats <= {dtype, "float32"} or len(stats) > 1:
        return f"{label} with {'/'.join(sorted(stats))} statistics has no built-in template"
    cols = math.prod(normalized)
    return {"op": op, "kind": kind, "rows": math.prod(x["shape"]) // cols, "cols": cols, "dtype": dtype,
            "has_weight": weight is not None, "has_bias": bias is not None,
            "w_f32": weight is not None and weight["dtype"] == "torch.float32",
            "b_f32": bias is not None and bias["dtype"] == "torch.float32",
            "stats_f32": stats == {"float32"},
            "eps": float(RMS_DEFAULT_EPS if eps is None else eps), "outputs": outputs}


# ---------------------------------------------------------------- spaces

WARPS = (1, 2, 4, 8, 16)
LOOP_BLOCKS = (512, 1024, 2048, 4096, 8192, 16384)


def _cpu_space(facts: dict[str, Any]) -> Space:
    # Layer norm: Welford lanes merged with Chan's formula, or sum and sum of squares in double
    # in one read; RMS norm has only the sum of squares, in float (full-width vectors) or double.
    stats = ("welford", "one_pass_double") if facts["kind"] == "layer" else ("float", "double")
    return Space.single([Param("stats", stats), Param("schedule", ("static", "dynamic")),
                         Param("simd", (False, True))])


def _whole_row(cols: int) -> int:
    return max(128, next_pow2(cols))


def _triton_space(facts: dict[str, Any]) -> Space:
    whole = _whole_row(facts["cols"])
    variants = []
    packs = tuple(r for r in (1, 2, 4, 8, 16) if r * whole <= MAX_TILE)
    if packs:
        def tile_fits(point: dict[str, Any]) -> bool:
            # at least one value a thread, at most 64 fp32 values a thread (no spill)
            tile, threads = point["rows_per_program"] * whole, 32 * point["num_warps"]
            return threads <= tile and tile // threads <= 64

        variants.append(Variant("single_tile", (Param("rows_per_program", packs), Param("persistent", (False, True)),
                                                Param("num_warps", WARPS)), tile_fits))
    blocks = tuple(b for b in LOOP_BLOCKS if b < 2 * facts["cols"])
    if blocks:
        def block_fits(point: dict[str, Any]) -> bool:
            threads = 32 * point["num_warps"]
            return threads <= point["block_n"] and point["block_n"] // threads <= 32

        variants.append(Variant("loop", (Param("block_n", blocks), Param("num_warps", WARPS),
                                         Param("num_stages", (1, 2, 3))), block_fits))
    return Space(variants)


def _cuda_vecs(facts: dict[str, Any]) -> tuple[int, ...]:
    # A pack is one aligned load of at most 16 bytes of x; rows start at multiples of COLS
    # elements, so COLS must be a multiple of the pack.
    item = ITEMSIZE[facts["dtype"]]
    return tuple(v for v in (1, 2, 4, 8) if v * item <= 16 and facts["cols"] % v == 0)


def _cuda_items(facts: dict[str, Any], point: dict[str, Any]) -> int:
    return math.ceil(facts["cols"] / (point["threads_per_row"] * point["vec"]))


def _cuda_space(facts: dict[str, Any]) -> Space:
    def valid(point: dict[str, Any]) -> bool:
        if point["threads_per_row"] * point["rows_per_block"] > 1024:
            return False
        # No more threads per row than the row has packs (a warp at least): the rest would idle.
        if point["threads_per_row"] > max(32, next_pow2(math.ceil(facts["cols"] / point["vec"]))):
            return False
        return not point["cache_row"] or _cuda_items(facts, point) * point["vec"] <= CUDA_MAX_CACHED

    return Space.single([Param("threads_per_row", (32, 64, 128, 256, 512, 1024)),
                         Param("rows_per_block", (1, 2, 4, 8, 16)),
                         Param("vec", _cuda_vecs(facts)),
                         Param("cache_row", (False, True))], valid)


# ---------------------------------------------------------------- starting rules

def _cpu_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    # ATen's own statistics: a constant row's deviations exactly 0, as eager's (the two-pass
    # sum / n gave 0.0003 where eager gives 0), about as fast (timings in kernels/cpu.c).
    return {"stats": "welford" if facts["kind"] == "layer" else "float", "schedule": "static", "simd": True}


def _triton_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    whole = _whole_row(facts["cols"])
    if whole > 8192:
        return {"variant": "loop", "block_n": 4096, "num_warps": 8, "num_stages": 2}
    # Short rows share a program up to ~4K values, so each program moves enough bytes, but
    # keep at least two waves of programs over the SMs.
    rows = max(1, min(16, 4096 // whole))
    while rows > 1 and facts["rows"] < rows * hw.sms * 2:
        rows //= 2
    # (8192, 4096) bf16 layer norm in the H200 search, a row per program: 4 warps 38.4 us,
    # 8 warps 40.2, 16 warps 47.5 (bench/results/h200/search/part3)
    tile = whole * rows
    warps = 4 if tile <= 4096 else 8 if tile <= 8192 else 16
    return {"variant": "single_tile", "rows_per_program": rows, "persistent": False, "num_warps": warps}


def _cuda_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    vec = max(_cuda_vecs(facts))
    packs = math.ceil(facts["cols"] / vec)
    # About four packs per thread (loads in flight), a warp per row at least, a block per row
    # at most; short rows share a block up to 256 threads, keeping four blocks per SM.
    threads = min(1024, max(32, next_pow2(math.ceil(packs / 4))))
    rows_per_block = max(1, 256 // threads)
    while rows_per_block > 1 and facts["rows"] / rows_per_block < 4 * hw.sms:
        rows_per_block //= 2
    point = {"threads_per_row": threads, "rows_per_block": rows_per_block, "vec": vec, "cache_row": True}
    point["cache_row"] = _cuda_items(facts, point) * vec <= CUDA_MAX_CACHED // 2
    return point


# ---------------------------------------------------------------- render

def _norm_constants(facts: dict[str, Any]) -> dict[str, Any]:
    return {"RMS": facts["kind"] == "rms", "HAS_W": facts["has_weight"], "HAS_B": facts["has_bias"]}


def _c_norm_constants(facts: dict[str, Any]) -> dict[str, Any]:
    return {"ROWS": f"{facts['rows']}LL", "COLS": f"{facts['cols']}LL", **_norm_constants(facts),
            "W_F32": facts["w_f32"], "B_F32": facts["b_f32"], "STATS_F32": facts["stats_f32"],
            "EPS": f"{facts['eps']!r}f"}


def _cpu_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    return _render(facts, "cpu.c", {**_c_norm_constants(facts), **c_element(facts["dtype"]),
                                    "STATS": point["stats"].upper(), "SCHEDULE": point["schedule"],
                                    "SIMD_LOOPS": point["simd"]})


def _cuda_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    return _render(facts, "cuda_rows.cu", {
        **_c_norm_constants(facts), **cuda_element(facts["dtype"]), "THREADS_PER_ROW": point["threads_per_row"],
        "ROWS_PER_BLOCK": point["rows_per_block"], "VEC": point["vec"], "CACHE_ROW": point["cache_row"]})


def _triton_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    variant = point["variant"]
    if variant == "single_tile":
        constants = {"BLOCK_N": _whole_row(facts["cols"]), "ROWS_PER_PROGRAM": point["rows_per_program"],
                     "PERSISTENT": point["persistent"]}
    else:
        constants = {"BLOCK_N": point["block_n"], "NUM_STAGES": point["num_stages"]}
    stats = facts["outputs"][-1]
    constants |= {"NUM_WARPS": point["num_warps"], **_norm_constants(facts), "EPS": facts["eps"],
                  "STATS_SHAPE": tuple(stats["shape"]), "STATS_STRIDE": tuple(stats["stride"]),
                  "STATS_F32": facts["stats_f32"]}
    return _render(facts, f"triton_{variant}.py", constants)


def _render(facts: dict[str, Any], name: str, constants: dict[str, Any]) -> str:
    text = kernel_file.read(__name__, name)
    return kernel_file.render(text, facts["op"], constants, kernel_file.style_of(name))


# ---------------------------------------------------------------- explain

_REASONS: dict[str, dict[Any, str]] = {
    "variant": {"single_tile": "whole rows in registers: one read of x, exact two-pass statistics",
                "loop": "rows read in blocks with running (Chan) statistics: rows of any length, two reads"},
    "persistent": {True: "one program per SM slot looping over rows: the weight stays in registers",
                   False: "one program per row block: simplest schedule, no loop overhead"},
    "stats": {"welford": "running mean and M2 in vector lanes, merged with Chan's formula: two-pass "
                         "precision in one read, exact on constant rows",
              "one_pass_double": "sum and sum of squares in double in one read: fewer passes, still "
                                 "precise for large-mean data",
              "float": "sum of squares in float: vectorises at full width",
              "double": "sum of squares in double: precise on long rows of large values"},
    "schedule": {"static": "equal row ranges per thread: no scheduling cost",
                 "dynamic": "threads take rows as they free up: better when cores are uneven"},
    "simd": {True: "ask the compiler to vectorise the inner loops", False: "scalar inner loops"},
    "cache_row": {True: "the row held in registers between statistics and output: read once",
                  False: "the row read again for the outputs: fewer registers, more threads resident"},
}

_NUMBERS = {
    "rows_per_program": ("more rows per program: the weight is loaded once for several rows",
                         "fewer rows per program: more programs to spread over the SMs"),
    "rows_per_block": ("more rows per block amortise the launch of short rows",
                       "fewer rows per block give more blocks to spread over the SMs"),
    "num_warps": ("more warps keep more loads in flight and fewer values per thread",
                  "fewer warps: less cross-warp reduction work and more programs per SM"),
    "num_stages": ("deeper software pipelining of the loop's loads", "shallower pipelining: fewer registers"),
    "block_n": ("larger blocks: fewer loop trips and wider loads", "smaller blocks: fewer registers, less masking"),
    "threads_per_row": ("more threads per row: more loads in flight per row",
                        "fewer threads per row: cheaper reductions, more rows at once"),
    "vec": ("wider loads: fewer instructions per byte", "narrower loads"),
}


def explain(name: str, old: Any, new: Any) -> str:
    text = _REASONS.get(name, {}).get(new)
    if text:
        return text
    if name in _NUMBERS:
        return _NUMBERS[name][0 if new > old else 1]
    return "try a neighbouring value"


WRITERS = Writers(cpu=Writer(lambda facts, hw: _cpu_space(facts), _cpu_start, _cpu_render),
                  triton=Writer(lambda facts, hw: _triton_space(facts), _triton_start, _triton_render),
                  cuda=Writer(lambda facts, hw: _cuda_space(facts), _cuda_start, _cuda_render))
space, start, render = WRITERS.space, WRITERS.start, WRITERS.render  # by backend name


def _family(kind: str) -> Family:
    return Family(name=f"{kind}_norm", match=lambda task: match(task, kind), writers=WRITERS, explain=explain)


FAMILIES = [_family("layer"), _family("rms")]
