"""One run of a tracker over a video: the session and its event stream."""
