"""Host cost of a chain's route: at its module's forward against placeholders at every step (issue 32).

For each chain capture finds in a bundled example, a stand-in kernel (one zero-fill launch per
output, the cheapest entry a kernel can have) is installed twice: at the modules the chain is
exactly (fused.module_routes: one module's forward, or a sequence of modules), and through the
placeholders at its steps. apply's
routing measure (integrate/overhead.py: bursts of 200 calls, medians of 7 rounds) gives each
route's host time per call against the entry called directly. The stand-in makes the ratio the
worst case: a real kernel's direct call only adds to both sides.

    PYTHONPATH=src python bench/issue32_routing.py --spec example:gemma_decoder --dtype bf16 --out DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from kernforge.backends import get_backend
from kernforge.capture.chains import find_chains
from kernforge.capture.recorder import ModuleTracker, Recorder
from kernforge.integrate import overhead
from kernforge.models import load_model
from kernforge.models.options import ModelOptions
from kernforge.runtime import kernels, router


def chains_of(loaded) -> list:
    recorder = Recorder()
    with ModuleTracker(loaded.module, recorder), recorder, torch.no_grad():
        recorder.mark_returned(loaded.module(*loaded.inputs))
    return find_chains(recorder.calls, recorder.returned_ids, recorder.module_calls)


def _zero_kernel():
    """On a GPU the stand-in launches one Triton kernel per output (what a searched chain's
    entry does, so that native dispatch replays it); on the CPU it is zero_()."""
    import triton
    import triton.language as tl

    @triton.jit
    def zero(out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.zeros([BLOCK], dtype=out_ptr.dtype.element_ty), mask=offsets < n)

    def launch(out: torch.Tensor) -> torch.Tensor:
        n = out.numel()
        zero[(triton.cdiv(n, 1024),)](out, n, BLOCK=1024)
        return out
    return launch


def stand_in(chain, device: torch.device, k: int) -> router.KernelSpec:
    metas = chain.output_metas
    fill = _zero_kernel() if device.type == "cuda" else torch.Tensor.zero_

    def entry(*_inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(fill(torch.empty_strided(m["shape"], m["stride"], dtype=kernels.dtype_named(m["dtype"]),
                                              device=device)) for m in metas)
    name = f"bench{k}_" + "".join(ch if ch.isalnum() else "_" for ch in chain.op)[:60]  # one custom op each
    backend = "triton" if device.type == "cuda" else "cpu"
    return router.KernelSpec(name=name, op=chain.op, args=chain.input_metas, outputs=metas, backend=backend,
                             loading=get_backend(backend).loading, entry=entry, devices=frozenset({device}),
                             chain=chain.to_json())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="example:gemma_decoder")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--scale", default="full")
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--out", default="bench/results/issue32_routing")
    args = ap.parse_args()
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")  # the guards match an index
    loaded = load_model(args.spec, device, ModelOptions(dtype=args.dtype, scale=args.scale))
    chains = chains_of(loaded)
    rows = []
    for k, chain in enumerate(chains[:args.top]):
        spec = stand_in(chain, device, k)
        row = {"chain": chain.op, "steps": len(chain.steps), "instances": len(chain.instances),
               "module_class": (chain.module or {}).get("class"), "module_instances": len((chain.module or {}).get("names", []))}
        for via, model in (("module", loaded.module), ("placeholders", None)):
            if via == "module" and not (chain.module or chain.modules):  # one module's forward, or a sequence's
                continue
            try:
                row[via] = overhead.measure(spec, [spec], device, model).to_json()
            except RuntimeError as e:  # a route the proved inputs never took: reported, not fatal
                row[via] = {"error": str(e)}
        rows.append(row)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    info = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "torch": torch.__version__,
            "spec": args.spec, "dtype": args.dtype, "scale": args.scale}
    native = "" if router.dispatch.enabled() else "_python"
    (out / f"routing_{args.spec.split(':')[-1]}_{args.dtype}{native}.json").write_text(json.dumps({**info, "rows": rows}, indent=1))
    print(f"{info}")
    print(f"{'chain':48} {'steps':>5} {'via':>12} {'direct us':>10} {'routed us':>10} {'over us':>8} {'ratio':>6} "
          f"{'miss over us':>12}")
    for r in rows:
        for via in ("module", "placeholders"):
            shown = r[via]["via"] if via in r and "via" in r[via] else via  # module, or modules (a sequence)
            if via in r and "error" in r[via]:
                print(f"{r['chain'][:48]:48} {r['steps']:5d} {via:>12} {r[via]['error']}")
            elif via in r:
                c = r[via]
                print(f"{r['chain'][:48]:48} {r['steps']:5d} {shown:>12} {c['direct_us']:10.1f} {c['routed_hit_us']:10.1f} "
                      f"{c['routed_hit_us'] - c['direct_us']:8.1f} {c['routed_hit_us'] / c['direct_us']:6.2f} "
                      f"{c['routed_miss_us'] - c['original_us']:12.1f} aten {c['aten_us']:.1f} us, native {c['native']}")


if __name__ == "__main__":
    main()
