"""Group norm over each (sample, group of C/G channels):

    y = (x - mean_g) * rsqrt(var_g + eps) * w[c] + b[c],  mean and rstd of shape (N, G) as outputs

Memory-bound: one read of x and one write of y is the floor (4 bytes an element in bf16).
The statistics need the whole group before its first output, so a group is either read
twice (the second time from L2 where it can be) or held on chip between the two steps.
The variants differ in where the second look at x comes from:

    per_group  one program per group, reading it twice: many small groups;
    split      each group in chunks over many programs, partials then a second launch that
               normalises (reverse: the second pass starts with what the first read last,
               still in L2; wave_groups: both passes over a few groups at a time);
    resident   one program per SM slot, a group's programs wait for each other's partials,
               then normalise the chunk each just read, from L2;
    queue      programs take tickets for pass 1 and pass 2 of chunks from one counter, pass 2
               of a group `lead` groups behind its pass 1: no wave barrier;
    held       the whole GPU holds one group in registers, a chunk a program, the next groups
               loading: x crosses DRAM once.

On the H200 the large VAE group norm, (1,256,512,512) bf16 (128 MB, more than the 50 MB of
L2), took 0.0768 ms held (1.21x the floor) against the queue's 0.0990 (1.57x)
(bench/results/h200/search/table_all.md, bench/results/h200/probe/README.md).

Variance: where a block is read whole, each block's (count, mean, M2) is merged with Chan's
formula; the waiting variants sum x minus one value of the chunk, so that a large mean
does not swamp the spread. Every kernel gives a constant group's mean as its value exactly,
so its outputs are exactly b, as eager's: rstd = 1/sqrt(eps) there magnifies any rounding of
the mean (the value-class sets draw such groups, evaluate/classes.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kernforge.propose.builtin import kernel_file
from kernforge.propose.builtin.family import Family, Hardware, Writer, Writers
from kernforge.propose.builtin.space import Param, Space, Variant
from kernforge.propose.families.elementwise import formula, lit_c, lit_triton
from kernforge.propose.families.common import (
    ITEMSIZE,
    aux_dtype_reason,
    c_element,
    contiguous_strides,
    cuda_element,
    next_pow2,
    norm_input,
    short_dtype,
)
from kernforge.records.task import KernelTask

OP = "aten::native_group_norm.default"

MAX_PARTIALS = 4096  # split: a group's partials are combined as one vector, of at most 4096
HELD_BYTES_PER_THREAD = 128  # held: ptxas gives ~250 registers a thread at 128 bytes of chunk a thread
HELD_BYTES_PER_SM = 32768  # held: four programs an SM of 16 KB chunks took 0.20-0.21 ms (run_held_gn)
SM_WARPS = 64  # warps an SM holds


# ---------------------------------------------------------------- match

def match(task: KernelTask) -> dict[str, Any] | str:
    if task.chain:
        return _match_chain(task)
    if task.op != OP:
        return f"no built-in template for {task.op}"
    x = norm_input(task, "group norm")
    if isinstance(x, str):
        return x
    if len(task.args) < 8:
        return "group norm with fewer arguments than aten::native_group_norm takes"
    weight, bias, n, c, hw, groups, eps = task.args[1:8]
    if not all(isinstance(v, int) for v in (n, c, hw, groups)) or groups <= 0 or c % groups:
        return "group norm whose channels do not split into whole groups"
    if n * c * hw != math.prod(x["shape"]):
        return "group norm whose N*C*HxW is not the input's size"
    if x["stride"] != contiguous_strides(x["shape"]):
        # A channels-last group spans Cg channels at every position: a [positions x Cg] tile. Not
        # written yet: the SD3.5 VAE's group norms (the target) run on NCHW-contiguous tensors.
        return "group norm on a non-contiguous (e.g. channels-last) input has no built-in template yet"
    for name, desc in (("weight", weight), ("bias", bias)):
        why = aux_dtype_reason(name, desc, x["dtype"])
        if why:
            return f"group norm: {why}"
    dtype = short_dtype(x["dtype"])
    stats = {short_dtype(o["dtype"]) for o in task.outputs[1:3]}
    if len(stats) != 1 or not stats <= {dtype, "float32"}:
        return "group norm with statistics in another dtype has no built-in template"
    return {"op": OP, "n": n, "c": c, "hw": hw, "groups": groups, "group_size": c // groups * hw,
            "n_groups": n * groups, "dtype": dtype, "eps": float(eps),
            "has_weight": weight is not None, "has_bias": bias is not None,
            "w_fp32": _fp32_beside(weight, dtype), "b_fp32": _fp32_beside(bias, dtype),
            "stats_fp32": stats == {"float32"}}


def _match_chain(task: KernelTask) -> dict[str, Any] | str:
    """Group norm then element-wise steps on its y (SiLU, GELU, a scale): the kernels with the steps
    as their epilogue (an fp32 function of y, for Triton and for C and CUDA), y never written before them.
    The chain's inputs must be group norm's x, weight and bias in that order, and its one output
    the last step's value."""
    steps = task.chain["steps"]
    if steps[0]["op"] != OP:
        return f"no built-in template for {task.op}"
    x_ref, w_ref, b_ref = steps[0]["args"][:3]
    if x_ref != {"input": 0} or w_ref not in (None, {"input": 1}) or b_ref not in (None, {"input": 2}):
        return "a group norm chain whose inputs are not (x, weight, bias) in order has no built-in template"
    if task.chain["outputs"] != [[len(steps) - 1, 0]]:
        return "a group norm chain that keeps more than its last value has no built-in template"
    epilogue = _epilogue(steps[1:])
    if isinstance(epilogue, str):
        return epilogue
    x, out = task.args[0], task.outputs[0]
    if (out["shape"], out["stride"], out["dtype"]) != (x["shape"], x["stride"], x["dtype"]):
        return "a group norm chain whose output is not laid out as its input has no built-in template"
    args = [x, task.args[1] if w_ref else None, task.args[2] if b_ref else None, *steps[0]["args"][3:8]]
    stats = {"dtype": "torch.float32"}  # not outputs of the chain: kept in float32 inside the kernel
    facts = match(replace(task, op=OP, args=args, outputs=[out, stats, stats], chain=None))
    if isinstance(facts, str):
        return facts
    return {**facts, "op": task.op, "epilogue": epilogue[0], "epilogue_c": epilogue[1], "chain": True}


def _epilogue(steps: list[dict[str, Any]]) -> tuple[str, str] | str:
    """The element-wise steps after group norm as one fp32 function of y, (Triton, C); or why they
    cannot be."""
    triton_lines, c_lines = ["@triton.jit", "def epilogue(a):"], []
    for j, step in enumerate(steps, start=1):
        tensors = [a for a in step["args"] if isinstance(a, dict)]
        if tensors != [{"step": j - 1, "output": 0}] or any(isinstance(v, dict) for v in step["kwargs"].values()):
            return "a group norm chain whose later steps read other tensors has no built-in template"
        if step["op"] == "aten::_to_copy.default":
            continue  # computed in fp32 throughout, rounded once at the store
        made = formula(step["op"], step["args"], step["kwargs"])
        if isinstance(made, str):
            return f"after group norm: {made}"
        triton, c, number = made
        if number is not None:
            triton_lines.append(f"    b = {lit_triton(number)}")
            c_lines.append(f"    {{ const float b = {lit_c(number)}; a = {c}; }}")
        else:
            c_lines.append(f"    a = {c};")
        triton_lines.append(f"    a = {triton}")
    return "\n".join(triton_lines + ["    return a", ""]) + "\n", "\n".join(c_lines)


IDENTITY = "@triton.jit\ndef epilogue(y):\n    return y\n\n"


def _c_epilogue(facts: dict[str, Any], qualifiers: str) -> kernel_file.Snippet:
    """The chain's epilogue (its C body, or none: y as it is) as a C or CUDA function."""
    body = facts.get("epilogue_c", "")
    return kernel_file.Snippet(f"{qualifiers} float epilogue(float a) {{\n{body}\n    return a;\n}}" if body
                               else f"{qualifiers} float epilogue(float a) {{ return a; }}")


def _fp32_beside(desc: dict[str, Any] | None, dtype: str) -> bool:
    return desc is not None and desc["dtype"] == "torch.float32" and dtype != "float32"


# ---------------------------------------------------------------- spaces

WARPS = (1, 2, 4, 8, 16, 32)
BLOCKS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
CHUNKS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def _cpu_space() -> Space:
    # planes: sums per (sample, channel) plane combined per group, so one-pass by construction
    return Space([Variant("groups", (Param("stats", ("two_pass", "one_pass_double")), Param("simd", (False, True)))),
                  Variant("planes", (Param("simd", (False, True)),))])


def _chunks(facts: dict[str, Any], point: dict[str, Any]) -> int:
    return -(-facts["group_size"] // point["chunk"])


def _chunk_range(facts: dict[str, Any], fewest: int, most: int) -> tuple[int, ...]:
    """Chunk sizes that split a group into `fewest` to `most` chunks."""
    size = facts["group_size"]
    return tuple(c for c in CHUNKS if fewest <= -(-size // c) <= most and (fewest > 1 or c < 2 * size))


def _tile_ok(point: dict[str, Any], block: int) -> bool:
    # a warp's lanes at least one value each, at most 32 values a thread a load
    threads = 32 * point["num_warps"]
    return threads <= block and block // threads <= 32


def _triton_space(facts: dict[str, Any], hw: Hardware) -> Space:
    size, item = facts["group_size"], ITEMSIZE[facts["dtype"]]
    blocks = tuple(b for b in BLOCKS if b <= max(256, 2 * next_pow2(size)))
    warps, unroll = Param("num_warps", WARPS), Param("unroll", (1, 2, 4, 8))
    variants = [Variant("per_group", (Param("block", blocks), warps), lambda p: _tile_ok(p, p["block"]))]

    split_chunks = _chunk_range(facts, 1, MAX_PARTIALS)
    waves = (0,) + tuple(w for w in (8, 4, 2) if 2 * w <= facts["n_groups"])  # half the groups at most
    if split_chunks:
        variants.append(Variant("split", (Param("chunk", split_chunks), Param("block", blocks), warps,
                                          Param("reverse", (False, True)), Param("wave_groups", waves)),
                                lambda p: _tile_ok(p, p["block"]) and p["block"] <= p["chunk"]))

    def waiting(p: dict[str, Any]) -> bool:
        # UNROLL blocks a trip inside one chunk, at most 64 values a thread a trip
        tile = p["block"] * p["unroll"]
        return (_tile_ok(p, p["block"]) and tile <= p["chunk"] and tile // (32 * p["num_warps"]) <= 64
                and p["per_sm"] * p["num_warps"] <= SM_WARPS)

    # resident: every program of a wave resident at once, a group at least two of them; two an
    # SM at most, of 16 warps at most (two of 32 would need every thread slot)
    resident_chunks = _chunk_range(facts, 2, 2 * hw.sms)
    if resident_chunks:
        variants.append(Variant(
            "resident", (Param("chunk", resident_chunks), Param("block", blocks), warps, unroll,
                         Param("pipeline", (False, True)), Param("per_sm", (1, 2))),
            lambda p: waiting(p) and p["per_sm"] * p["num_warps"] <= 32 and _chunks(facts, p) <= p["per_sm"] * hw.sms))
    # queue: any number of programs (none waits for one that has not started: see the kernel)
    queue_chunks = _chunk_range(facts, 2, 1 << 30)
    if queue_chunks:
        variants.append(Variant(
            "queue", (Param("chunk", queue_chunks), Param("block", blocks), warps, unroll,
                      Param("per_sm", (1, 2, 4, 8)), Param("lead", (1, 2, 3, 4, 8))), waiting))

    held_chunks = _chunk_range(facts, 2, 4 * hw.sms)
    if held_chunks:
        variants.append(Variant(
            "held", (Param("chunk", held_chunks), warps, Param("unroll", (1, 2, 4, 8)),
                     Param("pipeline", (False, True)), Param("per_sm", (1, 2, 4)), Param("lead", (2, 3, 4, 8))),
            lambda p: _held_valid(facts, hw, item, p)))
    return Space(variants)


def _held_early(point: dict[str, Any]) -> int:
    """How many groups ahead of normalising a held program publishes its statistics."""
    return 2 if point["pipeline"] else 1


def _held_valid(facts: dict[str, Any], hw: Hardware, item: int, p: dict[str, Any]) -> bool:
    # One program per chunk of a group, all resident at once, each holding EARLY + 1 chunks in
    # registers and loading one more: at most 128 bytes of each a thread, 32 KB of chunk an SM.
    threads = 32 * p["num_warps"]
    # unroll: the chunk as rows, at least one 16-byte vector a thread a row
    rows_fit = p["unroll"] == 1 or p["chunk"] // p["unroll"] >= threads * 16 // item
    # lead: the group loading into registers (EARLY + 1), no prefetch; further, bulk L2
    # prefetches of 16-byte multiples that never run past the group, so chunks that divide it
    loading = _held_early(p) + 1
    piece_bytes = p["chunk"] // p["num_warps"] * item
    prefetch = p["lead"] == loading or (p["lead"] > loading and piece_bytes % 16 == 0
                                        and facts["group_size"] % p["chunk"] == 0)
    return (rows_fit and prefetch and threads <= p["chunk"] and p["chunk"] // threads * item <= HELD_BYTES_PER_THREAD
            and p["per_sm"] * p["num_warps"] <= 32 and p["per_sm"] * p["chunk"] * item <= HELD_BYTES_PER_SM
            and _chunks(facts, p) <= p["per_sm"] * hw.sms)


def _cuda_vecs(facts: dict[str, Any]) -> tuple[int, ...]:
    # A pack is one aligned load of at most 16 bytes; groups start at multiples of the group
    # size, so it must be a multiple of the pack.
    item = ITEMSIZE[facts["dtype"]]
    return tuple(v for v in (1, 2, 4, 8) if v * item <= 16 and facts["group_size"] % v == 0)


def _cuda_space(facts: dict[str, Any]) -> Space:
    # chunks up to the first that holds the whole group (one block a group: no second launch)
    top = max(256, next_pow2(facts["group_size"]))
    chunks = tuple(c for c in CHUNKS if c <= top)
    return Space.single([Param("chunk", chunks), Param("threads", (128, 256, 512, 1024)),
                         Param("vec", _cuda_vecs(facts))],
                        lambda p: p["threads"] * p["vec"] <= p["chunk"])


# ---------------------------------------------------------------- starting rules

def _cpu_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    # Few groups (32 in SD3.5's VAE) against many cores: spread planes, not groups.
    if facts["n_groups"] < 64:
        return {"variant": "planes", "simd": True}
    return {"variant": "groups", "stats": "two_pass", "simd": True}


def _triton_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    point = _triton_rule(facts, hw)
    space = _triton_space(facts, hw)
    if space.contains(point):
        return point
    # a shape past the rule's ranges (a group of billions): the buildable point nearest to it
    return space.nearest(space.fit(point), lambda p: True) or point


def _triton_rule(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    n_groups, size = facts["n_groups"], facts["group_size"]
    if size < 4096 or (n_groups >= 2 * hw.sms and size <= 16384):
        # small groups, or enough groups to fill two waves of SMs: one program per group
        block = min(4096, max(256, next_pow2(size)))
        return {"variant": "per_group", "block": block, "num_warps": 2 if block <= 512 else 4 if block <= 1024 else 8}
    # More than the L2 holds: the held variant, where a group fits the GPU's registers two
    # programs an SM, 128 bytes of a chunk a thread; else the queue. On (1,256,512,512) bf16 the
    # held start took 0.0853 ms against the queue's 0.0994 (bench/results/h200/probe/README.md).
    larger_than_l2 = n_groups * size * ITEMSIZE[facts["dtype"]] > hw.l2_bytes
    held = _held_start(facts, hw) if larger_than_l2 else None
    if held is not None:
        return held
    if larger_than_l2 and size > 8192:
        # the queue: the second read from L2, no wave, programs need not all be resident (0.0995
        # ms on the large row above against 0.1009 for resident programs: bench/results/h200/probe)
        return {"variant": "queue", "chunk": 8192, "block": 4096, "num_warps": 4, "unroll": 1, "per_sm": 8, "lead": 4}
    # Split: chunks of 16K elements, so (1,256,512,512) gives 32 x 128 = 4096 programs and
    # (1,512,128,128) 32 x 16 = 512 (at least ~4 programs per SM); a smaller chunk for smaller
    # groups keeps that count up. Blocks of 4096 with 8 warps: 16 values a thread per load.
    chunk = 16384
    while chunk > 2048 and n_groups * -(-size // chunk) < 3 * hw.sms:
        chunk //= 2
    while -(-size // chunk) > MAX_PARTIALS:
        chunk *= 2
    block = min(4096, chunk)
    return {"variant": "split", "chunk": chunk, "block": block, "num_warps": 8 if block >= 2048 else 4,
            "reverse": True, "wave_groups": 0}


def _held_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any] | None:
    """Two held programs an SM, chunks of 128 bytes a thread (about 250 registers; more a thread
    spills), statistics two groups ahead (pipeline), L2 prefetches 4 groups ahead where chunks
    divide the group (else none); None where that cannot be (a group too large for the GPU's
    registers at that size, or float32, which needs 8 warps a program and spills)."""
    chunk = next_pow2(-(-facts["group_size"] // (2 * hw.sms)))
    warps = chunk * ITEMSIZE[facts["dtype"]] // (HELD_BYTES_PER_THREAD * 32)
    if not 1 <= warps <= 4:
        return None
    point = {"variant": "held", "chunk": chunk, "num_warps": warps, "unroll": 1, "pipeline": True, "per_sm": 2,
             "lead": 4}
    held = _triton_space(facts, hw)
    return next((p for p in (point, {**point, "lead": 3}) if held.contains(p)), None)


def _cuda_start(facts: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    # Chunks of 16K values (64 KB of fp32, a few loads in flight a thread), halved while the
    # grid gives fewer than four blocks an SM; a group that fits one chunk is one block's work.
    size = facts["group_size"]
    chunk = min(16384, max(256, next_pow2(size)))
    while chunk > 1024 and facts["n_groups"] * -(-size // chunk) < 4 * hw.sms:
        chunk //= 2
    vec = max(_cuda_vecs(facts))
    threads = 256
    while threads * vec > chunk and threads > 128:
        threads //= 2
    while threads * vec > chunk and vec > 1:
        vec //= 2
    return {"chunk": chunk, "threads": threads, "vec": vec}


# ---------------------------------------------------------------- render

def _renderer(name_of: Callable[[dict[str, Any]], str],
              constants_of: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]) -> Callable[..., str]:
    """(facts, point) -> the source: the kernel file point's name, its constants rewritten."""
    def render(facts: dict[str, Any], point: dict[str, Any]) -> str:
        name = name_of(point)
        text = kernel_file.read(__name__, name)
        return kernel_file.render(text, facts["op"], constants_of(facts, point), kernel_file.style_of(name))
    return render


def _shape_constants(facts: dict[str, Any], suffix: str = "") -> dict[str, Any]:
    return {"N_GROUPS": f"{facts['n_groups']}{suffix}", "GROUPS": f"{facts['groups']}{suffix}",
            "CG": f"{facts['c'] // facts['groups']}{suffix}", "HW": f"{facts['hw']}{suffix}",
            "GROUP_SIZE": f"{facts['group_size']}{suffix}", "EPS": facts["eps"]}


def _c_aux_constants(facts: dict[str, Any]) -> dict[str, Any]:
    return {"HAS_W": facts["has_weight"], "HAS_B": facts["has_bias"], "W_FP32": facts["w_fp32"],
            "B_FP32": facts["b_fp32"], "STATS_FP32": facts["stats_fp32"] and facts["dtype"] != "float32"}


def _cpu_constants(facts: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    # the epilogue's exp is the polynomial that vectorises (shared_c_math.c), the element-wise
    # family's starting point
    return {"epilogue": _c_epilogue(facts, "static inline"), "CHAIN": facts.get("chain", False),
            "POLY_EXP": True, **_shape_constants(facts, "LL"), **c_element(facts["dtype"]), **_c_aux_constants(facts),
            "PLANES": point["variant"] == "planes", "TWO_PASS": point.get("stats") == "two_pass",
            "SIMD_LOOPS": point["simd"]}


def _cuda_constants(facts: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    return {"epilogue": _c_epilogue(facts, "static __device__ __forceinline__"), "CHAIN": facts.get("chain", False),
            **_shape_constants(facts, "LL"), **cuda_element(facts["dtype"]), **_c_aux_constants(facts),
            "CHUNK": point["chunk"], "THREADS": point["threads"], "VEC": point["vec"]}


# 16-bit values held as 32-bit pairs (the held variant): two floats rounded to a word by one cvt
# instruction a pair on a GPU. Only where HxW is even: a word's two values then share a channel.
_PAIR_CVT = {"bfloat16": "cvt.rn.bf16x2.f32 $0, $2, $1;", "float16": "cvt.rn.f16x2.f32 $0, $2, $1;"}


WAITING = ("resident", "queue")  # the schedules of triton_waiting.py, its SCHEDULE constant


def _triton_file(point: dict[str, Any]) -> str:
    return "triton_waiting.py" if point["variant"] in WAITING else f"triton_{point['variant']}.py"


def _triton_constants(facts: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    shape = {k: int(v) if k != "EPS" else v for k, v in _shape_constants(facts).items()}
    common = {"epilogue": kernel_file.Snippet(facts.get("epilogue", IDENTITY)), "CHAIN": facts.get("chain", False),
              **shape, "HAS_W": facts["has_weight"], "HAS_B": facts["has_bias"], "STATS_FP32": facts["stats_fp32"]}
    variant = point["variant"]
    if variant == "per_group":
        return {**common, "BLOCK": point["block"], "NUM_WARPS": point["num_warps"]}
    if variant == "split":
        return {**common, "CHUNK": point["chunk"], "BLOCK": point["block"], "NUM_WARPS": point["num_warps"],
                "REVERSE": point["reverse"], "WAVE_GROUPS": point["wave_groups"]}
    if variant in WAITING:
        # one kernel file for both schedules: the constant only the other one reads keeps a fixed value
        return {**common, "CHUNK": point["chunk"], "BLOCK": point["block"], "UNROLL": point["unroll"],
                "NUM_WARPS": point["num_warps"], "SCHEDULE": variant, "PER_SM": point["per_sm"],
                "PIPELINE": point.get("pipeline", False), "LEAD": point.get("lead", 0)}
    pairs = facts["dtype"] in _PAIR_CVT and facts["hw"] % 2 == 0
    return {**common, "CHUNK": point["chunk"], "ROWS": point["unroll"], "NUM_WARPS": point["num_warps"],
            "PIPELINE": point["pipeline"], "PER_SM": point["per_sm"], "LEAD": point["lead"],
            "PAIR_CVT": _PAIR_CVT[facts["dtype"]] if pairs else None, "PAIR_BF16": facts["dtype"] == "bfloat16"}


# ---------------------------------------------------------------- explain

_REASONS: dict[str, dict[Any, str]] = {
    "variant": {
        "per_group": "one program per group, looping twice over it: no partial buffer, for many small groups",
        "split": "each group split across many programs (partials, then combine): fills the SMs when "
                 "there are few groups",
        "resident": "one program per SM, a few groups at a time: a group's programs wait for each other's "
                    "statistics, then normalise what they just read, from L2: x crosses DRAM about once",
        "queue": "programs take chunks from a queue, normalising a group a few groups behind reading its "
                 "statistics: no wave barrier, reads and writes overlap, the second read from L2",
        "held": "the whole GPU holds a group in registers, a chunk a program, the next groups loading: "
                "x crosses DRAM once and is never read twice",
        "groups": "a thread per group: each group read by one core",
        "planes": "a thread per (sample, channel) plane, sums combined per group: spreads few groups over "
                  "every core",
    },
    "reverse": {True: "the second pass walks the groups backwards, so it first re-reads what the first "
                      "pass read last (still in L2)",
                False: "both passes walk the groups in the same order"},
    "wave_groups": {0: "both passes over every group at once: two launches",
                    8: "both passes over 8 groups at a time: a wave's second read comes from L2, "
                       "at two launches per wave",
                    4: "waves of 4 groups: more of the second read from L2, more launches",
                    2: "waves of 2 groups: the second read almost all from L2, the most launches"},
    "unroll": {1: "one block a loop trip (held: the chunk as one row)",
               2: "two blocks a loop trip, loaded together: twice the bytes in flight per program (held: the "
                  "chunk as two rows, whose per-thread sums run side by side)",
               4: "four blocks a loop trip: for one program per SM, more loads in flight hide DRAM latency "
                  "(held: four rows)",
               8: "eight blocks a loop trip: the most bytes in flight, the most registers (held: eight rows)"},
    "pipeline": {True: "resident: the next wave's statistics before this wave is normalised; held: statistics "
                       "published two groups ahead (four chunks in registers), so a group's partials are two "
                       "iterations old when it is normalised",
                 False: "resident: a wave at a time; held: statistics one group ahead, three chunks in registers"},
    "per_sm": {1: "one program per SM: the most registers each",
               2: "two programs per SM: one loads while the other waits for its group (resident ones are "
                  "launched cooperatively, so a grid that cannot all be resident is an error, not a hang)",
               4: "four programs per SM (the queue, the held variant): more loads in flight, fewer registers each",
               8: "eight programs per SM (the queue): the most loads in flight, the fewest registers each"},
    "lead": {1: "the queue normalises a group right after its statistics: the least L2 held, the most waiting",
             2: "normalise two groups behind the statistics: the wait is usually over (held: only the "
                "groups loading into registers, no L2 prefetch)",
             3: "three groups behind (held: L2 prefetches three groups ahead, bytes in flight that hold no "
                "registers; with pipeline, only the groups loading into registers)",
             4: "four groups behind: no waiting, more of L2 held (held: L2 prefetches four groups ahead)",
             8: "eight groups behind: the second read may fall out of L2 (held: prefetches eight groups ahead)"},
    "stats": {"two_pass": "mean first, then squared deviations (in double): exact, reads the group twice",
              "one_pass_double": "sum and sum of squares in double in one read: fewer passes, still "
                                 "precise for large-mean data"},
    "simd": {True: "ask the compiler to vectorise the inner loops", False: "scalar inner loops"},
}


def explain(name: str, old: Any, new: Any) -> str:
    text = _REASONS.get(name, {}).get(new)
    if text:
        return text
    up = isinstance(new, (int, float)) and isinstance(old, (int, float)) and new > old
    texts = {
        "num_warps": ("more warps keep more loads in flight and fewer values per thread",
                      "fewer warps: less cross-warp reduction work and more programs per SM"),
        "block": ("larger blocks: fewer loop trips and wider loads", "smaller blocks: fewer registers, less masking"),
        "chunk": ("larger chunks: fewer programs and fewer partial results to combine",
                  "smaller chunks: more programs, so few groups still fill every SM"),
        "threads": ("more threads a block: more loads in flight a chunk", "fewer threads: more blocks an SM"),
        "vec": ("wider loads: fewer instructions a byte", "narrower loads"),
    }
    if name in texts:
        return texts[name][0 if up else 1]
    return "try a neighbouring value"


WRITERS = Writers(cpu=Writer(lambda facts, hw: _cpu_space(), _cpu_start,
                             _renderer(lambda point: "cpu.c", _cpu_constants)),
                  triton=Writer(_triton_space, _triton_start, _renderer(_triton_file, _triton_constants)),
                  cuda=Writer(lambda facts, hw: _cuda_space(facts), _cuda_start,
                              _renderer(lambda point: "cuda_chunks.cu", _cuda_constants)))
space, start, render = WRITERS.space, WRITERS.start, WRITERS.render  # by backend name
FAMILIES = [Family(name="group_norm", match=match, writers=WRITERS, explain=explain)]
