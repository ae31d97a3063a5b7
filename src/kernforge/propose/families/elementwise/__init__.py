"""Element-wise ops: y = f(a) or y = f(a, b), each output element from the elements at its index.

    unary:  relu silu gelu (approximate none|tanh) sigmoid tanh exp log neg abs sqrt rsqrt
            reciprocal erf cos sin hardswish hardsigmoid leaky_relu elu selu celu softplus mish
            hardtanh clamp clamp_min clamp_max (number bounds) threshold hardshrink softshrink
            pow.Tensor_Scalar (y = a ** c)
    binary: add sub (y = a +- alpha b) mul div maximum minimum, .Tensor and .Scalar overloads,
            rsub.Scalar (y = c - alpha a); broadcasting, a 0-dim tensor or a number on either side

Memory-bound: the floor is one read of each full-size operand and one write of y (6 bytes an
element for a bf16 binary op, 4.2 TB/s on the H200: 64M elements in 96 us). Values are
computed in fp32 and rounded once at the store, as ATen's opmath does.

One kernel file per backend and variant serves every op: the op is the function `op(a, b)`
in the file's constants block (a kernel_file.Snippet), with the op's numbers (alpha, a slope,
clamp bounds, a number operand) baked into it; the rest of the block is the layout.

Indexing. The output is walked in its own memory order (a channels-last output is written
contiguously), and dims that every operand can merge are merged (TensorIterator's
coalescing), so (N,C,H,W) * (C,1,1) becomes [N, C, H*W] and (rows, cols) + (cols,) becomes
[rows, cols]. Each operand is then one of
    same     laid out like the output: its offset is the output's, a vectorised flat load
    strided  broadcast or laid out otherwise: offset from the output index, strides baked in
    scalar   a 0-dim (or fully broadcast) tensor: one load per program
    none     a Python number (baked into op) or no second operand
Adding an op is one line in UNARY or BINARY: an expression over the fp32 values a and b,
once for Triton and once for C (which CUDA shares).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kernforge.propose.builtin import kernel_file
from kernforge.propose.builtin.family import Family, Hardware, Writer, Writers
from kernforge.propose.builtin.space import Param, Space, Variant
from kernforge.propose.families.common import (
    ITEMSIZE,
    c_element,
    cuda_element,
    is_tensor,
    next_pow2,
    split_kwargs,
)
from kernforge.records.task import KernelTask

OUTPUT_DTYPES = {"torch.float32": "float32", "torch.bfloat16": "bfloat16", "torch.float16": "float16"}
# 0-dim tensors take no part in type promotion against full tensors: any of these may join.
SCALAR_TENSOR_DTYPES = ("torch.float32", "torch.float64", "torch.float16", "torch.bfloat16",
                        "torch.int32", "torch.int64")
INT32_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class Expr:
    """y as an expression over fp32 `a` (self) and `b` (other); {name} are baked constants."""
    triton: str
    c: str
    uses_exp: bool = False  # the C backend can swap libm's expf for a vectorisable polynomial


# Triton: tl.exp, tl.log, tl.sqrt, tl.rsqrt, tl.erf, tl.abs, tl.where, tl.maximum, tl.minimum
# exist in triton 3.6 and 3.8; tl.tanh does not, hence kf_tanh.
# maximum/minimum propagate NaN like torch (tl.maximum would drop it on the GPU); relu keeps NaN.
UNARY = {
    "relu": Expr("tl.where(a < 0.0, 0.0, a)", "(a < 0.0f ? 0.0f : a)"),
    "silu": Expr("a / (1.0 + tl.exp(-a))", "a / (1.0f + kf_exp(-a))", True),
    "gelu": Expr("0.5 * a * (1.0 + tl.erf(a * 0.7071067811865476))",
                 "0.5f * a * (1.0f + erff(a * 0.70710678118654752f))"),
    "gelu_tanh": Expr("0.5 * a * (1.0 + kf_tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))",
                      "0.5f * a * (1.0f + kf_tanh(0.79788456080286536f * (a + 0.044715f * a * a * a)))", True),
    "sigmoid": Expr("1.0 / (1.0 + tl.exp(-a))", "1.0f / (1.0f + kf_exp(-a))", True),
    "tanh": Expr("kf_tanh(a)", "kf_tanh(a)", True),
    "exp": Expr("tl.exp(a)", "kf_exp(a)", True),
    "log": Expr("tl.log(a)", "logf(a)"),
    "neg": Expr("-a", "-a"),
    "abs": Expr("tl.abs(a)", "fabsf(a)"),
    "sqrt": Expr("tl.sqrt(a)", "sqrtf(a)"),
    "rsqrt": Expr("tl.rsqrt(a)", "1.0f / sqrtf(a)"),
    "reciprocal": Expr("1.0 / a", "1.0f / a"),
    "erf": Expr("tl.erf(a)", "erff(a)"),
    "cos": Expr("tl.cos(a)", "cosf(a)"),  # rotary embeddings' cos and sin, a chain's first steps
    "sin": Expr("tl.sin(a)", "sinf(a)"),
    "hardswish": Expr("a * tl.minimum(tl.maximum(a + 3.0, 0.0), 6.0) / 6.0",
                      "a * KF_CLAMP(a + 3.0f, 0.0f, 6.0f) / 6.0f"),
    # NaN kept, as eager's clamp keeps it (tl.maximum's default lets the GPU drop it: NaN -> 0.5)
    "hardsigmoid": Expr("tl.minimum(tl.maximum(a + 3.0, 0.0, propagate_nan=tl.PropagateNan.ALL), 6.0, "
                        "propagate_nan=tl.PropagateNan.ALL) / 6.0", "KF_CLAMP(a + 3.0f, 0.0f, 6.0f) / 6.0f"),
    "leaky_relu": Expr("tl.where(a > 0.0, a, a * {slope})", "(a > 0.0f ? a : a * {slope})"),
    "elu": Expr("tl.where(a > 0.0, a * {scale}, (tl.exp(a * {input_scale}) - 1.0) * {neg_scale})",
                "(a > 0.0f ? a * {scale} : (kf_exp(a * {input_scale}) - 1.0f) * {neg_scale})", True),
    # softplus as ATen: x where x * beta > threshold, else log1p(exp(x * beta)) / beta
    "softplus": Expr("tl.where(a * {beta} > {threshold}, a, tl.log(1.0 + tl.exp(a * {beta})) / {beta})",
                     "(a * {beta} > {threshold} ? a : log1pf(kf_exp(a * {beta})) / {beta})", True),
    # mish: x tanh(softplus(x)) = x n / (n + 2) with n = e^x (e^x + 2): one exp where the direct form
    # takes an exp, a log and tanh's exp (H200, (8192,8192) bf16: the direct form ran at 1.81x the
    # memory floor, bench/results/h200/issue19); past 20 it is x to fp32's precision
    "mish": Expr("tl.where(a > 20.0, a, a * (tl.exp(a) * (tl.exp(a) + 2.0)) / (tl.exp(a) * (tl.exp(a) + 2.0) + 2.0))",
                 "(a > 20.0f ? a : a * (kf_exp(a) * (kf_exp(a) + 2.0f)) / (kf_exp(a) * (kf_exp(a) + 2.0f) + 2.0f))",
                 True),
    # clamps compare rather than take tl.minimum/maximum, so that NaN passes through as in torch
    "clamp": Expr("tl.where(tl.where(a < {lo}, {lo}, a) > {hi}, {hi}, tl.where(a < {lo}, {lo}, a))",
                  "((a < {lo} ? {lo} : a) > {hi} ? {hi} : (a < {lo} ? {lo} : a))"),
    "clamp_min": Expr("tl.where(a < {lo}, {lo}, a)", "(a < {lo} ? {lo} : a)"),
    "clamp_max": Expr("tl.where(a > {hi}, {hi}, a)", "(a > {hi} ? {hi} : a)"),
    "threshold": Expr("tl.where(a <= {threshold}, {value}, a)", "(a <= {threshold} ? {value} : a)"),
    "hardshrink": Expr("tl.where((a >= -({lambd})) & (a <= {lambd}), 0.0, a)",
                       "((a >= -({lambd})) && (a <= {lambd}) ? 0.0f : a)"),
    "softshrink": Expr("tl.where(a > {lambd}, a - ({lambd}), tl.where(a < -({lambd}), a + ({lambd}), a * 0.0))",
                       "(a > {lambd} ? a - ({lambd}) : a < -({lambd}) ? a + ({lambd}) : a * 0.0f)"),
}
# ops that are an entry above with constants: hardtanh is a clamp; selu and celu are elus
ALIASES = {"hardtanh": "clamp", "selu": "elu", "celu": "elu"}
SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805  # torch.nn.SELU's constants

BINARY = {
    "add": Expr("a + {alpha_b}", "a + {alpha_b}"),
    "sub": Expr("a - {alpha_b}", "a - {alpha_b}"),
    "rsub": Expr("b - {alpha_a}", "b - {alpha_a}"),
    "mul": Expr("a * b", "a * b"),
    "div": Expr("a / b", "a / b"),
    "maximum": Expr("tl.where((a > b) | (a != a), a, b)", "((a > b) | (a != a) ? a : b)"),
    "minimum": Expr("tl.where((a < b) | (a != a), a, b)", "((a < b) | (a != a) ? a : b)"),
}

# (name, overload) -> number of operands. Anything else named here is refused with a reason.
SUPPORTED = {**{(name, "default"): 1 for name in [*UNARY, *ALIASES] if name != "gelu_tanh"},
             ("pow", "Tensor_Scalar"): 1,
             **{(name, overload): 2 for name in ("add", "sub", "mul", "div") for overload in ("Tensor", "Scalar")},
             ("rsub", "Scalar"): 2, ("maximum", "default"): 2, ("minimum", "default"): 2}
KNOWN_NAMES = {name for name, _ in SUPPORTED}


# ---------------------------------------------------------------- what is supported

def match(task: KernelTask) -> dict[str, Any] | str:
    name, overload = _split_op(task.op)
    reason = _op_reason(task.op, name, overload)
    if reason:
        return reason
    args, kwargs = split_kwargs(task.args)
    expr = _expression(name, args, kwargs)
    if isinstance(expr, str):
        return expr
    if len(task.outputs) != 1:
        return f"{task.op} with {len(task.outputs)} outputs has no built-in element-wise template"
    out = task.outputs[0]
    operands = _operands(name, args, SUPPORTED[(name, overload)], out)
    if isinstance(operands, str):
        return operands
    layout = _layout(out, operands)
    if isinstance(layout, str):
        return f"{name}: {layout}"
    key, consts = expr
    return {"op": task.op, "name": name, "expr": key, "consts": consts, "dtype": OUTPUT_DTYPES[out["dtype"]],
            "out_shape": list(out["shape"]), "out_stride": list(out["stride"]), **layout}


def _split_op(op: str) -> tuple[str, str]:
    """'aten::add.Tensor' -> ('add', 'Tensor')."""
    rest = op.split("::", 1)[-1]
    name, _, overload = rest.partition(".")
    return name, overload or "default"


def _op_reason(op: str, name: str, overload: str) -> str | None:
    if not op.startswith("aten::"):
        return f"no built-in template for {op}"
    if name.endswith("_") and name[:-1] in KNOWN_NAMES:
        return (f"in-place {op} writes into its input: the built-in element-wise kernels never modify "
                "their inputs (the checks would see a changed input)")
    if name in KNOWN_NAMES and (overload == "out" or overload.endswith("_out")):
        return f"{op} writes into a given out= tensor: no built-in template for out= variants"
    if (name, overload) in SUPPORTED:
        return None
    if (name, overload) == ("div", "Tensor_mode") or (name, overload) == ("div", "Scalar_mode"):
        return f"{op}: division with a rounding_mode has no built-in template (only true division)"
    if name in KNOWN_NAMES:
        overloads = sorted(o for n, o in SUPPORTED if n == name)
        return f"{op}: only the {', '.join(overloads)} overload(s) of {name} have a built-in template"
    return f"no built-in template for {op}"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, complex)


def _expression(name: str, args: list[Any], kwargs: dict[str, Any]) -> tuple[str, dict[str, float]] | str:
    """Which table entry computes the op, and the constants its template needs."""
    def arg(i: int, key: str, default: Any) -> Any:
        return args[i] if len(args) > i else kwargs.get(key, default)

    if name == "gelu":
        approximate = kwargs.get("approximate", "none")
        if approximate not in ("none", "tanh"):
            return f"gelu with approximate={approximate!r} has no built-in template"
        return ("gelu" if approximate == "none" else "gelu_tanh"), {}
    if name == "leaky_relu":
        slope = arg(1, "negative_slope", 0.01)
        return ("leaky_relu", {"slope": float(slope)}) if _number(slope) else "leaky_relu with a non-number slope"
    if name == "elu":
        alpha, scale, input_scale = arg(1, "alpha", 1.0), arg(2, "scale", 1.0), arg(3, "input_scale", 1.0)
        if not all(map(_number, (alpha, scale, input_scale))):
            return "elu with non-number parameters has no built-in template"
        return "elu", {"scale": float(scale), "input_scale": float(input_scale), "neg_scale": float(alpha * scale)}
    if name in ("selu", "celu"):
        alpha = SELU_ALPHA if name == "selu" else arg(1, "alpha", 1.0)
        scale = SELU_SCALE if name == "selu" else 1.0
        if not _number(alpha) or alpha == 0:
            return f"{name} with alpha {alpha!r} has no built-in template"
        input_scale = 1.0 if name == "selu" else 1.0 / alpha
        return "elu", {"scale": scale, "input_scale": input_scale, "neg_scale": float(alpha * scale)}
    if name == "softplus":
        beta, threshold = arg(1, "beta", 1.0), arg(2, "threshold", 20.0)
        if not (_number(beta) and _number(threshold)) or beta == 0:
            return "softplus with a zero or non-number beta or threshold has no built-in template"
        return "softplus", {"beta": float(beta), "threshold": float(threshold)}
    if name in ("clamp", "hardtanh", "clamp_min", "clamp_max"):
        return _clamp(name, arg)
    if name == "threshold":
        threshold, value = arg(1, "threshold", None), arg(2, "value", None)
        if not (_number(threshold) and _number(value)):
            return "threshold with non-number threshold or value has no built-in template"
        return "threshold", {"threshold": float(threshold), "value": float(value)}
    if name in ("hardshrink", "softshrink"):
        lambd = arg(1, "lambd", 0.5)
        return (name, {"lambd": float(lambd)}) if _number(lambd) else f"{name} with a non-number lambd"
    if name == "pow":
        exponent = arg(1, "exponent", None)
        return ("pow", {"exponent": float(exponent)}) if _number(exponent) else "pow with a non-number exponent"
    if name in ("add", "sub", "rsub"):
        alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
        return (name, {"alpha": float(alpha)}) if _number(alpha) else f"{name} with a non-number alpha"
    return name, {}


def _clamp(name: str, arg: Any) -> tuple[str, dict[str, float]] | str:
    """clamp(min, max) with either bound absent, clamp_min, clamp_max, hardtanh(min_val, max_val)."""
    if name == "hardtanh":
        lo, hi = arg(1, "min_val", -1.0), arg(2, "max_val", 1.0)
    elif name == "clamp_min":
        lo, hi = arg(1, "min", None), None
    elif name == "clamp_max":
        lo, hi = None, arg(1, "max", None)
    else:
        lo, hi = arg(1, "min", None), arg(2, "max", None)
    if any(v is not None and not _number(v) for v in (lo, hi)):
        return f"{name} with a tensor bound has no built-in template (only number bounds)"
    if lo is None and hi is None:
        return f"{name} with neither bound has no built-in template"
    if hi is None:
        return "clamp_min", {"lo": float(lo)}
    if lo is None:
        return "clamp_max", {"hi": float(hi)}
    return "clamp", {"lo": float(lo), "hi": float(hi)}


def _operands(name: str, args: list[Any], arity: int, out: dict[str, Any]) -> list[dict[str, Any]] | str:
    """self and other: tensors (in order: their index among the C backend's inputs) or numbers."""
    if out.get("dtype") not in OUTPUT_DTYPES:
        return f"{name} with a {out.get('dtype')} output has no built-in template (float32, bfloat16, float16)"
    operands, tensors = [], 0
    for pos in range(arity):
        value = args[pos] if pos < len(args) else None
        role = "ab"[pos]
        if is_tensor(value):
            reason = _dtype_reason(name, value, out)
            if reason:
                return reason
            operands.append({"role": role, "pos": pos, "tensor": value, "input": tensors})
            tensors += 1
        elif _number(value) and pos > 0:
            operands.append({"role": role, "pos": pos, "kind": "const", "value": float(value)})
        else:
            return f"{name} with a {type(value).__name__} as argument {pos} has no built-in template"
    return operands


def _dtype_reason(name: str, t: dict[str, Any], out: dict[str, Any]) -> str | None:
    """Full tensors must have the output's dtype; a 0-dim one may differ (it never sets the dtype)."""
    full = len(t["shape"]) > 0 or len(out["shape"]) == 0
    if full and t["dtype"] != out["dtype"]:
        return (f"{name} of a {t['dtype']} tensor into a {out['dtype']} output: type promotion "
                "has no built-in template")
    if not full and t["dtype"] not in SCALAR_TENSOR_DTYPES:
        return f"{name} with a 0-dim {t['dtype']} tensor has no built-in template"
    return None


def _layout(out: dict[str, Any], operands: list[dict[str, Any]]) -> dict[str, Any] | str:
    """The output's dims in memory order, coalesced, and each operand's kind and strides over them."""
    shape, stride = out["shape"], out["stride"]
    numel = math.prod(shape)
    if numel == 0:
        return "an empty output needs no kernel"
    order = sorted((d for d in range(len(shape)) if shape[d] > 1), key=lambda d: -stride[d])
    expect = 1
    for d in reversed(order):
        if stride[d] != expect:
            return "an output with gaps or overlapping elements has no built-in template"
        expect *= shape[d]
    tensors = [o for o in operands if "tensor" in o]
    per_dim = []
    for d in order:
        strides = [stride[d]]
        for o in tensors:
            s = _broadcast_stride(o["tensor"], shape, d)
            if s is None:
                return f"operand {o['role']} of shape {o['tensor']['shape']} does not broadcast to {shape}"
            strides.append(s)
        per_dim.append((shape[d], strides))
    sizes, strides = _coalesce(per_dim or [(1, [1] + [0] * len(tensors))])
    out_strides = [s[0] for s in strides]
    facts_operands = []
    max_offset = numel
    for i, o in enumerate(operands):
        if "tensor" not in o:
            facts_operands.append({k: o[k] for k in ("role", "pos", "kind", "value")})
            continue
        st = [s[i + 1] for s in strides]
        kind = "same" if st == out_strides else "scalar" if not any(st) else "strided"
        max_offset = max(max_offset, sum((n - 1) * s for n, s in zip(sizes, st)) + 1)
        t = o["tensor"]
        facts_operands.append({"role": o["role"], "pos": o["pos"], "kind": kind, "strides": st,
                               "input": o["input"], "dtype": t["dtype"].replace("torch.", ""),
                               "shape": list(t["shape"]), "stride": list(t["stride"])})
    return {"numel": numel, "sizes": sizes, "operands": facts_operands,
            "int64": max_offset > INT32_LIMIT}


def _broadcast_stride(t: dict[str, Any], shape: list[int], d: int) -> int | None:
    """The operand's stride along output dim d: 0 where it is broadcast (missing or of size 1)."""
    k = d - (len(shape) - len(t["shape"]))
    if k < 0 or t["shape"][k] == 1:
        return 0
    return t["stride"][k] if t["shape"][k] == shape[d] else None


def _coalesce(per_dim: list[tuple[int, list[int]]]) -> tuple[list[int], list[list[int]]]:
    """Merge an outer dim into the next inner one where every operand steps evenly across both."""
    sizes, strides = [per_dim[0][0]], [per_dim[0][1]]
    for size, st in per_dim[1:]:
        if all(outer == inner * size for outer, inner in zip(strides[-1], st)):
            sizes[-1] *= size
            strides[-1] = st
        else:
            sizes.append(size)
            strides.append(st)
    return sizes, strides


# ---------------------------------------------------------------- spaces

BLOCKS = (256, 512, 1024, 2048, 4096, 8192, 16384)
WARPS = (2, 4, 8, 16)
PROGRAMS_PER_SM = (0, 1, 2, 4, 8)  # 0: one program per block; else a persistent grid of this many per SM
TRITON_DIMS = 4  # the Triton kernels take the merged dims as four constexprs (outer ones of size 1)
CUDA_THREADS = (64, 128, 256, 512, 1024)
CUDA_PACKS = (1, 2, 4, 8)  # packs per thread: loads in flight per thread


def _two_d(facts: dict[str, Any]) -> bool:
    return len(facts["sizes"]) >= 2


def _cpu_space(facts: dict[str, Any], hw: Hardware) -> Space:
    # the polynomial exp only where the op calls exp
    math_param = (Param("math", ("libm", "poly")),) if _expr(facts).uses_exp else ()
    # gcc accepts no `#pragma GCC unroll` after `omp parallel for`: the flat loop is plain or simd.
    variants = [Variant("flat", (Param("inner_loop", ("plain", "simd")), *math_param))]
    if _two_d(facts):
        variants.append(Variant("rows", (Param("inner_loop", ("plain", "unroll4", "unroll8", "simd")),
                                         *math_param)))
    return Space(variants)


def _triton_space(facts: dict[str, Any], hw: Hardware) -> Space | None:
    if len(facts["sizes"]) > TRITON_DIMS:
        return None
    blocks = tuple(b for b in BLOCKS if b <= max(256, next_pow2(facts["numel"])))  # larger: lanes masked off

    def valid(point: dict[str, Any]) -> bool:
        per_thread = point["block"] // (32 * point["num_warps"])
        return 1 <= per_thread <= 32  # past 32 values a thread (x3 operands in fp32) registers spill

    params = (Param("block", blocks), Param("num_warps", WARPS), Param("programs_per_sm", PROGRAMS_PER_SM))
    variants = [Variant("flat", params, valid)]
    if _two_d(facts):
        variants.append(Variant("tile2d", params, valid))
    return Space(variants)


def _cuda_vecs(facts: dict[str, Any]) -> tuple[int, ...]:
    """Pack widths: one load of at most 16 bytes, no wider than the tensor."""
    item = ITEMSIZE[facts["dtype"]]
    return tuple(v for v in (1, 2, 4, 8) if v * item <= 16 and (v == 1 or v <= facts["numel"]))


def _cuda_space(facts: dict[str, Any]) -> Space:
    def valid(point: dict[str, Any]) -> bool:
        # a block's tile no larger than the tensor (a block of the fewest threads at least)
        tile = point["threads"] * point["packs"] * point["vec"]
        return tile <= max(next_pow2(facts["numel"]), CUDA_THREADS[0] * point["vec"])

    return Space.single([Param("vec", _cuda_vecs(facts)), Param("threads", CUDA_THREADS),
                         Param("packs", CUDA_PACKS)], valid)


# ---------------------------------------------------------------- starting rules

def _cpu_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    point = {"variant": "rows" if _rows_pay(facts) else "flat", "inner_loop": "simd"}
    if _expr(facts).uses_exp:
        point["math"] = "poly"
    return point


def _triton_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    # 16 KB of output per program (4096 fp32 / 8192 bf16 elements, 16 or 32 per thread with 8 warps:
    # 128-bit accesses, several in flight), halved until there are four programs per SM. Measured on
    # the H200 (triton 3.6): silu bf16 64M elements 0.070 ms, 90% of copy bandwidth (eager 0.073);
    # (8192,8192) * (8192,1) bf16 0.071 ms against eager's 0.164; at 4M elements 4096 beat 8192.
    # (Timed by hand while the family was written; not kept in bench/results.)
    block = 16384 // ITEMSIZE[facts["dtype"]]
    while block > 1024 and math.ceil(facts["numel"] / block) < 4 * hw.sms:
        block //= 2
    block = max(256, min(block, next_pow2(facts["numel"])))
    return {"variant": "tile2d" if _rows_pay(facts) else "flat", "block": block,
            "num_warps": 8 if block >= 2048 else 4 if block >= 512 else 2, "programs_per_sm": 0}


def _cuda_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    # 16-byte packs, 256 threads, and 16 KB of output per block (four packs a thread) as Triton's
    # rule; fewer packs a thread until there are four blocks per SM.
    vec = max(_cuda_vecs(facts))
    point = {"vec": vec, "threads": 256, "packs": 4}
    while point["packs"] > 1 and math.ceil(facts["numel"] / (256 * point["packs"] * vec)) < 4 * hw.sms:
        point["packs"] //= 2
    while not _cuda_space(facts).contains(point) and point["threads"] > CUDA_THREADS[0]:
        point["threads"] //= 2  # a tensor smaller than one block
    return point


def _rows_pay(facts: dict[str, Any]) -> bool:
    """A [rows, cols] walk pays off when a broadcast operand is there and rows are not tiny:
    it replaces a division per element by one per row and loads the broadcast operand once."""
    strided = any(o.get("kind") == "strided" for o in facts["operands"])
    return strided and _two_d(facts) and facts["sizes"][-1] >= 16


# ---------------------------------------------------------------- render

def _triton_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    return _render(facts, f"triton_{point['variant']}.py", {
        "op": kernel_file.Snippet(_triton_op(facts)), **_triton_layout(facts), "INT64": facts["int64"],
        "BLOCK": point["block"], "NUM_WARPS": point["num_warps"], "PROGRAMS_PER_SM": point["programs_per_sm"]})


def _cuda_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    return _render(facts, "cuda.cu", {
        "op": kernel_file.Snippet(_c_op(facts, "static __device__ __forceinline__ float")),
        **_c_layout(facts), **cuda_element(facts["dtype"]), "INDEX_T": "int64_t" if facts["int64"] else "int32_t",
        "VEC": point["vec"], "THREADS": point["threads"], "PACKS": point["packs"]})


def _cpu_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    return _render(facts, f"cpu_{point['variant']}.c", {
        "op": kernel_file.Snippet(_c_op(facts, "static inline float")), **_c_layout(facts),
        **c_element(facts["dtype"]), "POLY_EXP": point.get("math") == "poly",
        "INNER_LOOP": point["inner_loop"].upper()})


def _render(facts: dict[str, Any], name: str, constants: dict[str, Any]) -> str:
    text = kernel_file.read(__name__, name)
    return kernel_file.render(text, facts["op"], constants, kernel_file.style_of(name))


def _number_operand(facts: dict[str, Any]) -> float | None:
    return next((o["value"] for o in facts["operands"] if o["kind"] == "const"), None)


def _triton_op(facts: dict[str, Any]) -> str:
    lines = ["@triton.jit", "def op(a, b):"]
    number = _number_operand(facts)
    if number is not None:
        lines.append(f"    b = {lit_triton(number)}  # the op's number operand")
    lines.append(f"    return {_filled(_expr(facts).triton, facts, lit_triton)}")
    return "\n".join(lines) + "\n\n"


def _c_op(facts: dict[str, Any], declaration: str) -> str:
    number = _number_operand(facts)
    setup = f"b = {lit_c(number)}; /* the op's number operand */ " if number is not None else ""
    return f"{declaration} op(float a, float b) {{ {setup}return {_filled(_expr(facts).c, facts, lit_c)}; }}"


def _operand(facts: dict[str, Any], role: str) -> dict[str, Any] | None:
    """The tensor operand `role` (a: self, b: other), None where it is a number or absent."""
    return next((o for o in facts["operands"] if o["role"] == role and o["kind"] != "const"), None)


def _triton_layout(facts: dict[str, Any]) -> dict[str, Any]:
    pad = TRITON_DIMS - len(facts["sizes"])
    constants: dict[str, Any] = {"NUMEL": facts["numel"], "SIZES": (1,) * pad + tuple(facts["sizes"]),
                                 "OUT_SHAPE": tuple(facts["out_shape"]), "OUT_STRIDE": tuple(facts["out_stride"])}
    for role in "ab":
        o = _operand(facts, role)
        prefix = role.upper()
        constants |= {f"{prefix}_KIND": o["kind"] if o else "none",
                      f"{prefix}_STRIDES": (0,) * pad + tuple(o["strides"]) if o else (0,) * TRITON_DIMS,
                      f"{prefix}_SHAPE": tuple(o["shape"]) if o else None,
                      f"{prefix}_STRIDE": tuple(o["stride"]) if o else None}
    return constants


def _c_list(values: list[int]) -> str:
    return ", ".join(map(str, values)) or "0"  # a 0-dim tensor's arrays hold one unused 0


def _c_layout(facts: dict[str, Any]) -> dict[str, Any]:
    ndims = len(facts["sizes"])
    constants: dict[str, Any] = {"NUMEL": f"{facts['numel']}LL", "NDIMS": ndims, "SIZES": _c_list(facts["sizes"]),
                                 "OUT_NDIM": len(facts["out_shape"]), "OUT_SHAPE": _c_list(facts["out_shape"]),
                                 "OUT_STRIDE": _c_list(facts["out_stride"])}
    for role in "ab":
        o = _operand(facts, role)
        prefix = role.upper()
        constants |= {f"{prefix}_KIND": o["kind"].upper() if o else "NONE",
                      f"{prefix}_STRIDES": _c_list(o["strides"] if o else [0] * ndims),
                      f"{prefix}_NDIM": len(o["shape"]) if o else 0,
                      f"{prefix}_SHAPE": _c_list(o["shape"] if o else []),
                      f"{prefix}_STRIDE": _c_list(o["stride"] if o else [])}
    return constants


# ---------------------------------------------------------------- explain

_REASONS: dict[str, dict[Any, str]] = {
    "variant": {
        "flat": "one index per element; broadcast operands at offsets from baked-in strides",
        "rows": "a loop over rows and a contiguous inner loop: a broadcast operand's row pointer "
                "once per row, no division per element",
        "tile2d": "[rows, cols] tiles: a broadcast operand loaded once per tile, its offsets "
                  "computed per row instead of per element",
    },
    "inner_loop": {"plain": "let gcc decide how to vectorise",
                   "unroll4": "unroll the inner loop 4x: fewer branches on short rows",
                   "unroll8": "unroll the inner loop 8x: more independent loads in flight",
                   "simd": "ask for vector code explicitly (omp simd)"},
    "math": {"libm": "the C library's expf: exact, a call per element that does not vectorise",
             "poly": "a polynomial exp that vectorises; error near 1e-7"},
}


def explain(name: str, old: Any, new: Any) -> str:
    text = _REASONS.get(name, {}).get(new)
    if text:
        return text
    if name == "programs_per_sm":
        if new == 0:
            return "one program per block: no loop, the hardware schedules the blocks"
        if old == 0:
            return "a few programs per SM loop over the blocks: less launch and tail cost"
        return "more programs per SM hide latency better" if new > old else \
            "fewer programs per SM: longer loops, less scheduling"
    if name == "block":
        return "larger blocks: more bytes in flight per program, fewer programs" if new > old else \
            "smaller blocks: more programs to spread over the SMs, fewer registers"
    if name == "num_warps":
        return "more warps: fewer elements per thread, more loads in flight per SM" if new > old else \
            "fewer warps: more elements per thread, wider vector accesses"
    if name == "vec":
        return "wider packs: fewer load instructions per byte" if new > old else \
            "narrower packs: more threads for a small tensor"
    if name == "threads":
        return "more threads a block: fewer blocks to schedule" if new > old else \
            "fewer threads a block: more blocks resident per SM"
    if name == "packs":
        return "more packs a thread: more loads in flight, fewer blocks" if new > old else \
            "fewer packs a thread: more blocks to spread over the SMs"
    return "try a neighbouring value"


# ---------------------------------------------------------------- expressions

def _expr(facts: dict[str, Any]) -> Expr:
    if facts["expr"] == "pow":
        return _pow_expr(facts["consts"]["exponent"])
    return UNARY.get(facts["expr"]) or BINARY[facts["expr"]]


def _pow_expr(e: float) -> Expr:
    """x ** e: products and roots for the common exponents, exp(e log |x|) with a sign otherwise."""
    fast = {0.0: Expr("tl.zeros_like(a) + 1.0", "1.0f"), 1.0: Expr("a", "a"),
            2.0: Expr("a * a", "a * a"), 3.0: Expr("a * a * a", "a * a * a"),
            4.0: Expr("(a * a) * (a * a)", "(a * a) * (a * a)"),
            0.5: Expr("tl.sqrt(a)", "sqrtf(a)"), -0.5: Expr("tl.rsqrt(a)", "1.0f / sqrtf(a)"),
            -1.0: Expr("1.0 / a", "1.0f / a"), -2.0: Expr("1.0 / (a * a)", "1.0f / (a * a)")}
    if e in fast:
        return fast[e]
    text_t, text_c = lit_triton(e), lit_c(e)
    if e.is_integer():  # negative bases are allowed: the magnitude by exp/log, the sign by parity
        magnitude = f"tl.exp({text_t} * tl.log(tl.abs(a)))"
        if int(e) % 2:
            return Expr(f"tl.where(a < 0.0, -{magnitude}, {magnitude})", f"powf(a, {text_c})")
        return Expr(magnitude, f"powf(a, {text_c})")
    return Expr(f"tl.exp({text_t} * tl.log(a))", f"powf(a, {text_c})")  # NaN below 0, as torch


def _filled(template: str, facts: dict[str, Any], lit: Any) -> str:
    consts = dict(facts["consts"])
    alpha = consts.pop("alpha", 1.0)
    values = {k: lit(v) for k, v in consts.items()}
    values["alpha_b"] = "b" if alpha == 1.0 else f"{lit(alpha)} * b"
    values["alpha_a"] = "a" if alpha == 1.0 else f"{lit(alpha)} * a"
    return template.format(**values)


def lit_triton(v: float) -> str:
    return repr(v) if math.isfinite(v) else f'float("{v}")'


def lit_c(v: float) -> str:
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return f"{v!r}f"



def formula(op: str, args: list[Any], kwargs: dict[str, Any]) -> tuple[str, str, float | None] | str:
    """An element-wise op of this family as expressions over fp32 `a` (self) and `b` (other), for
    Triton and for C, with its number operand (put in `b`) if it has one; or why not. The fused
    chains (families/chain) build their kernels from these."""
    name, overload = _split_op(op)
    reason = _op_reason(op, name, overload)
    if reason:
        return reason
    expr = _expression(name, args, kwargs)
    if isinstance(expr, str):
        return expr
    key, consts = expr
    facts = {"expr": key, "consts": consts}
    binary = SUPPORTED[(name, overload)] == 2
    number = float(args[1]) if binary and len(args) > 1 and _number(args[1]) else None
    return _filled(_expr(facts).triton, facts, lit_triton), _filled(_expr(facts).c, facts, lit_c), number


WRITERS = Writers(cpu=Writer(_cpu_space, _cpu_start, _cpu_render),
                  triton=Writer(_triton_space, _triton_start, _triton_render),
                  cuda=Writer(lambda facts, hw: _cuda_space(facts), _cuda_start, _cuda_render))
space, start, render = WRITERS.space, WRITERS.start, WRITERS.render  # by backend name
FAMILIES = [Family(name="elementwise", match=match, writers=WRITERS, explain=explain)]
