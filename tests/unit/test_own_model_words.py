"""With the visitor's own model picked, nothing on the tab is left over from the zoo: Memorization's
prompt box takes the new pipeline's example instead of keeping the zoo's caption, Relevance names
the picked model instead of "Default text model: zoo …", and the long-range run explains the pick."""

from __future__ import annotations

import gradio as gr
import pytest


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    from tests.helpers.standins import build_local
    from tests.helpers.standins import memorization as SM
    from tests.helpers.standins import relevance as SR

    root = build_local(
        tmp_path_factory.mktemp("own"), {"own-sd15": SM.LOCAL["own-sd15"], "own-mamba": SR.LOCAL["own-mamba"]}
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WORKBENCH_MODEL_ROOTS", str(root))
        yield root


def _tab(module):
    from components.common import TabContext

    with gr.Blocks() as demo:
        with gr.Tabs() as tabs:
            with gr.Tab(module.TAB.title) as tab:
                module.TAB.build(TabContext(tabs, "zoo", tab=tab, tab_id=module.TAB.id))
    fns = {getattr(f.fn, "__name__", ""): f for f in demo.fns.values() if f.fn is not None}
    fns.update({f.api_name: f for f in demo.fns.values() if f.api_name})
    comps = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    return fns, comps


def test_memorization_prompt_follows_the_picked_pipeline(own):
    import components.memorization as M

    fns, comps = _tab(M)
    zoo_prompt = comps["memo-prompt"].value
    words = fns["words_for"]
    assert words.outputs[-1] is comps["memo-prompt"]
    key = str(own / "own-sd15")
    out = words.fn(key, zoo_prompt)
    new_prompt = out[-1]
    assert new_prompt != zoo_prompt and new_prompt  # the paper's first LAION caption, not the zoo's
    assert out[-2] in ("VM", "TM")  # its listed type
    # a prompt the visitor typed stays, with no type
    typed = "a red bicycle leaning on a wall"
    assert words.fn(key, typed)[-2:] == ("—", typed)
    # and back on the zoo pipeline, the LAION caption gives way to the zoo's example
    assert words.fn(None, new_prompt)[-1] == zoo_prompt


def test_relevance_names_and_explains_the_picked_model(own):
    import components.relevance as R
    from components.relevance.models import long_note, model_line

    key = str(own / "own-mamba")
    line = model_line("zoo", key, False)
    assert "Your own text model" in line and "own-mamba" in line and "zoo organism" not in line
    assert "Default text model" in model_line("zoo", None, False)
    assert "own-mamba" in long_note("zoo", key, False) and "zoo long-range" in long_note("zoo", None, False)
    fns, comps = _tab(R)
    # the picker's change rewrites both lines
    change = next(f for f in fns.values() if comps["rel-model-line"] in (f.outputs or []))
    assert comps["rel-long-model"] in change.outputs
    _, _, tops = fns["explain_longrange"].fn("the secret code is 4817 . the code is", ["mambalrp"], key)
    assert tops["model"] == f"local:{key}@main"
    _, _, tops = fns["explain_longrange"].fn(comps["rel-long-text"].value, ["mambalrp"], None)
    assert tops["model"].startswith("zoo:") and "long" in tops["model"]
