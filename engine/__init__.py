"""trackscope engine: video, trackers, timing, telemetry, reports. Never imports Qt."""

import os

# FFmpeg (inside OpenCV) prints its own decoder complaints ("moov atom not found") to stderr; our
# errors name the file and the problem instead. A user who wants FFmpeg's messages sets this first.
os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")

__version__ = "0.1.0"
