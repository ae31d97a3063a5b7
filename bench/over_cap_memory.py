"""Memory of evaluating an op over the sample cap: the (16, 64, 256, 256) float32 layer norm
(268 MB input) that an H200 capture skipped before issue 16.

Captures nn.LayerNorm(256) on that input, makes its task, runs the baseline and the built-in
proposer's first candidate, and prints each worker's peak memory (VmHWM: all it touched,
RssAnon: its private part, read from /proc every 0.1 s), the GPU memory nvidia-smi saw each
worker hold, and this (search) process's own peak.

    python bench/over_cap_memory.py [--backend cpu|triton] [--cap BYTES]

--cap raises or lowers the sample cap (default: the capture's, 256 MB, which this input is over);
with --cap 1000000000 the sample is the real input (the path the old code took for ops under it).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import torch
from torch import nn

import kernforge
from kernforge.capture import capture_model
from kernforge.evaluate import evaluate_baseline, evaluate_candidate
from kernforge.models.loader import LoadedModel
from kernforge.propose import get_proposer
from kernforge.tasks import make_tasks, save_task

SHAPE = (16, 64, 256, 256)


class Watcher:
    """Peak memory of the worker processes, by job kind (their command line names the job)."""

    def __init__(self, gpu: bool) -> None:
        self.peaks: dict[str, float] = {}
        self.gpu = gpu
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop:
            workers = _workers()
            for pid, kind in workers.items():
                status = _status(pid)
                self._peak(f"{kind} VmHWM GB", status.get("VmHWM", 0) / 1e6)
                self._peak(f"{kind} RssAnon GB", status.get("RssAnon", 0) / 1e6)
            if self.gpu and workers:
                for pid, mib in _gpu_mib().items():
                    if pid in workers:
                        self._peak(f"{workers[pid]} GPU GB", mib * 2**20 / 1e9)
            time.sleep(0.1)

    def _peak(self, key: str, value: float) -> None:
        self.peaks[key] = max(self.peaks.get(key, 0.0), value)

    def done(self) -> dict[str, float]:
        self.stop = True
        self.thread.join()
        return dict(sorted(self.peaks.items()))


def _workers() -> dict[int, str]:
    found = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "kernforge.evaluate.worker" in cmd and ".json" in cmd:
                found[int(proc.name)] = "baseline" if "/baseline/" in cmd else "candidate"
    return found


def _status(pid: int) -> dict[str, int]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in lines) if v.strip().endswith("kB")}


def _gpu_mib() -> dict[int, float]:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=False).stdout
    return {int(p): float(m) for p, m in (line.split(",") for line in out.strip().splitlines() if "," in line)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--cap", type=int, default=None)
    args = parser.parse_args()
    device = "cuda" if args.backend in ("triton", "cuda") else "cpu"
    print("kernforge from", kernforge.__file__, "torch", torch.__version__, "device", device, flush=True)
    watcher = Watcher(gpu=device == "cuda")
    folder = Path(tempfile.mkdtemp(prefix="kf-over-cap-"))
    try:
        run(folder, args.backend, device, args.cap)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print({k: round(v, 2) for k, v in watcher.done().items()},
          f"search process VmHWM {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB", flush=True)


def run(folder: Path, backend: str, device: str, cap: int | None) -> None:
    torch.manual_seed(0)
    x = torch.randn(SHAPE, device=device)
    loaded = LoadedModel(nn.LayerNorm(SHAPE[-1]).to(device).eval(), (x,), torch.device(device), "ln", "ln")
    started = time.perf_counter()
    capture = capture_model(loaded, folder / "capture", repeats=1,
                            **({"sample_cap_bytes": cap} if cap is not None else {}))
    del loaded, x
    proposer = get_proposer("builtin")
    (task,), _ = make_tasks(capture, folder / "capture", 1, lambda t: proposer.why_unsupported(t, backend))
    sample_mb = sum(Path(s).stat().st_size for s in task.samples) / 1e6
    print(f"task {task.op} real_inputs={getattr(task, 'real_inputs', 'all')} sample {sample_mb:.3f} MB, "
          f"capture {time.perf_counter() - started:.1f} s", flush=True)
    save_task(task, folder / "task.json")
    started = time.perf_counter()
    baseline = evaluate_baseline(folder / "task.json", folder / "reference.pt", device, folder / "baseline", 1200)
    print(f"baseline {time.perf_counter() - started:.1f} s, eager {baseline.eager.p50_ms:.3f} ms, sets "
          f"{baseline.labels[0]}.., reference.pt {(folder / 'reference.pt').stat().st_size / 1e6:.0f} MB", flush=True)
    source = folder / f"candidate{'.c' if backend == 'cpu' else '.py'}"
    source.write_text(proposer.propose(task, backend, None, []).source)
    started = time.perf_counter()
    result = evaluate_candidate(folder / "task.json", folder / "reference.pt", source, backend, device,
                                folder / "job", 1200)
    print(f"candidate {result.status} {result.reason[:200]} {time.perf_counter() - started:.1f} s, "
          f"speedup {result.speedup_vs_eager}", flush=True)


if __name__ == "__main__":
    main()
