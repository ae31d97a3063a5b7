"""Host cost of a chain installed at its module's forward, against its C++ entry called directly (issue 32).

A Gemma-3 RMSNorm (transformers' Gemma3RMSNorm: bf16 in, float math, 10 ATen steps) is captured
as a chain at its module, and a hand-written C kernel for it is built by the cpu backend and
installed (router.install with the model), so that the module's call goes through the module
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

`--case gn-silu`: a chain at a sequence of modules, diffusers' ResnetBlock2D's
`h = self.nonlinearity(self.norm1(x))` (GroupNorm, then the block's SiLU module), with a C kernel
for group norm + SiLU, float32 (1, --channels, --hw, --hw) in 4 groups. Each round times the pair's
call `nonlinearity(norm1(x))`:

- eager:        nothing installed (the two modules' own forwards);
- native:       the kernel's C++ entry on (x, weight, bias), no guard;
- pair:         installed at the modules (router.install with the model): the GroupNorm's call
                returns a value not made yet, the SiLU's call runs the kernel;
- placeholders: installed without the model: the group norm's ATen call is routed and returns a
                placeholder, the SiLU's ATen call on it runs the kernel.

    PYTHONPATH=src python bench/module_route_overhead.py --case gn-silu [--channels 8 --hw 4 --burst 1000 --rounds 15 --threads 1]
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

from kernforge.backends import cpu, get_backend
from kernforge.capture.chains import find_chains
from kernforge.capture.recorder import ModuleTracker, Recorder
from kernforge.integrate import overhead
from kernforge.runtime import dispatch, router

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


GN_SILU_KERNEL = cpu.C_PRELUDE + r"""
#include <math.h>
/* y = silu(group_norm(x, GROUPS, w, b, EPS)) over float32 NCHW, contiguous; statistics in float */
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 3 || n_out != 1 || in[0].dtype != KF_F32) return 1;
    const int64_t n = in[0].sizes[0], c = in[0].sizes[1];
    int64_t hw = 1;
    for (int64_t d = 2; d < in[0].ndim; ++d) hw *= in[0].sizes[d];
    const int64_t cg = c / GROUPS, span = cg * hw;
    const float *x = (const float *)in[0].data, *w = (const float *)in[1].data, *b = (const float *)in[2].data;
    float *y = (float *)out[0].data;
    for (int64_t i = 0; i < n * GROUPS; ++i) {
        const float *xs = x + i * span;
        float *ys = y + i * span;
        float s = 0.0f, ss = 0.0f;
        for (int64_t k = 0; k < span; ++k) s += xs[k];
        const float mean = s / span;
        for (int64_t k = 0; k < span; ++k) { const float d = xs[k] - mean; ss += d * d; }
        const float rstd = 1.0f / sqrtf(ss / span + EPS);
        for (int64_t cc = 0; cc < cg; ++cc) {
            const int64_t ch = (i % GROUPS) * cg + cc;
            const float a = w[ch] * rstd, shift = b[ch] - mean * a;
            for (int64_t k = 0; k < hw; ++k) {
                const float v = xs[cc * hw + k] * a + shift;
                ys[cc * hw + k] = v / (1.0f + expf(-v));
            }
        }
    }
    return 0;
}
"""


class ResnetHalf(nn.Module):
    """The first half of diffusers' ResnetBlock2D: norm1, the shared SiLU, conv1."""

    def __init__(self, channels: int, groups: int = 8):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, channels)
        self.nonlinearity = nn.SiLU()
        self.conv1 = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        h = self.nonlinearity(h)
        return self.conv1(h)


def chain_of(model: nn.Module, x: torch.Tensor) -> Any:
    recorder = Recorder()
    with ModuleTracker(model, recorder), recorder, torch.no_grad():
        recorder.mark_returned(model(x))
    (chain,) = [c for c in find_chains(recorder.calls, recorder.returned_ids, recorder.module_calls)
                if c.module or c.modules]
    return chain


def c_spec(chain: Any, eps: float, build_dir: Path, text: str = KERNEL, groups: int = 0) -> router.KernelSpec:
    """The chain's spec with a C kernel above, built as install.build_spec builds a C winner."""
    source = build_dir / "kernel.c"
    source.write_text(text.replace("EPS", f"{eps!r}f").replace("GROUPS", str(groups)))
    library = cpu.build(source, build_dir, chain.output_metas).library
    loading = get_backend("cpu").loading
    return router.KernelSpec(name=router.kernel_name(chain.op, source.read_bytes()), op=chain.op,
                             args=chain.input_metas, outputs=chain.output_metas, backend="cpu", loading=loading,
                             entry=router.load_entry(loading, library, chain.output_metas), devices=CPU,
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
    parser.add_argument("--case", choices=["rms-norm", "gn-silu"], default="rms-norm",
                        help="rms-norm: a chain at one module; gn-silu: at a GroupNorm then a SiLU module")
    # small, so that the kernel's own work (~1 us) leaves the routes' host cost to show
    parser.add_argument("--channels", type=int, default=8, help="gn-silu: channels of x (1, C, HW, HW)")
    parser.add_argument("--hw", type=int, default=4, help="gn-silu: height and width of x")
    # on a host other jobs load, ATen's two OpenMP threads made the eager group norm 0.05-14 ms a call
    parser.add_argument("--threads", type=int, default=0, help="torch's threads (0: torch's default)")
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    if opts.case == "gn-silu":
        gn_silu(opts)
        return

    torch.manual_seed(0)
    norm = GemmaRMSNorm(opts.cols)
    nn.init.normal_(norm.weight, std=0.1)
    model = nn.Sequential(norm).to(torch.bfloat16).eval()
    x = torch.randn(opts.rows, opts.cols, dtype=torch.bfloat16)
    chain = chain_of(model, x)
    with tempfile.TemporaryDirectory(prefix="kf_route_") as scratch:
        spec = c_spec(chain, norm.eps, Path(scratch))
        router.prepare_native(spec)
        if spec.native is None:
            raise SystemExit(f"no native entry here: {spec.native_why}")
        guarded = dispatch.guarded_entry(spec, router.ALIGNMENT)
        weight = norm.weight
        calls = {"eager": lambda: norm(x), "native": lambda: spec.native(x, weight),
                 "guarded": lambda: guarded(x, weight)}
        samples: dict[str, list[float]] = {name: [] for name in [*calls, "routed", "hooked", "op native",
                                                                 "op python"]}
        with torch.no_grad():
            expected = norm(x)
            for _ in range(opts.rounds):
                for name, call in calls.items():
                    samples[name].append(burst_us(call, opts.burst))
                installation = router.install([spec], model)
                try:
                    samples["routed"].append(burst_us(lambda: norm(x), opts.burst))
                    got = norm(x)
                    hook = norm.register_forward_pre_hook(lambda _module, _args: None)
                    samples["hooked"].append(burst_us(lambda: norm(x), opts.burst))
                    hook.remove()
                    counts = installation.counts[spec.op]
                    assert counts.kernel >= 2 * opts.burst and counts.fallback == 0, counts
                    # the custom op compiled code calls: its C++ router and entry, then its Python
                    # implementation alone (the native registration taken out)
                    custom = router.resolve(f"kernforge::{spec.name}")  # defined by install
                    samples["op native"].append(burst_us(lambda: custom(x, weight), opts.burst))
                    installation.native_custom_ops[spec.name].remove()
                    samples["op python"].append(burst_us(lambda: custom(x, weight), opts.burst))
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
    for name in ["eager", "native", "guarded", "routed", "hooked", "op native", "op python"]:
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


def gn_silu(opts: argparse.Namespace) -> None:
    """The pair route against the placeholders and the kernel's own entry (--case gn-silu)."""
    torch.manual_seed(0)
    model = ResnetHalf(opts.channels, groups=4).eval()
    nn.init.normal_(model.norm1.weight, std=0.5)
    nn.init.normal_(model.norm1.bias, std=0.5)
    norm, act = model.norm1, model.nonlinearity
    x = torch.randn(1, opts.channels, opts.hw, opts.hw)
    chain = chain_of(model, x)
    assert chain.modules and not chain.module, "capture did not mark the pair"
    with tempfile.TemporaryDirectory(prefix="kf_route_") as scratch:
        spec = c_spec(chain, norm.eps, Path(scratch), GN_SILU_KERNEL, norm.num_groups)
        router.prepare_native(spec)
        if spec.native is None:
            raise SystemExit(f"no native entry here: {spec.native_why}")
        weight, bias = norm.weight, norm.bias

        def pair() -> torch.Tensor:
            return act(norm(x))
        kinds = {"eager": None, "native": None, "pair": model, "placeholders": None}
        samples: dict[str, list[float]] = {name: [] for name in kinds}
        got: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            expected = pair()
            for _ in range(opts.rounds):
                samples["eager"].append(burst_us(pair, opts.burst))
                samples["native"].append(burst_us(lambda: spec.native(x, weight, bias), opts.burst))
                for name in ("pair", "placeholders"):
                    installation = router.install([spec], kinds[name])
                    try:
                        samples[name].append(burst_us(pair, opts.burst))
                        got[name] = pair()
                        counts = installation.counts[spec.op]
                        assert counts.kernel >= opts.burst and counts.fallback == 0, (name, counts)
                    finally:
                        installation.remove()
            measured = {"pair": overhead.measure(spec, [spec], torch.device("cpu"), model),
                        "placeholders": overhead.measure(spec, [spec], torch.device("cpu"))}

    m = {name: statistics.median(v) for name, v in samples.items()}
    print(f"# module route overhead: {chain.op} at GroupNorm then SiLU (two modules), x 1x{opts.channels}x{opts.hw}x{opts.hw} "
          f"float32, {norm.num_groups} groups, C kernel")
    print(f"# {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, Python {platform.python_version()}; "
          f"bursts of {opts.burst}, median (min-max) of {opts.rounds} rounds")
    for name in ("pair", "placeholders"):
        print(f"# max |{name} - eager| = {(got[name] - expected).abs().max().item():.3g}")
    for name in kinds:
        print(f"{name:<13} {m[name]:7.2f} us  ({min(samples[name]):.2f}-{max(samples[name]):.2f})")
    for name in ("pair", "placeholders"):
        print(f"{name} / native  {m[name] / m['native']:.2f}x  (+{m[name] - m['native']:.2f} us)")
    print(f"eager / pair  {m['eager'] / m['pair']:.2f}x")
    for name, cost in measured.items():
        print(f"apply's routing measure, {name} (overhead.measure, bursts of {cost.fewest_burst_calls}-"
              f"{overhead.BURST} calls, median of {overhead.REPEATS}): via {cost.via}, native {cost.native}, "
              f"routed hit {cost.routed_hit_us:.2f} us, direct {cost.direct_us:.2f} us "
              f"({cost.routed_hit_us / cost.direct_us:.2f}x), unpatched {cost.aten_us:.2f} us, "
              f"a miss +{cost.miss_overhead_us:.2f} us")


if __name__ == "__main__":
    main()
