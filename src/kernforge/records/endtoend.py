"""apply's end-to-end report (integrate/apply.json, and summary.json's `end_to_end`) as records.

The model is timed in several ways (VariantName); each patched way is compared with its own
unpatched one (Comparison), and each kernel alone in the model (KernelEffect); the outputs are
checked per input set (OutputCheck); the routes' costs and calls are in routes.py, and under a time
limit each measurement's rounds (RoundsMeasured). The file keeps the form it always had: the timings and the
comparisons keyed by the ways' names ("patched eager vs eager"), and each verdict a word or, where
no kernel was installed or all were dropped, a sentence; from_json reads those back into fields,
so that nothing compares the sentences. A report that could not be made is EndToEnd(error=why).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Literal, cast, get_args

from kernforge.records.routes import RouteCost, RoutedCalls


class VariantName(StrEnum):
    """A way the whole model is timed; its value is its name in the file and on screen."""

    EAGER = "eager"
    PATCHED_EAGER = "patched eager"
    COMPILE = "compile"
    PATCHED_COMPILE = "patched compile"
    GRAPH_EAGER = "eager, CUDA graph"  # the forward replayed from one CUDA graph
    GRAPH_PATCHED = "patched eager, CUDA graph"
    RO_COMPILE = "compile, reduce-overhead"  # torch.compile's own CUDA graphs
    RO_PATCHED = "patched compile, reduce-overhead"


# Each patched way is judged against its unpatched one; compile is shown against eager.
AGAINST: dict[VariantName, VariantName] = {
    VariantName.PATCHED_EAGER: VariantName.EAGER,
    VariantName.COMPILE: VariantName.EAGER,
    VariantName.PATCHED_COMPILE: VariantName.COMPILE,
    VariantName.GRAPH_PATCHED: VariantName.GRAPH_EAGER,
    VariantName.RO_PATCHED: VariantName.RO_COMPILE,
}

Verdict = Literal["faster", "within noise", "slower"]  # beyond the noise, as the evaluator decides it
# measured: the kernels kept in this way are in it; none installed: none was kept there, so the
# model is as it is; all dropped: the model with every kept kernel was slower twice, so none is
Kernels = Literal["measured", "none installed", "all dropped"]

DROPPED_TEXT = "slower: every kernel dropped in eager, the model as it is"


@dataclass
class Comparison:
    """One way of the model against another: the speedup (the baseline's median over the
    candidate's, each relative to the eager of its own phase where they were timed in different
    phases) and its verdict; where the two were timed again, the repeat's figures, and the first
    verdict where the repeat did not give it again (the verdict is then within noise)."""

    candidate: VariantName
    baseline: VariantName
    speedup: float | None
    verdict: Verdict
    repeat_speedup: float | None = None
    repeat_verdict: Verdict | None = None
    first_verdict: Verdict | None = None
    kernels: Kernels = "measured"

    @property
    def key(self) -> str:
        return f"{self.candidate} vs {self.baseline}"

    @property
    def installed(self) -> bool:
        """Whether the patched way holds any kernel (else its figure is the model as it is)."""
        return self.kernels == "measured"

    @property
    def verdict_text(self) -> str:
        """The verdict as the file and the tables say it."""
        if self.kernels == "all dropped":
            return DROPPED_TEXT
        if self.kernels == "none installed":
            return ("no kernel installed in eager: the model as it is" if self.candidate == VariantName.PATCHED_EAGER
                    else "no kernel installed under compile: the compiled model as it is")
        return self.verdict

    def confirm(self, repeat: Comparison) -> None:
        """A second measurement of the same two ways: both figures kept; a verdict the repeat
        does not give again is within the noise."""
        self.repeat_speedup, self.repeat_verdict = repeat.speedup, repeat.verdict
        if repeat.verdict != self.verdict:
            self.first_verdict, self.verdict = self.verdict, "within noise"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"speedup": self.speedup, "verdict": self.verdict_text}
        if self.repeat_verdict is not None:
            data |= {"repeat_speedup": self.repeat_speedup, "repeat_verdict": self.repeat_verdict}
        if self.first_verdict is not None:
            data["first_verdict"] = self.first_verdict
        return data

    @classmethod
    def from_json(cls, key: str, data: dict[str, Any]) -> Comparison | None:
        """The comparison a file holds under `key`; None for a way this kernforge does not know."""
        candidate, _, baseline = key.partition(" vs ")
        if candidate not in set(VariantName) or baseline not in set(VariantName):
            return None
        text = str(data.get("verdict", ""))
        kernels: Kernels = ("all dropped" if text == DROPPED_TEXT else
                            "none installed" if text.startswith("no kernel installed") else "measured")
        return cls(candidate=VariantName(candidate), baseline=VariantName(baseline), speedup=data.get("speedup"),
                   verdict="slower" if kernels == "all dropped" else _verdict(text) or "within noise",
                   repeat_speedup=data.get("repeat_speedup"), repeat_verdict=_verdict(data.get("repeat_verdict")),
                   first_verdict=_verdict(data.get("first_verdict")), kernels=kernels)


def _verdict(value: Any) -> Verdict | None:
    return cast(Verdict, value) if value in get_args(Verdict) else None


@dataclass
class VariantTiming:
    """A way's per-call time of the whole forward, ms."""

    p20_ms: float
    p50_ms: float
    p80_ms: float
    runs: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VariantTiming:
        return cls(p20_ms=data.get("p20_ms", data["p50_ms"]), p50_ms=data["p50_ms"],
                   p80_ms=data.get("p80_ms", data["p50_ms"]), runs=int(data.get("runs", 0)))


@dataclass
class RoundsMeasured:
    """How many rounds one measurement ran under apply's time limit (integrate/pace.py)."""

    variants: list[str]  # the ways it timed, VariantName values
    rounds: int
    calls: dict[str, int]  # per round, by variant
    cut: bool = False  # the limit stopped it while its verdict was still open, or before its rounds

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RoundsMeasured:
        return cls(variants=list(data.get("variants") or []), rounds=int(data.get("rounds", 0)),
                   calls=dict(data.get("calls") or {}), cut=bool(data.get("cut")))


@dataclass
class OutputCheck:
    """The model's outputs in one way on one input set, against the oracle."""

    variant: str  # a VariantName's value, or "patched eager, KERNEL alone" where one kernel was checked alone
    inputs: str  # captured | fresh1 | ...
    error: float  # the largest element's error over its bound's scale
    eager_error: float  # eager's own, on the same inputs
    passed: bool  # "pass" in the file
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"variant": self.variant, "inputs": self.inputs, "error": self.error, "eager_error": self.eager_error,
                "pass": self.passed, "why": self.why}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OutputCheck:
        return cls(variant=str(data.get("variant", "")), inputs=str(data.get("inputs", "")),
                   error=data.get("error", 0.0), eager_error=data.get("eager_error", 0.0),
                   passed=bool(data.get("pass")), why=str(data.get("why", "")))


NOT_IN_GRAPH = "not in the compiled graph"


@dataclass
class KernelEffect:
    """One kernel in the whole model."""

    task: str
    op: str
    kernel: str
    op_speedup_vs_eager: float  # the search's, on the op alone
    op_p50_ms: float = 0.0  # the search's, the kernel on the op alone
    op_eager_p50_ms: float = 0.0  # the search's, the ATen op alone
    calls_per_forward: int = 0  # calls of one forward pass that took the kernel
    eager_verdict: Verdict | None = None  # the model with this kernel alone against eager; None: not timed
    eager_speedup: float | None = None
    compile_verdict: Verdict | None = None  # the same under torch.compile, against the compiled model
    compile_speedup: float | None = None
    compiled_with_others: bool = False  # compile's verdict is of all the kernels together (they paid so)
    in_compiled_graph: bool = False  # the custom op was traced into the compiled graph
    installed_eager: bool = False
    installed_compile: bool = False
    note: str = ""

    def add_note(self, text: str) -> None:
        """Another reason, after those already said."""
        self.note = f"{self.note}; {text}" if self.note else text

    @property
    def compile_text(self) -> str:
        """compile's verdict as the file and the tables say it ("" where compile was not timed)."""
        if self.compile_verdict is None:
            return ""
        if not self.in_compiled_graph:
            return NOT_IN_GRAPH
        return f"{self.compile_verdict} (with the others)" if self.compiled_with_others else self.compile_verdict

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["compiled_with_others"]
        return data | {"eager_verdict": self.eager_verdict or "", "compile_verdict": self.compile_text}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelEffect:
        known = set(cls.__dataclass_fields__) - {"eager_verdict", "compile_verdict", "compiled_with_others"}
        compile_text = str(data.get("compile_verdict") or "")
        # a kernel not in the graph had its verdict measured, then said as NOT_IN_GRAPH: it paid nothing
        verdict = "within noise" if compile_text == NOT_IN_GRAPH else compile_text.removesuffix(" (with the others)")
        # a test's or a hand-written file may name only the kernel and where it is installed
        given = {"task": "", "op": "", "kernel": "", "op_speedup_vs_eager": 0.0} | {k: v for k, v in data.items() if k in known}
        return cls(**given, eager_verdict=_verdict(data.get("eager_verdict")),
                   compile_verdict=_verdict(verdict), compiled_with_others=compile_text.endswith("(with the others)"))


@dataclass
class EndToEnd:
    """What `kernforge apply` measured of the whole model: each kernel in it, the outputs' checks,
    each way's time and the comparisons between them; or, where apply failed, why (`error`)."""

    run_dir: str = ""
    model: str = ""
    device: str = ""
    kernels: list[KernelEffect] = field(default_factory=list)
    not_installed: dict[str, str] = field(default_factory=dict)  # task -> why
    checks: list[OutputCheck] = field(default_factory=list)  # per input set and way
    tolerance: str = ""
    timings_ms: dict[VariantName, VariantTiming] = field(default_factory=dict)  # the final ways, in their order
    comparisons: list[Comparison] = field(default_factory=list)  # "speedups" in the file
    routing: list[RouteCost] = field(default_factory=list)  # integrate.overhead's measure per kernel
    graph_routes: dict[str, dict[str, RoutedCalls]] = field(default_factory=dict)  # graphed way -> op -> at capture
    notes: list[str] = field(default_factory=list)  # what could not be measured, and why
    note: str = ""
    wall_s: float = 0.0
    time_limit_s: float | None = None  # apply's time limit (pace.py), None: none
    rounds: list[RoundsMeasured] = field(default_factory=list)  # under a limit: each timing's rounds
    error: str = ""  # apply failed: the rest is empty

    def comparison(self, candidate: VariantName, baseline: VariantName | None = None) -> Comparison | None:
        """`candidate` against `baseline` (by default the way it is shown against: AGAINST)."""
        baseline = baseline or AGAINST.get(candidate)
        return next((c for c in self.comparisons if c.candidate == candidate and c.baseline == baseline), None)

    def add(self, comparison: Comparison) -> Comparison:
        """The comparison recorded, in place of an earlier one of the same two ways."""
        self.comparisons = [c for c in self.comparisons if c.key != comparison.key] + [comparison]
        return comparison

    @property
    def compiled(self) -> bool:
        """Whether the model was timed under torch.compile."""
        return VariantName.COMPILE in self.timings_ms

    def to_json(self) -> dict[str, Any]:
        if self.error:
            return {"error": self.error}
        return {"run_dir": self.run_dir, "model": self.model, "device": self.device,
                "kernels": [k.to_json() for k in self.kernels], "not_installed": dict(self.not_installed),
                "checks": [c.to_json() for c in self.checks], "tolerance": self.tolerance,
                "timings_ms": {str(name): asdict(t) for name, t in self.timings_ms.items()},
                "speedups": {c.key: c.to_json() for c in self.comparisons},
                "routing": [r.to_json() for r in self.routing],
                "graph_routes": {way: {op: c.to_json() for op, c in ops.items()}
                                 for way, ops in self.graph_routes.items()},
                "notes": list(self.notes), "note": self.note, "wall_s": self.wall_s,
                "time_limit_s": self.time_limit_s, "rounds": [m.to_json() for m in self.rounds]}

    @classmethod
    def read(cls, data: Any) -> EndToEnd | None:
        """The report in what a file held, or None where it holds none (absent, empty, not a
        mapping, or damaged past reading): a reader shows what it can and says the rest."""
        if not data or not isinstance(data, dict):
            return None
        try:
            return cls.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EndToEnd:
        """A report of any kernforge: keys it did not write take their defaults, ways and
        comparisons this one does not know are left out."""
        if data.get("error"):
            return cls(error=str(data["error"]))
        comparisons = [Comparison.from_json(key, value) for key, value in (data.get("speedups") or {}).items()
                       if isinstance(value, dict)]
        return cls(run_dir=str(data.get("run_dir", "")), model=str(data.get("model", "")),
                   device=str(data.get("device", "")),
                   kernels=[KernelEffect.from_json(k) for k in data.get("kernels") or []],
                   not_installed=dict(data.get("not_installed") or {}),
                   checks=[OutputCheck.from_json(c) for c in data.get("checks") or []],
                   tolerance=str(data.get("tolerance", "")),
                   timings_ms={VariantName(k): VariantTiming.from_json(v)
                               for k, v in (data.get("timings_ms") or {}).items() if k in set(VariantName)},
                   comparisons=[c for c in comparisons if c is not None],
                   routing=[RouteCost.from_json(r) for r in data.get("routing") or []],
                   graph_routes={way: {op: RoutedCalls.from_json(c) for op, c in ops.items()}
                                 for way, ops in (data.get("graph_routes") or {}).items()},
                   notes=list(data.get("notes") or []), note=str(data.get("note") or ""),
                   wall_s=float(data.get("wall_s") or 0.0), time_limit_s=data.get("time_limit_s"),
                   rounds=[RoundsMeasured.from_json(m) for m in data.get("rounds") or []])
