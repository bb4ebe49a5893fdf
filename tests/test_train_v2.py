"""`trackscope train` for CorrTrack v2 on the CPU with a tiny net: warm start from v1, resume, both val sets."""

from __future__ import annotations

import json

import pytest
import torch

from engine.cli import main as cli_main
from engine.core.errors import UserError
from engine.trackers.corrtrack import CorrTrackNet
from engine.trackers.corrtrack.model import CorrTrackConfig
from engine.trackers.corrtrack.weights import load_model, save_model
from engine.training import corrtrack as T

TINY = CorrTrackConfig(feature_dim=8, widths=(8, 8, 8), hidden_dim=16, mixer_dilations=(1, 2), num_iters=2)
SMALL_RUN = ["--steps", "2", "--batch-size", "1", "--num-frames", "4", "--num-points", "8", "--val-videos", "1",
             "--hard-val-videos", "1", "--hard-val-frames", "6", "--val-frames", "4", "--texture-size", "64",
             "--device", "cpu", "--warmup-steps", "1", "--precision", "fp32"]


@pytest.fixture()
def tiny_v1(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "v1.safetensors"
    save_model(CorrTrackNet(TINY), path, {"training": {"total_steps": 7, "command": "trackscope train x"},
                                          "curve": [{"step": 7, "aj": 0.1}]})
    return path


def test_warm_start_then_resume_a_v2_run(tmp_path, tiny_v1, capsys):
    out1 = tmp_path / "piece1"
    assert cli_main(["train", "--out", str(out1), "--init-from", str(tiny_v1), "--attention-layers", "1",
                     *SMALL_RUN]) == 0
    text = capsys.readouterr().out
    assert "CorrTrack v2, 1 attention layer(s)" in text and "hard (texture-poor + motion blur, 6 frames): AJ" in text
    model, manifest = load_model(out1 / "last.safetensors")
    assert model.cfg.attention_layers == 1
    assert manifest["training"]["init_from"] == str(tiny_v1)
    assert manifest["training"]["data"] == T.V2_DATA_DEFAULTS  # v2 trains on the richer data by default
    assert manifest["training"]["total_steps"] == 7 + 2
    assert manifest["validation_hard"]["motion_blur_prob"] == T.HARD_VAL_KNOBS["motion_blur_prob"]
    steps = [p["step"] for p in manifest["curve"]]
    assert steps == [7, 7, 9] and "hard_aj" in manifest["curve"][-1]  # v1's curve, the warm start's score, the end

    out2 = tmp_path / "piece2"
    assert cli_main(["train", "--out", str(out2), "--resume", str(out1 / "last.safetensors"),
                     "--motion-blur-prob", "0", *SMALL_RUN]) == 0
    model2, manifest2 = load_model(out2 / "last.safetensors")
    assert model2.cfg == model.cfg and manifest2["training"]["total_steps"] == 11
    assert manifest2["training"]["data"]["motion_blur_prob"] == 0.0
    assert len(manifest2["runs"]) == 3 and json.loads((out2 / "train_log.json").read_text())["curve"]


def test_train_refusals(tmp_path, tiny_v1, capsys):
    base = ["train", "--out", str(tmp_path / "o"), *SMALL_RUN]
    assert cli_main([*base, "--resume", str(tiny_v1), "--init-from", str(tiny_v1)]) == 2
    assert "not both" in capsys.readouterr().err
    assert cli_main([*base, "--resume", str(tiny_v1), "--attention-layers", "1"]) == 2
    assert "--init-from" in capsys.readouterr().err
    assert cli_main([*base, "--init-from", str(tiny_v1), "--texture-poor-share", "2"]) == 2


def test_data_knobs_default_by_version():
    import argparse

    args = argparse.Namespace(texture_poor_share=None, texture_poor_sprite_share=None, motion_blur_prob=0.5,
                              anchored_sprite_share=None)
    assert T.data_knobs(args, TINY) == {"texture_poor_share": 0.0, "texture_poor_sprite_share": 0.0,
                                        "motion_blur_prob": 0.5, "anchored_sprite_share": 0.0}
    v2 = CorrTrackConfig(attention_layers=1)
    assert T.data_knobs(args, v2)["texture_poor_share"] == T.V2_DATA_DEFAULTS["texture_poor_share"]
    args.anchored_sprite_share = 0.4  # session 26's v3 pieces: sprites fixed to the background plane
    assert T.data_knobs(args, v2)["anchored_sprite_share"] == 0.4
    args.anchored_sprite_share = 1.5
    with pytest.raises(UserError):
        T.data_knobs(args, v2)
