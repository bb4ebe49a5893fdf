"""Logging configured: the CLI's -v/-vv on stderr with a plain format, the app's log file, and the failures
the app catches logged with their reason instead of vanishing."""

from __future__ import annotations

import logging

import pytest

from engine.cli import sample as sample_cli
from engine.cli.entry import main
from engine.core.errors import UserError
from engine.core.logs import LOG_FORMAT, level_for, stderr_logging


def _log_then_stop(*_args, **_kwargs):
    logging.getLogger("engine.probe").info("an informational message")
    logging.getLogger("engine.probe").debug("a debugging message")
    logging.getLogger("engine.probe").warning("a warning")
    raise UserError("stopped here")


@pytest.mark.parametrize("flags, shown, hidden", [
    ([], ["WARNING: engine.probe: a warning"], ["an informational message", "a debugging message"]),
    (["-v"], ["INFO: engine.probe: an informational message", "WARNING"], ["a debugging message"]),
    (["-vv"], ["INFO", "DEBUG: engine.probe: a debugging message"], []),
])
def test_verbose_flags_show_the_log_on_stderr(monkeypatch, capsys, tmp_path, flags, shown, hidden):
    """Before: no handler or level anywhere, so log.info never showed."""
    monkeypatch.setattr(sample_cli, "check_render_memory", _log_then_stop)
    handlers = list(logging.getLogger().handlers)
    assert main(["sample", str(tmp_path / "set"), *flags]) == 2
    err = capsys.readouterr().err
    for words in shown:
        assert words in err
    for words in hidden:
        assert words not in err
    assert "trackscope: WARNING: engine.probe: a warning" in err  # the plain format
    assert logging.getLogger().handlers == handlers  # a caller's main([...]) leaves the logging as it was


def test_levels_and_format():
    assert [level_for(n) for n in (0, 1, 2, 5)] == [logging.WARNING, logging.INFO, logging.DEBUG, logging.DEBUG]
    assert LOG_FORMAT.startswith("trackscope: %(levelname)s")
    root = logging.getLogger()
    before = root.level
    with stderr_logging(1) as handler:
        assert handler in root.handlers and root.level == logging.INFO
    assert handler not in root.handlers and root.level == before


def test_the_app_log_file(tmp_path):
    pytest.importorskip("PySide6")
    from gui.app import LOG_FILE_NAME, close_log_file, open_log_file

    handler = open_log_file(tmp_path / "cache" / "trackscope")
    assert handler is not None
    try:
        logging.getLogger("gui.probe").info("written to the file")
        logging.getLogger("gui.probe").debug("not written")
    finally:
        close_log_file(handler)
    text = (tmp_path / "cache" / "trackscope" / LOG_FILE_NAME).read_text()
    assert "INFO gui.probe: written to the file" in text and "not written" not in text
    assert handler not in logging.getLogger().handlers
    (tmp_path / "taken").write_text("a file, not a folder")
    assert open_log_file(tmp_path / "taken") is None  # the app runs without it


def test_a_failing_panel_call_is_logged_with_its_traceback(qtbot, caplog):
    pytest.importorskip("pytestqt")
    from PySide6.QtWidgets import QTabWidget, QWidget

    from gui.panels.queue import PanelQueue

    tabs = QTabWidget()
    qtbot.addWidget(tabs)
    panel = QWidget()
    tabs.addTab(panel, "p")
    errors: list[str] = []

    def broken() -> None:
        raise RuntimeError("the panel's bug")

    with caplog.at_level(logging.ERROR, logger="gui.panels.queue"):
        PanelQueue(tabs, errors.append).call(panel, broken)
    assert errors and "RuntimeError: the panel's bug" in errors[0]  # shown, as before
    record = next(r for r in caplog.records if r.name == "gui.panels.queue")  # before: nothing logged
    assert record.exc_info is not None and "broken failed" in record.getMessage()
