"""llm: the LLM proposer, a pair of agents on the user's LLM.

For each expansion (propose(ctx), on a thread of its own beside the evaluations):
  analyst    when the parent is a correct, timed candidate: reads its timings against the
             memory floor and the peers, its build report (registers, spills, shared memory)
             and the failures so far, and returns a short structured recommendation; once per
             parent (cached), and passed down the lineage;
  generator  writes a candidate for the task's backend: a first one, a repair of a failed
             parent from its error (build, wrong result, scan finding), or an improvement on
             a correct one following the analyst's recommendation.
Every exchange (both agents' prompts and replies, tokens, cost, latency) travels with the
proposal, or with the NoProposal when no candidate came (an API error after its retries, a
reply with no code): the engine keeps either in the run folder. API keys never do: they stay
in the providers, read from the environment.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kernforge.backends import REGISTRY
from kernforge.errors import UserError
from kernforge.propose import ProposerOptions
from kernforge.propose.context import ProposalContext
from kernforge.propose.llm import prompts
from kernforge.propose.llm.budget import Budget
from kernforge.propose.llm.extract import extract_candidate
from kernforge.propose.llm.prices import Price, cost_usd, load_prices, price_for
from kernforge.propose.llm.providers import Message, Provider, ProviderError, make_provider
from kernforge.records.proposal import NoProposal, Proposal, Usage

# Reply lengths: a kernel file is 2-8 kB (~2k tokens); 8k leaves room for a long one and the prose.
GENERATOR_MAX_TOKENS, ANALYST_MAX_TOKENS = 8192, 1024
# Proposals in flight at once: one per evaluation worker is enough to keep them busy (the engine
# keeps two jobs per worker); more would spend tokens on candidates the budget may never evaluate.
CONCURRENCY = 4
# After an error with no Retry-After (the client's own retries already backed off): wait this
# long before the next proposal of the task.
RETRY_PAUSE_S = 5.0


class LLMProposer:
    name = "llm"
    inline = False
    concurrency = CONCURRENCY

    def __init__(self, provider: Provider, budget: Budget, price: Price | None, repairs: int = 3) -> None:
        self.provider, self.budget, self.price, self.repairs = provider, budget, price, repairs
        self.label = provider.label
        self._advice: dict[str, dict[str, Any]] = {}  # parent node -> the analyst's recommendation
        self._advice_lock = threading.Lock()
        # One analysis per parent: a second expansion of it in flight waits for the first's answer
        # (on the H200, 4 workers, 2 of 3 parents were analysed twice before this).
        self._analysing: dict[str, threading.Lock] = {}

    @classmethod
    def from_options(cls, options: ProposerOptions, spent: Usage) -> LLMProposer:
        provider = make_provider(options.llm, options.llm_model or None, options.timeout_s, options.retries)
        # A model served from a URL has no list price: only the user's file prices it.
        hosted = not options.llm.startswith(("http://", "https://"))
        table = load_prices(Path(options.prices) if options.prices else None, builtin=hosted)
        price = price_for(provider.model, table)
        if options.max_usd and price is None:
            raise UserError(f"no price is known for model '{provider.model}', so --llm-max-usd cannot be "
                            "kept: add it with --llm-prices FILE.json "
                            '({"MODEL": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}), or use --llm-max-tokens')
        budget = Budget(max_tokens=options.max_tokens, max_usd=options.max_usd, spent=spent)
        return cls(provider, budget, price, options.repairs)

    def check(self) -> None:
        """The endpoint, key and model; a budget a resumed run had spent is said per task instead."""
        self.provider.check()

    def why_unsupported(self, task: Any, backend: str) -> str | None:
        if backend not in REGISTRY:  # every registered backend's record says what to tell the generator
            return f"the llm proposer writes {', '.join(REGISTRY)} kernels, not {backend}"
        if not task.outputs or not all("shape" in o for o in task.outputs):
            return f"{task.op} returns something other than tensors"
        return None

    def budget_exhausted(self) -> str | None:
        return self.budget.exhausted()

    # ------------------------------------------------------------ one expansion

    def propose(self, ctx: ProposalContext) -> Proposal | NoProposal:
        exchanges: list[dict[str, Any]] = []
        spent = self.budget.exhausted()
        if spent:
            return NoProposal(spent, "budget")
        advice = ctx.advice
        parent = ctx.parent
        if parent is not None and parent.result.ok and parent.result.timed:
            advice = self._analysis(ctx, exchanges) or advice
            spent = self.budget.exhausted()
            if spent:
                return self._no(spent, "budget", exchanges)
        system = prompts.generator_system(ctx.backend)
        prompt = prompts.generator_prompt(ctx, advice)
        reply = self._call("generator", system, prompt, GENERATOR_MAX_TOKENS, exchanges)
        if isinstance(reply, ProviderError):
            return self._no(f"the generator's call failed: {reply.message}", "retry", exchanges,
                            reply.retry_after_s or RETRY_PAUSE_S)
        found = extract_candidate(reply, ctx.backend)
        if found.source is None:
            return self._no(f"the generator's reply had no candidate: {found.why_not}", "retry", exchanges)
        kind = "first" if parent is None else ("repair" if not parent.result.ok else "rewrite")
        rationale = f"{self.provider.model} {kind}" + (f" of {parent.node_id}" if parent else "") + \
            (f": {found.idea}" if found.idea else "")
        return Proposal(source=found.source, rationale=rationale, origin="llm", model=self.label,
                        params={"move": kind}, usage=_usage(exchanges), transcript=exchanges, advice=advice)

    def _analysis(self, ctx: ProposalContext, exchanges: list[dict[str, Any]]) -> dict[str, Any]:
        """The analyst's recommendation on the parent, asked once per parent."""
        parent = ctx.parent
        with self._advice_lock:
            lock = self._analysing.setdefault(parent.node_id, threading.Lock())
        with lock:
            if parent.node_id in self._advice:
                return self._advice[parent.node_id]
            reply = self._call("analyst", prompts.ANALYST_SYSTEM,
                               prompts.analyst_prompt(ctx, _build_report(parent.files)), ANALYST_MAX_TOKENS, exchanges)
            if isinstance(reply, ProviderError):
                return {}  # the generator goes on without it; the exchange keeps the error
            advice = prompts.parse_advice(reply)
            self._advice[parent.node_id] = advice
            return advice

    def _call(self, agent: str, system: str, prompt: str, max_tokens: int,
              exchanges: list[dict[str, Any]]) -> str | ProviderError:
        """One agent turn, recorded whatever happens, and charged to the budget."""
        started = time.perf_counter()
        entry: dict[str, Any] = {"agent": agent, "model": self.label, "system": system,
                                 "messages": [{"role": "user", "content": prompt}]}
        try:
            completion = self.provider.complete(system, [Message("user", prompt)], max_tokens)
        except ProviderError as e:
            entry.update(reply="", error=f"{e.kind}: {e.message}",
                         usage=asdict(Usage(latency_s=time.perf_counter() - started, calls=1)))
            exchanges.append(entry)
            return e
        cost = cost_usd(self.price, completion.prompt_tokens, completion.completion_tokens) if self.price else 0.0
        usage = Usage(completion.prompt_tokens, completion.completion_tokens, cost, completion.latency_s, 1)
        self.budget.charge(usage)
        entry.update(reply=completion.text, error="", usage=asdict(usage), stop_reason=completion.stop_reason,
                     retries=completion.retries, priced=self.price is not None)
        exchanges.append(entry)
        return completion.text

    def _no(self, reason: str, kind: str, exchanges: list[dict[str, Any]], after_s: float = 0.0) -> NoProposal:
        return NoProposal(reason[:500], kind, retry_after_s=after_s, usage=_usage(exchanges), transcript=exchanges)


def _usage(exchanges: list[dict[str, Any]]) -> Usage:
    total = Usage()
    for e in exchanges:
        total = total + Usage.from_json(e.get("usage"))
    return total


def _build_report(files: Path | None) -> str:
    from kernforge.backends.build_report import resource_usage, summarise

    if not files:
        return ""
    # a finalist's folder holds its second build too (confirm/): one line per kernel configuration
    return "\n".join(dict.fromkeys(summarise(resource_usage(files)).splitlines()))
