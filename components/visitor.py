"""A visitor's own files in the UI: the Gradio session (a browser tab, or one gradio_client / MCP
client) is the owner of a folder of backend.core.sessions; the folder goes when the session ends
(Gradio's unload event, fired when the page's heartbeat connection closes) or, for a client that
never says goodbye, when it has been idle past WORKBENCH_SESSION_TTL; Gradio's state of the session
goes with it (components.session_memory)."""
from __future__ import annotations

from pathlib import Path

import gradio as gr

from backend.core import sessions
from components import session_memory


def session_of(request: gr.Request | None) -> str | None:
    """The session a request belongs to; None for a call with no Gradio session behind it (Python
    calling a handler: the owner's own use, which shares like WORKBENCH_SHARED_BUILDS=1)."""
    sid = getattr(request, "session_hash", None)
    return sessions.session_id(sid) if sid else None


def own_folder(request: gr.Request | None, *sub: str) -> Path | None:
    """Where this visitor's builds go (made now), or None when they are shared: the owner shares
    builds (WORKBENCH_SHARED_BUILDS=1), or no session is behind the call."""
    sid = session_of(request)
    if sid is None or sessions.shared_builds():
        return None
    path = sessions.folder(sid).joinpath(*sub)
    path.mkdir(parents=True, exist_ok=True)
    return path


def stats_dir(request: gr.Request | None) -> Path | None:
    """Where this visitor's NeMo statistics would be (read only: nothing is made for a read), or None
    where builds are shared."""
    sid = session_of(request)
    if sid is None or sessions.shared_builds():
        return None
    return sessions.root() / sid / "nemo"


def room_of(request: gr.Request | None):
    """A check that `n` more bytes fit this visitor's quota (gr.Error past it)."""
    sid = session_of(request)
    return lambda n, what="the result": sid is None or sessions.check_room(sid, n, what)


def end_session(request: gr.Request):
    sid = getattr(request, "session_hash", None)
    if sid:
        sessions.end(sid)


def install(demo: gr.Blocks) -> None:
    """Remove a session's folder when it ends, and idle ones in the background. Call inside
    `with demo:` (entering it again would build the page's config and server app once more)."""
    demo.unload(end_session)
    sessions.start_sweeper()
    session_memory.install(demo)  # and Gradio's state of the session (components.session_memory)
