"""Check rendered softmax variants against torch.softmax; used by test_propose.py.

    python softmax_variant_check.py BACKEND < variants.json > results.json

variants.json is a list of {"id", "facts", "params"}; the result maps each id to
None (correct on every input set) or why not. For the triton backend run it with
TRITON_INTERPRET=1 in the environment: Triton reads it when a kernel is decorated,
and some versions when triton is imported, so it must be set before either.

The acceptance rule is the pipeline's own (kernforge.evaluate.checks.compare):
within 8x eager's error against a float64 oracle, or the dtype's floor.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch


def input_sets(rows: int, cols: int, dtype: torch.dtype) -> list[tuple[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, cols, generator=gen)
    mixed = x * torch.pow(10.0, torch.empty(rows, 1).uniform_(-3, 2, generator=gen))
    masked = x.clone()
    masked[0, 3] = -float("inf")  # an attention mask: one element out
    masked[1, :] = -float("inf")  # a fully masked row: NaN, as eager gives
    sets = [("normal", x), ("large", x * 100.0), ("mixed", mixed), ("masked", masked)]
    return [(name, t.to(dtype)) for name, t in sets]


def check(kernel: Any, facts: dict[str, Any]) -> str | None:
    from kernforge.evaluate.checks import compare, normalised_error

    dtype = getattr(torch, facts["dtype"])
    for name, x in input_sets(facts["rows"], facts["cols"], dtype):
        oracle = torch.softmax(x.double(), -1)
        eager_error = normalised_error(torch.softmax(x, -1).double(), oracle)
        try:
            out = kernel(x.clone(), -1, False)
        except Exception as e:  # noqa: BLE001 - reported as the variant's failure
            return f"{name}: {type(e).__name__}: {e}"[:2000]
        why, _ = compare([out], [oracle], [eager_error], [dtype])
        if why:
            return f"{name}: {why}"
    return None


def main(backend_name: str) -> int:
    from kernforge.backends import get_backend
    from kernforge.propose.templates import softmax

    backend = get_backend(backend_name)
    variants = json.load(sys.stdin)
    results: dict[str, str | None] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, v in enumerate(variants):
            facts, params = v["facts"], v["params"]
            source = Path(tmp) / f"variant{k}{backend.source_suffix}"
            source.write_text(softmax.render(facts, backend_name, params))
            out_meta = [{"shape": [facts["rows"], facts["cols"]],
                         "dtype": f"torch.{facts['dtype']}", "stride": [facts["cols"], 1],
                         "device": "cpu"}]
            try:
                kernel = backend.build(source, Path(tmp) / "build", out_meta)
            except Exception as e:  # noqa: BLE001
                results[v["id"]] = f"build: {type(e).__name__}: {e}"[:2000]
                continue
            results[v["id"]] = check(kernel, facts)
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
