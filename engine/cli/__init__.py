"""The command line: one module per verb; ``main`` dispatches."""

from engine.cli.entry import main

__all__ = ["main"]
