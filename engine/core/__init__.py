"""The lowest layer: errors, run configuration, precision modes, devices, stage timing, paths."""
