"""Training CorrTrack: synthetic videos with exact ground truth, losses, the training loop."""
