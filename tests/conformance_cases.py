"""The tasks the conformance suite (test_conformance.py) runs every family on: per family
package (builtin/family.FAMILY_PACKAGES), ops on odd shapes in each dtype the family takes.
Small enough for the Triton interpreter and the CPU backend; shaped to reach each variant
(a row longer than one block, rows that do not fill a program...)."""

from __future__ import annotations

from family_check import channels_last, tensor

F32, F16, BF16 = "torch.float32", "torch.float16", "torch.bfloat16"
DTYPES = (F32, F16, BF16)

SOFTMAX, LOG_SOFTMAX = "aten::_softmax.default", "aten::_log_softmax.default"
AVG_POOL, ADAPTIVE_POOL = "aten::avg_pool2d.default", "aten::_adaptive_avg_pool2d.default"

CASES: dict[str, list[tuple[str, list]]] = {
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
    ],
    # cumsum (input, dim)
    "cumsum": [
        *[("aten::cumsum.default", [tensor([7, 37], dtype), 1]) for dtype in DTYPES],  # short rows: row_scan
        ("aten::cumsum.default", [tensor([2, 1100], F32), -1]),  # few long rows: blocked and split scans
        ("aten::cumsum.default", [tensor([2, 5000], BF16), -1]),  # error grows with the row: the CPU's split
        ("aten::cumsum.default", [tensor([3, 9, 5], F16), 1]),  # a middle dim: columns
        ("aten::cumsum.default", [tensor([4, 17, 33], F32), 0]),  # the first dim: columns of 561
    ],
    "softmax": [
        *[(op, [tensor([7, 37], dtype), -1, False]) for op in (SOFTMAX, LOG_SOFTMAX) for dtype in DTYPES],
        (SOFTMAX, [tensor([3, 5, 300], F32), -1, False]),  # rows longer than a loop block: two or more
        (SOFTMAX, [tensor([2, 1000], BF16), -1, False]),  # few rows: the split variant
        (LOG_SOFTMAX, [tensor([3, 2, 64], F16), 2, False]),  # dim given as its index; a pack of 8 halves
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
    ],
}
