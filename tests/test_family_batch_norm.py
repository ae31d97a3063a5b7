"""The batch-norm family (propose/families/batch_norm/): inference with running statistics, batch
statistics (training without running statistics, instance norm). What it takes and refuses and
why, what the capture records for the modules it serves, the start rules on ResNet-50's shapes,
and the proposer end to end. Nothing here builds a kernel: the sweep (test_sweep.py, on the cases
of sweep_cases.py) checks them against the ATen op on every backend; test_family_kernels.py the
batch statistics of data of a large mean and the statistics cuDNN and CUDA save, on a task as
CUDA lists it."""

from __future__ import annotations

import family_check
import pytest
import torch
from family_check import channels_last, family_for, make_task, tensor

from kernforge.propose.builtin import BuiltinProposer, Hardware
from kernforge.propose.families import batch_norm
from kernforge.records.task import KernelTask

pytestmark = pytest.mark.unit

BN, BN_LEGIT, BN_CUDNN = batch_norm.NATIVE, batch_norm.NO_TRAINING, batch_norm.CUDNN
F32, BF16, F16 = "torch.float32", "torch.bfloat16", "torch.float16"
HW = Hardware()


def bn_args(shape, dtype=F32, layout="nchw", op=BN, affine=True, stats_dtype=None, training=False, stats=True):
    c = shape[1]
    sd = stats_dtype or dtype
    x = tensor(shape, dtype, channels_last(shape) if layout == "nhwc" else None)
    affine_args = [tensor([c], sd), tensor([c], sd)] if affine else [None, None]
    running = [tensor([c], sd), tensor([c], sd, positive=True)] if stats else [None, None]
    if op == BN_LEGIT:
        return [x, *affine_args, *running, 0.1, 1e-5]
    return [x, *affine_args, *running, training, 0.1, 1e-5]


def stats_args(shape, dtype=F32, layout="nchw", affine=True):
    """Batch statistics: training mode without running statistics (track_running_stats=False)."""
    return bn_args(shape, dtype, layout, affine=affine, training=True, stats=False)


def fake_task(op, args, outputs, device="cuda"):
    return KernelTask(task_id="t0", op=op, signature="s", args=args, outputs=outputs, samples=[], share=0.5,
                      gain_if_2x=1.33, time_us=10.0, device=device)


def shape_facts(shape, dtype=F32, layout="nchw", training=False, saved_dtype=F32):
    """Facts of a large shape without running it: the outputs as CUDA lists them."""
    args = stats_args(shape, dtype, layout) if training else bn_args(shape, dtype, layout, op=BN_LEGIT)
    c = shape[1]
    saved = [tensor([c], saved_dtype), tensor([c], saved_dtype)] if training else [tensor([0]), tensor([0])]
    facts = batch_norm.match(fake_task(BN if training else BN_LEGIT, args, [args[0], *saved]))
    assert isinstance(facts, dict), facts
    return facts


# ---------------------------------------------------------------- what is supported

SUPPORTED = [
    ("inference-nchw", BN, bn_args([2, 3, 5, 7])),
    ("inference-nhwc", BN_LEGIT, bn_args([2, 5, 3, 7], layout="nhwc", op=BN_LEGIT)),
    ("inference-fp32-stats", BN, bn_args([2, 3, 5, 7], BF16, stats_dtype=F32)),
    ("stats-nchw", BN, stats_args([3, 5, 4, 7])),
    ("stats-nhwc", BN, stats_args([2, 6, 3, 5], layout="nhwc")),
    ("instance", BN, stats_args([1, 6, 5, 7], affine=False)),
    ("no-stats-op", batch_norm.NO_STATS, stats_args([2, 3, 9])[:3] + [True, 0.1, 1e-5]),
]


@pytest.mark.parametrize("name, op, args", SUPPORTED, ids=[s[0] for s in SUPPORTED])
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_supported_cases_match(name, op, args, backend):
    task = make_task(op, args)
    assert BuiltinProposer().why_unsupported(task, backend) is None
    assert family_for(task)[0].name == "batch_norm"


def test_the_mode_follows_the_training_flag_and_the_statistics():
    assert family_for(make_task(BN, bn_args([2, 3, 5, 7])))[1]["mode"] == "inference"
    assert family_for(make_task(BN, stats_args([2, 3, 5, 7])))[1]["mode"] == "batch_stats"


def test_only_inference_has_a_cuda_template():
    assert batch_norm.space(family_for(make_task(BN, bn_args([2, 3, 5, 7])))[1], "cuda", HW) is not None
    assert batch_norm.space(family_for(make_task(BN, stats_args([2, 3, 5, 7])))[1], "cuda", HW) is None


@pytest.mark.parametrize("op, args, words", [
    (BN, bn_args([2, 3, 4, 5], training=True), "updates them in place"),
    (BN, bn_args([2, 3, 4, 5], stats_dtype=F16), "weight of dtype torch.float16"),
    (BN, bn_args([2, 3, 4, 5], stats=False), "inference without running statistics"),
    (BN, [tensor([2, 3, 4, 5], F32, [60, 1, 3, 12])] + bn_args([2, 3, 4, 5])[1:], "neither contiguous nor"),
    (BN, bn_args([2, 3, 4, 5], "torch.float64"), "batch norm on torch.float64"),
    (BN_CUDNN, bn_args([2, 3, 4, 5], training=True, stats=False), "cudnn_batch_norm in training mode"),
    (batch_norm.LEGIT, bn_args([2, 3, 4, 5], training=True), "writes running_mean/var in place"),
])
def test_unsupported_cases_say_why(op, args, words):
    c = args[0]["shape"][1]
    task = fake_task(op, args, [args[0], tensor([c]), tensor([c])])
    for backend in ("cpu", "triton"):
        reason = BuiltinProposer().why_unsupported(task, backend)
        assert reason is not None and words in reason, reason


def test_other_ops_are_refused_with_the_op_named():
    task = fake_task("aten::bmm.default", [tensor([2, 3, 4]), tensor([2, 4, 5])], [tensor([2, 3, 5])])
    assert batch_norm.match(task) == "no built-in template for aten::bmm.default"


def test_no_metal_template():
    task = make_task(BN, bn_args([2, 3, 4, 5]))
    assert BuiltinProposer().why_unsupported(task, "metal") == "no metal template for batch_norm"


# ---------------------------------------------------------------- what the capture records

def recorded_tasks(module: torch.nn.Module, x: torch.Tensor) -> list[KernelTask]:
    from kernforge.capture.recorder import Recorder

    recorder = Recorder()
    with recorder, torch.no_grad():
        module(x)
    return [fake_task(str(c.func).replace("aten.", "aten::"), c.args, c.outputs, "cpu") for c in recorder.calls
            if "batch_norm" in str(c.func)]


@pytest.mark.parametrize("module, supported", [
    (torch.nn.BatchNorm2d(3).eval(), True),
    (torch.nn.BatchNorm2d(3, track_running_stats=False).train(), True),
    (torch.nn.InstanceNorm2d(3), True),
    (torch.nn.InstanceNorm2d(3, affine=True), True),
    (torch.nn.BatchNorm2d(3).train(), False),  # running statistics updated in place
    (torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True).train(), False),
], ids=["bn-eval", "bn-train-untracked", "instance", "instance-affine", "bn-train-tracked", "instance-tracked"])
def test_what_the_capture_records_for_each_module(module, supported):
    """On the CPU every form is one native_batch_norm call; instance norm's runs on the
    [1, N*C, H, W] view (a channel per (sample, channel) plane) in training mode."""
    (task,) = recorded_tasks(module, torch.randn(2, 3, 5, 7))
    assert task.op == BN
    facts = batch_norm.match(task)
    assert isinstance(facts, dict) == supported, facts
    if supported and isinstance(module, torch.nn.InstanceNorm2d):
        assert (facts["mode"], facts["n"], facts["c"], facts["hw"]) == ("batch_stats", 1, 6, 35)


def test_the_evaluator_does_not_see_native_batch_norm_write_its_running_statistics():
    """Why training with running statistics is refused: the schema marks nothing written, so the
    judge holds running_mean/var to their old values and compares only the three outputs."""
    from kernforge.harness.inputs import mutated_inputs

    assert mutated_inputs(torch.ops.aten.native_batch_norm.default._schema) == []
    assert mutated_inputs(torch.ops.aten._native_batch_norm_legit.default._schema) == [3, 4]


# ---------------------------------------------------------------- start rules

@pytest.mark.parametrize("shape, layout, variant", [
    ((32, 64, 56, 56), "nchw", "plane"),  # ResNet-50's first stage: planes of 3136
    ((32, 64, 56, 56), "nhwc", "tile"),
    ((32, 2048, 7, 7), "nchw", "flat"),  # planes of 49 would leave a plane program mostly masked
])
def test_inference_starts(shape, layout, variant):
    facts = shape_facts(shape, BF16, layout)
    start = batch_norm.start(facts, "triton", HW)
    assert start["variant"] == variant
    assert batch_norm.space(facts, "triton", HW).contains(start)
    cuda = batch_norm.start(facts, "cuda", HW)
    assert batch_norm.space(facts, "cuda", HW).contains(cuda)
    # 16-byte packs where the layout allows them: planes of 3136 or rows of 64 channels, not planes of 49
    assert cuda["vec"] == (1 if shape[2] == 7 else 8)


def test_batch_statistics_split_when_channels_cannot_fill_the_sms():
    # 64 channels over 32 x 56 x 56 positions: 64 programs for 132 SMs, so 8 splits of 12544
    few = shape_facts((32, 64, 56, 56), F32, training=True)
    assert batch_norm.start(few, "triton", HW) == {"variant": "split", "block_c": 1, "block_p": 4096,
                                                   "num_warps": 8, "splits": 8}
    # instance norm of the same tensor: 2048 (sample, channel) planes fill the SMs alone
    planes = shape_facts((1, 32 * 64, 56, 56), F32, training=True)
    assert batch_norm.start(planes, "triton", HW)["variant"] == "channel"
    # channels-last: 32 channels a program; 256 channels make 8 programs, 6272 positions split in 4
    # (no split under 1K positions)
    wide = shape_facts((32, 256, 14, 14), BF16, "nhwc", training=True)
    start = batch_norm.start(wide, "triton", HW)
    assert start == {"variant": "split", "block_c": 32, "block_p": 128, "num_warps": 8, "splits": 4}
    # a machine with 8 SMs: 8 programs fill it, no split
    assert batch_norm.start(wide, "triton", Hardware(sms=4))["variant"] == "channel"
    for facts in (few, planes, wide):
        assert batch_norm.space(facts, "triton", HW).contains(batch_norm.start(facts, "triton", HW))


def test_every_valid_point_renders_a_distinct_source():
    for op, args in ((BN, bn_args([2, 3, 5, 7], BF16)), (BN, stats_args([2, 6, 3, 5], BF16, "nhwc"))):
        task = make_task(op, args)
        family, facts = family_for(task)
        for backend in ("cpu", "triton", "cuda"):
            points = family_check.valid_points(task, backend)
            if not points and family.space(facts, backend, HW) is None:
                continue
            sources = {family.render(facts, backend, p) for p in points}
            assert len(sources) == len(points) > 1, backend


# ---------------------------------------------------------------- the proposer end to end

@pytest.mark.parametrize("op, args", [
    (BN_LEGIT, bn_args([2, 5, 3, 7], BF16, "nhwc", BN_LEGIT)), (BN, stats_args([3, 5, 4, 7], BF16)),
], ids=["inference", "batch-stats"])
@pytest.mark.parametrize("backend", ["cpu", "triton", "cuda"])
def test_proposals_start_at_the_start_rule_and_never_repeat(op, args, backend):
    task = make_task(op, args)
    family, facts = family_for(task)
    space = family.space(facts, backend, HW)
    if space is None:
        assert backend == "cuda" and facts["mode"] == "batch_stats"
        return
    tried = family_check.proposal_chain(task, backend, steps=40, seed=2)
    assert tried[0].params == family.start(facts, backend, HW)
    assert tried[0].rationale.startswith("starting point: ")
    assert len({p.source for p in tried}) == len(tried)  # never the same kernel twice
    assert all(space.contains(p.params) for p in tried)
    assert len(tried) > 3


def test_moves_are_explained():
    for name, old, new in (("variant", "channel", "split"), ("variant", "flat", "tile"), ("stats", "two_pass",
                           "one_pass_double"), ("splits", 2, 4), ("block_c", 4, 2), ("smem_affine", False, True)):
        assert batch_norm.explain(name, old, new) != "try a neighbouring value", name
