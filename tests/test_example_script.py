"""scripts/optimize_example.sh (README command 1): a four-minute time budget unless the arguments
give a budget or an iteration count of their own. Run against a stand-in kernforge and setup."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import REPO_ROOT

pytestmark = pytest.mark.integration


@pytest.fixture
def script(tmp_path: Path) -> Path:
    """The script in a copy of the repository's layout whose setup does nothing and whose
    kernforge prints its arguments."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO_ROOT / "scripts" / "optimize_example.sh", tmp_path / "scripts")
    (tmp_path / "scripts" / "setup.sh").write_text("exit 0\n")
    kernforge = tmp_path / ".venv" / "bin" / "kernforge"
    kernforge.parent.mkdir(parents=True)
    kernforge.write_text('#!/usr/bin/env bash\necho "$@"\n')
    kernforge.chmod(0o755)
    return tmp_path / "scripts" / "optimize_example.sh"


def arguments(script: Path, *args: str) -> str:
    proc = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_plain_run_gets_a_four_minute_budget(script):
    assert arguments(script) == "optimize example:attention --proposer builtin --time-budget 4m"
    assert arguments(script, "--json").endswith("--time-budget 4m --json")


@pytest.mark.parametrize("given", [["--iterations", "20"], ["--iterations=20"], ["--time-budget", "10m"],
                                   ["--time-budget=10m"]])
def test_a_budget_or_iterations_the_user_gives_replace_it(script, given):
    assert arguments(script, *given) == " ".join(["optimize example:attention --proposer builtin", *given])
