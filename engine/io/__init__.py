"""Reading and writing media and point files: videos, queries/tracks files, pixel geometry."""
