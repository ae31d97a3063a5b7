"""backends.build_report: cuobjdump's resource usage of a candidate's GPU code, parsed from fixture text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernforge.backends import build_report
from kernforge.backends.build_report import parse_res_usage, resource_usage, short_name, summarise

pytestmark = pytest.mark.unit

# `cuobjdump -res-usage kf_KEY.so` of an nvcc library for sm_90 with two kernels: one clean, one
# at the 255-register cap that spills. Its PTX entry carries no resource usage.
NVCC_LIBRARY = """
Fatbin elf code:
================
arch = sm_90
code version = [1,7]
host = linux
compile_size = 64bit

Resource usage:
 Common:
  GLOBAL:0
 Function _Z14softmax_kernelPKfPfii:
  REG:40 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:552 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z10row_reduceILi256EEvPKfPfi:
  REG:255 STACK:16 SHARED:0 LOCAL:48 CONSTANT[0]:540 CONSTANT[2]:8 TEXTURE:0 SURFACE:0 SAMPLER:0

Fatbin ptx code:
================
arch = sm_90
code version = [8,5]
host = linux
compile_size = 64bit
compressed
"""

# `cuobjdump -res-usage softmax_kernel.cubin` of one Triton kernel (a bare cubin: no fatbin header).
TRITON_CUBIN = """
Resource usage:
 Common:
  GLOBAL:0
 Function softmax_kernel:
  REG:32 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:400 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


class FakeTool:
    """run_tool that answers `text` and remembers the files it was asked about."""

    def __init__(self, text: str | None) -> None:
        self.text, self.files = text, []

    def __call__(self, argv: list[str]) -> str | None:
        assert argv[:2] == ["cuobjdump", "-res-usage"]
        self.files.append(Path(argv[2]).name)
        return self.text


def test_two_functions_are_parsed_with_their_arch_and_spills() -> None:
    clean, spilling = parse_res_usage(NVCC_LIBRARY)
    assert clean == {"kernel": "_Z14softmax_kernelPKfPfii", "arch": "sm_90", "registers": 40, "stack_bytes": 0,
                     "shared_bytes": 1024, "local_bytes": 0, "spilled": False}
    assert spilling == {"kernel": "_Z10row_reduceILi256EEvPKfPfi", "arch": "sm_90", "registers": 255,
                        "stack_bytes": 16, "shared_bytes": 0, "local_bytes": 48, "spilled": True}


def test_a_stack_alone_counts_as_spilled() -> None:
    (kernel,) = parse_res_usage(" Function k:\n  REG:12 STACK:8 SHARED:0 LOCAL:0\n")
    assert kernel["spilled"] and kernel["stack_bytes"] == 8


def test_the_cuda_library_is_read(tmp_path: Path) -> None:
    (tmp_path / "kf_0123456789abcdef.so").write_bytes(b"\x7fELF")
    (tmp_path / "candidate.cu").write_text("// source, no device code")
    tool = FakeTool(NVCC_LIBRARY)
    usage = resource_usage(tmp_path, run_tool=tool)
    assert tool.files == ["kf_0123456789abcdef.so"]
    assert [k["registers"] for k in usage] == [40, 255]


def test_triton_kernels_carry_their_metadata(tmp_path: Path) -> None:
    kernel_dir = tmp_path / "triton-cache" / "ABCDEF123"
    kernel_dir.mkdir(parents=True)
    (kernel_dir / "softmax_kernel.cubin").write_bytes(b"\x7fELF")
    (kernel_dir / "softmax_kernel.json").write_text(json.dumps(
        {"name": "softmax_kernel", "num_warps": 4, "num_stages": 3, "shared": 2048, "target": {"arch": 90}}))
    # Triton's host-side launcher, compiled into its cache: no device code, never asked about.
    (tmp_path / "triton-cache" / "LAUNCHER").mkdir()
    (tmp_path / "triton-cache" / "LAUNCHER" / "cuda_utils.so").write_bytes(b"\x7fELF")
    tool = FakeTool(TRITON_CUBIN)
    (kernel,) = resource_usage(tmp_path, run_tool=tool)
    assert tool.files == ["softmax_kernel.cubin"]
    assert kernel == {"kernel": "softmax_kernel", "registers": 32, "stack_bytes": 0, "shared_bytes": 2048,
                      "local_bytes": 0, "spilled": False, "num_warps": 4, "num_stages": 3,
                      "dynamic_shared_bytes": 2048}


def test_no_gpu_code_gives_nothing(tmp_path: Path) -> None:
    (tmp_path / "candidate.c").write_text("int kf_forward(void) { return 0; }")
    tool = FakeTool(NVCC_LIBRARY)
    assert resource_usage(tmp_path, run_tool=tool) == []
    assert tool.files == []
    assert resource_usage(tmp_path / "never-built", run_tool=tool) == []


def test_a_host_library_gives_nothing(tmp_path: Path) -> None:
    (tmp_path / "kf_cpu.so").write_bytes(b"\x7fELF")  # the cpu backend's gcc library
    assert resource_usage(tmp_path, run_tool=FakeTool(None)) == []
    assert resource_usage(tmp_path, run_tool=FakeTool("cuobjdump info    : File 'kf_cpu.so' does not "
                                                      "contain device code\n")) == []


def test_no_tool_gives_nothing(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "kf_0123456789abcdef.so").write_bytes(b"\x7fELF")
    monkeypatch.setattr(build_report.shutil, "which", lambda name: None)
    monkeypatch.setattr(build_report, "_run_cuobjdump", lambda argv: NVCC_LIBRARY)
    assert resource_usage(tmp_path) == []


def test_a_failing_tool_never_raises(tmp_path: Path) -> None:
    (tmp_path / "kf_0123456789abcdef.so").write_bytes(b"\x7fELF")

    def broken(argv: list[str]) -> str:
        raise OSError("cuobjdump: cannot execute")

    assert resource_usage(tmp_path, run_tool=broken) == []


def test_summary_is_one_line_per_kernel() -> None:
    usage = parse_res_usage(NVCC_LIBRARY) + [{**parse_res_usage(TRITON_CUBIN)[0], "num_warps": 4}]
    assert summarise(usage).splitlines() == [
        "softmax_kernel: 40 registers, no spills, 1.0 KiB shared",
        "row_reduce: 255 registers, spills (48 B local, 16 B stack), 0 B shared",
        "softmax_kernel: 32 registers, no spills, 0 B shared, 4 warps",
    ]
    assert summarise([]) == ""


def test_short_name_leaves_unmangled_names() -> None:
    assert short_name("_Z14softmax_kernelPKfPfii") == "softmax_kernel"
    assert short_name("triton_poi_fused_0") == "triton_poi_fused_0"
    assert short_name("_ZN2ns6kernelEv") == "_ZN2ns6kernelEv"  # nested names stay whole
