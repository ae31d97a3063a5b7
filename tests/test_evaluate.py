"""kernforge.evaluate: candidates run in a worker process, checked against a float64 oracle.

The candidates here are hand-written C (and one Triton) kernels for the softmax of
tests/models/tiny_softmax.py, evaluated with the real pipeline: the session fixtures
capture the model, make its task and run the baseline worker once.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
from helpers import CORRECT_BODY, c_softmax_source

from kernforge.capture import capture_model
from kernforge.harness.serialize import Placeholder, load_sample
from kernforge.evaluate import evaluate_baseline, evaluate_candidate
from kernforge.evaluate.checks import RTOL, compare, element_bound, normalised_error
from kernforge.evaluate.classes import CLASS_KINDS
from kernforge.harness.inputs import FRESH_KINDS
from kernforge.evaluate.runner import discard_reference, oracle_for
from kernforge.harness.timing import clearly_faster
from kernforge.models.loader import LoadedModel
from kernforge.propose.builtin import BuiltinProposer
from kernforge.records.timing import Timing
from kernforge.tasks import make_tasks, save_task

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("evaluate")]  # one worker: module fixtures made once

LABELS = ["real0", "real0-permuted0", "real0-permuted1", *(f"fresh-{k}" for k in FRESH_KINDS),
          *(f"fresh-{k}" for k in CLASS_KINDS)]


# ---------------------------------------------------------------- baseline

def test_baseline_has_every_input_set_and_an_eager_time(softmax_reference, softmax_task):
    _, reference_path, baseline = softmax_reference
    assert len(softmax_task.samples) == 1  # one softmax call in the model
    assert baseline.labels == LABELS
    assert baseline.device_name == "cpu"
    assert baseline.eager is not None and baseline.eager.p50_ms > 0
    assert baseline.eager.p20_ms <= baseline.eager.p50_ms <= baseline.eager.p80_ms
    assert len(baseline.eager_errors) == len(LABELS)
    for errors in baseline.eager_errors:
        assert len(errors) == 1 and 0.0 <= errors[0] < RTOL[torch.float32]
    ref = torch.load(reference_path, weights_only=True)
    assert ref["labels"] == LABELS
    assert ref["dtypes"] == ["torch.float32"]
    assert ref["timing"] == [0, 1, 2]  # the real set and two orderings of its values
    # the file candidates' workers read holds no oracle, and the oracle's file is gone: the
    # oracle lives in this process only
    assert "oracles" not in ref and "eager_errors" not in ref and "bounds" not in ref
    assert not list(reference_path.parent.rglob("oracle.pt"))
    oracle = oracle_for(reference_path).data
    for oracles, (args, _) in zip(oracle["oracles"], ref["input_sets"]):
        (expected,) = oracles
        assert expected.dtype == torch.float64
        assert torch.allclose(expected, torch.softmax(args[0].double(), -1), equal_nan=True)  # fresh-edges: NaN rows
    real = ref["input_sets"][0][0][0]
    for k in (1, 2):  # the permuted sets hold the real values in another order
        permuted = ref["input_sets"][k][0][0]
        assert not torch.equal(permuted, real)
        assert torch.equal(permuted.flatten().sort().values, real.flatten().sort().values)


# ---------------------------------------------------------------- C candidates

def test_correct_c_softmax_is_accepted_and_timed(evaluate_source):
    result = evaluate_source(c_softmax_source())
    assert result.status == "ok", result.reason + result.log_tail
    assert result.ok and result.reason == ""
    assert len(result.errors) == len(LABELS)
    assert all(e[0] <= RTOL[torch.float32] for e in result.errors)
    assert result.timed and result.timing is not None and result.timing.p50_ms > 0
    # eager is timed in the same worker, before the candidate is loaded
    assert result.eager is not None and result.eager.p50_ms > 0
    assert result.speedup_vs_eager == pytest.approx(result.eager.p50_ms / result.timing.p50_ms)
    assert result.faster_than_eager == clearly_faster(result.timing, result.eager)
    assert result.wall_s > 0


UNNORMALISED = """\
    for (int64_t r = 0; r < rows; ++r) {
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, x[r * cols + c]);
        for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = expf(x[r * cols + c] - m);
    }
"""

HALF_WRITTEN = """\
    for (int64_t r = 0; r < rows / 2; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
"""

NO_MAX = """\
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c]); s += yr[c]; }
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
"""

SEGFAULT = """\
    *(volatile float *)0 = 1.0f;
"""

ENDLESS = """\
    volatile int spin = 1;
    while (spin) { }
"""

MODIFIES_INPUT = CORRECT_BODY + "    ((float *)x)[0] = 42.0f;\n"  # right answer, input clobbered

REFUSES = """\
    return 5;
"""


def test_unnormalised_kernel_is_a_wrong_result(evaluate_source):
    result = evaluate_source(c_softmax_source(UNNORMALISED))
    assert result.status == "wrong_result"
    assert result.reason.startswith("on real0: output 0: ")
    assert "elements outside the tolerance; worst at index" in result.reason
    assert not result.timed and result.timing is None


def test_half_written_output_is_caught_by_the_prefill(evaluate_source):
    result = evaluate_source(c_softmax_source(HALF_WRITTEN))
    assert result.status == "wrong_result"
    assert result.reason.startswith("on real0: output 0: ")
    assert "elements never written (they still hold the prefill" in result.reason


def test_softmax_without_the_max_overflows_on_large_inputs(evaluate_source):
    result = evaluate_source(c_softmax_source(NO_MAX))
    assert result.status == "wrong_result"
    # right on the model's own inputs and on N(0, 1); the x100 inputs overflow exp()
    assert result.reason.startswith("on fresh-large:"), result.reason
    assert all(e[0] <= RTOL[torch.float32] for e in result.errors[:4])


def test_segfault_is_a_crash(evaluate_source):
    result = evaluate_source(c_softmax_source(SEGFAULT))
    assert result.status == "crash"
    assert "SIGSEGV" in result.reason
    assert result.timing is None


def test_endless_loop_is_a_timeout_and_the_worker_is_killed(evaluate_source, monkeypatch):
    from kernforge.evaluate import forked

    started = []
    start = forked.SERVER.start
    monkeypatch.setattr(forked.SERVER, "start", lambda *a: started.append(start(*a)) or started[-1])
    result = evaluate_source(c_softmax_source(ENDLESS), timeout_s=5)
    assert result.status == "timeout"
    assert result.reason == "timed out after 5 s"
    assert result.wall_s < 30
    (worker,) = started
    assert not Path(f"/proc/{worker.pid}").exists()
    in_its_session = []  # the worker led a session of its own: anything it started is in it
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3]) == worker.pid:
                in_its_session.append(pid)
        except (OSError, IndexError, ValueError):
            continue
    assert in_its_session == []


def test_a_cpu_job_is_forked_not_a_fresh_interpreter(evaluate_source, monkeypatch):
    from kernforge.evaluate import runner

    def no_interpreter(*_a, **_k):
        raise AssertionError("a CPU job started an interpreter")

    monkeypatch.setattr(runner.subprocess, "Popen", no_interpreter)
    result = evaluate_source(c_softmax_source())
    assert result.ok, result.reason + result.log_tail
    # the worker's steps, and the judgement this process made of its outputs, each timed
    assert result.phases["judge"] > 0 and set(result.phases) > {"judge"}, result.phases


def test_with_forks_off_a_cpu_job_runs_in_a_fresh_interpreter(evaluate_source, monkeypatch):
    from kernforge.evaluate import forked

    monkeypatch.setenv("KERNFORGE_FORK_WORKERS", "0")
    monkeypatch.setattr(forked.SERVER, "start", lambda *a: pytest.fail("forked with KERNFORGE_FORK_WORKERS=0"))
    assert evaluate_source(c_softmax_source()).ok
    assert evaluate_source(c_softmax_source(SEGFAULT)).status == "crash"


def test_compile_error_is_reported_with_gccs_message(evaluate_source):
    result = evaluate_source(c_softmax_source("    this is not C;\n"))
    assert result.status == "compile_error"
    assert "error:" in result.reason and "candidate.c" in result.reason


def test_kernel_that_modifies_its_input_is_rejected_as_a_cheat(evaluate_source):
    result = evaluate_source(c_softmax_source(MODIFIES_INPUT))
    assert result.status == "cheat"
    assert result.reason.endswith(": input 0 was modified") and result.reason.startswith("on ")


def test_kernel_refusing_its_inputs_is_a_runtime_error(evaluate_source):
    result = evaluate_source(c_softmax_source(REFUSES))
    assert result.status == "runtime_error"
    assert "error code 5" in result.reason


# ---------------------------------------------------------------- inputs over the sample cap

@pytest.fixture(scope="module")
def drawn_softmax(drawn_softmax_task, tmp_path_factory):
    """(task, folder, baseline): the softmax task with no real inputs, its baseline made on drawn ones."""
    folder = tmp_path_factory.mktemp("drawn-softmax")
    save_task(drawn_softmax_task, folder / "task.json")
    baseline = evaluate_baseline(folder / "task.json", folder / "reference.pt", "cpu", folder / "baseline", 300)
    yield drawn_softmax_task, folder, baseline
    discard_reference(folder / "reference.pt")


def evaluate_drawn(drawn_softmax, tmp_path: Path, body: str = CORRECT_BODY):
    _, folder, _ = drawn_softmax
    source = tmp_path / "candidate.c"
    source.write_text(c_softmax_source(body))
    return evaluate_candidate(folder / "task.json", folder / "reference.pt", source, "cpu", "cpu",
                              tmp_path / "job", timeout_s=120)


def test_a_task_over_the_sample_cap_is_judged_on_drawn_inputs(drawn_softmax, tmp_path: Path):
    task, folder, baseline = drawn_softmax
    assert task.real_inputs == "none"
    assert baseline.labels == [label.replace("real", "drawn") for label in LABELS]
    ref = torch.load(folder / "reference.pt", weights_only=True)
    (x, dim, _), _ = ref["input_sets"][0]
    assert list(x.shape) == task.args[0]["shape"] and list(x.stride()) == task.args[0]["stride"]
    assert dim == -1 and 0.8 < float(x.std()) < 1.2  # N(0, 1)
    result = evaluate_drawn(drawn_softmax, tmp_path)
    assert result.status == "ok", result.reason + result.log_tail
    assert result.timed and len(result.errors) == len(LABELS)
    wrong = evaluate_drawn(drawn_softmax, tmp_path, UNNORMALISED)
    assert wrong.status == "wrong_result" and wrong.reason.startswith("on drawn0: output 0: ")


def test_drawn_sets_keep_the_real_tensors_and_every_layout(tmp_path: Path):
    from kernforge.harness.inputs import drawn_set

    weight = torch.rand(32) + 0.5
    norm = torch.nn.LayerNorm(32).eval()
    norm.weight.data.copy_(weight)
    x = torch.randn(64, 2, 32)[:, 1]  # every other row of 32: strides (64, 1), gaps between rows
    loaded = LoadedModel(norm, (x,), torch.device("cpu"), "m", "m")
    capture = capture_model(loaded, tmp_path, repeats=1, sample_cap_bytes=1024)
    (profile,) = [p for p in capture.ranked() if p.op == "aten::native_layer_norm.default"]
    sample = load_sample(tmp_path / profile.samples[0])
    gen = torch.Generator().manual_seed(0)
    (drawn_x, shape, w, b, eps), _ = drawn_set(sample, gen)
    assert drawn_x.shape == x.shape and drawn_x.stride() == x.stride() and drawn_x.dtype == x.dtype
    assert not torch.equal(drawn_x, x) and abs(float(drawn_x.std()) - 1.0) < 0.1
    assert torch.equal(w, weight) and torch.equal(b, torch.zeros(32)) and (shape, eps) == ([32], 1e-5)

    expanded = Placeholder(shape=(4, 8), stride=(0, 1), dtype="torch.float16")
    index = Placeholder(shape=(1000,), stride=(1,), dtype="torch.int64", low=3, high=7)
    mask = Placeholder(shape=(10, 10), stride=(10, 1), dtype="torch.bool", low=1, high=1)
    (e, i, m), _ = drawn_set(([expanded, index, mask], {}), gen)
    assert e.stride() == (0, 1) and e.dtype == torch.float16 and e.untyped_storage().nbytes() == 8 * 2
    assert (i.dtype, int(i.min()), int(i.max())) == (torch.int64, 3, 7)  # within the captured range
    assert m.dtype == torch.bool and bool(m.all())  # a mask that was all True stays so
    with pytest.raises(ValueError, match="without a recorded range"):
        drawn_set(([Placeholder(shape=(3,), stride=(1,), dtype="torch.int32")], {}), gen)


def test_integer_inputs_eager_refuses_when_drawn_leave_the_task_unsearched(tmp_path: Path):
    class Bags(torch.nn.Module):
        def forward(self, weight, indices, offsets):
            return torch.nn.functional.embedding_bag(indices, weight, offsets)

    inputs = (torch.randn(50, 4), torch.randint(0, 50, (400,)), torch.arange(0, 400, 25))
    loaded = LoadedModel(Bags(), inputs, torch.device("cpu"), "m", "m")
    capture = capture_model(loaded, tmp_path / "capture", repeats=1, sample_cap_bytes=0)
    (task,), _ = make_tasks(capture, tmp_path / "capture", top_k=1, why_unsupported=lambda t: None)
    assert task.op == "aten::_embedding_bag_forward_only.default" and task.real_inputs == "none"
    save_task(task, tmp_path / "task.json")
    # offsets drawn over their range are out of order: eager says so, and the baseline passes it on
    with pytest.raises(RuntimeError, match=r"^the inputs over the sample cap cannot be drawn: eager raises on "
                                           r"drawn0: RuntimeError: offsets\[0\] has to be 0"):
        evaluate_baseline(tmp_path / "task.json", tmp_path / "reference.pt", "cpu", tmp_path / "baseline", 300)


# ---------------------------------------------------------------- Triton under the interpreter

def test_triton_candidate_is_checked_under_the_interpreter_but_not_timed(
        evaluate_source, softmax_task, monkeypatch):
    # The worker turns the interpreter on itself, from the job's backend and device.
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    proposal = BuiltinProposer().next_move(softmax_task, "triton", None, [])
    assert proposal is not None
    result = evaluate_source(proposal.source, backend="triton", suffix=".py")
    assert result.status == "ok", result.reason + result.log_tail
    assert len(result.errors) == len(LABELS)
    assert result.timed is False
    assert result.timing is None and result.eager is None and result.speedup_vs_eager is None
    assert result.faster_than_eager is False


def test_triton_candidate_that_fails_to_import_is_a_compile_error(evaluate_source):
    source = "import math\n\nBLOCK = math.sqrt(-1)  # raises at import\n"
    result = evaluate_source(source, backend="triton", suffix=".py")
    assert result.status == "compile_error"
    assert "ValueError: math domain error" in result.reason


# ---------------------------------------------------------------- pieces, in process

def test_fresh_sets_keep_layout_and_draw_new_values():
    from kernforge.harness.inputs import fresh_set

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5).t()  # (5, 6), strides (1, 5)
    sample = ([x, -1, False], {})
    for kind in FRESH_KINDS:
        (y, dim, flag), kwargs = fresh_set(sample, kind, gen)
        assert (dim, flag, kwargs) == (-1, False, {})
        assert y.shape == x.shape and y.dtype == x.dtype and y.stride() == x.stride()
        assert not torch.equal(y, x)
    (large, _, _), _ = fresh_set(sample, "large", gen)
    assert large.abs().max() > 50  # large enough to overflow exp() without the max subtracted
    (offset, _, _), _ = fresh_set(sample, "offset", gen)
    assert offset.mean() > 9000 and offset.std() < 3  # the mean far from zero
    (wide,), _ = fresh_set(([torch.randn(4000)], {}), "wide", gen)
    assert wide.abs().max() / wide.abs().min() > 1e8
    (mixed,), _ = fresh_set(([torch.randn(400, 8)], {}), "mixed", gen)
    row_scale = mixed.abs().amax(-1)
    assert row_scale.max() / row_scale.min() > 100  # tiny and large rows in one input
    ints = torch.arange(4)
    assert fresh_set(([ints], {}), "normal", gen)[0][0] is ints  # integer tensors are kept


def test_layout_copies_keep_gaps_and_broadcast_dimensions():
    from kernforge.harness.inputs import extent, fresh_set, layout_copy, refill

    gen = torch.Generator().manual_seed(0)
    half = torch.randn(4, 16).chunk(2, -1)[1]  # a gated MLP's second half: strides (16, 1), offset 8
    expanded = torch.randn(1, 8).expand(4, 8)  # stride 0 along the first dimension
    for x in (half, expanded):
        copy = layout_copy(x)
        assert copy.stride() == x.stride() and torch.equal(copy, x)
        assert copy.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        (fresh,), _ = fresh_set(([x], {}), "normal", gen)
        assert fresh.stride() == x.stride() and extent(fresh) == extent(x)
        refill(copy, fresh)
        assert torch.equal(copy, fresh)
    assert layout_copy(expanded).untyped_storage().nbytes() == 8 * 4  # one row, not four


def test_digests_tell_a_changed_input_from_an_unchanged_one():
    from kernforge.harness.inputs import digest

    x = torch.randn(3, 5, dtype=torch.bfloat16)
    same = x.clone()
    assert digest(x).tolist() == digest(same).tolist()
    swapped = x.clone()
    swapped[0, 0], swapped[0, 1] = x[0, 1], x[0, 0]  # same sum, other positions
    assert digest(x).tolist() != digest(swapped).tolist()
    odd = torch.randn(7, dtype=torch.float16)[1:]  # 12 bytes at an odd element offset
    assert digest(odd).tolist() == digest(odd.clone()).tolist()


def test_a_digest_is_its_words_sum_and_position_weighted_sum(monkeypatch):
    """Summed as rows of the weights' period, a few rows at a time, with a tail: the same as the
    definition, word i weighing i % WEIGHTS + 1, in wrapping int64 arithmetic."""
    from kernforge.harness import inputs

    monkeypatch.setattr(inputs, "DIGEST_ROWS", 2)  # several row blocks at a small size
    x = torch.randint(-2**31, 2**31 - 1, (5 * inputs.WEIGHTS + 17,), dtype=torch.int32)
    words = x.to(torch.int64)
    weights = torch.arange(words.numel(), dtype=torch.int64) % inputs.WEIGHTS + 1
    assert inputs.digest(x).tolist() == [int(words.sum()), int((words * weights).sum())]


def bounds_for(oracle: torch.Tensor, eager: torch.Tensor | None = None, dtype=torch.float32):
    return [element_bound(oracle, oracle if eager is None else eager, dtype)]


def test_compare_accepts_within_tolerance_and_explains_each_failure():
    oracle = torch.softmax(torch.randn(3, 8, dtype=torch.float64), -1)
    good = oracle.float()
    f32 = [torch.float32]
    why, errors = compare([good], [oracle], bounds_for(oracle), f32)
    assert why is None and len(errors) == 1 and errors[0] < 1e-6

    bad = good.clone()
    bad[1, 2] += 0.1
    why, _ = compare([bad], [oracle], bounds_for(oracle), f32)
    assert why.startswith("output 0: 1 of 24 elements outside the tolerance; worst at index (1, 2)")
    assert "next worst" not in why
    bad[0, 5] += 0.3  # the worst now, then (1, 2) and a third, in the order of their excess
    bad[2, 7] -= 0.05
    why, _ = compare([bad], [oracle], bounds_for(oracle), f32)
    assert "3 of 24" in why and "worst at index (0, 5)" in why
    assert re.search(r"next worst: \(1, 2\) \S+ vs \S+, \(2, 7\) ", why), why

    nan = good.clone()
    nan[0, 0] = float("nan")
    why, _ = compare([nan], [oracle], bounds_for(oracle), f32)
    assert "1 NaN/inf values" in why

    assert "has shape (3, 7)" in compare([good[:, :7]], [oracle], bounds_for(oracle), f32)[0]
    assert "has dtype torch.float64" in compare([oracle], [oracle], bounds_for(oracle), f32)[0]
    assert "returned 2 outputs" in compare([good, good], [oracle], bounds_for(oracle), f32)[0]


def test_small_elements_are_judged_on_their_own_scale():
    """Each element against its own size: zeroing everything under 1e-6 of the largest was inside
    the old tensor-wide error (1e-5 of the largest magnitude); it is 100% wrong on those elements."""
    oracle = torch.softmax(torch.randn(4, 256, dtype=torch.float64) * 8, -1)
    flushed = oracle.float().masked_fill(oracle < 1e-6 * oracle.max(), 0.0)
    assert normalised_error(flushed, oracle) < 1e-5
    why, _ = compare([flushed], [oracle], bounds_for(oracle), [torch.float32])
    assert why is not None and "elements outside the tolerance" in why
    assert compare([oracle.float()], [oracle], bounds_for(oracle), [torch.float32])[0] is None


def test_compare_allows_eagers_own_error_times_a_factor():
    oracle = torch.ones(4, dtype=torch.float64)
    out = torch.ones(4)
    out[0] = 1.0 + 1e-3  # 1e-3: over float32's 1e-5
    assert compare([out], [oracle], bounds_for(oracle), [torch.float32])[0] is not None
    eager = torch.full((4,), 1.0 + 2e-4, dtype=torch.float64)  # eager off by 2e-4 everywhere
    assert compare([out], [oracle], bounds_for(oracle, eager), [torch.float32])[0] is None  # 8x 2e-4
    assert normalised_error(out, oracle) == pytest.approx(1e-3, rel=1e-3)


def test_compare_requires_matching_nans_and_exact_integers():
    oracle = torch.tensor([1.0, float("nan"), float("inf")], dtype=torch.float64)
    bounds = bounds_for(oracle)
    assert compare([oracle.float()], [oracle], bounds, [torch.float32])[0] is None
    assert compare([torch.tensor([1.0, 2.0, float("inf")])], [oracle], bounds, [torch.float32])[0]
    assert compare([torch.tensor([1.0, float("nan"), -float("inf")])], [oracle], bounds,
                   [torch.float32])[0] == "output 0: infinities differ from the reference's"
    ints = torch.tensor([1, 2, 3])
    assert compare([ints], [ints], [None], [torch.int64])[0] is None
    why = compare([ints + 1], [ints], [None], [torch.int64])[0]
    assert why == "output 0 differs from the reference at index (0,)"


def test_clearly_faster_needs_to_beat_the_noise():
    base = Timing(p20_ms=1.0, p50_ms=1.1, p80_ms=1.2, runs=10, method="wall-clock")
    assert clearly_faster(Timing(0.5, 0.6, 0.9, 10, "wall-clock"), base)
    assert not clearly_faster(Timing(0.5, 0.6, 1.05, 10, "wall-clock"), base)  # p80 over base p20
    assert base.spread == pytest.approx(0.2 / 1.1)


def test_prestarted_workers_are_used_only_with_their_own_environment():
    from kernforge.evaluate.runner import PrestartedWorkers

    workers = PrestartedWorkers(devices=("cpu",))
    workers.enabled = True
    env = {**os.environ, "KF_TEST": "1"}
    workers.prestart("cpu", env)
    assert workers.take("cpu", {**env, "KF_TEST": "2"}) is None  # another environment: not this one
    assert workers.take("cuda", env) is None
    proc, _marks = workers.take("cpu", env)
    assert proc.poll() is None
    proc.stdin.close()  # no job: the worker exits on its own
    assert proc.wait(timeout=60) == 0
    workers.close()


def test_prestarted_workers_are_bounded(monkeypatch):
    from kernforge.evaluate import runner
    from kernforge.evaluate.runner import PrestartedWorkers

    monkeypatch.setattr(runner, "MAX_READY_WORKERS", 2)
    workers = PrestartedWorkers(devices=("cpu",))
    workers.enabled = True
    procs = []
    for i in range(3):
        workers.prestart("cpu", {**os.environ, "KF_TEST": str(i)})
        procs.append(workers._ready[-1][2])
    assert len(workers._ready) == 2
    assert procs[0].poll() is not None  # the oldest was stopped
    workers.close()
    assert all(p.poll() is not None for p in procs)


def test_cpu_jobs_get_no_prestarted_worker():
    from kernforge.evaluate.runner import WORKERS

    assert WORKERS.devices == ("cuda",)  # a waiting worker's import would take the cores being timed
    ready = len(WORKERS._ready)
    WORKERS.prestart("cpu", dict(os.environ))
    assert len(WORKERS._ready) == ready  # nothing was started for a CPU job


def test_an_op_with_a_domain_keeps_the_sets_it_takes_and_its_calls_unscaled(tmp_path: Path):
    """A binary cross-entropy of probabilities that reach 1: normal fresh draws are no inputs of
    it (eager raises), so they are left out, and scaled values would pass 1, so no call is
    scaled; the baseline times eager on what is left (it failed with no result before)."""
    class BCE(torch.nn.Module):
        def forward(self, p, t):
            return torch.nn.functional.binary_cross_entropy(p, t, reduction="none")

    p, t = torch.rand(64, 128), 0.9 * torch.rand(64, 128)
    p[:, :8] = 1.0
    loaded = LoadedModel(module=BCE(), inputs=(p, t), device=torch.device("cpu"), name="bce", spec="test")
    capture = capture_model(loaded, tmp_path / "capture", repeats=1)
    tasks, _ = make_tasks(capture, tmp_path / "capture", 5, lambda task: None)
    task = next(x for x in tasks if "binary_cross_entropy" in x.op)
    save_task(task, tmp_path / "task.json")
    reference = tmp_path / "reference.pt"
    baseline = evaluate_baseline(tmp_path / "task.json", reference, "cpu", tmp_path / "baseline", 600.0, ())
    try:
        saved = torch.load(reference, weights_only=True, mmap=True)
        assert baseline.eager is not None and baseline.eager.p50_ms > 0
        assert saved["vary"] is False
        assert not any(label == "fresh-normal" for label in saved["labels"]), saved["labels"]
    finally:
        discard_reference(reference)
