"""PNG screenshots of the dashboard's four views on a finished run folder, in headless Chromium
(Debian's, through Playwright): the runs list, the run, its first task, and that task's winner
(or its first node with a parent).

    .venv/bin/python bench/ui_screenshots.py RUNS_DIR OUT_DIR [--prefix gpu-]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--prefix", default="")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ui = subprocess.Popen([sys.executable, "-m", "kernforge", "ui", str(args.runs), "--port", "0"],
                          stderr=subprocess.PIPE, text=True)
    try:
        url = re.search(r"http://\S+/", ui.stderr.readline()).group(0)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            shoot = lambda name: page.screenshot(path=str(args.out / f"{args.prefix}{name}.png"), full_page=True)
            page.goto(url)
            shoot("runs")
            page.locator("table.runs a").first.click()
            page.locator("#plots svg").first.wait_for()
            shoot("run")
            page.locator("table.hot a").first.click()
            page.locator("svg.tree").wait_for()
            shoot("task")
            best = page.locator("svg.tree g.node.best[data-node^='n'] a")
            target = best.last if best.count() else page.locator("svg.tree g.node[data-node^='n'] a").nth(1)
            target.click()
            page.locator(".code.source").wait_for()
            shoot("node")
            browser.close()
    finally:
        ui.terminate()
        ui.wait(timeout=30)


if __name__ == "__main__":
    main()
