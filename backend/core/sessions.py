"""What a visitor brings, or derives from it, stays with that visitor: one folder per browser (or API
client) session, with a disk quota, removed when the session ends or after it has been idle too long.

A Space is one process shared by strangers. An index built from a visitor's images, or neuron
statistics over a visitor's prompts, must never replace what the other visitors see, nor write over
the owner's files (WORKBENCH_SAE_INDEX, WORKBENCH_NEMO_STATS, precomputed and shipped data). So such
builds go to `folder(session)`, content-addressed (`content_name`), and the UI keeps only a small
descriptor (a path) in the session's state. A path under a session folder is what a worker process
(ZeroGPU) writes and the server process reads: nothing lives only in memory.

Settings (read at each call, so tests and a Space's variables take effect without a restart):
  WORKBENCH_SESSION_DIR    where the session folders live (default: <tmp>/workbench-sessions)
  WORKBENCH_SESSION_QUOTA  bytes one visitor's folders may hold, all their sessions together, e.g. 500MB
                           (default), "none" for no cap
  WORKBENCH_SESSION_TTL    seconds a session may stay idle before its folder is removed (default 7200)
  WORKBENCH_SHARED_BUILDS  =1: a private Space's owner shares every visitor's builds (the index a tab
                           builds is written where the owner's settings point, statistics replace the
                           shared ones), as before per-session folders existed
No gradio here: components.serving.visitor ties these to Gradio's sessions (a folder is named by `key_of`
the session hash, never by the hash itself) and unload event, and resolves a request's `Space`: the
place of one method in one session, the way every method reaches its visitor's files.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .budget import parse_bytes

DIR_ENV, QUOTA_ENV, TTL_ENV, SHARED_ENV = (
    "WORKBENCH_SESSION_DIR",
    "WORKBENCH_SESSION_QUOTA",
    "WORKBENCH_SESSION_TTL",
    "WORKBENCH_SHARED_BUILDS",
)
DEFAULT_QUOTA = "500MB"
DEFAULT_TTL = 7200.0
DIRECT = "direct"  # calls from Python (a notebook, a test) with no Gradio session behind them
_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MARK = ".last-used"
_PERSON = ".person"  # whose session this is: a person's key (components.serving.people), one line
_LOCK = threading.Lock()
_ON_END: list[Callable[[str, Path], None]] = []
_SWEEPER: threading.Thread | None = None
# Drawn once per server process (a forked ZeroGPU worker keeps it): folder keys of one run only.
_SECRET = secrets.token_bytes(32)


class QuotaExceeded(ValueError):
    """A session's files would pass WORKBENCH_SESSION_QUOTA (a ValueError: the UI shows its message)."""


class SessionGone(ValueError):
    """What a session built is gone: its folder was removed (the page was closed, or idle past
    WORKBENCH_SESSION_TTL). Said to the visitor, never replaced silently by what everyone sees."""

    def __init__(self, what: str = "what this session built"):
        super().__init__(
            f"This session has ended on the server ({what} was removed when the page was closed or left "
            f"idle past {TTL_ENV}), so it is no longer shown. Reload the page to start a new session."
        )


def shared_builds() -> bool:
    return os.environ.get(SHARED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def root() -> Path:
    name = os.environ.get(DIR_ENV, "").strip()
    return Path(name).expanduser() if name else Path(tempfile.gettempdir()) / "workbench-sessions"


def quota_bytes() -> int | None:
    return parse_bytes(os.environ.get(QUOTA_ENV, "").strip() or DEFAULT_QUOTA)


def ttl_seconds() -> float:
    try:
        return max(float(os.environ.get(TTL_ENV, "") or DEFAULT_TTL), 1.0)
    except ValueError:
        return DEFAULT_TTL


def key_of(session_hash: str) -> str:
    """The key of a Gradio session's folder: a keyed hash of its session hash. Gradio takes the
    session hash as the session's credential (its state, its heartbeat), so a folder's name, should
    a path ever reach a message or a log, must not give it away."""
    return hmac.new(_SECRET, str(session_hash).encode(), hashlib.sha256).hexdigest()[:32]


def session_id(session: str | None) -> str:
    """A Gradio session hash as a folder name (anything else is refused, so no id leaves the root)."""
    sid = str(session or DIRECT)
    if not _ID_RE.fullmatch(sid):
        raise ValueError("this request carries no usable session id")
    return sid


def folder(session: str | None, *, create: bool = True) -> Path:
    """The session's own folder (made and marked as used now when `create`)."""
    path = root() / session_id(session)
    if create:
        path.mkdir(parents=True, exist_ok=True)
        (path / _MARK).touch()
        _maybe_sweep()
    return path


def find(session: str | None, *parts: str) -> Path | None:
    """An existing file of the session's folder, or None (nothing is created: a read is no use)."""
    p = root().joinpath(session_id(session), *parts)
    if p.exists():
        try:
            (p.parents[len(parts) - 1] / _MARK).touch()
        except OSError:
            pass
        return p
    return None


def used(path: str | os.PathLike) -> None:
    """Mark the session whose folder holds `path` as in use now (reading one's own index or
    statistics keeps the session from the time limit as much as building them)."""
    try:
        rel = Path(path).resolve().relative_to(root().resolve())
        if rel.parts and _ID_RE.fullmatch(rel.parts[0]):
            (root() / rel.parts[0] / _MARK).touch()
    except (ValueError, OSError):
        pass


def within(path: str | os.PathLike | None) -> bool:
    """Whether `path` lies under the session folders (a visitor's file, not the server's)."""
    if path is None:
        return False
    try:
        Path(path).resolve().relative_to(root().resolve())
        return True
    except ValueError:
        return False


def lost(path: str | os.PathLike, *, must_exist: bool = True) -> bool:
    """Whether `path` lies in a session's folder that is gone (the session was swept or ended), or
    (`must_exist`) no longer holds it; False for a path outside the session folders."""
    try:
        rel = Path(path).resolve().relative_to(root().resolve())
    except ValueError:
        return False
    return not rel.parts or not (root() / rel.parts[0]).is_dir() or (must_exist and not Path(path).exists())


def owns(session: str | None, path: str | os.PathLike) -> bool:
    """Whether `path` lies inside the session's folder (a descriptor is checked before it is used)."""
    try:
        Path(path).resolve().relative_to((root() / session_id(session)).resolve())
        return True
    except ValueError:
        return False


def content_name(chunks: Iterable[bytes | str], n: int = 16) -> str:
    """A name for content: the same input gets the same file, so a rebuild overwrites nothing else."""
    h = hashlib.sha256()
    for c in chunks:
        h.update(c.encode() if isinstance(c, str) else c)
    return h.hexdigest()[:n]


def used_bytes(session: str | None) -> int:
    """The bytes of a session's files (not the server's own marks in its folder)."""
    base = root() / session_id(session)
    if not base.is_dir():
        return 0
    return sum(
        p.stat().st_size
        for p in base.rglob("*")
        if p.is_file() and not (p.parent == base and p.name in (_MARK, _PERSON))
    )


def person_of(session: str | None) -> str | None:
    """The person a session's folder was made for (`bind`), or None."""
    try:
        return (root() / session_id(session) / _PERSON).read_text().strip() or None
    except (OSError, ValueError):
        return None


def bind(session: str | None, person: str | None) -> None:
    """Record in the session's folder whose it is: a person's quota counts all their sessions."""
    if session is None or not person or person_of(session) == person:
        return
    path = folder(session)
    (path / _PERSON).write_text(person)


def sessions_of(person: str) -> list[str]:
    """Every session folder made for `person`."""
    base = root()
    if not base.is_dir():
        return []
    out = []
    for d in base.iterdir():
        try:
            if d.is_dir() and _ID_RE.fullmatch(d.name) and (d / _PERSON).read_text().strip() == person:
                out.append(d.name)
        except OSError:
            continue
    return out


def person_bytes(session: str | None, person: str | None = None) -> int:
    """What the quota counts for a session: every file of every session of its person (sessions are
    free to make, so a quota per session would bound nobody), or the session's alone if unbound."""
    person = person or person_of(session)
    if not person:
        return used_bytes(session)
    names = set(sessions_of(person)) | {session_id(session)}
    return sum(used_bytes(n) for n in names)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 10**5 else f"{n / 1e3:.1f} kB"


def check_room(session: str | None, extra: int, what: str = "these files", person: str | None = None) -> None:
    """Refuse before writing `extra` bytes that would take the visitor (all the sessions of the
    session's person) past the quota."""
    cap = quota_bytes()
    if cap is None:
        return
    have = person_bytes(session, person)
    if have + int(extra) > cap:
        raise QuotaExceeded(
            f"Refused: {what} ({_mb(int(extra))}) would take your files on this server (all your sessions) to "
            f"{_mb(have + int(extra))}, over a visitor's quota of {_mb(cap)} ({QUOTA_ENV}). Nothing was written. "
            f"Use fewer or smaller files, or close the other pages of this app (their files are removed)."
        )


def keep_within_quota(
    session: str | None, written: Iterable[Path], what: str = "the result", person: str | None = None
) -> None:
    """After a write whose size was not known before: over the quota, remove it and refuse."""
    cap = quota_bytes()
    if cap is None:
        return
    have = person_bytes(session, person)
    if have > cap:
        for p in written:
            p = Path(p)
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        raise QuotaExceeded(
            f"Refused: {what} took your files on this server (all your sessions) to {_mb(have)}, over a visitor's "
            f"quota of {_mb(cap)} ({QUOTA_ENV}); it was removed again. Use fewer images, or ask the Space's "
            "owner for a larger quota."
        )


@dataclass(frozen=True)
class Space:
    """One method's place in one visitor's session: the one way a method reaches what its visitor
    brought. A handler resolves it from its request (components.serving.visitor.space) and hands the method
    its folder, its session key or the Space itself; the method never names a session or a path.

    Files: <root>/<session key>/<name>/…, `name` declared once by the method (its visitor module's
    SPACE). `session` None is nobody's space: the owner shares builds (WORKBENCH_SHARED_BUILDS=1), or a
    read came with no session; it has no folder and no quota (the method reads and writes the shared
    files). What a method keeps in memory for a session it drops in an `on_end` listener."""

    session: str | None
    name: str
    person: str | None = None  # whose session (components.serving.people): the quota counts all of theirs

    def path(self, *sub: str) -> Path | None:
        """Where the space's files are or would be; nothing is made (a read is no use)."""
        return None if self.session is None else root().joinpath(session_id(self.session), self.name, *sub)

    def make(self, *sub: str) -> Path | None:
        """The space's folder (or a folder in it), made now; the session is marked as used."""
        if self.session is None:
            return None
        bind(self.session, self.person)
        path = folder(self.session).joinpath(self.name, *sub)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def room(self, extra: int, what: str = "the result") -> None:
        """Refuse before writing `extra` bytes past the session's quota (check_room)."""
        if self.session is not None:
            check_room(self.session, extra, what, self.person)

    def keep_within(self, written: Iterable[Path], what: str = "the result") -> None:
        """After a write of unknown size: past the quota, remove it and refuse (keep_within_quota)."""
        if self.session is not None:
            keep_within_quota(self.session, written, what, self.person)


def on_end(fn: Callable[[str, Path], None]) -> Callable[[str, Path], None]:
    """`fn(session, folder)` runs when a session ends (e.g. to drop in-memory views of its files)."""
    _ON_END.append(fn)
    return fn


def end(session: str | None) -> bool:
    """The session is over: drop what refers to its files, then the folder. True if it had one."""
    sid = session_id(session)
    path = root() / sid
    for fn in list(_ON_END):
        try:
            fn(sid, path)
        except Exception:  # one listener's failure must not keep the files
            pass
    existed = path.exists()
    shutil.rmtree(path, ignore_errors=True)
    return existed


def sweep(now: float | None = None) -> list[str]:
    """End every session idle for longer than WORKBENCH_SESSION_TTL; returns their ids."""
    base = root()
    if not base.is_dir():
        return []
    now = time.time() if now is None else now
    ttl, gone = ttl_seconds(), []
    for d in base.iterdir():
        if not d.is_dir() or not _ID_RE.fullmatch(d.name):
            continue
        mark = d / _MARK
        try:
            last = (mark if mark.exists() else d).stat().st_mtime
        except OSError:
            continue
        if now - last > ttl:
            end(d.name)
            gone.append(d.name)
    return gone


_LAST_SWEEP = [0.0]


def _maybe_sweep() -> None:
    """A sweep at most once a minute, piggybacked on session use (no thread needed for it)."""
    now = time.monotonic()
    with _LOCK:
        if now - _LAST_SWEEP[0] < 60:
            return
        _LAST_SWEEP[0] = now
    sweep()


def start_sweeper(interval: float | None = None) -> None:
    """A daemon thread that sweeps idle sessions even when no one uses the app (once per process)."""
    global _SWEEPER
    with _LOCK:
        if _SWEEPER is not None and _SWEEPER.is_alive():
            return

        def loop():
            while True:
                time.sleep(interval or min(max(ttl_seconds() / 4, 5.0), 300.0))
                try:
                    sweep()
                except Exception:
                    pass

        _SWEEPER = threading.Thread(target=loop, name="workbench-session-sweeper", daemon=True)
        _SWEEPER.start()
