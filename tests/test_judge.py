"""The harness's session and the judge, in process (no worker): fast unit tests.

The session is run on the CPU with small Python callables standing in for kernels; the
judge on files written here the way the worker writes them, and on files a candidate
could have doctored.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from kernforge.evaluate.checks import element_bound
from kernforge.evaluate.judge import Oracle, judge
from kernforge.evaluate.runner import host_clock_disagrees
from kernforge.harness.prefill import Prefill
from kernforge.harness.session import Plan, make_harness

pytestmark = pytest.mark.unit

CPU = torch.device("cpu")


def softmax_sets(count: int = 4, seed: int = 0) -> list:
    gen = torch.Generator().manual_seed(seed)
    return [([torch.randn(3, 8, generator=gen), -1, False], {}) for _ in range(count)]


def softmax_fn(args, kwargs, _prepared):
    return torch.softmax(args[0], -1)


def poison_meta() -> Prefill:
    return Prefill([{"shape": [3, 8], "stride": [8, 1], "dtype": "torch.float32", "nbytes": 96}])


def run(fn, plan, seed=0, prepare=None):
    return make_harness(CPU)(fn, plan, prepare, poison_meta(), seed, name="candidate")


# ---------------------------------------------------------------- the session

def test_a_reference_that_fails_in_its_timed_session_says_why():
    """eager (or a compiled peer) raising in time_op names its failure, where its missing timing
    used to end the worker with an AttributeError (eager out of memory after a candidate)."""
    from kernforge.harness.session import ReferenceFailed, time_op

    sets = softmax_sets(2)

    def broken(args, kwargs, _prepared):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory")
    with pytest.raises(ReferenceFailed, match="eager-after failed in its timed session: .*can't allocate memory"):
        time_op(make_harness(torch.device("cpu")), broken, sets, [0, 1], [{"shape": [3, 8], "dtype": "torch.float32",
                "stride": [8, 1]}], torch.device("cpu"), name="eager-after", calls=4)


def test_every_check_set_is_judged_once_at_positions_that_change_with_the_seed():
    sets = softmax_sets(5)
    plan = Plan(sets=sets, timing=[0, 1, 2], checks=[0, 1, 2, 3, 4], calls=40, judged_timed=3)
    positions = []
    for seed in range(4):
        result = run(softmax_fn, plan, seed)
        assert result.failure is None and result.timing is not None
        checked = [c.set_index for c in result.judged]
        assert sorted(set(checked)) == [0, 1, 2, 3, 4]
        assert len(result.judged) == 5 + 3  # each check set once, and three timed calls
        positions.append(tuple(c.position for c in result.judged))
        assert result.calls >= 40 + 5
    assert len(set(positions)) > 1  # no fixed place a candidate could learn


def test_no_input_slot_sees_the_same_values_twice_in_a_row():
    sets = softmax_sets(3)
    seen: dict[int, list[float]] = {}

    def spy(args, kwargs, _prepared):
        seen.setdefault(args[0].data_ptr(), []).append(float(args[0][0, 0]))
        return torch.softmax(args[0], -1)

    run(spy, Plan(sets=sets, timing=[0, 1, 2], calls=60))
    assert seen
    for values in seen.values():
        assert all(a != b for a, b in zip(values, values[1:])), values


def test_judged_outputs_are_those_of_their_own_call():
    """A kernel right only on every third call is caught whatever calls are judged."""
    sets = softmax_sets(3)
    state = {"n": 0}

    def lazy(args, kwargs, _prepared):
        state["n"] += 1
        return torch.softmax(args[0], -1) if state["n"] % 3 == 0 else torch.zeros_like(args[0])

    result = run(lazy, Plan(sets=sets, timing=[0, 1, 2], checks=[0, 1, 2], calls=30, judged_timed=4))
    wrong = [c for c in result.judged if not torch.allclose(c.outputs[0], torch.softmax(sets[c.set_index][0][0], -1))]
    assert wrong  # the judged copies are what each call returned


def test_a_raising_kernel_is_a_failure_that_names_the_set():
    def broken(args, kwargs, _prepared):
        raise ValueError("no")

    result = run(broken, Plan(sets=softmax_sets(2), timing=[0, 1], checks=[0, 1], calls=5, labels=["a", "b"]))
    assert result.failure["status"] == "runtime_error"
    assert result.failure["reason"] in ("on a: ValueError: no", "on b: ValueError: no")


def test_an_output_that_is_not_a_plain_tensor_is_refused_before_use():
    class Sneaky(torch.Tensor):
        pass

    def sneaky(args, kwargs, _prepared):
        return torch.softmax(args[0], -1).as_subclass(Sneaky)

    result = run(sneaky, Plan(sets=softmax_sets(2), timing=[0, 1], checks=[0], calls=5))
    assert result.failure["status"] == "wrong_result"
    assert "Sneaky, not a torch.Tensor" in result.failure["reason"]


def test_outputs_kept_by_the_kernel_are_counted():
    cache = []

    def keeps(args, kwargs, _prepared):
        out = torch.softmax(args[0], -1)
        cache.append(out)
        return out

    assert run(keeps, Plan(sets=softmax_sets(2), timing=[0, 1], calls=10)).live_outputs > 0
    assert run(softmax_fn, Plan(sets=softmax_sets(2), timing=[0, 1], calls=10)).live_outputs == 0


def test_the_timer_is_bound_when_the_harness_is_made(monkeypatch):
    import time

    harness = make_harness(CPU)
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)  # a candidate patching the clock
    result = harness(softmax_fn, Plan(sets=softmax_sets(2), timing=[0, 1], calls=20), None, poison_meta(), 0)
    assert result.timing.p50_ms > 0 and result.host_s > 0


# ---------------------------------------------------------------- the judge

def oracle_for_sets(sets) -> Oracle:
    from kernforge.harness.inputs import digest

    oracles = [[torch.softmax(s[0][0].double(), -1)] for s in sets]
    return Oracle({"oracles": oracles, "labels": [f"s{i}" for i in range(len(sets))],
                   "bounds": [[element_bound(o[0], o[0], torch.float32)] for o in oracles],
                   "digests": [[digest(s[0][0]).tolist()] for s in sets], "dtypes": ["torch.float32"],
                   "mutated": [], "outputs_meta": [{"shape": [3, 8], "stride": [8, 1], "dtype": "torch.float32"}]})


def produced_by(fn, sets, path: Path, **plan) -> Path:
    from kernforge.evaluate.worker import _plain_call

    result = run(fn, Plan(sets=sets, timing=list(range(len(sets))), checks=list(range(len(sets))), **plan))
    torch.save({"judged": [_plain_call(c) for c in result.judged], "live_outputs": result.live_outputs,
                "threads": {"new": 0, "running": 0, "children": []}}, path)
    return path


def test_an_honest_session_is_judged_ok(tmp_path: Path):
    sets = softmax_sets(3)
    verdict = judge(produced_by(softmax_fn, sets, tmp_path / "o.pt", calls=20, judged_timed=3),
                    oracle_for_sets(sets))
    assert verdict["status"] == "ok", verdict
    assert len(verdict["errors"]) == 3 and "failed_check" not in verdict


def test_outputs_bit_identical_to_an_earlier_calls_on_the_set_are_not_compared_again(tmp_path: Path, monkeypatch):
    from kernforge.evaluate import judge as judge_module

    sets = softmax_sets(3)
    path = produced_by(softmax_fn, sets, tmp_path / "o.pt", calls=20, judged_timed=3)
    judged = torch.load(path, weights_only=True)["judged"]
    assert len(judged) == 6  # each set once, and three timed calls on sets judged already
    compared = []
    real = judge_module.compare
    monkeypatch.setattr(judge_module, "compare", lambda outs, *a, **k: compared.append(outs) or real(outs, *a, **k))
    verdict = judge(path, oracle_for_sets(sets))
    assert verdict["status"] == "ok", verdict
    assert len(compared) == 3


def test_a_result_that_changes_between_calls_on_the_same_values_is_a_cheat(tmp_path: Path):
    sets = softmax_sets(3)
    rng = random.Random(1)

    def sometimes(args, kwargs, _prepared):
        y = torch.softmax(args[0], -1)
        return y if rng.random() < 0.6 else y * 1.01

    verdict = judge(produced_by(sometimes, sets, tmp_path / "o.pt", calls=60, judged_timed=8),
                    oracle_for_sets(sets))
    assert verdict["status"] == "cheat" and "wrong on call" in verdict["reason"], verdict
    assert verdict["failed_check"] == "deterministic"  # the check a report shows as the one that failed


def test_an_input_changed_by_the_kernel_is_a_cheat(tmp_path: Path):
    sets = softmax_sets(2)

    def clobbers(args, kwargs, _prepared):
        y = torch.softmax(args[0], -1)
        args[0][0, 0] = 42.0
        return y

    verdict = judge(produced_by(clobbers, sets, tmp_path / "o.pt", calls=5), oracle_for_sets(sets))
    assert verdict["status"] == "cheat" and verdict["reason"].endswith("input 0 was modified")
    assert verdict["failed_check"] == "inputs"


def test_an_output_in_the_inputs_memory_is_a_cheat(tmp_path: Path):
    sets = softmax_sets(2)

    def in_place(args, kwargs, _prepared):
        return args[0].copy_(torch.softmax(args[0], -1))  # the answer written over the input

    verdict = judge(produced_by(in_place, sets, tmp_path / "o.pt", calls=5), oracle_for_sets(sets))
    assert verdict["status"] == "cheat" and "shares memory with input 0" in verdict["reason"]
    assert verdict["failed_check"] == "aliasing"


class SubclassOfTensor(torch.Tensor):
    pass


class RunsCodeWhenLoaded:
    def __reduce__(self):
        return (print, ("the judge ran code from the file",))


@pytest.mark.parametrize("payload", ["subclass", "object", "reduce"])
def test_a_doctored_outputs_file_is_a_rejection_not_a_traceback(tmp_path: Path, payload: str):
    value = {"subclass": torch.ones(2).as_subclass(SubclassOfTensor), "object": Path("/tmp"),
             "reduce": RunsCodeWhenLoaded()}[payload]
    path = tmp_path / "o.pt"
    torch.save({"judged": [], "live_outputs": 0, "threads": {}, "x": value}, path)
    verdict = judge(path, oracle_for_sets(softmax_sets(1)))
    assert verdict["status"] == "cheat"
    assert "not plain tensors and values" in verdict["reason"]


def test_threads_or_children_left_running_are_a_cheat(tmp_path: Path):
    sets = softmax_sets(1)
    for threads, words in (({"new": 1, "running": 1, "children": []}, "thread(s) running"),
                           ({"new": 0, "running": 0, "children": [123]}, "child process")):
        path = tmp_path / "o.pt"
        torch.save({"judged": [], "live_outputs": 0, "threads": threads}, path)
        verdict = judge(path, oracle_for_sets(sets))
        assert verdict["status"] == "cheat" and words in verdict["reason"]


# ---------------------------------------------------------------- the search process's clock

def sessions(eager_wall: float, cand_wall: float, cand_events_ms: float, marks: str = "SESESESE",
             cand_waited_s: float = 0.0, eager_events_ms: float = 150.0, eager_waited_s: float = 0.0):
    """A worker's sessions and this process's marks; cand_waited_s (eager_waited_s): the worker's
    main thread waited that long for a core during the candidate's (eager's) session."""
    names = ["eager-probe", "eager", "candidate", "eager-after"]
    walls = [0.01, eager_wall, cand_wall, eager_wall]
    events = [5.0, eager_events_ms, cand_events_ms, eager_events_ms]
    out, stamps, t, waited = [], [], 0.0, 0.0
    for name, wall, ev in zip(names, walls, events):
        out.append({"name": name, "calls": 100, "events_ms": ev, "host_s": wall})
        stamps.append((t, waited))
        waited += {"candidate": cand_waited_s, "eager": eager_waited_s}.get(name, 0.0)
        stamps.append((t + wall, waited))
        t += wall + 0.001
    return {"sessions": out, "host_marks": [(k, ts, w) for k, (ts, w) in zip(marks, stamps)]}


def test_the_worker_must_agree_with_the_search_process_clock():
    # eager: 100 calls in 0.2 s, 150 ms of it in the calls (0.5 ms of harness a call)
    assert host_clock_disagrees(sessions(0.2, 0.2, 50.0)) is None
    assert host_clock_disagrees(sessions(0.2, 0.6, 550.0)) is None  # 5.5 ms a call, honestly
    # the candidate says 0.05 ms a call, but the calls took 5.5 ms each by the parent's clock
    why = host_clock_disagrees(sessions(0.2, 0.6, 5.0))
    assert why and "by the search process's clock" in why
    result = sessions(0.2, 0.2, 50.0)
    result["sessions"][2]["host_s"] = 0.05  # a worker clock that ran slow
    assert "disagrees" in host_clock_disagrees(result)
    assert "tampered" in host_clock_disagrees(sessions(0.2, 0.2, 50.0, marks="SESEESESE"))


def test_call_time_the_worker_spent_waiting_for_a_core_is_a_busy_machine_not_a_cheat():
    from kernforge.evaluate.runner import busy_machine

    # 0.05 ms a call by the worker's timer, 5.5 ms by ours: a cheat, unless the worker waited
    assert host_clock_disagrees(sessions(0.2, 0.6, 5.0)) and busy_machine(sessions(0.2, 0.6, 5.0)) is None
    waited = sessions(0.2, 0.6, 5.0, cand_waited_s=0.55)
    assert host_clock_disagrees(waited) is None
    assert "waited 550 ms for a core" in busy_machine(waited)
    # a wait that explains part of the gap only: still a cheat
    assert host_clock_disagrees(sessions(0.2, 0.6, 5.0, cand_waited_s=0.1))
    assert busy_machine(sessions(0.2, 0.2, 50.0)) is None  # honest and quiet: nothing to say


def test_waits_inside_eagers_calls_leave_the_harness_its_cost():
    # Measured on 2 loaded cores (a C softmax, scaled to 100 calls): eager's calls took 7.4 ms
    # each, waits for a core included, and its main thread waited half the session; then the
    # candidate ran in a quiet moment, 0.066 ms a call with 0.2 ms of harness around each
    loaded_eager = {"eager_wall": 0.791, "eager_events_ms": 736.0, "eager_waited_s": 0.402}
    assert host_clock_disagrees(sessions(cand_wall=0.027, cand_events_ms=6.6, cand_waited_s=0.0004,
                                         **loaded_eager)) is None
    # a timer that hides 5 ms of a call is still seen after such an eager
    why = host_clock_disagrees(sessions(cand_wall=0.527, cand_events_ms=6.6, **loaded_eager))
    assert why and "patched" in why


def test_a_busy_machine_drops_the_timing_and_keeps_the_verdict(monkeypatch, tmp_path: Path):
    from kernforge.evaluate import runner

    monkeypatch.setattr(runner, "judge", lambda *_: {"status": "ok", "reason": "", "errors": [[0.0]]})
    timing = {"p20_ms": 0.05, "p50_ms": 0.05, "p80_ms": 0.06, "runs": 100, "method": "wall-clock"}
    worker = {**sessions(0.2, 0.6, 5.0, cand_waited_s=0.55), "status": "ok", "outputs_path": str(tmp_path / "o.pt"),
              "timing": timing, "eager_timing": {**timing, "p50_ms": 1.5}}
    out = runner._verdict(worker, "", 1.0, oracle=None)
    assert out.ok and out.timing is None and out.speedup_vs_eager is None and not out.faster_than_eager
    assert out.noisy.startswith("the machine was busy")


@pytest.mark.parametrize("outputs", ["wrong", "right"])
def test_a_wrong_kernel_is_wrong_whatever_the_clocks_say(monkeypatch, tmp_path: Path, outputs):
    """Outputs are judged first: clocks that disagree (a loaded machine, or a patched timer) make a
    right kernel a cheat, never a wrong one anything but wrong."""
    from kernforge.evaluate import runner

    judged = ({"status": "wrong_result", "reason": "output 0: 12 of 96 elements outside the tolerance"}
              if outputs == "wrong" else {"status": "ok", "reason": "", "errors": [[0.0]]})
    monkeypatch.setattr(runner, "judge", lambda *_: dict(judged))
    timing = {"p20_ms": 0.05, "p50_ms": 0.05, "p80_ms": 0.06, "runs": 100, "method": "wall-clock"}
    worker = {**sessions(0.2, 0.6, 5.0), "status": "ok", "outputs_path": str(tmp_path / "o.pt"),
              "timing": timing, "eager_timing": {**timing, "p50_ms": 1.5}}
    out = runner._verdict(worker, "", 1.0, oracle=None)
    if outputs == "wrong":
        assert out.status == "wrong_result" and out.reason.startswith("output 0") and out.failed_check != "clock"
    else:
        assert out.status == "cheat" and out.failed_check == "clock" and "patched or escaped timer" in out.reason


@pytest.mark.parametrize("second", ["agrees", "disagrees"])
def test_a_clock_disagreement_is_a_verdict_only_when_a_second_run_repeats_it(monkeypatch, tmp_path: Path, second):
    from kernforge.evaluate import runner
    from kernforge.records.evaluation import EvalResult

    slow = "the candidate's calls took 0.28 ms each by the worker's timer, but 0.75 ms by the search process's clock"
    runs = [EvalResult(status="cheat", reason=slow, failed_check="clock", wall_s=3.0),
            EvalResult(status="ok", wall_s=2.0) if second == "agrees" else
            EvalResult(status="cheat", reason=slow, failed_check="clock", wall_s=2.0)]
    monkeypatch.setattr(runner, "static_findings", lambda *_: [])
    monkeypatch.setattr(runner, "_judged_run", lambda *_: runs.pop(0))
    result = runner.evaluate_candidate(tmp_path / "task.json", tmp_path / "ref.pt", tmp_path / "c.c", "cpu", "cpu",
                                       tmp_path / "job", timeout_s=10)
    assert not runs and result.wall_s == 5.0  # measured twice, both runs' time counted
    if second == "agrees":
        assert result.ok and result.retimed == slow
    else:
        assert result.status == "cheat" and result.reason.count("by the search process's clock") == 2


def test_the_oracle_is_read_from_its_mapping_after_its_file_is_gone(tmp_path):
    from kernforge.evaluate.runner import load_oracle, oracle_for

    oracle_file = tmp_path / "oracle.pt"
    torch.save({"oracles": [[torch.arange(6.0)]], "labels": ["real0"]}, oracle_file)
    oracle = load_oracle(tmp_path / "reference.pt", oracle_file)
    assert not oracle_file.exists()  # no other process can open it by name
    assert oracle_for(tmp_path / "reference.pt") is oracle
    assert torch.equal(oracle.data["oracles"][0][0], torch.arange(6.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_no_call_but_a_judged_one_sees_values_an_earlier_call_had(dtype):
    """A result kept from an earlier call never pays: every call that is not judged gets its
    set's values varied element by element (zeros, signs, NaN and inf kept), and a judged call
    gets its set exactly, for the oracle."""
    from kernforge.harness.session import VARY

    base = torch.randn(3, 256)
    base[0, :8] = 0.0
    base[1, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
    sets = [([row.to(dtype).clone()], {}) for row in base]
    seen: list[torch.Tensor] = []

    def fn(args, kwargs, _prepared):
        seen.append(args[0].clone())
        return args[0] + 1

    plan = Plan(sets=sets, timing=[0, 1, 2], checks=[0, 1, 2], calls=60, judged_timed=5)
    result = make_harness(torch.device("cpu"))(fn, plan, None, Prefill([]), seed=7)
    judged = {call.position: call.set_index for call in result.judged}
    assert len(judged) == 8 and len(seen) == result.calls
    values = {tuple(x.float().nan_to_num(7.0).tolist()) for n, x in enumerate(seen) if n not in judged}
    assert len(values) == result.calls - len(judged)  # no two varied calls alike
    for n, x in enumerate(seen):
        exact = [torch.equal(x.nan_to_num(7.0), s[0][0].nan_to_num(7.0)) for s in sets]
        if n in judged:
            assert exact[judged[n]], n
            continue
        assert not any(exact), n
        nearest = min(range(3), key=lambda i: float((x.float() - sets[i][0][0].float()).nan_to_num(0.0).abs().sum()))
        original = sets[nearest][0][0].float()
        finite = torch.isfinite(original)
        assert torch.equal(x.float()[~finite].nan_to_num(7.0), original[~finite].nan_to_num(7.0))
        assert torch.equal(x.float()[original == 0], original[original == 0])
        assert bool((x.float()[finite].sign() == original[finite].sign()).all())
        rounding = 2.0 ** -8 if dtype == torch.bfloat16 else 1e-6
        assert float(((x.float() - original)[finite].abs() / original[finite].abs().clamp(min=1e-30)).max()) <= VARY + rounding


def test_an_op_that_refuses_scaled_values_is_called_on_its_sets_exactly():
    """A binary cross-entropy of probabilities that reach 1 raises on them scaled up: the baseline
    finds so (varies_safely), and then no call of the session is varied."""
    from kernforge.harness.session import varies_safely

    def bce(args, kwargs, _prepared):
        return torch.nn.functional.binary_cross_entropy(*args)

    at_one = ([torch.ones(64), torch.rand(64)], {})
    inside = ([torch.full((64,), 0.5), 0.9 * torch.rand(64)], {})  # targets too must stay in [0, 1]
    assert not varies_safely(bce, at_one, torch.device("cpu"))
    assert varies_safely(bce, inside, torch.device("cpu"))
    seen: list[torch.Tensor] = []

    def fn(args, kwargs, prepared):
        seen.append(args[0].clone())
        return bce(args, kwargs, prepared)

    plan = Plan(sets=[at_one], timing=[0], checks=[0], calls=20, judged_timed=2, vary=False)
    result = make_harness(torch.device("cpu"))(fn, plan, None, Prefill([]), seed=3)
    assert result.failure is None and len(seen) == result.calls
    assert all(torch.equal(x, at_one[0][0]) for x in seen)


@pytest.mark.parametrize("case", ["right", "one_out_of_bounds", "nan_out", "inf_oracle", "strided", "fp32_no_bound"])
def test_a_large_output_judged_in_slices_gets_the_whole_compares_verdict(case, monkeypatch):
    """The sliced compare (evaluate/checks.py) answers exactly as the whole one: the same error
    where it passes, the whole compare's message where any slice does not; and both answer the
    same with the oracle's facts worked out beforehand."""
    from kernforge.evaluate import checks

    monkeypatch.setattr(checks, "SLICE_PER_THREAD", 64)  # many slices of a small output
    torch.manual_seed(0)
    oracle = torch.randn(64, 1000, dtype=torch.float64)
    out, dtype = oracle.to(torch.bfloat16), torch.bfloat16
    bound = element_bound(oracle, out, dtype)
    if case == "one_out_of_bounds":
        out[37, 501] += 1.0
    elif case == "nan_out":
        out[60, 3] = float("nan")
    elif case == "inf_oracle":
        oracle[5, 5], out[5, 5] = float("inf"), float("inf")
    elif case == "strided":
        oracle, out, bound = oracle.t(), out.t(), bound.t()
    elif case == "fp32_no_bound":
        out, dtype, bound = oracle.float(), torch.float32, None

    facts = [checks.oracle_facts(oracle)]  # as the judge keeps them, once per set
    sliced = checks.compare([out], [oracle], [bound], [dtype])
    assert checks.compare([out], [oracle], [bound], [dtype], facts=facts) == sliced
    monkeypatch.setattr(checks, "SLICE_PER_THREAD", 1 << 40)
    assert sliced == checks.compare([out], [oracle], [bound], [dtype])
    assert checks.compare([out], [oracle], [bound], [dtype], facts=facts) == sliced
    assert (sliced[0] is None) == (case in ("right", "inf_oracle", "strided", "fp32_no_bound"))
