"""What the GPU code a candidate built uses of the chip: registers, spills, shared memory a kernel.

Why: a kernel that spills to local memory or asks for so many registers or so much shared
memory that few blocks fit on an SM is slow for a reason its timing does not name; an agent
told "255 registers, spills (48 B local)" knows what to change. The numbers are cuobjdump's
(`cuobjdump -res-usage FILE`, CUDA toolkit), read from what the backends leave in a candidate's
build folder:
  triton  TRITON_CACHE_DIR is build_dir/"triton-cache" (backends/triton_gpu.py): one folder per
          compiled kernel with NAME.cubin and NAME.json, whose metadata gives num_warps,
          num_stages and the dynamic shared memory Triton launches it with ("shared").
  cuda    nvcc's library build_dir/kf_KEY.so (backends/native.py), its device code in a fatbin.

Where there is no cuobjdump, no GPU code or nothing to parse, the answer is []; nothing here raises.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

# cuobjdump reads a 10 MB library in well under a second; 20 s is a hung tool, not a slow one.
TOOL_TIMEOUT_S = 20.0
TRITON_CACHE = "triton-cache"

# `cuobjdump -res-usage` prints, per fatbin entry, "arch = sm_90" and then for each function
#    Function _Z14softmax_kernelPKfPfii:
#     REG:40 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:552 TEXTURE:0 SURFACE:0 SAMPLER:0
ARCH = re.compile(r"^\s*arch\s*=\s*(\S+)")
FUNCTION = re.compile(r"^\s*Function\s+([^\s:]+)\s*:(.*)$")
RESOURCE = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")

RunTool = Callable[[list[str]], str | None]


def resource_usage(build_dir: Path, run_tool: RunTool | None = None) -> list[dict[str, Any]]:
    """One dict per kernel function in the GPU code under build_dir:
    {"kernel", "arch"?, "registers", "stack_bytes", "shared_bytes", "local_bytes", "spilled",
    and for Triton "num_warps", "num_stages", "dynamic_shared_bytes"}. run_tool(argv) -> stdout
    or None runs cuobjdump (tests pass their own); [] without the tool or GPU code."""
    try:
        if run_tool is None:
            if shutil.which("cuobjdump") is None:
                return []
            run_tool = _run_cuobjdump
        return [k for path in gpu_code_files(build_dir) for k in _file_usage(path, run_tool)]
    except Exception:  # noqa: BLE001 - a report is a hint for the prompt; its failure is no candidate's
        return []


def gpu_code_files(build_dir: Path) -> list[Path]:
    """Triton's cubins, then the native libraries and objects outside Triton's cache (whose .so
    files are Triton's host-side launchers: no device code)."""
    if not build_dir.is_dir():
        return []
    cubins = sorted(build_dir.rglob("*.cubin"))
    native = sorted(p for suffix in ("*.so", "*.o") for p in build_dir.rglob(suffix)
                    if TRITON_CACHE not in p.relative_to(build_dir).parts)
    return cubins + native


def _file_usage(path: Path, run_tool: RunTool) -> list[dict[str, Any]]:
    try:
        text = run_tool(["cuobjdump", "-res-usage", str(path)])
    except Exception:  # noqa: BLE001 - one unreadable file leaves only its kernels out
        return []
    kernels = parse_res_usage(text or "")
    meta = _triton_metadata(path) if path.suffix == ".cubin" else {}
    return [{**k, **_triton_fields(k, meta)} if meta else k for k in kernels]


def _run_cuobjdump(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    # A host library with no device code exits non-zero ("does not contain device code"): nothing to parse.
    return proc.stdout if proc.returncode == 0 else None


def parse_res_usage(text: str) -> list[dict[str, Any]]:
    """cuobjdump -res-usage's text -> one dict per function (the "Common:" block is no function)."""
    kernels: list[dict[str, Any]] = []
    arch, current = None, None
    for line in text.splitlines():
        if m := ARCH.match(line):
            arch, current = m.group(1), None
        elif m := FUNCTION.match(line):
            current = {"kernel": m.group(1), **({"arch": arch} if arch else {}), "_res": {}}
            kernels.append(current)
            current["_res"].update(_resources(m.group(2)))
        elif current is not None and RESOURCE.search(line):
            current["_res"].update(_resources(line))
    return [_usage(k.pop("_res"), k) for k in kernels]


def _resources(text: str) -> dict[str, int]:
    return {name: int(value) for name, value in RESOURCE.findall(text)}


def _usage(res: dict[str, int], kernel: dict[str, Any]) -> dict[str, Any]:
    local, stack = res.get("LOCAL", 0), res.get("STACK", 0)
    # Local memory (spilled registers, arrays indexed at run time) and a stack both live in
    # off-chip memory behind L1: either costs a kernel the round-trips registers would not.
    return {**kernel, "registers": res.get("REG", 0), "stack_bytes": stack, "shared_bytes": res.get("SHARED", 0),
            "local_bytes": local, "spilled": bool(local or stack > 0)}


def _triton_metadata(cubin: Path) -> dict[str, Any]:
    try:
        meta = json.loads(cubin.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _triton_fields(kernel: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """num_warps, num_stages, and shared memory with Triton's dynamic part added: Triton asks for
    its shared memory at launch, so cuobjdump's SHARED (static) is 0 for most Triton kernels."""
    fields = {key: meta[key] for key in ("num_warps", "num_stages") if isinstance(meta.get(key), int)}
    dynamic = meta.get("shared")
    if isinstance(dynamic, int):
        fields.update(dynamic_shared_bytes=dynamic, shared_bytes=kernel["shared_bytes"] + dynamic)
    return fields


def summarise(usage: list[dict[str, Any]]) -> str:
    """One line per kernel, for a prompt: "softmax_kernel: 40 registers, no spills, 0 B shared, 4 warps";
    "" when there is nothing to say."""
    return "\n".join(_summary_line(k) for k in usage)


def _summary_line(kernel: dict[str, Any]) -> str:
    spills = (f"spills ({_bytes(kernel.get('local_bytes', 0))} local, {_bytes(kernel.get('stack_bytes', 0))} stack)"
              if kernel.get("spilled") else "no spills")
    parts = [f"{kernel.get('registers', 0)} registers", spills, f"{_bytes(kernel.get('shared_bytes', 0))} shared"]
    if "num_warps" in kernel:
        parts.append(f"{kernel['num_warps']} warps")
    if "num_stages" in kernel:
        parts.append(f"{kernel['num_stages']} stages")
    return f"{short_name(str(kernel.get('kernel', '?')))}: " + ", ".join(parts)


def short_name(name: str) -> str:
    """A mangled C++ kernel's own name ("_Z14softmax_kernelPKfPfii" -> "softmax_kernel"); others as they are."""
    m = re.match(r"_Z(\d+)", name)
    if m:
        start, length = m.end(), int(m.group(1))
        if len(name) >= start + length:
            return name[start:start + length]
    return name


def _bytes(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB"
