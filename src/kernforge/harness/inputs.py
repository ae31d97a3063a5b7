"""The input sets a candidate is checked and timed on, and the copies that carry them.

A set is one (args, kwargs) of the op's signature. The baseline makes them: the
captured real sets (where the capture kept placeholders for tensors over its caps,
those are drawn first: drawn_set), value variants of the real ones for timing (the same values
in another order, so that timed calls never repeat one set's values while their
distribution, and so any value-dependent cost, stays the model's), and fresh
draws, some adversarial. Every tensor keeps its layout exactly: shape, strides,
storage offset, gaps between rows (a half of `x.chunk(2, -1)`) and broadcast
(stride-0) dimensions, because a kernel is proved on the layout it will meet.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from kernforge.harness.serialize import Placeholder, extent, flat_span, layout_copy, strided_like


# Fresh sets, drawn for every floating tensor (integer tensors are kept as captured):
#   normal  N(0, 1)
#   large   N(0, 1) x 100: overflows exp() in a softmax that forgets to subtract the maximum
#   mixed   each row scaled by 10^U(-3, 2): tiny and large rows in one launch
#   offset  10^4 + N(0, 1) (10^2 for 16-bit): a mean far from zero, where a one-pass variance
#           (E[x^2] - E[x]^2) loses every digit (float32: 1e8 * 1.2e-7 = 12 unit variances) and
#           exp2 of a prescaled x drifts (a red-team softmax passed at 10^3 on the H200)
#   wide    +-10^U(-r, r) per element (r = 6 for 32/64-bit, 3 for 16-bit, which a square
#           overflows beyond 10^4.8): a dynamic range no real set has
FRESH_KINDS = ("normal", "large", "mixed", "offset", "wide")
# Timed calls rotate among at least this many sets of different values (real ones first).
TIMING_SETS = 3
# A digest's position weights, 1..WEIGHTS over and over (a prime: they repeat at no power of two),
# and the rows of WEIGHTS words it sums at a time: a 128 MB int64 copy at most, where a 268 MB
# input summed whole took 537 MB.
WEIGHTS, DIGEST_ROWS = 65521, 256


def refill(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Write src's values into dst's memory; both have the same layout (layout_copy of one set)."""
    flat_span(dst).copy_(flat_span(src), non_blocking=True)


def tensors_of(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def to_device(value: Any, device: torch.device) -> Any:
    """Every tensor of a set on `device`, its layout kept: a copy, even of one already there."""
    return tree_map(lambda x: layout_copy(x, device) if isinstance(x, torch.Tensor) else x, value)


def on_device(value: Any, device: torch.device) -> Any:
    """Every tensor of a set on `device`, copied only where it is elsewhere: for sets the calls
    only read (the harness refills copies of them), so that a CPU worker does not hold every set
    twice (8 sets of a 268 MB layer norm input: 2.1 GB more)."""
    def place(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        here = x.device.type == device.type and device.index in (None, x.device.index)
        return x if here else layout_copy(x, device)
    return tree_map(place, value)


def drawn_set(sample: Any, generator: torch.Generator) -> Any:
    """The sample with each Placeholder (a tensor that was over the capture's caps) drawn in its
    layout: N(0, 1) for a floating tensor; for an integer or bool one, uniform over the range its
    captured values had (an index drawn there is within its dimension, a mask all True stays so)."""
    return tree_map(lambda x: draw_placeholder(x, generator) if isinstance(x, Placeholder) else x, sample)


def draw_placeholder(p: Placeholder, generator: torch.Generator) -> torch.Tensor:
    dtype = p.torch_dtype
    if dtype.is_floating_point:
        span = torch.randn(p.extent, generator=generator, dtype=dtype, device=generator.device)  # no float64 copy
    elif p.low is not None and p.high is not None:
        span = torch.randint(p.low, p.high + 1, (p.extent,), generator=generator, dtype=dtype, device=generator.device)
    else:
        raise ValueError(f"no values can be drawn for a {p.dtype} input {list(p.shape)} without a recorded range")
    return strided_like(span, p)


def fresh_set(sample: Any, kind: str, generator: torch.Generator) -> Any:
    """New values of distribution `kind` for every floating tensor of `sample`, layout kept;
    where a tensor broadcasts (stride 0), the drawn value is shared along that dimension."""
    def draw(x: Any) -> Any:
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
            return x
        return strided_like(_draw(extent(x), kind, x, generator).to(x.dtype), x)
    return tree_map(draw, sample)


def _draw(n: int, kind: str, like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    device = generator.device
    values = torch.randn(n, generator=generator, dtype=torch.float64, device=device)
    if kind == "large":
        return values * 100.0
    if kind == "offset":
        return values + (100.0 if like.element_size() <= 2 else 1e4)
    if kind == "wide":
        r = 3.0 if like.element_size() <= 2 else 6.0
        exponent = torch.rand(n, generator=generator, dtype=torch.float64, device=device) * 2 * r - r
        return torch.sign(values) * torch.pow(10.0, exponent)
    if kind == "mixed" and like.dim() >= 1 and like.shape[-1] > 0:
        # a scale per run of last-dimension elements in storage order: per row for a dense tensor
        row = max(1, like.shape[-1])
        scales = torch.pow(10.0, torch.rand((n + row - 1) // row, generator=generator, dtype=torch.float64,
                                            device=device) * 5 - 3)
        return values * scales.repeat_interleave(row)[:n]
    return values


def permuted_set(sample: Any, generator: torch.Generator) -> Any:
    """The same values as `sample` in another order, per floating tensor: a timing set whose
    values differ from every other set's while their distribution is the model's own."""
    def permute(x: Any) -> Any:
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()) or extent(x) < 2:
            return x
        span = flat_span(x.detach()).to(generator.device)
        order = torch.randperm(span.numel(), generator=generator, device=generator.device)
        return strided_like(span[order].contiguous(), x)
    return tree_map(permute, sample)


def make_sets(real: list[Any], seed: int, name: str = "real",
              device: torch.device | str = "cpu") -> tuple[list[Any], list[str], list[int]]:
    """(sets, labels, timing): every set the candidate is judged on, and which of them the timed
    calls rotate among (the real sets, then permuted copies of them up to TIMING_SETS), all in
    host memory. name labels the real sets: "drawn" where their tensors over the sample caps were
    drawn. The values are drawn on `device` (a GPU draws a 134M-element set in milliseconds, where
    the CPU's generator took seconds: bench/results/cpu/issue34/README.md)."""
    generator = torch.Generator(device=device).manual_seed(seed)
    sets, labels = list(real), [f"{name}{i}" for i in range(len(real))]
    for k in range(max(0, TIMING_SETS - len(real))):
        sets.append(permuted_set(real[k % len(real)], generator))
        labels.append(f"{name}{k % len(real)}-permuted{k}")
    timing = list(range(len(sets)))
    for kind in FRESH_KINDS:
        sets.append(fresh_set(real[0], kind, generator))
        labels.append(f"fresh-{kind}")
    return [on_host(s) for s in sets], labels, timing


def on_host(value: Any) -> Any:
    """Every tensor of a set in host memory, its layout kept (copied only where it is elsewhere)."""
    return on_device(value, torch.device("cpu"))


def mutated_inputs(schema: Any) -> list[int]:
    """Indices, among the op's tensor arguments in order, of those the op writes (in-place ops)."""
    written = []
    index = 0
    for arg in schema.arguments:
        is_tensor = "Tensor" in str(arg.type)
        if is_tensor:
            if arg.alias_info is not None and arg.alias_info.is_write:
                written.append(index)
            index += 1
    return written


def digest(t: torch.Tensor) -> torch.Tensor:
    """Two integer sums of the storage a tensor spans (plain and position-weighted), as a tensor
    on its device (no host sync): equal for equal bytes whatever the summation order (integer
    sums wrap alike on every device), so an input the candidate changed is told from one it
    left alone without a copy of it."""
    span = flat_span(t.detach())
    if span.data_ptr() % 4:
        span = span.clone()  # aligned, so that the same bytes are read as the same words
    words = span.view(torch.uint8)
    if words.numel() % 4 == 0:
        words = words.view(torch.int32)
    # word i weighs i % WEIGHTS + 1: with the words as rows of WEIGHTS, the weighted sum is the
    # column sums times 1..WEIGHTS, so no weight per word is made (wrapping sums: the same in any
    # grouping). 30-62 against 134 ms for 33.5 MB on 2 cores, where the weights were made per word.
    n = words.numel()
    whole = n - n % WEIGHTS
    weights = torch.arange(1, WEIGHTS + 1, device=words.device, dtype=torch.int64)
    rows = words[:whole].view(-1, WEIGHTS)
    sums = torch.zeros(2, dtype=torch.int64, device=words.device)
    for start in range(0, rows.shape[0], DIGEST_ROWS):  # a sum widens its words to int64 in a copy
        columns = rows[start:start + DIGEST_ROWS].sum(dim=0, dtype=torch.int64)
        sums += torch.stack([columns.sum(), (columns * weights).sum()])
    tail = words[whole:].to(torch.int64)
    return sums + torch.stack([tail.sum(), (tail * weights[:n - whole]).sum()])
