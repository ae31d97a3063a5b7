"""Time chosen points of the built-in templates directly, without a search, on the GPU.

    PYTHONPATH=src:. python3 bench/probe_templates.py --out DIR

For the two BENCHMARKS rows larger than L2 that the MCTS run left over 1.25x of the floor
(mean over (256,2048,7,7) f32 and group norm over (1,256,512,512) bf16) and their smaller
siblings: each point is rendered by its family, checked against the ATen op on the real-size
input, and timed as the search's workers time (kernforge.harness.timing: L2 emptied by a read before
every call, median). This says which
moves are worth giving the search; the figures a user sees come from bench/search_bench.py.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from family_check import family_for, make_task, tensor

from kernforge.harness.session import time_callable
from kernforge.propose.builtin import Hardware
from kernforge.propose.builtin.space import Space
from kernforge.propose.families.common import is_tensor
from kernforge.runtime.importing import import_path

MEAN = "aten::mean.dim"
GN = "aten::native_group_norm.default"
SOFTMAX = "aten::_softmax.default"


def load(source: str, name: str):
    path = Path(tempfile.mkdtemp(prefix="kf-probe-")) / f"{name}.py"
    path.write_text(source)
    return import_path(path, "kf_probe")


@functools.cache
def hardware() -> Hardware:
    """The GPU's facts, for the families' starting rules (Hopper's where no GPU is seen)."""
    if not torch.cuda.is_available():
        return Hardware()
    props = torch.cuda.get_device_properties(0)
    return Hardware(sms=props.multi_processor_count, l2_bytes=getattr(props, "L2_cache_size", 0) or Hardware().l2_bytes)


def points_near(name: str, space: Space, start: dict, changes: list[dict]) -> list[dict]:
    """The family's starting point, then the start with each change applied, where that is a
    buildable point of the space. A change names the parameters of one variant (the start's
    unless it names another); parameters that variant does not read are left out, and a change
    whose values the space does not take (a renamed parameter, a value out of range) is
    skipped and counted, since the families' spaces move on while these probes stay."""
    points, skipped = [start], 0
    for change in changes:
        variant = change.get("variant") if space.named else None
        point = space.fit({**start, **change}, variant)
        honoured = all(point[k] == v for k, v in change.items() if k in point)
        if honoured and space.contains(point) and point not in points:
            points.append(point)
        elif not honoured or not space.contains(point):
            skipped += 1
    if skipped:
        print(f"{name}: {skipped} of {len(changes)} probe points are not points of the family's space now",
              flush=True)
    return points


def mean_changes() -> list[dict]:
    return [{"split": 1, "rows_per_program": rows, "block_r": block, "loads": loads, "num_warps": warps,
             "num_stages": 1}
            for rows, warps, loads, block in [(32, 8, "aligned", 64), (16, 2, "aligned", 64), (16, 1, "packed", 256),
                                              (8, 1, "packed", 256), (4, 1, "packed", 256)]]


def softmax_changes() -> list[dict]:
    """Short rows packed into a program's tile: rows a program and warps around the start. The
    nine-row search at 331fcac found the (4096,256) f32 row level with torch.compile default
    (0.0070 against 0.0073 ms, bands overlapping); probe21 asks how far a plain copy is."""
    return [{"rows_per_program": rows, "num_warps": warps} for rows in (1, 2, 4, 8, 16) for warps in (1, 2, 4, 8)]


def gn_changes(start: dict) -> list[dict]:
    """The large group norm's points, as changes to its start. What earlier probes covered, in
    bench/results/h200/probe/:
    probe4, resident with two programs an SM (several fail to launch: too many registers for two);
    probe5-7, the queue from chunks of 32K down to 4K, 2 to 16 programs an SM, leads of 2 to 8:
    smaller chunks and more programs were faster down to chunks of 8K, blocks of 4K, 4 warps,
    8 an SM and a lead of 4 (0.0995-0.0997 ms). probe8 timed the points below with a form of the
    queue (not kept) whose passes 2 read statistics that the group's last pass 1 published once:
    0.1062 ms at that point. probe9-18: the held variant as it took shape (README there)."""
    resident = {**start, "variant": "resident", "reverse": False, "wave_groups": 0, "unroll": 1, "pipeline": False,
                "per_sm": 1, "lead": 2}
    changes = [
        # the split starting point of earlier sessions, for comparison
        {**resident, "variant": "split", "chunk": 16384, "block": 4096, "num_warps": 8, "reverse": True},
        # the best resident points: two an SM (probe4), pipelined one an SM (probe3)
        {**resident, "chunk": 32768, "block": 16384, "num_warps": 16, "per_sm": 2},
        {**resident, "chunk": 65536, "block": 16384, "num_warps": 32, "unroll": 2, "pipeline": True}]
    # the queue's start (the large row's start before the held variant), then its neighbours
    queue = {**resident, "variant": "queue", "chunk": 8192, "block": 4096, "num_warps": 4, "per_sm": 8, "lead": 4}
    changes.insert(0, queue)
    for change in ({"lead": 2}, {"lead": 8}, {"per_sm": 16}, {"block": 2048}, {"num_warps": 8},
                   {"chunk": 4096}, {"chunk": 16384}, {"chunk": 16384, "num_warps": 8}, {"unroll": 2, "block": 2048},
                   # a whole chunk's loads in flight at once: in probe8's form, two blocks of 2K a
                   # trip were 5% faster than one of 4K (0.1012 against 0.1062 ms)
                   {"unroll": 4, "block": 2048}, {"unroll": 2, "block": 2048, "per_sm": 16}):
        changes.append({**queue, **change})
    # held: the GPU holds a group in registers, a chunk a program (x read once). lead 2: two groups
    # in registers; further: bulk L2 prefetches of group g + lead. probe14 timed chunks of 8K and
    # 16K, 4 to 16 warps, leads 2 to 4: the best, 8K, 4 warps, 2 an SM, lead 4 (0.0853 ms), is the
    # large row's start now. probe15: four an SM were slower (0.0948-0.1075 ms against 0.0883).
    # Below, probe16-17's: the chunk as rows (unroll), whose per-thread sums run side by side
    held = {**queue, "variant": "held", "lead": 2}
    # probe19: 16-bit chunks held as 32-bit pairs need fewer registers a value, so more warps an SM
    # (four an SM and eight warps were slower: 0.1025 and 0.0903 ms against the start's 0.0857).
    # probe20: statistics two groups ahead (pipeline), a fourth chunk in registers
    for chunk, warps, per_sm, lead, rows, pipeline in (
            (8192, 4, 2, 4, 2, False), (8192, 4, 2, 3, 2, False), (8192, 4, 2, 4, 4, False),
            (8192, 8, 2, 4, 4, False), (16384, 8, 1, 4, 8, False),
            (8192, 4, 2, 3, 1, True), (8192, 4, 2, 4, 1, True), (8192, 4, 2, 8, 1, True), (8192, 4, 2, 3, 2, True),
            (8192, 4, 2, 4, 2, True), (8192, 4, 2, 4, 4, True), (8192, 8, 2, 4, 1, True), (8192, 8, 2, 4, 4, True),
            (16384, 8, 1, 4, 4, True), (16384, 8, 1, 4, 8, True)):
        changes.append({**held, "chunk": chunk, "num_warps": warps, "per_sm": per_sm, "lead": lead, "unroll": rows,
                       "pipeline": pipeline})
    return changes


READ_CEILING = """
import torch
import triton
import triton.language as tl


@triton.jit
def stream_sum(X, OUT, n, BLOCK: tl.constexpr):
    # every program streams a strided share of x into per-lane sums: reads and nothing else
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        idx = start + tl.arange(0, BLOCK)
        acc += tl.load(X + idx, mask=idx < n, other=0.0)
    tl.store(OUT + tl.program_id(0), tl.sum(acc, axis=0))


def kf_forward(x, *args):
    grid = 4 * torch.cuda.get_device_properties(x.device).multi_processor_count
    out = torch.empty(grid, device=x.device, dtype=torch.float32)
    stream_sum[(grid,)](x, out, x.numel(), BLOCK=4096, num_warps=8)
    return out
"""


def case(name: str, op: str, args: list, changes) -> tuple[str, str, list, list[dict], object]:
    """A row: its points (the start of the family that takes the task, then `changes(start)`)
    and how a point becomes its Triton source."""
    family, facts = family_for(make_task(op, args))
    space = family.space(facts, "triton", hardware())
    start = family.start(facts, "triton", hardware())
    points = points_near(name, space, start, changes(start))
    return name, op, args, points, lambda p: family.render(facts, "triton", p)


def cases() -> list[tuple[str, str, list, list[dict], object]]:
    out = [case(f"mean_f32_{n}x2048x7x7", MEAN, [tensor([n, 2048, 7, 7]), [-1, -2], True],
                lambda start: mean_changes()) for n in (32, 256)]
    out.append(case("softmax_f32_4096x256", SOFTMAX, [tensor([4096, 256]), -1, False],
                    lambda start: softmax_changes()))
    bf = "torch.bfloat16"
    for c, s in ((512, 128), (256, 512)):
        args = [tensor([1, c, s, s], bf), tensor([c], bf), tensor([c], bf), 1, c, s * s, 32, 1e-5]
        out.append(case(f"group_norm_bf16_1x{c}x{s}x{s}", GN, args, gn_changes))
    return out


def real_args(args: list) -> list:
    made = []
    for a in args:
        if is_tensor(a):
            dtype = getattr(torch, a["dtype"].split(".")[1])
            made.append(torch.randn(a["shape"], device="cuda", dtype=torch.float32).mul_(3).add_(1).to(dtype))
        else:
            made.append(a)
    return made


def outputs(value) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def reference(op: str):
    """The ATen op a row's points are checked against."""
    return {MEAN: torch.ops.aten.mean.dim, GN: torch.ops.aten.native_group_norm,
            SOFTMAX: torch.ops.aten._softmax}[op]


def worst_error(got: list[torch.Tensor], expected: list[torch.Tensor]) -> float:
    """The largest error over the outputs, relative to each expected output's largest value."""
    return max(((g.float() - e.float()).abs().max() / e.float().abs().max().clamp_min(1e-6)).item()
               for g, e in zip(got, expected))


def median_ms(fn) -> float:
    return time_callable(fn, torch.device("cuda")).p50_ms


# Forms of the held group norm's source that are not points of the search, timed side by side
# with the template's own form ("template") where --forms names them: probe19 asked whether
# holding 16-bit chunks as 32-bit pairs (the template's form since probe19) beat holding them as
# 16-bit values ("elements"), and whether unrolling the group loop three times, so that the
# rotation of the held chunks needs no register moves, helps ("unroll3").
HELD_FORMS = {
    "template": lambda src: src,
    "elements": lambda src: re.sub(r"^PAIR_CVT = .*$", "PAIR_CVT = None", src, flags=re.MULTILINE),
    "unroll3": lambda src: src.replace("for g in range(0, n_groups):",
                                       "for g in tl.range(0, n_groups, loop_unroll_factor=3):"),
}


def forms_of(point: dict, forms: list[str]) -> list[str]:
    return forms if point.get("variant") == "held" and forms else ["template"]


def probe_row(name: str, out: Path, variants: list[str] | None = None, forms: list[str] | None = None) -> None:
    row, op, desc, points, render = next(c for c in cases() if c[0] == name)
    if variants:  # the first point (the family's start) always, for comparison
        points = points[:1] + [p for p in points[1:] if p.get("variant") in variants]
    points = [(p, form) for p in points for form in forms_of(p, forms or [])]
    inputs = real_args(desc)
    expected = outputs(reference(op)(*inputs))
    eager_ms = median_ms(functools.partial(reference(op), *inputs))
    results = [{"row": row, "point": "eager", "ms": eager_ms, "ok": True}]
    print(f"{row:32s} eager {eager_ms:.4f} ms", flush=True)
    if op == MEAN:  # how fast x can be read at all: the ceiling for any mean over it
        ceiling = load(READ_CEILING, f"{row}_ceiling")
        for label, fn in (("read ceiling (stream_sum)", ceiling.kf_forward), ("torch.sum(x)", torch.sum)):
            ms = median_ms(functools.partial(fn, inputs[0]))
            results.append({"row": row, "point": label, "ms": ms})
            gbs = inputs[0].numel() * inputs[0].element_size() / ms / 1e6
            print(f"{row:32s} {label} {ms:.4f} ms = {gbs:.0f} GB/s", flush=True)
    if op in (GN, SOFTMAX):  # what moving x's bytes in and out at all takes, timed the same way: a copy
        y = torch.empty_like(inputs[0])
        ms = median_ms(functools.partial(y.copy_, inputs[0]))
        results.append({"row": row, "point": "copy x to y (Tensor.copy_)", "ms": ms})
        tbs = 2 * inputs[0].numel() * inputs[0].element_size() / ms / 1e9
        print(f"{row:32s} copy x to y {ms:.4f} ms = {tbs:.2f} TB/s", flush=True)
    for i, (point, form) in enumerate(points):
        entry = {"row": row, "point": point, "form": form}
        try:
            source = HELD_FORMS[form](render(point))
            assert form == "template" or source != render(point), f"the form {form} changed nothing"
            module = load(source, f"{row}_{i}")
            got = outputs(module.kf_forward(*inputs))
            torch.cuda.synchronize()
            worst = worst_error(got, expected)
            entry["ok"] = worst < (1e-2 if desc[0]["dtype"] == "torch.bfloat16" else 1e-4)
            entry["worst_rel"] = worst
            entry["ms"] = median_ms(functools.partial(module.kf_forward, *inputs))
        except Exception as exc:  # noqa: BLE001 - a point that fails to build or run is recorded
            entry["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        results.append(entry)
        (out / f"probe_{row}.json").write_text(json.dumps(results, indent=1))
        shown = " ".join(f"{k}={v}" for k, v in point.items())
        print(f"{row:32s} {entry.get('ms', float('nan')):.4f} ms ok={entry.get('ok')} {form} {shown} "
              f"{entry.get('error', '')}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--row", help="probe one row in this process (the parent runs one child per row)")
    parser.add_argument("--rows", help="comma-separated rows to probe (default: all)")
    parser.add_argument("--timeout", type=float, default=150)
    parser.add_argument("--variants", help="comma-separated variants to probe besides the start (default: all)")
    parser.add_argument("--forms", help=f"comma-separated forms of each held point: {', '.join(HELD_FORMS)}")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.row:
        probe_row(args.row, args.out, args.variants.split(",") if args.variants else None,
                  args.forms.split(",") if args.forms else None)
        return 0
    # one child per row, so that a kernel that never returns (a resident group norm whose programs
    # were not all resident would wait forever) costs only the rest of its row
    rows = args.rows.split(",") if args.rows else [c[0] for c in cases()]
    for row in rows:
        try:
            subprocess.run([sys.executable, __file__, "--row", row, "--out", str(args.out),
                            *(["--variants", args.variants] if args.variants else []),
                            *(["--forms", args.forms] if args.forms else [])], timeout=args.timeout,
                           check=False)
        except subprocess.TimeoutExpired:
            print(f"{row}: timed out after {args.timeout:.0f} s", flush=True)
    print("\nbest per row:")
    for path in sorted(args.out.glob("probe_*.json")):
        results = json.loads(path.read_text())
        eager = results[0]["ms"]
        good = [r for r in results[1:] if r.get("ok") and "ms" in r]
        for r in sorted(good, key=lambda r: r["ms"])[:3]:
            print(f"{r['row']:32s} {r['ms']:.4f} ms (eager {eager:.4f}) {r.get('form', '')} {r['point']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
