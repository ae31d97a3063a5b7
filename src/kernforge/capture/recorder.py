"""Record the ATen calls of one forward pass.

A TorchDispatchMode sees every ATen call after autograd and after composite ops
are decomposed, so `torch.softmax`, `x.softmax()` and `F.softmax` all arrive as
`aten::_softmax.default`, and a hand-written norm arrives as its pieces. For
each call it keeps the overload, its arguments, which earlier call produced each
tensor input (so that chains can later be fused), the nn.Module it ran in, and
its time:
  on a CPU, the wall time around the call (ops run synchronously there; the
  profiler's per-range bookkeeping cost ~10 us a call, more than a small op);
  on a GPU, the call runs inside a profiler range `kf::<index>` and the profiler
  gives the device time of exactly the kernels it launched.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.profiler import record_function
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils.weak import WeakIdKeyDictionary

from kernforge.harness.serialize import Placeholder, layout_copy, saved_bytes, strided_copy

RANGE_PREFIX = "kf::"

_ALLOC_OPS = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
    "full", "full_like", "new_empty", "new_empty_strided", "new_zeros", "new_ones",
    "new_full", "scalar_tensor", "arange", "lift_fresh",
}
_COPY_OPS = {"copy_", "_to_copy", "clone", "contiguous", "_copy_from", "copy", "lift_fresh_copy"}
_VIEW_LIKE = {"alias", "detach", "_unsafe_view"}
# Ops that exist to draw random numbers. ATen's nondeterministic_seeded tag is wider: it also
# marks ops that only may draw, such as CPU attention (_scaled_dot_product_flash_attention_for_cpu,
# for its dropout_p) and the RNNs; those are compute unless their dropout is on (_draws_dropout).
_RANDOM_OPS = {
    "dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout", "native_dropout",
    "_fused_dropout", "bernoulli", "bernoulli_", "binomial", "multinomial", "poisson", "_standard_gamma",
    "_sample_dirichlet", "normal", "normal_", "normal_functional", "uniform", "uniform_", "random",
    "random_", "cauchy", "cauchy_", "exponential", "exponential_", "geometric", "geometric_",
    "log_normal", "log_normal_", "rand", "rand_like", "randn", "randn_like", "randint", "randint_like",
    "randperm", "rrelu_with_noise", "rrelu_with_noise_", "rrelu_with_noise_functional",
}


@dataclass
class Call:
    index: int
    func: Any
    signature: str
    kind: str
    # Descriptions, not the tensors: holding every activation of every pass alive
    # made later passes fault in fresh memory (ResNet-50 at batch 8 on a CPU: 3.3x slower).
    args: list[Any]
    kwargs: dict[str, Any]
    outputs: list[dict[str, Any]]
    producers: list[int | None]  # per tensor input, in flattened order: the call that made it
    module: str  # the innermost nn.Module running, by its qualified name ("" for the top)
    cpu_us: float = 0.0
    # Which tensor values it read, wrote and made (ids numbered per pass as tensors are first seen,
    # and anew once written in place): two inputs that are the same parameter, or which output of a
    # call an input is, are told apart only by these (capture/chains.py wires fused chains by them).
    input_ids: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    written_ids: list[int] = field(default_factory=list)


@dataclass
class ModuleCall:
    """One nn.Module call in the recorded pass: the calls its forward made and the tensors it
    took and returned (ids as Call.input_ids numbers them), so that a chain that is exactly one
    module's forward can be installed as that forward (capture/chains.py, module_boundary)."""

    name: str  # qualified name in the model ("layers.0.norm")
    cls: str  # its class, "module.QualName"
    first: int  # the index of its first call
    end: int  # one past its last call
    arg_ids: list[int | None]  # per positional argument: its tensor id, or None for a non-tensor
    output_id: int | None  # the returned tensor's id, or None where it returned anything else
    param_ids: dict[int, str]  # tensor id -> parameter or buffer name, its own and its children's


class Recorder(TorchDispatchMode):
    """Records every call; keeps up to samples_per_signature real input sets per compute signature
    (one partly real set, with Placeholders, where its inputs are over the caps)."""

    def __init__(self, samples_per_signature: int = 0, sample_cap_bytes: int = 0, total_cap_bytes: int = 0,
                 profiler_ranges: bool = False):
        super().__init__()
        self.profiler_ranges = profiler_ranges  # on a GPU: a `kf::<index>` range around each call
        self.samples_per_signature = samples_per_signature
        self.sample_cap_bytes = sample_cap_bytes
        self.bytes_left = total_cap_bytes
        self.calls: list[Call] = []
        # signature -> [{args, kwargs, outputs, real}]; real: "all", or "partial"/"none" where
        # some or all of the input tensors are Placeholders
        self.samples: dict[str, list[dict[str, Any]]] = {}
        # signature -> {args, kwargs} with every tensor a Placeholder: views, copies and
        # allocations, replayed on drawn values (their time does not depend on them), never saved
        self.layouts: dict[str, dict[str, Any]] = {}
        self.module_stack: list[str] = []
        self.module_calls: list[ModuleCall] = []  # in the order they returned
        self._producer = WeakIdKeyDictionary()  # tensor -> index of the call that made it
        # storage address -> index of the last call that wrote into it in place. A write
        # through a view (x[:, :2].add_(1)) changes the base too, which the per-tensor
        # map cannot see.
        self._last_write: dict[int, int] = {}
        self._ids = WeakIdKeyDictionary()  # tensor -> its id in this pass (Call.input_ids)
        self._next_id = 0
        self.returned_ids: set[int] = set()  # the tensors the forward returned (mark_returned)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        index = len(self.calls)
        sig = signature_of(func, args, kwargs)
        kind = op_kind(func, args, kwargs)
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        producers = [self._producer_of(t) for t in inputs]
        input_ids = [self.tensor_id(t) for t in inputs]
        sample = self._maybe_keep_sample(sig, inputs, args, kwargs) if kind == "compute" else None
        if kind in ("view", "copy", "alloc") and self.samples_per_signature and sig not in self.layouts:
            layout_args, layout_kwargs = _copy_or_describe((args, kwargs), set())
            self.layouts[sig] = {"args": layout_args, "kwargs": layout_kwargs, "outputs": [], "real": "none"}
        start = time.perf_counter()
        if self.profiler_ranges:
            with record_function(f"{RANGE_PREFIX}{index}"):
                out = func(*args, **kwargs)
        else:
            out = func(*args, **kwargs)
        cpu_us = (time.perf_counter() - start) * 1e6
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if sample is not None and sample["real"] == "all":  # a partly drawn sample's outputs mean nothing
            sample["outputs"] = [strided_copy(t) for t in outputs]
            self.bytes_left -= sum(saved_bytes(t) for t in outputs)
        for t in outputs:
            self._producer[t] = index  # an in-place op makes its call the producer of the tensor
        written = written_tensors(func, args, kwargs)
        written_ids = [self.tensor_id(t) for t in written]  # the values it overwrote
        for t in written:
            self._last_write[_storage_key(t)] = index
            # A value written in place is a new value under the same tensor: the calls after read
            # it, not the one before (x = bn(x); relu_(x): bn's output is read by relu_ alone)
            self._ids[t] = self._next_id
            self._next_id += 1
        self.calls.append(Call(index=index, func=func, signature=sig, kind=kind,
                               args=describe_args(list(args)), kwargs=describe_args(kwargs),
                               outputs=[tensor_meta(t) for t in outputs],
                               producers=producers,
                               module=self.module_stack[-1] if self.module_stack else "",
                               cpu_us=cpu_us, input_ids=input_ids,
                               output_ids=[self.tensor_id(t) for t in outputs],
                               written_ids=written_ids))
        return out

    def tensor_id(self, t: torch.Tensor) -> int:
        if t not in self._ids:  # a counter, not len(): entries leave as tensors die
            self._ids[t] = self._next_id
            self._next_id += 1
        return self._ids[t]

    def mark_returned(self, out: Any) -> None:
        """Note the tensors the forward returned: a chain's last value may be the model's output,
        used by no later call."""
        self.returned_ids = {self.tensor_id(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)}

    def _producer_of(self, t: torch.Tensor) -> int | None:
        made, written = self._producer.get(t), self._last_write.get(_storage_key(t))
        if made is None or written is None:
            return made if written is None else written
        return max(made, written)

    def _maybe_keep_sample(self, sig: str, inputs: list[torch.Tensor], args: Any,
                           kwargs: Any) -> dict[str, Any] | None:
        """Copy the inputs before the call (an in-place op changes them); the outputs join after it.

        Inputs over the caps (one sample's, or what is left of the total) still give the
        signature one sample, if it has none: the tensors that fit are copied, the others kept
        as Placeholders, so that a hot op is never left out for its size (a (16, 64, 256, 256)
        float32 layer norm, 268 MB, over the 256 MB cap on an H200)."""
        kept = self.samples.setdefault(sig, [])
        if len(kept) >= self.samples_per_signature:
            return None
        budget = min(self.sample_cap_bytes, self.bytes_left)
        sizes = [saved_bytes(t) for t in inputs]  # the outputs are counted after the call
        if sum(sizes) <= budget:
            real = set(range(len(inputs)))
        elif kept:
            return None  # a partly drawn sample adds nothing to one of real values
        else:
            real = _fitting(inputs, sizes, budget)
        self.bytes_left -= sum(sizes[k] for k in real)
        copied_args, copied_kwargs = _copy_or_describe((args, kwargs), real)
        how = "all" if len(real) == len(inputs) else "partial" if real else "none"
        kept.append({"args": copied_args, "kwargs": copied_kwargs, "outputs": [], "real": how})
        return kept[-1]


def _fitting(inputs: list[torch.Tensor], sizes: list[int], budget: int) -> set[int]:
    """Which inputs to copy within budget bytes: integer and bool ones first (a drawn index is
    only a valid one, not the model's), then the smallest (a norm's weight and bias)."""
    order = sorted(range(len(inputs)), key=lambda k: (inputs[k].is_floating_point(), sizes[k]))
    real, used = set(), 0
    for k in order:
        if used + sizes[k] <= budget:
            real.add(k)
            used += sizes[k]
    return real


def _copy_or_describe(value: Any, real: set[int]) -> Any:
    """value with its k-th tensor (in flattened order) copied if k is in real, else described."""
    leaves, spec = tree_flatten(value)
    out, k = [], 0
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            leaf = layout_copy(leaf) if k in real else Placeholder.of(leaf)
            k += 1
        out.append(leaf)
    return tree_unflatten(out, spec)


def written_positions(func: Any) -> list[int]:
    """The positions of the arguments an op writes in place: its schema marks them (Tensor(a!))."""
    return [i for i, arg in enumerate(func._schema.arguments) if arg.alias_info is not None and arg.alias_info.is_write]


def written_tensors(func: Any, args: Any, kwargs: Any) -> list[torch.Tensor]:
    """The tensors an op writes in place: its schema marks them (Tensor(a!))."""
    written = []
    for i in written_positions(func):
        arg = func._schema.arguments[i]
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        written += [v for v in values if isinstance(v, torch.Tensor)]
    return written


def _storage_key(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except RuntimeError:  # tensors without storage (sparse, some subclasses)
        return -id(t)


class ModuleTracker:
    """Keeps recorder.module_stack up to date while the model runs (global forward hooks)."""

    def __init__(self, model: torch.nn.Module, recorder: Recorder):
        self.names = {id(m): name for name, m in model.named_modules()}
        self.recorder = recorder
        self.handles: list[Any] = []
        self._open: list[tuple[int, list[int | None]]] = []  # per running module: first call, argument ids

    def __enter__(self) -> ModuleTracker:  # noqa: PYI034 - not subclassed
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        self.handles = [register_module_forward_pre_hook(self._enter),
                        register_module_forward_hook(self._leave)]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()

    def _enter(self, module: torch.nn.Module, inputs: Any) -> None:
        self.recorder.module_stack.append(self.names.get(id(module), type(module).__name__))
        rec = self.recorder
        self._open.append((len(rec.calls), [rec.tensor_id(a) if isinstance(a, torch.Tensor) else None
                                            for a in inputs]))

    def _leave(self, module: torch.nn.Module, _inputs: Any, output: Any) -> None:
        if self.recorder.module_stack:
            self.recorder.module_stack.pop()
        if not self._open:
            return
        first, arg_ids = self._open.pop()
        rec = self.recorder
        name = self.names.get(id(module))
        if name is None or first == len(rec.calls):
            return  # a module the model does not hold, or one that ran no ATen call
        tensors = list(module.named_parameters()) + list(module.named_buffers())
        rec.module_calls.append(ModuleCall(
            name=name, cls=f"{type(module).__module__}.{type(module).__qualname__}", first=first,
            end=len(rec.calls), arg_ids=arg_ids,
            output_id=rec.tensor_id(output) if isinstance(output, torch.Tensor) else None,
            param_ids={rec.tensor_id(t): n for n, t in tensors}))


def signature_of(func: Any, args: Any, kwargs: Any) -> str:
    """A stable id for an op with its argument shapes, dtypes, strides and values."""
    desc = json.dumps([str(func), describe_args(args), describe_args(kwargs)], sort_keys=True)
    short = str(func).replace("aten.", "").replace(".default", "")
    return f"{short}-{hashlib.sha1(desc.encode()).hexdigest()[:8]}"


def describe_args(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return tensor_meta(value)
    if isinstance(value, (list, tuple)):
        return [describe_args(v) for v in value]
    if isinstance(value, dict):
        return {k: describe_args(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def tensor_meta(t: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": str(t.dtype), "stride": list(t.stride()),
            "device": t.device.type}


def op_kind(func: Any, args: Any = (), kwargs: Any = None) -> str:
    """compute, or one of the kinds left out of the ranking by default: view, copy, alloc, random
    (an op that draws random numbers: _RANDOM_OPS, or a seeded op called with its dropout on)."""
    base = func._schema.name.split("::")[-1]
    if base in _RANDOM_OPS or (torch.Tag.nondeterministic_seeded in func.tags
                               and _draws_dropout(func, args, kwargs or {})):
        return "random"
    if base in _ALLOC_OPS:
        return "alloc"
    if base in _COPY_OPS:
        return "copy"
    if func.is_view or base in _VIEW_LIKE:
        return "view"
    return "compute"


def _draws_dropout(func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """A seeded op's dropout argument (attention's dropout_p, an RNN's dropout) is above zero, and
    its train flag, where it has one, is on."""
    values = {}
    for i, arg in enumerate(func._schema.arguments):
        values[arg.name] = args[i] if i < len(args) else kwargs.get(arg.name, arg.default_value)
    p = values.get("dropout_p", values.get("dropout"))
    return isinstance(p, (int, float)) and p > 0 and values.get("train", True) is not False


def qualified_name(func: Any) -> str:
    """'aten::_softmax.default': the overload's schema name and overload name."""
    return f"{func._schema.name}.{func._overloadname}"
