"""Trackers: the protocol, the built-in ones and plugin loading."""

from engine.trackers.base import PreparedVideo, Tracker, TrackResult
from engine.trackers.registry import TrackerCache, available_trackers, load_tracker

__all__ = ["PreparedVideo", "TrackResult", "Tracker", "TrackerCache", "available_trackers", "load_tracker"]
