"""A visitor's own math or non-math set lives as long as a session that named it: the sets are
kept by content (the same file named by two visitors is one entry) in the bench's data, and each
session's names are released when it ends (backend.core.sessions), so the shared data does not
keep every file every visitor ever brought."""

from __future__ import annotations

import threading
from pathlib import Path

from ..core import sessions

# This method keeps no files: a session's space gives only its key (backend.core.sessions.Space)
SPACE = "math"
_HELD: dict[str, list[tuple[dict, str, str]]] = {}  # session → (bench data, side, key)
_LOCK = threading.Lock()


def keep(data: dict, side: str, key: str, entry: dict) -> None:
    """A set named by nobody in particular (the owner shares builds): kept for good, whoever else
    holds the same set and lets it go (an agent's call holds its items for the call only)."""
    with _LOCK:  # (again, if a holder let it go just now)
        data[f"{side}_sets"].setdefault(key, entry)
        data.setdefault("kept", set()).add((side, key))


def hold(session: str, data: dict, side: str, key: str, entry: dict) -> None:
    with _LOCK:  # (again, if a session that ended just now released it)
        data[f"{side}_sets"].setdefault(key, entry)
        data.setdefault("owners", {}).setdefault((side, key), set()).add(session)
        _HELD.setdefault(session, []).append((data, side, key))


@sessions.on_end
def release(session: str, folder: Path | None = None) -> None:
    with _LOCK:
        for data, side, key in _HELD.pop(session, []):
            owners = data.get("owners", {}).get((side, key), set())
            owners.discard(session)
            if not owners:
                data["owners"].pop((side, key), None)
                if (side, key) not in data.get("kept", ()):
                    data[f"{side}_sets"].pop(key, None)
