"""The app's start imports and loads only what its first page shows: no transformers model code, no
pyplot, no tab's weights (the zoo Features organism starts as its metadata), and the page's config
is built once while the app is built. The start's time itself is benchmarks/startup.py's."""

import json
import os
import subprocess
import sys

import gradio as gr
import pytest

from backend.core import store
from backend.core.presets import ZOO_ROOT
from tests.conftest import ROOT

FEATURES_BUILT = (ZOO_ROOT / "llava-scenes-sae" / "manifest.json").exists()

PROBE = r"""
import json, sys
import app
demo = app.build_app("zoo")
from backend.core import store
from backend.sae import loading
org = loading.get_organism("zoo")
print(json.dumps({"modules": sorted(sys.modules), "loaded": sorted(store.loaded()),
                  "features": [org.model is None, org.sae is None, org.processor is None]}))
"""


@pytest.fixture(scope="module")
def started():
    """sys.modules and the model store of a fresh process that imported the app and built its page."""
    env = {**os.environ, "WORKBENCH_PRELOAD": "none", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_building_the_app_imports_no_model_code_and_no_pyplot(started):
    mods = started["modules"]
    model_code = [
        m
        for m in mods
        if m == "transformers.modeling_utils" or (m.startswith("transformers.models.") and ".modeling_" in m)
    ]
    assert model_code == []
    assert not any(m.startswith(("diffusers", "peft", "captum")) for m in mods)
    assert "matplotlib.pyplot" not in mods


@pytest.mark.timeout(300)
def test_building_the_app_loads_no_weights(started):
    # the one exception: the Adapters tab lists the layers of its default model, the digits toy (a
    # few thousand parameters read in milliseconds); a hub checkpoint's come from its config
    assert [k for k in started["loaded"] if not k.startswith("zoo:pissa-toy@")] == []
    if FEATURES_BUILT:
        assert started["features"] == [True, True, True]


def test_the_page_config_is_built_once_while_the_app_is_built(monkeypatch):
    import app
    from gradio.routes import App

    sizes = []
    real = App.create_app
    monkeypatch.setattr(
        App,
        "create_app",
        staticmethod(lambda blocks, *a, **k: sizes.append(len(blocks.blocks)) or real(blocks, *a, **k)),
    )
    demo = app.build_app("zoo")
    # Gradio builds the page's config and its server app whenever a Blocks' context closes or its
    # queue is set (~0.4 s each here): once for the whole page, the other times while it is empty
    assert sizes.count(len(demo.blocks)) == 1, sizes
    assert all(n == len(demo.blocks) or n < 10 for n in sizes), sizes
    assert demo._queue.max_size == app.QUEUE_MAX and demo._queue.default_concurrency_limit == 2


@pytest.mark.skipif(not FEATURES_BUILT, reason="the Features organism is not built")
def test_the_zoo_features_organism_starts_as_metadata_and_loads_its_weights_on_need(monkeypatch):
    from backend.sae import analysis, loading, organism, pages
    from backend.core import presets as P
    from backend.sae import scenes as S

    calls = []
    real = loading.load_zoo_parts
    monkeypatch.setattr(loading, "load_zoo_parts", lambda org: calls.append(org.name) or real(org))
    key = P.active(organism.TAB, "zoo").model_id
    store.evict(key)
    loading._SHELLS.pop(key, None)
    try:
        org = loading.get_organism("zoo")
        assert calls == [] and org.model is None and org.sae is None and key not in store.loaded()
        # everything the tab's first view shows is there without the weights ...
        assert pages.feature_table(org, "red", "iou") and pages.feature_page(org, 0)["feature"] == 0
        full = loading.load_zoo()
        assert full.model is not None and full.parts_key == ""
        for name in ("hookpoint", "n_features", "sae_text", "vision", "labels", "summary", "model_id"):
            assert getattr(org, name) == getattr(full, name), name
        assert org.heldout_specs == full.heldout_specs and org.index_specs == full.index_specs
        assert org.vision == organism._vision(full.model.config)
        calls.clear()
        # ... and the first computation loads them once, into the model store under the preset's id
        scene = S.render(org.heldout_specs[0])[0]
        out = analysis.analyse_image(org, scene)
        assert calls == ["llava-scenes-sae"] and key in store.loaded() and org.model is not None
        assert out["features"] and out["caption"]
        assert loading.get_organism("zoo", model=True) is org and calls == ["llava-scenes-sae"]
        # evicted from the store, the organism drops them and the next need loads them again
        store.evict(key)
        assert org.model is None and org.sae is None
        steered = analysis.steer_caption(org, scene, out["features"][0]["feature"], 1.25)
        assert calls == ["llava-scenes-sae"] * 2 and org.model is not None
        assert steered["baseline"] == out["caption"]
    finally:
        store.evict(key)
        loading._SHELLS.pop(key, None)


def test_objects_of_the_start_are_frozen_out_of_later_collections(monkeypatch):
    """`python app.py` starts with the collector off (its passes over the start's long-lived objects
    cost about a second); main() turns it on again once the page is built, those objects frozen."""
    import gc

    import app

    seen = {}
    monkeypatch.setattr(app.preload, "run", lambda preset: seen.update(preload=gc.isenabled()))
    monkeypatch.setattr(
        gr.Blocks, "launch", lambda self, **kw: seen.update(launch=gc.isenabled(), frozen=gc.get_freeze_count())
    )
    gc.disable()
    try:
        app.main(["--preset", "zoo"])
    finally:
        gc.unfreeze()
        gc.enable()
    assert seen["preload"] and seen["launch"] and seen["frozen"] > 100_000, seen
