"""kernforge.propose: the built-in proposer's support, its moves, and the softmax family's starting
points. Nothing here builds a kernel: the sweep (test_sweep.py, on the cases of sweep_cases.py)
checks the softmax kernels on every backend."""

from __future__ import annotations

import family_check
import pytest
from helpers import SOFTMAX_OP

from kernforge.errors import UserError
from kernforge.propose import get_proposer
from kernforge.propose.builtin import BuiltinProposer, Hardware
from kernforge.propose.families import softmax
from kernforge.records.proposal import Proposal
from kernforge.records.task import KernelTask

pytestmark = pytest.mark.unit


def contiguous(shape: list[int]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= size
    return strides[::-1]


def make_task(op: str = SOFTMAX_OP, shape=(7, 37), dim=-1, dtype="torch.float32", stride=None,
              half_to_float=False, extra_args=None) -> KernelTask:
    x = {"shape": list(shape), "dtype": dtype, "stride": stride or contiguous(list(shape)),
         "device": "cpu"}
    args = [x, dim, half_to_float] if extra_args is None else [x, *extra_args]
    return KernelTask(task_id="t0-test", op=op, signature="sig", args=args, outputs=[dict(x)],
                      samples=[], share=0.5, gain_if_2x=1.33, time_us=10.0, device="cpu")


# ---------------------------------------------------------------- what is supported

@pytest.mark.parametrize("backend", ["cpu", "triton"])
@pytest.mark.parametrize("dim", [-1, 1])
def test_softmax_over_the_last_dim_is_supported(backend, dim):
    assert BuiltinProposer().why_unsupported(make_task(dim=dim), backend) is None


@pytest.mark.parametrize("dtype", ["torch.float16", "torch.bfloat16"])
def test_half_precision_softmax_is_supported(dtype):
    assert BuiltinProposer().why_unsupported(make_task(dtype=dtype), "cpu") is None


def test_other_ops_are_refused_with_the_op_named():
    task = make_task(op="aten::bmm.default", shape=(2, 3, 4), extra_args=[
        {"shape": [2, 4, 5], "dtype": "torch.float32", "stride": [20, 5, 1], "device": "cpu"}])
    reason = BuiltinProposer().why_unsupported(task, "cpu")
    assert reason == "no built-in template for aten::bmm.default"


@pytest.mark.parametrize("task, words", [
    (make_task(dim=0), "dimension other than the last"),
    (make_task(shape=(2, 3, 4), dim=1), "dimension other than the last"),
    (make_task(half_to_float=True), "half_to_float"),
    (make_task(dtype="torch.float64"), "softmax on torch.float64"),
    (make_task(stride=[1, 7]), "non-contiguous"),
])
def test_softmax_cases_without_a_template_say_why(task, words):
    for backend in ("cpu", "triton"):
        reason = BuiltinProposer().why_unsupported(task, backend)
        assert reason is not None and words in reason


def test_unknown_backend_has_no_template():
    reason = BuiltinProposer().why_unsupported(make_task(), "metal")
    assert reason == "no metal template for softmax"


def test_proposer_registry():
    assert get_proposer("builtin").name == "builtin"
    with pytest.raises(UserError, match="unknown proposer 'gpt'"):
        get_proposer("gpt")
    for name in ("llm", "mixed"):  # an LLM proposer without an endpoint is one line naming --llm
        with pytest.raises(UserError, match="needs an LLM: give --llm"):
            get_proposer(name)


# ---------------------------------------------------------------- moves

def test_first_proposal_is_the_starting_point():
    task = make_task()
    for backend in ("cpu", "triton"):
        proposal = BuiltinProposer().next_move(task, backend, None, [])
        facts = softmax.match(task)
        assert proposal.params == softmax.start(facts, backend, Hardware())
        assert proposal.source == softmax.render(facts, backend, proposal.params)
        assert proposal.rationale.startswith("starting point: ")


def test_children_change_one_parameter_until_every_neighbour_is_tried():
    task = make_task()
    facts = softmax.match(task)
    space = softmax.space(facts, "cpu", Hardware())
    proposer = BuiltinProposer(seed=1)
    root = proposer.next_move(task, "cpu", None, [])
    neighbours = [point for _, _, point in space.neighbours(root.params)]
    assert len(neighbours) >= 4
    tried = [root]
    for _ in neighbours:
        child = proposer.next_move(task, "cpu", root, tried)
        changed = [k for k in root.params if root.params[k] != child.params[k]]
        assert len(changed) == 1, (root.params, child.params)
        name = changed[0]
        assert child.rationale.startswith(f"{name} {root.params[name]} -> {child.params[name]}: ")
        tried.append(child)
    assert sorted(map(str, (c.params for c in tried[1:]))) == sorted(map(str, neighbours))
    jump = proposer.next_move(task, "cpu", root, tried)
    assert jump.rationale.startswith("every neighbour tried; jump to the nearest untried point")
    assert space.distance(root.params, jump.params) == 2  # every point one move away was tried


def distinct_valid_sources(task: KernelTask, backend: str) -> set[str]:
    facts = softmax.match(task)
    return {softmax.render(facts, backend, p) for p in family_check.valid_points(task, backend)}


@pytest.mark.parametrize("backend, dtype", [
    ("cpu", "torch.float32"), ("cpu", "torch.bfloat16"), ("triton", "torch.float32"), ("cuda", "torch.float16"),
])
@pytest.mark.parametrize("parents", ["chain", "root", "none"])
def test_proposals_never_repeat_and_cover_the_space(backend, dtype, parents):
    task = make_task(dtype=dtype)
    proposer = BuiltinProposer(seed=3)
    tried = []
    parent = None
    while len(tried) < 100:
        proposal = proposer.next_move(task, backend, parent, tried)
        if proposal is None:
            break
        assert proposal.source not in {p.source for p in tried}, proposal.params
        facts = softmax.match(task)
        assert softmax.space(facts, backend, Hardware()).contains(proposal.params)
        tried.append(proposal)
        parent = {"chain": proposal, "root": tried[0], "none": None}[parents]
    # every valid configuration, each once, then None
    expected = distinct_valid_sources(task, backend)
    assert len(expected) > 1
    assert len(tried) == len(expected)
    assert {p.source for p in tried} == expected


# ---------------------------------------------------------------- starting points

@pytest.mark.parametrize("shape, expected", [
    ([4096, 256], {"variant": "single_tile", "rows_per_program": 4}),  # short rows packed
    ([16384, 2048], {"variant": "single_tile", "rows_per_program": 2}),
    ([8, 262144], {"variant": "split_row", "block_n": 4096}),  # 8 rows: each split in 64 chunks
    ([4096, 65536], {"variant": "online_loop"}),  # rows too long for registers, enough of them
])
def test_triton_starting_points_fit_the_shape(shape, expected):
    facts = softmax.match(make_task(shape=tuple(shape)))
    params = softmax.start(facts, "triton", Hardware())
    assert softmax.space(facts, "triton", Hardware()).contains(params)
    assert expected.items() <= params.items()


@pytest.mark.parametrize("shape, dtype, expected", [
    ([4096, 1024], "torch.float32", {"variant": "rows", "threads_per_row": 64, "vec": 4, "cache_row": True}),
    ([4096, 1024], "torch.bfloat16", {"variant": "rows", "threads_per_row": 32, "vec": 8, "cache_row": True}),
    ([7, 37], "torch.float32", {"variant": "rows", "threads_per_row": 32, "vec": 1, "rows_per_block": 1}),
    ([4096, 65536], "torch.float32", {"variant": "rows", "threads_per_row": 1024, "cache_row": False}),
    ([8, 262144], "torch.float32", {"variant": "split_row", "chunk": 4096}),  # 8 rows: 64 chunks each
])
def test_cuda_starting_points_fit_the_shape(shape, dtype, expected):
    facts = softmax.match(make_task(shape=tuple(shape), dtype=dtype))
    params = softmax.start(facts, "cuda", Hardware())
    assert softmax.space(facts, "cuda", Hardware()).contains(params)
    assert expected.items() <= params.items()


# ---------------------------------------------------------------- failed approaches

def test_a_move_that_failed_before_is_tried_last():
    from kernforge.records.proposal import Failure

    task = make_task(shape=(64, 300))
    proposer = BuiltinProposer(seed=0)
    root = proposer.next_move(task, "triton", None, [])
    tried = [root]
    # Every single-parameter move away from the root, but one, failed before (from another parent).
    facts = softmax.match(task)
    space = softmax.space(facts, "triton", Hardware())
    failures = [Failure(Proposal(source="x", rationale="", params={}, changes={name: value}), "compile_error", "")
                for name, value, _ in space.moves(root.params) if not (name == "num_warps" and value == 8)]
    child = proposer.next_move(task, "triton", root, tried, failures)
    assert child.changes == {"num_warps": 8}
    assert "failed before" not in child.rationale
    tried.append(child)
    # once the untainted move is used, the tainted ones come, and say so
    child2 = proposer.next_move(task, "triton", root, tried, failures)
    assert "failed before as compile_error" in child2.rationale


def test_proposals_record_what_they_changed():
    task = make_task()
    proposer = BuiltinProposer(seed=0)
    root = proposer.next_move(task, "cpu", None, [])
    assert root.changes == root.params
    child = proposer.next_move(task, "cpu", root, [root])
    assert len(child.changes) == 1 and child.params == {**root.params, **child.changes}


def test_a_value_that_only_ever_failed_is_moved_away_from_first():
    """The large group norm's resident variant once failed every time (a scan rule); tweaking its
    numbers failed the same way, 16 times. Two failures of it, no pass: the variant moves first."""
    from kernforge.records.proposal import Failure
    from kernforge.propose.families import group_norm

    bf16 = "torch.bfloat16"
    stats = family_check.tensor([1, 32], "torch.float32")
    # as CUDA lists it (fp32 statistics), not run: 128 MB is too large to draw inputs for here
    task = KernelTask(task_id="t0", op="aten::native_group_norm.default", signature="s", args=[
        family_check.tensor([1, 256, 512, 512], bf16), family_check.tensor([256], bf16),
        family_check.tensor([256], bf16), 1, 256, 512 * 512, 32, 1e-5],
        outputs=[family_check.tensor([1, 256, 512, 512], bf16), stats, dict(stats)], samples=[], share=0.5,
        gain_if_2x=1.33, time_us=10.0, device="cuda")
    proposer = BuiltinProposer(seed=0)
    start = proposer.next_move(task, "triton", None, [])
    assert start.params["variant"] == "held"
    # the start point of that run: resident, one program an SM
    facts = group_norm.match(task)
    space = group_norm.space(facts, "triton", Hardware())
    one_per_sm = {"variant": "resident", "chunk": 65536, "block": 16384, "num_warps": 32, "unroll": 1,
                  "pipeline": False, "per_sm": 1}
    assert space.contains(one_per_sm)
    root = Proposal(source=group_norm.render(facts, "triton", one_per_sm), rationale="", params=one_per_sm,
                    changes={})
    # and a tweak of its numbers, which failed the same way
    halved = {**one_per_sm, "chunk": 32768}
    child = Proposal(source=group_norm.render(facts, "triton", halved), rationale="", params=halved,
                     changes={"chunk": 32768})
    tried = [root, child]
    failures = [Failure(p, "cheat", "static scan: library-op") for p in tried]
    for seed in range(5):
        moved = BuiltinProposer(seed=seed).next_move(task, "triton", root, tried, failures)
        # a switch of variant (which carries the values the two variants share, fitted to the other's ranges)
        assert "variant" in moved.changes and moved.params["variant"] != "resident"
        assert "variant=resident failed 2 times and never passed" in moved.rationale
        assert space.contains(moved.params)
    # one resident point that did not fail, and the variant is no longer moved away from
    passed = Proposal(source="passed", rationale="", params={**root.params, "num_warps": 16}, changes={})
    for seed in range(5):
        again = BuiltinProposer(seed=seed).next_move(task, "triton", root, [*tried, passed], failures)
        assert "variant=resident failed" not in again.rationale
