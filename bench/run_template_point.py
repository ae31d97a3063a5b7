"""Run one point of a built-in template on a probe row, untimed, for a profiler to watch.

    PYTHONPATH=src:. python3 bench/run_template_point.py --row group_norm_bf16_1x256x512x512 \\
        --point '{"variant": "resident", "chunk": 65536, "block": 16384, "num_warps": 32}' --calls 5
    ncu --set full -k regex:gn_ -s 2 -c 1 -o OUT/gn python3 bench/run_template_point.py ...

The row and its inputs are bench/probe_templates.py's; the point is laid over the family's
starting point, so only what differs need be given. The first call is checked against the
ATen op (a profile of a wrong kernel says nothing). --show prints the rendered source and
runs nothing (no GPU needed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe_templates as probe


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--row", required=True, help=", ".join(c[0] for c in probe.cases()))
    parser.add_argument("--point", default="{}", help="JSON: the parameters that differ from the starting point")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--show", action="store_true", help="print the source and stop")
    args = parser.parse_args()
    rows = {c[0]: c for c in probe.cases()}
    if args.row not in rows:
        print(f"error: no probe row {args.row!r}; rows: {', '.join(rows)}", file=sys.stderr)
        return 2
    _, op, desc, points, render = rows[args.row]
    params = {**points[0], **json.loads(args.point)}
    source = render(params)
    if args.show:
        print(source)
        return 0
    import torch

    module = probe.load(source, "kf_point")
    inputs = probe.real_args(desc)
    expected = probe.outputs(probe.reference(op)(*inputs))
    worst = probe.worst_error(probe.outputs(module.kf_forward(*inputs)), expected)
    print(f"{args.row} {params}: worst relative error {worst:.2e}", flush=True)
    for _ in range(args.calls):
        module.kf_forward(*inputs)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
