"""The synthetic generator: shapes, determinism, and ground truth checked against the pixels."""

from __future__ import annotations

import sys

import cv2
import numpy as np
import pytest
import torch

from engine.cli import main as cli_main
from engine.io.trackio import load_ground_truth, read_queries_csv
from engine.training.synthetic import (
    SynthConfig,
    TextureBank,
    generate_batch,
    generate_video,
    photometric_agreement,
    write_eval_set,
)
from engine.training.synthetic.render import carry_points, render, sample_queries
from engine.training.synthetic.scene import sample_scene

SMALL = SynthConfig(num_frames=8, height=48, width=64, num_points=48)  # not square: catches x/y swaps
EXACT = SynthConfig(num_frames=8, height=48, width=64, num_points=64, photometric=False, num_sprites=(2, 4))
MATCH_TOL = 0.1  # largest channel difference (in [0, 1]) counted as the same colour


@pytest.fixture(scope="module")
def bank() -> TextureBank:
    return TextureBank.build("cpu", size=128, photos=False, procedural=6, seed=3)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _agreement(video: torch.Tensor, tracks: torch.Tensor, visible: torch.Tensor, queries: torch.Tensor) -> float:
    shares = [photometric_agreement(video[i], tracks[i], visible[i], queries[i], MATCH_TOL)
              for i in range(video.shape[0])]
    return float(np.nanmean(shares))


def test_shapes_and_dtypes(bank):
    b = generate_batch(3, SMALL, bank, _gen(0), "cpu")
    assert b.video.shape == (3, 8, 48, 64, 3) and b.video.dtype == torch.uint8
    assert b.tracks.shape == (3, 48, 8, 2) and b.tracks.dtype == torch.float32
    assert b.visible.shape == (3, 48, 8) and b.visible.dtype == torch.bool
    assert b.queries.shape == (3, 48, 3) and b.queries.dtype == torch.float32
    assert torch.isfinite(b.tracks).all()
    assert b.video.float().std() > 10  # not a blank video


def test_same_seed_same_batch_other_seed_differs(bank):
    a = generate_batch(2, SMALL, bank, _gen(7), "cpu")
    b = generate_batch(2, SMALL, bank, _gen(7), "cpu")
    c = generate_batch(2, SMALL, bank, _gen(8), "cpu")
    assert torch.equal(a.video, b.video) and torch.equal(a.tracks, b.tracks)
    assert torch.equal(a.visible, b.visible) and torch.equal(a.queries, b.queries)
    assert not torch.equal(a.video, c.video)


def test_queries_are_visible_in_frame_and_spread_over_time(bank):
    b = generate_batch(4, SMALL, bank, _gen(1), "cpu")
    qt = b.queries[..., 0].long()
    idx = torch.arange(48)
    for i in range(4):
        assert b.visible[i, idx, qt[i]].all()
        assert torch.allclose(b.tracks[i, idx, qt[i]], b.queries[i, :, 1:])
    assert (qt > 0).float().mean() > 0.4 and (qt == 0).any()
    assert (b.queries[..., 1:] >= 0).all() and (b.queries[..., 1] <= 63).all() and (b.queries[..., 2] <= 47).all()
    first = generate_batch(2, SynthConfig(num_frames=8, height=48, width=64, num_points=16,
                                          query_first_frame_only=True), bank, _gen(1), "cpu")
    assert (first.queries[..., 0] == 0).all()


def test_colour_under_visible_tracks_matches_query_colour(bank):
    b = generate_batch(4, EXACT, bank, _gen(2), "cpu")
    assert _agreement(b.video, b.tracks, b.visible, b.queries) > 0.95


def test_inverted_camera_motion_fails_the_photometric_check(bank):
    """The check must catch the bug it exists for: camera motion applied backwards."""
    cfg = SynthConfig(num_frames=8, height=48, width=64, num_points=64, photometric=False, num_sprites=(1, 1),
                      sprite_size=(0.05, 0.08), camera_motion=2.0)
    gen = _gen(4)
    scene = sample_scene(4, cfg, len(bank), bank.size, gen)
    qt, xy, surface = sample_queries(scene, cfg, gen)
    video = render(scene, bank, cfg, gen)
    queries = torch.cat([qt[..., None].float(), xy], -1)
    tracks, visible = carry_points(scene, cfg, qt, xy, surface)
    assert _agreement(video, tracks, visible, queries) > 0.95
    # inverted: image_from_texture(t) = A0^-1 A_t A0^-1 instead of A_t^-1 (motion from frame 0 reversed)
    a = scene.local_from_image[:, 0].double()  # [B, T, 3, 3] texture-from-image
    a0_inv = torch.linalg.inv(a[:, :1])
    wrong = scene.image_from_local.clone()
    wrong[:, 0] = (a0_inv @ a @ a0_inv).float()
    scene.image_from_local = wrong
    bad_tracks, bad_visible = carry_points(scene, cfg, qt, xy, surface)
    moved = (bad_tracks - tracks).norm(dim=-1) > 2.0
    assert moved.float().mean() > 0.3  # the two transforms really differ
    assert _agreement(video, bad_tracks, bad_visible, queries) < 0.7


def test_occlusion_and_leaving_the_frame_make_points_invisible(bank):
    cfg = SynthConfig(num_frames=12, height=64, width=64, num_points=64, num_sprites=(4, 6),
                      sprite_size=(0.2, 0.35), sprite_motion=1.5, camera_motion=1.5, photometric=False)
    b = generate_batch(4, cfg, bank, _gen(5), "cpu")
    x, y = b.tracks[..., 0], b.tracks[..., 1]
    outside = (x < 0) | (x > 63) | (y < 0) | (y > 63)
    assert outside.any() and not b.visible[outside].any()
    occluded = ~outside & ~b.visible
    assert occluded.float().mean() > 0.02
    # an occluded point shows the occluder, not its own surface: colours mostly differ from the query's
    occluded_only = photometric_share(b, occluded)
    visible_only = photometric_share(b, b.visible)
    assert visible_only > 0.95 and occluded_only < 0.6


def photometric_share(b, mask: torch.Tensor) -> float:
    """Share of the (point, frame) pairs in mask, off the query frame, whose colour matches the query."""
    return _agreement(b.video, b.tracks, mask, b.queries)


def test_config_rejects_nonsense_and_edge_cases_render(bank):
    with pytest.raises(ValueError):
        SynthConfig(num_sprites=(3, 1))
    with pytest.raises(ValueError):
        SynthConfig(num_frames=0)
    b = generate_batch(2, SynthConfig(num_frames=1, height=16, width=24, num_points=4, num_sprites=(0, 0)), bank,
                       _gen(0), "cpu")
    assert b.video.shape == (2, 1, 16, 24, 3) and b.visible.all()


def test_texture_bank_splits_are_distinct_and_skimage_is_optional(monkeypatch, capsys):
    train = TextureBank.build("cpu", size=32, photos=False, procedural=3, split="train")
    val = TextureBank.build("cpu", size=32, photos=False, procedural=3, split="val")
    assert train.images.shape == (3, 3, 32, 32) and 0 <= float(train.images.min()) <= float(train.images.max()) <= 1
    assert not set(train.names) & set(val.names)
    assert (train.images - val.images).abs().mean() > 0.05
    monkeypatch.setitem(sys.modules, "skimage.data", None)  # importing it now raises ImportError
    bank = TextureBank.build("cpu", size=32, photos=True, procedural=2)
    assert len(bank) == 2 and "scikit-image" in capsys.readouterr().err
    with pytest.raises(ValueError):
        TextureBank.build("cpu", size=32, photos=False, procedural=1, split="test")


def test_generate_video_numpy(bank):
    d = generate_video(3, SMALL, bank)
    assert d["video"].shape == (8, 48, 64, 3) and d["video"].dtype == np.uint8
    assert d["tracks"].shape == (48, 8, 2) and d["visible"].shape == (48, 8) and d["visible"].dtype == bool
    assert d["queries"].shape == (48, 3) and d["query_t"].shape == (48,)
    assert np.array_equal(d["query_t"], d["queries"][:, 0].astype(int))


def _read_mp4(path) -> np.ndarray:
    cap = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(frame[..., ::-1])
    cap.release()
    return np.stack(frames)


def test_write_eval_set_round_trip(tmp_path, bank):
    paths = write_eval_set(tmp_path, 2, seed=5, cfg=SMALL, prefix="v", textures=bank)
    assert [p.name for p in paths] == ["v_000.mp4", "v_001.mp4"]
    d = generate_video(5 * 100003 + 1, SMALL, bank)
    frames = _read_mp4(paths[1])
    assert frames.shape == (8, 48, 64, 3)
    assert np.abs(frames.astype(float) - d["video"]).mean() < 12  # lossy codec, same content
    gt = load_ground_truth(tmp_path / "v_001.gt.npz")
    assert gt["tracks"].shape == (48, 8, 2) and gt["visible"].shape == (48, 8) and gt["query_t"].shape == (48,)
    np.testing.assert_allclose(gt["tracks"], d["tracks"])
    q = read_queries_csv(tmp_path / "v_001.queries.csv")
    np.testing.assert_allclose(q, d["queries"], atol=1e-3)


def test_sample_command(tmp_path, capsys):
    rc = cli_main(["sample", str(tmp_path / "set"), "--count", "1", "--frames", "4", "--size", "32",
                   "--points", "8"])
    assert rc == 0
    assert (tmp_path / "set" / "synth_000.mp4").exists() and (tmp_path / "set" / "synth_000.gt.npz").exists()
    assert cli_main(["sample", str(tmp_path / "bad"), "--frames", "0"]) == 2
    assert "--frames" in capsys.readouterr().err
    assert cli_main(["sample", str(tmp_path / "bad"), "--size", "33"]) == 2
    assert "even" in capsys.readouterr().err


def test_bundled_sample_is_consistent():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "resources"
    gt = load_ground_truth(root / "sample.gt.npz")
    q = read_queries_csv(root / "sample.queries.csv")
    frames = _read_mp4(root / "sample.mp4")
    assert frames.shape == (47, 256, 256, 3)
    n = gt["tracks"].shape[0]
    assert 64 <= n <= 100 and q.shape == (n, 3) and gt["tracks"].shape == (n, 47, 2)
    assert (gt["query_t"] > 0).any()
    np.testing.assert_array_equal(q[:, 0].astype(int), gt["query_t"])
    assert gt["visible"][np.arange(n), gt["query_t"]].all()
    assert sum(f.stat().st_size for f in root.glob("sample.*")) < 5 * 1024 * 1024


SQUARE = SynthConfig(num_frames=8, height=48, width=48, num_points=64, photometric=False, num_sprites=(2, 4))


def test_batch_views_keep_ground_truth_exact(bank):
    from engine.training.synthetic.config import SynthBatch
    from engine.training.synthetic.views import ALL_VIEWS, FLIP_X, REVERSE, batch_view

    b = generate_batch(2, SQUARE, bank, _gen(11), "cpu")
    base = _agreement(b.video, b.tracks, b.visible, b.queries)
    assert base > 0.9
    for view in range(ALL_VIEWS):
        v = batch_view(b, view)
        assert v.video.shape == b.video.shape and v.tracks.shape == b.tracks.shape
        assert _agreement(v.video, v.tracks, v.visible, v.queries) == pytest.approx(base, abs=1e-6), view
        qt = v.queries[..., 0].round().long()
        picked = torch.gather(v.visible, 2, qt.unsqueeze(-1))
        assert bool(picked.all()), view  # every query stays visible at its own frame
        at_query = torch.gather(v.tracks, 2, qt[..., None, None].expand(-1, -1, 1, 2)).squeeze(2)
        assert torch.allclose(at_query, v.queries[..., 1:]), view  # queries moved with the tracks
    reversed_ = batch_view(b, REVERSE | FLIP_X)
    assert torch.equal(batch_view(reversed_, REVERSE | FLIP_X).video, b.video)  # each view is its own inverse
    # a view that moves the pixels but not the tracks must break the check (so the check can fail)
    wrong = SynthBatch(video=b.video.flip(3), tracks=b.tracks, visible=b.visible, queries=b.queries)
    assert _agreement(wrong.video, wrong.tracks, wrong.visible, wrong.queries) < base - 0.2


def test_transpose_view_needs_square_frames(bank):
    from engine.training.synthetic.views import TRANSPOSE, batch_view

    b = generate_batch(1, SMALL, bank, _gen(1), "cpu")
    batch_view(b, 1)
    with pytest.raises(ValueError, match="square"):
        batch_view(b, TRANSPOSE)


def _gradient_energy(video: torch.Tensor) -> float:
    lum = video.float().mean(-1)
    return float((lum[..., 1:] - lum[..., :-1]).abs().mean() + (lum[..., 1:, :] - lum[..., :-1, :]).abs().mean())


def test_texture_poor_knob_flattens_surfaces_and_is_off_by_default(bank):
    from engine.training.synthetic.textures import texture_detail

    assert float(texture_detail(bank.poor_images()).max()) < 0.5 * float(texture_detail(bank.images).min())
    assert torch.equal(bank.poor_images(), TextureBank.build("cpu", size=128, photos=False, procedural=6,
                                                             seed=3).poor_images())  # seeded
    plain = SynthConfig(num_frames=4, height=48, width=64, num_points=16, num_sprites=(0, 0), photometric=False)
    poor = SynthConfig(**{**plain.__dict__, "texture_poor_share": 1.0})
    rich = generate_batch(4, plain, bank, _gen(3), "cpu")
    flat = generate_batch(4, poor, bank, _gen(3), "cpu")
    assert _gradient_energy(flat.video) < 0.3 * _gradient_energy(rich.video)
    assert _agreement(flat.video, flat.tracks, flat.visible, flat.queries) > 0.95  # ground truth still exact
    scene = sample_scene(64, SynthConfig(texture_poor_share=0.5, texture_poor_sprite_share=0.25), len(bank),
                         bank.size, _gen(1))
    assert scene.poor_index is not None
    assert 0.3 < float((scene.poor_index[:, 0] >= 0).float().mean()) < 0.7
    assert 0.1 < float((scene.poor_index[:, 1:] >= 0).float().mean()) < 0.4
    assert sample_scene(2, SynthConfig(), len(bank), bank.size, _gen(1)).poor_index is None
    with pytest.raises(ValueError):
        SynthConfig(texture_poor_share=1.5)


def test_motion_blur_changes_only_moving_parts_and_never_the_ground_truth(bank):
    from engine.training.synthetic.render import _all_alphas

    still = SynthConfig(num_frames=6, height=48, width=64, num_points=32, photometric=False, camera_motion=0.0,
                        sprite_motion=0.0, num_sprites=(2, 3))
    blurred = SynthConfig(**{**still.__dict__, "motion_blur_prob": 1.0})
    a, b = generate_batch(2, still, bank, _gen(5), "cpu"), generate_batch(2, blurred, bank, _gen(5), "cpu")
    assert torch.equal(a.video, b.video)  # nothing moves: nothing blurs
    moving = SynthConfig(**{**still.__dict__, "sprite_motion": 0.3})
    sharp = generate_batch(2, moving, bank, _gen(6), "cpu")
    blur = generate_batch(2, SynthConfig(**{**moving.__dict__, "motion_blur_prob": 1.0}), bank, _gen(6), "cpu")
    for name in ("tracks", "visible", "queries"):
        assert torch.equal(getattr(sharp, name), getattr(blur, name)), name
    changed = (sharp.video.int() - blur.video.int()).abs().amax(-1) > 0  # [B, T, H, W]
    assert changed.any()
    # the camera is still, so only pixels a sprite covers around that frame may change
    gen = _gen(6)
    scene = sample_scene(2, moving, len(bank), bank.size, gen)
    ys, xs = torch.meshgrid(torch.arange(48.0), torch.arange(64.0), indexing="ij")
    pix = torch.stack([xs, ys], -1).reshape(1, -1, 2).expand(2, -1, -1)
    for t in range(moving.num_frames):
        near = torch.zeros(2, 48 * 64, dtype=torch.bool)
        for u in (max(t - 1, 0), t, min(t + 1, moving.num_frames - 1)):
            alpha = _all_alphas(scene, pix, torch.full((2, 48 * 64), u), moving.edge_px)[..., 1:]
            near |= alpha.amax(-1) > 1e-4
        near = torch.nn.functional.max_pool2d(near.view(2, 1, 48, 64).float(), 3, 1, 1).bool().view(2, 48, 64)
        assert not (changed[:, t] & ~near).any(), t


def test_anchored_sprites_move_with_the_background_and_change_nothing_else(bank):
    from engine.training.synthetic.render import _apply
    from engine.training.synthetic.scene import _radius_px

    free = SynthConfig(num_frames=8, height=48, width=64, num_points=64, photometric=False, num_sprites=(3, 5),
                       camera_motion=2.0)
    tied = SynthConfig(**{**free.__dict__, "anchored_sprite_share": 0.5})
    a = sample_scene(8, free, len(bank), bank.size, _gen(11))
    b = sample_scene(8, tied, len(bank), bank.size, _gen(11))
    assert a.anchored is None and b.anchored is not None
    assert not b.anchored[:, 0].any() and 0.2 < float(b.anchored[:, 1:].float().mean()) < 0.8
    same = ~b.anchored  # the background and the free sprites: drawn as before, untouched
    assert torch.equal(a.local_from_image[same], b.local_from_image[same])
    assert torch.allclose(a.size_px[same], b.size_px[same])
    # the smaller radius of a free (affine) sprite, measured from its matrix, is the one it was drawn with
    assert torch.allclose(_radius_px(a.image_from_local[:, 1:].double()).float(), a.size_px[:, 1:], rtol=1e-3)
    # a point on an anchored sprite follows the background texel under it at every frame; free sprites do not
    T = tied.num_frames
    p = torch.tensor([30.0, 20.0])
    gaps = {True: [], False: []}
    for v in range(8):
        background = _apply(b.image_from_local[v, 0], _apply(b.local_from_image[v, 0, 0], p).expand(T, 2))
        for layer in range(1, b.anchored.shape[1]):
            on_sprite = _apply(b.image_from_local[v, layer], _apply(b.local_from_image[v, layer, 0], p).expand(T, 2))
            gaps[bool(b.anchored[v, layer])].append(float((on_sprite - background).norm(dim=-1).max()))
    assert max(gaps[True]) < 0.05 and min(gaps[False]) > 0.5
    batch = generate_batch(4, tied, bank, _gen(12), "cpu")  # rendered and carried: the colours still agree
    assert _agreement(batch.video, batch.tracks, batch.visible, batch.queries) > 0.95
    with pytest.raises(ValueError):
        SynthConfig(anchored_sprite_share=-0.1)


def test_sample_knobs_and_the_heldout_preset(tmp_path, monkeypatch):
    from engine.cli import sample as sample_cli
    from engine.training.synthetic import evalset

    assert set(sample_cli.HELDOUT_PRESET_NAMES) == set(evalset.HELDOUT_PRESETS)
    parts = {p.prefix: p for p in evalset.HELDOUT_PRESETS["heldout-v2"]}
    assert (parts["ho777"].seed, parts["ho777"].frames, parts["ho777"].count) == (777, 24, 12)  # as documented
    assert (parts["ho778"].seed, parts["ho778"].frames, parts["ho778"].count) == (778, 47, 8)
    v3 = {p.prefix: p for p in evalset.HELDOUT_PRESETS["heldout-v3"]}
    assert [v3[k] for k in ("ho777", "ho778", "long")] == [parts[k] for k in ("ho777", "ho778", "long")]
    assert dict(v3["poorctx"].knobs)["anchored_sprite_share"] > 0 and "poor" not in v3
    small = (evalset.EvalPart("a", 1, 5, 4), evalset.EvalPart("p", 1, 6, 6, (("texture_poor_share", 1.0),)))
    monkeypatch.setitem(evalset.HELDOUT_PRESETS, "heldout-v2", small)
    assert cli_main(["sample", str(tmp_path / "pre"), "--preset", "heldout-v2", "--size", "32", "--points", "8"]) == 0
    names = sorted(p.name for p in (tmp_path / "pre").glob("*.mp4"))
    assert names == ["a_000.mp4", "p_000.mp4"]
    assert load_ground_truth(tmp_path / "pre" / "p_000.gt.npz")["tracks"].shape == (8, 6, 2)
    assert cli_main(["sample", str(tmp_path / "k"), "--count", "1", "--frames", "4", "--size", "32", "--points", "8",
                     "--texture-poor-share", "1", "--motion-blur-prob", "1", "--anchored-sprite-share", "0.5"]) == 0
    assert cli_main(["sample", str(tmp_path / "bad"), "--motion-blur-prob", "1.5"]) == 2
    assert cli_main(["sample", str(tmp_path / "bad"), "--anchored-sprite-share", "2"]) == 2
