"""Before Qt aborts on a bare Linux machine (issue 12, item 10): one message naming every missing library of
the xcb platform plugin and the apt command that installs them; never a stop where Qt would work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gui.platform_libs import missing_libraries, platform_problem, uses_xcb, xcb_plugin

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = Path("/somewhere/PySide6/Qt/plugins/platforms/libqxcb.so")
LDD_BARE = """\
\tlinux-vdso.so.1 (0x00007ffd)
\tlibQt6XcbQpa.so.6 => /x/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007f83)
\tlibxkbcommon-x11.so.0 => not found
\tlibxcb-cursor.so.0 => not found
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-cursor.so.0 => not found
\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007f83)
\tlibfoo-unknown.so.3 => not found
"""
LDD_COMPLETE = "\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x1)\n\tlibc.so.6 => /lib/libc.so.6 (0x2)\n"
X11 = {"DISPLAY": ":0"}


def test_every_missing_library_and_its_package_in_one_line():
    problem = platform_problem(X11, "linux", ldd=lambda p: LDD_BARE, plugin=PLUGIN)
    assert problem is not None and "\n" not in problem
    for lib in ("libxkbcommon-x11.so.0", "libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"):
        assert lib in problem
    assert "sudo apt-get install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxkbcommon-x11-0" in problem
    assert "libfoo-unknown.so.3" in problem  # named even without a known package
    assert problem.count("libxcb-cursor.so.0") == 1


def test_without_ldd_the_known_libraries_are_tried():
    absent = {"libxcb-cursor.so.0", "libxcb-image.so.0"}
    problem = platform_problem(X11, "linux", ldd=lambda p: None, loads=lambda name: name not in absent,
                               plugin=PLUGIN)
    assert problem is not None and "libxcb-cursor0" in problem and "libxcb-image0" in problem
    assert missing_libraries(None, loads=lambda name: True) == []


def test_nothing_missing_or_nothing_known_says_nothing():
    assert platform_problem(X11, "linux", ldd=lambda p: LDD_COMPLETE, plugin=PLUGIN) is None

    def broken(path: Path) -> str:
        raise RuntimeError("ldd exploded")

    assert platform_problem(X11, "linux", ldd=broken, plugin=PLUGIN) is None  # the check never stops the app
    assert platform_problem({**X11, "TRACKSCOPE_SKIP_QT_CHECK": "1"}, "linux", ldd=lambda p: LDD_BARE,
                            plugin=PLUGIN) is None


def test_only_for_xcb_with_a_display():
    bare = {"ldd": lambda p: LDD_BARE, "plugin": PLUGIN}
    assert platform_problem({}, "linux", **bare) is None  # no display: display_problem's message instead
    assert platform_problem({**X11, "QT_QPA_PLATFORM": "offscreen"}, "linux", **bare) is None
    assert platform_problem({**X11, "QT_QPA_PLATFORM": "wayland"}, "linux", **bare) is None
    assert platform_problem({**X11, "WAYLAND_DISPLAY": "wayland-0"}, "linux", **bare) is None
    assert platform_problem({**X11, "QT_QPA_PLATFORM": "xcb"}, "linux", **bare) is not None
    assert platform_problem(X11, "darwin", **bare) is None
    assert uses_xcb({"DISPLAY": ":1", "QT_QPA_PLATFORM": "xcb:nomitshm"})


def test_on_this_machine_the_real_check_agrees_with_ldd():
    """The plugin is found; the check reports exactly what ldd reports missing (none where Qt works)."""
    plugin = xcb_plugin()
    assert plugin is not None and plugin.name == "libqxcb.so"
    problem = platform_problem(X11, "linux")
    ldd = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True).stdout
    missing = missing_libraries(ldd)
    assert (problem is None) == (not missing)


def test_the_app_stops_with_the_message_before_qt(tmp_path):
    """`trackscope` on a display whose xcb libraries are missing: exit 2 and the one line, not Qt's abort."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ldd").write_text(f"#!/bin/sh\ncat <<'EOF'\n{LDD_BARE}EOF\n")
    (fake / "ldd").chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(tmp_path),
           "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(tmp_path / "config"), "TRACKSCOPE_NO_NVML": "1",
           "DISPLAY": "remotehost:0"}  # a remote display: display_problem leaves it to Qt
    out = subprocess.run([sys.executable, "-m", "engine.cli", "gui"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "sudo apt-get install" in lines[0] and "libxcb-cursor.so.0" in lines[0]


def test_the_install_line_says_update_first_and_works_as_root():
    problem = platform_problem(X11, "linux", ldd=lambda p: LDD_BARE, plugin=PLUGIN)
    assert problem is not None and "after sudo apt-get update; as root, without sudo" in problem
