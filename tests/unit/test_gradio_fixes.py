import os
import threading

import numpy as np
from gradio import processing_utils
from PIL import Image

from components.gradio_fixes.patches import atomic_image_cache


def test_cached_images_are_written_atomically_and_never_rewritten(tmp_path):
    atomic_image_cache()
    atomic_image_cache()  # idempotent
    img = Image.fromarray((np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8))
    first = processing_utils.save_pil_to_cache(img, str(tmp_path), format="png")
    mtime = os.stat(first).st_mtime_ns
    sizes, errors = [], []

    def writer():
        for _ in range(20):
            p = processing_utils.save_img_array_to_cache(np.asarray(img), str(tmp_path), format="png")
            sizes.append(os.path.getsize(p))

    def reader():
        for _ in range(200):
            try:
                Image.open(first).load()
            except Exception as e:  # a partial file would fail to decode
                errors.append(repr(e))

    threads = [threading.Thread(target=writer) for _ in range(4)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(set(sizes)) == 1 and sizes[0] > 0
    assert os.stat(first).st_mtime_ns == mtime  # kept, not rewritten
    assert not list(tmp_path.rglob("*.tmp"))


def test_error_messages_leave_the_server_escaped_for_the_toast():
    """The toast renders its message as HTML: a handler named "build.<locals>.run" lost all text
    after "<"; escaped, the browser shows it verbatim."""
    import gradio as gr
    from gradio import queueing, utils

    from components.gradio_fixes.patches import escaped_error_messages

    escaped_error_messages()
    escaped_error_messages()  # idempotent
    msg = 'Internal error (KeyError) while running build.<locals>.run; a & b\'s "x"'
    for payload in (queueing.error_payload, utils.error_payload):  # the queue's and the routes' names
        out = payload(gr.Error(msg), False)
        assert out["error"] == ('Internal error (KeyError) while running build.&lt;locals&gt;.run; a &amp; b\'s "x"')
    assert queueing.error_payload(ValueError("hidden"), False)["error"] is None  # show_error off: nothing


def test_unseen_progress_stays_out_of_the_front_ends_status_refresh():
    """Gradio's front end refreshes the status of every progress target of every event run so far on
    each status message: events with hidden progress keep only targets another event shows progress
    on (to clear that status), and no event keeps a layout (the deep link's gr.Tabs) as a target."""
    import gradio as gr

    from components.gradio_fixes.patches import light_loading_status

    with gr.Blocks() as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("a"):
                shown, quiet, other, html = gr.Textbox(), gr.Textbox(), gr.Textbox(), gr.HTML()
        btn = gr.Button()
        restore = demo.load(lambda: [gr.Tabs(selected=0), "", ""], outputs=[tabs, shown, quiet], show_progress="hidden")
        busy = btn.click(lambda: ["", ""], outputs=[shown, html])  # visible progress on both
        to_tab = btn.click(lambda: gr.Tabs(selected=0), outputs=tabs)  # a layout only
        mixed = btn.click(lambda: [gr.Tabs(selected=0), ""], outputs=[tabs, other])
        silent = btn.click(lambda: ["", ""], outputs=[quiet, other], show_progress="hidden")
        chosen = btn.click(lambda: "", outputs=quiet, show_progress="hidden", show_progress_on=[shown])
    light_loading_status(demo)
    deps = demo.get_config_file()["dependencies"]  # in the order the events were wired
    restore, busy, to_tab, mixed, silent, chosen = deps[-6:]

    def on(ev):
        return ev["show_progress_on"]

    assert on(restore) == [shown._id]  # not the tabs, not the output nobody shows progress on
    assert on(busy) is None and busy["show_progress"] == "full"  # untouched: all outputs
    assert on(to_tab) == [] and to_tab["show_progress"] == "hidden"
    assert on(mixed) == [other._id] and mixed["show_progress"] == "full"
    assert on(silent) == [other._id]  # `mixed` shows progress on it, nobody on `quiet`
    assert on(chosen) == [shown._id]


def test_the_queue_keeps_no_analytics_nobody_reads():
    """Gradio's queue summarised every past event (pandas, up to 10,000 rows) after each event, for
    monitoring pages the app does not serve: it keeps one record and never summarises."""
    import gradio as gr

    from components.gradio_fixes.patches import no_event_analytics

    with gr.Blocks() as demo:
        demo.queue()
        no_event_analytics(demo)
    queue = demo._queue
    records = [{"time": 0.0, "status": "success", "process_time": 0.1, "function": f"f{i % 3}"} for i in range(50)]
    queue.events_recorded = 50
    assert queue.compute_analytics_summary(records) == {"functions": {}}  # not summarised
    assert queue.ANALYTICS_MAX_EVENTS == 1


def test_a_front_end_file_is_compressed_once_and_sent_again_the_same():
    """Gradio compressed its front-end files again for every request; a plain request for one is now
    answered from the first answer (same bytes, decoding to the file), while a conditional request,
    a client without brotli and any other path still reach the app."""
    import brotli
    from gradio.brotli_middleware import BrotliMiddleware
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from components.gradio_fixes.patches import compressed_front_end_kept

    script = ("function f(){return 1}\n" * 4000).encode()
    served = []

    def asset(request):
        served.append(request.url.path)
        return Response(script, media_type="text/javascript")

    app = Starlette(
        routes=[
            Route("/assets/{name}", asset),
            Route("/other.js", asset),
            Route("/plain", lambda r: PlainTextResponse("x")),
        ]
    )
    app.add_middleware(BrotliMiddleware, quality=4)
    compressed_front_end_kept()
    compressed_front_end_kept()  # idempotent
    client = TestClient(app)
    br = {"Accept-Encoding": "gzip, br"}
    first = client.get("/assets/index-abc.js", headers=br)
    again = client.get("/assets/index-abc.js", headers=br)
    assert first.status_code == again.status_code == 200
    assert first.headers["content-encoding"] == again.headers["content-encoding"] == "br"
    # httpx decodes brotli itself: both answers are the file, and the second was not served again
    assert first.content == again.content == script
    assert int(again.headers["content-length"]) == len(brotli.compress(script, quality=4))
    assert served == ["/assets/index-abc.js"]
    client.get("/assets/index-abc.js", headers={**br, "If-None-Match": '"x"'})
    client.get("/assets/index-abc.js", headers={"Accept-Encoding": "gzip"})
    client.get("/other.js", headers=br)
    client.get("/other.js", headers=br)
    assert served == ["/assets/index-abc.js"] * 3 + ["/other.js"] * 2
    assert client.get("/plain", headers=br).text == "x"


def test_gradio_writes_no_type_stubs_beside_a_component_class(tmp_path, monkeypatch):
    """Gradio rewrote a `.pyi` beside every component class at import (3 s of each start, and
    files in the app's own folder); components.gradio_fixes.stubs, used before gradio is imported
    (app.py, tests/conftest.py), turns that off."""
    import gradio.component_meta as meta

    from components.gradio_fixes import stubs as gradio_stubs

    assert meta.create_or_modify_pyi is gradio_stubs._no_rewrite
    (tmp_path / "my_boxes.py").write_text("import gradio as gr\n\n\nclass MyBox(gr.Textbox):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_boxes

    assert my_boxes.MyBox.EVENTS  # a real component class was made
    assert list(tmp_path.glob("*.pyi")) == []


def test_an_idle_queue_looks_for_work_every_ten_milliseconds_not_every_one():
    """Gradio's queue looked for a new event every millisecond while it had none (9 % of a core
    for an idle server); after calmer_queue_polls it looks about a hundred times a second."""
    import time

    import gradio as gr

    from components.gradio_fixes.patches import calmer_queue_polls
    from tests.helpers.server import free_port

    with gr.Blocks() as demo:
        demo.queue()
        calmer_queue_polls(demo)
        gr.Button().click(lambda: None)
    looks = []

    class Counting(type(demo._queue)):
        def __len__(self):  # the processing loop asks the queue's length at each look
            looks.append(time.perf_counter())
            return super().__len__()

    demo._queue.__class__ = Counting
    demo.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True)
    try:
        time.sleep(1.5)
    finally:
        demo.close()
    assert len(looks) >= 20, looks  # the loop ran
    assert len(looks) / (looks[-1] - looks[0]) <= 110


def test_the_page_carries_the_tracker_frame_script_first_with_its_length():
    """The script that slows the status trackers' timer loops must run before Gradio's own scripts
    (their tracker keeps the requestAnimationFrame it found): it is the first thing in <head>, and
    the answer's length counts it."""
    import urllib.request

    import gradio as gr

    from components.gradio_fixes.patches import TRACKER_FRAMES_JS, tracker_timers_at_ten_frames
    from tests.helpers.server import free_port

    tracker_timers_at_ten_frames()
    tracker_timers_at_ten_frames()  # idempotent
    with gr.Blocks() as demo:
        gr.Textbox()
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/") as r:
            body, length = r.read(), int(r.headers["content-length"])
    finally:
        demo.close()
    assert length == len(body)
    head = body.split(b"<head>", 1)[1]
    assert head.startswith(TRACKER_FRAMES_JS.encode())
    assert body.count(TRACKER_FRAMES_JS.encode()) == 1
    assert head.index(TRACKER_FRAMES_JS.encode()) < head.index(b'type="module"')


def _run(coro):
    import asyncio

    return asyncio.run(coro)


def test_an_empty_session_hash_is_none_on_call_and_refused_on_join():
    """Gradio's queue sent an event with session_hash "" to a session that did not exist (a KeyError,
    HTTP 500): /call (simple format) now joins as a call without a hash, /queue/join is refused."""
    from types import SimpleNamespace

    from components.gradio_fixes.patches import EMPTY_SESSION_HASH, _without_empty_hash

    joined = []

    async def push(self, body, request, username):
        joined.append(body.session_hash)
        return True, "event", "success"

    push = _without_empty_hash(push)
    assert _run(push(None, SimpleNamespace(session_hash="", simple_format=True), None, None))[0]
    assert _run(push(None, SimpleNamespace(session_hash="abc", simple_format=False), None, None))[0]
    assert joined == [None, "abc"]
    assert _run(push(None, SimpleNamespace(session_hash="", simple_format=False), None, None)) == (
        False,
        EMPTY_SESSION_HASH,
        "error",
    )
    assert joined == [None, "abc"]


def test_a_wrong_number_of_arguments_is_refused_with_the_count_the_endpoint_takes():
    """A /call with too few arguments failed in the queue as `{"error": null}`, too many were dropped:
    both are refused before queueing, and too few reaching the handler's input check say the same."""
    from types import SimpleNamespace

    import gradio as gr
    import pytest

    from components.gradio_fixes.patches import _counted, _validated

    with gr.Blocks() as demo:
        a, b, s = gr.Textbox(label="A"), gr.Number(label="B"), gr.State()
        gr.Button().click(lambda *x: None, [a, b, s], None, api_name="f")
    fn = next(f for f in demo.fns.values() if f.api_name == "f")
    queue = SimpleNamespace(blocks=demo)
    joined = []

    async def push(self, body, request, username):
        joined.append(body.data)
        return True, "event", "success"

    push = _counted(push)
    words = "/f takes 2 arguments (A, B); this request sent {}. Nothing was run."
    for data in ([], ["x"], ["x", 1, None, "extra"]):
        body = SimpleNamespace(fn_index=fn._id, data=data, simple_format=True)
        assert _run(push(queue, body, None, None)) == (False, words.format(len(data)), "error")
    assert joined == []
    # the whole count (Gradio spreads a /call's two over the three inputs first), and the page's joins
    assert _run(push(queue, SimpleNamespace(fn_index=fn._id, data=["x", 1, None], simple_format=True), None, None))[0]
    assert _run(push(queue, SimpleNamespace(fn_index=fn._id, data=["x"], simple_format=False), None, None))[0]
    validate = _validated(lambda self, block_fn, inputs: "checked")
    with pytest.raises(gr.Error) as e:
        validate(demo, fn, ["x"])
    assert e.value.message == words.format(1)
    assert validate(demo, fn, ["x", 1, None]) == "checked"


def test_a_body_over_the_limit_is_refused_before_the_app_reads_it():
    """Gradio read a request body of any size (a 60 MB JSON body, +133 MB): one over the bound is
    refused with HTTP 413 and why, by its declared length before it is read, or when streamed as soon
    as it passes the bound; Gradio's upload route (bounded per file by max_file_size) is left to it."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from components.gradio_fixes.patches import BodyLimit

    read = []

    async def take(request):
        body = await request.body()
        read.append(len(body))
        return PlainTextResponse(str(len(body)))

    app = Starlette(
        routes=[
            Route("/gradio_api/call/f", take, methods=["POST"]),
            Route("/gradio_api/upload", take, methods=["POST"]),
        ]
    )
    client = TestClient(BodyLimit(app, max_bytes=1000))
    r = client.post("/gradio_api/call/f", content=b"x" * 2000)
    assert r.status_code == 413 and r.json()["detail"].startswith("This request's body is 0.0 MB, over")
    r = client.post("/gradio_api/call/f", content=(b"x" * 300 for _ in range(10)))  # chunked: no length
    # (raised as the app reads: its own handler words it, FastAPI's as JSON, plain Starlette's as text)
    assert r.status_code == 413 and "This request's body went past this server's limit" in r.text
    assert read == []
    assert client.post("/gradio_api/call/f", content=b"x" * 1000).text == "1000"
    assert client.post("/gradio_api/upload", content=b"x" * 5000).text == "5000"
    assert read == [1000, 5000]


def test_the_page_imports_gradios_plotly_component_by_the_url_gradio_resolves():
    """The module the page imports ahead is the one Gradio's own lazy import loads: the one built
    PlotlyPlot file, whose own import of it names it the same way."""
    from pathlib import Path

    import gradio

    from components.gradio_fixes.patches import PLOTLY_AHEAD_JS, plotly_module

    name = plotly_module()
    assert name and name.startswith("PlotlyPlot-") and name.endswith(".js")
    assets = Path(gradio.__file__).parent / "templates" / "frontend" / "assets"
    assert any(
        f'"./{name}"' in p.read_text(errors="ignore")
        or f"'./{name}'" in p.read_text(errors="ignore")
        or f"`./{name}`" in p.read_text(errors="ignore")
        for p in assets.glob("Plot-*.js")
    )
    assert "assets/" + name in PLOTLY_AHEAD_JS % name
