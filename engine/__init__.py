"""trackscope engine: video, trackers, timing, telemetry, reports. Never imports Qt."""

__version__ = "0.1.0"
