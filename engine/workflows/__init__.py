"""Multi-run jobs that drive sessions and record reports: bench sweeps, evaluation sets."""
