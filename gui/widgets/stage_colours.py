"""One colour per stage name, the same in every chart, run and session (not by the order stages ran in).

The built-in tracker's and LK's stages have fixed colours from a tab20-like palette; any other stage
(a plugin's modules) gets a colour derived from a checksum of its name, so it too never changes.
"""

from __future__ import annotations

import colorsys
import zlib

from engine.api import BUILTIN_STAGES, LK_STAGES

RGB = tuple[int, int, int]

#: tab20 reordered: strong colours first, then light ones
PALETTE: tuple[RGB, ...] = (
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
    (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207), (174, 199, 232), (255, 187, 120),
    (152, 223, 138), (255, 152, 150), (197, 176, 213), (196, 156, 148), (247, 182, 210), (199, 199, 199),
    (219, 219, 141), (158, 218, 229),
)
#: the stages with a fixed colour: the built-in tracker's in the order they run, then LK's
FIXED_STAGES: dict[str, RGB] = {name: PALETTE[i] for i, name in enumerate((*BUILTIN_STAGES, *LK_STAGES))}
#: saturation and value of the colours made for other stages (their hue comes from the name)
OTHER_SATURATION, OTHER_VALUE = 0.65, 0.85
CRC_RANGE = 2 ** 32


def stage_colour(name: str) -> RGB:
    """The colour of stage ``name``: fixed for known stages, else from a checksum of the name."""
    fixed = FIXED_STAGES.get(name)
    if fixed is not None:
        return fixed
    hue = zlib.crc32(name.encode("utf-8")) / CRC_RANGE
    r, g, b = colorsys.hsv_to_rgb(hue, OTHER_SATURATION, OTHER_VALUE)
    return int(round(r * 255)), int(round(g * 255)), int(round(b * 255))
