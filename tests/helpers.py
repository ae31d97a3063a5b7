"""Constants and helpers shared by the tests (fixtures are in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
TINY_MODEL = TESTS_DIR / "models" / "tiny_softmax.py"
SOFTMAX_OP = "aten::_softmax.default"


# A correct softmax over the last dim for contiguous float32 inputs of any shape,
# written against the cpu backend's contract; BODY is what varies between tests.
C_SOFTMAX_TEMPLATE = """\
#include <math.h>
#include <stddef.h>
{prelude}
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {{
    if (n_in != 1 || n_out != 1) return 1;
    if (in[0].dtype != KF_F32 || out[0].dtype != KF_F32) return 2;
    int64_t cols = in[0].sizes[in[0].ndim - 1];
    int64_t rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
{body}
    return 0;
}}
"""

CORRECT_BODY = """\
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
"""


def c_softmax_source(body: str = CORRECT_BODY) -> str:
    from kernforge.backends.cpu import C_PRELUDE

    return C_SOFTMAX_TEMPLATE.format(prelude=C_PRELUDE, body=body)


def run_cli(*args: str, cwd: Path | str = REPO_ROOT, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m kernforge ARGS` in a fresh process, output captured as text.

    TRITON_INTERPRET is removed from the environment unless env sets it.
    """
    full_env = dict(os.environ)
    full_env.pop("TRITON_INTERPRET", None)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "kernforge", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def scripted_context(propose, evaluate_one, iterations: int, parallel: int = 1, previous=None,
                     duration=lambda proposal: 1.0):
    """A SearchContext over scripted results: evaluate_one(proposal, parent, decide) -> Node.
    On a simulated clock each started candidate takes duration(proposal) and the earliest to
    finish is evaluated next (ties: the first started). Records, each time the strategy waits,
    how many candidates were running (`ctx.running_at_wait`), and for each node when it started
    and finished (`ctx.spans`, by node id)."""
    import heapq

    from kernforge.propose import NoProposal
    from kernforge.search import SearchContext

    clock = {"now": 0.0}
    queue: list = []

    def start(parent, decide, proposal):
        handle = len(ctx.started)
        ctx.started.append(clock["now"])
        heapq.heappush(queue, (clock["now"] + duration(proposal), handle, proposal, parent, decide))
        return handle

    def wait_any():
        ctx.running_at_wait.append(len(queue))
        finished, handle, proposal, parent, decide = heapq.heappop(queue)
        clock["now"] = finished
        node = evaluate_one(proposal, parent, decide)
        ctx.spans[node.node_id] = (ctx.started[handle], finished)
        return handle, node

    def ask(parent):  # a scripted proposer's None: nothing left
        return propose(parent) or NoProposal("scripted: nothing left", "exhausted")

    previous = list(previous or [])
    ctx = SearchContext(task=None, iterations=iterations, propose=ask, start=start, wait_any=wait_any,
                        parallel=parallel, previous=previous, evaluated=len(previous))
    ctx.started, ctx.running_at_wait, ctx.spans = [], [], {}
    return ctx
