"""Native dispatch on a GPU (issue 32, part 1): a Triton kernel's host cost per call routed in C++
against the Python router, the ATen call it replaces, and a CUDA graph's capture of the route.

A row softmax in Triton stands for a searched kernel (what is measured is the route, not the
kernel: its launch is the same either way). apply's routing measure (integrate/overhead.py:
bursts of 200 calls, medians of 7 rounds) times the ATen op unpatched, the kernel's entries
called directly (C++ and Python), a routed hit and a routed miss, with native dispatch on, then
with the Python router alone.

    PYTHONPATH=src python bench/issue32_native.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import tempfile
import textwrap
from pathlib import Path

import torch

from kernforge.integrate import overhead
from kernforge.runtime import dispatch, router

KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_rows(x_ptr, y_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def kf_forward(x, dim, half_to_float):
    y = torch.empty_like(x)
    n = x.shape[-1]
    _softmax_rows[(x.numel() // n,)](x, y, n, n, BLOCK=triton.next_power_of_2(n), num_warps=4)
    return y
'''


def softmax_spec(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, folder: Path,
                 native: bool) -> router.KernelSpec:
    path = folder / "softmax_triton.py"
    path.write_text(textwrap.dedent(KERNEL))
    stride = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        stride[i] = stride[i + 1] * shape[i + 1]
    meta = {"shape": list(shape), "stride": stride, "dtype": str(dtype), "device": device.type}
    spec = router.KernelSpec(name=f"bench_softmax_{'native' if native else 'python'}_{dtype}".replace("torch.", ""),
                             op="aten::_softmax.default", args=[meta, -1, False], outputs=[meta], backend="triton",
                             entry=router.load_entry("triton", path, [meta]), devices=frozenset({device}))
    if not native:
        spec.native_why = "bench: the Python router alone"
    return spec


def graph_check(spec: router.KernelSpec, device: torch.device) -> dict:
    """The routed op captured in a CUDA graph and replayed on new values: right, and taken."""
    args, kwargs = overhead.proved_inputs(spec, device)
    x = args[0]
    op = torch.ops.aten._softmax.default
    installation = router.install([spec])
    try:
        with torch.no_grad():
            op(x, -1, False)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                y = op(x, -1, False)
            x.copy_(torch.randn_like(x))
            graph.replay()
            torch.cuda.synchronize()
            err = (y.float() - torch.softmax(x.float(), -1)).abs().max().item()
        return {"captured": True, "max_abs_err": err, "kernel_calls": installation.counts[spec.op].kernel}
    except Exception as e:  # noqa: BLE001 - reported
        return {"captured": False, "error": f"{type(e).__name__}: {e}"}
    finally:
        installation.remove()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/issue32_native")
    args = ap.parse_args()
    device = torch.device("cuda", 0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape, dtype in (((4096, 1024), torch.float32), ((8, 2048, 256), torch.bfloat16)):
            row = {"shape": list(shape), "dtype": str(dtype)}
            for native in (True, False):
                spec = softmax_spec(shape, dtype, device, Path(tmp), native)
                router.prepare_native(spec)
                row["native_why" if native else "python_why"] = spec.native_why
                row["native" if native else "python"] = overhead.measure(spec, [spec], device).to_json()
                if native:
                    row["graph"] = graph_check(spec, device)
            rows.append(row)
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "native_built": dispatch.native_module()
            is not None, "why_not": dispatch.why_not_native()}
    (out / "native_routing.json").write_text(json.dumps({**info, "rows": rows}, indent=1))
    print(info)
    print(f"{'shape':>16} {'dtype':>9} {'route':>7} {'aten us':>8} {'direct':>7} {'py direct':>9} {'hit us':>7} "
          f"{'hit/aten':>8} {'miss +us':>8}")
    for r in rows:
        for route in ("native", "python"):
            c = r[route]
            print(f"{str(r['shape']):>16} {r['dtype'][6:]:>9} {route:>7} {c['aten_us']:8.1f} {c['direct_us']:7.1f} "
                  f"{(c['python_direct_us'] or c['direct_us']):9.1f} {c['routed_hit_us']:7.1f} {c['hit_vs_aten']:8.2f} "
                  f"{c['miss_overhead_us']:+8.1f}  via native: {c['native']}")
        print(f"  native entry: {r['native_why'] or 'made'}; CUDA graph: {r['graph']}")


if __name__ == "__main__":
    main()
