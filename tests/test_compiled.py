"""kernforge.capture.compiled: inductor's kernels mapped back to the captured ATen ops, the floor
arithmetic, and the ranking that weighs what compile already runs at its floor by its eager gain alone."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kernforge.capture import Capture, OpProfile, load_capture
from kernforge.capture.compiled import (AT_FLOOR_NOTE, CompiledProfile, KernelTime, annotate, attribute, bytes_moved,
                                        chain_us, compile_ranking, compile_warning, cpu_kernels, floor_us, gpu_kernels,
                                        inductor_ops, kernel_of, profile_compiled, split_ops, to_json)
from kernforge.errors import UserError
from kernforge.report.tables import capture_summary, profile_table
from kernforge.tasks import make_tasks

pytestmark = pytest.mark.unit

CPU = torch.autograd.DeviceType.CPU


@pytest.mark.parametrize(("name", "ops"), [
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", ("_to_copy", "add", "mean", "mul", "pow", "rsqrt")),
    ("triton_per_fused_native_group_norm_silu_3", ("native_group_norm", "silu")),
    ("triton_poi_fused_add_mul_0", ("add", "mul")),
    ("triton_per_fused__softmax_add_1", ("_softmax", "add")),
    ("triton_tem_fused_addmm_0", ("addmm",)),
    ("graph_0_cpp_fused__softmax_add_mul_0", ("_softmax", "add", "mul")),  # a CPU kernel's profiler event
    ("cpp_fused_native_group_norm_silu_12", ("native_group_norm", "silu")),
    ("triton_poi_fused_0", ()),  # a kernel of no named op (a copy inductor added)
])
def test_a_generated_kernels_name_lists_its_aten_ops(name, ops):
    assert inductor_ops(name) == ops
    assert kernel_of(name, 1.0, ["aten::mm"]).library is False  # its name, not its launcher, decides


@pytest.mark.parametrize(("name", "launched_by", "ops"), [
    ("extern_kernels.mm", [], ("mm",)),
    ("aten::convolution", ["aten::_convolution", "aten::mkldnn_convolution"],
     ("convolution", "_convolution", "mkldnn_convolution")),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", ["aten::mm"], ("mm",)),  # cuBLAS, launched by aten::mm
    ("ampere_sgemm_128x64_nn", [], ("mm", "addmm", "bmm", "baddbmm", "linear", "matmul")),  # unlinked: a gemm
    ("sm80_xmma_fprop_implicit_gemm_f32f32_tf32f32", [], ("convolution",)),  # cuDNN's conv, not a gemm
    ("void at::native::elementwise_kernel<128, 4>", [], ()),  # nothing says what it is
])
def test_a_library_kernel_maps_to_the_aten_op_that_launched_it(name, launched_by, ops):
    kernel = kernel_of(name, 1.0, launched_by)
    assert inductor_ops(name) is None and kernel.library and kernel.ops == ops


def test_op_names_holding_underscores_split_into_the_fewest_known_ops():
    known = {"native_group_norm", "group_norm", "norm", "silu", "_to_copy", "to", "add"}
    assert split_ops("native_group_norm_silu", known) == ["native_group_norm", "silu"]
    assert split_ops("_to_copy_add", known) == ["_to_copy", "add"]
    assert split_ops("add_frobnicate_silu", known) == ["add", "frobnicate", "silu"]  # an unknown word stays one


def _op(signature: str, op: str, time_us: float, calls: int = 1, kind: str = "compute",
        shape: tuple[int, ...] = (1024, 1024), dtype: str = "torch.float32", **extra) -> OpProfile:
    tensor = {"shape": list(shape), "dtype": dtype, "stride": _contiguous(shape), "device": "cpu"}
    return OpProfile(signature=signature, op=op, kind=kind, args=[tensor], outputs=[dict(tensor)], calls=calls,
                     time_us=time_us, share=0.0, gain_if_2x=1.0, samples=[f"samples/{signature}/0.pt"], **extra)


def _contiguous(shape: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    return strides


def test_a_kernels_time_is_split_between_the_ops_it_names_by_their_eager_time():
    gn, silu, mm = _op("gn", "aten::native_group_norm.default", 300.0), _op("silu", "aten::silu.default", 100.0), \
        _op("mm", "aten::mm.default", 50.0)
    kernels = [KernelTime("triton_per_fused_native_group_norm_silu_3", ("native_group_norm", "silu"), 40.0),
               KernelTime("sm90_xmma_gemm", ("mm",), 10.0, library=True),
               KernelTime("triton_poi_fused_sort_0", ("sort",), 7.0),  # no captured op: unmapped
               KernelTime("void cudnn::bn_fw", (), 3.0, library=True)]
    compiled, unmapped = attribute(kernels, [gn, silu, mm])
    assert compiled == pytest.approx({"gn": 30.0, "silu": 10.0, "mm": 10.0})
    assert unmapped == {"triton_poi_fused_sort_0": 7.0, "void cudnn::bn_fw": 3.0}  # never given to an op


def test_a_library_kernel_goes_to_the_outermost_launching_op_a_signature_has():
    conv = _op("conv", "aten::convolution.default", 80.0)
    kernel = KernelTime("sm80_xmma_fprop", ("conv2d", "convolution", "_convolution", "cudnn_convolution"), 12.0,
                        library=True)
    compiled, unmapped = attribute([kernel], [conv, _op("cudnn", "aten::cudnn_convolution.default", 80.0)])
    assert compiled == {"conv": 12.0, "cudnn": 0.0} and not unmapped


def test_signatures_of_one_op_share_its_kernels_by_eager_time_and_a_chain_sums_its_steps():
    small, large = _op("add_s", "aten::add.Tensor", 10.0), _op("add_l", "aten::add.Tensor", 30.0, calls=2)
    compiled, _ = attribute([KernelTime("triton_poi_fused_add_0", ("add",), 8.0)], [small, large])
    assert compiled == pytest.approx({"add_s": 2.0, "add_l": 6.0})
    # a chain holding one of add_l's two calls and small's only one
    assert chain_us({"covers": {"add_l": 1, "add_s": 1}}, compiled, {"add_l": 2, "add_s": 1}) == pytest.approx(5.0)


def test_the_floor_is_the_bytes_at_the_bandwidth_the_flops_at_the_peak_and_a_launch_per_call():
    x = _op("x", "aten::_softmax.default", 100.0, calls=3, shape=(1024, 1024))  # 4 MiB in, 4 MiB out
    assert bytes_moved(x) == 3 * 2 * 4 * 2**20
    assert floor_us(x, "cuda", 1000.0) == pytest.approx(3 * 2 * 4 * 2**20 / 1e12 * 1e6)  # 25.2 us at 1 TB/s
    tiny = _op("t", "aten::add.Tensor", 5.0, calls=4, shape=(8,))
    assert floor_us(tiny, "cuda", 1000.0) == pytest.approx(4 * 2.0)  # one 2 us launch a call on a GPU
    assert floor_us(tiny, "cpu", 1000.0) < 1e-3  # a CPU kernel is a call
    # a broadcast input (stride 0) is read once
    row = {"shape": [1024, 1024], "dtype": "torch.float32", "stride": [0, 1]}
    assert bytes_moved(_op("b", "aten::add.Tensor", 1.0, calls=1)) - bytes_moved(
        OpProfile(**{**asdict(_op("b", "aten::add.Tensor", 1.0)), "args": [row]})) == 4 * 1024 * 1023


def test_a_gemms_floor_is_its_flops_at_the_peak():
    a = {"shape": [4096, 4096], "dtype": "torch.bfloat16", "stride": [4096, 1]}
    mm = OpProfile(signature="mm", op="aten::mm.default", kind="compute", args=[a, dict(a)], outputs=[dict(a)],
                   calls=1, time_us=500.0, share=0.5, gain_if_2x=1.33)
    # 2 x 4096^3 = 137 GFLOP at 1 PFLOP/s: 137 us, far above its 96 MiB at 5 TB/s (20 us)
    assert floor_us(mm, "cuda", 5000.0) == pytest.approx(2 * 4096**3 / 1e15 * 1e6)


def _compiled_capture(total_us: float = 100.0) -> Capture:
    """A GPU capture whose group norm compile leaves far above its floor, whose softmax compile
    runs at its floor, and whose add no kernel named."""
    gn = _op("gn", "aten::native_group_norm.default", 300.0, shape=(64, 1024))
    softmax = _op("sm", "aten::_softmax.default", 600.0, shape=(64, 1024))
    add = _op("add", "aten::add.Tensor", 200.0, shape=(64, 1024))
    for p in (gn, softmax, add):
        p.share = p.time_us / 1100.0
        p.gain_if_2x = 1.0 / (1.0 - p.share / 2.0)
    result = CompiledProfile(device="cuda", total_us=total_us, bandwidth_gb_s=1000.0, launch_floor_us=2.0)
    annotate([gn, softmax, add], {"gn": 60.0, "sm": 0.6, "add": 0.0}, result)
    return Capture(model="m", device="cuda", forward_ms=1.0, captured_ms=1.0, total_time_us=1100.0,
                   measured_total_us=1100.0, repeats=1, profiles=[softmax, gn, add], compiled=to_json(result))


def test_a_candidate_at_its_floor_under_compile_ranks_by_its_eager_gain_and_says_so():
    cap = _compiled_capture()
    gn, softmax, add = (next(p for p in cap.profiles if p.signature == s) for s in ("gn", "sm", "add"))
    assert gn.headroom_us == pytest.approx(60.0 - gn.floor_us) and gn.gain_compiled > gn.gain_if_2x
    assert softmax.at_floor and not gn.at_floor
    assert not add.at_floor  # no kernel named it: unknown, not at the floor
    # gn's compiled gain (1.43x) over sm's eager gain (1.38x, its compiled gain none) over add's: by
    # eager time alone sm, gn, add
    assert gn.rank_gain > softmax.rank_gain == softmax.gain_if_2x > add.rank_gain
    assert [p.signature for p in cap.ranked()] == ["gn", "sm", "add"]
    table = _rendered(profile_table(cap))
    assert "compiled ms" in table and "headroom ms" in table and AT_FLOOR_NOTE in table
    assert "no compiled kernel names it" in table


def test_make_tasks_ranks_by_the_compiled_gain_and_says_why_a_hot_op_at_its_floor_was_passed_over(tmp_path: Path):
    cap = _compiled_capture()
    tasks, skipped = make_tasks(cap, tmp_path, top_k=1, why_unsupported=lambda task: None)
    assert [t.signature for t in tasks] == ["gn"]
    ((profile, reason),) = skipped
    assert profile.signature == "sm" and reason.startswith(AT_FLOOR_NOTE) and "floor" in reason
    # by eager time alone, the hottest is chosen and nothing is said of floors
    eager = Capture(**{**asdict(cap), "profiles": [OpProfile(**asdict(p)) for p in cap.profiles], "compiled": None})
    tasks, skipped = make_tasks(eager, tmp_path, top_k=1, why_unsupported=lambda task: None)
    assert [t.signature for t in tasks] == ["sm"] and not skipped


def test_a_profile_json_from_before_loads_and_ranks_by_eager_time(tmp_path: Path):
    cap = _compiled_capture()
    data = asdict(cap)
    data.pop("compiled")
    for p in data["profiles"]:
        for name in ("compiled_us", "floor_us", "headroom_us", "gain_compiled", "at_floor"):
            p.pop(name)
    (tmp_path / "profile.json").write_text(json.dumps(data))
    old = load_capture(tmp_path)
    assert old.compiled is None and not old.ranked_by_compile
    assert [p.signature for p in old.ranked()] == ["sm", "gn", "add"]
    assert all(p.compiled_us is None and not p.at_floor for p in old.profiles)
    assert "compiled ms" not in _rendered(profile_table(old))
    (tmp_path / "profile.json").write_text(json.dumps(asdict(cap)))  # and the new fields round-trip
    assert load_capture(tmp_path) == cap
    assert "under torch.compile" in capture_summary(cap)


def test_rank_by_auto_compiles_on_a_gpu_only_and_an_unknown_choice_is_one_line():
    assert compile_ranking("auto", "cuda") and not compile_ranking("auto", "cpu")
    assert compile_ranking("compile", "cpu") and not compile_ranking("eager", "cuda")
    with pytest.raises(UserError, match="--rank-by 'fast'.*auto, eager, compile"):
        compile_ranking("fast", "cpu")


def test_a_model_that_cannot_be_compiled_keeps_eager_ranking_with_one_warning_line():
    profiles = [_op("sm", "aten::_softmax.default", 600.0)]
    loaded = SimpleNamespace(module="not a module", inputs=(), device=torch.device("cpu"))
    result = profile_compiled(loaded, profiles)
    assert result.error and profiles[0].compiled_us is None
    cap = Capture(model="m", device="cpu", forward_ms=1.0, captured_ms=1.0, total_time_us=1.0, measured_total_us=1.0,
                  repeats=1, profiles=profiles, compiled=to_json(result))
    assert not cap.ranked_by_compile
    warning = compile_warning(cap)
    assert warning.startswith("warning: ranking by eager time only") and "\n" not in warning
    assert "--rank-by eager" in warning


def _event(name: str, us: float = 0.0, parent=None, kernels=()) -> SimpleNamespace:
    ev = SimpleNamespace(name=name, cpu_time_total=us, device_type=CPU, cpu_parent=parent, cpu_children=[],
                         kernels=[SimpleNamespace(name=k, duration=d) for k, d in kernels])
    if parent is not None:
        parent.cpu_children.append(ev)
    return ev


def test_a_cpu_profile_gives_generated_kernels_and_outermost_aten_calls():
    region = _event("## Call CompiledFxGraph abc ##", 100.0)
    addmm = _event("aten::addmm", 30.0, region)
    _event("aten::copy_", 2.0, addmm)  # inside addmm: its time is addmm's
    kernel = _event("graph_0_cpp_fused__softmax_add_mul_0", 50.0, region)
    kernels = cpu_kernels([region, addmm, *addmm.cpu_children, kernel])
    assert [(k.name, k.ops, k.us, k.library) for k in kernels] == [
        ("aten::addmm", ("addmm", "copy_"), 30.0, True),
        ("graph_0_cpp_fused__softmax_add_mul_0", ("_softmax", "add", "mul"), 50.0, False)]


def test_a_gpu_profile_gives_each_device_kernel_with_the_aten_ops_above_its_launch():
    region = _event("Torch-Compiled Region: 0/0")
    conv = _event("aten::convolution", parent=region)
    cudnn = _event("aten::cudnn_convolution", parent=conv, kernels=[("sm80_xmma_fprop_implicit_gemm", 40.0)])
    # a generated kernel is read from its device event, linked to a host event or not: counted once
    launch = _event("triton_per_fused_native_group_norm_silu_3", parent=region,
                    kernels=[("triton_per_fused_native_group_norm_silu_3", 25.0)])
    device = [SimpleNamespace(name=name, device_type=torch.autograd.DeviceType.CUDA,
                              time_range=SimpleNamespace(elapsed_us=lambda us=us: us))
              for name, us in (("triton_per_fused_native_group_norm_silu_3", 25.0),
                               ("triton_poi_fused_add_0", 3.0), ("sm80_xmma_fprop_implicit_gemm", 40.0))]
    kernels = gpu_kernels([region, conv, cudnn, launch, *device])
    assert sorted((k.ops, k.us, k.library) for k in kernels) == sorted([
        (("convolution", "cudnn_convolution"), 40.0, True), (("native_group_norm", "silu"), 25.0, False),
        (("add",), 3.0, False)])


def _rendered(table) -> str:
    from rich.console import Console

    console = Console(width=400, record=True)
    console.print(table)
    return console.export_text()


def test_the_profile_table_says_which_ops_a_listed_chain_holds():
    """A chain's share is its ops' shares again: each op whose calls all run inside a listed chain
    says which, and the table says its share column does not add up across them."""
    softmax = _op("sm", "aten::_softmax.default", 600.0, calls=2)
    add = _op("add", "aten::add.Tensor", 200.0, calls=3)  # one call outside the chain
    chain = _op("ch", "chain:add+_softmax", 800.0, calls=2, kind="chain",
                chain={"covers": {"sm": 2, "add": 2}})
    for p in (softmax, add, chain):
        p.share = p.time_us / 1000.0
    cap = Capture(model="m", device="cpu", forward_ms=1.0, captured_ms=1.0, total_time_us=1000.0,
                  measured_total_us=1000.0, repeats=1, profiles=[chain, softmax, add])
    table = _rendered(profile_table(cap, include_kinds=("compute", "chain")))
    assert "60.0% in #1" in table and "20.0% in #1" not in table and "20.0%" in table
    assert "does not add up" in table
    assert "in #" not in _rendered(profile_table(cap))  # the chain not listed: nothing to say
