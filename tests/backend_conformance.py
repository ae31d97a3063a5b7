"""The checks every backend passes, whatever it is: run over each registered backend by
test_backend_conformance.py, and over a toy backend registered in a test by test_backend_toy.py.

A backend's record (kernforge.backends.Backend) is all the other stages know of it, so the checks
go through the record only: it is complete and consistent; its worked example (a softmax over the
last dim of a 4096x1024 float32 tensor) is found in a reply written as the generator is asked to
write one, passes the backend's own scan, builds, and matches eager's softmax; and the file it
installs loads through the runtime by the record's loading facts alone, routes the ATen op to the
kernel, and gives eager's result."""

from __future__ import annotations

from pathlib import Path

import torch

from kernforge.backends import get_backend
from kernforge.propose.llm import prompts
from kernforge.propose.llm.extract import extract_candidate
from kernforge.runtime import router
from kernforge.runtime.loading import ARTEFACTS

SOFTMAX = "aten::_softmax.default"
SHAPE = [4096, 1024]  # the worked example's task (Prompt.example)
META = {"shape": SHAPE, "dtype": "torch.float32", "stride": [SHAPE[1], 1]}


def check_record(name: str) -> None:
    backend = get_backend(name)
    assert backend.name == name and backend.source_suffix.startswith(".")
    assert backend.loading.artefact in ARTEFACTS and backend.loading.device in ("cpu", "cuda")
    assert backend.loading.dispatch_key in ("CPU", "CUDA")
    # an exported package rebuilds a library where the shipped one does not fit: only libraries need a command
    assert bool(backend.rebuild_command) == (backend.loading.artefact == "library")
    prompt = backend.prompt
    assert prompt.language and prompt.contract and prompt.rules and prompt.fence in prompt.fence_tags
    assert isinstance(backend.timeable(), bool)


def check_example_reaches_the_generator_and_back(name: str) -> str:
    """The generator's system prompt holds the contract, the rules and the example; the example,
    replied as asked, is what the extraction finds, and the backend's own scan passes it."""
    backend, example = get_backend(name), prompts.worked_example(name)
    system = prompts.generator_system(name)
    assert backend.prompt.contract in system and backend.prompt.rules in system and example.strip() in system
    reply = f"Idea: the worked example.\n```{backend.prompt.fence}\n{example.strip()}\n```\n"
    assert extract_candidate(reply, name).source == example.strip() + "\n"
    assert backend.scan(example, META["dtype"]) == []
    return example


def _source(name: str, folder: Path) -> Path:
    path = folder / f"candidate{get_backend(name).source_suffix}"
    path.write_text(prompts.worked_example(name))
    return path


def _input(name: str) -> torch.Tensor:
    device = get_backend(name).device(torch.cuda.is_available())
    return torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)).to(device)


def check_example_builds_and_matches_eager(name: str, folder: Path) -> None:
    backend, x = get_backend(name), _input(name)
    kernel = backend.build(_source(name, folder), folder / "build", [META])
    out = kernel(x, -1, False)
    out = out[0] if isinstance(out, (tuple, list)) else out
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)  # fp32, one row's sum


def check_installed_kernel_takes_the_op(name: str, folder: Path) -> None:
    """Installed as integrate/ installs a winner (Backend.installed_file, then the loading facts),
    the ATen op's calls of the proved signature run the kernel and give eager's result."""
    backend, x = get_backend(name), _input(name)
    path = backend.installed_file(_source(name, folder), folder / "build", [META])
    desc = {**META, "device": str(x.device)}
    spec = router.KernelSpec(name=f"conformance_{name}", op=SOFTMAX, args=[desc, -1, False], outputs=[desc],
                             backend=name, loading=backend.loading,
                             entry=router.load_entry(backend.loading, path, [META]),
                             devices=frozenset({x.device}),
                             library=path if backend.loading.artefact == "library" else None)
    installation = router.install([spec])
    try:
        with torch.no_grad():
            out = torch.ops.aten._softmax.default(x, -1, False)
    finally:
        installation.remove()
    assert installation.counts[SOFTMAX].kernel == 1
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
