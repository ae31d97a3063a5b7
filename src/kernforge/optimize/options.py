"""What a run is asked to do (OptimizeOptions, as config.json keeps it), what it came to
(OptimizeResult), and the choices every entry point checks before anything runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


from kernforge.capture import Capture, OpProfile
from kernforge.errors import UserError
from kernforge.models import ModelOptions
from kernforge.propose import ProposerOptions
from kernforge.records import EndToEnd
from kernforge.records.nodes import TaskOutcome
from kernforge.records.proposal import Usage
from kernforge.search.engine import FINALISTS
from kernforge.store.events import (Event)


@dataclass
class OptimizeOptions:
    spec: str
    backend: str = "auto"
    proposer: str = "builtin"
    strategy: str = "mcts"
    iterations: int = 10
    top_k: int = 2  # 0: every op --ops names
    ops: list[str] = field(default_factory=list)  # --ops: names, signatures or profile ranks; empty: the hottest
    runs_dir: Path = Path("runs")
    candidate_timeout_s: float = 120.0
    model: ModelOptions = field(default_factory=ModelOptions)
    compile: str = "auto"  # torch.compile peers: auto | none | default | max-autotune
    parallel: int = 0  # candidates evaluated at once per device; 0: auto (4 on a GPU, 1 on a CPU)
    executor: str = "local"  # local | ray
    gpus: str = "all"  # local executor: the GPUs to spread candidates over
    ray_address: str = "local"  # ray executor: a cluster address, or "local" to start one here
    finalists: int = FINALISTS  # the best candidates evaluated again, one at a time, at a task's end
    apply: bool = True  # at the end, install the winners into the model and measure it end to end
    fuse: bool = True  # rank fused chains (capture/chains.py) beside single ops
    # rank by eager time, or by what torch.compile leaves above each op's floor as well
    # (capture/compiled.py); auto: compile on a GPU, eager on a CPU (compiling there takes tens of s)
    rank_by: str = "auto"  # auto | eager | compile
    # the whole run's time budget ("30m", "2h"; search/budget.py), apply included; "": none, the
    # iterations alone decide
    time_budget: str = ""
    llm: ProposerOptions = field(default_factory=ProposerOptions)  # --proposer llm | mixed


@dataclass
class OptimizeResult:
    run_dir: Path
    options: OptimizeOptions
    backend: str
    device: str
    capture: Capture
    outcomes: list[TaskOutcome] = field(default_factory=list)
    skipped: list[tuple[OpProfile, str]] = field(default_factory=list)
    wall_s: float = 0.0
    end_to_end: EndToEnd | None = None  # integrate.apply's report, or EndToEnd(error=why)
    llm_usage: Usage | None = None  # what the run's LLM calls cost, resumed parts included


# Every event the run's store writes to events.jsonl (store/events.py), as it is written.
OnEvent = Callable[[Event], None]


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C once the run folder exists: every candidate that finished is in it, and the
    interrupted task goes on from them with `optimize --resume run_dir`."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(str(run_dir))
        self.run_dir = run_dir


COMPILE_MODES = {"none": (), "default": ("default",),
                 "max-autotune": ("default", "max-autotune-no-cudagraphs")}


def compile_modes(choice: str, device: str) -> tuple[str, ...]:
    """auto: torch.compile's default mode on a GPU; none on a CPU, where compiling one op
    takes ~13 s (on a 2-core x86 CPU) and its time is rarely the point."""
    if choice == "auto":
        return COMPILE_MODES["default"] if device == "cuda" else ()
    if choice not in COMPILE_MODES:
        raise UserError(f"unknown --compile '{choice}'; choose one of: auto, {', '.join(COMPILE_MODES)}")
    return COMPILE_MODES[choice]


# Candidates evaluated at once on a GPU: their builds and checks overlap, their timings take
# the GPU one at a time. On a CPU one at a time: a second worker would share the cores being timed.
GPU_PARALLEL = 4


def parallelism(choice: int, device: str) -> int:
    if choice < 0:
        raise UserError(f"--parallel must be 0 (auto) or more, not {choice}")
    return choice or (GPU_PARALLEL if device == "cuda" else 1)


def options_from_config(config: dict[str, Any]) -> OptimizeOptions:
    fields = {k: v for k, v in config.items() if k in OptimizeOptions.__dataclass_fields__}
    fields["runs_dir"] = Path(fields.get("runs_dir", "runs"))
    fields["model"] = ModelOptions(**fields.get("model", {}))
    fields["llm"] = ProposerOptions(**fields.get("llm", {}))
    return OptimizeOptions(**fields)


def options_json(opts: Any) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(opts).items()}
