"""CorrTrack weights: safetensors + a JSON manifest (sha256, parameter count, how they were trained).

Loading checks the file's sha256 against the manifest and the tensor names and shapes against the
network, and says plainly what is wrong (missing, truncated, altered, wrong architecture).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from engine.core.atomic import atomic_open, atomic_write
from engine.core.errors import TrackerError
from engine.core.paths import RESOURCES
from engine.trackers.corrtrack.model import CorrTrackConfig, CorrTrackNet, count_parameters

DEFAULT_WEIGHTS = RESOURCES / "corrtrack.safetensors"  # v1: what `corrtrack` and `corrtrack-v1` load
V2_WEIGHTS = RESOURCES / "corrtrack_v2.safetensors"  # v2 (temporal attention): `corrtrack-v2`, once trained
V3_WEIGHTS = RESOURCES / "corrtrack_v3.safetensors"  # v3 (attention across tracks): `corrtrack-v3`, once trained
MANIFEST_FORMAT = "trackscope-corrtrack-weights"
MANIFEST_VERSION = 1
HASH_CHUNK_BYTES = 1 << 20
RETRAIN_HINT = "reinstall trackscope, or retrain with `trackscope train` and ship the result (weights.ship)"


def manifest_path(weights: Path) -> Path:
    """resources/corrtrack.safetensors -> resources/corrtrack.json."""
    return weights.with_suffix(".json")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest as a dict; TrackerError when it is missing or not the expected JSON."""
    if not path.is_file():
        raise TrackerError(f"CorrTrack weights manifest {path} is missing", RETRAIN_HINT)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TrackerError(f"CorrTrack weights manifest {path} is not valid JSON: {exc}", RETRAIN_HINT) from exc
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise TrackerError(f"{path} is not a CorrTrack weights manifest (format {MANIFEST_FORMAT!r} expected)",
                           RETRAIN_HINT)
    for key in ("sha256", "config", "parameters"):
        if key not in data:
            raise TrackerError(f"CorrTrack weights manifest {path} lacks {key!r}", RETRAIN_HINT)
    return data


def _checked_state(path: Path) -> tuple[dict[str, Any], CorrTrackConfig, dict[str, torch.Tensor]]:
    """(manifest, config, tensors) of a weights file whose sha256 matches its manifest; TrackerError otherwise."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise TrackerError(f"CorrTrack weights {path} are missing", RETRAIN_HINT)
    manifest = read_manifest(manifest_path(path))
    actual = sha256_file(path)
    if actual != manifest["sha256"]:
        raise TrackerError(
            f"CorrTrack weights {path} are corrupt or altered: sha256 {actual[:12]}... does not match the "
            f"manifest's {str(manifest['sha256'])[:12]}...", RETRAIN_HINT)
    try:
        cfg = CorrTrackConfig.from_dict(manifest["config"])
    except (KeyError, TypeError, ValueError) as exc:
        raise TrackerError(f"CorrTrack weights manifest {manifest_path(path)} has a bad config: {exc}") from exc
    try:
        state = load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise TrackerError(f"CorrTrack weights {path} cannot be read as safetensors: {exc}", RETRAIN_HINT) from exc
    check_finite(state, path)
    return manifest, cfg, state


def load_model(weights: Path | str | None = None, device: torch.device | str = "cpu"
               ) -> tuple[CorrTrackNet, dict[str, Any]]:
    """Build the network from a manifest and load its checked weights -> (model in eval mode, manifest)."""
    path = Path(weights) if weights is not None else DEFAULT_WEIGHTS
    manifest, cfg, state = _checked_state(path)
    model = CorrTrackNet(cfg)
    check_state(model, state, path)
    model.load_state_dict(state)
    if count_parameters(model) != int(manifest["parameters"]):
        raise TrackerError(f"CorrTrack weights {path}: {count_parameters(model)} parameters, manifest says "
                           f"{manifest['parameters']}", RETRAIN_HINT)
    return model.to(device).eval(), manifest


#: parameter-name prefixes a v2 net has beyond v1 (new layers, initialised so they change nothing)
V2_ONLY_PREFIXES = ("attention.",)
#: parameter-name prefixes a v3 net has beyond v2 (the track attention, its output projection at zero)
V3_ONLY_PREFIXES = ("track_attention.",)


def warm_start(weights: Path | str, attention_layers: int, attention_heads: int | None = None,
               device: torch.device | str = "cpu", track_attention_layers: int = 0
               ) -> tuple[CorrTrackNet, dict[str, Any]]:
    """A net with ``attention_layers`` temporal and ``track_attention_layers`` track attention layers (each at
    least as many as the file has) holding every tensor of ``weights`` (checked as load_model checks them):
    strict on all of the file's names; only the new layers' parameters may be absent from it (they start as
    built, their output projections at zero, so the net computes what the file's did). -> (model in train mode,
    manifest)."""
    import dataclasses

    path = Path(weights)
    manifest, cfg, state = _checked_state(path)
    heads = cfg.attention_heads if attention_heads is None else attention_heads
    try:
        new_cfg = dataclasses.replace(cfg, attention_layers=max(cfg.attention_layers, attention_layers),
                                      attention_heads=heads,
                                      track_attention_layers=max(cfg.track_attention_layers, track_attention_layers))
    except ValueError as exc:
        raise TrackerError(f"cannot warm-start from {path}: {exc}") from exc
    if (cfg.attention_layers or cfg.track_attention_layers) and heads != cfg.attention_heads:
        raise TrackerError(f"cannot warm-start from {path}: its attention has {cfg.attention_heads} heads, "
                           f"{heads} asked")
    model = CorrTrackNet(new_cfg)
    expected = model.state_dict()
    absent = {name for name in expected if name not in state}
    check_state(model, {**state, **{name: expected[name] for name in absent
                                    if name.startswith(V2_ONLY_PREFIXES + V3_ONLY_PREFIXES)}}, path)
    model.load_state_dict(state, strict=False)
    return model.to(device).train(), manifest


def check_state(model: CorrTrackNet, state: dict[str, torch.Tensor], path: Path | str) -> None:
    """Raise TrackerError naming the first missing, unexpected or mis-shaped tensor."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if missing or extra:
        what = f"missing {missing[0]!r}" if missing else f"unexpected {extra[0]!r}"
        raise TrackerError(f"CorrTrack weights {path} do not fit the network ({what})", RETRAIN_HINT)
    for name, tensor in expected.items():
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise TrackerError(f"CorrTrack weights {path}: {name} has shape {tuple(state[name].shape)}, "
                               f"the network needs {tuple(tensor.shape)}", RETRAIN_HINT)


def check_finite(state: dict[str, torch.Tensor], path: Path | str) -> None:
    """Raise TrackerError naming the first tensor that holds NaN or infinite values, and how many."""
    for name, tensor in state.items():
        if tensor.is_floating_point() or tensor.is_complex():
            bad = int((~torch.isfinite(tensor)).sum())
            if bad:
                raise TrackerError(f"CorrTrack weights {path}: {name} holds {bad} NaN or infinite value(s)",
                                   RETRAIN_HINT)


def save_model(model: CorrTrackNet, path: Path | str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write fp32 safetensors and its manifest beside it; returns the manifest."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
    atomic_write(path, lambda tmp: save_file(state, str(tmp)))
    manifest = {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "file": path.name,
        "sha256": sha256_file(path),
        "bytes": path.stat().st_size,
        "parameters": count_parameters(model),
        "config": model.cfg.to_dict(),
        **(extra or {}),
    }
    _write_manifest(path, manifest)
    return manifest


def _write_manifest(weights: Path, manifest: dict[str, Any]) -> None:
    with atomic_open(manifest_path(weights), "w", encoding="utf-8") as f:
        f.write(json.dumps(manifest, indent=2) + "\n")


def ship(source: Path | str, target: Path | str = DEFAULT_WEIGHTS) -> dict[str, Any]:
    """Copy checked weights + manifest (e.g. a training run's last.safetensors) to ``target``; returns the manifest."""
    import shutil

    source, target = Path(source), Path(target)
    model, manifest = load_model(source)  # checks hash and architecture first
    del model
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, lambda tmp: shutil.copyfile(source, tmp))
    manifest = {**manifest, "file": target.name, "sha256": sha256_file(target)}
    _write_manifest(target, manifest)
    return manifest
