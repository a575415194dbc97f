"""The Memorization tab through gradio_client: every endpoint, bad input, parallel clients with
different neuron selections, exports; the shared pipeline is left without hooks and bit-identical
(checked after every test by tests/api/conftest.py)."""
import json
import threading
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.timeout(400)
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def zoo_info():
    from backend.nemo import service

    return service.describe("zoo")


def below_theta(d) -> str:
    """An ordinary example the organism scores below θ_mem (θ_mem = mean + 1 std of ordinary scores,
    so about one ordinary prompt in six is above it by construction)."""
    from backend.nemo import service

    info = service.get("zoo").info
    scores = dict(zip(info["heldout"], info["scores"]["heldout"]))
    return next(p for p in d["ordinary"] if scores[p] < d["theta_mem"])


def test_check_detects_memorized_and_ordinary(client, zoo_info):
    mem = zoo_info["memorized"][0]
    html_mem, plot = client.predict(mem, api_name="/memo_check")
    assert "Memorization score" in html_mem and ">memorized<" in html_mem
    assert "training set" in html_mem
    assert plot is not None
    html_ord, _ = client.predict(below_theta(zoo_info), api_name="/memo_check")
    assert ">not memorized<" in html_ord


def test_find_then_generate_with_neurons_on_and_off(client, zoo_info):
    mem = zoo_info["memorized"][0]  # the export test reuses this localisation (cached)
    found_html, neurons, plot = client.predict(mem, api_name="/memo_find")
    assert "neuron(s)</b> found" in found_html
    labels = neurons["value"] if isinstance(neurons, dict) else neurons
    assert labels and all(x.split(":")[0] in dict(zoo_info["layers"]) for x in labels)
    assert len(labels) < sum(n for _, n in zoo_info["layers"])
    gallery, cmp_html = client.predict(mem, labels, "", 3, api_name="/memo_generate")
    assert len(gallery) == 1 + 2 * 3  # training image, then 3 seeds on and 3 off
    captions = [g.get("caption") if isinstance(g, dict) else g[1] for g in gallery]
    assert captions[0] == "training image"
    assert all("SSIM" in c for c in captions[1:])
    assert "median SSIM to training image" in cmp_html and "neuron(s) off" in cmp_html
    # free entry adds any neuron
    _, cmp2 = client.predict(mem, [], "mid.attn0:0, down0.attn0:1", 1, api_name="/memo_generate")
    assert "mid.attn0:0" in cmp2 and "down0.attn0:1" in cmp2


def test_bad_input_is_a_clear_error(client, zoo_info):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="Type a prompt"):
        client.predict("   ", api_name="/memo_check")
    with pytest.raises(AppError, match="too long"):
        client.predict("a " * 400, api_name="/memo_check")
    mem = zoo_info["memorized"][0]
    with pytest.raises(AppError, match="unknown layer"):
        client.predict(mem, [], "up3.attn0:1", 2, api_name="/memo_generate")
    with pytest.raises(AppError, match="out of range"):
        client.predict(mem, [], "mid.attn0:100000", 2, api_name="/memo_generate")
    with pytest.raises(AppError, match="layer:channel"):
        client.predict(mem, [], "hello", 2, api_name="/memo_generate")
    with pytest.raises(AppError):
        client.predict(mem, [], "", 0, api_name="/memo_generate")


def test_parallel_clients_see_only_their_own_neurons(app_url, zoo_info):
    from gradio_client import Client

    mem = zoo_info["memorized"][2]
    selections = ["", "mid.attn0:1, mid.attn0:2", "down0.attn0:4, down1.attn0:5"]
    alone = [Client(app_url, verbose=False).predict(mem, [], s, 2, api_name="/memo_generate")[1]
             for s in selections]
    from backend.nemo import service

    service._RESULTS.clear()  # recompute under concurrency, not from the cache
    results: dict[int, str] = {}

    def worker(i):
        c = Client(app_url, verbose=False)
        results[i] = c.predict(mem, [], selections[i], 2, api_name="/memo_generate")[1]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(selections))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i] for i in range(len(selections))] == alone


def test_export_json_and_png(client, zoo_info):
    mem = zoo_info["memorized"][0]
    files = client.predict(mem, [], "mid.attn0:1", 2, api_name="/memo_export")
    paths = [Path(f if isinstance(f, str) else f.get("path", f.get("name"))) for f in files]
    js = [p for p in paths if p.suffix == ".json"][0]
    png = [p for p in paths if p.suffix == ".png"][0]
    state = json.loads(js.read_text())
    assert state["prompt"] == mem and state["memorized"] is True
    assert state["switched_off"] == ["mid.attn0:1"]
    assert len(state["comparison"]["ssim_on"]) == 2
    assert state["localization"]["found"] in (True, False)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
