"""Issue 12, item 11: the stage axis' unit clear of 5-digit ticks, charts that scroll rather than cut off in a
narrow dock, whole plugin names in the tracker box, a queries CSV outside the frame refused on load, and the
CLI's fp16-on-CPU reason said once."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtGui import QFontMetricsF  # noqa: E402

from engine import cli  # noqa: E402
from engine.api import MAX_POINTS_PER_BATCH, RunConfig  # noqa: E402
from engine.io.video import write_video  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.panels.toggles import TogglesPanel  # noqa: E402
from gui.settings import Settings  # noqa: E402
from gui.widgets.charts import ChartsPanel  # noqa: E402
from tests.helpers import moving_square_video  # noqa: E402

STAGES = ["decode", "upload", "backbone", "cost_volume", "refine", "download"]
SLOW_MS = {"decode": 1200.0, "upload": 30.0, "backbone": 25000.0, "cost_volume": 12000.0, "refine": 1500.0,
           "download": 20.0}  # 40 s batches: ticks up to 50000 ms


def _slow_charts(qtbot, width: int) -> ChartsPanel:
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    charts.resize(width, 1000)
    charts.show()
    charts.set_stages(STAGES)
    for i in range(5):
        charts.add_batch(float(i + 1), sum(SLOW_MS.values()), SLOW_MS)
    charts._draw_stage_bars()
    charts.set_breakdown(charts.stage_totals())
    qtbot.wait(10)
    return charts


def test_stage_axis_unit_clears_five_digit_ticks(qtbot):
    charts = _slow_charts(qtbot, 520)
    axis = charts.stage_plot.getAxis("left")
    font = axis.style["tickFont"] or charts.glw.font()
    widest = QFontMetricsF(font).horizontalAdvance("50000")
    label = QFontMetricsF(axis.label.font()).height()  # the unit label is drawn rotated: its height is its width
    assert widest + label + axis.style["tickTextOffset"][0] <= axis.width(), (widest, label, axis.width())
    charts.stop()


def test_charts_in_a_narrow_dock_scroll_instead_of_cutting_off(qtbot):
    charts = _slow_charts(qtbot, 300)
    needed = charts.glw.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
    assert charts.glw.width() >= needed  # was squeezed to the dock, titles and labels cut at the right edge
    charts.stop()


def test_tracker_box_shows_a_long_plugin_name_whole(qtbot):
    name = "my_lab.trackers.experimental_variants:make_tracker_with_long_name"
    toggles = TogglesPanel(RunConfig(tracker=name))
    qtbot.addWidget(toggles)
    toggles.resize(200, 200)
    toggles.show()
    view = toggles.tracker.view()
    assert view.minimumWidth() >= toggles.tracker.fontMetrics().horizontalAdvance(name)
    assert name in toggles.tracker.toolTip()
    toggles.tracker.setCurrentText("lk")
    assert "lk" in toggles.tracker.toolTip() and name not in toggles.tracker.toolTip()


def test_toggles_hold_batch_sizes_within_their_range(qtbot):
    from engine.core.config import ConfigError

    with pytest.raises(ConfigError):  # RunConfig owns the limit: a size past it never reaches the toggles
        RunConfig(points_per_batch=10**7)
    toggles = TogglesPanel(RunConfig(points_per_batch=MAX_POINTS_PER_BATCH))
    qtbot.addWidget(toggles)
    assert toggles.config().points_per_batch == toggles.points.value() == toggles.points.maximum()


@pytest.fixture
def window(qtbot, tmp_path):
    w = MainWindow(settings=Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)), sampler=None,
                   config=RunConfig(tracker="lk"))
    qtbot.addWidget(w)
    w.set_video(moving_square_video(6, 32), fps=10.0)
    yield w
    w.close()


@pytest.mark.parametrize("row", ["0,40,10", "0,10,-3", "6,10,10", "-1,5,5"])
def test_queries_csv_outside_the_frame_is_refused_on_load(window, tmp_path, row):
    before = window.queries.copy()
    path = tmp_path / "q.csv"
    path.write_text(f"t,x,y\n0,5,5\n{row}\n")
    assert not window.load_path(path)
    assert "outside the video" in window.banner.message and "6 frames of 32x32" in window.banner.message
    np.testing.assert_array_equal(window.queries, before)  # the previous queries stay


def test_queries_csv_inside_the_frame_loads(window, tmp_path):
    path = tmp_path / "q.csv"
    path.write_text("t,x,y\n0,5,5\n5,31,31\n")
    assert window.load_path(path)
    assert window.queries.shape == (2, 3)


def test_fp16_on_the_cpu_gives_its_reason_once(tmp_path, capsys):
    video = tmp_path / "clip.mp4"
    write_video(video, moving_square_video(4, 32), fps=10)
    code = cli.main(["track", str(video), "--grid", "2", "--tracker", "corrtrack", "--device", "cpu", "--precision",
                     "fp16", "--out", str(tmp_path / "t.npz")])  # LK uses no precision: it is not refused one
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("fp16 on the CPU is refused") == 1, err


def test_a_precision_the_device_refuses_falls_back_to_fp32_saying_why(qtbot):
    """`--precision fp16` (or a saved fp16) on the CPU: fp32 selected, the gate's reason shown; not a disabled
    mode selected that fails at Run."""
    toggles = TogglesPanel(RunConfig(tracker="lk", device="cpu", precision="fp16"))
    qtbot.addWidget(toggles)
    assert toggles.config().precision == "fp32" and toggles.precision.currentText() == "fp32"
    assert "fp16 on the CPU" in toggles.gate_note.text() and "fp32 selected instead" in toggles.gate_note.text()
    toggles.precision.setCurrentText("bf16")  # the user's next choice clears the note
    assert toggles.gate_note.text() == ""
