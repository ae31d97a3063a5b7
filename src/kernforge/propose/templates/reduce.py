"""Reductions over adjacent dims: sum.dim_IntList, mean.dim and amax over a block of dims.

The input is read as [outer, R, inner] in memory order: the reduced dims must be
adjacent in memory, so a contiguous tensor reducing its trailing dims gives rows
(inner = 1) and a channels-last NCHW tensor reducing H, W gives columns (inner = C,
contiguous). y[o, i] = op over r of x[o, r, i] (mean: the sum times 1/R), accumulated
in float32. Memory-bound: one read of x is the floor, R times more bytes than y.

ResNet-50's adaptive_avg_pool2d 1x1 is mean.dim(x, [-1, -2], True) on (N, 2048, 7, 7):
524288 rows of 49 floats at N = 256, 103 MB read, 0.024 ms at 4.24 TB/s on an H200.
"""

from __future__ import annotations

import math
from typing import Any

from kernforge.backends.native import C_PRELUDE
from kernforge.propose.builtin.family import LegacyFamily as Family
from kernforge.propose.families.common import (
    C_LOAD_STORE,
    C_TYPES,
    SUPPORTED_DTYPES,
    c_one_in_one_out,
    c_simd_macro,
    gpu_sms,
    is_tensor,
    next_pow2,
    split_kwargs,
)
from kernforge.tasks import KernelTask

OPS = {"aten::sum.dim_IntList": "sum", "aten::mean.dim": "mean", "aten::amax.default": "amax"}


# ---------------------------------------------------------------- what is supported

def match(task: KernelTask) -> dict[str, Any] | str:
    kind = OPS.get(task.op)
    if kind is None:
        return f"no built-in template for {task.op}"
    args, kwargs = split_kwargs(task.args)
    x = args[0] if args else None
    if not is_tensor(x):
        return f"{kind} without a tensor input"
    if kwargs.get("dtype") is not None:
        return f"{kind} with a dtype= argument (a converting reduction) has no built-in template yet"
    if x["dtype"] not in SUPPORTED_DTYPES:
        return f"{kind} on {x['dtype']} has no built-in template"
    if not task.outputs or task.outputs[0]["dtype"] != x["dtype"]:
        return f"{kind} whose output dtype differs from its input's has no built-in template"
    if math.prod(x["shape"]) == 0:
        return f"{kind} of an empty tensor has no built-in template"
    dims = _reduced_dims(args[1] if len(args) > 1 else None, len(x["shape"]))
    if isinstance(dims, str):
        return dims
    keepdim = bool(args[2]) if len(args) > 2 else bool(kwargs.get("keepdim", False))
    return _layout_facts(kind, task.op, x, dims, keepdim, task.outputs[0])


def _reduced_dims(dim: Any, ndim: int) -> list[int] | str:
    """The reduced dims, normalised and sorted; None or [] mean every dim (as ATen does)."""
    if dim is None or dim == []:
        return list(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if ndim == 0:
        return []
    normal = [d % ndim for d in dims]
    if len(set(normal)) != len(normal):
        return "a reduction that names a dim twice"
    return sorted(normal)


def _layout_facts(kind: str, op: str, x: dict[str, Any], dims: list[int], keepdim: bool,
                  out: dict[str, Any]) -> dict[str, Any] | str:
    shape, stride = x["shape"], x["stride"]
    # Dims of size 1 take no part in addressing; the rest, largest stride first, is memory order.
    order = sorted((d for d in range(len(shape)) if shape[d] > 1), key=lambda d: -stride[d])
    expected = 1
    for d in reversed(order):
        if stride[d] != expected:
            return f"{kind} on an input that is not dense in some dim order (a strided view) has no " \
                   "built-in template yet"
        expected *= shape[d]
    reduced = [i for i, d in enumerate(order) if d in dims]
    if reduced and reduced != list(range(reduced[0], reduced[-1] + 1)):
        return f"{kind} over dims that are not adjacent in memory has no built-in template yet"
    first = reduced[0] if reduced else len(order)
    outer_dims = order[:first]
    inner_dims = order[first + len(reduced):]
    if not _output_is_dense(out, outer_dims + inner_dims, dims, keepdim):
        return f"{kind} whose output is not laid out in the input's order has no built-in template yet"
    return {
        "kind": kind, "op": op, "dtype": x["dtype"].replace("torch.", ""),
        "outer": math.prod(shape[d] for d in outer_dims),
        "r": math.prod(shape[d] for d in order if d in dims),
        "inner": math.prod(shape[d] for d in inner_dims),
        "out_shape": list(out["shape"]), "out_stride": list(out["stride"]),
    }


def _output_is_dense(out: dict[str, Any], kept_in_order: list[int], dims: list[int], keepdim: bool) -> bool:
    """Whether y[o, i] sits at o * inner + i: the output keeps the input's memory order."""
    def out_dim(d: int) -> int:
        return d if keepdim else d - sum(1 for r in dims if r < d)
    expected = 1
    for d in reversed(kept_in_order):
        od = out_dim(d)
        if out["stride"][od] != expected:
            return False
        expected *= out["shape"][od]
    return True


# ---------------------------------------------------------------- parameter space

def space(facts: dict[str, Any], backend: str) -> dict[str, list[Any]]:
    rows = facts["inner"] == 1
    if backend == "cpu":
        if rows:
            return {"strategy": ["rows", "split"], "simd": [False, True], "schedule": ["static", "dynamic"]}
        return {"block_c": [16, 64, 256, 1024], "simd": [False, True], "schedule": ["static", "dynamic"]}
    if backend == "triton":
        shared = {"split": [1, 2, 4, 8, 16, 32, 64, 128, 256]}
        if rows:
            shared |= {"rows_per_program": [1, 2, 4, 8, 16, 32, 64, 128],
                       "block_r": [32, 64, 128, 256, 512, 1024, 2048, 4096],
                       "loads": ["masked", "aligned", "packed"]}
        else:
            shared |= {"block_r": [1, 2, 4, 8, 16, 32, 64], "block_c": [16, 32, 64, 128, 256]}
        return shared | {"num_warps": [1, 2, 4, 8, 16], "num_stages": [1, 2, 3, 4]}
    return {}


def initial(facts: dict[str, Any], backend: str) -> dict[str, Any]:
    rows = facts["inner"] == 1
    if backend == "cpu":
        if rows:
            # A row per thread is enough parallel work once there are a few rows per core.
            return {"strategy": "split" if facts["outer"] < 16 and facts["r"] >= 16384 else "rows", "simd": True,
                    "schedule": "static"}
        return {"block_c": min(256, _c_block(facts["inner"])), "simd": True, "schedule": "static"}
    return _initial_rows(facts) if rows else _initial_cols(facts)


def _initial_rows(facts: dict[str, Any]) -> dict[str, Any]:
    outer, r = facts["outer"], facts["r"]
    # Whole rows up to 1024 in one tile; longer rows loop in blocks of 4096 with 8 warps.
    # Measured on an H200, sum over (8, 2^20) fp32 split 64 ways: blocks of 4096 with 8 warps
    # 0.018 ms, 2048 with 4 warps 0.028 ms, 1024 with 2 warps 0.058 ms (timed by hand while the
    # family was written, as are the figures below; not kept in bench/results).
    block_r = max(32, next_pow2(r)) if r <= 1024 else 4096
    if r <= 1024 and not _aligned_fits(facts, block_r, 1) and r % _align(facts):
        block_r *= 2  # room for the aligned loads' shift (a row of 63 floats: 66 slots)
    # Short rows: pack rows until a tile holds ~4096 values, but keep >= 4 programs per SM.
    rows = 1
    while block_r >= r and rows * 2 * block_r <= 4096 and rows * 2 <= next_pow2(outer) and \
            math.ceil(outer / (rows * 2)) >= 4 * gpu_sms():
        rows *= 2
    split = 1
    while math.ceil(outer / rows) * split * 2 <= 4 * gpu_sms() and \
            math.ceil(r / (split * 2)) >= block_r and split * 2 <= 256:
        split *= 2  # few long rows: each row split across programs, partials combined after
    split = _worth_splitting(math.ceil(outer / rows), split)
    loops = _trips(r, split, block_r) > 1
    warps = _warps_for(rows * block_r)
    return {"split": split, "rows_per_program": rows, "block_r": block_r,
            "loads": "aligned" if _aligned_fits(facts, block_r, split) else "masked",
            "num_warps": 8 if loops else warps, "num_stages": 1}


def _initial_cols(facts: dict[str, Any]) -> dict[str, Any]:
    outer, r, inner = facts["outer"], facts["r"], facts["inner"]
    # Small tiles looping over the positions: on an H200, (256, 2048, 7, 7) channels-last took
    # 0.035 ms with [8 positions, 64 channels] and 2 warps, 0.049 ms with [64, 64] and 8 warps.
    block_c = min(64, max(16, next_pow2(inner)))
    if outer * math.ceil(inner / block_c) < 4 * gpu_sms():
        block_c = max(16, block_c // 2)
    block_r = min(8, next_pow2(r))
    programs = outer * math.ceil(inner / block_c)
    split = 1
    while programs * split * 2 <= 4 * gpu_sms() and math.ceil(r / (split * 2)) >= block_r and split * 2 <= 256:
        split *= 2
    split = _worth_splitting(programs, split)
    loops = _trips(r, split, block_r) > 1
    tile = block_r * block_c
    warps = max(1, min(2, tile // 128))
    return {"split": split, "block_r": block_r, "block_c": block_c,
            "num_warps": warps, "num_stages": 3 if loops and tile >= 128 * warps else 1}


def _worth_splitting(programs: int, split: int) -> int:
    """A split that still leaves most SMs idle (too little work) is not worth its second pass."""
    return split if programs * split >= gpu_sms() // 2 else 1


def _align(facts: dict[str, Any]) -> int:
    """Elements in 16 bytes: the widest vector load."""
    return 4 if facts["dtype"] == "float32" else 8


def _aligned_fits(facts: dict[str, Any], block_r: int, split: int) -> bool:
    """Aligned loads: whole rows in one block, slack for the shift, and rows that need it."""
    align = _align(facts)
    return split == 1 and facts["r"] % align != 0 and facts["r"] + align - 1 <= block_r


def _pack(facts: dict[str, Any]) -> int:
    """Rows side by side that make a run of whole 16-byte vectors (4 rows of 49 floats: 49 vectors)."""
    return 16 // math.gcd(facts["r"] * (16 // _align(facts)), 16)


def _packed_fits(facts: dict[str, Any], block_r: int, split: int, rows: int) -> bool:
    """Packed loads: PACK rows per tile line, whole lines per program, a line no longer than 4096."""
    pack = _pack(facts)
    return (split == 1 and pack > 1 and pack * facts["r"] <= 4096 and block_r == next_pow2(pack * facts["r"])
            and rows % pack == 0)


def _warps_for(tile: int) -> int:
    """16 values per thread: enough loads in flight per thread without running out of registers."""
    return max(1, min(8, tile // (16 * 32)))


def _trips(r: int, split: int, block_r: int) -> int:
    """Loop trips per program: each of `split` programs takes a chunk of whole blocks."""
    return math.ceil(math.ceil(r / split) / block_r)


def _c_block(inner: int) -> int:
    return max(16, next_pow2(inner))


def valid(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> bool:
    if backend == "cpu":
        if facts["inner"] == 1:
            # Splitting a row across threads pays only when there are fewer rows than ~cores.
            return params["strategy"] == "rows" or facts["outer"] < 64
        return params["block_c"] <= _c_block(facts["inner"])
    r, split, block_r, warps = facts["r"], params["split"], params["block_r"], params["num_warps"]
    loops = _trips(r, split, block_r) > 1
    if facts["inner"] == 1:
        rows = params["rows_per_program"]
        tile = rows * block_r
        programs = math.ceil(facts["outer"] / rows)
        widest = next_pow2(r * _pack(facts)) if params["loads"] == "packed" else next_pow2(r + _align(facts) - 1)
        if rows > next_pow2(facts["outer"]) or block_r > max(32, widest):
            return False
        if params["loads"] == "aligned" and not _aligned_fits(facts, block_r, split):
            return False
        if params["loads"] == "packed":
            if not _packed_fits(facts, block_r, split, rows):
                return False
            tile = rows // _pack(facts) * block_r
        elif rows > 1 and (loops or split > 1):  # packing rows is for short rows, whole in the tile
            return False
    else:
        tile = block_r * params["block_c"]
        programs = facts["outer"] * math.ceil(facts["inner"] / params["block_c"])
        if params["block_c"] > max(16, next_pow2(facts["inner"])) or block_r > next_pow2(r):
            return False
        if block_r < min(8, next_pow2(r)) or warps > 8:  # a tile of under 8 positions loops too much
            return False
        if math.ceil(facts["inner"] / params["block_c"]) > 65535:  # grid axis 1 limit
            return False
    # Every lane busy, and at most 32 accumulators per thread (more spills, or leaves too few
    # programs resident per SM to hide the loads' latency).
    if not 32 * warps <= tile <= 32 * 32 * warps:
        return False
    if loops and tile < 4 * 32 * warps:  # a loop trip should give each thread a 16-byte load
        return False
    # A split needs a block of work per part, and pays only while the grid is short of the SMs;
    # then the parts should bring it to between half a wave and 8 programs per SM.
    if split > 1 and (math.ceil(r / split) < block_r or programs >= 2 * gpu_sms()
                      or not gpu_sms() // 2 <= programs * split <= 8 * gpu_sms()):
        return False
    return params["num_stages"] == 1 or (loops and params["num_stages"] > 1)


def explain(name: str, old: Any, new: Any) -> str:
    more = new > old if isinstance(new, (int, float)) and isinstance(old, (int, float)) else None
    text = {
        "split": ("split each row across more programs, a second pass combining the partials: fills the SMs",
                  "fewer parts per row: less partial traffic and a cheaper second pass"),
        "rows_per_program": ("more short rows per program: longer contiguous loads, fewer programs",
                             "fewer rows per program: more programs to spread over the SMs"),
        "block_r": ("a longer block of the reduced dim: fewer loop trips, more loads in flight",
                    "a shorter block of the reduced dim: fewer registers, less masking of short rows"),
        "block_c": ("more columns per program: longer contiguous runs of the channels-last rows",
                    "fewer columns per program: more programs, fewer registers"),
        "num_warps": ("more warps keep more loads in flight", "fewer warps: less cross-warp reduction"),
        "num_stages": ("deeper software pipelining of the loop's loads",
                       "shallower pipelining: less shared memory, more programs resident per SM"),
    }.get(name)
    if text and more is not None:
        return text[0] if more else text[1]
    return {
        ("strategy", "rows"): "a row per thread: no combining step, best with many rows",
        ("strategy", "split"): "each row split over the threads, partials combined: for few long rows",
        ("loads", "aligned"): "loads from 16-byte boundaries, masked after: vector loads for rows "
                              "that start off a boundary",
        ("loads", "masked"): "each row loaded from its own start: no wasted slots, scalar loads",
        ("loads", "packed"): "rows side by side in lines that start on 16-byte boundaries: vector loads "
                             "that read each byte once, a masked sum per row",
        ("simd", True): "ask the compiler to vectorise the inner loops",
        ("simd", False): "scalar inner loops: no vector reductions",
        ("schedule", "static"): "equal shares per thread: no scheduling cost",
        ("schedule", "dynamic"): "threads take work as they free up: better when cores are uneven",
    }.get((name, new), "try a neighbouring value")


# ---------------------------------------------------------------- C (cpu backend)

_C_OPS = {  # (initial value, combine, OpenMP reduction operator)
    "sum": ("0.0f", "(a) + (b)", "+"), "mean": ("0.0f", "(a) + (b)", "+"),
    "amax": ("-INFINITY", "((a) > (b) || (a) != (a) ? (a) : (b))", "max"),
}


def _c_scale(facts: dict[str, Any]) -> str:
    return f" * (1.0f / {facts['r']}.0f)" if facts["kind"] == "mean" else ""


_C_ROWS = {
    "rows": """    #pragma omp parallel for schedule({schedule})
    for (int64_t o = 0; o < OUTER; ++o) {{
        const elem_t *restrict xr = x + o * R;
        float acc = INIT;
        SIMD(reduction({red}:acc))
        for (int64_t r = 0; r < R; ++r) acc = COMBINE(acc, ld(xr, r));
        st(y, o, acc{scale});
    }}
""",
    # Few long rows: every thread takes a slice of each row; OpenMP combines the slices.
    "split": """    for (int64_t o = 0; o < OUTER; ++o) {{
        const elem_t *restrict xr = x + o * R;
        float acc = INIT;
        #pragma omp parallel for simd schedule({schedule}) reduction({red}:acc)
        for (int64_t r = 0; r < R; ++r) acc = COMBINE(acc, ld(xr, r));
        st(y, o, acc{scale});
    }}
""",
}

# Channels-last: a vector of BLOCK_C channel accumulators per output position, each step
# of r adding one contiguous run of the input.
_C_COLS = """    const int64_t blocks = (INNER + BLOCK_C - 1) / BLOCK_C;
    #pragma omp parallel for schedule({schedule})
    for (int64_t job = 0; job < OUTER * blocks; ++job) {{
        int64_t o = job / blocks, c0 = (job % blocks) * BLOCK_C;
        int64_t n = INNER - c0 < BLOCK_C ? INNER - c0 : BLOCK_C;
        float acc[BLOCK_C];
        for (int64_t c = 0; c < BLOCK_C; ++c) acc[c] = INIT;
        for (int64_t r = 0; r < R; ++r) {{
            const elem_t *restrict xr = x + (o * R + r) * INNER + c0;
            SIMD()
            for (int64_t c = 0; c < n; ++c) acc[c] = COMBINE(acc[c], ld(xr, c));
        }}
        SIMD()
        for (int64_t c = 0; c < n; ++c) st(y, o * INNER + c0 + c, acc[c]{scale});
    }}
"""


def render_c(facts: dict[str, Any], params: dict[str, Any]) -> str:
    ctype, code = C_TYPES[facts["dtype"]]
    init, combine, red = _C_OPS[facts["kind"]]
    simd_macro = c_simd_macro(params["simd"])
    rows = facts["inner"] == 1
    body = (_C_ROWS[params["strategy"]] if rows else _C_COLS).format(
        schedule=params["schedule"], red=red, scale=_c_scale(facts))
    block = "" if rows else f"#define BLOCK_C {params['block_c']}\n"
    return f"""/* kernforge builtin: {facts['kind']} over [outer={facts['outer']}, R={facts['r']}, inner={facts['inner']}], {facts['dtype']}
 * kf-op: {facts['op']}
 * {' '.join(f'{k}={v}' for k, v in params.items())}
 */
#include <math.h>
#include <string.h>
{C_PRELUDE}
#define OUTER {facts['outer']}LL
#define R {facts['r']}LL
#define INNER {facts['inner']}LL
{block}#define INIT {init}
/* amax keeps a NaN, as torch.amax does; a plain compare (not fmaxf) still vectorises. */
#define COMBINE(a, b) ({combine})
typedef {ctype} elem_t;
{simd_macro}
{C_LOAD_STORE[facts['dtype']]}
{c_one_in_one_out(code, body)}"""


# ---------------------------------------------------------------- Triton

_TL_OPS = {  # (initial value, combine two tiles, reduce a tile along an axis)
    "sum": ("0.0", "a + b", "tl.sum"), "mean": ("0.0", "a + b", "tl.sum"),
    "amax": ('-float("inf")', "tl.maximum(a, b)", "tl.max"),
}

_TRITON_ROWS = '''
@triton.jit
def reduce_rows(X, OUT, N_ROWS: tl.constexpr, N_RED: tl.constexpr, ROWS: tl.constexpr,
                BLOCK_R: tl.constexpr, CHUNK: tl.constexpr, SPLIT: tl.constexpr):
    # ROWS adjacent rows per program: the [ROWS, BLOCK_R] tile covers one contiguous run of x.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < N_ROWS
    base = X + rows{wide}[:, None] * N_RED
    cols = tl.arange(0, BLOCK_R)[None, :]
    acc = tl.full([ROWS, BLOCK_R], INIT, tl.float32)
{loop}
    total = {reduce}(acc, axis=1)
    tl.store(OUT + rows * SPLIT + tl.program_id(1), {final}.to(OUT.dtype.element_ty), mask=row_ok)
'''

# Rows that start off a 16-byte boundary (49 floats: 3 rows in 4) defeat vector loads. Each
# tile row starts at its row's start rounded down to ALIGN elements and masks what is not its
# row after loading: (256, 2048, 7, 7) fp32 mean on an H200 took 0.035 ms this way, 0.049 ms
# with the masked [ROWS, 64] tile; bf16 0.025 ms against 0.049 ms (those by hand, do_bench's
# timing). With the workers' timing the search's fp32 best was 0.0289 ms and the probe's 0.0293
# (bench/results/h200/search/table_all.md, bench/results/h200/probe/probe3.log).
_TRITON_ROWS_ALIGNED = '''
@triton.jit
def reduce_rows(X, OUT, N_ROWS: tl.constexpr, N_RED: tl.constexpr, ROWS: tl.constexpr,
                BLOCK_R: tl.constexpr, ALIGN: tl.constexpr, NUMEL: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    start = rows{wide} * N_RED
    base = (start // ALIGN) * ALIGN
    lo = (start - base)[:, None]
    cols = tl.arange(0, BLOCK_R)[None, :]
    offs = base[:, None] + cols
    x = tl.load(X + offs, mask=offs < NUMEL, other=INIT).to(tl.float32)
    acc = tl.where((cols >= lo) & (cols < lo + N_RED), x, INIT)
    total = {reduce}(acc, axis=1)
    tl.store(OUT + rows, {final}.to(OUT.dtype.element_ty), mask=rows < N_ROWS)
'''

# Packed: PACK rows of N_RED side by side make a line of whole 16-byte vectors (4 rows of 49 floats
# are 49 of them), so a [LINES, BLOCK_R] tile of lines is one contiguous, aligned run of x read
# exactly once, where the aligned tile reads ~BLOCK_R / N_RED times the bytes through L1.
_TRITON_ROWS_PACKED = '''
@triton.jit
def reduce_rows(X, OUT, N_ROWS: tl.constexpr, N_RED: tl.constexpr, PACK: tl.constexpr, LINES: tl.constexpr,
                BLOCK_R: tl.constexpr):
    line = tl.program_id(0) * LINES + tl.arange(0, LINES)
    cols = tl.arange(0, BLOCK_R)[None, :]
    offs = line{wide}[:, None] * (PACK * N_RED) + cols
    x = tl.load(X + offs, mask=(cols < PACK * N_RED) & (offs < N_ROWS * N_RED), other=INIT).to(tl.float32)
    for k in tl.static_range(PACK):
        total = {reduce}(tl.where((cols >= k * N_RED) & (cols < (k + 1) * N_RED), x, INIT), axis=1)
        row = line * PACK + k
        tl.store(OUT + row, {final}.to(OUT.dtype.element_ty), mask=row < N_ROWS)
'''

_TRITON_COLS = '''
@triton.jit
def reduce_cols(X, OUT, N_RED: tl.constexpr, INNER: tl.constexpr, BLOCK_R: tl.constexpr,
                BLOCK_C: tl.constexpr, CHUNK: tl.constexpr, SPLIT: tl.constexpr):
    # Channels-last: a [BLOCK_R, BLOCK_C] tile of positions x channels, each of its rows a
    # contiguous run of BLOCK_C channels; one program per (outer index, channel block, part).
    o = tl.program_id(0){wide}
    chans = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    chan_ok = chans < INNER
    base = X + o * (N_RED * INNER) + chans[None, :]
    cols = tl.arange(0, BLOCK_R)[:, None]
    acc = tl.full([BLOCK_R, BLOCK_C], INIT, tl.float32)
{loop}
    total = {reduce}(acc, axis=0)
    tl.store(OUT + (o * SPLIT + tl.program_id(2)) * INNER + chans, {final}.to(OUT.dtype.element_ty),
             mask=chan_ok)
'''

# The step over one block of the reduced dim, at offsets c (rows: along a row; cols: across rows).
_TRITON_STEP = {
    True: """c = {first}
x = tl.load(base + c, mask=row_ok[:, None] & (c < N_RED), other=INIT).to(tl.float32)
acc = combine(acc, x)""",
    False: """c = {first}
x = tl.load(base + c * INNER, mask=(c < N_RED) & chan_ok[None, :], other=INIT).to(tl.float32)
acc = combine(acc, x)""",
}


def _triton_loop(rows: bool, single: bool) -> str:
    """One step when the block covers the reduced extent; else a loop over this part's CHUNK."""
    if single:
        return _indent(_TRITON_STEP[rows].format(first="cols"), 4)
    head = f"""    start0 = tl.program_id({1 if rows else 2}) * CHUNK
    for start in range(start0, start0 + CHUNK, BLOCK_R):
"""
    return head + _indent(_TRITON_STEP[rows].format(first="start + cols"), 8)


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


# Combines the SPLIT partials of each output (fp32, laid out [outer, SPLIT, inner]).
_TRITON_FINISH = '''
@triton.jit
def finish(P, Y, N_OUT: tl.constexpr, INNER: tl.constexpr, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < N_OUT
    first = (idx // INNER) * (SPLIT * INNER) + idx % INNER
    parts = tl.arange(0, SPLIT)[None, :] * INNER
    p = tl.load(P + first[:, None] + parts, mask=ok[:, None], other=INIT)
    total = {reduce}(p, axis=1)
    tl.store(Y + idx, {final}.to(Y.dtype.element_ty), mask=ok)
'''


def _triton_kernels(facts: dict[str, Any], params: dict[str, Any]) -> str:
    init, combine, reduce_fn = _TL_OPS[facts["kind"]]
    rows = facts["inner"] == 1
    split = params["split"]
    scaled = f"(total * {1.0 / facts['r']!r})" if facts["kind"] == "mean" else "total"
    # int64 offsets only when the input has more elements than int32 can address.
    numel = facts["outer"] * facts["r"] * facts["inner"]
    wide = ".to(tl.int64)" if numel >= 2**31 else ""
    single = split == 1 and _trips(facts["r"], 1, params["block_r"]) == 1
    loop = _triton_loop(rows, single)
    template = _TRITON_ROWS if rows else _TRITON_COLS
    if rows and params["loads"] == "aligned":
        template = _TRITON_ROWS_ALIGNED
    if rows and params["loads"] == "packed":
        template = _TRITON_ROWS_PACKED
    text = f"INIT = tl.constexpr({init})\n\n\n@triton.jit\ndef combine(a, b):\n    return {combine}\n"
    text += template.format(wide=wide, loop=loop, reduce=reduce_fn, final=scaled if split == 1 else "total")
    if split > 1:
        text += _TRITON_FINISH.format(reduce=reduce_fn, final=scaled)
    return text


_LAUNCH_ROWS = '''
def launch(x, y):
    out = y if SPLIT == 1 else torch.empty((OUTER * SPLIT,), dtype=torch.float32, device=x.device)
    reduce_rows[(triton.cdiv(OUTER, ROWS_PER_PROGRAM), SPLIT)](
        x, out, N_ROWS=OUTER, N_RED=R, ROWS=ROWS_PER_PROGRAM, BLOCK_R=BLOCK_R, CHUNK=CHUNK, SPLIT=SPLIT,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES)
{finish}'''

_LAUNCH_ALIGNED = '''
def launch(x, y):
    reduce_rows[(triton.cdiv(OUTER, ROWS_PER_PROGRAM),)](
        x, y, N_ROWS=OUTER, N_RED=R, ROWS=ROWS_PER_PROGRAM, BLOCK_R=BLOCK_R, ALIGN=ALIGN,
        NUMEL=OUTER * R, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
'''

_LAUNCH_PACKED = '''
def launch(x, y):
    lines = ROWS_PER_PROGRAM // PACK
    reduce_rows[(triton.cdiv(triton.cdiv(OUTER, PACK), lines),)](
        x, y, N_ROWS=OUTER, N_RED=R, PACK=PACK, LINES=lines, BLOCK_R=BLOCK_R, num_warps=NUM_WARPS,
        num_stages=NUM_STAGES)
'''

_LAUNCH_COLS = '''
def launch(x, y):
    out = y if SPLIT == 1 else torch.empty((OUTER * SPLIT * INNER,), dtype=torch.float32, device=x.device)
    reduce_cols[(OUTER, triton.cdiv(INNER, BLOCK_C), SPLIT)](
        x, out, N_RED=R, INNER=INNER, BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C, CHUNK=CHUNK, SPLIT=SPLIT,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES)
{finish}'''

_LAUNCH_FINISH = '''    finish_block = max(1, 2048 // SPLIT)
    finish[(triton.cdiv(OUTER * INNER, finish_block),)](out, y, N_OUT=OUTER * INNER, INNER=INNER,
                                                         SPLIT=SPLIT, BLOCK=finish_block, num_warps=4)
'''


def render_triton(facts: dict[str, Any], params: dict[str, Any]) -> str:
    rows = facts["inner"] == 1
    split, block_r = params["split"], params["block_r"]
    chunk = _trips(facts["r"], split, block_r) * block_r
    shape_consts = f"OUTER = {facts['outer']}\nR = {facts['r']}\nINNER = {facts['inner']}\n"
    param_consts = f"SPLIT = {split}\nBLOCK_R = {block_r}\nCHUNK = {chunk}\n"
    param_consts += f"ROWS_PER_PROGRAM = {params['rows_per_program']}\n" if rows else \
        f"BLOCK_C = {params['block_c']}\n"
    param_consts += f"NUM_WARPS = {params['num_warps']}\nNUM_STAGES = {params['num_stages']}\n"
    launch = (_LAUNCH_ROWS if rows else _LAUNCH_COLS).format(finish=_LAUNCH_FINISH if split > 1 else "")
    if rows and params["loads"] == "aligned":
        launch = _LAUNCH_ALIGNED
        param_consts += f"ALIGN = {_align(facts)}\n"
    if rows and params["loads"] == "packed":
        launch = _LAUNCH_PACKED
        param_consts += f"PACK = {_pack(facts)}\n"
    return f'''"""kernforge builtin: {facts['kind']} over [outer={facts['outer']}, R={facts['r']}, inner={facts['inner']}], {facts['dtype']}.

kf-op: {facts['op']}
{' '.join(f'{k}={v}' for k, v in params.items())}
"""
import torch
import triton
import triton.language as tl

{shape_consts}{param_consts}OUT_SHAPE = {facts['out_shape']}
OUT_STRIDE = {facts['out_stride']}

{_triton_kernels(facts, params)}{launch}

def kf_forward(x, *args, **kwargs):
    # dims and keepdim are baked in: y's shape and strides are the reference's.
    y = torch.empty_strided(OUT_SHAPE, OUT_STRIDE, dtype=x.dtype, device=x.device)
    launch(x, y)
    return y
'''


def render(facts: dict[str, Any], backend: str, params: dict[str, Any]) -> str:
    return render_c(facts, params) if backend == "cpu" else render_triton(facts, params)


FAMILY = Family(name="reduce", match=match, space=space, initial=initial, render=render,
                valid=valid, explain=explain)
FAMILIES = [FAMILY]
