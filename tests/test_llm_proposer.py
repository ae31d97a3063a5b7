"""The llm and mixed proposers without workers or servers: extraction, prompts, budgets, routing,
and how the search takes proposals that do not come. Seconds to run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import c_softmax_source, scripted_context

from kernforge.errors import UserError
from kernforge.propose import ProposerOptions
from kernforge.propose.context import Attempt, ProposalContext, Seed, task_facts
from kernforge.propose.llm import LLMProposer, prompts
from kernforge.propose.llm.budget import Budget
from kernforge.propose.llm.extract import extract_candidate
from kernforge.propose.llm.prices import Price
from kernforge.propose.llm.providers import Completion, ProviderError
from kernforge.propose.mixed import REWRITE_EVERY, MixedProposer
from kernforge.records.evaluation import EvalResult
from kernforge.records.nodes import Node
from kernforge.records.proposal import Failure, NoProposal, Proposal, Usage
from kernforge.records.task import KernelTask
from kernforge.records.timing import Timing
from kernforge.search import get_strategy
from kernforge.search.engine import MAX_FAILED_PROPOSALS

pytestmark = pytest.mark.unit

X = {"shape": [64, 300], "dtype": "torch.float32", "stride": [300, 1]}
SOFTMAX = KernelTask(task_id="t0", op="aten::_softmax.default", signature="s", args=[X, -1, False],
                     outputs=[dict(X)], samples=[], share=0.42, gain_if_2x=0.2, time_us=10.0, device="cuda")
ATAN = KernelTask(task_id="t1", op="aten::atan.default", signature="p", args=[X],
                      outputs=[dict(X)], samples=[], share=0.1, gain_if_2x=0.05, time_us=3.0, device="cuda")
H200 = {"kind": "cuda", "name": "NVIDIA H200", "capability": "9.0", "multiprocessors": 132,
        "l2_bytes": 60 << 20, "max_shared_memory_per_block_bytes": 227 << 10, "bandwidth_gb_s": 4142.0,
        "bandwidth_note": "a copy"}
EAGER = Timing(p20_ms=0.0099, p50_ms=0.0100, p80_ms=0.0101, runs=100, method="test")


def timed(p50: float) -> EvalResult:
    t = Timing(p20_ms=p50 * 0.99, p50_ms=p50, p80_ms=p50 * 1.01, runs=100, method="test")
    return EvalResult(status="ok", timing=t, eager=EAGER, speedup_vs_eager=EAGER.p50_ms / p50,
                      faster_than_eager=p50 < 0.0098)


def attempt(node_id: str, result: EvalResult, parent: str | None = None, origin: str = "llm",
            source: str = "SOURCE") -> Attempt:
    return Attempt(node_id, parent, Proposal(source=source, rationale=f"idea of {node_id}", origin=origin), result)


def context(task: KernelTask = SOFTMAX, parent: Attempt | None = None, backend: str = "triton", **extra) -> ProposalContext:
    lineage = [parent] if parent else []
    return ProposalContext(task=task, backend=backend, facts=task_facts(task, 0.0100, 0.0090), hardware=H200,
                           parent=parent, lineage=lineage, candidates_left=7, **extra)


# ---------------------------------------------------------------- extraction

def test_one_fenced_block_with_prose_around_it():
    found = extract_candidate("Idea: one pass\n\nHere it is:\n```python\ndef kf_forward(x):\n    return x\n```\n"
                              "Hope it helps!", "triton")
    assert found.source == "def kf_forward(x):\n    return x\n" and found.idea == "one pass"


def test_of_several_blocks_the_entry_and_the_helpers_it_calls_make_the_file():
    reply = ("```python\nimport triton\n\n@triton.jit\ndef k(X):\n    pass\n```\nand the launcher\n"
             "```python\ndef kf_forward(x):\n    k[(1,)](x)\n    return x\n```\nusage:\n```python\nprint(kf_forward(1))\n```"
             "\n```sh\npython run.py\n```")
    source = extract_candidate(reply, "triton").source
    assert source.index("def k(X)") < source.index("def kf_forward") and "print(" not in source


def test_the_last_block_defining_the_entry_wins_and_other_languages_are_ignored():
    reply = ("First try:\n```c\nint kf_forward() { return 1; }\n```\nBetter:\n```c\nint kf_forward() { return 0; }\n```"
             "\n```python\ndef kf_forward(x): pass\n```")
    assert extract_candidate(reply, "cpu").source == "int kf_forward() { return 0; }\n"


def test_an_untagged_block_and_bare_code_count():
    assert "kf_forward" in extract_candidate("```\nint kf_forward(void) { return 0; }\n```", "cuda").source
    bare = "#include <math.h>\nint kf_forward(const kf_tensor *in, int n, kf_tensor *o, int m) { return 0; }"
    assert extract_candidate(bare, "cpu").source.startswith("#include")


@pytest.mark.parametrize("reply, words", [
    ("I cannot write this kernel without more information.", "no code block"),
    ("```python\nimport torch\nx = 1\n```", "no code block defines kf_forward (1 blocks: python)"),
    ("Idea: tiles\n```python\ndef kf_forward(x):\n    return x +", "cut off"),
])
def test_a_reply_without_a_candidate_says_what_it_held(reply: str, words: str):
    found = extract_candidate(reply, "triton")
    assert found.source is None and words in found.why_not


# ---------------------------------------------------------------- prompts

def test_the_first_prompt_holds_the_ops_semantics_shapes_machine_and_contract():
    ctx = context()
    system, prompt = prompts.generator_system("triton"), prompts.generator_prompt(ctx, {})
    assert "aten::_softmax(Tensor self, int dim, bool half_to_float) -> Tensor" in prompt
    assert "torch.ops.aten._softmax.default(<tensor 0>, -1, False)" in prompt
    assert "shape [64, 300], float32, stride [300, 1]" in prompt
    assert f"{64 * 300 * 4 * 2:,}" in prompt  # bytes that must move: one read, one write
    assert "NVIDIA H200" in prompt and "4142 GB/s" in prompt and "132 multiprocessors" in prompt
    assert "eager PyTorch 0.0100 ms" in prompt and "torch.compile 0.0090 ms" in prompt
    assert "Write a first kernel" in prompt and "7 more candidates" in prompt
    assert "kf_forward" in system and "allow-list" in system and "float64 reference" in system
    assert "@triton.jit" in system and "```python" in system  # the built-in kernel as the worked example


@pytest.mark.parametrize("backend, words", [("cpu", "int kf_forward(const kf_tensor *in"),
                                            ("cuda", "extern \"C\" int kf_forward")])
def test_native_backends_get_their_contract_and_an_example_in_their_language(backend: str, words: str):
    system = prompts.generator_system(backend)
    assert words in system and "typedef struct" in system


def test_a_repair_prompt_carries_the_error_and_the_parent_in_full():
    broken = EvalResult(status="compile_error", reason="line 12: expected ';' before 'return'")
    ctx = context(parent=attempt("n0003", broken, source="int kf_forward() { oops }"), repair_depth=1)
    prompt = prompts.generator_prompt(ctx, {})
    assert "failed: compile_error: line 12: expected ';'" in prompt and "Repair it" in prompt
    assert "int kf_forward() { oops }" in prompt


def test_a_first_prompt_offers_a_siblings_best_kernel_to_start_from():
    seed = Seed(task_id="t0-sib", shape="4096x37", winner=True,
                attempt=attempt("n0004", timed(0.0050), source="SIBLING KERNEL SOURCE"))
    prompt = prompts.generator_prompt(context(seed=seed), {})
    assert "best kernel of a sibling task (t0-sib/n0004: the same op and dtypes, shape 4096x37)" in prompt
    assert "SIBLING KERNEL SOURCE" in prompt and "2.00x, faster than eager beyond the noise" in prompt
    assert "starting from the sibling's kernel above" in prompt
    # once the task has a parent of its own, the sibling is no longer the point
    later = prompts.generator_prompt(context(parent=attempt("n0001", timed(0.0080)), seed=seed), {})
    assert "SIBLING KERNEL SOURCE" not in later


def test_an_improvement_prompt_has_the_lineage_timings_failures_and_advice():
    failed = Failure(Proposal("x", "tiles of 4096"), "wrong_result", "output 0: 12 of 19200 elements outside")
    ctx = context(parent=attempt("n0001", timed(0.0080)), failures=[failed],
                  recent=[attempt("n0002", timed(0.0120))])
    prompt = prompts.generator_prompt(ctx, {"next": "use 8 warps", "avoid": "tiles of 4096"})
    assert "p50 0.0080 ms" in prompt and "1.25x, faster than eager beyond the noise" in prompt
    assert "n0002 (llm): correct, p50 0.0120 ms" in prompt
    assert "wrong_result: output 0: 12 of 19200" in prompt and "tiles of 4096" in prompt
    assert "- next: use 8 warps" in prompt and "Improve on the parent candidate n0001" in prompt


def test_the_analyst_reads_the_timings_against_the_floor_and_the_build_report():
    ctx = context(parent=attempt("n0001", timed(0.0200)))
    prompt = prompts.analyst_prompt(ctx, "softmax_rows: 40 registers, no spills, 0 B shared, 4 warps")
    floor = 64 * 300 * 8 / 4142e9 * 1e3
    assert f"{floor:.4f} ms" in prompt and f"{0.0200 / floor:.2f}x the floor" in prompt
    assert "Achieved bandwidth at its median: 8 GB/s of the measured 4142 GB/s" in prompt
    assert "40 registers, no spills" in prompt and "torch.compile takes 0.0090 ms" in prompt


def test_before_a_candidate_beats_eager_the_prompts_say_the_compile_peer_is_not_timed_yet():
    from kernforge.records.evaluation import PEER_PENDING

    facts = task_facts(SOFTMAX, 0.0100, None, PEER_PENDING)
    first, analysed = context(), context(parent=attempt("n0001", timed(0.0200)))
    first.facts = analysed.facts = facts
    assert f"torch.compile {PEER_PENDING}" in prompts.generator_prompt(first, {})
    assert f"torch.compile on this op: {PEER_PENDING}." in prompts.analyst_prompt(analysed, "")
    # none asked (--compile none): the prompts say nothing of torch.compile's time
    ctx_none = context()
    ctx_none.facts = task_facts(SOFTMAX, 0.0100, None)
    assert "torch.compile 0" not in prompts.generator_prompt(ctx_none, {})
    assert "not timed yet" not in prompts.generator_prompt(ctx_none, {})


@pytest.mark.parametrize("reply, expected", [
    ('{"bottleneck": "bandwidth", "next": "vectorise"}', {"bottleneck": "bandwidth", "next": "vectorise"}),
    ('Sure.\n```json\n{"next": "fewer passes", "extra": 1}\n```', {"next": "fewer passes"}),
    ("Try a persistent grid.", {"next": "Try a persistent grid."}),
])
def test_the_analysts_reply_becomes_a_recommendation(reply: str, expected: dict):
    assert prompts.parse_advice(reply) == expected


# ---------------------------------------------------------------- the proposer, with a stub provider

class StubProvider:
    """Answers from a list: a str is a reply, a ProviderError is raised."""

    name, model, label, endpoint = "openai", "stub-coder", "openai:stub-coder", "http://stub"

    def __init__(self, replies: list):
        self.replies, self.calls = list(replies), []

    def complete(self, system, messages, max_tokens):
        self.calls.append((system, messages[-1].content))
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, ProviderError):
            raise reply
        return Completion(text=reply, prompt_tokens=1000, completion_tokens=200, latency_s=0.5, model=self.model)

    def check(self):
        pass


KERNEL_REPLY = f"Idea: a plain loop\n```c\n{c_softmax_source()}```"


def proposer(replies: list, max_tokens: int = 0, price: Price | None = Price(2.0, 8.0)) -> LLMProposer:
    return LLMProposer(StubProvider(replies), Budget(max_tokens=max_tokens), price)


def test_a_proposal_carries_its_origin_usage_cost_and_transcript():
    p = proposer([KERNEL_REPLY]).propose(context(backend="cpu"))
    assert isinstance(p, Proposal) and p.origin == "llm" and p.model == "openai:stub-coder"
    assert p.source == c_softmax_source() and p.rationale == "stub-coder first: a plain loop"
    assert p.usage == Usage(1000, 200, (1000 * 2.0 + 200 * 8.0) / 1e6, 0.5, 1)
    (exchange,) = p.transcript
    assert exchange["agent"] == "generator" and "Write a first kernel" in exchange["messages"][0]["content"]
    assert exchange["reply"] == KERNEL_REPLY


def test_failed_calls_and_replies_without_code_are_retries_with_their_transcript():
    limited = proposer([ProviderError("rate_limit", "429 slow down", retry_after_s=7.0)]).propose(context())
    assert isinstance(limited, NoProposal) and limited.kind == "retry" and limited.retry_after_s == 7.0
    assert "429 slow down" in limited.reason and limited.transcript[0]["error"].startswith("rate_limit")
    prose = proposer(["I'd rather not."]).propose(context())
    assert prose.kind == "retry" and "no code block" in prose.reason and prose.transcript[0]["reply"] == "I'd rather not."


def test_the_analyst_speaks_once_per_timed_parent_and_its_advice_reaches_the_generator():
    llm = proposer(['{"next": "use 8 warps"}', KERNEL_REPLY, KERNEL_REPLY])
    ctx = context(parent=attempt("n0001", timed(0.0080)), backend="cpu")
    first, second = llm.propose(ctx), llm.propose(ctx)
    agents = [system.startswith("You are the performance analyst") for system, _ in llm.provider.calls]
    assert agents == [True, False, False]  # the second expansion of n0001 reuses the advice
    assert first.advice == second.advice == {"next": "use 8 warps"}
    assert "- next: use 8 warps" in llm.provider.calls[1][1]
    assert [e["agent"] for e in first.transcript] == ["analyst", "generator"]


def test_the_budget_ends_proposals_once_spent():
    llm = proposer([KERNEL_REPLY], max_tokens=2500)
    assert all(isinstance(llm.propose(context(backend="cpu")), Proposal) for _ in range(3))  # 1200 tokens each
    spent = llm.propose(context(backend="cpu"))
    assert spent.kind == "budget" and "2,500 tokens is spent (3,600 used)" in spent.reason


def test_a_money_budget_needs_a_price():
    with pytest.raises(UserError, match="no price is known for model 'local-model'.*--llm-prices"):
        LLMProposer.from_options(ProposerOptions(llm="http://127.0.0.1:8000/v1", llm_model="local-model",
                                                 max_usd=5.0), Usage())


def test_a_resumed_run_starts_from_what_was_spent():
    llm = LLMProposer.from_options(ProposerOptions(llm="http://127.0.0.1:8000/v1", llm_model="m", max_tokens=100),
                                   Usage(prompt_tokens=90, completion_tokens=20))
    assert llm.propose(context()).kind == "budget"


def test_run_spent_usage_is_read_back_from_the_events(tmp_path: Path):
    from kernforge.optimize import llm_spent
    from kernforge.store import RunStore

    from kernforge.store.events import NodeFinished, NodeStarted, ProposalFailed

    store = RunStore(tmp_path)
    store.emit(NodeStarted(usage={"prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.5, "calls": 1}))
    store.emit(ProposalFailed(usage={"prompt_tokens": 3, "completion_tokens": 0, "cost_usd": 0.1, "calls": 1}))
    store.emit(NodeFinished(status="ok"))
    assert llm_spent(store) == Usage(13, 5, 0.6, 0.0, 2)


# ---------------------------------------------------------------- mixed

def test_mixed_routes_each_expansion():
    llm = proposer([KERNEL_REPLY])
    mixed = MixedProposer(llm)
    assert mixed.propose(context(ATAN, backend="cpu")).origin == "llm"  # no family knows atan
    first = mixed.propose(context(backend="cpu"))
    assert first.origin == "builtin"  # a family knows softmax: its starting point first
    parent = Attempt("n0000", None, first, timed(0.0090))
    origins = [mixed.propose(context(parent=parent, backend="cpu", tried=[first])).origin
               for _ in range(2 * REWRITE_EVERY)]
    assert origins.count("llm") == 2 and origins.count("builtin") == 2 * REWRITE_EVERY - 2
    llm_parent = Attempt("n0001", None, Proposal("src", "r", origin="llm"), timed(0.0090))
    assert mixed.propose(context(parent=llm_parent, backend="cpu")).origin == "llm"


def test_mixed_starts_from_a_seed_with_the_proposer_that_made_it():
    builtin_seed = Seed(task_id="t0-sib", shape="4096x37", winner=True, attempt=Attempt(
        "n0002", None, Proposal("src", "r", params={"algorithm": "online", "exp": "libm", "schedule": "dynamic",
                                                    "simd": False}), timed(0.0050)))
    first = MixedProposer(proposer([])).propose(context(backend="cpu", seed=builtin_seed))
    assert first.origin == "builtin" and first.params == builtin_seed.attempt.proposal.params
    assert first.rationale.startswith("seeded from t0-sib/n0002")
    # an LLM's kernel has no point to start from: the LLM adapts its source first
    llm_seed = Seed(task_id="t0-sib", shape="4096x37", winner=True,
                    attempt=attempt("n0003", timed(0.0050), source="SIBLING LLM KERNEL"))
    llm = proposer([KERNEL_REPLY])
    first = MixedProposer(llm).propose(context(backend="cpu", seed=llm_seed))
    assert first.origin == "llm" and "SIBLING LLM KERNEL" in first.transcript[0]["messages"][0]["content"]


# ---------------------------------------------------------------- the search, taking NoProposals

def test_a_run_of_failed_proposals_stops_the_search_and_a_success_resets_the_count():
    answers = iter([NoProposal("429", "retry")] * (MAX_FAILED_PROPOSALS - 1) + [Proposal("a", "r", origin="llm")]
                   + [NoProposal("timeout", "retry")] * MAX_FAILED_PROPOSALS)
    nodes = []

    def evaluate(proposal, parent, decide):
        node = Node(node_id=f"n{len(nodes)}", parent_id=None, proposal=proposal, result=timed(0.009))
        node.kept = decide(node)
        nodes.append(node)
        return node

    ctx = scripted_context(lambda parent: next(answers), evaluate, iterations=10)
    get_strategy("greedy").run(ctx)
    assert len(nodes) == 1 and ctx.stopped.startswith(f"{MAX_FAILED_PROPOSALS} proposals in a row failed")
    assert "timeout" in ctx.stopped


@pytest.mark.parametrize("strategy", ["greedy", "mcts"])
def test_a_spent_budget_stops_the_search(strategy: str):
    answers = iter([Proposal("a", "r"), Proposal("b", "r"), NoProposal("the LLM budget is spent", "budget")])
    nodes = []

    def evaluate(proposal, parent, decide):
        nodes.append(Node(node_id=f"n{len(nodes)}", parent_id=None, proposal=proposal, result=timed(0.009)))
        return nodes[-1]

    ctx = scripted_context(lambda parent: next(answers), evaluate, iterations=10)
    get_strategy(strategy).run(ctx)
    assert len(nodes) == 2 and ctx.stopped == "the LLM budget is spent" and ctx.budget_left() == 0


@pytest.mark.parametrize("strategy", ["greedy", "mcts"])
def test_a_failed_llm_candidate_is_repaired_next_up_to_the_limit(strategy: str):
    """Every candidate fails to build: each is the next one's parent until `repairs` failed in a row."""
    nodes, parents = [], []

    def propose(parent):
        parents.append(parent.node_id if parent else None)
        return Proposal(f"src {len(parents)}", "r", origin="llm")

    def evaluate(proposal, parent, decide):
        node = Node(node_id=f"n{len(nodes)}", parent_id=parent.node_id if parent else None, proposal=proposal,
                    result=EvalResult(status="compile_error", reason="expected ';'"))
        node.repair_depth = 1 + (next(n.repair_depth for n in nodes if n.node_id == node.parent_id) if parent else 0)
        nodes.append(node)
        return node

    ctx = scripted_context(propose, evaluate, iterations=4)
    ctx.repairs = 2
    get_strategy(strategy).run(ctx)
    assert parents[:3] == [None, "n0", "n1"]  # two repairs in a row, then no third
    assert parents[3] != "n2"
