"""Where the peers' sources are: ``TRACKSCOPE_PEERS``, else ``.carry/peers`` under the repo root."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PEERS_VARIABLE = "TRACKSCOPE_PEERS"
DEFAULT_PEERS = ROOT / ".carry" / "peers"


def add_peer_sources(package: str) -> Path:
    """Put the peers' folder on sys.path (once) and check ``package`` is in it; -> the folder."""
    folder = Path(os.environ.get(PEERS_VARIABLE) or DEFAULT_PEERS).resolve()
    if not (folder / package).is_dir():
        raise FileNotFoundError(f"{package}/ not found in {folder}: set {PEERS_VARIABLE} to the folder holding "
                                "the peers' sources (tapnet/, cotracker/)")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return folder
