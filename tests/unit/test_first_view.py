"""Tabs compute their first view when a session first opens them (or the page opens on them), and
the app's start loads no model the first page does not show."""

import app
from backend.core import store


def test_start_loads_no_relevance_model_and_first_views_wait_for_their_tab():
    def held(name):  # a store key starts with the checkpoint; a class or view suffix may follow
        return [k for k in store.loaded() if k.startswith(f"zoo:{name}@")]

    for name in ("mamba-longrange", "math-llama"):
        for model_id in held(name):
            store.evict(model_id)
    demo = app.build_app("zoo")
    assert not held("mamba-longrange") and not held("math-llama"), store.loaded()
    tabs = {b.elem_id: i for i, b in demo.blocks.items() if str(getattr(b, "elem_id", "")).startswith("tab-")}
    selected = {
        (t[0], f.fn.__module__) for f in demo.fns.values() if f.fn is not None for t in f.targets if t[1] == "select"
    }
    for tab in ("relevance", "math_neurons", "features", "tour"):
        assert (tabs[f"tab-{tab}"], f"components.{tab}.layout") in selected, tab


def test_a_page_load_runs_no_tab_computation_but_the_first_view_of_the_tab_it_opens_on():
    """A visitor who never opens a tab costs it nothing: the only server call of every page load is
    the link restore, whose tab selection fires the select event of the tab the link opens on, and
    that computes the tab's first view (components.common.on_first_open). Features drew its page,
    export files and all, at every page load; each tab then had a load event of its own too."""
    demo = app.build_app("zoo")
    on_load = sorted(
        {f.fn.__name__ for f in demo.fns.values() if f.fn is not None for t in f.targets if t[1] == "load"}
    )
    assert on_load == ["restore"], on_load
