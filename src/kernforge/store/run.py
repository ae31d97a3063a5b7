"""The run folder.

    runs/<timestamp>-<model>/
      config.json          the resolved options, versions and device
      capture/             profile.json and samples/<signature>/<k>.pt (real inputs)
      tasks/<task>/        task.json, baseline.json, baseline/ (job, log, result);
                           reference.pt (fresh inputs, float64 oracle) while the task runs
        nodes/<node>/      candidate.c|py as proposed, proposal.json, job, log, result.json
      run.db               SQLite (WAL): the tasks and every finished node, what --resume reads
      results.tsv          one row per evaluated candidate, appended as it finishes
      events.jsonl         what happened, one typed event per line (store/events.py), appended as it happens
      tasks/<task>/tree.json  the strategy's statistics of its tree and the nodes in flight, for a dashboard
      tasks/<task>/history a git repository: one commit per kept improvement
      summary.json         the best result per task, written at the end (and the model
                           end to end, once the winners were applied: `apply`)
      integrate/           what `apply` built and measured: apply.json, build/

Every file is written when its step ends, and each finished node is one database
transaction, so a crash (or kill -9) loses at most the candidates in flight.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernforge.records import ResultRow, RunSummary
from kernforge.records.results import RESULT_COLUMNS
from kernforge.store.db import NodeRecord, RunDB
from kernforge.store.events import Event, read_events

# The run folder's layout version, in config.json as "format_version": a reader (integrate,
# export, a dashboard) refuses a newer one. 0 is a folder written before the field existed.
RUN_FORMAT = 1


@dataclass
class RunStore:
    root: Path
    _db: RunDB | None = field(default=None, repr=False)
    listeners: list[Callable[[Event], None]] = field(default_factory=list, repr=False)
    _event_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def db(self) -> RunDB:
        if self._db is None:
            self._db = RunDB(self.root / "run.db")
        return self._db

    def record_node(self, task_id: str, node_id: str, parent_id: str | None, proposal: Any, result: Any,
                    kept: bool, suffix: str) -> None:
        source = self.node_dir(task_id, node_id) / f"candidate{suffix}"
        self.db.add_node(NodeRecord(
            task=task_id, node=node_id, parent=parent_id, status=result.status,
            speedup=result.speedup_vs_eager, kept=kept, source_path=str(source.relative_to(self.root)),
            rationale=proposal.rationale, params={k: v for k, v in proposal.record().items() if k != "rationale"},
            result=result.to_json()))

    def rewrite_results(self, rows: list[ResultRow]) -> None:
        """results.tsv made again from recorded rows: on resume, the database is the record."""
        (self.root / "results.tsv").unlink(missing_ok=True)
        for row in rows:  # a few hundred rows at most, once per resume
            self.append_result(row)

    @classmethod
    def create(cls, runs_dir: Path, model_name: str) -> RunStore:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", model_name)[:40] or "model"
        root = runs_dir / f"{stamp}-{safe}"
        suffix = 1
        while root.exists():
            suffix += 1
            root = runs_dir / f"{stamp}-{safe}-{suffix}"
        root.mkdir(parents=True)
        return cls(root)

    @property
    def capture_dir(self) -> Path:
        return self.root / "capture"

    def task_dir(self, task_id: str) -> Path:
        path = self.root / "tasks" / task_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def node_dir(self, task_id: str, node_id: str) -> Path:
        path = self.task_dir(task_id) / "nodes" / node_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write_json(self, relative: str, data: Any) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str))
        tmp.replace(path)  # readers never see a half-written file

    def read_json(self, relative: str) -> Any:
        return json.loads((self.root / relative).read_text())

    def summary(self) -> RunSummary | None:
        """summary.json as a record; None where the run has not finished."""
        return RunSummary.from_json(self.read_json("summary.json")) if (self.root / "summary.json").is_file() else None

    def write_summary(self, summary: RunSummary) -> None:
        self.write_json("summary.json", summary.to_json())

    def append_result(self, row: ResultRow) -> None:
        path = self.root / "results.tsv"
        new = not path.exists()
        with open(path, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=RESULT_COLUMNS, delimiter="\t", lineterminator="\n")
            if new:
                writer.writeheader()
            writer.writerow(row.to_tsv())

    def emit(self, event: Event) -> None:
        """One line per event, written at once (what the dashboard tails and a crash leaves behind),
        then handed to each listener (the terminal's progress). Job threads emit too: one lock
        keeps lines whole and listeners called one at a time."""
        line = json.dumps(event.to_json(), default=str)
        with self._event_lock:
            with open(self.root / "events.jsonl", "a") as f:
                f.write(line + "\n")
            for listener in self.listeners:
                listener(event)

    def events(self) -> list[Event]:
        return read_events(self.root / "events.jsonl")

    def commit_kept(self, task_id: str, source: str, suffix: str, message: str) -> str | None:
        """Commit a kept candidate to the task's history; its hash, or None where git is missing
        or refuses (the history is a convenience: the candidate's own files are the record)."""
        repo = self.task_dir(task_id) / "history"
        if shutil.which("git") is None:
            return None
        try:
            if not (repo / ".git" / "HEAD").is_file():
                repo.mkdir(parents=True, exist_ok=True)
                _git(repo, "init", "-q")
            _clear_stale_lock(repo)
            (repo / f"kernel{suffix}").write_text(source)
            _git(repo, "add", f"kernel{suffix}")
            _git(repo, "-c", "user.name=kernforge", "-c", "user.email=kernforge@localhost",
                 "commit", "-q", "--allow-empty", "-m", message)
            return _git(repo, "rev-parse", "HEAD").strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    def results(self) -> list[ResultRow]:
        path = self.root / "results.tsv"
        if not path.exists():
            return []
        with open(path, newline="") as f:
            return [ResultRow.from_tsv(cells) for cells in csv.DictReader(f, delimiter="\t")]


_STARTED = time.time()


def _clear_stale_lock(repo: Path) -> None:
    """A task's history is written by this process alone, one commit at a time: an index.lock made
    before this process started was left by one that was stopped mid-commit (Ctrl-C), and would
    make every later commit of the resumed run fail."""
    lock = repo / ".git" / "index.lock"
    try:
        if lock.stat().st_mtime < _STARTED:
            lock.unlink()
    except FileNotFoundError:
        pass


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def list_runs(runs_dir: Path) -> list[RunStore]:
    if not runs_dir.is_dir():
        return []
    return [RunStore(p) for p in sorted(runs_dir.iterdir()) if (p / "config.json").is_file()]
