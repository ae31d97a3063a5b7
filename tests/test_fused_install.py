"""A fused chain's kernel installed in place of the chain's ATen calls (runtime/fused.py), on the CPU.

The chains are found in real modules by capture (find_chains); the installed "kernel" is the
chain's float64 replay, rounded to the outputs' dtypes and counted, so that these tests see
the routing (placeholders, fallbacks, compile's graph pass), not a kernel's speed.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from kernforge.backends import get_backend
from kernforge.capture.chains import find_chains
from kernforge.capture.recorder import ModuleTracker, Recorder
from kernforge.runtime import fused, kernels, router
from kernforge.tasks import ChainReference

pytestmark = pytest.mark.integration
CPU_LOADING = get_backend("cpu").loading  # the backend these tests' specs pose as

CPU = frozenset({torch.device("cpu")})


class ScaleMaskSoftmax(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 0.125 + mask, dim=-1) @ x.transpose(-1, -2)


class ResidualRMSNorm(nn.Module):
    """h = x + y is kept (the next layer's residual) and normalised: a chain with two outputs."""

    def __init__(self, n: int = 32):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x + y
        normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return normed @ self.weight.unsqueeze(-1), h * 2


def _chains_of(module: nn.Module, *inputs: torch.Tensor) -> list:
    """The chains capture finds in one pass of the module, as optimize's capture finds them."""
    recorder = Recorder()
    with ModuleTracker(module, recorder), recorder, torch.no_grad():
        recorder.mark_returned(module(*inputs))
    return find_chains(recorder.calls, recorder.returned_ids, recorder.module_calls)


def _chain_of(module: nn.Module, *inputs: torch.Tensor) -> dict:
    (chain,) = _chains_of(module, *inputs)
    return chain


def _compiled_run(module: nn.Module, inputs: tuple, specs: list[router.KernelSpec],
                  model: nn.Module | None = None) -> tuple[object, router.Installation]:
    """The module under torch.compile with the specs installed (with `model`: at its modules too),
    compiled code reset before and after."""
    router.reset_compiled_code()
    installation = router.install(specs, model)
    try:
        with torch.no_grad():
            return torch.compile(module)(*inputs), installation
    finally:
        installation.remove()
        router.reset_compiled_code()


def _spec(chain, name: str, calls: list[int]) -> router.KernelSpec:
    oracle = ChainReference(chain.to_json()).in_float64()
    dtypes = [kernels.dtype_named(m["dtype"]) for m in chain.output_metas]

    def kernel(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        calls.append(1)
        outs = oracle(*[t.double() if t.is_floating_point() else t for t in inputs])
        return tuple(o.to(d) for o, d in zip(outs, dtypes))
    return router.KernelSpec(name=name, op=chain.op, args=chain.input_metas, outputs=chain.output_metas,
                             backend="cpu", loading=CPU_LOADING, entry=kernel, devices=CPU, chain=chain.to_json())


@pytest.fixture
def softmax_case():
    torch.manual_seed(0)
    x, mask = torch.randn(2, 4, 16, 16), torch.randn(16, 16)
    module = ScaleMaskSoftmax()
    chain = _chain_of(module, x, mask)
    calls: list[int] = []
    return module, (x, mask), _spec(chain, "chain_scale_mask_softmax_test", calls), calls


def _run(module: nn.Module, inputs: tuple, specs: list[router.KernelSpec]) -> tuple[object, router.Installation]:
    installation = router.install(specs)
    try:
        with torch.no_grad():
            return module(*inputs), installation
    finally:
        installation.remove()


def test_the_chain_runs_as_one_kernel_and_matches_the_model(softmax_case):
    module, inputs, spec, calls = softmax_case
    with torch.no_grad():
        expected = module(*inputs)
    got, installation = _run(module, inputs, [spec])
    counts = installation.counts[spec.op]
    assert (counts.kernel, counts.fallback, len(calls)) == (1, 0, 1)
    assert type(got) is torch.Tensor
    torch.testing.assert_close(got, expected)


def test_two_outputs_the_kept_sum_is_the_kernels_and_used_after_the_chain():
    torch.manual_seed(1)
    module, x, y = ResidualRMSNorm(), torch.randn(8, 32), torch.randn(8, 32)
    chain = _chain_of(module, x, y)
    assert len(chain.outputs) == 2
    calls: list[int] = []
    spec = _spec(chain, "chain_residual_rms_test", calls)
    with torch.no_grad():
        expected = module(x, y)
    got, installation = _run(module, (x, y), [spec])
    assert installation.counts[spec.op].kernel == 1 and installation.counts[spec.op].fallback == 0
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


class EscapingIntermediate(nn.Module):
    """The same steps as ScaleMaskSoftmax, but the scaled scores are also returned: at run
    time, an intermediate the chain would not make is used elsewhere."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scaled = x * 0.125
        total = scaled.sum()
        return torch.softmax(scaled + mask, dim=-1), total


class ReadAfterwards(nn.Module):
    """The intermediate is read after the chain's last step: the kernel ran, and the value
    read is the steps' own, replayed."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scaled = x * 0.125
        scores = torch.softmax(scaled + mask, dim=-1)
        return scores, scaled.sum()


class OtherOrder(nn.Module):
    """The chain's first step, then something else on its value before the next step."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scaled = x * 0.125
        shifted = scaled - 1.0
        return torch.softmax(scaled + mask, dim=-1) + shifted


@pytest.mark.parametrize("other", [EscapingIntermediate, OtherOrder])
def test_any_other_use_of_a_pending_value_replays_the_steps_and_keeps_the_models_result(softmax_case, other):
    _module, inputs, spec, calls = softmax_case
    module = other()
    with torch.no_grad():
        expected = module(*inputs)
    got, installation = _run(module, inputs, [spec])
    counts = installation.counts[spec.op]
    assert (counts.kernel, counts.fallback, len(calls)) == (0, 1, 0)
    for a, b in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
        assert type(a) is torch.Tensor
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # the original ops: bit for bit


def test_an_intermediate_read_after_the_chain_is_replayed_beside_the_kernel(softmax_case):
    _module, inputs, spec, calls = softmax_case
    module = ReadAfterwards()
    with torch.no_grad():
        scores, total = module(*inputs)
    (got_scores, got_total), installation = _run(module, inputs, [spec])
    assert installation.counts[spec.op].kernel == 1 and len(calls) == 1
    torch.testing.assert_close(got_scores, scores)
    torch.testing.assert_close(got_total, total, rtol=0, atol=0)


def test_a_pending_value_printed_or_read_shows_the_real_one(softmax_case):
    _module, (x, mask), spec, _calls = softmax_case
    expected = x * 0.125
    installation = router.install([spec])
    try:
        with torch.no_grad():
            scaled = x * 0.125
            assert isinstance(scaled, fused._Pending) and scaled.shape == x.shape
            assert repr(scaled) == repr(expected)
            assert torch.equal(scaled.clone(), expected)
    finally:
        installation.remove()


def test_another_constant_shape_or_input_requiring_grad_is_not_fused(softmax_case):
    _module, (x, mask), spec, calls = softmax_case
    installation = router.install([spec])
    try:
        with torch.no_grad():
            a = torch.softmax(x * 0.5 + mask, dim=-1)
            b = torch.softmax(x[:1] * 0.125 + mask, dim=-1)
        w = x.clone().requires_grad_(True)
        c = torch.softmax(w * 0.125 + mask, dim=-1)
        c.sum().backward()
    finally:
        installation.remove()
    assert not calls and installation.counts[spec.op].kernel == 0
    torch.testing.assert_close(a, torch.softmax(x * 0.5 + mask, dim=-1), rtol=0, atol=0)
    torch.testing.assert_close(b, torch.softmax(x[:1] * 0.125 + mask, dim=-1), rtol=0, atol=0)
    assert w.grad is not None and w.grad.shape == x.shape


def test_an_input_written_in_place_between_the_steps_stops_with_an_error(softmax_case):
    _module, (x, mask), spec, _calls = softmax_case
    mask = mask.clone()
    installation = router.install([spec])
    try:
        with torch.no_grad(), pytest.raises(RuntimeError, match="written in place between the chain's steps"):
            scaled = x * 0.125
            summed = scaled + mask
            x.add_(1.0)
            torch.softmax(summed, dim=-1)
    finally:
        installation.remove()


def test_under_compile_the_chain_becomes_the_custom_op_in_the_graph(softmax_case):
    module, inputs, spec, calls = softmax_case
    with torch.no_grad():
        expected = module(*inputs)
    got, installation = _compiled_run(module, inputs, [spec])
    counts = installation.counts[spec.op]
    assert counts.traced_by_kernel == {spec.name: 1} and counts.kernel == 0
    assert len(calls) == 1  # the compiled graph ran the kernel, through the custom op
    torch.testing.assert_close(got, expected)


def test_under_compile_a_chain_whose_pattern_cannot_be_registered_leaves_the_others_theirs(softmax_case, monkeypatch):
    """A chain the pattern matcher refuses (its trace raises) is left to inductor, and said; the
    other chains of the pass are still matched, and the model still compiles."""
    module, inputs, spec, calls = softmax_case
    torch.manual_seed(1)
    other = ResidualRMSNorm()
    x, y = torch.randn(8, 32), torch.randn(8, 32)
    broken = _spec(_chain_of(other, x, y), "chain_refused_test", [])
    register = fused.CompilePatterns._register

    def refusing(self, pm, plan, counts):
        if plan.spec.name == broken.name:
            raise RuntimeError("the matcher cannot hold this pattern")
        return register(self, pm, plan, counts)
    monkeypatch.setattr(fused.CompilePatterns, "_register", refusing)
    with torch.no_grad():
        expected = module(*inputs)
    installation = router.install([spec, broken])
    try:
        patterns = fused.CompilePatterns([(p, installation.counts[p.spec.op]) for p in installation._plans.values()])
        assert list(patterns.refused) == [broken.name] and "cannot hold" in patterns.refused[broken.name]
        assert len(patterns.passes) == 1
    finally:
        installation.remove()
    got, installation = _compiled_run(module, inputs, [spec, broken])
    assert installation.counts[spec.op].traced_by_kernel == {spec.name: 1} and len(calls) == 1
    torch.testing.assert_close(got, expected)


def test_under_compile_a_chain_at_its_modules_becomes_the_custom_op_not_their_route():
    """The routed modules' own call steps aside while dynamo traces (torch.compiler.is_compiling):
    the graph holds the modules' own ops, and the graph pass puts the chain's op in their place."""
    from test_fused_module import captured, model

    net, x = model(), torch.randn(4, 32)
    calls: list[int] = []
    spec = _spec(captured(net, x), "chain_rms_norm_compiled", calls)
    with torch.no_grad():
        expected = net(x)
    got, installation = _compiled_run(net, (x,), [spec], net)
    counts = installation.counts[spec.op]
    assert counts.traced_by_kernel == {spec.name: 2} and counts.kernel == 0 and counts.fallback == 0
    assert len(calls) == 2  # the compiled graph ran the kernel at both modules, through the custom op
    torch.testing.assert_close(got, expected)


def test_under_compile_a_chain_at_a_sequence_of_modules_becomes_the_custom_op_not_their_route():
    """GroupNorm then the block's shared SiLU: while dynamo traces, both modules' routes step aside
    (no value not made yet reaches the graph), and the graph pass puts the chain's op in place of
    the group norm's decomposition, which reshapes its input into groups where a trace views it
    (fused.traced_as_inductor): the compiled block is what it is with the chain installed
    without the model, and both runs took the kernel at both norms."""
    from test_fused_sequence import block, inputs, specs_of

    net, (x, temb) = block(), inputs()
    (spec,) = specs_of(net, x, temb, [])
    with torch.no_grad():
        expected = net(x, temb)
    without, plain = _compiled_run(net, (x, temb), [spec])
    got, installation = _compiled_run(net, (x, temb), [spec], net)
    counts = installation.counts[spec.op]
    assert counts.kernel == 0 and counts.fallback == 0  # neither module's route was asked
    assert counts.traced_by_kernel == plain.counts[spec.op].traced_by_kernel == {spec.name: 2}
    assert type(got) is torch.Tensor and torch.equal(got, without)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("other", [EscapingIntermediate])
def test_under_compile_a_chain_whose_intermediate_is_used_elsewhere_is_left_to_inductor(softmax_case, other):
    _module, inputs, spec, calls = softmax_case
    router.reset_compiled_code()
    installation = router.install([spec])
    try:
        with torch.no_grad():
            got = torch.compile(other())(*inputs)
    finally:
        installation.remove()
        router.reset_compiled_code()
    assert not installation.counts[spec.op].traced_by_kernel and not calls
    with torch.no_grad():
        torch.testing.assert_close(got, other()(*inputs))


def test_under_compile_another_constant_is_not_matched(softmax_case):
    _module, (x, mask), spec, calls = softmax_case

    def other_scale(x, mask):
        return torch.softmax(x * 0.5 + mask, dim=-1)
    router.reset_compiled_code()
    installation = router.install([spec])
    try:
        with torch.no_grad():
            got = torch.compile(other_scale)(x, mask)
    finally:
        installation.remove()
        router.reset_compiled_code()
    assert not installation.counts[spec.op].traced_by_kernel and not calls
    torch.testing.assert_close(got, other_scale(x, mask))


def test_remove_puts_the_dispatcher_and_inductors_setting_back(softmax_case):
    import torch._inductor.config as inductor_config

    _module, (x, mask), spec, calls = softmax_case
    before = inductor_config.post_grad_custom_pre_pass
    installation = router.install([spec])
    assert inductor_config.post_grad_custom_pre_pass is not before
    installation.remove()
    assert inductor_config.post_grad_custom_pre_pass is before
    with torch.no_grad():
        out = x * 0.125
    assert type(out) is torch.Tensor and not calls


def test_a_chain_and_a_single_op_on_the_same_head_op_both_route(softmax_case):
    """The head op's router tries the chain, then the single op's guard, then the original."""
    module, (x, mask), spec, calls = softmax_case
    other = torch.randn(3, 5)
    single_calls: list[int] = []

    def mul_kernel(a, b):
        single_calls.append(1)
        return torch.mul(a, b)
    meta = {"shape": [3, 5], "stride": [5, 1], "dtype": "torch.float32", "device": "cpu"}
    single = router.KernelSpec(name="mul_single_test", op="aten::mul.Tensor", args=[meta, 2.0], outputs=[meta],
                               backend="cpu", loading=CPU_LOADING, entry=mul_kernel, devices=CPU)
    installation = router.install([spec, single])
    try:
        with torch.no_grad():
            module(x, mask)
            torch.ops.aten.mul.Tensor(other, 2.0)
    finally:
        installation.remove()
    assert len(calls) == 1 and len(single_calls) == 1


class GemmaNorm(nn.Module):
    """Gemma's RMSNorm: the weight is cast in the middle of the chain, a step that reads only a
    chain input, so its call reaches a router rather than a placeholder."""

    def __init__(self, n: int = 32):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (h * (1.0 + self.weight.float())).to(x.dtype) @ self.weight.unsqueeze(-1)


def test_a_step_that_reads_only_inputs_mid_chain_joins_the_run():
    torch.manual_seed(2)
    module, x = GemmaNorm(), torch.randn(8, 32, dtype=torch.bfloat16)
    chain = _chain_of(module, x)
    assert any(s["op"] == "aten::_to_copy.default" and s["args"] == [{"input": 1}] for s in chain.to_json()["steps"])
    calls: list[int] = []
    spec = _spec(chain, "chain_gemma_norm_test", calls)
    with torch.no_grad():
        expected = module(x)
    got, installation = _run(module, (x,), [spec])
    counts = installation.counts[spec.op]
    assert (counts.kernel, counts.fallback, len(calls)) == (1, 0, 1)
    torch.testing.assert_close(got, expected)


class TwoWidths(nn.Module):
    """The same chain at two widths: two signatures whose compile patterns are one pattern."""

    def __init__(self):
        super().__init__()
        self.narrow, self.wide = ScaleMaskSoftmax(), ScaleMaskSoftmax()

    def forward(self, x: torch.Tensor, xm: torch.Tensor, y: torch.Tensor, ym: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.narrow(x, xm), self.wide(y, ym)


def test_under_compile_chains_of_one_structure_at_two_shapes_each_become_their_own_op():
    torch.manual_seed(0)
    module = TwoWidths()
    inputs = (torch.randn(2, 4, 16, 16), torch.randn(16, 16), torch.randn(2, 4, 32, 32), torch.randn(32, 32))
    chains = _chains_of(module, *inputs)
    assert len(chains) == 2 and chains[0].op == chains[1].op
    calls: list[int] = []
    specs = [_spec(chain, f"chain_two_widths_{k}", calls) for k, chain in enumerate(chains)]
    with torch.no_grad():
        expected = module(*inputs)
    got, installation = _compiled_run(module, inputs, specs)
    assert installation.counts[specs[0].op].traced_by_kernel == {s.name: 1 for s in specs}
    assert len(calls) == 2
    torch.testing.assert_close(got, expected)


def test_the_head_ops_other_calls_stay_in_cpp_and_the_proved_one_still_starts_the_chain(softmax_case):
    """With native dispatch the chain's head op (mul) is routed in C++, its only route the guard
    of the chain's first step (x * 0.125 on the proved layout): a mul by another number, of
    another shape or by a tensor runs the original from C++, counted there and never by the
    Python router; the proved call still reaches Python and starts the chain."""
    from kernforge.runtime import dispatch

    if dispatch.native_module() is None:
        pytest.skip(f"native dispatch does not build here: {dispatch.why_not_native()}")
    module, (x, mask), spec, calls = softmax_case
    with torch.no_grad():
        expected = [x * 0.5, x[:1] * 0.125, x * mask, module(x, mask)]
    installation = router.install([spec])
    try:
        with torch.no_grad():
            got = [x * 0.5, x[:1] * 0.125, x * mask, module(x, mask)]
        mul = installation.counts["aten::mul.Tensor"]
        assert "aten::mul.Tensor" in installation.native_ops
        # three muls and the stand-in kernel's own (its float64 replay); _fallback: the Python router's count
        assert mul.fallback == 4 and mul._fallback == 0
        assert installation.counts[spec.op].kernel == 1 and len(calls) == 1
    finally:
        installation.remove()
    for a, b in zip(got[:3], expected[:3]):
        assert type(a) is torch.Tensor and torch.equal(a, b)
    torch.testing.assert_close(got[3], expected[3])


class GeluMul(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (nn.functional.gelu(x, approximate="tanh") * y) @ y.transpose(-1, -2)


def test_a_head_op_with_a_text_argument_is_checked_in_cpp_too():
    from kernforge.runtime import dispatch

    if dispatch.native_module() is None:
        pytest.skip(f"native dispatch does not build here: {dispatch.why_not_native()}")
    module, x, y = GeluMul(), torch.randn(8, 16), torch.randn(8, 16)
    calls: list[int] = []
    spec = _spec(_chain_of(module, x, y), "chain_gelu_mul_test", calls)
    with torch.no_grad():
        expected = module(x, y)
    installation = router.install([spec])
    try:
        with torch.no_grad():
            exact = nn.functional.gelu(x)  # approximate="none": not the chain's step
            got = module(x, y)
        gelu = installation.counts["aten::gelu.default"]
        assert "aten::gelu.default" in installation.native_ops and gelu._fallback == 0 and gelu.fallback >= 1
        assert installation.counts[spec.op].kernel == 1
    finally:
        installation.remove()
    assert torch.equal(exact, nn.functional.gelu(x))
    torch.testing.assert_close(got, expected)


class CastThenScale(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x.to(device=x.device, dtype=torch.float32) * y) @ y.transpose(-1, -2)


def test_a_cast_naming_its_device_heads_a_chain_routed_in_cpp():
    """The chain's first step is _to_copy(x, dtype=float32, device=cpu): the C++ guard does not
    read a device, lets it through, and the Python router checks it; the model's other casts run
    the original from C++."""
    from kernforge.runtime import dispatch

    if dispatch.native_module() is None:
        pytest.skip(f"native dispatch does not build here: {dispatch.why_not_native()}")
    module, x, y = CastThenScale(), torch.randn(8, 16, dtype=torch.bfloat16), torch.randn(8, 16)
    chain = _chain_of(module, x, y)
    assert chain.to_json()["steps"][0]["kwargs"].get("device", "").startswith("device(")
    calls: list[int] = []
    spec = _spec(chain, "chain_cast_mul_test", calls)
    with torch.no_grad():
        expected = module(x, y)
    installation = router.install([spec])
    try:
        with torch.no_grad():
            other = x[:4].float()  # another shape: not the chain's step
            got = module(x, y)
        cast = installation.counts["aten::_to_copy.default"]
        assert "aten::_to_copy.default" in installation.native_ops and cast._fallback == 0 and cast.fallback >= 1
        assert installation.counts[spec.op].kernel == 1 and len(calls) == 1
    finally:
        installation.remove()
    assert torch.equal(other, x[:4].float())
    torch.testing.assert_close(got, expected)
