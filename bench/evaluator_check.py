"""The evaluator against cheating and broken kernels on a real op, and its own cost per candidate.

    PYTHONPATH=src python3 bench/evaluator_check.py OUT_DIR [SPEC] [CHEAT_DIR ...]

Captures SPEC (default example:attention) once, makes the softmax task, runs the
baseline once, then evaluates each file of bench/cheats/ and of every CHEAT_DIR that
this machine can run (.cu needs a GPU and nvcc; .py runs on a GPU, or under Triton's
interpreter on a CPU; .c runs on the cpu backend), plus the built-in proposer's first
candidate as an honest one. Prints a table last and writes evaluator_check.json under
OUT_DIR.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from kernforge.evaluate import evaluate_baseline, evaluate_candidate, evaluate_peers
from kernforge.models import ModelOptions
from kernforge.optimize.options import compile_modes
from kernforge.optimize.prepare import capture_run, load_for_run, new_run_folder, release
from kernforge.propose import get_proposer
from kernforge.tasks import make_tasks, save_task

CHEATS = Path(__file__).parent / "cheats"


def main(out_dir: Path, spec: str, extra_dirs: list[Path]) -> None:
    on_gpu = torch.cuda.is_available()
    out_dir.mkdir(parents=True, exist_ok=True)
    loaded = load_for_run(spec, "triton" if on_gpu else "cpu", ModelOptions(), lambda event: None)
    store = new_run_folder(Path("/tmp/kf-eval-runs"), loaded, {"spec": spec}, None)
    capture = capture_run(store, loaded, "eager")
    release(loaded)
    tasks, _ = make_tasks(capture, store.capture_dir, 50, lambda task: None)
    task = next(t for t in tasks if t.op == "aten::_softmax.default")
    task_dir = store.task_dir(task.task_id)
    save_task(task, task_dir / "task.json")
    reference = task_dir / "reference.pt"
    baseline = evaluate_baseline(task_dir / "task.json", reference, loaded.device, task_dir / "baseline", 600.0,
                                 compile_modes("auto", loaded.device))
    # The peer always, here: this check reports it beside every candidate, winner or not.
    baseline.compiled, _ = evaluate_peers(task_dir / "task.json", reference, loaded.device, task_dir / "peers", 900.0,
                                          tuple(baseline.compile_modes))
    candidates = _candidates(task, on_gpu, task_dir, [CHEATS, *extra_dirs])
    rows = []
    for name, backend, source in candidates:
        device = "cpu" if backend == "cpu" else loaded.device
        result = evaluate_candidate(task_dir / "task.json", reference, source, backend, device,
                                    task_dir / "nodes" / name.replace("/", "-"), 180.0)
        rows.append({"candidate": name, "backend": backend, **result.to_json()})
    (out_dir / "evaluator_check.json").write_text(json.dumps(
        {"spec": spec, "op": task.op, "shape": task.shape_text, "device": loaded.device,
         "device_name": baseline.device_name, "baseline": asdict(baseline), "rows": rows}, indent=1))
    print(f"{task.op} {task.shape_text} {task.dtype_text} on {baseline.device_name}")
    print(f"{'candidate':34} {'backend':7} {'status':14} {'worker s':>8} {'no-build s':>10}  reason")
    for r in rows:
        no_build = r["wall_s"] - r["phases"].get("build_s", 0.0)
        speed = f" ({r['speedup_vs_eager']:.2f}x vs eager)" if r["speedup_vs_eager"] else ""
        print(f"{r['candidate'][:34]:34} {r['backend']:7} {r['status']:14} {r['wall_s']:8.2f} {no_build:10.2f}  "
              f"{(r['reason'] or 'accepted' + speed)[:130]}")
    honest = [r["wall_s"] - r["phases"].get("build_s", 0.0) for r in rows if r["status"] == "ok"]
    if honest:
        print(f"evaluator time per accepted candidate, build excluded: median {statistics.median(honest):.2f} s")


def _candidates(task, on_gpu: bool, task_dir: Path, dirs: list[Path]) -> list[tuple[str, str, Path]]:
    found = []
    for backend in ("triton", "cpu"):
        honest = get_proposer("builtin").next_move(task, backend, None, [])
        path = task_dir / f"honest_{backend}{'.c' if backend == 'cpu' else '.py'}"
        path.write_text(honest.source)
        found.append((f"honest_{backend}", backend, path))
    for folder in dirs:
        for path in sorted(folder.iterdir()):
            name = f"{folder.name}/{path.stem}"
            if path.suffix == ".cu" and on_gpu:
                found.append((name, "cuda", path))
            elif path.suffix == ".py":
                found.append((name, "triton", path))
            elif path.suffix == ".c" and not on_gpu:  # on a GPU machine the C cases are the CPU's job
                found.append((name, "cpu", path))
    return found


if __name__ == "__main__":
    started = time.perf_counter()
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/h200"),
         sys.argv[2] if len(sys.argv) > 2 else "example:attention", [Path(p) for p in sys.argv[3:]])
    print(f"wall: {time.perf_counter() - started:.0f} s")
