"""Issue 21: per bundled example at CPU size, the profile's coverage and top 3 compute ops (replayed
time per call, the time recorded per call), next to the evaluator's eager p50 from its baseline
worker on the task made from the same capture.

    PYTHONPATH=src .venv/bin/python bench/results/cpu/issue21/measure.py SPEC [--scale small] > row.json
"""

import json
import os
import sys
import tempfile
from pathlib import Path

import torch

from kernforge.capture import capture_model
from kernforge.evaluate import evaluate_baseline
from kernforge.evaluate.runner import discard_reference
from kernforge.models import load_model
from kernforge.models.options import ModelOptions
from kernforge.tasks import make_tasks, save_task

spec, scale = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "small")
loaded = load_model(spec, torch.device("cpu"), ModelOptions(scale=scale))
with tempfile.TemporaryDirectory() as tmp:
    folder = Path(tmp)
    cap = capture_model(loaded, folder / "cap")
    top = cap.ranked()[:3]
    tasks, _ = make_tasks(cap, folder / "cap", top_k=3, why_unsupported=lambda t: None, fuse=False)
    eager = {}
    for k, task in enumerate(tasks):
        save_task(task, folder / f"t{k}.json")
        try:
            base = evaluate_baseline(folder / f"t{k}.json", folder / f"r{k}.pt", "cpu", folder / f"b{k}", 600)
            eager[task.signature] = base.eager.p50_ms * 1e3
        except Exception as e:  # noqa: BLE001
            eager[task.signature] = repr(e)[:100]
        finally:
            discard_reference(folder / f"r{k}.pt")
print(json.dumps({"spec": spec, "scale": scale, "load": os.getloadavg()[0], "coverage": cap.coverage,
                  "total_ms": cap.total_time_us / 1e3, "forward_ms": cap.forward_ms, "replayed": cap.replayed,
                  "signatures": sum(1 for p in cap.profiles if p.kind != "chain"), "replay_s": cap.replay_s,
                  "warning": bool(cap.coverage_warning),
                  "top": [{"op": p.op, "shape": p.shape_text, "calls": p.calls, "time_from": p.time_from,
                           "replay_us": p.replay_us_per_call, "spread": p.replay_spread,
                           "recorded_us_per_call": p.recorded_us / p.calls, "share": p.share,
                           "eager_us": eager.get(p.signature)} for p in top]}))
