"""Before Qt starts on X11: are the system libraries of Qt's xcb platform plugin installed?

PySide6's wheels bundle Qt but not the X11 client libraries its xcb plugin links. Without them Qt
aborts the process with "no Qt platform plugin could be initialized", naming at most one library.
This check lists every missing one, with the apt command that installs them, before Qt is asked.
It only ever reports what it can see: when it cannot tell (no ldd, no plugin file, an error of its
own), it says nothing and Qt decides, so it never stops a machine where Qt would work.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

log = logging.getLogger(__name__)

#: the shared libraries Qt 6's xcb plugin links from the system (ldd of PySide6 6.11's libqxcb.so), and
#: the Debian/Ubuntu package of each: without ldd, these are the ones tried
XCB_PACKAGES = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
}
#: what else the plugin and Qt's GUI library may link from the system (named when ldd reports them missing)
OTHER_PACKAGES = {
    "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xinput.so.0": "libxcb-xinput0",
    "libxcb-glx.so.0": "libxcb-glx0",
    "libGL.so.1": "libgl1",
    "libEGL.so.1": "libegl1",
    "libGLX.so.0": "libglx0",
    "libOpenGL.so.0": "libopengl0",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
    "libdbus-1.so.3": "libdbus-1-3",
    "libXau.so.6": "libxau6",
    "libXdmcp.so.6": "libxdmcp6",
    "libSM.so.6": "libsm6",
    "libICE.so.6": "libice6",
}
PACKAGES = {**XCB_PACKAGES, **OTHER_PACKAGES}
LDD_TIMEOUT_S = 10
NOT_FOUND = re.compile(r"^\s*(\S+)\s*=>\s*not found", re.MULTILINE)
SKIP_ENV = "TRACKSCOPE_SKIP_QT_CHECK"  # set to 1: leave it all to Qt


def xcb_plugin() -> Path | None:
    """PySide6's xcb platform plugin (found without importing Qt), or None."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        plugin = Path(root) / "Qt" / "plugins" / "platforms" / "libqxcb.so"
        if plugin.is_file():
            return plugin
    return None


def _ldd(path: Path) -> str | None:
    """ldd's listing of ``path`` (every library it needs, transitively), or None without ldd."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    try:
        out = subprocess.run([ldd, str(path)], capture_output=True, text=True, timeout=LDD_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def _loads(name: str) -> bool:
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


def missing_libraries(ldd_output: str | None, loads: Callable[[str], bool] = _loads) -> list[str]:
    """The libraries ldd reports 'not found'; without ldd, those of XCB_PACKAGES the loader cannot open."""
    if ldd_output is not None:
        return sorted(dict.fromkeys(NOT_FOUND.findall(ldd_output)))
    return [name for name in XCB_PACKAGES if not loads(name)]


def install_hint(missing: list[str]) -> str:
    """'sudo apt-get install PKG ...' for the known libraries; the rest named as such."""
    packages = sorted({PACKAGES[n] for n in missing if n in PACKAGES})
    unknown = [n for n in missing if n not in PACKAGES]
    parts = []
    if packages:
        parts.append(f"on Debian/Ubuntu install them with: sudo apt-get install {' '.join(packages)} "
                     "(after sudo apt-get update; as root, without sudo)")
    if unknown:
        parts.append(f"and the package(s) that provide {', '.join(unknown)}")
    return " ".join(parts)


def uses_xcb(env: Mapping[str, str]) -> bool:
    """Whether Qt would pick its xcb plugin: asked for by name, or by default with DISPLAY set and no Wayland."""
    chosen = env.get("QT_QPA_PLATFORM", "").split(":")[0].split(";")[0].strip().lower()
    if chosen:
        return chosen == "xcb" and bool(env.get("DISPLAY"))
    return bool(env.get("DISPLAY")) and not env.get("WAYLAND_DISPLAY")


def platform_problem(env: Mapping[str, str] | None = None, platform: str | None = None,
                     ldd: Callable[[Path], str | None] = _ldd, loads: Callable[[str], bool] = _loads,
                     plugin: Path | None = None) -> str | None:
    """One line naming every missing library of the xcb plugin and the apt command; None when none is seen."""
    import sys

    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if not platform.startswith("linux") or env.get(SKIP_ENV) == "1" or not uses_xcb(env):
        return None
    try:
        plugin = plugin or xcb_plugin()
        if plugin is None:
            return None
        missing = missing_libraries(ldd(plugin), loads)
    except Exception:  # noqa: BLE001 - the check must never be what stops the app
        log.debug("the Qt platform library check failed; Qt will tell", exc_info=True)
        return None
    if not missing:
        return None
    return (f"Qt's X11 (xcb) platform plugin cannot load: {len(missing)} system "
            f"librar{'y is' if len(missing) == 1 else 'ies are'} missing ({', '.join(missing)}); "
            f"{install_hint(missing)} (or set {SKIP_ENV}=1 to let Qt try anyway)")
