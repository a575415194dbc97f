"""A tab is one package that declares itself (components.tab.Tab): found, built and listed in every
place that lists the tabs, with nothing else to edit. Tried with a sixth method's small tab, made
in a temporary folder on the components package's path."""

import sys
import textwrap

import gradio as gr
import pytest

import components

SALIENCY = '''
"""Saliency: a test tab."""
import gradio as gr

from components.tab import AgentTool, Tab
from components.tab import Step, Tour


def shout(text: str) -> str:
    """Upper-cases the text (a stand-in for a method).

    Args:
        text: any text.

    Returns:
        the text in capitals.
    """
    return text.upper()


def build(ctx):
    box = gr.Textbox("hello", elem_id="sal-text")
    out = gr.Textbox(elem_id="sal-out")
    gr.Button("Run", elem_id="sal-go").click(shout, box, out, api_name="sal_run")


TAB = Tab(id="saliency", title="Saliency", order=7, build=build, paper="Gradient×Input (Shrikumar et al., 2016)",
          card="Which inputs move the output, by gradient times input.", summary="Saliency: a test tab.",
          link_runs=("sal_run",), report_results={"sal-out": "Saliency"}, key_figure="#sal-out",
          first_view_drawn="document.querySelector('#sal-out textarea').value",
          tour=Tour("saliency", "Saliency — a test tour", "mamba-sentiment", [Step("one", lambda: None)]),
          tools=(AgentTool(shout, reads_model=False, intervention=False, cost="none"),), gpu_seconds=77)
'''


@pytest.fixture
def sixth_tab(tmp_path, monkeypatch):
    pkg = tmp_path / "saliency"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(SALIENCY))
    monkeypatch.setattr(components, "__path__", [*components.__path__, str(tmp_path)])
    components._discovered.cache_clear()
    try:
        yield sys.modules.get("components.saliency") or __import__("components.saliency").saliency
    finally:
        components._discovered.cache_clear()
        sys.modules.pop("components.saliency", None)


def test_a_tab_package_is_built_listed_and_served_with_nothing_else_to_edit(sixth_tab, monkeypatch):
    import app
    from components.agents import tools as agent_tools
    from components.serving import guard
    from components.tour.layout import overview_tours

    monkeypatch.setenv("WORKBENCH_FIRST_VIEWS", "off")
    assert [t.id for t in components.tabs()][-2:] == ["tour", "saliency"]
    demo = app.build_app("zoo")
    assert "saliency" in [b.id for b in demo.blocks.values() if isinstance(b, gr.Tab)]
    html = " ".join(str(b.value) for b in demo.blocks.values() if isinstance(b, gr.HTML))
    assert "<h3>Saliency</h3>" in html and "Gradient×Input (Shrikumar et al., 2016)" in html  # its Overview card
    assert "six papers, six live instruments" in html and "Six interpretability papers" in html
    buttons = {b.value for b in demo.blocks.values() if isinstance(b, gr.Button)}
    assert "Open Saliency →" in buttons
    # its handlers are the tab's: ZeroGPU seconds, turns and picks (the guard)
    run = next(f for f in demo.fns.values() if f.api_name == "sal_run")
    assert guard.handler_tab(run.fn) == "saliency" and guard.handler_gpu_seconds(run.fn) == 77
    # a link carrying its inputs reruns its link_runs (a hidden per-tab button the page clicks)
    assert any(f.js and "wb-linkrun-saliency" in f.js for f in demo.fns.values())
    # its tour on the Guided tour tab and on its Overview card; its tool among the MCP tools
    assert overview_tours()["saliency"] == "saliency"
    assert "shout" in agent_tools.tool_names() and agent_tools.tool_names()[-1] == "session_report"


def test_a_tab_whose_id_is_not_its_package_name_is_refused(tmp_path, monkeypatch):
    """Handlers are told apart by their package (components.serving.guard.handler_tab): a tab
    declared under another name would give its handlers no tab."""
    pkg = tmp_path / "other"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(SALIENCY))
    monkeypatch.setattr(components, "__path__", [*components.__path__, str(tmp_path)])
    components._discovered.cache_clear()
    try:
        with pytest.raises(ValueError, match="components/other declares the tab 'saliency'"):
            components.tabs()
    finally:
        components._discovered.cache_clear()
        sys.modules.pop("components.other", None)


def test_every_tab_declares_its_key_figure_and_first_view_on_its_own_page():
    """The browser tests, the presenter-view check and the first-view benchmark read these from the
    registry (tests/e2e/conftest.FIRST_VIEW, test_layout, test_key_figure_fits): a key figure is an
    element the built app has."""
    import app

    demo = app.build_app("zoo")
    ids = {b.elem_id for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    for t in components.tabs():
        assert t.key_figure.startswith("#") and t.first_view_drawn, t.id
        assert t.key_figure[1:].split(" ")[0] in ids, (t.id, t.key_figure)
