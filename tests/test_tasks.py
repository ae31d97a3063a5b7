"""kernforge.tasks: the hottest supported signatures become tasks pointing at their real inputs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from helpers import SOFTMAX_OP

from kernforge.capture import capture_model
from kernforge.models.loader import LoadedModel
from kernforge.tasks import load_task, make_tasks, resolve_op, save_task

pytestmark = pytest.mark.integration


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


def capture_of(module: torch.nn.Module, tmp_path: Path, *inputs: torch.Tensor, **caps: int):
    loaded = LoadedModel(module.eval(), inputs, torch.device("cpu"), "m", "m")
    return capture_model(loaded, tmp_path, repeats=1, **caps)


def test_ops_over_the_sample_cap_become_tasks_that_say_so(tmp_path: Path):
    x = torch.randn(64, 64)  # 16 KB: over a 1 KB cap; the norm's weight and bias fit
    capture = capture_of(torch.nn.LayerNorm(64), tmp_path / "a", x, sample_cap_bytes=1024)
    (task,), skipped = make_tasks(capture, tmp_path / "a", top_k=1, why_unsupported=lambda t: None)
    assert skipped == [] and task.op == "aten::native_layer_norm.default"
    assert task.real_inputs == "partial" and len(task.samples) == 1
    assert task.inputs_note == ("searched on fresh inputs of the captured signature: some real inputs were "
                                "over the sample cap")

    capture = capture_of(torch.nn.Tanh(), tmp_path / "b", x, sample_cap_bytes=1024)
    (task,), _ = make_tasks(capture, tmp_path / "b", top_k=1, why_unsupported=lambda t: None)
    assert task.real_inputs == "none"
    assert task.inputs_note.endswith("its real inputs were over the sample cap")


def test_integer_inputs_that_cannot_be_drawn_are_skipped_with_why(tmp_path: Path):
    class Nonzero(torch.nn.Module):
        def forward(self, mask):
            return torch.nonzero(mask)  # its output shape is the count of nonzero values

    capture = capture_of(Nonzero(), tmp_path, torch.randint(0, 2, (64, 64)), sample_cap_bytes=1024)
    tasks, skipped = make_tasks(capture, tmp_path, top_k=1, why_unsupported=lambda t: None)
    assert tasks == []
    assert [(p.op, why) for p, why in skipped] == [
        ("aten::nonzero.default", "its int64 input 64x64 is over the sample cap and the output shape of "
                                  "aten::nonzero.default depends on its values: no safe values to draw")]


def test_signatures_without_samples_are_skipped(tmp_path: Path):
    capture = capture_of(torch.nn.Tanh(), tmp_path, torch.randn(64, 64), samples_per_signature=0)
    tasks, skipped = make_tasks(capture, tmp_path, top_k=1, why_unsupported=lambda t: None)
    assert tasks == []
    assert [(p.op, why) for p, why in skipped] == [("aten::tanh.default", "no input sample was saved")]


def test_task_round_trips_through_json(softmax_task, tmp_path: Path):
    path = tmp_path / "task.json"
    save_task(softmax_task, path)
    assert load_task(path) == softmax_task
    old = json.loads(path.read_text())
    del old["real_inputs"]  # a task.json written before the field: its inputs were all real
    path.write_text(json.dumps(old))
    assert load_task(path).real_inputs == "all" and load_task(path).inputs_note == ""
    assert softmax_task.shape_text == "2x40x40"
    assert softmax_task.dtype_text == "float32"
    assert replace(softmax_task, args=[-1]).dtype_text == "-"
