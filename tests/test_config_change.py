"""A typed config change: RunConfig refuses unknown keys and owns its limits; update_config refuses a
misspelt or bad setting at once, in the caller, and the running session is untouched; old reports whose
config carries keys this version does not know still load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.api import run_title
from engine.cli.entry import main
from engine.core.config import (
    MAX_FRAMES_PER_BATCH,
    MAX_POINTS_PER_BATCH,
    ConfigChange,
    ConfigError,
    RunConfig,
)
from engine.core.errors import UserError
from engine.core.paths import SAMPLE_VIDEO
from engine.report.files import load_report
from engine.run.session import BatchDone, Finished, Session
from tests.helpers import ConstantVelocityTracker, moving_square_video

RECORDED = Path(__file__).parent / "data" / "h200" / "corrtrack_fp16_p256_sample.json"


def _session(points_per_batch: int = 3) -> Session:
    queries = np.array([[0, 5.0 + i, 10.0] for i in range(9)], np.float32)
    return Session(moving_square_video(), queries, RunConfig(tracker="constvel", device="cpu",
                   points_per_batch=points_per_batch), tracker=ConstantVelocityTracker())


def test_a_misspelt_key_is_refused_at_update_config_naming_the_right_one():
    session = _session()
    with pytest.raises(ConfigError) as refused:
        session.update_config(precison="bf16")
    assert "'precison' is not a run setting" in refused.value.message and "precision" in refused.value.suggestion
    assert isinstance(refused.value, UserError) and isinstance(refused.value, ValueError)
    seen = [e.config.precision for e in session.events() if isinstance(e, BatchDone)]
    assert seen == ["fp32"] * 3  # the session ran on, untouched


@pytest.mark.parametrize("change, words", [
    ({"precision": "bf61"}, "did you mean bf16"),
    ({"points_per_batch": 0}, "1 to"),
    ({"points_per_batch": MAX_POINTS_PER_BATCH + 1}, f"at most {MAX_POINTS_PER_BATCH}"),
    ({"frames_per_batch": 2.5}, "whole number"),
    ({"frames_per_batch": True}, "whole number"),
    ({"device": "gpu0"}, "auto, cpu, cuda or cuda:N"),
    ({"tracker": ""}, "tracker name"),
])
def test_a_bad_value_is_refused_at_once_and_the_run_keeps_its_settings(change, words):
    session = _session()
    events = session.events()
    first = next(events)  # Started: the run is going
    with pytest.raises(ConfigError) as refused:
        session.update_config(**change)
    assert words in str(refused.value)
    with pytest.raises(ConfigError):
        ConfigChange.of(change)
    rest = list(events)
    assert first is not None and isinstance(rest[-1], Finished)
    assert {e.config for e in rest if isinstance(e, BatchDone)} == {session.config}
    assert session.config.precision == "fp32"


def test_a_typed_change_applies_from_the_next_batch_and_kwargs_build_the_same():
    session = _session()
    seen = []
    for event in session.events():
        if isinstance(event, BatchDone):
            seen.append((event.config.precision, event.config.frames_per_batch))
            if event.index == 0:
                session.update_config(ConfigChange(precision="bf16"))
                session.update_config(frames_per_batch=4)  # queued beside the first, both from the next batch
    assert seen == [("fp32", 16), ("bf16", 4), ("bf16", 4)]
    assert ConfigChange.of({"precision": "fp16"}) == ConfigChange(precision="fp16")
    later = ConfigChange(points_per_batch=8).then(ConfigChange(points_per_batch=16))
    assert later.changes() == {"points_per_batch": 16}
    assert not ConfigChange() and ConfigChange(device="cuda:1").describe() == "device cuda:1"


def test_run_config_owns_its_limits_and_refuses_unknown_keys():
    with pytest.raises(ConfigError, match="did you mean points_per_batch"):
        RunConfig.from_dict({"tracker": "lk", "points_per_batc": 8})
    with pytest.raises(ConfigError, match="did you mean frames_per_batch"):
        RunConfig().with_changes(frame_per_batch=8)
    with pytest.raises(ConfigError):
        RunConfig(frames_per_batch=MAX_FRAMES_PER_BATCH + 1)
    assert RunConfig(device=" CUDA:1 ").device == " CUDA:1 "  # shape only; resolve_device says if it exists here
    assert RunConfig.from_dict(RunConfig(precision="bf16").to_dict()) == RunConfig(precision="bf16")


def test_the_cli_refuses_an_out_of_range_batch_as_a_user_error(tmp_path, capsys):
    assert main(["track", str(SAMPLE_VIDEO), "--grid", "2", "--out", str(tmp_path / "t.npz"), "--tracker", "lk",
                 "--device", "cpu", "--points-per-batch", str(MAX_POINTS_PER_BATCH * 2)]) == 2
    assert "points_per_batch must be 1 to" in capsys.readouterr().err


def test_an_old_report_whose_config_has_an_extra_key_still_loads(tmp_path):
    data = json.loads(RECORDED.read_text())
    data["config"]["compile_mode"] = "max-autotune"  # a key an older (or newer) writer recorded
    for run in data["runs"]:
        run["config"]["compile_mode"] = "max-autotune"
        for batch in run["batches"]:
            batch["config"]["compile_mode"] = "max-autotune"
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    report = load_report(path)
    assert report.config == RunConfig(tracker="corrtrack", device="cuda", precision="fp16", points_per_batch=256,
                                      frames_per_batch=16)
    assert run_title({**report.config.to_dict(), "compile_mode": "max"}) == "corrtrack fp16 p256 f16"
