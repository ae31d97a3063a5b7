"""kernforge.backends.cpu: C candidates built by gcc, called through ctypes, outputs poisoned."""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path

import pytest
import torch

from kernforge.backends import BuildError, choose_backend, cpu, get_backend
from kernforge.backends.cpu import C_PRELUDE
from kernforge.errors import UserError

pytestmark = [pytest.mark.integration, pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")]


def meta(t: torch.Tensor) -> dict:
    return {"shape": list(t.shape), "dtype": str(t.dtype), "stride": list(t.stride()),
            "device": "cpu"}


# y = 2 * x + 1 over any float32 tensor of up to 2 dims, following the input's strides;
# the output is written through its own strides.
AFFINE = C_PRELUDE + """
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1) return 1;
    if (in[0].dtype != KF_F32 || in[0].ndim != 2) return 2;
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    for (int64_t i = 0; i < in[0].sizes[0]; ++i)
        for (int64_t j = 0; j < in[0].sizes[1]; ++j)
            y[i * out[0].strides[0] + j * out[0].strides[1]] =
                2.0f * x[i * in[0].strides[0] + j * in[0].strides[1]] + 1.0f;
    return 0;
}
"""

WRITES_NOTHING = C_PRELUDE + """
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) { return 0; }
"""

RETURNS_ERROR = C_PRELUDE + """
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) { return 7; }
"""

SYNTAX_ERROR = C_PRELUDE + """
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    return 0   /* missing semicolon */
}
"""

NO_ENTRY = C_PRELUDE + """
int some_other_name(void) { return 0; }
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_hand_written_candidate_builds_and_runs(tmp_path: Path):
    x = torch.randn(5, 7)
    kernel = cpu.build(write(tmp_path, "affine.c", AFFINE), tmp_path / "build", [meta(x)])
    assert Path(kernel.library).is_file()
    y = kernel(x)
    assert y.shape == x.shape and y.dtype == torch.float32
    assert torch.allclose(y, 2 * x + 1)


def test_candidate_sees_strides_in_elements(tmp_path: Path):
    base = torch.randn(7, 5)
    x = base.t()  # (5, 7) with strides (1, 5)
    out_meta = {"shape": [5, 7], "dtype": "torch.float32", "stride": [1, 5], "device": "cpu"}
    kernel = cpu.build(write(tmp_path, "affine.c", AFFINE), tmp_path / "build", [out_meta])
    y = kernel(x)
    assert y.stride() == (1, 5)  # the output is allocated with the reference's strides
    assert torch.allclose(y, 2 * x + 1)


def test_kwargs_tensors_are_inputs_in_order(tmp_path: Path):
    x = torch.randn(3, 4)
    kernel = cpu.build(write(tmp_path, "affine.c", AFFINE), tmp_path / "build", [meta(x)])
    assert torch.allclose(kernel(x=x), 2 * x + 1)
    with pytest.raises(RuntimeError, match="error code 1"):
        kernel(x, x)  # two tensor inputs: the candidate refuses


def test_syntax_error_raises_build_error_with_gccs_message(tmp_path: Path):
    source = write(tmp_path, "broken.c", SYNTAX_ERROR)
    with pytest.raises(BuildError) as info:
        cpu.build(source, tmp_path / "build", [])
    message = str(info.value)
    assert "broken.c" in message
    assert "error:" in message
    assert re.search(r"expected .;.", message)  # gcc's own words (its quotes depend on the locale)
    assert not list((tmp_path / "build").glob("kf_*.so"))  # nothing cached from a failed build
    log = (tmp_path / "build" / "build.log").read_text()  # what a node's page shows as its build log
    assert log.startswith("$ gcc ") and "error:" in log and "[exit 1]" in log


def test_library_without_kf_forward_is_a_build_error(tmp_path: Path):
    with pytest.raises(BuildError, match="cannot load kf_forward"):
        cpu.build(write(tmp_path, "no_entry.c", NO_ENTRY), tmp_path / "build", [])


def test_rebuilding_the_same_source_is_a_cache_hit(tmp_path: Path, monkeypatch):
    build_dir = tmp_path / "build"
    x = torch.randn(2, 3)
    first = cpu.build(write(tmp_path, "a.c", AFFINE), build_dir, [meta(x)])
    library = Path(first.library)
    mtime = library.stat().st_mtime_ns

    compiles = []
    real_run = subprocess.run

    def spy(cmd, *args, **kwargs):
        if cmd and cmd[0] == "gcc" and "-c" in cmd:  # the compile step (then the object is checked, linked)
            compiles.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    # same text under another file name: still the same library
    second = cpu.build(write(tmp_path, "b.c", AFFINE), build_dir, [meta(x)])
    assert Path(second.library) == library
    assert library.stat().st_mtime_ns == mtime
    assert compiles == []
    assert torch.allclose(second(x), 2 * x + 1)

    # a different source is compiled into a different library
    other = write(tmp_path, "c.c", AFFINE.replace("1.0f;", "3.0f;"))
    third = cpu.build(other, build_dir, [meta(x)])
    assert Path(third.library) != library
    assert len(compiles) == 1
    assert torch.allclose(third(x), 2 * x + 3)


def test_the_shared_build_cache_serves_every_build_dir_and_keeps_no_rejected_build(tmp_path: Path, monkeypatch):
    from kernforge.backends import RejectedBuild

    shared = tmp_path / "shared"
    monkeypatch.setenv("KERNFORGE_BUILD_CACHE", str(shared))
    x = torch.randn(2, 3)
    source = AFFINE.replace("1.0f;", "5.0f;")  # a text no other test builds
    first = cpu.build(write(tmp_path, "a.c", source), tmp_path / "node-a", [meta(x)])
    assert [p.name for p in shared.glob("kf_*.so")] == [Path(first.library).name]

    compiles = []
    real_run = subprocess.run

    def spy(cmd, *args, **kwargs):
        if cmd and cmd[0] == "gcc" and "-c" in cmd:
            compiles.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    # another node's build dir: no compile, the library placed there, and it runs
    second = cpu.build(write(tmp_path, "b.c", source), tmp_path / "node-b", [meta(x)])
    assert compiles == []
    assert Path(second.library).parent == tmp_path / "node-b"
    assert torch.allclose(second(x), 2 * x + 5)
    # a build the object scan rejects is rejected again in every build dir, and never cached
    monkeypatch.setattr(subprocess, "run", real_run)
    calls_exit = source.replace("return 0;", "exit(3); return 0;").replace("#include", "#include <stdlib.h>\n#include", 1)
    for node in ("node-c", "node-d"):
        with pytest.raises(RejectedBuild):
            cpu.build(write(tmp_path, f"{node}.c", calls_exit), tmp_path / node, [meta(x)])
    assert len(list(shared.glob("kf_*.so"))) == 1


def test_outputs_are_prefilled_with_a_drawn_value_by_default(tmp_path: Path):
    from kernforge.harness.prefill import candidates

    x = torch.randn(4, 6)
    kernel = cpu.build(write(tmp_path, "nothing.c", WRITES_NOTHING), tmp_path / "build", [meta(x)])
    kinds = candidates(torch.empty(0), None, torch.float32)
    seen = set()
    for _ in range(40):  # each call draws: NaN, the sentinel or the far value, never one fixed value
        y = kernel(x)
        assert y.shape == (4, 6)
        (value,) = {"nan" if math.isnan(v) else v for v in y.flatten().tolist()}
        seen.add(value)
    assert seen == {"nan" if math.isnan(v) else v for v in kinds.values()}


def test_run_writes_into_the_outputs_it_is_given(tmp_path: Path):
    x = torch.randn(4, 6)
    kernel = cpu.build(write(tmp_path, "affine.c", AFFINE), tmp_path / "build", [meta(x)])
    given = kernel.new_outputs(poison=False)
    out = kernel.run(given, (x,), {})
    assert out is given[0]
    assert torch.allclose(out, 2 * x + 1)


def test_non_zero_return_is_a_runtime_error(tmp_path: Path):
    x = torch.randn(2, 2)
    kernel = cpu.build(write(tmp_path, "err.c", RETURNS_ERROR), tmp_path / "build", [meta(x)])
    with pytest.raises(RuntimeError, match="error code 7"):
        kernel(x)


def test_multiple_outputs_come_back_as_a_tuple(tmp_path: Path):
    x = torch.randn(2, 2)
    index_meta = {"shape": [3], "dtype": "torch.int64", "stride": [1], "device": "cpu"}
    kernel = cpu.build(write(tmp_path, "nothing.c", WRITES_NOTHING), tmp_path / "build",
                       [meta(x), index_meta])
    a, b = kernel(x)
    assert a.shape == (2, 2) and b.shape == (3,) and b.dtype == torch.int64


def test_unsupported_tensor_is_refused_before_the_call(tmp_path: Path):
    x = torch.randn(2, 2)
    kernel = cpu.build(write(tmp_path, "nothing.c", WRITES_NOTHING), tmp_path / "build", [meta(x)])
    with pytest.raises(RuntimeError, match="at most 8 dimensions"):
        kernel(torch.zeros([1] * 9))
    with pytest.raises(RuntimeError, match="no C type"):
        kernel(torch.zeros(2, dtype=torch.complex64))


def test_backend_registry():
    backend = get_backend("cpu")
    assert (backend.name, backend.language, backend.source_suffix) == ("cpu", "c", ".c")
    assert backend.timeable() is True
    assert choose_backend("cpu", cuda_available=False).name == "cpu"
    assert choose_backend("auto", cuda_available=False).name == "cpu"
    with pytest.raises(UserError, match="unknown backend 'nosuch'"):
        get_backend("nosuch")


def test_triton_backend_without_gpu_or_interpreter_is_a_user_error(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("checks the message given when no GPU is visible")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(UserError, match="needs an NVIDIA GPU"):
        choose_backend("triton", cuda_available=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    backend = choose_backend("triton", cuda_available=False)
    assert backend.name == "triton"
    assert backend.timeable() is False  # the interpreter's time means nothing
