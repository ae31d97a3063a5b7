"""builtin/kernel_file.py: a kernel file's op line and constants block, and nothing else, rewritten."""

from __future__ import annotations

from importlib import resources

import pytest

from kernforge.propose.builtin.kernel_file import KernelFileError, Snippet, c_literal, read, render, split

pytestmark = pytest.mark.unit

PY = '''"""An example.

kf-op: aten::relu.default
"""
import triton

# kf-constants: begin
BLOCK = 1024
NUM_WARPS = 4


@triton.jit
def op(x):
    return x
# kf-constants: end


def kf_forward(x):
    return x
'''

C = """/* kf-op: aten::relu.default */
/* kf-constants: begin */
#define N 10LL
#define SIMD_LOOPS 1
/* kf-constants: end */
int kf_forward(void) { return 0; }
"""


def test_python_constants_and_a_snippet_are_rewritten_and_the_rest_kept():
    out = render(PY, "aten::gelu.default", {"BLOCK": 4096, "NUM_WARPS": 8,
                                            "op": Snippet("@triton.jit\ndef op(x):\n    return x * 2\n")}, "python")
    assert "kf-op: aten::gelu.default\n" in out
    assert "BLOCK = 4096\nNUM_WARPS = 8\n@triton.jit\ndef op(x):\n    return x * 2\n# kf-constants: end" in out
    head, _, tail = split(PY)
    assert out.startswith(head.replace("aten::relu.default", "aten::gelu.default")) and out.endswith(tail)


def test_c_constants_become_defines():
    out = render(C, "aten::relu.default", {"N": "37LL", "SIMD_LOOPS": False}, "c")
    assert "#define N 37LL\n#define SIMD_LOOPS 0\n/* kf-constants: end */" in out
    assert out.endswith("int kf_forward(void) { return 0; }\n")


def test_a_render_must_name_exactly_the_files_constants():
    with pytest.raises(KernelFileError, match=r"missing \['NUM_WARPS'\], unknown \['WARPS'\]"):
        render(PY, "aten::relu.default", {"BLOCK": 1, "WARPS": 2}, "python")
    with pytest.raises(KernelFileError, match="defines no other"):
        render(PY, "aten::relu.default", {"BLOCK": 1, "NUM_WARPS": 2, "other": Snippet("x = 1")}, "python")


def test_a_file_without_markers_or_op_line_is_refused():
    with pytest.raises(KernelFileError, match="kf-constants: begin"):
        render("BLOCK = 1\n", "op", {"BLOCK": 2}, "python")
    with pytest.raises(KernelFileError, match="kf-op"):
        render("# kf-constants: begin\nBLOCK = 1\n# kf-constants: end\n", "op", {"BLOCK": 2}, "python")


def test_c_literals():
    assert [c_literal(v) for v in (True, 3, 1e-05, "static")] == ["1", "3", "1e-05", "static"]
    assert c_literal(float("inf")) == "(1.0/0.0)"


def test_a_shared_part_is_read_in_place_of_its_include_line():
    # the reduce family's Triton kernels share their ops: a render of one is a whole source
    family = "kernforge.propose.families.reduce"
    part = resources.files(family).joinpath("kernels", "shared_triton.py").read_text()
    text = read(family, "triton_rows.py")
    assert part in text and "kf-include" not in text
    assert text.index(part) > text.index("kf-constants: end")  # where its line stood, after the block
