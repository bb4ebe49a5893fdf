"""The compile cache's folder key, its manifest (corrupt or foreign ones ignored), the private-folder check, and
one real (slow) check that a second process's compile is an Inductor cache hit."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.trackers import compile_cache as cc
from engine.trackers.compile_cache import (
    INDUCTOR_CACHE_ENV,
    MANIFEST,
    CompileCache,
    Variant,
    environment_key,
    key_digest,
    private_folder_problem,
    user_cache_dir,
)

BASE_KEY = {"torch": "2.13.0", "cuda": "12.8", "python": "3.11.7", "triton": "3.5.0", "gpu": "NVIDIA H200",
            "capability": "9.0"}


@pytest.mark.parametrize("field", sorted(BASE_KEY))
def test_the_folder_changes_with_each_input_that_invalidates_compiled_code(field: str) -> None:
    changed = {**BASE_KEY, field: BASE_KEY[field] + "-other"}
    assert key_digest(changed) != key_digest(BASE_KEY)
    assert key_digest(dict(reversed(list(BASE_KEY.items())))) == key_digest(BASE_KEY)  # order does not matter


def test_the_environment_key_names_this_torch_and_the_cpu() -> None:
    import torch

    key = environment_key("cpu")
    assert key["torch"] == torch.__version__ and key["gpu"] == "cpu"
    assert key["python"] == sys.version.split()[0]


def test_the_cache_lives_in_the_users_cache_dir() -> None:
    assert user_cache_dir({"XDG_CACHE_HOME": "/x/cache"}) == Path("/x/cache/trackscope")
    assert user_cache_dir({}) == Path.home() / ".cache" / "trackscope"


def _variant(precision: str = "bf16", shapes: str = "video 47x256x256x3, p1024") -> Variant:
    return Variant(precision, shapes, weights_sha256="abc", seconds=45.1)


def test_the_manifest_round_trips_and_says_what_is_cached(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path, dict(BASE_KEY))
    cache.record(_variant())
    again = CompileCache(tmp_path, dict(BASE_KEY))
    again.load()
    assert again.cached(_variant()) and not again.cached(_variant(precision="fp16"))
    assert again.variants[0].seconds == 45.1 and again.note == ""
    assert stat_mode(cache.folder) == 0o700
    # another environment uses another folder, and knows nothing cached
    other = CompileCache(tmp_path, {**BASE_KEY, "torch": "2.14.0"})
    other.load()
    assert other.folder != cache.folder and other.variants == []


def stat_mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777


@pytest.mark.parametrize("text", ["{not json", '["a list"]', '{"version": 99, "key": {}}',
                                  '{"version": 1, "key": {}, "variants": []}',
                                  '{"version": 1, "key": KEY, "variants": [{"shapes": "no precision"}]}'])
def test_a_corrupt_or_foreign_manifest_is_ignored_with_a_message(tmp_path: Path, caplog, text: str) -> None:
    cache = CompileCache(tmp_path, dict(BASE_KEY))
    cache.folder.mkdir(parents=True)
    (cache.folder / MANIFEST).write_text(text.replace("KEY", json.dumps(BASE_KEY)), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger=cc.__name__):
        cache.load()
    assert cache.variants == []
    assert "ignored" in cache.note and "ignored" in caplog.text
    cache.record(_variant())  # and it is replaced by a good one
    fresh = CompileCache(tmp_path, dict(BASE_KEY))
    fresh.load()
    assert fresh.cached(_variant()) and fresh.note == ""


def test_activate_points_inductor_at_the_folder_unless_the_user_chose_one(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "compile", dict(BASE_KEY))
    env: dict[str, str] = {}
    assert cache.activate(env) and env[INDUCTOR_CACHE_ENV] == str(cache.folder)
    mine = {INDUCTOR_CACHE_ENV: str(tmp_path / "mine")}
    assert not cache.activate(mine) and mine[INDUCTOR_CACHE_ENV] == str(tmp_path / "mine")
    assert "is set" in cache.note


def test_a_folder_others_may_write_is_refused(tmp_path: Path, caplog) -> None:
    cache = CompileCache(tmp_path, dict(BASE_KEY))
    cache.folder.mkdir(parents=True)
    os.chmod(cache.folder, 0o777)
    assert "others may write" in private_folder_problem(cache.folder)
    env: dict[str, str] = {}
    with caplog.at_level(logging.WARNING, logger=cc.__name__):
        assert not cache.activate(env)
    assert INDUCTOR_CACHE_ENV not in env and "not used" in caplog.text
    os.chmod(cache.folder, 0o700)
    assert private_folder_problem(cache.folder) == ""
    (tmp_path / "file").write_text("x")
    assert private_folder_problem(tmp_path / "file") != ""


_SECOND_PROCESS = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import torch
    from engine.trackers.compile_cache import CompileCache, environment_key, inductor_cache_counts
    cache = CompileCache(Path(sys.argv[1]), environment_key("cpu"))
    assert cache.activate()
    def tiny(x, w):
        return torch.tanh(x @ w).sum(-1)
    torch.compile(tiny, dynamic=False)(torch.ones(4, 8), torch.ones(8, 3))
    print(json.dumps(inductor_cache_counts()))
""")


@pytest.mark.slow
def test_a_second_process_compiles_from_the_disk_cache(tmp_path: Path) -> None:
    """Real Inductor on the CPU (needs a C compiler): the second process reports an FX graph cache hit."""
    env = {k: v for k, v in os.environ.items() if k != INDUCTOR_CACHE_ENV}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")

    def process() -> dict[str, int]:
        done = subprocess.run([sys.executable, "-c", _SECOND_PROCESS, str(tmp_path)], env=env, capture_output=True,
                              text=True, timeout=300)
        if done.returncode != 0:
            pytest.skip(f"torch.compile does not run here: {done.stderr.strip().splitlines()[-1:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = process()
    second = process()
    assert first["miss"] >= 1 and first["hit"] == 0
    assert second["hit"] >= 1 and second["miss"] == 0
