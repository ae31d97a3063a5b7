"""The dashboard's pages on run folders written by hand (FastAPI's test client), a half-written
and a damaged one among them, and the URLs that try to get out of the runs folder."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest
from run_folders import SECRET, write_node, write_run

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from kernforge.report import views  # noqa: E402
from kernforge.store.events import NodeFinished, TaskEnded, event_from_json  # noqa: E402
from kernforge.ui.app import _stream, make_app  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def client(runs_dir: Path) -> TestClient:
    return TestClient(make_app(runs_dir))


@pytest.fixture
def run(runs_dir: Path, softmax_task):
    return write_run(runs_dir, softmax_task)


def node_ids(page: str) -> list[str]:
    return re.findall(r'<g class="node st-[^"]*" data-node="(n\d{4})"', page)


def test_the_runs_page_lists_every_run_with_its_best_and_end_to_end(client, run):
    page = client.get("/").text
    assert run.root.name in page and "tiny_softmax" in page
    row = page[page.index(f'data-run="{run.root.name}"'):]
    assert "finished" in row[:600] and "1.92x" in row[:900] and "1.21x" in row[:900]


def test_a_run_page_has_its_header_hot_ops_skipped_ops_and_plots(client, run, softmax_task):
    page = client.get(f"/runs/{run.root.name}/").text
    assert "tiny_softmax" in page and "mixed · mcts · 4 per op" in page
    assert "ok 2" in page and "wrong_result 1" in page and "compile_error 1" in page  # counts per status
    assert "1.21x" in page and "1.01x, within noise" in page  # end to end, a figure in the noise says so
    assert "150 tokens" in page and "$0.01" in page  # the LLM node's usage, from the events
    hot = page[page.index('class="hot"'):]
    assert softmax_task.op in hot and "1.92x" in hot  # the finalist's second result, not the search's 2.00x
    assert f"{0.080 / 0.052:.2f}x" in hot  # vs torch.compile, from the finalist
    gain = 1 / (1 - softmax_task.share + softmax_task.share / (0.100 / 0.052))
    assert f"{gain:.2f}x" in hot  # Amdahl's projection for the model
    assert "no built-in template for aten::bmm.default" in page
    phases = page[page.index('class="card phases"'):]
    assert "time by phase" in phases and "capture <b>0m12s</b>" in phases and "baselines <b>0m03s</b>" in phases
    assert page.count("<svg") >= 2 and "best speedup vs eager" in page
    # live parts: each is re-fetched on the run's event stream
    assert f'sse-connect="/runs/{run.root.name}/events"' in page and 'hx-trigger="sse:update' in page


def test_a_task_page_draws_the_tree_with_the_best_path_and_failures(client, run, softmax_task):
    page = client.get(f"/runs/{run.root.name}/tasks/{softmax_task.task_id}").text
    assert sorted(node_ids(page)) == ["n0000", "n0001", "n0002", "n0003"]
    best = re.findall(r'<g class="node st-ok best[^"]*" data-node="(n\d{4})"', page)
    assert best == ["n0000", "n0001"]  # the path from the root to the winner
    assert 'class="node st-wrong_result"' in page and 'class="node st-compile_error"' in page
    assert f'href="/runs/{run.root.name}/tasks/{softmax_task.task_id}/nodes/n0002"' in page
    assert "12 of 3200 elements outside the tolerance" in page  # failures visible without a click


def test_a_node_page_has_source_diff_checks_errors_timings_and_logs(client, run, softmax_task):
    url = f"/runs/{run.root.name}/tasks/{softmax_task.task_id}/nodes"
    page = client.get(f"{url}/n0001").text
    assert 'class="code source"' in page and "kf_forward" in page
    assert "+/*" in re.sub(r"<[^>]+>", "", page) and "@@" in page  # the diff against n0000, highlighted
    assert page.count(">passed<") == len(views.CHECKS)
    assert "real0" in page and "fresh-large" in page and "1.00e-07" in page and "5.00e-08" in page
    assert "torch.compile default" in page and "memory floor" in page and "GB/s" in page
    assert "Again, alone, as a finalist" in page and "worker log of n0001" in page
    failed = client.get(f"{url}/n0002").text
    assert ">failed<" in failed and ">not reached<" in failed and "worst at index (1, 3, 7)" in failed
    states = re.findall(r'<span class="status (passed|failed|not-reached)">', failed)
    assert states.index("failed") == list(views.CHECKS).index("values")
    llm = client.get(f"{url}/n0003").text
    assert "Transcript" in llm and "Write a softmax." in llm and "You write kernels." in llm


def test_no_secret_is_shown(client, run, softmax_task, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    urls = ["/", f"/runs/{run.root.name}/", f"/runs/{run.root.name}/summary.json",
            f"/runs/{run.root.name}/tasks/{softmax_task.task_id}"]
    urls += [f"/runs/{run.root.name}/tasks/{softmax_task.task_id}/nodes/n000{i}" for i in range(4)]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200 and SECRET not in response.text, url


@pytest.mark.parametrize("url", [
    "/runs/..%2F..%2Fetc%2Fpasswd/", "/runs/%2e%2e/", "/runs/.hidden/", "/runs/outside/",
    "/runs/{run}/tasks/..%2F..%2F..%2Fetc", "/runs/{run}/tasks/{task}/nodes/..%2F..%2Fbaseline.json",
    "/runs/{run}/tasks/{task}/nodes/n9999", "/runs/{run}/fragments/..%2Fconfig.json",
    "/static/vendor/..%2F..%2Fapp.py", "/static/vendor/%2e%2e/%2e%2e/app.py", "/runs/{run}/../../../etc/passwd",
])
def test_no_path_outside_the_runs_folder_can_be_read(client, run, softmax_task, runs_dir: Path, url: str):
    outside = runs_dir.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "config.json").write_text(json.dumps({"model_name": "SECRET-OUTSIDE"}))
    (runs_dir / ".hidden").mkdir(exist_ok=True)
    (runs_dir / ".hidden" / "config.json").write_text("{}")
    response = client.get(url.format(run=run.root.name, task=softmax_task.task_id))
    assert response.status_code == 404, (url, response.text[:200])
    assert "SECRET-OUTSIDE" not in response.text and "root:" not in response.text


def test_a_run_folder_linked_from_outside_is_not_served(client, runs_dir: Path):
    outside = runs_dir.parent / "elsewhere"
    outside.mkdir()
    (outside / "config.json").write_text(json.dumps({"model_name": "SECRET-OUTSIDE"}))
    (runs_dir / "linked").symlink_to(outside)
    assert client.get("/runs/linked/").status_code == 404
    assert "SECRET-OUTSIDE" not in client.get("/").text


def test_a_half_written_run_shows_what_can_be_read(client, runs_dir: Path, softmax_task):
    store = write_run(runs_dir, softmax_task, finished=False)
    task_id = softmax_task.task_id
    write_node(store, task_id, "n0004", "n0001", None)  # in flight: started, no result yet
    (store.root / "tasks" / task_id / "nodes" / "n0002" / "result.json").write_text('{"status": "ok", "tim')
    with open(store.root / "events.jsonl", "a") as f:
        f.write("not json at all\n")
        f.write('{"time": 1, "kind": "node", "task": "' + task_id + '", "node": "n00')  # torn last line
    (store.root / "summary.json").unlink(missing_ok=True)
    run_page = client.get(f"/runs/{store.root.name}/")
    assert run_page.status_code == 200 and "running" in run_page.text
    assert "cannot be read" in run_page.text and "not JSON" in run_page.text
    task_page = client.get(f"/runs/{store.root.name}/tasks/{task_id}").text
    assert 'class="node st-running" data-node="n0004"' in task_page and "n0004" in task_page
    assert "n0002" not in node_ids(task_page)  # its torn result: left out, and said
    node = client.get(f"/runs/{store.root.name}/tasks/{task_id}/nodes/n0004").text
    assert "still being evaluated" in node and 'sse-connect=' in node


def test_a_run_whose_process_died_shows_its_unfinished_nodes_as_lost(client, runs_dir: Path, softmax_task):
    store = write_run(runs_dir, softmax_task, finished=False, pid=2 ** 22 + 12345)  # no such process
    write_node(store, softmax_task.task_id, "n0004", "n0001", None)
    page = client.get(f"/runs/{store.root.name}/tasks/{softmax_task.task_id}").text
    assert 'class="node st-lost" data-node="n0004"' in page
    assert "stopped" in client.get("/").text


def test_a_run_with_only_its_config_and_a_broken_one_do_not_take_the_server_down(client, runs_dir: Path):
    capturing = runs_dir / "20261201-000000-capturing"
    capturing.mkdir()
    (capturing / "config.json").write_text(json.dumps({"model_name": "m", "resolved_backend": "cpu", "device": "cpu"}))
    broken = runs_dir / "20261201-000001-broken"
    broken.mkdir()
    (broken / "config.json").write_text("{ torn")
    (broken / "tasks").mkdir()
    (broken / "tasks" / "t0").write_text("a file where a folder should be")
    assert client.get("/").status_code == 200
    assert "No task yet" in client.get(f"/runs/{capturing.name}/").text
    page = client.get(f"/runs/{broken.name}/")
    assert page.status_code == 200 and "config.json cannot be read" in page.text


def test_an_error_inside_a_page_is_that_pages_error(runs_dir, run, monkeypatch):
    client = TestClient(make_app(runs_dir), raise_server_exceptions=False)

    def broken(*args):
        raise RuntimeError("a view that breaks")

    monkeypatch.setattr(views, "hot_rows", broken)
    page = client.get(f"/runs/{run.root.name}/")
    assert page.status_code == 500 and "a view that breaks" in page.text and "Traceback" not in page.text
    monkeypatch.undo()
    assert client.get(f"/runs/{run.root.name}/").status_code == 200


def test_the_event_stream_says_update_for_each_new_batch_of_events(run):
    class Request:
        calls = 0

        async def is_disconnected(self) -> bool:
            self.calls += 1
            if self.calls == 2:  # a node finishes while the page is open
                run.emit(NodeFinished(task="t", node="n0009", status="ok"))
            return self.calls > 3

    async def collect() -> list[str]:
        return [chunk async for chunk in _stream(run.root / "events.jsonl", Request())]

    chunks = asyncio.run(collect())
    assert chunks[0].startswith("event: update")  # at once: the page may be older than the stream
    updates = [c for c in chunks[1:] if c.startswith("event: update")]
    assert len(updates) == 1 and '"node"' in updates[0] and '"t"' in updates[0]


def test_events_half_a_second_apart_go_out_in_one_update_none_lost(run):
    # a page's parts are fetched on each update; the server spaces them (SPACING_S), so a task's
    # end just after its last node arrives late rather than never (htmx's throttle would drop it)
    class Request:
        calls = 0

        async def is_disconnected(self) -> bool:
            self.calls += 1
            if self.calls == 2:
                run.emit(NodeFinished(task="t1", node="n0009", status="ok"))
            if self.calls == 3:
                run.emit(TaskEnded(task="t2", candidates=4))
            return self.calls > 5

    async def collect() -> list[str]:
        return [chunk async for chunk in _stream(run.root / "events.jsonl", Request())]

    updates = [c for c in asyncio.run(collect())[1:] if c.startswith("event: update")]
    assert len(updates) == 1
    data = json.loads(updates[0].split("data: ", 1)[1])
    assert data == {"kinds": ["node", "task_end"], "tasks": ["t1", "t2"]}


def test_old_event_lines_read_back(tmp_path: Path):
    # a line written before events were typed (no standing fields) and one of a kind from the future
    old = event_from_json({"time": 5.0, "kind": "node", "task": "t", "node": "n0001", "status": "ok", "extra": 1})
    assert isinstance(old, NodeFinished) and old.node == "n0001" and old.counts == {} and old.time == 5.0
    future = event_from_json({"time": 6.0, "kind": "telepathy", "x": 1})
    assert future.to_json() == {"time": 6.0, "kind": "telepathy", "x": 1}


def test_the_best_so_far_counts_a_speedup_only_beyond_the_noise(run, softmax_task):
    from kernforge.search.runs import read_run_partial

    task = views.find_task(read_run_partial(run.root), softmax_task.task_id)
    # n0000 is correct at 1.06x but inside eager's noise (p80 over eager's p20): eager's 1.0; n0001
    # beat eager at 2.00x; the failures after it change nothing
    assert [(i, round(best, 2)) for i, _, best in views.best_so_far(task)] == [(1, 1.0), (2, 2.0), (3, 2.0), (4, 2.0)]


def test_a_field_of_the_wrong_type_reads_as_its_default():
    event = event_from_json({"time": "noon", "kind": "task_start", "task": "t", "share": "a lot", "iterations": 4.5,
                             "eager_p50_ms": 3, "resumed_nodes": True, "op": None})
    assert (event.task, event.share, event.iterations, event.op) == ("t", 0.0, 0, "")
    assert event.eager_p50_ms == 3 and event.resumed_nodes == 0 and isinstance(event.time, float)


def test_a_page_asked_for_under_another_host_name_is_refused(runs_dir: Path, run):
    # a web page elsewhere that points its own name at 127.0.0.1 (DNS rebinding) gets nothing
    client = TestClient(make_app(runs_dir, ["127.0.0.1", "localhost"]), base_url="http://127.0.0.1:8765")
    assert client.get("/").status_code == 200
    refused = client.get("/", headers={"host": "attacker.example:8765"})
    assert refused.status_code == 400 and "tiny_softmax" not in refused.text


def test_a_node_in_flight_when_a_resumed_run_was_killed_is_lost_while_the_resume_runs(client, runs_dir: Path,
                                                                                        softmax_task):
    from kernforge.store.events import RunStarted

    store = write_run(runs_dir, softmax_task, finished=False, pid=2 ** 22 + 12345)
    write_node(store, softmax_task.task_id, "n0004", "n0001", None)  # the killed run's last candidate
    store.emit(RunStarted(resumed=True, pid=os.getpid(), host=os.uname().nodename))  # resumed, alive
    write_node(store, softmax_task.task_id, "n0005", "n0001", None)  # the resumed run's, in flight
    page = client.get(f"/runs/{store.root.name}/tasks/{softmax_task.task_id}").text
    assert 'class="node st-lost" data-node="n0004"' in page and 'class="node st-running" data-node="n0005"' in page


def test_records_of_the_wrong_shape_are_left_out_and_said(client, runs_dir: Path, softmax_task):
    store = write_run(runs_dir, softmax_task)
    (store.root / "skipped.json").write_text(json.dumps(["not a row", {"op": "aten::x", "share": "lots"}]))
    (store.root / "summary.json").write_text("[1, 2]")
    with open(store.root / "events.jsonl", "a") as f:
        f.write(json.dumps({"time": 9e9, "kind": "tasks", "tasks": ["t-not-a-dict", 3]}) + "\n")
    page = client.get(f"/runs/{store.root.name}/")
    assert page.status_code == 200 and "aten::x" in page.text and "summary is not the record" in page.text
    assert client.get("/").status_code == 200


def test_the_run_header_says_the_phase_under_way_while_the_run_runs(client, runs_dir: Path, softmax_task):
    from kernforge.store.events import PhaseStarted

    store = write_run(runs_dir, softmax_task, finished=False)
    header = f"/runs/{store.root.name}/fragments/header"
    assert "now:" not in client.get(header).text  # a run from before phase_start events
    store.emit(PhaseStarted(phase="compiled_profile"))
    assert "now: compiled profile</span>" in client.get(header).text
    store.emit(PhaseStarted(phase="candidates", done=1, total=4, task=softmax_task.task_id))
    assert "now: candidates (1/4)" in client.get(header).text
    # the search's count goes on with the task's nodes; another task's do not count
    store.emit(NodeFinished(task=softmax_task.task_id, node="n0005", status="ok", candidates=3))
    store.emit(NodeFinished(task="t9-other", node="n0000", status="ok", candidates=9))
    assert "now: candidates (3/4)" in client.get(header).text
    finished = write_run(runs_dir, softmax_task)
    finished.emit(PhaseStarted(phase="apply"))
    assert "now:" not in client.get(f"/runs/{finished.root.name}/fragments/header").text


def test_two_runs_side_by_side_match_their_tasks_by_op_signature(client, runs_dir: Path, softmax_task):
    a = write_run(runs_dir, softmax_task)
    b = write_run(runs_dir, softmax_task, finished=False)  # its finalist not confirmed yet
    (b.root / "summary.json").write_text(json.dumps({"tasks": [], "end_to_end": {"speedups": {
        "patched eager vs eager": {"speedup": 1.05, "verdict": "within noise"},
        "patched eager, CUDA graph vs eager, CUDA graph": {"speedup": 1.4, "verdict": "faster"}}}}))
    page = client.get(f"/compare?a={a.root.name}&b={b.root.name}")
    assert page.status_code == 200
    html = page.text
    assert html.count(a.root.name) >= 2 and html.count(b.root.name) >= 2  # both named, both linked
    rows = re.findall(r'<tr data-signature="([^"]+)">(.*?)</tr>', html, re.DOTALL)
    assert [sig for sig, _ in rows] == [softmax_task.signature]  # one op, matched across the runs
    cells = re.findall(r"<td[^>]*>(.*?)</td>", rows[0][1], re.DOTALL)
    text = [re.sub(r"<[^>]+>", "", c).strip() for c in cells]
    assert text[3] == "1.92x" and "ok 2" in text[4] and "wrong_result 1" in text[4]  # A: its finalist
    # B: not confirmed yet, so its search's own figure (as its run page shows it)
    assert text[5] == "2.00x" and "compile_error 1" in text[6]
    assert text[7] == f"{2.0 / (0.100 / 0.052):.2f}x"  # B's best over A's
    end = html[html.index('class="end-to-end"'):]
    end = end[:end.index("</table>")]
    # apply's figures of either run, side by side; a comparison one run lacks is "-"
    assert re.search(r"patched eager vs eager</td><td[^>]*>1.21x</td><td[^>]*>1.05x, within noise", end)
    assert re.search(r"patched compile vs compile</td><td[^>]*>1.01x, within noise</td><td[^>]*>-<", end)
    assert re.search(r"CUDA graph</td><td[^>]*>-</td><td[^>]*>1.40x<", end)


def test_compare_lists_an_op_only_one_run_searched_and_takes_the_runs_forms_names(client, runs_dir: Path,
                                                                                  softmax_task):
    from dataclasses import replace

    a = write_run(runs_dir, softmax_task)
    other = replace(softmax_task, signature="sig-other", task_id="t0-sig-other")
    b = write_run(runs_dir, other)
    html = client.get(f"/compare?run={a.root.name}&run={b.root.name}").text  # the runs list's form
    rows = dict(re.findall(r'<tr data-signature="([^"]+)">(.*?)</tr>', html, re.DOTALL))
    assert list(rows) == [softmax_task.signature, "sig-other"]  # a's tasks first, then b's own
    assert rows[softmax_task.signature].count("not searched") == 1 and "not searched" in rows["sig-other"]


@pytest.mark.parametrize("query, status", [("", 400), ("?a={a}", 400), ("?a={a}&b=nope", 404),
                                           ("?a={a}&b=..%2F..%2Fetc", 404), ("?run={a}&run={a}&run={a}", 400)])
def test_compare_needs_two_runs_of_the_folder(client, run, query: str, status: int):
    response = client.get("/compare" + query.format(a=run.root.name))
    assert response.status_code == status and "Traceback" not in response.text


def test_a_node_page_draws_its_timings_against_eager_and_compile(client, run, softmax_task):
    import xml.etree.ElementTree as ET

    page = client.get(f"/runs/{run.root.name}/tasks/{softmax_task.task_id}/nodes/n0001").text
    svgs = re.findall(r'<svg[^>]*class="plot timings".*?</svg>', page, re.DOTALL)
    assert len(svgs) == 2  # the search's timing and the finalist's second one
    ns = "{http://www.w3.org/2000/svg}"
    root = ET.fromstring(svgs[0])
    titles = [g.find(f"{ns}title").text for g in root.iter(f"{ns}g") if "spread" in g.get("class", "")]
    # from result.json (candidate p50 0.050, eager 0.100) and baseline.json (compile 0.080)
    assert any(t.startswith("candidate: p20 0.0485, p50 0.0500, p80 0.0515") for t in titles)
    assert any(t.startswith("eager (same worker): p20 0.0950, p50 0.1000, p80 0.1050") for t in titles)
    assert any(t.startswith("torch.compile default: p20 0.0776, p50 0.0800") for t in titles)
    assert any(t.startswith("memory floor") for t in titles)
    assert "0.0520" in svgs[1]  # the confirmation's candidate
    failed = client.get(f"/runs/{run.root.name}/tasks/{softmax_task.task_id}/nodes/n0002").text
    assert "plot timings" not in failed  # a rejected candidate was not timed: nothing to draw


def test_the_live_pages_carry_the_table_and_tree_controls_and_the_report_does_not(client, run, softmax_task):
    from kernforge.report.html import report
    from kernforge.search.runs import read_run_partial

    task = client.get(f"/runs/{run.root.name}/tasks/{softmax_task.task_id}").text
    assert '<script src="/static/kernforge.js">' in task
    assert 'data-table="nodes"' in task and 'id="filter-nodes"' in task and f'data-tree="{softmax_task.task_id}"' in task
    statuses = re.findall(r'<option value="([^"!]+)">', task)
    assert statuses == ["compile_error", "ok", "wrong_result"]  # the statuses this task's candidates have
    run_page = client.get(f"/runs/{run.root.name}/").text
    assert 'class="pick"' in client.get("/").text and 'id="filter-hot"' in run_page and 'id="filter-skipped"' in run_page
    script = client.get("/static/kernforge.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    html = report(read_run_partial(run.root)).html
    assert 'class="table-tools"' not in html and 'class="pick"' not in html and "data-tree=" not in html
