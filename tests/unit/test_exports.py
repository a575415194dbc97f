"""components.serving.exports: what a call hands to the browser is written in the visitor's space, handed to
Gradio as a copy in Gradio's cache named for the session, and nothing of it stays behind: not in the
temp folder (every export made a folder there that nobody removed: 102 after 100 explanations), not
in the session folder, and the copies go when the session ends."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.core import sessions
from components.serving import exports


@pytest.fixture
def places(tmp_path, monkeypatch):
    """A temp folder, Gradio's cache and the session folders of this test alone; the session folders
    outside the temp folder (as an owner's persistent storage is)."""
    tmp, cache, root = tmp_path / "tmp", tmp_path / "gradio-cache", tmp_path / "storage" / "sessions"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(cache))
    monkeypatch.setenv(sessions.DIR_ENV, str(root))
    for env in (sessions.QUOTA_ENV, sessions.SHARED_ENV):
        monkeypatch.delenv(env, raising=False)
    assert not str(root).startswith(tempfile.gettempdir())
    return SimpleNamespace(tmp=tmp, cache=cache, root=root)


@pytest.fixture(scope="module")
def explanations():
    """Explanations of distinct sentences (distinct files), from the zoo's text model."""
    from backend.lrp import service as svc

    m = svc.load_text("zoo")
    words = ["dull", "brilliant", "lovely", "boring", "great"]
    return [
        svc.explain_text(m, f"the plot was {a} but the cast was {b}", ["mambalrp", "gi"]) for a in words for b in words
    ][:12]


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def test_explanations_leave_nothing_in_the_temp_or_session_folder_and_go_with_the_session(places, explanations):
    from components.relevance.figures import export_text

    request = SimpleNamespace(session_hash="visitor-a")
    sid = sessions.key_of("visitor-a")
    for res in explanations:
        jpath, ppath = export_text(res, request)
        assert json.loads(Path(jpath).read_text())["tokens"] == res["tokens"]
        assert Path(ppath).read_bytes()[:4] == b"\x89PNG"
        # a copy in Gradio's cache (Gradio serves it as it is, wherever the session folders are)
        assert Path(jpath).parent.parent == places.cache and Path(jpath).parent.name.startswith(f"wb-{sid}-")
    assert os.listdir(places.tmp) == []
    assert [p.name for p in _files(places.root / sid) if p.name not in (".last-used", ".person")] == []
    copies = exports.copies_of(sid)
    assert len(copies) == 2 * len(explanations)  # each file once: no copy of another session's, no old one
    assert sessions.end(sid)
    assert exports.copies_of(sid) == [] and not (places.root / sid).exists()
    assert _files(places.cache) == []


def test_the_same_file_twice_is_one_copy_and_another_session_never_shares_it(places, explanations):
    from components.relevance.figures import export_text

    a, b = SimpleNamespace(session_hash="visitor-a"), SimpleNamespace(session_hash="visitor-b")
    first = export_text(explanations[0], a)
    again, other = export_text(explanations[0], a), export_text(explanations[0], b)
    assert first == again and set(first).isdisjoint(other)
    sessions.end(sessions.key_of("visitor-a"))  # a's end leaves b's download in place
    assert not any(Path(p).exists() for p in first) and all(Path(p).is_file() for p in other)


def test_a_call_with_no_session_gets_its_file_and_leaves_no_folder(places, explanations):
    from components.relevance.figures import export_text

    for request in (None, SimpleNamespace(session_hash=None)):  # Python calling it; a raw POST
        jpath, ppath = export_text(explanations[1], request)
        assert Path(jpath).is_file() and Path(ppath).is_file()
        assert Path(jpath).parent.name.startswith("wb-none-")
    assert os.listdir(places.tmp) == []
    assert not places.root.exists() or not any(places.root.iterdir())


def test_every_export_of_the_tabs_goes_through_exports():
    """No module of the UI makes a folder in the temp directory that nobody removes."""
    root = Path(__file__).resolve().parents[2] / "components"
    made = [
        p.name
        for p in root.glob("*.py")
        for line in p.read_text().splitlines()
        if "mkdtemp(" in line or "NamedTemporaryFile(" in line or "mkstemp(" in line
    ]
    # agent_tools_language: an agent's items, read into memory and removed before the tool answers
    assert set(made) <= {"exports.py", "agent_tools_language.py"}, made


def test_the_report_button_always_comes_back():
    """A report that cannot be written (or handed over) ends in a message and a usable button."""
    import gradio as gr

    from components.report import writer as report

    with gr.Blocks() as demo:
        report.header_button()
    fns = list(demo.fns.values())
    make = next(f for f in fns if getattr(f.fn, "__name__", "") == "make")
    after = [f for f in fns if f.trigger_after == make._id and f.trigger_only_on_failure]
    assert len(after) == 1 and [o.elem_id for o in after[0].outputs] == ["wb-report-file", "wb-report-btn"]
    dl, btn = after[0].fn()
    assert btn["interactive"] is True and dl["label"] == report.REPORT_FAILED


def test_an_agents_file_link_names_no_server_path():
    from components.agents import mcp_server

    cache = Path(tempfile.gettempdir()) / "gradio" / "wb-none-abc" / "workbench-report-1.html"
    text = f"http://127.0.0.1:7860/gradio_api/file={cache}"
    link = mcp_server.file_link(text, "https://owner-workbench.hf.space")
    assert link.startswith("https://owner-workbench.hf.space" + mcp_server.FILE_ROUTE + "/")
    assert link.endswith("/workbench-report-1.html") and "/tmp" not in link and "gradio_api/file=" not in link
    assert mcp_server.file_link('{"tabs": []}', "http://x") == '{"tabs": []}'


def test_a_session_that_ends_while_its_files_are_written_is_told_not_an_internal_error(places):
    """A page closed as its race finished: the session's end removes its folder while the call
    still writes the exports. The call ends with a message (gr.Error, which the guard does not count
    as an internal error), not a FileNotFoundError, and leaves nothing behind."""
    import gradio as gr

    request = SimpleNamespace(session_hash="leaves-early")
    sid = sessions.key_of("leaves-early")

    def write(folder: Path):
        (folder / "first.json").write_text("{}")
        assert sessions.end(sid)  # the visitor leaves here
        (folder / "second.png").write_bytes(b"\x89PNG")
        return [str(folder / "first.json"), str(folder / "second.png")]

    with pytest.raises(gr.Error, match="session ended"):
        exports.hand_out(write, request)
    assert exports.copies_of(sid) == [] and not (places.root / sid).exists()

    def broken(folder: Path):  # a missing file of the call's own, with the session alive, is a defect
        return [str(folder / "never-written.png")]

    with pytest.raises(FileNotFoundError):
        exports.hand_out(broken, SimpleNamespace(session_hash="stays"))
