"""Bundled data: the sample video with ground truth, and the CorrTrack weights."""
