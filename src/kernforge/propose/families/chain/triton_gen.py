"""A lowered chain (lower.Program) as one Triton kernel, `chain_rows`, with the constants baked in.

A program computes BLOCK_R rows. tile: the whole row in one [BLOCK_R, BLOCK_N] tile (BLOCK_N >=
N), every input read once; with no reduction the grid also splits N into BLOCK_N columns. loop:
one pass over the row in BLOCK_N chunks per reduction level, then a last pass that stores;
each pass recomputes the values it needs from the inputs (a row too long for registers is read
once per reduction level, plus once to store).
"""

from __future__ import annotations

from typing import Any

from kernforge.propose.families.chain.lower import Program, row_offset
from kernforge.propose.families.elementwise import lit_triton as lit


def kernel_source(program: Program, tile: bool, block_r: int, block_n: int) -> str:
    """The functions and the kernel, as the constants block holds them."""
    lines = []
    for i, (expr, _c, arity) in enumerate(program.functions):
        lines += ["@triton.jit", f"def f{i}({', '.join('abc'[:arity])}):", f"    return {expr}", ""]
    params = [f"I{k}" for k in range(len(program.inputs))] + [f"O{j}" for j in range(len(program.outputs))]
    lines += ["@triton.jit", f"def chain_rows({', '.join(params)}):"]
    body = _Body(program, tile, block_r, block_n)
    lines += ["    " + line for line in body.lines()]
    return "\n".join(lines) + "\n"


class _Body:
    def __init__(self, program: Program, tile: bool, block_r: int, block_n: int):
        self.p, self.tile, self.br, self.bn = program, tile, block_r, block_n
        self.needed = set(program.needed())
        self.out: list[str] = []
        self.outer: set[int] = set()  # nodes computed once per row block
        self.scope: set[int] = set()  # nodes computed in the current chunk

    def lines(self) -> list[str]:
        p = self.p
        self.out += [f"r = tl.program_id(0) * {self.br} + tl.arange(0, {self.br})"]
        if p.int64:
            self.out.append("r = r.to(tl.int64)")
        self.out.append(f"rm = r < {p.rows}")
        for k, t in enumerate(p.inputs):
            if t["kind"] in ("full", "row"):
                self.out.append(f"ri{k} = {row_offset(p.domain[:-1], t['strides'][:-1], '//')}")
        for j, o in enumerate(p.outputs):
            self.out.append(f"ro{j} = {row_offset(p.domain[:-1], o['strides'][:-1], '//')}")
        if self.tile:
            self._tile()
        else:
            self._looped()
        return self.out

    # ---- structure

    def _chunk_header(self, start: str, indent: str) -> None:
        self.out += [f"{indent}c = {start}tl.arange(0, {self.bn})", f"{indent}cm = c < {self.p.n}",
                     f"{indent}m = rm[:, None] & cm[None, :]"]

    def _tile(self) -> None:
        start = f"tl.program_id(1) * {self.bn} + " if not self.p.reductions else ""
        self._chunk_header(start, "")
        for n in sorted(self.needed):
            self._emit(n, "")
        self._stores("", row=True)
        self._stores("", row=False)

    def _looped(self) -> None:
        levels = max((self.p.nodes[n]["level"] for n in self.needed), default=0)
        for level in range(levels):
            self._outer_rows(level)
            reductions = [n for n in sorted(self.needed) if self.p.nodes[n]["kind"] == "reduce"
                          and self.p.nodes[n]["level"] == level + 1]
            for n in reductions:
                self._accumulator(n)
            self.out.append(f"for start in range(0, {self.p.n}, {self.bn}):")
            self.scope = set()
            self._chunk_header("start + ", "    ")
            for n in reductions:
                arg = self.p.nodes[n]["arg"]
                self._emit(arg, "    ")
                self._accumulate(n, arg)
            for n in reductions:
                self._finish(n)
        self._outer_rows(levels)
        self._stores("", row=True)
        if any(not o["row"] for o in self.p.outputs):
            self.out.append(f"for start in range(0, {self.p.n}, {self.bn}):")
            self.scope = set()
            self._chunk_header("start + ", "    ")
            self._stores("    ", row=False)

    def _outer_rows(self, level: int) -> None:
        for n in sorted(self.needed):
            node = self.p.nodes[n]
            if node["row"] and node["kind"] != "reduce" and node["level"] <= level:
                self._emit(n, "")

    # ---- nodes

    def _emit(self, n: int, indent: str) -> None:
        """The statements that compute node n (and what it needs) where they are missing."""
        if n in self.outer or n in self.scope:
            return
        node = self.p.nodes[n]
        for a in node.get("args", []):
            self._emit(a, indent)
        kind = node["kind"]
        if kind == "load":
            line = self._load(node["input"])
        elif kind == "const":
            line = lit(node["value"])
        elif kind == "ew":
            line = f"f{node['fn']}({', '.join(f'v{a}' for a in node['args'])})"
        else:  # a reduce: inline in a tile (a looped kernel computes it in its pass)
            self._emit(node["arg"], indent)
            self.out += [f"{indent}{line}" for line in self._tile_reduce(n, node)]
            self._mark(n, node)
            return
        self.out.append(f"{indent}v{n} = {line}")
        self._mark(n, node)

    def _mark(self, n: int, node: dict[str, Any]) -> None:
        (self.outer if node["row"] or self.tile else self.scope).add(n)

    def _load(self, k: int) -> str:
        t = self.p.inputs[k]
        step = t["strides"][-1]
        cols = "c" if step == 1 else f"c * {step}"
        kind = t["kind"]
        if kind == "full":
            return f"tl.load(I{k} + ri{k}[:, None] + ({cols})[None, :], mask=m, other=0.0).to(tl.float32)"
        if kind == "row":
            return f"tl.load(I{k} + ri{k}, mask=rm, other=0.0).to(tl.float32)[:, None]"
        if kind == "vec":
            return f"tl.load(I{k} + {cols}, mask=cm, other=0.0).to(tl.float32)[None, :]"
        return f"tl.load(I{k}).to(tl.float32)"

    def _tile_reduce(self, n: int, node: dict[str, Any]) -> list[str]:
        a = f"v{node['arg']}"
        if self.p.nodes[node["arg"]]["row"]:  # constant along the row: the reduction is arithmetic
            value = f"{a} * {self.p.n}.0" if node["op"] == "sum" else a
            return [f"v{n} = {value}" + (f" * {lit(node['scale'])}" if node["scale"] else "")]
        identity = {"sum": "0.0", "max": 'float("-inf")', "min": 'float("inf")'}[node["op"]]
        lines = [f"v{n} = tl.{node['op']}(tl.where(m, {a}, {identity}), axis=1)[:, None]"
                 + (f" * {lit(node['scale'])}" if node["scale"] else "")]
        if node["nan"]:  # amax/amin keep a NaN, as torch does
            lines.append(f"v{n} = tl.where(tl.max(tl.where(m & ({a} != {a}), 1, 0), axis=1)[:, None] > 0, "
                         f'float("nan"), v{n})')
        return lines

    def _accumulator(self, n: int) -> None:
        node = self.p.nodes[n]
        init = {"sum": "0.0", "max": 'float("-inf")', "min": 'float("inf")'}[node["op"]]
        self.out.append(f"acc{n} = tl.full([{self.br}, {self.bn}], {init}, tl.float32)")
        if node["nan"]:
            self.out.append(f"nan{n} = tl.zeros([{self.br}, {self.bn}], tl.int32)")

    def _accumulate(self, n: int, arg: int) -> None:
        node = self.p.nodes[n]
        a = f"v{arg}"
        if node["op"] == "sum":
            self.out.append(f"    acc{n} += tl.where(m, {a}, 0.0)")
        else:
            fill = 'float("-inf")' if node["op"] == "max" else 'float("inf")'
            pick = "tl.maximum" if node["op"] == "max" else "tl.minimum"
            self.out.append(f"    acc{n} = {pick}(acc{n}, tl.where(m, {a}, {fill}))")
        if node["nan"]:
            self.out.append(f"    nan{n} = tl.maximum(nan{n}, tl.where(m & ({a} != {a}), 1, 0))")

    def _finish(self, n: int) -> None:
        node = self.p.nodes[n]
        scale = f" * {lit(node['scale'])}" if node["scale"] else ""
        self.out.append(f"v{n} = tl.{node['op']}(acc{n}, axis=1)[:, None]{scale}")
        if node["nan"]:
            self.out.append(f'v{n} = tl.where(tl.max(nan{n}, axis=1)[:, None] > 0, float("nan"), v{n})')
        self.outer.add(n)

    def _stores(self, indent: str, row: bool) -> None:
        for j, o in enumerate(self.p.outputs):
            if o["row"] != row:
                continue
            self._emit(o["node"], indent)
            v = f"v{o['node']}.to(O{j}.dtype.element_ty)"
            if row:
                self.out.append(f"{indent}tl.store(O{j} + ro{j}[:, None], {v}, mask=rm[:, None])")
                continue
            step = o["strides"][-1]
            cols = "c" if step == 1 else f"c * {step}"
            self.out.append(f"{indent}tl.store(O{j} + ro{j}[:, None] + ({cols})[None, :], "
                            f"tl.broadcast_to({v}, [{self.br}, {self.bn}]), mask=m)")
