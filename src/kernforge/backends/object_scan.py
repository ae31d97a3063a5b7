"""Checks of a compiled candidate's object file, by construction, before it is linked and loaded.

The static scan reads the source's text; a C candidate can still reach open() through a
prototype it writes itself, keep state in a plain global, or read rdtsc from an intrinsic.
The compiler's output cannot hide those, so the object (gcc -c / nvcc -c) is read with
binutils' objdump, and rejected unless

- every symbol it needs from elsewhere is in an allow-list (libm, memcpy and malloc, the
  OpenMP runtime gcc's -fopenmp calls, the compiler's helpers, libgcc's CPU model that
  __builtin_cpu_supports reads; for CUDA the CUDA runtime calls nvcc's host stub makes and a
  short list of launch and attribute calls): a function
  pointer to fopen, a hand-declared open(), thrd_create, vfork, timespec_get, clock(),
  PyRun_SimpleString all show up as symbols;
- its machine code has no syscall, sysenter, int $0x80, rdtsc, rdtscp or rdpmc: those reach
  the kernel or a clock without any symbol;
- it keeps no mutable state: nothing lives in a writable section (.data, .bss, TLS, a
  common symbol, a section of its own) but what nvcc's host stub puts there. A static
  array inside kf_forward (`first.0` in .bss) is as much state as a global, and so is a
  __constant__ or __device__ variable: its host shadow sits in .bss, and host code may
  write it through a pointer (nvcc compiles `int *p = (int *)&table; p[0]++`). The one
  exception is judged by what it is, not by its name alone: the lock word gcc makes for a
  named `#pragma omp critical(name)`, a pointer-sized common symbol whose dotted name no C
  identifier can spell, written only by libgomp, and libgcc's CPU model only read;
- for CUDA, the device code nvcc kept (PTX) calls no outside device function, reads no clock
  (%clock, %globaltimer) and declares no .global variable.

Limits: disassembly is a linear sweep, so code hidden inside another instruction's bytes
is not seen; a call through an address computed from an allowed function (memcpy + k) is
not a symbol; neither is CUDA work launched on a stream cast from a constant, nor a result
read back from a heap block an earlier call freed. libgcc's CPU model and a critical
section's lock word are judged by a linear sweep of their uses (_outside_state_uses): a jump
over an instruction that overwrites the register is not followed. Only a sandbox around the worker
process (seccomp, namespaces) could stop those.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Part of the build cache key: a library built under older checks is built (and checked) again.
VERSION = "2"


@dataclass(frozen=True)
class ObjectFinding:
    rule: str
    symbol: str
    reason: str

    def __str__(self) -> str:
        return f"{self.rule} ({self.symbol}): {self.reason}"


# ---------------------------------------------------------------- what an object may use

_LIBM = {"acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "ceil", "copysign", "cos", "cosh",
         "erf", "erfc", "exp", "exp10", "exp2", "expm1", "fabs", "fdim", "floor", "fma", "fmax", "fmin", "fmod",
         "frexp", "hypot", "ilogb", "ldexp", "lgamma", "llrint", "llround", "log", "log10", "log1p", "log2", "logb",
         "lrint", "lround", "modf", "nan", "nearbyint", "nextafter", "pow", "remainder", "remquo", "rint", "round",
         "scalbn", "scalbln", "sin", "sincos", "sinh", "sqrt", "tan", "tanh", "tgamma", "trunc"}
_LIBM_NAMES = "|".join(sorted(_LIBM))
_C_ALLOWED = [
    rf"(?:{_LIBM_NAMES})[fl]?",
    rf"__(?:{_LIBM_NAMES})[fl]?_finite",  # older glibc's -ffinite-math-only entry points
    rf"_ZGV[a-z]N\d+[vlu\d]*_(?:{_LIBM_NAMES})f?",  # glibc's vector math (libmvec), from omp simd
    r"__(?:isnan|isinf|finite|fpclassify|signbit)[fl]?",
    r"mem(?:cpy|set|move|cmp)", r"__mem(?:cpy|set|move)_chk",
    r"malloc|calloc|realloc|free|aligned_alloc|posix_memalign",
    # the OpenMP runtime entry points gcc's -fopenmp emits for host parallel loops, reductions,
    # critical sections and tasks (not target, teams or offload)
    r"GOMP_(?:parallel\w*|barrier\w*|critical_\w+|atomic_(?:start|end)|single_\w+|loop_\w+|sections\w*|"
    r"ordered_\w+|task|taskwait|taskyield|taskgroup_\w+|taskloop\w*|task_reduction_remap|doacross_\w+|"
    r"scope_start|workshare_task_reduction_unregister|alloc|free)",
    r"omp_get_(?:num_threads|thread_num|max_threads|num_procs|level|ancestor_thread_num|team_size|"
    r"active_level|thread_limit|dynamic|nested|num_teams|team_num|max_active_levels)|omp_in_parallel",
    # compiler helpers: stack protector, libgcc's 128-bit, half-precision and complex arithmetic
    r"__stack_chk_fail|_GLOBAL_OFFSET_TABLE_",
    # run-time CPU-feature dispatch: __builtin_cpu_supports/__builtin_cpu_is read libgcc's CPU
    # model (filled once, before main, by __cpu_indicator_init; __builtin_cpu_init calls it again)
    r"__cpu_model|__cpu_features2|__cpu_indicator_init",
    r"__(?:extend|trunc)(?:hf|bf|sf|df|xf|tf)(?:hf|bf|sf|df|xf|tf)2",
    r"__(?:u?(?:div|mod)|mul)[dt]i3|__(?:div|mul)[hsdxt]c3|__powi[hsdxt]f2",
    r"__(?:fix|fixuns)(?:hf|bf|sf|df|xf|tf)[dt]i|__float(?:un)?[dt]i(?:hf|bf|sf|df|xf|tf)",
    r"__(?:popcount|clz|ctz|ffs|parity|bswap)[sdt]i2",
    # libgcc's soft-float arithmetic and comparisons, which _Float16 code calls (__nehf2: a != b)
    r"__(?:add|sub|mul|div|neg)(?:hf|bf|sf|df|xf|tf)3|__(?:eq|ne|lt|le|gt|ge|unord|cmp)(?:hf|bf|sf|df|xf|tf)2",
]
_CUDA_ALLOWED = _C_ALLOWED + [
    # what nvcc's host stub calls to register the fat binary and its kernels and to launch them
    r"__cudaRegisterFatBinary(?:End)?|__cudaUnregisterFatBinary|__cudaRegisterFunction|__cudaRegisterVar",
    r"__cudaPushCallConfiguration|__cudaPopCallConfiguration|__cudaLaunchKernel|__cudaGetKernel|"
    r"__cudaInitModule",
    r"cudaLaunchKernel|cudaLaunchCooperativeKernel|cudaLaunchKernelExC",
    r"cudaGetLastError|cudaPeekAtLastError|cudaGetErrorString|cudaGetErrorName",
    r"cudaMemsetAsync|cudaMemcpyAsync|cudaMallocAsync|cudaFreeAsync",
    r"cudaFuncSetAttribute|cudaFuncGetAttributes|cudaFuncSetCacheConfig|cudaDeviceGetAttribute|cudaGetDevice|"
    r"cudaOccupancyMaxActiveBlocksPerMultiprocessor(?:WithFlags)?|cudaOccupancyMaxPotentialBlockSize\w*",
    # the C++ runtime the stub needs: atexit for the fat binary's unregistration, guarded
    # function-local statics, unwinding
    r"atexit|__cxa_atexit|__dso_handle|__cxa_guard_(?:acquire|release|abort)|__gxx_personality_v0|"
    r"_Unwind_Resume|__cxa_begin_catch|__cxa_end_catch|_ZSt9terminatev|__clang_call_terminate",
]
_ALLOWED = {language: re.compile("|".join(f"(?:{p})" for p in patterns))
            for language, patterns in (("c", _C_ALLOWED), ("cuda", _CUDA_ALLOWED))}

# Writable symbols nvcc's host stub owns: the fat binary's handle and wrapper, each kernel stub's
# guarded handle, and the C++ personality routine's pointer. scan.py keeps candidates from using
# these names.
_STUB_STATE = re.compile(r"_ZL20__cudaFatCubinHandle|_ZL15__fatDeviceText|DW\.ref\.__gxx_personality_v0|"
                         r"_ZZ(?:L)?\d+__device_stub__\w+E(?:5__tmp|8__handle)|"
                         r"_ZGVZ(?:L)?\d+__device_stub__\w+E5__tmp")
# Instructions that reach the kernel or a clock without going through any symbol.
_INSTRUCTIONS = re.compile(r"\b(syscall|sysenter|rdtscp?|rdpmc)\b|\bint\s+\$0x80\b")
# gcc's lock word for `#pragma omp critical(NAME)`: `.gomp_critical_user_NAME`, a common symbol of
# one pointer that libgomp's GOMP_critical_name_start initialises and locks. The dot keeps C
# from naming it; only an asm label could (scan.py rejects asm in C), and a label on a buffer
# of the candidate's would be a defined .bss symbol or larger than a pointer.
_OMP_CRITICAL_LOCK = re.compile(r"\.gomp_critical_user_\w+")
_FILE_LOCAL = re.compile(r"^_INTERNAL_\w+?::")  # nvcc's prefix of file-local device names
_PTX_CLOCKS = re.compile(r"%(clock(?:64|_hi)?|globaltimer(?:_lo|_hi)?|pm\d(?:_64)?)\b")


def missing_tool() -> str | None:
    """One line saying how to get the object checks' tool when it is missing, else None."""
    if shutil.which("objdump") is None:
        return ("the compiled backends check each candidate's object with objdump, which is missing: "
                "install binutils (apt-get install binutils)")
    return None


def scan_object(obj: Path, language: str, ptx: list[Path] | None = None) -> list[ObjectFinding]:
    """Findings for the object file `obj` of a candidate in `language` ('c' or 'cuda'); `ptx`: the
    device code nvcc kept for it."""
    dump = subprocess.run(["objdump", "-h", "-w", "-t", "-d", "--no-show-raw-insn", str(obj)],
                          capture_output=True, text=True, check=False)
    if dump.returncode != 0:
        reason = f"objdump cannot read the object: {dump.stderr.strip()[:200]}"
        return [ObjectFinding("unreadable", obj.name, reason)]
    sections, symbols = _sections(dump.stdout), _symbols(dump.stdout)
    findings = _readable([*_undefined(symbols, language), *_instructions(dump.stdout),
                          *_writable(symbols, sections, language), *_outside_state_uses(obj, symbols)])
    reported = {f.symbol for f in findings}  # a __device__ variable's host shadow names it already
    for path in ptx or []:
        findings += [f for f in _readable(_device(path.read_text(errors="replace")))
                     if f.symbol.removeprefix("__device__ ") not in reported]
    return findings


def _sections(dump: str) -> dict[str, str]:
    """Section name -> its flags (CONTENTS, ALLOC, READONLY, CODE...)."""
    pattern = r"^\s*\d+\s+(\S+)\s+[0-9a-f]+\s+[0-9a-f]+\s+[0-9a-f]+\s+[0-9a-f]+\s+2\*\*\d+\s+(.*)$"
    return {m.group(1): m.group(2) for m in re.finditer(pattern, dump, flags=re.M)}


def _symbols(dump: str) -> list[tuple[str, str, str, int]]:
    """(name, flags, section, size in bytes) of each symbol, file and section symbols left out."""
    pattern = r"^[0-9a-f]{8,16} (.{7}) (\S+)\t([0-9a-f]+) (?:\.hidden |\.protected |\.internal )?(.+)$"
    symbols = []
    for flags, section, size, name in re.findall(pattern, dump, flags=re.M):
        if flags[5] != "d" and flags[6] != "f":  # d: debugging or section symbol, f: the source file
            symbols.append((name, flags, section, int(size, 16)))
    return symbols


def _undefined(symbols: list[tuple[str, str, str, int]], language: str) -> list[ObjectFinding]:
    reason = ("calls or reads code outside the kernel that no kernel needs (only libm, memcpy/memset, "
              "malloc/free, the OpenMP and, for CUDA, the CUDA runtime's launch calls are allowed)")
    return [ObjectFinding("undefined-symbol", name, _why_undefined(name, language, reason))
            for name, _, section, _ in symbols if section == "*UND*" and not _ALLOWED[language].fullmatch(name)]


def _why_undefined(name: str, language: str, reason: str) -> str:
    """The common honest cause, where there is one: nvcc gives every non-static __device__ function a
    host stub that calls exit (seen on the H200 with nvcc 13: bench/results/h200/issue17)."""
    if language == "cuda" and name == "exit":
        return reason + "; a non-static __device__ function gets a host stub that calls exit: declare " \
                        "device helpers static __device__ (or __forceinline__)"
    return reason


def _instructions(dump: str) -> list[ObjectFinding]:
    findings = []
    function = "?"
    for line in dump.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if head:
            function = head.group(1)
            continue
        instruction = re.match(r"^\s*[0-9a-f]+:\t(.*)$", line)
        text = re.sub(r"<[^>]*>|#.*", "", instruction.group(1)) if instruction else ""
        found = _INSTRUCTIONS.search(text)
        if found:
            findings.append(ObjectFinding("instruction", f"{found.group(0)} in {function}",
                                          "a system call or a clock read that bypasses every symbol"))
    return findings


def _writable(symbols: list[tuple[str, str, str, int]], sections: dict[str, str],
              language: str) -> list[ObjectFinding]:
    """Every symbol in a writable place is state kept across calls, but nvcc's stub's own. A
    section whose flags cannot be read counts as writable; .data.rel.ro is made read-only once
    relocated (-z relro, the default here)."""
    reason = ("a global or static variable (for CUDA also a __device__ or __constant__ one) keeps "
              "state across calls: a cached or stale result")
    findings = []
    for name, _, section, size in symbols:
        if _omp_critical_lock(name, section, size):
            continue
        flags = sections.get(section, "ALLOC")
        writable = section == "*COM*" or (
            section not in ("*UND*", "*ABS*") and "ALLOC" in flags and "READONLY" not in flags and
            not section.startswith(".data.rel.ro"))
        if writable and not (language == "cuda" and _STUB_STATE.fullmatch(name)):
            findings.append(ObjectFinding("global-state", name, reason))
    return findings


def _omp_critical_lock(name: str, section: str, size: int) -> bool:
    """A named critical section's lock word, as gcc emits it: common, one pointer (8 bytes on the
    64-bit targets the backends build for). libgomp stores its mutex there; no value of a call
    can be kept in it without an asm label, and a buffer would not fit."""
    return section == "*COM*" and size <= 8 and _OMP_CRITICAL_LOCK.fullmatch(name) is not None


def _outside_state_uses(obj: Path, symbols: list[tuple[str, str, str, int]]) -> list[ObjectFinding]:
    """Two kinds of writable memory outside the candidate's own state are allowed by what the code
    does with them, not by their names: a named critical section's lock word only handed to the
    OpenMP runtime (every reference loads its address into a register that is only ever copied
    into %rdi before GOMP_critical_name_start/end), and libgcc's CPU model only read (every
    reference loads its address into a register that is only dereferenced as a source). A write
    through the address, a copy of it, or a reference from data keeps a value in them across
    calls. Only objects that name either pay for two more objdump runs (~10 ms)."""
    locks = {name for name, _, section, size in symbols if _omp_critical_lock(name, section, size)}
    model = {name for name, _, section, _ in symbols if section == "*UND*" and _CPU_MODEL.fullmatch(name)}
    if not locks and not model:
        return []
    relocs = subprocess.run(["objdump", "-r", "-w", str(obj)], capture_output=True, text=True, check=False)
    code = subprocess.run(["objdump", "-d", "-r", "-w", "--no-show-raw-insn", str(obj)], capture_output=True,
                          text=True, check=False)
    findings = []
    for name in sorted(locks | model):
        references = len(re.findall(rf"\s{re.escape(name)}\b", relocs.stdout))
        kept = _references_kept(code.stdout, name, _only_passed if name in locks else _only_read)
        if relocs.returncode or code.returncode or kept < references:
            reason = ("uses a named critical section's lock word other than by passing it to the OpenMP "
                      "runtime" if name in locks else "writes libgcc's CPU model or lets its address "
                      "escape") + ": state kept across calls outside the candidate"
            findings.append(ObjectFinding("global-state", name, reason))
    return findings


_CPU_MODEL = re.compile(r"__cpu_model|__cpu_features2")
_CALLER_SAVED = {"rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11"}


def _register_pattern(register: str) -> str:
    """Every name of a general register's parts: %r13 %r13d %r13w %r13b, %rbx %ebx %bx %bl %bh."""
    if re.fullmatch(r"r\d+", register):
        return rf"%{register}[dwb]?\b"
    core = register[1:]  # rbx -> bx, rdi -> di
    low = {"ax": "al|ah", "bx": "bl|bh", "cx": "cl|ch", "dx": "dl|dh", "si": "sil", "di": "dil", "bp": "bpl",
           "sp": "spl"}[core]
    return rf"%(?:r{core}|e{core}|{core}|{low})\b"


def _references_kept(dump: str, name: str, policy) -> int:
    """How many code references to `name` load its address (mov/lea from %rip) into a register
    whose later uses in the function all satisfy `policy` (a linear sweep to the function's end:
    a use on any path counts)."""
    kept = 0
    for body in re.split(r"^[0-9a-f]+ <.+>:$", dump, flags=re.M)[1:]:
        lines = [line for line in body.splitlines() if re.match(r"^\s*[0-9a-f]+:\t", line)]
        for i, line in enumerate(lines):
            if not re.search(rf"\s{re.escape(name)}\b", line):
                continue
            load = re.search(r"^\s*[0-9a-f]+:\t(?:mov|lea)q?\s+\S*\(%rip\),%(\w+)\s", line)
            if load and policy(lines[i + 1:], load.group(1)):
                kept += 1
    return kept


def _instruction(line: str) -> tuple[str, str, str]:
    """(mnemonic, source operands, last operand) of a disassembled line, comments dropped."""
    text = re.sub(r"#.*|<[^>]*>", "", line.split("\t", 1)[1]).strip()
    mnemonic, _, operands = text.partition(" ")
    operands = operands.strip()
    depth, split = 0, -1
    for k, ch in enumerate(operands):  # the last top-level comma: (%rbx,%rdx,8) is one operand
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            split = k
    return mnemonic, operands[:max(split, 0)], operands[split + 1:]


def _only_read(lines: list[str], register: str) -> bool:
    """Every later use of `register` (holding an address) dereferences it as a source: `mov
    0xc(%rax),%eax`, `testb $0x4,0xe(%rdx)`; none writes through it, copies it or takes an
    address from it (lea)."""
    pattern = _register_pattern(register)
    based = rf"\([^)]*{pattern}[^)]*\)"
    for line in lines:
        mnemonic, sources, last = _instruction(line)
        if mnemonic.startswith("call"):
            if register in _CALLER_SAVED:
                return True
            continue
        if not re.search(pattern, sources + "," + last):
            continue
        only_memory = not re.search(pattern, re.sub(based, "", sources + "," + last))
        if mnemonic.startswith(("test", "cmp", "bt")) and only_memory and not mnemonic.startswith(("bts", "btr",
                                                                                                  "btc")):
            continue
        if re.search(based, sources) and not re.search(pattern, re.sub(based, "", sources)) and \
                "(" not in last and not mnemonic.startswith("lea"):
            if re.fullmatch(pattern, last):
                return True  # the address replaced by what was read through it
            continue
        if re.fullmatch(pattern, last) and not re.search(pattern, sources) and \
                mnemonic.startswith(("mov", "set", "lea", "pop")):
            return True  # overwritten (sete %dl, then movzbl %dl,%edx) without being read
        return False
    return True


def _only_passed(lines: list[str], register: str) -> bool:
    """Every later read of `register` (holding a lock word's address) is `mov %reg,%rdi` before a
    call of GOMP_critical_name_start/end."""
    pattern = _register_pattern(register)
    pending = register == "rdi"  # the address is in %rdi: the next call must be the runtime's
    for line in lines:
        instruction = re.sub(r"#.*|<[^>]*>", "", line.split("\t", 1)[1])
        if instruction.lstrip().startswith("call"):
            if pending and not re.search(r"\bGOMP_critical_name_(?:start|end)\b", line):
                return False
            pending = False
            if register in _CALLER_SAVED:
                return True  # the call took the value with it
            continue
        if not re.search(pattern, instruction):
            continue
        if re.fullmatch(rf"\s*mov\s+%{register},%rdi\s*", instruction):
            pending = True
            continue
        operands = instruction.split(None, 1)[1] if len(instruction.split(None, 1)) > 1 else ""
        last = operands.rsplit(",", 1)[-1]
        reads = re.search(pattern, operands[:len(operands) - len(last)]) or "(" in last
        if not reads and re.fullmatch(rf"\s*{pattern}\s*", last) and \
                instruction.split()[0].startswith(("mov", "lea", "xor", "pop")):
            return True  # overwritten before any other read
        return False
    return not pending


def _ptx_variables(ptx: str, space: str) -> list[str]:
    """Names of the module-scope variables PTX declares in a state space (.global, .const)."""
    pattern = rf"^\s*(?:\.(?:visible|extern|weak)\s+)*\{space}\s+(?:\.align\s+\d+\s+|\.\w+\s+)*([$%\w]+)" \
              r"\s*(?:\[\d*\])*\s*(?:=[^;]*)?;"
    return re.findall(pattern, ptx, flags=re.M)


def _device(ptx: str) -> list[ObjectFinding]:
    calls = re.findall(r"^\s*\.extern\s+\.func\s+(?:\([^)]*\)\s*)?(\w+)", ptx, flags=re.M)
    findings = [ObjectFinding("undefined-symbol", f"device {name}", "the device code calls a function outside "
                                                                   "the kernel (printf, malloc...)")
                for name in calls]
    findings += [ObjectFinding("timers", f"device %{register}", "reads a clock or performance counter")
                 for register in sorted(set(_PTX_CLOCKS.findall(ptx)))]
    # Not state: the compiler's string literals ($str, a name no source can spell), and libcu++'s
    # one-byte placeholders (cuda::std::ignore, its ranges' objects), .global in PTX; scan.py keeps
    # candidates from opening namespace cuda or std.
    names = _demangle([n for n in _ptx_variables(ptx, ".global") if not n.startswith("$")])
    findings += [ObjectFinding("global-state", "__device__ " + _FILE_LOCAL.sub("", readable),
                               "a writable device variable keeps state across calls")
                 for readable in names.values() if "cuda::std::" not in readable]
    return findings


def _demangle(names: list[str] | set[str]) -> dict[str, str]:
    """Raw C++ names -> readable ones (through c++filt, itself binutils; unchanged without it)."""
    names = list(names)
    if not names or shutil.which("c++filt") is None:
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=False)
    readable = out.stdout.splitlines() if out.returncode == 0 else names
    return dict(zip(names, readable)) if len(readable) == len(names) else {n: n for n in names}


def _readable(findings: list[ObjectFinding]) -> list[ObjectFinding]:
    """Findings with C++ names demangled and gcc's `.N` suffix of function-local statics dropped
    (`first.0` -> `first`)."""
    names = _demangle({f.symbol for f in findings})
    return [ObjectFinding(f.rule, re.sub(r"\.\d+$", "", names[f.symbol]), f.reason) for f in findings]
