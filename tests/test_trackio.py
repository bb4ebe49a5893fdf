"""Queries CSV, tracks files and ground truth: round trips and clear errors on bad files."""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest

from engine.core.errors import QueryError, UserError
from engine.io import trackio
from engine.io.trackio import (
    MAX_CSV_FIELD_CHARS,
    MAX_GRID,
    MAX_QUERIES,
    grid_queries,
    load_ground_truth,
    load_tracks,
    read_queries_csv,
    save_tracks,
    write_queries_csv,
)


def test_grid_is_inside_frame():
    q = grid_queries(4, 64, 32, t=3)
    assert q.shape == (16, 3) and (q[:, 0] == 3).all()
    assert q[:, 1].min() > 0 and q[:, 1].max() < 63 and q[:, 2].max() < 31


def test_queries_round_trip(tmp_path):
    q = np.array([[0, 1.5, 2.25], [7, 30, 40]], np.float32)
    write_queries_csv(tmp_path / "q.csv", q)
    np.testing.assert_allclose(read_queries_csv(tmp_path / "q.csv"), q)


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "empty"),
        ("a,b,c\n1,2,3\n", "header t,x,y"),
        ("t,x,y\n", "no queries"),
        ("t,x,y\n0,1\n", "line 2 has 2 values"),
        ("t,x,y\n0,one,2\n", "line 2: not a number"),
        ("t,x,y\n0,nan,2\n", "NaN"),
    ],
)
def test_bad_queries_files(tmp_path, text, words):
    p = tmp_path / "q.csv"
    p.write_text(text)
    with pytest.raises(QueryError, match=words) as err:
        read_queries_csv(p)
    assert str(p) in str(err.value)


def test_missing_queries_file(tmp_path):
    with pytest.raises(QueryError, match="not found"):
        read_queries_csv(tmp_path / "nope.csv")


def test_tracks_npz_and_csv(tmp_path):
    tracks = np.random.default_rng(0).random((3, 5, 2)).astype(np.float32)
    visible = np.ones((3, 5), bool)
    visible[1, 2] = False
    queries = np.zeros((3, 3), np.float32)
    save_tracks(tmp_path / "t.npz", tracks, visible, queries)
    d = load_tracks(tmp_path / "t.npz")
    np.testing.assert_array_equal(d["tracks"], tracks)
    np.testing.assert_array_equal(d["visible"], visible)
    save_tracks(tmp_path / "t.csv", tracks, visible, queries)
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0].startswith("point,t,x,y,visible") and len(lines) == 1 + 15
    assert lines[1 + 5 + 2].split(",")[4] == "0"


def test_npz_never_unpickles(tmp_path):
    p = tmp_path / "evil.npz"
    np.savez(p, tracks=np.array([object()], dtype=object), visible=np.zeros(1), query_t=np.zeros(1))
    with pytest.raises(UserError, match="holds Python objects; never unpickled"):
        load_ground_truth(p)


def test_ground_truth_shape_mismatch(tmp_path):
    p = tmp_path / "gt.npz"
    np.savez(p, tracks=np.zeros((2, 4, 2)), visible=np.zeros((2, 5), bool), query_t=np.zeros(2))
    with pytest.raises(UserError, match="do not match"):
        load_ground_truth(p)
    np.savez(p, tracks=np.zeros((2, 4, 2)))
    with pytest.raises(UserError, match="missing array"):
        load_ground_truth(p)


# ------------------------------------------------------------------------- hostile inputs and atomic writes


def _tracks(n: int = 3, t: int = 5):
    rng = np.random.default_rng(1)
    return rng.random((n, t, 2)).astype(np.float32), np.ones((n, t), bool), np.zeros((n, 3), np.float32)


def test_grid_over_the_limit_is_refused():
    with pytest.raises(QueryError, match=f"grid size 100000 is too large.*limit is {MAX_GRID}"):
        grid_queries(100000, 64, 64)
    assert grid_queries(MAX_GRID, 64, 64).shape == (MAX_GRID**2, 3)


def test_queries_from_a_device_file_are_refused():
    with pytest.raises(QueryError, match="/dev/zero: queries file is not a regular file"):
        read_queries_csv("/dev/zero")


def test_queries_file_over_the_size_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(trackio, "MAX_QUERIES_FILE_BYTES", 100)
    p = tmp_path / "q.csv"
    p.write_text("t,x,y\n" + "0,1,1\n" * 50)
    with pytest.raises(QueryError, match="larger than the limit"):
        read_queries_csv(p)


def test_too_many_queries(tmp_path):
    p = tmp_path / "q.csv"
    p.write_text("t,x,y\n" + "0,1,1\n" * (MAX_QUERIES + 1))
    with pytest.raises(QueryError, match=f"more than {MAX_QUERIES} queries"):
        read_queries_csv(p)


def test_huge_csv_field_and_binary_junk(tmp_path):
    p = tmp_path / "q.csv"
    p.write_text("t,x,y\n0,1," + "9" * (MAX_CSV_FIELD_CHARS + 10) + "\n")
    with pytest.raises(QueryError, match="line 2: not valid CSV"):
        read_queries_csv(p)
    p.write_bytes(b"t,x,y\n\x00\x01\x02")
    with pytest.raises(QueryError, match="binary data"):
        read_queries_csv(p)


def test_npz_member_that_is_not_npy(tmp_path):
    p = tmp_path / "gt.npz"
    np.savez(p, visible=np.zeros((2, 4), bool), query_t=np.zeros(2))
    with zipfile.ZipFile(p, "a") as z:
        z.writestr("tracks", b"not an array")
    with pytest.raises(UserError, match="member 'tracks' is not a .npy array"):
        load_ground_truth(p)
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("tracks.npy", b"not an array either")
    with pytest.raises(UserError, match="member 'tracks.npy' is not a .npy array"):
        load_ground_truth(p)


def test_npz_member_declaring_a_huge_array(tmp_path, monkeypatch):
    monkeypatch.setattr(trackio, "MAX_NPZ_ARRAY_BYTES", 1000)
    p = tmp_path / "gt.npz"
    np.savez(p, tracks=np.zeros((20, 10, 2)), visible=np.zeros((20, 10), bool), query_t=np.zeros(20))
    with pytest.raises(UserError, match="member 'tracks.npy' declares .* over the limit"):
        load_ground_truth(p)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_ground_truth_nan_or_inf(tmp_path, value):
    p = tmp_path / "gt.npz"
    tracks = np.zeros((2, 4, 2), np.float32)
    tracks[1, 2, 0] = value
    np.savez(p, tracks=tracks, visible=np.ones((2, 4), bool), query_t=np.zeros(2))
    with pytest.raises(UserError, match="ground truth tracks holds 1 NaN or infinite value"):
        load_ground_truth(p)


@pytest.mark.parametrize("name", ["t.npz", "t.csv"])
def test_tracks_write_is_atomic_on_an_error(tmp_path, monkeypatch, name):
    """An exception mid-write leaves the previous file as it was and no temp file."""
    path = tmp_path / name
    save_tracks(path, *_tracks())
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(trackio, "_write_tracks_csv", boom)
    monkeypatch.setattr(trackio.np, "savez_compressed", boom)
    with pytest.raises(KeyboardInterrupt):
        save_tracks(path, *_tracks(7, 9))
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_tracks_file_mode_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        save_tracks(tmp_path / "t.npz", *_tracks())
        save_tracks(tmp_path / "t.csv", *_tracks())
    finally:
        os.umask(old)
    assert (tmp_path / "t.npz").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "t.csv").stat().st_mode & 0o777 == 0o640


def test_tracks_write_error_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot write the tracks file"):
        save_tracks(tmp_path / "missing" / "t.npz", *_tracks())


@pytest.mark.parametrize("field", ["1_0", "１０", "٣", "0x10", "1e", "--1"])
def test_queries_numbers_are_plain_ascii(tmp_path, field):
    """float() reads '1_0' and full-width digits as 10: a queries file must hold plain ASCII numbers."""
    p = tmp_path / "q.csv"
    p.write_text(f"t,x,y\n0,{field},2\n", encoding="utf-8")
    with pytest.raises(QueryError, match="line 2: not a number"):
        read_queries_csv(p)


def test_queries_numbers_in_every_plain_form_are_read(tmp_path):
    p = tmp_path / "q.csv"
    p.write_text("t,x,y\n0, 1.5 ,+2\n1,.5,3.\n2,1e1,-2.5E-1\n")
    assert read_queries_csv(p).tolist() == [[0, 1.5, 2], [1, 0.5, 3], [2, 10, -0.25]]
