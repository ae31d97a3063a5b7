"""Fused chains (capture/chains.py): the chain's own steps generated into one kernel.

One kernel file per backend (kernels/triton_rows.py, kernels/cpu_rows.c); its constants block
holds the kernel generated from the chain (lower.py, then triton_gen.py or c_gen.py), so
element-wise chains of any length and order, hand-written norms (pow, mean, add, rsqrt, mul),
scale and mask then softmax, and norm then activation over the last dim all come from one
template rather than one per combination.

Floor: each input read once and each output written once (the chain's intermediates never
reach memory); a looped kernel reads its full inputs once more per reduction level.
"""

from __future__ import annotations

import math
from typing import Any

from kernforge.propose.builtin import kernel_file
from kernforge.propose.builtin.family import Family, Hardware, Writer, Writers
from kernforge.propose.builtin.space import Param, Space, Variant
from kernforge.propose.families.chain.c_gen import buffered_values
from kernforge.propose.families.chain.c_gen import kernel_source as c_source
from kernforge.propose.families.chain.lower import Program, lower
from kernforge.propose.families.chain.triton_gen import kernel_source
from kernforge.propose.families.common import next_pow2
from kernforge.records.task import KernelTask

# Elements a tile of whole rows may hold: 16 fp32 values a thread at 8 warps, past which the
# intermediates of a long chain spill registers.
TILE_ELEMENTS = 8192
WARPS = (1, 2, 4, 8, 16)
ROW_BLOCKS = (1, 2, 4, 8, 16, 32, 64, 128)
COL_BLOCKS = (64, 128, 256, 512, 1024, 2048, 4096)


def match(task: KernelTask) -> dict[str, Any] | str:
    if not task.chain:
        return f"no built-in template for {task.op}"
    program = lower(task.chain, task.args, task.outputs)
    if isinstance(program, str):
        return program
    return {"op": task.op, "program": program, "rows": program.rows, "n": program.n,
            "reductions": program.reductions}


def _triton_space(facts: dict[str, Any], hw: Hardware) -> Space:
    n, rows, reduces = facts["n"], facts["rows"], facts["reductions"]
    full = next_pow2(n)

    def tile_ok(point: dict[str, Any]) -> bool:
        cols = full if reduces else point["block_n"]
        elements = cols * point["block_r"]
        return elements <= TILE_ELEMENTS * 2 and elements // (32 * point["num_warps"]) >= 1 \
            and point["block_r"] <= next_pow2(rows)

    def loop_ok(point: dict[str, Any]) -> bool:
        elements = point["block_n"] * point["block_r"]
        return point["block_n"] < full and elements <= TILE_ELEMENTS and elements // (32 * point["num_warps"]) >= 1

    rows_p = Param("block_r", ROW_BLOCKS)
    warps = Param("num_warps", WARPS)
    cols_p = Param("block_n", tuple(b for b in COL_BLOCKS if b <= max(64, full)))
    variants = []
    if not reduces or full <= TILE_ELEMENTS:
        variants.append(Variant("tile", (rows_p, warps) + (() if reduces else (cols_p,)), tile_ok))
    if reduces:
        variants.append(Variant("loop", (cols_p, rows_p, warps), loop_ok))
    return Space(variants)


def _uses_exp(facts: dict[str, Any]) -> bool:
    return any("kf_exp" in c or "kf_tanh" in c for _triton, c, _arity in facts["program"].functions)


def _cpu_space(facts: dict[str, Any], hw: Hardware) -> Space:
    # the softmax family's C choices; the polynomial exp only where a step calls exp, the row
    # buffer only where a later loop over the row would recompute an earlier one's values
    exp = (Param("exp", ("libm", "poly")),) if _uses_exp(facts) else ()
    reuse = (Param("reuse", ("recompute", "buffer")),) if buffered_values(facts["program"]) else ()
    return Space.single([Param("schedule", ("static", "dynamic")), Param("simd", (False, True)), *exp, *reuse])


def _cpu_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    # As the softmax family's C start (measured on a Zen 4 CPU): static rows, vectorised loops,
    # the polynomial exp. The row buffer where exp is what a later loop would recompute: on a
    # 2-core EPYC, scale + mask + softmax (1,8,512,512) fp32 took 0.89 ms buffered against 1.67
    # recomputing; a residual add then RMSNorm (2048,2048) 1.40 against 1.27 ms.
    point = {"schedule": "static", "simd": True}
    if _uses_exp(facts):
        point["exp"] = "poly"
    if buffered_values(facts["program"]):
        point["reuse"] = "buffer" if _uses_exp(facts) else "recompute"
    return point


def _triton_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    # About 2048-4096 elements a program and 8 a thread: whole short rows packed several to a
    # program, while there are at least two programs per SM.
    n, rows, reduces = facts["n"], facts["rows"], facts["reductions"]
    cols = next_pow2(n) if reduces else min(next_pow2(n), 1024)
    if reduces and cols > TILE_ELEMENTS:
        return {"variant": "loop", "block_n": 2048, "block_r": 1, "num_warps": 8}
    block_r = max(1, min(128, 4096 // cols, next_pow2(rows)))
    while block_r > 1 and math.ceil(rows / block_r) * (math.ceil(n / cols) if not reduces else 1) < 2 * hw.sms:
        block_r //= 2
    warps = max(1, min(16, cols * block_r // 256))
    point = {"variant": "tile", "block_r": block_r, "num_warps": warps}
    return point if reduces else {**point, "block_n": cols}


def _cpu_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    program: Program = facts["program"]
    constants = {"POLY_EXP": point.get("exp") == "poly",
                 "chain_rows": kernel_file.Snippet(c_source(program, point["schedule"], point["simd"],
                                                            point.get("reuse") == "buffer"))}
    return kernel_file.render(kernel_file.read(__name__, "cpu_rows.c"), facts["op"], constants, "c")


def _triton_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    program: Program = facts["program"]
    tile = point["variant"] == "tile"
    block_n = next_pow2(program.n) if tile and program.reductions else point["block_n"]
    grid_cols = math.ceil(program.n / block_n) if tile and not program.reductions else 1
    constants = {
        "chain_rows": kernel_file.Snippet(kernel_source(program, tile, point["block_r"], block_n)),
        "INPUTS": tuple((tuple(t["shape"]), tuple(t["stride"]), t["dtype"]) for t in program.inputs),
        "OUTPUTS": tuple((tuple(o["shape"]), tuple(o["stride"]), _torch_dtype(o["dtype"])) for o in program.outputs),
        "ROWS": program.rows, "BLOCK_R": point["block_r"], "GRID_COLS": grid_cols,
        "NUM_WARPS": point["num_warps"],
    }
    text = kernel_file.read(__name__, "triton_rows.py")
    return kernel_file.render(text, facts["op"], constants, "python")


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name.replace("torch.", ""))  # its repr in the block is the name: torch.bfloat16


_REASONS = {"tile": "whole rows in registers: every input read once, the chain computed in one sweep",
            "loop": "the row in chunks, one pass per reduction level: rows too long for registers"}
_CPU_REASONS: dict[str, dict[Any, str]] = {
    "schedule": {"static": "equal row ranges per thread: no scheduling cost",
                 "dynamic": "threads take rows as they free up: better when cores are uneven"},
    "simd": {True: "ask the compiler to vectorise the loops over the row",
             False: "scalar loops over the row: no vector reductions"},
    "exp": {"libm": "the C library's expf: exact, but a call per element that does not vectorise",
            "poly": "a polynomial exp that the compiler vectorises; error near 1e-7"},
    "reuse": {"recompute": "each loop over the row recomputes from the inputs what it needs: no buffer writes",
              "buffer": "a later loop reads an earlier one's values from a row buffer: each step computed once"},
}


def explain(name: str, old: Any, new: Any) -> str:
    if name in _CPU_REASONS:
        return _CPU_REASONS[name].get(new, "another choice")
    if name == "variant":
        return _REASONS.get(new, "another structure")
    if name == "block_r":
        return "more rows a program: short rows fill the lanes, fewer programs" if new > old else \
            "fewer rows a program: more programs to spread over the SMs"
    if name == "block_n":
        return "wider chunks: more bytes in flight a pass" if new > old else "narrower chunks: fewer registers"
    if name == "num_warps":
        return "more warps: fewer values a thread, more loads in flight" if new > old else \
            "fewer warps: more values a thread, cheaper reductions"
    return "try a neighbouring value"


WRITERS = Writers(cpu=Writer(_cpu_space, _cpu_start, _cpu_render),
                  triton=Writer(_triton_space, _triton_start, _triton_render))  # no CUDA writer yet
space, start, render = WRITERS.space, WRITERS.start, WRITERS.render  # by backend name
FAMILIES = [Family(name="chain", match=match, writers=WRITERS, explain=explain)]
