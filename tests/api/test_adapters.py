"""The Adapters tab through gradio_client: analysis, error table, streamed race with stop,
PiSSA→LoRA conversion, bad input, parallel clients."""

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

MODEL = "pissa-toy"


def _read(path):
    return json.loads(open(path).read())


@pytest.mark.timeout(120)
def test_analyse_reports_exact_split_and_exports(client):
    spec, hist, md, files = client.predict(MODEL, "fc2", 8, "pissa", api_name="/analyse")
    assert "fc2" in md and "rank **8**" in md
    js = [f for f in files if f.endswith(".json")][0]
    png = [f for f in files if f.endswith(".png")][0]
    a = _read(js)
    assert a["reconstruction_rel_error"] <= 1e-5
    assert a["init_output_rel_gap"] <= 1e-5
    assert len(a["singular_values"]) == 128 and a["rank"] == 8
    assert a["w_res_absmax"] < a["w_absmax"]
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    # the fast init (pissa_niter_4) is exact too
    a4 = _read(
        [f for f in client.predict(MODEL, "fc2", 8, "pissa_niter_4", api_name="/analyse")[3] if f.endswith(".json")][0]
    )
    assert a4["reconstruction_rel_error"] <= 1e-5


def test_layer_list_follows_the_model(client):
    layer, _rank = client.predict(MODEL, api_name="/layers")
    assert layer["value"] == "fc2"
    assert [c[1] for c in layer["choices"]] == ["fc1", "fc2", "head"]


@pytest.mark.timeout(120)
def test_error_table_orders_methods(client):
    table, bars, heat, md, files = client.predict(MODEL, 8, "qpissa-5", api_name="/errors")
    rows = {r[0]: dict(zip(table["headers"], r)) for r in table["data"]}
    assert set(rows) == {"fc1", "fc2", "head"}
    for name, r in rows.items():
        assert r["qlora"] == 0
        assert r["qpissa-5"] > r["loftq-1"] > 0, name
    assert "QPiSSA-5 on **3/3**" in md
    data = _read([f for f in files if f.endswith(".json")][0])
    assert data["heatmap"]["method"] == "qpissa-5" and len(data["heatmap"]["values"]) == 3


@pytest.mark.timeout(120)
def test_race_streams_every_second_and_pissa_wins(client):
    job = client.submit(MODEL, ["lora", "pissa"], 3, 100, 8, 0, api_name="/race")
    stamps = []
    for _ in job:
        stamps.append(time.perf_counter())
    outputs = job.outputs()
    # cadence as the server emitted it: every status line carries the race's elapsed time
    server_t = [
        float(m.group(1))
        for o in outputs
        if isinstance(o[1], str)
        for m in [re.search(r"(?:in |\()([\d.]+) s", o[1])]
        if m
    ]
    server_t.sort()
    assert len(server_t) >= 3
    gaps = sorted(b - a for a, b in zip(server_t, server_t[1:]))
    # The tab renders every 0.35 s (heartbeats while a step runs). On an oversubscribed CPU the
    # whole process can be descheduled for a moment, so the promise is checked on the 90th
    # percentile (statuses print 0.1 s precision); benchmarks/pissa.py reports the maximum.
    assert gaps[int(0.9 * (len(gaps) - 1))] <= 1.0 + 0.1, gaps
    assert gaps[len(gaps) // 2] <= 0.5 + 0.1, gaps
    # as the client received them (transport included): typically well under a second
    client = sorted(b - a for a, b in zip(stamps, stamps[1:]))
    assert client[len(client) // 2] <= 1.0, client
    # steps coalesced: at most four updates a second went out (600 steps, far fewer updates)
    assert len(outputs) <= 4 * (server_t[-1] + 1) + 2, (len(outputs), server_t[-1])
    final = [o for o in outputs if isinstance(o[2], dict) and "pissa_beats_lora" in o[2]][-1]
    assert final[2]["pissa_beats_lora"] == {"seeds": 3, "wins": 3}
    assert "**finished**" in final[1]
    files = outputs[-1][3]
    assert any(f.endswith(".png") for f in files) and any(f.endswith(".json") for f in files)
    curves = _read([f for f in files if f.endswith(".json")][0])["curves"]
    assert len(curves) == 6 and all(len(c["loss"]) == 100 for c in curves)


@pytest.mark.alone  # a timing check: Stop answers within a second of the request
@pytest.mark.timeout(120)
def test_stop_button_ends_the_race(app_url):
    from gradio_client import Client

    c = Client(app_url, verbose=False)
    job = c.submit(MODEL, ["lora", "pissa", "full"], 3, 500, 8, 0, api_name="/race")
    seen = 0
    for out in job:
        seen += 1
        if isinstance(out[1], str) and "steps in" in out[1]:
            break
    t0 = time.perf_counter()
    answer = c.predict(api_name="/race_stop")
    # Stop answers once the race has ended, and says how long that took after the request came
    m = re.fullmatch(r"Race stopped, ([\d.]+) s after the request\.", answer)
    assert m and float(m.group(1)) <= 1.0, answer
    while not job.done():
        time.sleep(0.1)
        assert time.perf_counter() - t0 < 20
    finals = [o for o in job.outputs() if isinstance(o[1], str) and "**stopped**" in o[1]]
    assert finals, [o[1] for o in job.outputs()][-3:]
    # nothing left running for this session, and Stop says so
    assert c.predict(api_name="/race_stop") == "No race is running: nothing to stop."


@pytest.mark.timeout(120)
def test_conversion_gives_the_same_outputs(client):
    md, r = client.predict(MODEL, 8, 20, "fc2", api_name="/convert")
    assert r["converted_rank"] == 16
    assert r["rel_diff"] < 1e-5 and r["change_from_base"] > 1e-2
    assert "the same outputs" in md


@pytest.mark.parametrize(
    "args,api,msg",
    [
        ((MODEL, "head", 64, "pissa"), "/analyse", "rank must be between 1 and 10"),
        ((None, "fc2", 8, "pissa"), "/analyse", "Pick a model"),
        ((MODEL, [], 2, 10, 8, 0), "/race", "Tick at least one method"),
        ((MODEL, ["lora"], 2, 10, 8, 5), "/race", "learning rate must be between 0 and 0.99"),
        # issue 19: one rule for numbers (the control's valid range, nothing computed) and unknown layers
        ((MODEL, "fc2", 0, "pissa"), "/analyse", "The rank r must be a whole number between 1 and 128"),
        ((MODEL, "fc2", 500, "pissa"), "/analyse", "between 1 and 128 (got 500)"),
        ((MODEL, "fc2", "nan", "pissa"), "/analyse", "The rank r must be a whole number between 1 and 128 (got 'nan')"),
        ((MODEL, "fc2", 2.5, "pissa"), "/analyse", "The rank r must be a whole number"),
        ((MODEL, "fc9", 8, "pissa"), "/analyse", "not a linear layer of pissa-toy: choose one of fc1, fc2, head"),
        ((MODEL, ["lora"], 9, 10, 8, 0), "/race", "The number of seeds must be a whole number between 1 and 5 (got 9)"),
        ((MODEL, ["lora"], 2, 5000, 8, 0), "/race", "The number of steps must be a whole number between 10 and 500"),
        ((MODEL, ["lora"], 2, 10, 8, "nan"), "/race", "learning rate must be between 0 and 0.99 (got 'nan')"),
        ((MODEL, ["lora"], 2, 10, 8, "inf"), "/race", "learning rate must be between 0 and 0.99 (got 'inf')"),
        (
            (MODEL, 8, 0, "fc2"),
            "/convert",
            "The number of PiSSA steps before converting must be a whole number between 1 and 100",
        ),
        ((MODEL, 0, "qpissa-1"), "/errors", "The rank r"),
    ],
)
def test_bad_input_gives_a_clear_message(client, args, api, msg):
    with pytest.raises(Exception) as e:
        client.predict(*args, api_name=api)
    assert msg in str(e.value)


@pytest.mark.timeout(120)
def test_parallel_clients_get_their_own_answers(app_url):
    from gradio_client import Client

    def one(args):
        layer, rank = args
        files = Client(app_url, verbose=False).predict(MODEL, layer, rank, "pissa", api_name="/analyse")[3]
        a = _read([f for f in files if f.endswith(".json")][0])
        return a["layer"], a["rank"]

    jobs = [("fc1", 4), ("fc2", 8), ("head", 2), ("fc2", 16)]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one, jobs)) == jobs


@pytest.mark.timeout(120)
def test_error_table_marks_layers_narrower_than_the_rank(client):
    table, _bars, _heat, md, _files = client.predict(MODEL, 16, "qpissa-1", api_name="/errors")
    rows = {r[0]: dict(zip(table["headers"], r)) for r in table["data"]}
    assert rows["head"]["qpissa-1"] == "n/a"  # head is 10 × 128
    assert float(rows["fc2"]["qpissa-1"]) > float(rows["fc2"]["loftq-1"]) > 0
    assert "n/a on head" in md and "/2** layers" in md  # two layers compared


def test_conversion_rank_above_the_layers_own_is_a_clear_error(client):
    """The toy's head has 10 outputs: a rank-15 conversion cannot fit it (found by the fuzzer); the
    bound is the chosen layer's, so fc2 (128 × 128) takes rank 32 (issue 26)."""
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="rank must be between 1 and 10 for the"):
        client.predict(MODEL, 15, 5, "head", api_name="/convert")
    md, r = client.predict(MODEL, 32, 5, "fc2", api_name="/convert")
    assert r["converted_rank"] == 64 and r["layers"] == ["fc2"] and "the same outputs" in md
