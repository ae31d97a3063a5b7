"""The tasks the conformance suite (test_conformance.py) runs every family on: per family
package (builtin/family.FAMILY_PACKAGES), ops on odd shapes in each dtype the family takes.
Small enough for the Triton interpreter and the CPU backend; shaped to reach each variant
(a row longer than one block, rows that do not fill a program...)."""

from __future__ import annotations

from family_check import tensor

F32, F16, BF16 = "torch.float32", "torch.float16", "torch.bfloat16"
DTYPES = (F32, F16, BF16)

SOFTMAX, LOG_SOFTMAX = "aten::_softmax.default", "aten::_log_softmax.default"

CASES: dict[str, list[tuple[str, list]]] = {
    "softmax": [
        *[(op, [tensor([7, 37], dtype), -1, False]) for op in (SOFTMAX, LOG_SOFTMAX) for dtype in DTYPES],
        (SOFTMAX, [tensor([3, 5, 300], F32), -1, False]),  # rows longer than a loop block: two or more
        (SOFTMAX, [tensor([2, 1000], BF16), -1, False]),  # few rows: the split variant
        (LOG_SOFTMAX, [tensor([3, 2, 64], F16), 2, False]),  # dim given as its index; a pack of 8 halves
    ],
}
