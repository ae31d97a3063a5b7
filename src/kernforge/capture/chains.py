"""Fusible chains: connected runs of cheap ops in the recorded pass that one kernel could do.

Memory-bound ops cost what they move; a hand-written RMSNorm (pow, mean, add, rsqrt, mul,
mul) moves the activation six times where one kernel moves it twice. A chain is found from
the recorded producer links (Call.input_ids / output_ids), in call order: a fusible call joins
the chains of the calls that made its inputs when the result still has one domain and no cycle.

Fusible steps:
    pointwise   ATen's `pointwise` tag (add, mul, gelu, where...), floating outputs, not in place
    cast        _to_copy to another floating dtype, nothing else changed (x.float(), .type_as)
    row         reductions over the last dim with keepdim (sum, mean, amax, amin), and the row
                ops softmax, log_softmax, layer_norm and rms_norm over the last dim
    norm        native_group_norm: a head that element-wise steps may follow (group norm, SiLU)
    channel     batch norm in eval mode: per channel (dim 1) an affine map, element-wise
    inplace     a pointwise op that writes its first argument (relu_, add_), where a step before
                made that value: the chain computes it as the out-of-place op would

Domain: every tensor a chain reads or keeps broadcasts to one shape (a batch norm's [C] weight,
bias and statistics along dim 1), and its row steps reduce
that shape's last dim. Outputs: a value the chain makes that a call outside it reads (views
included) or that the forward returns; a chain must remove at least one intermediate, since
intermediates used elsewhere stay outputs, not removed. Several instances with the same steps
and signatures (each layer's norm) are one chain signature.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from kernforge.capture.recorder import Call, ModuleCall, qualified_name, written_positions
from kernforge.harness.serialize import Placeholder, layout_copy, saved_bytes, strided_copy
from kernforge.runtime.kernels import in_place

ROW_REDUCTIONS = ("aten::sum.dim_IntList", "aten::mean.dim", "aten::amax.default", "aten::amin.default")
ROW_OPS = ("aten::_softmax.default", "aten::_log_softmax.default", "aten::native_layer_norm.default",
           "aten::_fused_rms_norm.default")
NORM_HEADS = ("aten::native_group_norm.default",)
# Eval-mode batch norms: op -> (the position of its `training` argument, None where the op never
# trains; the position of its eps)
BATCH_NORMS = {"aten::native_batch_norm.default": (5, 7), "aten::cudnn_batch_norm.default": (5, 7),
               "aten::_native_batch_norm_legit_no_training.default": (None, 6)}
CAST_KWARGS = {"dtype", "layout", "device"}  # a _to_copy that only changes the dtype
# Element-wise ops ATen leaves without its `pointwise` tag (torch 2.14: hardswish, MobileNetV3's
# activation), which the element-wise family computes
UNTAGGED_POINTWISE = {"aten::hardswish.default", "aten::hardswish_.default"}


@dataclass
class ChainInstance:
    """One occurrence of a chain in the recorded pass."""

    members: list[int]  # call indices, in order
    inputs: list[int]  # tensor ids read from outside, in the order the steps first read them
    outputs: list[tuple[int, int]]  # (member position, output position) kept past the chain


@dataclass
class Chain:
    """A chain signature: its steps with their wiring, and every instance of it."""

    signature: str
    steps: list[dict[str, Any]]  # {"op", "signature", "args", "kwargs"}; tensors as refs (step_refs)
    outputs: list[list[int]]  # [step, output position] per chain output
    input_metas: list[dict[str, Any]]
    output_metas: list[dict[str, Any]]
    instances: list[ChainInstance] = field(default_factory=list)
    # Where instances are exactly one module's forward (module_boundaries): the module's class, its
    # positional arguments' count, each chain input as ["arg", position] or ["param", name], and
    # the modules' names; integrate installs the kernel as those modules' forward.
    module: dict[str, Any] | None = None
    # Where instances are instead the forwards of consecutive modules (module_sequences: a GroupNorm
    # then its block's SiLU): each stage's class, the first stage's argument count, each chain input
    # as "module" names it (the first stage's arguments and parameters), each stage's output as
    # [step, output position], and per instance its modules' names, one per stage. A key of its own, not "module": a kernforge that predates it
    # would install the whole chain as the first module's forward.
    modules: dict[str, Any] | None = None

    @property
    def op(self) -> str:
        """A name for tables and the `kf-op:` line: 'chain:pow+mean+add+rsqrt+mul'."""
        return "chain:" + "+".join(_short(s["op"]) for s in self.steps)

    @property
    def schema(self) -> str:
        """As an op's schema reads: 'chain:mul+add+_softmax(Tensor in0, Tensor in1) -> (Tensor)'."""
        params = ", ".join(f"Tensor in{k}" for k in range(len(self.input_metas)))
        return f"{self.op}({params}) -> ({', '.join(['Tensor'] * len(self.outputs))})"

    def covers(self) -> dict[str, int]:
        """How many calls of each step signature its instances hold, per pass."""
        counts: dict[str, int] = {}
        for step in self.steps:
            counts[step["signature"]] = counts.get(step["signature"], 0) + len(self.instances)
        return counts

    def to_json(self) -> dict[str, Any]:
        """What a task and the profile keep: the steps, the outputs, and the calls of each step
        signature its instances hold (make_tasks keeps a chain and its pieces from both counting)."""
        out = {"steps": self.steps, "outputs": self.outputs, "covers": self.covers()}
        if self.module:
            out["module"] = self.module
        if self.modules:
            out["modules"] = self.modules
        return out


def _short(op: str) -> str:
    return op.split("::", 1)[-1].split(".")[0]


def step_role(call: Call) -> str | None:
    """pointwise, cast, row, norm, or None: not fusible."""
    func = call.func
    op = qualified_name(func)
    if op in BATCH_NORMS:
        return "channel" if _eval_batch_norm(call, BATCH_NORMS[op][0]) else None
    if func._schema.is_mutable:
        return "inplace" if _inplace_pointwise(call) else None
    if not call.outputs or any(_nested_tensor(a) for a in call.args):
        return None
    floating = all(_floating(o) for o in call.outputs)
    if op in NORM_HEADS:
        return "norm" if floating else None
    if op in ROW_OPS:
        return "row" if floating and _last_dim_row_op(op, call) else None
    if op in ROW_REDUCTIONS:
        return "row" if floating and _last_dim_reduction(call) else None
    if op == "aten::_to_copy.default":
        x = call.args[0] if call.args else None
        return "cast" if floating and _is_tensor(x) and _floating(x) and set(call.kwargs) <= CAST_KWARGS \
            and call.outputs[0]["stride"] == x["stride"] else None
    if call.kind == "compute" and _pointwise(func) and floating and len(call.outputs) == 1:
        return "pointwise"
    return None


def _eval_batch_norm(call: Call, training_at: int | None) -> bool:
    """A batch norm that normalises by its running statistics (eval mode): per channel, x's dim 1,
    an affine map; its weight and bias may be absent, its statistics may not."""
    args = call.args
    x = args[0] if args else None
    if not _is_tensor(x) or len(x["shape"]) < 2 or not _floating(x) or not call.outputs or not _floating(call.outputs[0]):
        return False
    if training_at is not None and (len(args) <= training_at or args[training_at] is not False):
        return False
    channels = x["shape"][1]
    params = args[1:5]
    return len(params) == 4 and _is_tensor(params[2]) and _is_tensor(params[3]) and all(
        p is None or _is_tensor(p) and p["shape"] == [channels] for p in params)


def _inplace_pointwise(call: Call) -> bool:
    """relu_, add_, mul_...: pointwise, floating, writing its first argument alone and returning it.
    Pointwise as its out-of-place form is tagged (ATen tags gelu and mish, not gelu_ and mish_)."""
    func = call.func
    return (in_place(func) and written_positions(func) == [0]
            and (_pointwise(func) or _pointwise(_out_of_place(func)))
            and len(call.outputs) == 1 and _floating(call.outputs[0])
            and not any(_nested_tensor(a) for a in call.args))


def _pointwise(func: Any) -> bool:
    return torch.Tag.pointwise in func.tags or qualified_name(func) in UNTAGGED_POINTWISE


def out_of_place(op: str) -> str:
    """'aten::relu_.default' -> 'aten::relu.default': an in-place op's out-of-place form (the name
    itself where it is none: `_softmax`, `__and__`)."""
    namespace, _, rest = op.partition("::")
    name, dot, overload = rest.partition(".")
    if name.endswith("_") and not name.endswith("__") and not name.startswith("_"):
        name = name[:-1]
    return f"{namespace}::{name}{dot}{overload}"


def _out_of_place(func: Any) -> Any:
    """aten.gelu_.default -> aten.gelu.default (itself where there is none)."""
    name, _, overload = out_of_place(qualified_name(func)).removeprefix("aten::").partition(".")
    return getattr(getattr(torch.ops.aten, name, None), overload, func)


def _is_tensor(value: Any) -> bool:
    return isinstance(value, dict) and "shape" in value and "dtype" in value


def _floating(meta: dict[str, Any]) -> bool:
    return meta.get("dtype") in ("torch.float32", "torch.float16", "torch.bfloat16", "torch.float64")


def _nested_tensor(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and any(_is_tensor(v) or _nested_tensor(v) for v in value)


def _is_last(dim: Any, ndim: int) -> bool:
    return isinstance(dim, int) and ndim > 0 and dim in (-1, ndim - 1)


def _last_dim_reduction(call: Call) -> bool:
    x = call.args[0]
    ndim = len(x["shape"])
    dims = call.args[1] if len(call.args) > 1 else call.kwargs.get("dim")
    keepdim = call.args[2] if len(call.args) > 2 else call.kwargs.get("keepdim", False)
    dtype = call.kwargs.get("dtype")
    return (isinstance(dims, list) and len(dims) == 1 and _is_last(dims[0], ndim) and keepdim is True
            and dtype is None)


def _last_dim_row_op(op: str, call: Call) -> bool:
    x = call.args[0]
    if not _is_tensor(x) or not x["shape"]:
        return False
    if op in ("aten::_softmax.default", "aten::_log_softmax.default"):
        return len(call.args) > 1 and _is_last(call.args[1], len(x["shape"]))
    shape = call.args[1] if len(call.args) > 1 else None
    return isinstance(shape, list) and shape == x["shape"][-1:]


# ---------------------------------------------------------------- finding

def find_chains(calls: list[Call], returned_ids: Iterable[int],
                module_calls: list[ModuleCall] | None = None) -> list[Chain]:
    """The chains of one recorded pass, grouped by signature, most instances first. With the
    pass's module calls, a module whose forward is all fusible steps (an RMSNorm) is a chain of
    its own: nothing outside it joins, so that it can be installed as that forward
    (module_boundaries) rather than through a placeholder at every step."""
    roles = {c.index: step_role(c) for c in calls}
    region = _closed_regions(calls, roles, module_calls or [])
    by_index = {c.index: c for c in calls}
    maker = {tid: (c.index, k) for c in calls for k, tid in enumerate(c.output_ids)}
    readers: dict[int, list[int]] = {}
    for c in calls:
        for tid in set(c.input_ids) | set(c.written_ids):
            readers.setdefault(tid, []).append(c.index)
    ancestors = _ancestors(calls, maker)
    group_of: dict[int, int] = {}  # call index -> its group's first call
    groups: dict[int, list[int]] = {}
    for c in calls:
        if roles[c.index] is None:
            continue
        # The producers' groups, the latest first (the data flowing in, before a mask made long
        # ago): each is joined if the group stays fusible with it. A group norm heads a chain of its
        # own: its family's kernels take the steps after it, never before it, and the steps after it
        # are often the modules that follow it (a block's norm1, then its SiLU), where a chain
        # reaching back into the previous block's residual `(x + h) / scale` went through
        # placeholders with no kernel for it (7 of the VAE decoder's 21 group norm + SiLU at small scale).
        joined = [] if roles[c.index] == "norm" else sorted(
            {group_of[maker[t][0]] for t in c.input_ids if t in maker and maker[t][0] in group_of
             and region.get(maker[t][0]) == region.get(c.index)}, key=lambda g: -groups[g][-1])
        merged = [c.index]
        waiting = joined
        while waiting:  # a group refused alone may join once another did (an add_ writing one input's value)
            refused = []
            for g in waiting:
                trial = sorted(set(merged) | set(groups[g]))
                if _fusible(trial, by_index, roles, maker, ancestors):
                    merged = trial
                    del groups[g]
                else:
                    refused.append(g)
            waiting = refused if len(refused) < len(waiting) else []
        groups[merged[0]] = merged
        for m in merged:
            group_of[m] = merged[0]
    returned = set(returned_ids)
    found: dict[str, Chain] = {}
    for members in groups.values():
        members = _peeled(members, by_index, maker, readers, returned)
        instance = _instance(members, by_index, maker, readers, returned)
        if instance is None:
            continue
        chain = _chain_of(instance, by_index, maker)
        found.setdefault(chain.signature, chain).instances.append(instance)
    chains = sorted(found.values(), key=lambda ch: -len(ch.instances))
    module_boundaries(chains, calls, module_calls or [])
    return chains


def _closed_regions(calls: list[Call], roles: dict[int, str | None],
                    module_calls: list[ModuleCall]) -> dict[int, int]:
    """Per call inside a module whose every call is a fusible step (two or more): that module
    call's position; its calls join only each other. The innermost such module wins."""
    region: dict[int, int] = {}
    for k, mc in enumerate(module_calls):  # inner modules return first
        span = range(mc.first, mc.end)
        if len(span) >= 2 and all(roles.get(i) is not None for i in span):
            for i in span:
                region.setdefault(i, k)
    return region


def module_boundaries(chains: list[Chain], calls: list[Call], module_calls: list[ModuleCall]) -> None:
    """Mark each chain whose instances are exactly a module's forward: every call the forward
    made is a step, every positional argument a distinct tensor, each chain input an argument
    or one of the module's parameters and buffers, and its one output what the forward returned.
    Such a forward becomes one guarded call (Liger-Kernel's way), where a chain elsewhere needs
    a placeholder at every step. A chain that is no one module's forward may be the forwards of
    consecutive modules (module_sequences)."""
    spans: dict[tuple[int, int], ModuleCall] = {}
    for mc in module_calls:  # in the order they returned: the innermost of equal spans first
        spans.setdefault((mc.first, mc.end), mc)
    sequences_of = _starting_at(module_calls)
    for chain in chains:
        # a batch norm's module computes another op while it trains: its routes check the modules'
        # training flags (fused.eval_only)
        eval_only = any(step["op"] in BATCH_NORMS for step in chain.steps)
        found: dict[str, tuple[str, int, list[list[Any]], list[str]]] = {}
        for instance in chain.instances:
            matched = _boundary(instance, calls, spans)
            if matched is None:
                continue
            mc, inputs = matched
            key = json.dumps([mc.cls, len(mc.arg_ids), inputs])
            found.setdefault(key, (mc.cls, len(mc.arg_ids), inputs, []))[3].append(mc.name)
        if found:
            cls, n_args, inputs, names = max(found.values(), key=lambda f: len(f[3]))
            chain.module = {"class": cls, "args": n_args, "inputs": inputs, "names": names,
                            "instances": len(chain.instances)}
            if eval_only:
                chain.module["eval_only"] = True
        else:
            module_sequences(chain, calls, sequences_of, eval_only=eval_only)


def _starting_at(module_calls: list[ModuleCall]) -> dict[int, list[ModuleCall]]:
    """Per call index, the module calls whose span starts there, in the order they returned
    (of equal spans the innermost first)."""
    starting: dict[int, list[ModuleCall]] = {}
    for mc in module_calls:
        starting.setdefault(mc.first, []).append(mc)
    return starting


def module_sequences(chain: Chain, calls: list[Call], starting: dict[int, list[ModuleCall]],
                     eval_only: bool = False) -> None:
    """Mark a chain whose instances are exactly the forwards of consecutive module calls (diffusers'
    ResnetBlock2D: `h = self.norm1(x); h = self.nonlinearity(h)`, the SiLU module shared): each
    stage's output the next one's only argument and read by nothing else, the chain's one output
    the last stage's. Between two modules a stage may be one pointwise op the forward calls itself
    (a glue stage: ResNet's `out += identity` between bn3 and relu), whose first argument is the
    stage before's output and whose other tensors are the chain's inputs ("ops": stage -> its op;
    its name in "names" is None). A module between them given only tensors the chain does not make
    is a side stage ("sides": a downsample's batch norm, its conv a call beside the chain), whose
    value a later glue op takes. Integrate installs it at those modules: the first returns a value
    not made yet, a glue op on it another, the last module runs the kernel on it (fused.py, at a
    sequence of modules), with no placeholder at every step."""
    found: dict[str, tuple[list[str], int, list[list[Any]], list[list[str]]]] = {}
    for instance in chain.instances:
        matched = _sequence(instance, calls, starting)
        if matched is None:
            continue
        stages, inputs, outputs, sides = matched
        classes = [mc.cls if isinstance(mc, ModuleCall) else None for mc in stages]
        ops = {str(k): qualified_name(calls[mc].func) for k, mc in enumerate(stages) if not isinstance(mc, ModuleCall)}
        key = json.dumps([classes, ops, sides, len(stages[0].arg_ids), inputs, outputs])
        found.setdefault(key, (classes, ops, sides, len(stages[0].arg_ids), inputs, outputs, []))[6].append(
            [mc.name if isinstance(mc, ModuleCall) else None for mc in stages])
    if found:
        classes, ops, sides, n_args, inputs, outputs, names = max(found.values(), key=lambda f: len(f[6]))
        chain.modules = {"classes": classes, "args": n_args, "inputs": inputs, "outputs": outputs,
                         "names": names, "instances": len(chain.instances)}
        if ops:
            chain.modules["ops"] = ops
        if sides:
            chain.modules["sides"] = sides
        if eval_only:  # the route takes it only while none of its modules trains
            chain.modules["eval_only"] = True


def _sequence(instance: ChainInstance, calls: list[Call], starting: dict[int, list[ModuleCall]],
              ) -> tuple[list[ModuleCall | int], list[list[Any]], list[list[int]], list[int]] | None:
    """The module calls (two or more) whose spans tile the instance's calls, each the widest that
    fits (of equal spans the innermost), with glue stages between them (a step's call index:
    _glue_stage); each chain input as the record names it; and each stage's output as [step,
    output position] (the layout a value not made yet takes). None where the instance is no such
    sequence."""
    members = instance.members
    inside = set(members)

    def spare(i: int) -> bool:
        return _spare(calls, i, inside)
    first, end = members[0], members[-1] + 1
    made = {tid: [step, out] for step, m in enumerate(members) for out, tid in enumerate(calls[m].output_ids)}
    if len(instance.outputs) != 1 or any(not spare(i) and not _gap(calls[i], made, instance) for i in range(first, end)
                                         if i not in inside):
        return None
    earliest = first
    while spare(earliest - 1):
        earliest -= 1
    stages: list[ModuleCall | int] = []
    at = earliest
    while at < end:
        # the widest module call starting here within the instance that holds steps alone; not one
        # spanning it all (that is a module boundary, not a sequence)
        fitting = [mc for mc in starting.get(at, []) if mc.end <= end and not (at <= first and mc.end == end)
                   and any(i in inside for i in range(mc.first, mc.end))
                   and all(i in inside or spare(i) for i in range(mc.first, mc.end))]
        if fitting:
            stages.append(max(fitting, key=lambda mc: mc.end))
            at = stages[-1].end
        elif spare(at) or (stages and at not in inside):  # a call beside the chain (a downsample's conv)
            at += 1
        elif stages and at in inside:  # a step the forward calls between two modules
            stages.append(at)
            at += 1
        else:
            return None
    if len(stages) < 2 or not isinstance(stages[0], ModuleCall) or (
            not isinstance(stages[-1], ModuleCall) and step_role(calls[stages[-1]]) != "pointwise"):
        return None  # a glue op first, or in place last: no module call holds the inputs, or none gets the output
    head = stages[0]
    if None in head.arg_ids or len(set(head.arg_ids)) != len(head.arg_ids):
        return None  # a number or a repeated tensor among the arguments: the guard could not tell
    linked = _linked(stages, calls, made)
    if linked is None:
        return None
    later_inputs, sides = linked
    pos, k = instance.outputs[0]
    outs = [_output_id(mc, calls) for mc in stages]
    if outs[-1] is None or calls[members[pos]].output_ids[k] != outs[-1]:
        return None
    if any(out not in made for out in outs):
        return None  # a stage returned no value a step made
    inputs: list[list[Any]] = []
    for tid in instance.inputs:
        if tid in head.arg_ids:
            inputs.append(["arg", head.arg_ids.index(tid)])
        elif tid in head.param_ids:
            inputs.append(["param", head.param_ids[tid]])
        elif tid in later_inputs:
            inputs.append(later_inputs[tid])
        else:
            return None  # a global, an attribute that is no parameter: no stage's call holds it
    return stages, inputs, [made[out] for out in outs], sides


def _gap(call: Call, made: dict[int, list[int]], instance: ChainInstance) -> bool:
    """A call between a sequence's stages that is no step (a downsample's conv): it reads no value
    the chain makes and writes none the chain reads, so the kernel may run without it."""
    return not any(t in made for t in call.input_ids) and not any(
        t in made or t in instance.inputs for t in call.written_ids)


def _linked(stages: list[ModuleCall | int], calls: list[Call],
            made: dict[int, list[int]]) -> tuple[dict[int, list[Any]], list[int]] | None:
    """Whether each stage after the first takes the chain's value on (the main line): a module
    given exactly the value before, or a glue op with it first. A module given only tensors the
    chain does not make is a side stage (a downsample's batch norm), whose value a later glue op
    takes. Returns the chain inputs the later stages bind (tensor id -> ["stage", stage, position]
    for an argument, ["stage_param", stage, name] for a side module's parameter) and the side
    stages, else None."""
    current, sides, bound = _output_id(stages[0], calls), {}, {}
    side_stages = []
    for stage, after in enumerate(stages[1:], start=1):
        if current is None:
            return None
        if isinstance(after, ModuleCall) and after.arg_ids == [current]:
            current = after.output_id
            continue
        if isinstance(after, ModuleCall):  # a side stage: its own arguments and parameters, none made
            if stage == len(stages) - 1 or not after.arg_ids or any(t is None or t in made for t in after.arg_ids) \
                    or len(set(after.arg_ids)) != len(after.arg_ids) or after.output_id is None:
                return None
            bound.update({t: ["stage", stage, p] for p, t in enumerate(after.arg_ids)})
            bound.update({t: ["stage_param", stage, name] for t, name in after.param_ids.items() if t not in bound})
            sides[after.output_id] = stage
            side_stages.append(stage)
            continue
        taken = _glue_stage(calls[after], current, stage, sides)
        if taken is None:
            return None
        bound.update(taken)
        current = _output_id(after, calls)
    return (bound, side_stages) if not sides else None  # every side value taken by a glue op


def _output_id(stage: ModuleCall | int, calls: list[Call]) -> int | None:
    if isinstance(stage, ModuleCall):
        return stage.output_id
    return calls[stage].output_ids[0] if len(calls[stage].output_ids) == 1 else None


# Ops whose first two arguments may trade places: a glue stage may take the chain's value second
# (RegNet's `x + f(x)`, MobileNetV2's `x + conv(x)`); add only without an alpha (no keywords).
COMMUTATIVE = frozenset({"aten::add.Tensor", "aten::mul.Tensor"})


def _glue_stage(call: Call, value_id: int | None, stage: int, sides: dict[int, int]) -> dict[int, list[Any]] | None:
    """A glue stage's other tensors as chain inputs (tensor id -> ["stage", stage, position]),
    where the call is a pointwise step (in place or not) whose first argument is the stage before's
    value (or its second, for an op in COMMUTATIVE) and whose other arguments are tensors read
    once, a side stage's value (taken from `sides` here), or plain numbers; else None."""
    if step_role(call) not in ("pointwise", "inplace") or call.kwargs or len(call.output_ids) != 1:
        return None
    positions = [p for p, a in enumerate(call.args) if _is_tensor(a)]
    if any(isinstance(a, (list, tuple, dict)) and not _is_tensor(a) for a in call.args) \
            or len(positions) != len(call.input_ids) or not positions or positions[0] != 0:
        return None  # a list of tensors: its positions are not the argument's
    at = 0 if call.input_ids[0] == value_id else (
        1 if qualified_name(call.func) in COMMUTATIVE and positions[1:2] == [1] and call.input_ids[1] == value_id else None)
    if at is None:
        return None
    others = [(tid, p) for tid, p in zip(call.input_ids, positions) if p != at]
    taken = {tid: ["stage", stage, p] for tid, p in others if tid not in sides}
    for tid, _ in others:
        sides.pop(tid, None)  # its value is taken here
    return taken if len({tid for tid, _ in others}) == len(others) and value_id not in taken else None


def _spare(calls: list[Call], i: int, members: set[int]) -> bool:
    """Call i is an allocation beside the chain's steps inside a module's span (a batch norm's empty
    reserve on the CPU): no step, and nothing the chain reads."""
    return 0 <= i < len(calls) and calls[i].kind == "alloc" and i not in members


def _boundary(instance: ChainInstance, calls: list[Call],
              spans: dict[tuple[int, int], ModuleCall]) -> tuple[ModuleCall, list[list[Any]]] | None:
    members, inside = instance.members, set(instance.members)
    first = members[0]
    while _spare(calls, first - 1, inside):  # the module allocated before its first step
        first -= 1
    # the widest span that starts at a spare allocation or the first step and ends at the last step
    end = members[-1] + 1
    mc = next((spans[at, end] for at in range(first, members[0] + 1) if (at, end) in spans), None)
    if mc is None or [i for i in range(mc.first, mc.end) if not _spare(calls, i, inside)] != members \
            or len(instance.outputs) != 1:
        return None
    if None in mc.arg_ids or len(set(mc.arg_ids)) != len(mc.arg_ids):
        return None  # a number or a repeated tensor among the arguments: the guard could not tell
    pos, k = instance.outputs[0]
    if mc.output_id is None or calls[members[pos]].output_ids[k] != mc.output_id:
        return None
    inputs: list[list[Any]] = []
    for tid in instance.inputs:
        if tid in mc.arg_ids:
            inputs.append(["arg", mc.arg_ids.index(tid)])
        elif tid in mc.param_ids:
            inputs.append(["param", mc.param_ids[tid]])
        else:
            return None  # read from elsewhere (a global, an attribute that is no parameter)
    return mc, inputs


def _ancestors(calls: list[Call], maker: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Per call, a bit mask of every call its inputs depend on (for the cycle check)."""
    masks: dict[int, int] = {}
    for c in calls:
        mask = 0
        for t in c.input_ids:
            if t in maker:
                p = maker[t][0]
                mask |= masks.get(p, 0) | (1 << p)
        masks[c.index] = mask
    return masks


def _fusible(members: list[int], by_index: dict[int, Call], roles: dict[int, str | None],
             maker: dict[int, tuple[int, int]], ancestors: dict[int, int]) -> bool:
    """One domain, at most one group norm (and then no row step), and no input of the group made
    from one of its own values by a call outside it (that call would have to run mid-kernel)."""
    inside = set(members)
    mask = sum(1 << m for m in members)
    for m in members:
        for t in by_index[m].input_ids:
            if t in maker and maker[t][0] not in inside and ancestors[maker[t][0]] & mask:
                return False
    for m in members:  # an in-place step writes a value the chain made, never one it was given
        if roles[m] == "inplace" and any(t not in maker or maker[t][0] not in inside for t in by_index[m].written_ids):
            return False
    kinds = [roles[m] for m in members]
    if kinds.count("norm") > 1 or ("norm" in kinds and "row" in kinds) or (
            "channel" in kinds and ("row" in kinds or "norm" in kinds)):
        return False
    return _domain(members, by_index, roles) is not None


def _domain(members: list[int], by_index: dict[int, Call], roles: dict[int, str | None]) -> list[int] | None:
    """The shape every tensor of the group broadcasts to, if there is one its row steps can
    reduce the last dim of; None otherwise."""
    shapes: list[list[int]] = []
    for m in members:
        call = by_index[m]
        if roles[m] in ("norm", "channel"):  # x and y; weight, bias (and statistics) per channel, or [N, groups]
            shapes += [call.args[0]["shape"], call.outputs[0]["shape"]]
            continue
        shapes += [a["shape"] for a in call.args if _is_tensor(a)]
        shapes += [o["shape"] for o in call.outputs]
    try:
        domain = list(torch.broadcast_shapes(*[torch.Size(s) for s in shapes]))
    except RuntimeError:
        return None
    if not domain:
        return None
    for m in members:
        call = by_index[m]
        if roles[m] == "row" and call.args[0]["shape"][-1:] != domain[-1:]:
            return None
        if roles[m] in ("norm", "channel") and call.args[0]["shape"] != domain:
            return None
    return domain


def _peeled(members: list[int], by_index: dict[int, Call], maker: dict[int, tuple[int, int]],
            readers: dict[int, list[int]], returned: set[int]) -> list[int]:
    """The group without the steps that start it and whose values are all kept anyway (a mask
    made once and read by every layer): fusing them removes nothing, and leaving them out lets
    the same chain repeat across layers."""
    kept = list(members)
    changed = True
    while changed:
        changed = False
        inside = set(kept)
        for m in kept:
            call = by_index[m]
            source = not any(t in maker and maker[t][0] in inside for t in call.input_ids)
            all_kept = all(t in returned or any(r not in inside for r in readers.get(t, []))
                           for t in call.output_ids)
            if source and all_kept:
                kept.remove(m)
                changed = True
                break
    return kept


def _instance(members: list[int], by_index: dict[int, Call], maker: dict[int, tuple[int, int]],
              readers: dict[int, list[int]], returned: set[int]) -> ChainInstance | None:
    """The group as a chain instance, or None when it is no chain: one step, nothing removed,
    nothing kept, or a value of it written in place by a call outside it."""
    if len(members) < 2:
        return None
    inside = set(members)
    inputs: list[int] = []
    for m in members:
        for t in by_index[m].input_ids:
            if (t not in maker or maker[t][0] not in inside) and t not in inputs:
                inputs.append(t)
    outputs, removed = [], 0
    for pos, m in enumerate(members):
        for k, t in enumerate(by_index[m].output_ids):
            outside = [r for r in readers.get(t, []) if r not in inside]
            if any(t in by_index[r].written_ids for r in outside):
                return None  # changed in place by another call: the chain's copy would go stale
            if outside or t in returned:
                outputs.append((pos, k))
            elif any(r in inside for r in readers.get(t, [])):
                removed += 1
    if not outputs or not removed:
        return None
    return ChainInstance(members=list(members), inputs=inputs, outputs=outputs)


def _chain_of(instance: ChainInstance, by_index: dict[int, Call], maker: dict[int, tuple[int, int]]) -> Chain:
    position = {m: pos for pos, m in enumerate(instance.members)}
    steps = []
    for m in instance.members:
        call = by_index[m]
        refs = iter(_tensor_ref(t, instance, position, maker) for t in call.input_ids)
        steps.append({"op": qualified_name(call.func), "signature": call.signature,
                      "args": step_refs(call.args, refs), "kwargs": step_refs(call.kwargs, refs)})
    input_metas = _input_metas(instance, by_index)
    output_metas = [by_index[instance.members[p]].outputs[k] for p, k in instance.outputs]
    outputs = [[p, k] for p, k in instance.outputs]
    key = json.dumps([steps, outputs, input_metas], sort_keys=True)
    signature = f"chain-{hashlib.sha1(key.encode()).hexdigest()[:8]}"
    return Chain(signature=signature, steps=steps, outputs=outputs, input_metas=input_metas,
                 output_metas=output_metas)


def _tensor_ref(tid: int, instance: ChainInstance, position: dict[int, int],
                maker: dict[int, tuple[int, int]]) -> dict[str, int]:
    if tid in maker and maker[tid][0] in position:
        call, k = maker[tid]
        return {"step": position[call], "output": k}
    return {"input": instance.inputs.index(tid)}


def step_refs(value: Any, refs: Any) -> Any:
    """A call's described arguments with each tensor (in flattened order) replaced by its ref."""
    if _is_tensor(value):
        return next(refs)
    if isinstance(value, list):
        return [step_refs(v, refs) for v in value]
    if isinstance(value, dict):
        return {k: step_refs(v, refs) for k, v in value.items()}
    return value


def _input_metas(instance: ChainInstance, by_index: dict[int, Call]) -> list[dict[str, Any]]:
    metas: dict[int, dict[str, Any]] = {}
    for m in instance.members:
        call = by_index[m]
        tensors = [a for a in _flat(call.args) + _flat(call.kwargs) if _is_tensor(a)]
        for t, meta in zip(call.input_ids, tensors):
            metas.setdefault(t, meta)
    return [metas[t] for t in instance.inputs]


def _flat(value: Any) -> list[Any]:
    if isinstance(value, list):
        return [x for v in value for x in _flat(v)]
    if isinstance(value, dict) and not _is_tensor(value):
        return [x for v in value.values() for x in _flat(v)]
    return [value]


def first_reads(instance: ChainInstance, by_index: dict[int, Call]) -> dict[int, tuple[int, int]]:
    """Per chain input k: (the call that reads it first, its position among that call's tensor
    inputs), where the sampling pass copies it."""
    where: dict[int, tuple[int, int]] = {}
    for m in instance.members:
        for pos, t in enumerate(by_index[m].input_ids):
            if t in instance.inputs:
                where.setdefault(instance.inputs.index(t), (m, pos))
    return where


# ---------------------------------------------------------------- samples

class ChainSampler(TorchDispatchMode):
    """A second recorded pass that copies the real inputs and outputs of chain instances.

    Calls are numbered as the Recorder numbers them; a model whose pass makes the same calls
    in the same order (any model without data-dependent control flow) meets each instance at the
    same indices. Where the op at an index differs, that sample is dropped (`mismatched`)."""

    def __init__(self, wanted: list[tuple[str, ChainInstance, dict[int, tuple[int, int]]]],
                 ops: dict[int, str], sample_cap_bytes: int, total_cap_bytes: int):
        super().__init__()
        self.index = 0
        self.ops = ops
        self.bytes_left = total_cap_bytes
        self.sample_cap = sample_cap_bytes
        self.samples: list[dict[str, Any]] = []
        self.mismatched: set[int] = set()
        self._inputs_at: dict[int, list[tuple[int, int, int]]] = {}  # call -> (sample, k, position)
        self._outputs_at: dict[int, list[tuple[int, int, int]]] = {}  # call -> (sample, slot, position)
        for s, (signature, instance, reads) in enumerate(wanted):
            self.samples.append({"signature": signature, "inputs": [None] * len(instance.inputs),
                                 "outputs": [None] * len(instance.outputs), "budget": sample_cap_bytes})
            for k, (call, pos) in reads.items():
                self._inputs_at.setdefault(call, []).append((s, k, pos))
            for slot, (member, out) in enumerate(instance.outputs):
                self._outputs_at.setdefault(instance.members[member], []).append((s, slot, out))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        index = self.index
        self.index += 1
        watched = index in self._inputs_at or index in self._outputs_at
        if watched and self.ops.get(index) != qualified_name(func):
            self.mismatched.update(s for s, _, _ in self._inputs_at.get(index, []) + self._outputs_at.get(index, []))
            watched = False
        if watched:
            inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            for s, k, pos in self._inputs_at.get(index, []):
                self.samples[s]["inputs"][k] = self._keep(s, inputs[pos])
        out = func(*args, **kwargs)
        if watched:
            outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            for s, slot, pos in self._outputs_at.get(index, []):
                self.samples[s]["outputs"][slot] = strided_copy(outputs[pos])
        return out

    def _keep(self, s: int, t: torch.Tensor) -> Any:
        """A copy within the caps, else a Placeholder (its values are drawn by the evaluator)."""
        size = saved_bytes(t)
        sample = self.samples[s]
        if size <= min(sample["budget"], self.bytes_left):
            sample["budget"] -= size
            self.bytes_left -= size
            return layout_copy(t)
        return Placeholder.of(t)

    def finished(self) -> list[dict[str, Any]]:
        """The complete samples: inputs (copies or placeholders) and, where every input is real,
        the outputs the model gave."""
        done = []
        for s, sample in enumerate(self.samples):
            if s in self.mismatched or any(x is None for x in sample["inputs"]):
                continue
            placeholders = [x for x in sample["inputs"] if isinstance(x, Placeholder)]
            real = "all" if not placeholders else "none" if len(placeholders) == len(sample["inputs"]) else "partial"
            outputs = sample["outputs"] if real == "all" and all(o is not None for o in sample["outputs"]) else []
            done.append({**sample, "real": real, "outputs": outputs})
        return done
