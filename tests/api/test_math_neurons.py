"""The Math neurons tab through gradio_client: every endpoint, bad input, parallel clients, and
the shared model left bit-identical to the committed weights."""

import json
import threading
from pathlib import Path

import pytest
import torch

from tests.helpers.figures import names, title, traces

pytestmark = pytest.mark.timeout(300)

torch.set_num_threads(1)


def evaluate(client, method="MathNeuro", k=15, factor=0.0, n=64):
    return client.predict(method, k, factor, n, api_name="/mn_evaluate")


def test_evaluate_prunes_math_and_lists_samples(client):
    html, accfig, table, plot = evaluate(client)
    assert "math" in html and "unmodified" in html and "pts" in html
    bars = traces(accfig)  # the accuracy before and after, per set
    assert [t["type"] for t in bars] == ["bar", "bar"] and names(accfig)[0] == "unmodified"
    assert all(t["x"] == ["math", "non-math"] for t in bars) and "K 15 %" in names(accfig)[1]
    rows = table["data"] if isinstance(table, dict) else table
    assert len(rows) == 6 and {r[0] for r in rows} == {"math", "non-math"}
    assert all(r[3].endswith(("✓", "✗")) for r in rows)
    assert [t["type"] for t in traces(plot)] == ["bar"] and "share of each layer" in title(plot)


def test_bad_input_is_a_clear_error(client):
    from gradio_client.exceptions import AppError

    # One rule for every number: refused with the control's range, whatever the endpoint.
    with pytest.raises(AppError, match=r"K must be between 1 % and 30 % \(got 500 %\)"):
        evaluate(client, k=500)
    with pytest.raises(AppError, match="scale factor must be between 0 and 2"):
        evaluate(client, factor=5)
    with pytest.raises(AppError, match="number of samples must be a whole number between 1 and 64"):
        evaluate(client, n=0)
    with pytest.raises(AppError, match=r"K must be between 1 % and 30 % \(got 'nan'\)"):
        client.predict("nan", 64, api_name="/mn_figure2")
    with pytest.raises(AppError, match=r"scale factor must be between 0 and 2 \(got 'inf'\)"):
        client.predict("MathNeuro", 15, "inf", 64, api_name="/mn_export")
    with pytest.raises(AppError, match="(?i)magic.*(not in|choices)|Unknown method"):
        evaluate(client, method="magic")
    with pytest.raises(AppError, match="Type a question"):
        client.predict("  ", "MathNeuro", 15, 0.0, 64, api_name="/mn_ask")


def test_figure2_curve_consistency_and_export(client, tmp_path):
    fig2 = client.predict(15, 64, api_name="/mn_figure2")
    curve = client.predict("MathNeuro", 15, 64, api_name="/mn_scale_curve")
    cons = client.predict(15, 64, api_name="/mn_consistency")
    assert names(fig2) == [
        "unmodified",
        "MathNeuro",
        "Wanda (no subtraction)",
        "Random (same count)",
        "LAPE (MLP neurons)",
    ] and "top 15 %" in title(fig2)
    math, nonmath = traces(curve)  # accuracy per scale factor, both sets at the same factors
    assert (math["name"], nonmath["name"]) == ("math", "non-math") and math["x"] == nonmath["x"]
    assert len(math["x"]) == len(math["y"]) > 2 and "K = 15 %" in title(curve)
    assert names(cons) == ["mean overlap", "worst subset"] and "64-sample set" in title(cons)
    files = client.predict("MathNeuro", 15, 0.0, 64, api_name="/mn_export")
    paths = [Path(f if isinstance(f, str) else f.get("path", f.get("name"))) for f in files]
    js = [p for p in paths if p.suffix == ".json"][0]
    png = [p for p in paths if p.suffix == ".png"][0]
    state = json.loads(js.read_text())
    assert set(state["figure2"]) == {"mathneuro", "wanda", "random", "lape"}
    assert [c["factor"] for c in state["scale_curve"]][:2] == [0.0, 0.5]
    assert state["modified"]["math"] < state["baseline"]["math"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_parallel_clients_see_only_their_own_setting(app_url):
    """Two clients ask the same question at once under different interventions; each gets the
    answer it gets alone, and the shared model ends bit-identical to the committed weights."""
    from gradio_client import Client

    from backend.mathneuro import service
    from backend.zoo import load

    q = "bob has 57 cards . he loses 19 . how many cards are left ?"
    settings = [
        ("MathNeuro", 15, 0.0, 64),
        ("Random (same count)", 15, 0.0, 64),
        ("MathNeuro", 15, 1.0, 64),
        ("Wanda (no subtraction)", 10, 0.0, 32),
    ]
    alone = [Client(app_url, verbose=False).predict(q, *s, api_name="/mn_ask") for s in settings]
    results: dict[int, str] = {}

    def worker(i):
        c = Client(app_url, verbose=False)
        for _ in range(2):
            results.setdefault(i, c.predict(q, *settings[i], api_name="/mn_ask"))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(settings))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert [results[i] for i in range(len(settings))] == alone
    fresh = load("math-llama").state_dict()
    shared = service.bench("zoo").model.state_dict()
    assert all(torch.equal(shared[k], v) for k, v in fresh.items())


def test_figure2_labels_of_coinciding_points_do_not_overlap():
    """Random pruning often lands on the unmodified point: their labels take different sides."""
    from components.math_neurons.figures import figure2_plot

    base = {"math": 0.76, "nonmath": 1.0}
    res = {
        "mathneuro": {"math": 0.1, "nonmath": 0.99},
        "random": {"math": 0.75, "nonmath": 1.0},
        "wanda": {"math": 0.2, "nonmath": 0.9},
        "lape": {"math": 0.74, "nonmath": 0.99},
    }
    fig = figure2_plot(base, res, 0.05)
    pos = {t.name: (t.x[0], t.y[0], t.textposition) for t in fig.data}
    near = [
        (a, b) for a in pos for b in pos if a < b and abs(pos[a][0] - pos[b][0]) < 8 and abs(pos[a][1] - pos[b][1]) < 8
    ]
    assert near, "the example must contain coinciding points"
    assert all(pos[a][2] != pos[b][2] for a, b in near), pos
