"""Element-wise ops: y = f(a) or y = f(a, b), each output element from the elements at its index.

    unary:  relu silu gelu (approximate none|tanh) sigmoid tanh exp log neg abs sqrt rsqrt
            reciprocal erf hardswish hardsigmoid leaky_relu elu selu celu softplus mish
            hardtanh clamp clamp_min clamp_max (number bounds) threshold hardshrink softshrink
            pow.Tensor_Scalar (y = a ** c)
    binary: add sub (y = a +- alpha b) mul div maximum minimum, .Tensor and .Scalar overloads,
            rsub.Scalar (y = c - alpha a); broadcasting, a 0-dim tensor or a number on either side

Memory-bound: the floor is one read of each full-size operand and one write of y (6 bytes an
element for a bf16 binary op, 4.2 TB/s on the H200: 64M elements in 96 us). Values are
computed in fp32 and rounded once at the store, as ATen's opmath does.

Indexing. The output is walked in its own memory order (a channels-last output is written
contiguously), and dims that every operand can merge are merged (TensorIterator's
coalescing), so (N,C,H,W) * (C,1,1) becomes [N, C, H*W] and (rows, cols) + (cols,) becomes
[rows, cols]. Each operand is then one of
    same     laid out like the output: its offset is the output's, a vectorised flat load
    strided  broadcast or laid out otherwise: offset from the output index, strides baked in
    scalar   a 0-dim (or fully broadcast) tensor: one load per program
    const    a Python number: baked into the expression
Adding an op is one line in UNARY or BINARY: an expression over the fp32 values a and b,
once for Triton and once for C.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kernforge.backends.native import C_PRELUDE
from kernforge.propose.builtin.family import LegacyFamily as Family
from kernforge.propose.families.common import (
    C_LOAD_STORE,
    C_TYPES,
    ITEMSIZE,
    TRITON_SM_COUNT,
    gpu_sms,
    is_tensor,
    next_pow2,
    split_kwargs,
)
from kernforge.tasks import KernelTask

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
# exist in triton 3.6 (the H200 machine) and 3.8 (here); tl.tanh does not, hence kf_tanh.
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
    "hardswish": Expr("a * tl.minimum(tl.maximum(a + 3.0, 0.0), 6.0) / 6.0",
                      "a * KF_CLAMP(a + 3.0f, 0.0f, 6.0f) / 6.0f"),
    "hardsigmoid": Expr("tl.minimum(tl.maximum(a + 3.0, 0.0), 6.0) / 6.0", "KF_CLAMP(a + 3.0f, 0.0f, 6.0f) / 6.0f"),
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


# ---------------------------------------------------------------- parameter space

BLOCKS = [256, 512, 1024, 2048, 4096, 8192, 16384]


def space(facts: dict[str, Any], backend: str) -> dict[str, list[Any]]:
    two_d = len(facts["sizes"]) >= 2
    if backend == "cpu":
        params: dict[str, list[Any]] = {"indexing": ["flat", "rows"] if two_d else ["flat"],
                                        "inner_loop": ["plain", "unroll4", "unroll8", "simd"]}
        if _expr(facts).uses_exp:
            params["math"] = ["libm", "poly"]
        return params
    if backend == "triton":
        return {"indexing": ["flat", "tile2d"] if two_d else ["flat"],
                "grid": ["one_per_block", "persistent"],
                "programs_per_sm": [1, 2, 4, 8],
                "block": BLOCKS,
                "num_warps": [2, 4, 8, 16]}
    return {}


def initial(facts: dict[str, Any], backend: str) -> dict[str, Any]:
    if backend == "cpu":
        params = {"indexing": "rows" if _rows_pay(facts) else "flat", "inner_loop": "simd"}
        if _expr(facts).uses_exp:
            params["math"] = "poly"
        return params
    # 16 KB of output per program (4096 fp32 / 8192 bf16 elements, 16 or 32 per thread with 8 warps:
    # 128-bit accesses, several in flight), halved until there are four programs per SM. Measured on
    # the H200 (triton 3.6): silu bf16 64M elements 0.070 ms, 90% of copy bandwidth (eager 0.073);
    # (8192,8192) * (8192,1) bf16 0.071 ms against eager's 0.164; at 4M elements 4096 beat 8192.
    # (Timed by hand while the family was written; not kept in bench/results.)
    block = 16384 // ITEMSIZE[facts["dtype"]]
    while block > 1024 and math.ceil(facts["numel"] / block) < 4 * gpu_sms():
        block //= 2
    block = max(256, min(block, next_pow2(facts["numel"])))
    params = {"indexing": "tile2d" if _rows_pay(facts) else "flat", "grid": "one_per_block",
              "programs_per_sm": 4, "block": block, "num_warps": 8 if block >= 2048 else 4 if block >= 512 else 2}
    return params


def _rows_pay(facts: dict[str, Any]) -> bool:
    """A [rows, cols] walk pays off when a broadcast operand is there and rows are not tiny:
    it replaces a division per element by one per row and loads the broadcast operand once."""
    strided = any(o.get("kind") == "strided" for o in facts["operands"])
    return strided and len(facts["sizes"]) >= 2 and facts["sizes"][-1] >= 16


def valid(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> bool:
    if backend == "cpu":
        # gcc accepts no `#pragma GCC unroll` after `omp parallel for`: the flat loop is plain or simd.
        return params["indexing"] == "rows" or params["inner_loop"] in ("plain", "simd")
    per_thread = params["block"] // (32 * params["num_warps"])
    if not 1 <= per_thread <= 32:  # past 32 values a thread (x3 operands in fp32) registers spill
        return False
    if params["block"] > max(256, next_pow2(facts["numel"])):
        return False  # a block bigger than the tensor only masks lanes off
    # One program per block ignores programs_per_sm: one value of it stands for the rest.
    return params["grid"] == "persistent" or params["programs_per_sm"] == 4


def explain(name: str, old: Any, new: Any) -> str:
    reasons = {
        "indexing": {
            "flat": "one index per element; broadcast operands at offsets from baked-in strides",
            "rows": "a loop over rows and a contiguous inner loop: a broadcast operand's row pointer "
                    "once per row, no division per element",
            "tile2d": "[rows, cols] tiles: a broadcast operand loaded once per tile, its offsets "
                      "computed per row instead of per element",
        },
        "grid": {"one_per_block": "one program per block: no loop, the hardware schedules the blocks",
                 "persistent": "a few programs per SM loop over the blocks: less launch and tail cost"},
        "inner_loop": {"plain": "let gcc decide how to vectorise",
                       "unroll4": "unroll the inner loop 4x: fewer branches on short rows",
                       "unroll8": "unroll the inner loop 8x: more independent loads in flight",
                       "simd": "ask for vector code explicitly (omp simd)"},
        "math": {"libm": "the C library's expf: exact, a call per element that does not vectorise",
                 "poly": "a polynomial exp that vectorises; error near 1e-7"},
    }
    text = reasons.get(name, {}).get(new)
    if text:
        return text
    if name == "block":
        return "larger blocks: more bytes in flight per program, fewer programs" if new > old else \
            "smaller blocks: more programs to spread over the SMs, fewer registers"
    if name == "num_warps":
        return "more warps: fewer elements per thread, more loads in flight per SM" if new > old else \
            "fewer warps: more elements per thread, wider vector accesses"
    if name == "programs_per_sm":
        return "more programs per SM hide latency better" if new > old else \
            "fewer programs per SM: longer loops, less scheduling"
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
    lit_t, lit_c = _lit_triton(e), _lit_c(e)
    if e.is_integer():  # negative bases are allowed: the magnitude by exp/log, the sign by parity
        magnitude = f"tl.exp({lit_t} * tl.log(tl.abs(a)))"
        if int(e) % 2:
            return Expr(f"tl.where(a < 0.0, -{magnitude}, {magnitude})", f"powf(a, {lit_c})")
        return Expr(magnitude, f"powf(a, {lit_c})")
    return Expr(f"tl.exp({lit_t} * tl.log(a))", f"powf(a, {lit_c})")  # NaN below 0, as torch


def _filled(template: str, facts: dict[str, Any], lit: Any) -> str:
    consts = dict(facts["consts"])
    alpha = consts.pop("alpha", 1.0)
    values = {k: lit(v) for k, v in consts.items()}
    values["alpha_b"] = "b" if alpha == 1.0 else f"{lit(alpha)} * b"
    values["alpha_a"] = "a" if alpha == 1.0 else f"{lit(alpha)} * a"
    return template.format(**values)


def _lit_triton(v: float) -> str:
    return repr(v) if math.isfinite(v) else f'float("{v}")'


def _lit_c(v: float) -> str:
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return f"{v!r}f"


def _offset(sizes: list[int], strides: list[int], idx: str, div: str = "//") -> str:
    """sum over dims of ((idx // inner) % size) * stride, for `idx` counting output elements in
    memory order; broadcast dims (stride 0) drop out, the outermost needs no modulo."""
    terms, inner = [], 1
    for d in reversed(range(len(sizes))):
        if strides[d]:
            q = idx if inner == 1 else f"({idx} {div} {inner})"
            q = f"({q} % {sizes[d]})" if d > 0 else q
            terms.append(q if strides[d] == 1 else f"{q} * {strides[d]}")
        inner *= sizes[d]
    return " + ".join(reversed(terms)) or "0"


def _tensor_operands(facts: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in facts["operands"] if o["kind"] != "const"]


def _header_params(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def _title(facts: dict[str, Any]) -> str:
    shapes = " and ".join("x".join(map(str, o["shape"])) or "0-dim" for o in _tensor_operands(facts))
    return f"element-wise {facts['name']} of {shapes} into {'x'.join(map(str, facts['out_shape']))}, {facts['dtype']}"


# ---------------------------------------------------------------- Triton

_TRITON_TANH = '''
@triton.jit
def kf_tanh(x):
    # triton has no tl.tanh in 3.6: (1 - e^-2|x|) / (1 + e^-2|x|), never overflowing
    t = tl.exp(-2.0 * tl.abs(x))
    r = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0.0, -r, r)
'''


def render_triton(facts: dict[str, Any], params: dict[str, Any]) -> str:
    expr = _expr(facts)
    tile2d = params["indexing"] == "tile2d"
    ptrs = [o["role"].upper() for o in _tensor_operands(facts)]
    body, tiles = (_tile2d_body if tile2d else _flat_body)(facts, params)
    prologue = [f"{o['role']} = tl.load({o['role'].upper()}).to(tl.float32)" for o in facts["operands"]
                if o["kind"] == "scalar"]
    prologue += [f"{o['role']} = {_lit_triton(o['value'])}" for o in facts["operands"] if o["kind"] == "const"]
    body += [f"y = {_filled(expr.triton, facts, _lit_triton)}"] + _store_line(facts, params)
    if params["grid"] == "persistent":
        loop = [f"for tile in range(tl.program_id(0), {tiles}, tl.num_programs(0)):"] + ["    " + b for b in body]
        grid = f"(min({tiles}, sm_count(y.device) * PROGRAMS_PER_SM),)"
    else:
        loop = ["tile = tl.program_id(0)"] + body
        grid = f"({tiles},)"
    kernel_lines = "\n".join("    " + line for line in prologue + loop)
    constexprs = ", BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr" if tile2d else ", BLOCK: tl.constexpr"
    launch_blocks = "BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C" if tile2d else "BLOCK=BLOCK"
    block_lines = (f"BLOCK_C = {_block_c(facts, params)}\nBLOCK_R = BLOCK // BLOCK_C\n" if tile2d else "")
    args = "x, other, *rest, **kwargs" if len(facts["operands"]) == 2 else "x, *rest, **kwargs"
    names = {"a": "x", "b": "other"}
    launch_args = ", ".join([names[o["role"]] for o in _tensor_operands(facts)] + ["y"])
    checks = "".join(f"    _expect({names[o['role']]}, {tuple(o['shape'])}, {tuple(o['stride'])})\n"
                     for o in _tensor_operands(facts) if o["shape"])
    return f'''"""kernforge builtin: {_title(facts)}.

kf-op: {facts['op']}
{_header_params(params)}
Keyword-only arguments (alpha, approximate) are baked into the kernel.
"""
import torch
import triton
import triton.language as tl

BLOCK = {params['block']}
NUM_WARPS = {params['num_warps']}
PROGRAMS_PER_SM = {params['programs_per_sm']}
{block_lines}{_TRITON_TANH if "kf_tanh" in expr.triton else ""}

@triton.jit
def elementwise_kernel({", ".join(ptrs + ["Y"])}{constexprs}):
{kernel_lines}


{TRITON_SM_COUNT}

def _expect(t, shape, stride):
    # Shapes and strides are baked into the kernel: another layout would be read wrongly.
    if tuple(t.shape) != shape or t.stride() != stride:
        raise ValueError(f"built for shape {{shape}} and strides {{stride}}, got {{tuple(t.shape)}} and {{t.stride()}}")


def kf_forward({args}):
{checks}    y = torch.empty_strided({tuple(facts['out_shape'])}, {tuple(facts['out_stride'])}, dtype=torch.{facts['dtype']},
                            device=x.device)
    elementwise_kernel[{grid}]({launch_args}, {launch_blocks}, num_warps=NUM_WARPS)
    return y
'''


def _flat_body(facts: dict[str, Any], params: dict[str, Any]) -> tuple[list[str], int]:
    """Output elements [tile * BLOCK, (tile + 1) * BLOCK) in memory order."""
    block, numel = params["block"], facts["numel"]
    tile = "tl.cast(tile, tl.int64)" if facts["int64"] else "tile"  # the interpreter's loop gives a Python int
    lines = [f"idx = {tile} * BLOCK + tl.arange(0, BLOCK)"]
    masked = numel % block != 0  # a whole number of blocks needs no mask: unpredicated vector accesses
    mask = ", mask=mask" if masked else ""
    if masked:
        lines.append(f"mask = idx < {numel}")
    for o in _tensor_operands(facts):
        if o["kind"] == "scalar":
            continue
        offset = "idx" if o["kind"] == "same" else _offset(facts["sizes"], o["strides"], "idx")
        lines.append(f"{o['role']} = tl.load({o['role'].upper()} + {offset}{mask}).to(tl.float32)")
    return lines, math.ceil(numel / block)


def _block_c(facts: dict[str, Any], params: dict[str, Any]) -> int:
    return min(next_pow2(facts["sizes"][-1]), params["block"])


def _tile2d_body(facts: dict[str, Any], params: dict[str, Any]) -> tuple[list[str], int]:
    """The output as [R, C], C its innermost coalesced dim; a tile is [BLOCK_R, BLOCK_C]. An operand
    constant along C is loaded as a [BLOCK_R] column, one constant along R as a [BLOCK_C] row."""
    sizes = facts["sizes"]
    cols, rows = sizes[-1], facts["numel"] // sizes[-1]
    block_c = _block_c(facts, params)
    block_r = params["block"] // block_c
    col_tiles, row_tiles = math.ceil(cols / block_c), math.ceil(rows / block_r)
    tile = "tl.cast(tile, tl.int64)" if facts["int64"] else "tile"  # the interpreter's loop gives a Python int
    if col_tiles == 1:
        lines = [f"r = {tile} * BLOCK_R + tl.arange(0, BLOCK_R)", "c = tl.arange(0, BLOCK_C)"]
    else:
        lines = [f"r = ({tile} // {col_tiles}) * BLOCK_R + tl.arange(0, BLOCK_R)",
                 f"c = ({tile} % {col_tiles}) * BLOCK_C + tl.arange(0, BLOCK_C)"]
    # Masks only where the tiles overhang the tensor: whole tiles get unpredicated accesses.
    rmask, cmask = _tile_masks(rows, cols, block_r, block_c)
    if rmask:
        lines.append(f"rmask = r < {rows}")
    if cmask:
        lines.append(f"cmask = c < {cols}")
    full = " & ".join(m for m in ("rmask[:, None]" if rmask else "", "cmask[None, :]" if cmask else "") if m)
    if full:
        lines.append(f"mask = {full}")
    for o in _tensor_operands(facts):
        if o["kind"] == "scalar":
            continue
        st = o["strides"]
        row = "r * " + str(cols) if o["kind"] == "same" else _offset(sizes[:-1], st[:-1], "r")
        col = "c" if st[-1] == 1 else f"c * {st[-1]}"
        ptr = o["role"].upper()
        if st[-1] == 0:
            load = f"tl.load({ptr} + {row}{', mask=rmask' if rmask else ''})[:, None]"
        elif row == "0":
            load = f"tl.load({ptr} + {col}{', mask=cmask' if cmask else ''})[None, :]"
        else:
            load = f"tl.load({ptr} + ({row})[:, None] + ({col})[None, :]{', mask=mask' if full else ''})"
        lines.append(f"{o['role']} = {load}.to(tl.float32)")
    return lines, row_tiles * col_tiles


def _tile_masks(rows: int, cols: int, block_r: int, block_c: int) -> tuple[bool, bool]:
    return rows % block_r != 0, cols % block_c != 0


def _store_line(facts: dict[str, Any], params: dict[str, Any]) -> list[str]:
    value = "y.to(Y.dtype.element_ty)"
    if params["indexing"] == "tile2d":
        cols = facts["sizes"][-1]
        block_c = _block_c(facts, params)
        masked = any(_tile_masks(facts["numel"] // cols, cols, params["block"] // block_c, block_c))
        return [f"tl.store(Y + (r * {cols})[:, None] + c[None, :], {value}{', mask=mask' if masked else ''})"]
    masked = facts["numel"] % params["block"] != 0
    return [f"tl.store(Y + idx, {value}{', mask=mask' if masked else ''})"]


# ---------------------------------------------------------------- C (cpu backend)

_C_EXP = {
    "libm": "static inline float kf_exp(float x) { return expf(x); }\n",
    # Cephes-style expf (as in the softmax template), over the whole float range: x = n ln2 + r,
    # a degree-6 polynomial for e^r, 2^n put into the exponent bits. n stops at 127 (past
    # 88.03 r grows to 0.7 and the error to ~1e-5); past 88.72 the result is inf, like expf's.
    "poly": """static inline float kf_exp(float x) {
    float xc = x < -87.3f ? -87.3f : (x > 88.72f ? 88.72f : x);
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    n = n > 127.0f ? 127.0f : n;
    float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { int32_t i; float f; } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return x > 88.7228391f ? INFINITY : p * scale.f;
}
""",
}

_C_TANH = """static inline float kf_tanh(float x) {
    float t = kf_exp(-2.0f * fabsf(x));
    float r = (1.0f - t) / (1.0f + t);
    return x < 0.0f ? -r : r;
}
"""

# A 0-dim operand is read once, whatever its dtype (it does not take part in type promotion).
_C_SCALAR_LOAD = {
    "float32": ("KF_F32", "return *(const float *)t->data;"),
    "float64": ("KF_F64", "return (float)*(const double *)t->data;"),
    "int32": ("KF_I32", "return (float)*(const int32_t *)t->data;"),
    "int64": ("KF_I64", "return (float)*(const int64_t *)t->data;"),
    "bfloat16": ("KF_BF16", ("uint32_t u = (uint32_t)*(const uint16_t *)t->data << 16; float f; "
                            "memcpy(&f, &u, 4); return f;")),
    # IEEE half by its bits: a float32 task may not name the half type (lower-precision rule).
    "float16": ("KF_F16", ("uint32_t h = *(const uint16_t *)t->data, e = (h >> 10) & 31u, m = h & 1023u; "
                          "float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) "
                          ": ldexpf((float)(m | 1024u), (int)e - 25); return (h & 0x8000u) ? -v : v;")),
}


def render_c(facts: dict[str, Any], params: dict[str, Any]) -> str:
    ctype, code = C_TYPES[facts["dtype"]]
    expr = _expr(facts)
    math_kind = params.get("math", "libm")
    helpers = _C_EXP[math_kind] if expr.uses_exp else ""
    helpers += _C_TANH if "kf_tanh" in expr.c else ""
    helpers += "".join(_c_scalar_loader(o) for o in facts["operands"] if o["kind"] == "scalar")
    checks, setup = _c_setup(facts, code)
    loop = (_c_rows if params["indexing"] == "rows" else _c_flat)(facts, params, _filled(expr.c, facts, _lit_c))
    n_tensors = len(_tensor_operands(facts))
    return f"""/* kernforge builtin: {_title(facts)}
 * kf-op: {facts['op']}
 * {_header_params(params)}
 */
#include <math.h>
#include <string.h>
{C_PRELUDE}
typedef {ctype} elem_t;
#define KF_CLAMP(v, lo, hi) ((v) < (lo) ? (lo) : (v) > (hi) ? (hi) : (v))
{C_LOAD_STORE[facts['dtype']]}
/* The layout the kernel was built for: any other fails the call instead of reading wrongly. */
static int kf_layout(const kf_tensor *t, int64_t ndim, const int64_t *sizes, const int64_t *strides) {{
    if (t->ndim != ndim) return 0;
    for (int64_t d = 0; d < ndim; ++d)
        if (t->sizes[d] != sizes[d] || (t->sizes[d] > 1 && t->strides[d] != strides[d])) return 0;
    return 1;
}}
{helpers}
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {{
    if (n_in != {n_tensors} || n_out != 1) return 1;
    if (out[0].dtype != {code} || !kf_layout(&out[0], {_c_dims(facts['out_shape'], facts['out_stride'])})) return 2;
{checks}{setup}    elem_t *restrict Y = (elem_t *)out[0].data;
{loop}    return 0;
}}
"""


def _c_dims(shape: list[int], stride: list[int]) -> str:
    sizes = ", ".join(map(str, shape)) or "0"
    strides = ", ".join(map(str, stride)) or "0"
    return f"{len(shape)}, (const int64_t[]){{{sizes}}}, (const int64_t[]){{{strides}}}"


def _c_scalar_loader(o: dict[str, Any]) -> str:
    _, body = _C_SCALAR_LOAD[o["dtype"]]
    return f"static inline float kf_scalar_{o['role']}(const kf_tensor *t) {{ {body} }}\n"


def _c_setup(facts: dict[str, Any], code: str) -> tuple[str, str]:
    checks, setup = "", ""
    for o in facts["operands"]:
        role = o["role"]
        if o["kind"] == "const":
            setup += f"    const float {role} = {_lit_c(o['value'])};\n"
            continue
        t = f"in[{o['input']}]"
        if o["kind"] == "scalar" and not o["shape"]:
            checks += f"    if ({t}.dtype != {_C_SCALAR_LOAD[o['dtype']][0]} || {t}.ndim != 0) return 3;\n"
            setup += f"    const float {role} = kf_scalar_{role}(&{t});\n"
            continue
        checks += f"    if ({t}.dtype != {code} || !kf_layout(&{t}, {_c_dims(o['shape'], o['stride'])})) return 3;\n"
        if o["kind"] == "scalar":
            setup += f"    const float {role} = ld((const elem_t *){t}.data, 0);\n"
        else:
            setup += f"    const elem_t *restrict {role.upper()} = (const elem_t *){t}.data;\n"
    return checks, setup


def _c_flat(facts: dict[str, Any], params: dict[str, Any], value: str) -> str:
    simd = " simd" if params["inner_loop"] == "simd" else ""
    loads = "".join(f"        const float {o['role']} = ld({o['role'].upper()}, "
                    f"{'i' if o['kind'] == 'same' else _offset(facts['sizes'], o['strides'], 'i', '/')});\n"
                    for o in _tensor_operands(facts) if o["kind"] != "scalar")
    return f"""    #pragma omp parallel for{simd} schedule(static)
    for (int64_t i = 0; i < {facts['numel']}LL; ++i) {{
{loads}        st(Y, i, {value});
    }}
"""


def _c_rows(facts: dict[str, Any], params: dict[str, Any], value: str) -> str:
    """Rows over the outer coalesced dims in parallel; the innermost dim as a contiguous loop."""
    sizes = facts["sizes"]
    cols, rows = sizes[-1], facts["numel"] // sizes[-1]
    row_setup, loads = "", ""
    for o in _tensor_operands(facts):
        if o["kind"] == "scalar":
            continue
        role, st = o["role"], o["strides"]
        base = f"r * {cols}" if o["kind"] == "same" else _offset(sizes[:-1], st[:-1], "r", "/")
        row_setup += f"        const elem_t *restrict {role.upper()}r = {role.upper()} + {base};\n"
        if st[-1] == 0:  # constant along the row: read once per row
            row_setup += f"        const float {role} = ld({role.upper()}r, 0);\n"
        else:
            loads += f"            const float {role} = ld({role.upper()}r, {'c' if st[-1] == 1 else f'c * {st[-1]}'});\n"
    pragma = {"plain": "", "unroll4": "        #pragma GCC unroll 4\n", "unroll8": "        #pragma GCC unroll 8\n",
              "simd": "        #pragma omp simd\n"}[params["inner_loop"]]
    return f"""    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < {rows}LL; ++r) {{
{row_setup}        elem_t *restrict Yr = Y + r * {cols}LL;
{pragma}        for (int64_t c = 0; c < {cols}LL; ++c) {{
{loads}            st(Yr, c, {value});
        }}
    }}
"""


def render(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> str:
    return render_c(facts, params) if backend == "cpu" else render_triton(facts, params)


FAMILY = Family(name="elementwise", match=match, space=space, initial=initial, render=render,
                valid=valid, explain=explain)
FAMILIES = [FAMILY]
