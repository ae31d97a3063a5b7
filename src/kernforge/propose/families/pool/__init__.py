"""2-D pooling: avg_pool2d, _adaptive_avg_pool2d and max_pool2d_with_indices over (N, C, H, W)
or (C, H, W).

    avg: y[n, c, oh, ow] = sum of x[n, c, ih, iw] over the window of (oh, ow) / divisor
    max: y[n, c, oh, ow] = max of x[n, c, ih, iw] over the window, i[n, c, oh, ow] = its ih * W + iw

avg_pool2d: the window starts at oh * stride - padding, spans the kernel, clipped to the
input; the divisor is the kernel area clipped to the padded input (count_include_pad), the
clipped area (not count_include_pad) or divisor_override. _adaptive_avg_pool2d: rows
[floor(oh * H / OH), ceil((oh + 1) * H / OH)), the same for columns, over the area.
max_pool2d_with_indices: the window's positions are dilation apart, padding acts as -inf, and
eager's rules pick the element (the first of equal maxima, any NaN).

Memory-bound: x read once (windows overlap only when stride < kernel; the overlap hits in
cache), y written once. Contiguous (NCHW) and channels-last (NHWC) inputs. The variants
differ in how outputs map onto lanes: one output per lane walking its window, or a tile of
outputs by window positions (large windows: a global average pool); on CUDA a thread takes
a few outputs, several neighbouring channels at once in channels-last.
"""

from __future__ import annotations

import math
import os
from typing import Any

from kernforge.propose.builtin import kernel_file
from kernforge.propose.builtin.family import Family, Hardware, Writer, Writers
from kernforge.propose.builtin.space import Param, Space, Variant
from kernforge.propose.families.common import (
    ITEMSIZE,
    SUPPORTED_DTYPES,
    c_element,
    cuda_element,
    is_tensor,
    next_pow2,
    split_kwargs,
)
from kernforge.records.task import KernelTask

AVG, ADAPTIVE = "aten::avg_pool2d.default", "aten::_adaptive_avg_pool2d.default"
MAX = "aten::max_pool2d_with_indices.default"
NAMES = {AVG: "avg_pool2d", ADAPTIVE: "adaptive_avg_pool2d", MAX: "max_pool2d_with_indices"}
MAX_UNROLLED = 64  # per_output: window positions unrolled with tl.static_range; larger windows loop
MAX_TILE = 8192  # window_tile: fp32 values in one [outputs, window positions] tile


# ---------------------------------------------------------------- what is supported

def match(task: KernelTask) -> dict[str, Any] | str:
    if task.op not in NAMES:
        return f"no built-in template for {task.op}"
    name = NAMES[task.op]
    args, kwargs = split_kwargs(task.args)
    if kwargs:
        return f"{name} with keyword arguments has no built-in template yet"
    x = args[0] if args else None
    if not is_tensor(x) or len(x["shape"]) not in (3, 4):
        return f"{name} needs a 3-D or 4-D tensor input"
    if x["dtype"] not in SUPPORTED_DTYPES:
        return f"{name} on {x['dtype']} has no built-in template"
    shape, stride = _as_4d(x["shape"]), _as_4d(x["stride"], 0)
    if math.prod(shape) == 0:
        return f"{name} of an empty tensor has no built-in template"
    layout = _layout(shape, stride)
    if layout is None:
        return f"{name} on an input that is neither contiguous nor channels-last has no built-in template yet"
    out = task.outputs[0]
    out_shape = _as_4d(out["shape"])
    if any(not _dense(out_shape, _as_4d(o["stride"], 0), layout) for o in task.outputs):
        return f"{name} whose output layout differs from its input's has no built-in template yet"
    n, c, h, w = shape
    facts = {"op": task.op, "dtype": x["dtype"].replace("torch.", ""), "layout": layout,
             "n": n, "c": c, "h": h, "w": w, "oh": out_shape[2], "ow": out_shape[3],
             "out_shape": list(out["shape"]), "out_stride": list(out["stride"])}
    window = {AVG: _avg_window, ADAPTIVE: lambda args: _adaptive_window(facts), MAX: _max_window}[task.op](args)
    if isinstance(window, str):
        return window
    facts |= window
    if facts["kind"] != "adaptive" and (facts["oh"], facts["ow"]) != (
            output_size(h, facts["kh"], facts["sh"], facts["ph"], facts["ceil_mode"], facts["dh"]),
            output_size(w, facts["kw"], facts["sw"], facts["pw"], facts["ceil_mode"], facts["dw"])):
        return f"{name} whose output size differs from ATen's rule (a new ATen rule?)"
    return facts


def _as_4d(values: list[int], lead: int = 1) -> list[int]:
    """A (C, H, W) shape or stride as (1, C, H, W)'s: one image."""
    return [lead, *values] if len(values) == 3 else list(values)


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


def _avg_window(args: list[Any]) -> dict[str, Any] | str:
    if len(args) < 2:
        return "avg_pool2d without a kernel size"
    kernel = _pair(args[1])
    stride = _pair(args[2] if len(args) > 2 else None, kernel)
    padding = _pair(args[3] if len(args) > 3 else 0)
    ceil_mode = bool(args[4]) if len(args) > 4 else False
    include_pad = bool(args[5]) if len(args) > 5 else True
    divisor = args[6] if len(args) > 6 else None
    if divisor is not None and divisor == 0:
        return "avg_pool2d with divisor_override=0"
    return {"kind": "avg", "kh": kernel[0], "kw": kernel[1], "sh": stride[0], "sw": stride[1],
            "ph": padding[0], "pw": padding[1], "dh": 1, "dw": 1, "ceil_mode": ceil_mode,
            "include_pad": include_pad, "divisor": divisor}


def _max_window(args: list[Any]) -> dict[str, Any] | str:
    if len(args) < 2:
        return "max_pool2d_with_indices without a kernel size"
    kernel = _pair(args[1])
    stride = _pair(args[2] if len(args) > 2 else None, kernel)
    padding = _pair(args[3] if len(args) > 3 else 0)
    dilation = _pair(args[4] if len(args) > 4 else 1)
    ceil_mode = bool(args[5]) if len(args) > 5 else False
    return {"kind": "max", "kh": kernel[0], "kw": kernel[1], "sh": stride[0], "sw": stride[1],
            "ph": padding[0], "pw": padding[1], "dh": dilation[0], "dw": dilation[1], "ceil_mode": ceil_mode}


def _adaptive_window(facts: dict[str, Any]) -> dict[str, Any]:
    h, w, oh, ow = facts["h"], facts["w"], facts["oh"], facts["ow"]
    # The largest window: the loop bound baked into the kernels, with a mask for shorter ones.
    kh = max(math.ceil((i + 1) * h / oh) - (i * h) // oh for i in range(oh))
    kw = max(math.ceil((j + 1) * w / ow) - (j * w) // ow for j in range(ow))
    # Stride and padding are avg_pool2d's; adaptive windows come from the output index alone.
    return {"kind": "adaptive", "kh": kh, "kw": kw, "sh": 1, "sw": 1, "ph": 0, "pw": 0, "dh": 1, "dw": 1,
            "ceil_mode": False, "include_pad": True, "divisor": None}


def output_size(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool, dilation: int = 1) -> int:
    """ATen's pooling output size: with ceil_mode the last window must start inside the
    input or its left padding."""
    out = (size + 2 * pad - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _outputs(facts: dict[str, Any]) -> int:
    return facts["n"] * facts["c"] * facts["oh"] * facts["ow"]


def _window(facts: dict[str, Any]) -> int:
    return facts["kh"] * facts["kw"]


# ---------------------------------------------------------------- spaces

WARPS = (1, 2, 4, 8)


def _cpu_space(facts: dict[str, Any]) -> Space:
    # Sharing (image, output row) pairs differs from sharing images only when there are rows.
    parallel = ("planes", "rows") if facts["oh"] > 1 else ("planes",)
    schedule = Param("schedule", ("static", "dynamic"))
    if facts["kind"] == "max":  # a running argmax with eager's NaN rule: no vector loop to ask for
        return Space.single([Param("parallel", parallel), schedule])
    return Space.single([Param("parallel", parallel), Param("simd", (False, True)), schedule])


def _triton_space(facts: dict[str, Any]) -> Space:
    whole = max(16, next_pow2(_outputs(facts)))  # no program larger than the whole output
    unroll = (False, True) if _window(facts) <= MAX_UNROLLED else (False,)

    def lanes_busy(point: dict[str, Any]) -> bool:
        # Between 1 and 16 outputs per thread.
        return 32 * point["num_warps"] <= point["block"] <= 16 * 32 * point["num_warps"]

    def tile_fits(point: dict[str, Any]) -> bool:
        # Between 1 and 64 fp32 values of the tile per thread.
        tile = point["block"] * point["window_block"]
        return 32 * point["num_warps"] <= tile <= min(MAX_TILE, 64 * 32 * point["num_warps"])

    per_output = Variant("per_output", (
        Param("block", tuple(b for b in (64, 128, 256, 512, 1024, 2048) if b <= max(64, whole))),
        Param("num_warps", WARPS), Param("unroll", unroll)), lanes_busy)
    if facts["kind"] == "max":  # the first of equal maxima: a scan in window order, one lane per output
        return Space([per_output])
    window_blocks = tuple(b for b in (16, 32, 64, 128, 256, 512, 1024) if b < 2 * max(16, _window(facts)))
    return Space([per_output,
                  Variant("window_tile", (Param("block", tuple(b for b in (16, 32, 64, 128, 256) if b <= whole)),
                                          Param("window_block", window_blocks), Param("num_warps", WARPS)),
                          tile_fits)])


def _cuda_vecs(facts: dict[str, Any]) -> tuple[int, ...]:
    # Channels-last: a pack of neighbouring channels in one aligned load of at most 16 bytes;
    # pixels start at multiples of C elements, so C must be a multiple of the pack.
    if facts["layout"] != "nhwc":
        return (1,)
    item = ITEMSIZE[facts["dtype"]]
    return tuple(v for v in (1, 2, 4, 8) if v * item <= 16 and facts["c"] % v == 0)


def _cuda_space(facts: dict[str, Any]) -> Space:
    total = _outputs(facts)

    def fills_a_block(point: dict[str, Any]) -> bool:
        # No block larger than the whole output: the rest of its threads would idle.
        return point["threads"] * point["items"] * point["vec"] <= max(64, next_pow2(total))

    return Space.single([Param("threads", (64, 128, 256, 512, 1024)), Param("items", (1, 2, 4, 8)),
                         Param("vec", _cuda_vecs(facts))], fills_a_block)


# ---------------------------------------------------------------- starting rules

def _cpu_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    # The outer loop is the planes (NCHW) or the images (NHWC): each a contiguous block of x.
    # With fewer than 4 per core the cores idle unevenly; share output rows instead.
    outer = facts["n"] * facts["c"] if facts["layout"] == "nchw" else facts["n"]
    rows = facts["oh"] > 1 and outer < 4 * (os.cpu_count() or 1)
    point = {"parallel": "rows" if rows else "planes", "simd": True, "schedule": "static"}
    if facts["kind"] == "max":
        del point["simd"]
    return point


def _triton_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    total, window = _outputs(facts), _window(facts)
    if window > MAX_UNROLLED and facts["kind"] != "max":
        # A large window: steps of up to 256 window positions (a 16x16 window at once), tiles
        # of 4096 values, 16 per thread of 8 warps; fewer outputs per program while the SMs
        # lack 4 programs each.
        window_block = min(256, next_pow2(window))
        block = max(16, 4096 // window_block)
        while block > 16 and math.ceil(total / block) < 4 * hw.sms:
            block //= 2
        return {"variant": "window_tile", "block": block, "window_block": window_block, "num_warps": 8}
    # On an H200, avg_pool2d 3x3/2 over (32, 256, 56, 56) fp32 took 0.043 ms with blocks of 256
    # and 8 warps (0.074 ms with 1024): NCHW lanes read addresses a stride apart. Channels-last:
    # 0.039 ms with 1024, its lanes reading neighbouring channels (timed by hand when the
    # family was first written). Smaller blocks while the SMs lack 4 programs each.
    block = 256 if facts["layout"] == "nchw" else 1024
    while block > 64 and math.ceil(total / block) < 4 * hw.sms:
        block //= 2
    return {"variant": "per_output", "block": block, "num_warps": min(8, block // 32),
            "unroll": window <= MAX_UNROLLED}


def _cuda_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    # The widest pack (one 16-byte load per window position in channels-last), a thread per
    # group of outputs, 256 threads a block; smaller blocks while the SMs lack 4 each.
    vec = max(_cuda_vecs(facts))
    groups = _outputs(facts) // vec
    threads = 256
    while threads > 64 and math.ceil(groups / threads) < 4 * hw.sms:
        threads //= 2
    while threads * vec > max(64, next_pow2(_outputs(facts))) and vec > 1:
        vec //= 2  # a tiny output: no block wider than it
    return {"threads": threads, "items": 1, "vec": vec}


# ---------------------------------------------------------------- render

def _op(facts: dict[str, Any]) -> str:
    return "max" if facts["kind"] == "max" else "avg"


def _cpu_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    constants = {**_geometry(facts, "LL"), **c_element(facts["dtype"]),
                 "PARALLEL_LOOPS": 2 if point["parallel"] == "rows" else 1, "SCHEDULE": point["schedule"]}
    if _op(facts) == "avg":
        constants["SIMD_LOOPS"] = point["simd"]
    return _render(facts, f"cpu_{_op(facts)}.c", constants)


def _cuda_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    return _render(facts, f"cuda_{_op(facts)}.cu", {
        **_geometry(facts, "LL"), **cuda_element(facts["dtype"]),
        "THREADS": point["threads"], "ITEMS": point["items"], "VEC": point["vec"]})


def _triton_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    variant = point["variant"]
    name = f"triton_{variant}.py" if _op(facts) == "avg" else f"triton_max_{variant}.py"
    constants = {**_geometry(facts, ""), "OUT_SHAPE": facts["out_shape"], "OUT_STRIDE": facts["out_stride"],
                 "INDEX_64": _needs_int64(facts), "BLOCK": point["block"]}
    if variant == "window_tile":
        constants["WINDOW_BLOCK"] = point["window_block"]
    constants["NUM_WARPS"] = point["num_warps"]
    if variant == "per_output":
        constants["UNROLL"] = point["unroll"]
    return _render(facts, name, constants)


def _render(facts: dict[str, Any], name: str, constants: dict[str, Any]) -> str:
    text = kernel_file.read(__name__, name)
    return kernel_file.render(text, facts["op"], constants, kernel_file.style_of(name))


def _geometry(facts: dict[str, Any], suffix: str) -> dict[str, Any]:
    """The shape and the window, the same names in every kernel file (C sizes as long long)."""
    names = ["n", "c", "h", "w", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw"]
    if facts["kind"] == "max":
        names += ["dh", "dw"]
    sizes = {name.upper(): f"{facts[name]}{suffix}" if suffix else facts[name] for name in names}
    if facts["kind"] == "max":
        return {**sizes, "CHANNELS_LAST": facts["layout"] == "nhwc"}
    return {**sizes, "ADAPTIVE": facts["kind"] == "adaptive", "COUNT_PAD": facts["include_pad"],
            "DIVISOR": facts["divisor"] or 0, "CHANNELS_LAST": facts["layout"] == "nhwc"}


def _needs_int64(facts: dict[str, Any]) -> bool:
    """Whether int32 offsets could overflow: the input's or output's size, plus a program's
    masked overrun past the end."""
    elements = facts["n"] * facts["c"] * max(facts["h"] * facts["w"], facts["oh"] * facts["ow"])
    return elements + 2**16 >= 2**31


# ---------------------------------------------------------------- explain

_REASONS: dict[str, dict[Any, str]] = {
    "variant": {"per_output": "one output per lane, walking its window: few loads per output, any window",
                "window_tile": "tiles of outputs by window positions: coalesced reads of large windows"},
    "unroll": {True: "window positions unrolled: every load issued up front",
               False: "a loop over the window: less code, fewer registers"},
    "parallel": {"planes": "a plane (or image) per thread: each thread reads one contiguous block",
                 "rows": "output rows shared across threads: work for every core when planes are few"},
    "simd": {True: "ask the compiler to vectorise the inner loops", False: "scalar inner loops"},
    "schedule": {"static": "equal shares per thread: no scheduling cost",
                 "dynamic": "threads take work as they free up: better when cores are uneven"},
}


def explain(name: str, old: Any, new: Any) -> str:
    text = _REASONS.get(name, {}).get(new)
    if text:
        return text
    if name == "block":
        return "more outputs per program: fewer programs, more loads in flight" if new > old else \
            "fewer outputs per program: more programs to spread over the SMs"
    if name == "window_block":
        return "more window positions per step: fewer loop trips" if new > old else \
            "fewer window positions per step: less of the tile masked off, fewer registers"
    if name == "num_warps":
        return "more warps keep more loads in flight" if new > old else "fewer warps: more programs per SM"
    if name == "threads":
        return "larger blocks: fewer blocks to schedule" if new > old else \
            "smaller blocks: more blocks to spread over the SMs"
    if name == "items":
        return "more outputs per thread: more loads in flight per thread" if new > old else \
            "fewer outputs per thread: more threads over the SMs"
    if name == "vec":
        return "wider loads of neighbouring channels: fewer instructions per byte" if new > old else \
            "narrower loads: more threads for the same outputs"
    return "try a neighbouring value"


WRITERS = Writers(cpu=Writer(lambda facts, hw: _cpu_space(facts), _cpu_start, _cpu_render),
                  triton=Writer(lambda facts, hw: _triton_space(facts), _triton_start, _triton_render),
                  cuda=Writer(lambda facts, hw: _cuda_space(facts), _cuda_start, _cuda_render))
space, start, render = WRITERS.space, WRITERS.start, WRITERS.render  # by backend name
FAMILIES = [Family(name="pool", match=match, writers=WRITERS, explain=explain)]
