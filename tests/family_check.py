"""Check built-in kernels of any family against the ATen op itself; used by the family tests.

    python family_check.py BACKEND < variants.json > results.json

variants.json is a list of {"id", "op", "args", "params"}: `args` in a task's
JSON form (tensors as {"shape", "dtype", "stride"}, optionally "positive": true
for values that must be > 0, like a running variance; other values as they
are), `params` a point of the matching family's space. The result maps each id
to None (correct on every input set) or why not. For the triton backend run it
with TRITON_INTERPRET=1 in the environment (set before triton is imported).

In a test, in-process (the cpu backend):

    task = make_task("aten::native_layer_norm.default", [tensor([7, 300]), [300], ...])
    assert check_params(task, "cpu", params, tmp_path) is None

The acceptance rule is the pipeline's own (kernforge.evaluate.checks.compare):
within 8x eager's error against a float64 oracle (kept in the output's range),
or the dtype's floor; every output of the op (a norm's mean and rstd too) is
compared. Besides the sets below, every kernel meets the value-class sets the
evaluator judges candidates on (evaluate/classes.py: zero and constant rows,
ties, subnormals; the dtype's extremes, NaN and infinities), as eager takes them.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from kernforge.capture.recorder import tensor_meta
from kernforge.evaluate.checks import compare, element_bound, in_output_range, oracle_dtype, outputs_list, upcast
from kernforge.evaluate.classes import class_sets, reference_accepts
from kernforge.records.task import KernelTask
from kernforge.tasks import resolve_op


def tensor(shape: list[int], dtype: str = "torch.float32", stride: list[int] | None = None,
           positive: bool = False) -> dict[str, Any]:
    """A tensor argument in a task's JSON form (contiguous unless `stride` is given)."""
    desc = {"shape": list(shape), "dtype": dtype, "stride": stride or _contiguous(list(shape)),
            "device": "cpu"}
    if positive:
        desc["positive"] = True
    return desc


def channels_last(shape: list[int]) -> list[int]:
    """The strides of an NCHW tensor stored as NHWC."""
    _, c, h, w = shape
    return [h * w * c, 1, w * c, c]


def split_kwargs(args: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    """A task's arguments as capture records them: keyword ones in a last {"kwargs": ...} element."""
    if args and isinstance(args[-1], dict) and set(args[-1]) == {"kwargs"}:
        return args[:-1], args[-1]["kwargs"]
    return args, {}


def make_task(op: str, args: list[Any]) -> KernelTask:
    positional, kwargs = split_kwargs(args)
    real = materialise(positional, torch.Generator().manual_seed(0), 1.0)
    outputs = [tensor_meta(t) for t in outputs_list(resolve_op(op)(*real, **kwargs))]
    return KernelTask(task_id="t0-check", op=op, signature="check", args=args, outputs=outputs,
                      samples=[], share=0.5, gain_if_2x=1.33, time_us=10.0, device="cpu")


def materialise(args: list[Any], gen: torch.Generator, scale: float, mixed: bool = False) -> list[Any]:
    """Real arguments for the descriptions: normal values times `scale`; `mixed` gives each
    leading index of the first tensor its own scale between 1e-3 and 1e2."""
    out: list[Any] = []
    first = True
    for a in args:
        if isinstance(a, dict) and "shape" in a:
            out.append(_draw(a, gen, scale if first else 1.0, mixed and first))
            first = False
        elif isinstance(a, list) and a and isinstance(a[0], dict):
            out.append([_draw(t, gen, 1.0, False) for t in a])
        else:
            out.append(a)
    return out


def _draw(desc: dict[str, Any], gen: torch.Generator, scale: float, mixed: bool) -> torch.Tensor:
    dtype = getattr(torch, desc["dtype"].replace("torch.", ""))
    shape, stride = desc["shape"], desc["stride"]
    storage = max(1, 1 + sum((s - 1) * st for s, st in zip(shape, stride) if s > 0))
    flat = torch.randn(storage, generator=gen, dtype=torch.float64)
    x = torch.as_strided(flat, shape, stride)
    if desc.get("positive"):
        x = x.abs() + 0.5
    x = x * scale
    if mixed and len(shape) > 1 and shape[0] > 1:
        per_row = torch.pow(10.0, torch.empty(shape[0], dtype=torch.float64).uniform_(-3, 2, generator=gen))
        x = x * per_row.view(-1, *([1] * (len(shape) - 1)))
    result = torch.empty_strided(shape, stride, dtype=dtype)
    result.copy_(x)
    return result


def input_sets(op: str, args: list[Any], kwargs: dict[str, Any] | None = None) -> list[tuple[str, list[Any]]]:
    gen = torch.Generator().manual_seed(1)
    sets = [("normal", materialise(args, gen, 1.0)), ("large", materialise(args, gen, 100.0)),
            ("mixed", materialise(args, gen, 1.0, mixed=True))]
    if op in ("aten::_softmax.default", "aten::_log_softmax.default"):
        masked = materialise(args, gen, 1.0)
        x = masked[0].view(-1, masked[0].shape[-1])
        x[0, min(3, x.shape[1] - 1)] = -float("inf")  # an attention mask: one element out
        if x.shape[0] > 1:
            x[1, :] = -float("inf")  # a fully masked row: NaN, as eager gives
        sets.append(("masked", masked))
    if op in INDEXED_OPS:
        ties = materialise(args, gen, 1.0)
        _ties_and_nan(ties[0], _reduced_dim(op, args))
        sets.append(("ties_nan", ties))
    if op in ("aten::amax.default", "aten::amin.default"):
        nan = materialise(args, gen, 1.0)
        _two_nans(nan[0])
        sets.append(("nan", nan))  # a NaN wins: the reductions that meet one give NaN, as eager
    if op in NORMALISED_EXTENT:
        constant = materialise(args, gen, 1.0)
        _constant_every_other(constant[0], NORMALISED_EXTENT[op](args))
        sets.append(("constant", constant))
    if _overflows_when_scaled(op, args):
        sets = sets[:1]
    return sets + value_class_sets(op, sets[0][1], kwargs or {})


def value_class_sets(op: str, sample: list[Any], kwargs: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    """The evaluator's value-class sets on `sample`, those eager takes (fresh-classes, fresh-edges
    or a rung down), drawn as a baseline draws them: a kernel that drops a NaN group's NaN or
    overflows on the dtype's largest values fails here as it would in a search."""
    aten = resolve_op(op)
    accepts = reference_accepts(lambda inputs: outputs_list(aten(*inputs, **kwargs)),
                                lambda inputs: outputs_list(aten(*upcast(inputs), **kwargs)))
    return class_sets(sample, torch.Generator().manual_seed(2), accepts)


# The elements a norm's statistics are taken over, from its arguments: a row (layer norm's
# normalized_shape), a group (group norm's C / groups channels of HxW).
NORMALISED_EXTENT = {"aten::native_layer_norm.default": lambda args: math.prod(args[1]),
                     "aten::native_group_norm.default": lambda args: args[4] // args[6] * args[5]}


def _constant_every_other(x: torch.Tensor, extent: int) -> None:
    """In place: every other run of `extent` elements (a norm's row or group) one value, its
    first. Eager's Welford mean of such a run is the value exactly, so its deviations are exactly
    0 and its outputs exactly b, and rstd = 1/sqrt(eps) magnifies any rounding of a kernel's mean
    (a plain sum / n gave 0.0003; the value-class sets draw such rows, evaluate/classes.py)."""
    runs = x.view(-1, extent)  # the sweep's norm inputs are contiguous
    runs[::2] = runs[::2, :1].clone()


INDEXED_OPS = ("aten::max.dim", "aten::min.dim", "aten::argmax.default", "aten::argmin.default",
               "aten::max_pool2d_with_indices.default")


def _reduced_dim(op: str, args: list[Any]) -> int:
    """The dim max.dim, min.dim, argmax and argmin reduce (-1 for a flattened argmax / argmin and
    for max pooling, whose windows lie in the last two dims)."""
    if op == "aten::max_pool2d_with_indices.default" or len(args) < 2 or not isinstance(args[1], int):
        return -1
    return args[1]


def _ties_and_nan(x: torch.Tensor, dim: int = -1) -> None:
    """In place: values rounded to a few integers (the extreme repeats: the first index must win;
    zeros of both signs), and in lines along `dim`: two NaNs in the first (the first one's index
    must win), -inf filling the second and +inf the third, in the fourth +inf and -inf each
    repeated among finite values (the first of equal infinities must win)."""
    moved = x.movedim(dim, -1) if x.dim() else x
    work = moved.contiguous()  # the lines along `dim` in rows, written back into x at the end
    work.copy_(work.round().clamp_(-2, 2))
    flat = work.view(-1)
    row = work.shape[-1] if work.dim() else 1
    flat[min(row // 2, flat.numel() - 1)] = float("nan")
    flat[min(row - 1, flat.numel() - 1)] = float("nan")
    if flat.numel() >= 3 * row:
        flat[row:2 * row] = -float("inf")
        flat[2 * row:3 * row] = float("inf")
    if flat.numel() >= 4 * row:
        pattern = torch.tensor([float("inf"), 1.0, float("inf"), 0.0, -float("inf"), 0.0, -float("inf")])
        flat[3 * row:4 * row] = pattern.repeat(row // 7 + 1)[:row]
    moved.copy_(work)


def _two_nans(x: torch.Tensor) -> None:
    """In place: NaN at the 8th and the next-to-last element in index order."""
    for i in {min(7, x.numel() - 1), max(0, x.numel() - 2)}:
        x[tuple(int(k) for k in torch.unravel_index(torch.tensor(i), x.shape))] = float("nan")


def _overflows_when_scaled(op: str, args: list[Any]) -> bool:
    """exp and powers above 2: the large and mixed sets (values to 100x) overflow their output where
    the float64 oracle does not, so only the normal set is compared."""
    if op == "aten::exp.default":
        return True
    return op == "aten::pow.Tensor_Scalar" and len(args) > 1 and isinstance(args[1], (int, float)) and args[1] > 2


def check_kernel(kernel: Any, task: KernelTask, sets: tuple[str, ...] | None = None) -> str | None:
    """None if the built kernel matches the op on every input set (or those named in `sets`),
    leaves its inputs as they were and gives eager's output strides; else why not."""
    op = resolve_op(task.op)
    positional, kwargs = split_kwargs(task.args)
    for label, args in input_sets(task.op, positional, kwargs):
        if sets is not None and label not in sets:
            continue
        eager = outputs_list(op(*args, **kwargs))
        oracles = [in_output_range(o, e.dtype).to(oracle_dtype(e.dtype)) if o.is_floating_point() else o
                   for o, e in zip(outputs_list(op(*upcast(args), **kwargs)), eager)]
        bounds = [element_bound(o, e, e.dtype) if e.is_floating_point() else None
                  for e, o in zip(eager, oracles)]
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        before = [t.clone() for t in tensors]
        try:
            outs = outputs_list(kernel(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - reported as the variant's failure
            return f"{label}: {type(e).__name__}: {e}"[:2000]
        if any(not _unchanged(b, a) for b, a in zip(before, tensors)):
            return f"{label}: the kernel changed an input"
        layout = _strides_differ(outs, eager)
        if layout:
            return f"{label}: {layout}"
        why, _ = compare(outs, oracles, bounds, [e.dtype for e in eager])
        if why:
            return f"{label}: {why}"
    return None


def _unchanged(before: torch.Tensor, after: torch.Tensor) -> bool:
    """Equal element for element, a NaN equal to a NaN (torch.equal says NaN != NaN)."""
    if before.is_floating_point():
        return torch.equal(before.isnan(), after.isnan()) and torch.equal(before.nan_to_num(0.0), after.nan_to_num(0.0))
    return torch.equal(before, after)


def _strides_differ(outs: list[torch.Tensor], eager: list[torch.Tensor]) -> str | None:
    """As the worker judges layout: strides compared on dimensions larger than 1."""
    for i, (out, ref) in enumerate(zip(outs, eager)):
        if out.shape != ref.shape:
            continue  # compare() says it better
        if [st for st, n in zip(out.stride(), out.shape) if n > 1] != \
                [st for st, n in zip(ref.stride(), ref.shape) if n > 1]:
            return f"output {i} has strides {tuple(out.stride())}, eager's are {tuple(ref.stride())}"
    return None


def check_source(source: str, backend_name: str, task: KernelTask, work_dir: Path,
                 sets: tuple[str, ...] | None = None, build_dir: Path | None = None) -> str | None:
    """Build `source` and check it (check_kernel; `sets`: its input sets, default all). The source
    file goes in work_dir, which must be this process's alone (a compiler reading a file that
    another process rewrites builds the other's text under this one's cache key); the library in
    build_dir (default work_dir/build), which processes may share."""
    from kernforge.backends import get_backend

    backend = get_backend(backend_name)
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / f"variant{len(list(work_dir.glob('variant*')))}{backend.source_suffix}"
    path.write_text(source)
    try:
        kernel = backend.build(path, build_dir or work_dir / "build", task.outputs)
    except Exception as e:  # noqa: BLE001
        return f"build: {type(e).__name__}: {e}"[:2000]
    return check_kernel(kernel, task, sets)


def check_params(task: KernelTask, backend_name: str, params: dict[str, Any], work_dir: Path) -> str | None:
    """Render the family's kernel for `params` and check it."""
    family, facts = family_for(task)
    return check_source(family.render(facts, backend_name, params), backend_name, task, work_dir)


def run_under_interpreter(variants: list[dict[str, Any]], script: Path | None = None,
                          timeout_s: float = 900) -> dict[str, str | None]:
    """Run `script` (default: this file) on the variants with the triton backend, in one fresh
    process with TRITON_INTERPRET=1 (Triton reads it on import); its results by variant id."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, str(script or Path(__file__)), "triton"], input=json.dumps(variants),
                          capture_output=True, text=True, env=env, timeout=timeout_s, check=False,
                          cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def proposal_chain(task: KernelTask, backend: str, steps: int, seed: int) -> list[Any]:
    """The built-in proposer's first proposal and up to `steps` more, each expanding the last."""
    from kernforge.propose.builtin import BuiltinProposer

    proposer = BuiltinProposer(seed=seed)
    chain = [proposer.next_move(task, backend, None, [])]
    for _ in range(steps):
        proposal = proposer.next_move(task, backend, chain[-1], chain)
        if proposal is None:
            break
        chain.append(proposal)
    return chain


def family_for(task: KernelTask):
    from kernforge.propose.builtin import BuiltinProposer

    return BuiltinProposer()._family_for(task)


def valid_points(task: KernelTask, backend: str, per_variant: int = 2_000_000, seed: int = 0) -> list[dict[str, Any]]:
    """The buildable points of the task's family's space: every one of each variant up to
    `per_variant` points, a random sample of a larger variant."""
    import random

    from kernforge.propose.builtin import Hardware

    family, facts = family_for(task)
    space = family.space(facts, backend, Hardware())
    return space.sample(random.Random(seed), per_variant) if space else []


def _contiguous(shape: list[int]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return strides[::-1]


class InterpreterChecker:
    """One long-lived `python family_check.py triton --serve` process under TRITON_INTERPRET=1:
    torch and Triton are imported once (~2 s here), then each point costs what its check costs
    (~0.1 s on the sweep's shapes). A point that kills or hangs the process fails alone: the
    process is started again for the next one."""

    def __init__(self, build_dir: Path, timeout_s: float = 300):
        self.build_dir, self.timeout_s = build_dir, timeout_s
        self.proc: subprocess.Popen | None = None

    def check(self, variant: dict[str, Any]) -> str | None:
        """None if the variant ({"id", "op", "args", "params"}) is correct under the interpreter."""
        import threading

        if self.proc is None or self.proc.poll() is not None:
            self.build_dir.mkdir(parents=True, exist_ok=True)
            with open(self.build_dir / "interpreter.log", "a") as log:  # an unread pipe would fill and block
                self.proc = subprocess.Popen(
                    [sys.executable, str(Path(__file__)), "triton", "--serve", str(self.build_dir)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                    env={**os.environ, "TRITON_INTERPRET": "1"}, cwd=Path(__file__).resolve().parent.parent)
        proc = self.proc
        watchdog = threading.Timer(self.timeout_s, proc.kill)
        watchdog.start()
        try:
            proc.stdin.write(json.dumps(variant) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        finally:
            watchdog.cancel()
        if not line:
            self.close()
            return f"the interpreter process died on this point (exit {proc.returncode})"
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                stream.close()
            self.proc = None


def main(backend_name: str, args: list[str]) -> int:
    if args[:1] == ["--serve"]:  # one variant a line in, its result a line out (InterpreterChecker)
        build_root, answers = Path(args[1]), sys.stdout
        sys.stdout = sys.stderr  # whatever a check prints stays out of the answers
        for line in sys.stdin:
            v = json.loads(line)
            task = make_task(v["op"], v["args"])
            why = check_params(task, backend_name, v["params"], build_root / v["id"])
            print(json.dumps(why), file=answers, flush=True)
        return 0
    variants = json.load(sys.stdin)
    results: dict[str, str | None] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for v in variants:
            task = make_task(v["op"], v["args"])
            results[v["id"]] = check_params(task, backend_name, v["params"], Path(tmp) / v["id"])
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
