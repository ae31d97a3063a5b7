"""The dashboard in headless Chromium while a real CPU search writes its run folder: new nodes
appear on the task page without a reload, a click opens a node with its source and diff.

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

pytestmark = pytest.mark.browser

playwright = pytest.importorskip("playwright.sync_api")

SEARCH_ITERATIONS = 10  # ~5 s a candidate on a 2-core machine: the page is open for most of them


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
