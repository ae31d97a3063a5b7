"""Pages from the run views: the dashboard's (ui/, live) and the shared report's (one file).

Both render the same Jinja templates (report/templates/). Live pages link the stylesheet and
htmx from the server and refresh their parts on the run's events; the report inlines the
stylesheet, has no script at all, and links within itself.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from kernforge.report import views
from kernforge.search.runs import PartialRun, TaskState

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
# Sources longer than this are shown plain: highlighting a generated 1 MB file would stall a page.
HIGHLIGHT_LIMIT = 400_000


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.ChainableUndefined)
    env.filters.update(ms=views.fmt_ms, x=views.fmt_x, duration=views.fmt_duration, pct=views.fmt_pct, errs=_errors,
                       highlight=highlight)
    return env


def _errors(values: list[float] | None) -> str:
    if not values:
        return "-"
    return ", ".join("inf" if not math.isfinite(v) else f"{v:.2e}" for v in values)


def highlight(source: str, language: str) -> str:
    if len(source) > HIGHLIGHT_LIMIT:
        return f"<pre>{jinja2.utils.escape(source)}</pre>"
    try:
        lexer = get_lexer_by_name(language)
    except ClassNotFound:
        lexer = get_lexer_by_name("text")
    formatter = HtmlFormatter(cssclass="hl", linenos="table" if language != "diff" else False)
    return pygments_highlight(source, lexer, formatter)


@lru_cache(maxsize=1)
def pygments_css() -> str:
    return HtmlFormatter(style="default").get_style_defs(".hl")


def stylesheet() -> str:
    return (STATIC / "kernforge.css").read_text() + "\n" + pygments_css()


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


# ---------------------------------------------------------------- links

class ReportLinks:
    """Links inside one self-contained file: tasks are sections, nodes rows of their tables."""

    def home(self) -> str:
        return "#"

    def run(self, run: str) -> str:
        return "#"

    def task(self, run: str, task: str) -> str:
        return f"#task-{task}"

    def node(self, run: str, task: str, node: str) -> str | None:
        return None  # the report has no node pages; the tree links to each node's row

    def tree_href(self, run: str, task: str, node: str) -> str:
        return f"#row-{task}-{node}"


# ---------------------------------------------------------------- contexts

def run_context(run: PartialRun, links: Any, live: bool, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    return {"live": live, "links": links, "run_name": run.root.name, "header": views.run_header(run, now),
            "hot": views.hot_rows(run), "plots": views.speedup_plots(run), "skipped": run.skipped,
            "title": run.settings.model_name or run.root.name,
            "crumbs": [(run.root.name, None)], "inline_css": "" if live else stylesheet()}


def task_context(run: PartialRun, task: TaskState, links: Any, live: bool) -> dict[str, Any]:
    row = next(r for r in views.hot_rows(run) if r["task"] == task.task_id)
    return {"live": live, "links": links, "run_name": run.root.name, "task": task, "row": row,
            "flight": views.in_flight(task), "nodes": views.node_rows(task),
            "tree": views.tree_for(task, lambda node: links.tree_href(run.root.name, task.task_id, node)),
            "title": f"{task.op} {task.shape}",
            "crumbs": [(run.root.name, links.run(run.root.name)), (f"{task.op} {task.shape}", None)]}


@dataclass
class Report:
    html: str
    markdown: str


def report(run: PartialRun) -> Report:
    """The run as one HTML file (no script, no outside asset) and a Markdown summary."""
    links = ReportLinks()
    context = run_context(run, links, live=False)
    sections = []
    for task in run.tasks:
        section = task_context(run, task, links, live=False)
        winner = task.outcome.best if task.outcome else None
        section["best"] = views.node_view(run, task, winner.node_id) if winner else None
        sections.append(section)
    written = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    context["title"] = f"kernforge report: {context['title']}"
    html = render("report.html", **context, task_sections=sections, written=written)
    return Report(html=html, markdown=markdown(run, context, written))


def markdown(run: PartialRun, context: dict[str, Any], written: str) -> str:
    h = context["header"]
    lines = [f"# kernforge run {h['name']}", "",
             f"{h['model']} on {h['device']}; {h['proposer']} proposer, {h['strategy']}, "
             f"{h['iterations']} candidates per op; {h['status']}, {views.fmt_duration(h['elapsed_s'])} "
             f"(written {written}).", "",
             f"- model latency (captured forward): {views.fmt_ms(h['model_ms'])} ms",
             f"- best op speedup: {views.fmt_x(h['best_speedup'])}",
             f"- end to end: patched eager vs eager {h['end_to_end']['eager'] or '-'}, "
             f"patched compile vs compile {h['end_to_end']['compile'] or '-'}",
             "- candidates: " + (", ".join(f"{k} {v}" for k, v in h["counts"].items()) or "none")]
    if h["llm"]:
        lines.append(f"- LLM {h['llm']['model']}: {h['llm']['tokens']} tokens, ${h['llm']['cost_usd']:.2f}, "
                     f"{h['llm']['calls']} calls")
    lines += ["", "| op | shape | dtype | share | eager ms | compile ms | best ms | vs eager | vs compile | "
              "projected model gain | correct/tried |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in context["hot"]:
        lines.append(f"| {r['op']} | {r['shape']} | {r['dtype']} | {views.fmt_pct(r['share'])} | "
                     f"{views.fmt_ms(r['eager_ms'])} | "
                     f"{views.fmt_ms(r['compile_ms'])} | {views.fmt_ms(r['best_ms'])} | "
                     f"{views.fmt_x(r['speedup_vs_eager']) if r['speedup_vs_eager'] else '1.00x'} | "
                     f"{views.fmt_x(r['speedup_vs_compile'])} | {views.fmt_x(r['projected_gain'])} | "
                     f"{r['correct']}/{r['candidates']} |")
    if run.skipped:
        lines += ["", "Skipped:", ""] + [f"- {s.get('op')} ({views.fmt_pct(s.get('share'))}): {s.get('reason')}"
                                         for s in run.skipped]
    if h["problems"]:
        lines += ["", "Could not be read:", ""] + [f"- {p}" for p in h["problems"]]
    return "\n".join(lines) + "\n"
