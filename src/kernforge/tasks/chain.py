"""A chain task's reference: the chain's ATen calls replayed, in order, on its inputs.

A chain (capture/chains.py) is a list of steps, each an ATen overload with its arguments, in
which a tensor is a ref: {"input": k}, the chain's k-th input, or {"step": j, "output": m}, the
m-th output of step j. Its outputs are refs to the values the model keeps. The replay is the
reference eager PyTorch runs (each step its own kernel), the float64 oracle (every floating
dtype the steps name becomes float64, so a cast in the middle of the chain does not round the
oracle), and what torch.compile is given as the peer that fuses the same chain.
"""

from __future__ import annotations

from typing import Any

import torch

from kernforge.tasks.task import resolve_op


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and (set(value) == {"input"} or set(value) == {"step", "output"})


CUDNN_BATCH_NORM = torch.ops.aten.cudnn_batch_norm.default


def _batch_norm_as_cudnn(args: list[Any], kwargs: dict[str, Any]) -> list[Any]:
    """cuDNN's batch norm for the float64 oracle: ATen's own (the same arguments and math), which
    every device has in float64; cuDNN's fourth output, its reserve space, is empty."""
    out = list(torch.ops.aten.native_batch_norm.default(*args, **kwargs))
    return out + [torch.empty(0, dtype=torch.uint8, device=out[0].device)]


class ChainReference:
    """Callable as the chain: `ref(*inputs)` gives the tuple of its outputs."""

    def __init__(self, chain: dict[str, Any], float64: bool = False):
        self.chain = chain
        self.steps = [(resolve_op(s["op"]), s["args"], s["kwargs"]) for s in chain["steps"]]
        self.outputs = [tuple(o) for o in chain["outputs"]]
        self.float64 = float64
        self.mutated: list[int] = []  # a chain never writes its inputs (its in-place steps write its own values)

    def in_float64(self) -> ChainReference:
        """The same chain for the oracle: the steps' floating dtypes become float64."""
        return ChainReference(self.chain, float64=True)

    def __call__(self, *inputs: Any) -> tuple[Any, ...]:
        device = next((t.device for t in inputs if isinstance(t, torch.Tensor)), torch.device("cpu"))
        values: list[list[Any]] = []
        for op, args, kwargs in self.steps:
            call_args = [self._decode(a, inputs, values, device) for a in args]
            call_kwargs = {k: self._decode(v, inputs, values, device) for k, v in kwargs.items()}
            if self.float64 and op._schema.name in ("aten::_softmax", "aten::_log_softmax"):
                call_args[2] = False  # half_to_float: the oracle's input is float64 already
            if self.float64 and op is CUDNN_BATCH_NORM:
                out = _batch_norm_as_cudnn(call_args, call_kwargs)
            else:
                out = op(*call_args, **call_kwargs)
            values.append(list(out) if isinstance(out, (tuple, list)) else [out])
        return tuple(values[step][k] for step, k in self.outputs)

    def _decode(self, value: Any, inputs: tuple[Any, ...], values: list[list[Any]], device: torch.device) -> Any:
        if _is_ref(value):
            return inputs[value["input"]] if "input" in value else values[value["step"]][value["output"]]
        if isinstance(value, list):
            return [self._decode(v, inputs, values, device) for v in value]
        if isinstance(value, str) and value.startswith("device("):
            return device  # a step's device is wherever the chain runs
        if isinstance(value, str) and value.startswith("torch."):
            attr = getattr(torch, value[len("torch."):], value)
            if self.float64 and isinstance(attr, torch.dtype) and attr.is_floating_point:
                return torch.float64
            return attr
        return value


def reference_of(task: Any) -> Any:
    """What the task's outputs are defined by: the ATen op, or the chain's replay."""
    return ChainReference(task.chain) if task.chain else resolve_op(task.op)


def chain_program(chain: dict[str, Any]) -> str:
    """The chain as Python a reader (or an LLM) can run: one line per ATen call."""
    inputs = sorted({v["input"] for s in chain["steps"] for v in _refs((s["args"], s["kwargs"])) if "input" in v})
    # a step whose op returns a tuple (group and batch norm: the output and their statistics) is indexed
    multi = {j for j, s in enumerate(chain["steps"]) if len(resolve_op(s["op"])._schema.returns) > 1}

    def spell(value: Any) -> str:
        if _is_ref(value):
            if "input" in value:
                return f"in{value['input']}"
            return f"s{value['step']}[{value['output']}]" if value["step"] in multi else f"s{value['step']}"
        if isinstance(value, list):
            return "[" + ", ".join(spell(v) for v in value) + "]"
        if isinstance(value, str) and (value.startswith("torch.") or value.startswith("device(")):
            return value if value.startswith("torch.") else "in0.device"
        return repr(value)

    lines = [f"def chain({', '.join(f'in{k}' for k in inputs)}):"]
    for j, step in enumerate(chain["steps"]):
        name = step["op"].replace("::", ".")
        args = [spell(a) for a in step["args"]] + [f"{k}={spell(v)}" for k, v in step["kwargs"].items()]
        lines.append(f"    s{j} = torch.ops.{name}({', '.join(args)})")
    outs = [f"s{step}[{k}]" if step in multi else f"s{step}" for step, k in chain["outputs"]]
    lines.append(f"    return ({', '.join(outs)},)")
    return "\n".join(lines)


def _refs(value: Any) -> list[dict[str, int]]:
    if _is_ref(value):
        return [value]
    if isinstance(value, (list, tuple)):
        return [r for v in value for r in _refs(v)]
    if isinstance(value, dict):
        return [r for v in value.values() for r in _refs(v)]
    return []
