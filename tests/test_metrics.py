"""TAP-Vid metrics and track-set divergence against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from engine.analysis.metrics import (
    THRESHOLDS,
    TapVidScores,
    divergence,
    eval_mask,
    mean_scores,
    sample_queries,
    tapvid_metrics,
)

SIZE_256 = (256, 256)


def _hand_case():
    """2 points x 4 frames, video 256x256 (no scaling), query mode "first".

    point 0: query t=0 -> evaluated frames 1, 2, 3; gt visible on all.
        frame 1: error 0.5 px, predicted visible
        frame 2: error 3 px,   predicted visible
        frame 3: error 10 px,  predicted occluded
    point 1: query t=1 -> evaluated frames 2, 3.
        frame 2: gt visible, error 0, predicted occluded
        frame 3: gt occluded, predicted visible
    Frames not evaluated carry wild predictions that must not count.
    """
    gt = np.full((2, 4, 2), 100.0)
    gt_vis = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=bool)
    pred = gt.copy()
    pred[0, 1, 0] += 0.5
    pred[0, 2, 1] += 3.0
    pred[0, 3, 0] += 10.0
    pred[0, 0] = np.nan  # query frame of point 0: ignored
    pred[1, 0] += 500.0  # before the query of point 1: ignored
    pred[1, 3] += 40.0  # gt occluded: distance irrelevant
    pred_vis = np.array([[0, 1, 1, 0], [0, 1, 0, 1]], dtype=bool)
    query_t = np.array([0, 1])
    return pred, pred_vis, gt, gt_vis, query_t


def test_hand_computed_first_mode():
    s = tapvid_metrics(*_hand_case(), size=SIZE_256)
    # evaluated pairs: (0,1) (0,2) (0,3) (1,2) (1,3) -> 5; gt visible among them: 4 with errors 0.5, 3, 10, 0
    assert s.num_eval == 5 and s.num_points == 2
    # within (strictly less than): thr1: 2/4, thr2: 2/4, thr4: 3/4, thr8: 3/4, thr16: 4/4 -> mean 0.7
    assert s.pts_within_by_thr == pytest.approx({1: 0.5, 2: 0.5, 4: 0.75, 8: 0.75, 16: 1.0})
    assert s.delta_avg == pytest.approx(0.7)
    # predicted visible: (0,1) (0,2) (1,3)
    # thr 1, 2: TP={(0,1)}=1, FP={(0,2),(1,3)}=2, FN={(0,2),(0,3),(1,2)}=3 -> 1/6
    # thr 4, 8, 16: TP={(0,1),(0,2)}=2, FP={(1,3)}=1, FN={(0,3),(1,2)}=2 -> 2/5
    assert s.jaccard_by_thr == pytest.approx({1: 1 / 6, 2: 1 / 6, 4: 0.4, 8: 0.4, 16: 0.4})
    assert s.aj == pytest.approx((2 / 6 + 3 * 0.4) / 5)  # 23/75
    # visibility right at (0,1) (0,2); wrong at (0,3) (1,2) (1,3) -> 2/5
    assert s.oa == pytest.approx(0.4)


def test_scale_to_256():
    """A 2 px error in a 512x512 video is 1 px at 256: not within 1 (strict), within 2."""
    gt = np.zeros((1, 2, 2))
    pred = gt.copy()
    pred[0, 1, 0] = 2.0
    vis = np.ones((1, 2), dtype=bool)
    s = tapvid_metrics(pred, vis, gt, vis, np.array([0]), size=(512, 512))
    assert s.pts_within_by_thr[1] == 0.0 and s.pts_within_by_thr[2] == 1.0
    pred[0, 1, 0] = 1.5  # 0.75 px at 256
    s = tapvid_metrics(pred, vis, gt, vis, np.array([0]), size=(512, 512))
    assert s.pts_within_by_thr[1] == 1.0
    # width and height scale separately: 512 wide x 128 high, a 2 px error in y is 4 px at 256
    pred = gt.copy()
    pred[0, 1, 1] = 2.0
    s = tapvid_metrics(pred, vis, gt, vis, np.array([0]), size=(512, 128))
    assert s.pts_within_by_thr[4] == 0.0 and s.pts_within_by_thr[8] == 1.0


def test_query_frame_and_earlier_are_not_evaluated():
    gt = np.zeros((1, 5, 2))
    vis = np.ones((1, 5), dtype=bool)
    pred = gt.copy()
    pred[0, :3] = 1000.0  # frames 0..2 wrong, query at 2
    pred_vis = vis.copy()
    pred_vis[0, :3] = False
    s = tapvid_metrics(pred, pred_vis, gt, vis, np.array([2]), size=SIZE_256)
    assert s.num_eval == 2
    assert s.aj == 1.0 and s.delta_avg == 1.0 and s.oa == 1.0


def test_strided_mode_evaluates_all_but_query_frame():
    mask = eval_mask(np.array([2]), 4, "strided")
    assert mask.tolist() == [[True, True, False, True]]
    gt = np.zeros((1, 4, 2))
    vis = np.ones((1, 4), dtype=bool)
    pred = gt.copy()
    pred[0, 0] = 5.0  # before the query: counts in strided mode (error sqrt(50) ~ 7.07 px)
    pred[0, 2] = 1000.0  # the query frame itself: never counts
    s = tapvid_metrics(pred, vis, gt, vis, np.array([2]), size=SIZE_256, query_mode="strided")
    assert s.num_eval == 3
    # within: thr 1, 2, 4 -> 2/3; thr 8, 16 -> 3/3
    assert s.pts_within_by_thr == pytest.approx({1: 2 / 3, 2: 2 / 3, 4: 2 / 3, 8: 1.0, 16: 1.0})
    first = tapvid_metrics(pred, vis, gt, vis, np.array([2]), size=SIZE_256, query_mode="first")
    assert first.num_eval == 1 and first.delta_avg == 1.0


def test_perfect_prediction_scores_one():
    rng = np.random.default_rng(0)
    gt = rng.uniform(0, 100, (6, 8, 2))
    vis = rng.random((6, 8)) > 0.3
    s = tapvid_metrics(gt, vis, gt, vis, np.zeros(6), size=(100, 100))
    assert s.aj == pytest.approx(1.0) and s.delta_avg == pytest.approx(1.0) and s.oa == pytest.approx(1.0)


def test_all_occluded_prediction():
    """Predicting nothing visible: AJ 0 and OA = share of gt-occluded evaluated frames."""
    gt = np.zeros((2, 5, 2))
    gt_vis = np.ones((2, 5), dtype=bool)
    gt_vis[0, 3:] = False  # 2 of the 8 evaluated frames occluded
    s = tapvid_metrics(gt, np.zeros((2, 5), dtype=bool), gt, gt_vis, np.array([0, 0]), size=SIZE_256)
    assert s.aj == 0.0
    assert s.oa == pytest.approx(2 / 8)
    assert s.delta_avg == 1.0  # positions are still exact


def test_nan_prediction_is_never_within():
    gt = np.zeros((1, 3, 2))
    vis = np.ones((1, 3), dtype=bool)
    pred = gt.copy()
    pred[0, 2] = np.nan
    s = tapvid_metrics(pred, vis, gt, vis, np.array([0]), size=SIZE_256)
    assert all(v == 0.5 for v in s.pts_within_by_thr.values())
    # TP 1, FP 1 (NaN frame predicted visible), FN 1 -> 1/3
    assert s.aj == pytest.approx(1 / 3)


def test_points_without_evaluated_frames_and_empty_sets():
    gt = np.zeros((2, 3, 2))
    vis = np.ones((2, 3), dtype=bool)
    s = tapvid_metrics(gt, vis, gt, vis, np.array([0, 2]), size=SIZE_256)  # point 1 queried on the last frame
    assert s.num_eval == 2 and s.aj == 1.0
    with pytest.raises(ValueError, match="no frames to evaluate"):
        tapvid_metrics(gt, vis, gt, vis, np.array([2, 2]), size=SIZE_256)
    with pytest.raises(ValueError, match="empty"):
        tapvid_metrics(np.zeros((0, 3, 2)), np.zeros((0, 3), bool), np.zeros((0, 3, 2)),
                       np.zeros((0, 3), bool), np.zeros(0), size=SIZE_256)
    with pytest.raises(ValueError, match="do not match"):
        tapvid_metrics(np.zeros((1, 3, 2)), vis, gt, vis, np.array([0, 0]), size=SIZE_256)
    with pytest.raises(ValueError, match="query_mode"):
        tapvid_metrics(gt, vis, gt, vis, np.array([0, 0]), size=SIZE_256, query_mode="last")
    with pytest.raises(ValueError, match="empty"):
        mean_scores([])


def test_mean_scores_and_to_dict():
    a = TapVidScores(0.5, 0.6, 0.7, {t: 0.5 for t in THRESHOLDS}, {t: 0.6 for t in THRESHOLDS}, 3, 10)
    nan = float("nan")
    b = TapVidScores(0.7, 0.8, nan, {t: 0.7 for t in THRESHOLDS}, {t: 0.8 for t in THRESHOLDS}, 5, 20)
    m = mean_scores([a, b])
    assert m["aj"] == pytest.approx(0.6) and m["delta_avg"] == pytest.approx(0.7)
    assert m["oa"] == pytest.approx(0.7)  # the undefined score is left out
    assert m["num_videos"] == 2 and m["num_points"] == 8 and m["num_eval"] == 30
    d = b.to_dict()
    assert d["oa"] is None and d["jaccard_by_thr"]["16"] == 0.7


def test_sample_queries():
    gt = np.arange(2 * 11 * 2, dtype=np.float32).reshape(2, 11, 2)
    vis = np.zeros((2, 11), dtype=bool)
    vis[0, 3:] = True
    q, idx = sample_queries(gt, vis, "first")
    assert idx.tolist() == [0] and q[0].tolist() == [3.0, *gt[0, 3].tolist()]
    q, idx = sample_queries(gt, vis, "strided")
    assert idx.tolist() == [0, 0] and q[:, 0].tolist() == [5.0, 10.0]


def test_divergence():
    a = np.zeros((3, 4, 2))
    b = a.copy()
    b[0, :, 0] = 3.0  # point 0: 3 px apart everywhere
    b[1, 2, 1] = 4.0  # point 1: 4 px apart on one frame of four
    va = np.ones((3, 4), dtype=bool)
    vb = va.copy()
    vb[2] = False  # point 2: never both visible
    d = divergence(a, va, b, vb)
    assert d.per_point_px[0] == pytest.approx(3.0)
    assert d.per_point_px[1] == pytest.approx(1.0)
    assert np.isnan(d.per_point_px[2])
    assert d.mean_px == pytest.approx((12 + 4) / 8)
    assert d.max_px == pytest.approx(4.0)
    assert d.visibility_agreement == pytest.approx(8 / 12)
    assert d.per_point_visibility_agreement.tolist() == [1.0, 1.0, 0.0]
    assert d.most_divergent(2).tolist() == [0, 1]
    assert d.most_divergent(5).tolist() == [0, 1, 2]
    with pytest.raises(ValueError):
        divergence(a, va, b[:2], vb[:2])
