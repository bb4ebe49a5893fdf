"""Queries CSV, tracks files and ground truth: round trips and clear errors on bad files."""

from __future__ import annotations

import numpy as np
import pytest

from engine.core.errors import QueryError, UserError
from engine.io.trackio import (
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
    with pytest.raises(UserError, match="not a readable NPZ"):
        load_ground_truth(p)


def test_ground_truth_shape_mismatch(tmp_path):
    p = tmp_path / "gt.npz"
    np.savez(p, tracks=np.zeros((2, 4, 2)), visible=np.zeros((2, 5), bool), query_t=np.zeros(2))
    with pytest.raises(UserError, match="do not match"):
        load_ground_truth(p)
    np.savez(p, tracks=np.zeros((2, 4, 2)))
    with pytest.raises(UserError, match="missing array"):
        load_ground_truth(p)
