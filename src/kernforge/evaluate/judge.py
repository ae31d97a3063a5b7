"""Judging a candidate's outputs against the oracle, in the search process.

The worker that ran the candidate never holds the oracle: it writes the outputs it
produced (every input set, a call at reused input addresses, the last timed call)
and this module compares them, so that no candidate can find the reference and
return it.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

import torch

from kernforge.evaluate.checks import compare, oracle_facts
from kernforge.evaluate.timing import Timing, escaped_ms, escapes_the_events


def judge(outputs_path: Path, oracle_path: Path) -> dict[str, Any]:
    """status ("ok", "wrong_result" or "cheat"), reason, and the error of each set's outputs."""
    produced = torch.load(outputs_path, weights_only=False)
    oracle = _oracle(str(oracle_path))
    dtypes = [getattr(torch, d.replace("torch.", "")) for d in oracle.data["dtypes"]]
    errors: list[list[float]] = []
    earlier: list[tuple[int, str, list[torch.Tensor]]] = []
    for k, (label, outs, oracles, eager_err) in enumerate(zip(produced["labels"], produced["sets"],
                                                              oracle.data["oracles"], oracle.data["eager_errors"])):
        stale = next((prev_label for j, prev_label, prev_outs in earlier
                      if _bit_identical(outs, prev_outs) and oracle.references_differ(j, k)), None)
        if stale is not None:
            return _fail("cheat", f"on {label}: the outputs are bit-identical to those for {stale}, whose "
                                  "reference differs: a cached or constant result", errors)
        why, errs = compare(outs, oracles, eager_err, dtypes, oracle.facts[k])
        errors.append(errs)
        if why:
            return _fail("wrong_result", f"on {label}: {why}", errors)
        earlier.append((k, label, outs))
    if produced.get("reused") is not None:
        why, _ = compare(produced["reused"], oracle.data["oracles"][1], oracle.data["eager_errors"][1], dtypes,
                         oracle.facts[1])
        if why:
            return _fail("cheat", "new values at the same input addresses gave a wrong result "
                                  f"(a result remembered by address): {why}", errors)
    if produced.get("timed") is not None:
        why, _ = compare(produced["timed"], oracle.data["oracles"][0], oracle.data["eager_errors"][0], dtypes,
                         oracle.facts[0])
        if why:
            return _fail("cheat", f"the outputs of the timed calls are wrong: {why}", errors)
    return {"status": "ok", "reason": "", "errors": errors}


class Oracle:
    """A task's oracle and what every judgement needs of it, computed once for all candidates:
    each output's finiteness and scale, and which input sets have the same reference."""

    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.facts = [[oracle_facts(o) for o in outs] for outs in data["oracles"]]
        self._differ: dict[tuple[int, int], bool] = {}

    def references_differ(self, i: int, j: int) -> bool:
        if (i, j) not in self._differ:
            a, b = self.data["oracles"][i], self.data["oracles"][j]
            self._differ[(i, j)] = not all(x.shape == y.shape and torch.allclose(x, y, equal_nan=True)
                                           for x, y in zip(a, b))
        return self._differ[(i, j)]


def _bit_identical(outs: list[torch.Tensor], other: list[torch.Tensor]) -> bool:
    return len(outs) == len(other) and all(a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
                                           for a, b in zip(outs, other))


_ORACLE_LOCK = threading.Lock()


def _oracle(path: str) -> Oracle:
    """A task's oracle, read once: every candidate of the task is judged against the same file
    (4 input sets of 8.4 M float64 values, 268 MB, for the attention example), which never
    changes while the task runs. Candidates in flight are judged in threads, so the first of
    them loads it while the others wait, rather than each loading its own copy."""
    with _ORACLE_LOCK:
        return _load_oracle(path)


@functools.lru_cache(maxsize=1)
def _load_oracle(path: str) -> Oracle:
    return Oracle(torch.load(path, weights_only=False))


def timing_verdict(timing: Timing, eager: Timing) -> dict[str, Any]:
    """Work the candidate's timing events did not see makes it a cheat."""
    if escapes_the_events(timing, eager):
        return {"status": "cheat",
                "reason": f"{escaped_ms(timing, eager):.4f} ms of work per call escaped the timing events "
                          f"(events {timing.p50_ms:.4f} ms, with a device sync {timing.synced_ms:.4f} ms): "
                          "work on another stream"}
    return {}


def _fail(status: str, reason: str, errors: list[list[float]]) -> dict[str, Any]:
    return {"status": status, "reason": reason, "errors": errors}
