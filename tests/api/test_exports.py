"""Files handed to the browser, through the running app, with the session folders where a Space's owner
may put them (WORKBENCH_SESSION_DIR on persistent storage, outside the temp folder):

- every explanation (and every other export) made a folder in the temp directory that nobody removed
  (102 after 100 explanations); now none, and what the session had goes when it ends;
- the Report button left "writing the report…" and a disabled button for ever: Gradio refused to
  serve a file outside the temp folder (InvalidPathError). Now the report comes, and the session's
  own folder still cannot be fetched by URL.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from backend.core import sessions
from components.serving import exports

pytestmark = pytest.mark.timeout(300)
RULES = ["norm", "silu", "ssm", "gate"]
WORDS = ["dull", "brilliant", "lovely", "boring", "great", "awful", "fine", "slow"]


@pytest.fixture
def storage(monkeypatch):
    """Session folders outside the temp folder and outside the working directory (the places Gradio
    copies a file from), as /data/sessions is on a Space; removed afterwards."""
    root = Path.home() / ".cache" / f"wb-test-sessions-{uuid.uuid4().hex[:12]}"
    for place in (tempfile.gettempdir(), os.getcwd()):
        assert not str(root.resolve()).startswith(str(Path(place).resolve()) + os.sep), place
    monkeypatch.setenv(sessions.DIR_ENV, str(root))
    for env in (sessions.QUOTA_ENV, sessions.SHARED_ENV):
        monkeypatch.delenv(env, raising=False)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """A temp folder of this test alone for the serving process (it is this process), so that what the
    app leaves there is counted exactly, whatever else runs on the machine; Gradio's cache stays where
    the app has it."""
    from gradio.utils import get_upload_folder

    monkeypatch.setenv("GRADIO_TEMP_DIR", get_upload_folder())
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def _wait_gone(check, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.25)
    return check()


def _fetch(file: dict) -> bytes:
    """A file of an answer, fetched by its URL as a browser would (gradio_client's own downloads
    leave a folder per file in the temp folder: not the app's doing, so not used here)."""
    with urllib.request.urlopen(file["url"], timeout=30) as r:
        return r.read()


def test_explanations_leave_no_temp_folder_and_their_files_go_with_the_session(app_url, storage, own_tmp):
    from gradio_client import Client

    client = Client(app_url, verbose=False, download_files=False)
    sid = sessions.key_of(client.session_hash)
    texts = [f"the plot was {a} but the cast was {b}" for a in WORDS for b in WORDS][:50]
    for text in texts:
        *_, jfile, pfile, res = client.predict(text, ["mambalrp", "gi"], RULES, "", True, api_name="/explain_text")
        assert json.loads(_fetch(jfile))["tokens"] == res["tokens"]
        assert _fetch(pfile)[:4] == b"\x89PNG"
    # the other tabs' exports too: a feature page, Adapters' analysis
    files = list(client.predict(0, api_name="/feature_page")[5:7])
    files += client.predict("pissa-toy", "fc2", 8, "pissa", api_name="/analyse")[3]
    assert len(files) == 4 and all(_fetch(f) for f in files)
    assert os.listdir(own_tmp) == []  # was one folder per call (wb-relevance-*, wb-features-*, …)
    mine = storage / sid
    assert mine.is_dir() and [p for p in mine.rglob("*") if p.is_file() and not p.name.startswith(".")] == []
    assert len(exports.copies_of(sid)) > len(texts)  # Gradio's copies, named for the session (one per content)
    client.close()  # the visitor leaves: Gradio's unload ends the session
    assert _wait_gone(lambda: not mine.exists() and not exports.copies_of(sid)), (
        list(mine.rglob("*")) if mine.exists() else exports.copies_of(sid)[:3]
    )
    assert os.listdir(own_tmp) == []


def test_a_call_with_no_session_gets_its_export_and_leaves_no_folder(app_url, storage, own_tmp):
    """A raw POST carries no session: its files are nobody's, and still nothing stays in the temp
    folder or among the session folders."""
    body = json.dumps({"data": ["the plot was dull but the cast was lovely", ["mambalrp"], RULES, "", True, None]})
    req = urllib.request.Request(
        app_url + "gradio_api/run/explain_text",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        out = json.loads(r.read())["data"]
    jfile = out[3]
    assert json.loads(_fetch(jfile))["tokens"] == out[5]["tokens"]
    assert Path(jfile["path"]).parent.name.startswith(exports.PREFIX + "none-")
    assert os.listdir(own_tmp) == [] and not (storage.exists() and any(storage.iterdir()))


def _config(url: str) -> dict:
    with urllib.request.urlopen(url + "config", timeout=30) as r:
        return json.loads(r.read())


def _browser_click(url: str, session_hash: str, fn_index: int, trigger_id: int) -> dict:
    """What the page does for an event no client library may call (api_visibility="private"): join
    the queue with the event's index, then read the session's event stream to its end."""
    import httpx

    body = {
        "data": [],
        "event_data": None,
        "fn_index": fn_index,
        "trigger_id": trigger_id,
        "session_hash": session_hash,
    }
    with httpx.Client(timeout=120) as http:
        joined = http.post(url + "gradio_api/queue/join", json=body)
        assert joined.status_code == 200, joined.text
        with http.stream("GET", url + "gradio_api/queue/data", params={"session_hash": session_hash}) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("msg") == "process_completed":
                    return msg
    raise AssertionError("the event never completed")


def test_the_report_button_gives_its_file_wherever_the_session_folders_are(app_url, storage):
    from gradio_client import Client

    client = Client(app_url, verbose=False, download_files=False)
    client.predict(
        "the plot was dull but the cast was brilliant", ["mambalrp"], RULES, "", True, api_name="/explain_text"
    )
    config = _config(app_url)
    ids = {c.get("props", {}).get("elem_id"): c["id"] for c in config["components"]}
    dl, btn = ids["wb-report-file"], ids["wb-report-btn"]
    make = next(
        d
        for d in config["dependencies"]
        if d["outputs"] == [dl, btn] and d.get("trigger_after") is not None and not d.get("trigger_only_on_failure")
    )
    done = _browser_click(app_url, client.session_hash, make["id"], btn)
    assert done.get("success"), done  # was: InvalidPathError, and the page kept "writing the report…"
    file_update, button = done["output"]["data"]
    assert button.get("interactive") is True and "1 tab(s)" in file_update["label"]
    with urllib.request.urlopen(file_update["value"]["url"], timeout=30) as r:
        page = r.read().decode()
    assert "Token relevance" in page and "brilliant" in page and str(storage) not in page
    # the visitor's own folder is not served: no URL of the session folders reaches a file
    sid = sessions.key_of(client.session_hash)
    mark = storage / sid / ".last-used"
    assert mark.is_file()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{app_url}gradio_api/file={mark}", timeout=30)
    assert refused.value.code == 403
    # one report of the session at a time: a second one replaces the first
    again = _browser_click(app_url, client.session_hash, make["id"], btn)["output"]["data"][0]["value"]
    reports = [p for d in exports.copies_of(sid) for p in d.glob("workbench-report-*.html")]
    assert [str(p) for p in reports] == [again["path"]]
    client.close()
    assert _wait_gone(lambda: not exports.copies_of(sid))
