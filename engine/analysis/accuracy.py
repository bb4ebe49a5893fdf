"""A run's accuracy for its report: TAP-Vid scores against ground truth, or divergence from a reference run.

The caller (a workflow, the app) grades the run and hands the Accuracy to ``RunRecorder.build``; the
report layer does no grading itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from engine.analysis.metrics import divergence, tapvid_metrics
from engine.core.errors import UserError
from engine.report.parts import Accuracy
from engine.report.schema import Report

#: what a reference may be: a Report with tracks, a {"tracks", "visible"[, "label"]} mapping, or a pair
Reference = Report | Mapping[str, Any] | tuple[np.ndarray, np.ndarray]


def accuracy_vs_ground_truth(tracks: np.ndarray, visible: np.ndarray, ground_truth: Mapping[str, np.ndarray],
                             size: tuple[int, int]) -> Accuracy:
    """TAP-Vid scores of tracks [N, T, 2] / visible [N, T] against ground truth; size: the source (w, h)."""
    try:
        scores = tapvid_metrics(tracks, visible, ground_truth["tracks"], ground_truth["visible"],
                                ground_truth["query_t"], size=size)
    except (ValueError, KeyError) as exc:
        raise UserError(f"ground truth does not fit this run: {exc}",
                        "use the ground truth made for this video and these queries") from exc
    return Accuracy.from_dict({"vs": "ground truth", **scores.to_dict()})


def _reference_arrays(reference: Reference) -> tuple[np.ndarray, np.ndarray, str]:
    """(tracks, visible, label) of a reference."""
    if isinstance(reference, Report):
        arrays = reference.tracks_arrays()
        if arrays is None:
            raise UserError("the reference report holds no tracks", "record it without --no-tracks")
        return arrays[1], arrays[2], reference.precision
    if isinstance(reference, Mapping):
        return reference["tracks"], reference["visible"], str(reference.get("label", "reference"))
    tracks, visible = reference
    return tracks, visible, "reference"


def accuracy_vs_reference(tracks: np.ndarray, visible: np.ndarray, reference: Reference,
                          label: str | None = None) -> Accuracy:
    """Divergence (px, visibility agreement) of tracks from a reference run of the same queries."""
    ref_tracks, ref_visible, ref_label = _reference_arrays(reference)
    try:
        div = divergence(tracks, visible, ref_tracks, ref_visible)
    except ValueError as exc:
        raise UserError(f"reference tracks do not fit this run: {exc}") from exc
    return Accuracy.from_dict({"vs": label or ref_label, **div.to_dict()})


def run_accuracy(final: Any, size: tuple[int, int] | None, ground_truth: Mapping[str, np.ndarray] | None = None,
                 reference: Reference | None = None, reference_label: str | None = None) -> Accuracy | None:
    """The accuracy of a finished run (a session's Finished, or None): vs ground truth when given, else vs
    the reference; None when the run finished nothing or there is nothing to grade against."""
    if final is None or (ground_truth is None and reference is None):
        return None
    if ground_truth is not None:
        return accuracy_vs_ground_truth(final.tracks, final.visible, ground_truth, size or (0, 0))
    assert reference is not None
    return accuracy_vs_reference(final.tracks, final.visible, reference, reference_label)
