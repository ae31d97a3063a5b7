"""What the two agents are told: the generator's and the analyst's prompts, from a ProposalContext.

The generator gets the op's semantics (its schema and the call it must match), the
real shapes, dtypes and strides, the machine, the backend's candidate contract,
what the scan allows and a worked example (a softmax: all three from the backend's record,
kernforge.backends.Prompt), the lineage with timings, the failed approaches and the analyst's advice;
for a first kernel, a sibling's best (the same op at another shape) where one was found;
then one instruction: write a first kernel, repair the parent from its error, or
improve on it. The analyst gets one timed candidate against the floor and the peers,
with its build report, and answers in a fixed JSON shape the generator reads next.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from kernforge.backends import REGISTRY, get_backend
from kernforge.propose.context import Attempt, ProposalContext, TaskFacts

SOURCE_CHARS = 16_000  # a source longer than this is cut in a prompt (generated kernels are 2-8 kB)
REASON_CHARS = 600  # of an error message: the compiler's first lines say what is wrong
FAILURES_SHOWN = 8

RULES = """Rules the evaluator enforces (a candidate that breaks one is rejected as a cheat or a wrong result):
- it runs on the real inputs and on fresh ones of exactly this signature (same shapes, dtypes,
  strides), including large and tiny magnitudes: specialise on the shapes freely, never on values;
- results are compared with a float64 reference, against eager PyTorch's own error;
- no state kept between calls, no cached or precomputed outputs, inputs must not be changed;
- every output element must be written on every call; nothing may run after kf_forward returns."""

REPLY_FORMAT = """Reply with one line `Idea: ...` saying what this kernel does differently and why it should be
faster, then the complete file in one ```{fence} block. Nothing after the block."""

# ---------------------------------------------------------------- the generator

def generator_system(backend: str) -> str:
    prompt = get_backend(backend).prompt
    return "\n\n".join([
        f"You write GPU and CPU kernels for kernforge, in {prompt.language}. Each of your files replaces "
        "one PyTorch operator; it is built, checked for correctness on real and fresh inputs, and timed "
        "against eager PyTorch and torch.compile. Faster is better; wrong is worthless.",
        "## The candidate file\n" + prompt.contract,
        "## What the file may contain\n" + prompt.rules,
        "## " + RULES,
        "## A worked example (softmax over the last dim of a 4096x1024 float32 tensor)\n"
        f"```{prompt.fence}\n{worked_example(backend).strip()}\n```",
        "## Reply format\n" + REPLY_FORMAT.format(fence=prompt.fence),
    ])


@functools.cache
def worked_example(backend: str) -> str:
    """The backend's worked example (Prompt.example), or, where it gives none, the built-in
    proposer's own softmax kernel for it: its starting point for 4096 rows of 1024 float32."""
    given = get_backend(backend).prompt.example
    return given if given is not None else _builtin_softmax(backend)


def _builtin_softmax(backend: str) -> str:
    from kernforge.propose.builtin.family import Hardware
    from kernforge.propose.families import softmax
    from kernforge.records.task import KernelTask

    x = {"shape": [4096, 1024], "dtype": "torch.float32", "stride": [1024, 1]}
    task = KernelTask(task_id="example", op="aten::_softmax.default", signature="example", args=[x, -1, False],
                      outputs=[dict(x)], samples=[], share=0.0, gain_if_2x=0.0, time_us=0.0, device="")
    facts = softmax.match(task)
    return softmax.render(facts, backend, softmax.start(facts, backend, Hardware()))


def generator_prompt(ctx: ProposalContext, advice: dict[str, Any]) -> str:
    parts = [_task_section(ctx.facts, ctx.task.args), _hardware_section(ctx.hardware, ctx.facts)]
    if ctx.lineage:
        parts.append(_lineage_section(ctx.lineage, ctx.backend))
    if ctx.parent is None and ctx.seed:
        parts.append(_seed_section(ctx))
    if ctx.best and all(a.node_id != ctx.best.node_id for a in ctx.lineage):
        parts.append(f"## The fastest candidate so far ({ctx.best.node_id}, {_timing_text(ctx.best)})\n"
                     f"{ctx.best.proposal.rationale}\n{_source_block(ctx.best, ctx.backend)}")
    others = [a for a in ctx.recent if all(a.node_id != b.node_id for b in ctx.lineage)]
    if others:
        parts.append("## Other recent attempts\n" + "\n".join(_attempt_line(a) for a in others))
    failures = _failures_section(ctx)
    if failures:
        parts.append(failures)
    if advice:
        parts.append("## The performance analyst's recommendation\n" + _advice_text(advice))
    parts.append(f"## Budget\n{ctx.candidates_left} more candidates may be evaluated for this op.")
    parts.append("## Your task\n" + _instruction(ctx))
    return "\n\n".join(parts)


def _instruction(ctx: ProposalContext) -> str:
    parent = ctx.parent
    if parent is None and ctx.seed:
        return ("Write a first kernel for this op, correct above all, starting from the sibling's kernel above: "
                "keep its approach and change what depends on the shapes (sizes, strides, tiles and bounds "
                "baked in for the sibling's), so that it is right and fast for these inputs.")
    if parent is None:
        return ("Write a first kernel for this op, correct above all, and as fast as the shapes and the "
                "machine allow.")
    if not parent.result.ok:
        log = parent.result.log_tail.strip()
        log_text = f"\nThe last lines of its log:\n```\n{log[-1500:]}\n```" if log and log not in parent.result.reason else ""
        return (f"The parent candidate {parent.node_id} (its source is above) failed: {parent.result.status}: "
                f"{parent.result.reason[:REASON_CHARS * 2]}{log_text}\n"
                f"Repair it: fix the cause of this failure and keep its approach; this is repair "
                f"{ctx.repair_depth} in a row for this line.")
    return (f"Improve on the parent candidate {parent.node_id} ({_timing_text(parent)}): write a faster kernel, "
            "following the analyst's recommendation where it has one, without repeating a failed approach.")


def _task_section(facts: TaskFacts, args: list[Any]) -> str:
    if facts.op.startswith("chain:"):  # a fused chain: its replay is the reference, kf_forward(in0, in1, ...)
        lines = [f"## The chain\nFuse these ATen calls into one kernel; `kf_forward` takes the chain's inputs "
                 f"in order and returns the tuple it returns (intermediates are not outputs):\n```python\n"
                 f"{facts.schema}\n```"]
    else:
        lines = [f"## The op\n`{facts.op}`, schema: `{facts.schema}`",
                 f"The reference: `torch.ops.{facts.op.replace('::', '.')}({_call_args(facts, args)})`"]
    lines += ["Inputs (every call has exactly these):"]
    lines += [f"- argument {t['position']}: shape {t['shape']}, {t.get('dtype', '?').replace('torch.', '')}, "
              f"stride {t.get('stride')}" for t in facts.inputs]
    lines += ["Outputs:"] + [f"- shape {o['shape']}, {o.get('dtype', '?').replace('torch.', '')}, "
                             f"stride {o.get('stride')}" for o in facts.outputs]
    times = [f"eager PyTorch {facts.eager_p50_ms:.4f} ms" if facts.eager_p50_ms else "",
             f"torch.compile {facts.compile_p50_ms:.4f} ms" if facts.compile_p50_ms
             else f"torch.compile {facts.compile_note}" if facts.compile_note else ""]
    timed = ", ".join(t for t in times if t)
    lines.append(f"Bytes that must move (each input read once, each output written once): {facts.bytes_moved:,}."
                 + (f" Median times on this machine: {timed}." if timed else ""))
    lines.append(f"This op is {facts.share:.1%} of the model's time.")
    return "\n".join(lines)


def _call_args(facts: TaskFacts, args: list[Any]) -> str:
    rendered = []
    for position, arg in enumerate(args):
        if isinstance(arg, dict) and "shape" in arg:
            rendered.append(f"<tensor {position}>")
        elif isinstance(arg, dict) and set(arg) == {"kwargs"}:
            rendered += [f"{k}={_value(v)}" for k, v in arg["kwargs"].items()]
        else:
            rendered.append(_value(arg))
    return ", ".join(rendered)


def _value(value: Any) -> str:
    if isinstance(value, dict) and "shape" in value:
        return "<tensor>"
    return repr(value)  # as Python spells it: the reference call is Python


def _hardware_section(hw: dict[str, Any], facts: TaskFacts) -> str:
    if not hw:
        return "## The machine\n(no facts were measured)"
    if hw.get("kind") == "cuda":
        lines = [f"{hw.get('name', 'an NVIDIA GPU')}, compute capability {hw.get('capability', '?')}, "
                 f"{hw.get('multiprocessors', '?')} multiprocessors, L2 {_mib(hw.get('l2_bytes'))}, "
                 f"shared memory per block up to {_kib(hw.get('max_shared_memory_per_block_bytes'))}"]
    else:
        caches = hw.get("caches", {})
        lines = [f"{hw.get('name', 'a CPU')}, {hw.get('cores', '?')} cores for this process, "
                 f"{hw.get('threads', '?')} OpenMP threads, vector ISA: {', '.join(hw.get('vector_isa', [])) or 'none'}, "
                 f"caches: " + ", ".join(f"{k} {_kib(v)}" for k, v in caches.items())]
    bandwidth = hw.get("bandwidth_gb_s")
    if bandwidth:
        floor = facts.floor_ms(bandwidth)
        lines.append(f"Measured memory bandwidth: {bandwidth:.0f} GB/s ({hw.get('bandwidth_note', 'a copy')}); "
                     f"moving this op's bytes once at that rate takes {floor:.4f} ms, the floor for a "
                     "memory-bound kernel.")
    return "## The machine\n" + "\n".join(lines)


def _lineage_section(lineage: list[Attempt], backend: str) -> str:
    lines = ["## The line of candidates this one descends from (oldest first)"]
    lines += [_attempt_line(a) for a in lineage]
    parent = lineage[-1]
    lines.append(f"\nThe parent, {parent.node_id}, in full:\n{_source_block(parent, backend)}")
    return "\n".join(lines)


def _seed_section(ctx: ProposalContext) -> str:
    """A sibling's best kernel: the same op and dtypes at another shape, measured there."""
    seed = ctx.seed
    assert seed is not None
    return (f"## The best kernel of a sibling task ({seed.label}: the same op and dtypes, shape {seed.shape})\n"
            f"On its own shape: {_timing_text(seed.attempt)}\n{seed.attempt.proposal.rationale}\n"
            f"{_source_block(seed.attempt, ctx.backend)}")


def _attempt_line(a: Attempt) -> str:
    what = a.proposal.rationale.splitlines()[0][:200] if a.proposal.rationale else ""
    return f"- {a.node_id} ({a.proposal.origin}): {_timing_text(a)}; {what}"


def _timing_text(a: Attempt) -> str:
    r = a.result
    if not r.ok:
        return f"failed, {r.status}: {r.reason[:200]}"
    if r.timing and r.eager:
        verdict = "faster than eager beyond the noise" if r.faster_than_eager else "not clearly faster than eager"
        return (f"correct, p50 {r.timing.p50_ms:.4f} ms (p20 {r.timing.p20_ms:.4f}, p80 {r.timing.p80_ms:.4f}) "
                f"against eager {r.eager.p50_ms:.4f} ms: {r.speedup_vs_eager:.2f}x, {verdict}")
    return "correct, not timed (interpreter)"


def _failures_section(ctx: ProposalContext) -> str:
    seen, lines = set(), []
    for f in reversed(ctx.failures):
        key = (f.status, f.reason[:80])
        if key in seen:
            continue
        seen.add(key)
        lines.append(f"- {f.status}: {f.reason[:REASON_CHARS]} (tried: {f.proposal.rationale[:150]})")
        if len(lines) == FAILURES_SHOWN:
            break
    return "## Approaches that failed (do not repeat them)\n" + "\n".join(lines) if lines else ""


def _source_block(a: Attempt, backend: str) -> str:
    source = a.proposal.source
    if len(source) > SOURCE_CHARS:
        source = source[:SOURCE_CHARS] + "\n... (cut)"
    fence = REGISTRY[backend]().prompt.fence if backend in REGISTRY else ""
    return f"```{fence}\n{source.rstrip()}\n```"


def _advice_text(advice: dict[str, Any]) -> str:
    return "\n".join(f"- {k}: {v}" for k, v in advice.items() if v)


def _mib(n: Any) -> str:
    return f"{n / 2**20:.0f} MiB" if isinstance(n, (int, float)) and n else "?"


def _kib(n: Any) -> str:
    return f"{n / 2**10:.0f} KiB" if isinstance(n, (int, float)) and n else "?"


# ---------------------------------------------------------------- the analyst

ANALYST_KEYS = ("bottleneck", "evidence", "next", "avoid")

ANALYST_SYSTEM = """You are the performance analyst of kernforge, a tool that searches faster kernels for PyTorch
operators. You read one candidate kernel with its measurements and say what limits it and what the
kernel writer should try next. Be concrete: name the change (tile sizes, vector width, how rows map
onto programs or threads, number of passes, fusion of reads), not general advice.

Reply with one JSON object and nothing else:
{"bottleneck": "memory bandwidth | latency/occupancy | compute | launch overhead | ...: one sentence",
 "evidence": "the numbers that show it: achieved bandwidth against the measured peak, registers, spills",
 "next": "the one change to try next, and why it should help",
 "avoid": "what not to try again, from the failures"}"""


def analyst_prompt(ctx: ProposalContext, build_report: str) -> str:
    parent = ctx.parent
    assert parent is not None and parent.result.ok
    r, facts = parent.result, ctx.facts
    lines = [_task_section(facts, ctx.task.args), _hardware_section(ctx.hardware, facts),
             f"## The candidate {parent.node_id}\n{parent.proposal.rationale}\n{_source_block(parent, ctx.backend)}",
             "## Its measurements\n" + _timing_text(parent)]
    if r.timing:
        achieved = facts.bytes_moved / (r.timing.p50_ms * 1e-3) / 1e9
        lines.append(f"Achieved bandwidth at its median: {achieved:.0f} GB/s"
                     + (f" of the measured {ctx.hardware['bandwidth_gb_s']:.0f} GB/s" if ctx.hardware.get("bandwidth_gb_s") else ""))
        floor = facts.floor_ms(ctx.hardware.get("bandwidth_gb_s"))
        if floor:
            lines.append(f"The memory floor: {floor:.4f} ms; the candidate is {r.timing.p50_ms / floor:.2f}x the floor.")
    if facts.compile_p50_ms:
        lines.append(f"torch.compile takes {facts.compile_p50_ms:.4f} ms on this op.")
    elif facts.compile_note:
        lines.append(f"torch.compile on this op: {facts.compile_note}.")
    lines.append("## Build report\n" + (build_report or "none (no GPU build tools, or a CPU build)"))
    lines.append("## Profiler\nnone collected for this candidate")
    if len(ctx.lineage) > 1:
        lines.append("## Its ancestors\n" + "\n".join(_attempt_line(a) for a in ctx.lineage[:-1]))
    failures = _failures_section(ctx)
    if failures:
        lines.append(failures)
    return "\n\n".join(lines)


def parse_advice(reply: str) -> dict[str, Any]:
    """The analyst's JSON object, from a fenced block or the first {...} in the reply; prose
    that is not JSON becomes the recommendation as it stands."""
    candidates = re.findall(r"```(?:json)?\s*\n(.*?)```", reply, re.S) + re.findall(r"\{.*\}", reply, re.S)
    for text in candidates:
        try:
            data = json.loads(text)
        except ValueError:
            continue
        if isinstance(data, dict):
            return {k: str(data[k])[:REASON_CHARS] for k in ANALYST_KEYS if data.get(k)}
    return {"next": reply.strip()[:REASON_CHARS]} if reply.strip() else {}
