"""What the window does with files and runs: opening, running, exporting (no widgets of their own)."""
