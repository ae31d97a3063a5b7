"""search/siblings.py and the seeded start: which tasks are siblings, the sibling's best point made
legal for another shape, the seed read from a run folder (and back on resume), and a seeded
search that stops once nothing improves on its start. No worker is started."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import scripted_context

from kernforge.propose.builtin import BuiltinProposer, Hardware
from kernforge.propose.context import Attempt, Seed
from kernforge.propose.families import softmax
from kernforge.records.evaluation import EvalResult
from kernforge.records.nodes import Node
from kernforge.records.proposal import Proposal
from kernforge.records.task import KernelTask
from kernforge.records.timing import Timing
from kernforge.search import get_strategy
from kernforge.search.engine import SEEDED_PATIENCE, search_ended
from kernforge.search.siblings import are_siblings, find_seed, seeded_from, task_seed
from kernforge.store import RunStore

pytestmark = pytest.mark.unit

SOFTMAX = "aten::_softmax.default"
EAGER = Timing(p20_ms=0.95, p50_ms=1.0, p80_ms=1.05, runs=10, method="wall-clock")


def task(shape=(4096, 37), dtype="torch.float32", op=SOFTMAX, task_id="t0") -> KernelTask:
    x = {"shape": list(shape), "dtype": dtype, "stride": [shape[1], 1]}
    return KernelTask(task_id=task_id, op=op, signature=f"{op}-{shape}-{dtype}", args=[x, -1, False],
                      outputs=[dict(x)], samples=[], share=0.3, gain_if_2x=1.2, time_us=5.0, device="cpu")


def ok(p50: float, faster: bool | None = None) -> EvalResult:
    t = Timing(p20_ms=p50 * 0.98, p50_ms=p50, p80_ms=p50 * 1.02, runs=10, method="wall-clock")
    return EvalResult(status="ok", timing=t, eager=EAGER, speedup_vs_eager=EAGER.p50_ms / p50,
                      faster_than_eager=p50 < 0.9 if faster is None else faster)


def seed_of(params: dict, winner: bool = True, origin: str = "builtin") -> Seed:
    proposal = Proposal(source="SRC", rationale="found there", params=params, origin=origin)
    return Seed(task_id="t0-sib", shape="4096x37", attempt=Attempt("n0003", "n0001", proposal, ok(0.5)), winner=winner)


# ---------------------------------------------------------------- who is a sibling

def test_same_op_dtype_and_backend_at_another_shape_is_a_sibling():
    assert are_siblings(task((4096, 37)), "triton", task((64, 300), task_id="t1"), "triton")


@pytest.mark.parametrize("other, backend", [
    (task((64, 300), dtype="torch.float16", task_id="t1"), "triton"),  # another dtype
    (task((64, 300), op="aten::_log_softmax.default", task_id="t1"), "triton"),  # another op
    (task((64, 300), task_id="t1"), "cpu"),  # another backend
    (task((4096, 37), task_id="t1"), "triton"),  # the same signature: the task itself
])
def test_another_dtype_op_backend_or_the_same_signature_is_not(other, backend):
    assert not are_siblings(task((4096, 37)), "triton", other, backend)


# ---------------------------------------------------------------- the seeded start of the built-in proposer

def test_a_seeded_first_candidate_is_the_siblings_point_where_it_is_legal():
    new = task((64, 300), task_id="t1")
    found = {"variant": "online_loop", "block_n": 256, "num_warps": 2}  # not the family's start
    facts = softmax.match(new)
    assert softmax.start(facts, "triton", Hardware()) != found
    first = BuiltinProposer().next_move(new, "triton", None, [], seed=seed_of(found))
    assert first.params == found
    assert first.source == softmax.render(facts, "triton", found)
    assert first.rationale.startswith("seeded from t0-sib/n0003, the best of a sibling of shape 4096x37")
    assert "made legal" not in first.rationale
    # the seed tried, a second first candidate is the family's own start
    again = BuiltinProposer().next_move(new, "triton", None, [first], seed=seed_of(found))
    assert again.params == softmax.start(facts, "triton", Hardware())


def test_a_seed_out_of_range_for_this_shape_moves_to_the_nearest_legal_point():
    # 64 rows of 37 per program fit a 16K tile; rows of 2000 (a 2048 tile) fit 8 at most
    new = task((7, 2000), task_id="t1")
    first = BuiltinProposer().next_move(new, "triton", None, [], seed=seed_of(
        {"variant": "single_tile", "rows_per_program": 64, "num_warps": 4}))
    assert first.params == {"variant": "single_tile", "rows_per_program": 8, "num_warps": 4}
    assert "made legal for this shape: rows_per_program 64 -> 8" in first.rationale


def test_a_seed_whose_kind_of_kernel_this_shape_rules_out_starts_at_the_family_rule():
    new = task((7, 100_000), task_id="t1")  # a row past the largest single tile: no single_tile variant
    facts = softmax.match(new)
    first = BuiltinProposer().next_move(new, "triton", None, [], seed=seed_of(
        {"variant": "single_tile", "rows_per_program": 1, "num_warps": 4}))
    assert first.params == softmax.start(facts, "triton", Hardware())
    assert first.rationale.startswith("starting point: ")


def test_an_llm_seed_has_no_point_for_the_built_in_proposer():
    new = task((64, 300), task_id="t1")
    first = BuiltinProposer().next_move(new, "triton", None, [], seed=seed_of({"move": "first"}, origin="llm"))
    assert first.rationale.startswith("starting point: ")


# ---------------------------------------------------------------- a seeded search stops when nothing improves

def run_mcts(results: list[EvalResult], iterations: int, patience: int):
    nodes: list[Node] = []

    def evaluate(proposal, parent, decide):
        node = Node(node_id=f"n{len(nodes):04d}", parent_id=parent.node_id if parent else None,
                    proposal=proposal, result=results[len(nodes)])
        node.kept = decide(node)
        nodes.append(node)
        return node

    counter = iter(range(1000))
    ctx = scripted_context(lambda parent: Proposal(f"candidate {next(counter)}", "scripted"), evaluate, iterations)
    ctx.patience, ctx.seeded_from = patience, "t0-sib/n0003"
    get_strategy("mcts").run(ctx)
    return nodes, ctx


def test_a_seeded_task_stops_after_its_patience_without_improvement():
    results = [ok(0.5)] + [ok(0.6)] * 20
    nodes, ctx = run_mcts(results, iterations=20, patience=SEEDED_PATIENCE)
    assert len(nodes) == 1 + SEEDED_PATIENCE
    assert search_ended(ctx, "builtin") == (f"seeded from t0-sib/n0003; no improvement in {SEEDED_PATIENCE} "
                                            f"({1 + SEEDED_PATIENCE} of 20 iterations)")


def test_an_improvement_resets_the_patience_and_an_unseeded_task_spends_its_budget():
    results = [ok(0.5), ok(0.6), ok(0.3)] + [ok(0.6)] * 20
    nodes, ctx = run_mcts(results, iterations=20, patience=SEEDED_PATIENCE)
    assert len(nodes) == 3 + SEEDED_PATIENCE  # n0002 was kept: counted from there
    nodes, ctx = run_mcts(results, iterations=12, patience=0)
    assert len(nodes) == 12 and ctx.stopped == ""


def test_a_seed_that_fails_here_gives_no_found_point_to_stop_at():
    failed = EvalResult(status="wrong_result", reason="bad")
    nodes, ctx = run_mcts([failed] * 10, iterations=10, patience=SEEDED_PATIENCE)
    assert len(nodes) == 10 and ctx.stopped == ""


# ---------------------------------------------------------------- seeds from the run folder

def write_task(store: RunStore, t: KernelTask, results: list[EvalResult], params: list[dict]) -> None:
    """A searched task as the engine records it: its row in the database and its nodes."""
    from dataclasses import asdict

    store.db.add_tasks([(t.task_id, asdict(t))])
    for i, (result, point) in enumerate(zip(results, params)):
        node_id = f"n{i:04d}"
        proposal = Proposal(source=f"source {t.task_id} {node_id}", rationale="r", params=point)
        (store.node_dir(t.task_id, node_id) / "candidate.c").write_text(proposal.source)
        store.record_node(t.task_id, node_id, None, proposal, result, result.ok, ".c")
    store.db.set_task_state(t.task_id, "done")


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    store = RunStore.create(tmp_path, "siblings")
    store.write_json("config.json", {"resolved_backend": "cpu", "device": "cpu"})
    return store


def test_the_seed_is_the_best_winner_of_any_sibling(store):
    write_task(store, task((4096, 37), task_id="t0-a"), [ok(0.8), ok(0.5), EvalResult(status="crash")],
               [{"p": 0}, {"p": 1}, {"p": 2}])
    write_task(store, task((64, 300), task_id="t1-b"), [ok(0.6)], [{"p": 3}])
    write_task(store, task((64, 300), dtype="torch.float16", task_id="t2-c"), [ok(0.1)], [{"p": 4}])
    seed = find_seed(store, task((8, 8), task_id="t3-d"), "cpu")
    assert (seed.label, seed.winner, seed.attempt.proposal.params) == ("t0-a/n0001", True, {"p": 1})
    assert seed.shape == "4096x37"
    assert find_seed(store, task((8, 8), task_id="t3-d"), "triton") is None  # the run's tasks are cpu ones


def test_with_no_winner_the_fastest_correct_candidate_seeds(store):
    write_task(store, task((4096, 37), task_id="t0-a"), [ok(1.2, faster=False), ok(1.1, faster=False)],
               [{"p": 0}, {"p": 1}])
    seed = find_seed(store, task((8, 8), task_id="t1-b"), "cpu")
    assert (seed.label, seed.winner) == ("t0-a/n0001", False)
    write_task(store, task((16, 16), task_id="t2-c"), [EvalResult(status="crash")], [{"p": 2}])
    assert find_seed(store, task((16, 16), task_id="t2-c"), "cpu").label == "t0-a/n0001"


def test_a_task_keeps_its_seed_across_a_resume(store):
    write_task(store, task((4096, 37), task_id="t0-a"), [ok(0.5)], [{"p": 0}])
    new = task((8, 8), task_id="t1-b")
    seed = task_seed(store, new, "cpu", resumed=False)
    assert seed.label == "t0-a/n0000" and seeded_from(store, new.task_id) == "t0-a/n0000"
    # a faster sibling searched since does not change the seed of a task already started from one
    write_task(store, task((16, 16), task_id="t2-c"), [ok(0.1)], [{"p": 1}])
    again = task_seed(store, new, "cpu", resumed=True)
    assert (again.label, again.attempt.proposal.params, again.winner) == ("t0-a/n0000", {"p": 0}, True)
    # a task that started without a seed is not given one on resume: its first candidates were its family's
    assert task_seed(store, task((32, 32), task_id="t3-d"), "cpu", resumed=True) is None
    assert seeded_from(store, "t3-d") == ""


def test_a_task_with_no_sibling_searched_has_no_seed(store):
    assert task_seed(store, task((8, 8), task_id="t0-a"), "cpu", resumed=False) is None
    assert not (store.root / "tasks" / "t0-a" / "seed.json").exists()


def test_the_seed_record_names_sibling_and_node(store):
    write_task(store, task((4096, 37), task_id="t0-a"), [ok(0.5)], [{"p": 0}])
    task_seed(store, task((8, 8), task_id="t1-b"), "cpu", resumed=False)
    record = store.read_json("tasks/t1-b/seed.json")
    assert record == {"seeded_from": "t0-a/n0000", "task": "t0-a", "node": "n0000", "shape": "4096x37",
                      "winner": True, "speedup_vs_eager": pytest.approx(2.0), "params": {"p": 0}}

