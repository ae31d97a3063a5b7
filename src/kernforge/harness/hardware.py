"""The machine's facts, measured once per task by the baseline worker (worker.run_baseline).

Why: an LLM agent that writes a kernel picks tile sizes, vector widths and the number of
threads from the machine it runs on; these facts go into its prompt (baseline.json carries
them as Baseline.hardware), so it need not guess the GPU or the CPU's caches.

What each is:
  cuda  the device's properties as torch reports them (name, compute capability, SMs, L2,
        memory, shared memory a block may opt in to, warp size), and the bandwidth a
        device-to-device copy of a 256 MiB buffer reaches: CUDA events, best of 5 after one
        warm-up, read + write bytes (2 x 256 MiB) per copy. The copy is what a memory-bound
        kernel can hope for, a little under the data sheet's figure.
  cpu   the model name, the cores this process may run on, torch's threads, the vector ISA
        extensions in /proc/cpuinfo, the data caches of cpu0 from /sys, and the bandwidth of a
        torch copy_ of one 64 MiB float32 buffer into another: best of 3 after one warm-up,
        read + write bytes. 64 MiB is over any L3 this code has met (32 MiB on the EPYC it
        was written on), so the figure is DRAM's, not a cache's.

Every probe stands alone: a file that is missing or unreadable, or a probe that raises, leaves
its keys out, and measure_hardware never raises (the baseline must not fail for a fact).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

CPUINFO = Path("/proc/cpuinfo")
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
# The extensions a kernel author writes to (x86 first, then Arm); the order of the answer is this one.
VECTOR_ISA = ("avx512f", "avx512bw", "avx512_bf16", "avx512_fp16", "amx_tile", "avx2", "fma", "f16c",
              "neon", "asimd", "sve")
# 256 MiB: 8x an H100/H200's 50-60 MB L2, so the copy is HBM's bandwidth, not L2's.
CUDA_COPY_BYTES = 256 * 2**20
CUDA_COPY_REPS = 5
# 64 MiB of float32: over a 32 MiB L3. The fill, warm-up and 3 copies keep measure_hardware at
# 0.09-0.12 s on a 2-core EPYC (21-31 GB/s): it runs in every baseline, so in many tests.
CPU_COPY_BYTES = 64 * 2**20
CPU_COPY_REPS = 3

Probe = Callable[[torch.device], dict[str, Any]]


def read_text(path: Path) -> str | None:
    """A file's text, or None if it is missing or unreadable (tests replace this reader)."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def measure_hardware(device: torch.device) -> dict[str, Any]:
    """The device's facts, JSON-ready: {"kind": "cuda" | "cpu" | other, ...}; a failed probe is left out."""
    facts: dict[str, Any] = {"kind": device.type}
    for probe in PROBES.get(device.type, ()):
        facts.update(_tried(probe, device))
    return facts


def _tried(probe: Probe, device: torch.device) -> dict[str, Any]:
    try:
        return {k: v for k, v in probe(device).items() if v is not None}
    except Exception:  # noqa: BLE001 - a fact that cannot be had is left out, never fatal
        return {}


# ---------------------------------------------------------------- cuda

def cuda_properties(device: torch.device) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(device)
    return {"name": torch.cuda.get_device_name(device), "capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count, "l2_bytes": getattr(props, "L2_cache_size", None),
            "memory_bytes": props.total_memory, "max_shared_memory_per_block_bytes": _shared_per_block(props),
            "warp_size": getattr(props, "warp_size", None)}


def _shared_per_block(props: Any) -> int | None:
    # optin: what a kernel may ask for (227 KiB on sm_90); the plain figure is the 48 KiB default.
    for name in ("shared_memory_per_block_optin", "shared_memory_per_block"):
        value = getattr(props, name, None)
        if value:
            return int(value)
    return None


def cuda_bandwidth(device: torch.device) -> dict[str, Any]:
    with torch.cuda.device(device):
        src = torch.empty(CUDA_COPY_BYTES, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        dst.copy_(src)  # warm-up
        best_ms = min(_cuda_copy_ms(src, dst) for _ in range(CUDA_COPY_REPS))
        del src, dst
        torch.cuda.empty_cache()  # give the 512 MiB back: the baseline's inputs may need it
    return {"bandwidth_gb_s": round(2 * CUDA_COPY_BYTES / (best_ms * 1e-3) / 1e9, 1),
            "bandwidth_note": f"device-to-device copy of 256 MiB, CUDA events, best of {CUDA_COPY_REPS}, "
                              "read+write bytes"}


def _cuda_copy_ms(src: torch.Tensor, dst: torch.Tensor) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    dst.copy_(src)
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


# ---------------------------------------------------------------- cpu

def cpu_name(_device: torch.device) -> dict[str, Any]:
    return {"name": _cpuinfo_field(("model name", "Model name")) or platform.processor() or platform.machine()
            or None}


def cpu_threads(_device: torch.device) -> dict[str, Any]:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cores": cores, "threads": torch.get_num_threads()}


def vector_isa(_device: torch.device) -> dict[str, Any]:
    flags = _cpuinfo_field(("flags", "Features"))
    if flags is None:
        return {}
    present = set(flags.split())
    return {"vector_isa": [isa for isa in VECTOR_ISA if isa in present]}


def _cpuinfo_field(names: tuple[str, ...]) -> str | None:
    """The first value of any of `names` in /proc/cpuinfo (every core repeats them)."""
    text = read_text(CPUINFO)
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in names:
            return value.strip()
    return None


def cpu_caches(_device: torch.device) -> dict[str, Any]:
    caches: dict[str, int] = {}
    for index in sorted(CACHE_DIR.glob("index*")):
        name = _cache_name(read_text(index / "level"), read_text(index / "type"))
        size = _size_bytes(read_text(index / "size"))
        if name and size:
            caches[name] = size
    return {"caches": caches} if caches else {}


def _cache_name(level: str | None, kind: str | None) -> str | None:
    level, kind = (level or "").strip(), (kind or "").strip()
    if kind == "Instruction" or not level:
        return None
    return "L1d" if level == "1" else f"L{level}"


def _size_bytes(text: str | None) -> int | None:
    """Bytes of a /sys cache size: "48K", "2048K", "32M" (or a bare number of bytes)."""
    text = (text or "").strip().upper()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    digits = text[:-1] if scale != 1 else text
    return int(digits) * scale if digits.isdigit() else None


def cpu_bandwidth(_device: torch.device) -> dict[str, Any]:
    # Filled, not empty: untouched pages all map the kernel's one zero page, which reads from cache.
    src = torch.ones(CPU_COPY_BYTES // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: faults dst's pages in
    best_s = min(_cpu_copy_s(src, dst) for _ in range(CPU_COPY_REPS))
    return {"bandwidth_gb_s": round(2 * CPU_COPY_BYTES / best_s / 1e9, 1),
            "bandwidth_note": f"torch copy_ of 64 MiB float32, best of {CPU_COPY_REPS}, read+write bytes, "
                              f"{torch.get_num_threads()} threads"}


def _cpu_copy_s(src: torch.Tensor, dst: torch.Tensor) -> float:
    started = time.perf_counter()
    dst.copy_(src)
    return time.perf_counter() - started


PROBES: dict[str, tuple[Probe, ...]] = {
    "cuda": (cuda_properties, cuda_bandwidth),
    "cpu": (cpu_name, cpu_threads, vector_isa, cpu_caches, cpu_bandwidth),
}
