"""backends: turn a candidate source file into a callable, inside the worker process.

A backend is data: a frozen record in REGISTRY that holds everything the other stages know of
it: its device and dispatch key and how an installed kernel is loaded (kernforge.runtime.loading), how a
candidate is built, scanned and rebuilt for an exported package, and what the LLM generator is
told of it. No stage outside this folder branches on a backend's name. Adding one is one new file
and one line in REGISTRY; tests/test_backend_conformance.py runs every registered backend through
the same checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernforge.backends.scan import scan_source
from kernforge.errors import UserError
from kernforge.runtime.loading import Loading


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
class Prompt:
    """What the LLM generator is told of a backend's candidates (propose/llm/prompts.py), and how
    its file is found in a reply (propose/llm/extract.py)."""

    language: str  # as the generator is told it: "C11 with OpenMP"
    fence: str  # the tag of the code block the generator is asked to reply in
    fence_tags: tuple[str, ...]  # the tags a reply's block may carry (an untagged block counts too)
    contract: str  # what the file is: its entry point, its arguments, its outputs
    rules: str  # what the static scan allows in it
    defines: str  # a regex, per line, whose group 1 is a name the text defines
    entry: str  # a regex that finds where the text defines kf_forward (a call of it does not count)
    # A correct candidate for softmax over the last dim of a 4096x1024 float32 tensor: the
    # generator is shown it, and the conformance suite builds and checks it. None: the built-in
    # proposer's own softmax kernel for the backend (propose/llm/prompts.py renders it; the
    # proposer's families stand above this stage).
    example: str | None = None


@dataclass(frozen=True)
class Backend:
    name: str
    language: str  # the source's language, for the static scan and for syntax highlighting: c, cuda, triton
    source_suffix: str
    # None when the backend can run here; else one line saying what is missing.
    unavailable_reason: Callable[[], str | None]
    # (source, build_dir, output_meta) -> Kernel; raises BuildError.
    build: Callable[[Path, Path, list[dict[str, Any]]], Kernel]
    # False when it runs somewhere its time means nothing (Triton's CPU interpreter).
    timeable: Callable[[], bool]
    # (source, task dtype) -> the static scan's findings (backends/scan.py), before anything builds.
    scan: Callable[[str, str], list[Any]]
    loading: Loading  # how an installed kernel is held: its device, dispatch key, artefact
    # (source, build_dir, output_meta) -> the file an installed kernel loads (loading.artefact):
    # the source itself, or the library built from it with the evaluator's object checks.
    installed_file: Callable[[Path, Path, list[dict[str, Any]]], Path]
    prompt: Prompt
    # The command an exported package rebuilds its library with where the shipped one does not
    # fit the machine ("{arch}" becomes the GPU's); () where the package ships no library.
    rebuild_command: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()  # packages an installed kernel needs beside torch
    gpu_code: bool = False  # its build folder holds GPU code, which cuobjdump reports on

    def device(self, cuda_available: bool) -> str:
        """Where its candidates run: its device, or the CPU where no GPU is visible (Triton's
        interpreter, which checks and never times)."""
        return self.loading.device if cuda_available else "cpu"


def static_scan(language: str) -> Callable[[str, str], list[Any]]:
    """scan.py's static scan of a `language` source (c, cuda, triton), as a record's `scan`."""

    def scan(source: str, task_dtype: str) -> list[Any]:
        return scan_source(source, language, task_dtype)
    return scan


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
