"""Fresh input sets drawn from the op's value classes: the values a kernel right only on normal draws
gets wrong.

Normal draws never hold an exact zero, a tie, a constant row, a row of one sign, a NaN, an
infinity, a subnormal or the dtype's largest values, so a kernel that special-cases any of them
(skips the max subtraction, treats 0 as a sentinel, breaks ties its own way, reads a row as
"all equal, so uniform") passes them all. Two sets (judged calls cost: 8 sets became 10), each
folding many classes into one call, one class per row (a run of the last dimension), cycled from
a random row:

  classes    finite classes: all-negative, all-positive, zero rows, exact zeros among normal
             values, ties (five levels), constant rows, subnormals of the dtype, small integers
  edges      the dtype's largest finite magnitudes (+max, -max, both signs in one row), and NaN,
             +inf and -inf at random positions inside otherwise normal rows, beside normal rows;
             where eager cannot take the extremes (its outputs non-finite where the float64
             oracle's, in the output's range, are finite), the next rung down: max^(1/2),
             max^(1/4); where it cannot take the non-finite values either, the extremes alone
             (label fresh-extremes); none fits: the set is left out

Which tensors get a class is decided by what the reference does with it, never by a list of
ops: floating tensors only (the edges: the largest one only) (an index or mask keeps its captured values); a set on which eager
raises, or breaks the checks' own rules for non-finite outputs (checks.compare: NaN or inf
where the oracle is finite, NaN or infinities unlike the oracle's), is tried again with one
floating tensor classed at a time, and keeps those the reference accepts; none: left out.
The generator is the baseline's, seeded from os.urandom per worker unless a job names a seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from kernforge.harness.serialize import extent, strided_like

ROW_CLASSES = ("negative", "positive", "zero_row", "zeros", "ties", "constant", "subnormal", "integers")
EXTREME_ROWS = ("max", "min", "both", "normal")
EDGE_ROWS = ("max", "nan", "min", "posinf", "both", "neginf", "normal", "mixed")
CLASS_KINDS = ("classes", "edges")
EXTREME_RUNGS = (1.0, 0.5, 0.25)  # powers of the dtype's largest finite value


def class_sets(sample: Any, generator: torch.Generator, accepts: Callable[[Any], bool]) -> list[tuple[str, Any]]:
    """(label, set) for every class kind the reference accepts on `sample`'s signature.
    accepts(set): eager runs on it and keeps the checks' rules for non-finite outputs."""
    out = []
    for kinds in (("classes",), ("edges", "extremes")):  # the extremes alone where edges do not fit
        chosen = next(((kind, rung, s) for kind in kinds for rung in ((1.0,) if kind == "classes" else EXTREME_RUNGS)
                       if (s := _accepted_set(sample, kind, rung, generator, accepts)) is not None), None)
        if chosen is not None:
            kind, rung, classed = chosen
            out.append((f"fresh-{kind}" + ("" if rung == 1.0 else f"-max^{rung:g}"), classed))
    return out


def _accepted_set(sample: Any, kind: str, rung: float, generator: torch.Generator,
                  accepts: Callable[[Any], bool]) -> Any | None:
    """The sample with every floating tensor classed, if the reference accepts that; else with
    the floating tensors it accepts classed one at a time (all of them together, else the first)."""
    leaves, spec = tree_flatten(sample)
    floating = [k for k, x in enumerate(leaves) if isinstance(x, torch.Tensor) and x.is_floating_point()]
    if not floating:
        return None
    if kind != "classes":
        # The extremes and non-finite values go into the largest tensor only (the activation,
        # not a norm's weight and bias): a weight near the dtype's largest value times a
        # normalised value overflows or not by whether the product is fused with the bias add
        # (eager's FMA), which says nothing about a kernel's correctness.
        floating = [max(floating, key=lambda k: leaves[k].numel())]
    drawn = {k: class_tensor(leaves[k], kind, rung, generator) for k in floating}

    def with_classes(ks: list[int]) -> Any:
        return tree_unflatten([drawn[k] if k in ks else x for k, x in enumerate(leaves)], spec)

    if _safe(accepts, with_classes(floating)):
        return with_classes(floating)
    if len(floating) == 1:
        return None
    alone = [k for k in floating if _safe(accepts, with_classes([k]))]
    if len(alone) > 1 and _safe(accepts, with_classes(alone)):
        return with_classes(alone)
    return with_classes(alone[:1]) if alone else None


def _safe(accepts: Callable[[Any], bool], inputs: Any) -> bool:
    try:
        return bool(accepts(inputs))
    except Exception:  # noqa: BLE001 - the reference raising on a class is its answer: not accepted
        return False


def class_tensor(like: torch.Tensor, kind: str, rung: float, generator: torch.Generator) -> torch.Tensor:
    """Values of class set `kind` in `like`'s layout (shape, strides, offset's alignment): one
    row class per run of last-dimension elements in storage order, cycled from a random row.
    Drawn on the generator's device, each class for all its rows at once: a row at a time cost a
    few kernel launches a row, and 262144 rows of 8 took 2.56 s on the CPU, now 0.51 s
    (bench/results/cpu/issue34/README.md)."""
    n = extent(like)
    row = max(1, like.shape[-1]) if like.dim() else 1
    rows = (n + row - 1) // row
    names = {"classes": ROW_CLASSES, "edges": EDGE_ROWS, "extremes": EXTREME_ROWS}[kind]
    device = generator.device
    start = int(torch.randint(len(names), (1,), generator=generator, device=device))
    values = torch.randn(rows, row, generator=generator, dtype=torch.float64, device=device)
    which = (torch.arange(rows, device=device) + start) % len(names)
    for k, name in enumerate(names):
        chosen = (which == k).nonzero().flatten()
        if chosen.numel():
            values[chosen] = _rows(name, values[chosen], like.dtype, rung, generator)
    return strided_like(values.flatten()[:n].to(like.dtype), like)


def _rows(name: str, normal: torch.Tensor, dtype: torch.dtype, rung: float, generator: torch.Generator) -> torch.Tensor:
    """Rows of class `name` (one per row of `normal`, N(0, 1) float64), each drawn alike."""
    info = torch.finfo(dtype)
    device = normal.device

    def uniform() -> torch.Tensor:
        return torch.rand(normal.shape, generator=generator, dtype=torch.float64, device=device)

    def integers(low: int, high: int) -> torch.Tensor:
        return torch.randint(low, high, normal.shape, generator=generator, dtype=torch.float64, device=device)

    if name == "negative":
        return -normal.abs() - 1e-3
    if name == "positive":
        return normal.abs() + 1e-3
    if name == "zero_row":
        return torch.zeros_like(normal)
    if name == "zeros":  # about a third exact zeros among normal values
        return torch.where(uniform() < 1 / 3, torch.zeros_like(normal), normal)
    if name == "ties":  # five levels: the largest value repeated, equal neighbours
        return integers(-2, 3) * 0.5
    if name == "constant":
        return normal[:, :1].expand_as(normal).clone()
    if name == "subnormal":  # below the smallest normal of the dtype, down to a few of its ulps
        bits = round(-math.log2(info.eps))  # mantissa bits: 23 for float32, 10 for float16
        exponent = uniform() * (bits - 1) + 1
        return torch.sign(normal) * info.smallest_normal * torch.pow(2.0, -exponent)
    if name == "integers":  # whole numbers, exact in every float dtype: sums and products exact
        return integers(-8, 9)
    big = float(info.max) ** rung
    if name in ("max", "min", "both"):
        magnitude = big * (1 - 0.5 * uniform())  # (max/2, max]: distinct values near the top
        sign = {"max": 1.0, "min": -1.0}.get(name)
        signs = torch.where(uniform() < 0.5, -1.0, 1.0)
        return magnitude * (signs if sign is None else sign)
    if name in ("nan", "posinf", "neginf", "mixed"):
        values = normal.clone()
        specials = {"nan": [float("nan")], "posinf": [float("inf")], "neginf": [float("-inf")],
                    "mixed": [float("nan"), float("inf"), float("-inf")]}[name]
        # at random positions of each row, never at its first element only: a kernel that checks
        # x[0] is not a NaN-aware one
        count = max(1, min(len(specials), values.shape[1]))
        where = uniform().topk(count, dim=1).indices
        for k in range(count):
            values.scatter_(1, where[:, k:k + 1], specials[k % len(specials)])
        return values
    return normal


def reference_accepts(eager: Callable[[Any], list[Any]], oracle: Callable[[Any], list[Any]]) -> Callable[[Any], bool]:
    """accepts(set) for class_sets: eager runs on the set, and its outputs keep the checks' rules
    for non-finite values against the float64 oracle (in the outputs' range), as a candidate's
    must; a class eager itself cannot take is no test of a candidate."""
    from kernforge.evaluate.checks import compare, in_output_range

    def accepts(inputs: Any) -> bool:
        outs = [e for e in eager(inputs) if isinstance(e, torch.Tensor)]
        refs = [o for o in oracle(inputs) if isinstance(o, torch.Tensor)]
        if len(outs) != len(refs):
            return False
        kept = [in_output_range(r.to(e.device), e.dtype) if e.is_floating_point() else r.to(e.device)
                for r, e in zip(refs, outs)]
        why, _ = compare(outs, kept, [None] * len(outs), [e.dtype for e in outs], where=None)  # where eager ran
        return why is None
    return accepts
