"""What a tab says follows the model it shows: the words of a user's own model replace the zoo's
(scene picker, tiles, statistics set, listed type), and a table says nothing about an effect that
was not measured."""

from types import SimpleNamespace

import numpy as np

from components.features import steering as feature_steering
from components.memorization import layout as M
from components.memorization import figures as MF
from components.memorization import table as MT


def org(hub: bool, anyres: bool, scenes: int = 0):
    return SimpleNamespace(
        is_hub=hub,
        vision={"anyres": anyres, "image_size": 336},
        heldout_specs=[{}] * scenes,
        hookpoint="model.layers.2",
    )


def test_features_words_follow_the_loaded_vlm():
    zoo, next_, llava15 = org(False, False, 256), org(True, True), org(True, False)
    assert feature_steering.scene_picker(zoo)["visible"] and feature_steering.scene_picker(zoo)["label"].startswith(
        "…or a held-out scene, 0–255"
    )
    assert feature_steering.scene_picker(llava15) == {
        "choices": [],
        "value": None,
        "visible": False,
        "label": "…or a held-out scene, 0–0 (used when no image is uploaded)",
    }
    assert "high-resolution tiles" in feature_steering.upload_label(next_)
    for words in (
        feature_steering.upload_label(llava15),
        feature_steering.resize_note(llava15, np.zeros((30, 70, 3))),
        feature_steering._hub_steering_explain(llava15),
    ):
        assert "tiles" not in words, words
    assert "336 px square" in feature_steering.resize_note(llava15, np.zeros((30, 70, 3)))
    assert feature_steering.input_label(llava15) == "input image" and "scene" not in feature_steering.link_note(llava15)
    assert feature_steering.input_label(zoo) == "input scene" and "held-out scene number" in feature_steering.link_note(
        zoo
    )
    assert "high-resolution tiles" in feature_steering._hub_steering_explain(next_)


def test_memorization_statistics_slider_follows_the_set():
    got = M.stats_slider({"total": 1000, "set": "COCO captions (shipped)"})
    assert got == {
        "minimum": 2,
        "maximum": 1000,
        "value": 1000,
        "label": "First N of the 1,000 COCO captions (shipped)",
    }


def summary(**kw):
    s = {
        "n_prompts": 3,
        "search_guidance": 0.0,
        "n_skipped": 3,
        "n_relaxed": 0,
        "median_neurons": 0.0,
        "theta_mem": 0.428,
        "n_localized": 0,
        "n_above_on": 0,
        "share_below_theta_off": None,
        "share_below_theta_random": None,
        "median_ssim_on": None,
        "median_diversity_on": 0.5,
        "median_diversity_off": 0.5,
        "median_localisation_s": 1.0,
    }
    return MT.summary_html({**s, **kw})


def test_no_neurons_found_reports_no_effect():
    words = summary()
    assert "No neurons were found for any of them" in words and "0 of 3 score above" in words
    assert "fall below" not in words
    words = summary(n_localized=2, median_neurons=4.0, share_below_theta_off=1.0, share_below_theta_random=0.5)
    assert "with them off, <b>100 %</b> (2 of 3 had neurons to switch off) fall below" in words


def test_the_tours_ordinary_prompt_is_one_the_tab_calls_ordinary_with_a_margin():
    from backend.nemo import service as N

    m = N.get()
    d = N.describe()
    assert d["ordinary"] == m.ordinary_examples  # the tab's examples are the tour's
    r = N.check(m.ordinary_examples[0])  # the tour's ordinary prompt, scored as the tab scores it
    assert not r["memorized"] and r["score"] <= r["theta_mem"] - N.EXAMPLE_MARGIN, r["score"]
    recorded = dict(zip(m.info["heldout"], m.info["scores"]["heldout"]))
    assert abs(recorded[r["prompt"]] - r["score"]) < 1e-4  # the recorded scores are the tab's
    # "5 memorized + 5 unmemorized from the list" holds 5 the tab calls memorized, not 6
    assert all(recorded[p] <= m.theta_mem - N.EXAMPLE_MARGIN for p in d["ordinary"][:5])
    det = r["detection"]
    assert det["auroc"] == 1.0 and det["n_ordinary"] == 60 and 0 < det["ordinary_above"] < 60 / 3
    card = MF.score_html(r)
    assert "→ <b style='color:#16a34a'>not memorized</b> · " in card and "detection AUROC <b>1.00</b>" in card
    assert "mean + 1 σ of ordinary prompts' scores, so about one ordinary prompt in six" in card
    assert f"{det['ordinary_above']} of 60 above" in card


def test_steering_says_whether_the_caption_now_names_the_concept():
    from backend.sae import analysis, loading
    from backend.sae import scenes as S
    from backend.sae.steer import names_concept

    assert names_concept("a striped red circle top left", "red")
    assert not names_concept("a striped red circle top left and", "red")  # malformed: not a caption
    assert names_concept("a plain blue square bottom right", "bottom right")
    assert names_concept("A dog on a Red sofa.", "red sofa") and not names_concept("a redder sofa", "red")
    org = loading.get_organism("zoo")
    colour, f = next(iter(org.summary["steering"]["colour_features"].items()))
    spec = next(s for s in org.heldout_specs if all(o["colour"] != colour for o in s["objects"]))
    out = analysis.steer_caption(org, S.render(spec)[0], int(f), analysis.default_clamp_value(org, int(f)))
    assert out["concept"] == colour
    assert out["names_concept"] == {"baseline": False, "steered": names_concept(out["steered"], colour)}
    words = feature_steering.concept_words(out)
    assert (f"now names “{colour}”" in words) == out["names_concept"]["steered"]
    assert (f"does not name “{colour}”" in words) == (not out["names_concept"]["steered"])
    assert "no verdict" in feature_steering.concept_words({**out, "names_concept": None, "concept": ""})
    assert "already did without it" in feature_steering.concept_words(
        {**out, "names_concept": {"baseline": True, "steered": True}}
    )


def test_long_range_plot_keeps_every_methods_points_and_labels_apart():
    from components.relevance import figures as RF

    def tops(*pairs):
        return [{"token": t, "distance": d, "relevance": r, "position": 60 - d} for t, d, r in pairs]

    res = {
        "methods": ["gi", "mambalrp", "ig"],
        "target": "v3",
        "top_tokens": {
            "mambalrp": tops(("key3", 55, 4.7), ("n18", 52, 1.1), ("n7", 54, 0.9)),
            "gi": tops(("n7", 54, 0.01), ("n18", 52, 0.005), ("n4", 14, 0.001)),
            "ig": tops(("key3", 55, 10.9), ("n16", 1, 2.5), ("n18", 52, 1.7)),
        },
    }
    fig = RF.longrange_plot(res)
    rows = {}
    for tr in fig.data:
        rows.setdefault(tr.name, set()).update(tr.y)
    assert all(len(ys) == 1 for ys in rows.values()) and len({min(ys) for ys in rows.values()}) == 3  # a row each
    assert max(rows["MambaLRP"]) == 2  # the headline method on top, never under another's marker
    for tr in fig.data:  # within a row, labels at the same height never overlap (7 px a character)
        if tr.text is None:
            continue
        span = fig.layout.xaxis.range[1] - fig.layout.xaxis.range[0]
        boxes = sorted(
            (x - (len(t) * 7 + 6) / 2 * span / 600, x + (len(t) * 7 + 6) / 2 * span / 600)
            for x, t in zip(tr.x, tr.text)
            if t
        )
        assert all(a[1] <= b[0] for a, b in zip(boxes, boxes[1:])), (tr.name, tr.text, tr.x)
    labelled = {t for tr in fig.data if tr.name == "MambaLRP" and tr.text for t in tr.text}
    assert "key3" in labelled
