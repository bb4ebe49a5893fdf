"""Files around a run: queries CSV, tracks NPZ/CSV, ground-truth NPZ (layouts in DESIGN.md).

Queries CSV: header ``t,x,y``, one query per row. Tracks NPZ: ``tracks`` float32 [N, T, 2],
``visible`` bool [N, T], ``queries`` float32 [N, 3]. Ground truth NPZ: ``tracks``, ``visible``,
``query_t``. NPZ files are read member by member with ``allow_pickle=False``: never unpickle a file,
never trust a size before it is checked against a limit. Tracks files are written atomically
(``engine.core.atomic``): an error or a signal mid-write leaves the previous file as it was.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import stat
import zipfile
from pathlib import Path

import numpy as np

from engine.core.atomic import atomic_open, atomic_path
from engine.core.errors import QueryError, UserError

#: most query points one run takes (a queries CSV or a grid)
MAX_QUERIES = 100_000
#: largest K of a K x K grid (K*K <= MAX_QUERIES)
MAX_GRID = math.isqrt(MAX_QUERIES)
#: largest queries CSV read, bytes
MAX_QUERIES_FILE_BYTES = 64 * 1024 * 1024
#: longest field of a queries CSV, characters (csv's own default limit, said plainly)
MAX_CSV_FIELD_CHARS = 128 * 1024
#: a number in a queries CSV: ASCII digits only, as C and NumPy write them (float() alone also takes ``1_0`` and
#: full-width or Arabic-Indic digits, reading them as 10); nan and inf are read, then refused as not finite
CSV_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)",
                        re.ASCII | re.IGNORECASE)
#: largest array an NPZ member may declare, bytes (checked from its header before it is read)
MAX_NPZ_ARRAY_BYTES = 4 * 1024**3
#: most members an NPZ may hold
MAX_NPZ_MEMBERS = 64


def grid_queries(k: int, width: int, height: int, t: int = 0, margin: float = 0.05) -> np.ndarray:
    """A k x k grid of queries on frame ``t``, inset by ``margin`` of the frame size. [k*k, 3]."""
    if k < 1:
        raise QueryError(f"grid size must be at least 1, got {k}")
    if k > MAX_GRID:
        raise QueryError(f"grid size {k} is too large: {k}x{k} = {k * k} points, the limit is {MAX_GRID} "
                         f"({MAX_QUERIES} points)")
    xs = np.linspace(margin * (width - 1), (1 - margin) * (width - 1), k)
    ys = np.linspace(margin * (height - 1), (1 - margin) * (height - 1), k)
    gx, gy = np.meshgrid(xs, ys)
    return np.stack([np.full(k * k, float(t)), gx.ravel(), gy.ravel()], axis=1).astype(np.float32)


def _read_text_limited(path: Path, limit: int, what: str) -> str:
    """The text of a regular file of at most ``limit`` bytes; QueryError otherwise."""
    if not path.exists():
        raise QueryError(f"{path}: {what} not found")
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise QueryError(f"{path}: {what} is not a regular file")
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise QueryError(f"{path}: cannot read {what}: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise QueryError(f"{path}: {what} is larger than the limit of {limit // 2**20} MiB")
    if b"\0" in data:
        raise QueryError(f"{path}: {what} holds binary data (NUL bytes), not CSV text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise QueryError(f"{path}: {what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _csv_rows(path: Path, text: str) -> list[list[str]]:
    """The non-blank rows of a CSV text; QueryError naming the line for a field over the limit."""
    rows = []
    previous = csv.field_size_limit(MAX_CSV_FIELD_CHARS)
    try:
        reader = csv.reader(io.StringIO(text))
        try:
            for row in reader:
                if any(c.strip() for c in row):
                    rows.append(row)
                if len(rows) > MAX_QUERIES + 1:
                    raise QueryError(f"{path}: more than {MAX_QUERIES} queries (the limit)")
        except csv.Error as exc:
            raise QueryError(f"{path}: line {reader.line_num}: not valid CSV ({exc}; fields are limited "
                             f"to {MAX_CSV_FIELD_CHARS} characters)") from exc
    finally:
        csv.field_size_limit(previous)
    return rows


def read_queries_csv(path: str | Path) -> np.ndarray:
    """Read ``t,x,y`` rows; errors name the file, the line and what is wrong."""
    path = Path(path)
    text = _read_text_limited(path, MAX_QUERIES_FILE_BYTES, "queries file")
    rows = _csv_rows(path, text)
    if not rows:
        raise QueryError(f"{path}: queries file is empty", "expected a header t,x,y and one row per query")
    header = [c.strip().lower() for c in rows[0]]
    if header[:3] != ["t", "x", "y"]:
        raise QueryError(f"{path}: first line must be the header t,x,y, found {','.join(rows[0])[:80]!r}")
    out = []
    for lineno, row in enumerate(rows[1:], start=2):
        if len(row) < 3:
            raise QueryError(f"{path}: line {lineno} has {len(row)} values, expected 3 (t,x,y)")
        fields = [c.strip() for c in row[:3]]
        if not all(CSV_NUMBER.fullmatch(c) for c in fields):
            raise QueryError(f"{path}: line {lineno}: not a number: {','.join(row)[:80]!r}",
                             "write plain ASCII numbers such as 12 or 3.5 (no underscores or other digits)")
        t, x, y = (float(c) for c in fields)
        if not np.isfinite([t, x, y]).all():
            raise QueryError(f"{path}: line {lineno}: NaN or infinite value")
        out.append((t, x, y))
    if not out:
        raise QueryError(f"{path}: no queries after the header")
    return np.asarray(out, dtype=np.float32)


def write_queries_csv(path: str | Path, queries: np.ndarray) -> None:
    """Write queries [N, 3] as a ``t,x,y`` CSV, atomically."""
    path = Path(path)
    try:
        with atomic_open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["t", "x", "y"])
            for t, x, y in np.asarray(queries, dtype=np.float64):
                w.writerow([int(round(t)), f"{x:.3f}", f"{y:.3f}"])
    except OSError as exc:
        raise UserError(f"{path}: cannot write the queries file: {exc.strerror or exc}") from exc


def _write_tracks_csv(f, tracks: np.ndarray, visible: np.ndarray, queries: np.ndarray) -> None:
    """One row per point and frame into an open text file."""
    w = csv.writer(f)
    w.writerow(["point", "t", "x", "y", "visible", "query_t", "query_x", "query_y"])
    for i in range(tracks.shape[0]):
        qt, qx, qy = queries[i]
        for t in range(tracks.shape[1]):
            x, y = tracks[i, t]
            w.writerow([i, t, f"{x:.3f}", f"{y:.3f}", int(visible[i, t]), int(qt), f"{qx:.3f}", f"{qy:.3f}"])


def save_tracks(path: str | Path, tracks: np.ndarray, visible: np.ndarray, queries: np.ndarray) -> None:
    """NPZ by default; CSV (one row per point and frame) when the name ends in .csv. Atomic.

    A failed write (a full disk, a file-size limit, a signal) leaves any previous file at ``path`` intact
    and no temp file; an OSError becomes a UserError naming the file.
    """
    path = Path(path)
    tracks = np.asarray(tracks, dtype=np.float32)
    visible = np.asarray(visible, dtype=bool)
    queries = np.asarray(queries, dtype=np.float32)
    try:
        if path.suffix.lower() == ".csv":
            with atomic_open(path, "w", newline="") as f:
                _write_tracks_csv(f, tracks, visible, queries)
        else:
            with atomic_path(path) as tmp:  # the temp name ends in .npz: numpy adds nothing
                np.savez_compressed(tmp, tracks=tracks, visible=visible, queries=queries)
    except OSError as exc:
        raise UserError(f"{path}: cannot write the tracks file: {exc.strerror or exc}") from exc


def _read_member(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """One .npy member, its header checked (no object dtype, declared size under the limit) first."""
    fmt = np.lib.format
    with zf.open(info) as f:
        try:
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = fmt.read_array_header_2_0(f)
        except ValueError as exc:
            raise UserError(f"{path}: member {info.filename!r} is not a .npy array ({exc})") from None
        if dtype.hasobject:
            raise UserError(f"{path}: member {info.filename!r} holds Python objects; never unpickled")
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > MAX_NPZ_ARRAY_BYTES:
            raise UserError(f"{path}: member {info.filename!r} declares {shape} {dtype} "
                            f"({nbytes / 2**30:.1f} GiB), over the limit of {MAX_NPZ_ARRAY_BYTES / 2**30:g} GiB")
    with zf.open(info) as f:
        return fmt.read_array(f, allow_pickle=False)


def load_npz(path: str | Path, required: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Load an NPZ without pickle and check it holds ``required`` arrays; every member must be a .npy."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: file not found")
    if not path.is_file():
        raise UserError(f"{path}: not a regular file")
    data: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            members = [m for m in zf.infolist() if not m.is_dir()]
            if len(members) > MAX_NPZ_MEMBERS:
                raise UserError(f"{path}: {len(members)} members, more than the limit of {MAX_NPZ_MEMBERS}")
            for info in members:
                if not info.filename.endswith(".npy"):
                    raise UserError(f"{path}: member {info.filename!r} is not a .npy array")
                data[info.filename[: -len(".npy")]] = _read_member(path, zf, info)
    except UserError:
        raise
    except Exception as exc:  # zipfile, zlib, numpy format: all a broken file
        raise UserError(f"{path}: not a readable NPZ file ({type(exc).__name__}: {exc})") from exc
    missing = [k for k in required if k not in data]
    if missing:
        raise UserError(f"{path}: missing array(s) {', '.join(missing)}; has {', '.join(data) or 'none'}")
    return data


def load_tracks(path: str | Path) -> dict[str, np.ndarray]:
    """A tracks NPZ: ``tracks`` [N, T, 2], ``visible`` [N, T], ``queries`` [N, 3]."""
    d = load_npz(path, ("tracks", "visible", "queries"))
    tracks = d["tracks"]
    if tracks.ndim != 3 or tracks.shape[2] != 2 or d["visible"].shape != tracks.shape[:2]:
        raise UserError(f"{path}: tracks {tracks.shape} and visible {d['visible'].shape} "
                        "do not match [N,T,2]/[N,T]")
    return d


def _count_nonfinite(a: np.ndarray) -> int:
    """How many values of a numeric array are NaN or infinite (0 for a non-float array)."""
    a = np.asarray(a)
    return int(np.count_nonzero(~np.isfinite(a))) if a.dtype.kind in "fc" else 0


def load_ground_truth(path: str | Path) -> dict[str, np.ndarray]:
    """A ground-truth NPZ: ``tracks`` [N, T, 2], ``visible`` [N, T], ``query_t`` [N], all finite numbers."""
    d = load_npz(path, ("tracks", "visible", "query_t"))
    tracks = d["tracks"]
    if tracks.ndim != 3 or tracks.shape[2] != 2:
        raise UserError(f"{path}: ground truth tracks have shape {tracks.shape}, expected [N, T, 2]")
    n_t = tracks.shape[:2]
    if d["visible"].shape != n_t or d["query_t"].shape != n_t[:1]:
        raise UserError(f"{path}: ground truth shapes do not match: tracks {tracks.shape}, "
                        f"visible {d['visible'].shape}, query_t {d['query_t'].shape}")
    for name in ("tracks", "visible", "query_t"):
        if d[name].dtype.kind not in "biuf":
            raise UserError(f"{path}: ground truth {name} has type {d[name].dtype}, expected numbers")
        bad = _count_nonfinite(d[name])
        if bad:
            raise UserError(f"{path}: ground truth {name} holds {bad} NaN or infinite value(s)")
    return d
