"""The deep capture of one run: summary line, stage -> module -> kernel table, timeline, findings.

``set_capture(summary_dict, findings, trace_path)`` shows the summary at once (it is small: tables,
not events) and reads the trace file OFF the GUI thread: a QRunnable on the panel's own QThreadPool
parses it into an engine ``TimelineData`` and hands it back once through a signal of a parentless
QObject; the worker never touches a widget. A newer ``set_capture`` makes an older load's result
stale (ignored). Without a trace file the table and findings are shown and the timeline says the
trace is missing. Every text from a file reaches the widgets as plain text (item texts, PlainText
labels).

Clicking a finding selects its (stage, module) row in the table and the same work in the timeline;
clicking a table row selects it in the timeline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QRunnable, Qt, QThreadPool, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QHeaderView,
    QListWidget,
    QListWidgetItem,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.api import (
    CaptureSummary,
    Report,
    ReportError,
    TimelineData,
    diagnose_capture,
    forward_body,
    load_timeline,
    ms_value,
)
from gui.widgets.text import plain_label
from gui.widgets.timeline import TimelineWidget

#: width of the stage / module / kernel column: wide enough for 'updater.blocks.3.attn'
NAME_COLUMN_PX = 230
COLUMNS = ("Stage / module / kernel", "Wall ms", "GPU ms", "Count", "Class / notes")
COL_NAME, COL_WALL, COL_GPU, COL_COUNT, COL_CLASS = range(len(COLUMNS))
ROLE = Qt.ItemDataRole.UserRole
LOADING = "loading trace..."
NO_TRACE = "trace missing: this capture has no trace file beside its report, so there is no timeline"
SHORT_TEMPLATE = 30  # template arguments longer than this are shown as <…>
EXPAND_ALL_ROWS = 60  # with fewer stage and module rows than this, module rows start expanded too
SEVERITY_COLOURS = {"critical": "#c62828", "warning": "#ef6c00", "info": "#546e7a"}


class _LoadSignals(QObject):
    loaded = Signal(int, object)  # token, TimelineData
    failed = Signal(int, str)  # token, message


class _TraceLoad(QRunnable):
    """Parses one trace file in a pool thread; reports only through its signals."""

    def __init__(self, token: int, path: Path):
        super().__init__()
        self.token = token
        self.path = path
        self.signals = _LoadSignals()  # created on the GUI thread, without a parent
        self.setAutoDelete(False)  # the panel holds it until its result has arrived

    def run(self) -> None:
        try:
            data = load_timeline(self.path)
        except Exception as exc:  # noqa: BLE001 - any failure becomes a message on the GUI thread
            self.signals.failed.emit(self.token, f"cannot read the trace {self.path.name}: {exc}")
        else:
            self.signals.loaded.emit(self.token, data)


def _ms(value: float | None) -> str:
    """A time in ms as engine.api.ms_value writes it, empty when missing."""
    return ms_value(value, missing="")


def _item(texts: tuple[str, ...], ref: dict[str, Any]) -> QTreeWidgetItem:
    item = QTreeWidgetItem([str(t) for t in texts])
    item.setData(COL_NAME, ROLE, ref)
    for col in (COL_WALL, COL_GPU, COL_COUNT):
        item.setTextAlignment(col, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


def short_kernel_name(name: str) -> str:
    """The table's name of a kernel: no return type, parameters, ATen namespaces or long template arguments
    ('void at::native::(anonymous namespace)::foo<float, 4, ...>(int, float*)' -> 'foo<…>')."""
    text = name.removeprefix("void ").replace("(anonymous namespace)::", "").strip()
    depth, cut, open_at = 0, len(text), -1
    for i, ch in enumerate(text):
        if ch == "<":
            if depth == 0 and open_at < 0:
                open_at = i
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and i > 0:
            cut = i
            break
    text = text[:cut].strip()
    if open_at > 0 and len(text) - open_at > SHORT_TEMPLATE:
        text = text[:open_at] + "<…>"
    for prefix in ("at::native::", "at::cuda::"):
        text = text.removeprefix(prefix)
    return text or name


def summary_line(s: CaptureSummary) -> str:
    parts = [f"{s.device} {s.precision}"]
    if s.unprofiled_wall_ms is not None and s.profiled_wall_ms is not None:
        over = f" (overhead x{s.overhead:.2f})" if s.overhead else ""
        parts.append(f"wall {s.unprofiled_wall_ms:.2f} ms unprofiled, {s.profiled_wall_ms:.2f} ms profiled{over}")
    elif s.wall_ms:
        parts.append(f"wall {s.wall_ms:.2f} ms profiled")
    c = s.counts
    parts.append(f"{c.kernels:,} kernels, {c.launches:,} launches, {c.syncs:,} syncs, "
                 f"{c.copies:,} copies ({c.copy_bytes / 2**20:.1f} MB, {c.pageable} pageable), {c.cpu_ops:,} CPU ops")
    if s.has_gpu:
        parts.append(f"GPU kernels {s.kernel_ms:.2f} ms, idle {s.gpu_idle_ms:.2f} ms")
    if s.shares.wall_named:
        parts.append(f"{s.shares.wall_named:.0%} of wall in named modules")
    if s.error:
        parts.append(f"capture error: {s.error}")
    return "  |  ".join(parts)


class CapturePanel(QWidget):
    """One capture: summary, table, timeline and findings."""

    trace_loaded = Signal(object)  # TimelineData, once it is shown
    trace_failed = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.summary: CaptureSummary | None = None
        self.findings: list[dict[str, Any]] = []
        self._token = 0
        self._jobs: dict[int, _TraceLoad] = {}
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)

        self.summary_label = plain_label("no capture")
        self.summary_label.setTextFormat(Qt.TextFormat.PlainText)
        self.summary_label.setWordWrap(True)
        self.summary_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.trace_label = plain_label("")
        self.trace_label.setTextFormat(Qt.TextFormat.PlainText)
        self.trace_label.setWordWrap(True)

        self.tree = QTreeWidget()
        self.tree.setColumnCount(len(COLUMNS))
        self.tree.setHeaderLabels(list(COLUMNS))
        self.tree.setUniformRowHeights(True)
        self.tree.setAlternatingRowColors(True)
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # "(forward body of upd…s.0.attn)"
        header = self.tree.header()
        header.setStretchLastSection(True)  # the class/notes column takes what is left
        header.setSectionResizeMode(COL_NAME, QHeaderView.ResizeMode.Interactive)
        self.tree.setColumnWidth(COL_NAME, NAME_COLUMN_PX)  # names first: a narrow tab scrolls the numbers
        for col in (COL_WALL, COL_GPU, COL_COUNT):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.itemClicked.connect(self._on_tree_clicked)

        self.timeline = TimelineWidget()
        self.findings_list = QListWidget()
        self.findings_list.setWordWrap(True)
        self.findings_list.itemClicked.connect(self._on_finding_clicked)

        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.trace_label)
        right_layout.addWidget(self.timeline, 1)
        self.split = QSplitter(Qt.Orientation.Horizontal)
        self.split.addWidget(self.tree)
        self.split.addWidget(right)
        self.split.setStretchFactor(0, 2)
        self.split.setStretchFactor(1, 3)
        self.split.setSizes([560, 940])
        self.vsplit = QSplitter(Qt.Orientation.Vertical)
        self.vsplit.addWidget(self.split)
        self.vsplit.addWidget(self.findings_list)
        self.vsplit.setStretchFactor(0, 4)
        self.vsplit.setStretchFactor(1, 1)
        self.vsplit.setSizes([860, 90])

        layout = QVBoxLayout(self)
        layout.addWidget(self.summary_label)
        layout.addWidget(self.vsplit, 1)

    # -- input ------------------------------------------------------------------------------------
    def set_report(self, report: Report, report_path: Path) -> None:
        """The capture section of a report read from ``report_path``; its trace lies beside it."""
        capture = report.capture
        name = capture.get("trace_file") if isinstance(capture, dict) else None
        trace = Path(report_path).parent / Path(name).name if isinstance(name, str) and name else None
        self.set_capture(capture, None, trace)

    def set_capture(self, summary: Any, findings: list[dict[str, Any]] | None,
                    trace_path: Path | None) -> None:
        """Show a capture summary (the report's ``capture`` dict) with its findings (None: diagnose it
        here) and start loading its trace, if any."""
        self._token += 1
        self.tree.clear()
        self.findings_list.clear()
        self.timeline.clear()
        self.summary = None
        try:
            self.summary = CaptureSummary.from_dict(summary)
        except (ReportError, TypeError, ValueError, KeyError) as exc:
            message = getattr(exc, "message", None) or str(exc)
            self.summary_label.setText(f"capture summary unreadable: {message}")
        else:
            self.summary_label.setText(summary_line(self.summary))
            self._fill_tree(self.summary)
        if findings is None and self.summary is not None:
            findings = diagnose_capture(self.summary)
        self.findings = [f for f in (findings or []) if isinstance(f, dict)]
        self._fill_findings(self.findings)
        if trace_path is None:
            self.trace_label.setText(NO_TRACE)
            return
        path = Path(trace_path)
        if not path.is_file():
            self.trace_label.setText(f"trace missing: {path.name} is not beside the report, so there is no timeline")
            return
        self.trace_label.setText(LOADING)
        job = _TraceLoad(self._token, path)
        job.signals.loaded.connect(self._on_loaded)
        job.signals.failed.connect(self._on_failed)
        self._jobs[self._token] = job
        self._pool.start(job)

    def shutdown(self, timeout_ms: int = 10_000) -> bool:
        """Wait for a load in progress to end (closing the app)."""
        return self._pool.waitForDone(timeout_ms)

    # -- results (GUI thread) ----------------------------------------------------------------------
    def _on_loaded(self, token: int, data: TimelineData) -> None:
        self._jobs.pop(token, None)
        if token != self._token:
            return
        self.timeline.set_data(data)
        if not data.lanes:
            self.trace_label.setText("the trace holds no events inside the captured run")
        else:
            dropped = f", {data.dropped:,} shortest not drawn" if data.dropped else ""
            self.trace_label.setText(f"timeline: {data.items:,} items{dropped}. Wheel or drag to zoom and pan; "
                                     "hover or click for details")
        self.trace_loaded.emit(data)

    def _on_failed(self, token: int, message: str) -> None:
        self._jobs.pop(token, None)
        if token != self._token:
            return
        self.trace_label.setText(message)
        self.trace_failed.emit(message)

    # -- table ------------------------------------------------------------------------------------
    def _fill_tree(self, s: CaptureSummary) -> None:
        kernels: dict[tuple[str, str], list[Any]] = {}
        for k in s.top_kernels:
            kernels.setdefault((k.stage, k.module), []).append(k)
        cells: dict[str, list[Any]] = {}
        for c in s.cells:
            cells.setdefault(c.stage, []).append(c)
        for st in s.stages:
            notes = ", ".join(p for p in (f"{st.syncs} syncs" if st.syncs else "",
                                          f"{st.copies} copies" if st.copies else "") if p)
            top = _item((st.stage, _ms(st.wall_ms), _ms(st.kernel_ms), str(st.kernels), notes),
                        {"kind": "stage", "stage": st.stage, "module": ""})
            self.tree.addTopLevelItem(top)
            for c in cells.get(st.stage, []):
                notes = ", ".join(p for p in (f"{c.syncs} syncs" if c.syncs else "",
                                              f"{c.copies} copies" if c.copies else "") if p)
                mod = _item((c.module, _ms(c.wall_ms), _ms(c.kernel_ms), str(c.kernels), notes),
                            {"kind": "module", "stage": st.stage, "module": c.module})
                top.addChild(mod)
                for k in kernels.get((st.stage, c.module), []):
                    label = " ".join(p for p in (k.kind, {True: "tc", False: "simt"}.get(k.tensor_core, ""),
                                                 k.precision or "", f"sm{k.arch}" if k.arch else "",
                                                 "legacy" if k.legacy else "") if p)
                    mod.addChild(_item((short_kernel_name(k.name), "", _ms(k.total_ms), str(k.count), label),
                                       {"kind": "kernel", "stage": st.stage, "module": c.module, "name": k.name}))
        self.tree.expandToDepth(0 if self.tree.topLevelItemCount() + len(s.cells) > EXPAND_ALL_ROWS else 1)

    def find_row(self, stage: str | None, module: str | None) -> QTreeWidgetItem | None:
        """The table row of (stage, module), else of the stage, else a module row of that name anywhere."""
        fallback = None
        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            ref = top.data(COL_NAME, ROLE)
            for j in range(top.childCount()):
                child = top.child(j)
                cref = child.data(COL_NAME, ROLE)
                if module and cref["module"] == module:
                    if not stage or ref["stage"] == stage:
                        return child
                    fallback = fallback or child
            if stage and ref["stage"] == stage and not module:
                return top
        if fallback is not None:
            return fallback
        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            if stage and top.data(COL_NAME, ROLE)["stage"] == stage:
                return top
        return None

    def _select_ref(self, ref: dict[str, Any]) -> int:
        if ref.get("kind") == "kernel":
            return self.timeline.select(ref["name"])
        if ref.get("module"):
            return self.timeline.select(ref["module"], stage=ref.get("stage") or None)
        return self.timeline.select(ref.get("stage", ""))

    def _on_tree_clicked(self, item: QTreeWidgetItem, column: int = 0) -> None:
        ref = item.data(COL_NAME, ROLE)
        if isinstance(ref, dict):
            self._select_ref(ref)

    # -- findings ---------------------------------------------------------------------------------
    def _fill_findings(self, findings: list[dict[str, Any]]) -> None:
        if not findings:
            self.findings_list.addItem(QListWidgetItem("no capture findings"))
            return
        for i, f in enumerate(findings):
            severity = str(f.get("severity", ""))
            where = " / ".join(str(p) for p in (f.get("stage"), f.get("module")) if p)
            item = QListWidgetItem(f"{severity.upper():9} {f.get('title', '')}" + (f"   [{where}]" if where else ""))
            item.setData(ROLE, i)
            item.setForeground(QColor(SEVERITY_COLOURS.get(severity, "#222")))
            self.findings_list.addItem(item)

    def select_finding(self, index: int) -> int:
        """Select what finding ``index`` is about in the table and the timeline; returns the highlighted count."""
        if not 0 <= index < len(self.findings):
            return 0
        f = self.findings[index]
        stage = f.get("stage") if isinstance(f.get("stage"), str) else None
        module = f.get("module") if isinstance(f.get("module"), str) else None
        return self.select_module(module, stage)

    def select_module(self, module: str | None, stage: str | None = None) -> int:
        """Select a (stage, module) row in the table and its work in the timeline; returns the highlighted count."""
        row = self.find_row(stage, module)
        if row is None and module:  # a module with children has no row of its own, its body has
            row = self.find_row(stage, forward_body(module))
        if row is not None:
            self.tree.setCurrentItem(row)
            self.tree.scrollToItem(row)
        if module:
            return self.timeline.select(module, stage=stage) or self.timeline.select(module)
        return self.timeline.select(stage or "")

    def _on_finding_clicked(self, item: QListWidgetItem) -> None:
        index = item.data(ROLE)
        if isinstance(index, int):
            self.select_finding(index)
