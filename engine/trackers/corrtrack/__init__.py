"""CorrTrack: the built-in 4D-correlation point tracker (network, tracker, weights, training)."""

from engine.trackers.corrtrack.model import CorrTrackConfig, CorrTrackNet
from engine.trackers.corrtrack.tracker import CorrTrackTracker

__all__ = ["CorrTrackConfig", "CorrTrackNet", "CorrTrackTracker"]
