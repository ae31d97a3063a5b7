"""Host cost of a chain installed at its module's forward, against its C++ entry called directly (issue 32).

A Gemma-3 RMSNorm (transformers' Gemma3RMSNorm: bf16 in, float math, 10 ATen steps) is captured
as a chain at its module, and a hand-written C kernel for it is built by the cpu backend and
installed (runtime.install with the model), so that the module's call goes through the module
route (fused.py) to the kernel's guarded C++ entry (dispatch.guarded_entry). Each round times,
in bursts, on the proved input:

- eager:   the module with nothing installed (its own forward, 10 ATen calls);
- native:  the kernel's C++ entry on (x, weight), no guard (apply's "direct" call);
- guarded: the same behind its C++ guard, as the module route calls it;
- routed:  the module with the chain installed: its call, the route, the guarded entry;
- hooked:  the same with a no-op forward pre-hook on the module: nn.Module's call runs the hook,
           then the route's forward.

The shape is small on purpose (4x256): the kernel's own work is a few microseconds, so the
route's Python is what the ratio shows. apply's routing measure (overhead.measure) is run on
the same spec and printed beside it.

    PYTHONPATH=src python bench/module_route_overhead.py [--rows 4 --cols 256 --burst 1000 --rounds 15]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from kernforge.backends import cpu
from kernforge.capture.chains import find_chains
from kernforge.capture.recorder import ModuleTracker, Recorder
from kernforge.integrate import dispatch, overhead, runtime

CPU = frozenset({torch.device("cpu")})


class GemmaRMSNorm(nn.Module):
    """transformers' Gemma3RMSNorm, as the Gemma decoder example runs it."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


KERNEL = cpu.C_PRELUDE + r"""
#include <math.h>
#include <string.h>
/* y = bf16(x * rsqrt(mean(x^2) + eps) * (1 + w)) per row, in float; bf16 stored as uint16_t */
static inline float ld(const uint16_t *p, int64_t i) {
    uint32_t u = (uint32_t)p[i] << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline uint16_t st(float v) {  /* round to nearest even */
    uint32_t u; memcpy(&u, &v, 4); u += 0x7fffu + ((u >> 16) & 1u); return (uint16_t)(u >> 16);
}

int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 2 || n_out != 1 || in[0].dtype != KF_BF16 || in[1].dtype != KF_BF16) return 1;
    const int64_t cols = in[0].sizes[in[0].ndim - 1], rows = in[0].sizes[0];
    const uint16_t *x = (const uint16_t *)in[0].data, *w = (const uint16_t *)in[1].data;
    uint16_t *y = (uint16_t *)out[0].data;
    for (int64_t r = 0; r < rows; ++r) {
        float ss = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { float v = ld(x + r * cols, c); ss += v * v; }
        const float rstd = 1.0f / sqrtf(ss / cols + EPS);
        for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = st(ld(x + r * cols, c) * rstd * (1.0f + ld(w, c)));
    }
    return 0;
}
"""


def chain_of(model: nn.Module, x: torch.Tensor) -> Any:
    recorder = Recorder()
    with ModuleTracker(model, recorder), recorder, torch.no_grad():
        recorder.mark_returned(model(x))
    (chain,) = [c for c in find_chains(recorder.calls, recorder.returned_ids, recorder.module_calls) if c.module]
    return chain


def c_spec(chain: Any, eps: float, build_dir: Path) -> runtime.KernelSpec:
    """The chain's spec with the C kernel above, built as install.build_spec builds a C winner."""
    source = build_dir / "gemma_rms_norm.c"
    source.write_text(KERNEL.replace("EPS", f"{eps!r}f"))
    library = cpu.build(source, build_dir, chain.output_metas).library
    return runtime.KernelSpec(name=runtime.kernel_name(chain.op, source.read_bytes()), op=chain.op,
                              args=chain.input_metas, outputs=chain.output_metas, backend="cpu",
                              entry=runtime.load_entry("cpu", library, chain.output_metas), devices=CPU,
                              chain=chain.to_json(), library=library)


def burst_us(call: Callable[[], Any], n: int) -> float:
    for _ in range(20):
        call()
    start = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--cols", type=int, default=256)
    parser.add_argument("--burst", type=int, default=1000, help="calls per timed burst")
    parser.add_argument("--rounds", type=int, default=15, help="rounds, each timing every call once")
    opts = parser.parse_args()

    torch.manual_seed(0)
    norm = GemmaRMSNorm(opts.cols)
    nn.init.normal_(norm.weight, std=0.1)
    model = nn.Sequential(norm).to(torch.bfloat16).eval()
    x = torch.randn(opts.rows, opts.cols, dtype=torch.bfloat16)
    chain = chain_of(model, x)
    with tempfile.TemporaryDirectory(prefix="kf_route_") as scratch:
        spec = c_spec(chain, norm.eps, Path(scratch))
        runtime.prepare_native(spec)
        if spec.native is None:
            raise SystemExit(f"no native entry here: {spec.native_why}")
        guarded = dispatch.guarded_entry(spec, runtime.ALIGNMENT)
        weight = norm.weight
        calls = {"eager": lambda: norm(x), "native": lambda: spec.native(x, weight),
                 "guarded": lambda: guarded(x, weight)}
        samples: dict[str, list[float]] = {name: [] for name in [*calls, "routed", "hooked"]}
        with torch.no_grad():
            expected = norm(x)
            for _ in range(opts.rounds):
                for name, call in calls.items():
                    samples[name].append(burst_us(call, opts.burst))
                installation = runtime.install([spec], model)
                try:
                    samples["routed"].append(burst_us(lambda: norm(x), opts.burst))
                    got = norm(x)
                    hook = norm.register_forward_pre_hook(lambda _module, _args: None)
                    samples["hooked"].append(burst_us(lambda: norm(x), opts.burst))
                    hook.remove()
                    counts = installation.counts[spec.op]
                    assert counts.kernel >= 2 * opts.burst and counts.fallback == 0, counts
                finally:
                    installation.remove()
            apply_measure = overhead.measure(spec, [spec], torch.device("cpu"), model)

    m = {name: statistics.median(v) for name, v in samples.items()}
    spread = {name: (min(v), max(v)) for name, v in samples.items()}
    print(f"# module route overhead: {chain.op} ({len(chain.steps)} steps), x {opts.rows}x{opts.cols} bf16, "
          f"C kernel at GemmaRMSNorm's forward")
    print(f"# {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, Python {platform.python_version()}; "
          f"bursts of {opts.burst}, median (min-max) of {opts.rounds} rounds")
    print(f"# max |routed - eager| = {(got.float() - expected.float()).abs().max().item():.3g} (bf16 outputs)")
    for name in ["eager", "native", "guarded", "routed", "hooked"]:
        lo, hi = spread[name]
        print(f"{name:<8} {m[name]:7.2f} us  ({lo:.2f}-{hi:.2f})")
    print(f"routed / native   {m['routed'] / m['native']:.2f}x  (+{m['routed'] - m['native']:.2f} us)")
    print(f"routed / guarded  {m['routed'] / m['guarded']:.2f}x  (+{m['routed'] - m['guarded']:.2f} us)")
    print(f"eager / routed    {m['eager'] / m['routed']:.2f}x")
    cost = apply_measure
    print(f"apply's routing measure (overhead.measure, bursts of {cost.fewest_burst_calls}-{overhead.BURST} calls, median of {overhead.REPEATS}): "
          f"via {cost.via}, native {cost.native}, routed hit {cost.routed_hit_us:.2f} us, "
          f"direct {cost.direct_us:.2f} us "
          f"({cost.routed_hit_us / cost.direct_us:.2f}x), the ATen calls {cost.aten_us:.2f} us, "
          f"a miss +{cost.miss_overhead_us:.2f} us")


if __name__ == "__main__":
    main()
