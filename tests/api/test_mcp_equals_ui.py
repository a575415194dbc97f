"""The MCP tools answer as the UI does: each tool beside its tab's endpoint, for the same input."""

import json
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from tests.api.test_mcp import FEATURES_BUILT, _session, call, error_of, png_size, sig  # noqa: E402
from tests.api.test_mcp import zerogpu_boundary  # noqa: E402, F401  (the module's autouse fixture)

pytestmark = pytest.mark.timeout(300)


def test_token_relevance_equals_the_ui(mcp_url, client):
    from backend.core import zerogpu

    text = "the movie was great"
    before = zerogpu.BOUNDARY_CHECKS["calls"]
    tool, _, _ = call(mcp_url, "token_relevance", text=text, methods=["mambalrp", "gi"], target="")
    assert zerogpu.BOUNDARY_CHECKS["calls"] == before + 1  # the tool is marked for ZeroGPU, outermost
    res = client.predict(text, ["mambalrp", "gi"], ["norm", "silu", "ssm", "gate"], "", True, api_name="/explain_text")[
        5
    ]
    for k in ("tokens", "target", "logit", "relevance", "sum_relevance", "methods"):
        assert tool[k] == sig(res[k]), k
    assert tool["sum_relevance"]["mambalrp"] == pytest.approx(tool["logit"], rel=0.05, abs=0.05)
    # one rule off: the same path as the UI's ablation, conservation no longer holds exactly
    ablated, _, _ = call(mcp_url, "token_relevance", text=text, methods=["mambalrp"], rules=["norm", "silu", "gate"])
    assert ablated["relevance"]["mambalrp"] != tool["relevance"]["mambalrp"]
    assert error_of(mcp_url, "token_relevance", text=text, methods=["nope"])  # not one of the enum
    assert "'magic' is not one of ['norm', 'silu', 'ssm', 'gate']" in error_of(
        mcp_url, "token_relevance", text=text, rules=["magic"]
    )


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
    assert page == sig(data)
    assert [c.type for c in plain.content] == ["text", "image"]  # no "Image URL" naming a server folder
    assert len(page["top"]) == 5 and page["label"] == "red"
    w, h = png_size(images[0])
    assert w > 4 * h / 3  # five images across, three rows

    steered, images, _ = call(
        mcp_url, "steer_feature", feature=f, value=40.0, scene=0, positions="prompt", suppress_rivals=False
    )
    out = client.predict(None, "0", f, 40.0, "prompt", False, False, api_name="/steer")[2]
    assert (steered["baseline"], steered["steered"]) == (out["baseline"], out["steered"])
    assert steered["value"] == 40.0 and png_size(images[0])[0] > 0

    # the defaults are the tab's: its clamp value for the feature, its calibrated positions and suppression
    from backend.sae import analysis, loading

    org = loading.get_organism("zoo")
    top = analysis.clamp_range(org).hi  # 10× the index's largest activation; 1e308 was once accepted
    assert f"The clamp value must be between 0 and {top:g} (got 1e+308)" in error_of(
        mcp_url, "steer_feature", feature=f, value=1e308
    )
    d = analysis.steering_defaults(org)
    steered, _, _ = call(mcp_url, "steer_feature", feature=f)
    out = client.predict(
        None, "0", f, analysis.default_clamp_value(org, f), d["positions"], False, d["suppress"], api_name="/steer"
    )[2]
    assert steered == sig({**out, "scene": 0})
    n = page.get("n_features") or 10**6
    assert "The feature id must be a whole number between 0 and" in error_of(mcp_url, "open_feature", feature=n)
    assert "scene must be a whole number between" in error_of(mcp_url, "steer_feature", feature=f, scene=10**6)
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
    own, _, _ = call(
        mcp_url,
        "steer_feature",
        feature=f,
        value=40.0,
        positions="prompt",
        suppress_rivals=False,
        image_base64="data:image/png;base64," + base64.b64encode(buf.getvalue()).decode(),
    )
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
    assert "seeds must be a whole number between 1 and 8" in error_of(
        mcp_url, "generate_without_neurons", prompt=prompt, neurons=[], seeds=9
    )
    listed, _, _ = call(mcp_url, "memorized_prompts")  # an agent finds the memorized prompts to test
    assert [p["prompt"] for p in listed["prompts"]] == service.describe("zoo")["memorized"]
    assert listed["n"] == len(listed["prompts"]) > 0


def test_math_neurons_equals_the_ui(mcp_url, client):
    from backend.core import store

    tool, _, _ = call(mcp_url, "math_neurons", method="mathneuro", k_percent=3, factor=0.0, n_samples=64)
    html = client.predict("MathNeuro", 3, 0.0, 64, api_name="/mn_evaluate")[0]
    assert f"{tool['n_params']:,} of {tool['n_total']:,}" in html
    assert tool["action"] == "pruned" and tool["n_scored"]["math"] > 0 and tool["n_scored"]["nonmath"] > 0
    for side in ("math", "nonmath"):
        assert f"{100 * tool['baseline'][side]:.1f} %" in html and f"{100 * tool['modified'][side]:.1f} %" in html
    assert tool["modified"]["math"] < tool["baseline"]["math"]
    assert sum(v["count"] for v in tool["layers"].values()) == tool["n_params"]
    assert sum(v["total"] for v in tool["layers"].values()) == tool["n_total"]
    assert store.integrity_problems() == []
    assert "K must be between 1 % and 30 % (got 0 %)" in error_of(mcp_url, "math_neurons", k_percent=0)
    assert "factor must be between 0 and 2" in error_of(mcp_url, "math_neurons", factor=5)
    assert error_of(mcp_url, "math_neurons", method="magic")
    # the agent's own math set, as the tab's upload takes it: scored instead of the model's
    from backend.mathneuro import service

    b = service.bench("zoo")
    own = [dict(it) for it in b.eval_items("math", 6)]
    mine, _, _ = call(
        mcp_url,
        "math_neurons",
        k_percent=3,
        factor=1.0,
        n_samples=4,
        math_items=[{"question": it.get("question") or it.get("prompt"), "answer": it["answer"]} for it in own],
    )
    assert mine["math_set"] == "yours" and mine["n_scored"]["math"] == len(own)
    assert "is not of type 'object'" in error_of(mcp_url, "math_neurons", math_items=["not an object"])


def test_an_agents_own_items_are_not_kept_after_its_call(mcp_url):
    """Issue 51 (6): an agent's math_items stayed in the shared bench for good (ten calls of 5,000
    items kept +204 MB of the server's memory, tests/load/test_mcp_memory.py); they are held for the
    call only, and the same items again are answered from the caches."""
    from backend.mathneuro import service

    b = service.bench("zoo")
    before = set(b.data["math_sets"])
    own = [{"question": it["prompt"], "answer": it["answer"]} for it in b.eval_items("math", 30)[10:30]]
    first, _, _ = call(mcp_url, "math_neurons", k_percent=3, factor=0.0, n_samples=4, math_items=own)
    assert first["math_set"] == "yours" and first["n_scored"]["math"] == 10
    assert set(b.data["math_sets"]) == before
    again, _, _ = call(mcp_url, "math_neurons", k_percent=3, factor=0.0, n_samples=4, math_items=own)
    assert again == first and set(b.data["math_sets"]) == before


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
        assert tool[k] == sig(exported[k]), k
    assert tool["singular_values"] == sig(exported["singular_values"][: len(tool["singular_values"])])
    assert "no adaptable linear layer" in error_of(mcp_url, "pissa_layer", layer="nope", model=key)
    assert "rank r must be a whole number between 1 and 128" in error_of(
        mcp_url, "pissa_layer", layer="fc2", rank=10**6, model=key
    )
    assert "unknown model" in error_of(mcp_url, "pissa_layers", model="nope")
