"""The package's import graph, read from the source (function-level imports too, TYPE_CHECKING
ones not, since they never run): no module imports another that imports it back, by any path,
and no stage imports a later one (LAYERS). A circle kept alive by a function-level import, or an
arrow from a stage up to one after it, fails here with the path that makes it. The runtime,
which every exported package ships as it is, imports nothing of kernforge outside itself."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[1] / "src" / "kernforge"
# kernforge's parts, bottom first: each imports only parts of lower layers (or its own layer's
# part). The runtime is at the bottom: an exported package ships it without the rest of kernforge.
# What the pipeline runs in order (capture, tasks, evaluate, propose, search, integrate) stands in
# that order above the shared pieces; what drives or shows a whole run is on top.
LAYERS = [
    {"runtime"},
    {"errors", "phases", "include", "records"},
    {"harness", "store", "models"},
    {"backends"},
    {"capture"},
    {"tasks"},
    {"evaluate"},
    {"propose"},
    {"search"},
    {"integrate"},
    {"optimize"},
    {"eval_file", "report"},
    {"ui"},
    {"cli", "__main__", "__init__"},
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text())
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for n in ast.walk(node)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                kept = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(kept + ([base] if base else []))
            targets |= {f"{base}.{a.name}" for a in node.names} | {base}
    resolved = set()
    for target in targets:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name and not name.startswith(target + "."):
            resolved.add(target)
    return resolved


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_no_module_imports_itself_back_by_any_path():
    graph = _graph()
    circles = []
    for start in sorted(graph):
        path = _path_back(graph, start)
        if path and min(path) == start:  # each circle once, from its first module
            circles.append(" -> ".join(path + [start]))
    assert not circles, "\n".join(circles)


def _path_back(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path start -> ... -> (an import of start), if there is one (depth first)."""
    stack, seen = [(start, [start])], {start}
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return path
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def test_no_part_imports_a_later_one():
    layer = {part: i for i, parts in enumerate(LAYERS) for part in parts}
    graph = _graph()
    unplaced = sorted({_part(m) for m in graph} - set(layer))
    assert not unplaced, f"place these in LAYERS: {unplaced}"
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                    if layer[_part(b)] > layer[_part(a)])
    assert not upward, "\n".join(upward)


def test_the_runtime_imports_nothing_of_kernforge_outside_itself():
    """Every module of kernforge.runtime runs as it is inside an exported package (as
    PACKAGE.runtime), where there is no kernforge: it imports its neighbours relatively, and an
    absolute import of kernforge, or a relative one out of the folder, at any level, fails here."""
    runtime = {name: path for name, path in _modules().items() if _part(name) == "runtime"}
    assert {"kernforge.runtime", "kernforge.runtime.router", "kernforge.runtime.loader"} <= set(runtime)
    wrong = sorted(f"{name}: {line}" for name, path in runtime.items() for line in _imports_leaving(name, path))
    assert not wrong, "\n".join(wrong)


def _imports_leaving(name: str, path: Path) -> list[str]:
    """The imports in the file that name kernforge absolutely or reach above its package
    (TYPE_CHECKING ones too: an exported package has no kernforge to check types against)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            names = [] if node.level == 1 else [f"{'.' * node.level}{node.module or ''}"]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        if any(n.startswith(".") or n.split(".")[0] == "kernforge" for n in names):
            found.append(f"line {node.lineno}: {ast.unparse(node)} (in {package})")
    return found
