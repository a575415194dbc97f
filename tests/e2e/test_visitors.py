"""Two visitors in two browser contexts at once: A builds a feature index from uploaded images, B
(beside A, on the same server) still browses the owner's index; the owner's file is unchanged and A's
folder goes when A's page closes."""

from __future__ import annotations

import hashlib
import shutil
import time

import pytest

from tests.conftest import ARTIFACTS
from tests.e2e.conftest import settle
from tests.e2e.test_own_models import pick
from tests.helpers.browser import browser
from tests.helpers.server import serve
from tests.helpers.waits import result_of, uploaded

VLM, SAE, HOOK = "own-llava15", "own-llava15-sae", "model.layers.2"


def load_own(page, url, local_models):
    page.goto(f"{url}?tab=features", timeout=120_000)
    page.wait_for_selector("#features-open", state="visible", timeout=120_000)
    settle(page)
    # its boxes are rendered as the accordion opens and written again by Gradio a frame or two later
    # (tests/helpers/waits.py): what is typed before that is wiped
    with result_of(page, rendered="#feat-sae"):
        page.locator("#features-own").get_by_text("Model and SAE").click()
    pick(page, "feat-model", str(local_models / VLM))
    page.locator("#feat-sae textarea").fill(str(local_models / SAE))
    page.locator("#feat-hookpoint textarea").fill(HOOK)
    page.locator("#feat-load").click()
    page.locator("#feat-own-status p").get_by_text("Loaded").wait_for(timeout=90_000)
    settle(page)


def captions(page) -> list[str]:
    return page.locator("#features-overlay .caption-label, #features-overlay [class*=caption]").all_inner_texts()


@pytest.mark.timeout(400)
def test_two_browsers_one_builds_an_index_the_other_keeps_the_owners(local_models, tmp_path, monkeypatch):
    from backend.sae import hub_index, loading
    from backend.sae.index import INDEX_FILE, ImageSource
    from tests.helpers.standins.features import sample_images

    # the owner's precomputed index over the owner's images, named by WORKBENCH_SAE_INDEX
    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(local_models))
    owner = tmp_path / "owner" / INDEX_FILE
    org = loading.load_hub(
        str(local_models / VLM), str(local_models / SAE), HOOK, model_class="transformers.LlavaForConditionalGeneration"
    )
    hub_index.index_images(
        org, ImageSource.folder(sample_images(tmp_path / "owner-images", 4, seed=1)[0].parent), out=owner
    )
    before = hashlib.sha256(owner.read_bytes()).hexdigest()
    mine = []
    for i, p in enumerate(sample_images(tmp_path / "a-raw", 3, seed=7)):
        mine.append(tmp_path / "a" / f"visitor-a-{i}.png")
        mine[-1].parent.mkdir(exist_ok=True)
        shutil.copyfile(p, mine[-1])
    sessions_dir = tmp_path / "sessions"
    env = {
        "WORKBENCH_MODEL_ROOTS": str(local_models),
        "WORKBENCH_SAE_INDEX": str(owner),
        "WORKBENCH_SESSION_DIR": str(sessions_dir),
        "HF_HOME": str(tmp_path / "hf-home"),
    }
    ARTIFACTS.mkdir(exist_ok=True)
    with serve(env=env, log_path=ARTIFACTS / "e2e-visitors.log") as (url, _):
        ctx_a, ctx_b = (browser().new_context(viewport={"width": 1440, "height": 1000}) for _ in range(2))
        try:
            a, b = ctx_a.new_page(), ctx_b.new_page()
            for p in (a, b):
                p.set_default_timeout(90_000)
                load_own(p, url, local_models)
                assert "4 images" in p.locator("#features-summary").inner_text()
            b_header = b.locator("#features-header").inner_text()
            b_rows = b.locator("#features-table").inner_text()

            # shown by the load's event, this accordion is rendered whole as it opens (no later write)
            a.locator("#features-build").get_by_text("Build the feature index from images").click()
            with uploaded(a):  # the server holds A's images before Build sends them
                a.locator("#features-build-files input[type=file]").set_input_files([str(p) for p in mine])
            a.locator("#features-build-run").click()
            a.locator("#features-build-status").get_by_text("Indexed 3 images").wait_for()
            settle(a)
            assert "only this session sees it" in a.locator("#features-build-status").inner_text()
            assert "3 images" in a.locator("#features-summary").inner_text()
            a.locator("#features-overlay img").first.wait_for()
            a.screenshot(path=str(ARTIFACTS / "visitors-a-own-index.png"), full_page=True)

            # B, open beside A all along: the owner's index, none of A's images, also after reopening
            assert hashlib.sha256(owner.read_bytes()).hexdigest() == before
            with result_of(b, done="#features-header"):  # reopened: the same page read again, not kept
                b.locator("#features-open").click()
            settle(b)
            assert b.locator("#features-header").inner_text() == b_header
            assert b.locator("#features-table").inner_text() == b_rows
            assert "4 images" in b.locator("#features-summary").inner_text()
            assert "visitor-a" not in b.locator("#tab-features").inner_text()
            b.screenshot(path=str(ARTIFACTS / "visitors-b-owners-index.png"), full_page=True)

            # A's folder holds A's index; B's (made for B's exports, handed out and gone from it)
            # holds no file of B's
            folders = [d for d in sessions_dir.iterdir() if d.is_dir()]
            holding = [d for d in folders if list(d.rglob(INDEX_FILE))]
            assert len(holding) == 1
            assert not [
                p
                for d in folders
                if d not in holding
                for p in d.rglob("*")
                if p.is_file() and not p.name.startswith(".")
            ]
            ctx_a.close()  # A leaves: Gradio's unload removes A's folder
            deadline = time.monotonic() + 60  # polled: a file-system state, not a page's
            while holding[0].exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not holding[0].exists()
        finally:
            ctx_a.close()
            ctx_b.close()
