"""Workarounds for Gradio behaviour that the workbench cannot accept, applied once by app.py."""

from __future__ import annotations

import html
import os
import re
import sys
import uuid
from pathlib import Path

from gradio import processing_utils
from starlette.exceptions import HTTPException

from components.agents.mcp_server import BODY_BYTES


def atomic_image_cache() -> None:
    """Gradio 6.31 writes a returned image to its content-addressed cache path in place
    (`save_pil_to_cache`), so when two requests produce the same image at the same moment one of
    them can be served a half-written, even empty, file (seen under 16 parallel clients). Write to
    a temporary name and rename into place, and keep a file that is already there, as Gradio
    already does for returned files (`save_file_to_cache`)."""
    if getattr(processing_utils.save_pil_to_cache, "_wb_atomic", False):
        return

    def save_pil_to_cache(img, cache_dir: str, name: str = "image", format: str = "webp") -> str:
        data = processing_utils.encode_pil_to_bytes(img, format)
        folder = Path(cache_dir) / processing_utils.hash_bytes(data)
        folder.mkdir(exist_ok=True, parents=True)
        path = (folder / f"{name}.{format}").resolve()
        if not path.exists():
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return str(path)

    save_pil_to_cache._wb_atomic = True
    processing_utils.save_pil_to_cache = save_pil_to_cache


def escaped_error_messages() -> None:
    """Gradio 6.31 renders an error toast's message as HTML, so a message that names a nested
    handler ("build.<locals>.run") or quotes a user's "<text>" loses everything after the "<".
    Error messages leave the server HTML-escaped (quotes kept), and the toast shows them verbatim."""
    from gradio import queueing, utils

    if getattr(utils.error_payload, "_wb_escaped", False):
        return
    plain = utils.error_payload

    def error_payload(error, show_error):
        content = plain(error, show_error)
        if isinstance(content.get("error"), str):
            content["error"] = html.escape(content["error"], quote=False)
        return content

    error_payload._wb_escaped = True
    utils.error_payload = queueing.error_payload = error_payload


def light_loading_status(demo) -> None:
    """Gradio 6.31's front end keeps a loading status for every component that has been an input or
    a progress target (by default: an output) of any event run so far, and on every status message
    of every event (pending, generating, complete) it hands each of them a new status object: the
    component is looked up by a walk of the whole page's tree, and a layout (the gr.Tabs a deep link
    selects) has every component under it asked for its value again. With the page's load events'
    outputs among them, one click costs the page 100-600 ms on a loaded machine.

    Progress nobody sees is taken out of that: an event with hidden progress keeps as progress
    targets only the outputs some event with visible progress shows its status on (it may need to
    clear that status, components.inputs.fields.keep_on_failure), and no event shows progress on a layout
    (a status there is drawn over the whole tab). Call once every event is wired."""
    from gradio.blocks import BlockContext
    from gradio.components import Component

    def layout(c) -> bool:  # gr.HTML is a BlockContext too (it may hold children) but shows progress
        return isinstance(c, BlockContext) and not isinstance(c, Component)

    def targets(fn):
        return list(fn.show_progress_on) if fn.show_progress_on is not None else list(fn.outputs or [])

    for fn in demo.fns.values():
        shown = targets(fn)
        kept = [c for c in shown if not layout(c)]
        if len(kept) < len(shown):
            fn.show_progress_on = kept
            if not kept:
                fn.show_progress = "hidden"
    visible = {id(c) for fn in demo.fns.values() if fn.show_progress != "hidden" for c in targets(fn)}
    for fn in demo.fns.values():
        if fn.show_progress == "hidden":
            fn.show_progress_on = [c for c in targets(fn) if id(c) in visible]


def no_event_analytics(demo) -> None:
    """Gradio 6.31's queue keeps a record of the last 10,000 events and, after each one ends (twice
    for a generator), rebuilds a pandas summary of all of them (`compute_analytics_summary`), only
    for its /monitoring pages: 100 s of the served app's 610 s of CPU over the browser tests, and
    growing with the record up to 10,000 rows an event. The app serves no monitoring page
    (`launch_kwargs`: those pages would show strangers every visitor's calls and their times), so
    the queue keeps one record and never summarises. Call after `demo.queue(...)`."""
    queue = demo._queue
    queue.ANALYTICS_MAX_EVENTS = 1
    queue.ANAYLTICS_CACHE_FREQUENCY = sys.maxsize  # (Gradio's spelling)


# How often the queue looks for work when it has none, and for a running event's new progress.
QUEUE_IDLE_POLL_S = 0.01
PROGRESS_POLL_S = 0.1


def calmer_queue_polls(demo) -> None:
    """Gradio 6.31's queue looks for a new event every millisecond while none can start (its
    `sleep_when_free`), and for a running event's progress every 10 ms: an idle server took 9 % of a
    core for it, all day, and a handler reporting progress in a tight loop sent the page up to 100
    progress messages a second, each one re-rendering every status tracker in the browser. The queue
    now looks every 10 ms (an event starts at most that much later) and sends a running event's
    latest progress at most ten times a second, which a bar's eye cannot tell from a hundred.
    Call after `demo.queue(...)`."""
    queue = demo._queue
    queue.sleep_when_free = QUEUE_IDLE_POLL_S
    queue.progress_update_sleep_when_free = PROGRESS_POLL_S


# Run in the page before Gradio's scripts (a classic inline script at the top of <head>): Gradio's
# status tracker keeps its requestAnimationFrame reference from its first evaluation.
TRACKER_FRAMES_JS = """<script>(() => {
  const raf = window.requestAnimationFrame.bind(window), cancel = window.cancelAnimationFrame.bind(window);
  const timer = /^\\(\\)=>\\{[^{}]*\\(performance\\.now\\(\\)-[^{}]*\\)\\/1e3\\)/;
  const later = new Map();
  let next = -1;
  window.requestAnimationFrame = (cb) => {
    if (typeof cb !== 'function' || !timer.test(Function.prototype.toString.call(cb))) return raf(cb);
    const id = next--;
    later.set(id, setTimeout(() => { later.delete(id); raf(cb); }, 100));
    return id;
  };
  window.cancelAnimationFrame = (id) => {
    if (later.has(id)) { clearTimeout(later.get(id)); later.delete(id); } else cancel(id);
  };
})();</script>"""


def tracker_timers_at_ten_frames() -> None:
    """Gradio 6.31's status tracker counts a pending event's seconds with a requestAnimationFrame
    loop, and the page's own loading tracker never stops its loop once the page has loaded (its
    stop runs only when its status changes again, which it never does): every open page drew 60
    frames a second for nothing, 8-10 % of a core of the browser, on a visitor's machine as in the
    tests, for as long as the tab stayed open. The tracker shows tenths of a second, so its loop's
    frames are delayed to ten a second (a script at the top of the page, before Gradio's own, since
    the tracker keeps the function it found): the counter looks the same, an idle page draws a
    sixth of the frames, and every other animation (plotly, Gradio's transitions) is untouched."""
    from gradio import routes

    templates = routes.templates
    if getattr(templates.TemplateResponse, "_wb_frames", False):
        return
    original = templates.TemplateResponse

    def TemplateResponse(*args, **kwargs):
        resp = original(*args, **kwargs)
        name = kwargs.get("name", args[1] if len(args) > 1 else "")
        body = getattr(resp, "body", None)
        if str(name).endswith("index.html") and isinstance(body, bytes) and b"<head>" in body:
            resp.body = body.replace(b"<head>", b"<head>" + TRACKER_FRAMES_JS.encode(), 1)
            resp.raw_headers = [(k, v) for k, v in resp.raw_headers if k.lower() != b"content-length"]
            resp.raw_headers.append((b"content-length", str(len(resp.body)).encode()))
        return resp

    TemplateResponse._wb_frames = True
    templates.TemplateResponse = TemplateResponse


# Gradio's own front-end files, served from its installed package: they never change while it runs.
_PACKAGE_FILES = re.compile(r"^/(assets|static)/[^?#]+\.(js|css)$")
_KEPT_MAX_BYTES = 64 * 2**20  # the whole build compresses to a few MB


def compressed_front_end_kept() -> None:
    """Gradio 6.31 compresses every front-end file again for every request (its BrotliMiddleware,
    quality 4): each page a new visitor opens makes the server compress the same megabytes of
    scripts, 63 s of the served app's 610 s of CPU over the browser tests. A plain request for one of
    Gradio's package files (/assets/, /static/) is answered once through Gradio's own compression and
    that answer is kept and sent again; a conditional or partial request, another encoding or any
    other path goes through Gradio's middleware as before."""
    from gradio.brotli_middleware import BrotliMiddleware
    from starlette.datastructures import Headers

    if getattr(BrotliMiddleware.__call__, "_wb_kept", False):
        return
    plain = BrotliMiddleware.__call__
    kept: dict[str, list[dict]] = {}

    def keepable(scope) -> bool:
        if scope["type"] != "http" or scope.get("method") != "GET" or not _PACKAGE_FILES.match(scope.get("path", "")):
            return False
        headers = Headers(scope=scope)
        return (
            "br" in headers.get("accept-encoding", "")
            and "range" not in headers
            and "if-none-match" not in headers
            and "if-modified-since" not in headers
        )

    async def __call__(self, scope, receive, send):
        if not keepable(scope):
            return await plain(self, scope, receive, send)
        path = scope["path"]
        if path not in kept:
            messages: list[dict] = []

            async def record(message):
                messages.append(message)
                await send(message)

            await plain(self, scope, receive, record)
            if not messages:
                return
            start, body = messages[0], b"".join(m.get("body", b"") for m in messages[1:])
            encoded = dict(Headers(raw=start.get("headers", []))).get("content-encoding") == "br"
            size = sum(len(b"".join(m.get("body", b"") for m in v[1:])) for v in kept.values())
            if start.get("status") == 200 and encoded and size + len(body) <= _KEPT_MAX_BYTES:
                headers = [(k, v) for k, v in start["headers"] if k.lower() not in (b"content-length", b"date")]
                headers.append((b"content-length", str(len(body)).encode()))
                kept[path] = [
                    {**start, "headers": headers},
                    {"type": "http.response.body", "body": body, "more_body": False},
                ]
            return
        for message in kept[path]:
            await send(message)

    __call__._wb_kept = True
    BrotliMiddleware.__call__ = __call__


# Each wrapper of Gradio's Queue.push is applied once per process: components.serving.fair_queue wraps it
# too, so a marker on the function would be hidden under the other wrapper.
_PUSH_WRAPPED: set[str] = set()

EMPTY_SESSION_HASH = (
    "session_hash is empty. Send your session's hash (any string of letters and digits your "
    "client keeps for its calls and listens on), or leave session_hash out where a call may "
    "have none (/gradio_api/call/<name>). Nothing was queued."
)


def _without_empty_hash(push):
    async def join(self, body, request, username):
        if body.session_hash == "":
            if not getattr(body, "simple_format", False):  # /queue/join: its caller listens by the hash
                return False, EMPTY_SESSION_HASH, "error"
            body.session_hash = None
        return await push(self, body, request, username)

    return join


def empty_session_hash_as_none() -> None:
    """Gradio 6.31 keys a queued event's messages by the request's session_hash but sends them by the
    event's, which is the event's own id when the hash is empty (`session_hash or id`): a raw request
    with `"session_hash": ""` raised a KeyError, HTTP 500 on /gradio_api/call/<name>, and on
    /gradio_api/queue/join an event whose messages never came. On /call, where a request may carry
    no hash (the event's id stands in), an empty one is taken as none; /queue/join refuses it with
    HTTP 400 and why."""
    from gradio import queueing

    if "empty_session_hash" not in _PUSH_WRAPPED:
        _PUSH_WRAPPED.add("empty_session_hash")
        queueing.Queue.push = _without_empty_hash(queueing.Queue.push)


def argument_count_refusal(fn, sent: int) -> str:
    """What an endpoint takes, in the words of its API page (its components' labels)."""
    inputs = [b for b in fn.inputs if not getattr(b, "skip_api", False)]
    names = ", ".join(str(getattr(b, "label", None) or type(b).__name__)[:40] for b in inputs)
    n = len(inputs)
    return (
        f"/{fn.api_name} takes {n} argument{'' if n == 1 else 's'}{f' ({names})' if n else ''}; "
        f"this request sent {sent}. Nothing was run."
    )


def _counted(push):
    async def join(self, body, request, username):
        fn = self.blocks.fns.get(body.fn_index) if body.fn_index is not None else None
        # (Gradio has already spread a /call's arguments over the endpoint's hidden inputs, if they fit)
        if fn is not None and getattr(body, "simple_format", False) and len(body.data) != len(fn.inputs):
            return False, argument_count_refusal(fn, len(body.data)), "error"
        return await push(self, body, request, username)

    return join


def _validated(validate):
    from gradio.exceptions import Error

    def validate_inputs(self, block_fn, inputs):
        if len(inputs) < len(block_fn.inputs):
            raise Error(argument_count_refusal(block_fn, len(inputs)))
        return validate(self, block_fn, inputs)

    return validate_inputs


def argument_counts_checked() -> None:
    """Gradio 6.31 queues a /gradio_api/call/<name> request whatever number of arguments it sends: too
    few fail in the queue with a message shown only under show_error (off here), so the caller read
    `{"error": null}`, and too many were dropped without a word. Such a request is now refused with
    HTTP 400 before it is queued, saying how many arguments the endpoint takes; too few that reach a
    handler another way (/gradio_api/run/<name>, /queue/join) get the same words as their error."""
    from gradio import blocks, queueing

    if "argument_count" not in _PUSH_WRAPPED:
        _PUSH_WRAPPED.add("argument_count")
        queueing.Queue.push = _counted(queueing.Queue.push)
        blocks.Blocks.validate_inputs = _validated(blocks.Blocks.validate_inputs)


# The largest request body the server reads, Gradio's upload route aside (it streams a file to disk
# and bounds each by launch's max_file_size): the MCP transports' bound (components.agents.mcp_server), since
# an MCP call reaches the queue as a request of its own carrying the same arguments (an image the
# tools take, in base64); a page's or client's call sends file references, a few kilobytes.
REQUEST_BODY_BYTES = BODY_BYTES
_UNBOUNDED_PATHS = ("/gradio_api/upload",)


def _body_refusal(size: int | None) -> str:
    """`size`: the declared length; None for a streamed body, stopped where it passed the limit."""
    said = f"is {size / 1e6:.1f} MB, over" if size is not None else "went past"
    return (
        f"This request's body {said} this server's limit of {REQUEST_BODY_BYTES / 1e6:.1f} MB for a "
        "request; send files through /gradio_api/upload (what gradio_client does) and their "
        "references in the call. Nothing was run."
    )


class _BodyTooLarge(HTTPException):
    """Raised from the body's stream: FastAPI lets an HTTPException out of its body parsing (any
    other error there becomes "There was an error parsing the body")."""

    def __init__(self):
        super().__init__(status_code=413, detail=_body_refusal(None))


class BodyLimit:
    """Refuses, with HTTP 413 and why, a request whose body is over REQUEST_BODY_BYTES: by its
    declared length before a byte is read, else as soon as its streamed bytes pass the bound."""

    def __init__(self, app, max_bytes: int | None = None):
        self.app = app
        self.max_bytes = REQUEST_BODY_BYTES if max_bytes is None else max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path", "").rstrip("/").endswith(_UNBOUNDED_PATHS):
            return await self.app(scope, receive, send)
        from starlette.datastructures import Headers
        from starlette.responses import JSONResponse

        def refuse(size: int | None):
            return JSONResponse({"detail": _body_refusal(size)}, status_code=413)(scope, receive, send)

        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await refuse(int(declared))
        seen, started = 0, False

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _BodyTooLarge
            return message

        async def sending(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except _BodyTooLarge:
            if started:
                raise
            await refuse(None)


def bounded_request_bodies() -> None:
    """Gradio 6.31 reads and parses a request body of any size: a 60 MB JSON body sent to
    /gradio_api/call/<name> was taken whole (+133 MB of the server's memory) before anything looked
    at it. Every app Gradio creates now refuses a body over REQUEST_BODY_BYTES first (BodyLimit,
    outermost of the app's own middleware, so nothing has read the body yet)."""
    from gradio import routes
    from starlette.middleware import Middleware

    create = routes.App.create_app
    if getattr(create, "_wb_bodies", False):
        return

    def create_app(*args, **kwargs):
        app = create(*args, **kwargs)
        app.user_middleware.insert(0, Middleware(BodyLimit))
        return app

    create_app._wb_bodies = True
    routes.App.create_app = staticmethod(create_app)


# Gradio's plotly component, the largest file of its front end (4.6 MB), is imported the first time a
# figure is drawn: a tab's first view waited for its download and compilation after its result had
# arrived. The page imports it while the browser is idle, as the visitor reads the Overview, by the
# URL Gradio's own import resolves to (one module, evaluated once).
PLOTLY_AHEAD_JS = """() => {
  const go = () => import(new URL('assets/%s', document.baseURI.split(/[?#]/)[0].replace(/[^/]*$/, ''))).catch(() => {});
  if (window.requestIdleCallback) { requestIdleCallback(go, {timeout: 4000}); } else { setTimeout(go, 1500); }
}"""


def plotly_module() -> str | None:
    """The file name of Gradio's plotly component in its built front end, if there is one."""
    import gradio

    found = sorted((Path(gradio.__file__).parent / "templates" / "frontend" / "assets").glob("PlotlyPlot-*.js"))
    return found[0].name if len(found) == 1 else None


def plotly_ahead(demo) -> None:
    """Import Gradio's plotly component in the page's idle time after it loads. Call inside `with demo:`."""
    name = plotly_module()
    if name:
        demo.load(None, js=PLOTLY_AHEAD_JS % name, api_visibility="private")
