"""One range per argument (backend.core.bounds) for the Features tab's contrast and its several-clamps
steering: the tab's controls, its handlers (which the API calls), the MCP tools (their declared
ranges and their own checks) and the backend refuse the same values with the same words, on the zoo
organism, before any model call."""

import gradio as gr
import pytest

from backend.core import bounds
from backend.sae import analysis, loading
from backend.sae import contrast as C
from backend.sae import steer as ST
from components.features import contrast as FC
from components.features import steering as FS
from components.features import tools

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def zoo():
    org = loading.get_organism("zoo")
    if not org.heldout_specs:
        pytest.skip("the Features organism is not built")
    return org


def test_the_tab_and_the_mcp_schema_state_the_declared_ranges(zoo):
    from components.agents import tools as agents
    from components.common import TabContext
    from components.features import layout as tab

    assert agents.ranges()["contrast_features"] == {
        "n": bounds.CONTRAST_IMAGES,
        "rows": bounds.CONTRAST_ROWS,
        "images_a_base64": bounds.Items(bounds.CONTRAST_IMAGES),
        "images_b_base64": bounds.Items(bounds.CONTRAST_IMAGES),
    }
    with gr.Blocks() as demo:
        tab.build(TabContext(tabs=None, source="zoo"))
    blocks = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    n = blocks["features-contrast-n"]
    assert (n.minimum, n.maximum, n.value) == (
        bounds.CONTRAST_IMAGES.lo,
        bounds.CONTRAST_IMAGES.hi,
        bounds.CONTRAST_IMAGES.hi,
    )
    assert blocks["features-clamp"].maximum == analysis.clamp_range(zoo).hi  # every clamp's value range
    assert blocks["features-steer-id"].maximum == zoo.n_features - 1


@pytest.mark.parametrize("n", [1, 65, 2.5])
def test_scenes_per_set_are_refused_alike(zoo, n):
    said = bounds.CONTRAST_IMAGES.refusal(n)
    for call in (
        lambda: FC.run("zoo", "red", "blue", None, None, n),  # the tab and the API
        lambda: tools.contrast_features("red", "blue", n=n),  # the MCP tool
        lambda: bounds.check_whole(bounds.CONTRAST_IMAGES, n),
    ):  # what the MCP server checks first
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value) == said
    assert FC.estimate("zoo", None, None, n) == f"<span class='wb-muted'>{said}</span>"


@pytest.mark.parametrize("count", [1, 65])
def test_uploaded_sets_outside_the_bound_are_refused_before_any_image_is_read(zoo, tmp_path, count):
    never_read = [str(tmp_path / f"{i}.png") for i in range(count)]  # no such files: counted first
    two = [str(tmp_path / "x.png")] * 2
    word = "at least 2" if count < 2 else "at most 64"
    with pytest.raises(gr.Error, match=f"Set A has {count} images?; {word} per set"):
        FC.run("zoo", "", "", never_read, two, 64)
    with pytest.raises(ValueError) as e:
        tools.contrast_features(images_a_base64=["not decoded"] * count, images_b_base64=["not decoded"] * 2)
    assert str(e.value) == bounds.CONTRAST_IMAGES.refusal(count)
    with pytest.raises(ValueError, match="between 2 and 64"):
        C.image_activations(zoo, [None] * count)


def test_listed_rows_are_refused_alike(zoo):
    with pytest.raises(ValueError) as e:
        tools.contrast_features("red", "blue", rows=bounds.CONTRAST_ROWS.hi + 1)
    assert str(e.value) == bounds.CONTRAST_ROWS.refusal(bounds.CONTRAST_ROWS.hi + 1)
    with pytest.raises(ValueError) as e:
        C.contrast_stats([[0.0], [1.0]], [[0.0], [2.0]], rows=bounds.CONTRAST_ROWS.hi + 1)
    assert str(e.value) == bounds.CONTRAST_ROWS.refusal(bounds.CONTRAST_ROWS.hi + 1)


def test_clamp_and_suppression_counts_are_refused_alike(zoo):
    many = list(range(bounds.STEER_CLAMPS.hi + 1))  # 9 clamps: the panel's one and 8 more
    sup = list(range(20, 20 + int(bounds.STEER_SUPPRESS.hi) + 1))
    cases = [
        (bounds.STEER_CLAMPS.refusal(len(many)), [(f, 1.0) for f in many], []),
        (bounds.STEER_SUPPRESS.refusal(len(sup)), [(0, 1.0)], sup),
    ]
    for said, clamps, suppress in cases:
        first, more = clamps[0], clamps[1:]
        text = ", ".join(f"{f}={v:g}" for f, v in more)
        with pytest.raises(gr.Error) as e:  # the tab and the API
            FS.steer_many(
                "zoo", None, "0", first[0], first[1], text, ", ".join(map(str, suppress)), "prompt", False, False
            )
        assert e.value.message == said  # gr.Error: the toast's text
        with pytest.raises(ValueError) as e:  # the MCP tool
            tools.steer_feature(
                first[0],
                first[1],
                scene=0,
                positions="prompt",
                more_clamps=[{"feature": f, "value": v} for f, v in more] or None,
                suppress=suppress or None,
            )
        assert str(e.value) == said
        with pytest.raises(ValueError) as e:  # the backend
            ST.check_clamps(clamps, zoo.n_features, suppress)
        assert str(e.value) == said
    # a clamp's value: the panel's range for every clamp, from the tab's box to the tool's more_clamps
    top = analysis.clamp_range(zoo).hi
    with pytest.raises(gr.Error, match=f"The clamp value of feature 5 must be .*{top:g}"):
        FS.steer_many("zoo", None, "0", 0, 1.0, f"5={top * 2:g}", "", "prompt", False, False)
    with pytest.raises(ValueError, match=f"The clamp value of feature 5 must be .*{top:g}"):
        tools.steer_feature(0, 1.0, more_clamps=[{"feature": 5, "value": top * 2}])
