"""Reductions: sum.dim_IntList, mean.dim, amax and amin over any dims, accumulated in float32.

The input is read in memory order (its dims sorted by stride), with the reduced and the kept
dims each merged into runs. One run of reduced dims gives x as [outer, R, inner]:

    y[o, i] = op over r of x[o, r, i]          (mean: the sum divided by R once, at the end)

inner == 1 is a row reduction (the last dims of a contiguous tensor), inner > 1 a column
reduction (the first or a middle dim, or H, W of a channels-last tensor: inner = C). Two runs
(dims [0, 2] of a 3-D tensor) give [outer, R1, mid, R2, inner], reduced over R1 and R2. amax
and amin keep a NaN, as eager does. Memory-bound: one read of x is the floor, R times the
bytes of y. (8, 4096, 2047) fp32 summed over dim 1 reads 268 MB: 0.064 ms at 4.2 TB/s on an
H200, where eager took 0.0785 ms and torch.compile 0.0657 ms.
"""

from __future__ import annotations

import math
from typing import Any

from kernforge.propose.builtin import kernel_file
from kernforge.propose.builtin.family import Family, Hardware, Writer, Writers
from kernforge.propose.builtin.space import Param, Space, Variant
from kernforge.propose.families.common import (
    ITEMSIZE,
    SUPPORTED_DTYPES,
    c_element,
    is_tensor,
    next_pow2,
    split_kwargs,
)
from kernforge.records.task import KernelTask

OPS = {"aten::sum.dim_IntList": "sum", "aten::mean.dim": "mean", "aten::amax.default": "amax",
       "aten::amin.default": "amin"}

PROGRAMS_PER_SM = 4  # resident programs per SM that hide the loads' latency (Hopper: 132 SMs)
MAX_SPLIT = 256  # parts of one reduction: their partials are reduced in one tile of the combine kernel
TILE_BYTES = 8192  # bytes a program loads per loop step: 16 fp32 values per thread at 4 warps
RUN_BYTES = 1024  # contiguous bytes per tile row of a column reduction: two warps' 16-byte loads


# ---------------------------------------------------------------- what is supported

def match(task: KernelTask) -> dict[str, Any] | str:
    kind = OPS.get(task.op)
    if kind is None:
        return f"no built-in template for {task.op}"
    args, kwargs = split_kwargs(task.args)
    x = args[0] if args else None
    if not is_tensor(x):
        return f"{kind} without a tensor input"
    if kwargs.get("dtype") is not None or (len(args) > 3 and args[3] is not None):
        return f"{kind} with a dtype= argument (a converting reduction) has no built-in template yet"
    if x["dtype"] not in SUPPORTED_DTYPES:
        return f"{kind} on {x['dtype']} has no built-in template"
    if not task.outputs or task.outputs[0]["dtype"] != x["dtype"]:
        return f"{kind} whose output dtype differs from its input's has no built-in template"
    if math.prod(x["shape"]) == 0:
        return f"{kind} of an empty tensor has no built-in template"
    dims = _reduced_dims(args[1] if len(args) > 1 else kwargs.get("dim"), len(x["shape"]))
    if isinstance(dims, str):
        return dims
    keepdim = bool(args[2]) if len(args) > 2 else bool(kwargs.get("keepdim", False))
    return _layout_facts(kind, task.op, x, dims, keepdim, task.outputs[0])


def _reduced_dims(dim: Any, ndim: int) -> list[int] | str:
    """The reduced dims, normalised and sorted; None or [] mean every dim (as ATen does)."""
    if dim is None or dim == []:
        return list(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if ndim == 0:
        return []
    normal = [d % ndim for d in dims]
    if len(set(normal)) != len(normal):
        return "a reduction that names a dim twice"
    return sorted(normal)


def _runs(order: list[int], shape: list[int], dims: list[int]) -> list[tuple[bool, int, list[int]]]:
    """The dims in memory order merged into runs: (reduced, size, dims) per run."""
    runs: list[tuple[bool, int, list[int]]] = []
    for d in order:
        reduced = d in dims
        if runs and runs[-1][0] == reduced:
            runs[-1] = (reduced, runs[-1][1] * shape[d], runs[-1][2] + [d])
        else:
            runs.append((reduced, shape[d], [d]))
    return runs


def _layout_facts(kind: str, op: str, x: dict[str, Any], dims: list[int], keepdim: bool,
                  out: dict[str, Any]) -> dict[str, Any] | str:
    shape, stride = x["shape"], x["stride"]
    # Dims of size 1 take no part in addressing; the rest, largest stride first, is memory order.
    order = sorted((d for d in range(len(shape)) if shape[d] > 1), key=lambda d: -stride[d])
    expected = 1
    for d in reversed(order):
        if stride[d] != expected:
            return f"{kind} on an input that is not dense in some dim order (a strided view) has no " \
                   "built-in template yet"
        expected *= shape[d]
    runs = _runs(order, shape, dims)
    reduced_runs = sum(1 for reduced, _, _ in runs if reduced)
    if reduced_runs > 2:
        return f"{kind} over dims that lie in three or more separate blocks of memory has no built-in " \
               "template yet"
    # Pad to the [outer, R1, mid, R2, inner] form: kept, reduced, kept, reduced, kept.
    sizes, kept_dims, slot = [1, 1, 1, 1, 1], [], 0
    for reduced, size, run_dims in runs:
        if reduced != (slot % 2 == 1):
            slot += 1
        sizes[slot] = size
        if not reduced:
            kept_dims += run_dims
        slot += 1
    if reduced_runs < 2:  # one run of reduced dims: mid and R2 stay 1, inner is what follows R1
        sizes = [sizes[0], sizes[1], 1, 1, sizes[2] * sizes[3] * sizes[4]]
    if not _output_is_dense(out, kept_dims, dims, keepdim):
        return f"{kind} whose output is not laid out in the input's order has no built-in template yet"
    outer, r1, mid, r2, inner = sizes
    return {
        "kind": kind, "op": op, "dtype": x["dtype"].replace("torch.", ""),
        "layout": "two_blocks" if reduced_runs == 2 else "rows" if inner == 1 else "columns",
        "outer": outer, "r1": r1, "mid": mid, "r2": r2, "inner": inner, "r": r1 * r2,
        "out_shape": list(out["shape"]), "out_stride": list(out["stride"]),
    }


def _output_is_dense(out: dict[str, Any], kept_in_order: list[int], dims: list[int], keepdim: bool) -> bool:
    """Whether y[o, m, i] sits at (o * mid + m) * inner + i: the output keeps the input's order."""
    def out_dim(d: int) -> int:
        return d if keepdim else d - sum(1 for r in dims if r < d)
    expected = 1
    for d in reversed(kept_in_order):
        od = out_dim(d)
        if out["stride"][od] != expected:
            return False
        expected *= out["shape"][od]
    return True


# ---------------------------------------------------------------- spaces

WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4)


def _pow2s(low: int, high: int) -> tuple[int, ...]:
    """The powers of two from `low` to `high` (at least `low`)."""
    values, v = [], low
    while v <= max(low, high):
        values.append(v)
        v *= 2
    return tuple(values)


def _chunk(r: int, split: int, block_r: int) -> int:
    """The reduced elements one of `split` parts covers: whole blocks, the last part shorter."""
    return math.ceil(math.ceil(r / split) / block_r) * block_r


def _loops(r: int, split: int, block_r: int) -> bool:
    return _chunk(r, split, block_r) > block_r


def _lanes_fit(tile: int, warps: int, loops: bool) -> bool:
    """Every lane busy (unless one warp is already too many), at most 32 accumulators per thread
    (more spill), and a loop step giving each thread at least a 16-byte load's worth."""
    if tile > 32 * 32 * warps or (warps > 1 and tile < 32 * warps):
        return False
    return not loops or warps == 1 or tile >= 4 * 32 * warps


def _triton_space(facts: dict[str, Any], hw: Hardware) -> Space:
    return {"rows": _rows_space, "columns": _columns_space, "two_blocks": _two_blocks_space}[
        facts["layout"]](facts, hw)


def _cpu_space(facts: dict[str, Any], hw: Hardware) -> Space:
    loops = (Param("simd", (True, False)), Param("schedule", ("static", "dynamic")))
    if facts["layout"] == "rows":
        variants = [Variant("rows", loops)]
        if facts["outer"] < 64:  # splitting a row over the threads pays only with fewer rows than ~cores
            variants.append(Variant("split_rows", loops))
        return Space(variants)
    blocks = _pow2s(16, min(1024, next_pow2(facts["inner"])))
    return Space([Variant("columns", (Param("block_c", blocks), *loops))])


def _rows_space(facts: dict[str, Any], hw: Hardware) -> Space:
    outer, r = facts["outer"], facts["r"]

    def rows_valid(p: dict[str, Any]) -> bool:
        loops = _loops(r, 1, p["block_r"])
        if p["rows_per_program"] > 1 and loops:  # packing rows is for short rows, whole in the tile
            return False
        return _lanes_fit(p["rows_per_program"] * p["block_r"], p["num_warps"], loops)

    def split_valid(p: dict[str, Any]) -> bool:
        # Each part a block at least; past 16 programs per SM a split only adds partials.
        if math.ceil(r / p["split"]) < p["block_r"] or outer * p["split"] > 16 * hw.sms:
            return False
        return _lanes_fit(p["block_r"], p["num_warps"], _loops(r, p["split"], p["block_r"]))

    variants = [Variant("rows", (Param("rows_per_program", _pow2s(1, min(128, next_pow2(outer)))),
                                 Param("block_r", _pow2s(32, min(4096, next_pow2(r)))),
                                 Param("num_warps", WARPS)), rows_valid)]
    if _aligned_block(facts):
        def aligned_valid(p: dict[str, Any]) -> bool:
            return _lanes_fit(p["rows_per_program"] * _aligned_block(facts), p["num_warps"], False)

        variants.append(Variant("rows_aligned", (Param("rows_per_program", _pow2s(1, min(128, next_pow2(outer)))),
                                                 Param("num_warps", WARPS)), aligned_valid))
    if r >= 64:
        variants.append(Variant("split_rows", (Param("split", _pow2s(2, min(MAX_SPLIT, next_pow2(r) // 32))),
                                               Param("block_r", _pow2s(32, min(4096, next_pow2(r) // 2))),
                                               Param("num_warps", WARPS)), split_valid))
    return Space(variants)


def _align(facts: dict[str, Any]) -> int:
    """Elements in 16 bytes: the widest vector load."""
    return 16 // ITEMSIZE[facts["dtype"]]


def _aligned_block(facts: dict[str, Any]) -> int:
    """rows_aligned's tile row: a row and the shift back to a 16-byte boundary; 0 where the rows
    start on boundaries anyway, or do not fit one tile."""
    r, align = facts["r"], _align(facts)
    return max(32, next_pow2(r + align - 1)) if r % align and r + align - 1 <= 4096 else 0


def _columns_space(facts: dict[str, Any], hw: Hardware) -> Space:
    r, inner = facts["r"], facts["inner"]

    def tiles_of(p: dict[str, Any]) -> int:
        return facts["outer"] * math.ceil(inner / p["block_c"])

    def columns_valid(p: dict[str, Any], split: int = 1) -> bool:
        loops = _loops(r, split, p["block_r"])
        if p["num_stages"] > 1 and not loops:  # pipelining needs a loop
            return False
        return _lanes_fit(p["block_r"] * p["block_c"], p["num_warps"], loops)

    def split_valid(p: dict[str, Any]) -> bool:
        if math.ceil(r / p["split"]) < p["block_r"] or tiles_of(p) * p["split"] > 16 * hw.sms:
            return False
        return columns_valid(p, p["split"])

    shared = (Param("block_c", _pow2s(min(16, next_pow2(inner)), min(1024, next_pow2(inner)))),
              Param("block_r", _pow2s(1, min(64, next_pow2(r)))),
              Param("num_warps", WARPS[:4]), Param("num_stages", STAGES))
    variants = [Variant("columns", shared, columns_valid)]
    if r >= 2:
        variants.append(Variant("split_columns", (Param("split", _pow2s(2, min(MAX_SPLIT, next_pow2(r)))),
                                                  *shared), split_valid))
    return Space(variants)


def _two_blocks_space(facts: dict[str, Any], hw: Hardware) -> Space:
    def valid(p: dict[str, Any]) -> bool:
        return _lanes_fit(p["block_r"] * p["block_c"], p["num_warps"], _loops(facts["r"], 1, p["block_r"]))

    inner = facts["inner"]
    return Space([Variant("two_blocks", (Param("block_c", _pow2s(1, min(1024, next_pow2(inner)))),
                                         Param("block_r", _pow2s(1, min(4096, next_pow2(facts["r"])))),
                                         Param("num_warps", WARPS[:4])), valid)])


# ---------------------------------------------------------------- starting rules

def _triton_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    return {"rows": _rows_start, "columns": _columns_start, "two_blocks": _two_blocks_start}[
        facts["layout"]](facts, hw)


def _cpu_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    loops = {"simd": True, "schedule": "static"}
    if facts["layout"] == "rows":
        # A row per thread is enough parallel work once there are a few rows per core.
        few_long = facts["outer"] < 16 and facts["r"] >= 16384
        return {"variant": "split_rows" if few_long else "rows", **loops}
    return {"variant": "columns", "block_c": min(256, max(16, next_pow2(facts["inner"]))), **loops}


def _warps_for(tile: int) -> int:
    """16 values per thread: four 16-byte loads of fp32 in flight without running out of registers."""
    return max(1, min(8, tile // (16 * 32)))


def _split_for(programs: int, r: int, block_r: int, partial_bytes: int, hw: Hardware) -> int:
    """Parts per reduction that bring `programs` up to PROGRAMS_PER_SM per SM: each part keeps a
    block at least, and the float32 partials (partial_bytes per part) stay in a quarter of L2, so
    the combine kernel reads them from L2, not from HBM."""
    split = 1
    while (programs * split < PROGRAMS_PER_SM * hw.sms and math.ceil(r / (2 * split)) >= block_r
           and 2 * split <= MAX_SPLIT and 2 * split * partial_bytes <= hw.l2_bytes // 4):
        split *= 2
    return split


def _rows_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    outer, r = facts["outer"], facts["r"]
    # Whole rows up to 4096 in one tile; longer rows loop in blocks of 4096 with 8 warps.
    # Measured on an H200, sum over (8, 2^20) fp32 split 64 ways: blocks of 4096 with 8 warps
    # 0.018 ms, 2048 with 4 warps 0.028 ms, 1024 with 2 warps 0.058 ms.
    block_r = max(32, next_pow2(r)) if r <= 4096 else 4096
    split = _split_for(outer, r, block_r, 4 * outer, hw)
    if split > 1 and outer * split >= hw.sms // 2:  # a split leaving most SMs idle is not worth a second pass
        return {"variant": "split_rows", "split": split, "block_r": block_r, "num_warps": 8}
    # Short rows: pack rows until a tile holds ~4096 values, keeping PROGRAMS_PER_SM programs per SM.
    rows = 1
    while (block_r >= r and 2 * rows * block_r <= 4096 and 2 * rows <= min(128, next_pow2(outer))
           and math.ceil(outer / (2 * rows)) >= PROGRAMS_PER_SM * hw.sms):
        rows *= 2
    loops = _loops(r, 1, block_r)
    aligned = _aligned_block(facts)
    if aligned:
        # Rows that start off 16-byte boundaries (3 in 4 rows of 49 floats): aligned vector loads,
        # the tile row a little wider, as many rows per tile as the plain one would hold.
        rows = max(1, rows * block_r // aligned)
        return {"variant": "rows_aligned", "rows_per_program": rows, "num_warps": _warps_for(rows * aligned)}
    return {"variant": "rows", "rows_per_program": rows, "block_r": block_r,
            "num_warps": 8 if loops else _warps_for(rows * block_r)}


def _columns_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    outer, r, inner, item = facts["outer"], facts["r"], facts["inner"], ITEMSIZE[facts["dtype"]]
    # A program owns RUN_BYTES of contiguous inner positions (256 floats: coalesced 16-byte loads
    # per lane) and loops over R with block_r rows in flight, TILE_BYTES a step.
    block_c = max(min(16, next_pow2(inner)), min(next_pow2(inner), RUN_BYTES // item))
    block_r = max(1, min(64, next_pow2(r), TILE_BYTES // (block_c * item)))
    tiles = outer * math.ceil(inner / block_c)
    # Too few tiles to fill the SMs (the middle dim of (8, 4096, 2047): 64 tiles for 132 SMs):
    # split R into parts writing float32 partials, combined by a second small kernel.
    split = _split_for(tiles, r, block_r, 4 * outer * inner, hw)
    warps = _warps_for(block_r * block_c)
    point = {"block_c": block_c, "block_r": block_r, "num_warps": warps,
             "num_stages": 3 if _loops(r, split, block_r) else 1}
    if split > 1:
        return {"variant": "split_columns", "split": split, **point}
    return {"variant": "columns", **point}


def _two_blocks_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    inner, item = facts["inner"], ITEMSIZE[facts["dtype"]]
    block_c = min(next_pow2(inner), RUN_BYTES // item)
    block_r = max(1, min(4096, next_pow2(facts["r"]), TILE_BYTES // (block_c * item)))
    return {"variant": "two_blocks", "block_c": block_c, "block_r": block_r,
            "num_warps": _warps_for(block_r * block_c)}


# ---------------------------------------------------------------- render

_C_STRATEGY = {"rows": "ROWS", "split_rows": "SPLIT_ROWS", "columns": "COLUMNS"}


def _cpu_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    return _render(facts, "cpu.c", {
        "OUTER": f"{facts['outer']}LL", "R1": f"{facts['r1']}LL", "MID": f"{facts['mid']}LL",
        "R2": f"{facts['r2']}LL", "INNER": f"{facts['inner']}LL", **c_element(facts["dtype"]),
        "OP": facts["kind"].upper(), "STRATEGY": _C_STRATEGY[point["variant"]],
        "BLOCK_C": point.get("block_c", 16), "SCHEDULE": point["schedule"], "SIMD_LOOPS": point["simd"]})


def _triton_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    variant = point["variant"]
    shape = {"OP": facts["kind"], "OUT_SHAPE": facts["out_shape"], "OUT_STRIDE": facts["out_stride"]}
    if variant in ("rows", "split_rows"):
        name = "triton_rows.py"
        constants = {"OUTER": facts["outer"], "R": facts["r"],
                     "ROWS_PER_PROGRAM": point.get("rows_per_program", 1), "SPLIT": point.get("split", 1),
                     "BLOCK_R": point["block_r"], "NUM_WARPS": point["num_warps"]}
    elif variant == "rows_aligned":
        name = "triton_rows_aligned.py"
        constants = {"OUTER": facts["outer"], "R": facts["r"], "ALIGN": _align(facts),
                     "ROWS_PER_PROGRAM": point["rows_per_program"], "BLOCK_R": _aligned_block(facts),
                     "NUM_WARPS": point["num_warps"]}
    elif variant in ("columns", "split_columns"):
        name = "triton_columns.py"
        constants = {"OUTER": facts["outer"], "R": facts["r"], "INNER": facts["inner"],
                     "SPLIT": point.get("split", 1), "BLOCK_R": point["block_r"], "BLOCK_C": point["block_c"],
                     "NUM_WARPS": point["num_warps"], "NUM_STAGES": point["num_stages"]}
    else:
        name = "triton_two_blocks.py"
        constants = {"OUTER": facts["outer"], "R1": facts["r1"], "MID": facts["mid"], "R2": facts["r2"],
                     "INNER": facts["inner"], "BLOCK_R": point["block_r"], "BLOCK_C": point["block_c"],
                     "NUM_WARPS": point["num_warps"]}
    return _render(facts, name, shape | constants)


def _render(facts: dict[str, Any], name: str, constants: dict[str, Any]) -> str:
    text = kernel_file.read(__name__, name)
    return kernel_file.render(text, facts["op"], constants, kernel_file.style_of(name))


# ---------------------------------------------------------------- explain

_REASONS: dict[str, dict[Any, str]] = {
    "variant": {
        "rows": "short rows packed per program, or one long row per program looping over it",
        "rows_aligned": "short rows loaded from 16-byte boundaries and masked after: vector loads for rows "
                        "that start off a boundary",
        "split_rows": "each row split across programs, float32 partials combined by a second kernel: "
                      "fills the SMs when there are few long rows",
        "columns": "a program owns a run of contiguous inner positions and loops over the reduced dim: "
                   "coalesced loads, no second pass",
        "split_columns": "the reduced dim split across programs, float32 partials combined by a second "
                         "kernel: fills the SMs when there are few column tiles",
        "two_blocks": "both blocks of reduced dims walked by one program per output run",
    },
    "simd": {True: "ask the compiler to vectorise the inner loops",
             False: "scalar inner loops: no vector reductions"},
    "schedule": {"static": "equal shares per thread: no scheduling cost",
                 "dynamic": "threads take work as they free up: better when cores are uneven"},
}

_MORE_LESS: dict[str, tuple[str, str]] = {
    "split": ("more parts per reduction: more programs to fill the SMs",
              "fewer parts: less partial traffic and a cheaper combine"),
    "rows_per_program": ("more short rows per program: longer contiguous loads, fewer programs",
                         "fewer rows per program: more programs to spread over the SMs"),
    "block_r": ("more of the reduced dim per step: more loads in flight, fewer loop trips",
                "less of the reduced dim per step: fewer registers, less masking of short rows"),
    "block_c": ("more inner positions per program: longer contiguous runs, fewer programs",
                "fewer inner positions per program: more programs, fewer registers"),
    "num_warps": ("more warps keep more loads in flight", "fewer warps: less cross-warp reduction"),
    "num_stages": ("deeper software pipelining of the loop's loads",
                   "shallower pipelining: less shared memory, more programs resident per SM"),
}


def explain(name: str, old: Any, new: Any) -> str:
    text = _REASONS.get(name, {}).get(new)
    if text:
        return text
    if name in _MORE_LESS and isinstance(new, int) and isinstance(old, int):
        return _MORE_LESS[name][0 if new > old else 1]
    return "try a neighbouring value"


WRITERS = Writers(cpu=Writer(_cpu_space, _cpu_start, _cpu_render),
                  triton=Writer(_triton_space, _triton_start, _triton_render))  # no CUDA kernel yet
space, start, render = WRITERS.space, WRITERS.start, WRITERS.render  # by backend name
FAMILIES = [Family(name="reduce", match=match, writers=WRITERS, explain=explain)]
