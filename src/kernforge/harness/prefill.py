"""What an output holds before a candidate's call: a value it must overwrite, drawn per call.

Installed in a model, a kernel's outputs come from the allocator with whatever was there, so
an element it never writes is garbage. In the harness every output (floating, integer and
bool) is filled before every call, judged or not, with one of

  nan       NaN (floating outputs only)
  sentinel  12345 as the dtype holds it (wrapped into a narrow integer; a bool's byte 0x39)
  far       a value the oracle cannot produce there: beyond the set's largest magnitude by
            more than its tolerance (an infinity where no finite value is left), an integer
            past the set's range, a bool's byte 2 (neither False nor True)

A fixed prefill passes wherever the right answer happens to be it (a NaN prefill let a kernel
skip the elements whose answer is NaN). So the search process keeps, per set and output, only
the kinds that are wrong at every element of that set's oracle (checks.compare's rules: an
infinity passes where the oracle is NaN), and every call draws its kind among those: an element
a kernel leaves unwritten fails on any judged call, whatever its right answer. Where no kind is
wrong everywhere (an int8 output holding all 256 values) the kind is still drawn, best effort.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

KINDS = ("nan", "sentinel", "far")
SENTINEL = 12345
FAR_BOOL_BYTE = 2  # a bool is stored as one byte, 0 or 1; 2 is neither
# Elements per pass over an oracle: a float64 temporary of 16M elements is 128 MB, where whole
# ones of the VAE's 134M-element outputs were 1 GB each, several at once.
CHUNK = 1 << 24
# Bound now, before any candidate loads: a patched Tensor.fill_ or torch.full cannot skip the prefill.
_FILL, _FULL, _UINT8 = torch.Tensor.fill_, torch.full, torch.uint8

Value = float | int
Options = dict[str, Value]  # kind -> the value it fills with


# ---------------------------------------------------------------- the search process: what each set allows

def options_for_sets(oracles: list[list[Any]], bounds: list[list[Any]], dtypes: list[torch.dtype]) -> list[list[Options]]:
    """Per set, per output: the kinds whose value is wrong at every element of that set's oracle."""
    return [[options_for(o, b, d) for o, b, d in zip(outs, bnds, dtypes)] for outs, bnds in zip(oracles, bounds)]


def options_for(oracle: torch.Tensor, bound: torch.Tensor | None, dtype: torch.dtype) -> Options:
    """The kinds for one output on one set that fail at every element; all of them where none does
    (then an unwritten element is caught only where its answer differs from the draw)."""
    if not dtype.is_floating_point:
        offered = candidates(oracle, bound, dtype)
        wrong = {kind: v for kind, v in offered.items() if _wrong_at_each(v, oracle, bound)}
        return wrong or offered
    stats = _Stats.of(oracle, bound)
    offered = {"nan": math.nan, "sentinel": _rounded(SENTINEL, dtype), "far": _far_float(stats, dtype)}
    wrong = {kind: v for kind, v in offered.items() if stats.rules_out(v) or _wrong_at_each(v, oracle, bound)}
    return wrong or offered


@dataclass
class _Stats:
    """One pass over a floating oracle: its finite range, its widest tolerance, which non-finite
    values it holds. A value beyond the range by more than the widest tolerance fails at every
    element without a pass of its own (the VAE's 134M-element outputs took 5 s a pass on 2 cores)."""

    lo: float = math.inf
    hi: float = -math.inf
    slack: float = 0.0
    nan: bool = False
    posinf: bool = False
    neginf: bool = False

    @classmethod
    def of(cls, oracle: torch.Tensor, bound: torch.Tensor | None) -> _Stats:
        stats = cls()
        for o, b in _chunks(oracle, bound):
            # a chunk all finite (most are) is one aminmax pass, with no masked copy: the prefill
            # options of a 33.5M-element float32 oracle 0.29 -> 0.09-0.14 s on 2 cores (issue 34's README)
            finite = torch.isfinite(o)
            if bool(finite.all()):
                lo, hi = torch.aminmax(o)
                stats.lo, stats.hi = min(stats.lo, float(lo)), max(stats.hi, float(hi))
            else:
                values = o[finite]
                if values.numel():
                    stats.lo, stats.hi = min(stats.lo, float(values.min())), max(stats.hi, float(values.max()))
                stats.nan |= bool(torch.isnan(o).any())
                stats.posinf |= bool(torch.isposinf(o).any())
                stats.neginf |= bool(torch.isneginf(o).any())
            if b is not None and b.numel():
                stats.slack = max(stats.slack, float(b.max()))
        return stats

    @property
    def any_finite(self) -> bool:
        return self.lo <= self.hi

    def rules_out(self, value: float) -> bool:
        """value fails at every element, as these figures alone show (fails_at's rules)."""
        if math.isnan(value):
            return not self.nan
        if math.isinf(value):
            return not self.nan and not (self.posinf if value > 0 else self.neginf)
        # a finite value fails wherever the oracle is not finite; a margin of 1e-3 of it for the
        # comparison's own rounding (in float32 for a 16-bit output)
        margin = self.slack + 1e-3 * abs(value)
        return not self.any_finite or value - margin > self.hi or value + margin < self.lo


def _wrong_at_each(value: Value, oracle: torch.Tensor, bound: torch.Tensor | None) -> bool:
    return all(bool(fails_at(value, o, b).all()) for o, b in _chunks(oracle, bound))


def _chunks(oracle: torch.Tensor, bound: torch.Tensor | None) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """The oracle (and its bounds) flat, CHUNK elements at a time."""
    flat, flat_bound = oracle.reshape(-1), None if bound is None else bound.reshape(-1)
    for start in range(0, flat.numel(), CHUNK):
        yield flat[start:start + CHUNK], None if flat_bound is None else flat_bound[start:start + CHUNK]


def candidates(oracle: torch.Tensor, bound: torch.Tensor | None, dtype: torch.dtype) -> Options:
    """Each kind's value for this output's dtype and oracle, before it is checked against the oracle."""
    if dtype == torch.bool:
        return {"sentinel": SENTINEL & 0xFF, "far": FAR_BOOL_BYTE}
    if not dtype.is_floating_point:
        return {"sentinel": _wrapped(SENTINEL, dtype), "far": _far_integer(oracle, dtype)}
    return {"nan": math.nan, "sentinel": _rounded(SENTINEL, dtype), "far": _far_float(_Stats.of(oracle, bound), dtype)}


def _wrapped(value: int, dtype: torch.dtype) -> int:
    return int(torch.tensor(value, dtype=torch.int64).to(dtype).item())


def _rounded(value: float, dtype: torch.dtype) -> float:
    return float(torch.tensor(value, dtype=torch.float64).to(dtype).item())


def _far_integer(oracle: torch.Tensor, dtype: torch.dtype) -> int:
    """Past the set's range by its width (an index of a 1000-long row: 1999 or -1001), inside the dtype."""
    info = torch.iinfo(dtype)
    lo, hi = (int(oracle.min()), int(oracle.max())) if oracle.numel() else (0, 0)  # no copy made
    width = max(1, hi - lo)
    if hi + width <= info.max:
        return hi + width
    return max(info.min, lo - width)


def _far_float(stats: _Stats, dtype: torch.dtype) -> float:
    """Beyond the finite oracle's largest magnitude by its spread and the widest tolerance, as
    the dtype rounds it (softmax in [0, 1]: 3); an infinity where the dtype has no room left."""
    lo, hi = (stats.lo, stats.hi) if stats.any_finite else (0.0, 0.0)
    reach = 2 * max(1.0, abs(lo), abs(hi)) + stats.slack
    for value in (max(hi, 0.0) + reach, min(lo, 0.0) - reach):
        rounded = _rounded(value, dtype)
        if math.isfinite(rounded) and stats.rules_out(rounded):
            return rounded
    return math.inf if not stats.posinf else -math.inf


def fails_at(value: Value, oracle: torch.Tensor, bound: torch.Tensor | None) -> torch.Tensor:
    """Where an output holding `value` fails checks.compare against the oracle, element by element."""
    if oracle.dtype == torch.bool:
        return oracle.to(_UINT8) != int(value)
    if not oracle.is_floating_point():
        return oracle != int(value)
    v = torch.tensor(value, dtype=oracle.dtype)
    finite = torch.isfinite(oracle)
    if not math.isfinite(value):
        # fails every finite element and an infinity of the oracle's unlike it; where the
        # oracle is NaN both NaN and an infinity pass
        return finite | (torch.isinf(oracle) & (oracle != v))
    # a finite value fails where the oracle is NaN or infinite, and beyond the tolerance
    near = (oracle - v).abs() <= (bound.to(oracle.dtype) if bound is not None else 0)
    return ~(finite & near)


# ---------------------------------------------------------------- the worker: one draw per call

class Prefill:
    """The outputs' metas and each set's options (None: the defaults, for eager's own timing,
    which no prefill can fool); draw() picks a call's values, fill()/poison() put them in place.
    Everything a call needs is worked out here, once: a call pays the draw and the fills, 6.9 us
    for an 80x40 float32 output where the NaN fill before it took 5.4 us (best of 6 on a 2-core
    CPU, bench/results/cpu/issue33/README.md)."""

    def __init__(self, metas: list[dict[str, Any]], options: list[list[Options]] | None = None):
        self.metas = metas
        self.dtypes = [getattr(torch, m["dtype"].replace("torch.", "")) for m in metas]
        defaults = [candidates(torch.empty(0, dtype=d), None, d) for d in self.dtypes]
        self._defaults = [(o, tuple(sorted(o))) for o in defaults]
        self._per_set = [[(o, tuple(sorted(o))) for o in outs] for outs in options or []]
        # (elements, dtype) of each output's block: a bool's as bytes, so that 2 can be written
        self._blocks = [(max(1, m["nbytes"] // _itemsize(d)), _UINT8 if d == torch.bool else d)
                        for m, d in zip(metas, self.dtypes)]

    def draw(self, set_index: int, rng: random.Random) -> list[Value]:
        """One kind for the call, each output's value of it (another of that output's kinds where
        its set rules this one out)."""
        kind = KINDS[int(rng.random() * len(KINDS))]
        allowed = self._per_set[set_index] if set_index < len(self._per_set) else self._defaults
        return [options[kind] if kind in options else options[kinds[int(rng.random() * len(kinds))]]
                for options, kinds in allowed]

    def fill(self, outputs: list[torch.Tensor], values: list[Value]) -> None:
        """Outputs the harness made (the native backends'), filled in place."""
        for t, v in zip(outputs, values):
            _FILL(t.view(_UINT8) if t.dtype == torch.bool else t, v)

    def poison(self, values: list[Value], device: torch.device, copies: int) -> None:
        """The values where outputs the candidate allocates will most likely land: blocks of the
        outputs' sizes, filled and freed, which torch's allocator hands back next
        (deterministically on a GPU, best effort on a CPU's malloc)."""
        blocks = [_FULL((n,), v, dtype=dtype, device=device)
                  for (n, dtype), v in zip(self._blocks, values) for _ in range(copies)]
        del blocks


def fill(t: torch.Tensor, value: Value) -> None:
    _FILL(t.view(_UINT8) if t.dtype == torch.bool else t, value)


def any_prefill(t: torch.Tensor, rng: random.Random | None = None) -> Value:
    """A tensor filled with one of its dtype's kinds, drawn, and the value (outputs made outside
    a session: a native kernel called directly, as the sweep calls it)."""
    options = candidates(torch.empty(0, dtype=t.dtype), None, t.dtype)
    value = options[(rng or random).choice(sorted(options))]
    fill(t, value)
    return value


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


# ---------------------------------------------------------------- the judge: what a failure was

def held_prefill(out: torch.Tensor, value: Value) -> torch.Tensor:
    """Where an output still holds the value it was prefilled with."""
    if out.dtype == torch.bool:
        return out.view(_UINT8) == int(value)
    if isinstance(value, float) and math.isnan(value):
        return torch.isnan(out) if out.is_floating_point() else torch.zeros_like(out, dtype=torch.bool)
    return out == value


def unwritten(out: torch.Tensor, oracle: torch.Tensor, bound: torch.Tensor | None, value: Value) -> int:
    """How many elements fail only because they still hold the call's prefill: never written."""
    if out.shape != oracle.shape:
        return 0
    return int((held_prefill(out, value) & fails_at(value, oracle, bound)).sum())
