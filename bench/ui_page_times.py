"""How long the dashboard takes to make its pages for a run of N candidates (it reads the run
folder afresh for every request): a copy of a real run's task with its nodes repeated N times.

    .venv/bin/python bench/ui_page_times.py RUN_FOLDER [N ...]   (default N: 10 100 500)
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from kernforge.ui import app as ui_app
from kernforge.ui.app import make_app

ui_app.CACHE_S = 0.0  # every request reads the folder: the cost the cache saves


def grow(run: Path, runs: Path, n: int) -> Path:
    copy = runs / f"{run.name}-{n}"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("samples", "build", "history"))
    task = next((copy / "tasks").iterdir())
    nodes = sorted((task / "nodes").iterdir())
    template = nodes[-1]
    rng = random.Random(0)
    for i in range(len(nodes), n):
        target = task / "nodes" / f"n{i:04d}"
        shutil.copytree(template, target)
        proposal = json.loads((target / "proposal.json").read_text())
        proposal["parent"] = f"n{rng.randrange(i):04d}"
        (target / "proposal.json").write_text(json.dumps(proposal))
    return copy


def timed(client: TestClient, url: str, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        assert client.get(url).status_code == 200, url
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def main() -> None:
    run = Path(sys.argv[1])
    sizes = [int(a) for a in sys.argv[2:]] or [10, 100, 500]
    runs = Path(tempfile.mkdtemp())
    print("nodes  run page ms  task fragment ms  node page ms")
    for n in sizes:
        copy = grow(run, runs, n)
        client = TestClient(make_app(runs))
        task = next((copy / "tasks").iterdir()).name
        base = f"/runs/{copy.name}"
        print(f"{n:5d}  {timed(client, base + '/'):11.1f}  {timed(client, f'{base}/tasks/{task}/fragment'):16.1f}  "
              f"{timed(client, f'{base}/tasks/{task}/nodes/n0001'):12.1f}")
    shutil.rmtree(runs)


if __name__ == "__main__":
    main()
