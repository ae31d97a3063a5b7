"""propose: where candidate kernels come from.

A proposer's lifecycle, as the search engine drives it (search/engine.py):

  why_unsupported(task, backend)   once per hot op, before any search: None if it can write
                                   kernels for it, else one line saying why not (the op is skipped);
  check()                          once per run, before capture: a bad endpoint, key or model is
                                   one line here, not a failure in the middle of the night;
  propose(ctx)                     once per expansion, with a ProposalContext (context.py): a
                                   first candidate (ctx.parent None) or a variation or repair of
                                   ctx.parent. It returns a Proposal, or a NoProposal saying why
                                   not and what to do next (a value, never an exception).
                                   An `inline` proposer (the built-in one: microseconds) is called
                                   on the strategy's thread; any other runs on a thread of its own
                                   beside the evaluations, so that workers stay busy while an LLM
                                   thinks, up to `concurrency` at once.

Every candidate, whatever made it, is one Proposal (records/proposal.py): its source and
rationale, its origin (builtin with its parameters, llm with its model, usage and transcript, or
human), so that the store, the dashboard and reports treat them alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kernforge.errors import UserError
from kernforge.records.proposal import Usage

if TYPE_CHECKING:
    from kernforge.propose.context import ProposalContext
    from kernforge.records.proposal import NoProposal, Proposal
    from kernforge.records.task import KernelTask


class Proposer(Protocol):
    name: str
    inline: bool  # called on the strategy's thread (True: it never waits on anything)
    concurrency: int  # proposals at once, when not inline
    repairs: int  # how many failed candidates in a row it repairs (0: none)

    def why_unsupported(self, task: KernelTask, backend: str) -> str | None: ...

    def check(self) -> None: ...

    def budget_exhausted(self) -> str | None: ...  # why nothing more may start in this run, or None

    def propose(self, ctx: ProposalContext) -> Proposal | NoProposal: ...


@dataclass
class ProposerOptions:
    """What building a proposer takes, from the CLI or a run's config.json (no secrets: keys
    come from the environment, see propose/llm/providers)."""

    llm: str = ""  # openai:MODEL | anthropic:MODEL | http://HOST:PORT/v1
    llm_model: str = ""  # the model, where --llm is a URL (or to override it)
    max_tokens: int = 0  # the run's token budget for every LLM call together; 0: none
    max_usd: float = 0.0  # the run's money budget; 0: none
    prices: str = ""  # a JSON file extending the built-in price table
    repairs: int = 3  # failed candidates in a row the generator repairs from their messages
    timeout_s: float = 180.0  # one LLM request
    retries: int = 4  # per request, on 429, 5xx and time-outs, with back-off


def _builtin(options: ProposerOptions, spent: Usage) -> Proposer:
    from kernforge.propose.builtin import BuiltinProposer

    return BuiltinProposer()


def _llm(options: ProposerOptions, spent: Usage) -> Proposer:
    from kernforge.propose.llm import LLMProposer

    return LLMProposer.from_options(options, spent)


def _mixed(options: ProposerOptions, spent: Usage) -> Proposer:
    from kernforge.propose.llm import LLMProposer
    from kernforge.propose.mixed import MixedProposer

    return MixedProposer(LLMProposer.from_options(options, spent))


REGISTRY: dict[str, Callable[[ProposerOptions, Usage], Proposer]] = {
    "builtin": _builtin, "llm": _llm, "mixed": _mixed}


def get_proposer(name: str, options: ProposerOptions | None = None, spent: Usage | None = None) -> Proposer:
    """The proposer by name; `spent` is what a resumed run's LLM calls cost before it stopped."""
    if name not in REGISTRY:
        raise UserError(f"unknown proposer '{name}'; choose one of: {', '.join(REGISTRY)}")
    options = options or ProposerOptions()
    if "@" in options.llm.split("://", 1)[-1].split("/", 1)[0]:
        raise UserError("--llm holds credentials in its URL, which would be written to the run folder: "
                        "put the key in KERNFORGE_LLM_API_KEY and give the URL without them")
    if name != "builtin" and not options.llm:
        raise UserError(f"--proposer {name} needs an LLM: give --llm openai:MODEL, anthropic:MODEL "
                        "or http://HOST:PORT/v1 (with --llm-model where it serves several models)")
    return REGISTRY[name](options, spent or Usage())
