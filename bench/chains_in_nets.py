"""Which fused chains capture finds in torchvision's nets, how each is installed (at its modules,
or through placeholders) and whether a built-in family can write its kernel (on --backend triton).

    PYTHONPATH=src python bench/chains_in_nets.py [--side 64] [--install] [NET ...]
    (timm:NAME for a timm net; any other model spec, e.g. example:sd35_vae_decoder, at --scale small
    with its own inputs, --dtype to cast it)

One recorded forward per net (eval mode, batch 1, random weights) on the CPU; nothing is timed.
--install: then every chain a module or a sequence of modules holds is installed with the model,
its kernel a stand-in that computes the chain's own steps in float64, and one forward says how
many calls took a kernel against the instances capture found, and the output's largest distance
from eager's.
"""

from __future__ import annotations

import argparse
import collections

import torch
import torchvision

from kernforge.backends import get_backend
from kernforge.capture.chains import find_chains
from kernforge.capture.recorder import ModuleTracker, Recorder
from kernforge.propose.builtin import BuiltinProposer
from kernforge.records.task import KernelTask
from kernforge.runtime import kernels, router
from kernforge.tasks import ChainReference

NETS = ["resnet50", "resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "regnet_x_400mf",
        "convnext_tiny", "densenet121", "timm:resnet50d", "timm:efficientnet_b0", "timm:mobilenetv3_small_100"]


def net_named(name: str) -> torch.nn.Module:
    if name.startswith("timm:"):
        import timm

        return timm.create_model(name.removeprefix("timm:"), pretrained=False).eval()
    return getattr(torchvision.models, name)().eval()


def net_and_inputs(name: str, side: int, dtype: str | None) -> tuple[torch.nn.Module, tuple]:
    """The net and one forward's inputs: an image of side x side for torchvision's and timm's
    nets, a model spec's own inputs (small scale) for any other."""
    if name.startswith("timm:") or hasattr(torchvision.models, name):
        return net_named(name), (torch.randn(1, 3, side, side, generator=torch.Generator().manual_seed(0)),)
    from kernforge.models.loader import load_model
    from kernforge.models.options import ModelOptions

    loaded = load_model(name, torch.device("cpu"), ModelOptions(scale="small", dtype=dtype))
    return loaded.module, loaded.inputs


def chains_of(net: torch.nn.Module, inputs: tuple) -> list:
    recorder = Recorder()
    with ModuleTracker(net, recorder), recorder, torch.no_grad():
        recorder.mark_returned(net(*inputs))
    return find_chains(recorder.calls, recorder.returned_ids, recorder.module_calls)


PROPOSER = BuiltinProposer()


def task_of(chain) -> KernelTask:
    """The chain as a search task, for the built-in families' match."""
    return KernelTask(task_id="t0", op=chain.op, signature=chain.signature, args=chain.input_metas,
                      outputs=chain.output_metas, samples=[], share=1.0, gain_if_2x=1.0, time_us=1.0,
                      device="cpu", chain=chain.to_json())


def stand_in(chain, k: int, calls: list[int]) -> router.KernelSpec:
    """The chain as a kernel: its steps in float64, cast to its outputs' dtypes; each call counted."""
    reference = ChainReference(chain.to_json()).in_float64()
    dtypes = [kernels.dtype_named(m["dtype"]) for m in chain.output_metas]

    def entry(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        calls.append(1)
        outs = reference(*[t.double() if t.is_floating_point() else t for t in inputs])
        return tuple(o.to(d) for o, d in zip(outs, dtypes))
    cpu = torch.device("cpu")
    return router.KernelSpec(name=f"nets{k}", op=chain.op, args=chain.input_metas, outputs=chain.output_metas,
                             backend="cpu", loading=get_backend("cpu").loading, entry=entry,
                             devices=frozenset({cpu}), chain=chain.to_json())


def installed(name: str, net: torch.nn.Module, chains: list, inputs: tuple) -> str:
    """One forward with every chain at its modules installed: kernel calls against instances, and
    the output's largest distance from eager's."""
    at_modules = [c for c in chains if c.modules or c.module]
    calls: list[int] = []
    specs = [stand_in(c, k, calls) for k, c in enumerate(at_modules)]
    with torch.no_grad():
        expected = first_tensor(net(*inputs))
        installation = router.install(specs, net)
        try:
            got = first_tensor(net(*inputs))
        finally:
            installation.remove()
    instances = sum(len(c.instances) for c in at_modules)
    return (f"{name}: {len(specs)} chain signatures at modules, {len(calls)} kernel calls of {instances} instances, "
            f"largest |patched - eager| {(got.double() - expected.double()).abs().max().item():.2e}")


def first_tensor(out: object) -> torch.Tensor:
    """A forward's first output tensor (a language model returns a dataclass or a tuple)."""
    if isinstance(out, torch.Tensor):
        return out
    values = out.values() if isinstance(out, dict) else out.to_tuple() if hasattr(out, "to_tuple") else out
    return next(first_tensor(v) for v in values if isinstance(v, (torch.Tensor, tuple, list, dict)) or hasattr(v, "to_tuple"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("nets", nargs="*", default=NETS)
    parser.add_argument("--side", type=int, default=64)
    parser.add_argument("--install", action="store_true")
    parser.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], help="a model spec's dtype (not torchvision's)")
    args = parser.parse_args()
    lines = []
    print("| net | chain | signatures | instances | installed | built-in kernel |\n|---|---|---|---|---|---|")
    for name in args.nets:
        net, inputs = net_and_inputs(name, args.side, args.dtype)
        rows: dict[tuple[str, str, str], list[int]] = collections.defaultdict(lambda: [0, 0])
        chains = chains_of(net, inputs)
        if args.install:
            lines.append(installed(name, net, chains, inputs))
        for chain in chains:
            where = "modules" if chain.modules else "module" if chain.module else "placeholders"
            why = PROPOSER.why_unsupported(task_of(chain), "triton")
            kernel = "yes" if why is None else f"no: {why[:60]}"
            rows[chain.op, where, kernel][0] += 1
            rows[chain.op, where, kernel][1] += len(chain.instances)
        for (op, where, kernel), (signatures, instances) in sorted(rows.items(), key=lambda r: -r[1][1]):
            print(f"| {name} | {op.removeprefix('chain:')} | {signatures} | {instances} | {where} | {kernel} |")
    print("\n".join(["", *lines]) if lines else "")


if __name__ == "__main__":
    main()
