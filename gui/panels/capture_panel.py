"""The deep capture of one run: summary line, stage -> module -> kernel table, timeline, findings.

``set_capture(summary_dict, findings, trace_path)`` shows the summary at once (it is small: tables,
not events) and reads the trace file OFF the GUI thread, in the app's worker idiom (``gui.worker``,
thread ``TRACE_THREAD_NAME``): ``engine.capture.timeline.load_timeline`` parses it into a
``TimelineData``, bounded (a file past its inflated-size limit is refused with a message; past the
event cap the rest are left out and the label says so). A newer ``set_capture`` cancels an older
load (its result is ignored); ``shutdown`` cancels the load in flight (the parse stops at its next
JSON object) and waits at most ``CLOSE_WAIT_MS``, leaving a thread still running behind
(``lingering``). Without a trace file the table and findings are shown and the timeline says the
trace is missing. Every text from a file reaches the widgets as plain text (item texts, PlainText
labels).

Clicking a finding selects its (stage, module) row in the table and the same work in the timeline;
clicking a table row selects it in the timeline.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, Qt, QThread, Signal
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
from gui.worker import CLOSE_WAIT_MS, GeneratorWorker, WorkerHandle, start_worker

TRACE_THREAD_NAME = "trackscope-trace"

#: the widest the stage / module / kernel column starts: wide enough for 'updater.blocks.3.attn'
NAME_COLUMN_PX = 230
#: the narrowest it gets so that the number columns stay in view (names elide in the middle)
NAME_COLUMN_MIN_PX = 110
COLUMNS = ("Stage / module / kernel", "Wall ms", "GPU ms", "Count", "Class / notes")
COL_NAME, COL_WALL, COL_GPU, COL_COUNT, COL_CLASS = range(len(COLUMNS))
ROLE = Qt.ItemDataRole.UserRole
LOADING = "loading trace..."
#: a function row is listed under its module when it launched work, synced, or held the host this long (ms)
FUNCTION_MIN_WALL_MS = 0.05
NO_TRACE = "trace missing: this capture has no trace file beside its report, so there is no timeline"
SHORT_TEMPLATE = 30  # template arguments longer than this are shown as <…>
EXPAND_ALL_ROWS = 60  # with fewer stage and module rows than this, module rows start expanded too
SEVERITY_COLOURS = {"critical": "#c62828", "warning": "#ef6c00", "info": "#546e7a"}


class _TraceLoad:
    """One trace file read in a worker: its handle and the flag that cancels it."""

    def __init__(self, path: Path):
        self.path = path
        self.cancel = threading.Event()
        self.handle: WorkerHandle | None = None

    def work(self) -> TimelineData:
        return load_timeline(self.path, cancel=self.cancel)


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


def line_name(line: str) -> str:
    """A line row's name, its line number first so that eliding the middle keeps it: 'x/offline.py:154 forward' ->
    'line 154 of offline.py' (the row sits under its forward body; the tooltip has the whole label)."""
    head = line.partition(" ")[0]
    file, _, number = head.rpartition(":")
    if not file or not number.isdigit():
        return line
    return f"line {number} of {file.replace(chr(92), '/').rsplit('/', 1)[-1]}"


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
    if s.shares.kernel_below_forward is not None:
        with_lines = s.shares.kernel_below_forward_or_line or 0.0
        parts.append(f"kernel time below the tracker's forward {s.shares.kernel_below_forward:.0%} "
                     f"({with_lines:.0%} with its lines)")
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
        self._load: _TraceLoad | None = None
        self._ending: list[_TraceLoad] = []  # cancelled loads whose threads have not ended yet

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
        header.setStretchLastSection(True)  # the class/notes column takes what is left (or scrolls)
        header.setSectionResizeMode(COL_NAME, QHeaderView.ResizeMode.Interactive)
        self.tree.setColumnWidth(COL_NAME, NAME_COLUMN_PX)
        for col in (COL_WALL, COL_GPU, COL_COUNT):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.sectionResized.connect(self._numbers_resized)
        self.tree.viewport().installEventFilter(self)  # a narrower tree narrows the names, never hides the numbers
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
        self.split.setSizes([620, 880])
        self.vsplit = QSplitter(Qt.Orientation.Vertical)
        self.vsplit.addWidget(self.split)
        self.vsplit.addWidget(self.findings_list)
        self.vsplit.setStretchFactor(0, 4)
        self.vsplit.setStretchFactor(1, 1)
        self.vsplit.setSizes([860, 90])

        layout = QVBoxLayout(self)
        layout.addWidget(self.summary_label)
        layout.addWidget(self.vsplit, 1)

    # -- the table's columns --------------------------------------------------------------------------
    def eventFilter(self, watched: Any, event: Any) -> bool:  # noqa: N802
        if watched is self.tree.viewport() and event.type() == QEvent.Type.Resize:
            self.fit_columns()
        return super().eventFilter(watched, event)

    def _numbers_resized(self, index: int, _old: int, _new: int) -> None:
        if index in (COL_WALL, COL_GPU, COL_COUNT):
            self.fit_columns()

    def fit_columns(self) -> None:
        """The name column as wide as leaves the number columns in view (NAME_COLUMN_MIN_PX to NAME_COLUMN_PX)."""
        numbers = sum(self.tree.columnWidth(c) for c in (COL_WALL, COL_GPU, COL_COUNT))
        room = self.tree.viewport().width() - numbers
        width = max(NAME_COLUMN_MIN_PX, min(NAME_COLUMN_PX, room))
        if width != self.tree.columnWidth(COL_NAME):
            self.tree.setColumnWidth(COL_NAME, width)

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
        self._cancel_load()
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
        load = _TraceLoad(path)

        def connect(worker: GeneratorWorker, thread: QThread) -> None:
            worker.returned.connect(self._on_loaded)
            worker.errored.connect(self._on_failed)
            thread.finished.connect(self._forget_ended)

        self._load = load
        load.handle = start_worker(load.work, TRACE_THREAD_NAME, connect=connect)

    def _cancel_load(self) -> None:
        load, self._load = self._load, None
        if load is not None:
            load.cancel.set()
            self._ending.append(load)
        self._forget_ended()

    def _forget_ended(self) -> None:
        for load in [x for x in self._ending if x.handle is not None and not x.handle.running]:
            self._ending.remove(load)
            assert load.handle is not None
            load.handle.delete_later()

    @property
    def lingering(self) -> int:
        """Trace reads still running after they were cancelled (left behind at close)."""
        return sum(1 for x in self._ending if x.handle is not None and x.handle.running)

    def shutdown(self, timeout_ms: int = CLOSE_WAIT_MS) -> bool:
        """Closing the app: cancel the load in flight and wait at most ``timeout_ms`` for it; True when every
        trace thread has ended."""
        self._cancel_load()
        ended = True
        for load in list(self._ending):
            assert load.handle is not None
            ended = load.handle.join(timeout_ms) and ended
        return ended

    # -- results (GUI thread) ----------------------------------------------------------------------
    def _from_current_load(self) -> bool:
        load = self._load
        return load is not None and load.handle is not None and self.sender() is load.handle.worker

    def _on_loaded(self, data: TimelineData) -> None:
        if not self._from_current_load():
            return  # a cancelled load's (or a newer capture is shown)
        self._ending.append(self._load)  # deleted once its thread has ended
        self._load = None
        self.timeline.set_data(data)
        if not data.lanes:
            self.trace_label.setText("the trace holds no events inside the captured run")
        else:
            dropped = f", {data.dropped:,} shortest not drawn" if data.dropped else ""
            capped = (f"; the file holds {data.events_left_out:,} more events past the {data.max_events:,} read"
                      if data.events_left_out else "")
            self.trace_label.setText(f"timeline: {data.items:,} items{dropped}{capped}. Wheel or drag to zoom and "
                                     "pan; hover or click for details")
        self.trace_loaded.emit(data)

    def _on_failed(self, exc: BaseException) -> None:
        if not self._from_current_load():
            return
        load, self._load = self._load, None
        assert load is not None
        self._ending.append(load)
        name = load.path.name
        text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        message = text if text.startswith(("the trace", "cannot read")) else f"cannot read the trace {name}: {text}"
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
        functions: dict[tuple[str, str], list[Any]] = {}  # the user functions below a module (evidence rows)
        for f in s.evidence.functions:
            if f.kernel_ms or f.syncs or f.wall_ms >= FUNCTION_MIN_WALL_MS:
                functions.setdefault((f.stage, f.module), []).append(f)
        lines: dict[tuple[str, str], list[Any]] = {}  # the source lines of a forward body (evidence rows)
        for ln in s.evidence.lines:
            if ln.kernel_ms or ln.wall_ms >= FUNCTION_MIN_WALL_MS:
                lines.setdefault((ln.stage, ln.module), []).append(ln)
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
                for f in functions.get((st.stage, c.module), []):
                    notes = ", ".join(p for p in ("trackscope's own" if f.layer == "trackscope" else "",
                                                  f"{f.syncs} syncs" if f.syncs else "") if p)
                    mod.addChild(_item((f"ƒ {f.function}", _ms(f.wall_ms), _ms(f.kernel_ms), str(f.kernels), notes),
                                       {"kind": "function", "stage": st.stage, "module": c.module,
                                        "function": f.function, "site": f.site}))
                for ln in sorted(lines.get((st.stage, c.module), []), key=lambda r: -(r.kernel_ms + r.wall_ms)):
                    row = _item((f"≡ {line_name(ln.line)}", _ms(ln.wall_ms), _ms(ln.kernel_ms), str(ln.kernels),
                                 ", ".join(ln.ops)),
                                {"kind": "line", "stage": st.stage, "module": c.module, "line": ln.line})
                    row.setToolTip(COL_NAME, f"{ln.line}: {ln.launches} launches, ops {', '.join(ln.ops) or '-'}")
                    mod.addChild(row)
                for k in kernels.get((st.stage, c.module), []):
                    label = " ".join(p for p in (k.kind, {True: "tc", False: "simt"}.get(k.tensor_core, ""),
                                                 k.precision or "", f"sm{k.arch}" if k.arch else "",
                                                 "legacy" if k.legacy else "") if p)
                    mod.addChild(_item((short_kernel_name(k.name), "", _ms(k.total_ms), str(k.count), label),
                                       {"kind": "kernel", "stage": st.stage, "module": c.module, "name": k.name}))
        self.tree.expandToDepth(0 if self.tree.topLevelItemCount() + len(s.cells) > EXPAND_ALL_ROWS else 1)
        self.fit_columns()

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
