"""The dashboard's web app: pages and fragments over a runs folder, and each run's events as a stream.

It only reads. Every URL names a run by its folder's name under the runs folder, a task and a
node by their ids, all checked against what the run holds, so no path outside the runs folder
can be reached; a folder that cannot be read as a whole shows what can be (search.runs's
read_run_partial), and an error in one page is that page's error, never the server's.
Pages refresh their parts when the run's events.jsonl grows: the browser holds one
server-sent-events stream per run page (htmx's sse extension) and re-fetches a part on it.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from kernforge.report import html, views
from kernforge.store.events import EventTail
from kernforge.search.runs import PartialRun, read_run_partial

STATIC = Path(__file__).parent / "static"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,200}$")  # a run folder's, a task's or a node's name
POLL_S = 0.5  # how often a stream looks at events.jsonl: a node's result shows within a second
HEARTBEAT_S = 15.0  # a comment line now and then, so that proxies and browsers keep the stream open
# The least time between two updates: each makes a page fetch its parts again. The spacing is the
# server's, so that the last events of a burst are sent late, never lost: htmx's own `throttle`
# drops a trigger that comes inside its window (a task's end 0.5 s after its last node was never shown).
SPACING_S = 1.0
# A run read for one request serves others for this long while its events stay as they were: a
# 500-candidate run took ~300 ms to read on a 2-core machine (bench/results/cpu/issue18/README.md).
CACHE_S = 2.0


class LiveLinks:
    def home(self) -> str:
        return "/"

    def runs_fragment(self) -> str:
        return "/fragments/runs"

    def run(self, run: str) -> str:
        return f"/runs/{run}/"

    def fragment(self, run: str, part: str) -> str:
        return f"/runs/{run}/fragments/{part}"

    def events(self, run: str) -> str:
        return f"/runs/{run}/events"

    def task(self, run: str, task: str) -> str:
        return f"/runs/{run}/tasks/{task}"

    def task_fragment(self, run: str, task: str) -> str:
        return f"/runs/{run}/tasks/{task}/fragment"

    def node(self, run: str, task: str, node: str) -> str:
        return f"/runs/{run}/tasks/{task}/nodes/{node}"

    def node_fragment(self, run: str, task: str, node: str) -> str:
        return f"/runs/{run}/tasks/{task}/nodes/{node}/fragment"

    def tree_href(self, run: str, task: str, node: str) -> str:
        return self.node(run, task, node)

    def compare(self, a: str, b: str) -> str:
        return f"/compare?a={a}&b={b}"


class NotFound(Exception):
    pass


def make_app(runs_dir: Path, allowed_hosts: list[str] | None = None) -> FastAPI:
    """`allowed_hosts`: the Host headers served (None: any). `kernforge ui` names the address it
    binds, so that a web page elsewhere cannot read the runs through a name it points at
    127.0.0.1 (DNS rebinding)."""
    runs_dir = Path(runs_dir).resolve()
    app = FastAPI(title="kernforge", docs_url=None, redoc_url=None, openapi_url=None)
    if allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)
    app.mount("/static/vendor", StaticFiles(directory=STATIC / "vendor"), name="vendor")
    links = LiveLinks()

    def run_folder(name: str) -> Path:
        """The run folder `name` names, only ever a direct child of the runs folder."""
        if not NAME.match(name) or name in (".", ".."):
            raise NotFound(f"no run '{name}'")
        folder = (runs_dir / name).resolve()
        if folder.parent != runs_dir or not _is_run(folder):
            raise NotFound(f"no run '{name}' in {runs_dir}")
        return folder

    cache: dict[Path, tuple[tuple[int, int], float, PartialRun]] = {}

    def load(name: str) -> PartialRun:
        """The run, read again unless its events are as they were under CACHE_S ago: an event
        makes a page fetch its three parts at once, and they share one read of the folder."""
        folder = run_folder(name)
        key = _events_key(folder)
        hit = cache.get(folder)
        if hit and hit[0] == key and time.monotonic() - hit[1] < CACHE_S:
            return hit[2]
        run = read_run_partial(folder)
        cache[folder] = (key, time.monotonic(), run)
        return run

    def task_of(run: PartialRun, task_id: str) -> Any:
        task = views.find_task(run, task_id) if NAME.match(task_id) else None
        if task is None:
            raise NotFound(f"the run has no task '{task_id}'")
        return task

    def page(template: str, **context: Any) -> HTMLResponse:
        return HTMLResponse(html.render(template, live=True, links=links, **context))

    @app.exception_handler(NotFound)
    async def not_found(request: Request, e: NotFound) -> HTMLResponse:
        return HTMLResponse(_message_page(str(e), links), status_code=404)

    @app.exception_handler(StarletteHTTPException)
    async def no_route(request: Request, e: StarletteHTTPException) -> HTMLResponse:
        return HTMLResponse(_message_page(f"nothing here ({e.status_code}): {request.url.path}", links),
                            status_code=e.status_code)

    @app.exception_handler(Exception)
    async def failed(request: Request, e: Exception) -> HTMLResponse:
        # a run folder in a state nobody foresaw: this page says so, the server goes on
        return HTMLResponse(_message_page(f"this page could not be made: {type(e).__name__}: {str(e)[:300]}", links),
                            status_code=500)

    @app.get("/static/kernforge.css")
    def css() -> Response:
        return Response((html.STATIC / "kernforge.css").read_text(), media_type="text/css")

    @app.get("/static/kernforge.js")
    def script() -> Response:
        return Response((STATIC / "kernforge.js").read_text(), media_type="text/javascript")

    @app.get("/static/pygments.css")
    def pygments_css() -> Response:
        return Response(html.pygments_css(), media_type="text/css")

    @app.get("/", response_class=HTMLResponse)
    def runs_page() -> HTMLResponse:
        return page("runs.html", title="runs", crumbs=[], rows=_rows(runs_dir), runs_dir=str(runs_dir))

    @app.get("/fragments/runs", response_class=HTMLResponse)
    def runs_fragment() -> HTMLResponse:
        return page("_runs.html", rows=_rows(runs_dir), runs_dir=str(runs_dir))

    @app.get("/compare", response_class=HTMLResponse)
    def compare_page(a: str = "", b: str = "", run: Annotated[list[str] | None, Query()] = None) -> HTMLResponse:
        """Two runs side by side: /compare?a=RUN&b=RUN, or ?run=RUN&run=RUN as the runs list's
        form sends two ticked runs."""
        if not (a and b) and run and len(run) == 2:
            a, b = run
        if not (a and b):
            return HTMLResponse(_message_page("name two runs to compare: /compare?a=RUN&b=RUN, or tick two "
                                              "in the runs list", links), status_code=400)
        runs = [load(a), load(b)]
        now = time.time()
        return page("compare.html", title=f"{a} vs {b}", crumbs=[("compare", None)], names=[a, b],
                    headers=[views.run_header(r, now) for r in runs], rows=views.compare_rows(*runs),
                    end_to_end=views.end_to_end_pairs(*runs))

    @app.get("/runs/{name}/", response_class=HTMLResponse)
    def run_page(name: str) -> HTMLResponse:
        return HTMLResponse(html.render("run.html", **html.run_context(load(name), links, live=True)))

    @app.get("/runs/{name}", response_class=HTMLResponse)
    def run_page_no_slash(name: str) -> HTMLResponse:
        return run_page(name)

    @app.get("/runs/{name}/fragments/{part}", response_class=HTMLResponse)
    def run_fragment(name: str, part: str) -> HTMLResponse:
        templates = {"header": "_run_header.html", "hot": "_hot.html", "plots": "_plots.html"}
        if part not in templates:
            raise NotFound(f"no part '{part}'")
        return HTMLResponse(html.render(templates[part], **html.run_context(load(name), links, live=True)))

    @app.get("/runs/{name}/tasks/{task_id}", response_class=HTMLResponse)
    def task_page(name: str, task_id: str) -> HTMLResponse:
        run = load(name)
        return HTMLResponse(html.render("task.html", **html.task_context(run, task_of(run, task_id), links, live=True)))

    @app.get("/runs/{name}/tasks/{task_id}/fragment", response_class=HTMLResponse)
    def task_fragment(name: str, task_id: str) -> HTMLResponse:
        run = load(name)
        context = html.task_context(run, task_of(run, task_id), links, live=True)
        return HTMLResponse(html.render("_tree.html", **context))

    def node_context(name: str, task_id: str, node_id: str) -> dict[str, Any]:
        run = load(name)
        task = task_of(run, task_id)
        view = views.node_view(run, task, node_id) if NAME.match(node_id) else None
        if view is None:
            raise NotFound(f"the task has no node '{node_id}'")
        return {"run_name": name, "task": task, "view": view, "title": f"{node_id} · {task.op}",
                "crumbs": [(name, links.run(name)), (f"{task.op} {task.shape}", links.task(name, task_id)),
                           (node_id, None)]}

    @app.get("/runs/{name}/tasks/{task_id}/nodes/{node_id}", response_class=HTMLResponse)
    def node_page(name: str, task_id: str, node_id: str) -> HTMLResponse:
        return page("node.html", **node_context(name, task_id, node_id))

    @app.get("/runs/{name}/tasks/{task_id}/nodes/{node_id}/fragment", response_class=HTMLResponse)
    def node_fragment(name: str, task_id: str, node_id: str) -> HTMLResponse:
        return page("_node.html", **node_context(name, task_id, node_id))

    @app.get("/runs/{name}/events")
    async def events(name: str, request: Request) -> StreamingResponse:
        path = run_folder(name) / "events.jsonl"
        return StreamingResponse(_stream(path, request), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/runs/{name}/summary.json")
    def summary(name: str) -> PlainTextResponse:
        """The run's views as JSON, for a script that watches a run."""
        run = load(name)
        now = time.time()
        data = {"header": views.run_header(run, now), "tasks": views.hot_rows(run)}
        return PlainTextResponse(json.dumps(data, default=str, indent=1), media_type="application/json")

    return app


async def _stream(path: Path, request: Request) -> Any:
    """`update` once at the start (the page may be older than the stream) and after new events,
    with their kinds and tasks, at most one a SPACING_S: the events of a burst wait and go out
    together, none dropped; a comment line while nothing happens."""
    tail = EventTail(path)
    tail.read_new()  # from the end: the page shows what came before
    yield "event: update\ndata: {}\n\n"
    quiet = since = 0.0
    kinds: set[str] = set()
    tasks: set[str] = set()
    while not await request.is_disconnected():
        new = tail.read_new()
        kinds |= {e.kind for e in new}
        tasks |= {str(getattr(e, "task", "")) for e in new} - {""}
        if kinds and since >= SPACING_S:
            yield f"event: update\ndata: {json.dumps({'kinds': sorted(kinds), 'tasks': sorted(tasks)})}\n\n"
            kinds, tasks, quiet, since = set(), set(), 0.0, 0.0
        elif quiet >= HEARTBEAT_S:
            yield ": still here\n\n"
            quiet = 0.0
        await asyncio.sleep(POLL_S)
        quiet += POLL_S
        since += POLL_S


def _events_key(folder: Path) -> tuple[int, int]:
    try:
        stat = (folder / "events.jsonl").stat()
        return stat.st_size, stat.st_mtime_ns
    except OSError:
        return -1, -1


def _is_run(folder: Path) -> bool:
    return folder.is_dir() and ((folder / "config.json").is_file() or (folder / "events.jsonl").is_file())


def _rows(runs_dir: Path) -> list[dict[str, Any]]:
    """Every run in the folder, newest first."""
    if not runs_dir.is_dir():
        return []
    now = time.time()
    folders = [p for p in runs_dir.iterdir() if _is_run(p) and NAME.match(p.name) and p.resolve().parent == runs_dir]
    rows = []
    for folder in sorted(folders, key=lambda p: p.name, reverse=True):
        try:
            rows.append(views.run_row(read_run_partial(folder), now))
        except Exception as e:  # noqa: BLE001 - one unreadable run must not hide the others
            rows.append({"name": folder.name, "model": "?", "device": "?", "status": "unreadable",
                         "elapsed_s": None, "best_speedup": None, "end_to_end": None, "tasks": 0,
                         "problems": 1, "error": f"{type(e).__name__}: {e}"[:200]})
    return rows


def _message_page(message: str, links: LiveLinks) -> str:
    return html.render("message.html", live=True, links=links, title="kernforge", crumbs=[], message=message)
