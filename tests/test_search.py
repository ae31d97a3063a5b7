"""kernforge.search: greedy keep-or-revert, and one real search written to a run folder."""

from __future__ import annotations

import csv
import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import SOFTMAX_OP, scripted_context

from kernforge.backends import get_backend
from kernforge.errors import UserError
from kernforge.propose import get_proposer
from kernforge.records.evaluation import EvalResult
from kernforge.records.nodes import Node, TaskOutcome
from kernforge.records.proposal import Proposal
from kernforge.records.results import RESULT_COLUMNS
from kernforge.records.timing import Timing
from kernforge.search import get_strategy, search_task
from kernforge.search import engine as search_engine
from kernforge.store import RunStore
from kernforge.store.events import NodeFinished

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("search")]  # one worker: module fixtures made once

EAGER = Timing(p20_ms=0.95, p50_ms=1.0, p80_ms=1.05, runs=10, method="wall-clock")


def timing(p50: float, spread: float = 0.02) -> Timing:
    return Timing(p20_ms=p50 * (1 - spread), p50_ms=p50, p80_ms=p50 * (1 + spread), runs=10,
                  method="wall-clock")


def ok(p50: float | None, eager: Timing | None = EAGER) -> EvalResult:
    if p50 is None:  # checked, not timed (the interpreter)
        return EvalResult(status="ok")
    return EvalResult(status="ok", timing=timing(p50), eager=eager)


def failed(status: str = "wrong_result") -> EvalResult:
    return EvalResult(status=status, reason="bad")


def run_greedy(results: list[EvalResult], iterations: int | None = None,
               proposals: int | None = None):
    """Greedy over scripted results; returns (nodes, the parent each propose() call was given)."""
    nodes: list[Node] = []
    asked: list[str | None] = []

    def propose(parent):
        asked.append(parent.node_id if parent else None)
        if proposals is not None and len(asked) > proposals:
            return None
        return Proposal(source=f"candidate {len(asked)}", rationale="scripted")

    def evaluate(proposal, parent, keep_if):
        node = Node(node_id=f"n{len(nodes)}", parent_id=parent.node_id if parent else None,
                    proposal=proposal, result=results[len(nodes)])
        node.kept = keep_if(node)
        nodes.append(node)
        return node

    ctx = scripted_context(propose, evaluate, iterations or len(results))
    get_strategy("greedy").run(ctx)
    return nodes, asked


# ---------------------------------------------------------------- greedy, scripted

def test_greedy_keeps_only_clear_improvements_and_expands_the_kept_node():
    nodes, asked = run_greedy([ok(1.0), ok(0.5), ok(0.9), failed(), ok(0.2), ok(0.199)])
    assert [n.kept for n in nodes] == [True, True, False, False, True, False]
    assert [n.parent_id for n in nodes] == [None, "n0", "n1", "n1", "n1", "n4"]
    assert asked == [None, "n0", "n1", "n1", "n1", "n4"]


def test_greedy_never_keeps_a_failure_and_starts_over_from_none():
    nodes, _ = run_greedy([failed("crash"), failed("compile_error"), ok(2.0), ok(1.0)])
    assert [n.kept for n in nodes] == [False, False, True, True]
    assert [n.parent_id for n in nodes] == [None, None, None, "n2"]


def test_greedy_keeps_the_first_correct_untimed_candidate():
    nodes, _ = run_greedy([ok(None), ok(None), ok(None)])
    assert [n.kept for n in nodes] == [True, False, False]
    assert [n.parent_id for n in nodes] == [None, "n0", "n0"]


def test_greedy_judges_speed_relative_to_each_workers_eager():
    # n1's raw time is lower, but its worker's eager ran 2x faster too: the machine was less busy
    nodes, _ = run_greedy([ok(1.0, eager=EAGER), ok(0.6, eager=replace(EAGER, p50_ms=0.5))])
    assert [n.kept for n in nodes] == [True, False]
    # same raw time, but relative to a slower eager it is a clear improvement
    nodes, _ = run_greedy([ok(1.0, eager=EAGER), ok(1.0, eager=replace(EAGER, p50_ms=3.0))])
    assert [n.kept for n in nodes] == [True, True]


def test_greedy_needs_to_beat_the_noise():
    noisy = EvalResult(status="ok", timing=Timing(0.5, 0.9, 1.5, 10, "wall-clock"), eager=EAGER)
    nodes, _ = run_greedy([ok(1.0), noisy])
    assert [n.kept for n in nodes] == [True, False]


def test_greedy_respects_the_budget_and_stops_when_the_proposer_is_dry():
    nodes, asked = run_greedy([ok(1.0)] * 10, iterations=3)
    assert len(nodes) == 3 and len(asked) == 3
    nodes, asked = run_greedy([ok(1.0)] * 10, iterations=10, proposals=2)
    assert len(nodes) == 2 and len(asked) == 3


def test_unknown_strategy():
    with pytest.raises(UserError, match="unknown strategy 'annealing'; choose one of: greedy, mcts"):
        get_strategy("annealing")


def test_outcome_best_is_the_fastest_that_beat_eager():
    def node(i, result):
        return Node(node_id=f"n{i}", parent_id=None, proposal=Proposal("s", "r"), result=result)

    fast, faster, slow = ok(0.8), ok(0.5), ok(2.0)
    fast.faster_than_eager = faster.faster_than_eager = True
    outcome = TaskOutcome(task=None, baseline=None,
                          nodes=[node(0, fast), node(1, failed()), node(2, faster), node(3, slow)])
    assert outcome.best.node_id == "n2"
    assert [n.node_id for n in outcome.correct] == ["n0", "n2", "n3"]
    assert outcome.status_counts() == {"ok": 3, "wrong_result": 1}
    assert TaskOutcome(task=None, baseline=None, nodes=[node(0, slow)]).best is None


def test_once_finalists_are_evaluated_again_only_their_second_results_count():
    def node(i, result, confirmed=None):
        return Node(node_id=f"n{i}", parent_id=None, proposal=Proposal("s", "r"), result=result,
                    confirmed=confirmed)

    def faster(p50):
        r = ok(p50)
        r.faster_than_eager, r.speedup_vs_eager = True, 1.0 / p50
        return r

    # n0 looked best in the search (a lucky timing), n1 second; alone, n1 is the faster
    nodes = [node(0, faster(0.4), confirmed=faster(0.7)), node(1, faster(0.5), confirmed=faster(0.55)),
             node(2, faster(0.6)), node(3, failed())]
    outcome = TaskOutcome(task=None, baseline=None, nodes=nodes)
    assert outcome.best.node_id == "n1" and outcome.best.final.timing.p50_ms == 0.55
    assert [n.node_id for n in search_engine.pick_finalists(nodes, 2)] == ["n0", "n1"]
    # a finalist that fails its second evaluation, or no longer beats eager, is out
    nodes[1].confirmed = failed("wrong_result")
    assert outcome.best.node_id == "n0"
    nodes[0].confirmed = ok(0.9)  # correct, but not faster beyond the noise this time
    assert outcome.best is None


# ---------------------------------------------------------------- a real search

@pytest.fixture(scope="module")
def searched(softmax_task, tmp_path_factory):
    seen = []
    store = RunStore.create(tmp_path_factory.mktemp("search-runs"), "tiny_softmax")
    store.listeners.append(lambda e: seen.append(e.node) if isinstance(e, NodeFinished) else None)
    outcome = search_task(softmax_task, store, get_backend("cpu"), "cpu", get_proposer("builtin"),
                          get_strategy("greedy"), iterations=3, candidate_timeout_s=120)
    return store, outcome, seen


def test_search_writes_one_row_per_candidate(searched, softmax_task):
    store, outcome, seen = searched
    assert outcome.error == "" and outcome.baseline is not None
    with open(store.root / "results.tsv", newline="") as f:
        header = f.readline().rstrip("\r\n").split("\t")
    assert header == RESULT_COLUMNS
    rows = store.results()
    assert len(rows) == 3
    assert [r.node for r in rows] == ["n0000", "n0001", "n0002"] == seen
    assert {r.task for r in rows} == {softmax_task.task_id}
    # the builtin C templates are correct, so each is timed against eager
    assert [r.status for r in rows] == ["ok"] * 3, [r.failure_reason for r in rows]
    for r in rows:
        assert r.p20_ms <= r.p50_ms <= r.p80_ms
        assert r.eager_p50_ms > 0 and r.speedup_vs_eager > 0
        assert r.rationale


def test_search_kept_nodes_form_a_chain(searched):
    store, outcome, _ = searched
    rows = store.results()
    # the first correct candidate stays
    assert rows[0].parent == "" and rows[0].kept
    last_kept = ""
    kept = []
    for r in rows:
        assert r.parent == last_kept  # every candidate expands the current kept node
        if r.kept:
            kept.append(r)
            last_kept = r.node
    for prev, nxt in itertools.pairwise(kept):
        assert nxt.parent == prev.node
    assert [n.kept for n in outcome.nodes] == [r.kept for r in rows]


def test_search_leaves_every_step_in_the_run_folder(searched, softmax_task):
    store, outcome, _ = searched
    task_dir = store.root / "tasks" / softmax_task.task_id
    assert json.loads((task_dir / "task.json").read_text())["op"] == SOFTMAX_OP
    baseline = json.loads((task_dir / "baseline.json").read_text())
    assert baseline["labels"][0] == "real0"
    assert not (task_dir / "reference.pt").exists()  # removed when the task ends
    sources = set()
    for node in outcome.nodes:
        node_dir = task_dir / "nodes" / node.node_id
        source = (node_dir / "candidate.c").read_text()
        assert source == node.proposal.source
        sources.add(source)
        proposal = json.loads((node_dir / "proposal.json").read_text())
        assert proposal["parent"] == node.parent_id
        assert proposal["params"] == node.proposal.params
        result = json.loads((node_dir / "result.json").read_text())
        assert result["status"] == node.result.status and result["kept"] == node.kept
        assert (node_dir / "log.txt").is_file() and (node_dir / "job.json").is_file()
    assert len(sources) == 3  # no candidate evaluated twice
    # each candidate's start and end are events, the start first (the dashboard's "running")
    events = [json.loads(line) for line in (store.root / "events.jsonl").read_text().splitlines()]
    order = [(e["kind"], e["node"]) for e in events if e["kind"] in ("node_start", "node")]
    for node in outcome.nodes:
        assert order.index(("node_start", node.node_id)) < order.index(("node", node.node_id))


def test_failed_baseline_is_a_task_error_not_a_crash(softmax_task, tmp_path: Path):
    broken = replace(softmax_task, samples=[str(tmp_path / "missing.pt")])
    store = RunStore.create(tmp_path / "runs", "broken")
    outcome = search_task(broken, store, get_backend("cpu"), "cpu", get_proposer("builtin"),
                          get_strategy("greedy"), iterations=2, candidate_timeout_s=60)
    assert outcome.baseline is None and outcome.nodes == []
    assert outcome.error.startswith(f"the baseline for {broken.task_id} failed:")
    assert store.results() == []


def test_results_tsv_reads_back_with_csv_and_its_records_write_the_same_cells(searched):
    store, _, _ = searched
    with open(store.root / "results.tsv", newline="") as f:
        lines = f.read().splitlines()
    assert len(lines) == 4  # header + one line per candidate
    assert all(len(line.split("\t")) == len(RESULT_COLUMNS) for line in lines)
    cells = list(csv.DictReader(lines, delimiter="\t"))
    assert [row.to_tsv() for row in store.results()] == cells


def test_progress_lines_show_the_standing_the_node_events_carry(capsys):
    from kernforge.cli.progress import Progress

    progress = Progress(quiet=False)  # not a terminal here: plain lines on stderr
    progress.on_event(NodeFinished(task="t", node="n0", status="wrong_result", rationale="r", candidates=1,
                                   counts={"wrong_result": 1}))
    assert capsys.readouterr().err.rstrip().endswith("[best 1.00x | wrong_result 1]")
    progress.on_event(NodeFinished(task="t", node="n1", status="ok", speedup_vs_eager=2.0, rationale="r",
                                   candidates=2, best_speedup_vs_eager=2.0, counts={"ok": 1, "wrong_result": 1}))
    assert capsys.readouterr().err.rstrip().endswith("[best 2.00x | ok 1, wrong_result 1]")


def test_node_events_carry_the_tasks_standing(searched):
    store, outcome, _ = searched
    finished = [e for e in store.events() if isinstance(e, NodeFinished)]
    assert [e.candidates for e in finished] == [1, 2, 3]
    assert finished[-1].counts == outcome.status_counts()
    faster = [n for n in outcome.nodes if n.result.ok and n.result.faster_than_eager]
    # before the finalists' second evaluations the standing is TaskOutcome.best's rule on the search's
    # own results: the fastest candidate that beat eager beyond the noise
    best = min(faster, key=lambda n: n.result.timing.p50_ms).result.speedup_vs_eager if faster else None
    assert finished[-1].best_speedup_vs_eager == best
