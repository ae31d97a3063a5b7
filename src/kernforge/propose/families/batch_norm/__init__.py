"""Batch norm, per channel c of an [N, C, *] input, in two modes:
    inference       y = (x - running_mean[c]) / sqrt(running_var[c] + eps) * w[c] + b[c]
    batch stats     y = (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c], mean and biased var over
                    the N x HW values of channel c; the saved mean and invstd are outputs too

Instance norm is the second mode: torch runs it as native_batch_norm in training mode on the
[1, N*C, H, W] view, no running statistics, each (sample, channel) plane a channel.

Memory-bound: inference reads x once and writes y (8 bytes per element in fp32); batch stats
read x twice (statistics, then normalise). Inference's variants differ in how programs map
onto the tensor (flat elements, planes, channels-last tiles); batch stats' in whether a
channel's reduction stays in one program or is split into partials when the channels alone
cannot fill the SMs.

In training mode with running statistics native_batch_norm also updates running_mean and
running_var in place. Its schema does not mark them written (no Tensor(a!)), so the evaluator
treats them as inputs that must not change and never compares their new values: a kernel that
made the update would be judged a cheat, one that skipped it would pass. That form is refused,
as is _native_batch_norm_legit's, whose running statistics are marked written (the judge then
wants every output to be one of them).
"""

from __future__ import annotations

import math
from typing import Any

from kernforge.propose.builtin import kernel_file
from kernforge.propose.builtin.family import Family, Hardware, Writer, Writers
from kernforge.propose.builtin.space import Param, Space, Variant
from kernforge.propose.families.common import (
    ITEMSIZE,
    SUPPORTED_DTYPES,
    c_element,
    contiguous_strides,
    cuda_element,
    is_tensor,
    next_pow2,
)
from kernforge.records.task import KernelTask

NATIVE = "aten::native_batch_norm.default"
NO_TRAINING = "aten::_native_batch_norm_legit_no_training.default"
CUDNN = "aten::cudnn_batch_norm.default"
NO_STATS = "aten::_native_batch_norm_legit.no_stats"
LEGIT = "aten::_native_batch_norm_legit.default"

# Where each op keeps its arguments: (weight, bias, running_mean, running_var, training, eps);
# None: the op has no such argument (training None: always inference).
ARGS = {
    NATIVE: (1, 2, 3, 4, 5, 7),
    NO_TRAINING: (1, 2, 3, 4, None, 6),
    CUDNN: (1, 2, 3, 4, 5, 7),
    NO_STATS: (1, 2, None, None, 3, 5),
}
OPS = (*ARGS, LEGIT)

MAX_TILE = 8192  # batch stats: fp32 values in one program's tile before the H200's registers spill
SMEM_CHANNELS = 4096  # cuda: scales and shifts of at most 4096 channels (32 KB) in shared memory


# ---------------------------------------------------------------- match

def match(task: KernelTask) -> dict[str, Any] | str:
    if task.op not in OPS:
        return f"no built-in template for {task.op}"
    if task.op == LEGIT:
        return ("batch norm as _native_batch_norm_legit writes running_mean/var in place, which no "
                "candidate's output can be: no built-in template")
    x = task.args[0] if task.args else None
    if not is_tensor(x):
        return "batch norm without a tensor input"
    if x["dtype"] not in SUPPORTED_DTYPES:
        return f"batch norm on {x['dtype']} has no built-in template"
    if len(x["shape"]) < 2 or math.prod(x["shape"]) == 0:
        return "batch norm on an input without a channel dim, or empty, has no built-in template"
    w_i, b_i, rm_i, rv_i, train_i, eps_i = ARGS[task.op]
    if len(task.args) <= eps_i:
        return f"batch norm with fewer arguments than {task.op} takes"
    layout = _layout(x)
    if layout is None:
        return "batch norm on an input neither contiguous nor channels-last has no built-in template"
    arg = lambda i: task.args[i] if i is not None else None  # noqa: E731
    aux = {"weight": arg(w_i), "bias": arg(b_i), "running_mean": arg(rm_i), "running_var": arg(rv_i)}
    has_stats = aux["running_mean"] is not None and aux["running_var"] is not None
    training = bool(arg(train_i)) if train_i is not None else False
    c = x["shape"][1]
    for name, desc in aux.items():
        why = _aux_reason(name, desc, x["dtype"], c)
        if why:
            return f"batch norm: {why}"
    x_dtype = x["dtype"].replace("torch.", "")
    outputs = [{"shape": list(o["shape"]), "dtype": o["dtype"].replace("torch.", "")} for o in task.outputs]
    saved = outputs[1:3]
    if len(saved) != 2 or saved[0]["dtype"] != saved[1]["dtype"] or saved[0]["dtype"] not in (x_dtype, "float32"):
        return "batch norm whose saved statistics are not two of the input's dtype or float32 has no built-in template"
    if training:
        if task.op == CUDNN:
            return "cudnn_batch_norm in training mode (its reserve space is cuDNN's own) has no built-in template"
        if has_stats:
            return ("batch norm in training mode with running statistics updates them in place, which the "
                    "evaluator does not check (the schema does not mark them written): no built-in template; "
                    "training without running statistics and inference are supported")
        mode = "batch_stats"
        if any(math.prod(o["shape"]) != c for o in saved):
            return "batch norm with batch statistics whose saved statistics are not [C] has no built-in template"
    else:
        if not has_stats:
            return "batch norm in inference without running statistics has no built-in template"
        mode = "inference"
        # The saved statistics are empty on CPU in eval mode (and for cuDNN); CUDA's native kernels
        # return [C] copies of running_mean and 1/sqrt(running_var + eps) (seen on the H200, torch 2.11).
        sizes = {math.prod(o["shape"]) for o in saved}
        if sizes not in ({0}, {c}):
            return "batch norm inference whose saved statistics are neither empty nor [C] has no built-in template"
    short = {k: (v["dtype"].replace("torch.", "") if v else x_dtype) for k, v in aux.items()}
    return {"op": task.op, "mode": mode, "n": x["shape"][0], "c": c, "hw": math.prod(x["shape"][2:]),
            "layout": layout, "dtype": x_dtype, "eps": float(task.args[eps_i]),
            "has_weight": aux["weight"] is not None, "has_bias": aux["bias"] is not None,
            **{f"{k}_fp32": short[k] == "float32" and x_dtype != "float32" for k in aux},
            "saved": math.prod(saved[0]["shape"]), "saved_fp32": saved[0]["dtype"] == "float32" != x_dtype,
            "reserve": len(outputs) == 4}


def _layout(x: dict[str, Any]) -> str | None:
    shape, stride = x["shape"], x["stride"]
    if stride == contiguous_strides(shape):
        return "nchw"
    if len(shape) == 4:
        _, c, h, w = shape
        want = [h * w * c, 1, w * c, c]
        if all(s == t for s, t, size in zip(stride, want, shape) if size > 1):
            return "nhwc"
    return None


def _aux_reason(name: str, desc: Any, x_dtype: str, c: int) -> str | None:
    """Weights and statistics may be the input's dtype or float32 (mixed-precision models)."""
    if desc is None:
        return None
    if not is_tensor(desc):
        return f"{name} is not a tensor"
    if desc["dtype"] not in (x_dtype, "torch.float32"):
        return f"{name} of dtype {desc['dtype']} beside a {x_dtype} input has no built-in template"
    if math.prod(desc["shape"]) != c:
        return f"a {name} not of C={c} values has no built-in template"
    if desc["stride"] != contiguous_strides(desc["shape"]) and c > 1:
        return f"a non-contiguous {name} has no built-in template"
    return None


# ---------------------------------------------------------------- spaces

BLOCKS = (512, 1024, 2048, 4096, 8192)
WARPS = (1, 2, 4, 8, 16)


def _cpu_space(facts: dict[str, Any], hw: Hardware) -> Space:
    params = [Param("schedule", ("static", "dynamic")), Param("simd", (False, True))]
    stats = facts["mode"] == "batch_stats"
    return Space.single(params + [Param("stats", ("two_pass", "one_pass_double"))] if stats else params)


def _triton_space(facts: dict[str, Any], hw: Hardware) -> Space:
    return _stats_space(facts) if facts["mode"] == "batch_stats" else _inference_space(facts)


def _cuda_affine_space(facts: dict[str, Any], hw: Hardware) -> Space | None:
    """The CUDA kernel applies given statistics: training's batch statistics have none yet."""
    return None if facts["mode"] == "batch_stats" else _cuda_space(facts)


def _numel(facts: dict[str, Any]) -> int:
    return facts["n"] * facts["c"] * facts["hw"]


def _inference_space(facts: dict[str, Any]) -> Space:
    def valid(point: dict[str, Any]) -> bool:
        threads = 32 * point["num_warps"]
        return threads <= point["block"] and point["block"] // threads <= 32  # 1..32 values a thread

    def blocks(limit: int) -> tuple[int, ...]:
        # no block past the work it covers rounded up (512 at least): the rest would be masked
        return tuple(b for b in BLOCKS if b <= max(512, next_pow2(limit)))

    params = lambda limit: (Param("block", blocks(limit)), Param("num_warps", WARPS[1:]))  # noqa: E731
    variants = [Variant("flat", params(_numel(facts)), valid)]
    if facts["layout"] == "nchw":
        variants.append(Variant("plane", params(facts["hw"]), valid))
    else:
        variants.append(Variant("tile", params(_numel(facts)), valid))
    return Space(variants)


def _stats_space(facts: dict[str, Any]) -> Space:
    positions = facts["n"] * facts["hw"]
    block_c = tuple(b for b in (1, 2, 4, 8, 16, 32, 64) if b <= max(1, next_pow2(facts["c"])))
    block_p = tuple(b for b in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if b <= max(16, next_pow2(positions)))
    warps = (1, 2, 4, 8)

    def valid(point: dict[str, Any]) -> bool:
        tile = point["block_c"] * point["block_p"]
        return tile <= MAX_TILE and 32 * point["num_warps"] <= max(32, tile)

    def valid_split(point: dict[str, Any]) -> bool:
        # every split at least one tile of positions: no program without work
        return valid(point) and math.ceil(positions / point["splits"]) >= point["block_p"]

    common = (Param("block_c", block_c), Param("block_p", block_p), Param("num_warps", warps))
    variants = [Variant("channel", common, valid)]
    if positions >= 2 * block_p[0]:
        variants.append(Variant("split", common + (Param("splits", (2, 4, 8, 16, 32, 64)),), valid_split))
    return Space(variants)


def _cuda_vecs(facts: dict[str, Any]) -> tuple[int, ...]:
    # A pack is one aligned load of at most 16 bytes, inside one channel (NCHW: HW % VEC == 0)
    # or over whole channel rows (NHWC: C % VEC == 0).
    along = facts["c"] if facts["layout"] == "nhwc" else facts["hw"]
    item = ITEMSIZE[facts["dtype"]]
    return tuple(v for v in (1, 2, 4, 8) if v * item <= 16 and along % v == 0)


def _cuda_space(facts: dict[str, Any]) -> Space:
    numel = _numel(facts)

    def valid(point: dict[str, Any]) -> bool:
        # no block covering more than the tensor rounded up, past the smallest block of its packs
        return point["threads"] * point["items"] * point["vec"] <= max(128 * point["vec"], next_pow2(numel))

    smem = (False, True) if facts["c"] <= SMEM_CHANNELS else (False,)
    return Space.single([Param("threads", (128, 256, 512, 1024)), Param("vec", _cuda_vecs(facts)),
                         Param("items", (1, 2, 4, 8)), Param("smem_affine", smem)], valid)


# ---------------------------------------------------------------- starting rules

def _cpu_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    point = {"schedule": "static", "simd": True}
    # double sums in one read: x read twice in all instead of three times
    return point | {"stats": "one_pass_double"} if facts["mode"] == "batch_stats" else point


def _triton_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    if facts["mode"] == "batch_stats":
        return _stats_start(facts, hw)
    return _inference_start(facts)


def _inference_start(facts: dict[str, Any]) -> dict[str, Any]:
    numel = _numel(facts)
    if facts["layout"] == "nhwc":
        # ResNet-50 channels-last: C in 64..2048, a [positions x channels] tile with the channel
        # vectors loaded once per program.
        block = min(4096, max(512, next_pow2(numel)))
        return {"variant": "tile", "block": block, "num_warps": 8 if block >= 2048 else 4}
    if facts["hw"] >= 1024:
        # a (sample, channel) plane of >= 1K values: scalar scale/shift, blocks of up to 4K
        block = min(4096, max(512, next_pow2(facts["hw"])))
        return {"variant": "plane", "block": block, "num_warps": 4 if block <= 1024 else 8}
    # 7x7 or 14x14 planes would leave most of a plane program masked: flat, the channel per element
    # (32,2048,7,7) fp32 on the H200: block 1024 with 8 warps 14.8 us, 2048 16.2, 4096 20.0 (eager 49;
    # timed by hand while the family was written, not kept in bench/results)
    block = min(1024, max(512, next_pow2(numel)))
    return {"variant": "flat", "block": block, "num_warps": 8 if block >= 1024 else 4}


def _stats_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    positions = facts["n"] * facts["hw"]
    if facts["layout"] == "nhwc":
        # channels are the fastest index: 32 of them make a 64-128 byte run per position
        block_c = min(32, next_pow2(facts["c"]))
    else:
        block_c = 1  # a channel's values are runs of HW: one channel a program, read along them
    programs = math.ceil(facts["c"] / block_c)
    splits = 1
    if programs < 2 * hw.sms:
        # Too few channel blocks for the SMs: split the positions for about two programs an SM,
        # but keep 1K positions a split at least (less is launch-bound: the split costs a launch).
        splits = min(64, next_pow2(math.ceil(2 * hw.sms / programs)))
        while splits > 1 and positions / splits < 1024:
            splits //= 2
    per_split = math.ceil(positions / splits)
    # tiles of up to 4K values; a split's chunk holds whole tiles
    whole = next_pow2(per_split) if splits == 1 else 1 << (per_split.bit_length() - 1)
    block_p = max(16, min(4096 // block_c, whole))
    tile = block_c * block_p
    point = {"block_c": block_c, "block_p": block_p, "num_warps": max(1, min(8, tile // 512))}
    if splits == 1:
        return {"variant": "channel", **point}
    return {"variant": "split", **point, "splits": splits}


def _cuda_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    vec = max(_cuda_vecs(facts))
    packs = _numel(facts) // vec
    # 256 threads; four packs a thread (loads in flight) while that still leaves four blocks per SM
    items = 4
    while items > 1 and packs / (256 * items) < 4 * hw.sms:
        items //= 2
    point = {"threads": 256, "vec": vec, "items": items, "smem_affine": False}
    # scales and shifts in shared memory when computing them costs under a quarter of a block's work
    point["smem_affine"] = facts["c"] <= SMEM_CHANNELS and 4 * facts["c"] <= 256 * items * vec
    if not _cuda_space(facts).contains(point):
        point["threads"] = 128
    return point


# ---------------------------------------------------------------- render

def _shape(facts: dict[str, Any]) -> dict[str, Any]:
    return {"N": facts["n"], "C": facts["c"], "HW": facts["hw"], "EPS": facts["eps"]}


def _flags(facts: dict[str, Any]) -> dict[str, Any]:
    return {"CHANNELS_LAST": facts["layout"] == "nhwc", "HAS_W": facts["has_weight"], "HAS_B": facts["has_bias"]}


def _c_constants(facts: dict[str, Any], point: dict[str, Any], element: dict[str, Any]) -> dict[str, Any]:
    """What the C and CUDA kernels share: sizes as 64-bit literals, flags, the aux tensors' dtypes."""
    c_shape = {**_shape(facts), "N": f"{facts['n']}LL", "C": f"{facts['c']}LL", "HW": f"{facts['hw']}LL"}
    constants = {**c_shape, **element, **_flags(facts), "W_FP32": facts["weight_fp32"], "B_FP32": facts["bias_fp32"]}
    if facts["mode"] == "batch_stats":
        return constants | {"SAVED_FP32": facts["saved_fp32"], "STATS": point["stats"].upper()}
    return constants | {"RM_FP32": facts["running_mean_fp32"], "RV_FP32": facts["running_var_fp32"],
                        "SAVED": facts["saved"], "SAVED_FP32": facts["saved_fp32"],
                        "N_OUT": 4 if facts["reserve"] else 3}


def _cpu_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    constants = _c_constants(facts, point, c_element(facts["dtype"]))
    constants |= {"SCHEDULE": point["schedule"], "SIMD_LOOPS": point["simd"]}
    return _render(facts, "cpu_stats.c" if facts["mode"] == "batch_stats" else "cpu.c", constants)


def _cuda_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    constants = _c_constants(facts, point, cuda_element(facts["dtype"]))
    constants |= {"THREADS": point["threads"], "VEC": point["vec"], "ITEMS": point["items"],
                  "SMEM_AFFINE": point["smem_affine"]}
    return _render(facts, "cuda_affine.cu", constants)


def _triton_render(facts: dict[str, Any], point: dict[str, Any]) -> str:
    shape, flags = _shape(facts), _flags(facts)
    if facts["mode"] == "batch_stats":
        constants = {**shape, **flags, "SAVED_FP32": facts["saved_fp32"], "BLOCK_P": point["block_p"],
                     "BLOCK_C": point["block_c"]}
        if point["variant"] == "split":
            constants["SPLITS"] = point["splits"]
        constants["NUM_WARPS"] = point["num_warps"]
        return _render(facts, f"triton_stats_{point['variant']}.py", constants)
    if point["variant"] != "flat":
        flags.pop("CHANNELS_LAST")  # a plane is NCHW's, a tile NHWC's
    constants = {**shape, **flags, "SAVED": facts["saved"], "SAVED_FP32": facts["saved_fp32"],
                 "RESERVE": facts["reserve"], "BLOCK": point["block"], "NUM_WARPS": point["num_warps"]}
    return _render(facts, f"triton_{point['variant']}.py", constants)


def _render(facts: dict[str, Any], name: str, constants: dict[str, Any]) -> str:
    text = kernel_file.read(__name__, name)
    return kernel_file.render(text, facts["op"], constants, kernel_file.style_of(name))


# ---------------------------------------------------------------- explain

_REASONS: dict[str, dict[Any, str]] = {
    "variant": {
        "flat": "one flat index over every element, the channel recomputed per element: no tail waste",
        "plane": "programs inside one (sample, channel) plane: scale and shift loaded once as scalars",
        "tile": "[positions x channels] tiles of the channels-last layout: scale and shift loaded once "
                "per tile as vectors",
        "channel": "a program per block of channels, statistics then normalisation in one launch: "
                   "no partials, for when the channel blocks fill the SMs",
        "split": "each channel's positions split across programs (float32 partials merged in a fixed "
                 "order): fills the SMs when there are few channels",
    },
    "stats": {"two_pass": "the mean first, then squared deviations: exact, x read three times",
              "one_pass_double": "sum and sum of squares in double in one read: x read twice, still "
                                 "precise for large-mean data"},
    "schedule": {"static": "equal ranges per thread: no scheduling cost",
                 "dynamic": "threads take work as they free up: better when cores are uneven"},
    "simd": {True: "ask the compiler to vectorise the inner loops", False: "scalar inner loops"},
    "smem_affine": {True: "scales and shifts computed once per block into shared memory",
                    False: "each pack computes its channels' scale and shift: no shared memory, no barrier"},
}

_NUMBERS = {
    "block": ("larger blocks: fewer programs and wider loads", "smaller blocks: more programs, less masking"),
    "num_warps": ("more warps keep more loads in flight", "fewer warps: more programs resident per SM"),
    "block_c": ("more channels per program: longer contiguous runs in channels-last, fewer programs",
                "fewer channels per program: more programs to spread over the SMs"),
    "block_p": ("more positions per tile: fewer loop trips", "fewer positions per tile: fewer registers"),
    "splits": ("more splits: more programs when channels are few", "fewer splits: fewer partials to merge"),
    "threads": ("more threads per block: more loads in flight per block", "fewer threads: more blocks per SM"),
    "vec": ("wider loads: fewer instructions per byte", "narrower loads"),
    "items": ("more packs per thread: more loads in flight, fewer blocks", "fewer packs per thread: more blocks"),
}


def explain(name: str, old: Any, new: Any) -> str:
    text = _REASONS.get(name, {}).get(new)
    if text:
        return text
    if name in _NUMBERS:
        return _NUMBERS[name][0 if new > old else 1]
    return "try a neighbouring value"


WRITERS = Writers(cpu=Writer(_cpu_space, _cpu_start, _cpu_render),
                  triton=Writer(_triton_space, _triton_start, _triton_render),
                  cuda=Writer(_cuda_affine_space, _cuda_start, _cuda_render))
space, start, render = WRITERS.space, WRITERS.start, WRITERS.render  # by backend name
FAMILIES = [Family(name="batch_norm", match=match, writers=WRITERS, explain=explain)]
