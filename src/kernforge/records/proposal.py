"""A proposal as a record: one candidate's source and why it was written, whoever wrote it
(the built-in proposer with its parameters, an LLM with its model, usage and transcript, or a
human); a NoProposal when there is none, and a Failure, a proposal with how it failed.

propose makes them, search keeps them per node, and the run folder holds what `record` gives
(a node's proposal.json and its row in the database), read back by `from_record`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from kernforge.records.evaluation import Status

Origin = Literal["builtin", "llm", "human"]
ORIGINS: tuple[Origin, ...] = get_args(Origin)


@dataclass
class Usage:
    """What an LLM exchange cost; zero for the built-in proposer and for a human."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    calls: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens,
                     self.cost_usd + other.cost_usd, self.latency_s + other.latency_s, self.calls + other.calls)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Usage:
        return cls(**{k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__})


@dataclass
class Proposal:
    source: str
    rationale: str  # shown to the user: what this move changes and why it might help
    params: dict[str, Any] = field(default_factory=dict)
    # The parameters this proposal set differently from its parent (all of them for a first one).
    changes: dict[str, Any] = field(default_factory=dict)
    origin: Origin = "builtin"
    model: str = ""  # llm: the endpoint and model that wrote it ("openai:gpt-4.1")
    usage: Usage = field(default_factory=Usage)
    # llm: every exchange that made it, both agents': {"agent", "system", "messages", "reply",
    # "usage", "error"}. Kept in the node's transcript.json, not in the database.
    transcript: list[dict[str, Any]] = field(default_factory=list)
    # llm: the analyst's recommendation this candidate followed, for its descendants' prompts.
    advice: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """What the run folder keeps of it beside the source (proposal.json, the database)."""
        return {"rationale": self.rationale, "params": self.params, "changes": self.changes,
                "origin": self.origin, "model": self.model, "usage": asdict(self.usage), "advice": self.advice}

    @classmethod
    def from_record(cls, source: str, data: dict[str, Any]) -> Proposal:
        return cls(source=source, rationale=data.get("rationale", ""), params=data.get("params", {}),
                   changes=data.get("changes", {}), origin=data.get("origin", "builtin"),
                   model=data.get("model", ""), usage=Usage.from_json(data.get("usage")),
                   advice=data.get("advice", {}))


# What a NoProposal asks of the search:
#   exhausted  this proposer has nothing new from this parent, ever: close the node;
#   retry      nothing this time (rate limit, time-out, a reply with no code): ask again, after
#              retry_after_s; a run of them in a row ends the task (engine.MAX_FAILED_PROPOSALS);
#   budget     the run's LLM budget is spent: start nothing more, finish what is in flight.
NoProposalKind = Literal["exhausted", "retry", "budget"]
NO_PROPOSAL_KINDS: tuple[NoProposalKind, ...] = get_args(NoProposalKind)


@dataclass
class NoProposal:
    reason: str
    kind: NoProposalKind = "exhausted"
    retry_after_s: float = 0.0
    usage: Usage = field(default_factory=Usage)
    transcript: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Failure:
    """A failed approach: what was tried, and how it failed. Proposers are given every one
    so far, so as not to try the same thing again."""

    proposal: Proposal
    status: Status  # compile_error | wrong_result | cheat | crash | timeout | ...
    reason: str
