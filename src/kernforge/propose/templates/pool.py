"""Average pooling: avg_pool2d and _adaptive_avg_pool2d over (N, C, H, W) or (C, H, W).

y[p, oh, ow] = sum of x[p, ih, iw] over the window of (oh, ow) / divisor, per plane p.
avg_pool2d: the window starts at oh * stride - padding, spans the kernel, clipped to the
input; the divisor is the kernel area clipped to the padded input (count_include_pad), the
clipped area (not count_include_pad) or divisor_override. _adaptive_avg_pool2d: rows
[floor(oh * H / OH), ceil((oh + 1) * H / OH)), the same for columns, divided by the area.

Memory-bound: x read once (windows overlap only when stride < kernel; the overlap hits
in cache), y written once. Contiguous (NCHW) and channels-last (NHWC) inputs; a 1x1
adaptive output is a mean over H, W and goes to the reduce family's kernels.
"""

from __future__ import annotations

import math
from typing import Any

from kernforge.backends.native import C_PRELUDE
from kernforge.propose.builtin.family import LegacyFamily as Family
from kernforge.propose.templates import reduce
from kernforge.propose.families.common import (
    C_LOAD_STORE,
    C_TYPES,
    SUPPORTED_DTYPES,
    c_one_in_one_out,
    c_simd_macro,
    is_tensor,
    split_kwargs,
)
from kernforge.tasks import KernelTask

AVG, ADAPTIVE = "aten::avg_pool2d.default", "aten::_adaptive_avg_pool2d.default"
MAX_UNROLLED = 64  # window positions unrolled with tl.static_range; larger windows loop


# ---------------------------------------------------------------- what is supported

def match(task: KernelTask) -> dict[str, Any] | str:
    if task.op not in (AVG, ADAPTIVE):
        return f"no built-in template for {task.op}"
    name = "avg_pool2d" if task.op == AVG else "adaptive_avg_pool2d"
    args, kwargs = split_kwargs(task.args)
    if kwargs:
        return f"{name} with keyword arguments has no built-in template yet"
    x = args[0] if args else None
    if not is_tensor(x) or len(x["shape"]) not in (3, 4):
        return f"{name} needs a 3-D or 4-D tensor input"
    if x["dtype"] not in SUPPORTED_DTYPES:
        return f"{name} on {x['dtype']} has no built-in template"
    shape = [1, *x["shape"]] if len(x["shape"]) == 3 else list(x["shape"])
    stride = [0, *x["stride"]] if len(x["stride"]) == 3 else list(x["stride"])
    if math.prod(shape) == 0:
        return f"{name} of an empty tensor has no built-in template"
    layout = _layout(shape, stride)
    if layout is None:
        return f"{name} on an input that is neither contiguous nor channels-last has no built-in template yet"
    out = task.outputs[0]
    out_shape = [1, *out["shape"]] if len(out["shape"]) == 3 else list(out["shape"])
    out_stride = [0, *out["stride"]] if len(out["stride"]) == 3 else list(out["stride"])
    if not _dense(out_shape, out_stride, layout):
        return f"{name} whose output layout differs from its input's has no built-in template yet"
    n, c, h, w = shape
    facts = {"op": task.op, "dtype": x["dtype"].replace("torch.", ""), "layout": layout,
             "n": n, "c": c, "h": h, "w": w, "oh": out_shape[2], "ow": out_shape[3],
             "out_shape": list(out["shape"]), "out_stride": list(out["stride"])}
    window = _avg_window(args, h, w) if task.op == AVG else _adaptive_window(out_shape, h, w)
    if isinstance(window, str):
        return window
    facts |= window
    if facts["kind"] == "avg" and (facts["oh"], facts["ow"]) != (
            output_size(h, facts["kh"], facts["sh"], facts["ph"], facts["ceil_mode"]),
            output_size(w, facts["kw"], facts["sw"], facts["pw"], facts["ceil_mode"])):
        return "avg_pool2d whose output size differs from ATen's rule (a new ATen rule?)"
    if task.op == ADAPTIVE and facts["oh"] == facts["ow"] == 1:
        facts["reduce"] = _as_mean(facts)
    return facts


def _layout(shape: list[int], stride: list[int]) -> str | None:
    """nchw or nhwc: the order in which the strides are dense."""
    return next((name for name in ("nchw", "nhwc") if _dense(shape, stride, name)), None)


def _dense(shape: list[int], stride: list[int], layout: str) -> bool:
    """Whether the strides are dense in this layout's order (dims of size 1 ignored)."""
    c, h, w = shape[1:]
    expected = [c * h * w, h * w, w, 1] if layout == "nchw" else [h * w * c, 1, w * c, c]
    return all(size == 1 or s == e for size, s, e in zip(shape, stride, expected))


def _pair(value: Any, default: list[int] | None = None) -> list[int] | None:
    if value is None or value == []:
        return default
    values = [value] if isinstance(value, int) else list(value)
    return values * 2 if len(values) == 1 else values


def _avg_window(args: list[Any], h: int, w: int) -> dict[str, Any] | str:
    kernel = _pair(args[1])
    stride = _pair(args[2] if len(args) > 2 else None, kernel)
    padding = _pair(args[3] if len(args) > 3 else 0)
    ceil_mode = bool(args[4]) if len(args) > 4 else False
    include_pad = bool(args[5]) if len(args) > 5 else True
    divisor = args[6] if len(args) > 6 else None
    if divisor is not None and divisor == 0:
        return "avg_pool2d with divisor_override=0"
    return {"kind": "avg", "kh": kernel[0], "kw": kernel[1], "sh": stride[0], "sw": stride[1],
            "ph": padding[0], "pw": padding[1], "ceil_mode": ceil_mode, "include_pad": include_pad,
            "divisor": divisor}


def _adaptive_window(out_shape: list[int], h: int, w: int) -> dict[str, Any]:
    oh, ow = out_shape[2], out_shape[3]
    # The largest window: the loop bound baked into the kernel, with a mask for shorter ones.
    kh = max(math.ceil((i + 1) * h / oh) - (i * h) // oh for i in range(oh))
    kw = max(math.ceil((j + 1) * w / ow) - (j * w) // ow for j in range(ow))
    return {"kind": "adaptive", "kh": kh, "kw": kw}


def output_size(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    """ATen's pooling output size: with ceil_mode the last window must start inside the
    input or its left padding."""
    out = (size + 2 * pad - kernel + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _as_mean(facts: dict[str, Any]) -> dict[str, Any]:
    """A 1x1 adaptive pool in the reduce family's terms: a mean over H, W."""
    planes, hw = facts["n"] * facts["c"], facts["h"] * facts["w"]
    rows = facts["layout"] == "nchw"
    return {"kind": "mean", "op": facts["op"], "dtype": facts["dtype"],
            "outer": planes if rows else facts["n"], "r": hw, "inner": 1 if rows else facts["c"],
            "out_shape": facts["out_shape"], "out_stride": facts["out_stride"]}


# ---------------------------------------------------------------- parameter space

def space(facts: dict[str, Any], backend: str) -> dict[str, list[Any]]:
    if "reduce" in facts:
        return reduce.space(facts["reduce"], backend)
    if backend == "cpu":
        return {"parallel": ["planes", "rows"], "simd": [False, True], "schedule": ["static", "dynamic"]}
    if backend == "triton":
        return {"block": [64, 128, 256, 512, 1024, 2048], "window_loop": ["unrolled", "loop"],
                "num_warps": [1, 2, 4, 8]}
    return {}


def initial(facts: dict[str, Any], backend: str) -> dict[str, Any]:
    if "reduce" in facts:
        return reduce.initial(facts["reduce"], backend)
    if backend == "cpu":
        # Planes are the natural unit (each a contiguous image); rows of outputs when too few.
        return {"parallel": "planes" if _planes(facts) >= 64 else "rows", "simd": True, "schedule": "static"}
    # One output per thread. On an H200: avg_pool2d 3x3/2 over (32, 256, 56, 56) fp32 took
    # 0.043 ms with blocks of 256 and 8 warps (0.074 ms with 1024); channels-last 0.039 ms
    # with 1024 and 8 warps, its lanes reading neighbouring channels (timed by hand while the
    # family was written; not kept in bench/results).
    block = 256 if facts["layout"] == "nchw" else 1024
    return {"block": block, "window_loop": "unrolled" if _unrollable(facts) else "loop", "num_warps": 8}


def valid(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> bool:
    if "reduce" in facts:
        return reduce.valid(facts["reduce"], backend, params)
    if backend == "cpu":
        return True
    if params["window_loop"] == "unrolled" and not _unrollable(facts):
        return False
    # Between 1 and 16 outputs per thread.
    return 32 * params["num_warps"] <= params["block"] <= 16 * 32 * params["num_warps"]


def _unrollable(facts: dict[str, Any]) -> bool:
    return facts["kh"] * facts["kw"] <= MAX_UNROLLED


def _planes(facts: dict[str, Any]) -> int:
    return facts["n"] * facts["c"]


def _outputs(facts: dict[str, Any]) -> int:
    return _planes(facts) * facts["oh"] * facts["ow"]


def explain(name: str, old: Any, new: Any) -> str:
    if name in ("split", "rows_per_program", "block_r", "block_c", "loads", "num_stages", "strategy"):
        return reduce.explain(name, old, new)
    if name == "block":
        return "more outputs per program: fewer programs, more loads in flight" if new > old else \
            "fewer outputs per program: more programs to spread over the SMs"
    if name == "num_warps":
        return "more warps keep more loads in flight" if new > old else "fewer warps: more programs per SM"
    return {
        ("window_loop", "unrolled"): "window positions unrolled: every load issued up front",
        ("window_loop", "loop"): "a loop over the window: less code, fewer registers",
        ("parallel", "planes"): "a plane per thread: each thread reads one contiguous image",
        ("parallel", "rows"): "output rows shared across threads: work for every core when planes are few",
        ("simd", True): "ask the compiler to vectorise the inner loops",
        ("simd", False): "scalar inner loops",
        ("schedule", "static"): "equal shares per thread: no scheduling cost",
        ("schedule", "dynamic"): "threads take work as they free up: better when cores are uneven",
    }.get((name, new), "try a neighbouring value")


# ---------------------------------------------------------------- window arithmetic, shared

def _window_c(facts: dict[str, Any], axis: str) -> str:
    """C statements giving [a0, a1) (clipped) and `span` for the window of output index o{axis}."""
    size = facts[axis]
    if facts["kind"] == "adaptive":
        out = facts["o" + axis]
        return (f"int64_t {axis}0 = (o{axis} * {size}) / {out}, "
                f"{axis}1 = ((o{axis} + 1) * {size} + {out - 1}) / {out};\n")
    k, s, p = facts["k" + axis], facts["s" + axis], facts["p" + axis]
    return (f"int64_t {axis}0 = o{axis} * {s} - {p}, {axis}1 = {axis}0 + {k};\n"
            f"if ({axis}1 > {size + p}) {axis}1 = {size + p};\n"
            f"int64_t span_{axis} = {axis}1 - {axis}0;\n"
            f"if ({axis}0 < 0) {axis}0 = 0;\nif ({axis}1 > {size}) {axis}1 = {size};\n")


def _divisor_c(facts: dict[str, Any]) -> str:
    if facts["kind"] == "adaptive":
        return "(float)((h1 - h0) * (w1 - w0))"
    if facts["divisor"] is not None:
        return f"{float(facts['divisor'])!r}f"
    return "(float)(span_h * span_w)" if facts["include_pad"] else "(float)((h1 - h0) * (w1 - w0))"


def _window_tl(facts: dict[str, Any], axis: str) -> str:
    """Triton lines giving {axis}0, {axis}1 (clipped) and span_{axis} for output index o{axis}."""
    size = facts[axis]
    if facts["kind"] == "adaptive":
        out = facts["o" + axis]
        return (f"    {axis}0 = (o{axis} * {size}) // {out}\n"
                f"    {axis}1 = ((o{axis} + 1) * {size} + {out - 1}) // {out}\n")
    k, s, p = facts["k" + axis], facts["s" + axis], facts["p" + axis]
    return (f"    {axis}0 = o{axis} * {s} - {p}\n"
            f"    {axis}1 = tl.minimum({axis}0 + {k}, {size + p})\n"
            f"    span_{axis} = {axis}1 - {axis}0\n"
            f"    {axis}0 = tl.maximum({axis}0, 0)\n"
            f"    {axis}1 = tl.minimum({axis}1, {size})\n")


def _divisor_tl(facts: dict[str, Any]) -> str:
    if facts["kind"] == "adaptive":
        return "((h1 - h0) * (w1 - w0)).to(tl.float32)"
    if facts["divisor"] is not None:
        return f"{float(facts['divisor'])!r}"
    return "(span_h * span_w).to(tl.float32)" if facts["include_pad"] else \
        "((h1 - h0) * (w1 - w0)).to(tl.float32)"


def _input_strides(facts: dict[str, Any]) -> tuple[int, int, int, int]:
    """(n, c, h, w) strides of the input, in elements."""
    c, h, w = facts["c"], facts["h"], facts["w"]
    if facts["layout"] == "nchw":
        return c * h * w, h * w, w, 1
    return h * w * c, 1, w * c, c


# ---------------------------------------------------------------- C (cpu backend)

# "planes": threads share the plane loop; "rows": collapse(2) shares (plane, output row) pairs.
_C_NCHW = """    #pragma omp parallel for {collapse}schedule({schedule})
    for (int64_t p = 0; p < PLANES; ++p)
    for (int64_t oh = 0; oh < OH; ++oh) {{
        const elem_t *restrict xp = x + p * H * W;
        elem_t *restrict yp = y + p * OH * OW;
        {window_h}
        for (int64_t ow = 0; ow < OW; ++ow) {{
            {window_w}
            float acc = 0.0f;
            for (int64_t ih = h0; ih < h1; ++ih) {{
                SIMD(reduction(+:acc))
                for (int64_t iw = w0; iw < w1; ++iw) acc += ld(xp, ih * W + iw);
            }}
            st(yp, oh * OW + ow, acc / ({divisor}));
        }}
    }}
"""

# Channels-last: for each output position, a vector of C accumulators over contiguous channels.
_C_NHWC = """    #pragma omp parallel for {collapse}schedule({schedule})
    for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh) {{
        {window_h}
        for (int64_t ow = 0; ow < OW; ++ow) {{
            {window_w}
            float acc[C];
            for (int64_t c = 0; c < C; ++c) acc[c] = 0.0f;
            for (int64_t ih = h0; ih < h1; ++ih)
                for (int64_t iw = w0; iw < w1; ++iw) {{
                    const elem_t *restrict xq = x + ((n * H + ih) * W + iw) * C;
                    SIMD()
                    for (int64_t c = 0; c < C; ++c) acc[c] += ld(xq, c);
                }}
            float inv = 1.0f / ({divisor});
            elem_t *restrict yq = y + ((n * OH + oh) * OW + ow) * C;
            SIMD()
            for (int64_t c = 0; c < C; ++c) st(yq, c, acc[c] * inv);
        }}
    }}
"""


def render_c(facts: dict[str, Any], params: dict[str, Any]) -> str:
    ctype, code = C_TYPES[facts["dtype"]]
    simd_macro = c_simd_macro(params["simd"])
    template = _C_NCHW if facts["layout"] == "nchw" else _C_NHWC
    body = template.format(
        collapse="collapse(2) " if params["parallel"] == "rows" else "", schedule=params["schedule"],
        window_h=_window_c(facts, "h").replace("\n", "\n" + " " * 8),
        window_w=_window_c(facts, "w").replace("\n", "\n" + " " * 12),
        divisor=_divisor_c(facts))
    return f"""/* kernforge builtin: {facts['kind']} pool 2d, (N={facts['n']}, C={facts['c']}, {facts['h']}x{facts['w']}) -> {facts['oh']}x{facts['ow']}, {facts['layout']}, {facts['dtype']}
 * kf-op: {facts['op']}
 * {' '.join(f'{k}={v}' for k, v in params.items())}
 */
#include <math.h>
#include <string.h>
{C_PRELUDE}
#define N {facts['n']}LL
#define C {facts['c']}LL
#define PLANES {facts['n'] * facts['c']}LL
#define H {facts['h']}LL
#define W {facts['w']}LL
#define OH {facts['oh']}LL
#define OW {facts['ow']}LL
typedef {ctype} elem_t;
{simd_macro}
{C_LOAD_STORE[facts['dtype']]}
{c_one_in_one_out(code, body)}"""


# ---------------------------------------------------------------- Triton

_TRITON_POOL = '''
@triton.jit
def pool(X, Y, TOTAL: tl.constexpr, BLOCK: tl.constexpr):
    # One output per lane, numbered in the output's memory order (coalesced stores; in
    # channels-last, neighbouring lanes read neighbouring channels).
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < TOTAL
{decompose}{window_h}{window_w}    base = X + n * SN + c * SC
    acc = tl.zeros([BLOCK], tl.float32)
{loop}    y = acc / {divisor}
    tl.store(Y + idx, y.to(Y.dtype.element_ty), mask=ok)
'''

_DECOMPOSE = {
    "nchw": "    ow = idx % OW\n    oh = (idx // OW) % OH\n    c = (idx // (OW * OH)) % C\n    n = idx // (OW * OH * C)\n",
    "nhwc": "    c = idx % C\n    ow = (idx // C) % OW\n    oh = (idx // (C * OW)) % OH\n    n = idx // (C * OW * OH)\n",
}

_LOOPS = {
    "unrolled": """    for dh in tl.static_range(KH):
        ih = h0 + dh
        for dw in tl.static_range(KW):
            iw = w0 + dw
            m = ok & (ih < h1) & (iw < w1)
            acc += tl.load(base + ih * SH + iw * SW, mask=m, other=0.0).to(tl.float32)
""",
    "loop": """    for dh in range(KH):
        ih = h0 + dh
        for dw in range(KW):
            iw = w0 + dw
            m = ok & (ih < h1) & (iw < w1)
            acc += tl.load(base + ih * SH + iw * SW, mask=m, other=0.0).to(tl.float32)
""",
}


def render_triton(facts: dict[str, Any], params: dict[str, Any]) -> str:
    sn, sc, sh, sw = _input_strides(facts)
    total = _outputs(facts)
    wide = total * facts["kh"] * facts["kw"] >= 2**31 or facts["n"] * sn >= 2**31
    decompose = _DECOMPOSE[facts["layout"]]
    if wide:  # int64 offsets only when int32 cannot address the input
        decompose = "    idx = idx.to(tl.int64)\n" + decompose
    kernel = _TRITON_POOL.format(decompose=decompose, window_h=_window_tl(facts, "h"),
                                 window_w=_window_tl(facts, "w"), loop=_LOOPS[params["window_loop"]],
                                 divisor=_divisor_tl(facts))
    return f'''"""kernforge builtin: {facts['kind']} pool 2d, (N={facts['n']}, C={facts['c']}, {facts['h']}x{facts['w']}) -> {facts['oh']}x{facts['ow']}, {facts['layout']}, {facts['dtype']}.

kf-op: {facts['op']}
{' '.join(f'{k}={v}' for k, v in params.items())}
"""
import torch
import triton
import triton.language as tl

C = tl.constexpr({facts['c']})
OH = tl.constexpr({facts['oh']})
OW = tl.constexpr({facts['ow']})
KH = tl.constexpr({facts['kh']})
KW = tl.constexpr({facts['kw']})
SN = tl.constexpr({sn})
SC = tl.constexpr({sc})
SH = tl.constexpr({sh})
SW = tl.constexpr({sw})
TOTAL = {total}
BLOCK = {params['block']}
NUM_WARPS = {params['num_warps']}
OUT_SHAPE = {facts['out_shape']}
OUT_STRIDE = {facts['out_stride']}
{kernel}

def kf_forward(x, *args, **kwargs):
    # Window sizes, strides and padding are baked in: y's shape and strides are the reference's.
    y = torch.empty_strided(OUT_SHAPE, OUT_STRIDE, dtype=x.dtype, device=x.device)
    pool[(triton.cdiv(TOTAL, BLOCK),)](x, y, TOTAL=TOTAL, BLOCK=BLOCK, num_warps=NUM_WARPS)
    return y
'''


def render(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> str:
    if "reduce" in facts:
        return reduce.render(facts["reduce"], backend, params)
    return render_c(facts, params) if backend == "cpu" else render_triton(facts, params)


FAMILY = Family(name="pool", match=match, space=space, initial=initial, render=render,
                valid=valid, explain=explain)
FAMILIES = [FAMILY]
