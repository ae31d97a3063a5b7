"""Issue 3's GPU check: capture the bundled seed workloads at full size and show what they prove.

Run on the H200 from the repository root (see bench/h200_capture.sh):
    PYTHONPATH=src python3 bench/capture_check.py OUT_DIR
Prints one table last; writes each capture's profile as JSON under OUT_DIR.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from kernforge.capture import Capture, capture_model
from kernforge.models import ModelOptions, load_model, run_forward

CASES = [
    ("example:resnet50", ModelOptions(batch_size=32)),
    ("example:resnet50", ModelOptions(batch_size=32, dtype="bf16")),
    ("example:gemma_decoder", ModelOptions(dtype="bf16")),
    ("example:qwen_moe", ModelOptions(dtype="bf16")),
    ("example:sd35_vae_decoder", ModelOptions(dtype="bf16")),
]


def first_shape(profile) -> list[int]:
    tensors = [a for a in profile.args if isinstance(a, dict) and "shape" in a]
    return tensors[0]["shape"] if tensors else []


def evidence(spec: str, capture: Capture) -> str:
    ranked = capture.ranked()
    ops = {p.op for p in ranked}
    if "resnet50" in spec:
        pools = [p for p in ranked if p.op in ("aten::mean.dim", "aten::adaptive_avg_pool2d.default",
                                               "aten::_adaptive_avg_pool2d.default")
                 and first_shape(p)[1:] == [2048, 7, 7]]
        return "; ".join(f"{p.op} {first_shape(p)} rank {ranked.index(p) + 1} {p.share:.2%}" for p in pools)
    if "gemma" in spec:
        soft = [p for p in ranked if p.op == "aten::_softmax.default"]
        norm = sorted(o for o in ops if o.split("::")[1].split(".")[0] in ("pow", "mean", "rsqrt"))
        return (f"softmax {first_shape(soft[0]) if soft else 'MISSING'} {sum(p.share for p in soft):.2%}; "
                f"RMSNorm pieces {norm}")
    if "qwen" in spec:
        soft = [p for p in ranked if p.op == "aten::_softmax.default"]
        router = [p for p in soft if first_shape(p)[-1] == 128]
        return f"router softmax {[first_shape(p) for p in router]} {sum(p.share for p in router):.2%}"
    norms = [p for p in ranked if p.op == "aten::native_group_norm.default"]
    return f"group_norm: {len(norms)} signatures, {sum(p.share for p in norms):.1%}, e.g. " + \
        ", ".join(str(first_shape(p)) for p in norms[:3])


def cross_check_us(loaded) -> dict[str, float]:
    """The same plain pass summed three ways, to show which one counts each kernel once."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, torch.no_grad():
        loaded.module(*loaded.inputs)
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    events = prof.events()
    return {
        "device_rows_us": sum(e.time_range.elapsed_us() for e in events if e.device_type == cuda),
        "cpu_rows_self_device_us": sum(e.self_device_time_total for e in events if e.device_type != cuda),
        "all_key_averages_us": sum(e.self_device_time_total for e in prof.key_averages()),
    }


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec, opts in CASES:
        started = time.perf_counter()
        loaded = load_model(spec, torch.device("cuda"), opts)
        run_forward(loaded)
        capture = capture_model(loaded, out_dir=None)
        if spec.endswith("resnet50"):
            print(f"{spec} {opts}: cross-check of the kernel total: {cross_check_us(loaded)}")
        name = f"{spec.split(':')[1]}_{opts.dtype or 'fp32'}_bs{opts.batch_size or 'default'}"
        (out_dir / f"capture_{name}.json").write_text(json.dumps(
            {**asdict(capture), "coverage": capture.coverage, "overhead": capture.overhead}, indent=1))
        rows.append((name, capture, evidence(spec, capture), time.perf_counter() - started))
        del loaded
        torch.cuda.empty_cache()
    print(f"{'case':36} {'fwd ms':>8} {'ops ms':>8} {'kernels ms':>10} {'coverage':>8} {'overhead':>8}  evidence")
    for name, c, ev, _ in rows:
        print(f"{name:36} {c.forward_ms:8.3f} {c.total_time_us / 1e3:8.3f} {c.measured_total_us / 1e3:10.3f} "
              f"{c.coverage:8.1%} {c.overhead:7.1f}x  {ev}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/h200"))
