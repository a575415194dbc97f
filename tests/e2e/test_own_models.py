"""Your own model, picked in a real browser: typed into a tab's model picker as a folder, checked
from metadata (the line under the picker), then used by the tab's main action."""

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import settle, shot
from tests.helpers.waits import result_of, uploaded


def pick(page, elem_id: str, value: str) -> str:
    """Type a model into a picker, confirm it, and return the check line under it (the line this
    pick's check wrote, not the one before it)."""
    line = page.locator(f"#{elem_id}-check .wb-picker-line")
    box = page.locator(f"#{elem_id} input").first
    with result_of(page, changed=f"#{elem_id}-check .wb-picker-line", timeout_ms=30_000):
        box.click()
        box.fill(value)
        box.press("Enter")
    return line.inner_text()


def open_and_pick(
    page, url: str, tab: str, ready: str, picker_id: str, folder, toast: str | None = None
) -> tuple[str, list]:
    """Open a tab, wait for its main button, pick a model folder; (check line, page errors so far).
    With `toast`, the pick must also show a toast saying it (seen even if it closed again)."""
    errors: list = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{url}?tab={tab}", timeout=120_000)
    page.wait_for_selector(ready, state="visible", timeout=120_000)
    settle(page)
    if toast is None:
        return pick(page, picker_id, str(folder)), errors
    with result_of(page, toast=toast, timeout_ms=30_000):
        return pick(page, picker_id, str(folder)), errors


@pytest.mark.timeout(300)
def test_adapters_on_your_own_qwen2_and_a_refused_gpt2(page, server_url, local_models):
    line, errors = open_and_pick(
        page, server_url, "adapters", "#pissa-analyse", "pissa-model", local_models / "own-gpt2", toast="Conv1D"
    )  # the layer list refused too
    assert line.startswith("✗") and "Conv1D" in line

    line = pick(page, "pissa-model", str(local_models / "own-qwen2"))
    assert "Qwen2ForCausalLM" in line and "parameters" in line and not line.startswith("✗")
    settle(page)
    layer = page.locator("#pissa-layer input").first
    layer.click()
    page.get_by_role("option", name="model.layers.1.mlp.down_proj", exact=True).click()
    page.locator("#pissa-analyse").click()
    page.wait_for_selector("#pissa-spectrum .js-plotly-plot", timeout=90_000)
    page.get_by_text("reproduces W to a relative error").wait_for()
    settle(page)
    assert "model.layers.1.mlp.down_proj" in page.locator("#pissa-stats").inner_text()
    shot(page, "own-model-adapters")
    assert not errors, errors


@pytest.mark.timeout(300)
def test_relevance_on_your_own_falcon_mamba(page, server_url, local_models):
    line, errors = open_and_pick(
        page, server_url, "relevance", "#rel-explain", "rel-model", local_models / "own-falcon-mamba"
    )
    assert "FalconMambaForCausalLM" in line and not line.startswith("✗")
    page.locator("#rel-explain").click()
    page.locator("#rel-conservation").get_by_text("relevance").first.wait_for(timeout=90_000)
    settle(page)
    assert page.locator("#rel-heatmap .wb-tok, #rel-heatmap span").count() > 5
    assert "cast" in page.locator("#rel-heatmap").inner_text()
    shot(page, "own-model-relevance")
    assert not errors, errors


@pytest.mark.timeout(300)
def test_relevance_per_sentence_table_of_your_own_file(page, server_url, local_models, tmp_path):
    """A user's sentence file on their own Mamba: the held-out section's per-sentence table sorts by
    a column, and a selected row shows that sentence's heatmap."""
    line, errors = open_and_pick(page, server_url, "relevance", "#rel-explain", "rel-model", local_models / "own-mamba")
    assert "MambaForCausalLM" in line and not line.startswith("✗")
    texts = [
        "the film was a quiet joy",
        "a dull plot and a weak cast",
        "the music carried every scene",
        "nothing happened for two hours",
        "a bright, funny and warm story",
    ]
    path = tmp_path / "reviews.txt"
    path.write_text("\n".join(texts) + "\n")
    with result_of(page, rendered="#rel-n"):  # its controls rendered and written by Gradio: a pick stays
        page.locator("#rel-heldout-acc").get_by_text("Held-out evaluation").first.click()
    # the organism's planted-evidence set is for the organism: this model gets captions, a file, SST-2
    expect(page.locator("#rel-held-data")).not_to_contain_text("zoo held-out set")
    expect(page.locator("#rel-held-data")).to_contain_text("COCO captions")
    page.locator("#rel-held-data").get_by_text("my sentence file").click()
    with uploaded(page):  # the server holds the file before the click sends it
        page.locator("#rel-held-file input[type=file]").set_input_files(str(path))
    settle(page)
    page.click("#rel-heldout")
    table = page.locator("#rel-sentences")
    table.get_by_text("the music carried every scene").first.wait_for(timeout=120_000)
    settle(page)
    # sort by MambaLRP's faithfulness, from the column's menu (⋮ in its header)
    header = table.locator("[data-testid='header-4']")
    header.click()  # the menu button shows on the focused header
    header.locator("button[aria-label='Open cell menu']").click()
    page.get_by_text("Sort descending").first.click()
    settle(page)
    rows = table.locator("[role=row].virtual-row")  # Gradio's virtual table: one div per body row
    assert rows.count() == 5

    def cell(row, col):  # as shown: aria-rowindex counts the header as 1
        return table.locator(f"[role=gridcell][aria-rowindex='{row + 2}'][aria-colindex='{col + 1}']").inner_text()

    first = [cell(i, 0).strip() for i in range(5)]
    assert sorted(first) == ["1", "2", "3", "4", "5"]
    daf = [float(cell(i, 4)) for i in range(5)]
    assert daf == sorted(daf, reverse=True), daf
    # the row of sentence 3, wherever the sort put it, opens its heatmap
    table.get_by_text("the music carried every scene").first.click()
    view = page.locator("#rel-sentence-view")
    view.get_by_text("Sentence #3").wait_for(timeout=30_000)
    assert "music" in view.inner_text() and view.locator(".wb-token").count() >= 5
    page.locator("#rel-sentences-csv [aria-label='sentences.csv']").wait_for(timeout=30_000)
    view.scroll_into_view_if_needed()
    shot(page, "own-model-relevance-sentences")
    assert not errors, errors


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["own-sd21", "own-sd15"])
def test_memorization_on_your_own_sd_pipeline(page, server_url, local_models, name):
    line, errors = open_and_pick(page, server_url, "memorization", "#memo-check", "memo-model", local_models / name)
    assert "StableDiffusionPipeline" in line and not line.startswith("✗")
    settle(page)
    page.locator("#memo-prompt textarea").fill("a photo of a dog on the beach")
    # the first view's card (the zoo's example) already shows a θ: wait for this check's own run
    with result_of(page, done="#memo-score", timeout_ms=90_000):
        page.locator("#memo-check").click()
    page.locator("#memo-score").get_by_text("θ", exact=False).first.wait_for(timeout=90_000)
    page.wait_for_selector("#memo-z .js-plotly-plot")
    settle(page)
    assert "COCO 2014 captions" in page.locator("#memo-stats").inner_text()
    # the model line names the picked pipeline's value layers; its examples are the paper's lists
    note = page.locator("#memo-model-note").inner_text()
    assert name in note and "mid.attn0 (64)" in note and "sd-memo" not in note
    assert "Memorized LAION captions" in page.locator("#memo-ex-mem").inner_text()
    shot(page, f"own-model-memorization-{name}")
    assert not errors, errors


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "vlm, sae, hook, cls",
    [
        ("own-llava15", "own-llava15-sae", "model.layers.2", "LlavaForConditionalGeneration"),
        ("own-llava15", "own-llava15-saelens", "model.layers.2", "LlavaForConditionalGeneration"),
        ("own-llava-next", "own-llava-next-sae", "model.layers.8", "LlavaNextForConditionalGeneration"),
    ],
)
def test_features_on_your_own_vlm_and_sae(page, server_url, local_models, vlm, sae, hook, cls):
    from tests.helpers.standins.features import sample_images

    images = sample_images(local_models / "e2e-images", 3)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server_url}?tab=features", timeout=120_000)
    page.wait_for_selector("#features-open", state="visible", timeout=120_000)
    settle(page)
    assert not page.locator("#features-build").is_visible()  # the zoo's index comes with it
    assert page.locator("#features-suppress").is_visible()  # the zoo's families of planted concepts
    # the accordion's boxes are rendered as it opens and written again by Gradio a frame or two
    # later (tests/helpers/waits.py): what is typed before that is wiped
    with result_of(page, rendered="#feat-sae"):
        page.locator("#features-own").get_by_text("Model and SAE").click()
    line = pick(page, "feat-model", str(local_models / vlm))
    assert cls in line and not line.startswith("✗")
    page.locator("#feat-sae textarea").fill(str(local_models / sae))
    page.locator("#feat-hookpoint textarea").fill(hook)
    page.locator("#feat-load").click()  # it opens the index builder (rendered whole: no later write)
    page.locator("#feat-own-status").get_by_text("No feature index yet").wait_for(timeout=90_000)
    settle(page)
    if sae.endswith("saelens"):  # read as SAELens wrote it: a JumpReLU SAE
        assert "jumprelu" in page.locator("#feat-own-status").inner_text()
    # the steering text names the loaded model's hookpoint, not the zoo's
    assert hook.removeprefix("model.") in page.locator("#features-steer-explain").inner_text()
    # no planted concepts in the user's images: the concept IoU plot and rival zeroing go away
    assert not page.locator("#features-concepts").is_visible()
    assert not page.locator("#features-suppress").is_visible()
    assert "planted concept" not in page.locator("#features-explain").inner_text()
    page.locator("#features-build-folder textarea").fill(str(images[0].parent))
    page.locator("#features-build-run").click()
    page.locator("#features-build-status").get_by_text("Indexed 3 images").wait_for(timeout=90_000)
    settle(page)
    page.wait_for_selector("#features-overlay img", timeout=60_000)
    assert page.locator("#features-table [role=row].virtual-row").count() >= 1  # the features that fired
    shot(page, f"own-model-features-{sae}")
    for table in ("#features-table", "#features-firing-table"):  # an explainer's labels; no planted concepts
        heads = page.locator(f"{table} thead th").all_inner_texts()
        assert any("label" in h for h in heads) and not any("IoU" in h or "concept" in h for h in heads), heads
    page.locator("#features-sort input").click()
    options = [o.split("\n")[-1] for o in page.get_by_role("option").all_inner_texts()]
    assert "density" in options and "IoU" not in options, options
    page.keyboard.press("Escape")
    assert not errors, errors


@pytest.mark.timeout(300)
def test_a_deep_link_carries_your_own_model_and_reruns_on_it(page, server_url, local_models):
    """A link to the Adapters tab naming a user's own folder restores the pick, checks it, lists its
    layers and reruns the analysis there, in a fresh page, without a click."""
    import json
    from urllib.parse import urlencode

    key = str(local_models / "own-gemma")
    query = urlencode(
        {
            "tab": "adapters",
            "pissa-model": json.dumps(key),
            "pissa-layer": json.dumps("model.layers.0.mlp.up_proj"),
            "pissa-rank": "4",
        }
    )
    page.goto(f"{server_url}?{query}", timeout=120_000)
    page.wait_for_selector("#pissa-analyse", state="visible", timeout=120_000)
    page.locator("#pissa-stats").get_by_text("model.layers.0.mlp.up_proj").wait_for(timeout=120_000)
    settle(page)
    assert "GemmaForCausalLM" in page.locator("#pissa-model-check").inner_text()
    assert (
        "rank **4**" in page.locator("#pissa-stats").inner_text()
        or "rank 4" in page.locator("#pissa-stats").inner_text()
    )


@pytest.mark.timeout(450)  # three live evaluations, each generating GSM8K-length answers on 2 cores
def test_math_neurons_on_your_own_qwen2(page, server_url, local_models, tmp_path):
    import json

    line, errors = open_and_pick(page, server_url, "math_neurons", "#mn-run", "mn-model", local_models / "own-qwen2")
    assert "Qwen2ForCausalLM" in line and not line.startswith("✗")
    # the data card says what the model is measured on and by which rule; no non-math set offline
    page.locator("#mn-data").get_by_text("last number").wait_for(timeout=120_000)
    nonmath = tmp_path / "my-questions.jsonl"
    nonmath.write_text(
        "\n".join(
            json.dumps({"prompt": q, "answer": a})
            for q, a in [
                ("Which animal barks?", "dog"),
                ("What is the opposite of hot?", "cold"),
                ("Which season comes after winter?", "spring"),
                ("What colour is grass?", "green"),
            ]
        )
    )
    page.locator("#mn-nonmath-file input[type=file]").set_input_files(str(nonmath))
    page.locator("#mn-data").get_by_text("my-questions.jsonl (4 items)").wait_for(timeout=120_000)
    # the evaluation on the new set: the accuracy card already read "unmodified" from the view before
    # the upload, so the wait is for the set's own questions among the samples (a page that settled
    # before the new evaluation began was read too early under load)
    page.locator("#mn-samples").get_by_text("Which animal barks?").first.wait_for(timeout=180_000)
    settle(page, 180_000)
    assert "unmodified" in page.locator("#mn-acc").inner_text()
    # and its own math problems in place of GSM8K
    mine = tmp_path / "my-sums.csv"
    mine.write_text(
        "question,answer\n"
        + "".join(
            f"Ann has {a} pens and buys {b} more. How many now?,{a + b}\n"
            for a, b in ((12, 7), (30, 45), (8, 9), (61, 23))
        )
    )
    page.locator("#mn-math-file input[type=file]").set_input_files(str(mine))
    page.locator("#mn-data").get_by_text("my-sums.csv (4 items)").wait_for(timeout=120_000)
    page.locator("#mn-samples").get_by_text("Ann has 12 pens").first.wait_for(timeout=180_000)
    settle(page, 180_000)
    card = page.locator("#mn-data").inner_text()
    assert "GSM8K" not in card and "my-questions.jsonl" in card and "reference's number" in card
    # the explanation speaks of the picked chat model, not of the organism
    explain = page.locator("#mn-explain").inner_text()
    assert "chat template" in explain and "organism" not in explain
    # so does the question box: its example is a word problem in plain English now
    assert page.locator("#mn-prompt textarea").input_value().startswith("Tom has 23 pens")
    assert "Tom has 23 pens" not in page.locator("#mn-explain").inner_text()
    shot(page, "own-model-math")
    assert not errors, errors
