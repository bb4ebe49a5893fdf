"""The app's exports: paths checked before the work, atomic writes, never 'saved' when nothing was."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtGui import QPixmap  # noqa: E402
from PySide6.QtWidgets import QLabel  # noqa: E402

from engine.api import UserError  # noqa: E402
from engine.core.config import RunConfig  # noqa: E402
from gui import export  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.model import RunData  # noqa: E402
from gui.settings import Settings  # noqa: E402
from tests.helpers import moving_square_video  # noqa: E402

TEMP_MARK = ".tmp"


def _run(n: int = 3, t: int = 6) -> RunData:
    rng = np.random.default_rng(0)
    tracks = rng.uniform(2, 28, (n, t, 2)).astype(np.float32)
    queries = np.concatenate([np.zeros((n, 1)), tracks[:, 0]], axis=1).astype(np.float32)
    return RunData("lk", RunConfig(tracker="lk").to_dict(), queries, tracks, np.ones((n, t), bool))


def _temps(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if TEMP_MARK in p.name]


@pytest.mark.parametrize("make, message", [
    (lambda d: d, "is a folder, not a file name"),
    (lambda d: Path("/dev/full"), "not a regular file"),
    (lambda d: d / "missing" / "x.out", "does not exist"),
])
def test_every_export_checks_its_path_first(qtbot, tmp_path, make, message):
    target = make(tmp_path)
    label = QLabel("x")
    qtbot.addWidget(label)
    run = _run()
    calls = [
        lambda: export.export_tracks(target if target.suffix else target, run),
        lambda: export.export_png(target, label),
        lambda: export.export_video(target, moving_square_video(6, 32), run, fps=10),
    ]
    for call in calls:
        with pytest.raises(UserError) as err:
            call()
        assert message in str(err.value) or "must end in" in str(err.value), str(err.value)


def test_png_that_cannot_be_written_keeps_the_previous_file(qtbot, tmp_path, monkeypatch):
    label = QLabel("x")
    qtbot.addWidget(label)
    path = tmp_path / "w.png"
    path.write_bytes(b"previous")

    def half_then_fail(self, name, fmt=None, quality=-1):
        Path(name).write_bytes(b"\x89PNG partial")
        return False  # what Qt says when the disk fills

    monkeypatch.setattr(QPixmap, "save", half_then_fail)
    with pytest.raises(UserError, match="could not write the PNG"):
        export.export_png(path, label)
    assert path.read_bytes() == b"previous" and _temps(tmp_path) == []


def test_png_interrupted_keeps_the_previous_file(qtbot, tmp_path, monkeypatch):
    label = QLabel("x")
    qtbot.addWidget(label)
    path = tmp_path / "w.png"
    path.write_bytes(b"previous")

    def interrupted(self, name, fmt=None, quality=-1):
        Path(name).write_bytes(b"\x89PNG partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(QPixmap, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export.export_png(path, label)
    assert path.read_bytes() == b"previous" and _temps(tmp_path) == []


def test_png_is_written_with_the_umask_mode(qtbot, tmp_path):
    import os

    label = QLabel("x")
    qtbot.addWidget(label)
    old = os.umask(0o022)
    try:
        path = export.export_png(tmp_path / "w.png", label)
    finally:
        os.umask(old)
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_mode & 0o777 == 0o644


def test_report_export_refused_by_the_disk_is_a_message_not_saved(qtbot, tmp_path, monkeypatch):
    import errno

    import engine.report.files as files

    w = MainWindow(settings=Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)), sampler=None)
    qtbot.addWidget(w)
    notes, messages = [], []
    w.exports.note.connect(lambda text, ms: notes.append(text))
    monkeypatch.setattr(w.exports.state, "post_message", lambda *a, **k: messages.append(a[0]))

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "atomic_open", full)
    w.exports._guard(export.export_report, str(tmp_path / "r.json"), {"format": "x"})
    assert not [n for n in notes if n.startswith("saved")]
    assert messages and "No space left on device" in messages[0]
    w.close()


def test_video_export_to_a_folder_is_refused_before_drawing(qtbot, tmp_path, monkeypatch):
    w = MainWindow(settings=Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)), sampler=None)
    qtbot.addWidget(w)
    frames = moving_square_video(6, 32)
    w.set_video(frames, fps=10)
    q = w.queries
    w.current = RunData("r", {}, q, np.repeat(q[:, None, 1:], 6, axis=1), np.ones((len(q), 6), bool))
    messages = []
    monkeypatch.setattr(w.exports.state, "post_message", lambda *a, **k: messages.append(a[0]))
    (tmp_path / "o.mp4").mkdir()  # a folder that looks like a video name
    monkeypatch.setattr(w.exports, "_save_path", lambda *a: str(tmp_path / "o.mp4"))
    w.export_video_dialog()
    assert w.exports._jobs == [] and messages and "is a folder" in messages[0]
    w.close()
