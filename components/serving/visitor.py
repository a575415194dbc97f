"""A visitor's own files in the UI: the Gradio session (a browser tab, or one gradio_client / MCP
client) is the owner of a folder of backend.core.sessions; the folder goes when the session ends
(Gradio's unload event, fired when the page's heartbeat connection closes) or, for a client that
never says goodbye, when it has been idle past WORKBENCH_SESSION_TTL; Gradio's state of the session
goes with it (components.serving.session_memory).

A call with no session behind it (a raw POST to /gradio_api/run/<name>, Python calling a handler)
is nobody in particular: it reads what everyone reads, and anything it would build is refused. The
owner's artefacts are written by the owner's jobs (the precompute CLIs) or, on a private Space,
under WORKBENCH_SHARED_BUILDS=1, never because a request lacks a session.

`space(request, SPACE, write=)` is how every handler reaches its visitor's files (the convention:
backend.core.sessions.Space, docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from backend.core import sessions
from components.serving import people
from components.serving import session_memory

NO_SESSION = (
    "This call carries no session, so it has no place of its own to keep what it builds, and "
    "visitors never write the server's shared files. Call it from the page or with gradio_client "
    "(each client is a session of its own), or send a session_hash with the request. "
    "Nothing was written."
)


def session_of(request: gr.Request | None) -> str | None:
    """The session a request belongs to, as the key of its folder (backend.core.sessions.key_of: not
    the Gradio session hash itself); None for a call with no Gradio session behind it."""
    sid = getattr(request, "session_hash", None)
    return sessions.key_of(sid) if sid else None


def space(request: gr.Request | None, name: str, *, write: bool = False) -> sessions.Space:
    """This request's space for a method (`name`: the method's SPACE): nobody's (shared files) where
    the owner shares builds (WORKBENCH_SHARED_BUILDS=1); with no session behind the call, nobody's
    for a read, and a write (`write`) is refused (gr.Error), never turned into the owner's."""
    if sessions.shared_builds():
        return sessions.Space(None, name)
    sid = session_of(request)
    if sid is None and write:
        raise gr.Error(NO_SESSION)
    return sessions.Space(sid, name, people.key(request) if sid else None)


def own_folder(request: gr.Request | None, name: str, *sub: str) -> Path | None:
    """Where this visitor's builds for the method `name` go (made now), or None when the owner shares
    builds. A call with no session is refused (space)."""
    return space(request, name, write=True).make(*sub)


def end_session(request: gr.Request):
    sid = session_of(request)
    if sid:
        sessions.end(sid)


def install(demo: gr.Blocks) -> None:
    """Remove a session's folder when it ends, and idle ones in the background. Call inside
    `with demo:` (entering it again would build the page's config and server app once more)."""
    demo.unload(end_session)
    sessions.start_sweeper()
    session_memory.install(demo)  # and Gradio's state of the session (components.serving.session_memory)
