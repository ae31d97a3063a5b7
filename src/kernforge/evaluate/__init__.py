"""evaluate: build, check and time a candidate in a worker process, never in the search process."""

from kernforge.evaluate.runner import (
    evaluate_baseline,
    evaluate_candidate,
    evaluate_peers,
)
from kernforge.harness.timing import clearly_faster, clearly_faster_relative

__all__ = [
    "clearly_faster", "clearly_faster_relative", "evaluate_baseline",
    "evaluate_candidate", "evaluate_peers",
]
