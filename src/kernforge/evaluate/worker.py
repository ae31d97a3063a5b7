"""The evaluation worker: one process per job, started by kernforge.evaluate.runner.

Three kinds of job, never mixed in one process:
  baseline   loads the task's real inputs, makes the other input sets (inputs.make_sets),
             computes the float64 oracle, each element's tolerance and eager's errors, and
             times eager; imports no candidate. The oracle goes to a file the search process
             loads and deletes once this worker is gone.
  peers      times torch.compile of the op alone, per mode, on the baseline's input sets (its
             reference file) with the same harness and device lock; imports no candidate. The
             search asks for it only once a candidate beats eager (engine.TaskJobs.time_peers).
  candidate  binds the harness (session.make_harness) and times eager before any candidate
             code is imported, then builds one candidate, makes one first call (Triton
             compiles there), runs one session of its calls on every input set, some of
             them judged, and times eager once more right after (the faster of the two is
             the reference). It decides nothing: what the judged calls returned goes to a
             file that the search process judges (judge.py). Eager and candidate are timed
             in one process, so a machine that got busier between two workers does not pass
             for a speedup (seen on a shared 2-core machine: eager 10.7 ms alone, 23.9 ms
             while tests ran beside it).

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
from kernforge.harness.inputs import on_device, to_device
from kernforge.harness.session import make_harness, time_op, varies_safely


def main(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    if job["backend"] == "triton" and job["device"] == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # must be set before triton is imported
    if job["device"] == "cpu" and job.get("memory_limit_bytes"):
        limit_memory(job["memory_limit_bytes"])
    started = time.perf_counter()
    result = {"baseline": run_baseline, "peers": run_peers}.get(job["mode"], run_candidate)(job)
    result["worker_s"] = time.perf_counter() - started  # from the job's start, imports excluded
    Path(job["result_path"]).write_text(json.dumps(result, indent=1))
    return 0


# ---------------------------------------------------------------- baseline

def run_baseline(job: dict[str, Any]) -> dict[str, Any]:
    from kernforge.harness.serialize import encode_value, load_sample
    from kernforge.harness.hardware import measure_hardware
    from kernforge.harness.inputs import digest, drawn_set, make_sets, mutated_inputs, on_host, tensors_of
    from kernforge.tasks import load_task, reference_of

    phases = Phases()
    task = load_task(Path(job["task_path"]))
    device = torch.device(job["device"])
    op = reference_of(task)  # an ATen op, or a chain's replay
    # Afresh per worker unless the job names one: fresh sets no kernel can replay from a fixed seed.
    seed = job["seed"] if job.get("seed") is not None else int.from_bytes(os.urandom(4), "little")
    # Tensors the capture kept as placeholders are drawn here, from a stream of their own (make_sets'
    # generator, seeded alike, would repeat these values in its fresh sets).
    # Drawn on a GPU where the task runs on one: the CPU's generator took tens of seconds for the
    # VAE's 134M-element sets (bench/results/cpu/issue34/README.md).
    draws = torch.Generator(device=device).manual_seed(seed + 1)
    real = [on_host(drawn_set(load_sample(Path(p)), draws)) for p in task.samples]
    drawn = task.real_inputs != "all"
    sets, labels, timing_sets = make_sets(real, seed, "drawn" if drawn else "real", device)
    sets, labels = _within_the_domain(op, sets, labels, len(timing_sets), device)
    for label, classed in _class_sets(op, real[0], seed, device):
        sets.append(on_host(classed))
        labels.append(label)
    why = _why_drawn_sets_fail(op, sets, labels, task.outputs, device) if drawn else None
    if why:
        return {"status": "error", "reason": f"the inputs over the sample cap cannot be drawn: {why}"}
    mutated = op.mutated if task.chain else mutated_inputs(op._schema)
    dtypes = [str(t.dtype) for t in _eager(op, sets[0], device)]
    vary = varies_safely(_calls(op), sets[0], device)  # it copies the set to the device itself
    # Two files: the inputs, which candidates' workers read, and the oracle, which the search
    # process loads and deletes as soon as this worker is gone (runner.load_oracle). The inputs
    # first, read back from the file's mapping: then they are not held in private memory beside
    # every set's oracle (8 sets of a 268 MB input: 2.1 GB).
    torch.save({"input_sets": tree_map(encode_value, sets), "labels": labels, "timing": timing_sets,
                "dtypes": dtypes, "outputs_meta": task.outputs, "mutated": mutated, "vary": vary},
               job["reference_path"])
    del real
    sets = mapped_reference(Path(job["reference_path"]))["input_sets"]
    phases.mark("baselines")
    oracles, bounds, eager_errors, digests = [], [], [], []
    for inputs in sets:
        kept, bound, errors = _reference(op, inputs, device)
        oracles.append(kept)
        bounds.append(bound)
        eager_errors.append(errors)
        digests.append([digest(t).tolist() for t in tensors_of(inputs)])
    torch.save({"oracles": oracles, "bounds": bounds, "eager_errors": eager_errors, "digests": digests,
                "dtypes": dtypes, "labels": labels, "timing": timing_sets, "mutated": mutated,
                "outputs_meta": task.outputs}, job["oracle_path"])
    del oracles, bounds  # 2.5x every set's outputs (float64 and bfloat16): not needed to time
    phases.mark("oracle")
    harness = make_harness(device)
    dev_sets = [on_device(s, device) for s in sets]
    # Timed under the device's lock, as candidates are, so that another search on the machine
    # never times beside it; on a CPU, checks_exclusive as for candidates.
    lock = DeviceLock(job.get("device_lock"), checks_exclusive=device.type == "cpu")
    eager_fn = _calls(op)
    with lock.for_timing():
        timing = time_op(harness, eager_fn, dev_sets, timing_sets, task.outputs, device, vary=vary)
        hardware = measure_hardware(device)  # its bandwidth is timed too: under the lock, after eager's
    phases.mark("baselines")
    return {"status": "ok", "eager": timing.__dict__, "eager_errors": eager_errors,
            "labels": labels, "device_name": device_name(device), "hardware": hardware, "phases": phases.seconds}


def run_peers(job: dict[str, Any]) -> dict[str, Any]:
    """torch.compile of the op alone, per mode in job["compile_modes"], timed as the baseline timed
    eager: the same harness, the input sets of the reference file the baseline wrote, its timing
    sets and its finding on scaled sets, under the device lock."""
    from kernforge.tasks import load_task, reference_of

    phases = Phases()
    task = load_task(Path(job["task_path"]))
    device = torch.device(job["device"])
    op = reference_of(task)
    ref = mapped_reference(Path(job["reference_path"]))
    dev_sets = [on_device(s, device) for s in ref["input_sets"]]
    harness = make_harness(device)
    lock = DeviceLock(job.get("device_lock"), checks_exclusive=device.type == "cpu")
    vary = bool(ref.get("vary", True))
    compiled = {mode: _time_compiled(harness, op, dev_sets, ref["timing"], task.outputs, device, mode, lock, vary)
                for mode in job["compile_modes"]}
    return {"status": "ok", "compiled": compiled, "phases": phases.done("compile_peers")}


def mapped_reference(reference_path: Path) -> dict[str, Any]:
    """A reference file (inputs only, no oracle), its input sets mapped from it rather than read
    into private memory: pages the kernel can drop and read again, shared by every worker that
    reads the same file."""
    from kernforge.harness.serialize import decode_tree

    ref = torch.load(reference_path, weights_only=True, mmap=True)
    return {**ref, "input_sets": decode_tree(ref["input_sets"])}


def _eager(op: Any, inputs: Any, device: torch.device) -> list[Any]:
    from kernforge.evaluate.checks import outputs_list

    args, kwargs = to_device(inputs, device)
    return [e.detach() if isinstance(e, torch.Tensor) else e for e in outputs_list(op(*args, **kwargs))]


def _reference(op: Any, inputs: Any, device: torch.device) -> tuple[list[Any], list[Any], list[float]]:
    """For one set: the oracle as kept, each element's allowed error and eager's errors. Eager
    and the oracle each run on copies of their own: an in-place op must not change the values
    the other computes from. The bounds and errors are worked out where the outputs are, on the
    CPU only if the device has no room for them: there they took 4.2 s for 33M elements on 2
    cores (bench/results/cpu/issue34/README.md), and the VAE's baseline has 8 sets of 134M."""
    from kernforge.evaluate.checks import in_output_range, oracle_dtype, outputs_list, upcast

    eager = _eager(op, inputs, device)
    args, kwargs = to_device(inputs, device)
    oracle = outputs_list(_oracle(op, args, kwargs, upcast))
    del args, kwargs
    kept = [in_output_range(o, e.dtype).to(oracle_dtype(e.dtype)) if o.is_floating_point() else o
            for o, e in zip(oracle, eager)]
    del oracle
    try:
        bounds, errors = _bounds_and_errors(kept, eager)
    except torch.OutOfMemoryError:
        kept, eager = [o.cpu() for o in kept], [e.cpu() for e in eager]
        bounds, errors = _bounds_and_errors(kept, eager)
    return [o.cpu() for o in kept], [None if b is None else b.cpu() for b in bounds], errors


def _bounds_and_errors(kept: list[Any], eager: list[Any]) -> tuple[list[Any], list[float]]:
    from kernforge.evaluate.checks import element_bound, normalised_error

    pairs = [(o.to(e.device), e) for o, e in zip(kept, eager)]
    bounds = [element_bound(o, e, e.dtype) if e.is_floating_point() else None for o, e in pairs]
    errors = [normalised_error(e, o) if e.is_floating_point() else 0.0 for o, e in pairs]
    return bounds, errors


def _class_sets(op: Any, sample: Any, seed: int, device: torch.device) -> list[tuple[str, Any]]:
    """The value-class sets (evaluate.classes) the reference accepts on this signature."""
    from kernforge.evaluate.checks import outputs_list, upcast
    from kernforge.evaluate.classes import class_sets, reference_accepts

    def oracle(inputs: Any) -> list[Any]:
        args, kwargs = to_device(inputs, device)
        return outputs_list(_oracle(op, args, kwargs, upcast))

    accepts = reference_accepts(lambda inputs: _eager(op, inputs, device), oracle)
    return class_sets(sample, torch.Generator(device=device).manual_seed(seed + 2), accepts)


def _within_the_domain(op: Any, sets: list[Any], labels: list[str], first_fresh: int,
                       device: torch.device) -> tuple[list[Any], list[str]]:
    """The sets, less the fresh draws eager refuses: an op with a domain (a binary cross-entropy
    of probabilities) raises on normal draws, which are then no inputs of it. The real sets and
    their permutations (the first `first_fresh`) stay whatever eager says of them."""
    kept = [i for i in range(len(sets)) if i < first_fresh or _eager_runs(op, sets[i], device)]
    return [sets[i] for i in kept], [labels[i] for i in kept]


def _eager_runs(op: Any, inputs: Any, device: torch.device) -> bool:
    try:
        _eager(op, inputs, device)
    except Exception:  # noqa: BLE001 - any refusal means the same
        return False
    return True


def _why_drawn_sets_fail(op: Any, sets: list[Any], labels: list[str], captured: list[dict[str, Any]],
                         device: torch.device) -> str | None:
    """Why values drawn for the tensors over the sample cap are no inputs of the captured
    signature, if they are not: eager raises on them (offsets out of order), or gives outputs of
    other shapes (an op whose output shape follows its integer inputs)."""
    want = [m["shape"] for m in captured]
    for inputs, label in zip(sets, labels):
        try:
            got = [list(o.shape) if isinstance(o, torch.Tensor) else None for o in _eager(op, inputs, device)]
        except Exception as e:  # noqa: BLE001 - what eager says of drawn values is the reason
            return f"eager raises on {label}: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
        if got != want:
            return f"on {label} eager's output shapes are {got}, the captured {want}"
    return None


def _calls(op: Any) -> Any:
    return lambda args, kwargs, _prepared: op(*args, **kwargs)


def _time_compiled(harness: Any, op: Any, dev_sets: list[Any], timing_sets: list[int], outputs: list[dict[str, Any]],
                   device: torch.device, mode: str, lock: DeviceLock, vary: bool = True) -> dict[str, Any]:
    """torch.compile of the op alone, timed the same way; its error, if it cannot compile, is data.
    It compiles (and autotunes, minutes for max-autotune) on a first call outside the lock."""
    try:
        compiled = torch.compile(lambda *a, **k: op(*a, **k), mode=None if mode == "default" else mode)
        args, kwargs = dev_sets[timing_sets[0]]
        compiled(*args, **kwargs)
        with lock.for_timing():
            timing = time_op(harness, _calls(compiled), dev_sets, timing_sets, outputs, device, name=mode, vary=vary)
        return {"timing": timing.__dict__, "error": ""}
    except Exception as e:  # noqa: BLE001 - a peer that fails is reported, not fatal
        return {"timing": None, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}


def _oracle(op: Any, args: Any, kwargs: Any, upcast: Any) -> Any:
    op = op.in_float64() if hasattr(op, "in_float64") else op  # a chain: its casts to float64 too
    try:
        return op(*upcast(args), **upcast(kwargs))
    except (RuntimeError, NotImplementedError):
        # Some device kernels have no float64 version; the CPU has them all.
        return op(*upcast(to_device(args, torch.device("cpu"))), **upcast(to_device(kwargs, torch.device("cpu"))))


# ---------------------------------------------------------------- candidate

def run_candidate(job: dict[str, Any]) -> dict[str, Any]:
    """Time eager, build the candidate, run one session of its calls (every one made alike, some
    judged), time eager again; the judged calls' outputs go to a file for the search process."""
    from kernforge.backends import BuildError, RejectedBuild, get_backend
    from kernforge.harness.prefill import Prefill
    from kernforge.harness.session import Plan, judged_timed_for, output_metas, reps_for
    from kernforge.tasks import load_task, reference_of

    device = torch.device(job["device"])
    mark_fd = int(os.environ["KF_MARK_FD"]) if os.environ.get("KF_MARK_FD") else None
    harness = make_harness(device, mark_fd)  # bound before the candidate loads
    task = load_task(Path(job["task_path"]))
    backend = get_backend(job["backend"])
    # Inputs only, no oracle. A CPU worker calls on the mapped sets where they lie (on_device);
    # a GPU worker's copies go to the GPU.
    ref = mapped_reference(Path(job["reference_path"]))
    sets = [on_device(s, device) for s in ref.pop("input_sets")]
    op = reference_of(task)
    phases = Phases()
    lock = DeviceLock(job.get("device_lock"), checks_exclusive=device.type == "cpu")
    eager_fn = _calls(op)
    seed = int.from_bytes(os.urandom(4), "little")  # where the judged calls fall: nowhere on disk
    # What each set's outputs may be prefilled with: the search process worked it out from the
    # oracle (prefill.options_for_sets); a job without it (run by hand) gets the defaults.
    options = job.get("prefill")
    vary = bool(ref.get("vary", True))  # the baseline's finding: whether the reference takes scaled sets
    # A library's kernel writes into outputs the harness made: nothing it allocates is an output,
    # so no block is poisoned for it, nor for eager timed beside it (Plan.poison)
    poison = backend.loading.artefact != "library"
    eager_timing = None
    if backend.timeable():
        with lock.for_timing():
            eager_timing = time_op(harness, eager_fn, sets, ref["timing"], task.outputs, device, seed,
                                   judged_like_a_candidate=True, prefill_options=options, vary=vary, poison=poison)
    phases.mark("eager_timing_s")
    threads_before = _thread_ids()
    try:
        kernel = backend.build(Path(job["source"]), Path(job["build_dir"]), task.outputs)
    except RejectedBuild as e:
        return {"status": "cheat", "reason": f"object scan: {e}"[-4000:], "failed_check": "scan",
                "phases": phases.done("build_s")}
    except BuildError as e:
        return {"status": "compile_error", "reason": str(e)[-4000:], "phases": phases.done("build_s")}
    phases.mark("build_s")
    from kernforge.harness.guards import Guard

    guard = Guard(device)
    fn, prepare = _candidate_call(kernel, guard)
    poison = poison or prepare is None  # whatever the backend said, a kernel that allocates is poisoned
    prefill = Prefill(output_metas(task.outputs), options)
    timed = eager_timing is not None
    plan = Plan(sets=sets, timing=ref["timing"], checks=list(range(len(sets))),
                calls=reps_for(eager_timing.p50_ms, device) if timed else 0,
                judged_timed=judged_timed_for(sum(m["nbytes"] for m in prefill.metas)) if timed else 0,
                labels=ref["labels"], vary=vary, poison=poison)
    failure = _first_call(fn, prepare, sets[0], ref["labels"][0], device)
    phases.mark("first_call_s")  # Triton compiles here, outside the device lock
    if failure is not None:
        return {**failure, "timed": False, "phases": phases.seconds}
    with lock.for_timing() if timed else lock.for_checks():
        session = harness(fn, plan, prepare, prefill, seed + 2, name="candidate", guard=guard)
    phases.mark("session_s")
    if session.failure is not None:
        return {**session.failure, "timed": False, "phases": phases.seconds}
    result: dict[str, Any] = {"status": "ok", "reason": "", "timed": False}
    if timed:
        with lock.for_timing():
            # Eager again, right after: the speedup is over the faster of the two eager timings,
            # so a machine that was busier (or a cache colder) when eager was first timed does
            # not pass for a faster kernel (seen on a CPU: eager 5.0 ms first, 0.9-1.0 ms after).
            eager_after = time_op(harness, eager_fn, sets, ref["timing"], task.outputs, device, seed + 3,
                                  name="eager-after", calls=eager_timing.runs, prefill_options=options, vary=vary,
                                  poison=poison)
        result.update(timed=True, eager_timing=min(eager_timing, eager_after, key=lambda t: t.p50_ms).__dict__,
                      timing=session.timing.__dict__,
                      eager_p50_ms_before_after=[eager_timing.p50_ms, eager_after.p50_ms])
    threads = _threads_left(threads_before)
    torch.save({"judged": [_plain_call(c) for c in session.judged], "live_outputs": session.live_outputs,
                "threads": threads, "native": prepare is not None, "guards": guard.report()}, job["outputs_path"])
    return {**result, "outputs_path": job["outputs_path"], "sessions": list(harness.sessions),
            "phases": phases.done("timing_s")}


def _first_call(fn: Any, prepare: Any, inputs: Any, label: str, device: torch.device) -> dict[str, Any] | None:
    """One call before the session, on a copy of the first set, not judged: Triton compiles the
    kernel at its first launch (seconds), which must not hold the device lock other workers time
    under. A failure here is the candidate's, as in the session."""
    from kernforge.harness.session import failure_kind

    args, kwargs = to_device(inputs, device)  # a copy: the set itself stays as the baseline made it
    try:
        fn(args, kwargs, prepare() if prepare is not None else None)
        if device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the candidate's failure is data
        return {"status": failure_kind(e), "reason": f"on {label}: {type(e).__name__}: {e}"[-4000:]}
    return None


def _candidate_call(kernel: Any, guard: Any = None) -> tuple[Any, Any]:
    """(fn, prepare) for the harness. A native kernel writes into outputs the harness makes:
    three sets, one drawn at random before each call (and prefilled by the harness), so that no
    call finds its output where the last one left it; with a guard, each between canaries
    (guards.py)."""
    if not hasattr(kernel, "run"):
        return (lambda args, kwargs, _prepared: kernel(*args, **kwargs)), None
    import random

    pool = [kernel.new_outputs(poison=False) for _ in range(3)]  # the session prefills each call's
    if guard is not None:
        pool = [guard.place_outputs(outputs) for outputs in pool]
    pick = random.Random(int.from_bytes(os.urandom(4), "little"))

    def prepare() -> list[torch.Tensor]:
        return pool[pick.randrange(len(pool))]

    return (lambda args, kwargs, outputs: kernel.run(outputs, args, kwargs)), prepare


def _plain_call(call: Any) -> dict[str, Any]:
    return {"position": call.position, "set": call.set_index, "outputs": call.outputs,
            "out_meta": call.out_meta, "in_meta": call.in_meta, "digests": call.digests,
            "prefill": call.prefill}


class Phases:
    """Seconds spent in each step of a job, for the evaluator's own cost."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def mark(self, name: str) -> None:
        """The time since the last mark, added to `name` (a step may come back)."""
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self._last
        self._last = now

    def done(self, name: str) -> dict[str, float]:
        self.mark(name)
        return self.seconds


def _thread_ids() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def _threads_left(before: set[str], settle_s: float = 0.5) -> dict[str, Any]:
    """Threads the candidate's load or calls added, and child processes, once the calls are over.
    A new thread may stay if it sleeps (an OpenMP pool waits for the next parallel region);
    one still running after settle_s, or any child process, is work outside the calls."""
    deadline = time.perf_counter() + settle_s
    while True:
        new = sorted(_thread_ids() - before)
        running = [tid for tid in new if _thread_state(tid) == "R"]
        if not running or time.perf_counter() > deadline:
            break
        time.sleep(0.02)
    children = []
    for tid in _thread_ids():
        try:
            children += Path(f"/proc/self/task/{tid}/children").read_text().split()
        except OSError:
            pass
    return {"new": len(new), "running": len(running), "children": [int(c) for c in children]}


def _thread_state(tid: str) -> str:
    try:
        return Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


# ---------------------------------------------------------------- helpers

def limit_memory(limit_bytes: int) -> None:
    """Cap the worker's private memory (RLIMIT_DATA counts anonymous mappings since Linux 4.7) at
    what it holds now, its imports (a worker forked from the server starts with ~0.8 GB of them),
    plus limit_bytes: a candidate that allocates without bound gets a MemoryError instead of taking
    the machine. Not on a GPU worker: the CUDA driver's own mappings would count against it."""
    import resource

    cap = limit_bytes + _data_bytes()
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))


def _data_bytes() -> int:
    """This process's private data as RLIMIT_DATA counts it (VmData), 0 where /proc has none."""
    try:
        line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmData:"))
        return int(line.split()[1]) * 1024
    except (OSError, StopIteration, ValueError, IndexError):
        return 0


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
