"""Live charts: GPU (or CPU) telemetry on a shared time axis, per-batch stage bars, stage breakdown.

Data and paint rates are independent: the telemetry sampler fills ring buffers in its own thread and
one QTimer here (``poll``, POLL_HZ) does all the drawing: a snapshot into preallocated curves (no
antialias, fixed ranges, ``skipFiniteCheck`` when a series has no NaN), the stage bars when a batch came
in, the breakdown at most every BREAKDOWN_MS, and the time axis, so the charts repaint at most once per
tick. Hidden charts do nothing: what changed meanwhile is drawn on the first tick after they show.
The charts share the GUI thread (and the GIL) with the tracker's Python, so every millisecond here is
one the tracker may wait for: ``scripts/gui_bench.py`` measures it.
Time is seconds since ``origin`` (a ``time.perf_counter()`` value, the clock of session events).
"""

from __future__ import annotations

import bisect
import math
import time
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QScrollArea, QVBoxLayout, QWidget

from engine.api import Cost, Report, RunConfig, clock_reason_mask
from gui.widgets.stage_colours import stage_colour
from gui.widgets.text import plain_label

POLL_HZ = 5.0  # highest paint rate; the sampler's data rate (10 Hz) is independent of it
#: on a long time axis the charts redraw less often: when the newest sample has moved this many pixels
#: (a 60 s page on a 450 px plot: ~2 Hz); redrawing a curve for a sub-pixel step only costs the tracker
MIN_STEP_PX = 4.0
RSS_HEADROOM = 1.2  # the process-memory axis is set this far above the peak, and moved only when outgrown
STAGE_PLOT_TITLE = "Stage time per batch (colours named below)"
BREAKDOWN_AXIS_PX = 100  # the breakdown names its stages on its left axis
BREAKDOWN_TITLE_SIZE = "10pt"  # a little above the time plots' 9pt; titles set the charts' narrowest width
#: the breakdown's x range reaches past the longest bar by these factors: room for its value label
LABEL_ROOM = 1.5
LABEL_ROOM_ROOFLINE = 2.1
LABEL_MARGIN_PX = 6  # between a value label's end and the breakdown's right edge
MIN_BAR_SHARE = 0.3  # the longest bar keeps at least this share of the view's width, however long its label
#: replays: a cold first run this many times the tallest warm batch is clipped (labelled) so the warm ones show
COLD_CLIP_RATIO = 3.0
WARM_HEADROOM = 1.6  # the stage axis then reaches this factor above the tallest warm batch
TIME_PLOT_MIN_PX = 90  # the charts scroll rather than squeeze a plot below this
#: the time plots' left axes (one width, so their time axes line up): a 6-digit tick and its rotated unit label
TIME_AXIS_PX = 64
STAGE_PLOT_MIN_PX = 170  # the stage bars need more height than a telemetry curve
BREAKDOWN_ROW_PX = 20  # height per stage in the breakdown
BREAKDOWN_EXTRA_PX = 60  # title and axis of the breakdown
BREAKDOWN_MS = 2000  # the per-stage breakdown redraws at most this often during a run (each redraw 1-2 ms)
#: the stage axis is refitted only when the bars in view outgrow it or fill less than 1/STAGE_SLACK of it
STAGE_HEADROOM = 1.3
STAGE_SLACK = 2.5
WINDOW_S = 60.0  # seconds of telemetry shown while live
LEAD_S = 2.0  # seconds shown before the first run's start
MIN_SPAN_S = 10.0  # the live time axis spans at least this
PAGE_STEP_S = 15.0  # once the axis spans WINDOW_S it moves on by this much at a time
PAGE_SLACK_S = 1.0  # seconds kept free at the right edge
GB = 1e9
PCT_RANGE = (0.0, 105.0)
#: clock-limit reason bits that are not interesting on their own (GPU idle, application clock setting)
BORING_CLOCK_REASONS = clock_reason_mask("GPU idle", "applications clocks setting")
MARKER_PEN = pg.mkPen((255, 200, 0), width=1, style=Qt.PenStyle.DashLine)


def _curve(plot: pg.PlotItem, name: str, colour: tuple[int, int, int]) -> pg.PlotCurveItem:
    """A bare curve: PlotCurveItem.setData costs a fraction of PlotDataItem's (no downsampling layers)."""
    curve = pg.PlotCurveItem(name=name, pen=pg.mkPen(colour), antialias=False)
    plot.addItem(curve)
    return curve


def _set(curve: pg.PlotCurveItem, x: np.ndarray, y: np.ndarray | None) -> None:
    """setData with the finite check skipped when the series has no NaN."""
    if y is None or len(y) != len(x) or not np.isfinite(y).any():
        curve.setData(x=np.zeros(0), y=np.zeros(0))
        return
    finite = bool(np.isfinite(y).all())
    curve.setData(x=x, y=y, connect="all" if finite else "finite", skipFiniteCheck=finite)


def _unlink_hidden_axes(plot: pg.PlotItem) -> None:
    """Hidden axes (top, right) otherwise still follow each range change, relabelling themselves."""
    for side in ("top", "right"):
        plot.getAxis(side).unlinkFromView()


def _reference_line(colour: tuple[int, int, int], label: str) -> pg.InfiniteLine:
    """A dotted horizontal line (peak, capacity, limit) labelled at its left end, above the line."""
    return pg.InfiniteLine(angle=0, pen=pg.mkPen(colour, style=Qt.PenStyle.DotLine), label=label,
                           labelOpts={"position": 0.02, "color": colour, "anchors": [(0, 0), (0, 0)]})


def _decode_reasons(mask: int) -> list[str]:
    try:
        from engine.api import decode_clock_reasons
    except ImportError:
        return [f"0x{mask:x}"]
    return list(decode_clock_reasons(mask))


class ChartsPanel(QWidget):
    """Telemetry, per-batch stage timing and the per-stage breakdown."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        pg.setConfigOptions(antialias=False)
        self.sampler: Any = None
        self.origin = time.perf_counter()
        self.live = True
        self.static: dict[str, Any] = {}
        self.availability: dict[str, str] = {}
        self.gpu = False
        self.polls = 0
        self.stages: list[str] = []
        self._batches: list[tuple[float, float, dict[str, float]]] = []  # (t_end, wall_s, stage_ms)
        self._markers: list[tuple[float, str]] = []
        self._x_page = (0.0, -1.0)  # current (lo, hi) of the live time axis; empty until the first poll
        self._x_want: tuple[float, float] | None = None  # the time axis the next tick sets (page or focus)
        self._x_shown: tuple[float, float] | None = None
        self._last_sample: float | None = None
        self._bars_dirty = False  # a batch came in since the stage bars were drawn
        self._breakdown_due: float | None = None  # perf_counter time of the next breakdown redraw
        self._cost: Cost | None = None  # the latest run's roofline (its analysis), labelled in the breakdown
        self._follow = True
        self._run_first_batch = 0  # index in _batches of the latest run's first batch
        self._marker_items: list[pg.InfiniteLine] = []

        self.mode_label = plain_label("")
        self.mode_label.setWordWrap(True)
        self.degraded_label = plain_label("")  # the sampler's last read failure, when there is one
        self.degraded_label.setWordWrap(True)
        self.degraded_label.setStyleSheet("color: #a05a00;")
        self.degraded_label.hide()
        self._degraded = ""
        self.glw = pg.GraphicsLayoutWidget()
        self.glw.setBackground("w")
        self.glw.ci.setSpacing(2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.mode_label)
        layout.addWidget(self.degraded_label)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)  # narrower than the plots
        scroll.setWidget(self.glw)
        layout.addWidget(scroll, 1)

        self.util = self._time_plot("Utilisation", "%", 0)
        self.bw = self._time_plot("Memory bandwidth", "GB/s", 1)
        self.mem = self._time_plot("Memory used", "B", 2)
        self.clock = self._time_plot("Clocks", "MHz", 3)
        self.power = self._time_plot("Power", "W", 4)
        self.stage_plot = self._time_plot(STAGE_PLOT_TITLE, "ms", 5)
        self.stage_plot.setLabel("bottom", "time", units="s")
        self.stage_plot.setMinimumHeight(STAGE_PLOT_MIN_PX)
        for p in (self.util, self.bw, self.mem, self.clock, self.power):
            p.hideAxis("bottom")  # the stage plot's axis names the shared time; each axis is redrawn when it moves
            p.getAxis("bottom").unlinkFromView()
        self.breakdown = self.glw.addPlot(row=6, col=0)
        self.breakdown.setTitle("Per-stage breakdown, last run (ms)", size=BREAKDOWN_TITLE_SIZE)
        self.breakdown.setMenuEnabled(False)
        self.breakdown.setMouseEnabled(False, False)
        self.breakdown.getAxis("left").setWidth(BREAKDOWN_AXIS_PX)
        self.breakdown.getAxis("left").setStyle(tickLength=0)
        self.breakdown.getViewBox().invertY(True)  # stages top to bottom in the order they run
        self.breakdown.setLabel("bottom", "ms")
        self._breakdown_ms: np.ndarray = np.zeros(0)  # the bars' ms, top to bottom
        self._breakdown_roofline = False  # the labels name the roofline share (longer)
        self.breakdown.getViewBox().sigResized.connect(self._fit_breakdown_labels)
        _unlink_hidden_axes(self.breakdown)
        self._cold_label = pg.TextItem("", color=(60, 60, 60), anchor=(0, 0), fill=(255, 255, 255, 215))

        self.c_busy = _curve(self.util, "GPU busy %", (31, 119, 180))
        self.c_sm = _curve(self.util, "SM active %", (214, 39, 40))
        self.c_tensor = _curve(self.util, "tensor active %", (44, 160, 44))
        self.c_cpu = _curve(self.util, "CPU % (all cores)", (255, 127, 14))
        self.util.setYRange(*PCT_RANGE, padding=0)
        self.c_bw = _curve(self.bw, "DRAM GB/s", (148, 103, 189))
        self.bw_peak = _reference_line((148, 103, 189), "peak")
        self.c_mem = _curve(self.mem, "used", (31, 119, 180))
        self.c_rss = _curve(self.mem, "process RSS", (255, 127, 14))
        self.mem_cap = _reference_line((200, 0, 0), "capacity")
        self.c_smclk = _curve(self.clock, "SM clock", (31, 119, 180))
        self.c_memclk = _curve(self.clock, "memory clock", (127, 127, 127))
        self.reason_dots = pg.ScatterPlotItem(size=6, symbol="t", brush=pg.mkBrush(214, 39, 40), pen=None,
                                              name="clock limited")
        self.clock.addItem(self.reason_dots)
        self.reason_text = pg.TextItem("", color=(214, 39, 40), anchor=(0, 0))
        self.clock.addItem(self.reason_text, ignoreBounds=True)
        self.c_power = _curve(self.power, "power", (214, 39, 40))
        self.power_limit = _reference_line((120, 0, 0), "limit")
        self._stage_bars: dict[str, pg.BarGraphItem] = {}
        self._stage_top = 0.0
        self._breakdown_items: list[Any] = []
        self._breakdown_names: list[str] = []
        self._breakdown_top = 0.0
        self.set_static({}, {})

        self._rss_top = 0.0
        self._timer = QTimer(self)
        self._timer.setInterval(int(1000 / POLL_HZ))
        self._timer.timeout.connect(self.poll)

    def _time_plot(self, title: str, units: str, row: int) -> pg.PlotItem:
        p = self.glw.addPlot(row=row, col=0)
        p.setTitle(title, size="9pt")
        p.setLabel("left", units=units)
        p.getAxis("left").enableAutoSIPrefix(units == "B")
        p.setMenuEnabled(False)
        p.setMouseEnabled(x=True, y=False)
        p.disableAutoRange()
        # no grid: translucent grid lines across six plots cost more to paint than all the curves
        if title != STAGE_PLOT_TITLE:  # the stage plot's colours are named by the breakdown below it
            p.addLegend(offset=(-5, 2), labelTextSize="8pt", verSpacing=-8, brush=(255, 255, 255, 200))
        p.getAxis("left").setWidth(TIME_AXIS_PX)
        p.setMinimumHeight(TIME_PLOT_MIN_PX)
        _unlink_hidden_axes(p)
        if row:
            p.setXLink(self.util)
        return p

    # -- configuration ----------------------------------------------------------------------------------
    def set_static(self, static: dict[str, Any], availability: dict[str, str]) -> None:
        """Choose GPU or CPU charts and honest labels from the sampler's static info and availability."""
        self.static = dict(static or {})
        self.availability = dict(availability or {})
        avail = self.availability
        self.gpu = bool(avail) and avail.get("gpu_busy_pct", "no GPU") == ""
        has = {k: avail.get(k, "x") == "" for k in ("sm_active_pct", "tensor_active_pct", "dram_bw_gbps")}
        self.c_sm.setVisible(self.gpu and has["sm_active_pct"])
        self.c_tensor.setVisible(self.gpu and has["tensor_active_pct"])
        self.c_busy.setVisible(self.gpu)
        self.c_cpu.setVisible(not self.gpu)
        self.dram_gbps = self.gpu and has["dram_bw_gbps"]
        for p in (self.bw, self.clock, self.power):
            p.setVisible(self.gpu)
            p.setXLink(self.util if self.gpu else None)  # a hidden plot need not follow every range change
        if self.gpu:
            name = self.static.get("name", "GPU")
            self.util.setTitle(f"{name}: GPU busy %" + (" and SM active %" if has["sm_active_pct"] else
                                                       " (no SM active %: needs GPM)"), size="9pt")
            if self.dram_gbps:
                self.bw.setTitle("DRAM bandwidth (GPM)", size="9pt")
                self.bw.setLabel("left", units="GB/s")
                self.c_bw.opts["name"] = "DRAM GB/s"
                peak = self.static.get("peak_bandwidth_gbps")
                self._set_hline(self.bw, self.bw_peak, peak, f"peak {peak:.0f} GB/s" if peak else "")
                self.bw.setYRange(0, (peak or 1000) * 1.05, padding=0)
            else:
                self.bw.setTitle("Memory-controller busy % (time share, not bytes/s: no GPM)", size="9pt")
                self.bw.setLabel("left", units="%")
                self._set_hline(self.bw, self.bw_peak, None, "")
                self.bw.setYRange(*PCT_RANGE, padding=0)
            cap = self.static.get("memory_total_bytes")
            cap_gb = cap / GB if cap else None
            self._set_hline(self.mem, self.mem_cap, cap, f"capacity {cap_gb:.0f} GB" if cap_gb else "")
            self.mem.setTitle("GPU memory used", size="9pt")
            self.power.setTitle("Power draw", size="9pt")
            self.mem.setYRange(0, (cap or GB) * 1.05, padding=0)
            maxclk = max(self.static.get("max_sm_clock_mhz") or 0, self.static.get("max_mem_clock_mhz") or 0)
            self.clock.setYRange(0, (maxclk or 2000) * 1.1, padding=0)
            plim = self.static.get("power_limit_w")
            self._set_hline(self.power, self.power_limit, plim, f"limit {plim:.0f} W" if plim else "")
            self.power.setYRange(0, (plim or 700) * 1.1, padding=0)
            self.mode_label.setText(f"Telemetry from NVML on {name}.")
            self.mode_label.setStyleSheet("")
        else:
            reason = avail.get("gpu_busy_pct") or "no telemetry sampler"
            self.mode_label.setText(f"No GPU telemetry ({reason}): showing CPU use and this process's memory.")
            self.mode_label.setStyleSheet("color: #555; font-style: italic;")
            self.util.setTitle("CPU busy % (all cores; no GPU)", size="9pt")
            self.mem.setTitle("This process's memory (resident set)", size="9pt")
            self._set_hline(self.mem, self.mem_cap, None, "")
            self.mem.enableAutoRange(y=True)
        self.c_mem.setVisible(self.gpu)
        self.c_rss.setVisible(not self.gpu)
        self._rebuild_legends()
        self._fit_height(len(self.stages))

    def _rebuild_legends(self) -> None:
        """Legends list only the curves shown; a plot with one curve has none (its title names it)."""
        for plot in (self.util, self.bw, self.mem, self.clock, self.power):
            legend = plot.legend
            legend.clear()
            shown = [item for item in plot.listDataItems() if item.isVisible() and item.opts.get("name")]
            if len(shown) > 1:
                for item in shown:
                    legend.addItem(item, item.opts["name"])
            legend.setVisible(len(shown) > 1)

    @staticmethod
    def _set_hline(plot: pg.PlotItem, line: pg.InfiniteLine, value: float | None, label: str) -> None:
        if value is None:
            if line.scene() is not None:
                plot.removeItem(line)
            return
        if line.scene() is None:
            plot.addItem(line, ignoreBounds=True)
        line.setValue(value)
        line.label.setFormat(label)

    def attach_sampler(self, sampler: Any) -> None:
        """Draw live: poll ``sampler`` (engine.telemetry.TelemetrySampler or None) at POLL_HZ while shown."""
        self.sampler = sampler
        self.live = True
        if sampler is not None:
            self.set_static(sampler.static_info(), sampler.availability())
        else:
            self.set_static({}, {})
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
        if self.live and self._timer.isActive():
            QTimer.singleShot(0, self.poll)  # catch up at once with what changed while hidden

    def set_origin(self, t0: float) -> None:
        self.origin = t0
        self._x_page = (0.0, -1.0)
        self._last_sample = None

    def _since(self, now: float) -> float:
        """Where the samples asked for start: the last WINDOW_S while following, else the held window's start.

        A finished run stays in view (``focus``): asking only for the last minute emptied its curves a
        minute after it ended, and a chart exported then was blank.
        """
        since = now - WINDOW_S
        if not self._follow and self._x_want is not None:
            since = min(since, self.origin + self._x_want[0])
        return since

    def _show_degraded(self, error: str) -> None:
        """The sampler's last read failure under the mode line (the charts keep what they have)."""
        if error == self._degraded:
            return
        self._degraded = error
        self.degraded_label.setText(f"Telemetry degraded: {error}" if error else "")
        self.degraded_label.setVisible(bool(error))

    # -- telemetry ------------------------------------------------------------------------------------------
    def poll(self) -> None:
        """One drawing tick: new telemetry samples, stage bars, breakdown when due, time axis (not when hidden)."""
        if not self.isVisible():
            return
        now = time.perf_counter()
        if self.sampler is not None and self.live:
            self._show_degraded(str(getattr(self.sampler, "last_error", "") or ""))
            snap = self.sampler.snapshot(since=self._since(now))
            t = snap.get("t")
            last = float(t[-1]) if t is not None and len(t) else None
            if last is not None and last != self._last_sample:  # redraw only when a sample arrived
                self._last_sample = last
                self.show_telemetry(snap, self.origin)
        if self._follow:
            self._page_time_axis(now - self.origin)
        if self._x_want is not None and self._x_want != self._x_shown:
            self._x_shown = self._x_want
            self.util.setXRange(*self._x_want, padding=0)
        if self._bars_dirty:
            self._draw_stage_bars()
        if self._breakdown_due is not None and now >= self._breakdown_due:
            self._draw_breakdown()
        self.polls += 1

    def follow(self) -> None:
        """A run started: the time axis follows the live data again; the breakdown starts over."""
        if not self.live:  # leaving a replayed report: back to the live sampler
            self.clear_runs()
            self.attach_sampler(self.sampler)
        self._follow = True
        self._run_first_batch = len(self._batches)
        self._x_page = (0.0, -1.0)
        self._x_shown = None
        self._cost = None
        if not self._timer.isActive():
            self._timer.start()

    def focus(self, lo: float, hi: float) -> None:
        """Hold the time axis on [lo, hi] (a finished run) until ``follow()``; telemetry keeps updating.

        Applied by the next tick, with the stage axis refitted to the bars in view, not older ones. (Drawing
        at once instead cost about 4 ms more GUI thread per second of back-to-back runs in gui_bench.py,
        10.2-10.7 vs 5.4-6.4 ms/s, docs/records/gui_bench_cpu*.log; on a long time axis the next tick can
        be 0.5-2.4 s away.)
        """
        self._follow = False
        pad = max(0.1, 0.1 * (hi - lo))
        self._x_want = (lo - pad, hi + pad)
        self._bars_dirty = True

    def set_cost(self, cost: Cost | None) -> None:
        """The finished run's roofline (from its analysis): the next tick redraws the breakdown with % of it."""
        self._cost = cost
        self._breakdown_due = time.perf_counter()

    def _page_time_axis(self, x1: float) -> None:
        """Move the shared time axis in pages, not every poll: a moving range re-lays out every axis."""
        lo, hi = self._x_page
        if lo <= x1 <= hi:
            return
        span = MIN_SPAN_S
        while span < WINDOW_S and x1 > span - LEAD_S - PAGE_SLACK_S:
            span *= 2
        span = min(span, WINDOW_S)
        lo = -LEAD_S if x1 < span - LEAD_S - PAGE_SLACK_S else x1 - (span - PAGE_STEP_S)
        self._x_page = self._x_want = (lo, lo + span)
        px = max(self.util.getViewBox().width(), 100.0)
        self._timer.setInterval(int(1000 * max(1 / POLL_HZ, MIN_STEP_PX * span / px)))

    def show_telemetry(self, snap: dict[str, np.ndarray], origin: float = 0.0) -> None:
        """Draw a telemetry snapshot (key "t" in seconds; NaN where not available)."""
        t = snap.get("t")
        if t is None or len(t) == 0:
            return
        x = np.asarray(t, np.float64) - origin
        g = snap.get
        if self.gpu:
            _set(self.c_busy, x, g("gpu_busy_pct"))
            _set(self.c_sm, x, g("sm_active_pct"))
            _set(self.c_tensor, x, g("tensor_active_pct"))
            _set(self.c_bw, x, g("dram_bw_gbps") if self.dram_gbps else g("mem_busy_pct"))
            _set(self.c_mem, x, g("mem_used_bytes"))
            _set(self.c_smclk, x, g("sm_clock_mhz"))
            _set(self.c_memclk, x, g("mem_clock_mhz"))
            _set(self.c_power, x, g("power_w"))
            self._show_reasons(x, g("clock_reasons"), g("sm_clock_mhz"))
        else:
            _set(self.c_cpu, x, g("cpu_pct"))
            rss = g("process_rss_bytes")
            _set(self.c_rss, x, rss)
            if rss is not None and np.isfinite(rss).any():
                peak = float(np.nanmax(rss))
                if not (peak <= self._rss_top <= peak * RSS_HEADROOM ** 2):  # a moving range re-lays out axes
                    self._rss_top = peak * RSS_HEADROOM
                    self.mem.setYRange(0, self._rss_top, padding=0)

    def _show_reasons(self, x: np.ndarray, reasons: np.ndarray | None, clk: np.ndarray | None) -> None:
        if reasons is None or clk is None:
            self.reason_dots.setData(x=[], y=[])
            return
        r = np.nan_to_num(reasons, nan=0).astype(np.int64)
        hit = (r & ~BORING_CLOCK_REASONS) != 0
        self.reason_dots.setData(x=x[hit], y=np.nan_to_num(clk[hit]))
        last = int(r[-1]) & ~BORING_CLOCK_REASONS
        text = "limited: " + ", ".join(_decode_reasons(last)) if last else ""
        if text != self.reason_text.textItem.toPlainText():
            self.reason_text.setText(text)
        vr = self.clock.viewRange()
        if (vr[0][0], vr[1][1]) != self.reason_text.pos().toTuple():
            self.reason_text.setPos(vr[0][0], vr[1][1])

    # -- stages -------------------------------------------------------------------------------------------
    def set_stages(self, stages: list[str] | tuple[str, ...]) -> None:
        for s in stages:
            if s not in self.stages:
                self.stages.append(s)

    def add_batch(self, t_end: float, wall_ms: float, stage_ms: dict[str, float]) -> None:
        """One stacked bar for a batch that ended at ``t_end`` (seconds on the shared axis)."""
        self.set_stages(list(stage_ms))
        self._batches.append((t_end, wall_ms / 1e3, dict(stage_ms)))
        self._bars_dirty = True  # drawn by the next tick: many batches, one redraw
        if self._breakdown_due is None:  # coalesced: at most every BREAKDOWN_MS
            self._breakdown_due = time.perf_counter() + BREAKDOWN_MS / 1e3

    def _draw_stage_bars(self) -> None:
        """Update one BarGraphItem per stage in place (created the first time a stage is seen).

        Live, only the batches of the last WINDOW_S seconds and of the latest run are drawn (what the
        time axis can show), so a redraw costs the same an hour into a session as in its first minute.
        """
        self._bars_dirty = False
        batches = self._batches
        if not batches:
            for item in self._stage_bars.values():
                self.stage_plot.removeItem(item)
            self._stage_bars = {}
            return
        if self.live:
            first = bisect.bisect_left(batches, batches[-1][0] - WINDOW_S, key=lambda b: b[0])
            batches = batches[min(first, self._run_first_batch):]
        t_end = np.array([b[0] for b in batches])
        wall = np.array([b[1] for b in batches])
        min_w = max(1e-3, 0.002 * max(1.0, float(t_end.max() - (t_end - wall).min())))
        x0 = t_end - np.maximum(wall, min_w)
        bottom = np.zeros(len(t_end))
        for s in self.stages:
            h = np.array([b[2].get(s, 0.0) for b in batches])
            item = self._stage_bars.get(s)
            if item is None:
                if not h.any():
                    continue
                item = pg.BarGraphItem(x0=x0, x1=t_end, y0=bottom.copy(), height=h,
                                       brush=pg.mkBrush(*stage_colour(s)), pen=None, name=s)
                self.stage_plot.addItem(item)  # colours match the breakdown below, which names them
                self._stage_bars[s] = item
            else:
                item.setOpts(x0=x0, x1=t_end, y0=bottom.copy(), height=h)
            bottom += h
        in_view = t_end >= self._x_want[0] if self.live and self._x_want else np.ones(len(t_end), bool)
        peak = float(bottom[in_view].max()) if in_view.any() else 0.0
        if peak > 0 and not (peak * 1.05 <= self._stage_top <= peak * STAGE_SLACK):
            self._stage_top = peak * STAGE_HEADROOM  # moved only when outgrown: a moving axis re-lays out
            self.stage_plot.setYRange(0, self._stage_top, padding=0)

    def stage_totals(self, last_run: bool = True) -> dict[str, float]:
        """ms per stage summed over the batches of the latest run (or of every run shown)."""
        out: dict[str, float] = {}
        for _, _, ms in self._batches[self._run_first_batch if last_run else 0:]:
            for k, v in ms.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def set_breakdown(self, totals: dict[str, float], cost: Cost | None = None) -> None:
        """Horizontal bars of ms per stage, labelled with % of roofline where ``cost`` has it.

        Items are rebuilt only when the stages change; otherwise bars and labels update in place and
        the axis moves only when outgrown (each relayout of the panel costs milliseconds mid-run).
        """
        names = [s for s in self.stages if totals.get(s, 0) > 0] + [s for s in totals if s not in self.stages]
        if not names:
            for item in self._breakdown_items:
                self.breakdown.removeItem(item)
            self._breakdown_items, self._breakdown_names = [], []
            self.breakdown.getAxis("left").setTicks([[], []])
            return
        ms = np.array([totals[s] for s in names])
        total = float(ms.sum())
        cost_stages = cost.stages if cost is not None else {}
        labels, roofline = [], False
        for i, s in enumerate(names):
            label = f"{ms[i]:.1f} ms ({100 * ms[i] / total:.0f}%)"
            c = cost_stages.get(s)
            if c is not None and c.pct_of_roofline is not None:
                roofline = True
                label += f" · roofline {c.pct_of_roofline:.0f}% ({c.bound})"
            labels.append(label)
        if names != self._breakdown_names:
            self._build_breakdown(names, len(ms))
        bars, texts = self._breakdown_items[0], self._breakdown_items[1:]
        bars.setOpts(x0=np.zeros(len(ms)), width=ms, y=np.arange(len(names)), height=0.7)
        for i, (text, label) in enumerate(zip(texts, labels)):
            text.setText(label, color=(20, 20, 20))
            text.setPos(float(ms[i]), i)  # right of its bar: never over a coloured bar
        self._breakdown_ms, self._breakdown_roofline = ms, roofline
        self._fit_breakdown_labels()

    def _fit_breakdown_labels(self) -> None:
        """Set the breakdown's x range so every value label fits right of its bar in the view's width now;
        called again when the view is resized (a label measured at one width was cut at another)."""
        ms, texts = self._breakdown_ms, self._breakdown_items[1:]
        if len(ms) == 0 or len(texts) != len(ms):
            return
        top = float(ms.max()) * (LABEL_ROOM_ROOFLINE if self._breakdown_roofline else LABEL_ROOM)
        view_px = self.breakdown.getViewBox().width()
        if view_px > 100:  # laid out: leave each label the pixels it needs right of its bar
            top = max(float(ms[i]) * view_px / max(view_px - t.textItem.boundingRect().width() - LABEL_MARGIN_PX,
                                                   MIN_BAR_SHARE * view_px)
                      for i, t in enumerate(texts))
        if not (top <= self._breakdown_top <= 2 * top):
            self._breakdown_top = top
            self.breakdown.setXRange(0, top, padding=0)

    def _build_breakdown(self, names: list[str], count: int) -> None:
        for item in self._breakdown_items:
            self.breakdown.removeItem(item)
        brushes = [pg.mkBrush(*stage_colour(s)) for s in names]
        bars = pg.BarGraphItem(x0=np.zeros(count), width=np.zeros(count), y=np.arange(count), height=0.7,
                               brushes=brushes, pen=None)
        self.breakdown.addItem(bars)
        self._breakdown_items = [bars]
        for _ in names:
            text = pg.TextItem("", color=(20, 20, 20), anchor=(0, 0.5))
            self.breakdown.addItem(text)
            self._breakdown_items.append(text)
        self._breakdown_names = list(names)
        self._breakdown_top = 0.0
        self.breakdown.getAxis("left").setTicks([[(float(i), s) for i, s in enumerate(names)], []])
        self.breakdown.setYRange(-0.6, len(names) - 0.4, padding=0)
        self._fit_height(len(names))

    def _fit_height(self, stages: int) -> None:
        """Give the breakdown room for one readable row per stage; the panel scrolls when short."""
        self.breakdown.setMinimumHeight(BREAKDOWN_ROW_PX * max(stages, 2) + BREAKDOWN_EXTRA_PX)
        shown = sum(p.isVisible() for p in (self.util, self.bw, self.mem, self.clock, self.power))
        self.glw.setMinimumHeight(shown * TIME_PLOT_MIN_PX + STAGE_PLOT_MIN_PX + int(self.breakdown.minimumHeight())
                                  + 20)
        self._fit_width()

    def _fit_width(self) -> None:
        """The plots' narrowest layout (their titles, axes) as the charts' minimum width: in a narrower dock
        they scroll sideways instead of being cut off at the right edge."""
        needed = self.glw.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
        self.glw.setMinimumWidth(int(math.ceil(needed)) + 4)

    def _draw_breakdown(self) -> None:
        self._breakdown_due = None
        totals = self.stage_totals()
        if totals:  # a run that has no batch yet leaves the previous run's breakdown up, not an empty one
            self.set_breakdown(totals, self._cost)

    def _clip_cold(self, report: Report) -> None:
        """Scale the stage axis to the warm batches when a cold run dwarfs them, and label the cold bar."""
        warm = [sum(b.stage_ms.values()) for r in report.runs if not r.cold for b in r.batches]
        cold = [(r.start_s, sum(b.stage_ms.values())) for r in report.runs if r.cold for b in r.batches]
        if not warm or not cold or max(h for _, h in cold) < COLD_CLIP_RATIO * max(warm):
            return
        self._stage_top = max(warm) * WARM_HEADROOM
        self.stage_plot.setYRange(0, self._stage_top, padding=0)
        start, height = max(cold, key=lambda c: c[1])
        self._cold_label.setText(f"cold run: {height:.0f} ms (clipped)\nwarm batches: {np.median(warm):.1f} ms")
        self._cold_label.setPos(start, self._stage_top)
        if self._cold_label not in self.stage_plot.items:
            self.stage_plot.addItem(self._cold_label, ignoreBounds=True)
        self._marker_items.append(self._cold_label)  # removed with the runs

    # -- config markers -------------------------------------------------------------------------------------
    def mark(self, t: float, label: str) -> None:
        """A vertical labelled line at ``t`` on every time plot (a config change)."""
        self._markers.append((t, label))
        for i, p in enumerate((self.util, self.bw, self.mem, self.clock, self.power, self.stage_plot)):
            line = pg.InfiniteLine(pos=t, angle=90, pen=MARKER_PEN,
                                   label=label if i in (0, 5) else None,
                                   labelOpts={"position": 0.85, "color": (160, 110, 0), "rotateAxis": (1, 0)})
            p.addItem(line, ignoreBounds=True)
            self._marker_items.append(line)

    @property
    def markers(self) -> list[tuple[float, str]]:
        return list(self._markers)

    def clear_runs(self) -> None:
        """Forget batches and markers (a new video)."""
        for item in self._marker_items:
            if item in self.stage_plot.items:  # added through the plot (the cold label): the plot forgets it too
                self.stage_plot.removeItem(item)
            elif item.getViewBox() is not None:
                item.getViewBox().removeItem(item)
        self._marker_items = []
        self._markers = []
        self._batches = []
        self._run_first_batch = 0
        self.stages = []
        self._stage_top = 0.0
        self._breakdown_due = None
        self._cost = None
        self._draw_stage_bars()
        self.set_breakdown({})

    # -- replay -------------------------------------------------------------------------------------------------
    def show_report(self, report: Report, cost: Cost | None = None) -> None:
        """Replay a report: its telemetry series, its batches as stage bars, its breakdown (with the roofline
        of its analysis, ``cost``).

        Live polling pauses (the sampler is kept) until the next run starts (``follow``).
        """
        self._timer.stop()
        self.live = False
        self._follow = False
        self.clear_runs()
        self.set_stages(list(report.stages))
        tel = report.telemetry
        if tel is not None:
            self.set_static(dict(tel.static), dict(tel.availability))
            snap = {"t": tel.t}
            for k, arr in tel.metrics.items():
                if arr.ndim == 1 and len(arr) == len(snap["t"]):
                    snap[k] = arr
            self.show_telemetry(snap, 0.0)
            where = f"on {self.static.get('name')}" if self.gpu else "of the CPU and process memory"
            self.mode_label.setText(f"Replay: telemetry recorded with the report {where} "  # not this machine's
                                    f"({len(snap['t'])} samples), not live from this machine.")
        else:
            self.set_static({}, {"gpu_busy_pct": "the report has no telemetry"})
            self.mode_label.setText("Replay: the report has no telemetry (nothing shown is live).")
        previous: RunConfig | None = None
        for run in report.runs:
            start = run.start_s
            for b in run.batches:
                t_end, wall_s = start + (b.t or 0.0), b.wall_ms / 1e3
                self._batches.append((t_end, wall_s, dict(b.stage_ms)))
                cfg = b.config
                if cfg and previous is not None and cfg != previous:  # a live toggle during the recorded run
                    self.mark(t_end - wall_s, cfg.label())
                previous = cfg or previous
        self._draw_stage_bars()
        self._clip_cold(report)
        typical = report.totals.stage_ms  # the typical run's, when the report's totals say it
        self.set_breakdown(typical or self.stage_totals(last_run=False), cost)
        self.breakdown.setTitle("Per-stage breakdown, typical run (ms)" if typical else
                                "Per-stage breakdown, all runs (ms)", size=BREAKDOWN_TITLE_SIZE)
        self._fit_width()
        xs = [b[0] for b in self._batches] + (list(tel.t) if tel is not None and tel.t.size else [0.0])
        self.util.setXRange(min(0.0, min(xs)), max(xs) or 1.0, padding=0.02)
