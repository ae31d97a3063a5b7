"""`kernforge apply RUN [SPEC]`: the run's winners installed into the model, proved end to end,
and the model timed four ways (eager, patched eager, torch.compile, patched under compile).

A kernel stays installed only where the model is not slower with it, beyond the noise:
each kernel is timed alone in the model, in eager and under torch.compile (where replacing
one op can cost the fusion around it), and the table says which were dropped where.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kernforge.errors import UserError
from kernforge.integrate import endtoend as e2e
from kernforge.integrate import overhead
from kernforge.runtime import router
from kernforge.integrate.pace import Pace
from kernforge.integrate.install import Patch, compile_caches_off, patch
from kernforge.records import Comparison, EndToEnd, KernelEffect, OutputCheck, RoutedCalls, VariantName, VariantTiming
from kernforge.records.timing import Timing
from kernforge.search.runs import RunRecord, read_run, run_phases
from kernforge.store.events import Applied, PhaseTimed

FRESH_SETS = 2  # fresh input sets checked beside the captured one
ALL_KERNELS = "patched eager, all"  # the first timing's model with every kernel, before any is dropped


V = VariantName  # the ways the model is timed, each named once

OnProgress = Callable[[str], None]


def apply_run(run_dir: Path, spec: str | None = None, compile_model: bool = True,
              on_progress: OnProgress = lambda line: None,
              model_overrides: dict[str, Any] | None = None, time_limit_s: float | None = None) -> EndToEnd:
    """`model_overrides` change the run's model options (e.g. {"attention": "sdpa"}: the same
    model with the attention a user gets by default). `time_limit_s`: the seconds apply may take
    from here, loading the model included; its end-to-end timings are sized to fit (pace.py)."""
    started = time.perf_counter()
    record = read_run(run_dir)
    loaded = _load(record, spec, model_overrides or {})
    with compile_caches_off():
        return _apply(record, loaded, compile_model, on_progress, started, time_limit_s)


def _apply(record: RunRecord, loaded: Any, compile_model: bool, on_progress: OnProgress,
           started: float, time_limit_s: float | None = None) -> EndToEnd:
    report = EndToEnd(run_dir=str(record.root), model=loaded.name, device=record.device, time_limit_s=time_limit_s)
    handle = patch(loaded.module, record, measured=False)  # apply measures afresh, whatever an earlier apply said
    try:
        report.not_installed.update(handle.skipped)
        if not handle.specs:
            report.note = "no kernel to install: " + (
                "no task found a kernel faster than eager beyond the noise" if not handle.skipped
                else "; ".join(f"{k}: {v}" for k, v in handle.skipped.items()))
            return _finish(record, report, started)
        specs = list(handle.specs)
        effects = _effects(record, handle)
        _count_calls(loaded, handle, effects)  # raises where the run matches nothing this model runs
    finally:
        handle.remove()  # the measurements install exactly what each variant needs
    report.kernels = list(effects.values())
    device = torch.device(loaded.device)
    input_sets = {"captured": loaded.inputs,
                  **{f"fresh{k}": e2e.fresh_model_inputs(loaded.inputs, seed=k) for k in range(1, FRESH_SETS + 1)}}
    on_progress(f"checking the patched model on {len(input_sets)} input sets")
    oracles, report.tolerance = _oracles(loaded.module, input_sets)
    correct = _check_eager(loaded.module, input_sets, oracles, specs, effects, report)
    if not correct:
        report.note = "no kernel gives the model's own results end to end"
        return _finish(record, report, started)
    # every kernel the model reaches, installed or dropped: the cost is often why it was dropped
    reached = [s for s in correct if effects[s.name].calls_per_forward]
    routing_s = sum(overhead.expected_s(effects[s.name].op_p50_ms / 1e3, effects[s.name].op_eager_p50_ms / 1e3)
                    for s in reached)
    pace = None if time_limit_s is None else Pace.starting(
        time_limit_s, started, routing_s, expected_measurements(len(reached), compile_model, device.type == "cuda"))
    on_progress("timing the model: eager, and each kernel alone in it")
    _measure(loaded, device, correct, effects, report, input_sets, oracles, compile_model, on_progress, pace)
    if pace is not None:
        _report_rounds(report, pace)
    on_progress("measuring the routing's cost per call")
    report.routing = [overhead.measure(s, reached, device, loaded.module) for s in reached]
    return _finish(record, report, started)


def expected_measurements(reached: int, compile_model: bool, cuda: bool) -> int:
    """The end-to-end timings apply may run, for a time limit's equal parts (an overestimate
    leaves the last ones more): the first, and eager's final pair twice; under compile, the
    kernels together, each alone where there are several, and the final pair again; on a GPU
    the CUDA-graph pairs, twice each."""
    count = 3
    if compile_model:
        count += 2 + (reached if reached > 1 else 0)
    if cuda:
        count += 4 if compile_model else 2
    return count


def _report_rounds(report: EndToEnd, pace: Pace) -> None:
    report.rounds = list(pace.done)
    if pace.cut:
        report.notes.append(f"the time limit ({report.time_limit_s:.0f} s) cut the timing rounds of {pace.cut} of "
                            f"{len(pace.done)} measurements ({pace.rounds_text()} rounds, {e2e.ROUNDS} without a "
                            "limit): their verdicts rest on fewer samples")


def _load(record: RunRecord, spec: str | None, overrides: dict[str, Any]) -> Any:
    from kernforge.models import ModelOptions, load_model, run_forward

    config = record.settings
    if record.device == "cuda" and not torch.cuda.is_available():
        raise UserError(f"this run was made on a GPU ({record.device_name}) and none is visible here; "
                        "apply it on a machine with that GPU")
    options = ModelOptions(**{**config.model, **overrides})
    loaded = load_model(spec or config.spec, torch.device(record.device), options)
    run_forward(loaded)  # a model that does not run is the user's problem, said before anything else
    return loaded


def _effects(record: RunRecord, handle: Patch) -> dict[str, KernelEffect]:
    from kernforge.integrate.install import winners

    by_name = {s.name: s for s in handle.specs}
    effects = {}
    for w in winners(record):
        name = router.kernel_name(w.op, w.source.read_bytes()) if w.source.is_file() else ""
        if name in by_name:
            effects[name] = KernelEffect(task=w.task_id, op=w.op, kernel=name, op_speedup_vs_eager=w.speedup_vs_eager,
                                         op_p50_ms=w.p50_ms, op_eager_p50_ms=w.eager_p50_ms)
    return effects


def _count_calls(loaded: Any, handle: Patch, effects: dict[str, KernelEffect]) -> None:
    """Calls that take each kernel in one forward pass; none at all means a run made for
    another model (or other shapes), and the model is left as it was."""
    e2e.forward(loaded.module, loaded.inputs)
    for effect in effects.values():
        effect.calls_per_forward = handle.counts[effect.op].by_kernel.get(effect.kernel, 0)
    if not any(e.calls_per_forward for e in effects.values()):
        raise UserError(f"none of the run's kernels matches a call of {loaded.name} as loaded (another model, "
                        "or other shapes or dtypes than the run's); apply the run to the model it was made for")
    for effect in effects.values():
        if not effect.calls_per_forward:
            effect.note = "no call of this model matches its guard"


def _oracles(model: torch.nn.Module, input_sets: dict[str, Any]) -> tuple[dict[str, e2e.Oracle], str]:
    double, why = e2e.wide_copy(model)
    single: list[torch.nn.Module | None] = []  # a float32 copy, made the first time one is needed

    def float32_copy() -> torch.nn.Module | None:
        if not single:
            single.append(e2e.wide_copy(model, torch.float32)[0] if e2e.is_16_bit(model) else None)
        return single[0]
    oracles = {label: e2e.oracle_of(model, inputs, double, float32_copy) for label, inputs in input_sets.items()}
    del double, single
    _free()
    exact = all(o.exact for o in oracles.values())
    notes = sorted({o.note for o in oracles.values() if o.note} | ({why} if why else set()))
    wide = "float64"
    if any(o.note.startswith("in float") for o in oracles.values()):  # float32, or float64 with float32 ops
        wide = ("float32 (" if any(o.note.startswith("in float32") for o in oracles.values()) else "float64 (") \
            + "; ".join(n.removeprefix("in float64 but ") for n in notes) + ")"
    tolerance = (f"per element, against the model in {wide}: the dtype's rtol and atol plus 8x eager's own "
                 "error there (or its median error, if larger), the rule each kernel met on its op"
                 if exact else "per element, against eager's outputs: the dtype's rtol and atol only ("
                 + "; ".join(notes) + ")")
    return oracles, tolerance


def _check_eager(model: torch.nn.Module, input_sets: dict[str, Any], oracles: dict[str, e2e.Oracle],
                 specs: list[router.KernelSpec], effects: dict[str, KernelEffect],
                 report: EndToEnd) -> list[router.KernelSpec]:
    """The kernels with which the patched model's outputs pass on every set: all of them where
    they pass together, else each one alone (a failure is then pinned to its kernel)."""
    if _passes(model, input_sets, oracles, specs, V.PATCHED_EAGER, report):
        return specs
    kept = []
    for spec in specs:
        if _passes(model, input_sets, oracles, [spec], f"patched eager, {spec.name} alone", report):
            kept.append(spec)
        else:
            effects[spec.name].note = "the patched model's outputs are out of tolerance: not installed"
    return kept


def _passes(model: torch.nn.Module, input_sets: dict[str, Any], oracles: dict[str, e2e.Oracle],
            specs: list[router.KernelSpec], variant: str, report: EndToEnd) -> bool:
    installation = router.install(specs, model)
    try:
        results = {label: e2e.judge_outputs(e2e.forward(model, inputs), oracles[label])
                   for label, inputs in input_sets.items()}
    finally:
        installation.remove()
    return _record_checks(results, oracles, variant, report)


def _record_checks(results: dict[str, tuple[str | None, float]], oracles: dict[str, e2e.Oracle], variant: str,
                   report: EndToEnd) -> bool:
    for label, (why, error) in results.items():
        report.checks.append(OutputCheck(variant=variant, inputs=label, error=error,
                                         eager_error=oracles[label].eager_error, passed=why is None, why=why or ""))
    return all(why is None for why, _ in results.values())


def _measure(loaded: Any, device: torch.device, specs: list[router.KernelSpec], effects: dict[str, KernelEffect],
             report: EndToEnd, input_sets: dict[str, Any], oracles: dict[str, e2e.Oracle],
             compile_model: bool, on_progress: OnProgress, pace: Pace | None = None) -> None:
    model, inputs = loaded.module, loaded.inputs
    eager = e2e.model_call(model, inputs)
    alone = [e2e.Variant(f"eager+{s.name}", eager, [s], model) for s in specs] if len(specs) > 1 else []
    variants = [e2e.Variant(V.EAGER, eager), e2e.Variant(ALL_KERNELS, eager, specs, model), *alone]
    first, compiled = None, None
    if compile_model:
        on_progress("compiling the model (torch.compile, default mode)")
        router.reset_compiled_code()
        compiled = e2e.compiled_model(model, "compile")
        try:
            first = e2e.time_variants([*variants, e2e.Variant(V.COMPILE, lambda: compiled(*inputs))], device,
                                      pace=pace)
        except Exception as e:  # noqa: BLE001 - a model torch.compile cannot compile is still measured in eager
            compile_model = False
            report.note = f"torch.compile failed on this model ({type(e).__name__}: {str(e).splitlines()[0][:160]})"
    first = first or e2e.time_variants(variants, device, pace=pace)
    for spec in specs:
        own = first[f"eager+{spec.name}"] if alone else first[ALL_KERNELS]
        effect = effects[spec.name]
        effect.eager_verdict = e2e.verdict(own, first[V.EAGER])
        effect.eager_speedup = e2e.speedup(own, first[V.EAGER])
        effect.installed_eager = pays(effect.eager_verdict, effect.eager_speedup) and effect.calls_per_forward > 0
        if effect.calls_per_forward and not effect.installed_eager:
            effect.note = ("makes the model slower in eager: dropped" if effect.eager_verdict == "slower"
                           else "no gain in the model in eager (its median is slower, within the noise): dropped")
    eager_kept = [s for s in specs if effects[s.name].installed_eager]
    compile_kept, measured = _compile_choice(model, inputs, device, specs, effects, first, compile_model,
                                             on_progress, pace)
    patched = _final_phase(model, inputs, device, eager_kept, compile_kept, measured, first,
                           compiled if compile_model else None, report, pace)
    drop_if_slower(report.comparison(V.PATCHED_EAGER), [effects[s.name] for s in eager_kept])
    if patched is not None:
        _check_compiled(model, patched, compiled, input_sets, oracles, eager_kept, compile_kept, effects, report)
    graph_set = [s for s in specs if effects[s.name].calls_per_forward]
    if device.type == "cuda" and graph_set:
        on_progress("timing the model under CUDA graphs: eager captured, and compile's reduce-overhead")
        _graph_phase(model, inputs, device, graph_set, report, input_sets, oracles, compile_model, pace)


# ---------------------------------------------------------------------------- under CUDA graphs



def _graph_phase(model: torch.nn.Module, inputs: Any, device: torch.device, specs: list[router.KernelSpec],
                 report: EndToEnd, input_sets: dict[str, Any], oracles: dict[str, e2e.Oracle],
                 compile_model: bool, pace: Pace | None = None) -> None:
    """A static-shape model replayed from a CUDA graph pays no host cost per op, so every kernel
    the model reaches goes in (a route's host cost, what drops kernels in eager, is not paid in a
    replay): eager captured against patched eager captured, then torch.compile's reduce-overhead
    mode (its own graphs) without and with the kernels in its graph. Each pair is timed twice,
    interleaved, and the patched replays are checked on every input set. A model that cannot be
    captured (a host sync in its forward, say) is said, not raised."""
    plain = e2e.GraphedForward(model, inputs, "the model as it is")
    patched = e2e.GraphedForward(model, inputs, "the model with the kernels")
    pair = [e2e.Variant(V.GRAPH_EAGER, plain), e2e.Variant(V.GRAPH_PATCHED, patched, specs, model)]
    try:
        _timed_pair(pair, device, report, seeds=(5, 6), pace=pace)
        _check_graph(patched, input_sets, oracles, report)
    except e2e.CaptureError as e:  # a forward that cannot be captured is a fact about the model
        report.notes.append(f"CUDA graph: not captured, {e}")
    except Exception as e:  # noqa: BLE001 - nor may a replay's failure lose the rest of the report
        report.notes.append(f"CUDA graph: {_first_line(e)}")
    finally:
        plain.release(), patched.release()
        _free()
    if not compile_model:
        return
    marked = e2e.with_compile_flag(specs, {s.name for s in specs})
    router.reset_compiled_code()
    ro_plain = e2e.compiled_model(model, "ro", "reduce-overhead")
    ro_patched = e2e.compiled_model(model, "ro_patched", "reduce-overhead")
    pair = [e2e.Variant(V.RO_COMPILE, lambda: ro_plain(*inputs)),
            e2e.Variant(V.RO_PATCHED, lambda: ro_patched(*inputs), marked, model)]
    try:
        _timed_pair(pair, device, report, seeds=(7, 8), pace=pace)
        _check_reduce_overhead(model, ro_patched, ro_plain, marked, input_sets, oracles, report)
    except Exception as e:  # noqa: BLE001 - inductor's cudagraphs refuse some models: the rest stands
        report.notes.append(f"reduce-overhead: {_first_line(e)}")
    finally:
        router.reset_compiled_code()
        _free()


def _timed_pair(pair: list[e2e.Variant], device: torch.device, report: EndToEnd, seeds: tuple[int, int],
                pace: Pace | None = None) -> None:
    """The two variants (unpatched, patched) alternated in shuffled rounds, twice; both figures kept."""
    base, patched = pair
    first = e2e.time_variants(pair, device, seed=seeds[0], pace=pace)
    comparison = report.add(_comparison(patched.name, base.name, first[patched.name], first[base.name]))
    again = e2e.time_variants(pair, device, seed=seeds[1], pace=pace)
    _confirm(comparison, again[patched.name], again[base.name])
    for v in pair:
        report.timings_ms[v.name] = _timing_record(first[v.name])
    report.graph_routes[patched.name] = {op: _routed_calls(c) for op, c in patched.counts.items()}


def _routed_calls(counts: router.RouteCounts) -> RoutedCalls:
    """What the live counts held when the graph was captured, for the report."""
    return RoutedCalls(kernel=counts.kernel, custom_op=counts.custom_op, fallback=counts.fallback,
                       by_kernel=counts.by_kernel, traced_by_kernel=dict(counts.traced_by_kernel))


def _check_graph(graphed: e2e.GraphedForward, input_sets: dict[str, Any], oracles: dict[str, e2e.Oracle],
                 report: EndToEnd) -> None:
    """The captured graph replayed on each input set's values, copied into its static inputs: a
    kernel that baked a captured value in, or that fell out of the graph, fails here."""
    results = {}
    for label, values in input_sets.items():
        graphed.load(values)
        results[label] = e2e.judge_outputs(e2e.outputs_of(graphed()), oracles[label])
    _record_checks(results, oracles, V.GRAPH_PATCHED, report)


def _check_reduce_overhead(model: torch.nn.Module, compiled: Callable[..., Any], plain: Callable[..., Any],
                           marked: list[router.KernelSpec], input_sets: dict[str, Any], oracles: dict[str, e2e.Oracle],
                           report: EndToEnd) -> None:
    # each output copied, or judged, before the next replay overwrites inductor's graph outputs
    peers = _outputs_by_set(plain, input_sets)
    installation = router.install(marked, model)
    try:
        results = {label: e2e.judge_outputs(e2e.outputs_of(compiled(*values)), oracles[label], peers[label])
                   for label, values in input_sets.items()}
    finally:
        installation.remove()
    _record_checks(results, oracles, V.RO_PATCHED, report)


def _outputs_by_set(call: Callable[..., Any], input_sets: dict[str, Any]) -> dict[str, list[torch.Tensor]]:
    """The unpatched model's outputs on each set, copied (a CUDA graph's replay overwrites its own)."""
    return {label: [t.clone() for t in e2e.outputs_of(call(*values))] for label, values in input_sets.items()}


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:200] if text else ''}"


def drop_if_slower(comparison: Comparison | None, kept: list[KernelEffect]) -> None:
    """Each kept kernel paid alone, but the model with all of them is slower, in both interleaved
    measurements (their host costs add up: Gemma-style bf16 on the H200, 1.09x and 1.57x alone,
    0.86x together, bench/results/h200/issue32/README.md): none is installed in eager."""
    if comparison is None or not kept or not comparison.installed or comparison.verdict != "slower":
        return
    for effect in kept:
        effect.installed_eager = False
        effect.add_note(f"the model with every kept kernel was slower ({comparison.speedup:.2f}x, repeated): "
                        "dropped in eager")
    comparison.kernels = "all dropped"


def pays(verdict: str, speedup: float | None) -> bool:
    """A kernel stays where the model is faster with it beyond the noise, or within the noise
    and no slower by the median: one that costs the model time is dropped, said where."""
    return verdict == "faster" or (verdict == "within noise" and speedup is not None and speedup >= 1.0)


@dataclass
class CompilePhase:
    """The model compiled with some kernels in its graph, timed beside eager in a phase of its own."""

    specs: list[router.KernelSpec]
    timings: dict[str, Any]  # V.EAGER, V.PATCHED_COMPILE
    counts: dict[str, router.RouteCounts]
    compiled: Callable[..., Any]


def _compile_phase(model: torch.nn.Module, inputs: Any, device: torch.device, in_graph: list[router.KernelSpec],
                   installed: list[router.KernelSpec], tag: str, pace: Pace | None = None) -> CompilePhase:
    router.reset_compiled_code()
    compiled = e2e.compiled_model(model, tag)
    patched = e2e.Variant(V.PATCHED_COMPILE, lambda: compiled(*inputs),
                          e2e.with_compile_flag(installed, {s.name for s in in_graph}), model)
    timings = e2e.time_variants([e2e.Variant(V.EAGER, e2e.model_call(model, inputs)), patched], device, seed=1,
                                pace=pace)
    return CompilePhase(specs=in_graph, timings=timings, counts=patched.counts, compiled=compiled)


def _compile_choice(model: torch.nn.Module, inputs: Any, device: torch.device, specs: list[router.KernelSpec],
                    effects: dict[str, KernelEffect], first: dict[str, Any], compile_model: bool,
                    on_progress: OnProgress, pace: Pace | None = None
                    ) -> tuple[list[router.KernelSpec], CompilePhase | None]:
    """Which kernels go into compile's graphs. First all of them at once, against the compiled
    model without them (each relative to the eager of its own phase): where that pays, they all
    stay, and it took one compile. Else each kernel alone, one compile each; those that pay stay.
    Returns them and the phase that measured exactly them, if one did."""
    reached = [s for s in specs if effects[s.name].calls_per_forward]
    if not compile_model or not reached:
        return [], None
    on_progress(f"compiling the model with {len(reached)} kernel(s) in its graph")
    started = time.perf_counter()
    together = _compile_phase(model, inputs, device, reached, reached, "together", pace)
    phase_s = time.perf_counter() - started
    if _judge_under_compile(together, reached, effects, first, "alone" if len(reached) == 1 else "with the others"):
        return reached, together
    if len(reached) == 1:
        return [], None
    phases = {}
    for spec in reached:
        # a phase alone costs what the phase together did, its compile mostly (the VAE's: 30-40 s
        # on an H100, where a 200 s limit ran out compiling them: bench/results/h100/issue32/vae-20261207b)
        if pace is not None and pace.left_s() < phase_s:
            effects[spec.name].add_note(f"not tried alone under compile: the time limit had "
                                        f"{max(0.0, pace.left_s()):.0f} s left, a compile phase took {phase_s:.0f} s")
            continue
        on_progress(f"compiling the model with {spec.name} alone in its graph")
        alone = _compile_phase(model, inputs, device, [spec], [spec], f"only_{spec.name}", pace)
        if _judge_under_compile(alone, [spec], effects, first, "alone"):
            phases[spec.name] = alone
    kept = [s for s in reached if s.name in phases]
    if len(kept) < len(reached) or not kept:
        return kept, None
    # Each pays alone and all of them together do not: their host costs add up (ResNet-50 on the
    # H200: three batch norms 1.17x, 1.17x, 1.11x alone, 0.82x together), so the best one stays.
    best = max(kept, key=lambda s: effects[s.name].compile_speedup or 0.0)
    for spec in kept:
        if spec is not best:
            effects[spec.name].installed_compile = False
            effects[spec.name].add_note(f"pays alone under compile, not beside the others "
                                        f"({together_speedup(together, first):.2f}x together): only {best.name} stays")
    return [best], phases[best.name]


def together_speedup(phase: CompilePhase, first: dict[str, Any]) -> float:
    t = phase.timings
    return e2e.speedup(t[V.PATCHED_COMPILE], first[V.COMPILE], t[V.EAGER], first[V.EAGER])


def _judge_under_compile(phase: CompilePhase, specs: list[router.KernelSpec], effects: dict[str, KernelEffect],
                         first: dict[str, Any], how: str) -> bool:
    """Record the phase's verdict on each of its kernels; whether the phase pays."""
    t = phase.timings
    verdict_now = e2e.verdict(t[V.PATCHED_COMPILE], first[V.COMPILE], t[V.EAGER], first[V.EAGER])
    speed = e2e.speedup(t[V.PATCHED_COMPILE], first[V.COMPILE], t[V.EAGER], first[V.EAGER])
    paid = pays(verdict_now, speed)
    for spec in specs:
        effect = effects[spec.name]
        traced = phase.counts.get(spec.op, router.RouteCounts()).traced_by_kernel
        effect.in_compiled_graph = traced.get(spec.name, 0) > 0
        effect.compile_verdict, effect.compiled_with_others = verdict_now, how != "alone"
        effect.compile_speedup = speed
        effect.installed_compile = effect.in_compiled_graph and paid
        if how == "alone" and effect.in_compiled_graph and not paid:
            effect.add_note(
                "makes the compiled model slower (it can cost the fusion around it): not under compile"
                if verdict_now == "slower" else
                "no gain in the compiled model (its median is slower, within the noise): not under compile")
    return paid and all(effects[s.name].in_compiled_graph for s in specs)


def _final_phase(model: torch.nn.Module, inputs: Any, device: torch.device, eager_kept: list[router.KernelSpec],
                 compile_kept: list[router.KernelSpec], measured: CompilePhase | None, first: dict[str, Any],
                 compiled: Callable[..., Any] | None, report: EndToEnd,
                 pace: Pace | None = None) -> Callable[..., Any] | None:
    """The model as the kernels that stayed leave it, four ways; speedups beyond the noise only,
    each confirmed by a second interleaved measurement. Under compile that is the phase that
    measured exactly the kept kernels, where there is one, else one more compile. compiled: the
    unpatched compiled model (None: not compiled). Returns the patched compiled model (for its
    checks), if there is one."""
    compile_model = compiled is not None
    eager = e2e.model_call(model, inputs)
    pair = [e2e.Variant(V.EAGER, eager), e2e.Variant(V.PATCHED_EAGER, eager, eager_kept, model)]
    final = e2e.time_variants(pair, device, seed=2, pace=pace)
    timings = {V.EAGER: final[V.EAGER], V.PATCHED_EAGER: final[V.PATCHED_EAGER]}
    in_eager = report.add(_comparison(V.PATCHED_EAGER, V.EAGER, final[V.PATCHED_EAGER], final[V.EAGER]))
    if eager_kept:
        again = e2e.time_variants(pair, device, seed=3, pace=pace)
        _confirm(in_eager, again[V.PATCHED_EAGER], again[V.EAGER])
    else:
        in_eager.kernels = "none installed"
    phase = measured
    if compile_model and compile_kept and phase is None:
        phase = _compile_phase(model, inputs, device, compile_kept, _union(eager_kept, compile_kept), "patched",
                               pace)
    if compile_model:
        timings[V.COMPILE] = first[V.COMPILE]
        report.add(_comparison(V.COMPILE, V.EAGER, first[V.COMPILE], first[V.EAGER]))
        if phase is not None:
            timings[V.PATCHED_COMPILE] = phase.timings[V.PATCHED_COMPILE]
            under = report.add(_comparison(V.PATCHED_COMPILE, V.COMPILE, phase.timings[V.PATCHED_COMPILE],
                                           first[V.COMPILE], phase.timings[V.EAGER], first[V.EAGER]))
            report.add(_comparison(V.PATCHED_COMPILE, V.EAGER, phase.timings[V.PATCHED_COMPILE], phase.timings[V.EAGER]))
            installed = e2e.with_compile_flag(_union(eager_kept, compile_kept), {s.name for s in compile_kept})
            again = e2e.time_variants([e2e.Variant(V.COMPILE, lambda: compiled(*inputs)),
                                       e2e.Variant(V.PATCHED_COMPILE, lambda: phase.compiled(*inputs), installed, model)],
                                      device, seed=4, pace=pace)
            _confirm(under, again[V.PATCHED_COMPILE], again[V.COMPILE])
        else:
            timings[V.PATCHED_COMPILE] = first[V.COMPILE]
            report.add(Comparison(candidate=V.PATCHED_COMPILE, baseline=V.COMPILE, speedup=1.0, verdict="within noise",
                                  kernels="none installed"))
    report.timings_ms = {name: _timing_record(t) for name, t in timings.items()}
    return phase.compiled if phase is not None else None


def _check_compiled(model: torch.nn.Module, patched: Callable[..., Any], compiled: Callable[..., Any],
                    input_sets: dict[str, Any], oracles: dict[str, e2e.Oracle], eager_kept: list[router.KernelSpec],
                    compile_kept: list[router.KernelSpec], effects: dict[str, KernelEffect], report: EndToEnd) -> None:
    """The patched model under torch.compile, on every input set, judged as eager patched was
    (same shapes: the code compiled in the final phase, no recompile), each element allowed the
    larger of eager's and the unpatched compiled model's own error. Where it fails, the kernels
    chosen under compile are not installed there (the timings stay as measured, and say so)."""
    peers = _outputs_by_set(compiled, input_sets)
    installation = router.install(e2e.with_compile_flag(_union(eager_kept, compile_kept),
                                                         {s.name for s in compile_kept}), model)
    try:
        results = {label: e2e.judge_outputs(e2e.outputs_of(patched(*inputs)), oracles[label], peers[label])
                   for label, inputs in input_sets.items()}
    finally:
        installation.remove()
    if _record_checks(results, oracles, V.PATCHED_COMPILE, report) or not compile_kept:
        return
    for spec in compile_kept:
        effect = effects[spec.name]
        effect.installed_compile = False
        effect.add_note("the compiled model's outputs with it are out of tolerance: not under compile")
    report.notes.append("patched compile: its outputs failed the check (above), so no kernel is installed under "
                        "compile; its timings are of the kernels it measured")


def _confirm(comparison: Comparison, candidate: Timing, baseline: Timing) -> None:
    """The comparison repeated by a second measurement, the two alternated in shuffled rounds."""
    comparison.confirm(_comparison(comparison.candidate, comparison.baseline, candidate, baseline))


def _comparison(candidate: VariantName, baseline: VariantName, candidate_t: Timing, baseline_t: Timing,
                candidate_ref: Timing | None = None, baseline_ref: Timing | None = None) -> Comparison:
    """`candidate` against `baseline` from their timings (each against its own phase's eager, the
    refs, where the two were timed in different phases)."""
    return Comparison(candidate=candidate, baseline=baseline,
                      speedup=e2e.speedup(candidate_t, baseline_t, candidate_ref, baseline_ref),
                      verdict=e2e.verdict(candidate_t, baseline_t, candidate_ref, baseline_ref))


def _timing_record(t: Timing) -> VariantTiming:
    return VariantTiming(p20_ms=t.p20_ms, p50_ms=t.p50_ms, p80_ms=t.p80_ms, runs=t.runs)


def _union(a: list[router.KernelSpec], b: list[router.KernelSpec]) -> list[router.KernelSpec]:
    names = {s.name for s in a}
    return a + [s for s in b if s.name not in names]


def _finish(record: RunRecord, report: EndToEnd, started: float) -> EndToEnd:
    report.wall_s = time.perf_counter() - started
    store = record.store
    store.write_json("integrate/apply.json", report.to_json())
    store.emit(PhaseTimed(phase="apply", seconds=report.wall_s))
    summary = store.summary()
    if summary is not None:
        summary.end_to_end = report
        summary.phases = run_phases(store.events())
        store.write_summary(summary)
    store.emit(Applied(kernels=[k.kernel for k in report.kernels],
                       speedups={c.key: c.speedup for c in report.comparisons}))
    _free()
    return report


def _free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
