"""What the Features tab says of a looping caption (collapsed, and said so) and of a picture's
distance from the model's scenes (backend.sae.ood's verdict and its words), without a model."""

import numpy as np

from backend.sae import ood
from components.features.figures import wrapped_title
from components.features.steering import caption_html, collapse_repeats, ood_html


def test_a_looping_caption_is_collapsed_and_said_so():
    shown, runs = collapse_repeats(" ".join(["square"] * 16))
    assert shown == "square ×16" and runs == [("square", 16)]
    html = caption_html(" ".join(["square"] * 16))
    assert "square ×16" in html and "“square” 16 times" in html and "degenerate" in html
    assert "square square" not in html


def test_phrases_loop_too_and_well_formed_captions_stay_verbatim():
    assert collapse_repeats("a red a red a red circle")[0] == "a red ×3 circle"
    assert collapse_repeats("red red red red blue blue blue")[0] == "red ×4 blue ×3"
    for text in ("a plain red circle top left and a striped blue square bottom right", "very very good", ""):
        assert collapse_repeats(text) == (text, [])
        assert "repeated" not in caption_html(text)


def test_the_verdict_states_its_threshold():
    ref = np.linspace(0.004, 0.02, 512)
    edge = float(np.percentile(ref, 99))
    inside, edgy, out = (ood.assess(v, ref) for v in (0.006, 1.5 * edge, 0.11))
    assert not inside["out"] and not inside["beyond_edge"] and 0 < inside["percentile"] < 20
    assert not edgy["out"] and edgy["beyond_edge"]
    assert out["out"] and out["percentile"] == 100 and out["threshold"] == 2 * edge
    head, details = ood.words(out, "layers.0")
    assert "out of the distribution" in head and "above all 512 scenes" in details
    assert "Threshold: out of distribution above 2× the scenes' 99th percentile (3.3× the median)" in details
    assert "reconstruction error" in details and "the median of 512" in details
    assert "near its edge" in ood.words(edgy, "layers.0")[0]
    assert "at their 12th percentile" in ood.words(inside, "layers.0")[1]
    assert "id='features-ood' data-ood='out'" in ood_html(out, "layers.0")
    assert "data-ood='within'" in ood_html(inside, "layers.0") and ood_html(None, "x") == ""


def test_long_panel_titles_wrap_and_short_ones_stay():
    assert wrapped_title("#1809 · 9.16") == "#1809 · 9.16"
    t = wrapped_title("feature 59 · square (IoU 0.79; broad: fires on 43% of patches)")
    assert t.split("<br>")[0] == "feature 59 · square" and all(len(x) <= 24 for x in t.split("<br>"))
    assert len(wrapped_title("word " * 60).split("<br>")) == 4 and wrapped_title("word " * 60).endswith("…")
