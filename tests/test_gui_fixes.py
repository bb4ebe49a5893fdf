"""Small display defects, each pinned: the pause icon, the frame rate, LK's titles, stage colours by name."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QStyle  # noqa: E402

from engine.api import RunConfig, RunRecorder, Session, run_title, save  # noqa: E402
from gui.main_window import MainWindow, format_fps  # noqa: E402
from gui.model import RunData  # noqa: E402
from gui.settings import Settings  # noqa: E402
from gui.widgets.charts import ChartsPanel  # noqa: E402
from gui.widgets.stage_colours import FIXED_STAGES, stage_colour  # noqa: E402
from gui.widgets.transport import Transport  # noqa: E402
from tests.helpers import moving_square_video  # noqa: E402

ICON_PX = 16
RUN_TIMEOUT_MS = 20_000
NTSC_FPS = 30000 / 1001


@pytest.fixture
def settings(tmp_path):
    return Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))


def _image(icon):
    return icon.pixmap(ICON_PX, ICON_PX).toImage()


def test_play_and_pause_are_style_icons_not_glyphs(qtbot):
    bar = Transport("Play / pause", ("back", "forward"), 60)
    qtbot.addWidget(bar)
    style = bar.style()
    play = _image(style.standardIcon(QStyle.StandardPixmap.SP_MediaPlay))
    pause = _image(style.standardIcon(QStyle.StandardPixmap.SP_MediaPause))
    assert not bar.play_button.icon().isNull() and bar.play_button.text() == ""
    assert _image(bar.play_button.icon()) == play
    bar.show_playing(True)
    assert _image(bar.play_button.icon()) == pause and bar.play_button.text() == ""
    bar.show_playing(False)
    assert _image(bar.play_button.icon()) == play


@pytest.mark.parametrize(("fps", "text"), [(NTSC_FPS, "29.97"), (24000 / 1001, "23.98"), (25.0, "25"),
                                           (12.5, "12.5"), (None, "?"), (0.0, "?")])
def test_frame_rate_reads_with_two_decimals_at_most(fps, text):
    assert format_fps(fps) == text


def test_status_bar_shows_the_rounded_frame_rate(qtbot, settings):
    w = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(w)
    w.set_video(moving_square_video(4, 32), fps=NTSC_FPS, path="/videos/clip.mp4")
    assert w.status_label.text() == "clip.mp4: 4 frames, 32x32, 29.97 fps"
    w.close()


def test_run_titles_name_only_the_settings_a_tracker_uses():
    config = RunConfig(tracker="corrtrack", precision="fp16", points_per_batch=256, frames_per_batch=16)
    assert run_title(config) == "corrtrack fp16 p256 f16"
    assert run_title(config, {"name": "corrtrack"}) == "corrtrack fp16 p256 f16"  # says nothing: all of them
    assert run_title(RunConfig(tracker="lk"), {"name": "lk", "tunable": []}) == "lk"
    assert run_title({"tracker": "x", "precision": "bf16"}, {"tunable": ["precision"]}) == "x bf16"


def test_lk_runs_and_reports_are_titled_without_precision_or_batch_sizes(qtbot, settings, tmp_path):
    w = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", device="cpu"))
    qtbot.addWidget(w)
    w.set_video(moving_square_video(6, 32), fps=10.0)
    w.set_grid(2)
    for _ in range(2):  # two runs: the second is compared with the first in the A/B view
        with qtbot.waitSignal(w.run_finished, timeout=RUN_TIMEOUT_MS):
            assert w.start_run()
        qtbot.waitUntil(lambda: not w.controller.running, timeout=5000)
    assert w.current.label == "lk" and [r.label for r in w.history] == ["lk", "lk"]
    w.tabs.setCurrentWidget(w.ab_view)
    assert w.ab_view._titles == {"A": "A: lk", "B": "B: lk"}
    w.close()
    recorder = RunRecorder()
    frames = moving_square_video(4, 32)
    queries = np.array([[0, 10.0, 10.0]], np.float32)
    for event in Session(frames, queries, RunConfig(tracker="lk", device="cpu")).events():
        recorder.add(event)
    report = recorder.build()
    assert RunData.from_report(report).label == "lk"
    replay = MainWindow(settings=settings, sampler=None)
    qtbot.addWidget(replay)
    assert replay.load_path(save(report, tmp_path / "lk.json"))
    assert replay.status_label.text() == "Report: lk" and replay.current.label == "lk"
    replay.close()


def _bar_colours(charts: ChartsPanel) -> dict[str, tuple[int, int, int]]:
    return {name: item.opts["brush"].color().getRgb()[:3] for name, item in charts._stage_bars.items()}


def test_stage_colours_follow_the_stage_name_not_the_order_it_ran_in(qtbot):
    assert stage_colour("refine") == FIXED_STAGES["refine"] != stage_colour("backbone")
    assert stage_colour("my_plugin.encoder") == stage_colour("my_plugin.encoder")  # stable for any name
    assert len(set(FIXED_STAGES.values())) == len(FIXED_STAGES)  # the known stages never share a colour
    seen = []
    for stages in (["backbone", "refine"], ["track_forward", "refine", "backbone"]):
        charts = ChartsPanel()
        qtbot.addWidget(charts)
        charts.show()
        charts.follow()
        charts.set_stages(stages)
        charts.add_batch(0.1, 10.0, {s: 1.0 for s in stages})
        count = len(stages)
        qtbot.waitUntil(lambda c=charts, n=count: len(c._stage_bars) == n, timeout=2000)
        seen.append(_bar_colours(charts))
        charts.stop()
    assert seen[0]["refine"] == seen[1]["refine"] == stage_colour("refine")
    assert seen[0]["backbone"] == seen[1]["backbone"] == stage_colour("backbone")
