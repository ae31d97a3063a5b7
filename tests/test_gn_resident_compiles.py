"""The resident group norm's waiting form (PHASE 0) runs only on a GPU, and so does the queue's
waiting: the interpreter runs
programs one after another, so a program that waits for another would wait forever, and the
interpreter tests take the two-launch form. This compiles the waiting form for Hopper (sm_90)
with triton's own compiler and ptxas, no GPU needed, so that a typo or a construct triton
rejects in that branch fails here and not on the H200."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from family_check import make_task, tensor

from kernforge.propose.templates import norms

triton = pytest.importorskip("triton")

GN = "aten::native_group_norm.default"
BF16 = "torch.bfloat16"
POINTERS = ("X", "W", "B", "Y", "PART", "ARRIVED", "MEAN", "RSTD")


def large_group_norm() -> dict:
    args = [tensor([1, 256, 512, 512], BF16), tensor([256], BF16), tensor([256], BF16), 1, 256, 512 * 512, 32, 1e-5]
    return norms.match_group_norm(make_task(GN, args))


def compile_for_hopper(tmp_path: Path, params: dict) -> str:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    facts = large_group_norm()
    assert norms.valid_group_norm(facts, "triton", params)
    path = tmp_path / "gn.py"
    path.write_text(norms.render_group_norm(facts, "triton", params))
    spec = importlib.util.spec_from_file_location("gn_resident_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    queue = params["variant"] == "queue"
    pointers = {"X": "*bf16", "W": "*bf16", "B": "*bf16", "Y": "*bf16", "PART": "*fp32", "ARRIVED": "*i32",
                "MEAN": "*bf16", "RSTD": "*bf16", "n_groups": "i32"}
    sizes = {"n_work": "i32", "lead": "i32"} if queue else {"wave": "i32"}
    kinds = pointers | sizes | {"group_size": "i32", "hw": "i32", "eps": "fp32"}
    chunks = facts["group_size"] // params["chunk"]
    constants = {"CHUNK": params["chunk"], "BLOCK": params["block"], "UNROLL": params["unroll"], "CHUNKS": chunks,
                 "CHUNKS_P2": chunks, "PHASE": 0, "PIPELINE": params["pipeline"], "GROUPS": 32, "CG": 8,
                 "IN_CHANNEL": True, "HAS_W": True, "HAS_B": True}
    if queue:
        del constants["PHASE"], constants["PIPELINE"]
    signature = kinds | {name: "constexpr" for name in constants}
    names = list(signature)
    # what triton's launcher would specialise on: 16-byte aligned pointers, sizes divisible by 16
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in (*POINTERS, "group_size", "hw")}
    source = ASTSource(module.gn_queue if queue else module.gn_resident, signature, constexprs={(names.index(k),): v for k, v in constants.items()},
                       attrs=aligned)
    # two resident programs an SM launch cooperatively (the launcher reads the flag from the metadata)
    cooperative = params["per_sm"] > 1 and not queue
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": params["num_warps"], "launch_cooperative_grid": cooperative})
    assert bool(kernel.metadata.launch_cooperative_grid) == cooperative
    return kernel.asm["ptx"]


@pytest.mark.parametrize("pipeline, per_sm", [(False, 1), (True, 1), (True, 2)])
def test_waiting_form_compiles_for_hopper(tmp_path, monkeypatch, pipeline, per_sm):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # triton.jit must give a compilable kernel
    params = {**norms.initial_group_norm(large_group_norm(), "triton"), "variant": "resident", "chunk": 32768,
              "block": 8192, "num_warps": 16, "reverse": False, "wave_groups": 0, "unroll": 2, "pipeline": pipeline,
              "per_sm": per_sm, "lead": 2}
    try:
        ptx = compile_for_hopper(tmp_path, params)
    except RuntimeError as exc:  # no ptxas in this triton install: nothing to say about the source
        if "ptxas" in str(exc):
            pytest.skip(str(exc))
        raise
    # the wait is there (release on arrival, acquire while spinning), and x moves in 16-byte vectors
    assert re.search(r"atom\.global\.gpu\.release\.add", ptx) or re.search(r"red\.release\.gpu", ptx)
    assert "ld.global.gpu.acquire" in ptx or "atom.global.gpu.acquire" in ptx
    assert re.search(r"ld\.global\S*\.v4\.b32", ptx) and re.search(r"st\.global\S*\.v4\.b32", ptx)
    # pipelined: pass 1 asks L2 to keep x, pass 2 lets it go
    assert ("evict_last" in ptx and "evict_first" in ptx) == pipeline


@pytest.mark.parametrize("unroll, per_sm", [(1, 4), (2, 2)])
def test_queue_compiles_for_hopper(tmp_path, monkeypatch, unroll, per_sm):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    params = {**norms.initial_group_norm(large_group_norm(), "triton"), "variant": "queue", "chunk": 32768,
              "block": 4096, "num_warps": 8, "reverse": False, "wave_groups": 0, "unroll": unroll, "pipeline": False,
              "per_sm": per_sm, "lead": 4}
    try:
        ptx = compile_for_hopper(tmp_path, params)
    except RuntimeError as exc:
        if "ptxas" in str(exc):
            pytest.skip(str(exc))
        raise
    # tickets from one counter, the same release/acquire wait, x kept in L2 by pass 1 for pass 2
    assert re.search(r"atom\.global\S*\.add", ptx)
    assert re.search(r"atom\.global\.gpu\.release\.add", ptx) or re.search(r"red\.release\.gpu", ptx)
    assert "ld.global.gpu.acquire" in ptx or "atom.global.gpu.acquire" in ptx
    assert "evict_last" in ptx and "evict_first" in ptx
    assert re.search(r"ld\.global\S*\.v4\.b32", ptx) and re.search(r"st\.global\S*\.v4\.b32", ptx)
