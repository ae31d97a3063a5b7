"""evaluate.hardware: the machine's facts the baseline worker measures for the proposer's prompt."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from kernforge.harness import hardware
from kernforge.harness.hardware import measure_hardware
from kernforge.store import RunStore
from kernforge.search.runs import read_baseline

pytestmark = pytest.mark.integration

CPU = torch.device("cpu")


def test_cpu_facts_are_sane_and_quick() -> None:
    started = time.perf_counter()
    facts = measure_hardware(CPU)
    took = time.perf_counter() - started
    assert took < 1.0, f"measure_hardware took {took:.2f} s; it runs in every baseline"
    assert facts["kind"] == "cpu"
    assert facts["cores"] >= 1 and facts["threads"] >= 1
    assert facts["bandwidth_gb_s"] > 0 and "64 MiB" in facts["bandwidth_note"]
    assert isinstance(facts["name"], str) and facts["name"]
    assert set(facts.get("vector_isa", [])) <= set(hardware.VECTOR_ISA)
    assert all(size > 0 for size in facts.get("caches", {}).values())
    json.dumps(facts)  # it goes into result.json and baseline.json


def test_missing_files_leave_their_keys_out(monkeypatch) -> None:
    monkeypatch.setattr(hardware, "read_text", lambda path: None)
    facts = measure_hardware(CPU)
    assert "vector_isa" not in facts and "caches" not in facts
    assert facts["cores"] >= 1 and facts["bandwidth_gb_s"] > 0  # the probes that need no file


def test_a_reader_that_raises_never_raises(monkeypatch) -> None:
    def broken(path: Path) -> str:
        raise PermissionError(path)

    monkeypatch.setattr(hardware, "read_text", broken)
    monkeypatch.setattr(hardware, "CACHE_DIR", Path("/nonexistent/cache"))
    facts = measure_hardware(CPU)
    assert facts["kind"] == "cpu" and "caches" not in facts and "vector_isa" not in facts


def test_arm_features_and_sys_caches_are_read(tmp_path: Path, monkeypatch) -> None:
    cpuinfo = ("processor\t: 0\nBogoMIPS\t: 2000.00\n"
               "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid sve\n")
    for index, (level, kind, size) in enumerate([("1", "Data", "64K"), ("1", "Instruction", "64K"),
                                                 ("2", "Unified", "1024K"), ("3", "Unified", "32M")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (folder / name).write_text(text + "\n")
    real_read = hardware.read_text
    monkeypatch.setattr(hardware, "read_text", lambda p: cpuinfo if p == hardware.CPUINFO else real_read(p))
    monkeypatch.setattr(hardware, "CACHE_DIR", tmp_path)
    facts = measure_hardware(CPU)
    assert facts["vector_isa"] == ["asimd", "sve"]
    assert facts["caches"] == {"L1d": 64 * 2**10, "L2": 2**20, "L3": 32 * 2**20}


def test_a_device_without_probes_gives_its_kind() -> None:
    assert measure_hardware(torch.device("meta")) == {"kind": "meta"}


def test_the_baseline_carries_the_hardware(softmax_reference) -> None:
    _, _, baseline = softmax_reference
    assert baseline.hardware["kind"] == "cpu"
    assert baseline.hardware["bandwidth_gb_s"] > 0


def test_an_old_baseline_json_without_hardware_loads(softmax_reference, tmp_path: Path) -> None:
    _, _, baseline = softmax_reference
    store = RunStore.create(tmp_path, "old")
    old = {k: v for k, v in asdict(baseline).items() if k != "hardware"}
    store.write_json("tasks/t0/baseline.json", old)
    assert read_baseline(store, "t0").hardware == {}
    store.write_json("tasks/t1/baseline.json", asdict(baseline))
    assert read_baseline(store, "t1").hardware == baseline.hardware
