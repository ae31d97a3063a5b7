"""A whole run's time budget (--time-budget): spread over the ranked tasks by what each can give
the model, re-spread after every task, so that time a task did not use goes to the ones after it.

Each task gets, when it starts, its weight's part of the time left before the deadline, less what
apply is kept: weight = the model's projected gain if the op ran 2x faster, eager or under
torch.compile, whichever is more (Amdahl: OpProfile.rank_gain - 1). Its share covers its baseline,
its candidates and its finalists: a candidate is started only where it and one finalist's
confirmation still fit in it (candidate_fits; those running finish), though a task whose
baseline took its whole share still evaluates one candidate. A task is not started where its
share is under MIN_TASK_S: its share then goes to the tasks after it. A task whose share is
under what its baseline, one candidate and its confirmation are expected to take (the seconds
per byte of the run's tasks so far, FixedCosts.least_task_s) gets that much where the time left
holds it, in rank order, and is not started where it does not. A budgeted
task also stops once it stopped improving (PLATEAU candidates in a row after its best), and says
so."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from kernforge.errors import UserError

# Of the whole budget, kept for installing the winners and measuring the model, at most
# APPLY_MOST_S: apply took 120-158 s for 1-5 kernels on the H200 (bench/results/h200/issue32/README.md).
APPLY_SHARE = 0.25
APPLY_MOST_S = 600.0
MIN_TASK_S = 20.0
# Candidates in a row not better than the task's best before a budgeted task stops: the MCTS
# gives a subtree four expansions without a better result before it looks elsewhere (mcts.py).
PLATEAU = 6
# The iterations cap where --time-budget is given and --iterations is not: the time decides.
BUDGETED_ITERATIONS = 50
# A finalist's confirmation against a candidate's own evaluation time: it redoes the whole
# evaluation (a fresh worker, build, checks, timing) at the task's end. The estimate before the run
# has confirmed anything; after, the largest ratio its confirmations took (FixedCosts): on a loaded
# 2-core CPU they took 1.9-2.2x a candidate, and a 4 m budget ran 17 s over with 1.4x reserved
# (bench/results/cpu/issue34/README.md).
CONFIRM_FACTOR = 1.4

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, flag: str = "--time-budget") -> float:
    """Seconds in "90s", "30m", "2h", "1h30m" or a plain number of seconds; `flag` names the
    option in the error a bad one gives."""
    cleaned = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", cleaned):
        seconds = float(cleaned)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([smh])", cleaned)
        if not parts or "".join(n + u for n, u in parts) != cleaned:
            raise UserError(f"{flag} '{text}' is not a duration; write it like 90s, 30m, 2h or 1h30m")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise UserError(f"{flag} '{text}' must be more than nothing")
    return seconds


@dataclass
class TimeBudget:
    total_s: float
    deadline: float  # time.perf_counter() at which the run should be done, apply included
    reserve_s: float  # kept at the end for apply

    @classmethod
    def starting(cls, total_s: float, started: float, apply: bool, spent_s: float = 0.0) -> TimeBudget:
        """A budget counted from `started` (time.perf_counter() when this process began the run),
        of which `spent_s` went before (a resumed run's earlier sessions)."""
        return cls(total_s=total_s, deadline=started + total_s - spent_s, reserve_s=min(APPLY_SHARE * total_s, APPLY_MOST_S) if apply else 0.0)

    def left_s(self, now: float | None = None) -> float:
        """Seconds left for the search, apply's part kept."""
        return self.deadline - self.reserve_s - (time.perf_counter() if now is None else now)

    def apply_s(self, now: float | None = None) -> float:
        """Seconds left for apply, to the deadline: its reserve, more where the search finished
        early, less where candidates still running ran past their share (apply then runs its
        fewest timing rounds, pace.py)."""
        return max(0.0, self.deadline - (time.perf_counter() if now is None else now))

    def share_s(self, weights: list[float], now: float | None = None) -> float:
        """The first of these tasks' share of what is left: its weight's part of all theirs."""
        total = sum(weights)
        left = max(0.0, self.left_s(now))
        return left * weights[0] / total if total > 0 else left / max(1, len(weights))


def candidate_fits(left_s: float, eval_s: float | None, confirm_factor: float = CONFIRM_FACTOR) -> bool:
    """Whether a new candidate may start with `left_s` of the task's share left: it and one
    finalist's confirmation after it (`confirm_factor` x a candidate's `eval_s`) must fit. Before
    any candidate was timed (`eval_s` None) only the share's end stops one."""
    if eval_s is None:
        return left_s > 0
    return left_s >= eval_s * (1.0 + confirm_factor)


def projected_gain(rank_gain: float) -> float:
    """A task's weight: the model's gain if the op ran 2x faster, never nothing (a task in the
    ranking still gets a little time)."""
    return max(rank_gain - 1.0, 1e-3)


@dataclass
class FixedCosts:
    """What the run's baselines took, to expect the next one's: seconds per byte of the task's
    inputs and outputs (the VAE's group norm on an H100: 74 s for a 268 MB input, its oracle
    included: bench/results/h100/issue32/vae-phases)."""

    seconds: float = 0.0
    nbytes: int = 0
    # Each confirmation's time over its candidate's own evaluation, the run's tasks so far.
    confirm_ratios: list[float] = field(default_factory=list)
    # The candidates' evaluations (EvalResult.evaluation_s) and their tasks' bytes, to expect a
    # task's first candidate before it has timed one: a VAE group norm's took 47-58 s on an H100,
    # its worker 11 s of it (bench/results/h100/issue32/vae-20261207b).
    candidate_seconds: float = 0.0
    candidate_bytes: int = 0

    def add(self, seconds: float, nbytes: int) -> None:
        self.seconds += seconds
        self.nbytes += nbytes

    def add_candidate(self, seconds: float, nbytes: int) -> None:
        if seconds > 0:
            self.candidate_seconds += seconds
            self.candidate_bytes += nbytes

    def least_task_s(self, nbytes: int) -> float:
        """What a task of `nbytes` is expected to take at the least, as the run's tasks so far
        took it for their size: its baseline, one candidate and that candidate's confirmation
        (0 before anything was measured)."""
        candidate = self.candidate_seconds * nbytes / self.candidate_bytes if self.candidate_bytes else 0.0
        return self.expected_s(nbytes) + candidate * (1.0 + self.confirm_factor())

    def add_confirmation(self, candidate_s: float, confirm_s: float) -> None:
        if candidate_s > 0 and confirm_s > 0:
            self.confirm_ratios.append(confirm_s / candidate_s)

    def confirm_factor(self) -> float:
        """What to reserve for a finalist's confirmation, in candidates' evaluation times: the most
        the run's confirmations took, never under the estimate (one slow confirmation is what
        overruns a budget; a mean would reserve too little for it)."""
        return max([CONFIRM_FACTOR, *self.confirm_ratios])

    def expected_s(self, nbytes: int) -> float:
        return self.seconds * nbytes / self.nbytes if self.nbytes else 0.0


def task_bytes(args: Any, outputs: list[dict[str, Any]]) -> int:
    """The bytes of a task's tensor inputs (nested as the task records them) and outputs."""
    return _meta_bytes(args) + _meta_bytes(outputs)


def _meta_bytes(value: Any) -> int:
    if isinstance(value, dict) and "shape" in value and "dtype" in value:
        numel = math.prod(int(size) for size in value["shape"])
        return numel * _ELEMENT_BYTES.get(str(value["dtype"]).replace("torch.", ""), 4)
    if isinstance(value, dict):
        return sum(_meta_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_meta_bytes(v) for v in value)
    return 0


_ELEMENT_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
                  "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16,
                  "float8_e4m3fn": 1, "float8_e5m2": 1}
