"""Plugin trackers used by the tests (importable as tests.plugins.pathological:NAME)."""
