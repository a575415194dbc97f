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
    failed = [c["props"].get("elem_id") for c in cfg["components"]
              if str(c.get("props", {}).get("elem_id") or "").startswith("wb-tab-failed-")]
    assert failed == [], log.read_text()[-3000:]
    assert "could not start" not in log.read_text()
    texts = " ".join(str(c.get("props", {}).get("value", "")) for c in cfg["components"])
    assert "hub checkpoints" in texts


# Each tab's main button, clicked in the browser as a user would; its result block must fill.
CLICKS = {"relevance": (["#rel-explain"], "#rel-heatmap"), "memorization": (["#memo-check"], "#memo-score"),
          # a hub model's layers are listed on demand (it loads the model), then one is analysed
          "adapters": (["#pissa-list-layers", "#pissa-analyse"], "#pissa-stats")}


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
                    arg=result, timeout=120_000)
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


def test_relevance_main_endpoints(any_client):
    heat, _plot, cons, _j, _p, res = any_client.predict(
        "the plot was dull but the cast was brilliant", ["mambalrp", "gi"], ["norm", "silu", "ssm", "gate"],
        "was", True, "state-spaces/mamba-130m-hf", api_name="/explain_text")
    # byte-level BPE pieces are shown as text, the leading space as a faint mark, never as 'Ġ'
    assert "Ġ" not in heat and "wb-space" in heat
    assert " was" in res["tokens"] and not any(t.startswith("Ġ") for t in res["tokens"])
    assert len(res["tokens"]) == len(res["relevance"]["mambalrp"]) > 3
    held = any_client.predict(["mambalrp", "gi"], 20, "captions", None, "predicted", "", "", "state-spaces/mamba-130m-hf",
                              api_name="/heldout_eval")
    assert held and held[0] is not None
    out = any_client.predict("The code is 4817. Much later, the code is", ["mambalrp"], "state-spaces/mamba-1.4b-hf",
                             api_name="/explain_longrange")
    assert out and any(o for o in out)


def test_features_main_endpoints(any_client, images):
    from gradio_client import handle_file

    built = any_client.predict([handle_file(p) for p in images], None, api_name="/build_index")
    assert built and any(built)
    assert any_client.predict("", "density", api_name="/features_list")["data"]
    page = any_client.predict(0, api_name="/feature_page")
    assert page[0]  # the page header names the feature
    clamp = page[-1]["maximum"] / 2  # the clamp slider's range follows the index's activations
    shown = any_client.predict(handle_file(images[0]), None, api_name="/analyse_image")
    assert shown[0] is not None
    steered = any_client.predict(handle_file(images[1]), None, 0, clamp, "prompt", False, False, api_name="/steer")
    assert steered[1] and steered[2]


def test_memorization_main_endpoints(any_client):
    prompt = "The No Limits Business Woman Podcast"  # a memorized LAION prompt of the paper's list
    check = any_client.predict(prompt, api_name="/memo_check")
    assert check and any(check)
    found = any_client.predict(prompt, api_name="/memo_find")
    assert found and any(found)
    gen = any_client.predict(prompt, [], None, 2, None, api_name="/memo_generate")
    assert gen[0]
    table = any_client.predict("a dog on a beach\n" + prompt, None, api_name="/memo_batch")
    assert table


def test_math_main_endpoints(any_client):
    acc, acc_fig, samples, per_layer = any_client.predict("MathNeuro", 3, 0.0, 8, api_name="/mn_evaluate")
    assert acc and acc_fig and samples and per_layer
    answer = any_client.predict("Tom has 23 pens and finds 45 more. How many pens does he have now?", "MathNeuro",
                                3, 0.0, 8, api_name="/mn_ask")
    assert answer and any(answer)


def test_adapters_main_endpoints(any_client):
    key = "meta-llama/Llama-2-7b-hf"
    layers = any_client.predict(key, api_name="/layers")
    layer = layers[0]["value"]
    assert layer.startswith("model.layers.0.")
    analysed = any_client.predict(key, layer, 4, "pissa", api_name="/analyse")
    assert all(a is not None for a in analysed[:3])
    errors = any_client.predict(key, 4, "qpissa-1", api_name="/errors")
    assert errors[0]
    conv = any_client.predict(key, 4, 2, layer, api_name="/convert")
    assert conv[0]
    race = any_client.predict(key, ["lora", "pissa"], 1, 10, 4, 0, api_name="/race")
    assert race[2]


def test_tour_and_status(any_client):
    assert any_client.predict(api_name="/status")[1]["preset_source"] == "hub"
    assert any_client.predict("relevance", 1, api_name="/tour_step")[0]


def test_every_tabs_model_calls_ran_where_this_server_runs_them(any_server, request):
    """On the forked server the endpoints above ran in GPU workers (every tab's), not in its process."""
    if "zerogpu" not in any_server[1].name:
        return
    def tab_of(name: str) -> str:  # a handler's tab: its package's (components/<tab id>/…)
        return name.split(".<locals>")[0].split(".")[1]

    workers = request.getfixturevalue("hub_forked_server")[2]
    names = {line.split()[1] for line in workers.read_text().splitlines()}
    tabs = {tab_of(n) for n in names}
    for tab in ("relevance", "features", "memorization", "math_neurons", "adapters"):
        assert tab in tabs, (tab, names)
