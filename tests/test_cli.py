"""The command line, run as a user runs it: kernforge.cli.main in this process (helpers.run_cli), and
`python -m kernforge ...` in a fresh process where the entry point itself is the point (--help, a
one-line user error, Triton's interpreter set for the whole process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kernforge.phases import PHASES
from kernforge.records import EndToEnd
from helpers import REPO_ROOT, SOFTMAX_OP, TINY_MODEL, run_cli, run_cli_subprocess

pytestmark = pytest.mark.integration

TINY_REL = str(TINY_MODEL.relative_to(REPO_ROOT))  # tests/models/tiny_softmax.py


def assert_one_line_error(proc, *words: str) -> str:
    """Exit status 2, exactly one line on stderr starting with 'error:', no traceback anywhere."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    for word in words:
        assert word in lines[0]
    return lines[0]


# ---------------------------------------------------------------- help

def test_help_shows_examples():
    proc = run_cli_subprocess("--help")  # the real entry point, as a user's shell starts it
    assert proc.returncode == 0, proc.stderr
    assert "Examples" in proc.stdout
    assert "kernforge optimize example:attention" in proc.stdout
    for command in ("optimize", "profile", "ls", "show"):
        assert command in proc.stdout


def test_optimize_help_shows_examples_and_options():
    proc = run_cli("optimize", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Examples" in proc.stdout
    for option in ("--backend", "--iterations", "--top-k", "--runs-dir", "--json"):
        assert option in proc.stdout


# ---------------------------------------------------------------- user errors

def test_missing_model_file(runs_dir: Path):
    # a fresh process: one line on stderr, with whatever importing torch and the model loader print
    proc = run_cli_subprocess("optimize", "no/such/model.py", "--runs-dir", str(runs_dir))
    assert_one_line_error(proc, "not found")
    assert list(runs_dir.iterdir()) == []


def test_file_without_model(write_model, runs_dir: Path):
    path = write_model("no_model", """
        import torch

        def get_inputs():
            return [torch.ones(2)]
    """)
    proc = run_cli("optimize", str(path), "--backend", "cpu", "--runs-dir", str(runs_dir))
    assert_one_line_error(proc, "has no class Model")


def test_model_whose_forward_raises(write_model, runs_dir: Path):
    path = write_model("bad_forward", """
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                raise ValueError("shapes do not match\\nmore detail on a second line")

        def get_inputs():
            return [torch.ones(2)]
    """)
    proc = run_cli("optimize", str(path), "--backend", "cpu", "--runs-dir", str(runs_dir))
    assert_one_line_error(proc, "forward raised ValueError: shapes do not match")
    assert list(runs_dir.iterdir()) == []  # reported before a run folder is made


def test_unknown_backend(runs_dir: Path):
    proc = run_cli("optimize", TINY_REL, "--backend", "nosuch", "--runs-dir", str(runs_dir))
    assert_one_line_error(proc, "unknown backend 'nosuch'", "cpu", "triton")


def test_triton_backend_without_gpu_or_interpreter(runs_dir: Path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the message given when no GPU is visible")
    proc = run_cli("optimize", TINY_REL, "--backend", "triton", "--runs-dir", str(runs_dir))
    assert_one_line_error(proc, "needs an NVIDIA GPU", "TRITON_INTERPRET=1")


def test_unknown_zoo_model_is_one_line():
    assert_one_line_error(run_cli("profile", "torchvision:nosuchnet"), "torchvision has no model 'nosuchnet'")


def test_show_unknown_run(runs_dir: Path):
    proc = run_cli("show", "nosuchrun", "--runs-dir", str(runs_dir))
    assert_one_line_error(proc, "no run folder 'nosuchrun'")


# ---------------------------------------------------------------- profile

def test_profile_json_lists_softmax():
    proc = run_cli("profile", TINY_REL, "--device", "cpu", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # nothing else on stdout
    assert data["model"] == "tiny_softmax" and data["device"] == "cpu"
    ops = [p["op"] for p in data["profiles"]]
    assert SOFTMAX_OP in ops and "aten::bmm.default" in ops
    assert sum(p["share"] for p in data["profiles"]) == pytest.approx(1.0, abs=1e-6)
    assert all(p["samples"] == [] for p in data["profiles"])  # profile keeps no inputs


def test_profile_table():
    proc = run_cli("profile", TINY_REL, "--limit", "3")
    assert proc.returncode == 0, proc.stderr
    assert "tiny_softmax on cpu" in proc.stdout
    assert "share" in proc.stdout and "if 2x faster" in proc.stdout
    assert "captured op time is" in proc.stdout  # the coverage line
    assert "of the wall time of a plain forward" in proc.stdout and "x a plain one" in proc.stdout


# ---------------------------------------------------------------- optimize, ls, show

@pytest.fixture
def optimized(finished_run):
    """The session's `kernforge optimize TINY --backend cpu --iterations 2 ... --json` (conftest)."""
    return finished_run.runs, finished_run


def test_optimize_json(optimized):
    runs, proc = optimized
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)  # progress goes nowhere with --json: stdout is the JSON alone
    assert data["model"] == "tiny_softmax"
    assert (data["backend"], data["device"]) == ("cpu", "cpu")
    run_dir = Path(data["run_dir"])
    assert run_dir.parent == runs and (run_dir / "summary.json").is_file()
    (task,) = [t for t in data["tasks"] if t["op"] == SOFTMAX_OP]
    assert task["candidates"] == 2
    assert task["correct"] == 2 and task["status_counts"] == {"ok": 2}
    assert task["shape"] == "2x40x40" and task["dtype"] == "float32"
    assert task["eager_p50_ms"] > 0
    assert task["verdict"] in ("faster kernel found", "no faster kernel found")
    if task["verdict"] == "no faster kernel found":
        assert task["best_speedup_vs_eager"] == 1.0 and task["best_node"] is None
    skipped = {s["op"]: s["reason"] for s in data["skipped"]}
    assert skipped.get("aten::bmm.default") == "no built-in template for aten::bmm.default"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["tasks"] == data["tasks"]
    # where the time went, every phase the run went through timed; apply's own added by apply
    phases = summary["phases"]
    assert list(phases) == list(PHASES)
    for phase in ("load", "capture", "baselines", "oracle", "candidates", "finalists", "apply"):
        assert phases[phase] > 0, phase
    assert phases["compile_peers"] < 0.05  # a CPU run compiles no peers by default
    config = json.loads((run_dir / "config.json").read_text())
    assert config["iterations"] == 2 and config["resolved_backend"] == "cpu"


def test_ls_lists_the_run(optimized):
    runs, proc = optimized
    run_name = Path(json.loads(proc.stdout)["run_dir"]).name
    listing = run_cli("ls", "--runs-dir", str(runs))
    assert listing.returncode == 0, listing.stderr
    assert run_name in listing.stdout
    assert "tiny_softmax" in listing.stdout and "finished" in listing.stdout
    by_env = run_cli("ls", env={"KERNFORGE_RUNS_DIR": str(runs)})
    assert by_env.returncode == 0 and run_name in by_env.stdout


def test_ls_without_runs(runs_dir: Path):
    proc = run_cli("ls", "--runs-dir", str(runs_dir))
    assert proc.returncode == 0
    assert f"no runs in {runs_dir}" in proc.stdout


def test_show_json(optimized):
    runs, proc = optimized
    run_dir = Path(json.loads(proc.stdout)["run_dir"])
    shown = run_cli("show", run_dir.name, "--runs-dir", str(runs), "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["config"]["model_name"] == "tiny_softmax"
    assert data["summary"]["tasks"][0]["op"] == SOFTMAX_OP
    assert [r["node"] for r in data["results"]] == ["n0000", "n0001"]
    assert all(r["status"] == "ok" for r in data["results"])
    # the run folder's own path works as well as its name
    by_path = run_cli("show", str(run_dir), "--json")
    assert by_path.returncode == 0 and json.loads(by_path.stdout) == data


def test_show_table(optimized):
    _, proc = optimized
    run_dir = Path(json.loads(proc.stdout)["run_dir"])
    shown = run_cli("show", str(run_dir))
    assert shown.returncode == 0, shown.stderr
    assert SOFTMAX_OP in shown.stdout
    assert "n0000" in shown.stdout and "n0001" in shown.stdout
    assert "time by phase" in shown.stdout and "candidates" in shown.stdout
    assert f"run folder: {run_dir}" in shown.stdout


def test_optimize_with_triton_under_the_interpreter(runs_dir: Path):
    # a fresh process: TRITON_INTERPRET is set before anything imports triton, as a user sets it
    proc = run_cli_subprocess("optimize", TINY_REL, "--backend", "triton", "--iterations", "1", "--runs-dir",
                              str(runs_dir), "--json", env={"TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["backend"], data["device"]) == ("triton", "cpu")
    (task,) = [t for t in data["tasks"] if t["op"] == SOFTMAX_OP]
    assert task["candidates"] == 1 and task["correct"] == 1
    assert task["verdict"] == "correct kernel found (interpreter: not timed)"
    assert task["best_speedup_vs_eager"] is None  # never timed


def test_optimize_a_model_with_nothing_to_search(write_model, runs_dir: Path):
    path = write_model("sort_only", """
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                return torch.sort(x, 1).values

        def get_inputs():
            return [torch.randn(16, 16)]
    """)
    proc = run_cli("optimize", str(path), "--backend", "cpu", "--iterations", "1",
                   "--runs-dir", str(runs_dir))
    assert proc.returncode == 0, proc.stderr
    assert "aten::sort.default" in proc.stdout
    assert "nothing was searched" in proc.stdout
    (run_dir,) = runs_dir.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["tasks"] == []
    assert [s["op"] for s in summary["skipped"]] == ["aten::sort.default"]


# ---------------------------------------------------------------- profile: options, saving, zoo

@pytest.mark.parametrize(("option", "words"), [
    (["--include", "compute,nosuch"],
     ["unknown op kind nosuch in --include", "compute, view, copy"]),
    (["--dtype", "fp8"], ["unknown dtype 'fp8'", "fp32, bf16, fp16"]),
    (["--scale", "huge"], ["unknown scale 'huge'"]),
])
def test_profile_bad_option_is_one_line(option, words):
    assert_one_line_error(run_cli("profile", TINY_REL, "--device", "cpu", *option), *words)


def test_profile_save_writes_the_capture(tmp_path: Path):
    save = tmp_path / "capture"
    proc = run_cli("profile", TINY_REL, "--device", "cpu", "--save", str(save))
    assert proc.returncode == 0, proc.stderr
    assert "captured op time is" in proc.stdout
    profile = json.loads((save / "profile.json").read_text())
    assert profile["model"] == "tiny_softmax"
    (softmax,) = [p for p in profile["profiles"] if p["op"] == SOFTMAX_OP]
    assert softmax["samples"] and all((save / rel).is_file() for rel in softmax["samples"])
    assert list((save / "samples").glob("*/*.pt"))
    calls = [json.loads(line) for line in (save / "calls.jsonl").read_text().splitlines()]
    ops = [c["op"] for c in calls]
    assert SOFTMAX_OP in ops and "aten::bmm.default" in ops
    (softmax_call,) = [c for c in calls if c["op"] == SOFTMAX_OP]
    (producer,) = softmax_call["producers"]
    while calls[producer]["kind"] == "view":  # matmul's bmm is reshaped back by a view
        (producer,) = [i for i in calls[producer]["producers"] if i is not None]
    assert calls[producer]["op"] == "aten::bmm.default"  # the scores come from the first bmm
    assert producer < softmax_call["index"]


def test_profile_dtype_bf16():
    proc = run_cli("profile", TINY_REL, "--device", "cpu", "--dtype", "bf16", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    (softmax,) = [p for p in data["profiles"] if p["op"] == SOFTMAX_OP]
    assert softmax["args"][0]["dtype"] == "torch.bfloat16"


def test_profile_gemma_decoder_json():
    proc = run_cli("profile", "example:gemma_decoder", "--device", "cpu", "--scale", "small",
                   "--seq-len", "16", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["model"] == "gemma_decoder"
    assert data["coverage"] == pytest.approx(data["total_time_us"] / data["measured_total_us"])
    assert data["overhead"] == pytest.approx(data["captured_ms"] / data["forward_ms"])
    assert data["coverage"] > 0 and data["overhead"] > 0
    softmaxes = [p for p in data["profiles"] if p["op"] == SOFTMAX_OP]
    assert any(p["args"][0]["shape"] == [1, 4, 16, 16] and "self_attn" in p["module"]
               for p in softmaxes)
    # 'aten::_softmax(Tensor self, ...' : the default overload has no name in its schema
    for p in data["profiles"]:
        assert p["schema"].startswith(p["op"].removesuffix(".default") + "("), p["schema"]


def test_optimize_applies_the_model_options(runs_dir: Path):
    # --dtype reaches the model: the searched softmax is the bf16 one
    proc = run_cli("optimize", str(TINY_MODEL), "--backend", "cpu", "--iterations", "1", "--dtype", "bf16",
                   "--runs-dir", str(runs_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    (task,) = [t for t in data["tasks"] if t["op"] == SOFTMAX_OP]
    assert task["dtype"] == "bfloat16"
    config = json.loads(next(runs_dir.iterdir()).joinpath("config.json").read_text())
    assert config["model_name"] == "tiny_softmax" and config["model"]["dtype"] == "bf16" and config["resolved_backend"] == "cpu"


def test_the_finalists_default_is_the_engines():
    import inspect

    from kernforge.cli.search import optimize
    from kernforge.search.engine import FINALISTS

    assert inspect.signature(optimize).parameters["finalists"].default.default == FINALISTS


def test_a_damaged_run_folder_is_listed_as_damaged_and_shown_in_one_line(runs_dir: Path):
    broken = runs_dir / "20261201-000000-broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # no run.db: killed before its database was made
    listing = run_cli("ls", "--runs-dir", str(runs_dir))
    assert listing.returncode == 0 and "damaged" in listing.stdout
    assert_one_line_error(run_cli("show", str(broken)), "is not a kernforge run folder")


def test_a_time_budget_too_small_to_search_says_so_per_task(runs_dir: Path):
    proc = run_cli("optimize", TINY_REL, "--backend", "cpu", "--time-budget", "1s", "--no-apply", "--json",
                   "--runs-dir", str(runs_dir))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    (task,) = data["tasks"]
    assert task["candidates"] == 0
    assert task["stopped"].startswith("not started: the time budget had 0 s left for it")
    assert data["phases"]["capture"] > 0 and data["phases"]["candidates"] == 0


def test_a_time_budget_that_is_no_duration_is_one_line():
    proc = run_cli("optimize", TINY_REL, "--backend", "cpu", "--time-budget", "an hour")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--time-budget 'an hour' is not a duration; write it like 90s, 30m, 2h or 1h30m" in proc.stderr


@pytest.mark.parametrize(("limit", "words"), [("banana", "--time-limit 'banana' is not a duration"),
                                              ("0s", "--time-limit '0s' must be more than nothing")])
def test_an_apply_time_limit_that_is_no_duration_is_one_line(runs_dir: Path, limit, words):
    # said before the run folder is looked for: there is none here
    assert_one_line_error(run_cli("apply", "no-such-run", "--runs-dir", str(runs_dir), "--time-limit", limit), words)


def test_a_time_budget_hands_apply_what_is_left_of_it(runs_dir: Path):
    proc = run_cli("optimize", TINY_REL, "--backend", "cpu", "--time-budget", "90s", "--iterations", "1",
                   "--finalists", "0", "--json", "--runs-dir", str(runs_dir))
    assert proc.returncode == 0, proc.stderr
    applied = EndToEnd.from_json(json.loads(proc.stdout)["end_to_end"])
    assert not applied.error, applied.error
    assert 0 <= applied.time_limit_s <= 90  # 0: the search ran past its part
    assert all(m.rounds >= 2 for m in applied.rounds)  # none where no kernel was there to time
