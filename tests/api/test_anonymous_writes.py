"""No call without a session writes the owner's files, and no call with one either.

A lab server as the issue found it: the Features tab opens on the owner's VLM + SAE with the owner's
precomputed index (WORKBENCH_SAE_INDEX), beside the zoo app of tests/api/conftest.py. Every endpoint
that writes (build_index, ask_model, memo_stats, mn_nonmath / mn_math) is called as raw HTTP with no
session hash (POST /gradio_api/run/<name>) and through gradio_client, off and on a Space; the sha256
of every owner file (the index, its folder, assets/) must not change, and the shared NeMo statistics
and MathNeuro sets must stay what they were."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.server import free_port

pytestmark = pytest.mark.timeout(300)
VLM, SAE, HOOK = "own-llava15", "own-llava15-sae", "layers.2"
ROOT = Path(__file__).resolve().parents[2]
# a loaded 2-core machine can keep a queue join waiting past httpx's 5 s default
SLOW_OK = {"timeout": 60}
SPACE = {"SYSTEM": "spaces", "SPACE_ID": "owner/workbench", "WORKBENCH_CUSTOM_MODELS": "1"}


def digest_tree(*folders: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for folder in folders
        for p in sorted(Path(folder).rglob("*"))
        if p.is_file()
    }


def changed(before: dict, after: dict) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def folders(root: Path) -> set[str]:
    return {d.name for d in root.iterdir()} if root.is_dir() else set()


def raw_run(url: str, api_name: str, data: list) -> tuple[int, str]:
    """POST /gradio_api/run/<api_name> as a script would: no session hash."""
    req = urllib.request.Request(
        f"{url}gradio_api/run/{api_name}",
        data=json.dumps({"data": data}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def raw_upload(url: str, path: Path) -> dict:
    boundary = "wbboundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{path.name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + path.read_bytes()
        + f"\r\n--{boundary}--\r\n".encode()
    )
    req = urllib.request.Request(
        f"{url}gradio_api/upload", data=body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        server_path = json.loads(r.read())[0]
    return {"path": server_path, "orig_name": path.name, "meta": {"_type": "gradio.FileData"}}


@pytest.fixture(scope="module")
def lab(local_models, tmp_path_factory):
    """(url, owner folder, sessions root): the Features tab on the owner's own LLaVA stand-in + SAE
    with the owner's index over four images, served in-process."""
    import gradio as gr

    from backend.sae import hub_index, loading, organism
    from backend.sae.index import INDEX_FILE, ImageSource
    from components.features import layout as tab
    from components.serving import visitor
    from components.common import TabContext
    from components.serving.guard import guard_events
    from tests.helpers.standins.features import sample_images

    base = tmp_path_factory.mktemp("lab")
    owner = base / "owner"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loading, "_SHELLS", {})
        mp.setenv("WORKBENCH_SAE_INDEX", str(owner / INDEX_FILE))
        mp.setenv("WORKBENCH_SESSION_DIR", str(base / "sessions"))
        mp.delenv("WORKBENCH_SHARED_BUILDS", raising=False)
        images = sample_images(owner / "owner-images", 4, seed=1)
        source = loading.own_source(str(local_models / VLM), str(local_models / SAE), HOOK)
        org = loading.get_organism(source, model=True)
        hub_index.index_images(org, ImageSource.folder(images[0].parent), out=owner / INDEX_FILE)
        organism.refresh_index(org)
        with gr.Blocks(analytics_enabled=False) as demo:
            demo.queue(max_size=16, default_concurrency_limit=2)
            with gr.Tabs() as tabs:
                ctx = TabContext(tabs=tabs, source=source)
                with gr.Tab("Features") as t:
                    ctx.tab, ctx.tab_id = t, "features"
                    tab.build(ctx)
            visitor.install(demo)
        guard_events(demo)
        port = free_port()
        demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
        try:
            yield f"http://127.0.0.1:{port}/", owner, base / "sessions"
        finally:
            demo.close()


def visitor_zip(folder: Path, tag: str, seed: int) -> Path:
    from tests.helpers.standins.features import sample_images

    archive = folder / f"{tag}.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for i, p in enumerate(sample_images(folder / f"{tag}-images", 3, seed=seed)):
            z.write(p, f"{tag}-{i}.png")
    return archive


@pytest.mark.parametrize("where", ["off a Space", "on a Space"])
def test_no_call_writes_the_owners_files(lab, app_url, tmp_path, monkeypatch, where):
    from gradio_client import Client, handle_file

    from backend.mathneuro import service as mn
    from backend.nemo import service as nemo

    url, owner, sessions_root = lab
    for k, v in (SPACE if where == "on a Space" else {}).items():
        monkeypatch.setenv(k, v)
    if where == "off a Space":
        for k in SPACE:
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("WORKBENCH_SESSION_DIR", str(sessions_root))
    before = digest_tree(owner, ROOT / "assets")
    prompt = nemo.describe("zoo")["memorized"][0]
    shared_z = nemo.check(prompt, source="zoo")["z"]
    sets = {k: set(v) for k, v in mn.bench("zoo").data.items() if k.endswith("_sets")}
    archive = visitor_zip(tmp_path, "anon", 5)
    items = tmp_path / "mine.jsonl"
    items.write_text(
        "\n".join(json.dumps({"prompt": f"where does ann live {i} ?", "answer": "ann lives here"}) for i in range(4))
    )

    # raw HTTP, no session hash: each writing endpoint refused, saying why
    kept = folders(sessions_root)  # (an earlier test's visitors' folders may still be going)
    # (the tab's source is a gr.State: /run takes a slot for it and ignores what is sent there)
    calls = [
        (url, "build_index", [None, [raw_upload(url, archive)], ""]),
        (url, "ask_model", [None, 0]),
        (app_url, "memo_stats", [10, None, "a red circle\na green triangle\na blue star"]),
        (app_url, "mn_nonmath", [raw_upload(app_url, items), None, None]),
    ]
    refused = {}
    for base, name, data in calls:
        status, body = raw_run(base, name, data)
        refused[name] = status != 200 and "carries no session" in body
    print(where, "raw HTTP refusals:", refused)
    assert all(refused.values()), refused
    assert folders(sessions_root) == kept  # nothing kept for nobody
    assert {k: set(v) for k, v in mn.bench("zoo").data.items() if k.endswith("_sets")} == sets
    assert digest_tree(owner, ROOT / "assets") == before and nemo.check(prompt, source="zoo")["z"] == shared_z

    # gradio_client: two visitors at once, each in its own scope
    def visit(k: int) -> str:
        from backend.core.sessions import key_of

        c = Client(url, verbose=False, httpx_kwargs=SLOW_OK)
        try:
            built = c.predict([handle_file(str(visitor_zip(tmp_path, f"v{k}", 10 + k)))], "", api_name="/build_index")[
                0
            ]
            table = c.predict("", "density", api_name="/features_list")
            fid = int((table["data"] if isinstance(table, dict) else table)[0][0])
            assert c.predict(fid, api_name="/ask_model")[7]["label"]
            assert list((sessions_root / key_of(c.session_hash)).rglob("labels.json"))
            return built
        finally:
            c.close()

    with ThreadPoolExecutor(2) as pool:
        built = list(pool.map(visit, range(2)))
    assert all("Indexed 3 images" in b and "only this session sees it" in b for b in built), built
    m = Client(app_url, verbose=False, httpx_kwargs=SLOW_OK)
    try:
        assert "3 ordinary prompts you gave" in m.predict(10, None, "a\nb c\nd e f", api_name="/memo_stats")
    finally:
        m.close()

    after = digest_tree(owner, ROOT / "assets")
    print(where, f"owner files: {len(before)}, changed: {len(changed(before, after))}")
    assert changed(before, after) == []
    assert nemo.check(prompt, source="zoo")["z"] == shared_z


def test_a_visitors_builds_keep_no_leftovers_and_a_lost_session_says_so(lab, tmp_path):
    """One visitor: a build refused after its upload was unpacked (a picture whose header reads but
    whose data is damaged) leaves nothing; a second index replaces the first on disk; messages name
    no server path and no session id; then its folder is swept, and the page says the session
    ended, instead of showing the owner's index, and Ask writes no label beside the owner's."""
    import shutil

    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    from backend.core.sessions import key_of
    from tests.helpers.standins.features import sample_images

    url, owner, sessions_root = lab
    before = digest_tree(owner)
    damaged = tmp_path / "damaged.zip"
    good = sample_images(tmp_path / "good", 2, seed=3)
    with zipfile.ZipFile(damaged, "w") as z:
        z.write(good[0], "fine.png")
        z.writestr("broken.png", good[1].read_bytes()[:60])  # the header, then nothing
    c = Client(url, verbose=False, httpx_kwargs=SLOW_OK)
    try:
        folder = sessions_root / key_of(c.session_hash)
        with pytest.raises(AppError, match="broken.png could not be read as an image"):
            c.predict([handle_file(str(damaged))], "", api_name="/build_index")
        assert not list(folder.rglob("*.png")), "a refused build left its upload"
        said = []
        for k in range(2):
            out = c.predict([handle_file(str(visitor_zip(tmp_path, f"again{k}", 30 + k)))], "", api_name="/build_index")
            said += [out[0], out[3]]
        assert len(list(folder.rglob("feature_index.safetensors"))) == 1
        assert len(list(folder.rglob("*.png"))) == 3  # the second build's images only
        for text in said:
            assert c.session_hash not in text and key_of(c.session_hash) not in text
            assert str(sessions_root) not in text and str(owner) not in text, text
        rows = c.predict("", "density", api_name="/features_list")
        fid = int((rows["data"] if isinstance(rows, dict) else rows)[0][0])

        shutil.rmtree(folder)  # as the time limit's sweep, or a dropped heartbeat, removes it
        for call in (
            lambda: c.predict("", "density", api_name="/features_list"),
            lambda: c.predict(fid, api_name="/feature_page"),
            lambda: c.predict(fid, api_name="/ask_model"),
        ):
            with pytest.raises(AppError, match="This session has ended on the server.*Reload the page"):
                call()
    finally:
        c.close()
    assert digest_tree(owner) == before and not (owner / "labels.json").exists()
