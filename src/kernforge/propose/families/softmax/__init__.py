"""Softmax and log-softmax over the last dimension, row by row:
    softmax      y = exp(x - max(x)) / sum(exp(x - max(x)))
    log-softmax  y = x - max(x) - log(sum(exp(x - max(x))))

Memory-bound: one read of x and one write of y is the floor (8 bytes per element in
fp32). The variants differ in how many times they re-read a row, where the row lives
between passes, and how rows map onto programs: many short rows packed into one program,
one row per program, or one long row split across programs (when there are too few rows
to fill the GPU).
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
    contiguous_strides,
    cuda_element,
    is_tensor,
    next_pow2,
)
from kernforge.records.task import KernelTask

OPS = {"aten::_softmax.default": False, "aten::_log_softmax.default": True}  # op -> log

MAX_CHUNKS = 1024  # split_row: the most chunks one row is split into
MAX_TILE = 16384  # single_tile: past 16K fp32 values per program the registers spill
CUDA_MAX_CACHED = 64  # cuda: fp32 values per thread held in registers when the row is cached


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


# ---------------------------------------------------------------- spaces

POW2_BLOCKS = (256, 512, 1024, 2048, 4096, 8192)
WARPS = (1, 2, 4, 8, 16)


def _cpu_space(facts: dict[str, Any], hw: Hardware) -> Space:
    # store_exp keeps exp() in the output between passes: exact only when the output is fp32,
    # and only for softmax (log-softmax needs x again at the end).
    store = facts["dtype"] == "float32" and not facts["log"]
    algorithms = ("store_exp", "recompute", "online") if store else ("recompute", "online")
    return Space.single([Param("algorithm", algorithms), Param("exp", ("libm", "poly")),
                         Param("schedule", ("static", "dynamic")), Param("simd", (False, True))])


def _triton_space(facts: dict[str, Any], hw: Hardware) -> Space:
    cols = facts["cols"]
    whole = _whole_row(cols)
    packs = tuple(r for r in (1, 2, 4, 8, 16, 32, 64) if r * whole <= MAX_TILE)
    variants = []
    if packs:
        variants.append(Variant("single_tile", (Param("rows_per_program", packs), Param("num_warps", WARPS))))
    loop_blocks = tuple(b for b in POW2_BLOCKS if b < 2 * cols)
    if loop_blocks:
        variants.append(Variant("online_loop", (Param("block_n", loop_blocks), Param("num_warps", WARPS))))
    # split_row: at least two chunks per row, at most MAX_CHUNKS (their partials fit one tile).
    split_blocks = tuple(b for b in POW2_BLOCKS if cols > b and math.ceil(cols / b) <= MAX_CHUNKS)
    if split_blocks:
        variants.append(Variant("split_row", (Param("block_n", split_blocks), Param("num_warps", WARPS))))
    return Space(variants)


def _whole_row(cols: int) -> int:
    return max(16, next_pow2(cols))


def _cuda_vecs(facts: dict[str, Any]) -> tuple[int, ...]:
    # A pack is one aligned load of at most 16 bytes; rows start at multiples of COLS elements,
    # so COLS must be a multiple of the pack.
    item = ITEMSIZE[facts["dtype"]]
    return tuple(v for v in (1, 2, 4, 8) if v * item <= 16 and facts["cols"] % v == 0)


def _cuda_items(facts: dict[str, Any], point: dict[str, Any]) -> int:
    return math.ceil(facts["cols"] / (point["threads_per_row"] * point["vec"]))


def _cuda_space(facts: dict[str, Any], hw: Hardware) -> Space:
    cols = facts["cols"]

    def rows_valid(point: dict[str, Any]) -> bool:
        if point["threads_per_row"] * point["rows_per_block"] > 1024:
            return False
        # No more threads per row than the row has packs (a warp at least): the rest would idle.
        if point["threads_per_row"] > max(32, next_pow2(math.ceil(cols / point["vec"]))):
            return False
        return not point["cache_row"] or _cuda_items(facts, point) * point["vec"] <= CUDA_MAX_CACHED

    def split_valid(point: dict[str, Any]) -> bool:
        # Each thread has a pack of the chunk at least; a grid's y dimension holds 65535 rows.
        return point["threads"] * point["vec"] <= point["chunk"] and facts["rows"] <= 65535

    vecs = _cuda_vecs(facts)
    variants = [Variant("rows", (Param("threads_per_row", (32, 64, 128, 256, 512, 1024)),
                                 Param("rows_per_block", (1, 2, 4, 8, 16)), Param("vec", vecs),
                                 Param("cache_row", (False, True))), rows_valid)]
    chunks = tuple(c for c in (1024, 2048, 4096, 8192, 16384) if cols > c and math.ceil(cols / c) <= MAX_CHUNKS)
    if chunks:
        variants.append(Variant("split_row", (Param("threads", (128, 256, 512, 1024)), Param("vec", vecs),
                                              Param("chunk", chunks)), split_valid))
    return Space(variants)


# ---------------------------------------------------------------- starting rules

def _cpu_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    # The best guess measured on a Zen 4 CPU: exp() stored once, vectorised.
    store = "store_exp" if facts["dtype"] == "float32" and not facts["log"] else "recompute"
    return {"algorithm": store, "exp": "poly", "schedule": "static", "simd": True}


def _triton_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    rows, cols = facts["rows"], facts["cols"]
    whole = _whole_row(cols)
    if rows < 2 * hw.sms and cols >= 8192:
        # Too few rows to fill the SMs: split each row into chunks of 4096.
        return {"variant": "split_row", "block_n": 4096, "num_warps": 8}
    if whole <= 8192:
        # Pack short rows up to ~4K values per program, but keep at least 4 programs per SM.
        packed = max(1, min(64, 4096 // whole))
        while packed > 1 and rows // packed < 4 * hw.sms:
            packed //= 2
        return {"variant": "single_tile", "rows_per_program": packed,
                "num_warps": 4 if packed * whole <= 2048 else 8}
    return {"variant": "online_loop", "block_n": 4096, "num_warps": 8}


def _cuda_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    vec = max(_cuda_vecs(facts))
    if facts["rows"] < 2 * hw.sms and facts["cols"] >= 8192:
        # Too few rows to fill the SMs: chunks of 4096 elements, a block each (as for Triton).
        return {"variant": "split_row", "threads": 256, "vec": vec, "chunk": 4096}
    packs = math.ceil(facts["cols"] / vec)
    # About four packs per thread (loads in flight), a warp per row at least, a block per row
    # at most; short rows share a block up to 256 threads, keeping four blocks per SM.
    threads = min(1024, max(32, next_pow2(math.ceil(packs / 4))))
    rows_per_block = max(1, 256 // threads)
    while rows_per_block > 1 and facts["rows"] / rows_per_block < 4 * hw.sms:
        rows_per_block //= 2
    point = {"variant": "rows", "threads_per_row": threads, "rows_per_block": rows_per_block, "vec": vec,
             "cache_row": True}
    point["cache_row"] = _cuda_items(facts, point) * vec <= CUDA_MAX_CACHED // 2
    return point


# ---------------------------------------------------------------- render

def _cpu_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    return _render(facts, "cpu.c", {
        "ROWS": f"{facts['rows']}LL", "COLS": f"{facts['cols']}LL", **c_element(facts["dtype"]),
        "LOG": facts["log"], "ALGORITHM": point["algorithm"].upper(), "POLY_EXP": point["exp"] == "poly",
        "SCHEDULE": point["schedule"], "SIMD_LOOPS": point["simd"]})


def _cuda_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    constants = {"ROWS": f"{facts['rows']}LL", "COLS": f"{facts['cols']}LL", **cuda_element(facts["dtype"]),
                 "LOG": facts["log"]}
    if point["variant"] == "rows":
        constants |= {"THREADS_PER_ROW": point["threads_per_row"], "ROWS_PER_BLOCK": point["rows_per_block"],
                      "VEC": point["vec"], "CACHE_ROW": point["cache_row"]}
    else:
        constants |= {"THREADS": point["threads"], "VEC": point["vec"], "CHUNK": point["chunk"]}
    return _render(facts, f"cuda_{point['variant']}.cu", constants)


def _triton_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    variant = point["variant"]
    if variant == "single_tile":
        constants = {"BLOCK_N": _whole_row(facts["cols"]), "ROWS_PER_PROGRAM": point["rows_per_program"]}
    else:
        constants = {"BLOCK_N": point["block_n"]}
    constants |= {"NUM_WARPS": point["num_warps"], "LOG": facts["log"]}
    return _render(facts, f"triton_{variant}.py", constants)


def _render(facts: dict[str, Any], name: str, constants: dict[str, Any]) -> str:
    text = kernel_file.read(__name__, name)
    return kernel_file.render(text, facts["op"], constants, kernel_file.style_of(name))


# ---------------------------------------------------------------- explain

_REASONS: dict[str, dict[Any, str]] = {
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
    "cache_row": {True: "the row held in registers between the passes: read once",
                  False: "the row read again for the outputs: fewer registers, more threads resident"},
}


def explain(name: str, old: Any, new: Any) -> str:
    text = _REASONS.get(name, {}).get(new)
    if text:
        return text
    if name in ("rows_per_program", "rows_per_block"):
        return "more rows per program amortise the launch of short rows" if new > old else \
            "fewer rows per program give more programs to spread over the SMs"
    if name == "num_warps":
        return "more warps keep more loads in flight" if new > old else \
            "fewer warps mean less cross-warp reduction work per row"
    if name == "threads_per_row":
        return "more threads per row: more loads in flight per row" if new > old else \
            "fewer threads per row: cheaper reductions, more rows at once"
    if name == "vec":
        return "wider loads: fewer instructions per byte" if new > old else "narrower loads"
    if name == "block_n":
        return "larger blocks: fewer loop trips" if new > old else "smaller blocks: fewer registers"
    return "try a neighbouring value"


WRITERS = Writers(cpu=Writer(_cpu_space, _cpu_start, _cpu_render),
                  triton=Writer(_triton_space, _triton_start, _triton_render),
                  cuda=Writer(_cuda_space, _cuda_start, _cuda_render))
space, start, render = WRITERS.space, WRITERS.start, WRITERS.render  # by backend name
FAMILIES = [Family(name="softmax", match=match, writers=WRITERS, explain=explain)]
