"""The kernel contracts docs/writing-kernels.md gives for hand-written kernels, against the code.

The shipped header (kernforge/include/kernforge.h) holds the backends' prelude character for
character and lays out kf_tensor as the ctypes struct the harness passes; the example files
under docs/examples/, each named by docs/writing-kernels.md, pass the static scan, and the C
example builds against the header and runs through the cpu backend.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import pytest
import torch

from kernforge.backends import cpu
from kernforge.backends.native import C_PRELUDE
from kernforge.backends.scan import scan_source
from kernforge.eval_file import declared_op
from kernforge.runtime.native_abi import DTYPE_CODES, MAX_DIMS, KfTensor

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "writing-kernels.md"
EXAMPLES = ROOT / "docs" / "examples"
EXAMPLE_NAMES = ("softmax_body.c", "softmax_body.cu", "softmax.py")
HEADER = resources.files("kernforge").joinpath("include", "kernforge.h")
needs_gcc = pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")


def guide_example(name: str) -> str:
    """docs/examples/NAME, the file docs/writing-kernels.md links as `(examples/NAME)`."""
    assert f"(examples/{name})" in GUIDE.read_text(), f"docs/writing-kernels.md does not link examples/{name}"
    path = EXAMPLES / name
    assert path.is_file(), f"docs/examples/ has no {name}"
    return path.read_text()


def test_guide_links_every_example_file():
    """Every file under docs/examples/ is one of the checked examples, and the guide links each."""
    assert sorted(p.name for p in EXAMPLES.iterdir()) == sorted(EXAMPLE_NAMES)
    guide = GUIDE.read_text()
    assert [name for name in EXAMPLE_NAMES if f"(examples/{name})" not in guide] == []


def header_text() -> str:
    return HEADER.read_text()


def candidate(body: str) -> str:
    """What docs/writing-kernels.md says to evaluate: the header, then the kernel (`cat "$KF_H" body > file`)."""
    return header_text() + body


def test_header_ships_in_the_package():
    assert HEADER.is_file()
    assert '"include/*.h"' in (ROOT / "pyproject.toml").read_text()


def test_header_holds_the_prelude_verbatim():
    """The definitions between the include guards are C_PRELUDE: the two cannot drift."""
    guarded = re.search(r"#define KERNFORGE_H\n(.*)#endif", header_text(), re.S)
    assert guarded and guarded.group(1) == C_PRELUDE


def test_header_names_no_op():
    # `kernforge eval` takes the file's first `kf-op:` line; the header comes first in the file.
    assert declared_op(header_text()) == ""


@pytest.mark.parametrize("name, language", [("softmax_body.c", "c"), ("softmax_body.cu", "cuda"),
                                            ("softmax.py", "triton")])
def test_guide_examples_pass_the_scan_and_name_their_op(name: str, language: str):
    source = guide_example(name) if language == "triton" else candidate(guide_example(name))
    assert scan_source(source, language, "float32") == []
    assert declared_op(source) == "aten::_softmax.default"


LAYOUT_PROBE = r"""
#include <stddef.h>
#include <stdio.h>
int main(void) {
    printf("%zu %zu %zu %zu %zu %zu %d\n", sizeof(kf_tensor), offsetof(kf_tensor, data),
           offsetof(kf_tensor, ndim), offsetof(kf_tensor, sizes), offsetof(kf_tensor, strides),
           offsetof(kf_tensor, dtype), KF_MAX_DIMS);
    printf("%d %d %d %d %d %d %d %d\n", KF_F32, KF_F64, KF_F16, KF_BF16, KF_I32, KF_I64, KF_U8, KF_I8);
    return 0;
}
"""


@needs_gcc
def test_header_layout_is_the_harness_struct(tmp_path: Path):
    """kf_tensor's size and offsets and the dtype codes, as gcc reads the header, are what
    native_abi passes through ctypes."""
    (tmp_path / "probe.c").write_text(LAYOUT_PROBE)
    exe = tmp_path / "probe"
    subprocess.run(["gcc", "-std=c11", "-include", str(HEADER), "-o", str(exe), str(tmp_path / "probe.c")],
                   check=True, capture_output=True)
    layout, codes = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    fields = ["data", "ndim", "sizes", "strides", "dtype"]
    assert [int(v) for v in layout.split()] == [ctypes.sizeof(KfTensor),
                                               *[getattr(KfTensor, f).offset for f in fields], MAX_DIMS]
    c_codes = dict(zip(["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "int8"],
                       map(int, codes.split())))
    assert {str(d).removeprefix("torch."): c for d, c in DTYPE_CODES.items() if d != torch.bool} == c_codes
    assert DTYPE_CODES[torch.bool] == c_codes["uint8"]  # a bool is a byte


@needs_gcc
def test_guide_c_example_compiles_against_the_header_alone(tmp_path: Path):
    """docs/writing-kernels.md's `gcc -include "$KF_H" -c softmax_body.c` step, warnings as errors."""
    body = tmp_path / "softmax_body.c"
    body.write_text(guide_example("softmax_body.c"))
    subprocess.run(["gcc", "-std=c11", "-fopenmp", "-Wall", "-Werror", "-include", str(HEADER), "-c",
                    str(body), "-o", str(tmp_path / "softmax.o")], check=True, capture_output=True)


@needs_gcc
@pytest.mark.parametrize("shape, transpose", [((3, 5, 37), False), ((37,), False), ((6, 9), True)])
def test_guide_c_example_runs_through_the_cpu_backend(tmp_path: Path, shape: tuple[int, ...],
                                                       transpose: bool):
    """Built as the evaluator builds it (object scan included) and called on odd shapes, a
    transposed input among them: softmax over the last dim, within fp32 rounding."""
    source = tmp_path / "softmax.c"
    source.write_text(candidate(guide_example("softmax_body.c")))
    x = torch.randn(*shape)
    x = x.t() if transpose else x  # (9, 6) with strides (1, 9): rows are not contiguous
    out = {"shape": list(x.shape), "dtype": "torch.float32", "stride": list(x.stride()), "device": "cpu"}
    kernel = cpu.build(source, tmp_path / "build", [out])
    torch.testing.assert_close(kernel(x), torch.softmax(x.double(), -1).float(), rtol=1e-5, atol=1e-7)


@needs_gcc
def test_guide_c_example_refuses_another_dtype_with_its_code(tmp_path: Path):
    """A non-zero return is the call's failure, with the code in the message."""
    source = tmp_path / "softmax.c"
    source.write_text(candidate(guide_example("softmax_body.c")))
    x = torch.randn(4, 8, dtype=torch.float64)
    out = {"shape": [4, 8], "dtype": "torch.float64", "stride": [8, 1], "device": "cpu"}
    kernel = cpu.build(source, tmp_path / "build", [out])
    with pytest.raises(RuntimeError, match="kf_forward returned error code 2"):
        kernel(x)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_header_is_valid_cpp_for_cuda_candidates(tmp_path: Path):
    """A .cu candidate puts the same header before an extern "C" kf_forward (nvcc's host side is C++)."""
    source = tmp_path / "entry.cpp"
    source.write_text(header_text() + 'extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, '
                                      'int n_out) { return in[0].dtype == KF_F32 ? 0 : 1; }\n')
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Werror", "-fsyntax-only", str(source)],
                   check=True, capture_output=True)
