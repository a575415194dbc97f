"""The guided tour's step endpoint: real numbers from the backends, every step's figure a themed
plotly figure with hover values, clear errors for bad input."""

import json

import pytest

from backend.core import colors

pytestmark = pytest.mark.timeout(300)


def _figure(value) -> dict:
    """The plotly figure (as a dict) that the endpoint returned for gr.Plot."""
    plot = value.get("plot") if isinstance(value, dict) else None
    assert isinstance(plot, str), value
    return json.loads(plot)


def _check_figure(fig: dict, where) -> None:
    lay = fig["layout"]
    assert fig["data"], where  # something is drawn
    assert lay["paper_bgcolor"] == lay["plot_bgcolor"] == colors.TRANSPARENT, where  # reads in dark mode
    assert lay["meta"]["wb_template"] == colors.TEMPLATE_NAME, where  # the shared theme
    assert lay["height"] <= 470, where  # fits 1440×1000 beside the controls
    hover = [t for t in fig["data"] if t.get("hovertemplate") or t.get("type") == "image"]
    assert hover, where  # exact values on hover


def test_relevance_steps_find_the_planted_word_and_conserve(client):
    head, caption, figure, numbers = client.predict("relevance", 2, api_name="/tour_step")
    assert "Step 2 of 5" in head
    _check_figure(_figure(figure), 2)
    assert numbers["top_word"] == "superb" and numbers["top_share"] > 0.5
    _, caption, _, numbers = client.predict("relevance", 4, api_name="/tour_step")
    errs = numbers["relative_error"]
    assert errs["all four rules"] < 1e-4
    assert min(v for k, v in errs.items() if k != "all four rules") > 0.1  # every ablation breaks it


def test_adapters_race_step_pissa_learns_faster_in_its_own_colour(client):
    _, caption, figure, numbers = client.predict("adapters", 4, api_name="/tour_step")
    last = numbers["mean_loss_last10"]
    assert last["pissa"] < last["lora"]
    assert "PiSSA" in caption
    lines = {t["name"]: t["line"]["color"] for t in _figure(figure)["data"]}
    assert lines == {"LoRA": colors.METHOD_COLORS["lora"], "PiSSA": colors.METHOD_COLORS["pissa"]}


def test_math_prune_step_hits_arithmetic_not_story_questions(client):
    _, caption, figure, numbers = client.predict("math", 2, api_name="/tour_step")
    base, mn, rnd = numbers["baseline"], numbers["mathneuro_pruned"], numbers["random_pruned"]
    assert base["math"] - mn["math"] > 0.3  # arithmetic falls a lot
    assert base["math"] - mn["math"] > 3 * (base["nonmath"] - mn["nonmath"])
    assert rnd["math"] > mn["math"] + 0.2  # random weights of the same count do not
    bars = _figure(figure)["data"]
    assert [round(v, 6) for v in bars[0]["y"]] == [round(r["math"] * 100, 6) for r in (base, mn, rnd)]


def _walk(client, tour_id, n):
    steps = []
    for k in range(1, n + 1):
        head, caption, figure, numbers = client.predict(tour_id, k, api_name="/tour_step")
        assert f"Step {k} of {n}" in head
        assert len(caption) > 150, (k, caption)
        assert numbers["tour"] == tour_id and numbers["step"] == k
        _check_figure(_figure(figure), (tour_id, k))
        steps.append((caption, numbers))
    return steps


@pytest.mark.parametrize("tour_id,n", [("relevance", 5), ("math", 3), ("adapters", 4)])
def test_every_step_renders_a_themed_figure(client, tour_id, n):
    _walk(client, tour_id, n)


def test_features_tour_every_step_computes_the_red_feature_story(client):
    (c1, scene), (c2, page), (c3, iou), (c4, steer) = _walk(client, "features", 4)
    assert scene["caption"] and scene["features"]  # the model's caption, features firing
    assert page["label"] == "red" and steer["feature"] == page["feature"] == iou["feature"]
    m = page["mean_activation"]
    assert m["colour"] > 1.5 * m["other"] and m["colour"] > 5 * m["background"]  # brightest on red pixels
    assert iou["label"] == "red" and max(iou["concept_scores"], key=iou["concept_scores"].get) == "red"
    assert iou["top_iou_mean"] > 2 * iou["random_iou_mean"]  # not chance
    assert all("red" not in r["before"].split() for r in steer["rows"])  # scenes without red...
    assert steer["says_red"] >= steer["n"] // 2  # ...now captioned red
    assert f"{steer['says_red']} of {steer['n']}" in c4


def test_memorization_tour_every_step_reports_what_nemo_computes(client):
    (c1, copy), (c2, det), (c3, neu), (c4, off) = _walk(client, "memorization", 4)
    assert min(copy["ssim_to_training_image"]) > 0.5  # the copy
    assert det["flagged_memorized"] >= 0.8 * len(det["memorized"])
    assert min(det["memorized"].values()) > sorted(det["ordinary"].values())[len(det["ordinary"]) // 2]
    n = neu["n_neurons"]
    assert 0 < n == off["n_neurons"] == sum(neu["per_layer"].values()) < neu["total_neurons"]
    assert f"{n} neurons" in c3 and f"{n} neurons" in c4  # the number computed, not a story
    assert max(off["ssim_off"]) < 0.5 * min(off["ssim_on"])  # the copy disappears...
    assert min(off["ssim_random_off"]) > 0.5  # ...but not with random neurons
    assert off["score_off"] < off["theta_mem"] < off["score_on"]


def test_each_papers_tour_is_named_by_its_tab_in_the_tabs_order():
    from components import tabs
    from components.tour.layout import all_tours, overview_tours

    assert "tour" in [t.id for t in tabs()]
    assert [t.tour_id for t in all_tours()] == ["relevance", "features", "memorization", "math", "adapters"]
    # the Overview's tour buttons: one per tab with a tour (elem_id overview-tour-<tab id>), and all
    assert overview_tours() == {
        "relevance": "relevance",
        "features": "features",
        "memorization": "memorization",
        "math_neurons": "math",
        "adapters": "adapters",
        "all": "all",
    }


@pytest.mark.parametrize(
    "tour,step,msg",
    [
        ("nope", 1, "not in the list of choices"),
        ("relevance", 0, "less than minimum"),
        ("adapters", 99, "steps 1 to"),
        ("all", None, "whole number"),
    ],
)
def test_bad_input_is_a_clear_error(client, tour, step, msg):
    with pytest.raises(Exception) as e:
        client.predict(tour, step, api_name="/tour_step")
    assert msg in str(e.value)
