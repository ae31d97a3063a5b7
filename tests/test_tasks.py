"""kernforge.tasks: the hottest supported signatures become tasks pointing at their real inputs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from helpers import SOFTMAX_OP

from kernforge.capture import capture_model
from kernforge.models.loader import LoadedModel
from kernforge.tasks import load_task, make_tasks, resolve_op, save_task


def test_resolve_op():
    assert resolve_op(SOFTMAX_OP) is torch.ops.aten._softmax.default
    assert resolve_op("aten::add.Tensor") is torch.ops.aten.add.Tensor
    assert resolve_op("aten::relu") is torch.ops.aten.relu.default


def test_make_tasks_takes_the_top_k_supported_and_says_why_hotter_ones_were_skipped(
        softmax_capture):
    store, capture, _ = softmax_capture
    only_softmax = lambda t: None if t.op == SOFTMAX_OP else f"no template for {t.op}"
    tasks, skipped = make_tasks(capture, store.capture_dir, top_k=1, why_unsupported=only_softmax)
    (task,) = tasks
    softmax_profile = next(p for p in capture.ranked() if p.op == SOFTMAX_OP)
    assert task.task_id == f"t0-{softmax_profile.signature}"
    assert task.share == softmax_profile.share and task.device == "cpu"
    assert all(Path(s).is_absolute() and Path(s).is_file() for s in task.samples)
    for profile, reason in skipped:
        assert reason == f"no template for {profile.op}"
        assert profile.time_us >= softmax_profile.time_us  # only hotter ops are reported as skipped

    everything = lambda t: None
    tasks, skipped = make_tasks(capture, store.capture_dir, top_k=2, why_unsupported=everything)
    assert [t.signature for t in tasks] == [p.signature for p in capture.ranked()[:2]]
    assert [t.task_id.split("-")[0] for t in tasks] == ["t0", "t1"]
    assert skipped == []


def test_signatures_without_samples_are_skipped(tmp_path: Path):
    class Tanh(torch.nn.Module):
        def forward(self, x):
            return torch.tanh(x)

    loaded = LoadedModel(Tanh(), (torch.randn(64, 64),), torch.device("cpu"), "m", "m")
    capture = capture_model(loaded, tmp_path, repeats=1, sample_cap_bytes=1024)
    tasks, skipped = make_tasks(capture, tmp_path, top_k=1, why_unsupported=lambda t: None)
    assert tasks == []
    assert [(p.op, why) for p, why in skipped] == [
        ("aten::tanh.default", "no real inputs were saved (over the sample size cap)")]


def test_task_round_trips_through_json(softmax_task, tmp_path: Path):
    path = tmp_path / "task.json"
    save_task(softmax_task, path)
    assert load_task(path) == softmax_task
    assert softmax_task.shape_text == "2x40x40"
    assert softmax_task.dtype_text == "float32"
    assert replace(softmax_task, args=[-1]).dtype_text == "-"
