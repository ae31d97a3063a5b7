"""The command line's manners (issue 21): --ops, Ctrl-C, what --resume says and extends, why a
search ended, options a spec does not read, one-line errors, --version, each command's examples."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import REPO_ROOT, SOFTMAX_OP, TINY_MODEL, run_cli, run_cli_subprocess, scripted_context

from kernforge.errors import UserError
from kernforge.store.db import RunDB

pytestmark = pytest.mark.integration

TINY_REL = str(TINY_MODEL.relative_to(REPO_ROOT))
# the cheapest search that still records nodes: no finalists timed again, no end-to-end apply
QUICK = ("--backend", "cpu", "--finalists", "0", "--no-apply")


def assert_one_line_error(proc, *words: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and "╭" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------- --ops (no workers)

def fake_capture(*ops: str):
    """A capture whose ranked compute ops are `ops`, signature '<name>-<rank>'."""
    profiles = [SimpleNamespace(op=op, signature=f"{op.split('::')[-1].split('.')[0]}-{rank}")
                for rank, op in enumerate(ops, 1)]
    return SimpleNamespace(ranked=lambda kinds: profiles)


CAPTURE = fake_capture("aten::addmm.default", "aten::_softmax.default", "aten::add.Tensor",
                       "aten::_softmax.default", "aten::add.Scalar")


@pytest.mark.parametrize("asked, chosen", [
    (["aten::_softmax.default"], {"_softmax-2", "_softmax-4"}),
    (["aten::_softmax"], {"_softmax-2", "_softmax-4"}),
    (["_softmax"], {"_softmax-2", "_softmax-4"}),
    (["add"], {"add-3", "add-5"}),
    (["add.Scalar"], {"add-5"}),
    (["_softmax-4"], {"_softmax-4"}),
    (["1", "4"], {"addmm-1", "_softmax-4"}),
])
def test_ops_names_an_op_with_or_without_overload_a_signature_or_a_rank(asked, chosen):
    from kernforge.optimize import asked_signatures

    assert asked_signatures(CAPTURE, asked) == chosen


@pytest.mark.parametrize("asked", [["softmax"], ["9"], ["0"], ["aten::add.out"]])
def test_an_unknown_op_is_one_line_naming_what_the_model_runs(asked):
    from kernforge.optimize import asked_signatures

    with pytest.raises(UserError) as e:
        asked_signatures(CAPTURE, asked)
    message = str(e.value)
    assert "\n" not in message and f"'{asked[0]}'" in message
    assert "aten::_softmax.default" in message and "ranks 1-5" in message


def test_no_ops_means_the_hottest():
    from kernforge.optimize import asked_signatures

    assert asked_signatures(CAPTURE, []) is None


# ---------------------------------------------------------------- why a search ended (no workers)

def scripted_search(supply: int, iterations: int):
    """MCTS over a proposer with `supply` candidates, all correct; returns its context."""
    from kernforge.records.evaluation import EvalResult
    from kernforge.records.proposal import Proposal
    from kernforge.search import get_strategy
    from kernforge.records.nodes import Node

    made = {"n": 0}

    def propose(parent):
        if made["n"] >= supply:
            return None
        made["n"] += 1
        return Proposal(source=f"candidate {made['n']}", rationale="scripted")

    def evaluate(proposal, parent, keep_if):
        node = Node(node_id=f"n{made['n']}", parent_id=parent.node_id if parent else None, proposal=proposal,
                    result=EvalResult(status="ok"))
        node.kept = keep_if(node)
        return node

    ctx = scripted_context(propose, evaluate, iterations)
    get_strategy("mcts").run(ctx)
    return ctx


def test_a_search_that_spends_its_budget_says_so():
    from kernforge.search.engine import search_ended

    assert search_ended(scripted_search(supply=5, iterations=3), "builtin") == "budget spent (3 of 3 iterations)"


def test_a_search_that_ends_early_says_why():
    from kernforge.search.engine import search_ended

    ended = search_ended(scripted_search(supply=2, iterations=3), "builtin")
    assert ended.startswith("nothing new to try") and "(2 of 3 iterations)" in ended
    ctx = scripted_search(supply=5, iterations=3)
    ctx.stopped = "the LLM budget is spent"
    assert search_ended(ctx, "llm").startswith("the LLM budget is spent")


# ---------------------------------------------------------------- options a spec does not read, examples

@pytest.mark.parametrize("spec, reads", [
    (TINY_REL, ()), ("example:attention", ("batch_size", "seq_len", "scale")),
    ("example:resnet50", ("batch_size", "resolution", "scale")), ("torchvision:resnet18", ("batch_size", "resolution")),
    ("hf:gemma3_text_small", ("batch_size", "seq_len", "attention")),
    ("example:gemma_decoder", ("batch_size", "seq_len", "attention", "scale")), ("mypkg.models:build", None),
])
def test_the_model_options_each_spec_reads(spec, reads):
    from kernforge.models.loader import options_read

    assert options_read(spec) == reads


def test_each_command_ends_its_help_with_its_own_examples():
    import typer

    from kernforge.cli import app

    commands = typer.main.get_command(app).commands
    assert {"optimize", "profile", "eval", "add", "ls", "show", "apply", "ui", "report", "export"} <= set(commands)
    for name, command in commands.items():
        lines = [line.strip() for line in command.epilog.splitlines() if line.strip().startswith("kernforge")]
        assert lines and all(line.startswith(f"kernforge {name}") for line in lines), (name, lines)
    assert len([ln for ln in commands["optimize"].epilog.splitlines() if "kernforge optimize" in ln]) >= 5


# ---------------------------------------------------------------- one-line errors (in this process), --version

@pytest.mark.parametrize("args, words", [
    (("optimize", TINY_REL, "--iterations", "0"), ("--iterations", "kernforge optimize --help")),
    (("optimize", TINY_REL, "--top-k", "many"), ("--top-k",)),
    (("optimize", TINY_REL, "--no-such-option"), ("--no-such-option",)),
    (("profile",), ("Missing argument",)),
    (("no-such-command",), ("no-such-command",)),
])
def test_every_bad_value_is_one_line(args, words):
    assert_one_line_error(run_cli(*args), *words)


def test_version():
    from kernforge import __version__

    proc = run_cli_subprocess("--version")  # the real entry point: nothing else on stdout
    assert proc.returncode == 0 and proc.stdout.strip() == f"kernforge {__version__}"


def test_an_option_the_spec_does_not_read_is_one_warning_line(tmp_path):
    proc = run_cli("profile", TINY_REL, "--seq-len", "64", "--scale", "small", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (warning,) = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert "--seq-len, --scale" in warning and "ignored" in warning
    quiet = run_cli("profile", TINY_REL, "--dtype", "fp32", "--json")
    assert "warning:" not in quiet.stderr


# ---------------------------------------------------------------- searches (workers)

def test_ops_searches_only_the_named_op_and_refuses_an_unknown_one(runs_dir):
    proc = run_cli("optimize", TINY_REL, *QUICK, "--iterations", "1", "--ops", "aten::_softmax",
                   "--runs-dir", str(runs_dir), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert [t["op"] for t in data["tasks"]] == [SOFTMAX_OP]
    assert data["tasks"][0]["stopped"] == "budget spent (1 of 1 iterations)"
    proc = run_cli("optimize", TINY_REL, *QUICK, "--ops", "softmaxx", "--runs-dir", str(runs_dir / "bad"), "--json")
    line = assert_one_line_error(proc, "'softmaxx'", SOFTMAX_OP)
    assert "aten::bmm.default" in line
    assert not any((runs_dir / "bad").iterdir())  # no run folder left with nothing chosen


def recorded_nodes(run_dirs: list[Path]) -> int:
    import sqlite3

    try:
        with sqlite3.connect(run_dirs[0] / "run.db", timeout=1.0) as conn:
            return conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0]
    except (sqlite3.Error, IndexError):
        return 0


def interrupt_after(runs_dir: Path, nodes: int, iterations: int) -> subprocess.CompletedProcess:
    """Start a search and Ctrl-C it (SIGINT to its process group, as a terminal does) once `nodes`
    nodes are recorded. The search gets SIGINT's default action, as from a shell on a terminal:
    pytest started in the background (`cmd &` without job control, nohup) hands its children
    SIGINT ignored, and a Python started so never sees a KeyboardInterrupt."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.Popen([sys.executable, "-m", "kernforge", "optimize", TINY_REL, *QUICK, "--ops", "_softmax",
                             "--iterations", str(iterations), "--runs-dir", str(runs_dir)],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while recorded_nodes(list(runs_dir.glob("*"))) < nodes:
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        assert time.monotonic() < deadline, "the search recorded too few nodes in time"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_ctrl_c_says_how_to_resume_and_resume_extends_the_budget(runs_dir):
    interrupted = interrupt_after(runs_dir, nodes=1, iterations=2)
    assert interrupted.returncode == 130, interrupted.stderr[-2000:]
    (run_dir,) = runs_dir.iterdir()
    last = interrupted.stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted:") and last.endswith(f"kernforge optimize --resume {run_dir}")
    assert "Traceback" not in interrupted.stderr
    before = {n.node: n.result for n in RunDB(run_dir / "run.db").nodes()}
    assert len(before) >= 1

    # the exact command it printed, with a larger budget: the interrupted task goes on to 3
    command = last.split("continue with: ", 1)[1].split()[1:]
    proc = run_cli(*command, "--iterations", "3", "--top-k", "5", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ignored: --top-k" in proc.stderr
    assert re.search(r"resuming .*3 iterations per task, raised from 2; 1 of 1 tasks to search", proc.stderr)
    (task,) = json.loads(proc.stdout)["tasks"]
    assert task["candidates"] == 3 and task["stopped"] == "budget spent (3 of 3 iterations)"
    nodes = {n.node: n.result for n in RunDB(run_dir / "run.db").nodes()}
    assert {k: nodes[k] for k in before} == before  # nothing recorded before Ctrl-C was lost or redone

    # a finished run: a larger budget searches on from its tree; none says so and searches nothing
    proc = run_cli("optimize", "--resume", str(run_dir), "--iterations", "4", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "raised from 3" in proc.stderr and json.loads(proc.stdout)["tasks"][0]["candidates"] == 4
    assert json.loads((run_dir / "config.json").read_text())["iterations"] == 4
    proc = run_cli("optimize", "--resume", str(run_dir), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "is finished" in proc.stderr and "nothing left to search" in proc.stderr
    (task,) = json.loads(proc.stdout)["tasks"]
    assert task["candidates"] == 4 and task["stopped"] == "budget spent (4 of 4 iterations)"
    assert len(RunDB(run_dir / "run.db").nodes()) == 4
    table = run_cli("optimize", "--resume", str(run_dir))
    assert f"{SOFTMAX_OP}: search ended, budget spent (4 of 4 iterations)" in table.stdout, table.stdout[-2000:]
