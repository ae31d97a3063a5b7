"""The extreme of each row or column, and where it is:
    max.dim / min.dim  (values, indices) = (x[argmax], argmax) over one dim
    argmax / argmin    indices over one dim, or over the flattened tensor (dim None)

Semantics are eager's: the first index of the extreme on ties; NaN beats every number (the
first NaN's index, and NaN as the value); a row of -inf gives -inf at index 0. min is the
max of -x: negation is exact, keeps NaN a NaN, and leaves the order of indices alone.

The input is row-major and read as [outer, R, inner] around the reduced dim: inner = 1 gives
rows of R (short rows packed into one program, one row per program with a loop, or a long
row split across programs and combined), inner > 1 gives columns (coalesced along inner).
Memory-bound: one read of x is the floor, R times the bytes of the outputs.
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

# op -> (is_min, writes values)
OPS = {"aten::max.dim": (False, True), "aten::min.dim": (True, True),
       "aten::argmax.default": (False, False), "aten::argmin.default": (True, False)}

MAX_TILE = 8192  # packed_rows: values per program (an fp32 value and an int32 index each)
MAX_SPLITS = 256  # split_row: the most chunks one row is split into (their partials: one tile)


def match(task: KernelTask) -> dict[str, Any] | str:
    if task.op not in OPS:
        return f"no built-in template for {task.op}"
    is_min, values = OPS[task.op]
    name = task.op.split("::")[1]
    args, kwargs = split_kwargs(task.args)
    x = args[0] if args else None
    if not is_tensor(x):
        return f"{name} without a tensor input"
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
    shape = x["shape"]
    if x["dtype"] not in SUPPORTED_DTYPES:
        return f"{name} on {x['dtype']} has no built-in template"
    if not shape or math.prod(shape) == 0:
        return f"{name} of a 0-dim or empty tensor has no built-in template"
    if not is_row_major(shape, x["stride"]):
        return f"{name} on a non-contiguous input has no built-in template yet"
    if dim is None:
        outer, r, inner = 1, math.prod(shape), 1  # the flattened tensor: one row
    elif isinstance(dim, int) and -len(shape) <= dim < len(shape):
        outer, r, inner = outer_r_inner(shape, dim % len(shape))
    else:
        return f"{name} over dim {dim!r} of a {len(shape)}-dim tensor"
    outs = task.outputs
    if len(outs) != (2 if values else 1) or any(not is_row_major(o["shape"], o["stride"]) for o in outs):
        return f"{name} whose outputs are not contiguous has no built-in template yet"
    return {"op": task.op, "dtype": x["dtype"].replace("torch.", ""), "is_min": is_min, "values": values,
            "outer": outer, "r": r, "inner": inner, "keepdim": keepdim}


# ---------------------------------------------------------------- spaces

POW2_BLOCKS = (256, 512, 1024, 2048, 4096, 8192)
# cpu: a row split across threads takes at least 256 values a part, or the combine costs more.
CPU_MIN_PART = 256


def _triton_space(facts: dict[str, Any], hw: Hardware) -> Space:
    r, warps = facts["r"], Param("num_warps", rows_columns.WARPS)
    if facts["inner"] > 1:
        return rows_columns.triton_columns_space(facts, MAX_TILE)
    variants = []
    whole = _whole_row(r)
    packs = tuple(n for n in (1, 2, 4, 8, 16, 32, 64) if n * whole <= MAX_TILE and n <= next_pow2(facts["outer"]))
    if packs:
        variants.append(Variant("packed_rows", (Param("rows_per_program", packs), warps)))
    loop_blocks = tuple(b for b in POW2_BLOCKS if b < 2 * r)
    if loop_blocks:
        variants.append(Variant("row_loop", (Param("block_n", loop_blocks), warps)))
    split_blocks = tuple(b for b in POW2_BLOCKS if 2 * b <= r)
    if split_blocks:
        def chunks_fill(point: dict[str, Any]) -> bool:
            return point["splits"] * point["block_n"] <= r  # no chunk starts past the row's end

        variants.append(Variant("split_row", (
            Param("block_n", split_blocks),
            Param("splits", tuple(s for s in (2, 4, 8, 16, 32, 64, 128, MAX_SPLITS) if s * split_blocks[0] <= r)),
            warps), chunks_fill))
    return Space(variants)


def _whole_row(r: int) -> int:
    return max(16, next_pow2(r))


# ---------------------------------------------------------------- starting rules

def _triton_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    outer, r, inner = facts["outer"], facts["r"], facts["inner"]
    if inner > 1:
        return rows_columns.triton_columns_start(facts, hw, rows_per_step=8, values_per_warp=128)
    if outer < 2 * hw.sms and r >= 8192:
        # Too few rows to fill the SMs: split each row so that there are ~4 programs per SM,
        # blocks as large as the chunks allow (4096 at most), each chunk at least one block.
        splits = min(MAX_SPLITS, next_pow2(math.ceil(4 * hw.sms / outer)))
        block_n = max(POW2_BLOCKS[0], min(4096, 1 << (r // splits).bit_length() - 1))
        while splits * block_n > r:
            splits //= 2
        return {"variant": "split_row", "block_n": block_n, "splits": splits,
                "num_warps": 8 if block_n >= 2048 else 4}
    whole = _whole_row(r)
    if whole <= 4096:
        # Pack short rows up to ~4K values per program, keeping at least 4 programs per SM.
        packed = max(1, min(64, 4096 // whole, next_pow2(outer)))
        while packed > 1 and outer // packed < 4 * hw.sms:
            packed //= 2
        return {"variant": "packed_rows", "rows_per_program": packed,
                "num_warps": 4 if packed * whole <= 2048 else 8}
    return {"variant": "row_loop", "block_n": 4096, "num_warps": 8}


# ---------------------------------------------------------------- render

LAYOUTS = {"rows": "ROWS", "split_row": "SPLIT_ROW", "columns": "COLUMNS"}


def _cpu_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    return _render(facts, "cpu.c", {
        "OUTER": f"{facts['outer']}LL", "R": f"{facts['r']}LL", "INNER": f"{facts['inner']}LL",
        **c_element(facts["dtype"]), "IS_MIN": facts["is_min"], "VALUES": facts["values"],
        "LAYOUT": LAYOUTS[point["variant"]], "PARTS": point.get("parts", 1), "BLOCK_C": point.get("block_c", 1),
        "SCHEDULE": point.get("schedule", "static")})


def _triton_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    variant = point["variant"]
    if variant == "packed_rows":
        constants = {"BLOCK_N": _whole_row(facts["r"]), "ROWS_PER_PROGRAM": point["rows_per_program"]}
    elif variant == "columns":
        constants = {"BLOCK_R": point["block_r"], "BLOCK_C": point["block_c"]}
    elif variant == "split_row":
        constants = {"BLOCK_N": point["block_n"], "SPLITS": point["splits"]}
    else:
        constants = {"BLOCK_N": point["block_n"]}
    constants |= {"NUM_WARPS": point["num_warps"], "IS_MIN": facts["is_min"], "VALUES": facts["values"]}
    return _render(facts, f"triton_{variant}.py", constants)


def _render(facts: dict[str, Any], name: str, constants: dict[str, Any]) -> str:
    text = kernel_file.read(__name__, name)
    return kernel_file.render(text, facts["op"], constants, kernel_file.style_of(name))


# ---------------------------------------------------------------- explain

_REASONS: dict[str, dict[Any, str]] = {
    "variant": {
        "packed_rows": "whole short rows in registers, several per program: one read, one reduction",
        "row_loop": "one row per program, a running best per lane over blocks: rows of any length",
        "split_row": "each row split across programs, the partial bests combined after: fills the "
                     "GPU when there are few long rows",
        "rows": "a row per thread",
        "columns": "a block of adjacent columns per program, reading whole lines of inner values",
    },
    "schedule": {"static": "equal ranges per thread: no scheduling cost",
                 "dynamic": "threads take work as they free up: better when cores are uneven"},
}


def explain(name: str, old: Any, new: Any) -> str:
    text = _REASONS.get(name, {}).get(new)
    if text:
        return text
    if name in ("rows_per_program",):
        return "more rows per program amortise the launch of short rows" if new > old else \
            "fewer rows per program give more programs to spread over the SMs"
    if name == "num_warps":
        return "more warps keep more loads in flight" if new > old else \
            "fewer warps mean less cross-warp reduction work"
    if name in ("splits", "parts"):
        return "more chunks per row: more of the machine busy" if new > old else \
            "fewer chunks: less combining, longer runs per program"
    if name in ("block_n", "block_r", "block_c"):
        return "larger blocks: fewer loop trips, more loads in flight" if new > old else \
            "smaller blocks: fewer registers, more programs"
    return "try a neighbouring value"


WRITERS = Writers(cpu=Writer(lambda facts, hw: rows_columns.cpu_space(facts, min_part=CPU_MIN_PART),
                             lambda facts, hw: rows_columns.cpu_start(facts, min_part=CPU_MIN_PART), _cpu_render),
                  triton=Writer(_triton_space, _triton_start, _triton_render))  # no CUDA kernel yet
space, start, render = WRITERS.space, WRITERS.start, WRITERS.render  # by backend name
FAMILIES = [Family(name="indexed_reduce", match=match, writers=WRITERS, explain=explain)]
