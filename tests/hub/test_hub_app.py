"""Hub mode end to end: the app starts on the stand-ins of every paper checkpoint, every tab builds,
a page load raises no error toast, and each tab's main endpoints answer with a result — served in
one process, and again as on ZeroGPU, every model call in a forked worker (tests/hub/conftest.py)."""

from __future__ import annotations

import json
import urllib.request

import pytest
from playwright.sync_api import expect

from tests.conftest import ARTIFACTS
from tests.e2e.conftest import FIRST_VIEW, first_view, settle
from tests.helpers import waits
from tests.helpers.browser import chromium_page

pytestmark = pytest.mark.timeout(900)

TABS = ("overview", "relevance", "features", "memorization", "math", "adapters")


def app_config(url: str) -> dict:
    with urllib.request.urlopen(url + "config", timeout=30) as r:
        return json.load(r)


def test_every_tab_builds_in_hub_mode(any_server):
    url, log = any_server
    cfg = app_config(url)
    failed = [
        c["props"].get("elem_id")
        for c in cfg["components"]
        if str(c.get("props", {}).get("elem_id") or "").startswith("wb-tab-failed-")
    ]
    assert failed == [], log.read_text()[-3000:]
    assert "could not start" not in log.read_text()
    texts = " ".join(str(c.get("props", {}).get("value", "")) for c in cfg["components"])
    assert "hub checkpoints" in texts


# Each tab's main button, clicked in the browser as a user would; its result block must fill.
CLICKS = {
    "relevance": (["#rel-explain"], "#rel-heatmap"),
    "memorization": (["#memo-check"], "#memo-score"),
    # a hub model's layers are listed on demand (it loads the model), then one is analysed
    "adapters": (["#pissa-list-layers", "#pissa-analyse"], "#pissa-stats"),
}


def test_page_load_raises_no_error_toast_and_every_tab_renders(any_server):
    url, log = any_server
    suffix = "-zerogpu" if "zerogpu" in log.name else ""
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium_page(1440, 1000) as page:
        page.set_default_timeout(90_000)
        page.goto(url)
        page.wait_for_selector("#tab-overview", state="visible")
        # the link restore (a silent load event that selects the tab, then starts RUN_JS) has ended,
        # so it cannot switch back to its tab after a click below; then what else the load runs
        page.wait_for_function("() => Array.isArray(window.wbLinkRuns)", timeout=120_000)
        settle(page, 120_000)
        for tab in page.locator("button[role='tab']").all():
            tab.click()
            expect(tab).to_have_attribute("aria-selected", "true", timeout=30_000)
            tab_id = (tab.get_attribute("id") or "").removeprefix("tab-").removesuffix("-button")
            assert tab_id in FIRST_VIEW, tab_id
            # the first view is a silent event (no status tracker): settle alone could click its
            # tab's button under it, or screenshot the tab before its view is drawn
            first_view(page, tab_id)
            settle(page, 120_000)  # and what else the opening runs with a status tracker
            if tab_id in CLICKS:
                buttons, result = CLICKS[tab_id]
                for button in buttons[:-1]:
                    page.click(button)
                    settle(page, 120_000)  # the click marks its outputs pending: this waits for its end
                # the last computes the result: through a check without outputs first (Memorization),
                # so the page is quiet until the check has answered
                with waits.block_busy(page, result, 120_000):
                    page.click(buttons[-1])
                settle(page, 120_000)
                page.wait_for_function(
                    "(sel) => { const el = document.querySelector(sel); return el && el.innerText.trim().length > 20; }",
                    arg=result,
                    timeout=120_000,
                )
                settle(page, 120_000)  # the screenshot shows the result drawn
            name = tab.inner_text().strip().lower().replace(" ", "-")
            page.screenshot(path=str(ARTIFACTS / f"hub-{name}{suffix}.png"), full_page=True)
        errors = page.locator(".toast-body.error").all_inner_texts()
        assert errors == [], errors


def _path(f):
    from pathlib import Path

    return Path(f if isinstance(f, str) else (f.get("path") or f.get("name")))


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Three small photos that ship with scikit-image, saved as the user's image folder."""
    from PIL import Image
    from skimage import data

    folder = tmp_path_factory.mktemp("images")
    paths = []
    for name in ("astronaut", "coffee", "chelsea"):
        p = folder / f"{name}.png"
        Image.fromarray(getattr(data, name)()).resize((96, 64)).save(p)
        paths.append(str(p))
    return paths


def _rows(table) -> list[list]:
    return table["data"] if isinstance(table, dict) else table


def _plot(fig) -> bool:
    return isinstance(fig, dict) and fig.get("type") == "plotly" and bool(json.loads(fig["plot"])["data"])


def _files(files, *suffixes: str) -> bool:
    """The exported files, one of each suffix, each one there."""
    paths = [_path(f) for f in files]
    return sorted(p.suffix for p in paths) == sorted(suffixes) and all(p.stat().st_size > 0 for p in paths)


def test_relevance_main_endpoints(any_client):
    heat, _plot_, cons, _j, _p, res = any_client.predict(
        "the plot was dull but the cast was brilliant",
        ["mambalrp", "gi"],
        ["norm", "silu", "ssm", "gate"],
        "was",
        True,
        "state-spaces/mamba-130m-hf",
        api_name="/explain_text",
    )
    # byte-level BPE pieces are shown as text, the leading space as a faint mark, never as 'Ġ'
    assert "Ġ" not in heat and "wb-space" in heat
    assert " was" in res["tokens"] and not any(t.startswith("Ġ") for t in res["tokens"])
    assert len(res["tokens"]) == len(res["relevance"]["mambalrp"]) > 3
    table, curves, scatter, note = any_client.predict(
        ["mambalrp", "gi"],
        20,
        "captions",
        None,
        "predicted",
        "",
        "",
        "state-spaces/mamba-130m-hf",
        api_name="/heldout_eval",
    )
    rows = _rows(table)
    assert {r[0] for r in rows} == {"MambaLRP", "Gradient×Input", "Random"} and all(len(r) == 7 for r in rows)
    assert [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)  # sorted by ΔA^F
    assert "20 sentences" in note and _plot(curves) and _plot(scatter)
    heat, plot, tops = any_client.predict(
        "The code is 4817. Much later, the code is",
        ["mambalrp"],
        "state-spaces/mamba-1.4b-hf",
        api_name="/explain_longrange",
    )
    assert tops["model"] == "hub:state-spaces/mamba-1.4b-hf@main" and tops["target"] == " is"
    top = tops["top_tokens"]["mambalrp"]
    assert len(top) == 10 and [t["relevance"] for t in top] == sorted((t["relevance"] for t in top), reverse=True)
    last = top[0]["position"] + top[0]["distance"]  # the position explained: each distance counts back to it
    assert all(t["position"] + t["distance"] == last and 0 <= t["position"] < last for t in top)
    assert "MambaLRP" in heat and _plot(plot)


def test_features_main_endpoints(any_client, images):
    from gradio_client import handle_file

    status, table, densest, _summary = any_client.predict(
        [handle_file(p) for p in images], None, api_name="/build_index"
    )
    assert status.startswith("**Indexed 3 images**")
    fired = _rows(table)
    assert fired and all(len(r) == 4 for r in fired) and densest == fired[0][0]  # the densest one is open
    assert [r[2] for r in fired] == sorted((r[2] for r in fired), reverse=True)
    assert _rows(any_client.predict("", "density", api_name="/features_list")) == fired
    page = any_client.predict(0, api_name="/feature_page")
    assert "Feature 0" in page[0] and page[7]["feature"] == 0  # the page header names the feature
    assert len(page[7]["hist_counts"]) + 1 == len(page[7]["hist_edges"])
    clamp = page[-1]["maximum"] / 2  # the clamp slider's range follows the index's activations
    image, caption, gallery, feats, _scale, hover = any_client.predict(
        handle_file(images[0]), None, api_name="/analyse_image"
    )
    assert _path(image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "Model answer" in caption
    # each feature listed is shown twice in the gallery: over the base image and over the tiles
    assert feats["data"] and len(gallery) == 2 * len(feats["data"]) and _plot(hover)
    steered = any_client.predict(handle_file(images[1]), None, 0, clamp, "prompt", False, False, api_name="/steer")
    assert steered[1] and steered[2]


def test_memorization_main_endpoints(any_client):
    prompt = "The No Limits Business Woman Podcast"  # a memorized LAION prompt of the paper's list
    score, neurons, stats = any_client.predict(prompt, api_name="/memo_check")
    assert (
        "id='memo-score-card'" in score and "Memorization score" in score and "lists this caption as memorized" in score
    )
    assert _plot(neurons) and "Neuron statistics" in stats
    found, pick, found_neurons = any_client.predict(prompt, api_name="/memo_find")
    assert "id='memo-found-card'" in found and _plot(found_neurons)
    offered = [c[1] if isinstance(c, list) else c for c in pick["choices"]]  # the seeds found, to generate
    assert set(pick["value"]) <= set(offered) and ("<b>Skipped</b>" not in found or offered == [])
    gallery, grid = any_client.predict(prompt, [], None, 2, None, api_name="/memo_generate")
    assert [g["caption"] for g in gallery] == ["s0 on", "s1 on"]  # two seeds, all neurons on
    assert grid.count("class='memo-cell'") == 2 and "id='memo-grid'" in grid
    table, note = any_client.predict("a dog on a beach\n" + prompt, None, api_name="/memo_batch")
    rows = _rows(table)
    assert [r[0] for r in rows] == ["a dog on a beach", prompt] and [r[4] for r in rows] == ["", "VM"]
    assert all(-1 <= r[1] <= 1 and r[2] in ("memorized", "not memorized") for r in rows)
    assert "2 prompts" in note


def test_math_main_endpoints(any_client):
    acc, acc_fig, samples, per_layer = any_client.predict("MathNeuro", 3, 0.0, 8, api_name="/mn_evaluate")
    assert "Accuracy: MathNeuro set pruned" in acc and "K = 3 %" in acc and "8 samples per set" in acc
    assert _plot(acc_fig) and _plot(per_layer)
    assert samples["headers"] == ["set", "question", "reference", "unmodified", "modified"]
    assert {r[0] for r in _rows(samples)} == {"math", "non-math"}
    answer = any_client.predict(
        "Tom has 23 pens and finds 45 more. How many pens does he have now?", "MathNeuro", 3, 0.0, 8, api_name="/mn_ask"
    )
    assert "<b>unmodified:</b>" in answer and "<b>modified:</b>" in answer


def test_adapters_main_endpoints(any_client):
    key = "meta-llama/Llama-2-7b-hf"
    layers, _rank = any_client.predict(key, api_name="/layers")
    layer = layers["value"]
    assert layer.startswith("model.layers.0.") and [c[1] for c in layers["choices"]][0] == layer
    spectrum, heat, words, files = any_client.predict(key, layer, 4, "pissa", api_name="/analyse")
    assert _plot(spectrum) and _plot(heat) and f"**{layer}**" in words and "rank **4** (`pissa`)" in words
    assert _files(files, ".json", ".png")
    table, _bars, _heat, md, files = any_client.predict(key, 4, "qpissa-1", api_name="/errors")
    rows = _rows(table)
    assert table["headers"] == ["layer", "shape", "qlora", "loftq-1", "loftq-5", "qpissa-1", "qpissa-5"]
    assert [r[0] for r in rows] == [c[1] for c in layers["choices"]]  # every adapted layer, in order
    assert "At r = 4" in md and _files(files, ".json", ".csv")
    conv_md, conv = any_client.predict(key, 4, 2, layer, api_name="/convert")
    assert conv["layers"] == [layer] and conv["rank"] == 4 and conv["steps"] == 2 and conv["converted_rank"] == 8
    assert conv["same_outputs"] is (conv["rel_diff"] <= conv["tolerance"]) and "LoRA of rank 8" in conv_md
    figure, status, summary, files = any_client.predict(key, ["lora", "pissa"], 1, 10, 4, 0, api_name="/race")
    assert _plot(figure) and "**finished**" in status and "20/20 steps" in status and _files(files, ".json", ".png")
    assert summary["steps_run"] == summary["steps_planned"] == 10 and summary["pissa_beats_lora"]["seeds"] == 1
    assert set(summary["mean_loss_last10"]) == {"lora", "pissa"}


def test_tour_and_status(any_client):
    assert any_client.predict(api_name="/status")[1]["preset_source"] == "hub"
    head, caption, figure, numbers = any_client.predict("relevance", 1, api_name="/tour_step")
    assert "Step 1 of 5" in head and "wb-tour-caption" in caption and _plot(figure)
    assert numbers["tour"] == "relevance" and numbers["step"] == 1
    assert numbers["answer"] == max(numbers["scores"], key=numbers["scores"].get)


HUB_TABS = {"relevance", "features", "memorization", "math_neurons", "adapters"}


def test_every_tabs_model_calls_ran_where_this_server_runs_them(any_server, any_client, request):
    """The in-process server ran the endpoints above in its own process: its store holds every tab's
    checkpoint and no worker mirrored one; the forked server ran them in GPU workers (every tab's)."""
    status = any_client.predict(api_name="/status")[1]
    assert status["internal_errors"] == 0 and status["integrity"] == []
    if "zerogpu" not in any_server[1].name:
        picked = [m for m in status["models"] if m["source"] == "hub" and m["state"].startswith(("active", "loaded"))]
        assert {m["tab"] for m in picked} == HUB_TABS, status["models"]
        held = {m["id"].split("|")[0] for m in status["model_store"]["models"]}
        assert {f"hub:{m['id']}@main" for m in picked} <= held, held
        assert status["mirrored"] == [] and status["model_store"]["evictions"] == 0
        return

    def tab_of(name: str) -> str:  # a handler's tab: its package's (components/<tab id>/…)
        return name.split(".<locals>")[0].split(".")[1]

    workers = request.getfixturevalue("hub_forked_server")[2]
    names = {line.split()[1] for line in workers.read_text().splitlines()}
    tabs = {tab_of(n) for n in names}
    assert HUB_TABS <= tabs, names
