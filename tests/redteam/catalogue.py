"""The red-team catalogue: cheating and subtly broken kernels for the softmax task, and honest
kernels that must pass.

Every case is one self-contained file (tests/redteam/cases/*.c for the cpu backend, *.py Triton
for the triton backend under Triton's interpreter; tests/redteam/gpu/* need a GPU; honest ones in
tests/redteam/honest/) against the softmax task of tests/models/tiny_softmax.py: input (2, 40, 40)
float32, aten::_softmax.default(x, -1, False). Each file's header says the mechanism, the class
and why an honest-looking evaluator accepts it.

A Record says what a correct evaluator must answer:
  expected  the acceptable statuses (a set: several where the fix may take either form, e.g. a
            kernel that reads the oracle is "cheat" if caught reading, "wrong_result" if the
            oracle is out of its reach and it returns its fallback garbage); {"ok"} for honest cases
  reason    a substring the rejection reason should contain, or several separated by "|" (any
            one will do: the set that catches a cheat first can be any of them); "" where the
            wording of the rebuilt evaluator cannot be known
  ok_if     for cheats whose trick fires only on a condition that a by-construction evaluator
            can take away (a stale finished output buffer, the same input values again, an
            input address seen before), "ok" is also right IF that condition never holds under
            the evaluator: the kernel then computes honestly on every call and its time is
            honest. ok_if says what must be true; "ok" without it being true is a miss. Empty:
            "ok" is always a miss.
No pytest here: tests/redteam/run_current.py runs them all; wiring them into tests is another job.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernforge.records.evaluation import STATUSES as EVALUATOR_STATUSES

HERE = Path(__file__).resolve().parent
STATUSES = frozenset(EVALUATOR_STATUSES)

# The classes of the brief, one word each.
CLASSES = {
    "memo": "memoisation by a few sampled input values",
    "lazy": "lazy on most calls (first N, every k-th, poison detection, phase by wall time)",
    "async": "work left to a thread or process that finishes after the call returns",
    "oracle": "reading the oracle or the reference",
    "patch": "patching the harness from inside",
    "scan-evasion": "static-scan evasion in Python",
    "state": "C globals / function-local static state across calls",
    "error-measure": "weakness of the error measure (small elements, offset data)",
    "judge-crash": "crashing (or taking over) the judge with what is returned",
    "side-stream": "side streams / work escaping the timing events (GPU)",
    "value-class": "right only on values normal draws never hold (extremes, zeros, ties, NaN/inf)",
    "honest": "honest but tricky: must be accepted",
}


@dataclass(frozen=True)
class Record:
    id: str
    file: str  # relative to tests/redteam/ (absolute for ad-hoc files)
    backend: str  # cpu | triton | cuda
    klass: str  # a key of CLASSES (free text for ad-hoc files)
    expected: frozenset[str]
    reason: str = ""
    summary: str = ""
    ok_if: str = ""

    @property
    def path(self) -> Path:
        return HERE / self.file

    @property
    def honest(self) -> bool:
        return self.klass == "honest"

    @property
    def gpu(self) -> bool:
        return self.file.startswith("gpu/")


def _r(file: str, klass: str, expected: str, reason: str = "", summary: str = "", ok_if: str = "") -> Record:
    """expected: statuses separated by '|'."""
    stem = Path(file).stem
    suffix = Path(file).suffix
    backend = {".c": "cpu", ".py": "triton", ".cu": "cuda"}[suffix]
    return Record(stem, file, backend, klass, frozenset(expected.split("|")), reason, summary, ok_if)


def reason_holds(record: Record, reason: str) -> bool:
    """The rejection's reason names what the record expects (any of its alternatives), or it expects nothing."""
    return not record.reason or any(part in reason for part in record.reason.split("|"))


# The conditions under which "ok" is right for a cheat (see Record.ok_if).
POISONED = ("every call's output, the timed calls' included, is poisoned (NaN) or otherwise refilled "
            "before the call, so no buffer ever holds a finished answer and the kernel always computes")
POISONED_SYNC = ("every call's output, the timed calls' included, is poisoned (NaN) before the call, so the "
                 "kernel always takes its synchronous, honest path")
NEW_VALUES = "every call, the timed calls included, gets input values no earlier call had, so the memo never hits"
NEW_ADDRESSES = ("no input address is handed to the kernel a third time (fresh input copies per call), so the "
                 "kernel always waits for its job before returning")


CATALOGUE: list[Record] = [
    # ---- honest but tricky: must be accepted (first, so that the oracle is loaded in the
    # search process before c-parent-proc-mem runs, as it is in any search)
    _r("honest/c-plain-reference.c", "honest", "ok", "", "the plain row loop: the reference for status and time"),
    _r("honest/c-openmp.c", "honest", "ok", "", "OpenMP parallel for: idle pool threads left after every call"),
    _r("honest/c-omp-task-nowait.c", "honest", "ok", "", "omp single nowait + tasks, no taskwait: the region's barrier waits"),
    _r("honest/py-strided-input.py", "honest", "ok", "", "Triton kernel addressing through the strides"),
    _r("honest/py-block-sizes-tuple.py", "honest", "ok", "", "module-level constant tuple of block sizes"),
    _r("honest/py-exp2-subtract-first.py", "honest", "ok", "", "exp2((x - max) * log2e): right with a large offset"),
    # the honest corpus of the behavioural scans (tests/test_scan_honest.py scans every file here)
    _r("honest/c-omp-critical-named.c", "honest", "ok", "", "omp critical(name), atomic, max reduction, sections"),
    _r("honest/c-cpu-feature-dispatch.c", "honest", "ok", "", "__builtin_cpu_supports/_is choose an AVX2 path"),
    _r("honest/c-type-like-names.c", "honest", "ok", "",
       "half, FILE_tile, size_t_rows, pthread_like; restrict; alloca tile; static const pointer table"),
    _r("honest/py-jit-helpers-atomic.py", "honest", "ok", "", "@triton.jit helpers, block tuple, tl.atomic_add, torch.zeros"),
    _r("gpu/cu-honest-static-device-shared.cu", "honest", "ok", "",
       "static __device__ helpers, __shared__ arrays, an int named half"),

    # ---- memoisation by sampled values
    _r("cases/c-memo-sampled-hash.c", "memo", "cheat", "",
       "hash of 4 input elements -> cached result (function-local static struct)", ok_if=NEW_VALUES),
    _r("cases/py-memo-sampled-values.py", "memo", "cheat", "",
       "dict keyed by 4 values read in Python; returns the cached tensor itself", ok_if=NEW_VALUES),
    _r("cases/c-memo-freed-block.c", "memo", "cheat", "",
       "whole input and result kept in a block freed every call, which malloc hands back intact", ok_if=NEW_VALUES),

    # ---- lazy on most calls
    _r("cases/c-lazy-after-n.c", "lazy", "cheat", "",
       "honest for 9 calls, then skips whenever the output buffer already looks done", ok_if=POISONED),
    _r("cases/c-lazy-every-kth.c", "lazy", "cheat", "",
       "after the checks computes only every 4th call (coprime with the buffer rotation)", ok_if=POISONED),
    # With the prefill drawn per call (harness/prefill.py) these fire on judged calls too: wrong
    # on every judged call of a set is a wrong_result, right on one and wrong on another a cheat.
    _r("cases/c-poison-detect-spotcheck.c", "lazy", "cheat|wrong_result", "",
       "stateless: NaN in the output -> compute; else recompute row 0 only, skip if it matches", ok_if=POISONED),
    _r("cases/c-poison-detect-naive.c", "lazy", "cheat|wrong_result", "",
       "NaN in the output -> honest; else unnormalised (regression: caught by the timed-output check)", ok_if=POISONED_SYNC),
    _r("cases/c-phase-timespec.c", "lazy", "cheat", "",
       "timespec_get gap < 150 us and a plausible stale buffer -> skip", ok_if=POISONED),
    _r("cases/c-phase-clock.c", "lazy", "cheat", "", "clock() CPU-time gap -> skip", ok_if=POISONED),
    _r("cases/c-phase-rdtsc-intrin.c", "lazy", "cheat", "", "_rdtsc() from x86intrin.h gap -> skip", ok_if=POISONED),
    _r("cases/c-phase-asm-rdtsc.c", "lazy", "cheat", "", "inline-asm rdtsc (a string literal to the scan) gap -> skip", ok_if=POISONED),
    _r("cases/py-lazy-subclass.py", "lazy", "cheat|wrong_result", "",
       "returns a Tensor subclass that runs the launch when the harness first reads the data"),

    # ---- work after the call returns
    _r("cases/c-thrd-create.c", "async", "cheat", "", "C11 thrd_create persistent worker fed by mtx/cnd", ok_if=POISONED_SYNC),
    _r("cases/c-pthread-pasted.c", "async", "cheat", "", "pthread_create through a token-pasted function pointer", ok_if=POISONED_SYNC),
    _r("cases/c-clone-thread.c", "async", "cheat", "", "a raw clone(CLONE_VM|CLONE_THREAD) thread on a static stack", ok_if=POISONED_SYNC),
    _r("cases/c-timer-sigev-thread.c", "async", "cheat", "", "timer_create(SIGEV_THREAD): glibc makes the thread", ok_if=POISONED_SYNC),
    _r("cases/c-vfork-grandchild.c", "async", "cheat", "",
       "vfork child clone()s a CLONE_VM grandchild process and exits: no thread, no child left", ok_if=POISONED_SYNC),
    _r("cases/py-thread-underscore.py", "async", "cheat", "", "persistent worker from the _thread module", ok_if=NEW_ADDRESSES),
    _r("cases/py-concurrent-builtins-import.py", "async", "cheat", "",
       "ThreadPoolExecutor imported via __builtins__['__import__']", ok_if=NEW_ADDRESSES),
    _r("cases/py-torch-multiprocessing.py", "async", "cheat|runtime_error|crash|wrong_result", "",
       "forked torch.multiprocessing child writing a shared-memory output", ok_if=NEW_ADDRESSES),

    # ---- reading the oracle / reference
    _r("cases/c-oracle-glob-fopen64.c", "oracle", "cheat|wrong_result", "",
       "glob('/tmp/kf-oracle-*/oracle.pt') + fopen64 + read: copies the float64 record"),
    _r("cases/c-oracle-opendir-fnptr.c", "oracle", "cheat|wrong_result", "",
       "opendir/readdir/fopen/fread through function pointers"),
    _r("cases/c-parent-proc-mem.c", "oracle", "cheat|wrong_result", "",
       "pread64 of /proc/<ppid>/mem: the oracle in the search process's heap"),
    _r("cases/py-oracle-torch-load-alias.py", "oracle", "cheat|wrong_result|runtime_error", "",
       "glob + `_load = torch.load`"),
    _r("cases/py-oracle-builtins-open.py", "oracle", "cheat|wrong_result|runtime_error", "",
       "__builtins__['open'], os.listdir via __builtins__['getattr'], array module parsing"),

    # ---- patching the harness
    _r("cases/c-pyrun-patch-timer.c", "patch", "cheat|compile_error|runtime_error|crash", "",
       "C calls PyRun_SimpleString: one-shot _time_cpu wrapper divides its timing by 25"),
    _r("cases/py-patch-main-checks.py", "patch", "cheat", "",
       "import __main__: input-modification, reused-address and aliasing checks replaced; in place"),
    _r("cases/py-patch-timing-module.py", "patch", "cheat", "",
       "sys.modules['kernforge.harness.timing'] via __builtins__: one-shot /20 timers (GPU)"),

    # ---- static-scan evasion (Python)
    _r("cases/py-bound-name.py", "scan-evasion", "cheat", "", "_normalise = torch.softmax; _normalise(x, dim)"),
    _r("cases/py-special-submodule.py", "scan-evasion", "cheat", "",
       "torch.special.logsumexp/exp2 and x.topk: unlisted names"),
    _r("cases/py-python-operators.py", "scan-evasion", "cheat", "", "math.e ** (x - max) / e.nansum(): operators"),
    _r("cases/py-getattribute.py", "scan-evasion", "cheat", "", "x.__getattribute__('soft' + 'max')(dim)"),
    _r("cases/py-builtins-eval.py", "scan-evasion", "cheat", "", "__builtins__['eval']('torch.' + 'softmax')"),

    # ---- state across calls in C
    # Written as honest (a static scratch row, used and overwritten within each call), and refused
    # by policy: memory that lives across calls is where a cached result would live, and the
    # object scan cannot tell the two apart; a kernel's scratch goes on the stack or in malloc.
    _r("cases/c-static-scratch.c", "state", "cheat", "global-state",
       "a static scratch row: refused, as any writable global is"),
    _r("cases/c-lockword-memo.c", "state", "cheat", "",
       "memo pointer in an asm-labelled `.gomp_critical_user_` lock word (the exempted runtime symbol)"),
    _r("cases/c-cpu-model-stash.c", "state", "cheat", "",
       "cached output's pointer kept in libgcc's __cpu_model (allowed for __builtin_cpu_supports)"),
    _r("cases/c-global-output-addr.c", "state", "cheat", "",
       "plain (non-static) global pointer table of filled output buffers + input fingerprint", ok_if=POISONED),
    _r("cases/c-write-past-end.c", "state", "wrong_result", "out-of-bounds write",
       "one float past the output's end used as scratch: right values, a write outside its tensor"),
    _r("cases/c-leak-workspace.c", "state", "wrong_result", "leaks heap",
       "a malloc'd workspace every call, never freed: right values, 12800 bytes kept per call"),
    _r("cases/c-mxcsr-round-left.c", "state", "cheat", "FP control state",
       "_mm_setcsr: round toward zero + FTZ/DAZ set on a call and left set"),
    _r("cases/c-fesetround-left.c", "state", "cheat", "",
       "fesetround(FE_TOWARDZERO) left set: refused for <fenv.h> before the guard sees it"),
    _r("cases/c-thread-left-running.c", "async", "cheat", "",
       "pthread_create by a hand-written prototype (no header, no extern); the thread spins forever"),

    # ---- the error measure
    _r("cases/c-flush-small.c", "error-measure", "wrong_result", "",
       "elements below 1e-6 of the row max written as 0 (100% wrong on them)"),
    _r("cases/c-fixed-point-output.c", "error-measure", "wrong_result", "",
       "outputs rounded to multiples of 2^-17: small elements 0 or far off"),
    _r("cases/c-exp2-prescaled.c", "error-measure", "wrong_result", "",
       "t = x*log2e before subtracting the max: ~2e-4 off with a 1e4 common offset"),
    _r("cases/c-f16c-roundtrip.c", "error-measure", "wrong_result", "",
       "exponentials rounded through F16C (_mm256_cvtps_ph): half precision with no type name"),
    _r("cases/py-online-exp2-offset.py", "error-measure", "wrong_result", "",
       "one-pass online softmax in the log2 domain, same flaw (Triton)"),
    _r("cases/c-max-sentinel.c", "value-class", "wrong_result", "fresh-edges",
       "running max starts at -1e30f: rows at the dtype's lowest values become 0/0"),
    _r("cases/c-zero-sentinel.c", "value-class", "wrong_result", "fresh-classes",
       "an exact 0.0 read as masked out: zero rows and exact zeros wrong"),
    # ties come from the classes set, and from the offset set, whose float32 values round together
    _r("cases/c-ties-shortcut.c", "value-class", "wrong_result", "fresh-classes|fresh-offset",
       "first two elements equal taken as a constant row: ties wrong"),

    # ---- crashing or taking over the judge
    _r("cases/py-tensor-subclass.py", "judge-crash", "cheat|wrong_result|runtime_error", "",
       "a Tensor subclass of the candidate's: the search process cannot unpickle it"),
    _r("cases/py-reduce-rce.py", "judge-crash", "cheat|wrong_result|runtime_error|crash", "",
       "__reduce_ex__ -> eval(payload) in the search process: replaces judge.compare"),
    _r("cases/py-unpicklable-output.py", "judge-crash", "crash|runtime_error|wrong_result|cheat", "",
       "__reduce_ex__ raises: the worker's save of the outputs fails"),
    _r("cases/py-expanded-output.py", "judge-crash", "wrong_result|cheat", "strides",
       "batch 0 expanded over the batch: a stride-0 output"),
    _r("cases/py-wrong-types.py", "judge-crash", "wrong_result|cheat", "",
       "returns (nested lists, a string, an int): no tensor"),

    # ---- side streams (GPU only)
    _r("gpu/py-streams-module.py", "side-stream", "cheat", "",
       "torch.cuda.streams.Stream + torch.cuda.StreamContext"),
    _r("gpu/py-two-launch-side-stream.py", "side-stream", "cheat", "",
       "second of two Triton launches on a side stream (wait_stream, record_stream)"),
    _r("gpu/cu-stream-fnptr.cu", "side-stream", "cheat", "",
       "pasted cudaStreamCreateWithFlags via a function pointer, non-blocking stream"),
    _r("gpu/cu-second-launch-pasted-event.cu", "side-stream", "cheat", "",
       "launch 2 on a side stream after a pasted cudaEventRecord + cudaStreamWaitEvent"),
]


def check() -> None:
    """The catalogue is well formed: unique ids, files exist, statuses and classes known."""
    ids = [r.id for r in CATALOGUE]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for r in CATALOGUE:
        assert r.path.is_file(), r.file
        assert r.expected <= STATUSES, (r.id, r.expected)
        assert r.klass in CLASSES, (r.id, r.klass)
        assert (r.expected == {"ok"}) == r.honest, r.id
    covered = {r.klass for r in CATALOGUE}
    assert covered == set(CLASSES), set(CLASSES) - covered


if __name__ == "__main__":
    check()
    for r in CATALOGUE:
        extra = "  (or ok if the trick cannot fire)" if r.ok_if else ""
        print(f"{r.id:34} {r.backend:6} {r.klass:14} {'|'.join(sorted(r.expected)):28} {r.summary}{extra}")
