"""A lowered chain (lower.Program) as one C function, `chain_rows`, with the layout baked in.

OpenMP threads take rows. Within a row, one loop over its N values per reduction level
accumulates that level's sums and maxima, then a last loop computes and stores the full
outputs; values one per row are computed once, outside the loops. What a later loop needs of an
earlier one's values is recomputed from the inputs (after the first loop the row is in the
cache: it is read from memory once), or, buffered, read back from a row of floats per thread
that the earlier loop wrote (softmax's exp computed once, not twice). A chain without
reductions splits long rows into blocks of columns too, so that a few long rows (a 1-D tensor
is one row) still spread over the threads.
"""

from __future__ import annotations

import math
from typing import Any

from kernforge.propose.families.chain.lower import Program, row_offset
from kernforge.propose.families.common import C_TYPES, short_dtype
from kernforge.propose.families.elementwise import lit_c as lit

# A chain's tensors as C reads them: a bool mask is bytes of 0 or 1 (kf_tensor's KF_U8).
_TYPES = {**C_TYPES, "bool": ("uint8_t", "KF_U8")}
# Columns a task of a chain without reductions: 16 KB of fp32 a tensor, so the offsets of a
# block are computed for thousands of elements, and a 1-D tensor of 1M elements makes 256 tasks.
COLUMN_BLOCK = 4096
_IDENTITY = {"sum": "0.0f", "max": "-INFINITY", "min": "INFINITY"}


def kernel_source(program: Program, schedule: str, simd: bool, buffer: bool) -> str:
    """The functions, the layouts the kernel was built for, and chain_rows, as the constants block holds them."""
    lines = [f"static inline float f{i}({', '.join('float ' + x for x in 'abc'[:arity])}) {{ return {expr}; }}"
             for i, (_triton, expr, arity) in enumerate(program.functions)]
    lines += _layouts("INPUTS", program.inputs) + _layouts("OUTPUTS", program.outputs)
    lines.append("static int chain_rows(const kf_tensor *in, kf_tensor *out) {")
    kept = buffered_values(program) if buffer else []
    lines += ["    " + line for line in _Body(program, schedule, simd, kept).lines()]
    lines.append("}")
    return "\n".join(lines) + "\n"


def buffered_values(program: Program) -> list[int]:
    """The values a later loop over the row reads back when every loop keeps what it computed:
    what a buffered kernel keeps (none: a buffer would change nothing)."""
    dry_run = _Body(program, "static", True, None)
    dry_run.lines()
    return sorted(dry_run.reads)


def _layouts(name: str, tensors: list[dict[str, Any]]) -> list[str]:
    def one(t: dict[str, Any]) -> str:
        sizes = ", ".join(map(str, t["shape"])) or "0"  # a 0-dim tensor: ndim 0, nothing read
        strides = ", ".join(map(str, t["stride"])) or "0"
        return f"    {{{len(t['shape'])}, {{{sizes}}}, {{{strides}}}, {_TYPES[short_dtype(t['dtype'])][1]}}},"

    return [f"static const kf_layout {name}[] = {{", *map(one, tensors), "};"]


def _ctype(dtype: str) -> str:
    return _TYPES[short_dtype(dtype)][0]


def _loaded(dtype: str, place: str) -> str:
    """The fp32 value at `place` of a tensor of this dtype."""
    short = short_dtype(dtype)
    return place if short == "float32" else f"kf_bf16_load({place})" if short == "bfloat16" else f"(float){place}"


def _stored(dtype: str, place: str, value: str) -> str:
    """The statement that rounds `value` once into `place`."""
    short = short_dtype(dtype)
    if short == "bfloat16":
        return f"{place} = kf_bf16_store({value});"
    return f"{place} = {value};" if short == "float32" else f"{place} = ({_ctype(dtype)}){value};"


def _cols(stride: int) -> str:
    return "c" if stride == 1 else f"c * {stride}"


class _Body:
    def __init__(self, program: Program, schedule: str, simd: bool, kept: list[int] | None):
        self.p, self.schedule, self.simd = program, schedule, simd
        self.kept = kept  # the values written to the row buffer (None: any, a dry run recording reads)
        self.needed = set(program.needed())
        self.out: list[str] = []
        self.outer: set[int] = set()  # values one per row, computed outside the column loops
        self.scope: set[int] = set()  # values computed in the current column loop
        self.earlier: set[int] = set()  # values computed in the loops before it
        self.reads: set[int] = set()  # values read back from the buffer
        # Blocks of columns only where no value spans the row (a reduction, a row output stored once).
        split = not program.reductions and not any(o["row"] for o in program.outputs) and program.n > COLUMN_BLOCK
        self.blocks = math.ceil(program.n / COLUMN_BLOCK) if split else 1

    def lines(self) -> list[str]:
        p = self.p
        head = [f"const {_ctype(t['dtype'])} *restrict I{k} = (const {_ctype(t['dtype'])} *)in[{k}].data;"
                for k, t in enumerate(p.inputs)]
        head += [f"{_ctype(o['dtype'])} *restrict O{j} = ({_ctype(o['dtype'])} *)out[{j}].data;"
                 for j, o in enumerate(p.outputs)]
        row_floats = len(self.kept or []) * p.n
        if row_floats:  # a row of each kept value per thread
            head += [f"float *scratch = (float *)malloc(sizeof(float) * {row_floats}LL * omp_get_max_threads());",
                     "if (!scratch) return 4;"]
            self.out.append(f"float *restrict buffer = scratch + (int64_t)omp_get_thread_num() * {row_floats};")
        head += [f"#pragma omp parallel for {'collapse(2) ' if self.blocks > 1 else ''}schedule({self.schedule})",
                 f"for (int64_t r = 0; r < {p.rows}; ++r) {{"]
        if self.blocks > 1:
            head.append(f"    for (int64_t c0 = 0; c0 < {p.n}; c0 += {COLUMN_BLOCK}) {{")
            self.out.append(f"const int64_t c1 = c0 + {COLUMN_BLOCK} < {p.n} ? c0 + {COLUMN_BLOCK} : {p.n};")
        self._row()
        indent = "    " * (2 if self.blocks > 1 else 1)
        tail = ["free(scratch);"] if row_floats else []
        return head + [indent + line for line in self.out] + (["    }"] if self.blocks > 1 else []) + ["}"] \
            + tail + ["return 0;"]

    # ---- structure

    def _row(self) -> None:
        p = self.p
        loads = {p.nodes[n]["input"] for n in self.needed if p.nodes[n]["kind"] == "load"}
        for k, t in enumerate(p.inputs):
            if k in loads and t["kind"] in ("full", "row"):
                self.out.append(f"const int64_t ri{k} = {row_offset(p.domain[:-1], t['strides'][:-1], '/')};")
        for j, o in enumerate(p.outputs):
            self.out.append(f"const int64_t ro{j} = {row_offset(p.domain[:-1], o['strides'][:-1], '/')};")
        levels = max((p.nodes[n]["level"] for n in self.needed), default=0)
        for level in range(levels):
            self._outer_rows(level)
            reductions = [n for n in sorted(self.needed) if p.nodes[n]["kind"] == "reduce"
                          and p.nodes[n]["level"] == level + 1]
            looped = [n for n in reductions if not p.nodes[p.nodes[n]["arg"]]["row"]]
            for n in reductions:
                if n not in looped:
                    self._row_reduce(n)
            if looped:
                self._reduction_loop(looped)
        self._outer_rows(levels)
        self._stores(row=True)
        if any(not o["row"] for o in p.outputs):
            self._loop_header("")
            self._stores(row=False)
            self.out.append("}")

    def _loop_header(self, clauses: str) -> None:
        if self.simd:
            self.out.append(f"#pragma omp simd{clauses}")
        start, stop = ("c0", "c1") if self.blocks > 1 else ("0", str(self.p.n))
        self.out.append(f"for (int64_t c = {start}; c < {stop}; ++c) {{")
        self.earlier |= self.scope
        self.scope = set()

    def _reduction_loop(self, reductions: list[int]) -> None:
        clauses = ""
        for n in reductions:
            node = self.p.nodes[n]
            self.out.append(f"float acc{n} = {_IDENTITY[node['op']]};")
            clauses += f" reduction({'+' if node['op'] == 'sum' else node['op']}:acc{n})"
            if node["nan"]:
                self.out.append(f"int nan{n} = 0;")
                clauses += f" reduction(|:nan{n})"
        self._loop_header(clauses)
        for n in reductions:
            node = self.p.nodes[n]
            a = self._emit(node["arg"])
            if node["op"] == "sum":
                self.out.append(f"    acc{n} += {a};")
            else:  # a plain compare, not fmaxf, whose NaN rules keep gcc from vectorising (softmax/kernels/cpu.c)
                pick = ">" if node["op"] == "max" else "<"
                self.out.append(f"    acc{n} = {a} {pick} acc{n} ? {a} : acc{n};")
            if node["nan"]:  # amax/amin keep a NaN, as torch does
                self.out.append(f"    nan{n} |= {a} != {a};")
        self.out.append("}")
        for n in reductions:
            node = self.p.nodes[n]
            value = f"acc{n} * {lit(node['scale'])}" if node["scale"] else f"acc{n}"
            self.out.append(f"const float v{n} = {f'nan{n} ? NAN : ' if node['nan'] else ''}{value};")
            self.outer.add(n)

    def _row_reduce(self, n: int) -> None:
        """A reduction of a value constant along the row: arithmetic, no loop."""
        node = self.p.nodes[n]
        a = self._emit(node["arg"])
        value = f"{a} * {lit(float(self.p.n))}" if node["op"] == "sum" else a
        self.out.append(f"const float v{n} = {value}" + (f" * {lit(node['scale'])};" if node["scale"] else ";"))
        self.outer.add(n)

    def _outer_rows(self, level: int) -> None:
        for n in sorted(self.needed):
            node = self.p.nodes[n]
            if node["row"] and node["kind"] != "reduce" and node["level"] <= level:
                self._emit(n)

    # ---- nodes

    def _emit(self, n: int) -> str:
        """The variable of node n, after the statements that compute it (and what it needs) where
        they are missing: a row value at the row's level, any other in the current loop, read
        back from the row buffer where an earlier loop kept it."""
        if n in self.outer or n in self.scope:
            return f"v{n}"
        node = self.p.nodes[n]
        # a load is never kept: the input is in the cache already, and a step's value is
        # kept by the loop that computed it (after the dry run, only what later loops read)
        if node["kind"] == "ew" and n in self.earlier and (self.kept is None or n in self.kept):
            self.out.append(f"    const float v{n} = {self._buffered(n)};")
            self.reads.add(n)
            self.scope.add(n)
            return f"v{n}"
        args = [self._emit(a) for a in node.get("args", [])]
        if node["kind"] == "load":
            value = self._load(node["input"])
        elif node["kind"] == "const":
            value = lit(node["value"])
        else:
            value = f"f{node['fn']}({', '.join(args)})"
        indent = "" if node["row"] else "    "
        self.out.append(f"{indent}const float v{n} = {value};")
        if self.kept and n in self.kept:
            self.out.append(f"    {self._buffered(n)} = v{n};")
        (self.outer if node["row"] else self.scope).add(n)
        return f"v{n}"

    def _buffered(self, n: int) -> str:
        """Where value n's row is kept (a dry run's reads are only recorded: any name does)."""
        offset = self.kept.index(n) * self.p.n if self.kept else 0
        return f"buffer[{offset} + c]" if offset else "buffer[c]"

    def _load(self, k: int) -> str:
        t = self.p.inputs[k]
        cols = _cols(t["strides"][-1])
        place = {"full": f"I{k}[ri{k} + {cols}]", "row": f"I{k}[ri{k}]", "vec": f"I{k}[{cols}]",
                 "scalar": f"I{k}[0]"}[t["kind"]]
        return _loaded(t["dtype"], place)

    def _stores(self, row: bool) -> None:
        for j, o in enumerate(self.p.outputs):
            if o["row"] != row:
                continue
            v = self._emit(o["node"])
            place = f"O{j}[ro{j}]" if row else f"O{j}[ro{j} + {_cols(o['strides'][-1])}]"
            self.out.append(("" if row else "    ") + _stored(o["dtype"], place, v))
