"""Two visitors at once, each its own gradio_client session: what one brings (images, an index built
from them, neuron statistics over its own prompts) stays with it. The other visitor's view, the
shared statistics and the owner's index file do not change, and the visitor's folder goes when its
session ends."""

from __future__ import annotations

import hashlib
import time
import zipfile
from pathlib import Path

import pytest

from backend.core.sessions import key_of

pytestmark = pytest.mark.timeout(300)
VLM, SAE, HOOK = "own-llava15", "own-llava15-sae", "layers.2"


def sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def rows(table) -> list:
    return table["data"] if isinstance(table, dict) else table


@pytest.fixture
def sessions_dir(tmp_path, monkeypatch):
    root = tmp_path / "sessions"
    monkeypatch.setenv("WORKBENCH_SESSION_DIR", str(root))
    monkeypatch.delenv("WORKBENCH_SHARED_BUILDS", raising=False)
    return root


@pytest.fixture
def owner_index(local_models, tmp_path, monkeypatch, sessions_dir):
    """The owner's precomputed index (WORKBENCH_SAE_INDEX) over the owner's images, for the own
    LLaVA-1.5 stand-in and its SAE; a fresh organism registry reads that setting."""
    from backend.sae import hub_index, loading, organism
    from backend.sae.index import ImageSource
    from tests.helpers.standins.features import sample_images

    monkeypatch.setattr(loading, "_SHELLS", {})
    target = tmp_path / "owner" / "feature_index.safetensors"
    monkeypatch.setenv("WORKBENCH_SAE_INDEX", str(target))
    images = sample_images(tmp_path / "owner-images", 4, seed=1)
    org = loading.get_organism(loading.own_source(str(local_models / VLM), str(local_models / SAE), HOOK), model=True)
    hub_index.index_images(org, ImageSource.folder(images[0].parent), out=target)
    organism.refresh_index(org)
    assert org.index_path == target
    return target


def test_a_visitors_index_stays_with_the_visitor(
    app_url, local_models, owner_index, sessions_dir, tmp_path, monkeypatch
):
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    from backend.sae import loading, organism
    from backend.sae.index import INDEX_FILE
    from tests.helpers.standins.features import sample_images

    before = sha(owner_index)
    a, b = Client(app_url, verbose=False), Client(app_url, verbose=False)
    vlm, sae = str(local_models / VLM), str(local_models / SAE)
    for c in (a, b):
        summary = c.predict(vlm, sae, HOOK, api_name="/features_load")[1]
        assert "4 images" in summary and "owner-images" in summary
    b_list = rows(b.predict("", "density", api_name="/features_list"))
    fid = int(b_list[0][0])
    b_page = b.predict(fid, api_name="/feature_page")[7]

    archive = tmp_path / "mine.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for i, p in enumerate(sample_images(tmp_path / "a-images", 3, seed=7)):
            z.write(p, f"visitor-a-{i}.png")
    built = a.predict([handle_file(str(archive))], "", api_name="/build_index")
    assert "Indexed 3 images" in built[0]
    # the owner's file is untouched, and B sees the owner's index: none of A's images
    assert sha(owner_index) == before
    assert rows(b.predict("", "density", api_name="/features_list")) == b_list
    again = b.predict(fid, api_name="/feature_page")[7]
    assert again["top"] == b_page["top"] and not any("visitor-a" in t["caption"] for t in again["top"])
    assert "4 images" in b.predict(vlm, sae, HOOK, api_name="/features_load")[1]
    shared = loading.get_organism(loading.own_source(vlm, sae, HOOK))
    assert shared.index_path == owner_index and shared.index.meta["n_images"] == 4
    # A sees its own, from A's own folder
    assert "only this session sees it" in built[0]
    a_folder = sessions_dir / key_of(a.session_hash)
    assert list(a_folder.rglob(INDEX_FILE))
    a_rows = rows(a.predict("", "density", api_name="/features_list"))
    a_page = a.predict(int(a_rows[0][0]), api_name="/feature_page")[7]
    assert a_page["top"] and all(t["caption"].startswith("0") and "visitor-a" in t["caption"] for t in a_page["top"])

    # B asks the model to name a feature of the owner's index: B's label, kept in B's folder
    labelled = b.predict(fid, api_name="/ask_model")
    assert labelled[7]["label"] and labelled[7]["labelled_by"] == organism.MODEL_LABELS
    assert not (owner_index.parent / "labels.json").exists() and shared.labels == {}
    assert list((sessions_dir / key_of(b.session_hash)).rglob("*labels.json"))
    assert b.predict(fid, api_name="/feature_page")[7]["label"] == labelled[7]["label"]

    # past the quota: refused with the reason, nothing written anywhere
    monkeypatch.setenv("WORKBENCH_SESSION_QUOTA", "100B")
    monkeypatch.setenv("WORKBENCH_UPLOAD_ALLOWANCE", "20MB")  # the upload passes; the build is refused
    c = Client(app_url, verbose=False)
    c.predict(vlm, sae, HOOK, api_name="/features_load")
    with pytest.raises(AppError, match=r"over a visitor's quota of 0\.1 kB \(WORKBENCH_SESSION_QUOTA\)"):
        c.predict([handle_file(str(archive))], "", api_name="/build_index")
    assert sha(owner_index) == before
    assert not list((sessions_dir / key_of(c.session_hash)).rglob("*.png"))
    c.close()

    # A's session ends: its folder goes
    a.close()
    deadline = time.monotonic() + 20
    while a_folder.exists() and time.monotonic() < deadline:
        time.sleep(0.25)
    assert not a_folder.exists()
    b.close()


def test_a_visitors_statistics_leave_the_others_scores_alone(app_url, sessions_dir):
    import json

    from gradio_client import Client

    from backend.nemo import service

    info = service.describe("zoo")
    prompt = info["memorized"][0]
    shared = service.check(prompt, source="zoo")
    a, b = Client(app_url, verbose=False), Client(app_url, verbose=False)
    b_score, b_z, b_card = b.predict(prompt, api_name="/memo_check")
    own = "a red circle on a blue square\na green triangle\na yellow star on grey\nthree blue dots"
    card = a.predict(10, None, own, api_name="/memo_stats")
    assert "4 ordinary prompts you gave" in card
    a_score, a_z, a_card = a.predict(prompt, api_name="/memo_check")
    assert "4 ordinary prompts you gave" in a_card
    assert json.loads(a_z["plot"]) != json.loads(b_z["plot"])  # A's z-scores use A's statistics
    after = b.predict(prompt, api_name="/memo_check")
    assert after[2] == b_card and json.loads(after[1]["plot"]) == json.loads(b_z["plot"])
    assert service.check(prompt, source="zoo")["z"] == shared["z"]
    assert list((sessions_dir / key_of(a.session_hash) / "nemo").glob("*.safetensors"))
    a.close()
    b.close()


def test_a_private_spaces_owner_can_share_builds(app_url, sessions_dir, monkeypatch):
    """WORKBENCH_SHARED_BUILDS=1: a session's statistics are everyone's again (and nothing is kept
    in its own folder)."""
    from gradio_client import Client

    from backend.nemo import service

    monkeypatch.setenv("WORKBENCH_SHARED_BUILDS", "1")
    prompt = service.describe("zoo")["memorized"][0]
    shared = service.check(prompt, source="zoo")
    a = Client(app_url, verbose=False)
    try:
        a.predict(20, None, "", api_name="/memo_stats")
        assert service.check(prompt, source="zoo")["z"] != shared["z"]
        assert not (sessions_dir / key_of(a.session_hash)).exists()
    finally:
        a.predict(160, None, "", api_name="/memo_stats")  # the organism's statistics for the next tests
        a.close()
    assert service.check(prompt, source="zoo")["z"] == shared["z"]


def test_a_visitors_math_set_goes_with_the_session(app_url, tmp_path):
    """A non-math file a visitor names is kept (by content) while that session lasts, then dropped
    from the shared bench's data."""
    import json

    from gradio_client import Client, handle_file

    from backend.mathneuro import service

    data = service.bench("zoo").data
    before = set(data["nonmath_sets"])
    path = tmp_path / "mine.jsonl"
    path.write_text(
        "\n".join(json.dumps({"prompt": f"where does ann live {i} ?", "answer": "ann lives here"}) for i in range(4))
    )
    a = Client(app_url, verbose=False)
    card = a.predict(handle_file(str(path)), None, api_name="/mn_nonmath")
    assert "mine.jsonl (4 items)" in card
    added = set(data["nonmath_sets"]) - before
    assert len(added) == 1
    a.close()
    deadline = time.monotonic() + 20
    while added & set(data["nonmath_sets"]) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert set(data["nonmath_sets"]) == before


def test_parallel_visitors_count_zero_leaks(app_url, local_models, owner_index, tmp_path):
    """Three visitors build their own indexes at the same time while a fourth browses the owner's:
    every top image any of them is shown comes from their own set (leaks counted, must be 0)."""
    from concurrent.futures import ThreadPoolExecutor

    from gradio_client import Client, handle_file

    from tests.helpers.standins.features import sample_images

    vlm, sae = str(local_models / VLM), str(local_models / SAE)
    before = sha(owner_index)

    def zip_of(k: int) -> str:
        archive = tmp_path / f"v{k}.zip"
        with zipfile.ZipFile(archive, "w") as z:
            for i, p in enumerate(sample_images(tmp_path / f"v{k}-images", 3, seed=20 + k)):
                z.write(p, f"visitor-{k}-{i}.png")
        return str(archive)

    def visit(k: int) -> tuple[int, int]:
        """(pages' top images seen, of them not the visitor's own)"""
        c = Client(app_url, verbose=False)
        try:
            c.predict(vlm, sae, HOOK, api_name="/features_load")
            if k < 3:
                c.predict([handle_file(zip_of(k))], "", api_name="/build_index")
            own = f"visitor-{k}-" if k < 3 else "img_"  # the owner's images are img_NN.png
            seen = leaks = 0
            for r in rows(c.predict("", "density", api_name="/features_list"))[:4]:
                for t in c.predict(int(r[0]), api_name="/feature_page")[7]["top"]:
                    seen += 1
                    leaks += own not in t["caption"] or (k == 3 and "visitor" in t["caption"])
            return seen, leaks
        finally:
            c.close()

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(visit, range(4)))
    print("visitors (top images seen, leaks):", results)
    assert all(seen > 0 for seen, _ in results)
    assert sum(leaks for _, leaks in results) == 0
    assert sha(owner_index) == before


def test_sessions_of_one_address_share_one_quota(
    app_url, local_models, owner_index, sessions_dir, tmp_path, monkeypatch
):
    """Sessions are free to make, so a quota per session bounds nobody (four build_index calls from
    four sessions once wrote 1,050 MB in 12 s): a second session from the same address is refused
    once the first's files fill the visitor's quota, while a visitor at another address builds."""
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    from backend.core import sessions
    from tests.helpers.people import as_person
    from tests.helpers.standins.features import sample_images

    archive = tmp_path / "mine.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for i, p in enumerate(sample_images(tmp_path / "imgs", 3, seed=11)):
            z.write(p, f"img-{i}.png")
    vlm, sae = str(local_models / VLM), str(local_models / SAE)
    here = as_person()
    first, second = Client(app_url, verbose=False, headers=here), Client(app_url, verbose=False, headers=here)
    elsewhere = Client(app_url, verbose=False)
    for c in (first, second, elsewhere):
        c.predict(vlm, sae, HOOK, api_name="/features_load")
    assert "Indexed 3 images" in first.predict([handle_file(str(archive))], "", api_name="/build_index")[0]
    one_build = sessions.used_bytes(key_of(first.session_hash))
    assert one_build > 0
    monkeypatch.setenv("WORKBENCH_SESSION_QUOTA", f"{int(one_build * 1.5)}B")
    with pytest.raises(AppError, match=r"all your sessions.*over a visitor's quota"):
        second.predict([handle_file(str(archive))], "", api_name="/build_index")
    assert sessions.used_bytes(key_of(second.session_hash)) == 0
    assert "Indexed 3 images" in elsewhere.predict([handle_file(str(archive))], "", api_name="/build_index")[0]
    for c in (first, second, elsewhere):
        c.close()
