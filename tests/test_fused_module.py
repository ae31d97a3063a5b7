"""A chain that is exactly one module's forward, installed as that forward (runtime/fused.py's
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

from kernforge.runtime import router

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
    installation = router.install([spec], net)
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
    installation = router.install([spec], net)
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
    installation = router.install([spec], net)
    try:
        assert "forward" in net[1].__dict__ and "forward" not in net[3].__dict__
        assert installation.routed  # the instance no module holds now: placeholders as elsewhere
    finally:
        installation.remove()


def _own_state(module: nn.Module) -> tuple[type, dict, dict]:
    """The module as uninstall must leave it: its class, its attributes (the same objects) and its
    tensors' values."""
    return type(module), dict(module.__dict__), {k: v.clone() for k, v in module.state_dict().items()}


def _same_state(module: nn.Module, state: tuple[type, dict, dict]) -> bool:
    cls, attributes, tensors = state
    now = module.state_dict()
    return (type(module) is cls and module.__dict__.keys() == attributes.keys()
            and all(module.__dict__[k] is v for k, v in attributes.items())
            and now.keys() == tensors.keys() and all(torch.equal(now[k], v) for k, v in tensors.items()))


@pytest.fixture
def impl_calls(monkeypatch):
    """The modules nn.Module's call handled (its _call_impl, which runs hooks and then forward)."""
    seen: list[nn.Module] = []
    call_impl = nn.Module._call_impl

    def recording(self, *args, **kwargs):
        seen.append(self)
        return call_impl(self, *args, **kwargs)
    monkeypatch.setattr(nn.Module, "_call_impl", recording)
    return seen


def test_the_routed_module_is_called_past_nn_modules_call_and_removal_restores_its_class(case, impl_calls):
    net, x, spec, calls = case
    norm = net[1]
    before, printed = _own_state(norm), repr(net)
    h = torch.randn(4, 32)
    installation = router.install([spec], net)
    try:
        assert type(norm) is not RMSNorm and isinstance(norm, RMSNorm) and type(norm).__name__ == "RMSNorm"
        assert repr(net) == printed
        with torch.no_grad():
            got = norm(h)
        assert norm not in impl_calls and len(calls) == 1  # the kernel, straight from the module's call
    finally:
        installation.remove()
    assert _same_state(norm, before) and repr(net) == printed
    with torch.no_grad():
        torch.testing.assert_close(got, norm(h))
    assert norm in impl_calls  # nn.Module's call again


def test_hooks_of_any_kind_take_nn_modules_call_which_still_routes(case, impl_calls):
    """A hook on the module, or a global one, runs: the call goes through nn.Module's call, whose
    forward is still the route's. Without them the route's own call serves again."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    net, x, spec, calls = case
    norm, h = net[1], torch.randn(4, 32)
    installation = router.install([spec], net)
    hooked: list[str] = []
    try:
        with torch.no_grad():
            handle = norm.register_forward_hook(lambda *_: hooked.append("module"))
            norm(h)
            handle.remove()
            handle = register_module_forward_pre_hook(lambda *_: hooked.append("global"))
            norm(h)
            handle.remove()
            assert impl_calls.count(norm) == 2 and hooked == ["module", "global"]
            norm(h)
            assert impl_calls.count(norm) == 2
    finally:
        installation.remove()
    assert len(calls) == 3 and installation.counts[spec.op].kernel == 3


def test_a_forward_set_over_the_routes_is_called(case):
    """A forward put on the instance after install (a library's wrapper) is what the module calls."""
    net, x, spec, calls = case
    norm, h = net[1], torch.randn(4, 32)
    installation = router.install([spec], net)
    try:
        routed = norm.forward
        norm.forward = lambda t: routed(t) * 2
        with torch.no_grad():
            got = norm(h)
        del norm.forward
    finally:
        installation.remove()
    with torch.no_grad():
        torch.testing.assert_close(got, norm(h) * 2)
    assert len(calls) == 1


def test_a_parameter_set_anew_is_the_one_the_kernel_reads(case):
    net, x, spec, calls = case
    norm, h = net[1], torch.randn(4, 32)
    installation = router.install([spec], net)
    try:
        norm.weight = nn.Parameter(torch.randn(32))
        with torch.no_grad():
            got = norm(h)
    finally:
        installation.remove()
    assert len(calls) == 1
    with torch.no_grad():
        torch.testing.assert_close(got, norm(h))


@pytest.mark.parametrize("apart", [False, True], ids=["one installation", "two"])
def test_two_chains_at_one_module_come_off_in_reverse_and_leave_it_as_it_was(case, apart):
    """The second route over the first (its forward, nn.Module's call where the first's class
    calls): the later answers first, and removal, last in first out, leaves the module as it was."""
    net, x, spec, calls = case
    norm = net[1]
    before = _own_state(norm)
    second_calls: list[int] = []
    second = chain_spec(captured(model(), x), "chain_rms_norm_second", second_calls)
    installations = [router.install([spec], net), router.install([second], net)] if apart else [
        router.install([spec, second], net)]
    try:
        with torch.no_grad():
            norm(torch.randn(4, 32))
        assert len(second_calls) == 1 and calls == []
    finally:
        for installation in reversed(installations):
            installation.remove()
    assert _same_state(norm, before)


def test_a_copy_of_the_patched_model_computes_with_its_own_weights(case):
    """copy.deepcopy of a patched model (an EMA's, an evaluation's copy) copies the routed forward
    too: the copy must compute with its own weights, while patched and after removal, and the
    patched model keep taking the kernel."""
    import copy

    net, x, spec, calls = case
    installation = router.install([spec], net)
    try:
        twin = copy.deepcopy(net)
        with torch.no_grad():
            twin[1].weight.mul_(3.0)
            twin[3].weight.mul_(3.0)
            during = twin(x)
            net(x)
    finally:
        installation.remove()
    assert len(calls) == 2  # the patched model's two norms; none for the copy's
    reference = model()
    reference.load_state_dict(twin.state_dict())
    with torch.no_grad():
        expected = reference(x)
        after = twin(x)
    assert torch.equal(during, expected) and torch.equal(after, expected)
