"""Users' own models through the API: architectures the papers did not use, picked by their folder
(tests/helpers/standins, `local_models` is an allowed root), and every refusal with its reason."""

import json

import pytest


def own(local_models, name: str) -> str:
    return str(local_models / name)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "name, arch_layer",
    [("own-qwen2", "model.layers.0.self_attn.q_proj"), ("own-gemma", "model.layers.1.mlp.gate_proj")],
)
def test_adapters_analyse_a_layer_of_your_own_model(client, local_models, name, arch_layer):
    key = own(local_models, name)
    layer, _ = client.predict(key, api_name="/layers")
    names = [c[1] for c in layer["choices"]]
    assert arch_layer in names and layer["value"] in names
    assert not any(n.endswith("lm_head") for n in names)  # tied to the embeddings: not a layer of its own
    spec, hist, md, files = client.predict(key, arch_layer, 4, "pissa", api_name="/analyse")
    a = json.loads(open([f for f in files if f.endswith(".json")][0]).read())
    # the split is exact on the model's own (bfloat16) weights: PiSSA + residual = W
    assert a["rank"] == 4 and a["reconstruction_rel_error"] <= 1e-5
    assert a["layer"] == arch_layer and a["model"] == key


@pytest.mark.timeout(240)
def test_adapters_race_and_error_table_run_on_your_own_model(client, local_models):
    key = own(local_models, "own-qwen2")
    table, _bars, _heat, md, _files = client.predict(key, 4, "qpissa-1", api_name="/errors")
    assert len(table["data"]) == 2 * 7  # q, k, v, o, gate, up, down in each of the 2 layers
    assert "QPiSSA-1 beats LoftQ-1" in md
    job = client.submit(key, ["lora", "pissa"], 1, 10, 4, 0, api_name="/race")
    outputs = list(job) and job.outputs()
    final = [o for o in outputs if isinstance(o[2], dict) and "pissa_beats_lora" in o[2]][-1]
    assert "**finished**" in final[1]
    curves = json.loads(open([f for f in outputs[-1][3] if f.endswith(".json")][0]).read())["curves"]
    assert len(curves) == 2 and all(len(c["loss"]) == 10 for c in curves)


@pytest.mark.parametrize(
    "name, words",
    [
        ("own-gpt2", "GPT2LMHeadModel: PiSSA adapts nn.Linear weights, and gpt2 models use transformers' Conv1D"),
        ("own-pickle", "only safetensors checkpoints are loaded"),
        ("own-noconfig", "no config.json in"),
        ("no-such-folder", "no model at"),
    ],
)
def test_adapters_refuse_with_the_reason(client, local_models, name, words):
    with pytest.raises(Exception) as e:
        client.predict(own(local_models, name), api_name="/layers")
    assert words in str(e.value)


def test_a_path_outside_the_allowed_roots_is_refused(client, tmp_path):
    with pytest.raises(Exception) as e:
        client.predict(str(tmp_path), "fc2", 4, "pissa", api_name="/analyse")
    assert "outside the allowed model folders" in str(e.value)


def test_too_large_and_space_policy_are_checked_before_loading(client, local_models, monkeypatch):
    from backend.core import store

    key = own(local_models, "own-gemma")
    monkeypatch.setenv("WORKBENCH_CUSTOM_MAX_GB", "10KB")
    before = set(store.loaded())
    with pytest.raises(Exception) as e:
        client.predict(key, api_name="/layers")
    assert "too large for this server" in str(e.value) and "the cap is 1e-05 GB" in str(e.value)
    monkeypatch.delenv("WORKBENCH_CUSTOM_MAX_GB")
    monkeypatch.setenv("SPACE_ID", "owner/workbench")
    with pytest.raises(Exception) as e:
        client.predict("someone/their-model", api_name="/layers")
    assert "custom models are off on this Space" in str(e.value)
    assert not any("own-gemma" in k for k in set(store.loaded()) - before)  # nothing was loaded


NONMATH = [
    {"prompt": "What colour is a clear daytime sky?", "answer": "blue"},
    {"prompt": "Which animal barks?", "answer": "dog"},
    {"prompt": "What is the opposite of hot?", "answer": "cold"},
    {"prompt": "Which season comes after winter?", "answer": "spring"},
]
MATH = [
    {"question": f"Ann has {a} pens and buys {b} more. How many pens does she have?", "answer": str(a + b)}
    for a, b in ((12, 7), (30, 45), (8, 9), (61, 23))
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name, arch", [("own-qwen2", "Qwen2ForCausalLM"), ("own-llama", "LlamaForCausalLM")])
def test_math_neurons_on_your_own_model_and_non_math_file(app_url, local_models, tmp_path, name, arch):
    from gradio_client import Client, handle_file

    client = Client(app_url, verbose=False)  # its own session: the non-math set is session state
    key = own(local_models, name)
    # the non-math set is session state, not returned; a new pick also empties the two file boxes
    card, math_box, nonmath_box = client.predict(key, api_name="/mn_model")
    assert math_box is None and nonmath_box is None
    assert "GSM8K" in card and "last number" in card and "chat template" in card
    path = tmp_path / "nonmath.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in NONMATH))
    card = client.predict(handle_file(str(path)), key, api_name="/mn_nonmath")
    assert "nonmath.jsonl (4 items)" in card and "normalised answer" in card
    mpath = tmp_path / "sums.jsonl"
    mpath.write_text("\n".join(json.dumps(r) for r in MATH))
    card = client.predict(handle_file(str(mpath)), key, api_name="/mn_math")
    # both of the user's sets are named, each with its rule; GSM8K is no longer in use
    assert "sums.jsonl (4 items)" in card and "reference&#x27;s number" in card and "GSM8K" not in card
    assert "nonmath.jsonl (4 items)" in card
    html, _fig, table, _layers = client.predict("MathNeuro", 3, 0.0, 16, key, api_name="/mn_evaluate")
    assert "unmodified" in html
    rows = table["data"]
    assert {r[0] for r in rows} == {"math", "non-math"}
    assert any(r[1] in {x["prompt"] for x in NONMATH} for r in rows)  # the user's own questions are asked
    assert [r[2] for r in rows if r[0] == "math"] == [x["answer"] for x in MATH][
        : len([r for r in rows if r[0] == "math"])
    ]
    # pruning the top 3 % per matrix changes what this model answers
    assert any(r[3] != r[4] for r in rows), rows


def test_math_neurons_refuse_a_conv1d_model(client, local_models):
    with pytest.raises(Exception) as e:
        client.predict(own(local_models, "own-gpt2"), api_name="/mn_model")
    assert "MathNeuro scores nn.Linear weights, and gpt2 models use transformers' Conv1D" in str(e.value)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "name, cls", [("own-falcon-mamba", "FalconMambaForCausalLM"), ("own-mamba", "MambaForCausalLM")]
)
def test_relevance_explains_your_own_mamba_and_falcon_mamba(client, local_models, name, cls):
    key = own(local_models, name)
    out = client.predict(
        "the movie was good and the cast was great",
        ["mambalrp", "gi"],
        ["norm", "silu", "ssm", "gate"],
        "",
        True,
        key,
        api_name="/explain_text",
    )
    res = out[5]
    assert res["model"] == f"local:{key}@main"
    rel = res["relevance"]["mambalrp"]
    assert len(rel) == len(res["tokens"]) > 5
    # MambaLRP's total is the explained logit up to what the conv biases absorb (both models have them)
    assert abs(res["sum_relevance"]["mambalrp"] - res["logit"]) < 0.2 * abs(res["logit"])
    with pytest.raises(Exception) as e:
        client.predict(
            "good", ["mambalrp"], ["norm"], "", True, own(local_models, "own-qwen2"), api_name="/explain_text"
        )
    assert "Qwen2ForCausalLM: MambaLRP needs a Mamba model" in str(e.value)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["own-sd15", "own-sd21"])
def test_memorization_checks_and_generates_on_your_own_pipeline(client, local_models, name):
    key = own(local_models, name)
    stats_card, _neurons, _found = client.predict(key, api_name="/memo_model")
    assert "COCO 2014 captions" in stats_card
    score, _z, stats_card = client.predict("a photo of a dog on the beach", key, api_name="/memo_check")
    assert "θ" in score and "first 1,000 of 10,000 COCO 2014 captions" in stats_card
    gallery, card = client.predict(
        "a photo of a dog", [], "down0.attn0:1, mid.attn0:2", 2, None, key, api_name="/memo_generate"
    )
    assert len(gallery) == 4 and "down0.attn0:1" in card  # 2 seeds, neurons on and off
    card = client.predict(
        10, key, "a bowl of soup on a table\na red bus in the rain\ntwo cats on a sofa", api_name="/memo_stats"
    )
    assert "3 ordinary prompts you gave" in card
    with pytest.raises(Exception) as e:
        client.predict("a dog", own(local_models, "own-qwen2"), api_name="/memo_check")
    assert "NeMo needs a Stable Diffusion 1.x/2.x pipeline" in str(e.value)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "vlm, sae, hook, cls",
    [
        ("own-llava15", "own-llava15-sae", "layers.2", "LlavaForConditionalGeneration"),
        ("own-llava15", "own-llava15-saelens", "model.layers.2", "LlavaForConditionalGeneration"),
        ("own-llava-next", "own-llava-next-sae", "model.layers.8", "LlavaNextForConditionalGeneration"),
    ],
)
def test_features_on_your_own_vlm_and_sae(app_url, local_models, tmp_path, monkeypatch, vlm, sae, hook, cls):
    from gradio_client import Client, handle_file

    from tests.helpers.standins.features import sample_images

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # where the tab writes the index it builds
    images = sample_images(local_models / f"images-{vlm}", 4)
    client = Client(app_url, verbose=False)  # its own session: the picked organism is session state
    out = client.predict(own(local_models, vlm), own(local_models, sae), hook, api_name="/features_load")
    status = out[0]
    assert "256 latents" in status and "No feature index yet" in status
    if sae.endswith("saelens"):  # read as SAELens wrote it: JumpReLU, hook name from its metadata
        assert "jumprelu" in status and "layers.2`" in status, status
    if vlm == "own-llava-next":  # your images as one uploaded zip (an entry's folders are dropped)
        import zipfile

        archive = tmp_path / "my-images.zip"
        with zipfile.ZipFile(archive, "w") as z:
            for i, p in enumerate(images):
                z.write(p, f"../nested/{i}/{p.name}")
            z.writestr("notes.txt", "not an image")
        built = client.predict([handle_file(str(archive))], "", api_name="/build_index")
    else:  # a folder on the server, under an allowed root
        built = client.predict([], str(images[0].parent), api_name="/build_index")
    assert "Indexed 4 images" in built[0]
    rows = built[1]["data"]
    assert rows and all(0 <= int(r[0]) < 256 for r in rows)
    analysed = client.predict(handle_file(str(images[1])), None, api_name="/analyse_image")
    firing = analysed[3]["data"]
    # the image's strongest features (6 at most), strongest first; it was indexed: each fired in the index
    assert 0 < len(firing) <= 6 and all(float(r[2]) > 0 for r in firing)
    assert [float(r[2]) for r in firing] == sorted((float(r[2]) for r in firing), reverse=True)
    assert {int(r[0]) for r in firing} <= {int(r[0]) for r in rows}
    fid = int(firing[0][0])
    _img, md, result = client.predict(
        handle_file(str(images[1])), None, fid, 5.0, "all", False, False, api_name="/steer"
    )
    assert result["feature"] == fid and "with" in md.lower()
    with pytest.raises(Exception) as e:  # a hookpoint the SAE has no folder for: refused with the list
        client.predict(own(local_models, vlm), own(local_models, sae), "model.layers.1", api_name="/features_load")
    assert "layers" in str(e.value)


def test_features_refuse_a_model_that_is_not_llava(app_url, local_models):
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    with pytest.raises(Exception) as e:
        client.predict(
            own(local_models, "own-qwen2"), own(local_models, "own-llava15-sae"), "layers.2", api_name="/features_load"
        )
    assert "Qwen2ForCausalLM: the Features tab needs a LLaVA-family vision-language model" in str(e.value)
    with pytest.raises(Exception) as e:
        client.predict(
            own(local_models, "own-llava15"), own(local_models, "no-such-sae"), "layers.2", api_name="/features_load"
        )
    assert "no model at" in str(e.value)
