"""The whole model with and without the kernels: its outputs checked, its time measured four ways.

Correctness. The patched model's outputs are judged as a kernel's are (evaluate/checks.py),
with the model as the op: against the model run in float64, each element within

    RTOL[dtype] * |oracle| + ATOL[dtype] * max|oracle| + EAGER_FACTOR * max(eager's error there,
                                                                         eager's median error)

the same constants a task's candidate meets. Eager's own error is what the model's dtype
costs end to end, so each kernel's allowance (within EAGER_FACTOR of eager at its op) carries
through the layers after it in proportion. Where an op has no float64 kernel, that op alone runs
in float32 (Float32WhereNoFloat64); where the model still cannot run in float64, a 16-bit model
is judged against its float32 copy, and failing that eager's output is the oracle and the
allowance is the dtype's alone (said in the report).

Timing. Calls of the whole forward pass under no_grad, timed by CUDA events on a GPU and the
host clock on a CPU, in rounds that visit the variants in a shuffled order, so that drift
falls on all of them. Compiled variants cannot share a process's compiled code (Dynamo keys
it by code object and the routing is invisible to its guards), so each compiled variant has
a phase of its own (compiled code reset, then compiled under its routing), timed beside
eager and patched eager; its speedup is taken against the eager of its own phase. Under apply's
time limit the rounds and calls per round are sized to fit it (pace.py).
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from kernforge.evaluate.checks import compare, element_bound, oracle_dtype, upcast
from kernforge.harness.timing import clearly_faster, clearly_faster_relative, timing_from
from kernforge.integrate.pace import Pace, another_round, calls_per_round, was_cut
from kernforge.records import RoundsMeasured, Verdict
from kernforge.records.timing import Timing
from kernforge.runtime import router

ROUNDS = 5
ROUND_MS = 150.0  # each variant's share of a round: ~3 calls of an 85 ms VAE decoder, 50 of a 3 ms one
MAX_CALLS = 50


# ---------------------------------------------------------------------------- inputs and outputs


def fresh_model_inputs(inputs: tuple[Any, ...], seed: int) -> tuple[Any, ...]:
    """New values for the model's inputs, layouts kept: N(0, 1) for floating tensors, integers
    drawn within the captured ones' range (token ids stay valid ids), booleans as captured."""
    generator = torch.Generator().manual_seed(seed)

    def draw(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.dtype == torch.bool:
            return x
        if x.is_floating_point():
            values = torch.randn(x.shape, generator=generator, dtype=torch.float32)
        elif x.numel():
            low, high = int(x.min()), int(x.max())
            values = torch.randint(low, high + 1, x.shape, generator=generator)
        else:
            return x
        out = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
        return out.copy_(values)
    return tree_map(draw, inputs)


def outputs_of(out: Any) -> list[torch.Tensor]:
    """The model's output tensors, flattened (tuples, dicts, transformers' and diffusers' outputs)."""
    if hasattr(out, "to_tuple"):  # transformers ModelOutput, diffusers BaseOutput
        out = out.to_tuple()
    return [t.detach() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def forward(model: torch.nn.Module, inputs: tuple[Any, ...]) -> list[torch.Tensor]:
    with torch.no_grad():
        return outputs_of(model(*inputs))


@dataclass
class Oracle:
    outputs: list[torch.Tensor]  # float64 where the model ran in float64, else eager's
    eager: list[torch.Tensor]
    exact: bool  # True: from the model in float64
    note: str = ""
    eager_error: float = 0.0  # eager's own largest normalised error against it, for the reports


def oracle_of(model: torch.nn.Module, inputs: tuple[Any, ...], double: torch.nn.Module | None,
              single: Callable[[], torch.nn.Module | None] = lambda: None) -> Oracle:
    """The model's outputs in float64; where it cannot run so (an op with no float64 kernel, such
    as grouped gemm), a 16-bit model's outputs in float32 (`single()`, a copy made once): its rounding is 2^-24 against
    bf16's 2^-8, so eager's own error is still measured and the allowance carries through the
    layers, which eager's output as the oracle (a dtype's rtol alone) does not."""
    eager = forward(model, inputs)
    why = "the model does not run in float64"
    if double is not None:
        try:
            outs = forward(double, upcast(inputs))
            return _exact_oracle(outs, eager, "")
        except Exception as e:  # noqa: BLE001 - a model with float32-only code: float32, else eager
            why = f"float64 run failed ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
        try:
            with Float32WhereNoFloat64() as mode:
                outs = forward(double, upcast(inputs))
            return _exact_oracle(outs, eager, f"in float64 but {', '.join(sorted(mode.ops))} in float32: {why}")
        except Exception as e:  # noqa: BLE001 - a float64 failure that is no op's: the float32 copy
            why += f"; float64 with float32 ops failed ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    wide = single()
    if wide is not None:
        try:
            outs = forward(wide, upcast_to(inputs, torch.float32))
            return _exact_oracle(outs, eager, f"in float32: {why}")
        except Exception as e:  # noqa: BLE001
            why += f"; float32 run failed ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    return Oracle(outputs=eager, eager=eager, exact=False, note=why)


class Float32WhereNoFloat64(TorchDispatchMode):
    """The model in float64 where an op has no float64 kernel (grouped gemm, an MoE's experts): that
    op alone runs on its inputs rounded to float32 and its outputs come back as float64. The oracle
    then rounds to float32 at those ops only, and eager's own error against it is still what its
    dtype costs through the layers (judged against eager's outputs, a float32 Qwen-MoE's honest
    RMSNorm chains failed with 2-11 of 16384 logits 1e-4 off; bench/results/cpu/issue32/README.md)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()  # the ops that ran in float32

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        try:
            return func(*args, **kwargs)
        except (RuntimeError, NotImplementedError):
            wide = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.dtype == torch.float64]
            if func._schema.is_mutable or not wide:
                raise
        narrow = tree_map(lambda x: x.float() if isinstance(x, torch.Tensor) and x.dtype == torch.float64 else x,
                          (args, kwargs))
        out = func(*narrow[0], **narrow[1])
        self.ops.add(str(func._schema.name).removeprefix("aten::"))
        return tree_map(lambda x: x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x, out)


def upcast_to(value: Any, dtype: torch.dtype) -> Any:
    return tree_map(lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x, value)


def _exact_oracle(outs: list[torch.Tensor], eager: list[torch.Tensor], note: str) -> Oracle:
    if len(outs) == len(eager):  # a 16-bit output's oracle is exact enough in float32, at half the memory
        outs = [o.to(oracle_dtype(e.dtype)) if o.is_floating_point() and e.is_floating_point() else o
                for o, e in zip(outs, eager)]
    oracle = Oracle(outputs=outs, eager=eager, exact=True, note=note)
    oracle.eager_error = judge_outputs(eager, oracle)[1]
    return oracle


def wide_copy(model: torch.nn.Module, dtype: torch.dtype = torch.float64) -> tuple[torch.nn.Module | None, str]:
    try:
        return copy.deepcopy(model).to(dtype), ""
    except Exception as e:  # noqa: BLE001 - some modules cannot be copied or cast
        return None, f"no {str(dtype).removeprefix('torch.')} copy ({type(e).__name__}: {str(e).splitlines()[0][:120]})"


def is_16_bit(model: torch.nn.Module) -> bool:
    """Whether the model's floating parameters are all 16-bit (bf16, fp16): float32 can judge it."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    return bool(dtypes) and dtypes <= {torch.float16, torch.bfloat16}


def judge_outputs(outs: list[torch.Tensor], oracle: Oracle,
                  peer: list[torch.Tensor] | None = None) -> tuple[str | None, float]:
    """None when every output element is within its bound; and the largest normalised error.
    peer: the unpatched model's outputs under the same compiler, where the patched one ran
    compiled: each element's allowance is then the larger of eager's and the compiler's own (an
    inductor that reorders a sum is not the kernel's error)."""
    if len(outs) != len(oracle.outputs):
        return f"{len(outs)} outputs against the original's {len(oracle.outputs)}", float("inf")
    peers = peer if peer is not None and len(peer) == len(oracle.eager) else [None] * len(oracle.eager)
    bounds = [_bound(o, e, p) if e.is_floating_point() else None
              for o, e, p in zip(oracle.outputs, oracle.eager, peers)]
    reference = [o if o.is_floating_point() else e for o, e in zip(oracle.outputs, oracle.eager)]
    why, errors = compare(outs, reference, bounds, [e.dtype for e in oracle.eager], where=None)
    return why, max(errors, default=0.0)


def _bound(oracle: torch.Tensor, eager: torch.Tensor, peer: torch.Tensor | None) -> torch.Tensor:
    own = element_bound(oracle, eager, eager.dtype)
    if peer is None or peer.shape != eager.shape or not peer.is_floating_point():
        return own
    return torch.maximum(own, element_bound(oracle, peer.to(eager.dtype), eager.dtype))


# ---------------------------------------------------------------------------- timing


@dataclass
class Variant:
    name: str  # a records.VariantName, or the label of a measurement's other model (one kernel alone)
    call: Callable[[], Any]
    specs: list[router.KernelSpec] = field(default_factory=list)  # installed while it runs
    model: torch.nn.Module | None = None  # where chains that are a module's forward are installed
    counts: dict[str, router.RouteCounts] = field(default_factory=dict)  # routes taken, summed over its runs


def time_variants(variants: list[Variant], device: torch.device, seed: int = 0,
                  rounds: int = ROUNDS, pace: Pace | None = None) -> dict[str, Timing]:
    """Each variant's per-call time over `rounds` shuffled rounds, after a warm-up (where a
    compiled variant compiles, under its own routing). Under a time limit (`pace`) the rounds
    and calls per round are sized to the measurement's part of it (pace.py), and recorded there."""
    samples: dict[str, list[float]] = {v.name: [] for v in variants}
    method = "cuda-events" if device.type == "cuda" else "wall-clock"
    call_s = {v.name: _in_state(v, lambda v=v: _warm(v, device)) for v in variants}
    calls = {name: _calls_per_round(s * 1e3) for name, s in call_s.items()}
    order = random.Random(seed)

    def one_round() -> None:
        shuffled = list(variants)
        order.shuffle(shuffled)
        for v in shuffled:
            samples[v.name] += _in_state(v, lambda v=v: _time_calls(v.call, calls[v.name], device))

    if pace is None:
        for _ in range(rounds):
            one_round()
    else:
        part_s = pace.part_s()
        calls = calls_per_round(call_s, calls, part_s)
        is_open = lambda: verdict_open(_timings(samples, method))  # noqa: E731
        done = _paced_rounds(one_round, is_open, rounds, part_s)
        pace.record(RoundsMeasured(variants=[v.name for v in variants], rounds=done, calls=calls,
                                   cut=was_cut(done, rounds, is_open())))
    return _timings(samples, method)


def _paced_rounds(one_round: Callable[[], None], is_open: Callable[[], bool], rounds: int, part_s: float) -> int:
    """Rounds run while pace.another_round says so; how many ran."""
    started, done, last_s = time.perf_counter(), 0, 0.0
    while another_round(done, rounds, last_s, time.perf_counter() - started, part_s, done > 0 and is_open()):
        begun = time.perf_counter()
        one_round()
        done, last_s = done + 1, time.perf_counter() - begun
    return done


def _timings(samples: dict[str, list[float]], method: str) -> dict[str, Timing]:
    return {name: timing_from(values, method) for name, values in samples.items()}


def verdict_open(timings: dict[str, Timing]) -> bool:
    """Whether any variant is still within the noise of the first, the reference each of a
    measurement's comparisons is against (eager, or the unpatched half of a pair)."""
    reference, *others = timings.values()
    return any(verdict(t, reference) == "within noise" for t in others)


def _in_state(variant: Variant, work: Callable[[], Any]) -> Any:
    installation = router.install(variant.specs, variant.model) if variant.specs else None
    try:
        return work()
    finally:
        if installation is not None:
            installation.remove()
            for op, c in installation.counts.items():
                variant.counts.setdefault(op, router.RouteCounts()).add(c)


def _warm(variant: Variant, device: torch.device) -> float:
    """Seconds one call takes once warm (three calls first: compile, autotuning, allocator)."""
    for _ in range(3):
        variant.call()
    _sync(device)
    start = time.perf_counter()
    variant.call()
    _sync(device)
    return time.perf_counter() - start


def _calls_per_round(call_ms: float) -> int:
    return max(3, min(MAX_CALLS, int(ROUND_MS / max(call_ms, 1e-3))))


def _time_calls(call: Callable[[], Any], n: int, device: torch.device) -> list[float]:
    if device.type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for start, end in events:
            start.record()
            call()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) for start, end in events]
    times = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def model_call(model: torch.nn.Module, inputs: tuple[Any, ...]) -> Callable[[], Any]:
    def call() -> Any:
        with torch.no_grad():
            return model(*inputs)
    return call


def compiled_model(model: torch.nn.Module, tag: str, mode: str = "default") -> Callable[..., Any]:
    """torch.compile (default backend, `mode`) of the model's forward, in a function whose code
    object is this variant's own: Dynamo keeps compiled code per code object."""
    def entry(*args: Any) -> Any:
        return model(*args)
    entry.__code__ = entry.__code__.replace(co_name=f"kf_{tag}")
    compiled = torch.compile(entry, mode=mode)

    def call(*inputs: Any) -> Any:
        with torch.no_grad():
            return compiled(*inputs)
    return call


class CaptureError(RuntimeError):
    """A forward pass that CUDA graphs cannot hold (a host copy or sync inside it)."""


class GraphedForward:
    """The forward pass captured into one CUDA graph at its first call (under whatever routing is
    installed then) and replayed after: the host's cost of every op is gone, so what is left is
    the kernels' own time. The inputs are static: new values are copied into them (`load`)."""

    def __init__(self, model: torch.nn.Module, inputs: tuple[Any, ...], label: str = "the forward"):
        self.model, self.label = model, label
        # its own copies: `load` writes new values into them, never into the caller's inputs
        self.inputs = tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, inputs)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs: Any = None

    def __call__(self) -> Any:
        if self.graph is None:
            self._capture()
        assert self.graph is not None
        self.graph.replay()
        return self.outputs

    def _capture(self) -> None:
        call = model_call(self.model, self.inputs)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # lazy initialisation and autotuning stay out of the graph
            for _ in range(2):
                call()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self.outputs = call()
        except Exception as e:  # which of the variants could not be captured is the point of the message
            raise CaptureError(f"{self.label}: {type(e).__name__}: {str(e).strip().splitlines()[0][:200]}") from e
        self.graph = graph

    def load(self, inputs: tuple[Any, ...]) -> None:
        """New values in the captured input tensors (same layouts): the next replay reads them."""
        for static, new in zip(tree_flatten(self.inputs)[0], tree_flatten(inputs)[0]):
            if isinstance(static, torch.Tensor):
                static.copy_(new)

    def release(self) -> None:
        self.graph, self.outputs = None, None


def verdict(candidate: Timing, baseline: Timing, candidate_ref: Timing | None = None,
            baseline_ref: Timing | None = None) -> Verdict:
    """faster | slower | within noise, beyond the noise as the evaluator decides it; each against
    its own phase's eager when the two were timed in different phases."""
    if candidate_ref is None or baseline_ref is None:
        faster, slower = clearly_faster(candidate, baseline), clearly_faster(baseline, candidate)
    else:
        faster = clearly_faster_relative(candidate, candidate_ref, baseline, baseline_ref)
        slower = clearly_faster_relative(baseline, baseline_ref, candidate, candidate_ref)
    return "faster" if faster else "slower" if slower else "within noise"


def speedup(candidate: Timing, baseline: Timing, candidate_ref: Timing | None = None,
            baseline_ref: Timing | None = None) -> float:
    scale_c = candidate_ref.p50_ms if candidate_ref else 1.0
    scale_b = baseline_ref.p50_ms if baseline_ref else 1.0
    return (baseline.p50_ms / scale_b) / (candidate.p50_ms / scale_c)


def with_compile_flag(specs: list[router.KernelSpec], under_compile: set[str]) -> list[router.KernelSpec]:
    return [replace(s, under_compile=s.name in under_compile) for s in specs]
