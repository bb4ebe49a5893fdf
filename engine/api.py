"""The app's one way into the engine (this branch's part: the capture view); merged into the real facade."""

from engine.capture import CaptureSummary, diagnose_capture
from engine.capture.attribution import forward_body
from engine.capture.timeline import Lane, Markers, TimelineData, load_timeline
from engine.core.errors import ReportError

__all__ = ["CaptureSummary", "Lane", "Markers", "ReportError", "TimelineData", "diagnose_capture", "forward_body",
           "load_timeline"]
