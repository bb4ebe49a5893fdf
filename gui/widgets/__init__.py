"""Reusable widgets: the video view, live charts, the message banner, the transport bar."""
