"""Every registered backend through the same checks (backend_conformance.py); a backend that
cannot run here (no GPU, no compiler) is skipped with its own reason."""

from __future__ import annotations

from pathlib import Path

import backend_conformance as conformance
import pytest

from kernforge.backends import REGISTRY, get_backend

pytestmark = pytest.mark.integration  # the cpu backend's checks run gcc


@pytest.fixture(params=list(REGISTRY))
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


def test_the_record_is_complete(backend: str) -> None:
    conformance.check_record(backend)


def test_the_worked_example_reaches_the_generator_and_back(backend: str) -> None:
    conformance.check_example_reaches_the_generator_and_back(backend)


def _runnable(backend: str) -> None:
    reason = get_backend(backend).unavailable_reason()
    if reason:
        pytest.skip(reason)


def test_the_worked_example_builds_and_matches_eager(backend: str, tmp_path: Path) -> None:
    _runnable(backend)
    conformance.check_example_builds_and_matches_eager(backend, tmp_path)


def test_the_installed_kernel_takes_the_op(backend: str, tmp_path: Path) -> None:
    _runnable(backend)
    conformance.check_installed_kernel_takes_the_op(backend, tmp_path)
