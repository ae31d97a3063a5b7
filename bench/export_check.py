"""An exported package on a GPU, used where kernforge is not importable (bench/h200_export.sh).

    python3 bench/export_check.py RUN_DIR WORK_DIR [--as-cuda]

Exports RUN_DIR (marking its first correct finalist as the winner where the search found
none: the tiny softmax rarely beats eager, and speed is not what this checks), pip-installs
the package into WORK_DIR/site and runs CHECK there in a fresh process with only that
folder on its path: install() on the model on the GPU, eager and torch.compile, uninstall();
a manifest naming another architecture (falls back with a warning; force=True installs); for
CUDA kernels, a shipped library of another architecture (rebuilt with nvcc into the cache).

--as-cuda: the built-in proposer has no CUDA templates, so a CUDA run is made from a Triton
run of the same op: a copy relabelled cuda whose winning node holds CUDA_SOFTMAX (below,
hand-written, one warp a row) and the library nvcc built of it, where the run's worker
would have left it. It checks the export and the package's CUDA path, not a search.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from kernforge.integrate.export import export_run
from kernforge.search.runs import read_run

CHECK = r'''
import json, shutil, sys, warnings
from pathlib import Path
import torch
work, model_dir, package = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
seen = {}
try:
    import kernforge
    seen["kernforge_importable"] = True
except ImportError:
    seen["kernforge_importable"] = False
kernels = __import__(package)
sys.path.insert(0, model_dir)
import tiny_softmax
torch.manual_seed(0)
model = tiny_softmax.Model(*tiny_softmax.get_init_inputs()).cuda().eval()
x = tiny_softmax.get_inputs()[0].cuda()
op = "aten::_softmax.default"
with torch.no_grad():
    expected = model(x)
    inst = kernels.install(model)
    out = model(x)
    torch.cuda.synchronize()
    seen["eager_counts"] = vars(inst.counts[op]).copy()
    seen["eager_max_error"] = (out - expected).abs().max().item()
    compiled = torch.compile(model)
    out = compiled(x)
    seen["compile_counts"] = vars(inst.counts[op]).copy()
    seen["compile_max_error"] = (out - expected).abs().max().item()
    kernels.uninstall()

def copy_as(name, edit):
    installed = Path(kernels.__file__).parent
    shutil.copytree(installed, work / "alt" / name, ignore=shutil.ignore_patterns("__pycache__"))
    manifest_path = work / "alt" / name / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    edit(manifest)
    manifest_path.write_text(json.dumps(manifest))
    sys.path.insert(0, str(work / "alt"))
    return __import__(name)

seen["device"] = json.loads((Path(kernels.__file__).parent / "manifest.json").read_text())["device"]
other = copy_as("other_arch_kernels", lambda m: m["device"].update(arch="sm_80", capability="8.0"))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    seen["other_arch_install"] = repr(other.install())
seen["other_arch_warnings"] = [str(w.message) for w in caught]
with torch.no_grad():
    forced = other.install(force=True)
    model(x)
    seen["forced_counts"] = vars(forced.counts[op]).copy()
    other.uninstall()
if json.loads((Path(kernels.__file__).parent / "manifest.json").read_text())["backend"] == "cuda":
    def old_library(m):
        m["kernels"][0]["build"]["arch"] = "sm_80"
    rebuilt = copy_as("rebuilt_kernels", old_library)
    with torch.no_grad():
        inst = rebuilt.install()
        out = model(x)
        seen["rebuilt_counts"] = vars(inst.counts[op]).copy()
        seen["rebuilt_max_error"] = (out - expected).abs().max().item()
        rebuilt.uninstall()
    seen["rebuilt_cache"] = sorted(p.name for p in (work / "cache" / "rebuilt_kernels").glob("*.so"))
print("RESULT " + json.dumps(seen))
'''


CUDA_SOFTMAX = r"""
#include <cuda_runtime.h>
#include <math.h>
PRELUDE
__global__ void softmax_rows(const float *x, float *y, int64_t cols) {
    const float *xr = x + blockIdx.x * cols;
    float *yr = y + blockIdx.x * cols;
    float m = -INFINITY, s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += 32) m = fmaxf(m, xr[c]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    for (int64_t c = threadIdx.x; c < cols; c += 32) s += expf(xr[c] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    for (int64_t c = threadIdx.x; c < cols; c += 32) yr[c] = expf(xr[c] - m) / s;
}
extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    softmax_rows<<<(unsigned)rows, 32>>>((const float *)in[0].data, (float *)out[0].data, cols);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
"""


def as_cuda_run(run_dir: Path, work: Path) -> Path:
    """A copy of a Triton run relabelled cuda, its winning node holding CUDA_SOFTMAX and its library."""
    from kernforge.backends.cuda import NVCC_FLAGS, gpu_arch
    from kernforge.backends.native import C_PRELUDE

    copy = work / "cuda-run" / run_dir.name
    shutil.copytree(run_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "resolved_backend": "cuda"}))
    node = next(p.parent for p in sorted(copy.glob("tasks/*/nodes/*/confirm.json"))
                if json.loads(p.read_text())["faster_than_eager"])
    source = node / "candidate.cu"
    source.write_text(CUDA_SOFTMAX.replace("PRELUDE", C_PRELUDE))
    (node / "build").mkdir(exist_ok=True)
    subprocess.run(["nvcc", f"-arch={gpu_arch()}", *NVCC_FLAGS, "-o", str(node / "build" / "kf_manual.so"),
                    str(source)], check=True)
    return copy


def mark_winner(run_dir: Path) -> str:
    run = read_run(run_dir)
    if any(t.winner for t in run.tasks):
        return "the search's own winner"
    for confirm in sorted(run_dir.glob("tasks/*/nodes/*/confirm.json")):
        data = json.loads(confirm.read_text())
        if data["status"] == "ok":
            confirm.write_text(json.dumps({**data, "faster_than_eager": True}))
            return f"marked {confirm.parent.name} (correct, not faster than eager)"
    raise SystemExit("no correct finalist to export")


def main() -> None:
    run_dir, work = Path(sys.argv[1]), Path(sys.argv[2])
    print("winner:", mark_winner(run_dir))
    if "--as-cuda" in sys.argv[3:]:
        run_dir = as_cuda_run(run_dir, work)
        print("relabelled as a cuda run:", run_dir)
    result = export_run(run_dir, work / "export")
    print("exported", result.package, [k.files for k in result.kernels], "skipped", result.skipped)
    site = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(work / "export")], check=True)
    (work / "check.py").write_text(CHECK)
    env = {**os.environ, "PYTHONPATH": str(site), "XDG_CACHE_HOME": str(work / "cache")}
    proc = subprocess.run([sys.executable, str(work / "check.py"), str(work), str(Path("tests/models").resolve()),
                           result.package], capture_output=True, text=True, env=env, cwd=work)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    shutil.copyfile(work / "export" / result.package / "manifest.json", work / "manifest.json")


if __name__ == "__main__":
    main()
