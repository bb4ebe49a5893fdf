"""Files around a run: queries CSV, tracks NPZ/CSV, ground-truth NPZ (layouts in DESIGN.md).

Queries CSV: header ``t,x,y``, one query per row. Tracks NPZ: ``tracks`` float32 [N, T, 2],
``visible`` bool [N, T], ``queries`` float32 [N, 3]. Ground truth NPZ: ``tracks``, ``visible``,
``query_t``. NPZ files are read with ``allow_pickle=False``: never unpickle a file.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from engine.core.errors import QueryError, UserError


def grid_queries(k: int, width: int, height: int, t: int = 0, margin: float = 0.05) -> np.ndarray:
    """A k x k grid of queries on frame ``t``, inset by ``margin`` of the frame size. [k*k, 3]."""
    if k < 1:
        raise QueryError(f"grid size must be at least 1, got {k}")
    xs = np.linspace(margin * (width - 1), (1 - margin) * (width - 1), k)
    ys = np.linspace(margin * (height - 1), (1 - margin) * (height - 1), k)
    gx, gy = np.meshgrid(xs, ys)
    return np.stack([np.full(k * k, float(t)), gx.ravel(), gy.ravel()], axis=1).astype(np.float32)


def read_queries_csv(path: str | Path) -> np.ndarray:
    """Read ``t,x,y`` rows; errors name the file, the line and what is wrong."""
    path = Path(path)
    if not path.exists():
        raise QueryError(f"{path}: queries file not found")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise QueryError(f"{path}: cannot read queries file: {exc}") from exc
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise QueryError(f"{path}: queries file is empty", "expected a header t,x,y and one row per query")
    header = [c.strip().lower() for c in rows[0]]
    if header[:3] != ["t", "x", "y"]:
        raise QueryError(f"{path}: first line must be the header t,x,y, found {','.join(rows[0])!r}")
    out = []
    for lineno, row in enumerate(rows[1:], start=2):
        if len(row) < 3:
            raise QueryError(f"{path}: line {lineno} has {len(row)} values, expected 3 (t,x,y)")
        try:
            t, x, y = (float(c) for c in row[:3])
        except ValueError as exc:
            raise QueryError(f"{path}: line {lineno}: not a number: {','.join(row)!r}") from exc
        if not np.isfinite([t, x, y]).all():
            raise QueryError(f"{path}: line {lineno}: NaN or infinite value")
        out.append((t, x, y))
    if not out:
        raise QueryError(f"{path}: no queries after the header")
    return np.asarray(out, dtype=np.float32)


def write_queries_csv(path: str | Path, queries: np.ndarray) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t", "x", "y"])
        for t, x, y in np.asarray(queries, dtype=np.float64):
            w.writerow([int(round(t)), f"{x:.3f}", f"{y:.3f}"])


def save_tracks(path: str | Path, tracks: np.ndarray, visible: np.ndarray, queries: np.ndarray) -> None:
    """NPZ by default; CSV (one row per point and frame) when the name ends in .csv."""
    path = Path(path)
    tracks = np.asarray(tracks, dtype=np.float32)
    visible = np.asarray(visible, dtype=bool)
    queries = np.asarray(queries, dtype=np.float32)
    if path.suffix.lower() == ".csv":
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["point", "t", "x", "y", "visible", "query_t", "query_x", "query_y"])
            for i in range(tracks.shape[0]):
                qt, qx, qy = queries[i]
                for t in range(tracks.shape[1]):
                    x, y = tracks[i, t]
                    w.writerow([i, t, f"{x:.3f}", f"{y:.3f}", int(visible[i, t]), int(qt), f"{qx:.3f}", f"{qy:.3f}"])
    else:
        np.savez_compressed(path, tracks=tracks, visible=visible, queries=queries)


def load_npz(path: str | Path, required: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Load an NPZ without pickle and check it holds ``required`` arrays."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: file not found")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except Exception as exc:
        raise UserError(f"{path}: not a readable NPZ file ({type(exc).__name__}: {exc})") from exc
    missing = [k for k in required if k not in data]
    if missing:
        raise UserError(f"{path}: missing array(s) {', '.join(missing)}; has {', '.join(data) or 'none'}")
    return data


def load_tracks(path: str | Path) -> dict[str, np.ndarray]:
    d = load_npz(path, ("tracks", "visible", "queries"))
    if d["tracks"].ndim != 3 or d["visible"].shape != d["tracks"].shape[:2]:
        raise UserError(f"{path}: tracks {d['tracks'].shape} and visible {d['visible'].shape} "
                        "do not match [N,T,2]/[N,T]")
    return d


def load_ground_truth(path: str | Path) -> dict[str, np.ndarray]:
    d = load_npz(path, ("tracks", "visible", "query_t"))
    n_t = d["tracks"].shape[:2]
    if d["tracks"].ndim != 3 or d["visible"].shape != n_t or d["query_t"].shape != n_t[:1]:
        raise UserError(f"{path}: ground truth shapes do not match: tracks {d['tracks'].shape}, "
                        f"visible {d['visible'].shape}, query_t {d['query_t'].shape}")
    return d
