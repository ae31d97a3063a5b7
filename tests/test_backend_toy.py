"""A backend added by one registry entry and nothing else passes the conformance suite the real
backends pass (backend_conformance.py), and the stages around it take it.

The toy "python" backend's candidate is a Python file whose kf_forward computes the op with torch
ops on the CPU. It lives in this file and is registered only for these tests (monkeypatch on
REGISTRY): that it passes shows that a backend is its record, and that no stage branches on the
names of the real ones."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import backend_conformance as conformance
import pytest

from kernforge.backends import REGISTRY, Backend, BuildError, Kernel, Prompt
from kernforge.propose import get_proposer
from kernforge.propose.llm import LLMProposer
from kernforge.propose.llm.budget import Budget
from kernforge.records.task import KernelTask
from kernforge.runtime.importing import FileImportError, import_path
from kernforge.runtime.loading import Loading

pytestmark = pytest.mark.unit  # nothing is compiled and no process starts: the toy's build is an import

EXAMPLE = '''\
import torch


def kf_forward(x, dim, half_to_float):
    shifted = x - x.amax(dim=-1, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)
'''


def _build(source: Path, build_dir: Path, output_meta: list[dict[str, Any]]) -> Kernel:
    try:
        module = import_path(source, "kf_toy_candidate")
    except FileImportError as e:
        raise BuildError(str(e)) from None
    entry = getattr(module, "kf_forward", None)
    if not callable(entry):
        raise BuildError("the candidate defines no kf_forward(*args)")
    return entry


def _scan(source: str, task_dtype: str) -> list[Any]:
    return [] if "def kf_forward" in source else ["no kf_forward"]


TOY = Backend(
    name="python", language="python", source_suffix=".py", unavailable_reason=lambda: None, build=_build,
    timeable=lambda: True, scan=_scan, loading=Loading(device="cpu", artefact="module"),
    installed_file=lambda source, build_dir, output_meta: source,
    prompt=Prompt(language="Python with torch", fence="python", fence_tags=("python", "py"),
                  contract="The file defines kf_forward(...) with the op's arguments and returns its outputs.",
                  rules="Any torch op.", defines=r"^\s*def\s+(\w+)\s*\(", entry=r"^\s*def\s+kf_forward\s*\(",
                  example=EXAMPLE))


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(REGISTRY, TOY.name, lambda: TOY)  # the one registry line a new backend adds
    return TOY.name


def test_the_record_is_complete(toy: str) -> None:
    conformance.check_record(toy)


def test_the_worked_example_reaches_the_generator_and_back(toy: str) -> None:
    assert conformance.check_example_reaches_the_generator_and_back(toy) == EXAMPLE


def test_the_worked_example_builds_and_matches_eager(toy: str, tmp_path: Path) -> None:
    conformance.check_example_builds_and_matches_eager(toy, tmp_path)


def test_the_installed_kernel_takes_the_op(toy: str, tmp_path: Path) -> None:
    conformance.check_installed_kernel_takes_the_op(toy, tmp_path)


def test_the_proposers_take_it_as_its_record_says(toy: str) -> None:
    """The LLM proposer writes for any registered backend; the built-in one has no writer for it
    and says so by the family's name, not by failing."""
    x = {"shape": [8, 16], "dtype": "torch.float32", "stride": [16, 1]}
    task = KernelTask(task_id="t", op=conformance.SOFTMAX, signature="s", args=[x, -1, False], outputs=[dict(x)],
                      samples=[], share=0.0, gain_if_2x=0.0, time_us=0.0, device="cpu")
    llm = LLMProposer(SimpleNamespace(label="offline"), Budget(), None)  # type: ignore[arg-type]
    assert llm.why_unsupported(task, toy) is None
    assert get_proposer("builtin").why_unsupported(task, toy) == "no python template for softmax"
