"""backends: turn a candidate source file into a callable, inside the worker process.

A backend is data: a frozen record in REGISTRY. Adding one is one new file and
one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernforge.errors import UserError


class BuildError(Exception):
    """The candidate did not compile or load; the message is the compiler's output."""


class RejectedBuild(BuildError):
    """The candidate compiled, but its object does something a kernel must not (calls a function
    outside the allow-list, issues a syscall, keeps global state): a cheat, not a compile error.
    `findings` are the object scan's, the message is them joined with '; ' as the static scan's."""

    def __init__(self, findings: list[Any]):
        super().__init__("; ".join(str(f) for f in findings))
        self.findings = list(findings)


# A built candidate: takes the reference op's (args, kwargs), returns its outputs. A native
# backend's kernel also has `run(outputs, args, kwargs)`, which writes into outputs the caller
# made, and `new_outputs(poison=True)`, which makes them (prefilled with a drawn value,
# harness/prefill.py, so that an element the kernel never writes fails the check): the
# evaluator allocates them once and prefills them outside the timed span before every call.
Kernel = Callable[..., Any]


@dataclass(frozen=True)
class Backend:
    name: str
    language: str
    source_suffix: str
    # None when the backend can run here; else one line saying what is missing.
    unavailable_reason: Callable[[], str | None]
    # (source, build_dir, output_meta) -> Kernel; raises BuildError.
    build: Callable[[Path, Path, list[dict[str, Any]]], Kernel]
    # False when it runs somewhere its time means nothing (Triton's CPU interpreter).
    timeable: Callable[[], bool]


def _cpu() -> Backend:
    from kernforge.backends import cpu

    return cpu.BACKEND


def _triton() -> Backend:
    from kernforge.backends import triton_gpu

    return triton_gpu.BACKEND


def _cuda() -> Backend:
    from kernforge.backends import cuda

    return cuda.BACKEND


REGISTRY: dict[str, Callable[[], Backend]] = {"cpu": _cpu, "triton": _triton, "cuda": _cuda}


def get_backend(name: str) -> Backend:
    if name not in REGISTRY:
        raise UserError(f"unknown backend '{name}'; choose one of: auto, {', '.join(REGISTRY)}")
    return REGISTRY[name]()


def choose_backend(name: str, cuda_available: bool) -> Backend:
    """'auto' is triton on a GPU and cpu elsewhere; an explicit backend must be usable here."""
    if name == "auto":
        name = "triton" if cuda_available else "cpu"
    backend = get_backend(name)
    reason = backend.unavailable_reason()
    if reason:
        raise UserError(reason)
    return backend
