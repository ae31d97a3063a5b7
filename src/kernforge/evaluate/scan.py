"""A static scan of a candidate's source for known ways of fooling the evaluator.

Each finding names its rule, the line and why it is rejected. The scan reads text
only; it runs before a worker is started. Python (Triton) candidates are walked as
a syntax tree, so comments and strings never match; C and CUDA candidates are
matched line by line with comments and string literals removed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    rule: str
    line: int
    text: str
    reason: str

    def __str__(self) -> str:
        return f"{self.rule} (line {self.line}: {self.text.strip()[:80]}): {self.reason}"


# ---------------------------------------------------------------- Python / Triton

# torch functions a Triton launcher may call: allocation and metadata, no computation.
_TORCH_ALLOWED = {"empty", "empty_like", "empty_strided", "device", "Size"}
# Tensor methods that compute what the kernel should compute (or copy the answer).
_COMPUTE_METHODS = {
    "softmax", "log_softmax", "exp", "log", "sum", "mean", "amax", "amin", "max", "min", "matmul",
    "mm", "bmm", "mul", "add", "sub", "div", "sigmoid", "tanh", "relu", "gelu", "silu", "norm",
    "layer_norm", "group_norm", "rms_norm", "pow", "sqrt", "rsqrt", "var", "std", "copy_", "clone",
    "fill_", "zero_", "softmax_", "exp_", "mul_", "add_", "div_", "sub_", "cumsum", "prod", "baddbmm",
}
_BANNED_MODULES = {
    "threading": "creates threads that can run work outside the timed region",
    "multiprocessing": "creates processes that can run work outside the timed region",
    "concurrent": "creates threads or processes that can run work outside the timed region",
    "subprocess": "starts other programs",
    "os": "reaches the process and its environment",
    "sys": "reaches interpreter internals (sys.modules, frames)",
    "time": "touches timers",
    "timeit": "touches timers",
    "gc": "walks the interpreter's objects (the reference outputs among them)",
    "inspect": "reads the caller's frames (the reference outputs among them)",
    "ctypes": "calls native code outside the backend's control",
    "importlib": "imports code the scan cannot see",
    "builtins": "patches the interpreter's builtins",
    "signal": "interferes with the worker's time limit",
    "pickle": "loads data the scan cannot see",
    "io": "reads files (the reference outputs are on disk)",
    "zipfile": "reads files (the reference outputs are on disk)",
    "pathlib": "reads files (the reference outputs are on disk)",
    "shutil": "reads or copies files",
    "numpy": "reads files or computes outside the kernel",
}
_BANNED_ATTRIBUTES = {
    ("torch", "_C"): "reaches torch internals",
    ("torch", "_dynamo"): "reaches torch internals",
    ("torch", "ops"): "calls library operators for the main computation",
    ("torch", "nn"): "calls torch.nn for the main computation",
    ("torch", "backends"): "changes library settings",
    ("cuda", "Stream"): "creates a stream: work on it escapes the timing events",
    ("cuda", "stream"): "switches streams: work on another stream escapes the timing events",
    ("cuda", "set_stream"): "switches streams: work on another stream escapes the timing events",
    ("cuda", "Event"): "touches timing events",
    ("cuda", "synchronize"): "synchronises inside the kernel call (the timer's job)",
    ("triton", "testing"): "touches the timer (triton.testing.do_bench)",
}
_LOW_PRECISION = {"float16", "half", "bfloat16", "float8e4nv", "float8e5", "float8_e4m3fn", "float8_e5m2"}


def scan_python(source: str, task_dtype: str) -> list[Finding]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # the build reports it, with the compiler's words
    lines = source.splitlines()
    findings: list[Finding] = []

    def add(node: ast.AST, rule: str, reason: str) -> None:
        line = getattr(node, "lineno", 0)
        findings.append(Finding(rule, line, lines[line - 1] if 0 < line <= len(lines) else "", reason))

    torch_names = _torch_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                root = name.split(".")[0]
                if root in _BANNED_MODULES:
                    add(node, "banned-import", f"imports {name}: {_BANNED_MODULES[root]}")
                if name.startswith(("torch.nn", "torch.ops")):
                    add(node, "library-op", f"imports {name} for the main computation")
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
                for alias in node.names:
                    if alias.name not in _TORCH_ALLOWED | _TORCH_DTYPES:
                        add(node, "library-op", f"imports {alias.name} from {node.module}: the kernel must "
                                                "compute the op itself")
        elif isinstance(node, ast.Attribute):
            base = node.value
            base_name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            reason = _BANNED_ATTRIBUTES.get((base_name, node.attr))
            if reason:
                add(node, "banned-attribute", f"{base_name}.{node.attr}: {reason}")
            if task_dtype == "float32" and node.attr in _LOW_PRECISION and base_name in ("torch", "tl"):
                add(node, "lower-precision", f"{base_name}.{node.attr} in a float32 op: computes in "
                                             "lower precision than the reference")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and getattr(func.value, "id", "") in torch_names \
                    and func.attr not in _TORCH_ALLOWED:
                add(node, "library-op", f"calls torch.{func.attr}: the kernel must compute the op itself")
            elif isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "F":
                add(node, "library-op", f"calls F.{func.attr}: the kernel must compute the op itself")
            elif isinstance(func, ast.Attribute) and func.attr in _COMPUTE_METHODS \
                    and getattr(func.value, "id", "") not in ("tl", "triton", "math"):
                add(node, "library-op", f".{func.attr}() on a tensor: the kernel must compute the op itself")
            elif isinstance(func, ast.Name) and func.id in ("exec", "eval", "compile", "__import__", "setattr",
                                                            "getattr", "vars", "globals", "locals"):
                add(node, "dynamic-code", f"{func.id}() hides code from the scan or patches objects")
            elif isinstance(func, ast.Name) and func.id == "open":
                add(node, "file-access", "open() reads files (the reference outputs are on disk)")
            for kw in node.keywords:
                if task_dtype == "float32" and kw.arg in ("allow_tf32", "input_precision") and \
                        not (isinstance(kw.value, ast.Constant) and kw.value.value in (False, "ieee")):
                    add(node, "lower-precision", f"{kw.arg}: tf32 products in a float32 op")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            add(node, "library-op", "the @ operator calls the library's matmul")
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, (ast.Name, ast.Attribute)):
                    root = target.value
                    while isinstance(root, ast.Attribute):
                        root = root.value
                    if getattr(root, "id", "") in ("torch", "triton", "tl", "time", "math"):
                        add(node, "patches-library", f"assigns to {ast.unparse(target)}: patches a "
                                                     "library or a timer")
    return findings


_TORCH_DTYPES = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "bool"}


def _torch_aliases(tree: ast.AST) -> set[str]:
    """Every name the torch module is bound to: `import torch`, `import torch as T`."""
    names = {"torch"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname for a in node.names if a.name == "torch" and a.asname}
    return names


# ---------------------------------------------------------------- C / CUDA

_C_RULES = [
    ("library-op", r"#\s*include\s*[<\"](cublas|cudnn|cublasLt|cufft|cusparse|ATen|torch|c10)",
     "includes a library that computes the op (cuBLAS, cuDNN, ATen...)"),
    ("library-op", r"\b(cublas\w*|cudnn\w*|at::|torch::)", "calls a library for the main computation"),
    ("side-stream", r"\bcudaStream(Create\w*|PerThread|Legacy)\b|\bcudaLaunchHostFunc\b",
     "uses another stream: work on it escapes the timing events"),
    ("threads", r"\bpthread_create\b|\bstd::(thread|async|jthread)\b|\bfork\s*\(",
     "creates threads or processes that can run work outside the timed region"),
    ("timers", r"\b(clock_gettime|gettimeofday|cudaEvent\w+|__rdtsc|rdtsc|clock64|dlsym|dlopen)\b",
     "touches timers or loads code the scan cannot see"),
    ("process", r"\b(system|popen|execv\w*|execl\w*)\s*\(", "starts other programs"),
    ("memory-state", r"\bstatic\b[^;()=\[{]*\*\s*(?:(?:const|restrict|volatile)\s+)*\w+\s*[;=\[,]",
     "keeps a pointer across calls: a cached or stale result"),
    ("file-access", r"\b(fopen|freopen|open|openat|mmap|fread|opendir|readdir|scandir|syscall)\s*\(|/proc/|/tmp/",
     "reads files (the reference outputs are on disk)"),
]
_C_LOW_PRECISION = r"\b(__half2?|half2?|__nv_bfloat16\w*|_Float16|__float2half\w*|__float2bfloat16\w*|__nv_fp8\w*)\b"


def scan_c(source: str, task_dtype: str) -> list[Finding]:
    findings = []
    rules = list(_C_RULES)
    if task_dtype == "float32":
        rules.append(("lower-precision", _C_LOW_PRECISION,
                      "half-precision types in a float32 op: computes in lower precision than the reference"))
    for number, line in enumerate(_strip_c_comments_and_strings(source).splitlines(), start=1):
        for rule, pattern, reason in rules:
            if re.search(pattern, line):
                findings.append(Finding(rule, number, line, reason))
    return findings


def _strip_c_comments_and_strings(source: str) -> str:
    """Blank out comments and string literals, keeping line numbers."""
    def blank(match: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))
    pattern = r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'"
    return re.sub(pattern, blank, source, flags=re.DOTALL)


def scan_source(source: str, language: str, task_dtype: str) -> list[Finding]:
    """Findings for a candidate in `language` (triton, c, cuda) for a task whose tensors are task_dtype."""
    dtype = task_dtype.replace("torch.", "")
    if language == "triton":
        return scan_python(source, dtype)
    return scan_c(source, dtype)
