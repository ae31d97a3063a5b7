"""Cumulative sums over one dim: y[..., k, ...] = sum over j <= k of x[..., j, ...].

Accumulated in float32 for float16 and bfloat16 inputs, and in float64 for float32 ones, as
eager's CPU kernel does: a float32 running sum over 5000 normal values strays 2.2e-4 from the
exact sum where eager's strays 3.8e-6, which is outside the evaluator's bound (measured with
numpy's float32 cumsum against float64 while this family was written). The op is memory-bound
(one read, one write), so the wider adds cost nothing on an H200 (fp64 at half fp32's rate).

The input is row-major and read as [outer, R, inner] around the dim: inner = 1 gives rows of R
(whole short rows scanned in registers, one row per program in blocks with a running carry,
or a few very long rows split across programs: block sums, a scan of the sums, then the
blocks scanned from their offsets), inner > 1 gives columns, coalesced along inner.
"""

from __future__ import annotations

import math
from typing import Any

from kernforge.propose.builtin import kernel_file
from kernforge.propose.builtin.family import Family, Hardware, Writer, Writers
from kernforge.propose.builtin.space import Param, Space, Variant
from kernforge.propose.families import rows_columns
from kernforge.propose.families.common import (
    SUPPORTED_DTYPES,
    c_element,
    is_row_major,
    is_tensor,
    next_pow2,
    outer_r_inner,
    split_kwargs,
)
from kernforge.records.task import KernelTask

OP = "aten::cumsum.default"
MAX_TILE = 8192  # row_scan and columns: values per program (float64 accumulators for fp32)
ACC = {"float32": "float64", "float16": "float32", "bfloat16": "float32"}  # see the docstring


def match(task: KernelTask) -> dict[str, Any] | str:
    if task.op != OP:
        return f"no built-in template for {task.op}"
    args, kwargs = split_kwargs(task.args)
    x = args[0] if args else None
    if not is_tensor(x):
        return "cumsum without a tensor input"
    if x["dtype"] not in SUPPORTED_DTYPES:
        return f"cumsum on {x['dtype']} has no built-in template"
    dtype = kwargs.get("dtype")
    if dtype is not None and str(dtype) != x["dtype"]:
        return f"cumsum with dtype={dtype} (a converting scan) has no built-in template yet"
    shape = x["shape"]
    if not shape or math.prod(shape) == 0:
        return "cumsum of a 0-dim or empty tensor has no built-in template"
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if not isinstance(dim, int) or not -len(shape) <= dim < len(shape):
        return f"cumsum over dim {dim!r} of a {len(shape)}-dim tensor"
    if not is_row_major(shape, x["stride"]):
        return "cumsum on a non-contiguous input has no built-in template yet"
    out = task.outputs[0] if task.outputs else None
    if out is None or out["dtype"] != x["dtype"] or not is_row_major(out["shape"], out["stride"]):
        return "cumsum whose output is not a contiguous tensor of the input's dtype has no built-in template yet"
    outer, r, inner = outer_r_inner(shape, dim % len(shape))
    dtype_name = x["dtype"].replace("torch.", "")
    return {"op": OP, "dtype": dtype_name, "acc": ACC[dtype_name], "outer": outer, "r": r, "inner": inner}


# ---------------------------------------------------------------- spaces

POW2_BLOCKS = (256, 512, 1024, 2048, 4096)
# cpu: a row split across threads reads it twice (sums, then the scan): worth it only for parts
# of a few KB.
CPU_MIN_PART = 1024


def _triton_space(facts: dict[str, Any], hw: Hardware) -> Space:
    r, warps = facts["r"], Param("num_warps", rows_columns.WARPS)
    if facts["inner"] > 1:
        return rows_columns.triton_columns_space(facts, MAX_TILE)
    variants = []
    whole = _whole_row(r)
    packs = tuple(n for n in (1, 2, 4, 8, 16, 32) if n * whole <= MAX_TILE and n <= next_pow2(facts["outer"]))
    if packs:
        variants.append(Variant("row_scan", (Param("rows_per_program", packs), warps)))
    loop_blocks = tuple(b for b in POW2_BLOCKS if b < 2 * r)
    if loop_blocks:
        variants.append(Variant("blocked_scan", (Param("block_n", loop_blocks), warps)))
    split_blocks = tuple(b for b in POW2_BLOCKS if 2 * b <= r)
    if split_blocks:
        variants.append(Variant("split_scan", (Param("block_n", split_blocks), warps)))
    return Space(variants)


def _whole_row(r: int) -> int:
    return max(16, next_pow2(r))


# ---------------------------------------------------------------- starting rules

def _triton_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    outer, r, inner = facts["outer"], facts["r"], facts["inner"]
    if inner > 1:
        return rows_columns.triton_columns_start(facts, hw, rows_per_step=16, values_per_warp=256)
    if outer < 2 * hw.sms and r >= 16384:
        # Too few rows to fill the SMs, one program each: split the rows into blocks of 2048
        # (the three passes read x twice, paid back once the split fills the GPU).
        return {"variant": "split_scan", "block_n": 2048, "num_warps": 8}
    whole = _whole_row(r)
    if whole <= 2048:
        # Pack short rows up to ~2K values per program, keeping at least 4 programs per SM.
        packed = max(1, min(32, 2048 // whole, next_pow2(outer)))
        while packed > 1 and outer // packed < 4 * hw.sms:
            packed //= 2
        return {"variant": "row_scan", "rows_per_program": packed, "num_warps": 4}
    return {"variant": "blocked_scan", "block_n": 2048, "num_warps": 8}


# ---------------------------------------------------------------- render

LAYOUTS = {"rows": "ROWS", "split_row": "SPLIT_ROW", "columns": "COLUMNS"}
C_ACC = {"float64": "double", "float32": "float"}


def _cpu_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    return _render(facts, "cpu.c", {
        "OUTER": f"{facts['outer']}LL", "R": f"{facts['r']}LL", "INNER": f"{facts['inner']}LL",
        **c_element(facts["dtype"]), "ACC_T": C_ACC[facts["acc"]], "LAYOUT": LAYOUTS[point["variant"]],
        "PARTS": point.get("parts", 1), "BLOCK_C": point.get("block_c", 1),
        "SCHEDULE": point.get("schedule", "static")})


def _triton_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    variant = point["variant"]
    if variant == "row_scan":
        constants = {"BLOCK_N": _whole_row(facts["r"]), "ROWS_PER_PROGRAM": point["rows_per_program"]}
    elif variant == "columns":
        constants = {"BLOCK_R": point["block_r"], "BLOCK_C": point["block_c"]}
    else:
        constants = {"BLOCK_N": point["block_n"]}
    constants |= {"NUM_WARPS": point["num_warps"], "ACC_FP64": facts["acc"] == "float64"}
    return _render(facts, f"triton_{variant}.py", constants)


def _render(facts: dict[str, Any], name: str, constants: dict[str, Any]) -> str:
    text = kernel_file.read(__name__, name)
    return kernel_file.render(text, facts["op"], constants, kernel_file.style_of(name))


# ---------------------------------------------------------------- explain

_REASONS: dict[str, dict[Any, str]] = {
    "variant": {
        "row_scan": "whole short rows scanned in registers, several per program: one read, one write",
        "blocked_scan": "one row per program, scanned block by block with a running carry: rows of any length",
        "split_scan": "each row split across programs (block sums, a scan of the sums, then each block "
                      "from its offset): fills the GPU when there are few long rows, at a second read of x",
        "rows": "a row per thread",
        "split_row": "each row in ranges across the threads: sums, their scan, then each range from its offset",
        "columns": "a block of adjacent columns per program, reading whole lines of inner values",
    },
    "schedule": {"static": "equal ranges per thread: no scheduling cost",
                 "dynamic": "threads take work as they free up: better when cores are uneven"},
}


def explain(name: str, old: Any, new: Any) -> str:
    text = _REASONS.get(name, {}).get(new)
    if text:
        return text
    if name == "rows_per_program":
        return "more rows per program amortise the launch of short rows" if new > old else \
            "fewer rows per program give more programs to spread over the SMs"
    if name == "num_warps":
        return "more warps keep more loads in flight" if new > old else "fewer warps: a cheaper scan per block"
    if name == "parts":
        return "more ranges per row: more threads busy" if new > old else "fewer ranges: less to combine"
    if name in ("block_n", "block_r", "block_c"):
        return "larger blocks: fewer loop trips, more loads in flight" if new > old else \
            "smaller blocks: fewer registers, more programs"
    return "try a neighbouring value"


WRITERS = Writers(cpu=Writer(lambda facts, hw: rows_columns.cpu_space(facts, min_part=CPU_MIN_PART),
                             lambda facts, hw: rows_columns.cpu_start(facts, min_part=CPU_MIN_PART), _cpu_render),
                  triton=Writer(_triton_space, _triton_start, _triton_render))  # no CUDA kernel yet
space, start, render = WRITERS.space, WRITERS.start, WRITERS.render  # by backend name
FAMILIES = [Family(name="cumsum", match=match, writers=WRITERS, explain=explain)]
