"""`kernforge eval` and `kernforge show` (issue 21): check lines that say fail, a saved capture
reused, eval folders that `ls` lists as evaluations, --op with or without the overload, no op
named is one line naming the hot ops; show's title, candidate list, best path and typed JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import SOFTMAX_OP, TINY_MODEL, c_softmax_source, run_cli
from run_folders import write_run
from test_cli import assert_one_line_error
from typer.testing import CliRunner

from kernforge.cli import app
from kernforge.errors import UserError
from kernforge.eval_file import capture_key, find_capture, pick_task, write_origin
from kernforge.models import ModelOptions
from kernforge.report import eval_report

pytestmark = pytest.mark.integration

LABELS = ["real0", "fresh-normal", "fresh-large"]


def report_of(result: dict) -> str:
    return eval_report({"op": SOFTMAX_OP, "shape": "2x40x40", "dtype": "float32", "share": 0.25, "backend": "cpu",
                        "device": "cpu", "input_sets": LABELS, "eager_errors": [[1e-7]] * 3, "compiled": {},
                        "run_dir": "runs/x", "result": {"reason": "", "timing": None, **result}})


def check_lines(text: str) -> dict[str, str]:
    """label -> what its check line ends with: pass, fail, not judged or not reached."""
    return {line.split()[0]: line.rsplit(": ", 1)[-1] if ": " in line else line.split(None, 1)[1]
            for line in text.splitlines() if line.startswith("  ") and line.split()[0] in LABELS}


# ---------------------------------------------------------------- eval: check lines

def test_a_rejected_set_says_fail_and_the_sets_before_it_pass():
    text = report_of({"status": "wrong_result", "reason": "on fresh-large: output 0 ...",
                      "errors": [[1e-7], [1e-7], [0.9]], "set_verdicts": ["pass", "pass", "fail"]})
    assert check_lines(text) == {"real0": "pass", "fresh-normal": "pass", "fresh-large": "fail"}


def test_a_set_not_compared_is_not_said_to_pass():
    # a cheat found before any value was compared (an output aliasing an input, on real0)
    text = report_of({"status": "cheat", "errors": [], "set_verdicts": ["fail", "", ""]})
    assert check_lines(text) == {"real0": "fail", "fresh-normal": "not reached", "fresh-large": "not reached"}


def test_a_result_without_verdicts_passes_no_set_unless_it_passed():
    # results.json written before set_verdicts existed
    rejected = report_of({"status": "wrong_result", "errors": [[1e-7], [0.9]]})
    assert "pass" not in check_lines(rejected).values()
    passed = report_of({"status": "ok", "errors": [[1e-7]] * 3})
    assert set(check_lines(passed).values()) == {"pass"}


# ---------------------------------------------------------------- eval: --op, kf-op

@pytest.mark.parametrize("asked", ["aten::_softmax", "_softmax", SOFTMAX_OP, "_softmax-ad291574"])
def test_op_with_or_without_the_overload(softmax_capture, asked):
    store, capture, task = softmax_capture
    asked = task.signature if asked.endswith("ad291574") else asked
    assert pick_task(capture, store.capture_dir, asked, Path("k.c")).op == SOFTMAX_OP


def test_no_op_named_stops_naming_the_hottest_ops(softmax_capture):
    store, capture, _ = softmax_capture
    with pytest.raises(UserError) as e:
        pick_task(capture, store.capture_dir, "", Path("k.c"))
    message = str(e.value)
    assert "'k.c' names no op" in message and "kf-op: OP" in message and "--op OP" in message
    assert SOFTMAX_OP in message and "aten::bmm.default" in message and "\n" not in message


def test_an_op_the_model_does_not_run_names_the_hottest_ops(softmax_capture):
    store, capture, _ = softmax_capture
    for asked in ("aten::tanh", "aten::_softmax.out"):
        with pytest.raises(UserError, match=f"no compute op '{asked}'.*aten::_softmax.default"):
            pick_task(capture, store.capture_dir, asked, Path("k.c"))


# ---------------------------------------------------------------- eval: saved captures

def saved_capture(folder: Path, key: dict) -> Path:
    (folder / "profile.json").parent.mkdir(parents=True, exist_ok=True)
    (folder / "profile.json").write_text("{}")
    write_origin(folder, key)
    return folder


def test_a_matching_capture_is_found_and_a_changed_model_is_not(tmp_path: Path):
    model = tmp_path / "m.py"
    model.write_text("# version 1\n")
    key = capture_key(str(model), ModelOptions(), "cpu")
    runs = tmp_path / "runs"
    run = runs / "20261201-000000-m"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    saved_capture(run / "capture", key)
    assert find_capture(runs, key, None) == run / "capture"
    assert find_capture(runs, capture_key(str(model), ModelOptions(batch_size=3), "cpu"), None) is None
    assert find_capture(runs, capture_key(str(model), ModelOptions(), "cuda"), None) is None
    model.write_text("# version 2\n")
    assert find_capture(runs, capture_key(str(model), ModelOptions(), "cpu"), None) is None


def test_a_search_run_folder_capture_is_matched_by_its_config(tmp_path: Path):
    import torch

    model = tmp_path / "m.py"
    model.write_text("# model\n")
    runs = tmp_path / "runs"
    run = runs / "20261201-000000-m"
    (run / "capture").mkdir(parents=True)
    (run / "capture" / "profile.json").write_text("{}")
    (run / "config.json").write_text(json.dumps({"spec": str(model), "model": vars(ModelOptions()), "device": "cpu",
                                                 "versions": {"torch": torch.__version__}}))
    assert find_capture(runs, capture_key(str(model), ModelOptions(), "cpu"), None) == run / "capture"


def test_an_asked_capture_that_does_not_fit_is_one_line(tmp_path: Path):
    model = tmp_path / "m.py"
    model.write_text("# model\n")
    folder = saved_capture(tmp_path / "saved", capture_key(str(model), ModelOptions(dtype="bf16"), "cpu"))
    key = capture_key(str(model), ModelOptions(), "cpu")
    with pytest.raises(UserError, match="does not fit: it was made with model .*drop --capture"):
        find_capture(tmp_path / "runs", key, folder)
    with pytest.raises(UserError, match="holds no saved capture"):
        find_capture(tmp_path / "runs", key, tmp_path)


# ---------------------------------------------------------------- show (in this process)

def written_run(runs_dir: Path, task):
    """run_folders.write_run with its nodes in run.db too, as a search records them."""
    from run_folders import NODES

    from kernforge.records.proposal import Proposal

    store = write_run(runs_dir, task)
    store.db.add_tasks([(task.task_id, vars(task))])
    for node_id, parent, result, origin in NODES:
        proposal = Proposal(source="", rationale=f"rationale of {node_id}", origin=origin)
        store.record_node(task.task_id, node_id, parent, proposal, result, result.ok, ".c")
    store.db.set_task_state(task.task_id, "done")
    return store


def show(*args: str):
    result = CliRunner().invoke(app, ["show", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_show_titles_the_run_with_its_model(runs_dir: Path, softmax_task):
    store = written_run(runs_dir, softmax_task)
    config = json.loads((store.root / "config.json").read_text())
    config["model"] = vars(ModelOptions())  # a search's config: the options dict beside model_name
    (store.root / "config.json").write_text(json.dumps(config))
    (store.root / "summary.json").unlink()  # unfinished: the title line is plain text
    first = show(str(store.root)).splitlines()[0]
    assert first.startswith("tiny_softmax: cpu backend on cpu") and "{" not in first


def test_show_lists_time_speedup_status_rationale_path_and_the_best(runs_dir: Path, softmax_task):
    store = written_run(runs_dir, softmax_task)
    text = show(str(store.root))
    task_dir = store.root / "tasks" / softmax_task.task_id / "nodes"
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  n000")}
    winner = lines["n0001"]
    assert "0.0500 ms" in winner and "2.00x" in winner and " ok " in winner and "kept" in winner
    assert str(task_dir / "n0001" / "candidate.c") in winner and "rationale of n0001" in winner
    failed = lines["n0002"]
    assert "wrong_result" in failed and "rationale of n0002" in failed and "outside the tolerance" in failed
    (best,) = [line for line in text.splitlines() if line.strip().startswith("best")]
    assert "n0001" in best and "1.92x" in best and str(task_dir / "n0001" / "candidate.c") in best


def test_show_json_is_typed(runs_dir: Path, softmax_task):
    store = written_run(runs_dir, softmax_task)
    data = json.loads(show(str(store.root), "--json"))
    rows = {r["node"]: r for r in data["results"]}
    assert rows["n0001"]["p50_ms"] == pytest.approx(0.05) and rows["n0001"]["kept"] is True
    assert rows["n0001"]["speedup_vs_eager"] == pytest.approx(2.0) and rows["n0001"]["faster_than_eager"] is True
    assert rows["n0002"]["p50_ms"] is None and rows["n0002"]["kept"] is False and rows["n0000"]["parent"] is None
    assert rows["n0001"]["source_path"].endswith("nodes/n0001/candidate.c")
    assert data["model"] == "tiny_softmax"
    (best,) = data["best"]
    assert best["node"] == "n0001" and isinstance(best["speedup_vs_eager"], float)


# ---------------------------------------------------------------- eval end to end (processes)

BAD_ON_LARGE = c_softmax_source().replace("yr[c] /= s;", "{ yr[c] /= s; if (m > 30.0f) yr[c] = 0.0f; }")


def test_eval_end_to_end(tmp_path: Path, runs_dir: Path):
    kernel = tmp_path / "bad.c"
    kernel.write_text(BAD_ON_LARGE)
    spec = str(TINY_MODEL)
    # no op named: one line naming the hottest ops, non-zero exit; the capture is kept
    line = assert_one_line_error(run_cli("eval", spec, str(kernel), "--backend", "cpu", "--runs-dir", str(runs_dir)),
                                 "names no op", SOFTMAX_OP)
    assert "Traceback" not in line
    # --op without its overload; the capture of the first call is reused
    proc = run_cli("eval", spec, str(kernel), "--backend", "cpu", "--runs-dir", str(runs_dir), "--op", "aten::_softmax")
    assert proc.returncode == 1, proc.stderr
    verdicts = {line.split()[0]: line.rsplit(": ", 1)[-1] for line in proc.stdout.splitlines()
                if line.startswith("  real0 ") or line.startswith("  fresh-")}
    assert verdicts["real0"] == "pass" and verdicts["fresh-large"] == "fail", proc.stdout
    (first, second) = sorted(runs_dir.iterdir())
    config = json.loads((second / "config.json").read_text())
    assert config["kind"] == "eval" and config["capture_from"] == str(first / "capture")
    listing = run_cli("ls", "--runs-dir", str(runs_dir))
    assert "evaluation: cheat" in listing.stdout or "evaluation: wrong_result" in listing.stdout
    assert "incomplete" not in listing.stdout and "damaged" not in listing.stdout
    shown = run_cli("show", str(second))
    assert shown.returncode == 0 and shown.stdout.startswith("tiny_softmax: evaluation of bad.c")
    assert str(second / "tasks") in shown.stdout and "hand-written: bad.c" in shown.stdout


def test_eval_takes_a_profile_save_capture(tmp_path: Path, runs_dir: Path):
    save = tmp_path / "capture"
    assert run_cli("profile", str(TINY_MODEL), "--device", "cpu", "--save", str(save)).returncode == 0
    kernel = tmp_path / "good.c"
    kernel.write_text(f"/* kf-op: {SOFTMAX_OP} */\n" + c_softmax_source())
    proc = run_cli("eval", str(TINY_MODEL), str(kernel), "--backend", "cpu", "--runs-dir", str(runs_dir),
                   "--capture", str(save), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["capture_from"] == str(save) and report["result"]["status"] == "ok"
    assert set(report["result"]["set_verdicts"]) == {"pass"}
    mismatched = run_cli("eval", str(TINY_MODEL), str(kernel), "--backend", "cpu", "--runs-dir", str(runs_dir),
                         "--capture", str(save), "--dtype", "bf16")
    assert_one_line_error(mismatched, "does not fit", "drop --capture")
