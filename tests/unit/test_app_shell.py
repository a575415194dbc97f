import gradio as gr
import pytest

import app
from components import tabs as declared


def test_every_tab_declares_what_the_shell_needs():
    found = declared()
    ids = [t.id for t in found]
    assert ids[0] == "overview" and len(ids) == len(set(ids))
    for t in found:
        assert t.title and t.summary and callable(t.build)
    papers = [t for t in found if t.paper]
    assert len(papers) == 5 and all(t.card and t.tour and t.tools for t in papers)


def test_build_app_has_a_tab_per_declaration_and_a_bounded_queue():
    demo = app.build_app("zoo")
    tabs = [b for b in demo.blocks.values() if isinstance(b, gr.Tab)]
    assert [t.id for t in tabs] == [t.id for t in declared()]
    assert demo._queue.max_size == app.QUEUE_MAX and app.QUEUE_MAX > 0


def test_model_events_share_one_queue_at_the_setting_and_other_events_never_join_it(monkeypatch):
    """Every model-touching event of the five tabs joins one queue whose limit is
    WORKBENCH_MODEL_CONCURRENCY (default 4; models take turns per model on their own locks), and no
    event that touches no model (the feature list and page, status) joins it."""
    from components.common import MODEL_GROUP, is_model_group, model_concurrency, model_event

    monkeypatch.delenv("WORKBENCH_MODEL_CONCURRENCY", raising=False)
    assert model_concurrency() == 4
    kw = model_event(api_name="x")
    assert kw["concurrency_id"] == MODEL_GROUP and kw["concurrency_limit"] == 4
    assert MODEL_GROUP.startswith("model-")
    monkeypatch.setenv("WORKBENCH_MODEL_CONCURRENCY", "3")
    demo = app.build_app("zoo")
    model = [d for d in demo.fns.values() if is_model_group(d.concurrency_id)]
    assert {d.concurrency_id for d in model} == {MODEL_GROUP} and {d.concurrency_limit for d in model} == {3}
    from components.serving.guard import handler_tab

    tabs = {handler_tab(d.fn) for d in model}
    assert {"relevance", "features", "memorization", "math_neurons", "adapters"} <= tabs, tabs
    free = {
        d.api_name: d.concurrency_id
        for d in demo.fns.values()
        if d.api_name in ("feature_page", "features_list", "status", "image_example")
    }
    assert len(free) == 4 and not any(is_model_group(c) for c in free.values()), free
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv("WORKBENCH_MODEL_CONCURRENCY", bad)
        with pytest.raises(ValueError, match="WORKBENCH_MODEL_CONCURRENCY"):
            model_concurrency()


def test_importing_app_switches_analytics_and_telemetry_off():
    """The switches are set in code by app.py itself, not only by the test environment."""
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADIO_", "HF_", "TRANSFORMERS_", "WORKBENCH_"))}
    code = (
        "import os, json, app; print(json.dumps({k: os.environ.get(k) for k in "
        "['GRADIO_ANALYTICS_ENABLED', 'HF_HUB_DISABLE_TELEMETRY', 'HF_HUB_OFFLINE']}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["GRADIO_ANALYTICS_ENABLED"] == "False"
    assert got["HF_HUB_DISABLE_TELEMETRY"] in ("1", "True")
    assert got["HF_HUB_OFFLINE"] in ("1", "True")


def test_a_tab_that_cannot_start_shows_why_and_the_app_still_builds(monkeypatch):
    """A tab whose build raises (e.g. a hub checkpoint missing from the cache) must not kill the app:
    its place shows the reason, what it half-built is hidden, and every other tab builds."""
    import dataclasses

    def explode(ctx):
        gr.Markdown("half built")
        raise RuntimeError("CompVis/stable-diffusion-v1-4 is not in the cache")

    found = [dataclasses.replace(t, build=explode) if t.id == "memorization" else t for t in declared()]
    monkeypatch.setattr(app, "declared_tabs", lambda: found)
    demo = app.build_app("zoo")
    tabs = {b.id for b in demo.blocks.values() if isinstance(b, gr.Tab)}
    assert tabs == {t.id for t in found}
    notes = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "wb-tab-failed-memorization"]
    assert len(notes) == 1
    assert "could not start" in notes[0].value and "not in the cache" in notes[0].value
    half = [b for b in demo.blocks.values() if isinstance(b, gr.Markdown) and b.value == "half built"]
    parent = half[0].parent
    while parent is not None and not isinstance(parent, gr.Column):
        parent = parent.parent
    assert parent is not None and parent.visible is False
