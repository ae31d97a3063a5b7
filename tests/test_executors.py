"""kernforge.evaluate.executors: where worker jobs run.

The local executor's GPU slots are tested with a stand-in for run_job (no GPU here);
the Ray executor runs real jobs (cpu backend) on a local Ray cluster started by the
tests, and must give the verdicts the local executor gives.
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
import threading
import time
from pathlib import Path

import pytest
from helpers import CORRECT_BODY, TINY_MODEL, c_softmax_source, run_cli, run_cli_subprocess

from kernforge.errors import UserError
from kernforge.evaluate import evaluate_baseline, evaluate_candidate
from kernforge.evaluate import runner as runner_module
from kernforge.evaluate.executors import LocalExecutor, make_executor, physical_gpu, visible_gpus
from kernforge.evaluate.runner import discard_reference, oracle_for
from kernforge.tasks import save_task

pytestmark = pytest.mark.integration

# ---------------------------------------------------------------- local: one set of slots per GPU


def test_each_job_runs_pinned_to_a_gpu_with_that_gpus_lock(monkeypatch, tmp_path):
    seen, running, peak = [], set(), {"n": 0}
    guard = threading.Lock()

    def fake_run_job(job, job_dir, timeout_s, env_extra=None):
        with guard:
            running.add(job_dir.name)
            peak["n"] = max(peak["n"], len(running))
            seen.append((env_extra["CUDA_VISIBLE_DEVICES"], job["device_lock"], job["gpu"]))
        time.sleep(0.05)
        with guard:
            running.discard(job_dir.name)
        return {"status": "ok"}, "", 0.05

    monkeypatch.setattr(runner_module, "run_job", fake_run_job)
    executor = LocalExecutor([0, 1], per_device=2, lock_dir=tmp_path)
    assert executor.capacity == 4
    threads = [threading.Thread(target=executor.run, args=({"mode": "candidate"}, tmp_path / f"j{i}", 10))
               for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 12 and peak["n"] <= 4
    for visible, lock, gpu in seen:
        assert visible == physical_gpu(gpu) and lock == str(tmp_path / f"gpu-{physical_gpu(gpu)}.lock")
    assert {gpu for _, _, gpu in seen} == {0, 1}


def test_cpu_jobs_take_the_machines_cpu_lock(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(runner_module, "run_job",
                        lambda job, job_dir, timeout_s, env_extra=None: calls.append((job, env_extra)) or
                        ({"status": "ok"}, "", 0.0))
    LocalExecutor(None, per_device=1, lock_dir=tmp_path).run({"mode": "candidate"}, tmp_path / "j", 10)
    (job, env), = calls
    assert job["device_lock"] == str(tmp_path / "cpu.lock") and env == {}
    executor = make_executor("local", "cpu", 1)
    assert executor.capacity == 1 and executor.lock_dir.name == "kernforge-locks"  # shared by every run


def test_a_worker_keeps_the_gpus_this_process_was_given(monkeypatch):
    from kernforge.evaluate.executors import physical_gpu

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert physical_gpu(1) == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert [physical_gpu(0), physical_gpu(1)] == ["3", "5"]  # index 0 here is the machine's GPU 3


def test_gpu_choice():
    assert visible_gpus("all", 2) == [0, 1]
    assert visible_gpus("1", 2) == [1]
    with pytest.raises(UserError, match="has 2 visible GPU"):
        visible_gpus("0,2", 2)
    with pytest.raises(UserError, match="indices like 0,1"):
        visible_gpus("first", 2)
    with pytest.raises(UserError, match="unknown executor 'slurm'"):
        make_executor("slurm", "cpu", 1)


# ---------------------------------------------------------------- ray: a local cluster

HAVE_RAY = importlib.util.find_spec("ray") is not None
ray_only = pytest.mark.skipif(not HAVE_RAY, reason="ray is not installed (pip install 'kernforge[ray]')")


@pytest.fixture(scope="module")
def ray_executor():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    executor = make_executor("ray", "cpu", 1, ray_address="local")
    yield executor
    executor.close()
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_reference(ray_executor, softmax_task, tmp_path_factory):
    """The softmax task's baseline, run on the Ray cluster: inputs and oracle come back here."""
    folder = tmp_path_factory.mktemp("ray-reference")
    task_path, reference_path = folder / "task.json", folder / "reference.pt"
    save_task(softmax_task, task_path)
    # the job folders on the node before this job: an earlier test's cancelled job may still end
    before = set(Path(tempfile.gettempdir()).glob("kf-ray-job-*"))
    baseline = evaluate_baseline(task_path, reference_path, "cpu", folder / "baseline", 300, (), ray_executor)
    yield task_path, reference_path, baseline, before
    discard_reference(reference_path)


@ray_only
def test_ray_baseline_brings_back_the_inputs_and_keeps_the_oracle_here(ray_reference):
    task_path, reference_path, baseline, before = ray_reference
    assert baseline.eager is not None and baseline.eager.p50_ms > 0
    assert baseline.labels[0] == "real0" and "fresh-offset" in baseline.labels
    assert reference_path.is_file() and oracle_for(reference_path).labels == baseline.labels
    assert not list(task_path.parent.rglob("oracle.pt"))  # held in this process, not on disk
    assert (task_path.parent / "baseline" / "log.txt").is_file()
    # nothing of this job left on the node: the folders that appeared since are gone (within a
    # bound: another test's Ray job, on the other pytest worker, may be ending beside this one)
    appeared = set(Path(tempfile.gettempdir()).glob("kf-ray-job-*")) - before
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(d.exists() for d in appeared):
        time.sleep(0.1)
    assert not any(d.exists() for d in appeared)


@ray_only
def test_a_task_over_the_sample_cap_has_its_inputs_drawn_on_the_node(ray_executor, drawn_softmax_task, tmp_path):
    """The sample the node gets holds placeholders only; the baseline there draws the inputs."""
    task_path, reference_path = tmp_path / "task.json", tmp_path / "reference.pt"
    save_task(drawn_softmax_task, task_path)
    try:
        baseline = evaluate_baseline(task_path, reference_path, "cpu", tmp_path / "baseline", 300, (), ray_executor)
        assert baseline.labels[0] == "drawn0" and baseline.eager is not None
        source = tmp_path / "candidate.c"
        source.write_text(c_softmax_source())
        result = evaluate_candidate(task_path, reference_path, source, "cpu", "cpu", tmp_path / "job", 120,
                                    ray_executor)
        assert result.status == "ok", result.reason + result.log_tail
    finally:
        discard_reference(reference_path)


def evaluate_on_ray(ray_executor, ray_reference, tmp_path, body=CORRECT_BODY):
    task_path, reference_path, _, _ = ray_reference
    source = tmp_path / "candidate.c"
    source.write_text(c_softmax_source(body))
    return evaluate_candidate(task_path, reference_path, source, "cpu", "cpu", tmp_path, 120, ray_executor)


@ray_only
def test_a_correct_candidate_on_ray_is_accepted_timed_and_its_files_come_back(ray_executor, ray_reference,
                                                                               tmp_path):
    result = evaluate_on_ray(ray_executor, ray_reference, tmp_path)
    assert result.status == "ok", result.reason + result.log_tail
    assert result.timing is not None and result.eager is not None and result.speedup_vs_eager
    assert (tmp_path / "log.txt").is_file() and (tmp_path / "job.json").is_file()
    assert list((tmp_path / "build").glob("*.so"))  # the build output, brought back
    assert not (tmp_path / "outputs.pt").exists()  # judged here, then removed


@ray_only
def test_a_wrong_candidate_on_ray_is_judged_here(ray_executor, ray_reference, tmp_path):
    unnormalised = CORRECT_BODY.replace("yr[c] /= s;", "yr[c] /= 2.0f * s;")
    result = evaluate_on_ray(ray_executor, ray_reference, tmp_path, unnormalised)
    assert result.status == "wrong_result", result.reason


@ray_only
def test_a_crashing_candidate_on_ray_is_a_crash_not_a_lost_search(ray_executor, ray_reference, tmp_path):
    segfault = "    *(volatile int *)0 = 1;\n" + CORRECT_BODY
    result = evaluate_on_ray(ray_executor, ray_reference, tmp_path, segfault)
    assert result.status == "crash" and "SIGSEGV" in result.reason


@ray_only
def test_optimize_with_the_ray_executor(tmp_path):
    # a fresh process: `--ray-address local` starts a cluster that lives as long as the process
    proc = run_cli_subprocess("optimize", str(TINY_MODEL), "--backend", "cpu", "--iterations", "2", "--executor",
                              "ray", "--ray-address", "local", "--runs-dir", str(tmp_path), "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    (task,) = data["tasks"]
    assert task["candidates"] == 2 and task["status_counts"] == {"ok": 2}
    run_dir = Path(data["run_dir"])
    assert run_dir.parent == tmp_path  # the run folder is on this machine
    assert json.loads((run_dir / "config.json").read_text())["executor"] == "ray"


def test_an_unreachable_ray_cluster_is_one_clear_error(tmp_path):
    if not HAVE_RAY:
        proc = run_cli("optimize", str(TINY_MODEL), "--backend", "cpu", "--executor", "ray",
                       "--runs-dir", str(tmp_path))
        assert proc.returncode == 2 and "pip install 'kernforge[ray]'" in proc.stderr
        return
    proc = run_cli("optimize", str(TINY_MODEL), "--backend", "cpu", "--iterations", "1", "--executor", "ray",
                   "--ray-address", "127.0.0.1:1", "--runs-dir", str(tmp_path), timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().startswith("error: cannot reach the Ray cluster at '127.0.0.1:1'")
    assert "Traceback" not in proc.stderr


def test_optimize_with_two_candidates_in_flight(tmp_path):
    proc = run_cli("optimize", str(TINY_MODEL), "--backend", "cpu", "--iterations", "4", "--parallel", "2",
                   "--runs-dir", str(tmp_path), "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    (task,) = data["tasks"]
    assert task["candidates"] == 4 and task["status_counts"] == {"ok": 4}
    run_dir = Path(data["run_dir"])
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    nodes = [e for e in events if e["kind"] == "node"]
    # recorded as each finishes: the two of a round in either order
    assert sorted(e["node"] for e in nodes) == ["n0000", "n0001", "n0002", "n0003"]
    # the first round is the starting point alone (nothing to refine yet); the second has two
    # in flight: a refinement of it and, the root now allowed a second child, a new start
    assert nodes[0]["node"] == "n0000" and nodes[0]["parent"] is None
    assert {e["node"] for e in nodes[1:3]} == {"n0001", "n0002"}
    assert sorted(str(e["parent"]) for e in nodes[1:3]) == ["None", "n0000"]
