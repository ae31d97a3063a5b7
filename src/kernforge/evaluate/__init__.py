"""evaluate: build, check and time a candidate in a worker process, never in the search process."""

from kernforge.evaluate.runner import Baseline, EvalResult, evaluate_baseline, evaluate_candidate
from kernforge.evaluate.timing import Timing, clearly_faster

__all__ = ["Baseline", "EvalResult", "Timing", "clearly_faster", "evaluate_baseline", "evaluate_candidate"]
