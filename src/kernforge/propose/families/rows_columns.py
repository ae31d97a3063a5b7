"""Spaces and starts shared by the families that read x as [outer, R, inner] around one dim and
keep rows (inner = 1) apart from columns (inner > 1): indexed_reduce and cumsum. Their row
variants differ; their C spaces and their Triton column variant are the same kernels' shapes."""

from __future__ import annotations

import math
from typing import Any

from kernforge.propose.builtin.family import Hardware
from kernforge.propose.builtin.space import Param, Space, Variant
from kernforge.propose.families.common import next_pow2

WARPS = (1, 2, 4, 8, 16)
SCHEDULE = Param("schedule", ("static", "dynamic"))


def cpu_space(facts: dict[str, Any], min_part: int) -> Space:
    """Columns by blocks of inner positions; or a row a thread, or each row split into parts of at
    least `min_part` values (below it the combine costs more than the parallelism gives)."""
    if facts["inner"] > 1:
        blocks = tuple(b for b in (16, 64, 256, 1024) if b <= max(16, next_pow2(facts["inner"])))
        return Space([Variant("columns", (Param("block_c", blocks), SCHEDULE))])
    variants = [Variant("rows", (SCHEDULE,))]
    parts = tuple(p for p in (4, 16, 64) if facts["r"] >= min_part * p)
    if parts:
        variants.append(Variant("split_row", (Param("parts", parts),)))
    return Space(variants)


def cpu_start(facts: dict[str, Any], min_part: int) -> dict[str, Any]:
    if facts["inner"] > 1:
        return {"variant": "columns", "block_c": min(256, max(16, next_pow2(facts["inner"]))), "schedule": "static"}
    # A row a thread once there are a few rows a core; fewer rows, each long, are split.
    if facts["outer"] < 16 and facts["r"] >= min_part * 16:
        return {"variant": "split_row", "parts": 16 if facts["r"] < min_part * 64 else 64}
    return {"variant": "rows", "schedule": "static"}


def triton_columns_space(facts: dict[str, Any], max_tile: int) -> Space:
    """[block_r, block_c] tiles, block_c contiguous along inner, at most `max_tile` values."""
    def fits(point: dict[str, Any]) -> bool:
        return point["block_r"] * point["block_c"] <= max_tile

    return Space([Variant("columns", (
        Param("block_r", tuple(b for b in (1, 2, 4, 8, 16, 32, 64) if b <= next_pow2(facts["r"]))),
        Param("block_c", tuple(b for b in (16, 32, 64, 128, 256) if b <= max(16, next_pow2(facts["inner"])))),
        Param("num_warps", WARPS)), fits)])


def triton_columns_start(facts: dict[str, Any], hw: Hardware, rows_per_step: int,
                         values_per_warp: int) -> dict[str, Any]:
    """64 columns (256 contiguous bytes of fp32), narrower when the column blocks would leave SMs
    idle; `rows_per_step` positions of R a step; a warp per `values_per_warp` values of the tile."""
    outer, r, inner = facts["outer"], facts["r"], facts["inner"]
    block_c = min(64, max(16, next_pow2(inner)))
    if outer * math.ceil(inner / block_c) < 4 * hw.sms:
        block_c = max(16, block_c // 2)
    block_r = min(rows_per_step, next_pow2(r))
    return {"variant": "columns", "block_r": block_r, "block_c": block_c,
            "num_warps": max(1, min(4, block_r * block_c // values_per_warp))}
