"""The trade-off table's "vs direct" column: session/direct of a report with a direct reference, blank without."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
from engine.report.files import load_report  # noqa: E402
from engine.report.parts import DirectReference  # noqa: E402
from gui.panels.tradeoff import COL, TradeoffPanel  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "data" / "h200"


def test_vs_direct_column_reads_the_ratio_and_is_blank_without_a_reference(qtbot):
    panel = TradeoffPanel()
    qtbot.addWidget(panel)
    fp32 = load_report(GOLDEN / "corrtrack_fp32_p256_sample.json")  # recorded before the field: none
    bf16 = load_report(GOLDEN / "corrtrack_bf16_p256_sample.json")
    typical = bf16.typical_run_ms
    assert typical is not None
    bf16 = dataclasses.replace(bf16, direct=DirectReference(samples_ms=(typical / 1.02,) * 3, what="x"))
    panel.add_report(fp32)
    panel.add_report(bf16)
    cells = {panel.table.item(r, COL["precision"]).text(): panel.table.item(r, COL["vs direct"])
             for r in range(panel.table.rowCount())}
    assert cells["bf16"].text() == "1.02x"
    assert "median" in cells["bf16"].toolTip() and "3 run(s)" in cells["bf16"].toolTip()
    assert cells["fp32"].text() == ""
    assert "no direct-call reference" in cells["fp32"].toolTip()
