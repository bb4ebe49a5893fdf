"""Max abs difference between the tracks of two NPZ files (same queries); exit 1 unless it is 0.0."""

from __future__ import annotations

import argparse
import sys

import numpy as np


def max_abs_difference(a_path: str, b_path: str) -> float:
    """Largest |a - b| over tracks [N, T, 2] (NaN equal to NaN); inf when visibility or queries differ."""
    a, b = np.load(a_path), np.load(b_path)
    if not (np.array_equal(a["visible"], b["visible"]) and np.array_equal(a["queries"], b["queries"])):
        return float("inf")
    ta, tb = a["tracks"].astype(np.float64), b["tracks"].astype(np.float64)
    if ta.shape != tb.shape or not np.array_equal(np.isnan(ta), np.isnan(tb)):
        return float("inf")
    return float(np.nanmax(np.abs(ta - tb))) if ta.size else 0.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("before")
    p.add_argument("after")
    args = p.parse_args()
    diff = max_abs_difference(args.before, args.after)
    print(f"max abs difference {diff}")
    return 0 if diff == 0.0 else 1


if __name__ == "__main__":
    sys.exit(main())
