"""A shared report's strings reach the app's widgets as text, never as markup (issue 13, item 1)."""

from __future__ import annotations

import json

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QLabel

from engine.api import SAMPLE_VIDEO
from gui.main_window import MainWindow
from gui.settings import Settings
from tests.test_h200_recorded import DATA

HOSTILE = "<img src='/dev/zero'>"


def _hostile_report(tmp_path) -> str:
    report = json.loads((DATA / "corrtrack_bf16_p256_sample.json").read_text())
    report["label"] = HOSTILE
    report["device_name"] = HOSTILE
    report["created"] = HOSTILE
    report["video"]["path"] = str(SAMPLE_VIDEO)
    for finding in report.get("findings") or []:
        finding["title"] = HOSTILE
        finding["suggestion"] = HOSTILE
    path = tmp_path / "shared.json"
    path.write_text(json.dumps(report))
    return str(path)


def test_every_label_sets_its_text_format_and_file_text_stays_text(qtbot, tmp_path):
    w = MainWindow(settings=Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)), sampler=None)
    qtbot.addWidget(w)
    assert w.load_path(_hostile_report(tmp_path))
    w.flush_panels(w.diagnosis)
    labels = w.findChildren(QLabel)
    assert labels
    guessed = [label.objectName() or label.text()[:40] for label in labels
               if label.textFormat() == Qt.TextFormat.AutoText]
    assert not guessed, f"labels left to guess their text format: {guessed}"
    for label in labels:
        if label.textFormat() == Qt.TextFormat.RichText:
            assert "<img" not in label.text()  # escaped where it came from a file
    assert HOSTILE.replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#x27;") in w.diagnosis.header.text()
    w.shutdown()
