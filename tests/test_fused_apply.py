"""A fused chain's winner from a real search, installed end to end on the CPU (C backend):
kernforge.patch, kernforge apply (eager and torch.compile) and an exported package.

One optimize of tests/models/tiny_attention_chain.py (scale, mask, softmax: one chain) per
module; its chain task's first correct finalist is marked as the winner, since on a 2-core CPU
the search rarely beats eager on so small a chain, and what these tests test is the
installing. The kernel is the run's own C kernel, proved correct by the evaluator.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO_ROOT

import kernforge
from kernforge.integrate import export
from kernforge.integrate.apply import apply_run
from kernforge.optimize import OptimizeOptions, optimize
from kernforge.runtime import loader

MODEL = REPO_ROOT / "tests" / "models" / "tiny_attention_chain.py"
CHAIN = "chain:mul+add+_softmax"
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("fused_apply")]  # one worker: module fixtures made once

sys.path.insert(0, str(MODEL.parent))
import tiny_attention_chain  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    result = optimize(OptimizeOptions(spec=str(MODEL), backend="cpu", iterations=2, top_k=1, finalists=1,
                                      fuse=True, runs_dir=tmp_path_factory.mktemp("runs"), apply=False))
    confirms = sorted(result.run_dir.glob("tasks/*chain*/nodes/*/confirm.json"))
    assert confirms, "the search re-timed no finalist of the chain"
    data = json.loads(confirms[0].read_text())
    assert data["status"] == "ok", data["reason"]
    confirms[0].write_text(json.dumps({**data, "faster_than_eager": True, "speedup_vs_eager": 1.3}))
    return result.run_dir


@pytest.fixture
def model():
    torch.manual_seed(0)
    return tiny_attention_chain.Model(48), tiny_attention_chain.get_inputs()


def test_patch_runs_the_chain_as_its_c_kernel_and_matches(run_dir, model):
    net, inputs = model
    with torch.no_grad():
        before = net(*inputs)
        with kernforge.patch(net, run_dir) as handle:
            after = net(*inputs)
            assert handle.counts[CHAIN].kernel == 1 and handle.counts[CHAIN].fallback == 0
    torch.testing.assert_close(after, before)


def test_apply_checks_the_chain_end_to_end_in_eager_and_under_compile(run_dir):
    report = apply_run(run_dir)
    (effect,) = report.kernels
    assert effect.op == CHAIN and effect.calls_per_forward == 1
    assert effect.in_compiled_graph, "compile's graph pass did not put the chain's kernel in the graph"
    assert report.checks and all(c.passed for c in report.checks), report.checks
    assert {c.variant for c in report.checks} >= {"patched eager"}


def test_the_exported_package_installs_the_chain(run_dir, model, tmp_path):
    # a copy without apply's measurements: on this CPU apply may find the chain's kernel slower
    # in the model, and export ships a kernel only where apply measured that it pays
    unapplied = tmp_path / run_dir.name
    shutil.copytree(run_dir, unapplied, ignore=shutil.ignore_patterns("apply.json"))
    out = tmp_path / "pkg"
    result = export.export_run(unapplied, out)
    (kernel,) = json.loads((out / result.package / loader.MANIFEST).read_text())["kernels"]
    assert kernel["op"] == CHAIN and kernel["chain"]["steps"][0]["op"] == "aten::mul.Tensor"
    assert (out / result.package / "runtime" / "fused.py").is_file()
    net, inputs = model
    sys.path.insert(0, str(out))
    try:
        package = __import__(result.package)
        with torch.no_grad():
            before = net(*inputs)
            installation = package.install(net)
            try:
                after = net(*inputs)
            finally:
                package.uninstall()
    finally:
        sys.path.remove(str(out))
    assert installation is not None and installation.counts[CHAIN].kernel == 1
    torch.testing.assert_close(after, before)
