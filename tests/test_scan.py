"""The evaluator's allow-lists: the static scan (kernforge.backends.scan) and the checks of
compiled objects (kernforge.backends.object_scan).

Each bypass below got past the old deny-list of spellings; each must now be a finding with
the right rule, and the honest kernels none. The Python and C text rows need no compiler;
the object rows build through compile_library with gcc (~0.2 s each), the CUDA rows with
nvcc (skipped where it is missing)."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from helpers import c_softmax_source
from test_cheats import triton_source

from kernforge.backends import BuildError, RejectedBuild, cpu, object_scan
from kernforge.backends.native import C_PRELUDE, compile_library
from kernforge.backends.scan import scan_c, scan_python, scan_source

pytestmark = pytest.mark.integration


def rules(findings) -> list[str]:
    return [f.rule for f in findings]


# ---------------------------------------------------------------- Python: bypasses of the old scan

# (id, forward body or whole source, extra module-level code, the rule, a substring of the finding)
PY_BYPASSES = [
    ("bound-torch-function", "sm = torch.softmax\nreturn sm(x, -1)\n", "", "library-op", "torch.softmax"),
    ("torch-special", "return torch.special.expit(x)\n", "", "library-op", "torch.special.expit"),
    ("torch-linalg", "return x / torch.linalg.vector_norm(x)\n", "", "library-op", "torch.linalg"),
    ("tensor-plus-tensor", "y = launch(x, torch.empty_like(x))\nreturn y + x * 0\n", "", "library-op",
     "the + operator on y"),
    ("tensor-times-int", "return x * 2\n", "", "library-op", "the * operator on x"),
    ("tensor-negated", "return -x\n", "", "library-op", "the - operator on x"),
    ("tensor-squared", "return x ** 2\n", "", "library-op", "the ** operator on x"),
    ("tensor-in-place", "y = torch.empty_like(x)\ny += x\nreturn y\n", "", "library-op", "the + operator"),
    ("tensor-compared", "return launch(x, torch.empty_like(x)) > 0\n", "", "library-op", "the > operator"),
    ("builtin-max-of-tensor", "return max(x)\n", "", "library-op", "max() on x"),
    ("math-floor-of-tensor", "return math.floor(x)\n", "import math\n", "library-op", "math.floor() on x"),
    ("tensor-method", "return x.exp() / x.exp().sum(-1, keepdim=True)\n", "", "library-op",
     ".exp() on a tensor"),
    ("tensor-method-bound", "f = x.softmax\nreturn f(-1)\n", "", "library-op", ".softmax on a tensor"),
    ("tensor-write", "y = torch.empty_like(x)\ny[...] = x\nreturn y\n", "", "library-op",
     "writes into y[...]"),
    ("tensor-gather", "return x[[0, 1]]\n", "", "library-op", "indexes x[[0, 1]]"),
    ("builtins-import", 'os = __builtins__["__import__"]("os")\nreturn x\n', "", "banned-attribute",
     "__builtins__"),
    ("class-walk", "return x.__class__\n", "", "banned-attribute", "__class__"),
    ("getattr", 'return getattr(x, "soft" + "max")(-1)\n', "", "dynamic-code", "getattr()"),
    ("open-as-value", 'f = open\nreturn f("/proc/self/cmdline")\n', "", "file-access", "open()"),
    ("unknown-builtin", "return next(iter(x))\n", "", "unknown-name", "calls the builtin iter"),
    ("builtin-sum-of-tensor", "return sum([x, x])\n", "", "library-op", "sum() on [x, x]"),
    ("worker-import", "return x\n", "import kernforge.harness.timing\n", "banned-import",
     "imports kernforge.harness.timing"),
    ("main-import", "return x\n", "import __main__\n", "banned-import", "imports __main__"),
    ("from-kernforge", "return x\n", "from kernforge.evaluate import worker\n", "banned-import",
     "imports kernforge.evaluate"),
    ("module-dict-cache", "_CACHE[0] = launch(x, torch.empty_like(x))\nreturn _CACHE[0]\n", "_CACHE = {}\n",
     "global-state", "module-level _CACHE"),
    ("module-tensor", "return launch(x, _OUT)\n", "_OUT = torch.empty(3200)\n", "global-state",
     "module-level _OUT"),
    ("global-statement", "global _N\n_N = 1\nreturn launch(x, torch.empty_like(x))\n", "_N = 0\n",
     "global-state", "global _N"),
    ("mutable-default", "return cached(x)\n", "def cached(x, _memo={}):\n    return x\n", "global-state",
     "default {}"),
    ("lambda-default", "return remember(x)\n", "remember = lambda x, seen=[]: x\n", "global-state",
     "default [] of a lambda"),
    ("autotune-prune-hook", "return rows[(1,)](x, x)\n",
     "def prune(configs, args):\n    args['y'].copy_(args['x'])\n    return configs\n\n\n"
     "def body(X, Y):\n    pass\n\n\n"
     "rows = triton.autotune(configs=[], key=[], prune_configs_by={'early_config_prune': prune})"
     "(triton.jit(body))\n",
     "library-op", ".copy_() on a tensor"),
    ("class-state", "return x\n", "class Memo:\n    seen = {}\n", "global-state", "defines class Memo"),
    ("attribute-on-function", "launch.last = x\nreturn x\n", "", "assigns-attribute",
     "assigns to launch.last"),
    ("attribute-on-tensor", "x.grad = x\nreturn x\n", "", "assigns-attribute", "assigns to x.grad"),
    ("patches-torch", "return x\n", "torch.empty_like = lambda t: t\n", "patches-library",
     "assigns to torch.empty_like"),
    ("jit-called-directly", "return softmax_rows(x, x, 1, 1)\n", "", "jit-call", "softmax_rows"),
    ("side-stream",
     "with torch.cuda.stream(torch.cuda.Stream()):\n    return launch(x, torch.empty_like(x))\n",
     "", "library-op", "calls torch.cuda.Stream"),
    ("triton-testing", "return x\n", "bench = triton.testing.do_bench\n", "banned-attribute",
     "triton.testing"),
    ("globaltimer", "return x\n", "clock = tl.extra.cuda.globaltimer\n", "banned-attribute",
     "of triton.language.extra only libdevice"),
    ("module-code", "return x\n", "print('imported')\n", "module-code", "runs code at import"),
    ("module-name-shadowed", "return scale(x)\n", "def scale(torch):\n    return torch.view(-1) * 2\n",
     "library-op", "the * operator on torch.view(-1)"),
    ("memo-that-counts", "sm_count(x.device)\nreturn x\n",
     "_SEEN = {}\n\n\ndef sm_count(device):\n    if device not in _SEEN:\n"
     "        _SEEN[device] = len(_SEEN)\n"
     "    return _SEEN[device]\n", "global-state", "module-level _SEEN"),
]


@pytest.mark.parametrize("forward, extra, rule, detail", [p[1:] for p in PY_BYPASSES],
                         ids=[p[0] for p in PY_BYPASSES])
def test_python_bypass_is_a_finding(forward, extra, rule, detail):
    findings = scan_python(triton_source(forward, extra), "float32")
    assert any(f.rule == rule and detail in str(f) for f in findings), [str(f) for f in findings]
    assert all(f.line > 0 for f in findings)


def test_inline_asm_reading_a_clock_is_a_finding():
    source = triton_source(extra='''
        @triton.jit
        def now(X):
            t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                          is_pure=False, pack=1)
            tl.store(X, t)

    ''')
    assert "timers" in rules(scan_python(source, "float32"))


def test_tl_dot_in_a_float32_op_must_ask_for_ieee():
    dot = triton_source(extra='''
        @triton.jit
        def mm(A, B, C, BLOCK: tl.constexpr):
            i = tl.arange(0, BLOCK)
            a = tl.load(A + i[:, None] * BLOCK + i[None, :])
            b = tl.load(B + i[:, None] * BLOCK + i[None, :])
            tl.store(C + i[:, None] * BLOCK + i[None, :], tl.dot(a, b{}))

    ''')
    assert "lower-precision" in rules(scan_python(dot.replace("{}", ""), "float32"))
    assert not scan_python(dot.replace("{}", ', input_precision="ieee"'), "float32")
    assert not scan_python(dot.replace("{}", ""), "bfloat16")


# ---------------------------------------------------------------- Python: honest code passes

HONEST_LAUNCHERS = {
    "base": triton_source(),
    # a scalar argument wrapped in int() is provably no tensor
    "int-of-an-argument": triton_source("d = int(dim) % x.ndim\nassert d == x.ndim - 1\n"
                                        "return launch(x, torch.empty_like(x))\n"),
    "grid-lambda": triton_source('''\
        n = x.shape[-1]
        y = torch.empty_like(x)
        grid = lambda meta: (triton.cdiv(x.numel() // n, meta["ROWS"]),)
        softmax_rows[grid](x, y, n, BLOCK_N=triton.next_power_of_2(n))
        return y
    '''),
    "helper-with-scalar-arguments": triton_source('''\
        return run(x, torch.empty_like(x), x.shape[-1], 2)
    ''', extra='''\
        def run(x, y, n, per_sm):
            rows = x.numel() // n
            programs = min(rows, per_sm * 4)
            softmax_rows[(rows,)](x, y, n, BLOCK_N=triton.next_power_of_2(n))
            return y if programs > 0 else y

    '''),
    "device-memo": triton_source('''\
        assert sm_count(x.device) > 0
        return launch(x, torch.empty_like(x))
    ''', extra='''\
        _SMS = {}
        CONFIGS = [triton.Config({"BLOCK": 128}, num_warps=4)]
        SHAPE = [2, 40, 40]


        def sm_count(device):
            if device not in _SMS:
                _SMS[device] = (torch.cuda.get_device_properties(device).multi_processor_count
                                if device.type == "cuda" else 4)
            return _SMS[device]

    '''),
}


@pytest.mark.parametrize("source", HONEST_LAUNCHERS.values(), ids=HONEST_LAUNCHERS.keys())
def test_honest_triton_source_has_no_findings(source):
    assert [str(f) for f in scan_python(source, "float32")] == []


@pytest.mark.parametrize("backend, language", [("triton", "triton"), ("cpu", "c")])
def test_builtin_proposer_sources_have_no_findings(backend, language, softmax_task):
    from kernforge.propose.builtin import BuiltinProposer

    proposal = BuiltinProposer().next_move(softmax_task, backend, None, [])
    assert proposal is not None
    assert [str(f) for f in scan_source(proposal.source, language, "torch.float32")] == []


# ---------------------------------------------------------------- C and CUDA text

C_TEXT = [
    ("pthread-header", "#include <pthread.h>\n", "banned-include", "<pthread.h>"),
    ("python-header", "#include <Python.h>\n", "banned-include", "<Python.h>"),
    ("quoted-header", '#include "/proc/self/environ"\n', "banned-include", "quoted header"),
    ("computed-header", "#define H <pthread.h>\n#include H\n", "banned-include", "computed"),
    ("digraph-include", "%:include <pthread.h>\n", "banned-include", "<pthread.h>"),
    ("trigraph-include", "??=include <pthread.h>\n", "banned-include", "<pthread.h>"),
    ("continued-include", "#inc\\\nlude <pthread.h>\n", "banned-include", "<pthread.h>"),
    ("import-directive", "#import <pthread.h>\n", "preprocessor", "#import"),
    ("token-pasting", "#define CALL(a, b) a ## b\n", "token-pasting", "##"),
    ("inline-asm", 'static void f(void) { __asm__ volatile("syscall"); }\n', "inline-asm", "inline assembly"),
    ("extern-declaration", "extern int open(const char *, int, ...);\n", "extern", "extern declaration"),
]


@pytest.mark.parametrize("text, rule, detail", [c[1:] for c in C_TEXT], ids=[c[0] for c in C_TEXT])
def test_c_text_bypass_is_a_finding(text, rule, detail):
    findings = scan_c(C_PRELUDE + text, "float32")
    assert any(f.rule == rule and detail in str(f) for f in findings), [str(f) for f in findings]


def test_c_text_allows_what_kernels_include():
    source = "#include <immintrin.h>\n#include <omp.h>\n#include <math.h>\n" + c_softmax_source()
    assert scan_c(source, "float32") == []


def test_cuda_text_allows_its_headers_definitions_and_shared_memory_but_no_clocks():
    honest = C_PRELUDE + textwrap.dedent('''\
        #include <cuda_runtime.h>
        #include <cooperative_groups.h>
        __global__ void k(const float *x, float *y) {
            extern __shared__ float tile[];
            asm volatile("prefetch.global.L2 [%0];" :: "l"(x));
            tile[threadIdx.x] = x[threadIdx.x];
            y[threadIdx.x] = tile[threadIdx.x];
        }
        extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
            k<<<1, 32, 128>>>((const float *)in[0].data, (float *)out[0].data);
            return 0;
        }
    ''')
    assert [str(f) for f in scan_source(honest, "cuda", "float32")] == []
    clocked = honest.replace('"prefetch.global.L2 [%0];" :: "l"(x)',
                             '"mov.u64 %0, %%globaltimer;" : "=l"(t)')
    assert "timers" in rules(scan_source(clocked, "cuda", "float32"))
    stub = honest.replace("tile[threadIdx.x] = x",
                          "static int __cudaFatCubinHandle_x; tile[threadIdx.x] = x")
    assert "reserved-name" in rules(scan_source(stub, "cuda", "float32"))
    block = honest.replace('extern "C" int kf_forward',
                           'extern "C" { int open(const char *, int); }\nint kf_forward')
    assert "extern" in rules(scan_source(block, "cuda", "float32"))


# ---------------------------------------------------------------- C objects (gcc)


def object_findings(tmp_path: Path, source: str, command: list[str] | None = None,
                    suffix: str = ".c") -> list[str]:
    """The object checks' findings for `source` built through compile_library; [] when it built."""
    path = tmp_path / f"candidate{suffix}"
    path.write_text(source)
    try:
        compile_library(path, tmp_path / "build", command or ["gcc", *cpu.CFLAGS, "-lm"], "test")
    except RejectedBuild as e:
        assert str(e) == "; ".join(str(f) for f in e.findings)
        return [str(f) for f in e.findings]
    return []


def c_kernel(before: str, body: str) -> str:
    """The honest softmax with declarations before it and `body` run first in kf_forward."""
    source = c_softmax_source()
    source = source.replace("int kf_forward(", textwrap.dedent(before) + "\nint kf_forward(", 1)
    first = textwrap.indent(textwrap.dedent(body), "    ")
    return source.replace("    int64_t cols =", first + "    int64_t cols =", 1)


# (id, declarations, first lines of kf_forward, the finding's start: rule (symbol))
C_OBJECTS = [
    ("plain-global-counter", "int calls;", "if (++calls > 6) return 0;", "global-state (calls)"),
    ("static-array", "",
     "static float first[3200]; if (first[0] != 0.0f) return 0; first[0] = 1.0f;",
     "global-state (first)"),
    ("thread-local", "_Thread_local int calls;", "if (++calls > 6) return 0;",
     "global-state (calls)"),
    ("thrd-create",
     "typedef unsigned long thrd_t; int thrd_create(thrd_t *, int (*)(void *), void *);\n"
     "static int work(void *arg) { return arg != 0; }",
     "thrd_t t; if (thrd_create(&t, work, 0) != 0) return 9;", "undefined-symbol (thrd_create)"),
    ("vfork", "int vfork(void);", "if (vfork() == 0) return 9;", "undefined-symbol (vfork)"),
    ("fopen-pointer", "typedef struct _IO_FILE FILE; FILE *fopen(const char *, const char *);",
     'FILE *(*f)(const char *, const char *) = fopen; if (f("/proc/self/cmdline", "r") == 0) '
     "return 9;", "undefined-symbol (fopen)"),
    ("timespec-get", "struct timespec { long s, ns; }; int timespec_get(struct timespec *, int);",
     "struct timespec ts; timespec_get(&ts, 1); if (ts.ns == 7) return 9;",
     "undefined-symbol (timespec_get)"),
    ("clock", "long clock(void);", "if (clock() > 1000) return 9;", "undefined-symbol (clock)"),
    ("rdtsc", "#include <x86intrin.h>", "if (__rdtsc() % 2 == 3) return 9;", "instruction (rdtsc"),
    ("glob", "int glob(const char *, int, void *, void *);",
     'if (glob("/tmp/*", 0, 0, 0) == 5) return 9;', "undefined-symbol (glob)"),
    ("fopen64", "typedef struct _IO_FILE FILE; FILE *fopen64(const char *, const char *);",
     'if (fopen64("/proc/self/maps", "r") == 0) return 9;', "undefined-symbol (fopen64)"),
    ("hand-declared-open", "extern int open(const char *, int, ...);",
     'if (open("/proc/self/mem", 0) < -5) return 9;', "undefined-symbol (open)"),
    ("syscall-asm", "",
     'long r; __asm__ volatile("syscall" : "=a"(r) : "a"(39L) : "rcx", "r11", "memory"); '
     "if (r == -1) return 9;", "instruction (syscall"),
    ("python-c-api", "void Py_Initialize(void); int PyRun_SimpleString(const char *);",
     'Py_Initialize(); if (PyRun_SimpleString("import os") != 0) return 9;',
     "undefined-symbol (PyRun_SimpleString)"),
    ("omp-wtime", "double omp_get_wtime(void);", "if (omp_get_wtime() < 0) return 9;",
     "undefined-symbol (omp_get_wtime)"),
    # the section name ends the assembler's line early: a writable, executable .text.kf
    ("writable-code-section", '__attribute__((section(".text.kf,\\"awx\\",@progbits#"))) int state;',
     "if (++state > 6) return 0;", "global-state (state)"),
]


@pytest.mark.parametrize("before, body, expected", [c[1:] for c in C_OBJECTS],
                         ids=[c[0] for c in C_OBJECTS])
def test_c_object_bypass_is_rejected(tmp_path, before, body, expected):
    findings = object_findings(tmp_path, c_kernel(before, body))
    assert any(f.startswith(expected) for f in findings), findings
    assert not list((tmp_path / "build").glob("kf_*.so"))  # a rejected library is never cached


def test_honest_c_softmax_builds_and_passes(tmp_path):
    assert object_findings(tmp_path, c_softmax_source()) == []
    assert len(list((tmp_path / "build").glob("kf_*.so"))) == 1


def test_a_rejection_is_not_a_compile_error(tmp_path):
    source = tmp_path / "k.c"
    source.write_text(c_kernel("int calls;", "++calls;"))
    with pytest.raises(RejectedBuild) as info:
        compile_library(source, tmp_path / "build", ["gcc", *cpu.CFLAGS, "-lm"], "test")
    assert isinstance(info.value, BuildError) and info.value.findings[0].rule == "global-state"
    source.write_text(c_softmax_source().replace("return 0;\n}", "return 0\n}"))
    with pytest.raises(BuildError) as info:
        compile_library(source, tmp_path / "build", ["gcc", *cpu.CFLAGS, "-lm"], "test")
    assert not isinstance(info.value, RejectedBuild) and "error" in str(info.value)


def test_the_cache_key_includes_the_checks_version(tmp_path, monkeypatch):
    source = tmp_path / "k.c"
    source.write_text(c_softmax_source())
    command = ["gcc", *cpu.CFLAGS, "-lm"]
    first = compile_library(source, tmp_path / "build", command, "test")
    assert compile_library(source, tmp_path / "build", command, "test") == first
    monkeypatch.setattr(object_scan, "VERSION", object_scan.VERSION + "-next")
    # built and checked again
    assert compile_library(source, tmp_path / "build", command, "test") != first


def test_missing_objdump_is_one_clear_build_error(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNFORGE_BUILD_CACHE")  # the session's cache holds this library, checked
    real_which = shutil.which
    monkeypatch.setattr(object_scan.shutil, "which",
                        lambda tool: None if tool == "objdump" else real_which(tool))
    source = tmp_path / "k.c"
    source.write_text(c_softmax_source())
    with pytest.raises(BuildError, match="install binutils") as info:
        compile_library(source, tmp_path / "build", ["gcc", *cpu.CFLAGS, "-lm"], "test")
    assert not isinstance(info.value, RejectedBuild)


# ---------------------------------------------------------------- CUDA objects (nvcc)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")

CUDA_HONEST = C_PRELUDE + r"""
#include <cuda_runtime.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
constexpr float SCALE = 2.0f;

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) scale(const float *x, float *y, int64_t n) {
    extern __shared__ float tile[];
    cg::thread_block block = cg::this_thread_block();
    int64_t i = blockIdx.x * (int64_t)BLOCK + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    block.sync();
    if (i < n) y[i] = SCALE * tile[threadIdx.x];
}

extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    int64_t n = 1;
    for (int d = 0; d < in[0].ndim; ++d) n *= in[0].sizes[d];
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    scale<256><<<(n + 255) / 256, 256, 256 * sizeof(float)>>>((const float *)in[0].data,
                                                              (float *)out[0].data, n);
    return cudaGetLastError() == cudaSuccess && sms > 0 ? 0 : 1;
}
"""


def cuda_findings(tmp_path: Path, source: str) -> list[str]:
    from kernforge.backends.cuda import NVCC_FLAGS

    return object_findings(tmp_path, source, ["nvcc", "-arch=sm_90", *NVCC_FLAGS], ".cu")


@needs_nvcc
def test_honest_cuda_kernel_builds_and_passes(tmp_path):
    assert scan_source(CUDA_HONEST, "cuda", "float32") == []
    assert cuda_findings(tmp_path, CUDA_HONEST) == []


@needs_nvcc
def test_cuda_state_clocks_streams_and_device_calls_are_rejected(tmp_path):
    source = CUDA_HONEST.replace("constexpr float SCALE = 2.0f;", """\
__constant__ float SCALE[2] = {2.0f, 0.5f};
__device__ unsigned long long calls;""").replace("SCALE * tile", "SCALE[0] * tile").replace(
        "    block.sync();", """\
    block.sync();
    if (i == 0) { calls += clock64(); printf("%d", 1); }""").replace(
        "    int device = 0, sms = 0;", """\
    static int host_calls = 0;
    cudaStream_t side;
    cudaStreamCreate(&side);
    int device = host_calls++, sms = 0;""")
    findings = cuda_findings(tmp_path, source)
    # a __constant__ variable too: read-only on the device, but its host shadow is writable state
    for expected in ("global-state (calls)", "global-state (SCALE)",
                     "global-state (kf_forward::host_calls)", "timers (device %clock64)",
                     "undefined-symbol (device vprintf)", "undefined-symbol (cudaStreamCreate)"):
        assert any(f.startswith(expected) for f in findings), (expected, findings)
    # a __device__ variable's host shadow and its PTX declaration: one finding
    assert len([f for f in findings if "calls)" in f and "host" not in f]) == 1
