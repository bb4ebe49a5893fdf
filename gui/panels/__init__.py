"""The main window's tabs and docks: A/B view, trade-offs, diagnosis, run controls."""
