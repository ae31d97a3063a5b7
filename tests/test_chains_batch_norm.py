"""A convolutional net's batch norms fused with what follows them (capture/chains.py's channel and
inplace steps): ResNet's `bn -> relu_` and `bn -> += identity -> relu_`, found by capture, lowered
per channel, evaluated as C kernels, and installed in the model at its modules (a residual's `+=`
a glue stage, a downsample's batch norm a side stage) or through placeholders."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from torch import nn
from torchvision.models.resnet import Bottleneck

from kernforge.capture.chains import find_chains
from kernforge.capture.recorder import ModuleTracker, Recorder
from kernforge.propose.families.chain.lower import lower
from kernforge.runtime import fused, router
from kernforge.tasks import ChainReference

pytestmark = pytest.mark.integration


def _block() -> nn.Module:
    """A stem (conv, bn, relu) and a bottleneck without downsampling: both chain forms."""
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                          Bottleneck(16, 4)).eval()
    for m in block.modules():
        if isinstance(m, nn.BatchNorm2d):  # statistics a trained net has, not the identity's
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return block


def _chains(module: nn.Module, *inputs: torch.Tensor) -> list:
    recorder = Recorder()
    with ModuleTracker(module, recorder), recorder, torch.no_grad():
        recorder.mark_returned(module(*inputs))
    return find_chains(recorder.calls, recorder.returned_ids, recorder.module_calls)


def test_a_bottlenecks_batch_norms_and_inplace_activations_are_chains():
    chains = _chains(_block(), torch.randn(2, 8, 9, 11))
    ops = sorted((c.op, len(c.instances)) for c in chains)
    assert ops == [("chain:native_batch_norm+add_+relu_", 1), ("chain:native_batch_norm+relu_", 1),
                   ("chain:native_batch_norm+relu_", 2)], ops
    # `bn1 -> relu` (the module shared by the block) is a sequence of modules whose route checks
    # their training flags; the residual too, its add_ in the block's forward a glue stage whose
    # other argument (the identity) the chain takes there
    bn, relu = "torch.nn.modules.batchnorm.BatchNorm2d", "torch.nn.modules.activation.ReLU"
    for chain in chains:
        assert chain.module is None and chain.modules["eval_only"]
        if "add_" in chain.op:
            assert chain.modules["classes"] == [bn, None, relu] and chain.modules["ops"] == {"1": "aten::add_.Tensor"}
            assert chain.modules["names"] == [["3.bn3", None, "3.relu"]]
            assert chain.modules["inputs"][-1] == ["stage", 1, 1]
        else:
            assert chain.modules["classes"] == [bn, relu]
    residual = next(c for c in chains if "add_" in c.op)
    assert [m["shape"] for m in residual.input_metas] == [[2, 16, 9, 11], [16], [16], [16], [16], [2, 16, 9, 11]]
    program = lower(residual.to_json(), residual.input_metas, residual.output_metas)
    # per channel along dim 1, H and W merged into one row of 99
    assert program.domain == [2, 16, 99]
    assert [t["kind"] for t in program.inputs] == ["full", "row", "row", "row", "row", "full"]


def test_a_batch_norm_in_training_and_an_inplace_op_on_an_input_are_no_chain_steps():
    block = _block().train()
    assert not any("batch_norm" in c.op for c in _chains(block, torch.randn(2, 8, 9, 11)))

    class ReluOfInput(nn.Module):  # relu_ would write the caller's tensor: never fused
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu_(x) * 2.0 + 1.0

    assert not any("relu_" in c.op for c in _chains(ReluOfInput(), torch.randn(4, 8)))


def test_the_replay_of_an_inplace_chain_leaves_its_inputs_alone():
    chain = next(c for c in _chains(_block(), torch.randn(2, 8, 9, 11)) if "add_" in c.op)
    inputs = [torch.randn(m["shape"]) for m in chain.input_metas]
    inputs[4] = inputs[4].abs() + 0.1  # a variance
    before = [t.clone() for t in inputs]
    (out,) = ChainReference(chain.to_json())(*inputs)
    x, w, b, mean, var, identity = before
    expected = torch.relu((x - mean[:, None, None]) / torch.sqrt(var[:, None, None] + 1e-5) * w[:, None, None]
                          + b[:, None, None] + identity)
    torch.testing.assert_close(out, expected)
    assert all(torch.equal(a, b) for a, b in zip(inputs, before))


def _kernel_spec(chain, calls: list[int]) -> router.KernelSpec:
    from tests.test_fused_install import _spec

    return _spec(chain, f"chain_bn_test_{chain.signature.replace('-', '_')}", calls)


def test_installed_the_block_takes_the_kernels_and_keeps_its_result():
    block, x = _block(), torch.randn(2, 8, 9, 11)
    chains = _chains(block, x)
    with torch.no_grad():
        expected = block(x)
    calls: list[int] = []
    specs = [_kernel_spec(c, calls) for c in chains]
    installation = router.install(specs)
    try:
        with torch.no_grad():
            got = block(x)
            taken = sum(installation.counts[op].kernel for op in {s.op for s in specs})
            block.train()  # batch statistics now: every chain's guard refuses, the model's own ops run
            trained = block(x)
    finally:
        installation.remove()
        block.eval()
    assert taken == 4 and len(calls) == 4
    torch.testing.assert_close(got.clone(), expected)
    block.train()
    with torch.no_grad():
        torch.testing.assert_close(trained.clone(), block(x), rtol=0, atol=0)


def test_a_reference_to_the_value_an_inplace_step_wrote_sees_the_written_value():
    """relu_ returns its argument: the batch norm's placeholder stands for the relu'd value after."""

    class KeepsBoth(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = _block()[1]

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = self.bn(x)
            z = torch.relu_(y)
            return z.sum(dim=(2, 3)), y.amin(dim=(2, 3))  # y is z: both read the written value

    module, x = KeepsBoth().eval(), torch.randn(2, 16, 5, 5)
    (chain,) = [c for c in _chains(module, x) if c.op == "chain:native_batch_norm+relu_"]
    with torch.no_grad():
        expected_z, expected_y = module(x)
    calls: list[int] = []
    installation = router.install([_kernel_spec(chain, calls)])
    try:
        with torch.no_grad():
            y = module.bn(x)
            assert isinstance(y, fused._Pending)
            z = torch.relu_(y)
            assert z is y and len(calls) == 1
            got_z, got_y = z.sum(dim=(2, 3)), y.amin(dim=(2, 3))
    finally:
        installation.remove()
    torch.testing.assert_close(got_z, expected_z)
    torch.testing.assert_close(got_y, expected_y)
    assert bool((got_y >= 0).all())


_TRITON = __import__("importlib").util.find_spec("triton") is not None


@pytest.mark.parametrize("backend", ["cpu", pytest.param("triton", marks=pytest.mark.skipif(
    not _TRITON, reason="triton is not installed"))])
@pytest.mark.parametrize("form", ["relu", "residual"])
def test_generated_kernels_of_batch_norm_chains_pass_the_evaluator(tmp_path: Path, form: str, backend: str):
    """The C kernel at its start and the other end of its space; the Triton kernel at its start,
    under the interpreter."""
    from kernforge.propose.builtin import Hardware
    from kernforge.propose.families import chain as family
    from tests.test_chains import chain_tasks, evaluated_points

    block = _block()
    module = block[:3] if form == "relu" else block[3]
    x = torch.randn(2, 8 if form == "relu" else 16, 9, 11)
    task = next(t for t in chain_tasks(module, (x,), tmp_path, form) if ("add_" in t.op) == (form == "residual"))
    facts = family.match(task)
    assert not isinstance(facts, str), facts
    points = [family.space(facts, backend, Hardware()).fit(family.start(facts, backend, Hardware()))]
    if backend == "cpu":
        points.append({"schedule": "dynamic", "simd": False})
    for point, result in zip(points, evaluated_points(task, backend, points, tmp_path)):
        assert result.status == "ok", (task.op, point, result.reason)


def test_a_call_holding_two_runs_values_goes_on_as_the_run_whose_step_it_is():
    """The residual chain `bn3, add_, relu_` found in a block without downsampling, installed in one
    with it: the downsample's batch norm starts a second run of the same chain (same head), whose
    value is then the first run's residual input: made by its own ops, that run given up."""
    torch.manual_seed(0)
    plain = Bottleneck(16, 4).eval()
    residual = next(c for c in _chains(plain, torch.randn(2, 16, 9, 11)) if "add_" in c.op)
    downsample = nn.Sequential(nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16))
    block, x = Bottleneck(8, 4, downsample=downsample).eval(), torch.randn(2, 8, 9, 11)
    with torch.no_grad():
        expected = block(x)
    calls: list[int] = []
    installation = router.install([_kernel_spec(residual, calls)])
    try:
        with torch.no_grad():
            got = block(x)
        counts = installation.counts[residual.op]
        assert (counts.kernel, counts.fallback, len(calls)) == (1, 1, 1)
    finally:
        installation.remove()
    torch.testing.assert_close(got.clone(), expected)


def test_a_cudnn_batch_norm_chains_float64_oracle_runs_where_cudnn_does_not():
    """A GPU's fp32 batch norm is cuDNN's, which no CPU has (the oracle's fallback device): the
    float64 oracle computes it with ATen's batch norm, the same arguments and math."""
    chain = {"steps": [{"op": "aten::cudnn_batch_norm.default", "kwargs": {},
                        "args": [{"input": 0}, {"input": 1}, {"input": 2}, {"input": 3}, {"input": 4}, False, 0.1, 1e-5]},
                       {"op": "aten::relu_.default", "args": [{"step": 0, "output": 0}], "kwargs": {}}],
             "outputs": [[1, 0]]}
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3, 3)
    w, b, mean, var = torch.randn(4), torch.randn(4), torch.randn(4), torch.rand(4) + 0.5
    (out,) = ChainReference(chain).in_float64()(*[t.double() for t in (x, w, b, mean, var)])
    expected = torch.relu(nn.functional.batch_norm(x.double(), mean.double(), var.double(), w.double(), b.double(),
                                                   False, 0.1, 1e-5))
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, expected)


def test_a_downsampled_residual_with_both_batch_norms_in_one_kernel():
    """The downsample's batch norm joins the residual chain (bn3, bn, add_, relu_): its call, after
    the downsample's conv, is the waiting run's next step, served before any chain could start on it."""
    torch.manual_seed(0)
    downsample = nn.Sequential(nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16))
    block, x = Bottleneck(8, 4, downsample=downsample).eval(), torch.randn(2, 8, 9, 11)
    chains = _chains(block, x)
    assert sorted(c.op for c in chains) == ["chain:native_batch_norm+native_batch_norm+add_+relu_",
                                            "chain:native_batch_norm+relu_"]
    with torch.no_grad():
        expected = block(x)
    calls: list[int] = []
    specs = [_kernel_spec(c, calls) for c in chains]
    installation = router.install(specs)
    try:
        with torch.no_grad():
            got = block(x)
        taken = {op: (installation.counts[op].kernel, installation.counts[op].fallback) for op in {s.op for s in specs}}
    finally:
        installation.remove()
    assert taken == {"chain:native_batch_norm+native_batch_norm+add_+relu_": (1, 0),
                     "chain:native_batch_norm+relu_": (2, 0)}, taken
    torch.testing.assert_close(got.clone(), expected)


def test_at_its_modules_a_batch_norm_chain_runs_in_eval_and_steps_aside_in_training():
    """Installed with the model, `bn -> relu` goes at the modules (no placeholder): the kernel in
    eval; in training the batch norm's own forward (batch statistics, running stats updated);
    and the batch norm's output, written in place by the ReLU, reads as the kernel's output."""
    block, x = _block(), torch.randn(2, 8, 9, 11)
    chains = [c for c in _chains(block, x) if c.modules]
    with torch.no_grad():
        expected = block(x)
    calls: list[int] = []
    specs = [_kernel_spec(c, calls) for c in chains]
    installation = router.install(specs, block)
    try:
        assert all(name in installation.module_routes for name in (s.name for s in specs))
        with torch.no_grad():
            got = block(x)
            eval_calls = len(calls)
            stem_bn, stem_relu = block[1], block[2]
            y = stem_bn(block[0](x))
            z = stem_relu(y)
            kept = y.amin(dim=(2, 3))  # y was written in place: it is z
            block.train()
            stats = stem_bn.running_mean.clone()
            trained = block(x)
            moved = not torch.equal(stats, stem_bn.running_mean)
    finally:
        installation.remove()
        block.eval()
    assert eval_calls == 4  # the stem, bn1 and bn2 (each then the shared relu), bn3 += identity then relu
    torch.testing.assert_close(got.clone(), expected)
    torch.testing.assert_close(kept, z.amin(dim=(2, 3)))
    assert bool((kept >= 0).all())
    assert len(calls) == 5 and moved  # no kernel in training, the running statistics updated
    assert trained.shape == expected.shape


@pytest.mark.parametrize(("activation", "op"), [(nn.ReLU6(inplace=True), "hardtanh_"), (nn.SiLU(inplace=True), "silu_"),
                                                (nn.Mish(inplace=True), "mish_"), (nn.Hardswish(inplace=True), "hardswish_")])
def test_other_nets_in_place_activations_after_a_batch_norm_are_chains_at_their_modules(activation, op):
    """MobileNet's ReLU6 (hardtanh_), EfficientNet's SiLU, Mish, MobileNetV3's Hardswish, all in
    place: the same chain, at the modules, lowered by the chain family (mish_ is pointwise as ATen
    tags mish; hardswish, which ATen does not tag, as the element-wise family computes it)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), activation).eval()
    (chain,) = _chains(net, torch.randn(2, 3, 9, 9))
    assert chain.op == f"chain:native_batch_norm+{op}" and chain.modules and chain.modules["eval_only"]
    program = lower(chain.to_json(), chain.input_metas, chain.output_metas)
    assert not isinstance(program, str), program


class BatchNormAct(nn.BatchNorm2d):
    """timm's BatchNormAct2d, in short: the norm and its activation in one forward."""

    def __init__(self, channels: int) -> None:
        super().__init__(channels)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                     self.training, self.momentum, self.eps)
        return self.act(x)


def test_a_batch_norm_with_its_activation_in_one_forward_is_routed_there_in_eval_only():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), BatchNormAct(8)).eval()
    net[1].running_var.uniform_(0.5, 2)
    x = torch.randn(2, 3, 9, 9)
    (chain,) = _chains(net, x)
    assert chain.op == "chain:native_batch_norm+silu_" and chain.module["eval_only"] and chain.modules is None
    with torch.no_grad():
        expected = net(x)
    calls: list[int] = []
    spec = _kernel_spec(chain, calls)
    installation = router.install([spec], net)
    try:
        assert spec.name in installation.module_routes
        with torch.no_grad():
            got = net(x)
            net.train()
            stats = net[1].running_mean.clone()
            net(x)
            moved = not torch.equal(stats, net[1].running_mean)
        counts = installation.counts[spec.op]
        assert (counts.kernel, counts.fallback, len(calls)) == (1, 1, 1) and moved
    finally:
        installation.remove()
        net.eval()
    torch.testing.assert_close(got, expected)


def test_the_chain_as_python_indexes_a_batch_norms_tuple_and_runs():
    """What the LLM generator is shown: batch norm returns (out, mean, invstd), so its value is s0[0];
    the program runs and gives the chain's reference output."""
    from kernforge.tasks import chain_program

    chain = next(c for c in _chains(_block(), torch.randn(2, 8, 9, 11)) if "add_" in c.op)
    program = chain_program(chain.to_json())
    assert "torch.ops.aten.add_.Tensor(s0[0], in5)" in program and "relu_.default(s1)" in program
    namespace: dict = {"torch": torch}
    exec(program, namespace)  # noqa: S102 - the program under test
    inputs = [torch.randn(m["shape"]) for m in chain.input_metas]
    inputs[4] = inputs[4].abs() + 0.1
    (got,) = namespace["chain"](*[t.clone() for t in inputs])
    (expected,) = ChainReference(chain.to_json())(*inputs)
    torch.testing.assert_close(got, expected)


def test_an_in_place_op_is_read_from_its_schema_as_torch_2_11_has_no_inplace_tag():
    """capture and the router tell relu_ from relu by the schema (torch 2.11, on the GPU machine,
    has no torch.Tag.inplace: capture crashed there)."""
    from kernforge.runtime.kernels import in_place

    aten = torch.ops.aten
    assert all(in_place(op) for op in (aten.relu_.default, aten.add_.Tensor, aten.hardtanh_.default, aten.silu_.default))
    assert not any(in_place(op) for op in (aten.relu.default, aten.add.Tensor, aten.native_batch_norm.default,
                                           aten.add.out))


@contextlib.contextmanager
def _installed_at_modules(spec: router.KernelSpec, net: nn.Module):
    """The chain's kernel installed with the net, at its modules (no placeholders), then removed."""
    installation = router.install([spec], net)
    try:
        assert spec.name in installation.module_routes
        yield installation
    finally:
        installation.remove()


def _read_by_a_hook(module: nn.Module, run) -> tuple[torch.Tensor, int]:
    """run()'s output while a forward hook reads the module's output (returning None, so it keeps
    it), and how many times the hook ran."""
    seen: list[torch.Tensor] = []
    handle = module.register_forward_hook(lambda m, args, out: seen.append(out.sum()))
    try:
        return run(), len(seen)
    finally:
        handle.remove()


class Residual(nn.Module):
    """A residual's tail as ResNet's bottleneck writes it: `out = bn(conv(x)); out += identity;
    relu(out)` (the conv keeps the chain from being the whole forward)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1)
        self.bn, self.relu = nn.BatchNorm2d(channels), nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor, identity: torch.Tensor) -> torch.Tensor:
        out = self.bn(self.conv(x))
        out += identity
        return self.relu(out)


def test_a_residuals_glue_op_between_its_modules_binds_the_identity_there_or_steps_aside():
    """At its modules the residual's kernel takes the identity at `out += identity`; an identity
    of other strides or a hook that reads bn's output leaves the modules'
    own forwards to run, bit-exactly."""
    torch.manual_seed(0)
    net = Residual(6).eval()
    net.bn.running_var.uniform_(0.5, 2)
    x, identity = torch.randn(2, 6, 5, 7), torch.randn(2, 6, 5, 7)
    ((chain),) = _chains(net, x, identity)
    assert chain.op == "chain:native_batch_norm+add_+relu_" and chain.modules["ops"] == {"1": "aten::add_.Tensor"}
    calls: list[int] = []
    spec = _kernel_spec(chain, calls)
    other = identity.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # the same values, channels last
    with torch.no_grad():
        expected = net(x, identity)
        with _installed_at_modules(spec, net):
            got = net(x, identity)
            took = len(calls)
            strided = net(x, other)
            hooked, seen = _read_by_a_hook(net.bn, lambda: net(x, identity))
    assert took == 1 and len(calls) == 1  # the kernel once; the others ran the modules' own forwards
    torch.testing.assert_close(got, expected)
    assert torch.equal(strided, expected) and torch.equal(hooked, expected) and seen == 1


def _downsampled_block() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    block = Bottleneck(8, 4, downsample=nn.Sequential(nn.Conv2d(8, 16, 1), nn.BatchNorm2d(16))).eval()
    for m in block.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_var.uniform_(0.5, 2)
    return block, torch.randn(2, 8, 5, 7)


def test_a_downsampled_residual_goes_at_its_modules_with_the_downsamples_batch_norm_a_side_stage():
    """`bn3, downsample's bn, +=, relu`: the downsample's conv a call beside the chain, its batch
    norm a side stage whose value the `+=` takes. Installed with the block: the kernel once; a hook
    that reads the downsample's output, or the block in training, leave the modules' own forwards
    (bit-exact)."""
    block, x = _downsampled_block()
    (chain,) = [c for c in _chains(block, x) if c.op.count("batch_norm") == 2]
    assert chain.modules["names"] == [["bn3", "downsample.1", None, "relu"]] and chain.modules["sides"] == [1]
    assert chain.modules["inputs"][5:] == [["stage", 1, 0], ["stage_param", 1, "weight"], ["stage_param", 1, "bias"],
                                           ["stage_param", 1, "running_mean"], ["stage_param", 1, "running_var"]]
    calls: list[int] = []
    spec = _kernel_spec(chain, calls)
    with torch.no_grad():
        expected = block(x)
        with _installed_at_modules(spec, block):
            got = block(x)
            took = len(calls)
            hooked, seen = _read_by_a_hook(block.downsample, lambda: block(x))
            block.train()
            trained = block(x)
        block.train()
        trained_own = block(x)
    assert took == 1 and len(calls) == 1 and seen == 1
    torch.testing.assert_close(got, expected)
    assert torch.equal(hooked, expected) and torch.equal(trained, trained_own)


class ValueSecond(nn.Module):
    """RegNet's `relu(x + f(x))` and MobileNetV2's `x + conv(x)`: the chain's value is the add's
    second argument; with `last_module=False` the add ends the chain."""

    def __init__(self, channels: int, last_module: bool):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(channels, channels, 1), nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True) if last_module else None

    def forward(self, x: torch.Tensor, identity: torch.Tensor | None = None) -> torch.Tensor:
        out = (x if identity is None else identity) + self.bn(self.conv(x))
        return self.relu(out) if self.relu is not None else out


@pytest.mark.parametrize("last_module", [True, False])
def test_a_glue_add_may_take_the_chains_value_second_and_end_the_chain(last_module: bool):
    torch.manual_seed(0)
    net = ValueSecond(6, last_module).eval()
    net.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 6, 5, 7)
    (chain,) = _chains(net, x)
    assert chain.modules["ops"] == {"1": "aten::add.Tensor"}
    assert chain.modules["names"] == [["bn", None, "relu"] if last_module else ["bn", None]]
    calls: list[int] = []
    spec = _kernel_spec(chain, calls)
    other = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # x's values, channels last
    with torch.no_grad():
        expected = net(x)
        with _installed_at_modules(spec, net):
            got = net(x)
            took = len(calls)
            # bn's input as proved, the add's identity not: the glue op refuses, the modules' own run
            strided = net(x, other)
        own = net(x, other)
    assert took == 1 and len(calls) == 1
    assert type(got) is torch.Tensor  # the kernel's output, not a value waiting
    torch.testing.assert_close(got, expected)
    assert torch.equal(strided, own)
