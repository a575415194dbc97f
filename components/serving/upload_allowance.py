"""A visitor's uploads are counted against one allowance per person, not per session.

Gradio's own `/gradio_api/upload` writes whatever it is sent into its cache, with no session and no
quota: twenty 19-MB files in 3.5 s from one client, kept until the cache is cleared. Here each
person (components.serving.people: the signed-in user, else the address the proxy reports) may upload at
most WORKBENCH_UPLOAD_ALLOWANCE (default: the visitor's quota, WORKBENCH_SESSION_QUOTA; "none" for
no cap) within the time Gradio keeps an upload (WORKBENCH_SESSION_TTL, app.build_app's
delete_cache). A
request past it is refused with HTTP 413 and a message before any byte is written: by its declared
length, or, when it declares none, as soon as its streamed bytes pass what is left.

An ASGI middleware placed innermost (after Gradio's OAuth session middleware, so a signed-in
visitor is one person from any address) on the app Gradio creates (`install` wraps
`App.create_app`, as components.gradio_fixes.patches wraps Gradio's other parts).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque

from backend.core import sessions
from backend.core.budget import parse_bytes

from components.serving import people

ALLOWANCE_ENV = "WORKBENCH_UPLOAD_ALLOWANCE"
_UPLOAD_PATH = "/gradio_api/upload"
_LOCK = threading.Lock()
_SENT: dict[str, deque] = {}  # person -> (time, bytes) of their uploads within the window


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def _used(person: str, now: float, window: float) -> int:
    sent = _SENT.get(person)
    if not sent:
        return 0
    while sent and now - sent[0][0] > window:
        sent.popleft()
    if not sent:
        del _SENT[person]
        return 0
    return sum(n for _, n in sent)


def take(person: str, n: int, now: float | None = None) -> str | None:
    """Count `n` bytes of `person`'s uploads, or say why not (nothing is counted then)."""
    raw = os.environ.get(ALLOWANCE_ENV, "").strip()
    cap = parse_bytes(raw) if raw else sessions.quota_bytes()
    if cap is None:
        return None
    now = time.monotonic() if now is None else now
    window = sessions.ttl_seconds()
    with _LOCK:
        used = _used(person, now, window)
        if used + n > cap:
            return (
                f"Refused: this upload ({_mb(n)}) would take your uploads of the last {window / 3600:g} h to "
                f"{_mb(used + n)}, over a visitor's allowance of {_mb(cap)} ({ALLOWANCE_ENV}). "
                "Nothing was uploaded."
            )
        _SENT.setdefault(person, deque()).append((now, n))
    return None


def forget() -> None:
    """Drop every count (tests)."""
    with _LOCK:
        _SENT.clear()


class UploadAllowance:
    """Refuses an upload past its person's allowance, before Gradio reads it."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" or not scope.get("path", "").endswith(_UPLOAD_PATH):
            return await self.app(scope, receive, send)
        from starlette.requests import Request
        from starlette.responses import PlainTextResponse

        request = Request(scope)
        person = people.key(request)
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit():
            refusal = take(person, int(declared))
            if refusal:
                return await PlainTextResponse(refusal, status_code=413)(scope, receive, send)
            return await self.app(scope, receive, send)

        # no declared length (a chunked body): count the bytes as they come, and stop reading past
        # the allowance (the upload then ends as a client that went away)
        async def counted():
            message = await receive()
            if message["type"] == "http.request" and take(person, len(message.get("body", b""))):
                return {"type": "http.disconnect"}
            return message

        return await self.app(scope, counted, send)


def install() -> None:
    """Put the allowance innermost in every app Gradio creates (once per process)."""
    from gradio import routes
    from starlette.middleware import Middleware

    create = routes.App.create_app
    if getattr(create, "_wb_uploads", False):
        return

    def create_app(*args, **kwargs):
        app = create(*args, **kwargs)
        # innermost: Gradio's session middleware (OAuth) has run, so the signed-in user is known
        app.user_middleware.append(Middleware(UploadAllowance))
        return app

    create_app._wb_uploads = True
    routes.App.create_app = staticmethod(create_app)
