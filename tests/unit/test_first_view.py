"""Tabs compute their first view when a session first opens them (or the page opens on them), and
the app's start loads no model the first page does not show."""
import app
from backend.core import store


def test_start_loads_no_relevance_model_and_first_views_wait_for_their_tab():
    for model_id in ("zoo:mamba-longrange@main", "zoo:math-llama@main"):
        store.evict(model_id)
    demo = app.build_app("zoo")
    assert "zoo:mamba-longrange@main" not in store.loaded()
    assert "zoo:math-llama@main" not in store.loaded()
    tabs = {b.elem_id: i for i, b in demo.blocks.items() if str(getattr(b, "elem_id", "")).startswith("tab-")}
    selected = {(t[0], f.fn.__module__) for f in demo.fns.values() if f.fn is not None
                for t in f.targets if t[1] == "select"}
    for tab in ("relevance", "math_neurons"):
        assert (tabs[f"tab-{tab}"], f"components.{tab}") in selected, tab
