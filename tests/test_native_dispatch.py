"""kernforge.runtime.dispatch on the CPU: the C backend's winner guarded and called from C++.

The session's finished run of the tiny model (its first finalist promoted to winner, as in
test_integrate.py) installed with native dispatch: the proved call takes the C++ router and
entry, every other call (another layout, a gradient, torch.compile's tracing) goes where it
went before, and removal leaves the dispatcher as it was. The costs per call are apply's
routing measure, reported, not asserted (bench/results/.../issue32).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_integrate import promote_first_finalist

import kernforge
from kernforge.backends import get_backend
from kernforge.integrate import overhead
from kernforge.runtime import dispatch, router

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("integrate")]
CPU_LOADING = get_backend("cpu").loading  # the backend these tests' specs pose as

OP = torch.ops.aten._softmax.default
SOFTMAX = "aten::_softmax.default"


@pytest.fixture(scope="module")
def run_dir(finished_run, tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = finished_run.copy_to(tmp_path_factory.mktemp("runs"), applied=False)
    promote_first_finalist(copy)
    return copy


def test_the_proved_call_takes_the_native_router_and_matches_the_python_entry(run_dir):
    x = torch.randn(2, 40, 40)
    with torch.no_grad(), kernforge.patch(None, run_dir) as handle:
        (spec,) = handle.specs
        assert spec.native is not None, spec.native_why
        assert handle.installation.native_ops == [SOFTMAX]
        got = OP(x, -1, False)
        assert handle.counts[SOFTMAX].kernel == 1 and handle.counts[SOFTMAX].by_kernel == {spec.name: 1}
        assert torch.equal(got, spec.entry(x, -1, False))
    assert torch.allclose(got, OP(x, -1, False), rtol=1e-5, atol=1e-6)


def test_calls_the_guard_refuses_run_the_original_bit_for_bit(run_dir):
    x = torch.randn(2, 40, 40)
    refused = {"shape": (torch.randn(3, 40, 40), -1), "dtype": (x.double(), -1),
               "layout": (x.transpose(1, 2).contiguous().transpose(1, 2), -1),
               "misaligned": (torch.randn(2 * 40 * 40 + 1)[1:].view(2, 40, 40), -1), "other dim": (x, 1)}
    expected = {k: OP(t, dim, False) for k, (t, dim) in refused.items()}
    with torch.no_grad(), kernforge.patch(None, run_dir) as handle:
        got = {k: OP(t, dim, False) for k, (t, dim) in refused.items()}
        counts = handle.counts[SOFTMAX]
        assert counts.kernel == 0 and counts.fallback >= len(refused)
    for key in refused:
        assert torch.equal(got[key], expected[key]), key


def test_a_gradient_and_compiles_tracing_go_past_the_native_router(run_dir):
    x = torch.randn(2, 40, 40)
    reference = x.clone().requires_grad_()
    torch.softmax(reference, -1).pow(2).sum().backward()
    with kernforge.patch(None, run_dir) as handle:
        wanting = x.clone().requires_grad_()
        torch.softmax(wanting, -1).pow(2).sum().backward()
        assert handle.counts[SOFTMAX].kernel == 0
        with torch.no_grad():
            torch.compile(lambda t: torch.softmax(t, -1) * 2.0)(x)
        assert handle.counts[SOFTMAX].custom_op >= 1  # the Python router put the custom op in the graph
    assert torch.equal(wanting.grad, reference.grad)


def test_removal_leaves_the_dispatcher_as_it_was(run_dir):
    before = torch._C._dispatch_dump("aten::_softmax")
    handle = kernforge.patch(None, run_dir)
    assert handle.installation.native_ops
    assert torch._C._dispatch_dump("aten::_softmax") != before
    handle.remove()
    assert torch._C._dispatch_dump("aten::_softmax") == before


def test_turned_off_the_python_router_serves_alone(run_dir, monkeypatch):
    monkeypatch.setenv("KERNFORGE_NATIVE_DISPATCH", "0")
    x = torch.randn(2, 40, 40)
    with torch.no_grad(), kernforge.patch(None, run_dir) as handle:
        (spec,) = handle.specs
        assert spec.native is None and "KERNFORGE_NATIVE_DISPATCH=0" in spec.native_why
        assert not handle.installation.native_ops
        OP(x, -1, False)
        assert handle.counts[SOFTMAX].kernel == 1


def test_no_compiler_is_one_warning_and_the_python_router(run_dir, tmp_path):
    script = (f"import torch, kernforge\n"
              f"x = torch.randn(2, 40, 40)\n"
              f"with torch.no_grad(), kernforge.patch(None, {str(run_dir)!r}) as h:\n"
              f"    torch.ops.aten._softmax.default(x, -1, False)\n"
              f"    print('kernel calls', h.counts['{SOFTMAX}'].kernel, 'native', h.installation.native_ops)\n")
    env = {**os.environ, "CXX": str(tmp_path / "no-such-g++"), "KERNFORGE_DISPATCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "kernel calls 1 native []" in proc.stdout
    warned = [line for line in proc.stderr.splitlines() if "native dispatch is not available" in line]
    assert len(warned) == 1 and "g++" in warned[0], proc.stderr


def test_the_routing_measure_says_native_and_what_the_aten_call_costs(run_dir):
    with kernforge.patch(None, run_dir) as handle:
        specs = list(handle.specs)
    cost = overhead.measure(specs[0], specs, torch.device("cpu"))
    assert cost.native and cost.via == "op"
    assert cost.aten_us > 0 and cost.python_direct_us is not None and cost.direct_us > 0
    assert "hit_vs_aten" in cost.to_json()


def test_a_library_entry_is_checked_against_the_python_entry(run_dir, monkeypatch):
    """An entry whose outputs differ from the Python entry's is not used (here: a Python entry
    made to disagree), and says why."""
    handle = kernforge.patch(None, run_dir)
    (spec,) = handle.specs
    handle.remove()
    spec.native, spec.native_why = None, None
    python = spec.entry
    spec.entry = lambda *a, **k: python(*a, **k) + 1.0
    router.prepare_native(spec)
    assert spec.native is None and "differ from the Python entry" in spec.native_why
    assert dispatch.native_module() is not None


def test_a_guarded_entry_runs_the_kernel_only_on_the_proved_tensors(run_dir):
    """dispatch.guarded_entry (a chain at its module's forward): the C++ guard over the entry's
    tensors returns the kernel's outputs on the proved layout and None on anything else."""
    from dataclasses import replace

    x = torch.randn(2, 40, 40)
    with torch.no_grad(), kernforge.patch(None, run_dir) as handle:
        (spec,) = handle.specs
        tensors_only = replace(spec, args=[a for a in spec.args if isinstance(a, dict) and "shape" in a])
        guarded = dispatch.guarded_entry(tensors_only, router.ALIGNMENT)
        got = guarded(x)
        assert torch.equal(got, spec.entry(x, -1, False))
        refused = [torch.randn(3, 40, 40), x.double(), x.transpose(1, 2).contiguous().transpose(1, 2),
                   torch.randn(2 * 40 * 40 + 1)[1:].view(2, 40, 40), 1.0]
        assert all(guarded(t) is None for t in refused)
        assert guarded(x, x) is None  # another arity
    with torch.enable_grad():
        assert guarded(x.clone().requires_grad_()) is None


RMS_NORM_C = r"""
#include <math.h>
/* y = x * rsqrt(mean(x^2) + 1e-6) * w, row by row: test_fused_module's RMSNorm chain, float32 */
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 2 || n_out != 1 || in[0].dtype != KF_F32 || in[1].dtype != KF_F32) return 1;
    const int64_t rows = in[0].sizes[0], cols = in[0].sizes[1];
    const float *x = (const float *)in[0].data, *w = (const float *)in[1].data;
    float *y = (float *)out[0].data;
    for (int64_t r = 0; r < rows; ++r) {
        float ss = 0.0f;
        for (int64_t c = 0; c < cols; ++c) ss += x[r * cols + c] * x[r * cols + c];
        const float rstd = 1.0f / sqrtf(ss / cols + 1e-6f);
        for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] * rstd * w[c];
    }
    return 0;
}
"""


def test_a_chain_at_its_module_takes_the_native_module_entry(tmp_path):
    """dispatch.module_entry at a module's call: the chain's tensors gathered in C++ from the
    call's argument and the module's weight (read at each call: one set anew is the one used),
    counted in C++; another shape, or a hook, goes where it went before; removal leaves the
    modules as they were."""
    from test_fused_module import captured, model
    from torch import nn

    from kernforge.backends import cpu
    from kernforge.backends.native import C_PRELUDE

    net, x = model(), torch.randn(4, 32)
    chain = captured(net, x)
    source = tmp_path / "rms_norm.c"
    source.write_text(C_PRELUDE + RMS_NORM_C)
    library = cpu.build(source, tmp_path, chain.output_metas).library
    spec = router.KernelSpec(name="chain_rms_norm_native_test", op=chain.op, args=chain.input_metas,
                             outputs=chain.output_metas, backend="cpu", loading=CPU_LOADING,
                             devices=frozenset({torch.device("cpu")}),
                             entry=router.load_entry(CPU_LOADING, library, chain.output_metas), chain=chain.to_json(),
                             library=library)
    norm, h, other = net[3], torch.randn(4, 32), torch.randn(3, 32)
    with torch.no_grad():
        expected = net(x)
    classes = [type(m) for m in net]
    installation = router.install([spec], net)
    try:
        assert spec.native is not None, spec.native_why
        with torch.no_grad():
            got = net(x)  # both norms: 2 kernel calls
            norm.weight = nn.Parameter(torch.randn(32))
            renewed = norm(h)
            refused = norm(other)  # another shape: the module's own forward
            handle = norm.register_forward_pre_hook(lambda *_: None)
            hooked = norm(h)
            handle.remove()
            twin = copy.deepcopy(norm)  # a copy of the module: its own weights, not the kernel
            twin.weight.mul_(2.0)
            copied = twin(h)
        counts = installation.counts[spec.op]
        assert counts.by_kernel == {spec.name: 4} and counts.fallback == 1
    finally:
        installation.remove()
    assert [type(m) for m in net] == classes and not any("forward" in m.__dict__ for m in net.modules())
    with torch.no_grad():
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(renewed, norm(h))
        assert torch.equal(refused, norm(other))
        torch.testing.assert_close(hooked, norm(h))
        twin.__dict__.pop("forward")
        twin.__class__ = type(norm)
        assert torch.equal(copied, twin(h))


def test_compiled_code_calls_the_kernels_cpp_entry(run_dir):
    """Under torch.compile the graph holds kernforge::<name>; while installed, that op's calls
    take the kernel's C++ entry behind its guard, not the Python implementation."""
    x = torch.randn(2, 40, 40)

    def f(t: torch.Tensor) -> torch.Tensor:
        return torch.softmax(t, -1) * 2

    router.reset_compiled_code()
    try:
        with torch.no_grad(), kernforge.patch(None, run_dir) as handle:
            (spec,) = handle.specs
            got = torch.compile(f)(x)
            taken, python = handle.installation.native_custom_ops[spec.name].counts()
            assert handle.counts[SOFTMAX].traced_by_kernel.get(spec.name)  # the graph holds the custom op
    finally:
        router.reset_compiled_code()
    assert taken == [1] and python == 0
    torch.testing.assert_close(got, f(x), rtol=1e-5, atol=1e-6)
