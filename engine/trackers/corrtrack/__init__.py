"""CorrTrack: the built-in 4D-correlation point tracker (network, tracker, weights, training)."""

from .model import CorrTrackConfig, CorrTrackNet
from .tracker import CorrTrackTracker

__all__ = ["CorrTrackConfig", "CorrTrackNet", "CorrTrackTracker"]
