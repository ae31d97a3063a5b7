"""kernforge.integrate: a run's winner installed into the unmodified model (CPU, the C backend).

The session's one real run of tests/models/tiny_softmax.py (conftest's finished_run: built-in
proposer, 2 candidates) is copied for this module, without its apply's record; its first
finalist is then marked as the run's winner, because on a 2-core CPU the search rarely beats
eager on a 2x40x40 softmax and what these tests test is the installing: routing, guards,
fallbacks, compile, removal. The kernel itself is the run's own, proved
correct by the evaluator.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import TINY_MODEL, run_cli

import kernforge
from kernforge.backends import get_backend
from kernforge.errors import UserError
from kernforge.integrate.endtoend import judge_outputs, oracle_of
from kernforge.records import EndToEnd
from kernforge.runtime import router
from kernforge.search.runs import read_run

sys.path.insert(0, str(TINY_MODEL.parent))
import tiny_softmax  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("integrate")]  # one worker: module fixtures made once
CPU_LOADING = get_backend("cpu").loading  # the backend these tests' specs pose as

OP = torch.ops.aten._softmax.default
SOFTMAX = "aten::_softmax.default"


def promote_first_finalist(run_dir: Path) -> str:
    """Mark the run's first re-evaluated candidate as faster than eager: its task's winner."""
    confirm = sorted(run_dir.glob("tasks/*/nodes/*/confirm.json"))[0]
    data = json.loads(confirm.read_text())
    assert data["status"] == "ok", data["reason"]
    data.update(faster_than_eager=True, speedup_vs_eager=1.3)
    confirm.write_text(json.dumps(data))
    return confirm.parent.name


@pytest.fixture(scope="module")
def run_dir(finished_run, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The finished run as `optimize --no-apply` leaves it (an apply's measured placement would
    steer kernforge.patch), its first finalist promoted to winner."""
    copy = finished_run.copy_to(tmp_path_factory.mktemp("runs"), applied=False)
    promote_first_finalist(copy)
    return copy


@pytest.fixture
def model():
    torch.manual_seed(0)
    return tiny_softmax.Model(48), tiny_softmax.get_inputs()[0]


def test_the_proved_call_takes_the_kernel_and_matches(run_dir, model):
    net, x = model
    with torch.no_grad():
        before = net(x)
        with kernforge.patch(net, run_dir) as handle:
            after = net(x)
            assert handle.counts["aten::_softmax.default"].kernel == 1
    assert torch.allclose(after, before, rtol=1e-5, atol=1e-6)


def test_an_unproved_shape_dtype_or_layout_falls_back_to_the_original(run_dir):
    x = torch.randn(2, 40, 40)
    unproved = {"shape": torch.randn(3, 40, 40), "dtype": x.double(),
                "layout": x.transpose(1, 2).contiguous().transpose(1, 2),
                "misaligned": torch.randn(2 * 40 * 40 + 1)[1:].view(2, 40, 40),
                "other dim": x}
    expected = {k: OP(v, 1 if k == "other dim" else -1, False) for k, v in unproved.items()}
    with torch.no_grad(), kernforge.patch(None, run_dir) as handle:
        got = {k: OP(v, 1 if k == "other dim" else -1, False) for k, v in unproved.items()}
        counts = handle.counts["aten::_softmax.default"]
        assert counts.kernel == 0 and counts.fallback >= len(unproved)
        assert OP(x, -1, False) is not None and counts.kernel == 1  # the proved call still takes it
    for key in unproved:
        assert torch.equal(got[key], expected[key]), key


def test_remove_and_unpatch_restore_the_original_exactly(run_dir, model):
    net, x = model
    dump_before = torch._C._dispatch_dump("aten::_softmax")
    with torch.no_grad():
        before = net(x)
        handle = kernforge.patch(net, run_dir)
        assert torch._C._dispatch_dump("aten::_softmax") != dump_before
        handle.remove()
        assert torch._C._dispatch_dump("aten::_softmax") == dump_before
        assert torch.equal(net(x), before)
        kernforge.patch(net, run_dir)
        kernforge.patch(net, run_dir)
        assert kernforge.unpatch() == 2
        assert torch._C._dispatch_dump("aten::_softmax") == dump_before
        assert torch.equal(net(x), before)


def test_patched_model_matches_the_original_on_fresh_inputs(run_dir, model):
    from kernforge.integrate.endtoend import forward, fresh_model_inputs, wide_copy

    net, x = model
    double, _ = wide_copy(net)
    for seed in (1, 2, 3):
        inputs = fresh_model_inputs((x,), seed)
        oracle = oracle_of(net, inputs, double)
        assert oracle.exact
        with kernforge.patch(net, run_dir) as handle:
            outs = forward(net, inputs)
        assert handle.counts["aten::_softmax.default"].kernel == 1
        why, _ = judge_outputs(outs, oracle)
        assert why is None, why


def test_inference_mode_and_no_grad_take_the_kernel(run_dir, model):
    net, x = model
    with kernforge.patch(net, run_dir) as handle:
        with torch.inference_mode():
            net(x)
        with torch.no_grad():
            net(x)
        assert handle.counts["aten::_softmax.default"].kernel == 2


def test_inputs_that_require_grad_fall_back_and_keep_their_gradient(run_dir, model):
    net, x = model
    reference = x.clone().requires_grad_()
    net(reference).sum().backward()
    with kernforge.patch(net, run_dir) as handle:
        patched = x.clone().requires_grad_()
        net(patched).sum().backward()
        assert handle.counts["aten::_softmax.default"].kernel == 0
    assert torch.equal(patched.grad, reference.grad)


def test_torch_compile_puts_the_custom_op_in_the_graph_and_fuses_around_it(run_dir):
    from torch._inductor.utils import run_and_get_code

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 2.0 + 1.0, dim=-1).sub(0.5).relu()

    x = torch.randn(2, 40, 40)
    expected = f(x)
    with torch.no_grad(), kernforge.patch(None, run_dir) as handle:
        out, code = run_and_get_code(torch.compile(f), x)
        assert handle.counts["aten::_softmax.default"].custom_op >= 1
    text = "\n".join(code)
    name = handle.specs[0].name
    assert f"torch.ops.kernforge.{name}.default" in text
    # inductor still fuses around it: the mul and add before the kernel are one C++ kernel, the
    # sub and relu after it one more, and nothing else is generated
    kernels = [line for line in text.splitlines() if "cpp_fused_" in line and "async_compile" in line]
    assert len(kernels) == 2, kernels
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_a_graph_compiled_before_the_patch_is_not_reused_under_it(run_dir):
    def g(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1) * 3.0

    x = torch.randn(2, 40, 40)
    compiled = torch.compile(g)
    with torch.no_grad():
        compiled(x)
        with kernforge.patch(None, run_dir) as handle:
            compiled(x)
            assert handle.counts["aten::_softmax.default"].custom_op >= 1


def test_guards_check_every_argument():
    desc = [{"shape": [4, 8], "dtype": "torch.float32", "stride": [8, 1], "device": "cpu"}, -1, False,
            {"kwargs": {"dtype": "torch.float32"}}]
    guard = router.make_guard(desc)
    x = torch.randn(4, 8)
    assert guard((x, -1, False), {"dtype": torch.float32}) == [x]
    assert guard((x, -1, 0), {"dtype": torch.float32}) is None  # 0 is not False
    assert guard((x, 1, False), {"dtype": torch.float32}) is None
    assert guard((x, -1, False), {"dtype": torch.float16}) is None
    assert guard((x, -1, False), {}) is None
    assert guard((x.t().contiguous().t(), -1, False), {"dtype": torch.float32}) is None
    rebuilt_args, rebuilt_kwargs = router.make_rebuild(desc)([x])
    assert rebuilt_args == [x, -1, False] and rebuilt_kwargs == {"dtype": torch.float32}


def test_in_place_ops_are_not_installed(run_dir):
    from kernforge.integrate.install import installable, winners

    winner = winners(read_run(run_dir))[0]
    assert installable(winner) is None
    winner.op = "aten::relu_.default"
    assert "in-place" in installable(winner)


def test_bad_input_is_one_line_and_leaves_the_model_unchanged(run_dir, tmp_path, model):
    net, x = model
    dump_before = torch._C._dispatch_dump("aten::_softmax")
    with pytest.raises(UserError, match="not a kernforge run folder"):
        kernforge.patch(net, tmp_path)
    cuda_run = tmp_path / "cuda-run"
    subprocess.run(["cp", "-r", str(run_dir), str(cuda_run)], check=True)
    config = json.loads((cuda_run / "config.json").read_text())
    (cuda_run / "config.json").write_text(json.dumps({**config, "device": "cuda", "device_name": "NVIDIA H200"}))
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="proved on a GPU"):
            kernforge.patch(net, cuda_run)
    newer = tmp_path / "newer-run"
    subprocess.run(["cp", "-r", str(run_dir), str(newer)], check=True)
    (newer / "config.json").write_text(json.dumps({**config, "format_version": 99}))
    with pytest.raises(UserError, match="newer than this kernforge reads"):
        read_run(newer)
    assert torch._C._dispatch_dump("aten::_softmax") == dump_before


def test_kernforge_apply_on_another_model_fails_in_one_line(run_dir, write_model):
    other = write_model("other", """
        import torch
        class Model(torch.nn.Module):
            def forward(self, x):
                return torch.softmax(x, dim=-1)
        def get_inputs():
            return [torch.randn(3, 7)]
        def get_init_inputs():
            return []
    """)
    proc = run_cli("apply", str(run_dir), str(other), "--no-compile")
    assert proc.returncode != 0
    assert "none of the run's kernels matches a call" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_apply_measures_the_model_four_ways_and_records_it(run_dir, tmp_path):
    from kernforge.integrate.apply import apply_run

    run_dir = Path(shutil.copytree(run_dir, tmp_path / "run"))  # its apply.json must not steer the other tests
    report = apply_run(run_dir)
    assert set(report.timings_ms) == {"eager", "patched eager", "compile", "patched compile"}
    kernel = report.kernels[0]
    assert kernel.calls_per_forward == 1 and kernel.in_compiled_graph
    assert kernel.eager_verdict in ("faster", "within noise", "slower")
    checks = {(c.variant, c.inputs) for c in report.checks}
    assert ("patched eager", "fresh2") in checks and all(c.passed for c in report.checks)
    assert report.routing or not (kernel.installed_eager or kernel.installed_compile)
    # every kernel the model reaches is costed, installed or dropped
    assert [r.kernel for r in report.routing] == [kernel.kernel]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["end_to_end"]["timings_ms"] == report.to_json()["timings_ms"]
    shown = run_cli("show", str(run_dir))
    assert "end to end on cpu" in shown.stdout and "patched compile" in shown.stdout


def test_apply_under_a_time_limit_sizes_its_rounds_and_reports_them(run_dir, tmp_path):
    run_dir = Path(shutil.copytree(run_dir, tmp_path / "run"))
    proc = run_cli("apply", str(run_dir), "--no-compile", "--time-limit", "20s", "--json")
    assert proc.returncode == 0, proc.stderr
    report = EndToEnd.from_json(json.loads(proc.stdout))
    assert report.time_limit_s == 20.0
    assert report.rounds and all(m.rounds >= 2 for m in report.rounds)
    assert report.rounds[0].variants[0] == "eager"
    assert report.wall_s < 20.0 + 10.0  # the floor of two rounds may pass a limit, not by much here
    # a limit no measurement's rounds fit in, however idle the machine: the report says it cut them
    shown = run_cli("apply", str(run_dir), "--no-compile", "--time-limit", "0.01s")
    assert "apply's time limit 0 s:" in shown.stdout, shown.stdout
    assert "the time limit (0 s) cut the timing rounds" in shown.stdout, shown.stdout


def test_a_kernel_that_calls_the_op_it_replaces_gets_the_original():
    calls = []

    def entry(x, dim, half):
        calls.append(1)
        return torch.softmax(x, dim) * 1.0  # its own fallback path: must not route back to itself

    desc = [{"shape": [3, 5], "dtype": "torch.float32", "stride": [5, 1], "device": "cpu"}, -1, False]
    outputs = [{"shape": [3, 5], "dtype": "torch.float32", "stride": [5, 1], "device": "cpu"}]
    spec = router.KernelSpec(name="softmax_reentrant_test", op="aten::_softmax.default", args=desc,
                             outputs=outputs, backend="cpu", loading=CPU_LOADING,
                             entry=entry, devices=frozenset({torch.device("cpu")}))
    x = torch.randn(3, 5)
    installation = router.install([spec])
    try:
        with torch.no_grad():
            out = OP(x, -1, False)
    finally:
        installation.remove()
    assert len(calls) == 1 and installation.counts["aten::_softmax.default"].kernel == 1
    assert torch.allclose(out, torch.softmax(x, -1))


def test_parameters_are_plain_tensors_to_a_kernel():
    """A model's weights are nn.Parameter: a kernel takes them as it takes any tensor (ResNet-50's
    batch norms on the H200 fell back on every call before)."""
    desc = [{"shape": [4], "dtype": "torch.float32", "stride": [1], "device": "cpu"},
            {"shape": [4], "dtype": "torch.float32", "stride": [1], "device": "cpu"}]
    spec = router.KernelSpec(name="mul_parameter_test", op="aten::mul.Tensor", args=desc, outputs=[desc[0]],
                             backend="cpu", loading=CPU_LOADING, entry=lambda a, b: a.detach() * b.detach(),
                             devices=frozenset({torch.device("cpu")}))
    weight = torch.nn.Parameter(torch.randn(4))
    x = torch.randn(4)
    installation = router.install([spec])
    try:
        with torch.no_grad():
            out = x * weight
    finally:
        installation.remove()
    assert installation.counts["aten::mul.Tensor"].kernel == 1
    assert torch.equal(out, x * weight.detach())


@pytest.mark.parametrize("dtype,number", [(torch.float32, 0), (torch.bfloat16, 1e-3), (torch.int32, 0.5),
                                          (torch.int64, 3), (torch.float16, True)])
def test_a_number_where_the_op_takes_a_tensor_falls_back_to_torch_own_result(dtype, number):
    """`x + 0` reaches aten::add.Tensor with the number wrapped; a fallback gives what torch gives
    (the same dtype by type promotion, the same values). The Qwen and Gemma runs crashed on it."""
    desc = [{"shape": [4], "dtype": "torch.float32", "stride": [1], "device": "cpu"},
            {"shape": [4], "dtype": "torch.float32", "stride": [1], "device": "cpu"}]
    spec = router.KernelSpec(name="add_scalar_fallback_test", op="aten::add.Tensor", args=desc, outputs=[desc[0]],
                             backend="cpu", loading=CPU_LOADING,
                             entry=lambda a, b: a + b, devices=frozenset({torch.device("cpu")}))
    x = (torch.randn(5) * 10).to(dtype)
    expected = x + number
    installation = router.install([spec])
    try:
        got = x + number
    finally:
        installation.remove()
    assert installation.counts["aten::add.Tensor"].fallback >= 1
    assert got.dtype == expected.dtype and torch.equal(got, expected)


def _timing(ms: float):
    from kernforge.records.timing import Timing

    return Timing(p20_ms=ms * 0.99, p50_ms=ms, p80_ms=ms * 1.01, runs=20, method="test")


def test_under_compile_kernels_that_pay_alone_but_not_together_keep_the_best(monkeypatch):
    """The compile choice as ResNet-50 met it on the H200: each of three kernels pays alone, the
    three together do not; the best one stays, the others are said."""
    from kernforge.integrate import apply as apply_module

    specs = [router.KernelSpec(name=f"k{i}", op=f"aten::op{i}.default", args=[], outputs=[], backend="cpu",
                               loading=CPU_LOADING,
                               entry=lambda: None) for i in range(3)]
    effects = {s.name: apply_module.KernelEffect(task=f"t{i}", op=s.op, kernel=s.name, op_speedup_vs_eager=1.4,
                                                 calls_per_forward=13) for i, s in enumerate(specs)}
    alone_ms = {"k0": 3.6, "k1": 3.5, "k2": 3.8}

    def phase(model, inputs, device, in_graph, installed, tag, pace=None):
        ms = 5.0 if len(in_graph) > 1 else alone_ms[in_graph[0].name]
        counts = {s.op: router.RouteCounts(custom_op=1, traced_by_kernel={s.name: 1}) for s in in_graph}
        return apply_module.CompilePhase(specs=in_graph, timings={"eager": _timing(5.0), "patched compile": _timing(ms)},
                                         counts=counts, compiled=lambda *a: None)

    monkeypatch.setattr(apply_module, "_compile_phase", phase)
    first = {"eager": _timing(5.0), "compile": _timing(4.1)}
    kept, measured = apply_module._compile_choice(None, (), torch.device("cpu"), specs, effects, first, True,
                                                  lambda line: None)
    assert [s.name for s in kept] == ["k1"] and measured.specs == [specs[1]]
    assert effects["k1"].installed_compile and not effects["k0"].installed_compile
    assert "not beside the others" in effects["k0"].note and effects["k0"].compile_verdict == "faster"


def test_under_a_time_limit_kernels_are_not_compiled_alone_where_a_compile_no_longer_fits(monkeypatch):
    """Apply's limit counts its compiles: once the time left is under what the phase with every
    kernel took, no kernel is compiled alone any more, and each one left says why."""
    from kernforge.integrate import apply as apply_module
    from kernforge.integrate.pace import Pace

    specs = [router.KernelSpec(name=f"k{i}", op=f"aten::op{i}.default", args=[], outputs=[], backend="cpu",
                               loading=CPU_LOADING, entry=lambda: None) for i in range(3)]
    effects = {s.name: apply_module.KernelEffect(task=f"t{i}", op=s.op, kernel=s.name, op_speedup_vs_eager=1.4,
                                                 calls_per_forward=13) for i, s in enumerate(specs)}
    compiled_alone = []

    def phase(model, inputs, device, in_graph, installed, tag, pace=None):
        if len(in_graph) == 1:
            compiled_alone.append(in_graph[0].name)
        time.sleep(0.2)  # the compile: the limit below holds this phase and one more, not two
        counts = {s.op: router.RouteCounts(custom_op=1, traced_by_kernel={s.name: 1}) for s in in_graph}
        return apply_module.CompilePhase(specs=in_graph, timings={"eager": _timing(5.0), "patched compile": _timing(5.5)},
                                         counts=counts, compiled=lambda *a: None)

    monkeypatch.setattr(apply_module, "_compile_phase", phase)
    first = {"eager": _timing(5.0), "compile": _timing(4.1)}
    pace = Pace.starting(0.5, time.perf_counter(), routing_s=0.0, expected=4)
    kept, _ = apply_module._compile_choice(None, (), torch.device("cpu"), specs, effects, first, True,
                                           lambda line: None, pace)
    assert kept == [] and compiled_alone == ["k0"]
    assert all("not tried alone under compile: the time limit had" in effects[n].note for n in ("k1", "k2"))


def test_optimize_applies_by_default_and_says_what_it_did(finished_run):
    # the session's run was made without --apply/--no-apply: its --json and summary hold the report
    end_to_end = finished_run.data["end_to_end"]
    summary = json.loads((finished_run.run_dir / "summary.json").read_text())
    assert summary["end_to_end"] == end_to_end
    assert end_to_end.get("note") or end_to_end.get("timings_ms"), end_to_end
    assert (finished_run.run_dir / "integrate" / "apply.json").is_file()


def test_patch_follows_where_apply_measured_each_kernel_pays(run_dir, tmp_path):
    run = Path(shutil.copytree(run_dir, tmp_path / "run"))
    name = kernforge.patch(None, run).specs[0].name
    kernforge.unpatch()
    x = torch.randn(2, 40, 40)

    def applied(in_eager: bool, under_compile: bool) -> None:
        report = {"kernels": [{"kernel": name, "installed_eager": in_eager, "installed_compile": under_compile}],
                  "timings_ms": {"compile": {"p50_ms": 1.0}}}
        (run / "integrate").mkdir(exist_ok=True)
        (run / "integrate" / "apply.json").write_text(json.dumps(report))

    applied(in_eager=False, under_compile=True)  # ResNet-50's batch norms on the H200
    with torch.no_grad(), kernforge.patch(None, run) as handle:
        OP(x, -1, False)
        assert handle.counts[SOFTMAX].kernel == 0 and handle.counts[SOFTMAX].fallback >= 1
        torch.compile(lambda t: torch.softmax(t, -1) * 2.0)(x)
        assert handle.counts[SOFTMAX].custom_op >= 1
    with torch.no_grad(), kernforge.patch(None, run, measured=False) as handle:
        OP(x, -1, False)
        assert handle.counts[SOFTMAX].kernel == 1
    applied(in_eager=False, under_compile=False)
    with kernforge.patch(None, run) as handle:
        assert not handle.specs and "makes the model slower" in next(iter(handle.skipped.values()))


class _NoFloat64(torch.nn.Module):
    """A bf16 block with an op that has no float64 kernel (as grouped gemm has none)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float64:
            raise RuntimeError("Expected mat_a to be Float32, BFloat16 or Float16 matrix, got Double")
        return torch.nn.functional.rms_norm(self.lin(x).relu(), (64,)) @ self.lin.weight


def test_a_16_bit_model_that_cannot_run_in_float64_is_judged_against_float32():
    """Against eager's own outputs, a bf16 model's allowance is one rounding (its rtol), which an
    honest kernel that rounds once differently exceeds after a few layers; the float32 run keeps
    eager's own error in the bound."""
    from kernforge.integrate.endtoend import forward, oracle_of, wide_copy

    torch.manual_seed(0)
    net = _NoFloat64().to(torch.bfloat16).eval()
    x = torch.randn(16, 64, dtype=torch.bfloat16)
    double, _ = wide_copy(net)
    oracle = oracle_of(net, (x,), double, lambda: wide_copy(net, torch.float32)[0])
    assert oracle.exact and oracle.note.startswith("in float32: float64 run failed (RuntimeError")
    assert oracle.outputs[0].dtype == torch.float32 and oracle.eager_error > 0
    rounded_otherwise = (forward(net.float(), (x.float(),))[0] * (1 + 2 ** -8)).to(torch.bfloat16)
    assert judge_outputs([rounded_otherwise], oracle)[0] is None
    without = oracle_of(net.to(torch.bfloat16), (x,), double)
    assert not without.exact and "float64 run failed" in without.note


def test_a_compiled_models_outputs_are_allowed_the_compilers_own_error_too():
    """A patched model under torch.compile is judged with each element allowed the larger of
    eager's and the unpatched compiled model's own error: an element where inductor itself strays
    from float64 is not the kernel's fault; without that peer the same output fails."""
    from kernforge.integrate.endtoend import Oracle

    torch.manual_seed(0)
    exact = torch.randn(4096, dtype=torch.float64)
    eager = exact.to(torch.bfloat16)  # one rounding: eager's own error
    compiled = eager.clone()
    compiled[7] = (exact[7] * 1.05).to(torch.bfloat16)  # the compiler strays 5% at one element
    oracle = Oracle(outputs=[exact], eager=[eager], exact=True)
    patched = compiled.clone()
    patched[7] = (exact[7] * 1.06).to(torch.bfloat16)  # the patched compiled model a little further
    assert judge_outputs([patched], oracle)[0] is not None
    assert judge_outputs([patched], oracle, [compiled])[0] is None
    patched[9] = (exact[9] * 1.5).to(torch.bfloat16)  # where the compiler did not stray, eager's bound holds
    assert "1 of 4096" in judge_outputs([patched], oracle, [compiled])[0]


def test_kernels_whose_compiled_outputs_fail_are_not_installed_under_compile(monkeypatch):
    """apply acts on the patched compiled model's check: where its outputs fail (and the
    unpatched compiled model's pass), the kernels chosen under compile are taken out there."""
    from types import SimpleNamespace

    from kernforge.integrate import apply as apply_module
    from kernforge.integrate import endtoend as e2e
    from kernforge.records import KernelEffect

    monkeypatch.setattr(router, "install", lambda specs, model: SimpleNamespace(remove=lambda: None))
    monkeypatch.setattr(e2e, "with_compile_flag", lambda specs, names: specs)
    exact = torch.randn(256, dtype=torch.float64)
    oracle = e2e.Oracle(outputs=[exact], eager=[exact.float()], exact=True)
    spec = SimpleNamespace(name="k")
    for wrong, installed in ((False, True), (True, False)):
        effect = KernelEffect(task="t0", op="aten::x", kernel="k", op_speedup_vs_eager=2.0, installed_compile=True)
        report = EndToEnd(run_dir="r", model="m", device="cpu")
        patched = (lambda x: x * 1.5) if wrong else (lambda x: x.clone())
        apply_module._check_compiled(None, patched, lambda x: x.clone(), {"captured": (exact.float(),)},
                                     {"captured": oracle}, [], [spec], {"k": effect}, report)
        assert effect.installed_compile is installed
        assert ("not under compile" in effect.note) is wrong and bool(report.notes) is wrong


_F32_ONLY = torch.library.Library("kftest_f32", "DEF")
_F32_ONLY.define("mix(Tensor x, Tensor w) -> Tensor")


@torch.library.impl(_F32_ONLY, "mix", "CPU")
def _mix(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    if x.dtype == torch.float64:  # as grouped gemm: no float64 kernel
        raise RuntimeError("Expected mat_a to be Float32, BFloat16 or Float16 matrix, got Double")
    return x @ w


class _Float32Op(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.ops.kftest_f32.mix(self.lin(x).relu(), self.lin.weight)
        return torch.nn.functional.rms_norm(h, (64,)) @ self.lin.weight


def test_a_model_with_an_op_that_has_no_float64_kernel_is_judged_in_float64_around_it():
    """A float32 MoE's grouped gemm has no float64 kernel: that op runs in float32, the rest in
    float64, so eager's own error is measured and carried in the bound. Against eager's outputs
    (the dtype's rtol alone) an honest kernel that rounds once otherwise failed end to end."""
    from kernforge.integrate.endtoend import forward, oracle_of, wide_copy

    torch.manual_seed(0)
    net = _Float32Op().eval()
    x = torch.randn(16, 64)
    double, _ = wide_copy(net)
    oracle = oracle_of(net, (x,), double)
    assert oracle.exact and oracle.note.startswith("in float64 but kftest_f32::mix in float32: float64 run failed")
    assert oracle.outputs[0].dtype == torch.float64 and oracle.eager_error > 0
    eager = forward(net, (x,))[0]
    rounded_otherwise = eager * (1 + 2 ** -22)  # a few float32 roundings away from eager
    assert judge_outputs([rounded_otherwise], oracle)[0] is None
    assert judge_outputs([eager * (1 + 2 ** -8)], oracle)[0] is not None  # a bf16-sized error is still caught
