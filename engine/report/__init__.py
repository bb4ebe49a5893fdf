"""The run report: a typed, versioned record of measurements, its recorder and its files."""
