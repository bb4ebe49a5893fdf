"""The capture panel and its timeline (pytest-qt, offscreen) on the committed H200 deep-nested capture."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QPoint, QPointF, Qt  # noqa: E402
from PySide6.QtGui import QWheelEvent  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from engine.api import as_report  # noqa: E402
from gui.panels.capture_panel import COL_NAME, LOADING, NO_TRACE, ROLE, CapturePanel, short_kernel_name  # noqa: E402

DATA = Path(__file__).parent / "data" / "capture" / "call1"  # the first H200 call: summaries + traces
DEEP = DATA / "trace_deep_nested.json.gz"
LOAD_MS = 20_000


def _runs() -> dict:
    return {r["label"]: r for r in json.loads((DATA / "summaries.json").read_text())["runs"]}


@pytest.fixture(scope="module")
def deep_run() -> dict:
    return _runs()["deep_nested"]


@pytest.fixture
def panel(qtbot):
    p = CapturePanel()
    p.resize(1400, 900)
    qtbot.addWidget(p)
    p.show()
    yield p
    p.shutdown()


@pytest.fixture
def loaded(panel, qtbot, deep_run):
    with qtbot.waitSignal(panel.trace_loaded, timeout=LOAD_MS):
        panel.set_capture(deep_run["summary"], deep_run["findings"], DEEP)
        assert panel.trace_label.text() == LOADING  # shown until the worker's result arrives
    return panel


def _rows(panel) -> list:
    out = []

    def walk(item, depth):
        out.append((depth, item.text(COL_NAME), item.data(COL_NAME, ROLE)))
        for i in range(item.childCount()):
            walk(item.child(i), depth + 1)

    for i in range(panel.tree.topLevelItemCount()):
        walk(panel.tree.topLevelItem(i), 0)
    return out


def test_panel_shows_summary_tree_and_timeline(loaded, deep_run):
    s = deep_run["summary"]
    assert "5.22 ms unprofiled" in loaded.summary_label.text() and "116 kernels" in loaded.summary_label.text()
    rows = _rows(loaded)
    stages = [text for depth, text, _ in rows if depth == 0]
    assert stages == [st["stage"] for st in s["stages"]]
    kinds = {ref["kind"] for _, _, ref in rows}
    assert kinds == {"stage", "module", "kernel"}
    kernel = next(ref for depth, _, ref in rows if depth == 2)
    assert kernel["kind"] == "kernel" and kernel["module"]  # stage -> module -> kernel
    data = loaded.timeline.data
    assert data is not None and data.items == 924
    names = loaded.timeline.row_names
    assert names[:3] == ["host syncs", "memcpy", "stages"] and "stream 7 kernels" in names
    assert "modules 4" in names and "CPU ops 0 (thread 477)" in names
    assert loaded.trace_label.text().startswith("timeline: 924 items")


def test_clicking_a_finding_selects_its_module_in_the_tree_and_the_timeline(loaded, qtbot, monkeypatch):
    calls = []
    select = loaded.timeline.select
    monkeypatch.setattr(loaded.timeline, "select", lambda *a, **k: calls.append((a, k)) or select(*a, **k))
    # the bf16 capture of the same tracker adds a finding about the root's forward body
    launch_bound = next(f for f in _runs()["deep_nested bf16"]["findings"] if f["rule"] == "launch_bound_capture")
    loaded.findings = loaded.findings + [launch_bound]
    loaded.findings_list.clear()
    loaded._fill_findings(loaded.findings)
    assert loaded.findings_list.count() == 2
    full = loaded.timeline.x_range()
    item = loaded.findings_list.item(1)
    rect = loaded.findings_list.visualItemRect(item)
    qtbot.mouseClick(loaded.findings_list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    ref = loaded.tree.currentItem().data(COL_NAME, ROLE)
    assert (ref["stage"], ref["module"]) == ("(outside stages)", "(forward body of DeepNested)")
    assert calls and calls[-1][0][0] == "(forward body of DeepNested)"
    assert loaded.timeline.highlighted_count > 0
    x0, x1 = loaded.timeline.x_range()
    assert x1 - x0 <= full[1] - full[0] + 1e-6
    # the H200 run's own finding: the GPU idle outside every stage
    item = loaded.findings_list.item(0)
    qtbot.mouseClick(loaded.findings_list.viewport(), Qt.MouseButton.LeftButton,
                     pos=loaded.findings_list.visualItemRect(item).center())
    ref = loaded.tree.currentItem().data(COL_NAME, ROLE)
    assert (ref["stage"], ref["module"]) == ("(outside stages)", "(outside stages)")
    assert loaded.timeline.highlighted_count > 0


def test_clicking_a_kernel_row_highlights_every_launch_of_it(loaded, qtbot, deep_run):
    top = deep_run["summary"]["top_kernels"][0]
    item = next(it for it in _tree_items(loaded) if (it.data(COL_NAME, ROLE) or {}).get("name") == top["name"])
    assert item.text(COL_NAME) == short_kernel_name(top["name"])
    loaded.tree.scrollToItem(item)
    qtbot.mouseClick(loaded.tree.viewport(), Qt.MouseButton.LeftButton, pos=loaded.tree.visualItemRect(item).center())
    assert loaded.timeline.highlighted_count == top["count"]


def _tree_items(panel):
    out = []

    def walk(item):
        out.append(item)
        for i in range(item.childCount()):
            walk(item.child(i))

    for i in range(panel.tree.topLevelItemCount()):
        walk(panel.tree.topLevelItem(i))
    return out


def test_zoom_and_wheel_change_the_time_range_only(loaded, qtbot):
    tl = loaded.timeline
    x0, x1 = tl.x_range()
    y_before = tl.vb.viewRange()[1]
    tl.zoom(4.0)
    z0, z1 = tl.x_range()
    assert z1 - z0 == pytest.approx((x1 - x0) / 4, rel=1e-3)
    view = tl.plot.viewport()
    center = QPointF(view.width() / 2, view.height() / 2)
    wheel = QWheelEvent(center, view.mapToGlobal(center), QPoint(0, 0), QPoint(0, 240), Qt.MouseButton.NoButton,
                        Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(view, wheel)
    w0, w1 = tl.x_range()
    assert w1 - w0 < z1 - z0  # the wheel zoomed in further
    assert tl.vb.viewRange()[1] == pytest.approx(y_before)  # y stays fixed


def test_hover_and_click_report_the_item_under_the_cursor(loaded, qtbot):
    tl = loaded.timeline
    stages = tl.data.lane("stages")
    mid = float(stages.start_ms[2] + stages.dur_ms[2] / 2)  # "updater"
    row = tl.row_names.index("stages")
    scene = tl.vb.mapViewToScene(QPointF(mid, row + 0.5))
    tl._on_moved(scene)
    assert tl.info.text().startswith("stages: updater")
    pos = tl.plot.mapFromScene(scene)
    with qtbot.waitSignal(tl.itemClicked, timeout=2000) as blocker:
        qtbot.mouseClick(tl.plot.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert blocker.args[0]["name"] == "updater" and blocker.args[0]["dur_ms"] > 0


def test_missing_trace_shows_the_table_and_says_so(panel, deep_run, tmp_path):
    panel.set_capture(deep_run["summary"], deep_run["findings"], None)
    assert panel.trace_label.text() == NO_TRACE
    assert panel.tree.topLevelItemCount() == len(deep_run["summary"]["stages"])
    assert panel.findings_list.count() == len(deep_run["findings"])
    assert panel.timeline.data is None and panel.timeline.select("updater") == 0
    panel.set_capture(deep_run["summary"], deep_run["findings"], tmp_path / "gone.trace.json.gz")
    assert panel.trace_label.text().startswith("trace missing: gone.trace.json.gz")


@pytest.mark.parametrize("bad", [{"device": 3}, "not a dict", None, {"version": 99}])
def test_malformed_summary_shows_an_error_text(panel, bad):
    panel.set_capture(bad, [{"severity": "info"}, "junk"], None)
    assert panel.summary_label.text().startswith("capture summary unreadable")
    assert panel.tree.topLevelItemCount() == 0
    assert panel.findings_list.count() == 1  # the one finding that is a dict


def test_texts_from_the_file_stay_plain(panel, deep_run):
    summary = json.loads(json.dumps(deep_run["summary"]))
    summary["device"] = "<b>cuda</b>"
    summary["cells"][0]["module"] = "<i>odd.module</i>"
    finding = {"rule": "x", "severity": "warning", "title": "<a href='x'>click</a>",
               "stage": summary["cells"][0]["stage"], "module": "<i>odd.module</i>"}
    panel.set_capture(summary, [finding], None)
    assert panel.summary_label.textFormat() == Qt.TextFormat.PlainText
    assert panel.summary_label.text().startswith("<b>cuda</b>")
    assert any(text == "<i>odd.module</i>" for _, text, _ in _rows(panel))
    assert "<a href='x'>click</a>" in panel.findings_list.item(0).text()
    assert panel.trace_label.textFormat() == Qt.TextFormat.PlainText
    assert panel.timeline.info.textFormat() == Qt.TextFormat.PlainText
    panel.select_finding(0)
    assert panel.tree.currentItem().text(COL_NAME) == "<i>odd.module</i>"


def test_a_newer_capture_makes_an_older_load_stale(panel, qtbot, deep_run):
    panel.set_capture(deep_run["summary"], deep_run["findings"], DEEP)
    panel.set_capture(deep_run["summary"], deep_run["findings"], None)
    assert panel.shutdown()
    qtbot.waitUntil(lambda: not panel.lingering, timeout=10_000)  # the older load ended (its result dropped)
    assert panel.timeline.data is None and panel.trace_label.text() == NO_TRACE


def test_an_unreadable_trace_is_reported(panel, qtbot, deep_run, tmp_path):
    bad = tmp_path / "bad.trace.json.gz"
    bad.write_bytes(gzip.compress(b"{not json"))
    with qtbot.waitSignal(panel.trace_failed, timeout=LOAD_MS) as blocker:
        panel.set_capture(deep_run["summary"], deep_run["findings"], bad)
    assert "bad.trace.json.gz" in blocker.args[0] and panel.trace_label.text() == blocker.args[0]
    assert panel.tree.topLevelItemCount() > 0


def test_a_report_finds_its_trace_beside_it(panel, qtbot, deep_run, tmp_path):
    shutil.copy(DEEP, tmp_path / "R.trace.json.gz")
    capture = {**deep_run["summary"], "trace_file": "../elsewhere/R.trace.json.gz"}  # name only is used
    report = as_report({"format": "trackscope-report", "version": 2, "environment": {}, "config": {}, "stages": [],
                        "runs": [], "totals": {}, "capture": capture})
    with qtbot.waitSignal(panel.trace_loaded, timeout=LOAD_MS):
        panel.set_report(report, tmp_path / "R.json")
    assert panel.findings_list.count() >= 1  # diagnosed from the summary here
    assert panel.timeline.data.items == 924


def test_a_lane_of_many_kernels_draws_with_a_level_of_detail(qtbot):
    from engine.capture.timeline import TimelineData
    from engine.capture.trace import GpuKernel, Range, RuntimeCall, Trace
    from gui.widgets.timeline import DIRECT_MAX, TimelineWidget

    n = 3 * DIRECT_MAX
    trace = Trace(runs=[Range("trackscope.run", 1, 0.0, n * 2.0 + 10)],
                  runtime=[RuntimeCall("cudaLaunchKernel", 1, i * 2.0, 1.0, i, "launch") for i in range(n)],
                  kernels=[GpuKernel(f"k{i % 5}", 0, 7, i * 2.0 + 1.5, 0.5, i) for i in range(n)])
    data = TimelineData.from_trace(trace, max_items=n + n // 2)
    assert data.dropped == n // 2 and len(data.lane("CUDA API (thread 1)")) == n  # the longest (1 us) kept
    tl = TimelineWidget()
    tl.resize(1000, 400)
    qtbot.addWidget(tl)
    tl.show()
    tl.set_data(data)
    assert not tl.grab().isNull()  # whole run: per-pixel columns
    tl.zoom(200.0)
    assert not tl.grab().isNull()  # zoomed: the visible rects only
    kernels = data.lane("stream 7 kernels")
    assert tl.select("k1") == int((kernels.label == data.names.index("k1")).sum()) > 0


def test_user_functions_are_rows_below_their_module(panel, deep_run):
    """Kernels a forward body launched through helper functions are listed as function rows under the module."""
    import copy

    summary = copy.deepcopy(deep_run["summary"])
    cell = max(summary["cells"], key=lambda c: c["kernel_ms"])
    summary.setdefault("evidence", {})["functions"] = [
        {"module": cell["module"], "function": "correlate (mytracker/model.py:80)",
         "site": "mytracker/model.py:80 correlate",
         "layer": "user", "wall_ms": 0.4, "kernel_ms": 1.25, "kernels": 12, "launches": 12, "syncs": 0, "cpu_ops": 20,
         "stage": cell["stage"]},
        {"module": cell["module"], "function": "_to_numpy (engine/trackers/plugin.py:103)",
         "site": "engine/trackers/plugin.py:103 _to_numpy", "layer": "trackscope", "wall_ms": 0.2, "kernel_ms": 0.0,
         "kernels": 0, "launches": 0, "syncs": 2, "cpu_ops": 3, "stage": cell["stage"]},
    ]
    panel.set_capture(summary, deep_run["findings"], None)
    rows = _rows(panel)
    module_depth = next(d for d, text, ref in rows if ref and ref.get("kind") == "module"
                        and ref["module"] == cell["module"] and ref["stage"] == cell["stage"])
    functions = [(d, text, ref) for d, text, ref in rows if ref and ref.get("kind") == "function"]
    assert [ref["function"] for _, _, ref in functions] == ["correlate (mytracker/model.py:80)",
                                                           "_to_numpy (engine/trackers/plugin.py:103)"]
    assert all(d == module_depth + 1 and ref["module"] == cell["module"] for d, _, ref in functions)
    flags = Qt.MatchFlag.MatchStartsWith | Qt.MatchFlag.MatchRecursive
    own = next(item for item in panel.tree.findItems("ƒ _to_numpy", flags))
    assert "trackscope's own" in own.text(4)


def test_source_lines_of_a_forward_body_are_rows_below_their_module(panel, deep_run):
    """The line rows (the capture's marks of a forward's statements) are children of their forward-body row, beside
    its function rows, named by file:line and listing the ops that launched their kernels."""
    import copy

    summary = copy.deepcopy(deep_run["summary"])
    cell = max(summary["cells"], key=lambda c: c["kernel_ms"])
    evidence = summary.setdefault("evidence", {})
    evidence["functions"] = [
        {"module": cell["module"], "function": "correlate (mytracker/model.py:80)", "site": "mytracker/model.py:80 "
         "correlate", "layer": "user", "wall_ms": 0.4, "kernel_ms": 1.25, "kernels": 12, "launches": 12, "syncs": 0,
         "cpu_ops": 20, "stage": cell["stage"]}]
    forward = "forward (mytracker/model.py:19)"
    evidence["lines"] = [
        {"module": cell["module"], "function": forward, "line": "mytracker/model.py:154 forward",
         "kernel_ms": 11.1, "kernels": 48, "launches": 40, "ops": ["aten::einsum", "aten::to (autocast casts)"],
         "wall_ms": 0.9, "stage": cell["stage"]},
        {"module": cell["module"], "function": forward, "line": "mytracker/model.py:60 forward",
         "kernel_ms": 0.0, "kernels": 0, "launches": 0, "ops": [], "wall_ms": 0.001, "stage": cell["stage"]}]
    summary["shares"]["kernel_below_forward"] = 0.75
    summary["shares"]["kernel_below_forward_or_line"] = 0.99
    panel.set_capture(summary, deep_run["findings"], None)
    rows = _rows(panel)
    module_depth = next(d for d, text, ref in rows if ref and ref.get("kind") == "module"
                        and ref["module"] == cell["module"] and ref["stage"] == cell["stage"])
    lines = [(d, text, ref) for d, text, ref in rows if ref and ref.get("kind") == "line"]
    assert [(text, ref["line"]) for _, text, ref in lines] == [("≡ line 154 of model.py",
                                                                "mytracker/model.py:154 forward")]
    assert all(d == module_depth + 1 and ref["module"] == cell["module"] for d, _, ref in lines)  # beside the ƒ rows
    item = panel.tree.findItems("≡ line 154", Qt.MatchFlag.MatchStartsWith | Qt.MatchFlag.MatchRecursive)[0]
    assert item.text(4) == "aten::einsum, aten::to (autocast casts)" and item.text(3) == "48"
    assert item.toolTip(0).startswith("mytracker/model.py:154 forward")
    assert "below the tracker's forward 75% (99% with its lines)" in panel.summary_label.text()
