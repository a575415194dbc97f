"""The workbench as MCP tools (components.agent_tools), driven by the `mcp` package's client.

The app runs in this process with the MCP server on, as `app.py --mcp` starts it, so that after
every tool call the models' hooks and weights can be checked (tests/api/conftest.py) and the
ZeroGPU boundary is exercised. Each tool's answer is compared with the UI endpoint's answer for the
same input, called by gradio_client on the api tests' app (same process, same models; its UI events
are public, so an input a tab adds later keeps its default).
"""
import asyncio
import base64
import io
import json
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from backend.core.presets import ZOO_ROOT  # noqa: E402

pytestmark = pytest.mark.timeout(300)
FEATURES_BUILT = (ZOO_ROOT / "llava-scenes-sae" / "manifest.json").exists()


@pytest.fixture(scope="module")
def mcp_url():
    import app
    from components import agent_tools
    from tests.helpers.server import free_port

    demo = app.build_app("zoo")
    agent_tools.install(demo, "zoo")
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                mcp_server=True, **app.launch_kwargs())
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


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


def png_size(image) -> tuple[int, int]:
    from PIL import Image

    assert image.mimeType == "image/png"
    return Image.open(io.BytesIO(base64.b64decode(image.data))).size


def test_lists_exactly_the_tools_with_their_schemas(mcp_url):
    from components.agent_tools import TOOL_NAMES

    tools = _session(mcp_url, lambda s: s.list_tools()).tools
    assert sorted(t.name for t in tools) == sorted(TOOL_NAMES)  # no UI event among them
    for t in tools:
        assert len(t.description) > 150, t.name
        props = t.inputSchema["properties"]
        assert props and all(p.get("description") for p in props.values()), t.name
    by = {t.name: t for t in tools}
    assert by["math_neurons"].inputSchema["properties"]["method"]["enum"] == ["mathneuro", "wanda", "random", "lape"]
    assert by["token_relevance"].inputSchema["required"] == ["text"]


def test_token_relevance_equals_the_ui(mcp_url, client):
    from backend.core import zerogpu

    text = "the movie was great"
    before = zerogpu.BOUNDARY_CHECKS["calls"]
    tool, _, _ = call(mcp_url, "token_relevance", text=text, methods=["mambalrp", "gi"], target="")
    assert zerogpu.BOUNDARY_CHECKS["calls"] == before + 1  # the tool is marked for ZeroGPU, outermost
    res = client.predict(text, ["mambalrp", "gi"], ["norm", "silu", "ssm", "gate"], "", True,
                         api_name="/explain_text")[5]
    for k in ("tokens", "target", "logit", "relevance", "sum_relevance", "methods"):
        assert tool[k] == res[k], k
    assert tool["sum_relevance"]["mambalrp"] == pytest.approx(tool["logit"], rel=0.05, abs=0.05)
    # one rule off: the same path as the UI's ablation, conservation no longer holds exactly
    ablated, _, _ = call(mcp_url, "token_relevance", text=text, methods=["mambalrp"], rules=["norm", "silu", "gate"])
    assert ablated["relevance"]["mambalrp"] != tool["relevance"]["mambalrp"]
    assert "Unknown method" in error_of(mcp_url, "token_relevance", text=text, methods=["nope"])
    assert "rule" in error_of(mcp_url, "token_relevance", text=text, rules=["magic"])


@pytest.mark.skipif(not FEATURES_BUILT, reason="the Features organism is not built")
def test_feature_tools_equal_the_ui(mcp_url, client):
    found, _, _ = call(mcp_url, "find_features", query="red", sort="iou", limit=5)
    rows = client.predict("red", "IoU", api_name="/features_list")
    rows = rows["data"] if isinstance(rows, dict) else rows
    assert [r["feature"] for r in found] == [r[0] for r in rows[:5]] and found
    assert all(r["label"] == "red" for r in found)
    f = found[0]["feature"]

    page, images, plain = call(mcp_url, "open_feature", feature=f)

    async def on_progress(progress, total, message):
        pass

    async def with_progress(s):  # a client that asks for progress gets the same outputs
        return await s.call_tool("open_feature", {"feature": f}, progress_callback=on_progress)

    assert [c.type for c in _session(mcp_url, with_progress).content] == [c.type for c in plain.content]
    data = client.predict(f, api_name="/feature_page")[7]
    assert page == json.loads(json.dumps(data))
    assert len(page["top"]) == 5 and page["label"] == "red"
    w, h = png_size(images[0])
    assert w > 4 * h / 3  # five images across, three rows

    steered, images, _ = call(mcp_url, "steer_feature", feature=f, value=40.0, scene=0, positions="prompt",
                              suppress_rivals=False)
    out = client.predict(None, "0", f, 40.0, "prompt", False, False, api_name="/steer")[2]
    assert (steered["baseline"], steered["steered"]) == (out["baseline"], out["steered"])
    assert steered["value"] == 40.0 and png_size(images[0])[0] > 0
    # the defaults are the tab's: its clamp value for the feature, its calibrated positions and suppression
    from backend.sae import features as FT

    org = FT.get_organism("zoo")
    d = FT.steering_defaults(org)
    steered, _, _ = call(mcp_url, "steer_feature", feature=f)
    out = client.predict(None, "0", f, FT.default_clamp_value(org, f), d["positions"], False, d["suppress"],
                         api_name="/steer")[2]
    assert steered == {**out, "scene": 0}
    n = page.get("n_features") or 10**6
    assert "between 0 and" in error_of(mcp_url, "open_feature", feature=n)
    assert "scene must be between" in error_of(mcp_url, "steer_feature", feature=f, scene=10**6)
    assert "'prompt', 'all', 'image'" in error_of(mcp_url, "steer_feature", feature=f, positions="everywhere")
    # the agent's own image, sent inline as base64, captions as the same upload does in the tab
    import base64
    import io
    import tempfile

    from gradio_client import handle_file
    from PIL import Image

    from backend.sae import scenes as S

    buf = io.BytesIO()
    Image.fromarray(S.render(org.heldout_specs[3])[0]).save(buf, format="PNG")
    with tempfile.NamedTemporaryFile(suffix=".png", delete=False) as fh:
        fh.write(buf.getvalue())
    own, _, _ = call(mcp_url, "steer_feature", feature=f, value=40.0, positions="prompt", suppress_rivals=False,
                     image_base64="data:image/png;base64," + base64.b64encode(buf.getvalue()).decode())
    out = client.predict(handle_file(fh.name), None, f, 40.0, "prompt", False, False, api_name="/steer")[2]
    assert (own["baseline"], own["steered"]) == (out["baseline"], out["steered"]) and own["scene"] is None
    assert "not a base64-encoded PNG" in error_of(mcp_url, "steer_feature", feature=f, image_base64="bm90IGFuIGltYWdl")


def test_memorization_tools_equal_the_ui(mcp_url, client):
    from backend.core import store
    from backend.nemo import service

    prompt = service.describe("zoo")["memorized"][0]
    checked, _, _ = call(mcp_url, "check_memorization", prompt=prompt)
    html = client.predict(prompt, api_name="/memo_check")[0]
    assert f"{checked['score']:.3f}" in html and checked["memorized"] and "not memorized" not in html
    assert checked["top_neurons"][0]["z"] == pytest.approx(checked["max_z"])

    loc, _, _ = call(mcp_url, "find_memorization_neurons", prompt=prompt)
    ui_labels = client.predict(prompt, api_name="/memo_find")[1]
    ui_labels = ui_labels["value"] if isinstance(ui_labels, dict) else ui_labels  # the tick boxes' update
    assert loc["labels"] == ui_labels and loc["labels"]

    gen, images, _ = call(mcp_url, "generate_without_neurons", prompt=prompt, neurons=loc["labels"], seeds=2)
    gallery, cmp_html = client.predict(prompt, loc["labels"], "", 2, api_name="/memo_generate")
    assert gen["neurons"] == loc["labels"] and len(gallery) == 1 + 2 * 2
    for k in ("diversity_on", "diversity_off", "score_on", "score_off"):
        assert f"{gen[k]:.3f}" in cmp_html, k
    assert gen["score_off"] < gen["score_on"]
    w, h = png_size(images[0])
    assert h > w  # training image, then a row with the neurons on and one with them off
    assert store.integrity_problems() == []
    assert "Type a prompt" in error_of(mcp_url, "check_memorization", prompt="  ")
    assert "layer:channel" in error_of(mcp_url, "generate_without_neurons", prompt=prompt, neurons=["hello"])
    assert "seeds must be between 1 and 8" in error_of(mcp_url, "generate_without_neurons", prompt=prompt,
                                                       neurons=[], seeds=9)


def test_math_neurons_equals_the_ui(mcp_url, client):
    from backend.core import store

    tool, _, _ = call(mcp_url, "math_neurons", method="mathneuro", k_percent=3, factor=0.0, n_samples=64)
    html = client.predict("MathNeuro", 3, 0.0, 64, api_name="/mn_evaluate")[0]
    assert f"{tool['n_params']:,} of {tool['n_total']:,}" in html
    for side in ("math", "nonmath"):
        assert f"{100 * tool['baseline'][side]:.1f} %" in html and f"{100 * tool['modified'][side]:.1f} %" in html
    assert tool["modified"]["math"] < tool["baseline"]["math"]
    assert sum(v["count"] for v in tool["layers"].values()) == tool["n_params"]
    assert sum(v["total"] for v in tool["layers"].values()) == tool["n_total"]
    assert store.integrity_problems() == []
    assert "k_percent must be between" in error_of(mcp_url, "math_neurons", k_percent=0)
    assert "factor must be between" in error_of(mcp_url, "math_neurons", factor=5)
    assert error_of(mcp_url, "math_neurons", method="magic")


def test_pissa_tools_equal_the_ui(mcp_url, client):
    listed, _, _ = call(mcp_url, "pissa_layers")
    key = listed["model"]
    choices = client.predict(key, api_name="/layers")[0]["choices"]  # the layer menu's update
    assert [c[1] for c in choices] == listed["layers"]
    tool, _, _ = call(mcp_url, "pissa_layer", layer="fc2", rank=8, model=key)
    files = client.predict(key, "fc2", 8, "pissa", api_name="/analyse")[3]
    paths = [Path(f if isinstance(f, str) else f.get("path", f.get("name"))) for f in files]
    exported = json.loads(next(p for p in paths if p.suffix == ".json").read_text())
    for k in ("shape", "rank", "energy_top_r", "reconstruction_rel_error", "w_absmax", "w_res_absmax"):
        assert tool[k] == exported[k], k
    assert tool["singular_values"] == exported["singular_values"][:len(tool["singular_values"])]
    assert "no adaptable linear layer" in error_of(mcp_url, "pissa_layer", layer="nope", model=key)
    assert "rank must be between" in error_of(mcp_url, "pissa_layer", layer="fc2", rank=10**6, model=key)
    assert "unknown model" in error_of(mcp_url, "pissa_layers", model="nope")


def test_ui_events_stay_callable_but_are_not_tools(mcp_url, client):
    """With MCP on, the UI's events are "undocumented": out of the API page and the tool list, still
    callable by name with all their inputs in order (gradio_client needs no keywords for that)."""
    from gradio_client import Client

    from components.agent_tools import TOOL_NAMES

    ui = Client(mcp_url, verbose=False)
    assert set(ui.view_api(return_format="dict", print_info=False)["named_endpoints"]) == {"/" + n for n in TOOL_NAMES}
    listed, _, _ = call(mcp_url, "pissa_layers")
    assert ui.predict(listed["model"], api_name="/layers") == client.predict(listed["model"], api_name="/layers")


@pytest.mark.parametrize("argv, env, on", [
    ([], {}, False),
    (["--mcp"], {}, True),
    ([], {"WORKBENCH_MCP": "1"}, True),
    ([], {"WORKBENCH_MCP": "1", "SPACE_ID": "someone/workbench"}, True),
    ([], {"SPACE_ID": "someone/workbench"}, False),
    (["--mcp"], {"WORKBENCH_MCP": "0"}, False),
])
def test_app_serves_the_tools_only_when_asked(monkeypatch, argv, env, on):
    """app.main's launch: the flag and the setting decide; without them nothing changes."""
    import gradio as gr

    import app
    from backend.core.zerogpu import is_marked
    from components.agent_tools import TOOL_NAMES
    from components.common import MODEL_GROUP

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
        assert visibility == {"ui_event": "undocumented", **{n: "public" for n in TOOL_NAMES}}
        for fn in tiny.fns.values():  # each tool queues with the model events and is marked for ZeroGPU
            if fn.api_name in TOOL_NAMES:
                assert (fn.concurrency_id, fn.concurrency_limit) == (MODEL_GROUP, 1) and is_marked(fn.fn)
    else:
        assert visibility == {"ui_event": "public"}


def test_a_bad_setting_is_refused():
    from components.agent_tools import mcp_wanted

    with pytest.raises(ValueError, match="WORKBENCH_MCP must be 1 or 0"):
        mcp_wanted(False, {"WORKBENCH_MCP": "maybe"})
