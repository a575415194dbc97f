"""A visitor's own files in the UI: the Gradio session (a browser tab, or one gradio_client / MCP
client) is the owner of a folder of backend.core.sessions; the folder goes when the session ends
(Gradio's unload event, fired when the page's heartbeat connection closes) or, for a client that
never says goodbye, when it has been idle past WORKBENCH_SESSION_TTL; Gradio's state of the session
goes with it (components.session_memory).

A call with no session behind it (a raw POST to /gradio_api/run/<name>, Python calling a handler)
is nobody in particular: it reads what everyone reads, and anything it would build is refused. The
owner's artefacts are written by the owner's jobs (the precompute CLIs) or, on a private Space,
under WORKBENCH_SHARED_BUILDS=1, never because a request lacks a session."""
from __future__ import annotations

from pathlib import Path

import gradio as gr

from backend.core import sessions
from components import session_memory

NO_SESSION = ("This call carries no session, so it has no place of its own to keep what it builds, and "
              "visitors never write the server's shared files. Call it from the page or with gradio_client "
              "(each client is a session of its own), or send a session_hash with the request. "
              "Nothing was written.")


def session_of(request: gr.Request | None) -> str | None:
    """The session a request belongs to, as the key of its folder (backend.core.sessions.key_of: not
    the Gradio session hash itself); None for a call with no Gradio session behind it."""
    sid = getattr(request, "session_hash", None)
    return sessions.key_of(sid) if sid else None


def writer_of(request: gr.Request | None) -> str | None:
    """The session whose scope a build of this call goes to: None only where the owner shares builds
    (WORKBENCH_SHARED_BUILDS=1); a call with no session is refused (gr.Error), never the owner."""
    if sessions.shared_builds():
        return None
    sid = session_of(request)
    if sid is None:
        raise gr.Error(NO_SESSION)
    return sid


def own_folder(request: gr.Request | None, *sub: str) -> Path | None:
    """Where this visitor's builds go (made now), or None when the owner shares builds
    (WORKBENCH_SHARED_BUILDS=1). A call with no session is refused (writer_of)."""
    sid = writer_of(request)
    if sid is None:
        return None
    path = sessions.folder(sid).joinpath(*sub)
    path.mkdir(parents=True, exist_ok=True)
    return path


def stats_dir(request: gr.Request | None) -> Path | None:
    """Where this visitor's NeMo statistics would be (read only: nothing is made for a read), or None
    where builds are shared or no session is behind the call (the shared statistics)."""
    sid = session_of(request)
    if sid is None or sessions.shared_builds():
        return None
    return sessions.root() / sid / "nemo"


def room_of(request: gr.Request | None):
    """A check that `n` more bytes fit this visitor's quota (gr.Error past it); none where the owner
    shares builds."""
    sid = None if sessions.shared_builds() else writer_of(request)
    return lambda n, what="the result": sid is None or sessions.check_room(sid, n, what)


def end_session(request: gr.Request):
    sid = session_of(request)
    if sid:
        sessions.end(sid)


def install(demo: gr.Blocks) -> None:
    """Remove a session's folder when it ends, and idle ones in the background. Call inside
    `with demo:` (entering it again would build the page's config and server app once more)."""
    demo.unload(end_session)
    sessions.start_sweeper()
    session_memory.install(demo)  # and Gradio's state of the session (components.session_memory)
