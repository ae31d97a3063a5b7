"""A catalogue of cheating and broken kernels, each rejected with the right status and reason.

Every row of CATALOGUE is one kind of cheat or breakage, written as a minimal
change to an honest kernel (C for the cpu backend, Triton for the triton
backend, which runs under Triton's interpreter on this CPU machine, checked and
never timed). Each is evaluated with the real pipeline against the softmax task
of tests/models/tiny_softmax.py (input (2, 40, 40) float32,
aten::_softmax.default(x, -1, False)) and must come back with the expected
status and a reason that names the cause.

Rows caught by the static scan cost nothing: no worker starts. The others start
one worker each (~2-3 s). The rows under "found by review" were accepted by an
earlier version of the pipeline; they stay as regressions. The honest
kernels at the end must pass, so that every cheat here is a cheat against a
pipeline that accepts honest work.

Kinds already covered in test_evaluate.py (unnormalised, half-written output,
no max subtraction, segfault, endless loop, compile error, C kernel modifying
its input, error code) are not repeated.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import pytest
import torch
from helpers import c_softmax_source
from test_evaluate import LABELS

from kernforge.backends.native import C_PRELUDE
from kernforge.evaluate.checks import RTOL
from kernforge.propose.builtin import BuiltinProposer

pytestmark = pytest.mark.integration

STATUSES = {"ok", "compile_error", "runtime_error", "wrong_result", "cheat", "out_of_memory",
            "crash", "timeout"}


# ---------------------------------------------------------------- honest bases

# An honest Triton softmax (one row per program); the Triton cheats below change one thing in it.
TRITON_BASE = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_rows(X, Y, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    y = e / tl.sum(e, axis=0)
    tl.store(Y + row * n_cols + cols, y.to(Y.dtype.element_ty), mask=mask)


def launch(x, y):
    n_cols = x.shape[-1]
    softmax_rows[(x.numel() // n_cols,)](x, y, n_cols, BLOCK_N=triton.next_power_of_2(n_cols))
    return y

{extra}
def kf_forward(x, dim, half_to_float):
{forward}
'''


HONEST_FORWARD = "return launch(x, torch.empty_like(x))\n"


def triton_source(forward: str = HONEST_FORWARD, extra: str = "") -> str:
    return TRITON_BASE.format(forward=textwrap.indent(textwrap.dedent(forward), "    "),
                              extra=textwrap.dedent(extra))


def c_source(text: str) -> str:
    """A whole C candidate: the backend's prelude, then text."""
    return C_PRELUDE + textwrap.dedent(text)


# The honest C row loop of helpers.CORRECT_BODY, with the normalisation line replaceable.
def c_row_loop(normalise: str = "yr[c] /= s;", before: str = "", after: str = "") -> str:
    return textwrap.indent(textwrap.dedent(before), "    ") + f"""\
    for (int64_t r = 0; r < rows; ++r) {{
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) {{ yr[c] = expf(xr[c] - m); s += yr[c]; }}
        for (int64_t c = 0; c < cols; ++c) {normalise}
    }}
""" + textwrap.indent(textwrap.dedent(after), "    ")


# ---------------------------------------------------------------- Triton cheats, caught at run time

RETURNS_INPUT = triton_source("""\
    # "softmax is idempotent enough": hand the input back
    return x
""")

RETURNS_VIEW = triton_source("""\
    # a view is no copy: the output aliases the input
    return x.view(x.shape)
""")

PY_CACHE = triton_source(extra="""\
_RESULTS = {}

""", forward="""\
    # a correct kernel on the first call; every later call of the same shape gets that result back
    key = (tuple(x.shape), x.dtype)
    if key not in _RESULTS:
        _RESULTS[key] = launch(x, torch.empty_like(x))
    return _RESULTS[key]
""")

NAN_INJECTED = triton_source(extra="""\
@triton.jit
def poke_nan(Y):
    tl.store(Y + 123, float("nan"))  # one element of an otherwise right answer

""", forward="""\
    y = launch(x, torch.empty_like(x))
    poke_nan[(1,)](y)
    return y
""")

FLOAT64_OUTPUT = triton_source("""\
    # more precise than asked: the output is float64, the reference's is float32
    return launch(x, torch.empty(x.shape, dtype=torch.float64))
""")

FLAT_OUTPUT = triton_source("""\
    # right values, flattened to (rows, cols)
    return launch(x, torch.empty_like(x)).reshape(-1, x.shape[-1])
""")

INPUT_AS_SCRATCH = triton_source(extra="""\
@triton.jit
def softmax_in_scratch(X, Y, n_cols, BLOCK_N: tl.constexpr):
    # saves a buffer by keeping x - max in the input: the caller's tensor is destroyed
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf"))
    tl.store(X + row * n_cols + cols, x - tl.max(x, axis=0), mask=mask)
    e = tl.exp(tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf")))
    tl.store(Y + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)

""", forward="""\
    y = torch.empty_like(x)
    n_cols = x.shape[-1]
    softmax_in_scratch[(x.numel() // n_cols,)](x, y, n_cols, BLOCK_N=triton.next_power_of_2(n_cols))
    return y
""")

UNBOUNDED_ALLOCATION = triton_source("""\
    # a 1 GiB workspace per step, all held until the call returns
    workspaces = [torch.empty(1 << 28) for _ in range(1 << 20)]
    return launch(x, torch.empty_like(x))
""")

# ---------------------------------------------------------------- C cheats, caught at run time

# The three that keep state in static variables (the cache, the lazy one, the memo) no longer
# reach the run-time checks: their objects have writable data, which the object scan
# (kernforge.backends.object_scan) rejects when they are built, naming the variable.

C_STATIC_CACHE = c_softmax_source(c_row_loop(before="""\
    /* the first result, kept in a static array (no static pointer: the scan's memory-state rule
       does not see it) and copied out on every later call */
    static float first[3200];
    static int have_first = 0;
    if (rows * cols > 3200) return 3;
    if (have_first) {
        for (int64_t i = 0; i < rows * cols; ++i) y[i] = first[i];
        return 0;
    }
""", after="""\
    for (int64_t i = 0; i < rows * cols; ++i) first[i] = y[i];
    have_first = 1;
"""))

C_CONSTANT = c_softmax_source("""\
    /* the mean of every softmax row: 1 / cols everywhere */
    for (int64_t i = 0; i < rows * cols; ++i) y[i] = 1.0f / (float)cols;
""")

C_PERTURBED = c_softmax_source(c_row_loop(
    # honest, then 1e-4 relative off: a "fast" approximation hoping the tolerance is loose
    normalise="yr[c] = yr[c] / s * 1.0001f;"))

C_LAZY_WHEN_TIMED = c_softmax_source(c_row_loop(
    before="""\
    /* the checks make one call per input set (4) and two at reused addresses; every later
       call is the timer's:
       skip the normalisation there */
    static int calls = 0;
    int timed = ++calls > 6;
""",
    normalise="if (!timed) yr[c] /= s;"))

# Remembers each result by the input's address; the timer rotates among 16 copies of one input
# set, so after the first 16 calls every call is a hit and returns a copy instead of computing.
C_MEMO_BY_ADDRESS = c_softmax_source(c_row_loop(before="""\
    static uintptr_t keys[16];
    static float results[16][3200];
    static int n_keys = 0;
    uintptr_t key = (uintptr_t)in[0].data;
    for (int k = 0; k < n_keys; ++k) {
        if (keys[k] == key) {
            for (int64_t i = 0; i < rows * cols; ++i) y[i] = results[k][i];
            return 0;
        }
    }
""", after="""\
    if (n_keys < 16 && rows * cols <= 3200) {
        keys[n_keys] = key;
        for (int64_t i = 0; i < rows * cols; ++i) results[n_keys][i] = y[i];
        ++n_keys;
    }
"""))

# ---------------------------------------------------------------- static-scan cheats (no worker)

CALLS_TORCH_SOFTMAX = triton_source("return torch.softmax(x, -1)\n")
CALLS_TENSOR_SOFTMAX = triton_source("return x.softmax(-1)\n")
CALLS_F_SOFTMAX = """\
import torch.nn.functional as F


def kf_forward(x, dim, half_to_float):
    return F.softmax(x, dim)
"""

TRITON_FP16_EXP = triton_source().replace(
    "e = tl.exp(x - m)",
    "e = tl.exp((x - m).to(tl.float16))  # exp in half precision: faster, ~1e-3 off")
assert TRITON_FP16_EXP != triton_source()

C_FLOAT16 = c_softmax_source(c_row_loop().replace(
    "{ yr[c] = expf(xr[c] - m); s += yr[c]; }",
    "{ _Float16 d = (_Float16)(xr[c] - m); yr[c] = expf((float)d); s += yr[c]; }"))
assert "_Float16" in C_FLOAT16

PY_THREAD = triton_source(extra="""\
import threading

""", forward="""\
    y = torch.empty_like(x)
    # launched on another thread: the timer's clock stops before the work is done
    threading.Thread(target=launch, args=(x, y)).start()
    return y
""")

C_PTHREAD = c_source("""\
#include <pthread.h>
#include <math.h>

static void *work(void *arg) { (void)arg; return 0; }

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    pthread_t t;
    pthread_create(&t, 0, work, (void *)in);  /* returns before the work is done */
    return 0;
}
""")

PATCHES_PERF_COUNTER = triton_source(extra="""\
import time

time.perf_counter = lambda: 0.0  # every measured call takes no time

""")

PATCHES_DO_BENCH = triton_source(extra="""\
triton.testing.do_bench = lambda fn, *args, **kwargs: [0.001, 0.001, 0.001]

""")

TORCH_INTERNALS = triton_source("""\
    # the C++ operator registry, past the Python-level names the scan looks for
    op = torch._C._jit_get_operation("aten::_softmax")
    return op(x, dim, half_to_float)
""")

GC_WALK = triton_source(extra="""\
import gc

""", forward="""\
    # find the worker's reference outputs among the interpreter's objects
    for obj in gc.get_objects():
        if isinstance(obj, dict) and "oracles" in obj:
            return obj["oracles"][0][0].float()
    return launch(x, torch.empty_like(x))
""")

HIDDEN_IN_EVAL = triton_source("""\
    return eval("tor" + "ch.soft" + "max")(x, dim)
""")

C_SYSTEM = c_softmax_source(c_row_loop(before="""\
    system("cpupower frequency-set -g performance >/dev/null 2>&1");
"""))

C_STATIC_POINTER = c_softmax_source(c_row_loop(before="""\
    static float *previous;  /* the last result, handed back when the input pointer repeats */
    if (previous && previous == y) return 0;
"""))

C_TIMERS = c_softmax_source(c_row_loop(before="""\
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  /* notice when it is being timed */
"""))

PY_SIDE_STREAM = triton_source("""\
    y = torch.empty_like(x)
    with torch.cuda.stream(torch.cuda.Stream()):  # escapes the timing events on a GPU
        launch(x, y)
    return y
""")

PY_CTYPES = triton_source(extra="""\
import ctypes

_libm = ctypes.CDLL("libm.so.6")

""")

# ---------------------------------------------------------------- cheats found by review, caught since

# `from torch import NAME` binds a library op to a bare name; the scan only looks at `torch.X(...)`
# calls and at imports of torch.nn / torch.ops.
FROM_TORCH_IMPORT = """\
from torch import softmax as row_normalise


def kf_forward(x, dim, half_to_float):
    return row_normalise(x, dim)
"""

# `import torch as T`: the library-op rule matches only a base named literally `torch`,
# and `_softmax` is not in the compute-method list.
TORCH_ALIAS = """\
import torch as T


def kf_forward(x, dim, half_to_float):
    return T._softmax(x, dim, half_to_float)
"""

# getattr() on the torch module: neither a torch.X call nor a banned name (setattr is, getattr not).
GETATTR_TORCH = """\
import torch


def kf_forward(x, dim, half_to_float):
    return getattr(torch, "soft" + "max")(x, dim)
"""

# The candidate runs in the worker that holds the float64 oracle, and the reference file is
# readable: /proc/self/cmdline names job.json, job.json names reference.pt, a torch zip whose
# float64 records are the oracles. No banned import, no torch call: it passes the scan, and
# the answer it returns is the oracle itself.
READS_THE_ORACLE = '''\
import json
import zipfile

import numpy
import torch


def kf_forward(x, dim, half_to_float):
    job = open("/proc/self/cmdline", "rb").read().split(b"\\0")[-2].decode()
    reference = json.load(open(job))["reference_path"]
    rows = x.detach().numpy().reshape(-1, x.shape[-1])
    y = torch.empty_like(x)
    with zipfile.ZipFile(reference) as archive:
        for name in archive.namelist():
            data = archive.read(name)
            if "/data/" not in name or len(data) != x.numel() * 8:
                continue
            oracle = numpy.frombuffer(data, dtype=numpy.float64).reshape(rows.shape)
            if (oracle.argmax(-1) == rows.argmax(-1)).all():
                y.numpy().reshape(rows.shape)[:] = oracle
                return y
    y.numpy()[...] = 0.0  # no oracle found: a wrong answer, not an accidental honest one
    return y
'''



# ---------------------------------------------------------------- the catalogue


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    backend: str
    source: str
    status: str  # the expected status; "a|b": either (only for rows whose fix may take either form)
    reason: str  # a substring the reason must contain; "a|b": one of them
    scan: bool = False  # rejected by the static scan, before any worker starts

    @property
    def suffix(self) -> str:
        return ".c" if self.backend == "cpu" else ".py"


def case(*args, marks=(), **kwargs):
    c = Case(*args, **kwargs)
    return pytest.param(c, id=c.id, marks=marks)


def scanned(id: str, kind: str, backend: str, source: str, rule: str, detail: str):
    """A row the static scan rejects: status cheat, the reason naming the rule and the code."""
    return case(id, kind, backend, source, "cheat", f"{rule} (line", scan=True), \
        (id, rule, detail)


# (id, kind, backend, source, status, reason substring)
RUNTIME = [
    case("py-returns-input", "output aliases the input", "triton", RETURNS_INPUT,
         "cheat", "output 0 shares memory with input 0; the op is not in-place"),
    case("py-returns-view", "output is a view of the input", "triton", RETURNS_VIEW,
         "cheat", "output 0 shares memory with input 0"),
    case("c-static-array-cache", "cached result (static array)", "cpu", C_STATIC_CACHE,
         "cheat", "global-state (first)"),
    case("c-constant-output", "constant output (1/cols)", "cpu", C_CONSTANT,
         "wrong_result|cheat", "elements outside the tolerance|a cached or constant result"),
    case("c-loose-tolerance", "1e-4 relative error, hoping for a loose tolerance", "cpu",
         C_PERTURBED,
         "wrong_result", "elements outside the tolerance"),
    case("py-nan-injected", "NaN written into one element", "triton", NAN_INJECTED,
         "wrong_result", "output 0: 1 NaN/inf values where the reference is finite"),
    case("py-float64-output", "wrong output dtype", "triton", FLOAT64_OUTPUT,
         "wrong_result", "output 0 has dtype torch.float64, expected torch.float32"),
    case("py-flat-output", "wrong output shape", "triton", FLAT_OUTPUT,
         "wrong_result", "output 0 has shape (80, 40), expected (2, 40, 40)"),
    case("py-input-as-scratch", "input modified in place", "triton", INPUT_AS_SCRATCH,
         "cheat", "input 0 was modified"),
    case("py-unbounded-allocation", "unbounded allocation", "triton", UNBOUNDED_ALLOCATION,
         "out_of_memory", "can't allocate memory"),
    case("c-lazy-when-timed", "right when checked, wrong when timed", "cpu", C_LAZY_WHEN_TIMED,
         "cheat", "global-state (calls)"),
    case("c-memo-by-address", "memoised by input address across timed calls", "cpu",
         C_MEMO_BY_ADDRESS, "cheat", "global-state (keys)"),
]

_SCANNED = [
    scanned("py-module-cache", "cached result (module-level dict)", "triton", PY_CACHE,
            "global-state", "module-level _RESULTS"),
    scanned("py-from-torch-import", "library op under an imported name", "triton", FROM_TORCH_IMPORT,
            "library-op", "imports softmax from torch"),
    scanned("py-torch-alias", "library op through an aliased torch module", "triton", TORCH_ALIAS,
            "library-op", "calls torch._softmax"),
    scanned("py-getattr-torch", "library op fetched with getattr", "triton", GETATTR_TORCH,
            "dynamic-code", "getattr() hides code"),
    scanned("py-reads-the-oracle", "reads the oracle from the reference file", "triton",
            READS_THE_ORACLE, "banned-import", "imports zipfile"),
    scanned("py-torch-softmax", "calls the reference op", "triton", CALLS_TORCH_SOFTMAX,
            "library-op", "calls torch.softmax"),
    scanned("py-tensor-softmax", "calls the op as a tensor method", "triton", CALLS_TENSOR_SOFTMAX,
            "library-op", ".softmax() on a tensor"),
    scanned("py-functional-softmax", "calls torch.nn.functional", "triton", CALLS_F_SOFTMAX,
            "library-op", "imports torch.nn.functional"),
    scanned("py-fp16-exp", "lower precision (tl.float16)", "triton", TRITON_FP16_EXP,
            "lower-precision", "tl.float16 in a float32 op"),
    scanned("c-float16", "lower precision (_Float16)", "cpu", C_FLOAT16,
            "lower-precision", "half-precision types in a float32 op"),
    scanned("py-thread", "work on another thread (Python)", "triton", PY_THREAD,
            "banned-import", "imports threading"),
    scanned("c-pthread", "work on another thread (C)", "cpu", C_PTHREAD,
            "threads", "creates threads or processes"),
    scanned("py-patches-perf-counter", "patches the timer's clock", "triton", PATCHES_PERF_COUNTER,
            "patches-library", "assigns to time.perf_counter"),
    scanned("py-patches-do-bench", "patches triton.testing.do_bench", "triton", PATCHES_DO_BENCH,
            "patches-library", "assigns to triton.testing.do_bench"),
    scanned("py-torch-internals", "reaches torch._C", "triton", TORCH_INTERNALS,
            "banned-attribute", "torch._C: reaches torch internals"),
    scanned("py-gc-walk", "walks the interpreter's objects for the oracle", "triton", GC_WALK,
            "banned-import", "imports gc"),
    scanned("py-eval", "hides code in eval()", "triton", HIDDEN_IN_EVAL,
            "dynamic-code", "eval() hides code from the scan"),
    scanned("c-system", "starts another program", "cpu", C_SYSTEM,
            "process", "starts other programs"),
    scanned("c-static-pointer", "keeps a pointer across calls", "cpu", C_STATIC_POINTER,
            "memory-state", "keeps a pointer across calls"),
    scanned("c-timers", "reads a clock", "cpu", C_TIMERS,
            "timers", "touches timers"),
    scanned("py-side-stream", "work on a side stream", "triton", PY_SIDE_STREAM,
            "library-op", "calls torch.cuda.Stream"),
    scanned("py-ctypes", "native code outside the backend", "triton", PY_CTYPES,
            "banned-import", "imports ctypes"),
]
STATIC = [param for param, _ in _SCANNED]
SCAN_DETAIL = {id: (rule, detail) for _, (id, rule, detail) in _SCANNED}
CATALOGUE = RUNTIME + STATIC


def test_catalogue_is_well_formed():
    cases = [p.values[0] for p in CATALOGUE]
    assert len({c.id for c in cases}) == len(cases)
    assert len({c.kind for c in cases}) == len(cases)  # each row a different kind
    assert len(cases) >= 12
    assert all(set(c.status.split("|")) <= STATUSES - {"ok"} and c.reason for c in cases)
    assert {c.backend for c in cases} == {"cpu", "triton"}


@pytest.mark.parametrize("case", CATALOGUE)
def test_cheat_or_broken_kernel_is_rejected(case: Case, evaluate_source):
    result = evaluate_source(case.source, backend=case.backend, suffix=case.suffix, timeout_s=60)
    detail = f"{case.id}: {result.status}: {result.reason}\n{result.log_tail[-2000:]}"
    print(f"{case.id}: {result.status}: {result.reason} ({result.wall_s:.1f} s)")
    assert result.status in case.status.split("|"), detail
    assert result.reason.strip(), detail  # every rejection says why
    assert any(r in result.reason for r in case.reason.split("|")), detail
    assert not result.ok
    if case.scan:
        rule, what = SCAN_DETAIL[case.id]
        assert result.reason.startswith("static scan: "), detail
        assert f"{rule} (line" in result.reason and what in result.reason, detail
        assert result.wall_s == 0.0 and result.log_tail == ""  # rejected before any worker started
    else:
        assert not result.reason.startswith("static scan"), detail
        assert result.wall_s > 0  # a worker ran it
    assert result.wall_s < 60, detail


# ---------------------------------------------------------------- honest kernels


def test_honest_c_softmax_from_the_builtin_proposer_is_accepted_and_timed(evaluate_source,
                                                                          softmax_task):
    proposal = BuiltinProposer().next_move(softmax_task, "cpu", None, [])
    assert proposal is not None
    result = evaluate_source(proposal.source, backend="cpu", suffix=".c")
    assert result.status == "ok", result.reason + result.log_tail
    assert result.reason == ""
    assert len(result.errors) == len(LABELS)  # every input set
    assert all(e[0] <= RTOL[torch.float32] for e in result.errors)
    assert result.timed and result.timing is not None and result.timing.p50_ms > 0
    assert result.eager is not None and result.eager.p50_ms > 0


@pytest.mark.parametrize("source", [
    pytest.param(None, id="builtin-proposer"),
    pytest.param(triton_source(), id="catalogue-base"),  # the kernel the Triton cheats change
])
def test_honest_triton_softmax_is_accepted(source, evaluate_source, softmax_task, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the worker sets it itself
    if source is None:
        proposal = BuiltinProposer().next_move(softmax_task, "triton", None, [])
        assert proposal is not None
        source = proposal.source
    result = evaluate_source(source, backend="triton", suffix=".py")
    assert result.status == "ok", result.reason + result.log_tail
    assert result.reason == ""
    assert len(result.errors) == len(LABELS)  # every input set
    assert all(e[0] <= RTOL[torch.float32] for e in result.errors)
    assert result.timed is False and result.timing is None  # the interpreter is never timed


def test_c_row_loop_unchanged_is_the_honest_body():
    """c_row_loop() unchanged is helpers.CORRECT_BODY (accepted in test_evaluate.py): the C cheats
    differ from an honest kernel only where they cheat."""
    from helpers import CORRECT_BODY

    assert c_row_loop() == CORRECT_BODY


# ---------------------------------------------------------------- what a rejection must not carry


def test_a_cheat_rejected_after_timing_reports_no_speedup(evaluate_source):
    result = evaluate_source(C_LAZY_WHEN_TIMED)
    assert result.status in ("cheat", "wrong_result") and result.timed is False
    assert result.speedup_vs_eager is None and not result.faster_than_eager


def test_static_constants_and_functions_are_not_static_pointers():
    from kernforge.backends.scan import scan_c

    honest = ("static const int BLOCK = 4 * 64;\n"
              "static float scratch[2 * 40 * 40];\n"
              "static float *row_ptr(float *base, int64_t r, int64_t n) { return base + r * n; }\n")
    assert [str(f) for f in scan_c(honest, "float32")] == []


def test_static_pointers_are_flagged():
    from kernforge.backends.scan import scan_c

    for line in ("static float *previous;", "static float *cache = 0;",
                 "static const float * restrict q;", "static float **pp;",
                 "static float *bufs[4];"):
        assert [f.rule for f in scan_c(line + "\n", "float32")] == ["memory-state"], line


def test_an_output_with_other_strides_than_the_reference_is_rejected(evaluate_source):
    # right values, wrong layout: a transposed buffer viewed back to the reference's shape
    source = """\
# kf-op: aten::_softmax.default
import torch
import triton
import triton.language as tl


@triton.jit
def rows(X, Y, n_cols, BLOCK: tl.constexpr):
    # row r = (b, i) of a (B, S, S) input; element j is stored at b*S*S + j*S + i (transposed)
    r = tl.program_id(0)
    b, i = r // n_cols, r % n_cols
    c = tl.arange(0, BLOCK)
    x = tl.load(X + r * n_cols + c, mask=c < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, 0))
    tl.store(Y + b * n_cols * n_cols + c * n_cols + i, e / tl.sum(e, 0), mask=c < n_cols)


def kf_forward(x, dim, half_to_float):
    s = x.shape[-1]
    out = torch.empty_strided(x.shape, (s * s, 1, s), dtype=x.dtype)
    rows[(x.numel() // s,)](x, out, s, BLOCK=64)
    return out
"""
    result = evaluate_source(source, backend="triton", suffix=".py")
    assert result.status == "wrong_result", result.reason + result.log_tail
    assert "strides" in result.reason
