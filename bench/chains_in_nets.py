"""Which fused chains capture finds in torchvision's nets, how each is installed (at its modules,
or through placeholders) and whether the built-in chain family can write its kernel.

    PYTHONPATH=src python bench/chains_in_nets.py [--side 64] [NET ...]     (timm:NAME for a timm net)

One recorded forward per net (eval mode, batch 1, random weights) on the CPU; nothing is timed.
"""

from __future__ import annotations

import argparse
import collections

import torch
import torchvision

from kernforge.capture.chains import find_chains
from kernforge.capture.recorder import ModuleTracker, Recorder
from kernforge.propose.families.chain.lower import lower

NETS = ["resnet50", "resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "regnet_x_400mf",
        "convnext_tiny", "densenet121", "timm:resnet50d", "timm:efficientnet_b0", "timm:mobilenetv3_small_100"]


def net_named(name: str) -> torch.nn.Module:
    if name.startswith("timm:"):
        import timm

        return timm.create_model(name.removeprefix("timm:"), pretrained=False).eval()
    return getattr(torchvision.models, name)().eval()


def chains_of(net: torch.nn.Module, side: int) -> list:
    recorder = Recorder()
    with ModuleTracker(net, recorder), recorder, torch.no_grad():
        recorder.mark_returned(net(torch.randn(1, 3, side, side)))
    return find_chains(recorder.calls, recorder.returned_ids, recorder.module_calls)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("nets", nargs="*", default=NETS)
    parser.add_argument("--side", type=int, default=64)
    args = parser.parse_args()
    print("| net | chain | signatures | instances | installed | built-in kernel |\n|---|---|---|---|---|---|")
    for name in args.nets:
        net = net_named(name)
        rows: dict[tuple[str, str, str], list[int]] = collections.defaultdict(lambda: [0, 0])
        for chain in chains_of(net, args.side):
            where = "modules" if chain.modules else "module" if chain.module else "placeholders"
            program = lower(chain.to_json(), chain.input_metas, chain.output_metas)
            kernel = "yes" if not isinstance(program, str) else f"no: {program[:60]}"
            rows[chain.op, where, kernel][0] += 1
            rows[chain.op, where, kernel][1] += len(chain.instances)
        for (op, where, kernel), (signatures, instances) in sorted(rows.items(), key=lambda r: -r[1][1]):
            print(f"| {name} | {op.removeprefix('chain:')} | {signatures} | {instances} | {where} | {kernel} |")


if __name__ == "__main__":
    main()
