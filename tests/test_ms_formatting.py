"""One way to write a time: the CLI's compare table, the Diagnosis, trade-off and capture panels all write
milliseconds as engine.core.units does (before: four formatters, each with its own digits)."""

from __future__ import annotations

import pytest

from engine.analysis.compare import compare_reports, format_compare
from engine.core.units import format_ms, ms_value
from tests.test_compare import a100_report, t4_report_with_planted_170x

#: values where the old formatters differed from units: 3 digits below 1 ms, one decimal to 1e4, no commas
TIMES_MS = (0.0123, 0.5, 5.126, 12.34, 12345.6)


def test_compare_writes_times_as_units_does():
    result = compare_reports(a100_report(), t4_report_with_planted_170x())
    result["a"]["total_ms"] = 5.126  # the old compare formatter: "5.13"
    first = format_compare(result).splitlines()[0]
    assert first.endswith(f"({ms_value(5.126)} ms per run)") and "(5.1 ms per run)" in first


@pytest.mark.parametrize("value", TIMES_MS)
def test_the_panels_write_times_as_units_does(value):
    pytest.importorskip("PySide6")
    from gui.panels import capture_panel, diagnosis, tradeoff_parts

    assert tradeoff_parts.fmt_ms(value) == format_ms(value)
    assert diagnosis._ms(value) == ms_value(value)
    assert capture_panel._ms(value) == ms_value(value)
    assert (tradeoff_parts.fmt_ms(None), diagnosis._ms(None), capture_panel._ms(None)) == ("—", "—", "")
