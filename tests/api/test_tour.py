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


@pytest.mark.parametrize("tour,step,msg", [("nope", 1, "not in the list of choices"), ("relevance", 0, "less than minimum"),
                                           ("adapters", 99, "steps 1 to"), ("all", None, "whole number")])
def test_bad_input_is_a_clear_error(client, tour, step, msg):
    with pytest.raises(Exception) as e:
        client.predict(tour, step, api_name="/tour_step")
    assert msg in str(e.value)
