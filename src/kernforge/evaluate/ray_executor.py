"""The ray executor: worker jobs run on a Ray cluster; the run folder stays here.

A job travels as bytes: the task, its inputs (reference.pt, put in Ray's object
store once per task and shared by every candidate), the candidate's source, and for
a baseline the real input samples. On the node, a Ray task writes them to a private
temporary folder and runs the job exactly as the local executor does, in a worker
process with a hard time limit, pinned to the GPU Ray gave it, holding that GPU's
lock while it times. What comes back: the result, the log, the outputs to judge, the
build folder (the .so or Triton's cache), and for a baseline the reference inputs and
the oracle. The oracle is judged here, never on the node where candidates run after
the baseline is done: its file is deleted there before the Ray task returns.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import socket
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kernforge.errors import UserError
from kernforge.evaluate.jobs import JobResult, machine_lock_dir

# Files a job names, by its key: (key, sent to the node, brought back from it).
_SENT = ("task_path", "reference_path", "source")
_BROUGHT_BACK = ("outputs_path", "reference_path", "oracle_path")


class RayExecutor:
    def __init__(self, address: str, device: str, per_device: int):
        check_address(address)
        import ray

        self.ray = ray
        if not ray.is_initialized():
            try:
                if address == "local":
                    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
                else:
                    ray.init(address=address, include_dashboard=False, log_to_driver=False,
                             configure_logging=False, runtime_env=_runtime_env())
            except Exception as e:  # noqa: BLE001 - Ray raises many kinds; the user needs one line
                raise UserError(f"cannot reach the Ray cluster at '{address}': {type(e).__name__}: "
                                f"{str(e).splitlines()[0] if str(e) else ''}; start one with `ray start "
                                "--head` or use --executor local") from None
        self.device = device
        self.per_device = max(1, per_device)
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        if device == "cuda" and gpus == 0:
            raise UserError("the Ray cluster has no GPU; run a CPU search or add GPU nodes")
        # On a GPU, per_device jobs share one (fractional num_gpus). On CPUs, per_device jobs per
        # node, spread over the nodes, as the local executor runs --parallel CPU jobs per machine:
        # one job per core would start workers (a torch import each) beside another's timing on
        # the same cores, which made eager look 7-16x slower here (see PrestartedWorkers).
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        self.capacity = gpus * self.per_device if device == "cuda" else max(1, nodes) * self.per_device
        self._remote = ray.remote(_run_on_node)
        self._shared: dict[str, Any] = {}  # reference.pt path -> object ref, sent once
        self._lock = threading.Lock()

    def run(self, job: dict[str, Any], job_dir: Path, timeout_s: float) -> JobResult:
        started = time.perf_counter()
        job_dir.mkdir(parents=True, exist_ok=True)
        (job_dir / "job.json").write_text(json.dumps({**job, "executor": "ray"}, indent=1))
        files = {key: self._payload(key, job[key]) for key in _SENT if job.get(key) and Path(job[key]).exists()}
        samples = {}
        if job["mode"] == "baseline":
            from kernforge.tasks import load_task

            samples = {p: Path(p).read_bytes() for p in load_task(Path(job["task_path"])).samples}
        options = ({"num_gpus": 1 / self.per_device} if self.device == "cuda"
                   else {"num_cpus": 1, "scheduling_strategy": "SPREAD"})
        ref = self._remote.options(**options, max_retries=0).remote(job, files, samples, timeout_s)
        try:
            back = self.ray.get(ref, timeout=timeout_s + 120)
        except Exception as e:  # noqa: BLE001 - a lost node, a Ray failure: the job's failure, not the search's
            return None, f"the Ray task failed: {type(e).__name__}: {str(e)[:500]}", time.perf_counter() - started
        _unpack(back, job, job_dir)
        return back["result"], back["tail"], back["wall_s"]

    def _payload(self, key: str, path: str) -> Any:
        if key != "reference_path":
            return Path(path).read_bytes()
        with self._lock:  # a task's inputs: one object for all its candidates
            stamp = f"{path}:{os.stat(path).st_mtime_ns}"
            if stamp not in self._shared:
                self._shared = {stamp: self.ray.put(Path(path).read_bytes())}
            return self._shared[stamp]

    def close(self) -> None:
        self._shared.clear()


def check_address(address: str) -> None:
    """Ray is installed, and the address answers (ray.init retries a silent one for minutes)."""
    if importlib.util.find_spec("ray") is None:
        raise UserError("--executor ray needs Ray: pip install 'kernforge[ray]'")
    if address in ("local", "auto"):
        return
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--ray-address '{address}' is not host:port or ray://host:port (or local)")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise UserError(f"cannot reach the Ray cluster at '{address}': {e.strerror or e}; start one with "
                        "`ray start --head` or use --executor local") from None


def _run_on_node(job: dict[str, Any], files: dict[str, Any], samples: dict[str, bytes],
                 timeout_s: float) -> dict[str, Any]:
    """On a Ray node: materialise the job in a private folder, run it, return what it made."""
    import ray

    from kernforge.evaluate.runner import run_job
    from kernforge.tasks import load_task, save_task

    root = Path(tempfile.mkdtemp(prefix="kf-ray-job-"))
    try:
        local = dict(job)
        for key, data in files.items():
            data = ray.get(data) if isinstance(data, ray.ObjectRef) else data
            path = root / Path(job[key]).name
            path.write_bytes(data)
            local[key] = str(path)
        if samples:  # the baseline reads the real inputs; the task names them by path
            task = load_task(Path(local["task_path"]))
            for i, (original, data) in enumerate(samples.items()):
                path = root / f"sample{i}.pt"
                path.write_bytes(data)
                task.samples[task.samples.index(original)] = str(path)
            save_task(task, Path(local["task_path"]))
        for key in ("reference_path", "oracle_path", "outputs_path"):
            if key in job and key not in files:
                local[key] = str(root / Path(job[key]).name)
        local["build_dir"] = str(root / "build")
        gpus = ray.get_gpu_ids()
        # Jobs on the same GPU of this node share its lock, whichever run sent them (Ray's GPU ids
        # are the node's own, as are the local executor's lock names).
        name = f"gpu-{int(gpus[0])}.lock" if gpus else "cpu.lock"
        local["device_lock"] = str(machine_lock_dir() / name)
        job_dir = root / "job"
        result, tail, wall = run_job(local, job_dir, timeout_s, prestart=False, fork=False)
        back: dict[str, Any] = {"result": result, "tail": tail, "wall_s": wall,
                                "log": _read(job_dir / "log.txt"), "files": {}, "build": b""}
        for key in _BROUGHT_BACK:
            path = Path(local[key]) if key in local else None
            if path is not None and path.exists() and key not in files:
                back["files"][key] = path.read_bytes()
        if Path(local["build_dir"]).is_dir():
            back["build"] = _tar(Path(local["build_dir"]))
        if result and result.get("outputs_path"):
            result["outputs_path"] = job["outputs_path"]  # where it will be, back on the search machine
        return back
    finally:
        shutil.rmtree(root, ignore_errors=True)  # the oracle with it


def _unpack(back: dict[str, Any], job: dict[str, Any], job_dir: Path) -> None:
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "log.txt").write_bytes(back["log"])
    for key, data in back["files"].items():
        Path(job[key]).write_bytes(data)
    if back["build"]:
        build_dir = Path(job.get("build_dir", job_dir / "build"))
        build_dir.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(back["build"])) as tar:
            tar.extractall(build_dir, filter="data")


def _tar(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=".")
    return buffer.getvalue()


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def _runtime_env() -> dict[str, Any]:
    """Remote nodes import kernforge from the package they have installed; a checkout's src/
    travels with the job when this process runs from one (PYTHONPATH=src)."""
    import kernforge

    package = Path(kernforge.__file__).resolve().parent
    return {"py_modules": [str(package)]} if "site-packages" not in str(package) else {}
