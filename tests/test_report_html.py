"""`kernforge report`: one self-contained HTML file and a Markdown summary, from the same views."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import SOFTMAX_OP, run_cli
from run_folders import write_run

from kernforge.report.html import report
from kernforge.search.runs import read_run_partial

pytestmark = pytest.mark.integration


def test_the_report_is_one_file_with_the_tables_plots_and_trees(runs_dir: Path, softmax_task):
    store = write_run(runs_dir, softmax_task)
    made = report(read_run_partial(store.root))
    html = made.html
    assert "<script" not in html and "<link" not in html  # nothing to fetch, nothing to run
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "<style>" in html and ".hl " in html  # the stylesheet and the highlighting's, inlined
    assert softmax_task.op in html and "no built-in template for aten::bmm.default" in html
    assert html.count('<svg') >= 3  # two plots and the task's tree
    row = f"row-{softmax_task.task_id}-n0001"  # node ids repeat across tasks; a row's anchor names both
    assert f'href="#{row}"' in html and f'id="{row}"' in html  # the tree links within the file
    assert "The winning kernel: n0001" in html and "kf_forward" in html
    assert 'hx-' not in html and "sse-connect" not in html


def test_the_markdown_summary_has_the_result_table(runs_dir: Path, softmax_task):
    store = write_run(runs_dir, softmax_task)
    md = report(read_run_partial(store.root)).markdown
    row = next(line for line in md.splitlines() if line.startswith(f"| {softmax_task.op}"))
    assert f"{0.100 / 0.052:.2f}x" in row and "2/4" in row
    assert "patched eager vs eager 1.21x" in md and "compile vs compile 1.01x, within noise" in md
    assert "150 tokens" in md


def test_the_report_command_writes_both_files_and_refuses_a_non_run(runs_dir: Path, softmax_task, tmp_path: Path):
    store = write_run(runs_dir, softmax_task)
    target = tmp_path / "shared" / "run.html"
    proc = run_cli("report", str(store.root), "-o", str(target))
    assert proc.returncode == 0, proc.stderr
    assert target.is_file() and target.with_suffix(".md").is_file()
    bad = run_cli("report", str(tmp_path / "nothing-here"))
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error: no run folder")
    assert "Traceback" not in bad.stderr


def test_the_report_of_a_real_finished_run_has_its_task_and_its_verdicts(finished_run, tmp_path: Path):
    """The session's one finished run (a real search of the tiny model, applied), reported."""
    summary = finished_run.data
    target = tmp_path / "run.html"
    proc = run_cli("report", str(finished_run.run_dir), "-o", str(target))
    assert proc.returncode == 0, proc.stderr
    html, md = target.read_text(), target.with_suffix(".md").read_text()
    (task,) = [t for t in summary["tasks"] if t["op"] == SOFTMAX_OP]
    assert task["op"] in html and task["op"] in md
    assert "no built-in template for aten::bmm.default" in html  # the hotter op it could not search
    assert html.count("<svg") >= 3  # two plots and the task's tree
    nodes = sorted(p.name for p in (finished_run.run_dir / "tasks" / task["task"] / "nodes").iterdir())
    assert nodes and all(f"row-{task['task']}-{node}" in html for node in nodes)  # every candidate's row
