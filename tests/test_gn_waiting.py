"""The group norm variants whose programs wait for each other: resident, queue and held.

Their waiting forms run only on a GPU: the interpreter runs programs one after another, so a
program that waits for another not yet run would wait forever. The resident and held variants
take a two-launch form there, and in the queue one program takes every ticket in order, so its
waits are always already over. So the waiting code is compiled here for Hopper (sm_90) with
triton's own compiler and ptxas, no GPU needed, so that a typo or a construct triton rejects
fails here and not on the H200; and the queue's ticket order, which is what keeps its
concurrent waits from deadlocking, is checked ticket by ticket."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from family_check import tensor

from kernforge.propose.builtin import Hardware
from kernforge.propose.families import group_norm as gn
from kernforge.records.task import KernelTask
from kernforge.runtime.importing import import_path

pytestmark = pytest.mark.integration

triton = pytest.importorskip("triton")

GN = "aten::native_group_norm.default"
BF16 = "torch.bfloat16"
POINTERS = ("X", "W", "B", "Y", "PART", "ARRIVED", "MEAN", "RSTD")


def group_norm(shape: list[int], dtype: str = BF16) -> dict:
    """The facts of a group norm of 32 groups as CUDA lists it (fp32 statistics), without running it."""
    c = shape[1]
    args = [tensor(shape, dtype), tensor([c], dtype), tensor([c], dtype), shape[0], c, shape[2] * shape[3], 32, 1e-5]
    stats = tensor([shape[0], 32], "torch.float32")
    return gn.match(KernelTask(task_id="t0", op=GN, signature="s", args=args, outputs=[tensor(shape, dtype), stats,
                                                                                        dict(stats)],
                               samples=[], share=0.5, gain_if_2x=1.33, time_us=10.0, device="cuda"))


def large_group_norm() -> dict:
    return group_norm([1, 256, 512, 512])


PACK_BF16 = "cvt.rn.bf16x2.f32 $0, $2, $1;"  # the held launcher's pair packing for bfloat16


def compile_for_hopper(tmp_path: Path, params: dict, pairs: bool = True, facts: dict | None = None) -> str:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    facts = facts or large_group_norm()
    element = {"bfloat16": "*bf16", "float32": "*fp32"}[facts["dtype"]]
    assert gn.space(facts, "triton", Hardware()).contains(params)
    path = tmp_path / "gn.py"
    path.write_text(gn.render(facts, "triton", params))
    module = import_path(path, "gn_waiting")
    variant = params["variant"]
    kernel = getattr(module, f"gn_{variant}")
    chunks = facts["group_size"] // params["chunk"]  # chunks that divide the group: nothing masked
    # the kernel's constants as its launcher gives them on a GPU (PHASE 0: the waiting form), the
    # held prefetch as its launcher writes it for 16-byte aligned bf16
    values = {"CHUNK": params["chunk"], "BLOCK": params.get("block"), "UNROLL": params["unroll"], "CHUNKS": chunks,
              "CHUNKS_P2": chunks, "PHASE": 0, "PIPELINE": params.get("pipeline"), "EVEN": True, "ROWS": params["unroll"],
              "THREADS": 32 * params["num_warps"], "EARLY": 2 if params.get("pipeline") else 1,
              "LEAD": params.get("lead"), "PREFETCH": module.l2_prefetch(2) if variant == "held" else "",
              "GROUPS": 32, "CG": 8, "IN_CHANNEL": True, "HAS_W": True, "HAS_B": True, "PAIRS": pairs,
              "BF16": facts["dtype"] == "bfloat16", "CVT": PACK_BF16 if pairs else ""}
    # held has no counters: its partials' bits are their own flags
    kinds = {"X": element, "W": element, "B": element, "Y": element, "PART": "*i32" if variant == "held" else "*fp32",
             "ARRIVED": "*i32", "MEAN": element, "RSTD": element}
    names = kernel.arg_names
    signature = {n: "constexpr" if n in values else kinds.get(n, "fp32" if n == "eps" else "i32") for n in names}
    # what triton's launcher would specialise on: 16-byte aligned pointers, sizes divisible by 16
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in (*POINTERS, "group_size", "hw") if n in names}
    source = ASTSource(kernel, signature, constexprs={(i,): values[n] for i, n in enumerate(names) if n in values},
                       attrs=aligned)
    # held programs, and two resident programs an SM, launch cooperatively (the launcher reads the
    # flag from the metadata); held is launched with one stage, as its launcher does
    cooperative = variant == "held" or (params["per_sm"] > 1 and variant == "resident")
    options = {"num_warps": params["num_warps"], "launch_cooperative_grid": cooperative}
    if variant == "held":
        options["num_stages"] = 1
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    assert bool(compiled.metadata.launch_cooperative_grid) == cooperative
    return compiled.asm["ptx"]


def compile_or_skip(tmp_path: Path, params: dict, pairs: bool = True, facts: dict | None = None) -> str:
    try:
        return compile_for_hopper(tmp_path, params, pairs, facts)
    except RuntimeError as exc:  # no ptxas in this triton install: nothing to say about the source
        if "ptxas" in str(exc):
            pytest.skip(str(exc))
        raise


@pytest.mark.parametrize("pipeline, per_sm", [(False, 1), (True, 1), (True, 2)])
def test_waiting_form_compiles_for_hopper(tmp_path, monkeypatch, pipeline, per_sm):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # triton.jit must give a compilable kernel
    params = {"variant": "resident", "chunk": 32768, "block": 8192, "num_warps": 16, "unroll": 2, "pipeline": pipeline,
              "per_sm": per_sm}
    ptx = compile_or_skip(tmp_path, params)
    # the wait is there (release on arrival, acquire while spinning), and x moves in 16-byte vectors
    assert re.search(r"atom\.global\.gpu\.release\.add", ptx) or re.search(r"red\.release\.gpu", ptx)
    assert "ld.global.gpu.acquire" in ptx or "atom.global.gpu.acquire" in ptx
    assert re.search(r"ld\.global\S*\.v4\.b32", ptx) and re.search(r"st\.global\S*\.v4\.b32", ptx)
    # pipelined: pass 1 asks L2 to keep x, pass 2 lets it go
    assert ("evict_last" in ptx and "evict_first" in ptx) == pipeline


@pytest.mark.parametrize("unroll, per_sm", [(1, 4), (2, 2)])
def test_queue_compiles_for_hopper(tmp_path, monkeypatch, unroll, per_sm):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    params = {"variant": "queue", "chunk": 32768, "block": 4096, "num_warps": 8, "unroll": unroll, "per_sm": per_sm,
              "lead": 4}
    ptx = compile_or_skip(tmp_path, params)
    # tickets from one counter, the same release/acquire wait, x kept in L2 by pass 1 for pass 2
    assert re.search(r"atom\.global\S*\.add", ptx)
    assert re.search(r"atom\.global\.gpu\.release\.add", ptx) or re.search(r"red\.release\.gpu", ptx)
    assert "ld.global.gpu.acquire" in ptx or "atom.global.gpu.acquire" in ptx
    assert "evict_last" in ptx and "evict_first" in ptx
    assert re.search(r"ld\.global\S*\.v4\.b32", ptx) and re.search(r"st\.global\S*\.v4\.b32", ptx)


# Runs ticket_work, as rendered, under the interpreter for every ticket of each (n_work, lead).
SCHEDULE = """
import json, sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from kernforge.runtime.importing import import_path

ticket_work = import_path(Path(sys.argv[1]), "gn_queue").ticket_work


@triton.jit
def schedule(FIRST, K, n_work, lead, N: tl.constexpr):
    t = tl.arange(0, N)
    first, k = ticket_work(t, n_work, lead)
    tl.store(FIRST + t, first.to(tl.int32), mask=t < 2 * n_work)
    tl.store(K + t, k, mask=t < 2 * n_work)


out = []
for n_work, lead in json.loads(sys.argv[2]):
    first = torch.zeros(2 * n_work, dtype=torch.int32)
    k = torch.zeros(2 * n_work, dtype=torch.int32)
    schedule[(1,)](first, k, n_work, lead, N=triton.next_power_of_2(2 * n_work))
    out.append([first.tolist(), k.tolist()])
print(json.dumps(out))
"""


def schedules(tmp_path: Path, cases: list[tuple[int, int]]) -> list[tuple[list[int], list[int]]]:
    params = {"variant": "queue", "chunk": 8192, "block": 4096, "num_warps": 4, "unroll": 1, "per_sm": 8, "lead": 4}
    source = tmp_path / "gn_queue_source.py"
    source.write_text(gn.render(large_group_norm(), "triton", params))
    script = tmp_path / "schedule.py"
    script.write_text(SCHEDULE)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, str(script), str(source), json.dumps(cases)], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def order_violations(first: list[int], k: list[int], chunks: int) -> list[int]:
    """Items whose pass 2 comes before pass 1 of some item of their group (a pass 2 that could
    wait for a ticket no running program has taken yet)."""
    n_work = len(k) // 2
    pass1 = {k[t]: t for t in range(2 * n_work) if first[t]}
    pass2 = {k[t]: t for t in range(2 * n_work) if not first[t]}
    assert sorted(pass1) == sorted(pass2) == list(range(n_work))  # each item once in each pass
    return [a for a in range(n_work)
            if any(pass1[b] > pass2[a] for b in range(a // chunks * chunks, (a // chunks + 1) * chunks))]


def test_queue_tickets_take_pass_2_only_after_its_whole_group_s_pass_1(tmp_path):
    # (chunks a group, groups, lead in groups), lead as the launcher gives it: LEAD * chunks, at
    # most every item; and a lead one chunk short of a group, which the order does not allow
    cases = [(c, n, lead) for c in (1, 3, 4) for n in (1, 2, 5) for lead in (1, 2, 8)]
    runs = [(c * n, min(lead * c, c * n)) for c, n, lead in cases]
    short = [(4 * 5, 3)]
    results = schedules(tmp_path, runs + short)
    for (chunks, _, _), (first, k) in zip(cases, results):
        assert order_violations(first, k, chunks) == [], (chunks, first, k)
    first, k = results[-1]
    assert order_violations(first, k, 4)  # lead 3 < 4 chunks: some pass 2 comes too early


@pytest.mark.parametrize("chunk, warps, per_sm, lead, rows, pairs, pipeline", [
    (16384, 8, 1, 2, 1, True, False), (8192, 4, 2, 2, 1, False, False), (8192, 8, 2, 4, 1, True, False),
    (8192, 4, 2, 4, 4, True, False), (8192, 4, 2, 4, 4, False, False), (8192, 4, 2, 4, 1, True, True),
    (8192, 4, 2, 3, 2, True, True), (8192, 4, 2, 4, 1, False, True)])
def test_held_compiles_for_hopper(tmp_path, monkeypatch, chunk, warps, per_sm, lead, rows, pairs, pipeline):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    params = {"variant": "held", "chunk": chunk, "num_warps": warps, "unroll": rows, "pipeline": pipeline,
              "per_sm": per_sm, "lead": lead}
    ptx = compile_or_skip(tmp_path, params, pairs)
    # 16-bit values held as pairs: y packed by the launcher's cvt, one a pair, inline
    assert bool(re.search(r"cvt\.rn\.bf16x2\.f32[^\n]*\s+// end inline asm", ptx)) == pairs
    # a lead past the groups loading into registers: one bulk L2 prefetch a warp, of its piece
    prefetches = re.findall(r"cp\.async\.bulk\.prefetch\.L2\.global \[\S+\], (\d+);", ptx)
    assert prefetches == ([str(chunk // warps * 2)] if lead > (3 if pipeline else 2) else [])
    # the wait polls the partials with volatile loads, and nothing fences: a fence would wait for
    # the loads of the next groups; x read once (evict_first) and moved in 16-byte vectors
    assert "ld.volatile.global" in ptx
    assert not re.search(r"\b(fence|membar|atom|red)\.", ptx)
    assert "evict_first" in ptx and "evict_last" not in ptx
    assert re.search(r"ld\.global\S*\.v4\.b32", ptx) and re.search(r"st\.global\S*\.v4\.b32", ptx)


def test_held_float32_compiles_without_pairs(tmp_path, monkeypatch):
    """A float32 source holds no pairs (PAIR_CVT None); its kernel reaches the pair helpers only in
    branches its constants leave out, which triton must not compile."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    facts = group_norm([1, 64, 256, 256], "torch.float32")  # groups of 128K: 32 chunks of 4K
    params = {"variant": "held", "chunk": 4096, "num_warps": 4, "unroll": 1, "pipeline": True, "per_sm": 2, "lead": 4}
    assert "PAIR_CVT = None" in gn.render(facts, "triton", params)
    ptx = compile_or_skip(tmp_path, params, pairs=False, facts=facts)
    assert "ld.volatile.global" in ptx and not re.search(r"cvt\.rn\.bf16x2\.f32[^\n]*\s+// end inline asm", ptx)
