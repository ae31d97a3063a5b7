"""Correctness against a float64 oracle, judged relative to eager PyTorch's own error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

# Error floors per dtype, in units of the output's largest magnitude: a kernel
# may always be this far from the float64 oracle. fp32 sums over thousands of
# terms land near 1e-7; 1e-5 leaves room for a different summation order but
# not for computing in half precision (~1e-3).
ERROR_FLOOR = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
# A candidate may be this many times further from the oracle than eager is.
EAGER_FACTOR = 8.0


def outputs_list(out: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def upcast(value: Any) -> Any:
    """Floating tensors to float64, for the oracle."""
    def cast(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.to(torch.float64)
        return x
    return tree_map(cast, value)


def normalised_error(out: torch.Tensor, oracle: torch.Tensor) -> float:
    """max |out - oracle| over max |oracle|, on the finite elements of the oracle."""
    finite = torch.isfinite(oracle)
    if not finite.any():
        return 0.0
    ref = oracle[finite]
    diff = (out.to(torch.float64)[finite] - ref).abs().max().item()
    scale = max(ref.abs().max().item(), 1e-30)
    return diff / scale


@dataclass(frozen=True)
class OracleFacts:
    """What compare needs of an oracle tensor beyond its values, computed once per task."""

    all_finite: bool
    scale: float  # max |oracle| over its finite elements (the unit of the normalised error)


def oracle_facts(oracle: torch.Tensor) -> OracleFacts:
    if not oracle.is_floating_point() or oracle.numel() == 0:
        return OracleFacts(all_finite=True, scale=1.0)
    if bool(torch.isfinite(oracle).all()):
        return OracleFacts(all_finite=True, scale=max(oracle.abs().max().item(), 1e-30))
    finite = oracle[torch.isfinite(oracle)]
    return OracleFacts(all_finite=False, scale=max(finite.abs().max().item(), 1e-30) if finite.numel() else 1.0)


def compare(
    outs: list[torch.Tensor],
    oracles: list[torch.Tensor],
    eager_errors: list[float],
    dtypes: list[torch.dtype],
    facts: list[OracleFacts] | None = None,
) -> tuple[str | None, list[float]]:
    """None when every output is right, else why not; and the error of each output.

    oracles are float64 (for floating outputs); dtypes are eager's output dtypes. `facts`, when
    given, are the oracles' (oracle_facts): with them an all-finite oracle is judged in two
    passes over the data instead of a dozen (seconds per set on 8192x4096 outputs).
    """
    if len(outs) != len(oracles):
        return f"returned {len(outs)} outputs, the reference returns {len(oracles)}", []
    errors = []
    for i, (out, oracle) in enumerate(zip(outs, oracles)):
        label = f"output {i}"
        if tuple(out.shape) != tuple(oracle.shape):
            return f"{label} has shape {tuple(out.shape)}, expected {tuple(oracle.shape)}", errors
        if out.dtype != dtypes[i]:
            return f"{label} has dtype {out.dtype}, expected {dtypes[i]}", errors
        if not out.is_floating_point():
            if not torch.equal(out.cpu(), oracle.cpu()):
                return f"{label} differs from the reference", errors
            errors.append(0.0)
            continue
        fact = facts[i] if facts else None
        if fact is not None and fact.all_finite and oracle.numel():
            out_cpu = out.detach().cpu()
            if not bool(torch.isfinite(out_cpu).all()):
                count = int((~torch.isfinite(out_cpu)).sum())
                return f"{label}: {count} NaN/inf values where the reference is finite (unwritten or overflowed)", \
                    errors
            out64, oracle64 = out_cpu.to(torch.float64), oracle.cpu()
            err = (out64 - oracle64).abs_().max().item() / fact.scale
        else:
            out64, oracle64 = out.detach().to(torch.float64).cpu(), oracle.cpu()
            bad = _non_finite_mismatch(out64, oracle64)
            if bad:
                return f"{label}: {bad}", errors
            err = normalised_error(out64, oracle64)
        errors.append(err)
        allowed = max(EAGER_FACTOR * eager_errors[i], ERROR_FLOOR.get(out.dtype, 1e-5))
        if err > allowed:
            worst = _worst_index(out64, oracle64)
            return (f"{label}: error {err:.2e} over the allowed {allowed:.2e} "
                    f"(eager's is {eager_errors[i]:.2e}); worst at index {worst}"), errors
    return None, errors


def _non_finite_mismatch(out: torch.Tensor, oracle: torch.Tensor) -> str | None:
    finite = torch.isfinite(oracle)
    if not torch.isfinite(out[finite]).all():
        count = int((~torch.isfinite(out[finite])).sum())
        return f"{count} NaN/inf values where the reference is finite (unwritten or overflowed)"
    nan = torch.isnan(oracle)
    if not torch.equal(torch.isnan(out), nan):
        return "NaN where the reference has none, or none where it has NaN"
    inf = torch.isinf(oracle)
    if not torch.equal(out[inf], oracle[inf]):
        return "infinities differ from the reference's"
    return None


def _worst_index(out: torch.Tensor, oracle: torch.Tensor) -> tuple[int, ...]:
    diff = torch.nan_to_num((out - oracle).abs(), nan=0.0)
    flat = int(diff.argmax())
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape))


def aliased_input(outs: list[torch.Tensor], inputs: list[torch.Tensor]) -> tuple[int, int] | None:
    """(output, input) sharing memory, if any: returning the input, or a view of it, is no kernel."""
    for i, out in enumerate(outs):
        for j, t in enumerate(inputs):
            if out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
                return i, j
    return None
