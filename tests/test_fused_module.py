"""A chain that is exactly one module's forward, installed as that forward (integrate/fused.py's
module routes), on the CPU: one guarded call where placeholders would take one per step.

The chain is found by capture in a small model (find_chains with the pass's module calls); the
installed "kernel" is the chain's float64 replay, rounded and counted, so that these tests see the
routing, not a kernel's speed.
"""

from __future__ import annotations

import pytest
import torch
from test_fused_install import _chains_of as chains_of
from test_fused_install import _spec as chain_spec  # the chain's float64 replay, counted
from torch import nn

from kernforge.integrate import runtime

pytestmark = pytest.mark.unit



class RMSNorm(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class OtherNorm(RMSNorm):
    """Same computation, another class: a model changed since its run."""


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 32), RMSNorm(32), nn.Linear(32, 32), RMSNorm(32)).eval()


def captured(net: nn.Module, x: torch.Tensor):
    (chain,) = [c for c in chains_of(net, x) if c.module]
    return chain


@pytest.fixture
def case():
    net, x = model(), torch.randn(4, 32)
    calls: list[int] = []
    return net, x, chain_spec(captured(net, x), "chain_rms_norm_test", calls), calls


def test_capture_finds_each_norm_module_to_be_the_chain(case):
    net, _, spec, _ = case
    boundary = spec.chain["module"]
    assert boundary["class"].endswith(".RMSNorm") and boundary["names"] == ["1", "3"]
    assert boundary["inputs"] == [["arg", 0], ["param", "weight"]] and boundary["instances"] == 2


def test_the_module_runs_the_kernel_in_one_call_and_the_model_matches(case):
    net, x, spec, calls = case
    with torch.no_grad():
        expected = net(x)
    installation = runtime.install([spec], net)
    try:
        assert all("forward" in net[i].__dict__ for i in (1, 3))
        assert installation.routed == []  # every instance held by a module: no placeholder routers
        with torch.no_grad():
            got = net(x)
    finally:
        installation.remove()
    assert len(calls) == 2 and installation.counts[spec.op].kernel == 2
    torch.testing.assert_close(got, expected)
    assert not any("forward" in m.__dict__ for m in net.modules())  # removed: the class's forward again
    with torch.no_grad():
        assert torch.equal(net(x), expected)


def test_other_shapes_or_a_gradient_fall_back_bit_exact(case):
    net, _, spec, calls = case
    other = torch.randn(3, 32)
    with torch.no_grad():
        expected = net(other)
    installation = runtime.install([spec], net)
    try:
        with torch.no_grad():
            got = net(other)
        wanting = torch.randn(4, 32, requires_grad=True)
        net(wanting).sum().backward()  # the module's own forward, with its graph
    finally:
        installation.remove()
    assert calls == [] and torch.equal(got, expected)
    assert installation.counts[spec.op].fallback >= 2 and wanting.grad is not None


def test_a_module_of_another_class_at_that_name_is_left_alone(case):
    net, x, spec, calls = case
    changed = OtherNorm(32)
    changed.weight = net[3].weight
    net[3] = changed
    installation = runtime.install([spec], net)
    try:
        assert "forward" in net[1].__dict__ and "forward" not in net[3].__dict__
        assert installation.routed  # the instance no module holds now: placeholders as elsewhere
    finally:
        installation.remove()
