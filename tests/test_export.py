"""kernforge export: a run's winners as a package, installed and used where kernforge is not.

The session's one optimize of the tiny softmax (conftest's finished_run), copied without its
apply's record; its first correct finalist is marked as the winner (on this CPU the search
rarely beats eager on so small an op, and speed is not what an export is tested for). The
package is pip-installed into a fresh virtual environment that has torch but not kernforge, and
used there in one fresh process.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import SOFTMAX_OP, TINY_MODEL, run_cli
from test_cli import assert_one_line_error

import kernforge
from kernforge.backends.cpu import GCC_COMMAND
from kernforge.errors import UserError
from kernforge.integrate import export
from kernforge.runtime import loader, router
from kernforge.search.runs import read_run

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("export")]  # one worker: module fixtures made once

PACKAGE = "kernforge_tiny_softmax_kernels"
RUNTIME_SRC = Path(kernforge.__file__).parent / "runtime"


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def searched_run(finished_run, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished cpu run of the tiny softmax, as optimize --no-apply leaves it (a copy of the session's)."""
    # one finalist: its confirm.json is what run_dir edits; apply (end to end) is not tested here
    return finished_run.copy_to(tmp_path_factory.mktemp("export-runs"), applied=False)


@pytest.fixture(scope="module")
def no_winner_run(searched_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run with every finalist marked as not faster than eager."""
    copy = tmp_path_factory.mktemp("no-winner") / searched_run.name
    shutil.copytree(searched_run, copy)
    for confirm in copy.glob("tasks/*/nodes/*/confirm.json"):
        _edit_json(confirm, faster_than_eager=False)
    return copy


@pytest.fixture(scope="module")
def run_dir(searched_run: Path, no_winner_run: Path) -> Path:
    """The run with its first correct finalist marked as the winner (after no_winner_run's copy)."""
    confirms = [c for c in sorted(searched_run.glob("tasks/*/nodes/*/confirm.json"))
                if json.loads(c.read_text())["status"] == "ok"]
    assert confirms, "the search found no correct finalist to mark as the winner"
    _edit_json(confirms[0], faster_than_eager=True, speedup_vs_eager=1.3)
    return searched_run


@pytest.fixture(scope="module")
def exported(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "pkg"
    export.export_run(run_dir, out)
    return out


def _edit_json(path: Path, **changes: object) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _manifest(root: Path) -> dict:
    return json.loads((root / PACKAGE / "manifest.json").read_text())


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (bytecode left out), by its path relative to it."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


# ---------------------------------------------------------------- the folder


def test_export_writes_the_kernel_its_library_and_kernforge_runtime_verbatim(exported: Path):
    pkg = exported / PACKAGE
    assert (exported / "pyproject.toml").is_file() and (exported / "README.md").is_file()
    original, shipped = _files(RUNTIME_SRC), _files(pkg / "runtime")
    assert {"router.py", "loader.py", "dispatch.py", "dispatch.cpp"} <= set(original)
    # the whole folder, and only it: the builds of dispatch.cpp beside it are the export's own
    assert sorted(f for f in shipped if not f.startswith("prebuilt/")) == sorted(original)
    for relative, content in original.items():
        assert shipped[relative] == content, relative
    kernel = _manifest(exported)["kernels"][0]
    assert (pkg / kernel["source"]).suffix == ".c" and (pkg / kernel["library"]).suffix == ".so"
    pyproject = (exported / "pyproject.toml").read_text()
    assert f'name = "{PACKAGE}"' in pyproject and '"torch>=' in pyproject and "kernforge" not in (
        pyproject.split("dependencies", 1)[1].splitlines()[0])


def test_manifest_records_the_kernel_guard_device_speedups_versions_and_checksums(exported: Path,
                                                                                  run_dir: Path):
    manifest, run = _manifest(exported), read_run(run_dir)
    task = run.tasks[0].task
    assert manifest["format_version"] == loader.MANIFEST_FORMAT
    assert manifest["versions"] == run.config["versions"] and "torch" in manifest["versions"]
    assert manifest["device"]["type"] == "cpu" and manifest["device"]["name"] == run.device_name
    assert manifest["device"]["note"]  # a CPU run has no compute capability: the manifest says so
    [kernel] = manifest["kernels"]
    assert kernel["op"] == SOFTMAX_OP and kernel["signature"] == task.signature
    assert kernel["schema"].startswith("aten::_softmax(Tensor self, int dim")
    assert kernel["guard"] == task.args and kernel["outputs"] == task.outputs
    assert kernel["speedup_vs_eager"] == 1.3 and kernel["p50_ms"] > 0 and kernel["eager_p50_ms"] > 0
    assert kernel["build"] == {"command": GCC_COMMAND, "built_for": loader.cpu_model()}
    assert kernel["loading"] == {"device": "cpu", "artefact": "library", "default_stream_only": False}
    pkg = exported / PACKAGE
    on_disk = {p.relative_to(pkg).as_posix() for p in pkg.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for relative, digest in manifest["files"].items():
        assert hashlib.sha256((pkg / relative).read_bytes()).hexdigest() == digest, relative


# ---------------------------------------------------------------- refusals


def test_a_run_without_winners_has_nothing_to_export(no_winner_run: Path, tmp_path: Path):
    with pytest.raises(UserError, match="nothing to export: no kernel of run"):
        export.export_run(no_winner_run, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_non_empty_folder_is_refused_unless_force_and_force_replaces_only_an_export(
        run_dir: Path, exported: Path, tmp_path: Path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(UserError, match="exists and is not empty; .* --force"):
        export.export_run(run_dir, mine)
    with pytest.raises(UserError, match="not an earlier kernforge export"):
        export.export_run(run_dir, mine, force=True)
    assert (mine / "notes.txt").read_text() == "keep me"
    earlier = tmp_path / "earlier"
    shutil.copytree(exported, earlier)
    (earlier / "stale.txt").write_text("from the earlier export")
    export.export_run(run_dir, earlier, name="softmax_kernels", force=True)
    assert not (earlier / "stale.txt").exists() and not (earlier / PACKAGE).exists()
    assert json.loads((earlier / "softmax_kernels" / "manifest.json").read_text())["package"] == "softmax_kernels"


def test_a_bad_package_name_is_refused(run_dir: Path, tmp_path: Path):
    with pytest.raises(UserError, match="not a Python package name"):
        export.export_run(run_dir, tmp_path / "out", name="my-kernels")


def test_cli_export_of_a_folder_that_is_not_a_run_is_one_line(tmp_path: Path):
    proc = run_cli("export", str(tmp_path), "-o", str(tmp_path / "out"))
    assert_one_line_error(proc, "is not a kernforge run folder")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the loader, in this process


def test_a_library_that_does_not_load_is_rebuilt_from_source_into_the_user_cache(
        exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = tmp_path / "broken_library_kernels"
    shutil.copytree(exported / PACKAGE, root)
    manifest = _manifest(exported)
    library = manifest["kernels"][0]["library"]
    (root / library).write_bytes(b"not an ELF file")
    manifest["files"][library] = loader.sha256_of(root / library)  # as if exported so: only loading fails
    (root / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert_install_takes_the_kernel(loader.Package(root))
    assert list((tmp_path / "cache" / root.name).glob("*.so"))


def test_kernforge_patch_and_an_exported_package_share_one_custom_op(run_dir: Path, exported: Path):
    """Each holds a copy of the runtime; a custom op can be defined once per process."""
    sys.path.insert(0, str(exported))
    try:
        import kernforge_tiny_softmax_kernels as package
    finally:
        sys.path.remove(str(exported))
    handle = kernforge.patch(None, run_dir)
    assert len(handle.specs) == 1
    handle.remove()
    assert_install_takes_the_kernel(package)


def assert_install_takes_the_kernel(package) -> None:
    """The package's install() sends the proved softmax to its kernel, with torch's result."""
    x = torch.randn(2, 40, 40)
    expected = torch.softmax(x, -1)
    installation = package.install()
    try:
        assert torch.allclose(torch.softmax(x, -1), expected, atol=1e-6)
        assert installation.counts[SOFTMAX_OP].kernel == 1
    finally:
        package.uninstall()


# ---------------------------------------------------------------- a fresh environment without kernforge


FRESH_SCRIPT = '''
import json, shutil, sys, warnings
from pathlib import Path

import torch

work, model_dir = Path(sys.argv[1]), sys.argv[2]
seen = {}


def counted(c):
    return {"kernel": c.kernel, "custom_op": c.custom_op, "fallback": c.fallback, "by_kernel": c.by_kernel}

try:
    import kernforge  # noqa: F401
    seen["kernforge_importable"] = True
except ImportError:
    seen["kernforge_importable"] = False

import PACKAGE as kernels
seen["package_file"] = kernels.__file__
sys.path.insert(0, model_dir)
import tiny_softmax
import torch._inductor.config as inductor_config

torch.manual_seed(0)
model = tiny_softmax.Model(*tiny_softmax.get_init_inputs()).eval()
x = tiny_softmax.get_inputs()[0]
dispatcher_before = torch._C._dispatch_dump("aten::_softmax")
cache_before = inductor_config.fx_graph_cache
with torch.no_grad():
    expected = model(x)
    installation = kernels.install(model)
    out = model(x)
    seen["counts"] = counted(installation.counts["aten::_softmax.default"])
    seen["max_error"] = (out - expected).abs().max().item()
    seen["cache_while_installed"] = inductor_config.fx_graph_cache
    seen["uninstalled"] = kernels.uninstall()
    model(x)
seen["counts_after"] = counted(installation.counts["aten::_softmax.default"])
seen["dispatcher_restored"] = torch._C._dispatch_dump("aten::_softmax") == dispatcher_before
import importlib, importlib.machinery
native = importlib.import_module("PACKAGE.runtime.dispatch")
seen["native_from"] = str(native._built_library()) if native.native_module() is not None else None
seen["abi"] = importlib.machinery.EXTENSION_SUFFIXES[0]
seen["cache_restored"] = inductor_config.fx_graph_cache == cache_before

# copies of the installed package under other names, each changed one way
installed = Path(kernels.__file__).parent
alt = work / "alt"
def copy_as(name, edit):
    shutil.copytree(installed, alt / name, ignore=shutil.ignore_patterns("__pycache__"))
    edit(alt / name)
    sys.path.insert(0, str(alt))
    return __import__(name)

def other_device(root):
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["device"]["name"] = "Some Other CPU"
    (root / "manifest.json").write_text(json.dumps(manifest))
other = copy_as("other_device_kernels", other_device)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    seen["other_device_install"] = other.install()
seen["other_device_warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
with torch.no_grad():
    forced = other.install(force=True)
    model(x)
    seen["forced_counts"] = counted(forced.counts["aten::_softmax.default"])
    other.uninstall()

def tamper(root):
    kernel = json.loads((root / "manifest.json").read_text())["kernels"][0]["source"]
    with open(root / kernel, "a") as f:
        f.write("/* changed after export */\\n")
tampered = copy_as("tampered_kernels", tamper)
try:
    tampered.install()
    seen["tampered"] = "installed"
except tampered.ChecksumError as e:
    seen["tampered"] = str(e)
seen["kernforge_modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "kernforge")
print("RESULT " + json.dumps(seen, default=repr))
'''


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with torch (through a .pth naming the directory that holds this
    environment's torch) and no kernforge: kernforge's editable finder is a .pth of its own,
    which Python reads only in a site directory, not in one a .pth added."""
    python = Path("/usr/bin/python3.11")
    if not python.is_file():
        pytest.skip("the fresh environment is made with /usr/bin/python3.11, which this machine lacks")
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "torch_only.pth").write_text(str(Path(torch.__file__).parent.parent) + "\n")
    return venv


def test_the_package_installs_and_runs_where_kernforge_is_not(exported: Path, fresh_venv: Path,
                                                              tmp_path: Path):
    site = Path(subprocess.run([str(fresh_venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation",
                          "--no-index", "--target", str(site), str(exported)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    # -v shows the build backend's output: no setuptools warning about the package's layout
    assert "Warning" not in pip.stdout + pip.stderr, pip.stdout + pip.stderr
    script = tmp_path / "use_package.py"
    script.write_text(textwrap.dedent(FRESH_SCRIPT).replace("PACKAGE", PACKAGE))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    proc = subprocess.run([str(fresh_venv / "bin" / "python"), str(script), str(tmp_path),
                           str(TINY_MODEL.parent)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    seen = json.loads(lines[0][len("RESULT "):])

    assert seen["kernforge_importable"] is False
    assert seen["kernforge_modules"] == []  # the package, its runtime and its uses never reached for it
    counts = seen["counts"]
    assert (counts["kernel"], counts["custom_op"], counts["fallback"]) == (1, 0, 0)
    assert list(counts["by_kernel"].values()) == [1]
    assert seen["max_error"] < 1e-5
    assert seen["cache_while_installed"] is False
    assert seen["uninstalled"] is True
    assert seen["counts_after"] == seen["counts"]  # the forward after uninstall did not reach the router
    assert seen["dispatcher_restored"] and seen["cache_restored"]
    # the exporter's torch and Python ABI: the shipped build, not one made here
    assert seen["abi"] == importlib.machinery.EXTENSION_SUFFIXES[0]
    assert seen["native_from"].startswith(str(site / PACKAGE / "runtime" / "prebuilt")), seen["native_from"]

    assert seen["other_device_install"] is None
    [warning] = seen["other_device_warnings"]
    assert warning.startswith("DeviceMismatchWarning: other_device_kernels: these kernels were proved on "
                              "the CPU 'Some Other CPU'")
    assert "nothing installed" in warning and "install(force=True)" in warning
    assert seen["forced_counts"]["kernel"] == 1

    kernel_file = _manifest(exported)["kernels"][0]["source"]
    assert seen["tampered"].startswith(f"tampered_kernels: {kernel_file} does not match its sha256")
    assert "\n" not in seen["tampered"]
    assert Path(seen["package_file"]).parent == site / PACKAGE  # the installed copy, not the export folder


def test_an_applied_run_exports_where_each_kernel_pays(run_dir: Path, tmp_path: Path):
    """apply's measured choice goes into the manifest: a kernel that only pays under compile is
    exported for compiled graphs alone, one that pays nowhere is not exported."""
    applied = Path(shutil.copytree(run_dir, tmp_path / "run"))
    name = _manifest_kernel_name(run_dir)
    (applied / "integrate").mkdir(exist_ok=True)

    def write(in_eager: bool, under_compile: bool) -> None:
        (applied / "integrate" / "apply.json").write_text(json.dumps(
            {"kernels": [{"kernel": name, "installed_eager": in_eager, "installed_compile": under_compile}],
             "timings_ms": {"compile": {"p50_ms": 1.0}}}))

    write(in_eager=False, under_compile=True)
    export.export_run(applied, tmp_path / "pkg", name=PACKAGE)
    [kernel] = _manifest(tmp_path / "pkg")["kernels"]
    assert (kernel["in_eager"], kernel["under_compile"]) == (False, True)
    write(in_eager=False, under_compile=False)
    with pytest.raises(UserError, match="makes the model slower"):
        export.export_run(applied, tmp_path / "pkg2", name=PACKAGE)


def _manifest_kernel_name(run_dir: Path) -> str:
    from kernforge.integrate import winners

    winner = winners(read_run(run_dir))[0]
    return router.kernel_name(winner.op, winner.source.read_bytes())


def test_install_on_another_model_says_so_in_one_line(exported: Path):
    """The model a package was proved in is named in its manifest; another one is installed on
    (its calls of the proved shapes still take the kernel, the others run the original), with a
    one-line warning, and the model it was proved in gets none."""
    import warnings

    manifest = _manifest(exported)
    assert manifest["model_class"] == "Model" and manifest["model_parameters"] == 48 * 48 + 48
    package = loader.Package(exported / PACKAGE)
    with pytest.warns(loader.ModelMismatchWarning) as caught:
        installation = package.install(torch.nn.Linear(3, 5))
    try:
        assert installation is not None
        (line,) = [str(w.message) for w in caught]
        assert "\n" not in line and "Model of 2,352 parameters, not this Linear of 20" in line, line
    finally:
        package.uninstall()
    sys.path.insert(0, str(TINY_MODEL.parent))
    try:
        from tiny_softmax import Model
    finally:
        sys.path.remove(str(TINY_MODEL.parent))
    with warnings.catch_warnings():
        warnings.simplefilter("error", loader.ModelMismatchWarning)
        assert package.install(Model()) is not None
    package.uninstall()
