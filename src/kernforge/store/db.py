"""The run's database: tasks, nodes and results in SQLite, the record a resumed run starts from.

WAL mode: a reader (the UI, `kernforge show`) never blocks the search, and a
process killed mid-write leaves the last committed state intact. Each finished
node is one transaction, so `kill -9` loses at most the candidates in flight.
Large things stay in files (sources, logs, samples); rows point at them.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    task TEXT PRIMARY KEY,
    position INTEGER NOT NULL,
    state TEXT NOT NULL,          -- pending | running | done
    task_json TEXT NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS nodes (
    task TEXT NOT NULL,
    node TEXT NOT NULL,
    parent TEXT,
    status TEXT NOT NULL,
    speedup REAL,
    kept INTEGER NOT NULL,
    source_path TEXT NOT NULL,    -- relative to the run folder, which may move
    rationale TEXT NOT NULL,
    params_json TEXT NOT NULL,
    result_json TEXT NOT NULL,
    finished REAL NOT NULL,
    PRIMARY KEY (task, node)
);
"""


@dataclass
class NodeRecord:
    task: str
    node: str
    parent: str | None
    status: str
    speedup: float | None
    kept: bool
    source_path: str
    rationale: str
    params: dict[str, Any]
    result: dict[str, Any]
    finished: float = 0.0  # when the node was recorded: with several in flight, not the ids' order


class RunDB:
    def __init__(self, path: Path):
        # One connection per RunDB, used from the search thread only (writes are serialised there).
        self.conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across a process kill
        self.conn.executescript(SCHEMA)

    def add_tasks(self, tasks: list[tuple[str, dict[str, Any]]]) -> None:
        with self.conn:
            for position, (task_id, task_json) in enumerate(tasks):
                self.conn.execute(
                    "INSERT OR IGNORE INTO tasks VALUES (?, ?, 'pending', ?, ?)",
                    (task_id, position, json.dumps(task_json), time.time()))

    def set_task_state(self, task_id: str, state: str) -> None:
        with self.conn:
            self.conn.execute("UPDATE tasks SET state = ?, updated = ? WHERE task = ?",
                              (state, time.time(), task_id))

    def tasks(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(task id, state, task JSON) in the run's order."""
        rows = self.conn.execute("SELECT task, state, task_json FROM tasks ORDER BY position").fetchall()
        return [(task, state, json.loads(text)) for task, state, text in rows]

    def add_node(self, record: NodeRecord) -> None:
        with self.conn:
            self.conn.execute(
                "INSERT OR REPLACE INTO nodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.task, record.node, record.parent, record.status, record.speedup,
                 int(record.kept), record.source_path, record.rationale, json.dumps(record.params),
                 json.dumps(record.result, default=str), time.time()))

    def nodes(self, task_id: str | None = None) -> list[NodeRecord]:
        query = ("SELECT task, node, parent, status, speedup, kept, source_path, rationale, params_json, "
                 "result_json, finished FROM nodes")
        rows = (self.conn.execute(query + " WHERE task = ? ORDER BY node", (task_id,)) if task_id
                else self.conn.execute(query + " ORDER BY task, node")).fetchall()
        return [NodeRecord(task=r[0], node=r[1], parent=r[2], status=r[3], speedup=r[4], kept=bool(r[5]),
                           source_path=r[6], rationale=r[7], params=json.loads(r[8]),
                           result=json.loads(r[9]), finished=r[10]) for r in rows]
