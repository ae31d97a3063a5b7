"""Every chain task's first candidate forced into the model, winners or not: are the kernels taken
at every call they should be, and is the model's output what it was? (A run's winners are what
`kernforge apply` installs; this checks the routing of chains no search has made faster yet.)

    PYTHONPATH=src python bench/forced_chains.py RUN_DIR example:resnet50 --scale small

Prints each chain's kernel calls and fallbacks in one forward, the patched output's largest
difference from eager's and both against the model in float64, and one timing of each (20 calls,
host clock: a sanity figure, not a measurement apply would report).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from kernforge.integrate.install import Winner, build_spec
from kernforge.models.loader import load_model
from kernforge.models.options import ModelOptions
from kernforge.runtime import router
from kernforge.search.runs import read_run


def first_candidates(run_dir: Path, build_dir: Path, device: torch.device) -> list[router.KernelSpec]:
    run = read_run(run_dir)
    specs = []
    for record in run.tasks:
        task = record.task
        node = next((n for n in record.outcome.nodes if n.node_id == "n0000"), None)
        if not task.chain or node is None or node.result.status != "ok":
            continue
        winner = Winner(task_id=task.task_id, node_id=node.node_id, op=task.op, signature=task.signature,
                        args=task.args, outputs=task.outputs, source=run.source_of(task.task_id, node),
                        backend=run.backend, speedup_vs_eager=1.0, p50_ms=0.0, eager_p50_ms=0.0,
                        share=task.share, chain=task.chain)
        specs.append(build_spec(winner, build_dir, frozenset({device})))
    return specs


def timed(model: torch.nn.Module, inputs: tuple, device: torch.device, calls: int = 20) -> float:
    with torch.no_grad():
        model(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            model(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("spec")
    parser.add_argument("--scale", default="full")
    parser.add_argument("--batch-size", type=int, default=None)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loaded = load_model(args.spec, device, ModelOptions(scale=args.scale, batch_size=args.batch_size))
    model, inputs = loaded.module, loaded.inputs
    specs = first_candidates(args.run_dir, args.run_dir / "integrate" / "forced", device)
    with torch.no_grad():
        expected = model(*inputs)
        wide = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        double = model.double()(*wide)
        model.to(expected.dtype)
    eager_ms = timed(model, inputs, device)
    installation = router.install(specs, model)
    try:
        with torch.no_grad():
            got = model(*inputs)
        counts = {op: (c.kernel, c.fallback) for op, c in installation.counts.items() if op.startswith("chain:")}
        patched_ms = timed(model, inputs, device)
    finally:
        installation.remove()
    print(f"{len(specs)} chain kernels forced in: {sorted(s.op for s in specs)}")
    for op, (kernel, fallback) in sorted(counts.items()):
        print(f"  {op}: {kernel} kernel calls, {fallback} fallbacks in one forward")
    print(f"largest |patched - eager| {float((got - expected).abs().max()):.3g}; against float64: eager "
          f"{float((expected.double() - double).abs().max()):.3g}, patched {float((got.double() - double).abs().max()):.3g}")
    print(f"eager {eager_ms:.2f} ms, patched {patched_ms:.2f} ms a forward (20 calls each, once)")


if __name__ == "__main__":
    main()
