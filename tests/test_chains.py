"""Fused chains: found from the recorded producer links, replayed as the model ran them, ranked
beside single ops, and generated into one Triton kernel that the evaluator accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from kernforge.harness.serialize import load_sample, load_sample_outputs
from kernforge.capture.chains import find_chains
from kernforge.capture.recorder import ModuleTracker, Recorder
from kernforge.models.loader import LoadedModel, load_model
from kernforge.models.options import ModelOptions
from kernforge.tasks import ChainReference, chain_program, make_tasks, save_task

pytestmark = pytest.mark.integration


class HandWritten(nn.Module):
    """The chains of the issue, written out: RMSNorm, Swish, tanh GELU, an L1 norm, scale and mask
    then softmax, and a mm between two of them (a chain never spans it)."""

    def __init__(self, n: int = 48):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n))
        self.proj = nn.Parameter(torch.randn(n, n) / n**0.5)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rms = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        swish = rms * torch.sigmoid(rms)
        h = swish @ self.proj
        gelu = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h.pow(3))))
        l1 = gelu / gelu.abs().sum(-1, keepdim=True)
        scores = torch.softmax(l1 * 0.125 + mask, dim=-1)
        return scores, rms


def _recorded(module: nn.Module, *inputs: torch.Tensor) -> Recorder:
    recorder = Recorder()
    with ModuleTracker(module, recorder), recorder, torch.no_grad():
        recorder.mark_returned(module(*inputs))
    return recorder


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(4, 16, 48), torch.randn(16, 48)


def test_hand_written_chains_are_found_and_a_matmul_splits_them():
    recorder = _recorded(HandWritten(), *_inputs())
    ops = {c.op for c in find_chains(recorder.calls, recorder.returned_ids)}
    # RMSNorm then Swish: one chain up to the mm; rms is returned, so it is kept as an output
    assert "chain:pow+mean+add+sqrt+div+mul+sigmoid+mul" in ops
    # tanh GELU written out, the L1 norm, scale and mask then softmax: one chain after the mm
    after = [op for op in ops if "tanh" in op]
    assert after == ["chain:mul+pow+mul+add+mul+tanh+add+mul+abs+sum+div+mul+add+_softmax"]
    assert not any("mm" in op for op in ops)


def test_an_intermediate_used_elsewhere_is_an_output_and_the_replay_matches_the_model():
    module, inputs = HandWritten(), _inputs()
    recorder = _recorded(module, *inputs)
    chain = next(c for c in find_chains(recorder.calls, recorder.returned_ids) if "sigmoid" in c.op)
    assert len(chain.outputs) == 2  # swish (read by the mm) and rms (returned)
    with torch.no_grad():
        _scores, rms = module(*inputs)
        got = ChainReference(chain.to_json())(inputs[0], module.weight)
    assert any(torch.equal(value, rms) for value in got)  # the returned rms is one of the chain's outputs
    assert "torch.ops.aten.pow.Tensor_Scalar(in0, 2)" in chain_program(chain.to_json())


def test_the_oracle_replay_computes_in_float64():
    module, inputs = HandWritten(), _inputs()
    recorder = _recorded(module, *inputs)
    chain = next(c for c in find_chains(recorder.calls, recorder.returned_ids) if "_softmax" in c.op).to_json()
    ref = ChainReference(chain)
    args = [torch.randn(4, 16, 48), torch.randn(16, 48)]
    out32 = ref(*args)
    out64 = ref.in_float64()(*[a.double() for a in args])
    assert out64[0].dtype == torch.float64
    assert (out32[0].double() - out64[0]).abs().max() < 1e-5


def test_gemma_chains_are_captured_sampled_and_replay_bit_exactly(tmp_path: Path):
    from kernforge.capture import capture_model

    loaded = load_model("example:gemma_decoder", torch.device("cpu"), ModelOptions(scale="small", dtype="bf16"))
    capture = capture_model(loaded, tmp_path, repeats=1)
    chains = capture.ranked(("chain",))
    ops = {p.op for p in chains}
    assert any(op.startswith("chain:_to_copy+pow+mean+add+rsqrt+mul") for op in ops)  # RMSNorm, bf16 in f32
    assert "chain:mul+add+_to_copy+_softmax+_to_copy" in ops  # scale and mask then softmax
    assert "chain:gelu+mul" in ops  # the gated MLP
    for profile in chains:
        assert profile.samples, profile.op
        ref = ChainReference(profile.chain)
        for sample in profile.samples:
            args, _ = load_sample(tmp_path / sample)
            for got, want in zip(ref(*args), load_sample_outputs(tmp_path / sample), strict=True):
                assert got.stride() == want.stride() and torch.equal(got, want), profile.op
    # a chosen chain takes its pieces' places: no task is a single op all of whose calls it holds
    tasks, skipped = make_tasks(capture, tmp_path, 8, lambda t: None)
    covered: dict[str, int] = {}
    for task in tasks:
        for signature, count in (task.chain or {}).get("covers", {}).items():
            covered[signature] = covered.get(signature, 0) + count
    assert any(t.chain for t in tasks)
    for task in tasks:
        if not task.chain:
            profile = next(p for p in capture.profiles if p.signature == task.signature)
            assert covered.get(task.signature, 0) < profile.calls, task.op
            if covered.get(task.signature):  # only the share of its calls outside the chains is left
                assert task.share < profile.share
    for profile, why in skipped:
        if why.startswith("its calls run inside the fused chain"):
            assert covered.get(profile.signature, 0) >= profile.calls


def test_vae_group_norm_then_silu_is_a_chain():
    loaded = load_model("example:sd35_vae_decoder", torch.device("cpu"), ModelOptions(scale="small"))
    recorder = _recorded(loaded.module, *loaded.inputs)
    ops = {c.op for c in find_chains(recorder.calls, recorder.returned_ids)}
    assert "chain:native_group_norm+silu" in ops


def test_the_chain_family_leaves_a_group_norm_chain_to_the_group_norm_family():
    from kernforge.propose.families.chain import match

    recorder = _recorded(*_group_norm_silu())
    chain = find_chains(recorder.calls, recorder.returned_ids)[0]
    task = _task_of(chain)
    assert "group norm" in match(task)


def _group_norm_silu() -> tuple[nn.Module, torch.Tensor]:
    return nn.Sequential(nn.GroupNorm(4, 16), nn.SiLU()), torch.randn(2, 16, 8, 8)


def _task_of(chain):
    from kernforge.records.task import KernelTask

    return KernelTask(task_id="t0", op=chain.op, signature=chain.signature, args=chain.input_metas,
                      outputs=chain.output_metas, samples=[], share=0.5, gain_if_2x=1.3, time_us=1.0,
                      device="cpu", chain=chain.to_json())


@pytest.mark.skipif(__import__("importlib").util.find_spec("triton") is None, reason="triton is not installed")
def test_generated_kernels_pass_the_evaluator_under_the_interpreter(tmp_path: Path):
    """Every chain of the hand-written model, tile and looped, through the real evaluator."""
    from kernforge.capture import capture_model
    from kernforge.evaluate import evaluate_baseline, evaluate_candidate
    from kernforge.evaluate.runner import discard_reference
    from kernforge.propose.builtin import Hardware
    from kernforge.propose.families import chain as family

    module = HandWritten(n=300)  # a row of 300: masked lanes, and chunks of 128 in the looped kernel
    loaded = LoadedModel(module=module, inputs=(torch.randn(2, 5, 300), torch.randn(5, 300)),
                         device=torch.device("cpu"), name="handwritten", spec="test")
    capture = capture_model(loaded, tmp_path / "capture", repeats=1)
    tasks, _ = make_tasks(capture, tmp_path / "capture", 10, lambda t: None if t.chain else "single op")
    assert len(tasks) == 2
    for task in tasks:
        facts = family.match(task)
        assert not isinstance(facts, str), facts
        space = family.space(facts, "triton", Hardware())
        points = [space.fit(family.start(facts, "triton", Hardware())),
                  {"variant": "loop", "block_n": 128, "block_r": 2, "num_warps": 2}]
        task_dir = tmp_path / task.task_id
        task_dir.mkdir()
        save_task(task, task_dir / "task.json")
        reference = task_dir / "reference.pt"
        evaluate_baseline(task_dir / "task.json", reference, "cpu", task_dir / "baseline", 600.0, ())
        try:
            for i, point in enumerate(points):
                assert space.contains(point), point
                source = task_dir / f"c{i}.py"
                source.write_text(family.render(facts, "triton", point))
                result = evaluate_candidate(task_dir / "task.json", reference, source, "triton", "cpu",
                                            task_dir / f"n{i}", 300.0)
                assert result.status == "ok", (task.op, point, result.reason)
        finally:
            discard_reference(reference)


class GroupNormGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.GroupNorm(4, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.norm(x)) * 0.5


def test_group_norm_then_activations_become_the_group_norm_kernels_epilogue():
    from kernforge.propose.families.group_norm import match

    recorder = _recorded(GroupNormGelu(), torch.randn(2, 16, 9, 10))
    chain = find_chains(recorder.calls, recorder.returned_ids)[0]
    facts = match(_task_of(chain))
    assert facts["chain"] and facts["op"] == "chain:native_group_norm+gelu+mul"
    assert "a = 0.5 * a * (1.0 + tl.erf(a * 0.7071067811865476))" in facts["epilogue"]
    assert "    b = 0.5\n    a = a * b\n" in facts["epilogue"]
    assert "a = 0.5f * a * (1.0f + erff(a * 0.70710678118654752f));" in facts["epilogue_c"]
    assert "{ const float b = 0.5f; a = a * b; }" in facts["epilogue_c"]


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc is not installed")
def test_the_cuda_group_norm_kernel_with_an_epilogue_builds(tmp_path: Path):
    """The CUDA kernel with GELU times a number as its epilogue, from the chain's task: nvcc builds
    it and the object scan passes it (its numbers are checked on a GPU, not here)."""
    from kernforge.backends.cuda import DEFAULT_ARCH, NVCC_FLAGS
    from kernforge.backends.native import compile_library
    from kernforge.propose.builtin import Hardware
    from kernforge.propose.families import group_norm as family

    recorder = _recorded(GroupNormGelu(), torch.randn(2, 16, 9, 10))
    facts = family.match(_task_of(find_chains(recorder.calls, recorder.returned_ids)[0]))
    source = tmp_path / "candidate.cu"
    source.write_text(family.render(facts, "cuda", family.start(facts, "cuda", Hardware())))
    text = source.read_text()
    assert "#define CHAIN 1" in text and "erff(a * 0.70710678118654752f)" in text
    assert compile_library(source, tmp_path / "build", ["nvcc", f"-arch={DEFAULT_ARCH}", *NVCC_FLAGS], "test").exists()


GN_SILU_POINTS = {
    "triton": [None, {"variant": "split", "chunk": 256, "block": 128, "num_warps": 2, "reverse": True, "wave_groups": 0}],
    "cpu": [None, {"variant": "groups", "stats": "one_pass_double", "simd": False}],
}


@pytest.mark.parametrize("backend", ["triton", "cpu"])
def test_group_norm_silu_kernels_pass_the_evaluator(tmp_path: Path, backend: str):
    """The group norm kernels with SiLU as their epilogue, through the real evaluator: Triton's
    per-group and split kernels under the interpreter, the C kernel's planes and groups."""
    if backend == "triton" and __import__("importlib").util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    from kernforge.capture import capture_model
    from kernforge.evaluate import evaluate_baseline, evaluate_candidate
    from kernforge.evaluate.runner import discard_reference
    from kernforge.propose.builtin import BuiltinProposer, Hardware
    from kernforge.propose.families import group_norm as family

    module, x = _group_norm_silu()
    loaded = LoadedModel(module=module, inputs=(x,), device=torch.device("cpu"), name="gn", spec="test")
    capture = capture_model(loaded, tmp_path / "capture", repeats=1)
    proposer = BuiltinProposer()
    tasks, _ = make_tasks(capture, tmp_path / "capture", 4, lambda t: proposer.why_unsupported(t, backend))
    task = next(t for t in tasks if t.chain)
    facts = family.match(task)
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    save_task(task, task_dir / "task.json")
    reference = task_dir / "reference.pt"
    evaluate_baseline(task_dir / "task.json", reference, "cpu", task_dir / "baseline", 600.0, ())
    points = [point or family.start(facts, backend, Hardware()) for point in GN_SILU_POINTS[backend]]
    suffix = ".py" if backend == "triton" else ".c"
    try:
        for i, point in enumerate(points):
            source = task_dir / f"c{i}{suffix}"
            source.write_text(family.render(facts, backend, point))
            result = evaluate_candidate(task_dir / "task.json", reference, source, backend, "cpu", task_dir / f"n{i}",
                                        300.0)
            assert result.status == "ok", (point, result.reason)
    finally:
        discard_reference(reference)


# ---------------------------------------------------------------- the C (OpenMP) chain kernels

class ScaleMaskSoftmax(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 0.125 + mask, dim=-1)


class RMSNorm(nn.Module):
    """Written out as the Llama-style models do: pow, mean, add, rsqrt, mul, mul."""

    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class TanhGelu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x.pow(3))))


class ResidualRMSNorm(RMSNorm):
    """A scaled residual add (DeepNorm's x * alpha + residual) then RMSNorm; the sum is returned
    too (the next block adds to it): a chain of two outputs. A plain x + residual whose sum is
    kept would start the chain and be peeled off it (capture/chains.py: it removes nothing)."""

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x * 0.5 + residual
        return super().forward(h), h


def _c_chain_case(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    if name.startswith("softmax"):  # a row of 300: not a multiple of any vector width
        module, inputs = ScaleMaskSoftmax(), (torch.randn(2, 3, 5, 300), torch.randn(1, 1, 5, 300))
    elif name == "rms_norm":
        module, inputs = RMSNorm(300), (torch.randn(2, 7, 300),)
    elif name == "tanh_gelu":  # a 1-D tensor is one row: blocks of 4096 columns, the last one partial.
        # Negative values, where 1 + tanh cancels, and small ones, where 1 - e^-2|x| would: a tanh
        # with either cancellation is outside the tolerance on these inputs (outputs no larger than
        # 0.17), not only by chance on a value-class set
        module, inputs = TanhGelu(), (torch.cat([-4 * torch.rand(4500), 1e-2 * torch.randn(4500)]),)
    else:
        module, inputs = ResidualRMSNorm(300), (torch.randn(2, 7, 300), torch.randn(2, 7, 300))
    if name.endswith("bf16"):
        module, inputs = module.to(torch.bfloat16), tuple(t.to(torch.bfloat16) for t in inputs)
    return module, inputs


def test_every_c_point_of_the_hand_written_chains_renders_and_passes_the_scan():
    from kernforge.backends.scan import scan_source
    from kernforge.propose.builtin import Hardware
    from kernforge.propose.families import chain as family

    recorder = _recorded(HandWritten(), *_inputs())
    for chain in find_chains(recorder.calls, recorder.returned_ids):
        task = _task_of(chain)
        facts = family.match(task)
        space = family.space(facts, "cpu", Hardware())
        points = space.sample(__import__("random").Random(0), 64)
        # schedule x simd x exp (both call exp: sigmoid, tanh), and the row buffer where a later
        # loop over the row would recompute values (the L1 norm and softmax; RMSNorm needs only x)
        assert len(points) == (16 if "_softmax" in task.op else 8), task.op
        for point in points:
            source = family.render(facts, "cpu", point)
            assert scan_source(source, "c", task.args[0]["dtype"]) == [], point


def test_a_one_dimensional_chain_is_one_row_of_full_tensors():
    from kernforge.propose.families.chain.lower import lower

    recorder = _recorded(TanhGelu(), torch.randn(9000))
    chain = find_chains(recorder.calls, recorder.returned_ids)[0]
    program = lower(chain.to_json(), chain.input_metas, chain.output_metas)
    assert program.rows == 1 and [t["kind"] for t in program.inputs + program.outputs] == ["full", "full"]


def chain_tasks(module: nn.Module, inputs: tuple, tmp_path: Path, name: str) -> list:
    """The chain tasks optimize makes from one capture of the module on the CPU."""
    from kernforge.capture import capture_model

    loaded = LoadedModel(module=module, inputs=inputs, device=torch.device("cpu"), name=name, spec="test")
    capture = capture_model(loaded, tmp_path / "capture", repeats=1)
    tasks, _ = make_tasks(capture, tmp_path / "capture", 10, lambda t: None if t.chain else "single op")
    return tasks


def evaluated_points(task, backend: str, points: list[dict], tmp_path: Path) -> list:
    """The chain family's kernel at each point, through the real evaluator (baseline, then each
    candidate): each candidate's result."""
    from kernforge.evaluate import evaluate_baseline, evaluate_candidate
    from kernforge.evaluate.runner import discard_reference
    from kernforge.propose.families import chain as family

    facts = family.match(task)
    assert not isinstance(facts, str), facts
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    save_task(task, task_dir / "task.json")
    reference = task_dir / "reference.pt"
    evaluate_baseline(task_dir / "task.json", reference, "cpu", task_dir / "baseline", 600.0, ())
    results = []
    try:
        for i, point in enumerate(points):
            source = task_dir / f"c{i}.{'c' if backend == 'cpu' else 'py'}"
            source.write_text(family.render(facts, backend, point))
            results.append(evaluate_candidate(task_dir / "task.json", reference, source, backend, "cpu",
                                              task_dir / f"n{i}", 300.0))
    finally:
        discard_reference(reference)
    return results


@pytest.mark.parametrize("name", ["softmax", "softmax_bf16", "rms_norm", "tanh_gelu", "residual_rms_norm"])
def test_generated_c_kernels_pass_the_evaluator(tmp_path: Path, name: str):
    """The chain's C kernel, at its start and at the other end of its space (buffered or not where
    the space has the choice), through the real evaluator."""
    from kernforge.propose.builtin import Hardware
    from kernforge.propose.families import chain as family

    module, inputs = _c_chain_case(name)
    tasks = chain_tasks(module, inputs, tmp_path, name)
    assert len(tasks) == 1, [t.op for t in tasks]
    task = tasks[0]
    assert len(task.outputs) == (2 if name == "residual_rms_norm" else 1), task.op
    facts = family.match(task)
    assert not isinstance(facts, str), facts
    space = family.space(facts, "cpu", Hardware())
    start = space.fit(family.start(facts, "cpu", Hardware()))
    other = {"schedule": "dynamic", "simd": False, **({"exp": "libm"} if "exp" in start else {})}
    if "reuse" in start:
        other["reuse"] = "recompute" if start["reuse"] == "buffer" else "buffer"
    assert ("exp" in start) == (name != "rms_norm" and name != "residual_rms_norm")  # only where a step calls exp
    assert ("reuse" in start) == (name != "rms_norm" and name != "tanh_gelu")  # only where a loop would recompute
    for point in (start, other):
        assert space.contains(point), point
    for point, result in zip([start, other], evaluated_points(task, "cpu", [start, other], tmp_path)):
        assert result.status == "ok", (task.op, point, result.reason)


class Rotary(nn.Module):
    """A language model's rotary tables: cos and sin of the angles, each scaled (Gemma's, Qwen's)."""

    def forward(self, angles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        eye = torch.eye(angles.shape[-1])  # a matmul after each ends its chain
        return (torch.cos(angles) * 1.0) @ eye, (torch.sin(angles) * 1.0) @ eye


@pytest.mark.parametrize("backend", ["cpu", pytest.param("triton", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("triton") is None, reason="triton is not installed"))])
@pytest.mark.parametrize("op", ["cos", "sin"])
def test_a_rotary_cos_or_sin_chains_kernel_passes_the_evaluator(tmp_path: Path, op: str, backend: str):
    """The element-wise family's cos and sin (new), in a chain: C, and Triton under the interpreter."""
    from kernforge.propose.builtin import Hardware
    from kernforge.propose.families import chain as family

    angles = torch.arange(64 * 32, dtype=torch.float32).reshape(64, 32) * 0.37  # up to ~760 radians
    task = next(t for t in chain_tasks(Rotary(), (angles,), tmp_path, "rotary") if t.op == f"chain:{op}+mul")
    facts = family.match(task)
    assert not isinstance(facts, str), facts
    (result,) = evaluated_points(task, backend, [family.space(facts, backend, Hardware()).fit(
        family.start(facts, backend, Hardware()))], tmp_path)
    assert result.status == "ok", result.reason
