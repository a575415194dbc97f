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
    html_mem, plot, stats = client.predict(mem, api_name="/memo_check")
    assert "Memorization score" in html_mem and ">memorized<" in html_mem
    assert "training set" in html_mem
    assert plot is not None
    assert "Neuron statistics" in stats and "160 of 160 ordinary training captions" in stats
    html_ord, _, _ = client.predict(below_theta(zoo_info), api_name="/memo_check")
    assert ">not memorized<" in html_ord


def test_find_then_generate_with_neurons_on_and_off(client, zoo_info):
    mem = zoo_info["memorized"][0]  # the export test reuses this localisation (cached)
    found_html, neurons, plot = client.predict(mem, api_name="/memo_find")
    assert "neuron(s)</b> found" in found_html
    assert "Search at guidance 0 (detection and generations: 4)" in found_html
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
    # numbers it cannot take are refused with the valid range, before anything is computed
    for bad in (0, 9, 2.5, "nan", "inf"):  # JSON carries no NaN float (the unit tests send those)
        with pytest.raises(AppError, match="number of seeds must be a whole number between 1 and 8"):
            client.predict(mem, [], "", bad, api_name="/memo_generate")
    with pytest.raises(AppError, match="whole number between 1 and 10"):  # the zoo's 10 memorized prompts
        client.predict("-inf", api_name="/memo_table")


def test_parallel_clients_see_only_their_own_neurons(app_url, zoo_info):
    from gradio_client import Client

    mem = zoo_info["memorized"][2]
    selections = ["", "mid.attn0:1, mid.attn0:2", "down0.attn0:4, down1.attn0:5"]
    alone = [Client(app_url, verbose=False).predict(mem, [], s, 2, api_name="/memo_generate")[1] for s in selections]
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
    # nothing switched off: the export says so and reports no "off" condition
    files = client.predict(mem, [], "", 2, api_name="/memo_export")
    state = json.loads(
        Path(
            [
                f if isinstance(f, str) else f.get("path", f.get("name"))
                for f in files
                if str(f if isinstance(f, str) else f.get("path", f.get("name"))).endswith(".json")
            ][0]
        ).read_text()
    )
    assert state["switched_off"] == [] and "No neurons switched off" in state["note"]
    assert not [k for k in state["comparison"] if k.endswith("_off")] and len(state["comparison"]["ssim_on"]) == 2


def test_batch_detection_of_a_pasted_list_and_a_file(client, zoo_info, tmp_path):
    from gradio_client import handle_file

    mem, ordinary = zoo_info["memorized"][:3], [below_theta(zoo_info)]
    table, note = client.predict("\n".join(mem + ordinary + [mem[0]]), None, api_name="/memo_batch")
    rows = table["data"]
    assert [r[0] for r in rows] == mem + ordinary  # pasted order, each prompt once
    assert [r[2] for r in rows] == ["memorized"] * 3 + ["not memorized"]
    assert [r[4] for r in rows] == ["VM"] * 3 + [""]
    assert "4 prompts, 3 above" in note
    # a CSV in the paper's format (";", a Caption column) gives the same scores
    f = tmp_path / "prompts.csv"
    f.write_text(";Caption;URL\n" + "".join(f"{i};{p};\n" for i, p in enumerate(mem + ordinary)))
    table2, _ = client.predict("", handle_file(str(f)), api_name="/memo_batch")
    assert [r[:2] for r in table2["data"]] == [r[:2] for r in rows]


def test_batch_and_statistics_bad_input(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="No prompts found"):
        client.predict("  \n ", None, api_name="/memo_batch")
    with pytest.raises(AppError, match="at most 100"):
        client.predict("\n".join(f"a red circle {i}" for i in range(101)), None, api_name="/memo_batch")
    with pytest.raises(
        AppError, match=r"whole number between 2 and 160 \(got 1\)"
    ):  # the slider refuses with its range
        client.predict(1, api_name="/memo_stats")
    from backend.nemo import service

    with pytest.raises(ValueError, match="between 2 and 160"):
        service.compute_stats(161, source="zoo")


def test_statistics_from_the_tab_change_the_z_scores(client, zoo_info):
    """The session's own statistics change its z-scores; the shared ones (every other visitor's,
    the agent tools') stay (tests/api/test_visitors.py has two sessions)."""
    import json

    from backend.nemo import service

    mem = zoo_info["memorized"][1]
    before = service.check(mem, source="zoo")
    _, z_before, _ = client.predict(mem, api_name="/memo_check")
    card = client.predict(20, api_name="/memo_stats")
    assert "first 20 of 160 ordinary training captions" in card
    _, z_after, stats = client.predict(mem, api_name="/memo_check")
    assert "first 20 of 160" in stats and json.loads(z_after["plot"]) != json.loads(z_before["plot"])
    after = service.check(mem, source="zoo")
    assert after["score"] == before["score"] and after["z"] == before["z"]
    client.predict(160, api_name="/memo_stats")  # the organism's own set again, as the session's
    _, z_back, _ = client.predict(mem, api_name="/memo_check")
    assert json.loads(z_back["plot"]) == json.loads(z_before["plot"])


def test_generations_against_an_uploaded_reference(client, zoo_info, tmp_path):
    """An uploaded image replaces the training image as the reference, at any size."""
    import numpy as np
    from gradio_client import handle_file
    from PIL import Image

    from backend.nemo import service

    mem = zoo_info["memorized"][0]
    m = service.get("zoo")
    train = (m.train_image(mem) * 255).round().astype(np.uint8)
    big = tmp_path / "train.png"
    Image.fromarray(train).resize((96, 96), Image.NEAREST).save(big)
    other = tmp_path / "other.png"
    Image.fromarray(np.full((40, 50, 3), 30, np.uint8)).save(other)
    gallery, html_same = client.predict(mem, [], "", 2, handle_file(str(big)), api_name="/memo_generate")
    captions = [g.get("caption") if isinstance(g, dict) else g[1] for g in gallery]
    assert captions[0] == "your image" and "median SSIM to your image" in html_same
    _, html_other = client.predict(mem, [], "", 2, handle_file(str(other)), api_name="/memo_generate")

    def median_on(h):
        return float(h.split("all neurons on</td><td>")[1].split("<")[0])

    assert median_on(html_same) >= 0.8 > 0.3 >= median_on(html_other)
    from gradio_client.exceptions import AppError

    tiny = tmp_path / "tiny.png"
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tiny)
    with pytest.raises(AppError, match="at least 8"):
        client.predict(mem, [], "", 1, handle_file(str(tiny)), api_name="/memo_generate")
    corrupt = tmp_path / "corrupt.png"  # a PNG header, then nothing readable
    corrupt.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not an image" * 20)
    with pytest.raises(AppError, match="could not be read"):
        client.predict(mem, [], "", 1, handle_file(str(corrupt)), api_name="/memo_generate")


# ----------------------------------------------------------------------------- hub mode
# CompVis/stable-diffusion-v1-4 as a tiny stand-in of the real classes in an offline HF cache
# (tests/helpers/standins/memorization.py). The hub library reads its cache location at import, so
# the tab runs in a child process under that environment; the child reports what it saw as JSON.


def _hub_probe(out_path: str) -> None:  # runs in the child process
    import gradio as gr
    import numpy as np

    from backend.nemo import service
    from backend.precompute import nemo_stats
    from components.memorization import layout as tab
    from components.common import TabContext

    res: dict = {}
    with gr.Blocks():  # the tab builds (it once raised on an empty memorized list)
        tab.build(TabContext(tabs=None, source="hub"))
    d = service.describe("hub")
    res["describe"] = {
        k: d[k] for k in ("model_id", "layers", "stats_plan", "guidance_scale", "search_guidance", "has_train_images")
    }
    res["n_memorized"], res["types"] = len(d["memorized"]), sorted(set(d["memorized_types"]))
    res["first_memorized"], res["first_ordinary"] = d["memorized"][0], d["ordinary"][0]
    check, find, generate, batch, sample, stats, table, export, _on_model = tab.make_handlers("hub")
    progress = lambda *a, **k: None  # noqa: E731
    score, _, stats_card = check(d["memorized"][0])
    res["score_card"], res["stats_card"] = score, stats_card
    text = sample()
    rows, note = batch(text, None, None, progress)  # no upload, the default model
    res["sample"], res["batch_rows"], res["batch_note"] = text.splitlines(), rows, note
    loc = service.find(d["memorized"][0], source="hub")
    res["find"] = {k: loc[k] for k in ("guidance_scale", "seeds", "seeds_kept", "skipped", "n_neurons")}
    res["find_card"] = find(d["memorized"][0], None, progress)[0]
    ref = np.zeros((48, 40, 3), np.uint8)
    gal, cmp_ref, _ = generate(d["memorized"][0], [], "down2.attn1:3", 1, ref)
    # the preset's 50 DDIM steps ran once above; the rest of the walk samples with 10 to stay fast
    service.get("hub").num_inference_steps = 10
    gal2, cmp_none, _ = generate(d["memorized"][0], [], "", 1, None)
    res["gallery_captions"] = [c for _, c in gal]
    res["gallery2_captions"] = [c for _, c in gal2]
    res["compare_ref"], res["compare_none"] = cmp_ref, cmp_none
    import os

    os.environ["WORKBENCH_SHARED_BUILDS"] = "1"  # the owner's setting: a recomputation is everyone's
    res["stats_50"] = stats(50)
    res["check_after_stats"] = service.check(d["memorized"][0], source="hub")["stats"]
    # the CLI job over the paper's COCO captions, then its file in use
    out = Path(out_path).parent / "stats"
    nemo_stats.main(
        [
            "--source",
            "hub",
            "--out",
            str(out),
            "--cpu",
            "--samples",
            "40",
            "--prompts",
            str(Path("assets/data/nemo/coco2014_val_10000.csv")),
        ]
    )
    os.environ["WORKBENCH_NEMO_STATS"] = str(out / "nemo-stats.safetensors")
    m = service.get("hub")
    m._stats = m._stats_source = None  # as a restart with the variable set
    res["stats_file"] = service.check(d["memorized"][1], source="hub")["stats"]
    t, _, summary = table(1, None, progress)
    res["table"], res["summary"] = t, summary
    Path(out_path).write_text(json.dumps(res, default=str))


@pytest.fixture(scope="module")
def hub_probe(tmp_path_factory):
    import os
    import subprocess
    import sys

    from tests.helpers.standins import build_cache, cache_env
    from tests.helpers.standins.memorization import REPOS

    from tests.helpers.standins import digest, repo_folder

    tmp = tmp_path_factory.mktemp("nemo-hub")
    cache = build_cache(tmp / "hub", REPOS)
    twice = build_cache(tmp / "again", REPOS)  # stand-in building is deterministic
    snaps = [repo_folder(c, "CompVis/stable-diffusion-v1-4") / "snapshots" for c in (cache, twice)]
    assert len({digest(next(s.iterdir())) for s in snaps}) == 1
    out = tmp / "probe.json"
    env = {**os.environ, **cache_env(cache), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("WORKBENCH_NEMO_STATS", None)
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [sys.executable, "-c", f"from tests.api.test_memorization import _hub_probe; _hub_probe({str(out)!r})"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(out.read_text())


def test_hub_tab_builds_with_the_papers_prompt_lists(hub_probe):
    from backend.nemo import data

    p = hub_probe
    d = p["describe"]
    assert "CompVis/stable-diffusion-v1-4" in d["model_id"]
    # SD-1.4's shape: 7 value layers (3 down blocks × 2 + mid), read from the cached config
    assert [n for n, _ in d["layers"]] == [
        "down0.attn0",
        "down0.attn1",
        "down1.attn0",
        "down1.attn1",
        "down2.attn0",
        "down2.attn1",
        "mid.attn0",
    ]
    assert p["n_memorized"] == 500 and p["types"] == ["TM", "VM"]
    assert p["first_memorized"] == data.memorized_laion()[0]["prompt"]
    assert p["first_ordinary"] == data.unmemorized_laion()[0]
    assert (d["guidance_scale"], d["search_guidance"], d["has_train_images"]) == (7.0, 0.0, False)
    assert d["stats_plan"]["n_prompts"] == 1000 and d["stats_plan"]["total"] == 10000


def test_hub_check_and_batch_name_the_papers_types_and_statistics(hub_probe):
    p = hub_probe
    assert "lists this caption as memorized (VM: verbatim memorization)" in p["score_card"]
    assert "first 1,000 of 10,000 COCO 2014 captions" in p["stats_card"]
    assert "backend.precompute.nemo_stats" in p["stats_card"]
    rows = p["batch_rows"]
    # pasted prompts are read with their runs of spaces collapsed
    assert [r[0] for r in rows] == [" ".join(x.split()) for x in p["sample"]] and len(rows) == 10
    assert [r[4] for r in rows[:5]] != [""] * 5 and all(r[4] in ("VM", "TM") for r in rows[:5])
    assert all(r[4] == "" for r in rows[5:])
    assert all(r[2] in ("memorized", "not memorized") and 0 <= r[1] <= 1 for r in rows)


def test_hub_search_generations_and_statistics(hub_probe):
    p = hub_probe
    f = p["find"]
    assert f["guidance_scale"] == 0.0 and f["seeds"] == list(range(10))
    assert set(f["seeds_kept"]) <= set(f["seeds"])
    if f["skipped"]:  # random weights: no two seeds agree above 0.428, as the seed filter decides
        assert f["seeds_kept"] == [] and "Skipped" in p["find_card"]
    assert "Search at guidance 0" in p["find_card"]
    assert p["gallery_captions"][0] == "your image" and len(p["gallery_captions"]) == 3
    assert "median SSIM to your image" in p["compare_ref"] and "down2.attn1:3" in p["compare_ref"]
    # nothing switched off: the seed's image once, not again under an "off" caption
    assert p["gallery2_captions"] == ["s0 on"] and "No reference image" in p["compare_none"]
    # the grid: the uploaded image beside the seeds; without one, the seeds alone
    assert "class='memo-ref'" in p["compare_ref"] and "alt='your image'" in p["compare_ref"]
    assert "memo-ref" not in p["compare_none"] and "data-row='on' data-seed='0'" in p["compare_none"]
    assert "first 50 of 10,000" in p["stats_50"] and p["check_after_stats"]["n_prompts"] == 50
    assert p["stats_file"]["kind"] == "file" and p["stats_file"]["n_prompts"] == 40
    assert len(p["table"]) == 1 and "no training images here" in p["summary"]
