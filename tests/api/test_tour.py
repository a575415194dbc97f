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


@pytest.mark.parametrize("tour,step,msg", [("nope", 1, "not in the list of choices"), ("relevance", 0, "less than minimum"),
                                           ("adapters", 99, "steps 1 to"), ("all", None, "whole number")])
def test_bad_input_is_a_clear_error(client, tour, step, msg):
    with pytest.raises(Exception) as e:
        client.predict(tour, step, api_name="/tour_step")
    assert msg in str(e.value)
