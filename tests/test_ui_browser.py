"""The dashboard in headless Chromium while a real CPU search writes its run folder: new nodes
appear on the task page without a reload, a click opens a node with its source and diff. On run
folders written by hand (run_folders.py): tables sort and filter, and keep doing so when an event
swaps them in again; the tree zooms and pans; two ticked runs open side by side.

Debian's chromium, driven by Playwright through its executable_path (no browser download;
scripts/test.sh installs the package). KERNFORGE_SCREENSHOTS=DIR keeps a PNG of each view
there (docs/screenshots/ holds the ones docs/dashboard.md shows).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO_ROOT, TINY_MODEL
from run_folders import ok, write_node, write_run

pytestmark = pytest.mark.browser

playwright = pytest.importorskip("playwright.sync_api")

SEARCH_ITERATIONS = 6  # ~5 s a candidate on a 2-core machine: the page is open for most of them


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("the browser tests need Debian's chromium: apt-get install chromium (scripts/test.sh does)")
    return path


def kernforge(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    return subprocess.Popen([sys.executable, "-m", "kernforge", *args], cwd=REPO_ROOT, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, **kwargs)


def dashboard_url(proc: subprocess.Popen) -> str:
    """The URL `kernforge ui` prints on its first line."""
    line = proc.stderr.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
    assert match, f"kernforge ui said: {line!r}"
    return match.group(1)


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("KERNFORGE_SCREENSHOTS") or tmp_path / "shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_the_dashboard_follows_a_live_search(tmp_path: Path, shots: Path):
    runs = tmp_path / "runs"
    ui = kernforge("ui", str(runs), "--port", "0")
    search = None
    try:
        url = dashboard_url(ui)
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url)  # before the run exists: the runs page shows it when it starts
            search = kernforge("optimize", str(TINY_MODEL), "--backend", "cpu", "--iterations",
                               str(SEARCH_ITERATIONS), "--top-k", "1", "--runs-dir", str(runs), "--no-apply")
            page.locator("table.runs a").first.wait_for(timeout=120_000)
            page.locator("table.runs a").first.click()
            page.locator("table.hot a").first.wait_for(timeout=120_000)  # the task, once it is chosen
            page.locator("table.hot a").first.click()
            nodes = page.locator("svg.tree g.node[data-node^='n']")
            nodes.first.wait_for(timeout=120_000)
            seen = nodes.count()
            assert seen < SEARCH_ITERATIONS, "the search ended before the page could watch it"
            navigations = []
            page.on("framenavigated", lambda frame: navigations.append(frame.url))
            page.evaluate("window.kernforgeMarker = 42")  # gone if the page were loaded again
            page.wait_for_function(f"document.querySelectorAll(\"svg.tree g.node[data-node^='n']\").length > {seen}",
                                   timeout=120_000)
            assert page.evaluate("window.kernforgeMarker") == 42 and navigations == []
            assert search.wait(timeout=600) == 0, search.stderr.read()[-3000:]
            page.wait_for_function(f"document.querySelectorAll(\"svg.tree g.node[data-node^='n']\").length == "
                                   f"{SEARCH_ITERATIONS}", timeout=30_000)
            assert page.evaluate("window.kernforgeMarker") == 42
            page.screenshot(path=str(shots / "task.png"), full_page=True)
            task_url = page.url

            # a node with a parent, opened from the tree: its source and its diff
            rows = page.locator("table.nodes tr[data-node]").all()
            row = next(r for r in rows if r.locator("td").nth(1).inner_text().strip() != "-")
            node_id = row.get_attribute("data-node")
            page.locator(f"svg.tree g.node[data-node='{node_id}'] a").click()
            page.wait_for_url(re.compile(f"/nodes/{node_id}$"))
            assert "kf_forward" in page.locator(".code.source").inner_text()
            diff = page.locator(".code.diff").inner_text()
            assert diff.startswith("---") and "@@" in diff
            page.screenshot(path=str(shots / "node.png"), full_page=True)

            page.goto(task_url.split("/tasks/")[0] + "/")
            page.locator("#plots svg.plot").first.wait_for()
            page.screenshot(path=str(shots / "run.png"), full_page=True)
            page.goto(url)
            page.locator("table.runs td .status.finished").wait_for(timeout=30_000)
            page.screenshot(path=str(shots / "runs.png"), full_page=True)
            browser.close()
    finally:
        for proc in (search, ui):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def visible_rows(page, table: str) -> list[str]:
    """The ids (data-node, data-run, ...) of a table's rows the filters leave shown, top to bottom."""
    return page.evaluate("""(table) => Array.from(document.querySelectorAll(`table[data-table="${table}"] tbody tr`))
        .filter((row) => !row.hidden).map((row) => row.dataset.node || row.dataset.run || row.dataset.task)""", table)


def viewport_transform(page) -> str:
    return page.locator("svg.tree g.viewport").get_attribute("transform")


def next_swap(page) -> None:
    """Waits for htmx to swap a part of the page in again (the runs list every 3 s)."""
    page.evaluate("new Promise((done) => document.addEventListener('htmx:afterSwap', done, {once: true}))")


def test_tables_sort_and_filter_the_tree_zooms_and_two_runs_compare(runs_dir: Path, softmax_task, shots: Path):
    finished = write_run(runs_dir, softmax_task)
    running = write_run(runs_dir, softmax_task, finished=False)  # this process's pid: running
    task = softmax_task.task_id
    ui = kernforge("ui", str(runs_dir), "--port", "0")
    try:
        url = dashboard_url(ui)
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})

            # the runs list: a header sorts (the state shown), the box filters, a refresh keeps both
            page.goto(url)
            names = sorted([finished.root.name, running.root.name])
            assert sorted(visible_rows(page, "runs")) == names
            header = page.locator("table.runs th").nth(1)  # "compare", then "run"
            header.click()
            assert visible_rows(page, "runs") == names and header.get_attribute("aria-sort") == "ascending"
            header.click()
            assert visible_rows(page, "runs") == names[::-1] and header.get_attribute("aria-sort") == "descending"
            header.focus()
            page.keyboard.press("Enter")  # the keyboard sorts too
            assert visible_rows(page, "runs") == names and header.get_attribute("aria-sort") == "ascending"
            header.click()
            page.fill("#filter-runs", "running")
            assert visible_rows(page, "runs") == [running.root.name]
            page.fill("#filter-runs", "")
            next_swap(page)  # the list is fetched again every 3 s
            assert visible_rows(page, "runs") == names[::-1]
            assert page.locator("table.runs th").nth(1).get_attribute("aria-sort") == "descending"

            # two runs ticked: the button opens them side by side; ticks survive the refresh
            button = page.locator("#compare-form button")
            assert button.is_disabled()
            page.check(f"input.pick[value='{finished.root.name}']")
            page.check(f"input.pick[value='{running.root.name}']")
            next_swap(page)
            assert page.locator("input.pick:checked").count() == 2 and button.is_enabled()
            page.screenshot(path=str(shots / "runs-compare.png"), full_page=True)
            button.click()
            page.wait_for_url(re.compile(r"/compare\?a="))
            head = page.locator("table.compare-head thead").inner_text()
            assert finished.root.name in head and running.root.name in head
            row = page.locator(f"table.compare tr[data-signature='{softmax_task.signature}']").inner_text()
            assert "1.92x" in row and "2.00x" in row  # A's confirmed finalist, B's search so far
            page.screenshot(path=str(shots / "compare.png"), full_page=True)

            # the running run's task: candidates sort numerically; "-" (no figure) stays last
            page.goto(f"{url}runs/{running.root.name}/tasks/{task}")
            speed = page.locator("table.nodes th", has_text="vs eager")
            speed.click()
            assert visible_rows(page, "nodes") == ["n0000", "n0001", "n0002", "n0003"]
            speed.click()
            assert visible_rows(page, "nodes") == ["n0001", "n0000", "n0002", "n0003"]
            page.select_option("#status-nodes", "!ok")
            assert visible_rows(page, "nodes") == ["n0002", "n0003"]
            page.fill("#filter-nodes", "expected ';'")  # text in the row: n0003's build error
            assert visible_rows(page, "nodes") == ["n0003"]
            page.fill("#filter-nodes", "")
            page.select_option("#status-nodes", "ok")
            assert visible_rows(page, "nodes") == ["n0001", "n0000"]

            # the tree: labelled nodes; buttons, the wheel and a drag change its transform
            assert page.locator("svg.tree g.node[data-node='n0001'] text.name").text_content() == "n0001"
            before = viewport_transform(page)
            page.locator(".tree-tools button[data-zoom='in']").click()
            zoomed = viewport_transform(page)
            assert zoomed != before and "scale(1.2500)" in zoomed
            box = page.locator("svg.tree").bounding_box()
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 60)
            page.mouse.wheel(0, -300)
            wheeled = viewport_transform(page)
            assert wheeled != zoomed and float(re.search(r"scale\(([\d.]+)\)", wheeled).group(1)) > 1.25
            page.mouse.down()
            page.mouse.move(box["x"] + box["width"] / 2 - 80, box["y"] + 100, steps=5)
            page.mouse.up()
            dragged = viewport_transform(page)
            assert dragged != wheeled and dragged.endswith(wheeled[wheeled.index("scale"):])
            assert "/nodes/" not in page.url  # a drag that ends on a node opens nothing

            # a new candidate: the event swaps the tree and table in again, sorted, filtered, zoomed as
            # they were, the filter box still holding its text and the focus
            page.fill("#filter-nodes", "builtin")
            write_node(running, task, "n0004", "n0001", ok(0.040))
            page.locator("table.nodes tr[data-node='n0004']").wait_for(state="attached", timeout=30_000)
            page.wait_for_function("document.querySelector('svg.tree g.viewport') !== null")
            assert visible_rows(page, "nodes") == ["n0004", "n0001", "n0000"]
            assert page.input_value("#status-nodes") == "ok" and viewport_transform(page) == dragged
            assert page.input_value("#filter-nodes") == "builtin"
            assert page.evaluate("document.activeElement.id") == "filter-nodes"
            page.locator(".tree-tools button[data-zoom='fit']").click()
            page.screenshot(path=str(shots / "task-sorted.png"), full_page=True)
            fitted = viewport_transform(page)
            page.reload()  # the tab keeps each page's sort, filters and view
            assert visible_rows(page, "nodes") == ["n0004", "n0001", "n0000"]
            assert page.input_value("#filter-nodes") == "builtin" and viewport_transform(page) == fitted

            # a node: its timings against eager's and torch.compile's
            page.goto(f"{url}runs/{finished.root.name}/tasks/{task}/nodes/n0001")
            plot = page.locator("svg.plot.timings").first
            assert plot.locator("g.spread").count() == 4  # candidate, eager, torch.compile, memory floor
            plot.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "node-timings.png"), full_page=True)
            browser.close()
    finally:
        ui.terminate()
        ui.wait(timeout=30)


def test_the_dashboard_starts_on_a_missing_folder_and_refuses_a_taken_port(tmp_path: Path):
    first = kernforge("ui", str(tmp_path / "not-yet"), "--port", "0")
    try:
        port = dashboard_url(first).rsplit(":", 1)[1].strip("/")
        time.sleep(1.0)
        second = subprocess.run([sys.executable, "-m", "kernforge", "ui", str(tmp_path), "--port", port],
                                cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")},
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 2 and second.stderr.startswith("error: cannot listen on")
        assert "Traceback" not in second.stderr
    finally:
        first.terminate()
        first.wait(timeout=30)
