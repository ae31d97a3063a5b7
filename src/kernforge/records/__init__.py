"""records: what the stages hand each other and what the run folder holds, as typed records.

What crosses the pipeline: a timing (timing.py), a candidate's evaluation and its task's baseline
(evaluation.py), a proposal (proposal.py), a task (task.py), a search's nodes and outcome
(nodes.py) and a run's config.json (config.py). What its ends write and every later stage reads:
summary.json with its per-task rows (summary.py), apply's end-to-end report (endtoend.py, its
routes' figures in routes.py) and results.tsv's rows (results.py), made by search, optimize and
integrate, read by report, ui and the CLI. Each reads a file written by an older kernforge and
writes the same JSON (or TSV) it always did; the prose a user reads is made from the fields where
it is shown (or written), never compared. What needs more than the data (torch, a worker, the
store, a judgement) stays in its stage, as functions taking the record.
Nothing here imports the rest of kernforge, so any stage may import it."""

from kernforge.records.config import RunConfig, RunKind
from kernforge.records.endtoend import (
    Comparison,
    EndToEnd,
    KernelEffect,
    OutputCheck,
    RoundsMeasured,
    VariantName,
    VariantTiming,
    Verdict,
)
from kernforge.records.evaluation import STATUSES, Baseline, EvalResult, Status
from kernforge.records.nodes import Node, TaskOutcome
from kernforge.records.proposal import Failure, NoProposal, Origin, Proposal, Usage
from kernforge.records.results import ResultRow
from kernforge.records.routes import RouteCost, RoutedCalls
from kernforge.records.summary import Finalist, RunSummary, TaskRow, TaskStatus
from kernforge.records.task import KernelTask, RealInputs
from kernforge.records.timing import Timing

__all__ = ["STATUSES", "Baseline", "Comparison", "EndToEnd", "EvalResult", "Failure", "Finalist", "KernelEffect",
           "KernelTask", "NoProposal", "Node", "Origin", "OutputCheck", "Proposal", "RealInputs", "ResultRow",
           "RoundsMeasured", "RouteCost", "RoutedCalls", "RunConfig", "RunKind", "RunSummary", "Status",
           "TaskOutcome", "TaskRow", "TaskStatus", "Timing", "Usage", "VariantName", "VariantTiming", "Verdict"]
