"""A chain's steps lowered to a small program over one domain [rows, N]: loads, fp32 element-wise
functions, reductions over N, and stores. The Triton and C renderers read only this.

Every value is either full (varies along N) or a row value (one per row: a reduction, or a
tensor broadcast along N). Casts between floating dtypes are dropped: the program computes in
fp32 and rounds once at each store, as ATen's opmath does inside one op, so a fused chain is
closer to the float64 oracle than eager's chain, which rounds between its ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kernforge.capture.chains import BATCH_NORMS, out_of_place
from kernforge.propose.families.elementwise import INT32_LIMIT, OUTPUT_DTYPES, formula

INPUT_DTYPES = (*OUTPUT_DTYPES, "torch.bool")  # a mask is read as 0.0 / 1.0

# Triton and C spellings of the functions the expansions below need beyond the family's formulas.
_WHERE = ("tl.where(c != 0.0, a, b)", "(c != 0.0f ? a : b)")


@dataclass
class Program:
    domain: list[int]  # the shape every tensor broadcasts to; rows = prod(domain[:-1]), N = domain[-1]
    inputs: list[dict[str, Any]]  # {"shape", "stride", "dtype", "strides" (per domain dim), "kind"}
    functions: list[tuple[str, str, int]] = field(default_factory=list)  # (triton expr, c expr, arity)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)  # {"node", "shape", "stride", "dtype", "strides", "row"}

    @property
    def rows(self) -> int:
        return math.prod(self.domain[:-1])

    @property
    def n(self) -> int:
        return self.domain[-1]

    @property
    def reductions(self) -> int:
        return sum(1 for node in self.nodes if node["kind"] == "reduce")

    @property
    def int64(self) -> bool:
        spans = [1 + sum((s - 1) * abs(st) for s, st in zip(t["shape"], t["stride"])) for t in self.inputs + self.outputs]
        return max(spans + [self.rows * self.n]) > INT32_LIMIT

    # ---- building

    def add(self, node: dict[str, Any]) -> int:
        node["row"] = self._is_row(node)
        node["level"] = self._level(node)
        self.nodes.append(node)
        return len(self.nodes) - 1

    def load(self, k: int) -> int:
        """The node of input k, one per input however often the steps read it."""
        found = next((i for i, node in enumerate(self.nodes) if node["kind"] == "load" and node["input"] == k), None)
        return found if found is not None else self.add({"kind": "load", "input": k})

    def fn(self, triton: str, c: str, arity: int) -> int:
        key = (triton, c, arity)
        if key not in self.functions:
            self.functions.append(key)
        return self.functions.index(key)

    def _is_row(self, node: dict[str, Any]) -> bool:
        if node["kind"] == "load":
            return self.inputs[node["input"]]["kind"] in ("row", "scalar")
        if node["kind"] in ("const", "reduce"):
            return True
        return all(self.nodes[a]["row"] for a in node["args"])

    def _level(self, node: dict[str, Any]) -> int:
        """Reductions on its path: in a looped kernel, the pass over the row that can first compute it."""
        if node["kind"] == "reduce":
            return self.nodes[node["arg"]]["level"] + 1
        return max((self.nodes[a]["level"] for a in node.get("args", [])), default=0)

    def needed(self) -> list[int]:
        """The nodes the outputs depend on, in order."""
        seen: set[int] = set()
        stack = [o["node"] for o in self.outputs]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            node = self.nodes[n]
            stack += node.get("args", []) + ([node["arg"]] if "arg" in node else [])
        return sorted(seen)


def row_offset(sizes: list[int], strides: list[int], floordiv: str) -> str:
    """Where row r starts in a tensor of these strides over the domain's outer dims, as an
    expression in r (`floordiv`: the renderer's integer division, // or /)."""
    dims = [(size, st) for size, st in zip(sizes, strides) if size > 1]
    merged: list[list[int]] = []
    for size, st in dims:  # an outer dim steps evenly into the next: one dim
        if merged and merged[-1][1] == st * size:
            merged[-1] = [merged[-1][0] * size, st]
        else:
            merged.append([size, st])
    terms, inner = [], ""
    for i, (size, st) in enumerate(reversed(merged)):
        index = f"(r{inner})" if i == len(merged) - 1 else f"(r{inner} % {size})"
        if st:
            terms.append(f"{index} * {st}")
        inner += f" {floordiv} {size}"
    return " + ".join(terms) or "r * 0"


def lower(chain: dict[str, Any], inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> Program | str:
    """The chain as a Program, or why the built-in kernels cannot do it."""
    if any(step["op"] == "aten::native_group_norm.default" for step in chain["steps"]):
        return "a chain led by group norm is the group norm family's (its kernels take the steps as an epilogue)"
    per_channel = _channel_inputs(chain)
    domain = _domain([t["shape"] for k, t in enumerate(inputs) if k not in per_channel]
                     + [t["shape"] for t in outputs])
    if domain is None or per_channel and len(domain) < 2:
        return "the chain's tensors do not broadcast to one shape"
    for k, t in enumerate(inputs):
        if t["dtype"] not in INPUT_DTYPES:
            return f"a chain input of dtype {t['dtype']} has no built-in template"
        if k in per_channel and (len(t["shape"]) != 1 or t["shape"][0] not in (1, domain[1])):
            return f"a batch norm's statistics or affine of shape {t['shape']} is not one value a channel"
    program = Program(domain=domain, inputs=[_on_channels(t, domain) if k in per_channel else _placed(t, domain)
                                             for k, t in enumerate(inputs)])
    values: list[list[Any]] = []
    for step in chain["steps"]:
        made = _lower_step(program, step, values)
        if isinstance(made, str):
            return made
        values.append(made)
    for (step, k), meta in zip(chain["outputs"], outputs):
        node = values[step][k]
        if not isinstance(node, int):
            return "a chain output that is a number has no built-in template"
        placed = _placed(meta, domain)
        if meta["dtype"] not in OUTPUT_DTYPES:
            return f"a chain output of dtype {meta['dtype']} has no built-in template"
        if placed["kind"] not in ("full", "row") or placed["kind"] == "full" and program.nodes[node]["row"]:
            return f"a chain output of shape {meta['shape']} is neither the domain {domain} nor one value a row"
        program.outputs.append({**placed, "node": node, "row": placed["kind"] == "row"})
    if not program.reductions:
        _merge_dims(program)
    return program


def _channel_inputs(chain: dict[str, Any]) -> set[int]:
    """The chain inputs an eval-mode batch norm reads per channel, along dim 1 (its weight, bias,
    mean and variance, each [C])."""
    found = set()
    for step in chain["steps"]:
        if step["op"] in BATCH_NORMS:
            found |= {a["input"] for a in step["args"][1:5] if isinstance(a, dict) and set(a) == {"input"}}
    return found


def _on_channels(t: dict[str, Any], domain: list[int]) -> dict[str, Any]:
    """A [C] tensor placed along the domain's dim 1 (NCHW's channels), broadcast along the rest."""
    strides = [0] * len(domain)
    strides[1] = t["stride"][0] if t["shape"][0] != 1 else 0
    return _kind_of({**t, "strides": strides}, domain)


MERGED_ROW = 512  # a row this long fills a program's lanes; merging further would only cost rows


def _merge_dims(program: Program) -> None:
    """The domain's last dim merged with the one before, while every tensor steps through both
    evenly and a row is short: an element-wise chain over [N, C, 56, 56] runs over rows of 3136
    rather than of 56, and over [N, C, 7, 7] rows of 49 rather than 7, which fill a program's lanes.
    Rows stay many: they are what a CPU kernel's threads share."""
    tensors = program.inputs + program.outputs
    while len(program.domain) > 1 and program.domain[-1] < MERGED_ROW:
        outer, inner = program.domain[-2], program.domain[-1]
        if not (outer == 1 or inner == 1 or all(t["strides"][-2] == t["strides"][-1] * inner for t in tensors)):
            break
        program.domain[-2:] = [outer * inner]
        for t in tensors:  # a dim of size 1 steps nowhere: the other one's stride
            t["strides"][-2:] = [t["strides"][-2] if inner == 1 else t["strides"][-1]]
    for k, t in enumerate(program.inputs):
        program.inputs[k] = _kind_of(t, program.domain)
    for j, o in enumerate(program.outputs):
        program.outputs[j] = {**_kind_of(o, program.domain), "node": o["node"], "row": o["row"]}


def _domain(shapes: list[list[int]]) -> list[int] | None:
    rank = max(len(s) for s in shapes)
    domain = [1] * rank
    for shape in shapes:
        for i, size in enumerate(shape, start=rank - len(shape)):
            if size != 1 and domain[i] not in (1, size):
                return None
            domain[i] = max(domain[i], size) if size != 1 else domain[i]
    return domain or None


def _placed(t: dict[str, Any], domain: list[int]) -> dict[str, Any]:
    """The tensor's stride along each domain dim (0 where it broadcasts) and its kind: full,
    row (constant along N), vec (the same for every row), scalar."""
    pad = len(domain) - len(t["shape"])
    strides = [0] * pad + [st if size != 1 else 0 for size, st in zip(t["shape"], t["stride"])]
    return _kind_of({**t, "strides": strides}, domain)


def _kind_of(t: dict[str, Any], domain: list[int]) -> dict[str, Any]:
    strides = t["strides"]
    outer, inner = strides[:-1], strides[-1]
    one_row = math.prod(domain[:-1]) == 1  # a 1-D chain: a tensor along N is all of the domain, not a row's share
    kind = "scalar" if not any(strides) else "row" if inner == 0 else "vec" if not any(outer) and not one_row \
        else "full"
    return {**t, "kind": kind}


def _lower_step(program: Program, step: dict[str, Any], values: list[list[Any]]) -> list[Any] | str:
    op, args, kwargs = step["op"], step["args"], step["kwargs"]

    def value(ref: Any) -> Any:
        if isinstance(ref, dict) and set(ref) == {"input"}:
            return program.load(ref["input"])
        if isinstance(ref, dict) and set(ref) == {"step", "output"}:
            return values[ref["step"]][ref["output"]]
        return ref

    if op == "aten::_to_copy.default":
        return [value(args[0])]
    if op in BATCH_NORMS:
        return _batch_norm(program, [value(a) for a in args[:5]], float(args[BATCH_NORMS[op][1]]))
    op = out_of_place(op)  # an in-place step (relu_) writes a value the chain made: the value is what counts
    name = op.split("::", 1)[1].split(".")[0]
    if op in ("aten::sum.dim_IntList", "aten::mean.dim", "aten::amax.default", "aten::amin.default"):
        how = {"sum": "sum", "mean": "sum", "amax": "max", "amin": "min"}[name]
        scale = 1.0 / program.n if name == "mean" else None
        return [program.add({"kind": "reduce", "op": how, "arg": value(args[0]), "scale": scale,
                             "nan": how != "sum"})]
    if op in ("aten::_softmax.default", "aten::_log_softmax.default"):
        return [_softmax(program, value(args[0]), log=name == "_log_softmax")]
    if op == "aten::native_layer_norm.default":
        return _layer_norm(program, value(args[0]), value(args[2]), value(args[3]), float(args[4]))
    if op == "aten::_fused_rms_norm.default":
        eps = args[3] if len(args) > 3 else kwargs.get("eps")
        if eps is None:
            return "rms_norm with its default eps has no built-in template"
        return _rms_norm(program, value(args[0]), value(args[2]) if len(args) > 2 else None, float(eps))
    if op == "aten::where.self":
        return [_call(program, *_WHERE, [value(args[1]), value(args[2]), value(args[0])])]
    if op == "aten::masked_fill.Scalar":
        return [_call(program, *_WHERE, [float(args[2]), value(args[0]), value(args[1])])]
    made = formula(op, args, kwargs)
    if isinstance(made, str):
        return f"in a chain: {made}"
    triton, c, number = made
    tensors = [value(a) for a in args[:2] if isinstance(a, dict)]
    if number is not None:  # a number operand is b
        return [_call(program, triton, c, [tensors[0], number])]
    return [_call(program, triton, c, tensors)]


def _call(program: Program, triton: str, c: str, args: list[Any]) -> int:
    """An element-wise node of 1-3 operands (a, b, c); numbers become constant nodes."""
    nodes = [a if isinstance(a, int) else program.add({"kind": "const", "value": float(a)}) for a in args]
    return program.add({"kind": "ew", "fn": program.fn(triton, c, len(nodes)), "args": nodes})


def _reduce(program: Program, x: int, how: str, scale: float | None = None) -> int:
    return program.add({"kind": "reduce", "op": how, "arg": x, "scale": scale, "nan": False})


def _softmax(program: Program, x: int, log: bool) -> int:
    """max, exp(x - max), its sum; then e / sum, or x - max - log(sum)."""
    top = _reduce(program, x, "max")
    shifted = _call(program, "a - b", "a - b", [x, top])
    e = _call(program, "tl.exp(a)", "kf_exp(a)", [shifted])
    total = _reduce(program, e, "sum")
    if log:
        return _call(program, "a - tl.log(b)", "a - logf(b)", [shifted, total])
    return _call(program, "a / b", "a / b", [e, total])


def _layer_norm(program: Program, x: int, w: Any, b: Any, eps: float) -> list[Any]:
    """mean, then the variance of x - mean (two passes: exact where a one-pass E[x^2] - mean^2 is not)."""
    mean = _reduce(program, x, "sum", 1.0 / program.n)
    d = _call(program, "a - b", "a - b", [x, mean])
    var = _reduce(program, _call(program, "a * a", "a * a", [d]), "sum", 1.0 / program.n)
    rstd = _call(program, "tl.rsqrt(a + b)", "1.0f / sqrtf(a + b)", [var, eps])
    y = _call(program, "a * b", "a * b", [d, rstd])
    if isinstance(w, int):
        y = _call(program, "a * b", "a * b", [y, w])
    if isinstance(b, int):
        y = _call(program, "a + b", "a + b", [y, b])
    return [y, mean, rstd]


def _batch_norm(program: Program, args: list[Any], eps: float) -> list[Any]:
    """x * alpha + beta, with alpha = weight * rsqrt(var + eps) and beta = bias - mean * alpha per
    channel (row values, once a row), as ATen's CPU kernel computes eval mode: (x - mean) first
    overflows float32 where x and mean are near its range and the result is not. The op's other
    outputs (the saved statistics, empty in eval) are never a chain's."""
    x, w, b, mean, var = args
    alpha = _call(program, "tl.rsqrt(a + b)", "1.0f / sqrtf(a + b)", [var, eps])
    if isinstance(w, int):
        alpha = _call(program, "a * b", "a * b", [alpha, w])
    beta = _call(program, "-(a * b)", "-(a * b)", [mean, alpha])
    if isinstance(b, int):
        beta = _call(program, "a + b", "a + b", [b, beta])
    y = _call(program, "a * b + c", "a * b + c", [x, alpha, beta])
    return [y, None, None, None]  # cuDNN's returns four values, ATen's three


def _rms_norm(program: Program, x: int, w: Any, eps: float) -> list[Any]:
    ms = _reduce(program, _call(program, "a * a", "a * a", [x]), "sum", 1.0 / program.n)
    rstd = _call(program, "tl.rsqrt(a + b)", "1.0f / sqrtf(a + b)", [ms, eps])
    y = _call(program, "a * b", "a * b", [x, rstd])
    if isinstance(w, int):
        y = _call(program, "a * b", "a * b", [y, w])
    return [y, rstd]
