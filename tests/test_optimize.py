"""kernforge.optimize: the verdict per task, and mistakes caught before a run folder is made."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.errors import UserError
from kernforge.optimize import OptimizeOptions, optimize
from kernforge.records.evaluation import Baseline, EvalResult
from kernforge.records.nodes import Node, TaskOutcome
from kernforge.records.proposal import Proposal
from kernforge.records.timing import Timing
from kernforge.search.nodes import task_row

pytestmark = pytest.mark.integration

EAGER = Timing(p20_ms=0.9, p50_ms=1.0, p80_ms=1.1, runs=10, method="wall-clock")
BASELINE = Baseline(eager=EAGER, device_name="cpu", labels=["real0"], eager_errors=[[0.0]])


def node(i: int, result: EvalResult) -> Node:
    return Node(node_id=f"n{i:04d}", parent_id=None, proposal=Proposal("src", "why"), result=result)


def timed_ok(p50: float, faster: bool) -> EvalResult:
    t = Timing(p20_ms=p50 * 0.95, p50_ms=p50, p80_ms=p50 * 1.05, runs=10, method="wall-clock")
    return EvalResult(status="ok", timing=t, eager=EAGER, speedup_vs_eager=1.0 / p50,
                      faster_than_eager=faster)


@pytest.fixture
def outcome(softmax_task):
    def make(nodes, error="", baseline=BASELINE):
        return TaskOutcome(task=softmax_task, baseline=baseline, nodes=nodes, error=error)

    return make


def test_faster_kernel_found(outcome):
    row = task_row(outcome([node(0, timed_ok(0.5, True)), node(1, timed_ok(0.25, True)),
                            node(2, EvalResult(status="crash"))]))
    assert row.verdict == "faster kernel found" and row.status == "faster"
    assert row.best_node == "n0001"
    assert row.best_speedup_vs_eager == pytest.approx(4.0)
    assert row.best_p50_ms == 0.25
    assert (row.candidates, row.correct) == (3, 2)
    assert row.status_counts == {"ok": 2, "crash": 1}


def test_no_faster_kernel_found_is_a_speedup_of_one(outcome):
    row = task_row(outcome([node(0, timed_ok(1.2, False))]))
    assert row.verdict == "no faster kernel found" and row.status == "no faster"
    assert row.best_speedup_vs_eager == 1.0 and row.best_node is None
    assert row.eager_p50_ms == EAGER.p50_ms


def test_no_correct_kernel(outcome):
    row = task_row(outcome([node(0, EvalResult(status="wrong_result")),
                            node(1, EvalResult(status="timeout"))]))
    assert row.verdict.startswith("no correct kernel found (1 of 2 ")
    assert row.correct == 0 and row.status == "no correct"
    # one reason failing every candidate is named: what a user must fix or report
    scan = "static scan: library-op (line 195: arrived = torch.zeros(...)): calls torch.zeros"
    row = task_row(outcome([node(i, EvalResult(status="cheat", reason=scan + "\nmore")) for i in range(3)]))
    assert row.verdict == f"no correct kernel found (3 of 3 cheat: {scan})"


def test_untimed_correct_kernel(outcome):
    row = task_row(outcome([node(0, EvalResult(status="ok"))]))
    assert row.verdict == "correct kernel found (interpreter: not timed)" and row.status == "not timed"
    assert row.best_speedup_vs_eager is None


def test_task_not_searched(outcome):
    row = task_row(outcome([], error="the baseline failed", baseline=None))
    assert row.verdict == "not searched: the baseline failed" and row.status == "not searched"
    assert row.eager_p50_ms is None


def test_forward_that_raises_is_reported_before_a_run_folder_is_made(write_model, tmp_path: Path):
    path = write_model("raises", """
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                raise KeyError("layer3")

        def get_inputs():
            return [torch.ones(2)]
    """)
    runs = tmp_path / "runs"
    with pytest.raises(UserError, match="forward raised KeyError"):
        optimize(OptimizeOptions(spec=str(path), backend="cpu", runs_dir=runs))
    assert not runs.exists() or list(runs.iterdir()) == []


@pytest.mark.parametrize("field, value, words", [
    ("backend", "nosuch", "unknown backend"),
    ("proposer", "nosuch", "unknown proposer"),
    ("strategy", "nosuch", "unknown strategy"),
])
def test_bad_options_are_user_errors(field, value, words, tmp_path: Path):
    from helpers import TINY_MODEL

    opts = OptimizeOptions(spec=str(TINY_MODEL), backend="cpu", runs_dir=tmp_path / "runs")
    setattr(opts, field, value)
    with pytest.raises(UserError, match=words):
        optimize(opts)
    assert not (tmp_path / "runs").exists()


def test_an_op_over_the_sample_cap_is_searched_and_its_row_says_so(write_model, runs_dir: Path, monkeypatch):
    """A layer norm whose input is over the sample cap (8 KB over 1 KB here; 268 MB over 256 MB
    on an H200) is searched end to end on a drawn input beside its real weight and bias."""
    import io

    from rich.console import Console

    from kernforge.capture import profile
    from kernforge.optimize import summary
    from kernforge.report.tables import results_table

    monkeypatch.setattr(profile, "DEFAULT_SAMPLE_CAP_BYTES", 1024)
    path = write_model("norm", """
        import torch

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = torch.nn.LayerNorm(64)

            def forward(self, x):
                return self.norm(x)

        def get_inputs():
            return [torch.randn(32, 64)]
    """)
    result = optimize(OptimizeOptions(spec=str(path), backend="cpu", iterations=1, top_k=1, runs_dir=runs_dir))
    assert result.skipped == []
    (row,) = summary(result).tasks
    assert row.op == "aten::native_layer_norm.default" and row.real_inputs == "partial"
    assert row.correct == 1 and row.error == "", row
    note = "searched on fresh inputs of the captured signature: some real inputs were over the sample cap"
    assert row.verdict.endswith(f"; {note}"), row.verdict
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(results_table([row], "results"))
    assert note in console.export_text()  # the terminal table says so too
