"""The tasks the sweep (test_sweep.py) runs every family on: per family
package (builtin/family.FAMILY_PACKAGES), ops on odd shapes in each dtype the family takes.
Small enough for the Triton interpreter and the CPU backend; shaped to reach each variant
(a row longer than one block, rows that do not fill a program...)."""

from __future__ import annotations

from family_check import channels_last, tensor

F32, F16, BF16 = "torch.float32", "torch.float16", "torch.bfloat16"
DTYPES = (F32, F16, BF16)

SOFTMAX, LOG_SOFTMAX = "aten::_softmax.default", "aten::_log_softmax.default"
AVG_POOL, ADAPTIVE_POOL = "aten::avg_pool2d.default", "aten::_adaptive_avg_pool2d.default"
MAX_POOL = "aten::max_pool2d_with_indices.default"
LAYER_NORM, RMS_NORM = "aten::native_layer_norm.default", "aten::_fused_rms_norm.default"

BATCH_NORM, BN_NO_TRAINING = "aten::native_batch_norm.default", "aten::_native_batch_norm_legit_no_training.default"
BN_NO_STATS = "aten::_native_batch_norm_legit.no_stats"


def bn_args(shape, dtype, layout="nchw", training=False, affine=True, stats=None, weights=None):
    """native_batch_norm's arguments: running statistics only in inference (of dtype `stats`,
    default the input's), weight and bias of dtype `weights` (default the input's)."""
    c = shape[1]
    x = tensor(shape, dtype, channels_last(shape) if layout == "nhwc" else None)
    w, s = weights or dtype, stats or dtype
    affine_args = [tensor([c], w), tensor([c], w)] if affine else [None, None]
    running = [None, None] if training else [tensor([c], s), tensor([c], s, positive=True)]
    return [x, *affine_args, *running, training, 0.1, 1e-5]


CASES: dict[str, list[tuple[str, list]]] = {
    # batch norm (input, weight, bias, running_mean, running_var, training, momentum, eps): inference
    # with running statistics; batch statistics with none (training, track_running_stats=False); instance
    # norm, which torch runs as batch statistics on [1, N*C, H, W]
    "batch_norm": [
        *[(BATCH_NORM, bn_args([2, 3, 5, 7], dtype)) for dtype in DTYPES],  # planes of 35: flat and plane
        *[(BN_NO_TRAINING, bn_args([2, 5, 3, 7], dtype, "nhwc")[:5] + [0.1, 1e-5]) for dtype in DTYPES],  # tile
        (BATCH_NORM, bn_args([1, 2, 32, 33], BF16, stats=F32, weights=F32)),  # planes of 1056: plane; fp32 params
        (BATCH_NORM, bn_args([3, 4, 9], F16, affine=False)),  # 3-D, no affine; HW odd: packs of one
        *[(BATCH_NORM, bn_args([3, 5, 4, 7], dtype, training=True)) for dtype in DTYPES],  # 84 positions a channel
        *[(BATCH_NORM, bn_args([2, 6, 3, 5], dtype, "nhwc", training=True)) for dtype in DTYPES],
        (BATCH_NORM, bn_args([1, 6, 5, 7], BF16, training=True, affine=False)),  # instance norm, 3 x 2 planes
        (BATCH_NORM, bn_args([2, 3, 40, 41], F32, training=True)),  # 3280 positions, 3 channels: split
        (BN_NO_STATS, bn_args([6, 5], F16, training=True, weights=F32)[:3] + [True, 0.1, 1e-5]),  # [N, C]: HW 1
    ],
    # group norm (input, weight, bias, N, C, HxW, groups, eps)
    "group_norm": [
        *[("aten::native_group_norm.default", [tensor([2, 6, 5, 7], dtype), tensor([6], dtype), tensor([6], dtype),
                                               2, 6, 35, 3, 1e-5]) for dtype in DTYPES],  # groups of 70: one program
        ("aten::native_group_norm.default", [tensor([3, 8, 9], F32), None, None, 3, 8, 9, 2, 1e-5]),  # 3-D, no affine
        # groups of 2700: every variant, chunks straddling channels, a short last chunk; 16-bit pairs
        ("aten::native_group_norm.default", [tensor([1, 6, 30, 30], BF16), tensor([6], BF16), tensor([6], BF16),
                                             1, 6, 900, 2, 1e-5]),
        # 8 groups of 2048 (waves), chunks inside a channel; a float32 weight, no bias
        ("aten::native_group_norm.default", [tensor([2, 8, 32, 32], F16), tensor([8], F32), None, 2, 8, 1024, 4,
                                             1e-6]),
        ("aten::native_group_norm.default", [tensor([1, 4, 16, 16], F32), tensor([4], F32), tensor([4], F32),
                                             1, 4, 256, 1, 1e-5]),  # one group: nothing loads ahead
        # HxW odd: 16-bit values held one a register
        ("aten::native_group_norm.default", [tensor([1, 4, 15, 17], BF16), tensor([4], BF16), tensor([4], BF16),
                                             1, 4, 255, 2, 1e-5]),
    ],
    # layer norm (input, normalized_shape, weight, bias, eps); rms norm (input, normalized_shape, weight, eps)
    "layer_norm": [
        *[(LAYER_NORM, [tensor([5, 3, 37], dtype), [3, 37], tensor([3, 37], dtype), tensor([3, 37], dtype), 1e-5])
          for dtype in DTYPES],  # rows of 111 over two dims: one tile, packs of one
        (LAYER_NORM, [tensor([7, 300], F32), [300], None, None, 1e-5]),  # no affine; a loop of two blocks
        (LAYER_NORM, [tensor([3, 1100], BF16), [1100], tensor([1100], F32), tensor([1100], F32), 1e-5]),
        (LAYER_NORM, [tensor([9, 40], F16), [40], tensor([40], F16), None, 1e-6]),  # a weight, no bias
        # 37 rows: a persistent grid's programs (16 under the interpreter) walk more than one row block
        (LAYER_NORM, [tensor([37, 50], F32), [50], tensor([50], F32), tensor([50], F32), 1e-5]),
    ],
    "rms_norm": [
        *[(RMS_NORM, [tensor([7, 300], dtype), [300], tensor([300], dtype), 1e-6]) for dtype in DTYPES],
        (RMS_NORM, [tensor([3, 2, 37], BF16), [37], None, None]),  # eps=None: float32's epsilon
        (RMS_NORM, [tensor([3, 1100], F16), [1100], tensor([1100], F32), 1e-5]),  # a float32 weight
        (RMS_NORM, [tensor([3, 1100], F32), [1100], None, None]),  # the loop without a weight
    ],
    "softmax": [
        *[(op, [tensor([7, 37], dtype), -1, False]) for op in (SOFTMAX, LOG_SOFTMAX) for dtype in DTYPES],
        (SOFTMAX, [tensor([3, 5, 300], F32), -1, False]),  # rows longer than a loop block: two or more
        (SOFTMAX, [tensor([2, 1000], BF16), -1, False]),  # few rows: the split variant
        (LOG_SOFTMAX, [tensor([3, 9000], F32), -1, False]),  # few long rows: cuda's split over chunks
        (LOG_SOFTMAX, [tensor([3, 2, 64], F16), 2, False]),  # dim given as its index; a pack of 8 halves
    ],
    # max.dim / min.dim (input, dim, keepdim) and argmax / argmin (input, dim or None, keepdim)
    "indexed_reduce": [
        ("aten::max.dim", [tensor([5, 37], F32), 1]),  # short rows: packed
        ("aten::min.dim", [tensor([5, 3, 11], F16), -1, True]),  # keepdim, rows of 11
        ("aten::argmax.default", [tensor([3, 7], BF16)]),  # dim None: the flattened tensor, one row
        ("aten::argmin.default", [tensor([4, 37], BF16), 1]),
        ("aten::max.dim", [tensor([2, 1100], BF16), -1]),  # few long rows: the loop and the split
        ("aten::argmax.default", [tensor([2, 3, 700], F16)]),  # one row of 4200: the CPU's split
        ("aten::min.dim", [tensor([3, 9, 5], F32), 1, True]),  # a middle dim: columns
        ("aten::argmin.default", [tensor([4, 17, 33], BF16), 0, True]),  # the first dim: columns of 561
        ("aten::min.dim", [tensor([3, 1500], F32), -1, True]),  # few long rows: min's loop and split
        ("aten::argmin.default", [tensor([3, 1500], F16), -1, True]),  # argmin's
        ("aten::max.dim", [tensor([3, 13, 7], F16), 1]),  # max's columns
        ("aten::argmax.default", [tensor([3, 13, 7], F32), 1]),  # argmax's columns
    ],
    # cumsum (input, dim)
    "cumsum": [
        *[("aten::cumsum.default", [tensor([7, 37], dtype), 1]) for dtype in DTYPES],  # short rows: row_scan
        ("aten::cumsum.default", [tensor([2, 1100], F32), -1]),  # few long rows: blocked and split scans
        ("aten::cumsum.default", [tensor([2, 5000], BF16), -1]),  # error grows with the row: the CPU's split
        ("aten::cumsum.default", [tensor([3, 5000], F32), -1]),  # the same in float32: the split's double sums
        ("aten::cumsum.default", [tensor([3, 9, 5], F16), 1]),  # a middle dim: columns
        ("aten::cumsum.default", [tensor([4, 17, 33], F32), 0]),  # the first dim: columns of 561
    ],
    "pool": [
        *[(AVG_POOL, [tensor([2, 3, 9, 11], dtype), [3, 3], [2, 2], [1, 1], False, True, None]) for dtype in DTYPES],
        (AVG_POOL, [tensor([2, 3, 9, 11], F32), [3, 2], [2, 3], [1, 1], True, False, None]),  # ceil, pads not counted
        (AVG_POOL, [tensor([2, 3, 10, 10], BF16), [3, 3], [2, 2], [1, 0], True, True, 5]),  # divisor_override
        (AVG_POOL, [tensor([3, 8, 7], F16), [2, 2], [], [0, 0], False, True, None]),  # 3-D: one image
        (AVG_POOL, [tensor([2, 5, 9, 11], F32, channels_last([2, 5, 9, 11])), [3, 3], [2, 2], [1, 1], True, True,
                    None]),  # channels-last, C odd: packs of one
        (AVG_POOL, [tensor([1, 16, 7, 6], F16, channels_last([1, 16, 7, 6])), [2, 2], [1, 2], [1, 1], False, False,
                    None]),  # channels-last, packs of up to 8 halves
        (AVG_POOL, [tensor([1, 2, 12, 13], F32), [9, 9], [1, 1], [4, 4], False, True, None]),  # 81 positions: tiles
        (ADAPTIVE_POOL, [tensor([2, 3, 9, 11], F32), [4, 3]]),
        (ADAPTIVE_POOL, [tensor([2, 6, 9, 11], BF16, channels_last([2, 6, 9, 11])), [4, 5]]),
        (ADAPTIVE_POOL, [tensor([2, 3, 13, 10], F16), [1, 1]]),  # a global average pool: 130 positions
        *[(MAX_POOL, [tensor([2, 3, 9, 11], dtype), [3, 3], [2, 2], [1, 1], [2, 1], True]) for dtype in DTYPES],
        (MAX_POOL, [tensor([2, 8, 9, 11], BF16, channels_last([2, 8, 9, 11])), [3, 2], [1, 2], [1, 1], [1, 1],
                    False]),  # channels-last: packs of 8
        (MAX_POOL, [tensor([1, 2, 12, 13], F32), [9, 9], [1, 1], [4, 4], [1, 1], False]),  # 81 positions: a loop
        (MAX_POOL, [tensor([2, 5, 9, 11], F32, channels_last([2, 5, 9, 11])), [3, 2], [1, 2], [1, 1], [1, 2],
                    False]),  # channels-last and dilated; C odd: packs of one
        (MAX_POOL, [tensor([3, 8, 7], BF16), [2, 2], [], 0, 1, False]),  # 3-D: one image, 3-D outputs
        # more channels than the C kernels' channel block of 256 (channels-last), padding as an int
        (AVG_POOL, [tensor([1, 300, 5, 4], F32, channels_last([1, 300, 5, 4])), [2, 2], [2, 1], 1, False, True,
                    None]),
        (MAX_POOL, [tensor([1, 300, 5, 4], F32, channels_last([1, 300, 5, 4])), [2, 2], [2, 1], 1, 1, False]),
    ],
    "reduce": [
        ("aten::sum.dim_IntList", [tensor([6, 5, 7], F32), [-1], False]),  # short rows, packed
        ("aten::mean.dim", [tensor([3, 5, 7, 7], BF16), [-1, -2], True]),  # rows of 49
        ("aten::amax.default", [tensor([7, 300], F16), [1], False]),  # rows longer than a block; split
        ("aten::amin.default", [tensor([2, 1000], F32), [-1], True]),  # few long rows: split_rows
        ("aten::sum.dim_IntList", [tensor([37, 29], BF16), [0], False]),  # the first dim: columns
        ("aten::mean.dim", [tensor([3, 50, 37], F16), [1], False]),  # a middle dim; split_columns
        ("aten::amax.default", [tensor([2, 37, 3, 5], F32, channels_last([2, 37, 3, 5])), [2, 3], True]),
        ("aten::amin.default", [tensor([4, 100, 19], BF16), [1], True]),  # a middle dim, 100 long
        ("aten::sum.dim_IntList", [tensor([4, 5, 6], F32), [0, 2], False]),  # two blocks, inner 1
        ("aten::mean.dim", [tensor([3, 4, 5, 6], BF16), [1, 3], True]),  # two blocks after an outer dim
        ("aten::amax.default", [tensor([3, 4, 5, 6], F16), [0, 2], False]),  # two blocks, inner 6
        ("aten::amin.default", [tensor([3, 4, 5, 6], F32), [1, 3], False]),  # amin's two blocks
        ("aten::sum.dim_IntList", [tensor([37, 29], F32), [], False]),  # every dim: one row
    ],
    "elementwise": [
        ("aten::silu.default", [tensor([5, 37], F32)]),  # unary, one merged dim: flat only; exp's math
        ("aten::add.Tensor", [tensor([6, 37], BF16), tensor([37], BF16), {"kwargs": {"alpha": 2}}]),  # rows
        ("aten::mul.Tensor", [tensor([2, 6, 5, 7], F16, channels_last([2, 6, 5, 7])), tensor([6, 1, 1], F16)]),
        ("aten::div.Tensor", [tensor([7, 33], BF16), tensor([], "torch.float64", positive=True)]),  # 0-dim
        ("aten::softplus.default", [tensor([3, 300], F16), 2.0, 10.0]),  # numbers baked into op()
        ("aten::hardtanh.default", [tensor([6, 40], F32, [80, 2]), -0.5, 2.0]),  # a strided view
        ("aten::rsub.Scalar", [tensor([1001], BF16), 2.0]),  # a number operand; a tail after whole packs
        # each op's own snippet in op(), on rows of 37 (every block has a tail), the dtypes in turn
        *[(f"aten::{name}.default", [tensor([5, 37], dtype), *numbers]) for name, dtype, numbers in (
            ("relu", F32, ()), ("gelu", BF16, ()), ("sigmoid", F16, ()), ("tanh", F32, ()), ("neg", BF16, ()),
            ("abs", F16, ()), ("reciprocal", F32, ()), ("erf", BF16, ()), ("hardswish", F16, ()),
            ("hardsigmoid", F32, ()), ("mish", BF16, ()), ("leaky_relu", F16, (0.2,)),
            ("elu", F32, (0.5, 1.5, 0.75)), ("selu", BF16, ()), ("celu", F16, (0.7,)),  # elu's, three ways
            ("clamp", F32, (0.1,)),  # a lower bound only: clamp_min's
            ("clamp", BF16, (0.5, -0.5)),  # min above max: max everywhere, as torch gives
            ("clamp_max", F16, (0.25,)), ("threshold", F32, (0.1, -2.0)), ("hardshrink", BF16, (0.3,)),
            ("softshrink", F16, (0.3,)),
            ("exp", F32, ()))],  # exp overflows at 100x: the normal input set alone (family_check)
        ("aten::gelu.default", [tensor([5, 37], F16), {"kwargs": {"approximate": "tanh"}}]),
        *[(f"aten::{name}.default", [tensor([5, 37], dtype, positive=True)])
          for name, dtype in (("log", F32), ("sqrt", BF16), ("rsqrt", F16))],
        # pow's snippets: a * a, a root, 1 / a; exp and log with the sign by parity, and without
        # (those two overflow at 100x: the normal input set alone)
        *[("aten::pow.Tensor_Scalar", [tensor([5, 37], dtype, positive=positive), exponent])
          for exponent, dtype, positive in ((2, F32, False), (0.5, BF16, True), (-1, F16, False), (5, F32, False),
                                            (2.5, BF16, True))],
        # operands: transposed (with alpha); an outer broadcast; rows of 300 (two column tiles); both
        # channels-last; a column broadcast; a channel one in NCHW (three merged dims)
        ("aten::sub.Tensor", [tensor([6, 37], F32), tensor([6, 37], F32, [1, 6]), {"kwargs": {"alpha": 0.5}}]),
        ("aten::add.Tensor", [tensor([6, 1], BF16), tensor([1, 40], BF16)]),
        ("aten::maximum.default", [tensor([3, 300], F16), tensor([300], F16)]),
        ("aten::minimum.default", [tensor([2, 6, 5, 7], F32, channels_last([2, 6, 5, 7])),
                                   tensor([2, 6, 5, 7], F32, channels_last([2, 6, 5, 7]))]),
        ("aten::mul.Tensor", [tensor([6, 37], BF16), tensor([6, 1], BF16)]),
        ("aten::mul.Tensor", [tensor([2, 6, 5, 7], F16), tensor([6, 1, 1], F16)]),
        # 0-dim: a float32 self beside a bfloat16 tensor, an int64 other, both (a 0-dim output)
        ("aten::mul.Tensor", [tensor([], F32), tensor([5, 37], BF16)]),
        ("aten::mul.Tensor", [tensor([5, 37], F16), tensor([], "torch.int64")]),
        ("aten::mul.Tensor", [tensor([], BF16), tensor([], BF16)]),
        # number operands: the Tensor overload's, the Scalar overloads' (with alpha; an int)
        ("aten::mul.Tensor", [tensor([5, 37], F32), 2.5]),
        ("aten::add.Scalar", [tensor([5, 37], BF16), 3.0, 2]),
        ("aten::div.Scalar", [tensor([5, 37], F16), 3]),
        # five dims that do not merge: no Triton kernel (it takes four), the C and CUDA ones
        ("aten::add.Tensor", [tensor([2, 3, 4, 5, 6], F32), tensor([2, 1, 4, 1, 6], F32)]),
    ],
}
