"""The run's LLM budget: tokens and money for every call together, across tasks and resumes.

Checked before each call and charged after it, from the proposer's threads: calls
already in flight when the budget runs out finish (and are charged), so a run can end
a few calls over; nothing new starts after that.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from kernforge.records.proposal import Usage


@dataclass
class Budget:
    max_tokens: int = 0  # 0: no limit
    max_usd: float = 0.0  # 0: no limit
    spent: Usage = field(default_factory=Usage)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def charge(self, usage: Usage) -> None:
        with self._lock:
            self.spent = self.spent + usage

    def exhausted(self) -> str | None:
        """Why no more calls may start, or None."""
        with self._lock:
            spent = self.spent
        if self.max_tokens and spent.tokens >= self.max_tokens:
            return f"the LLM budget of {self.max_tokens:,} tokens is spent ({spent.tokens:,} used)"
        if self.max_usd and spent.cost_usd >= self.max_usd:
            return f"the LLM budget of ${self.max_usd:.2f} is spent (${spent.cost_usd:.4f} used)"
        return None
