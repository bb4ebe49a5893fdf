"""The deep-capture pass of `track --deep` and `bench --deep`: one extra warm run under torch.profiler.

The pass runs after the timed runs and never replaces them: its summary (per stage and module, top
kernels, syncs, copies, findings' evidence) goes into the report's ``capture`` section, the full
trace beside the report as gzipped Chrome/Perfetto JSON, and the profiler's own overhead (profiled
over unprofiled wall time of the same run) is stated with it.

The profiled run is bounded (``engine.capture.profile.CaptureLimits``: ops and seconds): a run that
reaches a limit stops there, keeps what was recorded, and its report section says so (``stopped``,
``limits``). Callers write the timed runs' report before the pass (a Ctrl-C, hang or crash during it
keeps that report); a pass whose capture failed exits ``DEEP_FAILED_EXIT`` from the CLI.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.capture import CaptureSummary, capture_session, diagnose_capture, summarize, write_trace
from engine.capture.profile import CaptureLimits
from engine.core.units import format_ms, ms_value
from engine.report.capture_part import CapturePart
from engine.report.finding import Finding

log = logging.getLogger(__name__)

#: the trace written beside a report: NAME.json -> NAME.trace.json.gz
TRACE_SUFFIX = ".trace.json.gz"
#: rows of the per-module table printed by the CLI
PRINTED_MODULES = 8
#: findings printed by the CLI
PRINTED_FINDINGS = 5
#: the CLI's exit code when the timed runs and their report are fine but the deep capture failed
DEEP_FAILED_EXIT = 3


@dataclass(frozen=True)
class DeepCapture:
    """One capture pass: its summary, the capture's findings, where the trace went, how long it took."""

    summary: CaptureSummary
    findings: list[dict[str, Any]] = field(default_factory=list)
    trace_path: Path | None = None
    trace_bytes: int | None = None
    seconds: float = 0.0
    stopped: str | None = None  # why the profiled run stopped before its end (a limit), or None
    ops: int = 0  # tensor ops the profiled run made
    limits: CaptureLimits = field(default_factory=CaptureLimits)

    @property
    def error(self) -> str | None:
        return self.summary.error

    @property
    def typed_findings(self) -> tuple[Finding, ...]:
        """The capture's findings as the one Finding type (``findings`` stays the rules' dicts, as the app reads)."""
        return tuple(Finding.from_capture(f) for f in self.findings)

    def part(self) -> CapturePart:
        """The report's ``capture`` section as its typed part."""
        return CapturePart.from_dict(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """The report's ``capture`` section: the summary plus where its trace is and what the pass cost."""
        return {**self.summary.to_dict(), "trace_file": self.trace_path.name if self.trace_path else None,
                "trace_bytes": self.trace_bytes, "capture_seconds": round(self.seconds, 3),
                "stopped": self.stopped, "ops": self.ops,
                "limits": {"max_ops": self.limits.max_ops, "max_seconds": self.limits.max_seconds}}


def trace_path_for(report_path: str | Path) -> Path:
    """Where the trace of a report goes: beside it, NAME.trace.json.gz."""
    path = Path(report_path)
    stem = path.name[: -len(path.suffix)] if path.suffix else path.name
    return path.with_name(stem + TRACE_SUFFIX)


def deep_capture(make_session: Callable[[], Any], *, precision: str, typical_wall_ms: float | None,
                 trace_path: Path | None, limits: CaptureLimits | None = None, rank: int = 0,
                 world_size: int = 1, cancel: threading.Event | None = None) -> DeepCapture:
    """Capture one more warm run of ``make_session()`` within ``limits``; never raises for a capture that fails
    (error set). KeyboardInterrupt when Ctrl-C stopped it. ``rank`` of ``world_size``: the trace's
    distributedInfo (one trace per configuration of a bench folder). ``cancel`` set ends it early (the app's Stop)."""
    limits = limits or CaptureLimits()
    t0 = time.perf_counter()
    result = capture_session(make_session, limits=limits, cancel=cancel)
    summary = summarize(result, precision=precision)
    findings: list[dict[str, Any]] = []
    written, size = None, None
    if result.ok:
        findings = diagnose_capture(summary, precision=precision, typical_wall_ms=typical_wall_ms)
        if trace_path is not None and result.chrome is not None:
            try:
                written = write_trace(result.chrome, trace_path, rank=rank, world_size=world_size)
                size = written.stat().st_size
            except OSError as exc:  # the summary is still worth keeping
                log.warning("could not write the trace %s: %s", trace_path, exc)
    return DeepCapture(summary, findings, written, size, time.perf_counter() - t0, result.stopped, result.ops, limits)


def format_capture(deep: DeepCapture) -> str:
    """The capture as a few lines of text: overhead, counts, the costliest modules, the findings."""
    s = deep.summary
    if s.error:
        return f"deep capture: not available: {s.error}"
    lines = [f"deep capture ({deep.seconds:.1f} s): run {format_ms(s.unprofiled_wall_ms)} unprofiled, "
             f"{format_ms(s.profiled_wall_ms)} under the profiler (overhead {_ratio(s, deep.stopped)}); "
             f"{s.counts.kernels} kernels, {s.counts.launches} launches, {s.counts.syncs} syncs, "
             f"{s.counts.copies} copies; kernels busy {format_ms(s.kernel_ms)}"]
    if deep.stopped:
        lines.append(f"  {deep.stopped} ({deep.limits.describe()}): the capture covers the run's first "
                     f"{deep.ops:,} ops, not all of it")
    if deep.trace_path is not None:
        lines.append(f"  trace: {deep.trace_path} ({(deep.trace_bytes or 0) / 2**20:.2f} MiB, "
                     "open in ui.perfetto.dev or chrome://tracing)")
    modules = sorted(s.modules, key=lambda m: -(m.kernel_ms or 0.0) - (m.wall_ms or 0.0))[:PRINTED_MODULES]
    if modules:
        lines.append(f"  {'module':44s} {'wall ms':>9s} {'kernel ms':>9s} {'kernels':>7s} {'syncs':>5s} "
                     f"{'copies':>6s}")
        for m in modules:
            lines.append(f"  {m.module[:44]:44s} {ms_value(m.wall_ms):>9s} {ms_value(m.kernel_ms):>9s} "
                         f"{m.kernels:>7d} {m.syncs:>5d} {m.copies:>6d}")
    lines.extend(format_shares(s))
    functions = [r for r in s.evidence.functions if r.kernel_ms or r.syncs][:PRINTED_MODULES]
    if functions:
        lines.append(f"  {'function (in module)':60s} {'layer':>10s} {'kernel ms':>9s} {'kernels':>7s} {'syncs':>5s}")
        for r in functions:
            label = f"{r.function} in {r.module}"
            lines.append(f"  {label[:60]:60s} {r.layer:>10s} {ms_value(r.kernel_ms):>9s} {r.kernels:>7d} {r.syncs:>5d}")
    source_lines = [r for r in s.evidence.lines if r.kernel_ms][:PRINTED_MODULES]
    if source_lines:
        lines.append(f"  {'line of a forward body (in module)':60s} {'ops':>28s} {'kernel ms':>9s} {'kernels':>7s}")
        for line_row in source_lines:
            label = f"{line_row.line} in {line_row.module}"
            ops = ", ".join(line_row.ops)
            lines.append(f"  {label[:60]:60s} {ops[:28]:>28s} {ms_value(line_row.kernel_ms):>9s} "
                         f"{line_row.kernels:>7d}")
    for f in deep.findings[:PRINTED_FINDINGS]:
        where = " ".join(x for x in (f.get("module"), f.get("call_site")) if x)
        lines.append(f"  {f['severity'].upper():8s} {f['rule']}: {f['title']}" + (f" [{where}]" if where else ""))
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "?"


def format_shares(s: CaptureSummary) -> list[str]:
    """The line of kernel time named, strict to wide (``Shares``): by any module; by a leaf module or a helper
    function (every forward body unnamed); below the tracker's forward; that plus its forward body's lines."""
    sh = s.shares
    if sh.kernel_named is None and sh.kernel_named_or_function is None:
        return []
    text = (f"  kernel time named: {_pct(sh.kernel_named)} by a module (forward bodies included), "
            f"{_pct(sh.kernel_named_or_function)} by a leaf module or a function below a forward")
    if sh.kernel_below_forward is not None:
        text += (f"; below the tracker's forward: {_pct(sh.kernel_below_forward)} by a module or a function, "
                 f"{_pct(sh.kernel_below_forward_or_line)} with the lines of its forward body")
    return [text]


def _ratio(s: CaptureSummary, stopped: str | None = None) -> str:
    if stopped:
        return "not comparable: the profiled run was stopped early"
    if s.profiled_wall_ms and s.unprofiled_wall_ms:
        return f"{s.profiled_wall_ms / s.unprofiled_wall_ms:.2f}x"
    return "unknown"
