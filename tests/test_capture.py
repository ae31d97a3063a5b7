"""kernforge.capture: every ATen call is recorded, ranked, and its real inputs kept exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import SOFTMAX_OP
from torch import nn

from kernforge.capture import capture_model, load_capture
from kernforge.harness.serialize import Placeholder, decode_value, encode_value, load_sample, load_sample_outputs
from kernforge.models import load_model
from kernforge.models.loader import LoadedModel

pytestmark = pytest.mark.integration

CPU = torch.device("cpu")


def loaded(module: nn.Module, *inputs) -> LoadedModel:
    return LoadedModel(module=module.eval(), inputs=tuple(inputs), device=CPU, name="m", spec="m")


def by_op(capture) -> dict[str, list]:
    ops: dict[str, list] = {}
    for p in capture.profiles:
        ops.setdefault(p.op, []).append(p)
    return ops


class SoftmaxSpellings(nn.Module):
    def forward(self, x, w):
        a = x.softmax(-1)
        b = torch.nn.functional.softmax(x, dim=-1)
        c = torch.softmax(x, dim=-1)
        return (a + b + c) @ w, a[0] @ w[0]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def test_softmax_spellings_and_matmul_arrive_as_aten_ops():
    cap = capture_model(loaded(SoftmaxSpellings(), torch.randn(2, 5, 8), torch.randn(2, 8, 3)),
                        out_dir=None, repeats=1)
    ops = by_op(cap)
    assert SOFTMAX_OP in ops
    # the three spellings have one signature: same op, shapes and arguments
    (softmax,) = ops[SOFTMAX_OP]
    assert softmax.calls == 3
    assert softmax.kind == "compute"
    assert softmax.args[0]["shape"] == [2, 5, 8]
    assert softmax.args[1:] == [-1, False]
    assert "aten::bmm.default" in ops  # 3-D @
    assert "aten::mm.default" in ops  # 2-D @


def test_hand_written_rmsnorm_arrives_as_its_pieces():
    cap = capture_model(loaded(RMSNorm(16), torch.randn(4, 16)), out_dir=None, repeats=1)
    ops = by_op(cap)
    pieces = ("aten::pow.Tensor_Scalar", "aten::mean.dim", "aten::rsqrt.default",
              "aten::mul.Tensor")
    for piece in pieces:
        assert piece in ops, f"{piece} missing from {sorted(ops)}"
        assert all(p.kind == "compute" for p in ops[piece])
    assert "aten::add.Tensor" in ops  # + eps


def test_shares_sum_to_one_and_profiles_are_ranked():
    cap = capture_model(loaded(RMSNorm(64), torch.randn(32, 64)), out_dir=None, repeats=3)
    assert cap.repeats == 3
    assert cap.total_time_us > 0
    # the calls' shares sum to one; a chain's share is its steps' again, not added to them
    assert sum(p.share for p in cap.profiles if p.kind != "chain") == pytest.approx(1.0, abs=1e-6)
    assert all(0.0 <= p.share <= 1.0 for p in cap.profiles)
    times = [p.time_us for p in cap.profiles]
    assert times == sorted(times, reverse=True)
    assert sum(p.time_us for p in cap.profiles if p.kind != "chain") == pytest.approx(cap.total_time_us, rel=1e-9)
    for p in cap.profiles:
        assert p.gain_if_2x == pytest.approx(1.0 / (1.0 - p.share / 2.0))
    assert all(p.kind == "compute" for p in cap.ranked())
    assert cap.forward_ms > 0 and cap.captured_ms > 0


class TransposedInput(nn.Module):
    def forward(self, x, y):
        return torch.exp(x.t()), torch.tanh(y)  # exp gets a non-contiguous (transposed) input


def test_samples_saved_and_loaded_back_exactly(tmp_path: Path):
    x = torch.randn(6, 9, dtype=torch.float64)
    y = torch.randn(3, 5).to(torch.bfloat16)
    cap = capture_model(loaded(TransposedInput(), x, y), tmp_path, repeats=1)
    ops = by_op(cap)

    (exp,) = ops["aten::exp.default"]
    assert exp.args[0]["stride"] == [1, 9]
    assert exp.samples == [f"samples/{exp.signature}/0.pt"]
    args, kwargs = load_sample(tmp_path / exp.samples[0])
    assert kwargs == {}
    (xt,) = args
    assert xt.dtype == torch.float64
    assert xt.shape == (9, 6)
    assert xt.stride() == (1, 9)
    assert torch.equal(xt, x.t())

    (tanh,) = ops["aten::tanh.default"]
    (y_again,), _ = load_sample(tmp_path / tanh.samples[0])
    assert y_again.dtype == torch.bfloat16
    assert y_again.stride() == y.stride()
    assert torch.equal(y_again, y)


def test_torch_attributes_encode_and_decode_one_by_one():
    values = (torch.float64, torch.bfloat16, torch.strided, torch.channels_last,
              torch.device("cpu"))
    for value in values:
        encoded = encode_value(value)
        assert isinstance(encoded, dict)
        assert decode_value(encoded) == value
    t = torch.arange(3.0)
    assert decode_value(encode_value(t)) is t
    assert encode_value(3) == 3 and decode_value("x") == "x"


class DtypeKeyword(nn.Module):
    def forward(self, y):
        return torch.sum(y, dim=-1, dtype=torch.float64)  # a torch.dtype argument


def test_samples_with_a_dtype_argument_load_back_exactly(tmp_path: Path):
    y = torch.randn(3, 5)
    cap = capture_model(loaded(DtypeKeyword(), y), tmp_path, repeats=1)
    (total,) = by_op(cap)["aten::sum.dim_IntList"]
    args, kwargs = load_sample(tmp_path / total.samples[0])
    assert torch.equal(args[0], y)
    assert args[1:] == [[-1]]
    assert kwargs == {"dtype": torch.float64}
    # the reloaded sample reproduces the op's output
    expected = torch.sum(y, -1, dtype=torch.float64)
    assert torch.equal(torch.ops.aten.sum.dim_IntList(*args, **kwargs), expected)


class SlicedInput(nn.Module):
    def forward(self, x):
        return x[:, ::2] * 3  # a non-dense view: strides (8, 2)


def test_samples_keep_strides_of_non_dense_inputs(tmp_path: Path):
    x = torch.randn(6, 8)
    cap = capture_model(loaded(SlicedInput(), x), tmp_path, repeats=1)
    (mul,) = by_op(cap)["aten::mul.Tensor"]
    assert mul.args[0]["stride"] == [8, 2]
    args, _ = load_sample(tmp_path / mul.samples[0])
    assert torch.equal(args[0], x[:, ::2])
    assert list(args[0].stride()) == mul.args[0]["stride"]


class InPlace(nn.Module):
    def forward(self, x):
        y = x.clone()
        y.mul_(2.0)
        y.add_(1.0)
        x.relu_()  # in place on the model's own input (idempotent across the repeated passes)
        return y


def test_in_place_ops_are_captured_with_their_inputs_before_the_call(tmp_path: Path):
    x = torch.randn(4, 7)
    original = x.clone()
    cap = capture_model(loaded(InPlace(), x), tmp_path, repeats=1)
    ops = by_op(cap)
    assert {"aten::mul_.Tensor", "aten::add_.Tensor", "aten::relu_.default"} <= set(ops)
    (mul,) = ops["aten::mul_.Tensor"]
    args, _ = load_sample(tmp_path / mul.samples[0])
    # The sample is y before mul_ ran: relu_ had already run on x in the warm-up pass.
    assert torch.equal(args[0], original.relu())
    (add,) = ops["aten::add_.Tensor"]
    args, _ = load_sample(tmp_path / add.samples[0])
    assert torch.equal(args[0], original.relu() * 2.0)


class StructuredOutputs(nn.Module):
    def forward(self, x):
        p = x.softmax(-1)
        return {"probs": p, "pair": (p.sum(-1), x.abs()), "meta": 3}


def test_dict_and_tuple_outputs_are_captured(tmp_path: Path):
    cap = capture_model(loaded(StructuredOutputs(), torch.randn(3, 10)), tmp_path, repeats=1)
    ops = by_op(cap)
    assert SOFTMAX_OP in ops and "aten::abs.default" in ops
    (softmax,) = ops[SOFTMAX_OP]
    assert softmax.outputs[0]["shape"] == [3, 10]


def test_capture_round_trips_through_profile_json(tmp_path: Path):
    cap = capture_model(loaded(RMSNorm(16), torch.randn(4, 16)), tmp_path, repeats=1)
    again = load_capture(tmp_path)
    assert again == cap
    for p in cap.ranked():
        assert p.samples, p.signature
        for rel in p.samples:
            assert (tmp_path / rel).is_file()


def test_no_out_dir_keeps_no_samples(tmp_path: Path):
    cap = capture_model(loaded(RMSNorm(16), torch.randn(4, 16)), out_dir=None, repeats=1)
    assert all(p.samples == [] for p in cap.profiles)


def test_views_copies_and_allocations_are_not_sampled(tmp_path: Path):
    class Mixed(nn.Module):
        def forward(self, x):
            return (x.view(-1).clone() + torch.zeros(x.numel())).reshape(x.shape).t()

    cap = capture_model(loaded(Mixed(), torch.randn(3, 4)), tmp_path, repeats=1)
    kinds = {p.op: p.kind for p in cap.profiles}
    assert kinds["aten::view.default"] == "view"
    assert kinds["aten::clone.default"] == "copy"
    assert kinds["aten::zeros.default"] == "alloc"
    assert kinds["aten::add.Tensor"] == "compute"
    for p in cap.profiles:
        assert bool(p.samples) == (p.kind == "compute"), p.op


def test_sample_caps(tmp_path: Path):
    class Repeats(nn.Module):
        def forward(self, x):
            for _ in range(4):
                x = torch.tanh(x)  # four calls, one signature
            return x

    cap = capture_model(loaded(Repeats(), torch.randn(8, 8)), tmp_path / "a", repeats=1,
                        samples_per_signature=2)
    (tanh,) = by_op(cap)["aten::tanh.default"]
    assert tanh.calls == 4 and len(tanh.samples) == 2

    cap = capture_model(loaded(Repeats(), torch.randn(8, 8)), tmp_path / "b", repeats=1,
                        sample_cap_bytes=8 * 8 * 4 - 1)
    (tanh,) = by_op(cap)["aten::tanh.default"]
    # one sample is over the per-sample cap: one sample of its layout only, no values, no outputs
    assert len(tanh.samples) == 1 and tanh.real_inputs == "none"
    (x,), _ = load_sample(tmp_path / "b" / tanh.samples[0])
    assert x == Placeholder(shape=(8, 8), stride=(8, 1), dtype="torch.float32")
    assert load_sample_outputs(tmp_path / "b" / tanh.samples[0]) == []

    cap = capture_model(loaded(Repeats(), torch.randn(8, 8)), tmp_path / "c", repeats=1,
                        samples_per_signature=4, total_cap_bytes=3 * 2 * 8 * 8 * 4)
    (tanh,) = by_op(cap)["aten::tanh.default"]
    # inputs and outputs count; the fourth would pass the total cap, and a signature with real
    # samples gets no placeholder one
    assert len(tanh.samples) == 3 and tanh.real_inputs == "all" and tanh.placeholders == []


def test_inputs_over_the_cap_keep_the_tensors_that_fit(tmp_path: Path):
    """A layer norm over the cap (the (16, 64, 256, 256) float32 one on an H200, here 8 KB over a
    1 KB cap) keeps its weight and bias, and the input's layout as a placeholder."""
    x = torch.randn(4, 32, 16).transpose(1, 2)  # strided: the placeholder keeps the strides
    norm = nn.LayerNorm(32).eval()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    cap = capture_model(loaded(norm, x), tmp_path, repeats=1, sample_cap_bytes=1024)
    (profile,) = by_op(cap)["aten::native_layer_norm.default"]
    assert profile.real_inputs == "partial"
    assert profile.placeholders == [{"shape": [4, 16, 32], "stride": [512, 1, 16], "dtype": "torch.float32",
                                     "storage_offset": 0, "low": None, "high": None}]
    args, _ = load_sample(tmp_path / profile.samples[0])
    assert isinstance(args[0], Placeholder) and args[0].stride == (512, 1, 16)
    assert torch.equal(args[2], norm.weight) and torch.equal(args[3], norm.bias)
    assert (tmp_path / profile.samples[0]).stat().st_size < 4096  # the 8 KB input is not in it
    assert load_capture(tmp_path) == cap  # the new fields round-trip through profile.json


def test_the_caps_count_the_bytes_saved(tmp_path: Path):
    """An expanded input saves its one row (a layout copy keeps stride 0): 256 bytes under a 1 KB
    cap, where its element count (64 KB) is far over it."""
    x = torch.randn(1, 64).expand(256, 64)
    cap = capture_model(loaded(nn.Tanh(), x), tmp_path, repeats=1, sample_cap_bytes=1024, total_cap_bytes=1 << 20)
    (tanh,) = by_op(cap)["aten::tanh.default"]
    assert tanh.real_inputs == "all"
    (saved,), _ = load_sample(tmp_path / tanh.samples[0])
    assert saved.stride() == (0, 1) and torch.equal(saved, x)


def test_integer_inputs_over_the_cap_record_their_range(tmp_path: Path):
    class Lookup(nn.Module):
        def forward(self, table, idx):
            return table.index_select(0, idx)

    idx = torch.tensor([3, 7, 5] * 100)  # 2.4 KB of int64, over the cap; the table fits
    cap = capture_model(loaded(Lookup(), torch.randn(10, 4), idx), tmp_path, repeats=1, sample_cap_bytes=1024)
    (profile,) = by_op(cap)["aten::index_select.default"]
    assert profile.real_inputs == "partial"
    (meta,) = profile.placeholders
    assert (meta["dtype"], meta["low"], meta["high"]) == ("torch.int64", 3, 7)


def test_samples_saved_before_placeholders_still_load(tmp_path: Path):
    """A sample file of the old format (every tensor real) loads as it did."""
    x = torch.randn(3, 5)
    torch.save({"args": [x, -1, False], "kwargs": {}, "outputs": [torch.softmax(x, -1)]}, tmp_path / "0.pt")
    args, kwargs = load_sample(tmp_path / "0.pt")
    assert torch.equal(args[0], x) and args[1:] == [-1, False] and kwargs == {}
    assert torch.equal(load_sample_outputs(tmp_path / "0.pt")[0], torch.softmax(x, -1))


def test_tiny_model_ranks_softmax_among_compute_ops(softmax_capture):
    _, cap, task = softmax_capture
    ops = {p.op for p in cap.ranked()}
    assert {SOFTMAX_OP, "aten::bmm.default", "aten::addmm.default"} <= ops
    assert task.op == SOFTMAX_OP
    assert task.args[0]["shape"] == [2, 40, 40]
    assert task.samples and all(Path(s).is_absolute() and Path(s).is_file() for s in task.samples)


def test_capture_of_a_kernelbench_file(write_model, tmp_path: Path):
    path = write_model("gelu_model", """
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                return torch.nn.functional.gelu(x)

        def get_inputs():
            return [torch.randn(16, 16)]
    """)
    cap = capture_model(load_model(str(path), CPU), tmp_path / "cap", repeats=1)
    assert cap.model == "gelu_model"
    assert cap.device == "cpu"
    assert "aten::gelu.default" in by_op(cap)


# ---------------------------------------------------------------- data-dependent control flow

class DataDependent(nn.Module):
    """A branch on a tensor's value and a loop whose trip count is a tensor's value."""

    def forward(self, x, steps):
        if x.sum() > 0:
            x = torch.tanh(x)
        else:
            x = torch.sigmoid(x)
        for _ in range(int(steps)):
            x = torch.cos(x)
        return x


@pytest.mark.parametrize(("sign", "steps", "taken", "not_taken"), [
    (1.0, 3, "aten::tanh.default", "aten::sigmoid.default"),
    (-1.0, 1, "aten::sigmoid.default", "aten::tanh.default"),
])
def test_data_dependent_control_flow_records_the_path_taken(sign, steps, taken, not_taken):
    x = sign * (torch.rand(4, 6) + 0.1)
    cap = capture_model(loaded(DataDependent(), x, torch.tensor(steps)), out_dir=None, repeats=1)
    ops = by_op(cap)
    assert taken in ops, sorted(ops)
    assert not_taken not in ops, sorted(ops)
    (cos,) = ops["aten::cos.default"]
    assert cos.calls == steps  # one call per trip of the loop
    assert "aten::_local_scalar_dense.default" in ops  # the reads of tensor values are calls too


# ---------------------------------------------------------------- producers in calls.jsonl

def read_calls(folder: Path) -> list[dict]:
    calls = [json.loads(line) for line in (folder / "calls.jsonl").read_text().splitlines()]
    assert [c["index"] for c in calls] == list(range(len(calls)))
    return calls


def only_call(calls: list[dict], op: str) -> dict:
    (call,) = [c for c in calls if c["op"] == op]
    return call


class ScaledSoftmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x * 2, -1)


def test_calls_jsonl_names_the_producer_of_each_input(tmp_path: Path):
    capture_model(loaded(ScaledSoftmax(), torch.randn(3, 5)), tmp_path, repeats=1)
    calls = read_calls(tmp_path)
    mul = only_call(calls, "aten::mul.Tensor")
    softmax = only_call(calls, SOFTMAX_OP)
    assert mul["producers"] == [None]  # x is a model input; the 2 is no tensor
    assert softmax["producers"] == [mul["index"]]
    assert mul["index"] < softmax["index"]
    for c in calls:
        assert set(c) == {"index", "op", "signature", "kind", "module", "producers", "time_us"}
        assert c["time_us"] >= 0


class ParameterAndInPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.full((5,), 2.0))

    def forward(self, x):
        y = x * self.scale
        y.add_(1.0)  # in place: from here on y was produced by add_
        return torch.softmax(y, -1)


def test_parameters_are_not_produced_and_in_place_ops_produce_what_they_modify(tmp_path: Path):
    capture_model(loaded(ParameterAndInPlace(), torch.randn(3, 5)), tmp_path, repeats=1)
    calls = read_calls(tmp_path)
    mul = only_call(calls, "aten::mul.Tensor")
    add = only_call(calls, "aten::add_.Tensor")
    softmax = only_call(calls, SOFTMAX_OP)
    assert mul["producers"] == [None, None]  # a model input and a parameter
    assert add["producers"] == [mul["index"]]
    assert softmax["producers"] == [add["index"]]  # not the mul that first made y


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x):
        return self.block(x).exp()


def test_calls_carry_the_module_they_ran_in(tmp_path: Path):
    cap = capture_model(loaded(Nested(), torch.randn(2, 4)), tmp_path, repeats=1)
    calls = read_calls(tmp_path)
    assert only_call(calls, "aten::addmm.default")["module"] == "block.0"
    assert only_call(calls, "aten::relu.default")["module"] == "block.1"
    assert only_call(calls, "aten::exp.default")["module"] == ""  # the top module itself
    assert by_op(cap)["aten::addmm.default"][0].module == "block.0"
    relu = only_call(calls, "aten::relu.default")
    assert relu["producers"] == [only_call(calls, "aten::addmm.default")["index"]]


# ---------------------------------------------------------------- sample outputs

def aten_overload(op: str):
    """'aten::_softmax.default' -> torch.ops.aten._softmax.default."""
    namespace, _, rest = op.partition("::")
    name, _, overload = rest.rpartition(".")
    return getattr(getattr(getattr(torch.ops, namespace), name), overload)


class Several(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x):
        a = torch.tanh(x)
        b = torch.tanh(a * 3)  # a second call of the tanh signature, on other values
        c = self.proj(b)
        c.mul_(2.0)  # in place: its output is not its input as saved
        return torch.softmax(c, -1)


def test_sample_outputs_are_what_the_op_returns_on_the_sample_inputs(tmp_path: Path):
    torch.manual_seed(0)
    cap = capture_model(loaded(Several(), torch.randn(5, 6)), tmp_path, repeats=1)
    ops = by_op(cap)
    (tanh,) = ops["aten::tanh.default"]
    assert tanh.calls == 2 and len(tanh.samples) == 2
    checked = set()
    for p in cap.ranked():
        assert p.samples, p.op
        for rel in p.samples:
            args, kwargs = load_sample(tmp_path / rel)
            before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            saved = load_sample_outputs(tmp_path / rel)
            result = aten_overload(p.op)(*args, **kwargs)
            expected = [result] if isinstance(result, torch.Tensor) else list(result)
            assert len(saved) == len(expected) == len(p.outputs), p.op
            for got, want, meta in zip(saved, expected, p.outputs):
                assert got.dtype == want.dtype and got.shape == want.shape, p.op
                assert list(got.shape) == meta["shape"]
                torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
            if p.op == "aten::mul_.Tensor":  # saved after the call, not aliased to the input
                assert not torch.equal(saved[0], before[0])
                torch.testing.assert_close(saved[0], before[0] * 2.0)
            checked.add(p.op)
    assert {"aten::tanh.default", "aten::mul.Tensor", "aten::addmm.default", "aten::mul_.Tensor",
            SOFTMAX_OP} <= checked
    # the two tanh samples each keep their own call's output
    first, second = (load_sample_outputs(tmp_path / rel)[0] for rel in tanh.samples)
    assert not torch.equal(first, second)


class InPlaceThroughAView(nn.Module):
    def forward(self, x):
        y = x * 2
        y[:, :2].add_(1.0)  # writes y's storage through a slice of it
        return torch.softmax(y, -1)


def test_in_place_write_through_a_view_produces_the_base(tmp_path: Path):
    capture_model(loaded(InPlaceThroughAView(), torch.randn(3, 4)), tmp_path, repeats=1)
    calls = read_calls(tmp_path)
    add = only_call(calls, "aten::add_.Tensor")
    softmax = only_call(calls, SOFTMAX_OP)
    assert softmax["producers"] == [add["index"]]  # the last call that wrote y, not the mul


class Alternating(nn.Module):
    """Takes the other branch on every pass (state kept across passes)."""

    def __init__(self):
        super().__init__()
        self.passes = 0

    def forward(self, x):
        self.passes += 1
        return torch.tanh(x) if self.passes % 2 else torch.sigmoid(x).exp()


def test_shares_sum_to_one_when_passes_take_different_paths():
    cap = capture_model(loaded(Alternating(), torch.randn(64, 64)), out_dir=None, repeats=3)
    # a chain's share is its steps' again (sigmoid+exp is one when the first recorded pass takes
    # that branch: the warm-up is timed, so which branch comes first is not fixed)
    assert sum(p.share for p in cap.profiles if p.kind != "chain") == pytest.approx(1.0, abs=1e-6)
