"""The verdict on a candidate, decided in the search process from plain data its worker wrote.

The worker that ran the candidate decides nothing: it writes what its judged calls
returned and left behind (output copies, layouts, the memory each output and input
spans, digests of the inputs after the call), whether outputs of earlier calls were
still held, and which threads and child processes were left. That file is loaded here
with torch's weights-only unpickler (tensors, numbers, strings and containers; no
class of the candidate's can be built) and every value is checked to be a plain
torch.Tensor or a plain Python value before any of it is used. The oracle, the
per-element tolerances and the inputs' digests come from the baseline worker, which
never loads a candidate, and stay in this process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kernforge.evaluate.checks import OracleFacts, compare, oracle_facts
from kernforge.harness.guards import verdict as guard_verdict
from kernforge.harness.prefill import Options, options_for_sets, unwritten
from kernforge.harness.timing import escaped_ms, escapes_the_events
from kernforge.records.timing import Timing


# Every check a candidate goes through, in order: EvalResult.failed_check names the one that
# rejected it (those before it passed; those after it were not reached).
CHECKS: dict[str, str] = {
    "scan": "static scan of the source and its object code",
    "run": "builds, loads and runs in its worker within the time limit",
    "clock": "the worker's clock and call times agree with the search process's",
    "plain": "the worker wrote plain tensors and values",
    "threads": "no thread or child process left running after the calls",
    "memory": "no write outside its tensors (canaries before, after and between their elements)",
    "state": "FP control state, heap and device memory, threads and stream unchanged by each call",
    "layout": "as many outputs as the reference, with its strides",
    "aliasing": "no output shares memory with an input (an in-place op writes its own)",
    "inputs": "inputs unchanged",
    "deterministic": "the same result on every call with the same input values",
    "not_stale": "outputs differ between input sets whose references differ",
    "values": "every element within tolerance of the float64 oracle, on every input set",
    "no_cache": "no outputs of earlier calls still held",
    "events": "the timing events see all the work (nothing on another stream)",
}


@dataclass
class Oracle:
    """A task's oracle, in this process only: per input set, the reference outputs, the allowed
    error of every element, the inputs' digests; and which sets the timed calls use."""

    data: dict[str, Any]

    def __post_init__(self) -> None:
        self._differ: dict[tuple[int, int], bool] = {}
        self._prefill: list[list[Options]] | None = None
        self._facts: dict[int, list[OracleFacts | None]] = {}

    def prefill_options(self) -> list[list[Options]]:
        """Per set and output, the prefills wrong at every element (prefill.py), for the
        candidates' jobs: worked out once per task, a few passes over each set's oracle."""
        if self._prefill is None:
            self._prefill = options_for_sets(self.data["oracles"], self.data["bounds"], self.dtypes())
        return self._prefill

    @property
    def labels(self) -> list[str]:
        return self.data["labels"]

    def dtypes(self) -> list[torch.dtype]:
        return [getattr(torch, d.replace("torch.", "")) for d in self.data["dtypes"]]

    def facts(self, k: int) -> list[OracleFacts | None]:
        """Set k's floating oracles' facts, worked out at the first candidate judged on it."""
        if k not in self._facts:
            self._facts[k] = [oracle_facts(o) if o.is_floating_point() else None for o in self.data["oracles"][k]]
        return self._facts[k]

    def references_differ(self, i: int, j: int) -> bool:
        if (i, j) not in self._differ:
            a, b = self.data["oracles"][i], self.data["oracles"][j]
            self._differ[(i, j)] = not all(x.shape == y.shape and torch.allclose(x, y, equal_nan=True)
                                           for x, y in zip(a, b))
        return self._differ[(i, j)]


def judge(outputs_path: Path, oracle: Oracle) -> dict[str, Any]:
    """status ("ok", "wrong_result" or "cheat"), reason, and the error of each set's outputs."""
    try:
        # mapped, not read: a candidate's judged outputs of a 134M-element op are gigabytes
        produced = torch.load(outputs_path, weights_only=True, map_location="cpu", mmap=True)
    except Exception as e:  # noqa: BLE001 - anything but plain data in the file is the candidate's doing
        return _fail("cheat", f"the worker's outputs are not plain tensors and values ({type(e).__name__}: "
                              f"{str(e).splitlines()[0][:200] if str(e) else ''})", [], "plain")
    odd = _not_plain(produced)
    if odd:
        return _fail("cheat", f"the worker's outputs hold {odd}, not plain tensors and values", [], "plain")
    left = _left_running(produced.get("threads", {}))
    if left:
        return _fail("cheat", left, [], "threads")
    guarded = guard_verdict(produced.get("guards"))
    if guarded:
        return _fail(guarded[0], guarded[1], [], guarded[2])
    verdict = _judge_calls(produced["judged"], oracle)
    if verdict["status"] == "ok" and produced.get("live_outputs"):
        return _fail("cheat", f"{produced['live_outputs']} outputs returned by earlier calls were still held "
                              "after the calls: results kept and handed back (a cache)", verdict["errors"],
                     "no_cache")
    return verdict


def _judge_calls(calls: list[dict[str, Any]], oracle: Oracle) -> dict[str, Any]:
    """Every judged call, in the order they ran: first what is wrong before any value is looked
    at (layout, shared memory, changed inputs), then results that change from call to call on
    the same values or repeat across sets, then wrong values."""
    errors: dict[int, list[float]] = {}
    verdicts: dict[int, list[tuple[int, str | None]]] = {}
    dtypes = oracle.dtypes()
    calls = sorted(calls, key=lambda c: c["position"])
    for call in calls:
        why = _structure(call, oracle)
        if why:
            return _fail(why[0], f"on {oracle.labels[call['set']]} (call {call['position']}): {why[1]}", [], why[2],
                         _set_verdicts({}, oracle, call["set"]))
    compared: dict[int, list[tuple[list[torch.Tensor], str | None, list[float]]]] = {}
    for call in calls:
        k = call["set"]
        why_values, errs = _compared(call["outputs"], compared.setdefault(k, []), oracle, k, dtypes)
        if why_values:
            why_values = _never_written(call, oracle) + why_values
        errors.setdefault(k, errs)
        verdicts.setdefault(k, []).append((call["position"], why_values))
    for k, results in sorted(verdicts.items()):
        passed = [p for p, why in results if why is None]
        failed = [(p, why) for p, why in results if why is not None]
        if failed and passed:
            p, why = failed[0]
            return _fail("cheat", f"on {oracle.labels[k]}: right on call {passed[0]}, wrong on call {p} with the "
                                  f"same input values (a result that depends on the call, not the input): {why}",
                         _errors_list(errors, oracle), "deterministic", _set_verdicts(verdicts, oracle, k))
    for call in calls:
        stale = _stale(call, calls, oracle)
        if stale:
            return _fail("cheat", f"on {oracle.labels[call['set']]} (call {call['position']}): the outputs are "
                                  f"bit-identical to those for {stale}, whose reference differs: a cached or "
                                  "constant result", _errors_list(errors, oracle), "not_stale",
                         _set_verdicts(verdicts, oracle, call["set"]))
    for k, results in sorted(verdicts.items()):
        for _, why in results:
            if why is not None:
                return _fail("wrong_result", f"on {oracle.labels[k]}: {why}", _errors_list(errors, oracle), "values",
                             _set_verdicts(verdicts, oracle, k))
    return {"status": "ok", "reason": "", "errors": _errors_list(errors, oracle),
            "set_verdicts": _set_verdicts(verdicts, oracle, None)}


def _compared(outputs: list[torch.Tensor], earlier: list[tuple[list[torch.Tensor], str | None, list[float]]],
              oracle: Oracle, k: int, dtypes: list[torch.dtype]) -> tuple[str | None, list[float]]:
    """compare()'s answer for one call's outputs on set k. Judged calls see their set's exact
    values, so outputs bit-identical to an earlier call's on that set have its answer: torch.equal
    is one pass that stops at the first difference, where a compare makes several over the outputs,
    the oracle and the bounds (a 33.5M-element bf16 candidate's 17 compares became 10, its
    judgement 8.3 -> 5.5 s on a 2-core CPU, bench/results/cpu/issue34/README.md)."""
    for outs, why, errs in earlier:
        if _bit_identical(outputs, outs):
            return why, errs
    why, errs = compare(outputs, oracle.data["oracles"][k], oracle.data["bounds"][k], dtypes, facts=oracle.facts(k))
    earlier.append((outputs, why, errs))
    return why, errs


def _structure(call: dict[str, Any], oracle: Oracle) -> tuple[str, str, str] | None:
    """What is wrong with a call's outputs before their values are looked at: their number and
    layout, memory shared with an input, an input changed (status, reason, the check)."""
    metas, expected = call["out_meta"], oracle.data["outputs_meta"]
    if len(metas) != len(expected):
        return "wrong_result", f"returned {len(metas)} outputs, the reference returns {len(expected)}", "layout"
    for i, (got, want) in enumerate(zip(metas, expected)):
        if got["shape"] == want["shape"] and _strides(got) != _strides(want):
            return "wrong_result", (f"output {i} has strides {tuple(got['stride'])}, the reference's are "
                                    f"{tuple(want['stride'])}"), "layout"
    mutated = set(oracle.data["mutated"])
    for i, out in enumerate(call["out_meta"]):
        for j, inp in enumerate(call["in_meta"]):
            if _overlap(out, inp) and j not in mutated:
                return "cheat", f"output {i} shares memory with input {j}; the op is not in-place", "aliasing"
        if mutated and not any(_overlap(out, call["in_meta"][j]) for j in mutated if j < len(call["in_meta"])):
            return "wrong_result", f"output {i} is not the input the in-place op writes", "aliasing"
    for j, (got, want) in enumerate(zip(call["digests"], oracle.data["digests"][call["set"]])):
        if j not in mutated and list(got) != list(want):
            return "cheat", f"input {j} was modified", "inputs"
    return None


def _never_written(call: dict[str, Any], oracle: Oracle) -> str:
    """"output i: N elements never written (...); " for each output whose failing elements still
    hold the prefill its call began with, else "". Only words: the prefill is as the worker
    reported it, so it names what failed and decides nothing."""
    notes = []
    k = call["set"]
    for i, (out, value) in enumerate(zip(call["outputs"], call.get("prefill") or [])):
        if type(value) not in (int, float) or i >= len(oracle.data["oracles"][k]):
            continue
        try:
            count = unwritten(out, oracle.data["oracles"][k][i], oracle.data["bounds"][k][i], value)
        except (RuntimeError, OverflowError, TypeError):
            continue
        if count:
            notes.append(f"output {i}: {count} of {out.numel()} elements never written (they still hold the "
                         f"prefill, {value:g}); ")
    return "".join(notes)


def _stale(call: dict[str, Any], calls: list[dict[str, Any]], oracle: Oracle) -> str | None:
    """Another set's label whose judged outputs are bit-identical to these, with a different reference.
    The outputs first: torch.equal stops at the first difference (0.03 ms for 8.4M float32 elements
    on 2 cores), where comparing two sets' float64 references took 170 ms, 3.4 of a candidate's
    4.4 s of judging (bench/results/cpu/issue34/README.md)."""
    for other in calls:
        if other["position"] < call["position"] and other["set"] != call["set"] \
                and _bit_identical(call["outputs"], other["outputs"]) \
                and oracle.references_differ(other["set"], call["set"]):
            return oracle.labels[other["set"]]
    return None


def _strides(meta: dict[str, Any]) -> list[int]:
    """Strides where they mean something: dimensions of size 1 have none."""
    return [st for st, n in zip(meta["stride"], meta["shape"]) if n > 1]


def _overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["nbytes"] > 0 and b["nbytes"] > 0 and a["ptr"] < b["ptr"] + b["nbytes"] and b["ptr"] < a["ptr"] + a["nbytes"]


def _bit_identical(outs: list[torch.Tensor], other: list[torch.Tensor]) -> bool:
    return len(outs) == len(other) and all(a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
                                           for a, b in zip(outs, other))


def _left_running(threads: dict[str, Any]) -> str | None:
    if threads.get("children"):
        return (f"left {len(threads['children'])} child process(es) running after its calls: work outside "
                "the timed calls")
    if threads.get("running"):
        return (f"left {threads['running']} thread(s) running after its calls returned: work outside the "
                "timed calls")
    return None


def _not_plain(value: Any, depth: int = 0) -> str | None:
    """The first value that is neither a plain torch.Tensor nor a plain Python value, if any."""
    if depth > 8:
        return "containers nested deeper than the worker writes"
    if type(value) is torch.Tensor:
        return None if value.layout == torch.strided else f"a tensor of layout {value.layout}"
    if value is None or type(value) in (bool, int, float, str):
        return None
    if type(value) in (list, tuple):
        return next((odd for v in value if (odd := _not_plain(v, depth + 1))), None)
    if type(value) is dict:
        return next((odd for k, v in value.items()
                     if (odd := ("a non-string key" if type(k) is not str else _not_plain(v, depth + 1)))), None)
    return f"a {type(value).__qualname__}"


def _errors_list(errors: dict[int, list[float]], oracle: Oracle) -> list[list[float]]:
    """Each set's errors in the order of the sets, as far as they were judged."""
    out = []
    for k in range(len(oracle.labels)):
        if k not in errors:
            break
        out.append(errors[k])
    return out


def timing_verdict(timing: Timing, eager: Timing) -> dict[str, Any]:
    """Work the candidate's timing events did not see makes it a cheat."""
    if escapes_the_events(timing, eager):
        return {"status": "cheat", "failed_check": "events",
                "reason": f"{escaped_ms(timing, eager):.4f} ms of work per call escaped the timing events "
                          f"(events {timing.p50_ms:.4f} ms, with a device sync {timing.synced_ms:.4f} ms): "
                          "work on another stream"}
    return {}


def _set_verdicts(verdicts: dict[int, list[tuple[int, str | None]]], oracle: Oracle,
                  rejected: int | None) -> list[str]:
    """Each input set's line in a report: "fail" for the set the rejection names and for any set
    whose values were wrong, "pass" for one whose every call matched the oracle, "" where its
    values were not compared (judging stopped before them)."""
    def verdict(k: int) -> str:
        if k == rejected or any(why is not None for _, why in verdicts.get(k, [])):
            return "fail"
        return "pass" if k in verdicts else ""

    return [verdict(k) for k in range(len(oracle.labels))]


def _fail(status: str, reason: str, errors: list[list[float]], check: str,
          set_verdicts: list[str] | None = None) -> dict[str, Any]:
    return {"status": status, "reason": reason, "errors": errors, "failed_check": check,
            "set_verdicts": set_verdicts or []}
