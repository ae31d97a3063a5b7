"""kernforge.capture: a profile to believe (issue 21). Per-op times are the ops replayed on their
saved inputs, timed as the evaluator times eager; the ranking repeats; attention is compute; the
coverage line says what it compares and warns when it is far from 100%.

The timing tests run torch on one thread: on this shared 2-core machine a 2-thread op waits for
the other core whenever another process holds it (a (2, 40, 40) softmax: 3 us alone, 16-25 ms per
call while other test suites ran), which no measurement method can see through. One thread keeps
what these tests check (the method) apart from what the machine does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import SOFTMAX_OP
from torch import nn

from kernforge.capture import Capture, capture_model
from kernforge.capture.recorder import op_kind
from kernforge.evaluate import evaluate_baseline
from kernforge.evaluate.runner import discard_reference
from kernforge.models import load_model
from kernforge.models.loader import LoadedModel
from kernforge.tasks import make_tasks, save_task

pytestmark = pytest.mark.integration

CPU = torch.device("cpu")
TINY_MODEL = Path(__file__).parent / "models" / "tiny_softmax.py"
SDPA_OP = "aten::_scaled_dot_product_flash_attention_for_cpu.default"


@pytest.fixture
def one_thread(monkeypatch):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the evaluator's worker processes too
    yield
    torch.set_num_threads(threads)


def loaded(module: nn.Module, *inputs) -> LoadedModel:
    return LoadedModel(module=module.eval(), inputs=tuple(inputs), device=CPU, name="m", spec="m")


class OneHeavyOp(nn.Module):
    """A (128, 512) x (512, 512) linear, ~33 MFLOP, against a few element-wise ops on 64 KB."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(512, 512)

    def forward(self, x):
        return torch.softmax(torch.tanh(self.proj(x)) * 2.0, dim=-1)


class Attention(nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v) * 0.5


def test_same_model_same_top_op_twice(one_thread):
    model = loaded(OneHeavyOp(), torch.randn(128, 512))
    tops = [capture_model(model, out_dir=None, repeats=1).ranked()[0] for _ in range(2)]
    assert [p.op for p in tops] == ["aten::addmm.default"] * 2
    assert all(p.time_from == "replayed" for p in tops)


def test_bundled_tiny_model_gives_the_same_top_op_twice_within_its_noise(one_thread):
    """The tiny model's four compute ops each take a few us: the same top op, or the first run's
    top op within the second's reported noise (p20-p80 spread) of the second's top op."""
    model = load_model(str(TINY_MODEL), CPU)
    first, second = (capture_model(model, out_dir=None, repeats=1) for _ in range(2))
    top, again = first.ranked()[0], second.ranked()[0]
    if top.signature != again.signature:
        same = next(p for p in second.ranked() if p.signature == top.signature)
        assert same.time_us >= again.time_us * (1.0 - max(again.replay_spread, same.replay_spread)) / 1.5, (
            f"{top.op} first, {again.op} second: {same.time_us:.2f} against {again.time_us:.2f} us")
    assert {p.time_from for p in first.ranked()} == {"replayed"}


def test_attention_ranks_as_compute():
    q, k, v = (torch.randn(2, 4, 64, 32) for _ in range(3))
    cap = capture_model(loaded(Attention(), q, k, v), out_dir=None, repeats=1)
    ranked = {p.op: p for p in cap.ranked()}
    assert SDPA_OP in ranked, sorted(ranked)
    assert ranked[SDPA_OP].kind == "compute"
    assert ranked[SDPA_OP].time_from == "replayed"
    assert not [p for p in cap.profiles if p.kind == "random"]


def test_only_ops_that_draw_random_numbers_are_random():
    aten = torch.ops.aten
    x = torch.randn(1, 2, 4, 8)
    sdpa = aten._scaled_dot_product_flash_attention_for_cpu.default
    assert op_kind(sdpa, (x, x, x)) == "compute"
    assert op_kind(sdpa, (x, x, x, 0.1)) == "random"  # its dropout draws
    assert op_kind(sdpa, (x, x, x), {"dropout_p": 0.1}) == "random"
    assert op_kind(aten.native_dropout.default, (x, 0.1, True)) == "random"
    assert op_kind(aten.randn.default, ([2, 3],)) == "random"
    assert op_kind(aten.bernoulli.default, (x,)) == "random"
    assert op_kind(aten.randperm.default, (5,)) == "random"
    assert op_kind(aten.add.Tensor, (x, x)) == "compute"


def test_ops_that_are_not_replayed_keep_their_recorded_time_and_say_so():
    class Noisy(nn.Module):
        def forward(self, x):
            return torch.tanh(x) + torch.randn(x.shape)

    cap = capture_model(loaded(Noisy(), torch.randn(64, 64)), out_dir=None, repeats=1)
    kinds = {p.op: p for p in cap.profiles}
    randn = kinds["aten::randn.default"]
    assert randn.kind == "random"
    assert randn.time_from == "recorded" and randn.replay_us_per_call is None
    assert randn.time_us == randn.recorded_us
    tanh = kinds["aten::tanh.default"]
    assert tanh.time_from == "replayed"
    assert tanh.time_us == pytest.approx(tanh.calls * tanh.replay_us_per_call)
    assert cap.replayed == sum(1 for p in cap.profiles if p.kind != "chain" and p.time_from == "replayed")


def test_replayed_time_is_within_3x_of_the_evaluators_eager_time(one_thread, tmp_path: Path):
    """The softmax of a (64, 8192) float32 tensor (2 MB; ~1 ms on one thread), replayed by the
    capture and timed by the evaluator's baseline worker on the task made from that capture."""
    class BigSoftmax(nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=-1)

    cap = capture_model(loaded(BigSoftmax(), torch.randn(64, 8192)), tmp_path / "cap", repeats=1)
    (profile,) = [p for p in cap.ranked() if p.op == SOFTMAX_OP]
    tasks, _ = make_tasks(cap, tmp_path / "cap", top_k=1, why_unsupported=lambda task: None)
    (task,) = tasks
    save_task(task, tmp_path / "task.json")
    try:
        baseline = evaluate_baseline(tmp_path / "task.json", tmp_path / "reference.pt", "cpu",
                                     tmp_path / "baseline", 300)
    finally:
        discard_reference(tmp_path / "reference.pt")
    eager_us = baseline.eager.p50_ms * 1e3
    ratio = profile.replay_us_per_call / eager_us
    assert 1 / 3 < ratio < 3, f"replayed {profile.replay_us_per_call:.1f} us, the evaluator's eager {eager_us:.1f} us"


def _capture(total_us: float, measured_us: float, device: str = "cpu") -> Capture:
    return Capture(model="m", device=device, forward_ms=measured_us / 1e3, captured_ms=1.0, total_time_us=total_us,
                   measured_total_us=measured_us, repeats=1, profiles=[], replayed=0)


@pytest.mark.parametrize(("total_us", "warned"), [(100.0, False), (140.0, False), (60.0, False),
                                                  (400.0, True), (20.0, True), (50_000.0, True)])
def test_coverage_warns_when_far_from_100_percent(total_us, warned):
    cap = _capture(total_us, 100.0)
    assert bool(cap.coverage_warning) == warned
    assert ("warning" in cap.coverage_text) == warned
    assert "per-op times summed" in cap.coverage_text and "wall time of a plain forward" in cap.coverage_text
    assert "kernel time" in _capture(total_us, 100.0, "cuda:0").coverage_text


def test_coverage_of_a_real_capture_states_its_replays():
    cap = capture_model(loaded(OneHeavyOp(), torch.randn(128, 512)), out_dir=None, repeats=1)
    assert f"{cap.replayed} of " in cap.coverage_text
    assert cap.replayed > 0
