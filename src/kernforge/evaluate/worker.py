"""The evaluation worker: one process per job, started by kernforge.evaluate.runner.

Two kinds of job, never mixed in one process:
  baseline   loads the task's real inputs, draws fresh ones, computes the float64
             oracle and eager's outputs, errors and time; imports no candidate.
  candidate  times eager first, before any candidate code is imported, then
             builds one candidate, checks it on every input set against the
             oracle the baseline saved, times it the same way, and times eager
             once more right after (the faster of the two is the reference). Eager and
             candidate are timed in one process minutes apart at most, so a
             machine that got busier between two workers does not pass for a
             speedup (seen on a shared 2-core machine: eager 10.7 ms alone,
             23.9 ms while tests ran beside it).

Usage: python -m kernforge.evaluate.worker JOB.json   (writes the job's result_path)
       python -m kernforge.evaluate.worker --wait DEVICE   (prestarted: reads JOB.json's path on stdin)
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_map

from kernforge.evaluate.device_lock import DeviceLock


def main(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    if job["backend"] == "triton" and job["device"] == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # must be set before triton is imported
    if job["device"] == "cpu" and job.get("memory_limit_bytes"):
        limit_memory(job["memory_limit_bytes"])
    started = time.perf_counter()
    result = run_baseline(job) if job["mode"] == "baseline" else run_candidate(job)
    result["worker_s"] = time.perf_counter() - started  # from the job's start, imports excluded
    Path(job["result_path"]).write_text(json.dumps(result, indent=1))
    return 0


# ---------------------------------------------------------------- baseline

def run_baseline(job: dict[str, Any]) -> dict[str, Any]:
    from kernforge.capture import encode_value, load_sample
    from kernforge.evaluate.checks import normalised_error, outputs_list, upcast
    from kernforge.evaluate.timing import time_rotated
    from kernforge.tasks import load_task, resolve_op

    task = load_task(Path(job["task_path"]))
    device = torch.device(job["device"])
    op = resolve_op(task.op)
    torch.manual_seed(job.get("seed", 0))
    real = [load_sample(Path(p)) for p in task.samples]
    fresh = [fresh_inputs(real[0], kind) for kind in job["fresh_kinds"]]
    input_sets = real + fresh
    labels = [f"real{i}" for i in range(len(real))] + [f"fresh-{k}" for k in job["fresh_kinds"]]
    oracles, eager_errors, dtypes = [], [], None
    for args, kwargs in input_sets:
        dev_args, dev_kwargs = to_device((args, kwargs), device)
        eager = outputs_list(op(*dev_args, **dev_kwargs))
        oracle = outputs_list(_oracle(op, dev_args, dev_kwargs, upcast))
        dtypes = [str(t.dtype) for t in eager]
        oracles.append([o.cpu() for o in oracle])
        eager_errors.append([normalised_error(e.to(torch.float64).cpu(), o.cpu())
                             if e.is_floating_point() else 0.0 for e, o in zip(eager, oracle)])
    # Two files: the inputs, which candidates' workers read, and the oracle, which only the
    # search process reads (at a path no candidate is told), so no candidate can return it.
    torch.save({"input_sets": tree_map(encode_value, input_sets), "labels": labels, "dtypes": dtypes,
                "outputs_meta": task.outputs}, job["reference_path"])
    torch.save({"oracles": oracles, "eager_errors": eager_errors, "dtypes": dtypes}, job["oracle_path"])
    inputs = to_device(input_sets[0], device)
    # Timed under the device's lock, as candidates are, so that another search on the machine
    # never times beside it; on a CPU, checks_exclusive as for candidates.
    lock = DeviceLock(job.get("device_lock"), checks_exclusive=device.type == "cpu")
    with lock.for_timing():
        timing, _ = time_rotated(op, inputs, device)
    compiled = {mode: _time_compiled(op, inputs, device, mode, lock) for mode in job.get("compile_modes", [])}
    return {"status": "ok", "eager": timing.__dict__, "compiled": compiled, "eager_errors": eager_errors,
            "labels": labels, "device_name": device_name(device)}


def _time_compiled(op: Any, inputs: Any, device: torch.device, mode: str, lock: DeviceLock) -> dict[str, Any]:
    """torch.compile of the op alone, timed the same way; its error, if it cannot compile, is data.
    It compiles (and autotunes, minutes for max-autotune) on a first call outside the lock."""
    from kernforge.evaluate.timing import time_rotated

    try:
        compiled = torch.compile(lambda *a, **k: op(*a, **k), mode=None if mode == "default" else mode)
        args, kwargs = inputs
        compiled(*args, **kwargs)
        with lock.for_timing():
            timing, _ = time_rotated(compiled, inputs, device)
        return {"timing": timing.__dict__, "error": ""}
    except Exception as e:  # noqa: BLE001 - a peer that fails is reported, not fatal
        return {"timing": None, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}


def _oracle(op: Any, args: Any, kwargs: Any, upcast: Any) -> Any:
    try:
        return op(*upcast(args), **upcast(kwargs))
    except (RuntimeError, NotImplementedError):
        # Some device kernels have no float64 version; the CPU has them all.
        return op(*upcast(to_device(args, torch.device("cpu"))), **upcast(to_device(kwargs, torch.device("cpu"))))


def fresh_inputs(sample: tuple[list[Any], dict[str, Any]], kind: str) -> tuple[list[Any], dict[str, Any]]:
    """New values for every floating tensor, same shape, dtype and strides.

    normal: N(0, 1). large: N(0, 1) x 100, which overflows exp() in any softmax
    that forgets to subtract the row maximum. mixed: each row scaled by 10^U(-3, 2),
    so that tiny and large rows meet in one launch.
    """
    def draw(x: Any) -> Any:
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
            return x
        out = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype)
        values = torch.randn(x.shape, dtype=torch.float32)
        if kind == "large":
            values *= 100.0
        elif kind == "mixed" and x.dim() >= 1:
            rows = torch.empty(x.shape[:-1] + (1,)).uniform_(-3, 2)
            values *= torch.pow(10.0, rows)
        out.copy_(values)
        return out
    return tree_map(draw, sample)


# ---------------------------------------------------------------- candidate

def run_candidate(job: dict[str, Any]) -> dict[str, Any]:
    """Build, run on every input set, time; the outputs go to a file for the search process to judge."""
    from kernforge.backends import BuildError, get_backend
    from kernforge.capture import decode_tree
    from kernforge.evaluate.timing import time_rotated  # bound before the candidate loads
    from kernforge.tasks import load_task, resolve_op

    task = load_task(Path(job["task_path"]))
    device = torch.device(job["device"])
    backend = get_backend(job["backend"])
    ref = torch.load(job["reference_path"], weights_only=False)  # inputs only, no oracle
    ref["input_sets"] = decode_tree(ref["input_sets"])
    op = resolve_op(task.op)
    phases = Phases()
    lock = DeviceLock(job.get("device_lock"), checks_exclusive=device.type == "cpu")
    eager_timing = None
    if backend.timeable():
        with lock.for_timing():
            eager_timing, _ = time_rotated(op, to_device(ref["input_sets"][0], device), device)
    phases.mark("eager_timing_s")
    try:
        kernel = backend.build(Path(job["source"]), Path(job["build_dir"]), task.outputs)
    except BuildError as e:
        return {"status": "compile_error", "reason": str(e)[-4000:], "phases": phases.done("build_s")}
    phases.mark("build_s")
    with lock.for_checks():
        failure, produced = run_every_set(kernel, ref, device, in_place=op._schema.is_mutable)
    phases.mark("checks_s")
    if failure is not None:
        return {**failure, "timed": False, "phases": phases.seconds}
    result: dict[str, Any] = {"status": "ok", "reason": "", "timed": False}
    if eager_timing is not None:
        kernel.poison = False  # type: ignore[attr-defined]  # eager pays no such fill
        with lock.for_timing():
            timing, last = time_rotated(kernel, to_device(ref["input_sets"][0], device), device)
            # Eager again, right after: the speedup is over the faster of the two eager timings,
            # so a machine that was busier (or a cache colder) when eager was first timed does
            # not pass for a faster kernel (seen on a CPU: eager 5.0 ms first, 0.9-1.0 ms after).
            # time_rotated and op were bound before the candidate loaded.
            eager_after, _ = time_rotated(op, to_device(ref["input_sets"][0], device), device)
        produced["timed"] = _cpu_outputs(last)
        result.update(timed=True, eager_timing=min(eager_timing, eager_after, key=lambda t: t.p50_ms).__dict__,
                      timing=timing.__dict__,
                      eager_p50_ms_before_after=[eager_timing.p50_ms, eager_after.p50_ms])
    torch.save(produced, job["outputs_path"])
    return {**result, "outputs_path": job["outputs_path"], "phases": phases.done("timing_s")}


class Phases:
    """Seconds spent in each step of a job, for the evaluator's own cost."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = now - self._last
        self._last = now

    def done(self, name: str) -> dict[str, float]:
        self.mark(name)
        return self.seconds


def run_every_set(kernel: Any, ref: dict[str, Any], device: torch.device,
                  in_place: bool) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Run the kernel on every input set and once more at reused addresses.

    What needs no oracle is checked here: exceptions, outputs aliasing inputs, inputs
    changed. The outputs themselves are returned for the search process to compare.
    """
    from kernforge.evaluate.checks import aliased_input, outputs_list

    produced: dict[str, Any] = {"labels": [], "sets": [], "reused": None, "timed": None}
    for label, inputs in zip(ref["labels"], ref["input_sets"]):
        args, kwargs = to_device(inputs, device)
        tensors = _tensors((args, kwargs))
        before = [t.clone() for t in tensors]
        poison_free_memory(ref["outputs_meta"], device)
        try:
            outs = outputs_list(kernel(*args, **kwargs))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except Exception as e:  # noqa: BLE001 - the candidate's failure is data
            return {"status": _failure_kind(e), "reason": f"on {label}: {type(e).__name__}: {e}"[-4000:]}, produced
        alias = None if in_place else aliased_input(outs, tensors)
        if alias is not None:
            return {"status": "cheat", "reason": f"on {label}: output {alias[0]} shares memory with input "
                                                 f"{alias[1]}; the op is not in-place"}, produced
        changed = _changed_input(before, tensors)
        if changed is not None and not in_place:
            return {"status": "cheat", "reason": f"on {label}: input {changed} was modified"}, produced
        layout = _layout_mismatch(outs, ref["outputs_meta"])
        if layout:
            return {"status": "wrong_result", "reason": f"on {label}: {layout}"}, produced
        produced["labels"].append(label)
        produced["sets"].append(_cpu_outputs(outs))
    try:
        produced["reused"] = _same_address_new_values(kernel, ref, device)
    except Exception as e:  # noqa: BLE001
        return {"status": _failure_kind(e), "reason": f"on a reused input: {type(e).__name__}: {e}"}, produced
    return None, produced


def _layout_mismatch(outs: list[torch.Tensor], metas: list[dict[str, Any]]) -> str | None:
    """Outputs must have the reference's strides (dimensions of size 1 have no meaningful stride)."""
    for i, (out, meta) in enumerate(zip(outs, metas)):
        if list(out.shape) != meta["shape"]:
            continue  # the shape check, with the oracle, says it better
        got = [st for st, n in zip(out.stride(), out.shape) if n > 1]
        want = [st for st, n in zip(meta["stride"], meta["shape"]) if n > 1]
        if got != want:
            return f"output {i} has strides {tuple(out.stride())}, the reference's are {tuple(meta['stride'])}"
    return None


def _same_address_new_values(kernel: Any, ref: dict[str, Any], device: torch.device) -> list[torch.Tensor] | None:
    """Call twice on the same input tensors, with input set 1's values the second time: a kernel
    that remembers results by input address returns the first answer again."""
    from kernforge.evaluate.checks import outputs_list

    if len(ref["input_sets"]) < 2:
        return None
    # Copies: on a CPU to_device returns the very tensors of input set 0, which timing uses later.
    args, kwargs = tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x,
                            to_device(ref["input_sets"][0], device))
    tensors = _tensors((args, kwargs))
    outputs_list(kernel(*args, **kwargs))
    for t, new in zip(tensors, _tensors(to_device(ref["input_sets"][1], device))):
        t.copy_(new)  # same addresses, the second set's values
    outs = outputs_list(kernel(*args, **kwargs))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return _cpu_outputs(outs)


def _cpu_outputs(out: Any) -> list[torch.Tensor]:
    from kernforge.evaluate.checks import outputs_list

    return [t.detach().cpu().clone() for t in outputs_list(out)]


def poison_free_memory(outputs: list[dict[str, Any]], device: torch.device, copies: int = 3) -> None:
    """Fill the memory a candidate's outputs will most likely get with NaN.

    A candidate that allocates its own outputs (Triton) gets them from torch's
    allocator, which hands back recently freed blocks of the same size: on a GPU
    those may still hold eager's correct result from the timing above, and an
    output element the kernel forgets to write would pass. Allocating blocks of
    the outputs' sizes, filling them with 0xFF bytes (NaN in every float format)
    and freeing them leaves NaN where the outputs will land. torch's CUDA caching
    allocator reuses such a block deterministically; glibc on a CPU may or may not
    (seen here both ways), so on a CPU this is best effort (the cpu backend fills the
    outputs it allocates itself). The H200 check exercises the GPU case.
    """
    blocks = []
    for meta in outputs:
        dtype = getattr(torch, meta["dtype"].replace("torch.", ""))
        numel = 1 + sum((size - 1) * stride for size, stride in zip(meta["shape"], meta["stride"]))
        nbytes = max(1, numel * torch.empty((), dtype=dtype).element_size())
        blocks += [torch.full((nbytes,), 0xFF, dtype=torch.uint8, device=device) for _ in range(copies)]
    del blocks


def _failure_kind(e: Exception) -> str:
    if isinstance(e, MemoryError) or "out of memory" in str(e).lower() or "can't allocate" in str(e).lower():
        return "out_of_memory"
    # Triton compiles a kernel at its first launch, so its compile errors arrive here.
    return "compile_error" if type(e).__module__.startswith("triton") else "runtime_error"


def _tensors(value: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _changed_input(before: list[torch.Tensor], after: list[torch.Tensor]) -> int | None:
    for i, (b, a) in enumerate(zip(before, after)):
        if not torch.equal(b, a) and not (b.is_floating_point() and torch.equal(b.isnan(), a.isnan())
                                          and torch.equal(b.nan_to_num(), a.nan_to_num())):
            return i
    return None


# ---------------------------------------------------------------- helpers

def limit_memory(limit_bytes: int) -> None:
    """Cap the worker's private memory (RLIMIT_DATA counts anonymous mappings since Linux 4.7):
    a candidate that allocates without bound gets a MemoryError instead of taking the machine.
    Not on a GPU worker: the CUDA driver's own mappings would count against it."""
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (limit_bytes, limit_bytes))


def to_device(value: Any, device: torch.device) -> Any:
    return tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, value)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def wait_for_job(device: str) -> str | None:
    """A prestarted worker: torch imported and, on a GPU, the CUDA context made, before its job
    is known; then one job path on stdin (None at EOF: the search is gone). Its output goes to
    the job's log from here on. Still one candidate per process: nothing of a job is loaded yet."""
    if device == "cuda":
        torch.empty(1, device="cuda")  # the context: ~0.5 s that a waiting worker pays in advance
    line = sys.stdin.readline().strip()
    if not line:
        return None
    job = json.loads(Path(line).read_text())
    log = os.open(Path(job["result_path"]).parent / "log.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    return line


if __name__ == "__main__":
    try:
        if sys.argv[1] == "--wait":
            job_path = wait_for_job(sys.argv[2])
            sys.exit(main(job_path) if job_path else 0)
        sys.exit(main(sys.argv[1]))
    except Exception:  # noqa: BLE001 - reported through the log; the runner marks the crash
        traceback.print_exc()
        sys.exit(3)
