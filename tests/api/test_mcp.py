"""The workbench as MCP tools (components.agents.tools), driven by the `mcp` package's client.

The app runs in this process with the MCP server on, as `app.py --mcp` starts it, so that after
every tool call the models' hooks and weights can be checked (tests/api/conftest.py) and the
ZeroGPU boundary is exercised. Each tool's answer is compared with the UI endpoint's answer for the
same input, called by gradio_client on the api tests' app (same process, same models; its UI events
are public, so an input a tab adds later keeps its default).
Those comparisons are in tests/api/test_mcp_equals_ui.py.
"""

import asyncio
import base64
import io
import json

import pytest

pytest.importorskip("mcp")

from backend.core.presets import ZOO_ROOT  # noqa: E402

pytestmark = pytest.mark.timeout(300)
FEATURES_BUILT = (ZOO_ROOT / "llava-scenes-sae" / "manifest.json").exists()


@pytest.fixture(autouse=True)
def zerogpu_boundary(monkeypatch):
    """Every tool call pickles its arguments and results as ZeroGPU's worker queue would."""
    from backend.core import zerogpu

    monkeypatch.setattr(zerogpu, "_CHECK", True)
    yield


def _session(url, work):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def run():
        async with streamablehttp_client(url + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as s:
                await s.initialize()
                return await work(s)

    return asyncio.run(run())


def call(url, name, **args):
    """(JSON of the tool's first text, the decoded images, the raw result)."""
    res = _session(url, lambda s: s.call_tool(name, args))
    texts = [c.text for c in res.content if c.type == "text"]
    if res.isError:
        return None, [], res
    images = [c for c in res.content if c.type == "image"]
    return json.loads(texts[0]), images, res


def error_of(url, name, **args) -> str:
    res = _session(url, lambda s: s.call_tool(name, args))
    assert res.isError, f"{name}({args}) did not fail"
    return " ".join(c.text for c in res.content if c.type == "text")


def sig(obj):
    """The UI's numbers as a tool answers them (4 significant digits)."""
    from components.agents.tools import _json

    return json.loads(_json(obj))


def png_size(image) -> tuple[int, int]:
    from PIL import Image

    assert image.mimeType == "image/png"
    return Image.open(io.BytesIO(base64.b64decode(image.data))).size


def test_lists_exactly_the_tools_with_their_schemas(mcp_url):
    from components.agents.tools import tool_names

    tools = _session(mcp_url, lambda s: s.list_tools()).tools
    assert sorted(t.name for t in tools) == sorted(tool_names())  # no UI event among them
    for t in tools:
        assert len(t.description) > 150, t.name
        props = t.inputSchema["properties"]
        assert (props or t.name in ("memorized_prompts", "session_report")) and all(
            p.get("description") for p in props.values()
        ), t.name
    by = {t.name: t for t in tools}
    assert by["math_neurons"].inputSchema["properties"]["method"]["enum"] == ["mathneuro", "wanda", "random", "lape"]
    assert by["token_relevance"].inputSchema["required"] == ["text"]


def test_schemas_enumerate_choices_state_defaults_ranges_and_annotations(mcp_url):
    """An agent reads the valid values from the schema, not from an error: methods, rules, init and
    models enumerated, every default stated (also 0, false and ''), every cost argument's range
    (backend.core.bounds), and MCP annotations saying which tools intervene and what they cost."""
    from backend.core import bounds

    tools = {t.name: t for t in _session(mcp_url, lambda s: s.list_tools()).tools}
    props = {n: t.inputSchema["properties"] for n, t in tools.items()}
    rel = props["token_relevance"]
    assert rel["methods"]["oneOf"][1]["items"]["enum"] == [
        "mambalrp",
        "lrp_ln",
        "gi",
        "smoothgrad",
        "ig",
        "attnroll",
        "mambaattr",
    ]
    assert rel["rules"]["oneOf"][1]["items"]["enum"] == ["norm", "silu", "ssm", "gate"]
    assert rel["target"]["default"] == "" and rel["model"]["default"] == ""
    models = rel["model"].get("enum") or rel["model"]["examples"]
    assert len(models) >= 2 and "" in models
    assert props["pissa_layer"]["init"]["enum"] == list(bounds.PISSA_INITS)
    assert "pissa-toy" in (props["pissa_layer"]["model"].get("enum") or props["pissa_layer"]["model"]["examples"])
    mn = props["math_neurons"]
    assert mn["factor"]["default"] == 0.0 and "prune" in mn["factor"]["description"]
    assert (mn["k_percent"]["minimum"], mn["k_percent"]["maximum"]) == (bounds.MATH_K.lo, bounds.MATH_K.hi)
    assert (mn["n_samples"]["minimum"], mn["n_samples"]["maximum"]) == (1, 64)
    assert props["generate_without_neurons"]["seeds"]["maximum"] == bounds.MEMO_SEEDS.hi
    assert props["pissa_layer"]["rank"]["maximum"] == bounds.PISSA_RANK.hi
    # a list that scales cost states its longest length (the first clamp has arguments of its own)
    assert props["steer_feature"]["more_clamps"]["maxItems"] == bounds.STEER_CLAMPS.hi - 1
    assert props["steer_feature"]["suppress"]["maxItems"] == bounds.STEER_SUPPRESS.hi
    for side in ("a", "b"):
        assert props["contrast_features"][f"images_{side}_base64"]["maxItems"] == bounds.CONTRAST_IMAGES.hi
    assert props["steer_feature"]["add_error"]["default"] is False
    assert "math_items" in mn and "nonmath_items" in mn
    for name, t in tools.items():
        a = t.annotations
        assert a is not None and a.readOnlyHint is True and a.destructiveHint is False, name
        assert isinstance(a.model_extra["intervention"], bool) and a.model_extra["cost"], name
    assert tools["steer_feature"].annotations.model_extra["intervention"] is True
    assert tools["find_features"].annotations.model_extra["intervention"] is False


def test_cost_arguments_past_their_range_are_refused_identically(mcp_url, client):
    """One rule for the tab, the API and the tool: the same words, nothing computed."""
    from gradio_client.exceptions import AppError

    from backend.core import bounds
    from components.agents.tools import tool_names  # noqa: F401  (the tools are installed)

    cases = [  # (range, bad value, tool, its arguments, API endpoint, its arguments)
        (bounds.MATH_K, 40, "math_neurons", {"k_percent": 40}, "/mn_evaluate", ("MathNeuro", 40, 0.0, 64)),
        (bounds.MATH_FACTOR, 5, "math_neurons", {"factor": 5}, "/mn_evaluate", ("MathNeuro", 3, 5, 64)),
        (bounds.MATH_SAMPLES, 65, "math_neurons", {"n_samples": 65}, "/mn_evaluate", ("MathNeuro", 3, 0.0, 65)),
        (
            bounds.MEMO_SEEDS,
            9,
            "generate_without_neurons",
            {"prompt": "a red circle", "neurons": [], "seeds": 9},
            "/memo_generate",
            ("a red circle", [], "", 9),
        ),
        (
            bounds.PISSA_RANK,
            500,
            "pissa_layer",
            {"layer": "fc2", "rank": 500},
            "/analyse",
            ("pissa-toy", "fc2", 500, "pissa"),
        ),
    ]
    for r, bad, tool, args, api, api_args in cases:
        message = r.refusal(bad)
        assert message.endswith("Nothing was computed.")
        assert error_of(mcp_url, tool, **args).strip().endswith(message), (tool, args)
        with pytest.raises(AppError) as e:
            client.predict(*api_args, api_name=api)
        assert message in str(e.value), (api, str(e.value))
    # lists too long for their bound: refused in the tab's words before an item is read (the clamps
    # lack their values: a check that read them first would say so, not count them)
    for r, n, tool, args in (
        (bounds.STEER_CLAMPS, 9, "steer_feature", {"feature": 0, "more_clamps": [{}] * 8}),
        (bounds.STEER_SUPPRESS, 257, "steer_feature", {"feature": 0, "suppress": list(range(257))}),
        (
            bounds.CONTRAST_IMAGES,
            65,
            "contrast_features",
            {"images_a_base64": ["x"] * 65, "images_b_base64": ["x"] * 2},
        ),
    ):
        assert error_of(mcp_url, tool, **args).strip().endswith(r.refusal(n)), (tool, n)
    # pissa_niter_N: only the tab's choices (N = 1,000,000 once ran 200 s), refused in the same words by
    # the tool, the API and the tab's radio (which the API's call goes through, as a browser's does)
    message = "init must be one of pissa, pissa_niter_4 (got 'pissa_niter_1000000'). Nothing was computed."
    refused = error_of(mcp_url, "pissa_layer", layer="fc2", init="pissa_niter_1000000")
    assert refused.strip().endswith(message), refused
    with pytest.raises(AppError) as e:
        client.predict("pissa-toy", "fc2", 8, "pissa_niter_1000000", api_name="/analyse")
    assert str(e.value).strip() == message


def test_answers_are_bounded(mcp_url):
    """Echoes are bounded and numbers short: a 100,000-character word is refused in a short answer
    (it came back as 200 KB), a 7-method explanation of a long text stays small (it was 45 KB), and
    an image answer carries no text naming the server's temporary folder."""
    from backend.lrp import service as svc

    long_word = "a" * 100_000
    refused = error_of(mcp_url, "token_relevance", text=long_word)
    assert "at most 2,000 are taken" in refused and len(refused) < 500
    words = ("the movie was great and the plot was weak but the cast was fine " * 40).split()[: svc.MAX_TOKENS - 4]
    methods = ["mambalrp", "lrp_ln", "gi", "smoothgrad", "ig", "attnroll", "mambaattr"]
    res = _session(mcp_url, lambda s: s.call_tool("token_relevance", {"text": " ".join(words), "methods": methods}))
    assert not res.isError, res.content[0].text[:300]
    answer = res.content[0].text
    data = json.loads(answer)
    assert len(data["tokens"]) >= 200 and len(data["relevance"]) == 7
    assert len(answer) < 30_000, len(answer)
    assert all(len(repr(v).rstrip("0")) <= 12 for row in data["relevance"].values() for v in row if v is not None)
    page = _session(mcp_url, lambda s: s.call_tool("find_features", {"limit": 3}))
    assert not page.isError
    shown = _session(mcp_url, lambda s: s.call_tool("memorized_prompts", {}))
    assert [c.type for c in shown.content] == ["text"]


def test_ui_events_stay_callable_but_are_not_tools(mcp_url, client):
    """With MCP on, the UI's events are "undocumented": out of the API page and the tool list, still
    callable by name with all their inputs in order (gradio_client needs no keywords for that)."""
    from gradio_client import Client

    from components.agents.tools import tool_names

    ui = Client(mcp_url, verbose=False)
    assert set(ui.view_api(return_format="dict", print_info=False)["named_endpoints"]) == {
        "/" + n for n in tool_names()
    }
    listed, _, _ = call(mcp_url, "pissa_layers")
    assert ui.predict(listed["model"], api_name="/layers") == client.predict(listed["model"], api_name="/layers")


@pytest.mark.parametrize(
    "argv, env, on",
    [
        ([], {}, False),
        (["--mcp"], {}, True),
        ([], {"WORKBENCH_MCP": "1"}, True),
        ([], {"WORKBENCH_MCP": "1", "SPACE_ID": "someone/workbench"}, True),
        ([], {"SPACE_ID": "someone/workbench"}, False),
        (["--mcp"], {"WORKBENCH_MCP": "0"}, False),
    ],
)
def test_app_serves_the_tools_only_when_asked(monkeypatch, argv, env, on):
    """app.main's launch: the flag and the setting decide; without them nothing changes."""
    import gradio as gr

    import app
    from backend.core.zerogpu import is_marked
    from components.agents.tools import tool_names
    from components.agents.tools import READS_GROUP, registered
    from components.common import is_model_group, model_concurrency

    for k in ("WORKBENCH_MCP", "SPACE_ID"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with gr.Blocks() as tiny:
        gr.Button().click(lambda: None, api_name="ui_event")
    seen = {}
    monkeypatch.setattr(app, "build_app", lambda source: tiny)
    monkeypatch.setattr(gr.Blocks, "launch", lambda self, **kw: seen.update(kw))
    app.main(["--port", "7999", *argv])
    assert seen["mcp_server"] is on and seen["server_name"] == "127.0.0.1"
    visibility = {fn.api_name: fn.api_visibility for fn in tiny.fns.values()}
    if on:
        assert visibility == {"ui_event": "undocumented", **{n: "public" for n in tool_names()}}
        reads_model = {tool.name: tool.reads_model for tool, _tab in registered()}
        for fn in tiny.fns.values():  # a model tool queues with the app's model calls, marked for ZeroGPU;
            if fn.api_name in tool_names():  # a tool that reads no model waits behind none
                if reads_model[fn.api_name]:
                    assert is_model_group(fn.concurrency_id) and fn.concurrency_limit == model_concurrency()
                    assert is_marked(fn.fn)
                else:
                    assert fn.concurrency_id == READS_GROUP and not is_marked(fn.fn)
    else:
        assert visibility == {"ui_event": "public"}


def test_a_bad_setting_is_refused():
    from components.agents.tools import mcp_wanted

    with pytest.raises(ValueError, match="WORKBENCH_MCP must be 1 or 0"):
        mcp_wanted(False, {"WORKBENCH_MCP": "maybe"})


@pytest.mark.alone  # p95 of a feature page within 1 s
@pytest.mark.skipif(not FEATURES_BUILT, reason="the Features organism is not built")
def test_feature_pages_answer_while_a_long_model_call_runs(mcp_url):
    """Calls that touch no model never wait behind a model call: while a fine-tuning race (a model
    call of well over 10 s) runs, 20 feature pages answer with p95 ≤ 1 s. They once shared the one
    model queue and waited for the whole race. The race is checked to be still running after the
    last page, so the pages were all served during it; each page is timed on its own (one after the
    other), so the machine's load slows them only as much as it slows the race."""
    import time

    from gradio_client import Client

    ui = Client(mcp_url, verbose=False)
    f = call(mcp_url, "find_features", limit=1)[0][0]["feature"]
    call(mcp_url, "open_feature", feature=f)  # warm: the index and the page renderer are loaded
    # a race on the math Llama: minutes (the PiSSA toy's can end within 10 s on an idle machine)
    race = ui.submit("math-llama", ["lora", "pissa"], 5, 500, 8, 0, api_name="/race")
    t0 = time.perf_counter()
    try:
        # the race holds its model queue: processing, or already streaming when its model is warm
        while race.status().code.name not in ("PROCESSING", "ITERATING"):
            assert not race.done(), "the race ended before it started"
            time.sleep(0.05)
        started = time.perf_counter()

        async def pages(s):  # one session, as an agent keeps it
            times = []
            for _ in range(20):
                t = time.perf_counter()
                res = await s.call_tool("open_feature", {"feature": f})
                times.append(time.perf_counter() - t)
                assert not res.isError and json.loads(res.content[0].text)["feature"] == f
            return times

        times = _session(mcp_url, pages)
        while time.perf_counter() - started < 10:  # the pages were served during a call of ≥ 10 s
            assert not race.done(), f"the race ended within {time.perf_counter() - t0:.1f} s: not a long call"
            time.sleep(0.2)
        assert not race.done()
        running_for = time.perf_counter() - started
    finally:
        ui.predict(api_name="/race_stop")
        # the stop ends the race: wait for that end, so no race outlives the test. (Gradio's cancel
        # request, its read timeout 5 s, once timed out here on a loaded machine and failed the test.)
        deadline = time.monotonic() + 120
        while not race.done() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert race.done(), "the race went on after its stop"
    times.sort()
    p95 = times[18]  # the 19th of 20
    print(
        f"feature pages during a model call: p95 {p95:.3f} s, median {times[10]:.3f} s, race ran ≥ {running_for:.1f} s"
    )
    assert p95 <= 1.0, times


@pytest.mark.skipif(not FEATURES_BUILT, reason="the Features organism is not built")
@pytest.mark.parametrize("transport", ["streamable", "sse"])
def test_an_image_under_the_documented_size_is_taken_and_a_larger_one_refused(mcp_url, transport):
    """steer_feature documents images up to 8 MB; the `mcp` package took 4 MiB bodies and dropped the
    request of a 6 MB image with HTTP 413. Now a 6 MB image is captioned, a 10 MB one gets the tool's
    own clear error, and the session keeps working — on both transports (docs/agents.md)."""
    import numpy as np
    from PIL import Image

    def png_of(side: int) -> str:
        rng = np.random.default_rng(side)  # noise: a PNG as large as its pixels
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(buf, format="PNG", compress_level=1)
        return base64.b64encode(buf.getvalue()).decode()

    six, ten = png_of(1420), png_of(1850)
    assert 5.5e6 < len(six) * 3 / 4 < 8 * 2**20 < len(ten) * 3 / 4 < 11e6

    async def work(s):
        f = 0
        ok = await s.call_tool("steer_feature", {"feature": f, "positions": "prompt", "image_base64": six})
        big = await s.call_tool("steer_feature", {"feature": f, "positions": "prompt", "image_base64": ten})
        after = await s.call_tool("find_features", {"limit": 1})
        return ok, big, after

    if transport == "sse":
        from mcp import ClientSession
        from mcp.client.sse import sse_client

        async def run():
            async with sse_client(mcp_url + "gradio_api/mcp/sse") as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    return await work(s)

        ok, big, after = asyncio.run(run())
    else:
        ok, big, after = _session(mcp_url, work)
    assert not ok.isError, ok.content[0].text[:300]
    assert json.loads(ok.content[0].text)["scene"] is None
    assert big.isError and "image_base64 is larger than 8 MB" in big.content[0].text
    assert not after.isError


def _raw_call(url: str, name: str, arguments_json: str) -> str:
    """A tools/call sent as the given JSON text (the server is stateless: no handshake needed); the
    answer's text."""
    import httpx

    body = '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "%s", "arguments": %s}}' % (
        name,
        arguments_json,
    )
    r = httpx.post(
        url + "gradio_api/mcp/",
        content=body,
        timeout=60,
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
    )
    data = next(json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:"))
    return " ".join(c.get("text", "") for c in data["result"]["content"])


def test_an_infinite_factor_is_named_with_its_range(mcp_url):
    """Issue 51 (7): `factor=inf` was refused as "got an empty box". JSON has no infinity or NaN: the
    `mcp` package's client (pydantic) writes inf as null, and the server's `mcp` package turns a raw
    client's 1e999 or Infinity into null too (it re-validates each request through JSON) before the
    tool sees it. So the refusal names the null that came, says that an inf or NaN arrives so, and
    states the range; nothing is computed."""
    from backend.core import bounds

    expected = bounds.MATH_FACTOR.refusal(None, bounds.JSON_NULL)
    assert expected.startswith("The scale factor must be between 0 and 2 (got null (JSON has no inf or NaN")
    said = error_of(mcp_url, "math_neurons", factor=float("inf"))
    assert "empty box" not in said and said.strip().endswith(expected), said
    for raw in ("1e999", "Infinity", "-Infinity", "NaN", "null"):
        said = _raw_call(mcp_url, "math_neurons", '{"factor": %s}' % raw)
        assert said.strip().endswith(expected), (raw, said)
    # a value that does arrive is named as it is
    said = _raw_call(mcp_url, "math_neurons", '{"factor": "inf"}')
    assert "The scale factor must be between 0 and 2 (got 'inf')" in said, said
