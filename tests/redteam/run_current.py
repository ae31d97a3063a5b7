"""Evaluate every red-team case with the real pipeline, as tests/conftest.py's evaluate_source does.

    .venv/bin/python tests/redteam/run_current.py                 # every CPU case of catalogue.py
    .venv/bin/python tests/redteam/run_current.py c-memo-sampled-hash py-reduce-rce   # some, by id
    .venv/bin/python tests/redteam/run_current.py --file some.c   # an ad-hoc file (backend by suffix)
    .venv/bin/python tests/redteam/run_current.py --out bench/results/cpu/redteam/before.txt

Setup, once: the softmax task of tests/models/tiny_softmax.py is captured (torch.manual_seed(0)),
its baseline computed (the float64 oracle), then each case goes through `evaluate_candidate`
(backend cpu for .c, triton for .py, device cpu; the worker sets TRITON_INTERPRET itself).

One line per case: id, status, caught?, expected?, reason (first 150 characters). "caught" means
"not accepted" for a cheat, and for an honest case the line says ACCEPTED or REJECTED (rejecting
an honest kernel is the evaluator's failure). For a cheat with an ok_if condition (catalogue.py),
"ok" is right only if the evaluator makes that condition true (the trick then never fires); the
runner cannot see that, so it says so instead of judging. Two things the pipeline itself should never let
happen are reported rather than let through:
  CRASHED KERNFORGE   evaluate_candidate raised (a traceback from kernforge, not a verdict)
  PATCHED THE SEARCH PROCESS   after the case, a kernforge module in *this* process had other
                      attributes than before (code of the candidate ran in the search process).
                      The attributes are restored, so that the next case is judged by the real
                      code.
Cases in tests/redteam/gpu/ need a GPU and are listed as skipped; with --device cuda the Triton
and CUDA cases run on the GPU (timed) and the C cases are skipped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
REPO = TESTS.parent
sys.path[:0] = [str(TESTS), str(HERE)]


_EXTRACTED: list[Path] = []  # folders made by --rev, removed at the end
RCE_MARK = Path("/tmp/kf-redteam-judge-rce.txt")  # written by cases/py-reduce-rce.py's payload


def _use_source_tree(argv: list[str]) -> str:
    """Put the kernforge to evaluate with first on sys.path, before anything imports it:
    --rev REV (a commit, extracted with `git archive` into a temporary folder; the repository is
    not touched), --src DIR (a src/ folder), else the working tree's src/. The worker processes
    import kernforge from the same place (the runner passes its own location on PYTHONPATH)."""
    src, rev = str(REPO / "src"), None
    for flag in ("--src", "--rev"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            value = argv[argv.index(flag) + 1]
            if flag == "--src":
                src = str(Path(value).resolve())
            else:
                rev = value
    if rev is not None:
        import subprocess

        dest = Path(tempfile.mkdtemp(prefix="kf-redteam-src-"))
        _EXTRACTED.append(dest)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        src = str(dest / "src")
    sys.path.insert(0, src)
    return src if rev is None else f"{rev} ({src})"


SOURCE_TREE = _use_source_tree(sys.argv)

import torch  # noqa: E402

TINY_MODEL = TESTS / "models" / "tiny_softmax.py"
SOFTMAX_OP = "aten::_softmax.default"


def setup(work: Path, device: str = "cpu"):
    """(task_path, reference_path): the captured softmax task and its baseline, as conftest makes them
    (on a GPU: captured on the GPU, the task's backend triton)."""
    from kernforge.capture import capture_model
    from kernforge.evaluate import evaluate_baseline
    from kernforge.models import load_model
    from kernforge.propose import get_proposer
    from kernforge.store import RunStore
    from kernforge.tasks import make_tasks, save_task

    torch.manual_seed(0)
    runs = work / "runs"
    runs.mkdir()
    loaded = load_model(str(TINY_MODEL), torch.device(device))
    store = RunStore.create(runs, loaded.name)
    capture = capture_model(loaded, store.capture_dir, repeats=1)
    proposer = get_proposer("builtin")
    tasks, skipped = make_tasks(capture, store.capture_dir, top_k=1,
                                why_unsupported=lambda t: proposer.why_unsupported(t, "cpu" if device == "cpu"
                                                                                  else "triton"))
    assert [t.op for t in tasks] == [SOFTMAX_OP], (tasks, skipped)
    folder = work / "softmax-reference"
    folder.mkdir()
    task_path, reference_path = folder / "task.json", folder / "reference.pt"
    save_task(tasks[0], task_path)
    evaluate_baseline(task_path, reference_path, device, folder / "baseline", timeout_s=300)
    return task_path, reference_path


def _snapshot() -> dict[str, dict[str, object]]:
    return {name: dict(vars(mod)) for name, mod in list(sys.modules.items())
            if (name == "kernforge" or name.startswith("kernforge.")) and mod is not None}


def _restore(snap: dict[str, dict[str, object]]) -> list[str]:
    """Put back every kernforge attribute a case changed; return 'module.attr' for each."""
    changed = []
    for name, attrs in snap.items():
        mod = sys.modules.get(name)
        if mod is None:
            continue
        now = vars(mod)
        for k, v in attrs.items():
            if now.get(k, object()) is not v:
                changed.append(f"{name}.{k}")
                setattr(mod, k, v)
        for k in [k for k in now if k not in attrs]:
            if isinstance(now[k], types.ModuleType) and now[k].__name__ == f"{name}.{k}":
                continue  # a submodule imported since: ordinary lazy imports, not a patch
            changed.append(f"{name}.{k} (added)")
            delattr(mod, k)
    return changed


def evaluate_file(path: Path, backend: str, task_path: Path, reference_path: Path, work: Path,
                  timeout_s: float, device: str = "cpu") -> tuple[str, str, float, str]:
    """(status, reason, wall seconds, log tail); status CRASHED KERNFORGE if the pipeline raised."""
    from kernforge.evaluate import evaluate_candidate

    job = Path(tempfile.mkdtemp(prefix=f"{path.stem}-", dir=work))
    source = job / f"candidate{path.suffix}"
    shutil.copyfile(path, source)
    os.environ.pop("TRITON_INTERPRET", None)
    RCE_MARK.unlink(missing_ok=True)
    snap = _snapshot()
    started = time.perf_counter()
    try:
        result = evaluate_candidate(task_path, reference_path, source, backend, device, job / "job",
                                    timeout_s=timeout_s)
        status, reason, tail = result.status, result.reason, result.log_tail
        if result.ok and result.timing is not None and result.speedup_vs_eager is not None:
            reason = (f"[timed: p50 {result.timing.p50_ms:.4f} ms, eager {result.eager.p50_ms:.4f} ms, "
                      f"speedup {result.speedup_vs_eager:.2f}x, faster_than_eager="
                      f"{result.faster_than_eager}] {reason}")
    except Exception as e:  # noqa: BLE001 - the point: the pipeline must not raise
        status = "CRASHED KERNFORGE"
        reason = f"{type(e).__name__}: {e}".replace("\n", " ")
        tail = traceback.format_exc()
    wall = time.perf_counter() - started
    patched = _restore(snap)
    if RCE_MARK.exists():  # the candidate's code ran here even if it patched nothing we watch
        patched.append(f"wrote {RCE_MARK}")
        RCE_MARK.unlink()
    if patched:
        cached = getattr(sys.modules.get("kernforge.evaluate.judge"), "_load_oracle", None)
        if cached is not None and hasattr(cached, "cache_clear"):
            cached.cache_clear()  # the candidate's code may have altered the cached oracle too
        reason = f"PATCHED THE SEARCH PROCESS ({', '.join(patched[:4])}) then {status}: {reason}"
        status = "PATCHED THE SEARCH PROCESS"
    return status, reason, wall, tail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ids", nargs="*", help="case ids (default: all)")
    parser.add_argument("--file", action="append", default=[], help="an ad-hoc case file")
    parser.add_argument("--out", help="also write the lines to this file")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--tail", action="store_true", help="print each case's worker log tail")
    parser.add_argument("--src", help="the src/ folder whose kernforge is evaluated (default: the working tree's)")
    parser.add_argument("--rev", help="evaluate with kernforge as of this commit (git archive, read-only)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="cuda: Triton and CUDA cases on the GPU, timed (C cases are skipped)")
    args = parser.parse_args()

    from catalogue import CATALOGUE, Record, reason_holds

    records: list[Record] = []
    if args.file:
        for f in args.file:
            p = Path(f).resolve()
            backend = {".c": "cpu", ".cu": "cuda"}.get(p.suffix, "triton")
            records.append(Record(p.stem, str(p), backend, "ad-hoc", frozenset({"?"}), ""))
    else:
        wanted = set(args.ids)
        records = [r for r in CATALOGUE if not wanted or r.id in wanted]
        missing = wanted - {r.id for r in records}
        if missing:
            parser.error(f"unknown ids: {sorted(missing)}")

    lines: list[str] = []

    def emit(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    work = Path(tempfile.mkdtemp(prefix="kf-redteam-"))
    try:
        started = time.perf_counter()
        task_path, reference_path = setup(work, args.device)
        import kernforge

        emit(f"# kernforge red-team run: {len(records)} cases; kernforge from {SOURCE_TREE} "
             f"({Path(kernforge.__file__).parent}); torch {torch.__version__}; "
             f"setup {time.perf_counter() - started:.1f} s")
        emit("# id | status | verdict | expected? | wall | reason (first 150 chars)")
        accepted_cheats, counts = [], {}
        for r in records:
            if r.gpu and args.device == "cpu":
                emit(f"{r.id} | skipped | needs a GPU (--device cuda) | - | - | {r.klass}")
                continue
            if r.backend == "cpu" and args.device == "cuda":
                emit(f"{r.id} | skipped | cpu backend (run without --device cuda) | - | - | {r.klass}")
                continue
            status, reason, wall, tail = evaluate_file(r.path, r.backend, task_path, reference_path,
                                                       work, args.timeout, args.device)
            if r.honest:
                verdict = "ACCEPTED (good)" if status == "ok" else "REJECTED (evaluator wrong)"
            elif status == "ok" and r.ok_if:
                verdict = "ACCEPTED (a miss unless its trick cannot fire: see ok_if)"
                accepted_cheats.append(r.id)
            elif status == "ok":
                verdict = "ACCEPTED (not caught)"
                accepted_cheats.append(r.id)
            elif status in ("CRASHED KERNFORGE", "PATCHED THE SEARCH PROCESS"):
                verdict = "NOT CAUGHT (harness broken)"
                accepted_cheats.append(r.id)
            else:
                verdict = "caught"
            if "?" in r.expected:
                expected = "-"
            elif status == "ok" and r.ok_if:
                expected = "only if ok_if holds"
            elif status not in r.expected:
                expected = f"no (want {'|'.join(sorted(r.expected))})"
            elif not reason_holds(r, reason):
                expected = f"status yes, reason lacks {r.reason!r}"
            else:
                expected = "yes"
            counts[verdict] = counts.get(verdict, 0) + 1
            emit(f"{r.id} | {status} | {verdict} | {expected} | {wall:.1f} s | "
                 f"{reason.replace(chr(10), ' ')[:150]}")
            if args.tail and tail:
                print("    " + tail[-1500:].replace("\n", "\n    "))
        emit("# " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
        emit(f"# cheats not caught ({len(accepted_cheats)}): {' '.join(accepted_cheats)}")
        conditional = [r for r in records if r.ok_if and r.id in accepted_cheats]
        if conditional:
            emit("# of these, 'ok' is right only if the trick could not fire (catalogue.py's ok_if):")
            for cond in dict.fromkeys(r.ok_if for r in conditional):
                ids = " ".join(r.id for r in conditional if r.ok_if == cond)
                emit(f"#   {ids}: only if {cond}")
    finally:
        if "reference_path" in locals():
            try:
                from kernforge.evaluate.runner import discard_reference

                discard_reference(reference_path)  # and the private /tmp/kf-oracle-* folder
            except ImportError:  # a kernforge without it (the oracle lives in memory only)
                pass
        shutil.rmtree(work, ignore_errors=True)
        for dest in _EXTRACTED:
            shutil.rmtree(dest, ignore_errors=True)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
