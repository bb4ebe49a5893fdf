"""The trade-off tab with accuracy files (eval/cycle --json): held-out AJ and real-clip cycle error beside the run
rows of the same tracker and precision, rows of their own for the rest, sorting, and Compare > add a file."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QSettings, Qt  # noqa: E402

from engine.core.config import PRECISION_UNUSED, RunConfig  # noqa: E402
from engine.core.errors import ReportError  # noqa: E402
from engine.report.accuracy_file import save_accuracy_file  # noqa: E402
from engine.report.files import load_report  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.panels.tradeoff import COL, TradeoffPanel  # noqa: E402
from gui.settings import Settings  # noqa: E402
from tests.test_accuracy_file import cycle_file, eval_file  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "data" / "h200"
ACCURACY_COLUMNS = ("held-out AJ", "real-clip cycle px", "cycle kept")


@pytest.fixture
def files(tmp_path):
    held = save_accuracy_file(eval_file(("corrtrack", "fp32", 0.70), ("corrtrack", "bf16", 0.69),
                                        ("corrtrack", "int8", 0.61), ("lk", PRECISION_UNUSED, 0.55)),
                              tmp_path / "heldout.json")
    cycle = save_accuracy_file(cycle_file(("corrtrack", "bf16", 1.25), ("lk", PRECISION_UNUSED, 0.3)),
                               tmp_path / "cycle.json")
    return held, cycle


def cells_by_precision(panel: TradeoffPanel) -> dict[str, dict[str, str]]:
    return {panel.table.item(r, COL["precision"]).text(): {name: panel.table.item(r, c).text()
                                                           for name, c in COL.items()}
            for r in range(panel.table.rowCount())}


def test_accuracy_files_fill_the_run_rows_and_add_rows_for_the_rest(qtbot, files):
    held, cycle = files
    panel = TradeoffPanel()
    qtbot.addWidget(panel)
    for precision in ("fp32", "bf16"):
        panel.add_report(load_report(GOLDEN / f"corrtrack_{precision}_p256_sample.json"))
    assert all(panel.table.isColumnHidden(COL[name]) for name in ACCURACY_COLUMNS)  # no file yet
    assert panel.add_file(held) == 4 and panel.add_file(cycle) == 2
    assert not any(panel.table.isColumnHidden(COL[name]) for name in ACCURACY_COLUMNS)
    rows = cells_by_precision(panel)
    assert set(rows) == {"fp32", "bf16", "int8", PRECISION_UNUSED}
    assert rows["fp32"]["held-out AJ"] == "0.700" and rows["fp32"]["real-clip cycle px"] == "—"
    assert rows["bf16"]["held-out AJ"] == "0.690" and rows["bf16"]["real-clip cycle px"] == "1.25"
    assert rows["bf16"]["cycle kept"] == "8/9" and rows["bf16"]["ms / run"] != "—"  # a run row: its speed too
    # no run of these: rows of their own, speed empty, so nothing loaded is invisible
    assert rows["int8"]["held-out AJ"] == "0.610" and rows["int8"]["ms / run"] == "—"
    assert rows["int8"]["tracker"] == "corrtrack" and rows["int8"]["machine"] == "NVIDIA H200"
    assert rows[PRECISION_UNUSED]["tracker"] == "lk" and rows[PRECISION_UNUSED]["real-clip cycle px"] == "0.3"
    assert len(panel.rows) == 2 and len(panel.accuracy_rows()) == 2  # the run model holds runs only
    assert {item.name() for item in panel.plot.listDataItems()} == {"fp32", "bf16"}  # speed needed to plot
    # the header and the cells say which set or clips the figure is of
    header = panel.table.horizontalHeaderItem(COL["held-out AJ"]).toolTip()
    assert "held-out set heldout (2 videos" in header and "heldout.json" in header
    assert "1 real clip: clip.mp4" in panel.table.horizontalHeaderItem(COL["real-clip cycle px"]).toolTip()
    r_bf16 = next(r for r in range(panel.table.rowCount()) if panel.table.item(r, COL["precision"]).text() == "bf16")
    tip = panel.table.item(r_bf16, COL["real-clip cycle px"]).toolTip()
    assert "median 1.25 px" in tip and "on the 7 points lk kept too" in tip


def test_accuracy_columns_sort_as_numbers_with_blanks_last(qtbot, files):
    held, cycle = files
    panel = TradeoffPanel()
    qtbot.addWidget(panel)
    panel.add_report(load_report(GOLDEN / "corrtrack_fp32_p256_sample.json"))
    panel.add_file(held)
    panel.add_file(cycle)
    panel.table.sortByColumn(COL["held-out AJ"], Qt.SortOrder.DescendingOrder)
    order = [panel.table.item(r, COL["precision"]).text() for r in range(panel.table.rowCount())]
    assert order == ["fp32", "bf16", "int8", PRECISION_UNUSED]  # 0.70 > 0.69 > 0.61 > 0.55
    panel.table.sortByColumn(COL["real-clip cycle px"], Qt.SortOrder.AscendingOrder)
    order = [panel.table.item(r, COL["precision"]).text() for r in range(panel.table.rowCount())]
    assert order[:2] == [PRECISION_UNUSED, "bf16"]  # 0.3 < 1.25, then the rows with no cycle figure
    panel.table.sortByColumn(COL["ms / run"], Qt.SortOrder.AscendingOrder)
    assert panel.table.item(0, COL["precision"]).text() == "fp32"  # the only timed row first
    panel.clear()
    assert panel.table.rowCount() == 0 and all(panel.table.isColumnHidden(COL[n]) for n in ACCURACY_COLUMNS)


def test_an_accuracy_file_alone_shows_its_rows_and_a_bad_one_changes_nothing(qtbot, files, tmp_path):
    held, _ = files
    panel = TradeoffPanel()
    qtbot.addWidget(panel)
    panel.add_file(held)
    assert panel.table.rowCount() == 4 and "accuracy only" in panel.note.text()
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "trackscope-eval", "version": 99}')
    with pytest.raises(ReportError, match="newer trackscope"):
        panel.add_file(bad)
    assert panel.table.rowCount() == 4


def test_compare_add_a_file_takes_an_accuracy_file_and_file_open_says_where_it_goes(qtbot, tmp_path, files,
                                                                                     monkeypatch):
    held, _ = files
    settings = Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    window = MainWindow(settings=settings, sampler=None, config=RunConfig(tracker="lk", points_per_batch=4))
    qtbot.addWidget(window)
    assert window.tradeoff is not None
    monkeypatch.setattr(window.files, "bench_path_dialog", lambda: str(held))
    window.add_bench_dialog()
    assert window.tabs.currentWidget() is window.tradeoff
    assert len(window.tradeoff.accuracy) == 4 and window.tradeoff.table.rowCount() == 4
    assert not window.load_path(held)  # File > Open: not a run report, and the message says where it goes
    assert "accuracy file" in window.banner.message and "Trade-offs" in window.banner.text.text()
    window.close()
