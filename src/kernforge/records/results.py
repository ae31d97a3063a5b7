"""results.tsv's row as a record: one evaluated candidate, its columns as fields, with units.

search appends one as each candidate finishes (search.nodes.row_of), a resumed run writes them
all again from its database, and `show --json` gives them typed. The file is what it always
was: a header of the columns in the fields' order, floats to 6 significant digits, None as an
empty cell, each row on one line whatever a reason held. from_tsv reads the file of any
kernforge: the columns an older one did not write (origin, model, llm_tokens, llm_cost_usd,
added with the LLM proposers) take their defaults.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from kernforge.records.evaluation import Status


@dataclass(frozen=True)
class ResultRow:
    task: str
    node: str
    parent: str  # "" for a root
    status: Status  # the candidate's EvalResult status
    failure_reason: str  # why it failed, or why a correct one's timing is not trusted ("noisy")
    p50_ms: float | None  # None: not timed
    p20_ms: float | None
    p80_ms: float | None
    eager_p50_ms: float | None  # eager, timed in the same worker just before it
    speedup_vs_eager: float | None
    faster_than_eager: bool  # beyond the measured noise
    kept: bool
    eval_s: float  # the worker's whole life: start, build, checks, timing
    rationale: str
    origin: str = ""  # builtin | llm | human
    model: str = ""  # the LLM that wrote it, where one did
    llm_tokens: int = 0
    llm_cost_usd: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def to_tsv(self) -> dict[str, str]:
        """The row's cells, by column."""
        return {name: _cell(value) for name, value in asdict(self).items()}

    @classmethod
    def from_tsv(cls, cells: dict[str, str]) -> ResultRow:
        """A row as csv.DictReader read it; a column the file lacks reads as an empty cell."""
        return cls(**{f.name: _PARSE[str(f.type)](cells.get(f.name) or "") for f in fields(cls)})


RESULT_COLUMNS = [f.name for f in fields(ResultRow)]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return " ".join(str(value).split())  # one line per row, whatever the message held


def _optional_float(cell: str) -> float | None:
    return float(cell) if cell else None


# A cell back into its field's type, by the type as the field spells it
_PARSE: dict[str, Any] = {
    "str": str,
    "Status": str,
    "float | None": _optional_float,
    "float": lambda cell: float(cell or 0.0),
    "int": lambda cell: int(cell or 0),
    "bool": lambda cell: cell == "True",
}
