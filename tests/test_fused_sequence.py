"""A chain that is exactly the forwards of consecutive modules, installed at those modules
(integrate/fused.py, at a sequence of modules), on the CPU: diffusers' ResnetBlock2D's
`h = self.norm1(x); h = self.nonlinearity(h)`, a GroupNorm then the block's SiLU module, which
the block also calls on other tensors.

The chain is found by capture (find_chains with the pass's module calls); the installed "kernel"
is the chain's float64 replay, rounded and counted (test_fused_install's stand-in), so that these
tests see the routing, not a kernel's speed.
"""

from __future__ import annotations

import pytest
import torch
from test_fused_install import _chains_of as chains_of
from test_fused_install import _spec as chain_spec  # the chain's float64 replay, counted
from torch import nn

from kernforge.integrate import runtime

pytestmark = pytest.mark.unit


class Block(nn.Module):
    """ResnetBlock2D's shape of calls: the shared SiLU on the time embedding before the pairs, after
    each GroupNorm, and on the sum after them."""

    def __init__(self, cin: int = 8, cout: int = 8):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(4, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2, self.conv2 = nn.GroupNorm(4, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.proj, self.skip = nn.Linear(16, cout), nn.Conv2d(cin, cout, 1)
        self.nonlinearity = nn.SiLU()

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        t = self.proj(self.nonlinearity(temb))
        h = self.nonlinearity(self.norm1(x))
        h = self.conv1(h)
        h = self.norm2(h)
        h = self.nonlinearity(h)
        h = self.conv2(h) + t[:, :, None, None]
        return self.skip(x) + self.nonlinearity(h)


class ReadsNormBefore(Block):
    """norm1's output also read before the SiLU takes it: the pair must give way."""

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        n = self.norm1(x)
        scale = n.abs().mean()
        h = self.nonlinearity(n) * scale
        return self.conv1(h)


class ReadsNormAfter(Block):
    """norm1's output also read after the SiLU took it: the kernel ran, the value is made apart."""

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = self.norm1(x)
        return self.nonlinearity(n), n + 1


class WritesInput(Block):
    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        n = self.norm1(x)
        x.add_(1)
        return self.nonlinearity(n)


def block(cls: type[Block] = Block, cin: int = 8, cout: int = 8) -> Block:
    torch.manual_seed(0)
    return cls(cin, cout).eval()


def inputs(cin: int = 8, batch: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    return torch.randn(batch, cin, 6, 6), torch.randn(batch, 16)


def specs_of(net: nn.Module, x: torch.Tensor, temb: torch.Tensor, calls: list[int]) -> list[runtime.KernelSpec]:
    """A stand-in kernel for each chain capture found at a sequence of modules."""
    return [chain_spec(c, f"chain_gn_silu_{k}", calls) for k, c in enumerate(chains_of(net, x, temb)) if c.modules]


def run(net: nn.Module, specs: list[runtime.KernelSpec], *args: torch.Tensor) -> tuple[object, runtime.Installation]:
    installation = runtime.install(specs, net)
    try:
        with torch.no_grad():
            return net(*args), installation
    finally:
        installation.remove()


def counts(installation: runtime.Installation, specs: list[runtime.KernelSpec]) -> tuple[int, int]:
    """(kernel calls, fallbacks) of the specs' chains (chains of one op name share their counts)."""
    ops = {s.op for s in specs}
    return sum(installation.counts[op].kernel for op in ops), sum(installation.counts[op].fallback for op in ops)


def test_capture_finds_each_groupnorm_and_the_shared_silu_to_be_the_chain():
    net, (x, temb) = block(), inputs()
    (chain,) = [c for c in chains_of(net, x, temb) if c.modules]
    assert chain.op == "chain:native_group_norm+silu" and chain.module is None
    record = chain.to_json()["modules"]
    assert record["classes"] == ["torch.nn.modules.normalization.GroupNorm", "torch.nn.modules.activation.SiLU"]
    assert record["names"] == [["norm1", "nonlinearity"], ["norm2", "nonlinearity"]] and record["instances"] == 2
    assert record["inputs"] == [["arg", 0], ["param", "weight"], ["param", "bias"]] and record["args"] == 1
    assert record["outputs"] == [[0, 0], [1, 0]]  # the group norm's y, then the SiLU's


def test_a_chain_that_is_one_modules_forward_keeps_its_module_record():
    """A Sequential holding the pair is the chain's one module: today's path, no sequence."""
    net, x = nn.Sequential(nn.GroupNorm(4, 8), nn.SiLU()).eval(), torch.randn(2, 8, 6, 6)
    (chain,) = chains_of(net, x)
    assert chain.module is not None and chain.module["names"] == [""] and chain.modules is None


def test_a_later_modules_parameter_or_a_second_argument_is_no_sequence():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.gain = nn.Parameter(torch.randn(8, 1, 1))

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return h * self.gain

    class Two(nn.Module):
        def forward(self, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return h * y

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.scale, self.two = nn.GroupNorm(4, 8), Scale(), Two()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.two(self.norm(x), x) + self.scale(self.norm(x))

    chains = chains_of(Net().eval(), torch.randn(2, 8, 6, 6))
    assert chains and not any(c.modules for c in chains)
