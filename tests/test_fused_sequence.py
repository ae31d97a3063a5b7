"""A chain that is exactly the forwards of consecutive modules, installed at those modules
(runtime/fused.py, at a sequence of modules), on the CPU: diffusers' ResnetBlock2D's
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
from test_fused_module import _own_state, _same_state
from torch import nn

from kernforge.runtime import fused, router

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


def specs_of(net: nn.Module, x: torch.Tensor, temb: torch.Tensor, calls: list[int]) -> list[router.KernelSpec]:
    """A stand-in kernel for each chain capture found at a sequence of modules."""
    return [chain_spec(c, f"chain_gn_silu_{k}", calls) for k, c in enumerate(chains_of(net, x, temb)) if c.modules]


def run(net: nn.Module, specs: list[router.KernelSpec], *args: torch.Tensor) -> tuple[object, router.Installation]:
    installation = router.install(specs, net)
    try:
        with torch.no_grad():
            return net(*args), installation
    finally:
        installation.remove()


def counts(installation: router.Installation, specs: list[router.KernelSpec]) -> tuple[int, int]:
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


class ScaledResidual(Block):
    """diffusers' ResnetBlock2D's end, `(x + h) / output_scale_factor`: the next block's norm1 reads it."""

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        return (x + super().forward(x, temb)) / 2.0


def test_a_group_norm_heads_its_chain_the_residual_before_it_goes_apart():
    """Two blocks: the first's `(x + h) / 2` feeds the second's norm1. The group norm + SiLU pairs
    are all at their modules (before, the second block's norm1 and SiLU joined the residual's add
    and div, a chain no module holds and no built-in family writes)."""
    torch.manual_seed(0)
    net = nn.Sequential(ScaledResidual(), ScaledResidual()).eval()
    x, temb = inputs()
    chains = chains_of(_TwoBlocks(net), x, temb)
    with_norm = [c for c in chains if "native_group_norm" in c.op]
    assert [c.op for c in with_norm] == ["chain:native_group_norm+silu"], [c.op for c in chains]
    pairs = with_norm[0]
    assert pairs.modules is not None and pairs.modules["instances"] == len(pairs.instances) == 4


class _TwoBlocks(nn.Module):
    def __init__(self, blocks: nn.Sequential):
        super().__init__()
        self.blocks = blocks

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x, temb)
        return x


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


@pytest.mark.parametrize("cout", [8, 12], ids=["one chain, two pairs", "two chains at one SiLU"])
def test_both_pairs_run_the_kernel_and_the_block_matches(cout):
    net, (x, temb) = block(cout=cout), inputs()
    calls: list[int] = []
    specs = specs_of(net, x, temb, calls)
    assert len(specs) == (1 if cout == 8 else 2)
    with torch.no_grad():
        expected = net(x, temb)
    got, installation = run(net, specs, x, temb)
    assert installation.routed == []  # every pair held by its modules: no placeholder routers
    assert counts(installation, specs) == (2, 0) and len(calls) == 2
    assert type(got) is torch.Tensor
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("cout", [8, 12], ids=["one chain", "two chains at one SiLU"])
def test_removal_leaves_both_modules_as_they_were(cout):
    net, (x, temb) = block(cout=cout), inputs()
    specs = specs_of(net, x, temb, [])
    before = {name: _own_state(net.get_submodule(name)) for name in ("norm1", "norm2", "nonlinearity")}
    printed = repr(net)
    with torch.no_grad():
        expected = net(x, temb)
    installation = router.install(specs, net)
    try:
        assert "forward" in net.norm1.__dict__ and "forward" in net.nonlinearity.__dict__
        assert repr(net) == printed
    finally:
        installation.remove()
    assert all(_same_state(net.get_submodule(name), state) for name, state in before.items())
    with torch.no_grad():
        assert torch.equal(net(x, temb), expected)


def test_the_shared_silu_on_any_other_tensor_is_its_own_forward():
    net, (x, temb) = block(), inputs()
    calls: list[int] = []
    (spec,) = specs_of(net, x, temb, calls)
    h = torch.randn(2, 8, 6, 6)
    installation = router.install([spec], net)
    try:
        with torch.no_grad():
            got = net.nonlinearity(h), net.nonlinearity(temb)
    finally:
        installation.remove()
    assert torch.equal(got[0], torch.nn.functional.silu(h)) and torch.equal(got[1], torch.nn.functional.silu(temb))
    assert calls == [] and counts(installation, [spec]) == (0, 0)  # no pair was started: nothing to count


def test_a_hook_that_reads_the_groupnorms_output_makes_it_and_the_block_is_bit_exact():
    net, (x, temb) = block(), inputs()
    calls: list[int] = []
    (spec,) = specs_of(net, x, temb, calls)
    with torch.no_grad():
        expected = net(x, temb)
    seen: list[torch.Tensor] = []
    installation = router.install([spec], net)
    try:
        hooks = [net.get_submodule(n).register_forward_hook(lambda _m, _a, out: seen.append(out.sum()))
                 for n in ("norm1", "norm2")]
        with torch.no_grad():
            got = net(x, temb)
        for hook in hooks:
            hook.remove()
    finally:
        installation.remove()
    assert calls == [] and counts(installation, [spec]) == (0, 2)
    assert torch.equal(got, expected) and len(seen) == 2


def test_a_model_that_reads_the_intermediate_first_falls_back_bit_exact():
    captured, (x, temb) = block(), inputs()
    calls: list[int] = []
    (spec,) = specs_of(captured, x, temb, calls)
    variant = block(ReadsNormBefore)
    with torch.no_grad():
        expected = variant(x, temb)
    got, installation = run(variant, [spec], x, temb)
    assert calls == [] and counts(installation, [spec]) == (0, 1) and torch.equal(got, expected)


def test_a_model_that_reads_the_intermediate_after_the_pair_gets_its_value_made_apart():
    captured, (x, temb) = block(), inputs()
    calls: list[int] = []
    (spec,) = specs_of(captured, x, temb, calls)
    variant = block(ReadsNormAfter)
    with torch.no_grad():
        expected = variant(x, temb)
    (activated, plus_one), installation = run(variant, [spec], x, temb)
    assert len(calls) == 1 and counts(installation, [spec]) == (1, 0)
    torch.testing.assert_close(activated, expected[0])
    assert type(plus_one) is torch.Tensor and torch.equal(plus_one, expected[1])


@pytest.mark.parametrize("change", ["batch", "float64", "misaligned", "channels_last"])
def test_other_shapes_dtypes_or_layouts_fall_back_bit_exact(change):
    net, (x, temb) = block(), inputs()
    calls: list[int] = []
    (spec,) = specs_of(net, x, temb, calls)
    if change == "batch":
        x = inputs(batch=3)[0]
    elif change == "float64":
        net, x = net.double(), x.double()
    elif change == "misaligned":
        x = torch.empty(x.numel() + 1)[1:].view_as(x).copy_(x)  # one element off the proved alignment
    else:
        x = x.contiguous(memory_format=torch.channels_last)

    def pair(x: torch.Tensor) -> torch.Tensor:
        return net.nonlinearity(net.norm1(x))
    with torch.no_grad():
        expected = pair(x)
    installation = router.install([spec], net)
    try:
        with torch.no_grad():
            got = pair(x)
    finally:
        installation.remove()
    assert calls == [] and counts(installation, [spec]) == (0, 1) and torch.equal(got, expected)


def test_a_gradient_wanted_takes_the_modules_own_forwards():
    net, (x, temb) = block(), inputs()
    calls: list[int] = []
    (spec,) = specs_of(net, x, temb, calls)
    x = x.clone().requires_grad_()
    installation = router.install([spec], net)
    try:
        net(x, temb).sum().backward()
    finally:
        installation.remove()
    assert calls == [] and x.grad is not None and net.norm1.weight.grad is not None


def test_an_input_written_in_place_between_the_modules_stops_with_an_error():
    captured, (x, temb) = block(), inputs()
    (spec,) = specs_of(captured, x, temb, [])
    with pytest.raises(RuntimeError, match="written in place between its modules' calls"):
        run(block(WritesInput), [spec], x.clone(), temb)


def test_a_value_not_made_yet_shows_the_real_one_when_printed_or_read():
    net, (x, temb) = block(), inputs()
    (spec,) = specs_of(net, x, temb, [])
    installation = router.install([spec], net)
    try:
        with torch.no_grad():
            pending = net.norm1(x)
            assert type(pending) is fused._Lazy and pending.shape == x.shape and pending.stride() == x.stride()
            text = repr(pending)
            made = pending + 0
    finally:
        installation.remove()
    with torch.no_grad():
        real = net.norm1(x)
    assert torch.equal(made, real) and text == repr(real)


def test_a_record_without_modules_reads_as_before():
    """A profile written before sequences were marked: no "modules" key, no route, placeholders."""
    net, (x, temb) = block(), inputs()
    calls: list[int] = []
    (spec,) = specs_of(net, x, temb, calls)
    spec.chain = {k: v for k, v in spec.chain.items() if k != "modules"}
    with torch.no_grad():
        expected = net(x, temb)
    got, installation = run(net, [spec], x, temb)
    assert installation.routed == ["aten::native_group_norm.default"] and not installation.module_routes
    assert len(calls) == 2 and installation.counts[spec.op].kernel == 2
    torch.testing.assert_close(got, expected)


def test_applys_routing_measure_calls_the_pair_as_the_model_does():
    from kernforge.integrate import overhead

    net, (x, temb) = block(), inputs()
    calls: list[int] = []
    (spec,) = specs_of(net, x, temb, calls)
    cost = overhead.measure(spec, [spec], torch.device("cpu"), net)
    assert cost.via == "modules" and not cost.native and len(calls) > 0
    assert cost.routed_hit_us > 0 and cost.aten_us > 0
