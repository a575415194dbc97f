"""The guided tour's step endpoint: real numbers from the backends, clear errors for bad input."""
import pytest

pytestmark = pytest.mark.timeout(300)


def test_relevance_steps_find_the_planted_word_and_conserve(client):
    head, caption, image, numbers = client.predict("relevance", 2, api_name="/tour_step")
    assert "Step 2 of 5" in head and image
    assert numbers["top_word"] == "superb" and numbers["top_share"] > 0.5
    _, caption, _, numbers = client.predict("relevance", 4, api_name="/tour_step")
    errs = numbers["relative_error"]
    assert errs["all four rules"] < 1e-4
    assert min(v for k, v in errs.items() if k != "all four rules") > 0.1   # every ablation breaks it


def test_adapters_race_step_pissa_learns_faster(client):
    _, caption, image, numbers = client.predict("adapters", 4, api_name="/tour_step")
    last = numbers["mean_loss_last10"]
    assert last["pissa"] < last["lora"]
    assert "PiSSA" in caption and image


def test_math_prune_step_hits_arithmetic_not_story_questions(client):
    _, caption, image, numbers = client.predict("math", 2, api_name="/tour_step")
    base, mn, rnd = numbers["baseline"], numbers["mathneuro_pruned"], numbers["random_pruned"]
    assert base["math"] - mn["math"] > 0.3                      # arithmetic falls a lot
    assert base["math"] - mn["math"] > 3 * (base["nonmath"] - mn["nonmath"])
    assert rnd["math"] > mn["math"] + 0.2                        # random weights of the same count do not
    assert image


def _walk(client, tour_id, n):
    steps = []
    for k in range(1, n + 1):
        head, caption, image, numbers = client.predict(tour_id, k, api_name="/tour_step")
        assert f"Step {k} of {n}" in head
        assert image and len(caption) > 150, (k, caption)
        assert numbers["tour"] == tour_id and numbers["step"] == k
        steps.append((caption, numbers))
    return steps


def test_features_tour_every_step_computes_the_red_feature_story(client):
    (c1, scene), (c2, page), (c3, iou), (c4, steer) = _walk(client, "features", 4)
    assert scene["caption"] and scene["features"]                         # the model's caption, features firing
    assert page["label"] == "red" and steer["feature"] == page["feature"] == iou["feature"]
    m = page["mean_activation"]
    assert m["colour"] > 1.5 * m["other"] and m["colour"] > 5 * m["background"]   # brightest on red pixels
    assert iou["label"] == "red" and max(iou["concept_scores"], key=iou["concept_scores"].get) == "red"
    assert iou["top_iou_mean"] > 2 * iou["random_iou_mean"]               # not chance
    assert all("red" not in r["before"].split() for r in steer["rows"])    # scenes without red...
    assert steer["says_red"] >= steer["n"] // 2                           # ...now captioned red
    assert f"{steer['says_red']} of {steer['n']}" in c4


def test_memorization_tour_every_step_reports_what_nemo_computes(client):
    (c1, copy), (c2, det), (c3, neu), (c4, off) = _walk(client, "memorization", 4)
    assert min(copy["ssim_to_training_image"]) > 0.5                      # the copy
    assert det["flagged_memorized"] >= 0.8 * len(det["memorized"])
    assert min(det["memorized"].values()) > sorted(det["ordinary"].values())[len(det["ordinary"]) // 2]
    n = neu["n_neurons"]
    assert 0 < n == off["n_neurons"] == sum(neu["per_layer"].values()) < neu["total_neurons"]
    assert f"{n} neurons" in c3 and f"{n} neurons" in c4                    # the number computed, not a story
    assert max(off["ssim_off"]) < 0.5 * min(off["ssim_on"])                # the copy disappears...
    assert min(off["ssim_random_off"]) > 0.5                              # ...but not with random neurons
    assert off["score_off"] < off["theta_mem"] < off["score_on"]


def test_figure_is_drawn_for_the_page_theme(client):
    from PIL import Image

    light = client.predict("features", 2, False, api_name="/tour_step")
    dark = client.predict("features", 2, True, api_name="/tour_step")
    assert light[1] == dark[1] and light[3] == dark[3]                     # same computation, same words
    paths = [r[2] if isinstance(r[2], str) else r[2].get("value", r[2]) for r in (light, dark)]
    paths = [p.get("path", p) if isinstance(p, dict) else p for p in paths]
    assert all(isinstance(p, str) for p in paths), (light[2], dark[2])
    corner = [Image.open(p).convert("L").getpixel((2, 2)) for p in paths]
    assert corner[0] > 240 and corner[1] < 80, corner


@pytest.mark.parametrize("tour,step,msg", [("nope", 1, "not in the list of choices"), ("relevance", 0, "less than minimum"),
                                           ("adapters", 99, "steps 1 to"), ("all", None, "whole number")])
def test_bad_input_is_a_clear_error(client, tour, step, msg):
    with pytest.raises(Exception) as e:
        client.predict(tour, step, api_name="/tour_step")
    assert msg in str(e.value)
