"""`kernforge optimize --proposer llm` against a scripted OpenAI-compatible endpoint on loopback.

No real LLM can be reached from the GPU machine (nor from the development one): this
shows the path (prompts with the machine's measured facts, candidates built, checked
and timed on the GPU, repairs from their errors, the analyst's advice from the timings
and the build report, transcripts) with replies written here, and claims nothing about
what a real model would write. Replies depend on the prompt: a first kernel (in several
blocks), a repair of whatever failed, and for each improvement the next of a cycle of
variants: one that does not build, one that is wrong, one that cheats (torch computes
the softmax), and honest variants (warps, exp2).

    python bench/scripted_llm_run.py OUT_DIR [--backend triton] [--proposer llm|mixed] [--iterations 8]
                                     [--shape 8,16,512,512] [-- optimize options]

Writes OUT_DIR/prompts.json (every request as the server got it), OUT_DIR/summary.json,
OUT_DIR/tree.tsv (node, parent, status, origin, speedup, rationale), OUT_DIR/optimize.log,
and OUT_DIR/build_report.txt (cuobjdump's registers and spills of each built node).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

from llm_server import FakeLLM, Scripted  # noqa: E402

MODEL = '''
import torch
from torch import nn


class Model(nn.Module):
    """Attention-score softmax: (batch, heads, seq, seq) over the last dim, as in a 512-token block."""

    def forward(self, scores):
        return torch.softmax(scores, dim=-1)


def get_inputs():
    return [torch.randn(SHAPE)]


def get_init_inputs():
    return []
'''

KERNEL = '''import torch
import triton
import triton.language as tl

NUM_WARPS = {warps}


@triton.jit
def softmax_rows(X, Y, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = {exp}
    y = e / {denominator}
    tl.store(Y + row * n_cols + cols, y.to(Y.dtype.element_ty), mask=mask)


def kf_forward(x, dim, half_to_float):
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    y = {allocate}
    softmax_rows[(n_rows,)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols), num_warps=NUM_WARPS)
    return y
'''


def kernel(warps: int = 4, exp: str = "tl.exp(x)", denominator: str = "tl.sum(e, axis=0)",
           allocate: str = "torch.empty_like(x)", note: str = "") -> str:
    source = KERNEL.format(warps=warps, exp=exp, denominator=denominator, allocate=allocate)
    return (f"# {note}\n" if note else "") + source


VARIANTS = [  # the improvements, in turn
    ("raise the warps to 8 so that each row's reduction has more threads", kernel(warps=8)),
    ("exp2 with the log2(e) scale folded in: one multiply, the native instruction",
     kernel(warps=8, exp="tl.exp2(x * 1.4426950408889634)")),
    ("store without the extra cast", kernel(warps=8).replace("mask=mask)", "mask=mask", 1)),  # no ')': no build
    ("stabilise the sum with a +1", kernel(warps=8, denominator="(tl.sum(e, axis=0) + 1.0)")),  # wrong
    ("let torch do the reduction", kernel(warps=8, allocate="torch.softmax(x, -1)")),  # computes the op: a cheat
    ("16 warps", kernel(warps=16)),
    ("2 warps, more programs resident per SM", kernel(warps=2)),
]

ADVICE = json.dumps({"bottleneck": "memory bandwidth: one read and one write per element",
                     "evidence": "see the achieved bandwidth against the measured peak above",
                     "next": "keep one pass over the row, try more warps per row so the reductions overlap loads",
                     "avoid": "anything that reads the row twice"})


def reply(state: dict):
    def answer(body: dict) -> Scripted:
        system = str(body["messages"][0]["content"])
        prompt = str(body["messages"][-1]["content"])
        if "performance analyst" in system:
            return Scripted(text=ADVICE)
        if "Repair it" in prompt:
            state["repairs"] += 1
            source = kernel(warps=8, note=f"repair {state['repairs']}")
            return Scripted(text=f"Idea: back to the plain one-pass kernel\n\n```python\n{source}```\n")
        if "Write a first kernel" in prompt:
            return Scripted(text="Idea: one program per row, the whole row in registers, one pass.\n\n"
                                 "You call it as:\n```python\ny = kf_forward(x, -1, False)\n```\n"
                                 f"The file:\n```python\n{kernel()}```\n")
        idea, source = VARIANTS[state["turn"] % len(VARIANTS)]
        state["turn"] += 1
        return Scripted(text=f"Idea: {idea}\n\n```python\n{source}```\n")

    return answer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--proposer", default="llm", help="llm, or mixed (the built-in moves beside the LLM's)")
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--shape", default="8,16,512,512", help="the scores' shape (small for the interpreter)")
    args, extra = parser.parse_known_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    model = Path(os.environ.get("KF_MODEL_DIR", "/tmp/kf-issue17-model")) / "softmax_scores.py"
    model.parent.mkdir(parents=True, exist_ok=True)
    model.write_text(textwrap.dedent(MODEL).replace("SHAPE", f"({args.shape})"))
    runs = Path(os.environ.get("KF_RUNS", "/tmp/kf-issue17-runs"))
    state = {"turn": 0, "repairs": 0}
    key = "sk-scripted-not-a-real-key"
    with FakeLLM("openai", reply(state), key=key) as llm:
        command = [sys.executable, "-m", "kernforge", "optimize", str(model), "--backend", args.backend,
                   "--proposer", args.proposer, "--llm", llm.url, "--llm-model", "fake-coder", "--top-k", "1",
                   "--iterations", str(args.iterations), "--finalists", "2", "--runs-dir", str(runs),
                   "--no-apply", "--json", *[a for a in extra if a != "--"]]
        env = {**os.environ, "KERNFORGE_LLM_API_KEY": key, "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=560, check=False)
        (out / "prompts.json").write_text(json.dumps(llm.completions, indent=1))
    (out / "optimize.log").write_text(proc.stderr[-20000:])
    if proc.returncode != 0:
        print(proc.stderr[-3000:])
        return proc.returncode
    summary = json.loads(proc.stdout)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    folder = Path(summary["run_dir"])
    report_tree(folder, out)
    leaked = [str(p) for p in folder.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    print("key written anywhere in the run folder:", leaked or "no")
    print("llm:", json.dumps(summary.get("llm")))
    for row in summary["tasks"]:
        print(f"{row['op']} {row['shape']} {row['dtype']}: eager {row['eager_p50_ms']} ms, best "
              f"{row['best_p50_ms']} ms ({row['best_speedup_vs_eager']}x, node {row['best_node']}), "
              f"compile {row['compile_p50_ms']} ms; {row['status_counts']}; {row['verdict']}")
    return 0


def report_tree(folder: Path, out: Path) -> None:
    from kernforge.backends.build_report import resource_usage, summarise

    with sqlite3.connect(folder / "run.db") as db:
        rows = db.execute("SELECT task, node, parent, status, speedup, rationale, params_json FROM nodes "
                          "ORDER BY node").fetchall()
    lines = ["node\tparent\tstatus\torigin\tspeedup_vs_eager\trationale"]
    builds = []
    for task, node, parent, status, speedup, rationale, params in rows:
        origin = json.loads(params).get("origin")
        lines.append(f"{node}\t{parent or ''}\t{status}\t{origin}\t{speedup if speedup else ''}\t{rationale[:120]}")
        usage = resource_usage(folder / "tasks" / task / "nodes" / node)
        builds.append(f"{node} ({status}): {summarise(usage) or 'no GPU code found / no cuobjdump'}")
    (out / "tree.tsv").write_text("\n".join(lines) + "\n")
    (out / "build_report.txt").write_text("\n".join(builds) + "\n")
    print("\n".join(lines))
    print("\n".join(builds[:4]))


if __name__ == "__main__":
    sys.exit(main())
