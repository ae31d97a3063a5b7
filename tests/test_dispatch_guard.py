"""kernforge.runtime.dispatch's guard description: one check per schema argument, defaults
filled in as the dispatcher's stack holds them, and a refusal for what the C++ guard cannot check."""

from __future__ import annotations

import pytest
import torch

from kernforge.runtime import dispatch

pytestmark = pytest.mark.unit

CPU = frozenset({torch.device("cpu")})


def tensor(shape, stride, dtype="torch.float32", device="cpu"):
    return {"shape": list(shape), "stride": list(stride), "dtype": dtype, "device": device}


def test_each_schema_argument_gets_a_check_with_defaults_filled_in():
    checks = dispatch.router_checks(torch.ops.aten.sum.dim_IntList, [tensor((4, 6), (6, 1)), [-1]], CPU, 16)
    assert [c["kind"] for c in checks] == [0, 5, 2, 1]  # self, dim, keepdim=False, dtype=None
    assert checks[0]["sizes"] == [4, 6] and checks[0]["strides"] == [6, 1] and checks[0]["align"] == 4
    assert checks[1]["value"] == [-1] and checks[2]["value"] == 0


def test_keyword_arguments_numbers_and_dtypes():
    checks = dispatch.router_checks(torch.ops.aten.sum.dim_IntList,
                                    [tensor((4, 6), (6, 1)), [1], True, {"kwargs": {"dtype": "torch.float64"}}], CPU, 16)
    assert checks[2] == {"kind": 2, "value": 1} and checks[3] == {"kind": 6, "dtype": torch.float64}
    softmax = dispatch.router_checks(torch.ops.aten._softmax.default, [tensor((2, 8), (8, 1), "torch.float16"), -1, False],
                                     CPU, 16)
    assert softmax[1] == {"kind": 3, "value": -1} and softmax[0]["align"] == 8
    scaled = dispatch.router_checks(torch.ops.aten.mul.Scalar, [tensor((3,), (1,)), 2], CPU, 16)
    assert scaled[1] == {"kind": 3, "value": 2}  # a Scalar keeps the type it was called with
    add = dispatch.router_checks(torch.ops.aten.add.Tensor, [tensor((3,), (1,)), tensor((3,), (1,))], CPU, 16)
    assert add[2] == {"kind": 3, "value": 1}  # alpha's default


def test_a_string_argument_is_checked_as_text():
    gelu = dispatch.router_checks(torch.ops.aten.gelu.default, [tensor((3,), (1,)), {"kwargs": {"approximate": "tanh"}}],
                                  CPU, 16)
    assert gelu[1] == {"kind": 7, "value": "tanh"}
    assert dispatch.router_checks(torch.ops.aten.gelu.default, [tensor((3,), (1,))], CPU, 16)[1]["value"] == "none"


def test_a_gpu_tensor_names_the_devices_it_was_proved_on():
    gpus = frozenset({torch.device("cuda", 0), torch.device("cuda", 2)})
    (check, *_) = dispatch.router_checks(torch.ops.aten._softmax.default,
                                         [tensor((2, 8), (8, 1), device="cuda:0"), -1, False], gpus, 16)
    assert check["cuda"] and check["device_indices"] == [0, 2]


def test_what_the_guard_cannot_check_keeps_the_python_router():
    with pytest.raises(dispatch.NotNative, match="does not check"):
        dispatch.router_checks(torch.ops.aten.div.Tensor_mode, [tensor((3,), (1,)), tensor((3,), (1,)),
                                                                {"kwargs": {"rounding_mode": "floor"}}], CPU, 16)
    with pytest.raises(dispatch.NotNative, match="neither given nor defaulted"):
        dispatch.router_checks(torch.ops.aten._softmax.default, [tensor((2, 8), (8, 1))], CPU, 16)
