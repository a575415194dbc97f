"""The Relevance tab through gradio_client: every endpoint, bad input, exports, parallel clients,
and the shared models left exactly as committed."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.figures import names, traces

pytestmark = pytest.mark.timeout(400)
torch.set_num_threads(1)

ALL_RULES = ["norm", "silu", "ssm", "gate"]


def explain(client, text, methods=("mambalrp", "gi"), rules=ALL_RULES, target="", normalise=True):
    return client.predict(text, list(methods), list(rules), target, normalise, api_name="/explain_text")


def _path(f):
    return Path(f if isinstance(f, str) else f.get("path", f.get("name")))


def test_explain_text_heatmaps_conservation_and_exports(client):
    heat, plot, cons, jfile, pfile, res = explain(
        client, "the plot was dull but the cast was brilliant", methods=("mambalrp", "gi", "ig", "attnroll")
    )
    assert "MambaLRP" in heat and "Integrated Gradients" in heat and "brilliant" in heat
    assert "linear-gradient" in heat  # the colour bar
    # one bar per position for each method, in the order asked for
    assert names(plot) == ["MambaLRP", "Gradient×Input", "Integrated Gradients", "Attention rollout"]
    assert all(t["type"] == "bar" and t["x"] == traces(plot)[0]["x"] for t in traces(plot))
    assert res["target"] in ("positive", "negative")
    assert res["tokens"][0] == "<bos>" and res["tokens"][-1] == "sentiment:"
    rel = {k: np.asarray(v) for k, v in res["relevance"].items()}
    assert all(len(v) == len(res["tokens"]) for v in rel.values())
    assert abs(rel["mambalrp"].sum() - res["logit"]) <= 1e-3 * abs(res["logit"])
    assert abs(rel["gi"].sum() - res["logit"]) > 0.1 * abs(res["logit"])
    # the label-deciding words carry the largest MambaLRP relevance
    top2 = {res["tokens"][i] for i in np.argsort(-rel["mambalrp"])[:2]}
    assert top2 <= {"dull", "brilliant", "sentiment:"}
    assert "MambaLRP" in cons and "Σ relevance" in cons
    data = json.loads(_path(jfile).read_text())
    assert data["relevance"]["mambalrp"] == res["relevance"]["mambalrp"]
    assert _path(pfile).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rule_ablation_breaks_conservation_and_repeated_tokens_stay_separate(client):
    text = "good good movie and a good plot"
    *_, full = explain(client, text, methods=("mambalrp",))
    *_, no_gate = explain(client, text, methods=("mambalrp",), rules=["norm", "silu", "ssm"])
    f = full["logit"]
    assert abs(full["sum_relevance"]["mambalrp"] - f) <= 1e-3 * abs(f)
    assert abs(no_gate["sum_relevance"]["mambalrp"] - f) > 0.05 * abs(f)
    assert full["tokens"].count("good") == 3 and len(full["relevance"]["mambalrp"]) == len(full["tokens"])


def test_named_target_token(client):
    *_, pos = explain(client, "a lovely film", target="positive")
    *_, neg = explain(client, "a lovely film", target="negative")
    assert pos["target"] == "positive" and neg["target"] == "negative"
    assert pos["logit"] > neg["logit"]


def test_bad_input_is_a_clear_error(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="Type a sentence"):
        explain(client, "   ")
    with pytest.raises(AppError, match="(?i)pick at least one method"):
        explain(client, "a good film", methods=())
    with pytest.raises(AppError, match="not a token"):
        explain(client, "a good film", target="zebra")
    with pytest.raises(AppError, match="limit is 256"):
        explain(client, " ".join(["film"] * 400))
    with pytest.raises(AppError):
        explain(client, "a good film", methods=("shap",))
    with pytest.raises(AppError, match="(?i)upload an image"):
        client.predict(None, ["mambalrp"], ALL_RULES, api_name="/explain_image")


def test_text_refusals_load_no_model(client, monkeypatch):
    """An empty or too long text, no method or an unknown rule is refused before the model loads,
    in the tab and in the MCP tool: a refusal does not wait for a load."""
    from gradio_client.exceptions import AppError

    from backend.lrp import service as svc
    from components.relevance import tools

    def no_load(*a, **k):
        raise AssertionError("a model was loaded for a refused request")

    monkeypatch.setattr(svc, "load_text", no_load)
    refused = [
        ("   ", ("gi",), ALL_RULES, "Type a sentence"),
        ("a" * 5000, ("gi",), ALL_RULES, "characters long"),
        ("a good film", (), ALL_RULES, "(?i)pick at least one method"),
        ("a good film", ("gi",), ["warp"], "warp"),
    ]
    for text, methods, rules, message in refused:
        with pytest.raises(AppError, match=message):
            explain(client, text, methods=methods, rules=rules)
        with pytest.raises(ValueError, match=message):
            tools.token_relevance(text, list(methods), list(rules))


def test_numbers_out_of_range_and_unreadable_images_are_refused(client, tmp_path):
    """One rule for numbers: a value the control cannot take is refused with the valid range, and
    nothing is computed (never clamped); a damaged upload is named as unreadable."""
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    import gradio as gr

    from backend.core import bounds
    from components.inputs.fields import bounded_slider

    for bad in (500, 5, 25.5, None):  # a browser sends a NaN typed in a number box as null
        with pytest.raises(AppError, match="whole number between 20 and 240"):
            client.predict(["mambalrp"], bad, api_name="/heldout_eval")
    for bad in (200, -1, 3.5):
        with pytest.raises(AppError, match="whole number between 0 and 199"):
            client.predict(bad, api_name="/image_example")
    slider = bounded_slider(bounds.REL_EXAMPLE, step=1)  # JSON cannot carry NaN/inf
    for bad in (float("nan"), float("inf"), "seven", True):
        with pytest.raises(gr.Error, match="whole number between 0 and 199"):
            slider.preprocess(bad)
    assert slider.preprocess(7) == 7
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really an image" * 20)
    with pytest.raises(AppError, match="could not be read as an image"):
        client.predict(handle_file(str(broken)), ["mambalrp"], ALL_RULES, api_name="/explain_image")


def test_heldout_evaluation_table(client):
    table, curves, scatter, note = client.predict(["mambalrp", "gi"], 30, api_name="/heldout_eval")
    assert "zoo organism's held-out sentences" in note and "30 sentences" in note
    rows = table["data"] if isinstance(table, dict) else table
    by = {r[0]: r for r in rows}
    assert set(by) == {"MambaLRP", "Gradient×Input", "Random"}
    assert rows[0][0] == "MambaLRP"  # sorted by ΔA^F
    assert by["MambaLRP"][1] > by["Gradient×Input"][1]
    assert by["MambaLRP"][5] >= 0.9  # evidence precision@k
    assert curves is not None and scatter is not None


def test_heldout_on_an_uploaded_file_and_sst2_offline(client, tmp_path):
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    path = tmp_path / "mine.jsonl"
    rows = [
        ("a lovely and superb film", "positive"),
        ("the plot was dull and awful", "negative"),
        ("weak script but a brilliant cast", "positive"),
        ("a boring sequel", "negative"),
    ]
    path.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in rows))
    table, curves, scatter, note = client.predict(
        ["mambalrp", "gi"], 20, "file", handle_file(str(path)), "label", "", "", api_name="/heldout_eval"
    )
    by = {r[0]: r for r in (table["data"] if isinstance(table, dict) else table)}
    assert set(by) == {"MambaLRP", "Gradient×Input", "Random"} and by["MambaLRP"][5] in ("", None)
    assert "your sentence file" in note and "4 sentences" in note and "`positive`" in note
    with pytest.raises(AppError, match="(?i)offline|datasets"):
        client.predict(["mambalrp"], 20, "sst2", None, "predicted", "", "", api_name="/heldout_eval")


def test_long_range_points_at_the_key(client):
    from backend.lrp import models

    held = models.load(models.LONG_ZOO).heldout[3]
    text = " ".join(held["tokens"][:-1])
    heat, plot, tops = client.predict(text, ["mambalrp", "gi"], api_name="/explain_longrange")
    assert tops["target"] == held["answer"]
    best = tops["top_tokens"]["mambalrp"][0]
    assert best["position"] == held["key_position"] + 1 and best["distance"] >= 40
    assert len(tops["top_tokens"]["mambalrp"]) == 10
    assert plot is not None and "MambaLRP" in heat


def test_image_example_and_explanation(client):
    from gradio_client import handle_file

    img = client.predict(5, api_name="/image_example")
    out, md, png = client.predict(
        handle_file(img), ["mambalrp", "gi", "mambaattr"], ALL_RULES, api_name="/explain_image"
    )
    assert "Prediction" in md and "inside the object" in md
    assert _path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    kinds = [t["type"] for t in traces(out)]  # the picture, then each method's map over it
    assert kinds.count("heatmap") == 3 and kinds[0] == "image" and len(kinds) == 7


@pytest.mark.alone  # six explanations at once, each answered within its 120 s
def test_parallel_clients_get_their_own_answers(app_url):
    from gradio_client import Client

    texts = [
        "a superb and lovely story",
        "the ending was awful and dull",
        "weak script but brilliant cast and lovely music",
    ]
    solo = {t: explain(Client(app_url, verbose=False), t, methods=("mambalrp",))[-1] for t in texts}
    got, errors = {}, []

    def worker(t):
        try:
            got[t] = explain(Client(app_url, verbose=False), t, methods=("mambalrp",), rules=ALL_RULES)[-1]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in texts * 2]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors
    for t in texts:
        assert got[t]["relevance"] == solo[t]["relevance"]


def test_shared_models_left_as_committed(client):
    from safetensors.torch import load_file

    from backend.core.interventions import count_hooks
    from backend.core.presets import ZOO_ROOT
    from backend.lrp import models

    explain(client, "good film", rules=["norm"])
    for preset in (models.TEXT_ZOO, models.LONG_ZOO, models.IMAGE_ZOO):
        m = models.load(preset).model
        assert count_hooks(m) == 0
        saved = load_file(str(ZOO_ROOT / preset.path_or_id / "model.safetensors"))
        state = m.state_dict()
        for k, v in saved.items():
            assert torch.equal(state[k], v), (preset.path_or_id, k)


def test_requests_cross_the_zerogpu_boundary_check(client):
    """The conftest's boundary check is live for client tests: a model request is checked once at its
    outermost marked call (the handler), and passes."""
    from backend.core import zerogpu

    assert zerogpu._CHECK
    before = zerogpu.BOUNDARY_CHECKS["calls"]
    explain(client, "the movie was great", methods=("gi",))
    assert zerogpu.BOUNDARY_CHECKS["calls"] == before + 1


def test_views_say_what_they_plot():
    """Long-range rows underline their own method's top tokens; bars and hover match the heatmap's
    scale; words the zoo vocabulary lacks are named; held-out progress names methods."""
    from backend.lrp import heldout, models
    from backend.lrp import service as svc
    from components.relevance import figures as R

    lm = models.load(models.LONG_ZOO)
    res = svc.longrange(lm, " ".join(lm.heldout[3]["tokens"][:-1]), ["mambalrp", "gi"])
    mark = {m: {d["position"] for d in t} for m, t in res["top_tokens"].items()}
    assert mark["mambalrp"] != mark["gi"]
    heat = R.heatmap_html(res, True, mark)
    rows = heat.split("font-weight:600;font-size:0.85rem'>")[1:]
    for meth, row in zip(res["methods"], rows):
        spans = row.split("class='wb-token")[1:]  # template tokens add a class
        assert {i for i, sp in enumerate(spans) if "border-bottom:3px" in sp} == mark[meth], meth
    lplot = R.longrange_plot(res)
    assert all(tr.cliponaxis is False for tr in lplot.data)

    m = svc.load_text()
    res = svc.explain_text(m, "the plot was dull but the cast was brilliant 😀 猫", ["mambalrp", "gi"])
    assert res["unknown_words"] == ["😀", "猫"]
    assert "Not in this model's vocabulary" in R.heatmap_html(res) and "😀, 猫" in R.heatmap_html(res)
    assert svc.explain_text(m, "the cast was brilliant", ["gi"])["unknown_words"] == []
    raw = {k: np.asarray(v) for k, v in res["relevance"].items()}
    from components.relevance.figures import template_of

    tpl = template_of(res)
    typed = [i for i in range(len(res["tokens"])) if i not in tpl]
    assert tpl and typed  # the zoo's prompt format around the typed text
    raw = {k: v[typed] for k, v in raw.items()}  # the bars leave the template out, as the heatmap's scale does
    vmax = max(np.abs(v).max() for v in raw.values())
    off = R.position_plot(res, False)
    assert list(off.data[0].x) == typed and "template tokens left out" in off.layout.title.text
    assert np.allclose(off.data[0].y, raw["mambalrp"]) and "raw" not in off.data[0].hovertemplate
    assert f"{vmax:.3g}" in R.heatmap_html(res, False)  # the heatmap's scale is the bars' axis
    on = R.position_plot(res, True)
    assert np.allclose(on.data[1].y, raw["gi"] / np.abs(raw["gi"]).max())
    assert np.allclose(on.data[1].customdata, raw["gi"]) and "raw relevance %{customdata" in on.data[1].hovertemplate
    everything = R.position_plot(res, True, template=True)  # the toggle puts them back
    assert len(everything.data[0].x) == len(res["tokens"])

    said = []
    heldout.heldout_sentiment(m, ["mambalrp", "gi"], n=10, progress=lambda f, d: said.append(d))
    assert any(d.startswith("MambaLRP:") for d in said) and any(d.startswith("Gradient×Input:") for d in said)
    assert not any(d.startswith(("gi:", "mambalrp:")) for d in said)


def test_image_heatmaps_give_exact_values_on_hover():
    from backend.lrp import service as svc
    from backend.core.colors import is_themed
    from components.relevance import figures as R

    m = svc.load_image()
    res = svc.explain_image(m, svc.example_image(m, 3), ["mambalrp", "gi"])
    fig = R.image_plot(res)
    assert is_themed(fig)
    maps = [t for t in fig.data if t.customdata is not None]
    axis = fig.layout.coloraxis  # one shared scale and colour bar for every map
    assert len(maps) == 2 and all(t.coloraxis == "coloraxis" for t in maps) and (axis.cmin, axis.cmax) == (-1, 1)
    for t, meth in zip(maps, res["methods"]):
        raw = np.asarray(res["maps"][meth])
        assert np.allclose(np.asarray(t.customdata), raw)
        assert np.allclose(np.asarray(t.z), raw / np.abs(raw).max())
        assert "relevance %{customdata" in t.hovertemplate and R.LABELS[meth] in t.hovertemplate
    assert len(fig.layout.shapes) == 3  # the ground-truth box on the input and on each map
