"""Correctness, element by element, against a float64 oracle and eager PyTorch's own errors.

Each output element i passes when

    |out_i - oracle_i| <= RTOL[dtype] * |oracle_i| + ATOL[dtype] * scale + tiny[dtype]
                          + EAGER_FACTOR * max(|eager_i - oracle_i|, median_j |eager_j - oracle_j|)

where scale is max |oracle| over the output. The relative term is what a kernel that
computes in float32 and rounds once must be allowed; the absolute term is kept small
(a norm judged relative to the largest element let every element under 1e-5 of it be
100% wrong); eager's own error at the element, or its median error if larger, covers an
op whose every correct implementation is off where eager is (a mean's rounding shifts a
whole normalised row). NaN never passes where the oracle is finite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

# Per-dtype tolerances (rtol: relative to the element; atol: relative to the output's
# largest magnitude). float32: 1e-5 is ~80 ulp, room for another summation order or a
# faster exp, not for computing in half precision (~1e-3). 16-bit: two ulp of the output's
# own rounding (float16 2^-10, bfloat16 2^-7), as a kernel computing in float32 gives.
RTOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
ATOL = {torch.float64: 1e-13, torch.float32: 1e-7, torch.float16: 1e-5, torch.bfloat16: 1e-4}
# A candidate may be this many times further from the oracle than eager is.
EAGER_FACTOR = 8.0


def outputs_list(out: Any) -> list[Any]:
    return [t for t in tree_flatten(out)[0]]


def upcast(value: Any) -> Any:
    """Floating tensors to float64, for the oracle (layout kept: the op sees the same strides)."""
    def cast(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.to(torch.float64)
        return x
    return tree_map(cast, value)


def in_output_range(oracle: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The oracle as the output dtype can hold it: beyond its largest finite value a correctly
    rounded result is an infinity (a float16 square of 10^3 is inf in eager and in any honest
    kernel, 10^6 in float64)."""
    if not dtype.is_floating_point or dtype == torch.float64:
        return oracle
    big = oracle.abs() > torch.finfo(dtype).max
    return torch.where(big, oracle.sign() * float("inf"), oracle) if bool(big.any()) else oracle


def oracle_dtype(dtype: torch.dtype) -> torch.dtype:
    """How the oracle is kept: float64 for 32/64-bit outputs; float32 is exact enough for a
    16-bit output (its rounding is 2^-8..2^-11, float32's 2^-24) at half the memory."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else torch.float64


def normalised_error(out: torch.Tensor, oracle: torch.Tensor) -> float:
    """max |out - oracle| over max |oracle|, on the finite elements of the oracle (for reports).
    One float64 buffer, used twice: masked copies of a 268 MB output took ten such at once."""
    finite = torch.isfinite(oracle)
    if not finite.any():
        return 0.0
    work = out.to(torch.float64, copy=True).sub_(oracle).abs_().masked_fill_(~finite, 0.0)
    diff = work.max().item()
    scale = work.copy_(oracle).abs_().masked_fill_(~finite, 0.0).max().item()
    return diff / max(scale, 1e-30)


def element_bound(oracle: torch.Tensor, eager: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The allowed |out - oracle| of every element (see the module's docstring), as bfloat16
    rounded up: 2 bytes an element, for every candidate of the task."""
    ref = oracle.to(torch.float64)
    finite = torch.isfinite(ref)
    all_finite, any_finite = bool(finite.all()), bool(finite.any())
    # In place, in the formula's order (the same bounds bit for bit): each float64 temporary is
    # twice a float32 output, 537 MB for a (16, 64, 256, 256) layer norm's, and the formula
    # written out of place held about ten of them at once; now two and the median's.
    bound = ref.abs().masked_fill_(~finite, 0.0)
    scale = bound.max().item() if any_finite else 1.0
    eager_err = eager.to(torch.float64, copy=True).sub_(ref).abs_().nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    typical = (eager_err if all_finite else eager_err[finite]).median().item() if any_finite else 0.0
    tiny = torch.finfo(dtype).smallest_normal * 2
    bound.mul_(RTOL.get(dtype, 1e-5)).add_(ATOL.get(dtype, 1e-7) * scale).add_(tiny)
    bound.add_(eager_err.clamp_(min=typical).mul_(EAGER_FACTOR)).masked_fill_(~finite, 0.0)
    return bound.to(torch.float32).mul_(1 + 2 ** -7).to(torch.bfloat16)  # rounding never tightens it


@dataclass(frozen=True)
class OracleFacts:
    """What a compare needs of a floating oracle alone: the same for every candidate judged
    against it, so the judge works it out once per set (judge.Oracle.facts), where a judged
    call would otherwise pass over the oracle twice more."""

    all_finite: bool
    scale: float  # the largest finite magnitude; 1.0 where there is none


def oracle_facts(oracle: torch.Tensor) -> OracleFacts:
    finite = torch.isfinite(oracle)
    if bool(finite.all()):
        return OracleFacts(True, oracle.abs().max().item() if oracle.numel() else 1.0)
    return OracleFacts(False, oracle[finite].abs().max().item() if bool(finite.any()) else 1.0)


def compare(outs: list[torch.Tensor], oracles: list[torch.Tensor], bounds: list[torch.Tensor | None],
            dtypes: list[torch.dtype], where: str | None = "cpu",
            facts: list[OracleFacts | None] | None = None) -> tuple[str | None, list[float]]:
    """None when every output is right, else why not; and each output's normalised error.
    `where`: the device to compare on; None compares where the tensors are (a whole model's
    logits, 4 GB as an oracle, stay on the GPU). `facts`: each output's OracleFacts where the
    caller keeps them (None: worked out here)."""
    move = (lambda t: t) if where is None else (lambda t: t.to(where))
    if len(outs) != len(oracles):
        return f"returned {len(outs)} outputs, the reference returns {len(oracles)}", []
    errors: list[float] = []
    for i, (out, oracle, bound) in enumerate(zip(outs, oracles, bounds)):
        label = f"output {i}"
        if tuple(out.shape) != tuple(oracle.shape):
            return f"{label} has shape {tuple(out.shape)}, expected {tuple(oracle.shape)}", errors
        if out.dtype != dtypes[i]:
            return f"{label} has dtype {out.dtype}, expected {dtypes[i]}", errors
        if not out.is_floating_point():
            if out.dtype == torch.bool:
                # byte for byte: torch reads any non-zero byte as True, so a bool output left
                # holding its prefill byte (2) would pass where the answer is True
                out, oracle = out.view(torch.uint8), oracle.view(torch.uint8)
            if not torch.equal(move(out), move(oracle)):
                return f"{label} differs from the reference at index {_first_difference(out, oracle)}", errors
            errors.append(0.0)
            continue
        known = facts[i] if facts is not None else None
        why, err = _compare_floating(move(out.detach()), move(oracle), None if bound is None else move(bound), known)
        errors.append(err)
        if why:
            return f"{label}: {why}", errors
    return None, errors


# A large output on the CPU is judged in slices: one pass over it, its oracle and its bounds, with
# temporaries of a slice rather than of the whole output (1 GB each for a 134M-element one, made
# anew for every judged call). An output that does not pass in slices is judged whole again, for
# the message. A slice is this many elements per intra-op thread, so that each op still spreads
# over every thread. The search judges in its evaluation threads, where a 64K-element op took
# ~140 us against ~10 from the main thread (each op's OpenMP region costing the difference):
# a 134M-element bf16 compare took 1.6-2.0 s in slices of 32K a thread there, 0.46-0.51 s at 512K,
# 0.90-0.94 s whole, on a 2-core x86 CPU (bench/results/cpu/issue34/compare_slices.txt). On a
# GPU the whole compare is already bandwidth-bound, and slices would only add launches.
SLICE_PER_THREAD = 1 << 19


def _compare_floating(out: torch.Tensor, oracle: torch.Tensor, bound: torch.Tensor | None,
                      facts: OracleFacts | None) -> tuple[str | None, float]:
    if out.numel() > _slice() and out.device.type == "cpu" and all(t is None or t.is_contiguous()
                                                                    for t in (out, oracle, bound)):
        err = _error_in_slices(out.reshape(-1), oracle.reshape(-1), None if bound is None else bound.reshape(-1),
                               facts)
        if err is not None:
            return None, err
    diff = out.to(oracle.dtype).sub_(oracle).abs_() if out.dtype != oracle.dtype else (out - oracle).abs_()
    if facts is None:
        facts = oracle_facts(oracle)
    scale = facts.scale
    if facts.all_finite:
        if not bool(torch.isfinite(out).all()):
            count = int((~torch.isfinite(out)).sum())
            return f"{count} NaN/inf values where the reference is finite (unwritten or overflowed)", float("inf")
    else:
        finite = torch.isfinite(oracle)
        bad = _non_finite_mismatch(out, oracle, finite)
        if bad:
            return bad, float("inf")
        diff = diff.masked_fill_(~finite, 0.0)
    err = diff.max().item() / max(scale, 1e-30) if diff.numel() else 0.0
    if bound is None:
        return None, err
    over = diff > bound  # promoted element by element: no float copy of the bounds
    if bool(over.any()):
        count = int(over.sum())
        excess = (diff - bound.to(diff.dtype)).flatten()
        worst = torch.topk(excess, min(WORST_SHOWN, count)).indices
        indices = [tuple(int(i) for i in torch.unravel_index(flat, diff.shape)) for flat in worst]
        first, rest = indices[0], indices[1:]
        others = "; next worst: " + ", ".join(f"{i} {out[i].item():.4g} vs {oracle[i].item():.4g}" for i in rest) \
            if rest else ""
        return (f"{count} of {diff.numel()} elements outside the tolerance; worst at index {first}: "
                f"{out[first].item():.6g} against {oracle[first].item():.6g} (allowed "
                f"+-{bound[first].item():.2g}); max error {err:.2e} of the largest magnitude{others}"), err
    return None, err


WORST_SHOWN = 5  # mismatching elements a wrong result names: a pattern (a row, a tail) shows in a few


def _slice() -> int:
    return SLICE_PER_THREAD * max(1, torch.get_num_threads())


def _error_in_slices(out: torch.Tensor, oracle: torch.Tensor, bound: torch.Tensor | None,
                     facts: OracleFacts | None) -> float | None:
    """The normalised error of a flat output whose every element is finite and within its bound,
    judged slice by slice as _compare_floating judges it whole; None where any slice is not so
    (a non-finite value on either side, an element out of bounds): the whole compare says why.
    With the oracle's facts known, each slice reads the oracle once (for the difference)."""
    if facts is not None and not facts.all_finite:
        return None
    largest_diff, scale, size = 0.0, 0.0 if facts is None else facts.scale, _slice()
    for start in range(0, out.numel(), size):
        part, ref = out[start:start + size], oracle[start:start + size]
        if facts is None and not bool(torch.isfinite(ref).all()):
            return None
        if not bool(torch.isfinite(part).all()):
            return None
        diff = part.to(ref.dtype).sub_(ref).abs_() if part.dtype != ref.dtype else (part - ref).abs_()
        if bound is not None and bool((diff > bound[start:start + size]).any()):
            return None
        largest_diff = max(largest_diff, diff.max().item())
        if facts is None:
            scale = max(scale, ref.abs().max().item())
    return largest_diff / max(scale, 1e-30)


def _non_finite_mismatch(out: torch.Tensor, oracle: torch.Tensor, finite: torch.Tensor) -> str | None:
    if not torch.isfinite(out[finite]).all():
        count = int((~torch.isfinite(out[finite])).sum())
        return f"{count} NaN/inf values where the reference is finite (unwritten or overflowed)"
    # Where the oracle is NaN an infinity passes too: a sum meeting +inf is +inf, where ATen's
    # Welford mean (and so the float64 oracle) subtracts inf from inf; a finite value does not.
    nan_out, nan_ref = torch.isnan(out), torch.isnan(oracle)
    if bool((nan_out & ~nan_ref).any()) or bool((nan_ref & torch.isfinite(out)).any()):
        return "NaN where the reference has none, or a finite value where it has NaN"
    inf = torch.isinf(oracle)
    if not torch.equal(out[inf].to(oracle.dtype), oracle[inf]):
        return "infinities differ from the reference's"
    return None


def _first_difference(out: torch.Tensor, oracle: torch.Tensor) -> tuple[int, ...]:
    flat = int(torch.argmax((out.cpu() != oracle.cpu()).flatten().to(torch.uint8)))
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), out.shape))
