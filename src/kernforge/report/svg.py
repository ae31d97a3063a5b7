"""SVG pictures of a search: the tree of candidates and line plots of progress.

Stdlib only, and no JavaScript, so the same markup goes into the live dashboard (htmx swaps it in)
and into the self-contained HTML report. Colours are inline presentation attributes, the weakest
rule in CSS, so a page's stylesheet can restyle every class named here and a bare file still reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

SVG_NS = "http://www.w3.org/2000/svg"

# 52 px fits a label of six characters at 10 px (~30 px) with room between neighbours; 64 px
# between rows leaves space for two 11-px lines under a node (its id, then its speedup or status:
# they end 31 px below its centre, the next row's circle starts 55 px below) and a visible edge.
# A 600-wide fan is then ~31,000 px wide, a 600-deep chain ~38,000 px tall: big, but the
# dashboard pans and zooms them and the report's box scrolls.
SLOT_PX, ROW_PX, MARGIN_PX, RADIUS_PX, LINE_PX = 52, 64, 28, 9, 11

FAILED = "#e53935"
STATUS_FILL = {"ok": "#43a047", "running": "#1e88e5", "lost": "#9e9e9e", "compile_error": FAILED,
               "runtime_error": FAILED, "wrong_result": FAILED, "crash": FAILED, "timeout": "#f4511e",
               "out_of_memory": "#f4511e", "cheat": "#b71c1c"}
UNKNOWN_FILL, ROOT_FILL = "#bdbdbd", "#546e7a"
BEST_STROKE, FASTER_STROKE = "#f9a825", "#1b5e20"
PALETTE = ("#1e88e5", "#e53935", "#43a047", "#8e24aa", "#fb8c00", "#00897b")


@dataclass
class TreePoint:
    node_id: str            # "n0003"
    parent_id: str | None   # None: a first candidate (child of the implicit root "start")
    status: str             # "ok", "compile_error", ..., "running" (in flight), "lost" (never finished)
    label: str              # short text drawn under the node, e.g. "1.42x" or "compile"
    best_path: bool = False  # on the path from the root to the task's best node: drawn highlighted
    href: str | None = None  # where a click goes; None: not a link
    title: str = ""          # tooltip
    faster: bool = False     # an ok node that beat eager beyond the noise: a thicker ring


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]  # (x, y), x ascending
    step: bool = True                  # a step function (a "best so far" curve)


@dataclass
class _Layout:
    parents: list[int]           # index 0 is the root; point i is index i + 1; the root's parent is -1
    depths: list[int]
    slots: list[float]           # x in slot units
    width_slots: int
    max_depth: int


def _n(v: float) -> str:
    """A coordinate with one decimal and no trailing zeros, so the output is short and stable."""
    text = f"{v:.1f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _esc(v: object) -> str:
    """Text or an attribute value made safe for XML: & < > " and ' escaped."""
    return escape(str(v), quote=True)


def _css_word(text: str) -> str:
    """A status as one class word: anything but letters, digits, - and _ becomes -."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text) or "unknown"


def _parent_indices(points: list[TreePoint]) -> list[int]:
    """Each node's parent index; a missing or self parent hangs from the root (index 0)."""
    index = {}
    for i, p in enumerate(points):
        index.setdefault(p.node_id, i + 1)
    parents = [-1]
    for i, p in enumerate(points):
        parent = index.get(p.parent_id, 0) if p.parent_id is not None else 0
        parents.append(0 if parent == i + 1 else parent)
    return parents


def _preorder(parents: list[int]) -> tuple[list[int], list[list[int]]]:
    """Depth-first order from the root, children in the order given, without recursion. A cycle
    of parents (a bug upstream) never reaches the root; its first member is hung from the root,
    in `parents` too."""
    children: list[list[int]] = [[] for _ in parents]
    for i in range(1, len(parents)):
        children[parents[i]].append(i)
    order: list[int] = []
    seen = [False] * len(parents)
    for start in range(len(parents)):
        if seen[start]:
            continue
        if start:  # unreachable: cut it loose from its cycle
            children[parents[start]].remove(start)
            parents[start] = 0
            children[0].append(start)
        stack = [start]
        while stack:
            node = stack.pop()
            seen[node] = True
            order.append(node)
            stack.extend(c for c in reversed(children[node]) if not seen[c])
    return order, children


def _layout(points: list[TreePoint]) -> _Layout:
    parents = _parent_indices(points)
    order, children = _preorder(parents)
    depths = [0] * len(parents)
    for node in order[1:]:
        depths[node] = depths[parents[node]] + 1
    slots = [0.0] * len(parents)
    leaves = 0
    for node in order:  # leaves take consecutive slots in depth-first order
        if not children[node]:
            slots[node], leaves = float(leaves), leaves + 1
    for node in reversed(order):  # children come after their parent, so they are placed first
        if children[node]:
            slots[node] = (slots[children[node][0]] + slots[children[node][-1]]) / 2
    return _Layout(parents, depths, slots, leaves, max(depths))


def _xy(layout: _Layout, node: int) -> tuple[float, float]:
    return MARGIN_PX + layout.slots[node] * SLOT_PX, MARGIN_PX + layout.depths[node] * ROW_PX


def _edge(layout: _Layout, child: int, best: bool) -> str:
    (x1, y1), (x2, y2) = _xy(layout, layout.parents[child]), _xy(layout, child)
    y1, y2 = y1 + RADIUS_PX, y2 - RADIUS_PX
    mid = (y1 + y2) / 2
    stroke = f'stroke="{BEST_STROKE}" stroke-width="3"' if best else 'stroke="#b0bec5" stroke-width="1.5"'
    return (f'<path class="edge{" best" if best else ""}" fill="none" {stroke} '
            f'd="M{_n(x1)} {_n(y1)} C{_n(x1)} {_n(mid)} {_n(x2)} {_n(mid)} {_n(x2)} {_n(y2)}"/>')


def _node(x: float, y: float, classes: str, node_id: str, fill: str, ring: str | None, label: str,
          title: str, href: str | None, name: str = "") -> str:
    """One node's group; ring: the colour of a thick outline (best or faster), None for a thin white
    one; name: a first line above the label (the node's id), "" for none."""
    outline = f'stroke="{ring}" stroke-width="3"' if ring else 'stroke="#ffffff" stroke-width="1.5"'
    lines = [("name", name, "#546e7a"), ("label", label, "#37474f")] if name else [("label", label, "#37474f")]
    body = f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{RADIUS_PX}" fill="{fill}" {outline}/>' + "".join(
        f'<text class="{cls}" x="{_n(x)}" y="{_n(y + RADIUS_PX + LINE_PX * (k + 1))}" text-anchor="middle" '
        f'font-size="10" fill="{colour}">{_esc(text)}</text>' for k, (cls, text, colour) in enumerate(lines))
    if href is not None:
        body = f'<a href="{_esc(href)}">{body}</a>'
    tip = f"<title>{_esc(title)}</title>" if title else ""
    return f'<g class="{_esc(classes)}" data-node="{_esc(node_id)}">{tip}{body}</g>'


def _point_node(layout: _Layout, i: int, p: TreePoint) -> str:
    classes = (f"node st-{_css_word(p.status)}" + (" best" if p.best_path else "")
               + (" faster" if p.faster else ""))
    ring = BEST_STROKE if p.best_path else FASTER_STROKE if p.faster else None
    x, y = _xy(layout, i + 1)
    return _node(x, y, classes, p.node_id, STATUS_FILL.get(p.status, UNKNOWN_FILL), ring, p.label,
                 p.title, p.href, name=p.node_id)


def tree_svg(points: list[TreePoint]) -> str:
    """The search tree, root ("start") at the top: one row per depth, leaves in consecutive slots
    in depth-first order, each parent centred over its children. Linear in len(points)."""
    layout = _layout(points)
    on_best = [True] + [p.best_path for p in points]  # the root starts every path
    edges = [_edge(layout, i, on_best[i] and on_best[layout.parents[i]]) for i in range(1, len(on_best))]
    root_x, root_y = _xy(layout, 0)
    nodes = [_node(root_x, root_y, "node root", "start", ROOT_FILL, None, "start", "", None)]
    nodes += [_point_node(layout, i, p) for i, p in enumerate(points)]
    width = 2 * MARGIN_PX + max(layout.width_slots - 1, 0) * SLOT_PX
    height = 2 * MARGIN_PX + layout.max_depth * ROW_PX + 2 * LINE_PX  # the two lines under the last row
    return (f'<svg xmlns="{SVG_NS}" class="tree" role="img" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif">'
            + "".join(edges) + "".join(nodes) + "</svg>")


def _nice_ticks(lo: float, hi: float) -> list[float]:
    """4 to 6 ticks on the finest 1, 2 or 5 x 10^k grid that covers [lo, hi] with at most 6.
    A coarser step is at most 2.5x the last, so from 7 ticks it falls to no fewer than 3
    ([0.5, 1.5]: 0.4..1.6 by 0.2, then 0.5..1.5 by 0.5); a 3 gets one more tick, below
    unless that crosses zero under data that is not negative."""
    span = hi - lo if hi > lo else max(abs(hi), 1.0)
    exponent = math.floor(math.log10(span / 10))  # a step of span/10 or finer: more than 6 ticks
    while True:
        for mantissa in (1, 2, 5):
            step = mantissa * 10.0 ** exponent
            first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
            if last - first + 1 <= 6:
                if last - first + 1 < 4:
                    first, last = (first - 1, last) if first > 0 or lo < 0 else (first, last + 1)
                return [round(k * step, 12) for k in range(first, last + 1)]
        exponent += 1


def _tick_text(v: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{v:.{decimals}f}"


def _padded(lo: float, hi: float) -> tuple[float, float]:
    """A range of zero width gets some, so one point or a flat line sits mid-plot."""
    if hi > lo:
        return lo, hi
    pad = max(abs(lo) * 0.1, 0.5)
    return lo - pad, hi + pad


def _no_data_svg(width: int, height: int) -> str:
    return (f'<svg xmlns="{SVG_NS}" class="plot empty" role="img" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif"><text x="{width // 2}" '
            f'y="{height // 2}" text-anchor="middle" font-size="12" fill="#78909c">no data yet</text></svg>')


@dataclass
class _Frame:
    """The plot area in pixels and the data range it shows (the outer ticks)."""
    x_ticks: list[float]
    y_ticks: list[float]
    left: float
    right: float
    top: float
    bottom: float

    def px(self, x: float) -> float:
        lo, hi = self.x_ticks[0], self.x_ticks[-1]
        return self.left + (x - lo) / (hi - lo) * (self.right - self.left)

    def py(self, y: float) -> float:
        lo, hi = self.y_ticks[0], self.y_ticks[-1]
        return self.bottom - (y - lo) / (hi - lo) * (self.bottom - self.top)


def _axes(f: _Frame, x_label: str, y_label: str, height: int) -> list[str]:
    x_step, y_step = f.x_ticks[1] - f.x_ticks[0], f.y_ticks[1] - f.y_ticks[0]
    parts = [f'<path class="axes" fill="none" stroke="#546e7a" '
             f'd="M{_n(f.left)} {_n(f.top)} V{_n(f.bottom)} H{_n(f.right)}"/>']
    parts += [f'<text class="tick x" x="{_n(f.px(v))}" y="{_n(f.bottom + 14)}" text-anchor="middle" '
              f'font-size="10">{_tick_text(v, x_step)}</text>' for v in f.x_ticks]
    for v in f.y_ticks:
        y = f.py(v)
        parts.append(f'<line class="grid" x1="{_n(f.left)}" x2="{_n(f.right)}" y1="{_n(y)}" y2="{_n(y)}" '
                     f'stroke="#eceff1"/><text class="tick y" x="{_n(f.left - 5)}" y="{_n(y + 3)}" '
                     f'text-anchor="end" font-size="10">{_tick_text(v, y_step)}</text>')
    parts.append(f'<text class="axis-label x" x="{_n((f.left + f.right) / 2)}" y="{height - 6}" '
                 f'text-anchor="middle" font-size="11">{_esc(x_label)}</text>')
    parts.append(f'<text class="axis-label y" transform="translate(14 {_n((f.top + f.bottom) / 2)}) '
                 f'rotate(-90)" text-anchor="middle" font-size="11">{_esc(y_label)}</text>')
    return parts


def _reference(f: _Frame, value: float, label: str) -> str:
    y = f.py(value)
    return (f'<line class="reference" x1="{_n(f.left)}" x2="{_n(f.right)}" y1="{_n(y)}" y2="{_n(y)}" '
            f'stroke="#78909c" stroke-dasharray="4 3"/><text class="reference-label" x="{_n(f.right - 2)}" '
            f'y="{_n(y - 4)}" text-anchor="end" font-size="10" fill="#78909c">{_esc(label)}</text>')


def _series(f: _Frame, i: int, points: list[tuple[float, float]], step: bool) -> str:
    colour = PALETTE[i % len(PALETTE)]
    xy = [(f.px(x), f.py(y)) for x, y in points]
    d = f"M{_n(xy[0][0])} {_n(xy[0][1])}" + "".join(
        f" H{_n(x)} V{_n(y)}" if step else f" L{_n(x)} {_n(y)}" for x, y in xy[1:])
    path = f'<path class="series s{i}" fill="none" stroke="{colour}" stroke-width="2" d="{d}"/>'
    if len(xy) > 1:
        return path
    # a path of one point draws nothing: mark it
    return path + (f'<circle class="point s{i}" cx="{_n(xy[0][0])}" cy="{_n(xy[0][1])}" r="3" '
                   f'fill="{colour}"/>')


def line_plot_svg(series: list[Series], x_label: str, y_label: str, *, width: int = 640, height: int = 240,
                  reference_y: float | None = None, reference_label: str = "") -> str:
    """A small line plot; reference_y draws a dashed horizontal line (e.g. 1.0 = eager). Points with
    a non-finite x or y are left out; with no points left the plot says "no data yet"."""
    kept = [(i, s, [(x, y) for x, y in s.points if math.isfinite(x) and math.isfinite(y)])
            for i, s in enumerate(series)]
    kept = [(i, s, pts) for i, s, pts in kept if pts]
    if not kept:
        return _no_data_svg(width, height)
    xs = [x for _, _, pts in kept for x, _ in pts]
    ys = [y for _, _, pts in kept for _, y in pts] + ([reference_y] if reference_y is not None else [])
    # 56 px on the left holds a tick label of ~7 characters and the rotated y label; 40 at the bottom
    # holds the x tick labels and the x label
    frame = _Frame(_nice_ticks(*_padded(min(xs), max(xs))), _nice_ticks(*_padded(min(ys), max(ys))),
                   56, width - 16, 14, height - 40)
    parts = _axes(frame, x_label, y_label, height)
    if reference_y is not None:
        parts.append(_reference(frame, reference_y, reference_label))
    parts += [_series(frame, i, pts, s.step) for i, s, pts in kept]
    if len(kept) > 1:
        parts.append(_legend([(i, s.name) for i, s, _ in kept], frame.left + 8, frame.top + 4))
    return (f'<svg xmlns="{SVG_NS}" class="plot" role="img" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif">' + "".join(parts) + "</svg>")


def _legend(entries: list[tuple[int, str]], x: float, y: float) -> str:
    rows = []
    for k, (i, name) in enumerate(entries):
        row_y = y + 14 * k
        rows.append(f'<line x1="{_n(x)}" x2="{_n(x + 14)}" y1="{_n(row_y + 5)}" y2="{_n(row_y + 5)}" '
                    f'stroke="{PALETTE[i % len(PALETTE)]}" stroke-width="2"/><text x="{_n(x + 18)}" '
                    f'y="{_n(row_y + 9)}" font-size="10">{_esc(name)}</text>')
    return '<g class="legend">' + "".join(rows) + "</g>"


@dataclass
class Spread:
    """One row of a timing picture: a measurement's p20, p50 and p80 in ms. Only a p50 (a memory
    floor): a dashed line across the picture instead of a bar."""
    name: str
    p20: float | None
    p50: float | None
    p80: float | None
    kind: str = "other"  # "candidate", "eager", "compile", "floor": its colour and class


SPREAD_FILL = {"candidate": "#1e88e5", "eager": "#546e7a", "compile": "#8e24aa", "floor": "#78909c"}
# 150 px on the left holds a name like "torch.compile max-autotune" at 10 px (~24 characters),
# 70 on the right holds the median's "0.0123 ms".
# 22 px a row leaves 10 between 12-px boxes; 12 on top holds a floor line's name.
SPREAD_LEFT_PX, SPREAD_RIGHT_PX, SPREAD_ROW_PX, SPREAD_BOX_PX, SPREAD_TOP_PX = 150, 70, 22, 12, 12


def _finite(v: float | None) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def timing_svg(spreads: list[Spread], *, width: int = 560) -> str:
    """Each measurement as a range bar: a box from p20 to p80 with a bar at the median, on one ms
    axis, so a candidate's spread reads against eager's and torch.compile's at a glance; a row
    that has only a p50 (the memory floor) is a dashed vertical line. Rows without a finite p50
    are left out; none left: "no data yet"."""
    bars = [s for s in spreads if s.kind != "floor" and all(_finite(v) for v in (s.p20, s.p50, s.p80))]
    lines = [s for s in spreads if s not in bars and _finite(s.p50)]
    height = SPREAD_TOP_PX + SPREAD_ROW_PX * max(len(bars), 1) + 34  # the rows, then the ticks and axis label
    if not bars:
        return _no_data_svg(width, height)
    values = [v for s in bars for v in (s.p20, s.p50, s.p80)] + [s.p50 for s in lines]
    frame = _Frame(_nice_ticks(*_padded(min(values), max(values))), [0.0, 1.0],
                   SPREAD_LEFT_PX, width - SPREAD_RIGHT_PX, SPREAD_TOP_PX, height - 34)
    x_step = frame.x_ticks[1] - frame.x_ticks[0]
    parts = [(f'<path class="axes" fill="none" stroke="#546e7a" d="M{_n(frame.left)} {_n(frame.bottom)} '
              f'H{_n(frame.right)}"/>')]
    for v in frame.x_ticks:
        x = frame.px(v)
        parts.append(f'<line class="grid" x1="{_n(x)}" x2="{_n(x)}" y1="{_n(frame.top)}" y2="{_n(frame.bottom)}" '
                     f'stroke="#eceff1"/><text class="tick x" x="{_n(x)}" y="{_n(frame.bottom + 14)}" '
                     f'text-anchor="middle" font-size="10">{_tick_text(v, x_step)}</text>')
    parts.append(f'<text class="axis-label x" x="{_n((frame.left + frame.right) / 2)}" y="{height - 4}" '
                 f'text-anchor="middle" font-size="11">ms (box: p20 to p80, bar: p50)</text>')
    for i, s in enumerate(bars):
        parts.append(_spread_row(frame, s, SPREAD_TOP_PX + SPREAD_ROW_PX * (i + 0.5)))
    for s in lines:
        x, colour = frame.px(s.p50), SPREAD_FILL.get(s.kind, UNKNOWN_FILL)
        parts.append(f'<g class="spread line {_css_word(s.kind)}"><title>{_esc(s.name)}: {s.p50:.4f} ms</title>'
                     f'<line x1="{_n(x)}" x2="{_n(x)}" y1="{_n(frame.top)}" y2="{_n(frame.bottom)}" '
                     f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="4 3"/><text x="{_n(x + 3)}" '
                     f'y="{_n(frame.top - 2)}" font-size="9" fill="{colour}">{_esc(s.name)}</text></g>')
    return (f'<svg xmlns="{SVG_NS}" class="plot timings" role="img" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif">' + "".join(parts) + "</svg>")


def _spread_row(frame: _Frame, s: Spread, y: float) -> str:
    """One bar, centred on y: its name on the left, its median on the right, its figures as a tooltip."""
    colour = SPREAD_FILL.get(s.kind, UNKNOWN_FILL)
    x20, x50, x80 = frame.px(s.p20), frame.px(s.p50), frame.px(s.p80)
    half = SPREAD_BOX_PX / 2
    return (f'<g class="spread {_css_word(s.kind)}"><title>{_esc(s.name)}: p20 {s.p20:.4f}, p50 {s.p50:.4f}, '
            f'p80 {s.p80:.4f} ms</title>'
            f'<text class="name" x="{_n(frame.left - 6)}" y="{_n(y + 4)}" text-anchor="end" font-size="10">'
            f'{_esc(s.name)}</text>'
            f'<rect class="box" x="{_n(x20)}" y="{_n(y - half)}" width="{_n(max(x80 - x20, 1.0))}" '
            f'height="{SPREAD_BOX_PX}" fill="{colour}" fill-opacity="0.25" stroke="{colour}"/>'
            f'<line class="median" x1="{_n(x50)}" x2="{_n(x50)}" y1="{_n(y - half - 2)}" y2="{_n(y + half + 2)}" '
            f'stroke="{colour}" stroke-width="2.5"/>'
            f'<text class="value" x="{_n(frame.right + 6)}" y="{_n(y + 4)}" font-size="10">{s.p50:.4f} ms</text></g>')
