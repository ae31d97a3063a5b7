"""How many rounds apply's end-to-end timings take when apply has a time limit.

Without a limit every measurement runs endtoend.ROUNDS rounds of ROUND_MS a variant. With one
(`apply --time-limit`, or what `optimize --time-budget` left for apply), each measurement gets
its part of the time left, the measurements still to come sharing it equally, and sizes itself
from its variants' measured call times: calls per round cut so that MIN_ROUNDS rounds fit its
part (never under MIN_CALLS a variant), then rounds while they fit, up to ROUNDS, and past it,
up to MAX_ROUNDS, while the verdict is still open (a variant within the noise of the first).
A measurement whose part ran out while it would have gone on is counted as cut, and the report
says so. The rounds stay interleaved and shuffled as without a limit: the limit changes how
many samples there are, never how they are taken. A limit below apply's floors (the checks,
each variant's warm-up, MIN_ROUNDS rounds of MIN_CALLS calls, the routing measure) is passed:
the report's wall_s beside time_limit_s says by how much.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kernforge.records import RoundsMeasured

# Two rounds at least: with one, drift between the variants would fall on one side only.
MIN_ROUNDS = 2
# Past ROUNDS only while the verdict is open, to twice as many: a close call gets more samples,
# and the limit still bounds them.
MAX_ROUNDS = 10
MIN_CALLS = 3  # a variant's calls in a round: fewer, and its p20 and p80 are one sample each


@dataclass
class Pace:
    """What is left of apply's time limit for its end-to-end timings, and what each took.
    Made by apply_run; endtoend.time_variants asks it for each measurement's part and reports
    back to it (record)."""

    deadline: float  # time.perf_counter() by which the timings should be done
    expected: int  # measurements still to come, this one included
    done: list[RoundsMeasured] = field(default_factory=list)

    @classmethod
    def starting(cls, limit_s: float, started: float, routing_s: float, expected: int) -> Pace:
        """`routing_s`: kept at the end for the routing-cost bursts (overhead.expected_s)."""
        return cls(deadline=started + limit_s - routing_s, expected=max(1, expected))

    def part_s(self, now: float | None = None) -> float:
        """This measurement's part of the time left: an equal share with those still to come."""
        return max(0.0, self.left_s(now)) / max(1, self.expected)

    def left_s(self, now: float | None = None) -> float:
        """Seconds to the deadline (the routing measure's part kept)."""
        return self.deadline - (time.perf_counter() if now is None else now)

    def record(self, measured: RoundsMeasured) -> None:
        self.done.append(measured)
        self.expected = max(1, self.expected - 1)

    @property
    def cut(self) -> int:
        return sum(m.cut for m in self.done)

    def rounds_text(self) -> str:
        return rounds_span([m.rounds for m in self.done])


def rounds_span(counts: list[int]) -> str:
    """'2-7', or '5' where every measurement ran as many: the rounds the measurements ran."""
    if not counts:
        return "0"
    low, high = min(counts), max(counts)
    return f"{low}" if low == high else f"{low}-{high}"


def calls_per_round(call_s: dict[str, float], default: dict[str, int], part_s: float) -> dict[str, int]:
    """Each variant's calls in a round: its default (ROUND_MS of calls), cut in proportion where
    MIN_ROUNDS rounds of them would not fit `part_s`, never under MIN_CALLS."""
    round_s = sum(default[name] * call_s[name] for name in default)
    if round_s * MIN_ROUNDS <= part_s or round_s <= 0:
        return dict(default)
    scale = part_s / (round_s * MIN_ROUNDS)
    return {name: max(MIN_CALLS, int(calls * scale)) for name, calls in default.items()}


def another_round(done: int, rounds: int, round_s: float, elapsed_s: float, part_s: float, open_: bool) -> bool:
    """Whether a limited measurement runs one more round: always up to MIN_ROUNDS; then, while
    the next round (taking about `round_s`, as the last did) fits what is left of its part, up
    to `rounds`, and past them up to MAX_ROUNDS while the verdict is open."""
    if done < MIN_ROUNDS:
        return True
    if done >= MAX_ROUNDS or (done >= rounds and not open_):
        return False
    return elapsed_s + round_s <= part_s


def was_cut(done: int, rounds: int, open_: bool) -> bool:
    """A measurement the limit stopped while it would have gone on: before `rounds`, or with
    its verdict open before MAX_ROUNDS."""
    return done < rounds or (open_ and done < MAX_ROUNDS)

