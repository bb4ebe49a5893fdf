"""Centre-aligned pixel grids: where a point lands when its image is resized, the one formula.

Every grid here uses OpenCV's convention: x right, y down, (0, 0) the centre of the top-left pixel, so
an image of W pixels spans -0.5 .. W - 0.5. ``cv2.resize`` (INTER_AREA and INTER_LINEAR) and
``torch.nn.functional.interpolate(..., align_corners=False)`` are centre-aligned: the two grids share
their outer edges, not their first pixel centres. A coordinate ``x`` on one grid is therefore
``(x + 0.5) * s - 0.5`` on a grid with ``s`` of its pixels per pixel of the first, never ``x * s`` (off by
``(s - 1) / 2`` px: 2.15 px for 1920 px kept at 364).
"""

from __future__ import annotations

from typing import Any

#: half a pixel: a pixel centre is at an integer coordinate, its area reaches 0.5 px either side
HALF_PIXEL = 0.5


def resample_coordinates(coords: Any, scale: Any) -> Any:
    """Coordinates on one grid -> the same places on a grid with ``scale`` of its pixels per pixel of this one.

    coords: numpy arrays or torch tensors (any shape; scale broadcasts over its last axis), px.
    scale: target pixels per source pixel (a number or per-axis factors), e.g. new_width / old_width.
    """
    return (coords + HALF_PIXEL) * scale - HALF_PIXEL
