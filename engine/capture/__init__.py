"""Deep capture: one extra warm run under torch.profiler, attributed to stages and modules, diagnosed.

    result = capture_session(make_session)            # or capture_run(run_once, device=..., roots=...)
    summary = summarize(result, precision="bf16")     # compact, versioned, JSON round trip
    findings = diagnose_capture(summary, typical_wall_ms=warm_median_ms)
    write_trace(result.chrome, "run.trace.json.gz")   # Perfetto / chrome://tracing
"""

from engine.capture.export import write_trace
from engine.capture.profile import CaptureResult, capture_run, capture_session, tracker_roots
from engine.capture.rules import diagnose_capture
from engine.capture.summary import CaptureSummary, summarize

__all__ = ["CaptureResult", "CaptureSummary", "capture_run", "capture_session", "diagnose_capture", "summarize",
           "tracker_roots", "write_trace"]
