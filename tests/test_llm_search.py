"""The llm and mixed proposers end to end: `kernforge optimize` against real loopback servers.

Each server (tests/llm_server.py) speaks one wire protocol, OpenAI's chat completions or
Anthropic's messages, and answers with scripted replies: correct kernels, wrong ones, code
that does not build, code that cheats, prose with no code, several blocks, replies slower
than the time-out, 429 and 500 answers. The searches run the cpu backend (gcc builds in
~0.1 s), so every candidate goes through the real scan, checks and timing.
"""

from __future__ import annotations

import json
import re
import sqlite3
import textwrap
from pathlib import Path

import pytest
from helpers import TINY_MODEL, c_softmax_source, run_cli
from llm_server import FakeLLM, Scripted

pytestmark = pytest.mark.integration

KEY = "sk-test-secret-7f3a9c"  # must never reach the run folder, the logs or the output

# ---------------------------------------------------------------- scripted replies

CORRECT = c_softmax_source()
WRONG = c_softmax_source().replace("yr[c] /= s;", "yr[c] /= 2.0f * s;")  # half of every output
BROKEN = c_softmax_source().replace("float m = -INFINITY;", "float m = -INFINITY")  # a missing ';'
CHEAT = "#include <stdio.h>\n" + c_softmax_source()  # I/O: the scan rejects it before any worker
ADVICE = json.dumps({"bottleneck": "one thread walks every row", "evidence": "2 cores, 1 used",
                     "next": "parallelise the rows with #pragma omp parallel for", "avoid": "stdio"})


def fenced(code: str, idea: str = "a plain two-pass softmax") -> str:
    return f"Idea: {idea}\n\n```c\n{code}```\n"


def several_blocks(code: str) -> str:
    """The kernel between a usage note in Python and a shell line: only the C block is the file."""
    return ("Idea: one pass for the max, one for the sum\n\nUse it like this:\n```python\nkf_forward(x)\n```\n"
            f"The kernel:\n```c\n{code}```\nBuild it with:\n```sh\ngcc -O3 -shared k.c\n```\n")


def is_analyst(body: dict) -> bool:
    system = body.get("system") or body["messages"][0]["content"]
    return "performance analyst" in str(system)


def prompt_of(body: dict) -> str:
    return body["messages"][-1]["content"] if isinstance(body["messages"][-1]["content"], str) \
        else body["messages"][-1]["content"][0]["text"]


def scripted(generator: list[Scripted]):
    """Analyst turns get ADVICE; generator turns take the next of `generator` (the last repeats)."""
    queue = list(generator)

    def reply(body: dict) -> Scripted:
        if is_analyst(body):
            return Scripted(text=ADVICE)
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return reply


SOFTMAX_MODEL = """
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(2, 40, 48)]


def get_init_inputs():
    return []
"""


@pytest.fixture
def softmax_model(tmp_path: Path) -> Path:
    """A model whose one hot compute op is a softmax (the llm proposer takes any op: a model with a
    matmul would have it searched first)."""
    path = tmp_path / "softmax_model.py"
    path.write_text(SOFTMAX_MODEL)
    return path


def optimize(llm: FakeLLM, runs: Path, *extra: str, model: Path, env: dict | None = None,
             protocol: str = "openai", timeout: float = 600):
    spec = ["--llm", llm.url, "--llm-model", "fake-coder"] if protocol == "openai" else ["--llm", "anthropic:fake-coder"]
    base = {"KERNFORGE_LLM_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": llm.url}
    return run_cli("optimize", str(model), "--backend", "cpu", "--runs-dir", str(runs), "--top-k", "1",
                   "--finalists", "1", "--no-apply", "--json", *spec, *extra, env={**base, **(env or {})},
                   timeout=timeout)


def run_folder(runs: Path) -> Path:
    (folder,) = [p for p in runs.iterdir() if p.is_dir()]
    return folder


def tree(folder: Path) -> list[tuple[str, str | None, str, str]]:
    """(node, parent, status, origin) per node, in id order, from the run's database."""
    with sqlite3.connect(folder / "run.db") as db:
        rows = db.execute("SELECT node, parent, status, params_json FROM nodes ORDER BY node").fetchall()
    return [(n, p, s, json.loads(params)["origin"]) for n, p, s, params in rows]


def assert_key_never_written(folder: Path, *outputs: str) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), f"the API key was written to {path}"
    for text in outputs:
        assert KEY not in text


# ---------------------------------------------------------------- the whole path, each protocol

@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_search_builds_the_tree_repairs_and_keeps_transcripts(tmp_path: Path, softmax_model: Path, protocol: str):
    """Greedy, one candidate at a time, so the script's order is the tree's:
    prose (no candidate) -> several blocks, broken -> its repair, correct -> (analyst) a cheat ->
    its repair, wrong -> its repair after a 429 and a 500: correct."""
    replies = [Scripted(text="I would write a softmax kernel, but first let me think about it."),
               Scripted(text=several_blocks(BROKEN)),
               Scripted(text=fenced(CORRECT, "fix the missing semicolon")),
               Scripted(text=fenced(CHEAT, "print a progress line")),
               Scripted(text=fenced(WRONG, "drop stdio")),
               Scripted(status=429, text="slow down", headers={"Retry-After": "1"}),
               Scripted(status=500, text="upstream exploded"),
               Scripted(text=fenced(CORRECT.replace("float s = 0.0f;", "float s = 0.0f; /* sum */"), "divide by s"))]
    with FakeLLM(protocol, scripted(replies), key=KEY) as llm:
        proc = optimize(llm, tmp_path / "runs", "--proposer", "llm", "--strategy", "greedy", "--iterations", "5",
                        model=softmax_model, protocol=protocol)
        requests = list(llm.completions)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = run_folder(tmp_path / "runs")
    assert tree(folder) == [("n0000", None, "compile_error", "llm"), ("n0001", "n0000", "ok", "llm"),
                            ("n0002", "n0001", "cheat", "llm"), ("n0003", "n0002", "wrong_result", "llm"),
                            ("n0004", "n0003", "ok", "llm")]
    # every node keeps both agents' exchanges; the analyst spoke only where a parent was timed
    transcripts = {n: json.loads((folder / "tasks").glob(f"*/nodes/{n}/transcript.json").__next__().read_text())
                   for n, *_ in tree(folder)}
    assert [e["agent"] for e in transcripts["n0002"]] == ["analyst", "generator"]
    assert all([e["agent"] for e in transcripts[n]] == ["generator"] for n in ("n0000", "n0001", "n0003", "n0004"))
    for exchanges in transcripts.values():
        for e in exchanges:
            assert e["system"] and e["messages"][0]["content"] and e["reply"]
            assert e["usage"]["prompt_tokens"] > 0 and e["usage"]["latency_s"] > 0
    # the repair prompt carries the compiler's words; the improvement prompt the analyst's advice
    repair = prompt_of(requests[2])
    assert "failed: compile_error" in repair and "expected" in repair and "Repair it" in repair
    improve = prompt_of(requests[4])
    assert "parallelise the rows" in improve and "n0001" in improve
    # the reply with no code is kept, with its transcript, as a proposal that did not come
    (failed,) = list(folder.glob("tasks/*/proposals/p*.json"))
    record = json.loads(failed.read_text())
    assert record["policy"] == "retry" and "no code block" in record["reason"]
    assert record["transcript"][0]["reply"].startswith("I would write")
    # the 429 and the 500 were retried by the client and the repair came: 8 generator requests
    # (6 answered, 2 errors) and 1 analyst's
    assert len(requests) == 9
    data = json.loads(proc.stdout)
    (row,) = data["tasks"]
    assert row["candidates"] == 5 and row["status_counts"] == {"compile_error": 1, "ok": 2, "cheat": 1,
                                                               "wrong_result": 1}
    assert data["llm"]["calls"] == 7 and data["llm"]["prompt_tokens"] > 0  # 6 generator turns, 1 analyst
    assert_key_never_written(folder, proc.stdout, proc.stderr)


# ---------------------------------------------------------------- MCTS, budgets, resume

@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_search_with_mcts_completes_and_stops_on_its_token_budget(tmp_path: Path, softmax_model: Path, protocol: str):
    """Every generator turn writes a correct, new kernel; each call is billed 1500 tokens, and the
    budget of 6000 ends the run after four calls: what is in flight finishes, the summary says why."""
    count = {"n": 0}

    def reply(body: dict) -> Scripted:
        if is_analyst(body):
            return Scripted(text=f"```json\n{ADVICE}\n```", prompt_tokens=1000, completion_tokens=500)
        count["n"] += 1
        return Scripted(text=fenced(CORRECT.replace("float s = 0.0f;", f"float s = 0.0f; /* v{count['n']} */")),
                        prompt_tokens=1000, completion_tokens=500)

    with FakeLLM(protocol, reply, key=KEY) as llm:
        proc = optimize(llm, tmp_path / "runs", "--proposer", "llm", "--iterations", "12",
                        "--llm-max-tokens", "6000", protocol=protocol, model=softmax_model)
        resumed = run_cli("optimize", "--resume", str(run_folder(tmp_path / "runs")), "--json",
                          env={"KERNFORGE_LLM_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": llm.url})
        calls = len(llm.completions)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = run_folder(tmp_path / "runs")
    data = json.loads(proc.stdout)
    (row,) = data["tasks"]
    assert 3 <= row["candidates"] < 12 and row["status_counts"] == {"ok": row["candidates"]}
    assert "budget of 6,000 tokens is spent" in row["stopped"] and "stopped early" in row["verdict"]
    assert data["llm"]["prompt_tokens"] + data["llm"]["completion_tokens"] <= 6000 + 2 * 1500  # in flight: 2 jobs
    assert (folder / "summary.json").is_file()
    assert all(origin == "llm" for *_, origin in tree(folder))
    transcripts = list(folder.glob("tasks/*/nodes/*/transcript.json"))
    assert len(transcripts) == row["candidates"]
    # a resumed run has nothing left to search and starts no call: its budget is the run's
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout)["llm"]["calls"] == data["llm"]["calls"]
    assert calls == data["llm"]["calls"]  # every completion the server answered, none after the resume
    assert_key_never_written(folder, proc.stdout, proc.stderr, resumed.stdout, resumed.stderr)


# ---------------------------------------------------------------- bad replies and bad endpoints

def test_replies_slower_than_the_time_out_end_the_task_cleanly(tmp_path: Path, softmax_model: Path, monkeypatch):
    """Every reply comes after the time-out: each proposal fails (a value, kept), is retried after
    a pause, and after MAX_FAILED_PROPOSALS in a row the task ends with its reason; nothing crashes."""
    from kernforge.propose import llm as llm_proposer
    from kernforge.search.engine import MAX_FAILED_PROPOSALS

    monkeypatch.setattr(llm_proposer, "RETRY_PAUSE_S", 0.5)  # 5 s by default
    with FakeLLM("openai", [Scripted(text=fenced(CORRECT), delay_s=1.5)], key=KEY) as llm:
        proc = optimize(llm, tmp_path / "runs", "--proposer", "llm", "--strategy", "greedy", "--iterations", "3",
                        "--llm-timeout", "0.3", "--llm-retries", "0", model=softmax_model)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = run_folder(tmp_path / "runs")
    (row,) = json.loads(proc.stdout)["tasks"]
    assert row["candidates"] == 0 and "proposals in a row failed" in row["stopped"] and "timeout" in row["stopped"]
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    failed = [e["time"] for e in events if e["kind"] == "no_proposal"]
    assert len(failed) == MAX_FAILED_PROPOSALS
    assert all(b - a >= 0.5 for a, b in zip(failed, failed[1:]))  # each retried after the pause
    assert_key_never_written(folder, proc.stdout, proc.stderr)


@pytest.mark.parametrize("case, words", [
    ("bad key", "was refused"),
    ("bad model", "is not served"),
    ("no server", "does not answer"),
])
def test_a_bad_endpoint_is_one_line_before_anything_runs(tmp_path: Path, case: str, words: str):
    with FakeLLM("openai", [Scripted(text=fenced(CORRECT))], key=KEY) as llm:
        url, model, key = llm.url, "fake-coder", KEY
        if case == "bad key":
            key = "sk-wrong"
        elif case == "bad model":
            model = "no-such-model"
        else:
            url = "http://127.0.0.1:9/v1"
        proc = run_cli("optimize", str(TINY_MODEL), "--backend", "cpu", "--runs-dir", str(tmp_path / "runs"),
                       "--proposer", "llm", "--llm", url, "--llm-model", model,
                       env={"KERNFORGE_LLM_API_KEY": key})
        completions = len(llm.completions)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert completions == 0 and not (tmp_path / "runs").exists()  # nothing captured, no tokens spent
    assert KEY not in proc.stderr and "sk-wrong" not in proc.stderr


# ---------------------------------------------------------------- mixed

ATAN_MODEL = """
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return torch.atan(x)  # no built-in family knows atan


def get_inputs():
    return [torch.randn(64, 300)]


def get_init_inputs():
    return []
"""

C_ATAN = textwrap.dedent("""\
    #include <math.h>
    {prelude}
    int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {{
        if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32) return 1;
        int64_t n = 1;
        for (int64_t d = 0; d < in[0].ndim; ++d) n *= in[0].sizes[d];
        const float *x = (const float *)in[0].data;
        float *y = (float *)out[0].data;
        #pragma omp parallel for
        for (int64_t i = 0; i < n; ++i) y[i] = atanf(x[i]);
        return 0;
    }}
    """)


def test_mixed_searches_an_op_no_template_knows(tmp_path: Path):
    from kernforge.backends.cpu import C_PRELUDE

    model = tmp_path / "atan_model.py"
    model.write_text(ATAN_MODEL)
    with FakeLLM("openai", scripted([Scripted(text=fenced(C_ATAN.format(prelude=C_PRELUDE), "atan"))]),
                 key=KEY) as llm:
        builtin = run_cli("optimize", str(model), "--backend", "cpu", "--runs-dir", str(tmp_path / "builtin"),
                          "--top-k", "1", "--no-apply", "--json", "--iterations", "1")
        proc = optimize(llm, tmp_path / "runs", "--proposer", "mixed", "--strategy", "greedy",
                        "--iterations", "2", model=model)
    assert builtin.returncode == 0, builtin.stderr[-2000:]
    skipped = json.loads(builtin.stdout)["skipped"]
    assert any(s["op"] == "aten::atan.default" and "no built-in template" in s["reason"] for s in skipped)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(proc.stdout)["tasks"]
    assert row["op"] == "aten::atan.default" and row["correct"] >= 1
    assert all(origin == "llm" for *_, origin in tree(run_folder(tmp_path / "runs")))


def test_mixed_uses_templates_where_a_family_knows_the_op_and_the_llm_for_rewrites(tmp_path: Path,
                                                                                   softmax_model: Path):
    with FakeLLM("openai", scripted([Scripted(text=fenced(CORRECT, "a rewrite"))]), key=KEY) as llm:
        proc = optimize(llm, tmp_path / "runs", "--proposer", "mixed", "--strategy", "greedy", "--iterations", "5",
                        model=softmax_model)
    assert proc.returncode == 0, proc.stderr[-3000:]
    origins = [origin for *_, origin in tree(run_folder(tmp_path / "runs"))]
    assert origins[0] == "builtin" and "llm" in origins and origins.count("builtin") >= 3


# ---------------------------------------------------------------- a hand-written node

def test_add_puts_a_hand_written_kernel_into_a_tasks_tree(finished_run, finished_run_copy: Path, tmp_path: Path):
    # the session's finished run (2 candidates, 1 finalist), copied: add changes it
    folder = finished_run_copy
    (task,) = [t["task"] for t in finished_run.data["tasks"]]
    kernel = tmp_path / "mine.c"
    kernel.write_text(c_softmax_source())
    proc = run_cli("add", str(folder), task, str(kernel), "--parent", "n0000", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    added = json.loads(proc.stdout)
    assert added["node"] == "n0002" and added["parent"] == "n0000" and added["result"]["status"] == "ok"
    assert added["confirmed"]["status"] == "ok"  # evaluated twice, as a finalist is
    assert tree(folder)[-1] == ("n0002", "n0000", "ok", "human")
    rows = (folder / "results.tsv").read_text().splitlines()
    assert len(rows) == 1 + 3 and "hand-written: mine.c" in rows[-1]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["tasks"][0]["candidates"] == 3
    wrong = tmp_path / "wrong.c"
    wrong.write_text(WRONG)
    bad = run_cli("add", str(folder), task, str(wrong))
    assert bad.returncode == 1 and "wrong_result" in bad.stdout
    missing = run_cli("add", str(folder), "t9-nope", str(kernel))
    assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) == 1
    assert re.search(r"has no task 't9-nope'", missing.stderr)
