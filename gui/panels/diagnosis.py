"""Diagnosis: the current report's findings with their evidence, and a what-if on another GPU.

Findings come from the report's analysis, run on load (``engine.api.analyse``: today's rules, the
capture rules on a deep capture too); findings the report's writer recorded that today's rules no
longer give follow, marked "recorded". Each is a tree row with a severity dot, its title, and children
for the evidence numbers and the suggested change. The what-if projects the report's per-stage times
onto a GPU from ``engine.specs.GPUS`` with ``engine.api.project_by_batch`` (each batch at the precision it
ran with) and lists the assumptions it makes. The header names a run by what its batches ran with.

A report without a cost model (a live run's, a ``track --report`` file) asks for one with
``count_requested``; the counting controller (``gui.controllers.cost``) counts it in a worker and hands
the counted report back through ``set_counted`` (or a reason through ``set_count_failed``), and the
panel shows "counting…" meanwhile. Without a controller attached it says there is no cost model.
"""

from __future__ import annotations

import math
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QScrollArea,
    QSplitter,
    QTableWidgetItem,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.api import (
    Analysis,
    Report,
    UserError,
    analyse,
    format_time_ratio,
    ms_value,
    project_by_batch,
    ratio_value,
    specs,
    whatif_mode_label,
)
from gui.history import report_settings, sized_title
from gui.widgets.tables import row_table
from gui.widgets.text import esc, plain_label, plain_tip, rich_label

SEVERITY_COLOURS = {"critical": "#d32f2f", "warning": "#ef8a00", "info": "#1e88e5"}
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
UNKNOWN_SEVERITY_COLOUR = "#808080"
ICON_SIZE = 14
TABLE_SLACK_PX = 4  # the what-if table's height beyond its rows (no scroll bar for a pixel)
#: tree rows do not wrap by themselves: long texts are wrapped to the column's width in pixels, less this
WRAP_MARGIN_PX = 28
RAW_TEXT_ROLE = Qt.ItemDataRole.UserRole + 1  # the unwrapped text of a wrapped row
MIN_WRAP_PX = 240  # narrower than this (a hidden or squeezed panel) rows stay one line
#: the GPU the what-if shows first: the card the design's problem is about, unless the report ran on it
PREFERRED_TARGETS = ("Tesla T4", "A100 80GB SXM")
NO_FINDINGS = "no findings: nothing in this report looks wrong to the rules"
NO_REPORT = "no report yet: run the tracker or open a report"
NO_COST = ("no cost model in this report: trackscope bench records one (unless --no-cost), "
           "trackscope compare REPORT --what-if GPU counts one")
COUNTING = ("counting the cost model… (one pass of the tracker on the CPU, in the background; a run that was "
            "only cold also gets a few warm runs timed, on its own device)")
COUNT_FAILED = "the cost model could not be counted: {}"
COUNT_WAITING = "the cost model is counted when the tracking run ends (a counted pass would skew its timings)"
#: the findings' column naming the report of a finding (a bench file's several)
RUN_COLUMN = 3
#: the title prefix of a finding the report recorded that today's rules no longer give
RECORDED_PREFIX = "recorded: "
WHATIF_COLUMNS = ("stage", "bound", "precision on target", "observed ms", "projected ms", "× observed")


def severity_icon(severity: str) -> QIcon:
    """A filled dot in the severity's colour."""
    pixmap = QPixmap(ICON_SIZE, ICON_SIZE)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setBrush(QColor(SEVERITY_COLOURS.get(severity, UNKNOWN_SEVERITY_COLOUR)))
    painter.setPen(Qt.PenStyle.NoPen)
    painter.drawEllipse(1, 1, ICON_SIZE - 2, ICON_SIZE - 2)
    painter.end()
    return QIcon(pixmap)


def format_value(value: Any) -> str:
    """Evidence numbers for people: 3 significant digits, thousands separated; text as is."""
    if isinstance(value, bool) or value is None:
        return "—" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "—" if value != value else str(value)
        if abs(value) >= 1e4:
            return f"{value:,.0f}"
        if abs(value) >= 100 or value == int(value):
            return f"{value:.0f}"
        return f"{value:#.3g}"
    return str(value)


def wrap_to_width(text: str, metrics: QFontMetrics, width_px: int) -> str:
    """``text`` with newlines between words so that no line is wider than ``width_px`` (a long word stays whole)."""
    if width_px <= 0:
        return text
    lines: list[str] = []
    line = ""
    for word in text.split():
        candidate = f"{line} {word}" if line else word
        if line and metrics.horizontalAdvance(candidate) > width_px:
            lines.append(line)
            line = word
        else:
            line = candidate
    lines.append(line)
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    """A time in ms as engine.api.ms_value writes it, "—" when missing."""
    return ms_value(value, missing="—")


def header_title(report: Report) -> str:
    """What the header calls a report: its label, unless a setting changed during the run; then its tracker
    with every value each setting took ('corrtrack fp32→fp8 p16 f16'), as the Runs list names it."""
    settings = report_settings(report)
    if any(len(values) > 1 for values in settings.values()):
        return sized_title(report.config.tracker, settings)
    return report.label or f"{report.config.tracker} {report.precision}"


class DiagnosisPanel(QWidget):
    """Findings of the current report, and its per-stage times projected onto another GPU."""

    #: the shown report has no cost model: count it (a Report; gui.controllers.cost answers)
    count_requested = Signal(object)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.report: Report | None = None
        self.analysis: Analysis | None = None
        self.projection: dict[str, Any] | None = None
        self.counts_on_demand = False  # a counting controller is attached (it sets this)
        self.count_state = ""  # "" | "counting" | "waiting" | "failed" for the shown report
        self._count_error = ""

        self.header = rich_label(NO_REPORT)
        self.header.setWordWrap(True)
        self.findings = QTreeWidget()
        self.findings.setColumnCount(4)
        self.findings.setHeaderLabels(["finding", "severity", "stage", "run"])  # run: shown for a bench file
        self.findings.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.findings.header().setStretchLastSection(False)
        self.findings.setWordWrap(True)
        self.findings.setUniformRowHeights(False)
        self.findings.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.findings.header().sectionResized.connect(lambda *_: self._rewrap())
        findings_box = QGroupBox("Findings")
        QVBoxLayout(findings_box).addWidget(self.findings)

        self.gpu_combo = QComboBox()
        for spec in specs.GPUS:
            self.gpu_combo.addItem(spec.name)
        self.gpu_combo.setToolTip("Project this report's per-stage times onto this GPU (datasheet peaks)")
        self.gpu_combo.currentTextChanged.connect(self._update_whatif)
        self.whatif_summary = rich_label("")
        self.whatif_summary.setWordWrap(True)
        self.whatif_table = row_table(WHATIF_COLUMNS, select_rows=False)
        self.whatif_table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.assumptions = rich_label("")
        self.assumptions.setWordWrap(True)
        self.assumptions.setTextFormat(Qt.TextFormat.RichText)
        self.assumptions.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        chooser = QHBoxLayout()
        chooser.addWidget(plain_label("Target GPU:"))
        chooser.addWidget(self.gpu_combo)
        chooser.addStretch(1)
        whatif_inner = QWidget()
        whatif_layout = QVBoxLayout(whatif_inner)
        whatif_layout.setContentsMargins(0, 0, 0, 0)
        whatif_layout.addLayout(chooser)
        whatif_layout.addWidget(self.whatif_summary)
        whatif_layout.addWidget(self.whatif_table)
        whatif_layout.addWidget(self.assumptions)
        whatif_layout.addStretch(1)
        scroll = QScrollArea()  # a short box scrolls instead of drawing the assumptions over the table
        scroll.setWidget(whatif_inner)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        whatif_box = QGroupBox("What-if: this run on another GPU")
        QVBoxLayout(whatif_box).addWidget(scroll)

        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(findings_box)
        splitter.addWidget(whatif_box)
        splitter.setStretchFactor(0, 3)  # the what-if box ends in a stretch: spare height goes to findings
        splitter.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.addWidget(self.header)
        layout.addWidget(splitter, 1)
        self.set_report(None)

    # -- input -------------------------------------------------------------------------------
    def set_report(self, report: Report | None, analysis: Analysis | None = None) -> None:
        """Show a run report's findings (of its analysis: made here when not given) and what-if (None clears
        the panel)."""
        self.report = report
        self.analysis = analysis if analysis is not None or report is None else analyse(report)
        self.count_state, self._count_error = "", ""
        if report is None:
            self.header.setText(NO_REPORT)
        else:
            label = header_title(report)
            created = f" · recorded {report.created}" if report.created else ""
            self.header.setText(f"<b>{esc(label)}</b> on {esc(report.device_name)}{esc(created)}")
        self._fill_findings()
        self._choose_default_target()
        self._update_whatif()

    def set_counted(self, original: Report, counted: Report, analysis: Analysis) -> None:
        """The cost model of ``original`` counted: show ``counted`` (its work filled in) and its analysis, when
        ``original`` is still the report shown (a late answer for an older report is dropped)."""
        if self.report is not original:
            return
        self.report, self.analysis, self.count_state = counted, analysis, ""
        self._fill_findings()  # the roofline rules see the counted work too
        self._update_whatif()

    def set_count_waiting(self, original: Report) -> None:
        """Counting ``original`` waits for the tracking run in progress to end."""
        if self.report is original and self.count_state == "counting":
            self.count_state = "waiting"
            self._update_whatif()

    def set_count_started(self, original: Report) -> None:
        """Counting ``original`` has started (after waiting for a run, it says "counting" again)."""
        if self.report is original and self.count_state == "waiting":
            self.count_state = "counting"
            self._update_whatif()

    def set_count_failed(self, original: Report, message: str) -> None:
        """Counting the cost model of ``original`` failed: say why in the what-if box (never a dialog)."""
        if self.report is not original:
            return
        self.count_state, self._count_error = "failed", message
        self._update_whatif()

    def set_target(self, gpu_name: str) -> None:
        """Choose the what-if GPU by its table name."""
        index = self.gpu_combo.findText(gpu_name)
        if index < 0:
            raise UserError(f"unknown GPU {gpu_name!r}", f"choose one of: {', '.join(s.name for s in specs.GPUS)}")
        self.gpu_combo.setCurrentIndex(index)

    # -- findings ----------------------------------------------------------------------------
    def _fill_findings(self) -> None:
        self.findings.clear()
        if self.analysis is None:
            return
        findings = [f.to_dict() for f in self.analysis.findings] + list(self.analysis.capture_findings)
        self.findings.setColumnHidden(RUN_COLUMN, len(self.analysis.reports) < 2)  # one report: it is the header's
        findings.sort(key=lambda f: SEVERITY_ORDER.get(f.get("severity", ""), len(SEVERITY_ORDER)))
        if not findings:
            item = QTreeWidgetItem([NO_FINDINGS, "", ""])
            item.setForeground(0, QColor("gray"))
            self.findings.addTopLevelItem(item)
        findings += [{**x.to_dict(), "title": RECORDED_PREFIX + x.title} for x in self.analysis.recorded_only()]
        bold = QFont()
        bold.setBold(True)
        for i, finding in enumerate(findings):
            severity = str(finding.get("severity", "info"))
            title = str(finding.get("title", finding.get("rule", "?")))
            top = QTreeWidgetItem([title, severity, str(finding.get("stage") or ""), str(finding.get("label") or "")])
            top.setData(0, RAW_TEXT_ROLE, title)
            top.setIcon(0, severity_icon(severity))
            top.setForeground(1, QColor(SEVERITY_COLOURS.get(severity, UNKNOWN_SEVERITY_COLOUR)))
            top.setFont(0, bold)
            top.setToolTip(0, plain_tip(f"{title}\n(rule: {finding.get('rule', '?')})"))
            evidence = finding.get("evidence") or {}
            if evidence:
                ev = QTreeWidgetItem(["evidence"])
                for key, value in evidence.items():
                    ev.addChild(QTreeWidgetItem([f"{key.replace('_', ' ')}: {format_value(value)}"]))
                top.addChild(ev)
            if finding.get("suggestion"):
                text = f"suggested change: {finding['suggestion']}"
                tip = QTreeWidgetItem([text])
                tip.setData(0, RAW_TEXT_ROLE, text)
                tip.setToolTip(0, plain_tip(finding["suggestion"]))
                top.addChild(tip)
                tip.setFirstColumnSpanned(True)
            self.findings.addTopLevelItem(top)
            if i == 0:  # the most severe one opens with its evidence
                top.setExpanded(True)
                for j in range(top.childCount()):
                    top.child(j).setExpanded(True)
        self._rewrap()

    def showEvent(self, event: Any) -> None:  # noqa: N802 (Qt name)
        super().showEvent(event)
        self._rewrap()  # wrapped for the width it has now that it is shown

    def _rewrap(self) -> None:
        """Wrap the long rows (titles, suggestions) to the finding column's current width."""
        tree = self.findings
        for i in range(tree.topLevelItemCount()):
            top = tree.topLevelItem(i)
            for item, depth in [(top, 0)] + [(top.child(j), 1) for j in range(top.childCount())]:
                raw = item.data(0, RAW_TEXT_ROLE)
                if not raw:
                    continue
                room = tree.columnWidth(0) - tree.indentation() * (depth + 1) - ICON_SIZE - WRAP_MARGIN_PX
                if item.isFirstColumnSpanned():
                    room = tree.viewport().width() - tree.indentation() * (depth + 1) - WRAP_MARGIN_PX
                fits = room >= MIN_WRAP_PX and tree.isVisible()
                item.setText(0, wrap_to_width(raw, QFontMetrics(item.font(0)), room) if fits else raw)

    def finding_titles(self) -> list[str]:
        """Titles in the order shown."""
        return [self.findings.topLevelItem(i).text(0).replace("\n", " ")
                for i in range(self.findings.topLevelItemCount())]

    # -- what-if -----------------------------------------------------------------------------
    def _choose_default_target(self) -> None:
        own = None
        if self.report is not None:
            own = specs.lookup(self.report.device_name)
        for name in PREFERRED_TARGETS:
            if own is None or own.name != name:
                self.gpu_combo.blockSignals(True)
                self.gpu_combo.setCurrentIndex(max(0, self.gpu_combo.findText(name)))
                self.gpu_combo.blockSignals(False)
                return

    def _clear_whatif(self, message: str) -> None:
        self.projection = None
        self.whatif_table.setRowCount(0)
        self.whatif_summary.setText(esc(message))  # an error text may quote a file
        self.assumptions.setText("")

    def _update_whatif(self, *_: Any) -> None:
        if self.report is None:
            self._clear_whatif("")
            return
        cost = self.analysis.cost if self.analysis is not None else None
        if cost is None or not cost.stages:
            self._no_cost()
            return
        try:
            result = project_by_batch(self.report, self.gpu_combo.currentText())  # each batch at its precision
        except UserError as exc:
            self._clear_whatif(str(exc))
            return
        self.projection = result
        observed, projected = result.get("observed_ms"), result.get("projected_ms")
        compared = format_time_ratio(projected, observed, missing="")
        self.whatif_summary.setText(
            f"{esc(result['source'])} → <b>{esc(result['target'])}</b> ({esc(whatif_mode_label(result))}): "
            f"{_ms(observed)} ms observed → <b>{_ms(projected)} ms</b> projected"
            + (f" ({esc(compared)})" if compared else ""))
        stages = {name: row for name, row in (result.get("stages") or {}).items()
                  if row.get("observed_ms") is not None or row.get("projected_ms") is not None}
        self.whatif_table.setRowCount(len(stages) + 1)
        for r, (name, row) in enumerate(stages.items()):
            bound = str(row.get("bound", "")) + (" (kept)" if row.get("kept") else "")
            precision = f"{row.get('precision', '')} {row.get('target_path', '')}".strip()
            self._set_row(r, (name, bound, precision, row.get("observed_ms"), row.get("projected_ms")))
            if row.get("kept"):
                self.whatif_table.item(r, 1).setToolTip("kept at the observed time: launches, syncs and host "
                                                        "work do not follow the GPU's peaks")
        self._set_row(len(stages), ("total", "", "", observed, projected), bold=True)
        self._fit_table_height()
        items = "".join(f"<li>{esc(a)}</li>" for a in result.get("assumptions") or [])
        self.assumptions.setText(f"<b>Assumptions</b><ul style='margin-left: -20px'>{items}</ul>")

    def _no_cost(self) -> None:
        """No cost model: ask for one once per report when a controller counts them, else say so."""
        if self.count_state == "failed":
            self._clear_whatif(COUNT_FAILED.format(self._count_error))
        elif not self.counts_on_demand or self.report is None:
            self._clear_whatif(NO_COST)
        elif self.count_state == "waiting":
            self._clear_whatif(COUNT_WAITING)
        else:
            self._clear_whatif(COUNTING)
            if self.count_state != "counting":
                self.count_state = "counting"
                self.count_requested.emit(self.report)

    def _fit_table_height(self) -> None:
        """As tall as its rows: the space below goes to the assumptions, not to an empty table."""
        table = self.whatif_table
        table.resizeRowsToContents()  # before the first show, row heights are still the defaults
        rows = sum(table.rowHeight(r) for r in range(table.rowCount()))
        header = table.horizontalHeader()
        header_px = max(header.height(), header.sizeHint().height())  # height() is 0 until laid out
        table.setFixedHeight(header_px + rows + 2 * table.frameWidth() + TABLE_SLACK_PX)

    def _set_row(self, r: int, values: tuple, bold: bool = False) -> None:
        name, bound, precision, observed, projected = values
        ratio = projected / observed if observed and projected is not None else None
        cells = (name, bound, precision, _ms(observed), _ms(projected), ratio_value(ratio, missing="—"))
        for c, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if c >= 3:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if bold:
                font = item.font()
                font.setBold(True)
                item.setFont(font)
            self.whatif_table.setItem(r, c, item)

    def projected_ms(self) -> dict[str, float]:
        """Stage -> projected ms currently shown (empty without a projection)."""
        if self.projection is None:
            return {}
        return {k: v["projected_ms"] for k, v in self.projection["stages"].items() if v.get("projected_ms") is not None}
