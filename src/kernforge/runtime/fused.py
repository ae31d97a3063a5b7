"""Installed chains: one fused kernel in place of a chain of ATen calls, in eager and under compile.

This file needs only torch (and, under torch.compile, torch's inductor): `kernforge export`
copies it, with the rest of the runtime, into every package.

A chain (capture/chains.py) is a list of steps, each an ATen overload whose tensors are refs:
{"input": k}, the chain's k-th input, or {"step": j, "output": m}. Its kernel takes the
inputs and returns every output the model keeps, so the intermediates are never made.

Eager. The chain's first step is routed like a single op (router.py, on its ATen op).
Where its call matches the proved one on plain tensors, nothing runs: the call returns
placeholders (_Pending, tensors with the step's shape, strides and dtype and no storage) and
a ChainRun holds the inputs bound so far. Every later call on a placeholder reaches
_Pending.__torch_dispatch__: the chain's next step, with the same wiring and the proved
inputs, advances the run, and the last step runs the kernel, whose outputs become the
values of the placeholders the model keeps. Any other use (another op, another order, a
different input) replays the steps so far with the original ops, and the call runs on real
tensors: the model computes what it computed unpatched, only the fused path is given up.
An input written in place between the chain's first and last step would make the kernel
read another value than the steps did; the run checks the inputs' version counters and
stops with an error rather than return it.

Under torch.compile. Tracing never makes placeholders (fake tensors fall through to the
original). A post-grad graph pass finds the chain in the graph inductor is about to fuse,
with torch's pattern matcher (the chain traced through inductor's own decompositions, so
it reads as the graph does; an intermediate used outside the match stops it), checks what
the matcher leaves out (every constant, dtype and device; each input's shape, strides,
dtype and alignment) and puts the custom op kernforge::<name> in the chain's place.

At a module. A chain that is exactly a module's forward (an RMSNorm) is installed on the module
instead, where the model is given: the module's call runs the kernel behind one guard on its
arguments and parameters, with no placeholder (the module boundary's section of this file). A
chain that is exactly the forwards of consecutive modules (a GroupNorm, then its block's SiLU) is
installed at those modules: the first returns a value not made yet, the next runs the kernel on it
(the last section).
"""

from __future__ import annotations

import inspect
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

import torch

from . import dispatch, kernels

Ref = tuple[int, int]  # (step, output position)


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and (set(value) == {"input"} or set(value) == {"step", "output"})




# How a step's argument is matched at a call (Step.matchers, made once per plan): the chain's
# input k (its check), another step's output (the ref), a constant (its check), the inputs'
# device, or a list of these. Matched this way, rather than by walking the templates, and with
# placeholders made from prebuilt layouts, a 3-step chain's call went from 49-50 to 38-40 us on a
# 2-core CPU (its ATen calls: 14 us; bench/results/cpu/issue32/routing_placeholders.txt).
INPUT, OUTPUT, CONSTANT, DEVICE, LIST = range(5)
Matcher = tuple[int, Any]


@dataclass
class Step:
    op: Any  # the ATen OpOverload
    args: list[Any]
    kwargs: dict[str, Any]
    metas: list[dict[str, Any]] = field(default_factory=list)  # each output's shape/stride/dtype
    returns: int = 1  # how many values the op returns (a tuple where more than one)
    source: bool = False  # reads only the chain's inputs: its call reaches a router, not a placeholder
    inplace: bool = False  # writes its first argument, a value the chain made (relu_): returns that placeholder
    # (argument position, shape, dtype) of its first input: a router's cheap first test, since
    # every call of a common op (mul, _to_copy) reaches the router
    quick: tuple[int, tuple[int, ...], Any] | None = None
    matchers: list[Matcher] = field(default_factory=list)  # one per positional argument
    keyword_matchers: list[tuple[str, Matcher]] = field(default_factory=list)
    layouts: list[Layout | None] = field(default_factory=list)  # each output's placeholder (None: not a tensor)

    def may_be(self, args: tuple) -> bool:
        if self.quick is None:
            return True
        at, shape, dtype = self.quick
        value = args[at] if at < len(args) else None
        return isinstance(value, torch.Tensor) and value.dtype == dtype and value.shape == shape


class ChainPlan:
    """A chain spec made ready to run: its steps resolved, every intermediate's layout known."""

    def __init__(self, spec: kernels.KernelSpec):
        chain = spec.chain or {}
        self.spec = spec
        self.steps = [Step(kernels.resolve(s["op"]), s["args"], s["kwargs"]) for s in chain["steps"]]
        self.outputs: list[Ref] = [(int(j), int(k)) for j, k in chain["outputs"]]
        self.input_checks = [kernels.tensor_check(m) for m in spec.args]
        self.current: ChainRun | None = None  # the run waiting for a source step, in eager
        # Installed chains that start with the same steps (a ResNet's `bn, relu_` and `bn, add_,
        # relu_`): (plan, how many leading steps the two share, its counts). A run that meets a
        # call its own next step is not goes on as the first of these whose next step it is.
        self.alternatives: list[tuple[ChainPlan, int, kernels.RouteCounts]] = []
        for step in self.steps:
            step.returns = len(step.op._schema.returns)
            step.inplace = kernels.in_place(step.op)
            step.source = not kernels.reads_a_step((step.args, step.kwargs))
            step.matchers = [self._matcher(a) for a in step.args]
            step.keyword_matchers = [(k, self._matcher(v)) for k, v in step.kwargs.items()]
            first = next((k for k, a in enumerate(step.args) if _is_ref(a) and "input" in a), None)
            if first is not None:
                meta = spec.args[step.args[first]["input"]]
                step.quick = (first, tuple(meta["shape"]), kernels.dtype_named(meta["dtype"]))
        self._layouts()

    def _matcher(self, template: Any) -> Matcher:
        if _is_ref(template) and "input" in template:
            k = template["input"]
            return INPUT, (k, self.input_checks[k])
        if _is_ref(template):
            return OUTPUT, (template["step"], template["output"])
        if isinstance(template, list):
            return LIST, [self._matcher(t) for t in template]
        if isinstance(template, str) and template.startswith("device("):
            return DEVICE, None  # the inputs' device is checked with them
        return CONSTANT, kernels.check_for(template)

    def _layouts(self) -> None:
        """Each step's outputs on the meta device: the placeholders' shapes, strides and dtypes."""
        inputs = [torch.empty_strided(m["shape"], m["stride"], dtype=kernels.dtype_named(m["dtype"]), device="meta")
                  for m in self.spec.args]
        values = replay(self.steps, inputs)
        for step, outs in zip(self.steps, values):
            step.metas = [{"shape": tuple(t.shape), "stride": t.stride(), "dtype": t.dtype}
                          if isinstance(t, torch.Tensor) else {} for t in outs]
            step.layouts = [_layout(m) if m else None for m in step.metas]


def link_alternatives(plans: list[tuple[ChainPlan, kernels.RouteCounts]]) -> None:
    """Each plan's alternatives: the other plans whose first steps are its own (same ops, wiring,
    constants and input layouts), longest shared start first."""
    for plan, _ in plans:
        shared = [(other, _shared_steps(plan, other), counts) for other, counts in plans if other is not plan]
        plan.alternatives = sorted((a for a in shared if a[1] > 0), key=lambda a: -a[1])


def _shared_steps(a: ChainPlan, b: ChainPlan) -> int:
    """How many leading steps two chains have alike, the inputs those steps read alike too (the
    inputs are numbered as first read, so alike steps number them alike)."""
    steps_a, steps_b = (a.spec.chain or {})["steps"], (b.spec.chain or {})["steps"]
    count = 0
    for x, y in zip(steps_a, steps_b):
        if (x["op"], x.get("signature"), x["args"], x["kwargs"]) != (y["op"], y.get("signature"), y["args"], y["kwargs"]):
            break
        read = [r["input"] for r in kernels.flat((x["args"], list(x["kwargs"].values())))
                if isinstance(r, dict) and set(r) == {"input"}]
        if any(k >= len(a.spec.args) or k >= len(b.spec.args) or a.spec.args[k] != b.spec.args[k] for k in read):
            break
        count += 1
    return count


def _decode(value: Any, inputs: list[Any], values: list[list[Any]]) -> Any:
    if _is_ref(value):
        return inputs[value["input"]] if "input" in value else values[value["step"]][value["output"]]
    if isinstance(value, list):
        return [_decode(v, inputs, values) for v in value]
    if isinstance(value, str) and value.startswith("device("):
        return next(t.device for t in inputs if isinstance(t, torch.Tensor))
    if isinstance(value, str) and value.startswith("torch."):
        attr = getattr(torch, value[len("torch."):], None)
        return attr if isinstance(attr, (torch.dtype, torch.layout, torch.memory_format)) else value
    return value


def replay(steps: list[Step], inputs: list[Any], upto: int | None = None) -> list[list[Any]]:
    """The first `upto` steps (all by default) run as ATen calls; each step's outputs."""
    values: list[list[Any]] = []
    for step in steps[:upto]:
        out = step.op(*[_decode(a, inputs, values) for a in step.args],
                      **{k: _decode(v, inputs, values) for k, v in step.kwargs.items()})
        values.append(list(out) if isinstance(out, (tuple, list)) else [out])
    return values


def replay_outputs(plan: ChainPlan, inputs: list[Any]) -> tuple[Any, ...]:
    """The chain's outputs by its original ops (the custom op's fallback), past every route."""
    with _original_ops():
        values = replay(plan.steps, list(inputs))
    return tuple(values[j][k] for j, k in plan.outputs)


class _original_ops:  # noqa: N801 - used as a statement: `with _original_ops():`
    """Routes off for the block: a replay must not start another chain of its own."""

    def __enter__(self) -> None:
        kernels.RUNNING[0] += 1

    def __exit__(self, *exc: object) -> None:
        kernels.RUNNING[0] -= 1


# ---------------------------------------------------------------------------- eager


def _version(t: torch.Tensor) -> int:
    try:
        return t._version
    except RuntimeError:  # an inference tensor has no version counter
        return -1


class ChainRun:
    """One occurrence of a chain in progress: the inputs bound so far and the next step."""

    def __init__(self, plan: ChainPlan, counts: kernels.RouteCounts):
        self.plan, self.counts = plan, counts
        self.inputs: list[torch.Tensor | None] = [None] * len(plan.spec.args)
        self.versions: list[int] = [0] * len(plan.spec.args)
        self.next = 0  # the step the run waits for
        self.values: list[list[Any]] | None = None  # every step's real outputs, once replayed
        self.results: dict[Ref, torch.Tensor] = {}  # the kernel's outputs, once it ran
        self.abandoned = False
        self.device: torch.device | None = None  # the first bound input's: its placeholders

    def bind(self, step: Step, args: tuple, kwargs: dict) -> list[tuple[int, torch.Tensor]] | None:
        """The inputs this call of `step` would bind, where it is the step as proved (wiring,
        constants, input layouts); else None."""
        if len(args) != len(step.matchers) or len(kwargs) != len(step.keyword_matchers):
            return None
        bound: dict[int, torch.Tensor] = {}
        for matcher, value in zip(step.matchers, args):
            if not self._matches(matcher, value, bound):
                return None
        for name, matcher in step.keyword_matchers:
            if name not in kwargs or not self._matches(matcher, kwargs[name], bound):
                return None
        return list(bound.items())

    def _matches(self, matcher: Matcher, value: Any, bound: dict[int, torch.Tensor]) -> bool:
        kind, what = matcher
        if kind == OUTPUT:
            return type(value) is _Pending and value._run is self and value._ref == what
        if kind == INPUT:
            k, check = what
            if type(value) is _Pending:  # another run's value: made (that run given up where it was on)
                if value._run is self:
                    return False
                value = value._run.value(value._ref)
            known = self.inputs[k]
            if known is None:
                known = bound.get(k)
            if known is not None:
                return value is known
            if not (isinstance(value, torch.Tensor) and kernels.plain(value) and check(value, [])):
                return False
            bound[k] = value
            return True
        if kind == CONSTANT:
            return what(value, [])
        if kind == DEVICE:
            return isinstance(value, torch.device)
        return isinstance(value, (list, tuple)) and len(value) == len(what) and all(
            self._matches(m, v, bound) for m, v in zip(what, value))

    def switch(self, func: Any, args: tuple, kwargs: dict) -> bool:
        """Where an installed chain that starts as this run's plan did so far has this call as its
        next step and the call binds there: the run goes on as that chain's (inputs bound so far
        kept, at the same numbers), True; else False, the run as it was."""
        for plan, shared, counts in self.plan.alternatives:
            if shared < self.next or self.next >= len(plan.steps) or plan.steps[self.next].op is not func:
                continue
            own = (self.plan, self.counts, self.inputs, self.versions)
            n = len(plan.spec.args)
            self.plan, self.counts = plan, counts
            self.inputs = (self.inputs + [None] * n)[:n]
            self.versions = (self.versions + [0] * n)[:n]
            if self.bind(plan.steps[self.next], args, kwargs) is not None:
                if own[0].current is self:
                    own[0].current = None
                plan.current = self
                return True
            self.plan, self.counts, self.inputs, self.versions = own
        return False

    def active(self) -> bool:
        """Still waiting for a step: its placeholders are not values yet."""
        return not self.abandoned and self.next < len(self.plan.steps)

    def take(self, bound: list[tuple[int, torch.Tensor]]) -> None:
        for i, t in bound:
            self.inputs[i], self.versions[i] = t, _version(t)
            if self.device is None:
                self.device = t.device

    def proceed(self, step: Step, args: tuple, kwargs: dict) -> Any | None:
        """The call as the run's next step where it binds as proved: what the step returns (its
        placeholders, the kernel's outputs, or for an in-place step its argument); else None."""
        bound = self.bind(step, args, kwargs)
        if bound is None:
            return None
        self.take(bound)
        return self.advance_in_place(args[0]) if step.inplace else self.advance()

    def advance(self) -> Any:
        """The step just matched is done: placeholders for its outputs, or, at the last step
        (or once the kernel ran), the kernel's outputs."""
        return self._outputs_of(self._stepped())

    def advance_in_place(self, target: _Pending) -> _Pending:
        """The step just matched wrote its first argument, a placeholder of this run, in place:
        that placeholder now stands for the step's output (an in-place op returns its argument,
        whatever its kernel returns), as does every reference to it the model holds."""
        target._ref = (self._stepped(), 0)
        return target

    def _stepped(self) -> int:
        """The step the run waited for, now done; at the last step the kernel runs."""
        j = self.next
        self.next += 1
        if self.next == len(self.plan.steps) and not self.results:
            self._finish()
        if self.next == len(self.plan.steps) and self.plan.current is self:
            self.plan.current = None
        return j

    def _ready(self) -> bool:
        return not self.results and not self.abandoned and all(t is not None for t in self.inputs)

    def _finish(self) -> None:
        spec = self.plan.spec
        if any(_version(t) != v for t, v in zip(self.inputs, self.versions) if t is not None):
            raise RuntimeError(f"an input of the fused chain kernforge::{spec.name} ({spec.op}) was written "
                               "in place between the chain's steps; the fused kernel would read the new value. "
                               "Remove this kernel (kernforge.patch(..., only=...)) for this model")
        out = kernels.run_kernel(spec, tuple(self.inputs), {}, list(self.inputs))
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        self.results = dict(zip(self.plan.outputs, out))
        self.counts.took(spec.name)

    def _outputs_of(self, j: int) -> Any:
        step, results = self.plan.steps[j], self.results
        outs = [results[(j, k)] if (j, k) in results else _pending(self, (j, k), layout)
                for k, layout in enumerate(step.layouts)]
        return outs[0] if step.returns == 1 else tuple(outs)

    def value(self, ref: Ref) -> torch.Tensor:
        """The real value of a placeholder: the kernel's output, else the steps replayed. An
        output read before the chain's last step (a residual sum the next layer reads first)
        runs the kernel then, once every input is bound: the later steps read only values the
        kernel already made."""
        if ref in self.plan.outputs and self._ready():
            self._finish()
        if ref in self.results:
            return self.results[ref]
        if self.values is None or len(self.values) <= ref[0]:
            if not self.results and not self.abandoned:
                self.abandoned = True
                self.counts.fell_back()
                if self.plan.current is self:
                    self.plan.current = None
            with _original_ops():
                self.values = replay(self.plan.steps, self.inputs, upto=max(self.next, ref[0] + 1))
        return self.values[ref[0]][ref[1]]


class _Pending(torch.Tensor):
    """A chain's value not made yet: the layout of a real one, no storage."""

    _run: ChainRun
    _ref: Ref

    def __repr__(self) -> str:  # noqa: D105 - printing one shows its value, as printing a tensor does
        return repr(self._run.value(self._ref))

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        for run in _active_runs(args, kwargs):
            step = run.plan.steps[run.next]
            out = run.proceed(step, args, kwargs) if func is step.op else None
            if out is None and run.plan.alternatives and run.switch(func, args, kwargs):
                out = run.proceed(run.plan.steps[run.next], args, kwargs)
            if out is not None:
                return out
        real_args, real_kwargs = _realised(args), {k: _realised(v) for k, v in kwargs.items()}
        return func(*real_args, **real_kwargs)


def _pending(run: ChainRun, ref: Ref, layout: Layout | None) -> _Pending | None:
    """A placeholder for a step's output (made here, not in a __new__: one Python call less a step)."""
    if layout is None:
        return None
    size, stride, dtype = layout
    made = (torch.Tensor._make_wrapper_subclass(_Pending, size, dtype=dtype, device=run.device) if stride is None
            else torch.Tensor._make_wrapper_subclass(_Pending, size, strides=stride, dtype=dtype, device=run.device))
    made._run, made._ref = run, ref
    return made


def _active_runs(args: tuple, kwargs: dict) -> list[ChainRun]:
    """The active runs whose placeholders the call holds, in argument order (a finished run's
    placeholder is a value: an in-place last step returns it to the model). Where there are two
    (a residual `bn3(...) += bn(downsample)`), the call may be one run's next step with the other's
    value an input of it: that value is then made (ChainRun._matches), its run given up."""
    found: list[ChainRun] = []
    for value in (*args, *kwargs.values()):
        if type(value) is _Pending:
            runs = (value._run,)
        elif isinstance(value, (list, tuple)):
            runs = tuple(v._run for v in kernels.flat(value) if type(v) is _Pending)
        else:
            continue
        for run in runs:
            if run.active() and run not in found:
                found.append(run)
    return found


def _realised(value: Any) -> Any:
    if isinstance(value, _Pending):
        return value._run.value(value._ref)
    if isinstance(value, (list, tuple)):
        return type(value)(_realised(v) for v in value)
    return value


def enter(plans: list[tuple[ChainPlan, kernels.RouteCounts]], op: Any, args: tuple, kwargs: dict) -> Any | None:
    """A router's call of one of its chains' source steps: the step a run in progress waits for
    (a weight's cast, a downsample's batch norm), else the first step of a new run; placeholders
    where the call is the proved one, else None (the call goes on as it would). A run in progress
    is served first: a new run on the same call would leave it waiting."""
    for plan, _ in plans:
        run = plan.current
        if run is not None and run.next < len(plan.steps):
            step = plan.steps[run.next]
            if step.source and step.op is op and step.may_be(args):
                out = run.proceed(step, args, kwargs)
                if out is not None:
                    return out
    for plan, counts in plans:
        head = plan.steps[0]
        if head.op is op and head.may_be(args):
            entered = start(plan, args, kwargs, counts)
            if entered is not None:
                return entered
    return None


def start(plan: ChainPlan, args: tuple, kwargs: dict, counts: kernels.RouteCounts) -> Any | None:
    """The chain's first step: a new run, where the call is the proved one on plain tensors
    this kernel may run on, else None."""
    run = ChainRun(plan, counts)
    bound = run.bind(plan.steps[0], args, kwargs)
    if bound is None:
        return None
    tensors = [t for _, t in bound]
    if kernels.grad_needed(tensors) or not kernels.runnable_here(plan.spec, tensors):
        return None
    run.take(bound)
    plan.current = run
    return run.advance()


# ---------------------------------------------------------------------------- under torch.compile


def chain_function(plan: ChainPlan, body: Callable[..., Any]) -> Callable[..., Any]:
    """body(*inputs) with a signature naming them (in0, in1, ...), as the pattern matcher reads
    its search and replacement functions' argument names."""
    def fn(*inputs: Any) -> Any:
        return body(*inputs)
    fn.__signature__ = inspect.Signature([inspect.Parameter(f"in{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                          for i in range(len(plan.spec.args))])  # type: ignore[attr-defined]
    return fn


def _canonical(outputs: list[Any], inputs: dict[Any, str]) -> tuple[Any, ...]:
    """A graph region as a value two regions compare by: every node by its target and its
    arguments (constants as written, the region's inputs by name), from its outputs."""
    memo: dict[Any, Any] = {}

    def node_form(node: Any) -> Any:
        if node in inputs:
            return inputs[node]
        if node not in memo:
            memo[node] = (str(node.target), form(node.args), form(dict(sorted(node.kwargs.items()))))
        return memo[node]

    def form(value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            return node_form(value)
        if isinstance(value, (list, tuple)):
            return tuple(form(v) for v in value)
        if isinstance(value, dict):
            return tuple((k, form(v)) for k, v in value.items())
        return repr(value)
    return tuple(node_form(n) for n in outputs)


class CompilePatterns:
    """The installed chains' patterns for inductor's post-grad pass."""

    def __init__(self, chosen: list[tuple[ChainPlan, kernels.RouteCounts]]):
        from torch._inductor import pattern_matcher as pm
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        self.plans = [plan for plan, _ in chosen]
        # One pass per chain: chains of one structure at other shapes (Gemma's three RMSNorm
        # signatures) trace to the same pattern, which one pass refuses to hold twice; each
        # pass's check takes only its own chain's layouts and leaves the rest to the next.
        self.passes: list[Any] = []
        self.refused: dict[str, str] = {}  # kernel name -> why its chain has no pattern (left to inductor)
        with unset_fake_temporarily():  # the pass runs inside compile; the patterns trace real tensors
            for plan, counts in chosen:
                try:
                    self._register(pm, plan, counts)
                except Exception as e:  # noqa: BLE001 - a chain the matcher cannot hold stays inductor's
                    self.refused[plan.spec.name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"

    def _register(self, pm: Any, plan: ChainPlan, counts: kernels.RouteCounts) -> None:
        spec = plan.spec
        device = min(spec.devices, key=lambda d: (d.type, d.index or 0)) if spec.devices else torch.device("cpu")
        examples = [torch.empty_strided(m["shape"], m["stride"], dtype=kernels.dtype_named(m["dtype"]), device=device)
                    .zero_() for m in spec.args]

        def search(*inputs: Any) -> Any:
            values = replay(plan.steps, list(inputs))
            outs = [values[j][k] for j, k in plan.outputs]
            return outs[0] if len(outs) == 1 else tuple(outs)

        custom_op = kernels.custom_op(spec, lambda chain: search)

        def replace(*inputs: Any) -> Any:
            counts.custom_op += 1
            counts.traced_by_kernel[spec.name] = counts.traced_by_kernel.get(spec.name, 0) + 1
            return custom_op(*inputs)

        search_fn = chain_function(plan, search)
        with _original_ops():
            searched = traced_as_inductor(search_fn, examples)
        names = [f"in{i}" for i in range(len(spec.args))]
        placeholders = [n for n in searched.graph.nodes if n.op == "placeholder"]
        output = next(n for n in searched.graph.nodes if n.op == "output")
        expected = _canonical(_leaves(output.args[0]), dict(zip(placeholders, names)))

        def proved(match: Any) -> bool:
            """What the matcher ignores: constants, dtypes and devices, and the inputs' layouts."""
            nodes = [match.kwargs.get(name) for name in names]
            if not all(isinstance(n, torch.fx.Node) for n in nodes):
                return False
            vals = [n.meta.get("val") for n in nodes]
            if not all(isinstance(v, torch.Tensor) and check(v, []) and v.device in spec.devices
                       for v, check in zip(vals, plan.input_checks)):
                return False
            return _canonical(match.output_nodes(), dict(zip(nodes, names))) == expected

        self.passes.append(pm.PatternMatcherPass())
        with _original_ops():
            pm.register_replacement(search_fn, chain_function(plan, replace), examples, traced_as_inductor,
                                    [self.passes[-1]], extra_check=proved)


def traced_as_inductor(fn: Callable[..., Any], examples: list[Any], **options: Any) -> torch.fx.GraphModule:
    """fn traced as the pattern matcher traces a search function (its forward, decomposed as
    inductor decomposes), with its views written as reshapes: inductor's post-grad graph has
    reshapes where a trace has views (its view_to_reshape pass), so a group norm's pattern, whose
    decomposition views its input into groups, never matched a compiled graph."""
    from torch._inductor import pattern_matcher as pm

    traced = pm.fwd_only(fn, examples, **options)  # the matcher passes fwd_only's own options on
    reshaped_views(traced.graph)
    return traced


def reshaped_views(graph: torch.fx.Graph) -> None:
    """Every aten view in the graph made a reshape, as inductor's post-grad passes make them (it
    lowers both alike): the chains' patterns and the graph they search then read the same."""
    view, reshape = torch.ops.aten.view.default, torch.ops.aten.reshape.default
    for node in graph.nodes:
        if node.op == "call_function" and node.target is view:
            node.target = reshape


def _leaves(value: Any) -> list[Any]:
    return [v for v in kernels.flat(value) if isinstance(v, torch.fx.Node)]


def compile_pass_class() -> type:
    """inductor's CustomGraphPass (its uuid keys the graph caches, which kernforge holds off)."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class ChainGraphPass(CustomGraphPass):
        def __init__(self, patterns: Callable[[], CompilePatterns | None], before: Any):
            self.patterns, self.before = patterns, before

        def __call__(self, graph: torch.fx.Graph) -> None:
            current = self.patterns()
            if current is not None and current.passes:
                reshaped_views(graph)  # as the patterns read (traced_as_inductor); inductor does it after
            for chain_pass in current.passes if current is not None else ():
                chain_pass.apply(graph)
            for other in (self.before if isinstance(self.before, (list, tuple)) else [self.before]):
                if other is not None:
                    other(graph)

        def uuid(self) -> Any:
            return None  # no cache entry: the routes are not part of any key

    return ChainGraphPass


def hold_compile_pass(plans: list[ChainPlan], counts: dict[str, kernels.RouteCounts]) -> None:
    """The chains join the graph pass, which inductor runs while any chain is installed (after
    nothing, before any post-grad pre-pass the user had set)."""
    state = kernels.STATE
    for plan in plans:
        state.chains[plan.spec.name] = (plan, counts[plan.spec.op])
    if state.chain_pass is None:
        import torch._inductor.config as config

        state.chain_pass = compile_pass_class()(_current_patterns, config.post_grad_custom_pre_pass)
        config.post_grad_custom_pre_pass = state.chain_pass


def release_compile_pass(plans: list[ChainPlan]) -> None:
    """The chains leave the pass; the last one out puts inductor's setting back."""
    state = kernels.STATE
    for plan in plans:
        if state.chains.get(plan.spec.name, (None,))[0] is plan:
            del state.chains[plan.spec.name]
    if not state.chains and state.chain_pass is not None:
        import torch._inductor.config as config

        if config.post_grad_custom_pre_pass is state.chain_pass:
            config.post_grad_custom_pre_pass = state.chain_pass.before
        state.chain_pass, state.chain_patterns = None, None


def _current_patterns() -> CompilePatterns | None:
    """The patterns of the chains installed for compile's graphs now (built once per set)."""
    state = kernels.STATE
    chosen = [(plan, counts) for plan, counts in state.chains.values() if plan.spec.under_compile]
    if not chosen:
        return None
    cached = getattr(state, "chain_patterns", None)
    if cached is None or len(cached.plans) != len(chosen) or any(
            a is not b for a, (b, _) in zip(cached.plans, chosen)):
        cached = state.chain_patterns = CompilePatterns(chosen)
    return cached


# ---------------------------------------------------------------------------- at the module boundary
#
# A chain that is exactly a module's forward (capture's "module" entry) is installed on the module:
# - route(args): the chain's inputs gathered from the call's positional arguments and the dicts
#   holding the module's parameters, and the kernel's output where each is as proved (guard and
#   launch in C++ where the kernel has a C++ entry, dispatch.module_entry), else None: the caller
#   runs the module's own forward;
# - the module's forward (an attribute of the instance): route(args) where the call is one the
#   chain can take and nothing compiles, else the own forward. nn.Module's call reaches it where a
#   hook is set, and so does a caller of forward itself;
# - its class's __call__ (calling_class: a subclass of its class made for this instance): route(args)
#   straight from the module's call where nn.Module's call would only have called that forward,
#   else nn.Module's call.
# Under torch.compile the own forward is traced, and the graph pass puts the chain's op in.
# On a 2-core x86 CPU (bench/results/cpu/issue32/module_route.txt, a Gemma RMSNorm's C
# kernel, 1.6 us called directly) the module's call cost 2.3 us over its guarded entry through
# nn.Module's call, a forward in Python and nn.Module's __getattr__ for the weight; 0.4 us through
# the class's __call__ and module_entry, ~0.2 of it the checks nn.Module's call would make (its
# hooks, module.compile()) and is_compiling.


@dataclass
class ModuleRoute:
    """A module whose call is the chain's kernel behind a guard, and how to put it back: its
    forward, and its class where the route gave it one of its own."""

    module: torch.nn.Module
    had_own_forward: bool  # the instance carried a forward of its own before (kept, then restored)
    own_forward: Any = None
    own_class: type | None = None  # its class before install, where route_class replaced it
    route_class: type | None = None
    # the chain's occurrences this route takes whole (covers_every_instance): one at a module whose
    # forward the chain is; at a sequence, the first module's route counts its sequences, the rest 0
    instances: int = 1

    def remove(self) -> None:
        if self.had_own_forward:
            self.module.forward = self.own_forward
        else:
            self.module.__dict__.pop("forward", None)
        if self.route_class is None:
            return
        if type(self.module) is self.route_class:
            self.module.__class__ = self.own_class
        else:  # a class set over the route's since (torch's parametrize): it stays, the route's call goes
            del self.route_class.__call__


def module_routes(plan: ChainPlan, model: torch.nn.Module, counts: kernels.RouteCounts) -> list[ModuleRoute]:
    """The chain installed at every module capture found it to be (the chain's "module" entry:
    same name and class here), or at every sequence of modules (its "modules" entry), where the
    model holds them."""
    chain = plan.spec.chain or {}
    if chain.get("modules") and not chain.get("module"):
        return sequence_routes(plan, model, counts)
    boundary = chain.get("module")
    if not boundary:
        return []
    routes = []
    for name in boundary["names"]:
        module = _module_at(model, name, boundary["class"])
        if module is not None:
            routes.append(_install_route(plan, module, boundary, counts))
    return routes


def _module_at(model: torch.nn.Module, name: str, cls: str) -> torch.nn.Module | None:
    """The model's module of that name, where it is of the class capture saw there; else None (the
    model was changed since the run: leave the module as it is)."""
    try:
        module = model.get_submodule(name)
    except AttributeError:
        return None
    return module if f"{type(module).__module__}.{type(module).__qualname__}" == cls else None


def _install_route(plan: ChainPlan, module: torch.nn.Module, boundary: dict[str, Any],
                   counts: kernels.RouteCounts) -> ModuleRoute:
    route, original = _as_it_is(module)
    run, counter = module_route(plan, module, boundary)
    counts.counters.append((counter, [plan.spec.name]))
    return _put_route(route, run, original, int(boundary["args"]))


def _as_it_is(module: torch.nn.Module) -> tuple[ModuleRoute, Callable[..., Any]]:
    """What removal puts back, and the forward the module's call runs now (a route's own forward
    falls back to it)."""
    route = ModuleRoute(module, "forward" in module.__dict__, module.__dict__.get("forward"))
    return route, route.own_forward if route.had_own_forward else type(module).forward.__get__(module)


def _put_route(route: ModuleRoute, run: Callable[[tuple], Any], original: Callable[..., Any],
               n_args: int) -> ModuleRoute:
    """run(args) made the module's forward (guarded_forward) and, where it can be, its call
    (calling_class)."""
    module = route.module
    module.forward = forward = guarded_forward(run, original, n_args, module)
    own_class = type(module)
    try:
        route_class = calling_class(module, run, original, n_args, forward)
        if route_class is not None:
            module.__class__ = route_class
            route.own_class, route.route_class = own_class, route_class
    except TypeError:  # a class that will not be subclassed or swapped so (metaclass, layout): nn.Module's call
        pass
    return route


def covers_every_instance(plan: ChainPlan, routes: list[ModuleRoute]) -> bool:
    """Whether the module routes hold every occurrence capture saw (then no placeholder is needed)."""
    chain = plan.spec.chain or {}
    boundary = chain.get("module") or chain.get("modules") or {}
    return bool(routes) and sum(r.instances for r in routes) == boundary.get("instances", -1)


LATER = -2  # a chain input a later stage's call binds (_sources)


def _sources(module: torch.nn.Module, boundary: dict[str, Any]) -> list[tuple[int, Any, str]]:
    """Each chain input: (an argument's position, None, ""), (-1, the dict holding a parameter
    or buffer, its name), or (LATER, None, "") for a later stage's argument or parameter. The dict is its owner's _parameters or _buffers, read at each call, so a
    parameter set anew is seen; nn.Module's __getattr__, which finds it there, costs ~450 ns a
    lookup on a 2-core x86 CPU against ~12 for the dict. A tensor gone from the dict since
    (torch's parametrize moves a weight out) leaves the call to the module's own forward."""
    sources: list[tuple[int, Any, str]] = []
    for kind, where, *_ in boundary["inputs"]:
        if kind == "arg":
            sources.append((int(where), None, ""))
            continue
        if kind in ("stage", "stage_param"):  # a later stage's argument or parameter (at a sequence): bound there
            sources.append((LATER, None, ""))
            continue
        path, _, attr = str(where).rpartition(".")
        sources.append((-1, _dict_holding(module.get_submodule(path) if path else module, attr), attr))
    return sources


def _dict_holding(owner: torch.nn.Module, attr: str) -> dict[str, Any]:
    """The dict that holds the module's parameter or buffer `attr`: its _buffers or _parameters."""
    return owner._buffers if attr in owner._buffers else owner._parameters


def module_route(plan: ChainPlan, module: torch.nn.Module,
                 boundary: dict[str, Any]) -> tuple[Callable[[tuple], Any], Any]:
    """(route(args), its counter: counts() -> ([kernel calls], fallbacks)). route(args) is the
    kernel's output on the chain's inputs (the call's arguments and the module's parameters) where
    each is as proved, on plain tensors with no gradient wanted, else None; for a call of the
    proved arity, no keywords, outside compile."""
    spec, sources = plan.spec, _sources(module, boundary)
    try:
        native = dispatch.module_entry(spec, kernels.ALIGNMENT, sources)
        return _in_eval(native, native, module) if boundary.get("eval_only") else (native, native)
    except dispatch.NotNative:
        pass
    tally = kernels.Tally()
    proved_inputs = _proved_inputs(plan, sources, tally)

    def route(args: tuple) -> Any:
        tensors = proved_inputs(args)
        if tensors is None:
            return None
        tally.kernel += 1
        out = kernels.run_kernel(spec, tuple(tensors), {}, tensors)
        return out[0] if isinstance(out, (tuple, list)) else out
    return _in_eval(route, tally, module) if boundary.get("eval_only") else (route, tally)


class _EvalCounter:
    """A route's counts, with the calls it refused while a module trained as fallbacks."""

    __slots__ = ("inner", "refused")

    def __init__(self, inner: Any):
        self.inner, self.refused = inner, 0

    def counts(self) -> tuple[list[int], int]:
        kernel, fallback = self.inner.counts()
        return kernel, fallback + self.refused


def _in_eval(route: Callable[[tuple], Any], counter: Any,
             module: torch.nn.Module) -> tuple[Callable[[tuple], Any], _EvalCounter]:
    """A module route of a chain with a batch norm (timm's BatchNormAct2d: the norm and its
    activation in one forward), refused while a module trains (eval_only)."""
    eval_counter = _EvalCounter(counter)

    def refused() -> None:
        eval_counter.refused += 1
    return eval_only(route, [module], refused), eval_counter


def eval_only(route: Callable[[tuple], Any], modules: list[torch.nn.Module],
              refused: Callable[[], None]) -> Callable[[tuple], Any]:
    """route, refused (None, counted) while any of these modules or one inside them trains: a
    batch norm then takes the batch's statistics, which the kernel, proved in eval mode, does not."""
    watched = tuple(m for module in modules for m in module.modules())

    def in_eval(args: tuple) -> Any:
        for m in watched:
            if m.training:
                refused()
                return None
        return route(args)
    return in_eval


def _proved_inputs(plan: ChainPlan, sources: list[tuple[int, Any, str]],
                   tally: kernels.Tally) -> Callable[[tuple], list[torch.Tensor] | None]:
    """inputs(args): the chain's inputs gathered from a module call's arguments and its
    parameters' dicts (_sources), where each is as proved and no kernel is running; else None,
    counted as a fallback."""
    grad_enabled = torch.is_grad_enabled
    # at a sequence with later stages their inputs stay None until those stages bind them
    at_head = [k for k, (at, _, _) in enumerate(sources) if at != LATER]
    proved, whole = _proved_tensors(plan, at_head), len(at_head) == len(sources)

    def inputs(args: tuple) -> list[torch.Tensor | None] | None:
        try:
            tensors = [None if at == LATER else args[at] if at >= 0 else held[attr] for at, held, attr in sources]
        except KeyError:
            tensors = None
        if tensors is None or kernels.RUNNING[0] or not proved(
                tensors if whole else [tensors[k] for k in at_head], grad_enabled()):
            tally.fallback += 1
            return None
        return tensors
    return inputs


def guarded_forward(route: Callable[[tuple], Any], original: Callable[..., Any], n_args: int,
                    module: torch.nn.Module) -> Callable[..., Any]:
    """The module's forward: route(args) for a call of the proved arity with no keywords, outside
    torch.compile (whose tracing takes the own forward), else (or where the route refuses) the
    own forward. Bound to the module: copy.deepcopy binds a bound method to the copy of its
    object, so a copy of the model (an EMA's, an evaluation's) calls its class's forward on its
    own weights, during the patch and after, where the route would read the installed module's."""
    is_compiling = torch.compiler.is_compiling
    installed = weakref.ref(module)
    own_forward = type(module).forward

    def forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if self is not installed():
            return own_forward(self, *args, **kwargs)
        if kwargs or len(args) != n_args or is_compiling():
            return original(*args, **kwargs)
        out = route(args)
        return original(*args) if out is None else out
    return types.MethodType(forward, module)


def calling_class(module: torch.nn.Module, route: Callable[[tuple], Any], original: Callable[..., Any],
                  n_args: int, forward: Callable[..., Any]) -> type | None:
    """A subclass of the module's class, for this instance alone, whose __call__ is the route's
    forward without nn.Module's call, where that call would only call it: the instance's forward
    still `forward`, no hook of the module's nor a global one, no module.compile(), not compiling;
    else nn.Module's call. (Under a TorchScript trace nn.Module's call would add only its scope's
    name: neither records the kernel.) Its name, module and qualified name are the class's, so
    that the model prints and is matched as before. None where the class has a __call__ of its own."""
    cls = type(module)
    module_call = torch.nn.Module.__call__
    if cls.__call__ is not module_call:
        return None
    from torch.nn.modules import module as nn_module

    is_compiling = torch.compiler.is_compiling
    # The hooks' dicts, read at each call: the instance's through its __dict__ (a key costs ~15 ns,
    # an attribute ~30 through nn.Module's __getattr__ hook), the global ones themselves (torch
    # fills and empties them, never rebinds them). A copy of the module (deepcopy) shares this
    # class but not this dict: its calls take nn.Module's.
    own = module.__dict__
    forward_pre, forward_post = nn_module._global_forward_pre_hooks, nn_module._global_forward_hooks
    backward_pre, backward_post = nn_module._global_backward_pre_hooks, nn_module._global_backward_hooks
    hooks = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
    native = dispatch.module_call(route, module, forward, n_args, list(hooks),
                                  [forward_pre, forward_post, backward_pre, backward_post], is_compiling, _SKIP)

    def native_call(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        out = native(self, args, kwargs)  # the same checks as __call__'s below, and the route, in C++
        if out is _SKIP:
            return module_call(self, *args, **kwargs)
        return original(*args) if out is None else out

    def __call__(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:  # noqa: N807
        try:
            if (self is not module or kwargs or len(args) != n_args or own["forward"] is not forward
                    or own["_forward_pre_hooks"] or own["_forward_hooks"] or own["_backward_pre_hooks"]
                    or own["_backward_hooks"] or forward_pre or forward_post or backward_pre or backward_post
                    or "_compiled_call_impl" in own or is_compiling()):
                return module_call(self, *args, **kwargs)
        except KeyError:  # a forward deleted, a module made without nn.Module's __init__
            return module_call(self, *args, **kwargs)
        out = route(args)
        return original(*args) if out is None else out
    return type(cls.__name__, (cls,), {"__call__": __call__ if native is None else native_call,
                                       "__module__": cls.__module__, "__qualname__": cls.__qualname__})


_SKIP = object()  # a native module call's answer where nn.Module's call must run


def _proved_tensors(plan: ChainPlan, positions: list[int] | None = None) -> Callable[[list[Any], bool], bool]:
    """The guard of a module route, in one loop: each tensor plain, of the proved dtype, shape,
    strides, alignment and device, none wanting a gradient, on the default stream for a CUDA
    library (kernels.runnable_here's rule). On the H200 a module's guarded forward cost 5.1-5.4 us
    over its entry, where placeholders at a 10-step chain's steps cost 221-229 us
    (bench/results/h200/issue32/README.md)."""
    spec = plan.spec
    devices = {d.index if d.type == "cuda" else -1 for d in spec.devices}
    expected = []
    for meta in spec.args:
        dtype = kernels.dtype_named(meta["dtype"])
        element = torch.empty((), dtype=dtype).element_size()
        align = kernels.ALIGNMENT // element if kernels.ALIGNMENT % element == 0 else 1
        expected.append((dtype, torch.Size(meta["shape"]), tuple(meta["stride"]), align))
    if positions is not None:  # these inputs alone, in this order
        expected = [expected[k] for k in positions]
    plain = kernels.plain
    on_default_stream = spec.loading.default_stream_only

    def proved(tensors: list[Any], grad: bool) -> bool:
        for t, (dtype, shape, stride, align) in zip(tensors, expected):
            if not (isinstance(t, torch.Tensor) and t.dtype is dtype and t.shape == shape and t.stride() == stride
                    and t.storage_offset() % align == 0 and t.get_device() in devices and plain(t)):
                return False
            if grad and t.requires_grad:
                return False
        if on_default_stream:
            return torch.cuda.current_stream(tensors[0].device).cuda_stream == 0
        return True
    return proved


# ---------------------------------------------------------------------------- at a sequence of modules
#
# A chain that is exactly the forwards of consecutive module calls (capture's "modules" entry: a
# GroupNorm, then its block's SiLU module, shared with other calls) is installed at each of them:
# - the first module's call, where its arguments and parameters are as proved, runs nothing and
#   returns a _Lazy: a tensor with the layout of that module's output and no storage, holding the
#   chain's inputs (the call's arguments and the module's parameters);
# - a later module's call given exactly such a value of the stage before returns the next stage's
#   _Lazy, or at the last stage the kernel's output on the held inputs;
# - any other use of a _Lazy (another op, a hook that reads it, a module that is no next stage)
#   makes its value with the modules' own forwards on the held arguments, as unpatched; a later
#   module given a made value runs its own forward on it. Only the fused path is given up.
# Each module's call reaches its route as a single module's does (guarded_forward, calling_class);
# under torch.compile the own forwards are traced and the graph pass puts the chain's op in. The
# guard runs in Python at the first module, the kernel through its C++ entry where it has one:
# bench/results/cpu/issue32/README.md has the host cost beside the placeholders' and the kernel's.


class Sequence:
    """A chain installed at a sequence of modules: what the routes of its modules share."""

    def __init__(self, plan: ChainPlan, record: dict[str, Any]):
        self.plan, self.spec = plan, plan.spec
        self.record = record
        self.last = len(record["classes"]) - 1
        # each stage's value as its _Lazy shows it: the layout of the step that makes it, made ready
        # for _make_wrapper_subclass (a torch.Size, and no strides where contiguous: 3.0 against 1.9 us
        # a value on a loaded 2-core x86 CPU)
        self.metas = [_layout(plan.steps[int(j)].metas[int(k)]) for j, k in record["outputs"]]
        self.tally = kernels.Tally()  # kernel: sequences that ran the kernel; fallback: refused or made
        # stage -> its glue op (a step the forward calls between two modules: `out += identity`)
        side_of = side_values(record)
        self.sides = set(side_of.values())
        self.glue = {int(stage): Glue(plan, int(record["outputs"][int(stage)][0]), int(stage), record["inputs"], side_of)
                     for stage in record.get("ops", {})}
        self.current: _Lazy | None = None  # the main line's value in progress, for a side stage's route

    def first(self, module: torch.nn.Module, original: Callable[..., Any],
              stages: list[torch.nn.Module]) -> Callable[[tuple], Any]:
        """route(args) at the first module: a _Lazy where the call is as proved, else None. A chain
        with a batch norm (eval mode, as captured) is refused while any of its modules trains: the
        batch norm's forward would take the batch's statistics."""
        proved_inputs, meta = _proved_inputs(self.plan, _sources(module, self.record), self.tally), self.metas[0]

        def route(args: tuple) -> Any:
            tensors = proved_inputs(args)
            if tensors is None:
                return None
            lazy = _Lazy(_Held(self, 0, args, tensors, (original,)), meta)
            if self.sides:
                self.current = lazy
            return lazy
        if not self.record.get("eval_only"):
            return route
        tally = self.tally

        def refused() -> None:
            tally.fallback += 1
        return eval_only(route, stages, refused)

    def later(self, stage: int, original: Callable[..., Any]) -> Callable[[tuple], Any]:
        """route(args) at a later module: given the stage before's _Lazy, not made yet, the next
        _Lazy or the kernel's output; else None (its own forward)."""
        meta, last = self.metas[stage], stage == self.last
        in_place = self.plan.steps[-1].inplace

        def route(args: tuple) -> Any:
            value = args[0]
            if type(value) is not _Lazy or kernels.RUNNING[0]:
                return None
            held = value._held
            if type(held) is not _Held or held.sequence is not self or held.stage != stage - 1 or held.value is not None:
                return None
            held.taken = True
            if not last:
                return _Lazy(held.then(original), meta)
            out = self._run(held)
            if in_place:  # relu_ wrote the stage before's value: that value is now the kernel's output
                held.value = out
            return out
        return route

    def side(self, stage: int, module: torch.nn.Module, original: Callable[..., Any]) -> Callable[[tuple], Any]:
        """route(args) at a side stage's module (a downsample's batch norm): where the main line's
        value waits at the stage before and this call's arguments and parameters are as proved,
        they are bound to it and the module's value is a _Lazy a later glue op takes; else None."""
        positions = [(k, kind, where) for k, (kind, *where) in enumerate(self.record["inputs"])
                     if kind in ("stage", "stage_param") and int(where[0]) == stage]
        sources = [(int(where[1]), None, "") if kind == "stage" else (-1, _dict_holding(module, str(where[1])), str(where[1]))
                   for _, kind, where in positions]
        ks, meta = [k for k, _, _ in positions], self.metas[stage]
        proved, grad_enabled = _proved_tensors(self.plan, ks), torch.is_grad_enabled

        def route(args: tuple) -> Any:
            lazy = self.current
            if lazy is None or kernels.RUNNING[0]:
                return None
            held = lazy._held
            if held.stage != stage - 1 or held.value is not None or held.taken:
                return None
            try:
                tensors = [args[at] if at >= 0 else dicts[attr] for at, dicts, attr in sources]
            except (KeyError, IndexError):
                return None
            if any(type(t) is _Lazy for t in tensors) or not proved(tensors, grad_enabled()):
                return None
            held.taken = True
            after = held.then(_unchanged, list(zip(ks, tensors)))
            value = _Lazy(_Side(self, original, args), meta, lazy.device)
            after.sides[stage] = value
            lazy._held = after
            return value
        return route

    def glued(self, lazy: _Lazy, func: Any, args: tuple, kwargs: dict) -> _Lazy | None:
        """A glue stage's call on the stage before's value, not made yet: that stage's _Lazy (for an
        op in place, the same one, which now stands for the op's output); else None (made)."""
        held = lazy._held
        glue = self.glue.get(held.stage + 1)
        if glue is None or held.sequence is not self or held.value is not None or held.taken:
            return None
        if len(args) != glue.n_args or args[glue.value_at] is not lazy:
            return None
        bound = glue.bind(func, args, kwargs, held)
        if bound is None:
            return None
        held.taken = True
        after = held.then(glue.forward(args), bound)
        if glue.stage == self.last:  # the chain ends in this op (out of place): its output is the kernel's
            return self._run(after)
        if glue.in_place:
            lazy._held = after
            return lazy
        return _Lazy(after, self.metas[glue.stage])

    def _run(self, held: _Held) -> torch.Tensor:
        self.current = None
        held.check_inputs()
        out = kernels.run_kernel(self.spec, tuple(held.tensors), {}, held.tensors)
        self.tally.kernel += 1
        return out[0] if isinstance(out, (tuple, list)) else out


class Glue:
    """A glue stage: the chain's step `j`, an op the forward calls between two modules, with the
    stage before's value first and the chain's inputs (bound here) or the captured numbers after."""

    def __init__(self, plan: ChainPlan, j: int, stage: int, inputs: list[list[Any]], side_of: dict[Ref, int]):
        step = plan.steps[j]
        self.op, self.stage, self.in_place = step.op, stage, step.inplace
        self.n_args = len(step.matchers)
        # where the stage before's value goes: its first argument, or its second for add and mul
        self.value_at = next(p for p, (kind, what) in enumerate(step.matchers) if kind == OUTPUT and what not in side_of)
        taken = {int(where[1]): k for k, (kind, *where) in enumerate(inputs) if kind == "stage" and int(where[0]) == stage}
        self.bound_at = sorted(taken.items())  # (argument position, chain input)
        self.constants = [(p, what) for p, (kind, what) in enumerate(step.matchers) if kind == CONSTANT]
        # (argument position, side stage): a side stage's value, not made yet, taken here
        self.sides = [(p, side_of[what]) for p, (kind, what) in enumerate(step.matchers)
                      if kind == OUTPUT and what in side_of]
        given = sorted([self.value_at] + [p for p, _ in self.bound_at + self.constants + self.sides])
        if step.keyword_matchers or given != list(range(self.n_args)):
            raise ValueError(f"{plan.spec.name}: step {j} is no glue stage (an argument neither an input nor a number)")
        self.proved = _proved_tensors(plan, [k for _, k in self.bound_at])

    def bind(self, func: Any, args: tuple, kwargs: dict, held: _Held) -> list[tuple[int, torch.Tensor]] | None:
        """The chain inputs this call binds ((input, tensor) pairs), where it is the step as proved:
        its numbers as captured, its tensors as proved, a side stage's value that stage's, not made."""
        if func is not self.op or kwargs or len(args) != self.n_args:
            return None
        if not all(what(args[p], []) for p, what in self.constants):
            return None
        for p, stage in self.sides:
            value = args[p]
            if type(value) is not _Lazy or held.sides.get(stage) is not value or value._held.value is not None:
                return None
        tensors = [args[p] for p, _ in self.bound_at]
        if any(type(t) is _Lazy for t in tensors) or not self.proved(tensors, torch.is_grad_enabled()):
            return None
        for p, _ in self.sides:
            args[p]._held.taken = True
        return [(k, t) for (_, k), t in zip(self.bound_at, tensors)]

    def forward(self, args: tuple) -> Callable[[torch.Tensor], torch.Tensor]:
        """The stage's own computation on the made value before it: the op as the model called it."""
        op, before, after = self.op, args[:self.value_at], args[self.value_at + 1:]
        return lambda value: op(*before, value, *after)


class _Held:
    """What a _Lazy stands for: a sequence's inputs as its first module was called (a glue
    stage's bound since), the stage it reached and the own forwards that make that stage's value."""

    __slots__ = ("args", "forwards", "sequence", "sides", "stage", "taken", "tensors", "value", "versions")

    def __init__(self, sequence: Sequence, stage: int, args: tuple, tensors: list[torch.Tensor],
                 forwards: tuple[Callable[..., Any], ...], versions: list[int] | None = None,
                 sides: dict[int, _Lazy] | None = None):
        self.sequence, self.stage, self.args, self.tensors, self.forwards = sequence, stage, args, tensors, forwards
        self.sides = sides if sides is not None else {}  # side stage -> its value (one run's, shared on)
        self.versions = versions if versions is not None else [0 if t is None else _version(t) for t in tensors]
        self.value: torch.Tensor | None = None  # made by the own forwards, once another use needed it
        self.taken = False  # the next module took it (the fused path goes on)

    def then(self, forward: Callable[..., Any], bound: list[tuple[int, torch.Tensor]] = ()) -> _Held:
        """The next stage's: the same inputs (and those a glue stage bound), one more own forward
        to make its value."""
        if not bound:
            return _Held(self.sequence, self.stage + 1, self.args, self.tensors, (*self.forwards, forward),
                         self.versions, self.sides)
        tensors, versions = list(self.tensors), list(self.versions)
        for k, t in bound:
            tensors[k], versions[k] = t, _version(t)
        return _Held(self.sequence, self.stage + 1, self.args, tensors, (*self.forwards, forward), versions, self.sides)

    def check_inputs(self) -> None:
        """An input written in place since the stage that bound it would give another value than
        the model's: stop, as a chain's run does."""
        if any(t is not None and _version(t) != v for t, v in zip(self.tensors, self.versions)):
            spec = self.sequence.spec
            raise RuntimeError(f"an input of the fused chain kernforge::{spec.name} ({spec.op}) was written in "
                               "place between its modules' calls; the fused kernel would read the new value. "
                               "Remove this kernel (kernforge.patch(..., only=...)) for this model")

    def made(self) -> torch.Tensor:
        """The stage's value by the modules' own forwards (routes and routers aside), once."""
        if self.value is None:
            self.check_inputs()
            if not self.taken:
                self.sequence.tally.fallback += 1
            with _original_ops():
                value = self.forwards[0](*self.args)
                for forward in self.forwards[1:]:
                    value = forward(value)
            self.value = value
            if self.sequence.current is not None and self.sequence.current._held is self:
                self.sequence.current = None  # the run is given up: no side stage joins it now
        return self.value


def _unchanged(value: torch.Tensor) -> torch.Tensor:
    """A side stage's own forward on the main line: it leaves the main line's value as it was."""
    return value


class _Side:
    """What a side stage's _Lazy stands for: its module's value, made by its own forward on the
    call's arguments where anything but the glue op that takes it reads it."""

    __slots__ = ("args", "forward", "sequence", "taken", "value")

    def __init__(self, sequence: Sequence, forward: Callable[..., Any], args: tuple):
        self.sequence, self.forward, self.args = sequence, forward, args
        self.value: torch.Tensor | None = None
        self.taken = False

    def made(self) -> torch.Tensor:
        if self.value is None:
            if not self.taken:
                self.sequence.tally.fallback += 1
            with _original_ops():
                self.value = self.forward(*self.args)
        return self.value


Layout = tuple[torch.Size, "tuple[int, ...] | None", torch.dtype]  # shape, strides (None: contiguous), dtype


def _layout(meta: dict[str, Any]) -> Layout:
    size, stride = torch.Size(meta["shape"]), tuple(meta["stride"])
    return size, None if stride == torch.empty(size, device="meta").stride() else stride, meta["dtype"]


class _Lazy(torch.Tensor):
    """A module's output not made yet, at a chain installed at a sequence of modules: the layout
    of the real one, no storage."""

    _held: _Held

    @staticmethod
    def __new__(cls, held: _Held | _Side, layout: Layout, device: torch.device | None = None) -> Self:
        size, stride, dtype = layout
        device = device if device is not None else held.tensors[0].device
        self = (torch.Tensor._make_wrapper_subclass(cls, size, dtype=dtype, device=device) if stride is None else
                torch.Tensor._make_wrapper_subclass(cls, size, strides=stride, dtype=dtype, device=device))
        self._held = held
        return self

    def __repr__(self) -> str:  # printing one shows its value, as printing a tensor does
        return repr(self._held.made())

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        for lazy in args[:2]:  # the value a glue op takes: its first argument, or its second (add, mul)
            if type(lazy) is _Lazy and type(lazy._held) is _Held and lazy._held.sequence.glue and not kernels.RUNNING[0]:
                out = lazy._held.sequence.glued(lazy, func, args, kwargs or {})
                if out is not None:
                    return out
                break
        return func(*_made(args), **{k: _made(v) for k, v in (kwargs or {}).items()})


def _made(value: Any) -> Any:
    if isinstance(value, _Lazy):
        return value._held.made()
    if isinstance(value, (list, tuple)):
        return type(value)(_made(v) for v in value)
    return value


GLUE = object()  # a glue stage's place among a sequence's modules


def side_values(record: dict[str, Any]) -> dict[Ref, int]:
    """A sequence record's side stages by the value each makes: (step, output) -> stage."""
    return {(int(record["outputs"][int(k)][0]), int(record["outputs"][int(k)][1])): int(k)
            for k in record.get("sides", [])}


def side_arguments(record: dict[str, Any], stage: int) -> list[int]:
    """The chain inputs a side stage's module was called with, in its arguments' order."""
    return [k for _, k in sorted((int(where[1]), k) for k, (kind, *where) in enumerate(record["inputs"])
                                 if kind == "stage" and int(where[0]) == stage)]


def sequence_routes(plan: ChainPlan, model: torch.nn.Module, counts: kernels.RouteCounts) -> list[ModuleRoute]:
    """The chain installed at every sequence of modules capture found it to be (same names and
    classes here): one route per module and stage, a module shared by sequences (the block's SiLU)
    routed once; a sequence with a module the model no longer holds is left to the modules' own
    forwards."""
    record = (plan.spec.chain or {})["modules"]
    try:
        sequence = Sequence(plan, record)
    except ValueError:  # a glue stage this runtime cannot bind (a record from another kernforge): placeholders
        return []
    counts.counters.append((sequence.tally, [plan.spec.name]))
    placed: dict[tuple[int, int], ModuleRoute] = {}
    for names in record["names"]:
        modules = [_module_at(model, name, cls) if cls is not None else GLUE
                   for name, cls in zip(names, record["classes"])]
        if any(m is None for m in modules) or len(modules) != len(record["classes"]):
            continue
        for stage, module in enumerate(modules):
            if module is GLUE:  # the op on the stage before's _Lazy goes on (_Lazy.__torch_dispatch__)
                continue
            if (id(module), stage) not in placed:
                route, original = _as_it_is(module)
                route.instances = 0
                if stage == 0:
                    run, n_args = sequence.first(module, original, [m for m in modules if m is not GLUE]), int(record["args"])
                elif stage in sequence.sides:
                    run, n_args = sequence.side(stage, module, original), len(side_arguments(record, stage))
                else:
                    run, n_args = sequence.later(stage, original), 1
                placed[id(module), stage] = _put_route(route, run, original, n_args)
        placed[id(modules[0]), 0].instances += 1
    return list(placed.values())
