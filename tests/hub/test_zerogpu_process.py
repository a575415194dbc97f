"""Hub mode under ZeroGPU's process model, without ZeroGPU: the app is served with the stand-in
`spaces` package (tests/helpers/zerogpu), whose GPU runs every marked call in a forked child with
pickled arguments and results. The checkpoints preload in the main process at start; every tab's
main endpoint, called twice, answers as the app run in-process does (the hub suite's own server),
although whatever a call loads or caches dies with its worker."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(900)
KEY = "meta-llama/Llama-2-7b-hf"
PROMPT = "The No Limits Business Woman Podcast"  # a memorized LAION prompt of the paper's list


@pytest.fixture(scope="module")
def forked(hub_forked_server):
    from gradio_client import Client

    url, log, workers = hub_forked_server
    return Client(url, verbose=False), workers, log


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    from PIL import Image
    from skimage import data

    p = tmp_path_factory.mktemp("img") / "coffee.png"
    Image.fromarray(data.coffee()).resize((96, 64)).save(p)
    return str(p)


def _plain(x):
    """An answer without what differs between two servers: files are named by their kind, not
    their temporary paths; plots are compared as data, not as JSON text (whose key order may
    differ); floats are rounded at float32's precision."""
    if isinstance(x, dict) and x.get("type") == "plotly" and isinstance(x.get("plot"), str):
        x = {**x, "plot": json.loads(x["plot"])}
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items() if k not in ("url", "path", "orig_name", "meta")}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, float):
        return float(f"{x:.5g}")
    if isinstance(x, str):
        if x.startswith(("/", "http")) and Path(x.split("?")[0]).suffix:
            return f"<file {Path(x).suffix}>"
        return re.sub(r"/[^\s'\"<>]*/gradio/[^\s'\"<>]*", "<file>", x)
    return x


def _walk(a, b, path=""):
    """Print where two answers differ (pytest shows it with the failure)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in set(a) | set(b):
            _walk(a.get(k), b.get(k), path + "." + str(k))
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, path + f"[{i}]")
    elif a != b:
        print("differs at", path, repr(a)[:300], "|", repr(b)[:300])


def calls(image):
    from gradio_client import handle_file

    return {
        "relevance": lambda c: c.predict(
            "the plot was dull but the cast was brilliant",
            ["mambalrp", "gi"],
            ["norm", "silu", "ssm", "gate"],
            "was",
            True,
            "state-spaces/mamba-130m-hf",
            api_name="/explain_text",
        )[-1],
        "features": lambda c: c.predict(handle_file(image), None, api_name="/analyse_image")[1:],
        "memorization": lambda c: c.predict(PROMPT, api_name="/memo_check")[0],
        "math_neurons": lambda c: c.predict(
            "Tom has 23 pens and finds 45 more. How many pens does he have now?",
            "MathNeuro",
            3,
            0.0,
            8,
            api_name="/mn_ask",
        ),
        "adapters": lambda c: c.predict(KEY, "model.layers.0.self_attn.q_proj", 4, "pissa", api_name="/analyse")[2],
    }


def test_every_tab_answers_twice_in_forked_workers_as_in_process(forked, hub_client, image):
    client, workers, log = forked
    for tab, call in calls(image).items():
        want = _plain(call(hub_client))
        n = len(workers.read_text().splitlines()) if workers.exists() else 0
        first, second = _plain(call(client)), _plain(call(client))
        assert len(workers.read_text().splitlines()) >= n + 2, f"{tab}: its calls did not run in workers"
        if first != want:
            _walk(want, first)
        assert first == want, f"{tab}: a forked worker's answer differs from the in-process one"
        assert second == want, f"{tab}: the second call differs (state kept only in a worker?)"
    text = log.read_text()
    assert "internal error" not in text, text[-3000:]


def test_checkpoints_preload_in_the_main_process_and_workers_leave_it_alone(forked):
    client, _workers, _log = forked
    store = client.predict(api_name="/status")[1]["model_store"]
    loaded = {m["id"].split("|")[0] for m in store["models"]}
    for repo in (
        "state-spaces/mamba-130m-hf",
        "state-spaces/mamba-1.4b-hf",
        "CompVis/stable-diffusion-v1-4",
        "meta-llama/Llama-3.2-1B-Instruct",
        KEY,
    ):
        assert any(repo in m for m in loaded), (repo, loaded)
    assert any("llava" in m for m in loaded)
    # the main process loaded each once, at start; the workers' loads (none were needed) stay theirs
    assert store["evictions"] == 0 and all(m["in_use"] == 0 for m in store["models"])


def test_a_refusal_in_a_worker_reaches_the_user_as_it_does_in_process(forked, hub_client):
    def refusal(c):
        with pytest.raises(Exception) as e:
            c.predict(KEY, "no.such.layer", 4, "pissa", api_name="/analyse")
        return str(e.value)

    want = refusal(hub_client)
    assert "is not a linear layer" in want and refusal(forked[0]) == want


MATH = [
    {"question": f"Ann has {a} pens and buys {b} more. How many pens does she have?", "answer": str(a + b)}
    for a, b in ((12, 7), (30, 45), (8, 9), (61, 23))
]


def test_a_visitors_own_math_set_outlives_the_call_that_named_it(forked, tmp_path):
    """Named in one call and scored in the next: the set must be kept by the main process (a set
    registered in a worker would die with it)."""
    from gradio_client import Client, handle_file

    client = Client(forked[0].src, verbose=False)  # its own session: the named set is session state
    path = tmp_path / "sums.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in MATH))
    card = client.predict(handle_file(str(path)), "", api_name="/mn_math")
    assert "sums.jsonl (4 items)" in card and "GSM8K" not in card
    html, _fig, table, _layers = client.predict("MathNeuro", 3, 0.0, 8, api_name="/mn_evaluate")
    math_rows = [r for r in table["data"] if r[0] == "math"]
    assert math_rows and {r[2] for r in math_rows} <= {x["answer"] for x in MATH}, math_rows


def test_a_visitors_own_model_loads_once_in_the_main_process_for_every_worker(forked, hub_own_models):
    """A user's own model picked in a tab is checked and loaded in the main process before the
    worker forks: two calls, each in its own worker, answer alike and neither worker reads its
    weights (a worker that had to would have it mirrored into the main process, as /status says)."""
    client, workers, _log = forked
    own = str(hub_own_models / "own-qwen2")
    n = len(workers.read_text().splitlines()) if workers.exists() else 0
    first = client.predict(own, api_name="/layers")
    second = client.predict(own, api_name="/layers")
    assert len(workers.read_text().splitlines()) >= n + 2  # each call ran in a worker
    names = [c[1] for c in first[0]["choices"]]
    assert "model.layers.0.self_attn.q_proj" in names and _plain(second) == _plain(first)
    status = client.predict(api_name="/status")[1]
    assert any(m["id"].startswith("local:") and "/own-qwen2@" in m["id"] for m in status["model_store"]["models"])
    # loaded in the main process before the first worker forked: no worker had to load it itself
    assert not any("own-qwen2" in m for m in status["mirrored"]), status["mirrored"]
