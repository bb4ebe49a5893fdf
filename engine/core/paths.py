"""Where bundled files live and how files beside a video are named: the one owner of both."""

from __future__ import annotations

from pathlib import Path

#: the bundled resources folder (sample video, its ground truth, CorrTrack weights)
RESOURCES = Path(__file__).resolve().parents[2] / "resources"
SAMPLE_VIDEO = RESOURCES / "sample.mp4"

VIDEO_SUFFIX = ".mp4"
QUERIES_SUFFIX = ".queries.csv"
GROUND_TRUTH_SUFFIX = ".gt.npz"


def resources_dir() -> Path:
    """The bundled resources folder: the installed ``resources`` package, else the source tree's."""
    try:
        import resources

        if getattr(resources, "__file__", None):
            return Path(resources.__file__).resolve().parent
        return Path(next(iter(resources.__path__))).resolve()
    except (ImportError, StopIteration):
        return RESOURCES


def sidecar(video: str | Path, suffix: str) -> Path:
    """NAME.mp4 -> NAME<suffix> beside it (e.g. NAME.queries.csv, NAME.gt.npz)."""
    video = Path(video)
    stem = video.name.rsplit(".", 1)[0] if "." in video.name else video.name
    return video.with_name(stem + suffix)


def queries_sidecar(video: str | Path) -> Path:
    """The queries CSV that belongs to a video: NAME.queries.csv."""
    return sidecar(video, QUERIES_SUFFIX)


def ground_truth_sidecar(video: str | Path) -> Path:
    """The ground-truth NPZ that belongs to a video: NAME.gt.npz."""
    return sidecar(video, GROUND_TRUTH_SUFFIX)
