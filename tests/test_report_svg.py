"""report.svg: the search tree and the line plots, parsed back as XML and checked by structure."""

from __future__ import annotations

import math
import time
import xml.etree.ElementTree as ET

import pytest

from kernforge.report.svg import Series, Spread, TreePoint, line_plot_svg, timing_svg, tree_svg

pytestmark = pytest.mark.unit

NS = {"s": "http://www.w3.org/2000/svg"}
SVG_G, SVG_TEXT = f"{{{NS['s']}}}g", f"{{{NS['s']}}}text"


def _parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


def _classes(e: ET.Element) -> set[str]:
    return set(e.get("class", "").split())


def _nodes(root: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-node"): g for g in root.iter("{%s}g" % NS["s"]) if "node" in _classes(g)}


def _circle(g: ET.Element) -> tuple[float, float]:
    c = next(g.iter("{%s}circle" % NS["s"]))
    return float(c.get("cx")), float(c.get("cy"))


# start -> n1 -> n2 (best, faster) -> n4 ; n1 -> n3 (compile_error) ; n5 (lost, a second first try)
SMALL_TREE = [
    TreePoint("n1", None, "ok", "1.01x", best_path=True, href="/node/n1", title="first"),
    TreePoint("n2", "n1", "ok", "1.42x", best_path=True, faster=True, href="/node/n2"),
    TreePoint("n3", "n1", "compile_error", "compile"),
    TreePoint("n4", "n2", "running", "..."),
    TreePoint("n5", None, "lost", "lost"),
]


def test_tree_has_one_group_per_point_and_a_root():
    root = _parse(tree_svg(SMALL_TREE))
    nodes = _nodes(root)
    assert len(nodes) == len(SMALL_TREE) + 1
    assert _classes(nodes["start"]) == {"node", "root"}
    assert nodes["start"].find("s:text", NS).text == "start"
    assert _classes(root) == {"tree"} and root.get("role") == "img"
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}"


def test_tree_classes_name_status_best_and_faster():
    nodes = _nodes(_parse(tree_svg(SMALL_TREE)))
    assert _classes(nodes["n1"]) == {"node", "st-ok", "best"}
    assert _classes(nodes["n2"]) == {"node", "st-ok", "best", "faster"}
    assert _classes(nodes["n3"]) == {"node", "st-compile_error"}
    assert _classes(nodes["n5"]) == {"node", "st-lost"}


def test_tree_circles_have_readable_fills_without_a_stylesheet():
    nodes = _nodes(_parse(tree_svg(SMALL_TREE)))
    fill = {k: next(g.iter("{%s}circle" % NS["s"])).get("fill") for k, g in nodes.items()}
    assert fill["n1"] == fill["n2"] != fill["n3"]
    assert len({fill["n1"], fill["n3"], fill["n4"], fill["n5"]}) == 4  # ok, failed, running, lost


def test_tree_edges_are_best_only_along_the_best_path():
    root = _parse(tree_svg(SMALL_TREE))
    edges = [e for e in root if "edge" in _classes(e)]
    assert len(edges) == len(SMALL_TREE)  # one per point: to its parent or to the root
    best = [e for e in edges if "best" in _classes(e)]
    assert len(best) == 2  # start -> n1 -> n2; not n2 -> n4, n1 -> n3 nor start -> n5
    assert all(float(e.get("stroke-width")) > float(edges[-1].get("stroke-width")) for e in best)


def test_tree_edge_to_a_best_node_under_an_unmarked_parent_is_not_best():
    points = [TreePoint("n1", None, "ok", "a"), TreePoint("n2", "n1", "ok", "b", best_path=True)]
    root = _parse(tree_svg(points))
    assert not [e for e in root if "edge" in _classes(e) and "best" in _classes(e)]


def test_tree_links_exactly_the_points_with_href():
    nodes = _nodes(_parse(tree_svg(SMALL_TREE)))
    links = {k: [a.get("href") for a in g.iter("{%s}a" % NS["s"])] for k, g in nodes.items()}
    assert links == {"start": [], "n1": ["/node/n1"], "n2": ["/node/n2"], "n3": [], "n4": [], "n5": []}
    assert nodes["n1"].find("s:title", NS).text == "first"
    assert nodes["n3"].find("s:title", NS) is None


def test_tree_layout_rows_by_depth_and_parents_centred():
    nodes = _nodes(_parse(tree_svg(SMALL_TREE)))
    xy = {k: _circle(g) for k, g in nodes.items()}
    assert xy["start"][1] < xy["n1"][1] == xy["n5"][1] < xy["n2"][1] == xy["n3"][1] < xy["n4"][1]
    # leaves in depth-first order: n4, n3, n5; n2 sits over its one child, n1 between n2 and n3
    assert xy["n4"][0] == xy["n2"][0] < xy["n3"][0] < xy["n5"][0]
    assert xy["n1"][0] == (xy["n2"][0] + xy["n3"][0]) / 2
    assert xy["start"][0] == (xy["n1"][0] + xy["n5"][0]) / 2


def test_tree_escapes_ids_labels_titles_and_hrefs():
    nasty = '<b>&"'
    svg = tree_svg([TreePoint(nasty, None, "ok", nasty, href=f"/n?a=1&b={nasty}", title=nasty)])
    g = _nodes(_parse(svg))[nasty]
    assert g.find(".//s:text", NS).text == nasty
    assert g.find("s:title", NS).text == nasty
    assert g.find("s:a", NS).get("href") == f"/n?a=1&b={nasty}"


def test_tree_odd_status_stays_one_class_word():
    g = _nodes(_parse(tree_svg([TreePoint("n1", None, 'bad status"<', "x")])))["n1"]
    assert _classes(g) == {"node", "st-bad-status--"}


def test_tree_child_of_a_missing_parent_hangs_from_the_root():
    points = [TreePoint("n1", None, "ok", "a"), TreePoint("n7", "n6", "ok", "orphan")]
    root = _parse(tree_svg(points))
    xy = {k: _circle(g) for k, g in _nodes(root).items()}
    assert xy["n7"][1] == xy["n1"][1]  # depth 1, like a first candidate
    assert len([e for e in root if "edge" in _classes(e)]) == 2


def test_tree_parent_cycle_still_draws_every_node():
    points = [TreePoint("n1", "n2", "ok", "a"), TreePoint("n2", "n1", "ok", "b")]
    root = _parse(tree_svg(points))
    xy = {k: _circle(g) for k, g in _nodes(root).items()}
    assert len(xy) == 3
    # the cycle's first member is hung from the root: edges leave start and n1, downwards
    edge_starts = sorted(float(e.get("d").split()[1]) for e in root if "edge" in _classes(e))
    assert edge_starts == [xy["start"][1] + 9, xy["n1"][1] + 9]
    assert xy["start"][1] < xy["n1"][1] < xy["n2"][1]


def test_tree_names_each_node_by_its_id_above_its_label():
    nodes = _nodes(_parse(tree_svg(SMALL_TREE)))
    texts = {k: [(t.get("class"), t.text, float(t.get("y"))) for t in g.iter(SVG_TEXT)]
             for k, g in nodes.items()}
    (name, node_id, y_id), (label, speedup, y_label) = texts["n2"]
    assert (name, node_id, label, speedup) == ("name", "n2", "label", "1.42x") and y_id < y_label
    assert [t[1] for t in texts["start"]] == ["start"]  # the root has no id to show
    # the last row's two lines fit inside the picture
    root = _parse(tree_svg(SMALL_TREE))
    assert max(t[2] for lines in texts.values() for t in lines) < float(root.get("height"))


def test_tree_of_no_points_is_the_root_alone():
    root = _parse(tree_svg([]))
    assert list(_nodes(root)) == ["start"] and int(root.get("width")) > 0


def test_tree_600_deep_chain_is_fast_and_tall():
    points = [TreePoint(f"n{i:04d}", f"n{i - 1:04d}" if i else None, "ok", "1.0x") for i in range(600)]
    began = time.perf_counter()
    root = _parse(tree_svg(points))
    assert time.perf_counter() - began < 1.0
    assert len(_nodes(root)) == 601
    width, height = int(root.get("width")), int(root.get("height"))
    assert width < 200 and 600 * 48 <= height <= 601 * 64 + 200


def test_tree_600_wide_fan_is_fast_and_wide():
    points = [TreePoint(f"n{i:04d}", None, "wrong_result", "wrong") for i in range(600)]
    began = time.perf_counter()
    root = _parse(tree_svg(points))
    assert time.perf_counter() - began < 1.0
    assert len(_nodes(root)) == 601
    width, height = int(root.get("width")), int(root.get("height"))
    assert 599 * 48 <= width <= 600 * 60 + 200 and height < 300


def test_tree_output_is_deterministic():
    assert tree_svg(SMALL_TREE) == tree_svg(list(SMALL_TREE))


def _ticks(root: ET.Element, axis: str) -> list[float]:
    return [float(t.text) for t in root.iter("{%s}text" % NS["s"]) if _classes(t) == {"tick", axis}]


def _is_nice(step: float) -> bool:
    mantissa = step / 10 ** math.floor(math.log10(step))
    return any(abs(mantissa - m) < 1e-6 for m in (1, 2, 5, 10))


def _check_ticks(ticks: list[float], lo: float, hi: float) -> None:
    assert 4 <= len(ticks) <= 6
    steps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert all(abs(s - steps[0]) < 1e-9 * max(1.0, abs(steps[0])) for s in steps) and _is_nice(steps[0])
    assert ticks[0] <= lo and ticks[-1] >= hi


def test_plot_ticks_are_nice_and_cover_the_data():
    for xs, ys in [((0, 37), (0.93, 2.61)), ((3, 4), (0.5, 1.5)), ((0, 600), (-12.5, 80.0)),
                   ((1e-4, 7e-4), (1e5, 3.3e5))]:
        points = [(xs[0], ys[0]), (xs[1], ys[1])]
        root = _parse(line_plot_svg([Series("best", points)], "nodes", "speedup"))
        _check_ticks(_ticks(root, "x"), *xs)
        _check_ticks(_ticks(root, "y"), *ys)


def test_plot_draws_one_coloured_path_per_series_and_a_legend():
    series = [Series("best", [(0, 1.0), (2, 1.3), (5, 1.7)]), Series("tried", [(0, 0.8), (5, 1.1)], step=False)]
    root = _parse(line_plot_svg(series, "nodes", "speedup"))
    paths = [p for p in root.iter("{%s}path" % NS["s"]) if "series" in _classes(p)]
    assert [_classes(p) for p in paths] == [{"series", "s0"}, {"series", "s1"}]
    assert paths[0].get("stroke") != paths[1].get("stroke")
    assert "H" in paths[0].get("d") and "L" in paths[1].get("d")  # step vs straight segments
    legend = root.find("s:g[@class='legend']", NS)
    assert [t.text for t in legend.iter("{%s}text" % NS["s"])] == ["best", "tried"]


def test_plot_of_one_series_has_no_legend():
    root = _parse(line_plot_svg([Series("best", [(0, 1.0), (1, 2.0)])], "x", "y"))
    assert root.find("s:g[@class='legend']", NS) is None


def test_plot_reference_line_is_dashed_labelled_and_in_range():
    root = _parse(line_plot_svg([Series("best", [(0, 2.0), (4, 3.4)])], "nodes", "speedup",
                                reference_y=1.0, reference_label="eager"))
    line = root.find("s:line[@class='reference']", NS)
    assert line is not None and line.get("stroke-dasharray")
    assert root.find("s:text[@class='reference-label']", NS).text == "eager"
    assert min(_ticks(root, "y")) <= 1.0  # the range grows to show it
    no_ref = _parse(line_plot_svg([Series("best", [(0, 1.5), (4, 2.5)])], "nodes", "speedup"))
    assert no_ref.find("s:line[@class='reference']", NS) is None


def test_plot_of_no_data_says_so_at_the_same_size():
    for series in ([], [Series("a", []), Series("b", [])], [Series("a", [(float("nan"), 1.0)])]):
        root = _parse(line_plot_svg(series, "x", "y", width=300, height=120))
        assert (root.get("width"), root.get("height")) == ("300", "120")
        assert [t.text for t in root.iter("{%s}text" % NS["s"])] == ["no data yet"]


def test_plot_of_one_point_marks_it():
    root = _parse(line_plot_svg([Series("best", [(3.0, 1.2)])], "nodes", "speedup"))
    assert root.find("s:circle[@class='point s0']", NS) is not None
    _check_ticks(_ticks(root, "x"), 3.0, 3.0)
    _check_ticks(_ticks(root, "y"), 1.2, 1.2)


def test_plot_of_equal_y_values_pads_the_range():
    root = _parse(line_plot_svg([Series("best", [(0, 2.0), (1, 2.0), (2, 2.0)])], "nodes", "speedup"))
    ticks = _ticks(root, "y")
    _check_ticks(ticks, 2.0, 2.0)
    assert ticks[0] < 2.0 < ticks[-1]


def test_plot_escapes_labels_and_names():
    nasty = '<b>&"'
    series = [Series(nasty, [(0, 1.0), (1, 2.0)]), Series("b", [(0, 1.0)])]
    root = _parse(line_plot_svg(series, nasty, nasty, reference_y=1.0, reference_label=nasty))
    texts = [t.text for t in root.iter("{%s}text" % NS["s"])]
    assert texts.count(nasty) == 4  # x label, y label, reference label, legend


def test_plot_output_is_deterministic():
    series = [Series("best", [(0, 1.0), (2, 1.3)])]
    assert line_plot_svg(series, "x", "y", reference_y=1.0) == line_plot_svg(series, "x", "y", reference_y=1.0)


TIMINGS = [Spread("candidate", 0.050, 0.052, 0.054, "candidate"), Spread("eager", 0.095, 0.100, 0.105, "eager"),
           Spread("torch.compile default", 0.070, 0.080, 0.090, "compile"),
           Spread("memory floor", None, 0.010, None, "floor")]


def _spreads(root: ET.Element) -> dict[str, ET.Element]:
    return {g.find("s:title", NS).text.split(":")[0]: g for g in root.iter(SVG_G)
            if "spread" in _classes(g)}


def test_timing_bars_span_p20_to_p80_with_the_median_inside_on_one_axis():
    rows = _spreads(_parse(timing_svg(TIMINGS)))
    assert set(rows) == {"candidate", "eager", "torch.compile default", "memory floor"}

    def bar(name: str) -> tuple[float, float, float]:
        box, median = rows[name].find("s:rect", NS), rows[name].find("s:line[@class='median']", NS)
        left = float(box.get("x"))
        return left, float(median.get("x1")), left + float(box.get("width"))

    cand, eager, compiled = bar("candidate"), bar("eager"), bar("torch.compile default")
    assert cand[0] < cand[1] < cand[2] < compiled[0] < compiled[1] < compiled[2] < eager[0] < eager[1] < eager[2]
    # one scale: eager's p20-p80 (0.010 ms) is 2.5 times the candidate's (0.004 ms)
    assert (eager[2] - eager[0]) / (cand[2] - cand[0]) == pytest.approx(2.5, rel=0.05)
    assert "p80 0.0540" in rows["candidate"].find("s:title", NS).text  # the figures on hover
    floor = rows["memory floor"]
    assert "line" in _classes(floor) and floor.find("s:rect", NS) is None  # a p50 alone: a line, no bar
    assert float(floor.find("s:line", NS).get("x1")) < cand[0]


def test_timing_rows_without_figures_are_left_out_and_none_says_so():
    root = _parse(timing_svg([Spread("candidate", None, None, None, "candidate"),
                              Spread("eager", 0.1, math.inf, 0.2, "eager"), Spread("memory floor", None, 0.01, None, "floor")]))
    assert "empty" in _classes(root) and not _spreads(root)
    nasty = '<b>&"'
    root = _parse(timing_svg([Spread(nasty, 1.0, 1.0, 1.0, nasty)]))  # a zero-width spread still draws
    assert nasty in [t.text for t in root.iter(SVG_TEXT)]
    assert float(root.find(".//s:rect", NS).get("width")) >= 1.0
