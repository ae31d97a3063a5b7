"""The object checks judge by behaviour: the honest corpus's C kernels build to objects with no
finding, and the two kinds of outside memory they now allow (a named critical section's lock
word, libgcc's CPU model) are refused as soon as the code keeps a value in them.

Each object is built with the cpu backend's own flags (gcc -c, ~0.2 s each), bypassing the source
scan, so that these rows test the object checks alone; the source scan refuses the cheats first
(asm, extern) in the end-to-end runs of tests/test_redteam.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kernforge.backends import cpu, object_scan

pytestmark = pytest.mark.integration

REDTEAM = Path(__file__).parent / "redteam"
HONEST_C = sorted((REDTEAM / "honest").glob("*.c"))


def object_findings(source: str, tmp_path: Path) -> list[str]:
    c_file, obj = tmp_path / "k.c", tmp_path / "k.o"
    c_file.write_text(source)
    flags = [f for f in cpu.CFLAGS if f != "-shared"]
    subprocess.run(["gcc", *flags, "-c", str(c_file), "-o", str(obj)], check=True, capture_output=True)
    return [str(f) for f in object_scan.scan_object(obj, "c")]


@pytest.mark.parametrize("path", HONEST_C, ids=lambda p: p.name)
def test_every_honest_c_kernel_passes_the_object_checks(path: Path, tmp_path: Path):
    assert object_findings(path.read_text(), tmp_path) == []


@pytest.mark.parametrize("case, symbol", [("c-lockword-memo", ".gomp_critical_user_kf_memo"),
                                          ("c-cpu-model-stash", "__cpu_model")])
def test_state_kept_in_allowed_outside_memory_is_refused_by_the_object(case, symbol, tmp_path: Path):
    findings = object_findings((REDTEAM / "cases" / f"{case}.c").read_text(), tmp_path)
    assert [f for f in findings if f.startswith(f"global-state ({symbol})")], findings


FEATURES = '''int dispatch(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") + 2 * __builtin_cpu_supports("avx512f") + __builtin_cpu_is("amd") +
           __builtin_cpu_supports("avx512vp2intersect");
}
'''


def test_reading_cpu_features_is_allowed_writing_them_is_not(tmp_path: Path):
    assert object_findings(FEATURES, tmp_path) == []
    write = ("struct m { unsigned v, t, s, f[1]; };\nextern struct m __cpu_model;\n"
             "void mark(void) { __cpu_model.f[0] |= 1u; }\n")
    assert object_findings(write, tmp_path) == [
        "global-state (__cpu_model): writes libgcc's CPU model or lets its address escape: state kept "
        "across calls outside the candidate"]
    escape = "struct m { unsigned v, t, s, f[1]; };\nextern struct m __cpu_model;\n" \
             "unsigned *where(void) { return &__cpu_model.f[0]; }\n"
    assert [f.split(":")[0] for f in object_findings(escape, tmp_path)] == ["global-state (__cpu_model)"]


def test_a_lock_word_shaped_buffer_is_state(tmp_path: Path):
    # the name of gcc's lock word on a buffer larger than a pointer: a plain global by its shape
    source = 'char cache[64] __asm__(".gomp_critical_user_x") __attribute__((common));\n' \
             'char *get(void) { return cache; }\n'
    findings = object_findings(source, tmp_path)
    assert any(f.startswith("global-state (.gomp_critical_user_x)") for f in findings), findings


def test_a_named_critical_section_is_not_state(tmp_path: Path):
    source = ('#include <omp.h>\nint count(const float *x, int n) {\n    int hits = 0;\n'
              '#pragma omp parallel for\n    for (int i = 0; i < n; ++i)\n        if (x[i] > 0) {\n'
              '#pragma omp critical(kf_hits)\n            hits += 1;\n        }\n    return hits;\n}\n')
    assert object_findings(source, tmp_path) == []
