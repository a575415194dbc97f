"""backend.core.sessions: a visitor's folder, its quota, its end and the time limit."""

from __future__ import annotations

import os
import time

import pytest

from backend.core import sessions


@pytest.fixture(autouse=True)
def root(tmp_path, monkeypatch):
    monkeypatch.setenv(sessions.DIR_ENV, str(tmp_path / "sessions"))
    for env in (sessions.QUOTA_ENV, sessions.TTL_ENV, sessions.SHARED_ENV):
        monkeypatch.delenv(env, raising=False)
    return tmp_path / "sessions"


def test_each_session_has_its_own_folder_and_ids_cannot_leave_the_root(root):
    a, b = sessions.folder("abc123"), sessions.folder("xyz_789")
    assert a != b and a.parent == b.parent == root
    assert sessions.owns("abc123", a / "x" / "file") and not sessions.owns("abc123", b / "file")
    for bad in ("../up", "a/b", "", "x" * 65, "a b"):
        with pytest.raises(ValueError):
            sessions.folder(bad or "..")


def test_quota_refuses_before_writing_and_removes_what_passed_it(monkeypatch):
    monkeypatch.setenv(sessions.QUOTA_ENV, "1kB")
    f = sessions.folder("s1")
    (f / "a.bin").write_bytes(b"x" * 600)
    sessions.check_room("s1", 300)
    with pytest.raises(sessions.QuotaExceeded, match=r"over a visitor's quota of 1\.0 kB \(WORKBENCH_SESSION_QUOTA\)"):
        sessions.check_room("s1", 500, "the uploaded images")
    big = f / "index"
    big.mkdir()
    (big / "i.bin").write_bytes(b"y" * 600)
    with pytest.raises(sessions.QuotaExceeded, match="removed again"):
        sessions.keep_within_quota("s1", [big], "the index")
    assert not big.exists() and (f / "a.bin").exists()
    monkeypatch.setenv(sessions.QUOTA_ENV, "none")
    sessions.check_room("s1", 10**12)


def test_ending_a_session_removes_its_folder_and_tells_listeners(monkeypatch):
    heard = []
    monkeypatch.setattr(sessions, "_ON_END", [lambda sid, path: heard.append((sid, path.exists()))])
    f = sessions.folder("gone")
    (f / "x").write_text("x")
    other = sessions.folder("stays")
    assert sessions.end("gone") and not f.exists() and other.exists()
    assert heard == [("gone", True)]
    assert not sessions.end("gone")  # twice is harmless


def test_idle_sessions_are_swept_after_the_time_limit(monkeypatch):
    monkeypatch.setenv(sessions.TTL_ENV, "60")
    old, fresh = sessions.folder("old"), sessions.folder("fresh")
    past = time.time() - 120
    os.utime(old / ".last-used", (past, past))
    used = sessions.folder("used") / "features" / "index.bin"
    used.parent.mkdir()
    used.write_bytes(b"x")
    os.utime(used.parents[1] / ".last-used", (past, past))
    sessions.used(used)  # reading one's own files counts as use
    assert sessions.sweep() == ["old"]
    assert not old.exists() and fresh.exists()
    assert sessions.find("fresh", ".last-used") is not None and sessions.find("fresh", "nothing") is None


def test_shared_builds_setting(monkeypatch):
    assert not sessions.shared_builds()
    monkeypatch.setenv(sessions.SHARED_ENV, "1")
    assert sessions.shared_builds()


def test_a_space_is_a_methods_folder_in_a_session_and_nobodys_has_none(root, monkeypatch):
    """The one convention (sessions.Space): <root>/<key>/<method's name>/, read without making
    anything, made on a write, under the session's quota; nobody's space has no folder and no quota."""
    monkeypatch.setenv(sessions.QUOTA_ENV, "1kB")
    mine = sessions.Space("k1", "nemo")
    assert mine.path("x.bin") == root / "k1" / "nemo" / "x.bin" and not (root / "k1").exists()  # a read makes nothing
    made = mine.make("sub")
    assert made == root / "k1" / "nemo" / "sub" and made.is_dir()
    (made / "a.bin").write_bytes(b"x" * 600)
    # the quota is the session's, across its spaces
    with pytest.raises(sessions.QuotaExceeded):
        sessions.Space("k1", "features").room(500, "the uploaded images")
    big = sessions.Space("k1", "features").make("index")
    (big / "i.bin").write_bytes(b"y" * 600)
    with pytest.raises(sessions.QuotaExceeded, match="removed again"):
        sessions.Space("k1", "features").keep_within([big], "the index")
    assert not big.exists() and (made / "a.bin").exists()
    nobody = sessions.Space(None, "nemo")
    assert nobody.path() is None and nobody.make("sub") is None
    nobody.room(10**12)  # no quota: the shared files are the owner's
    with pytest.raises(ValueError):
        sessions.Space("../up", "nemo").path()


def test_a_request_resolves_its_space_and_a_write_without_a_session_is_refused(root, monkeypatch):
    import gradio as gr
    from types import SimpleNamespace

    from components.serving import visitor

    request = SimpleNamespace(session_hash="abc123hash")
    own = visitor.space(request, "nemo", write=True)
    assert own.session == sessions.key_of("abc123hash") and own.name == "nemo"
    for nobody in (None, SimpleNamespace(session_hash=None)):
        assert visitor.space(nobody, "nemo").session is None  # a read: the shared files
        with pytest.raises(gr.Error, match="carries no session"):
            visitor.space(nobody, "nemo", write=True)
    monkeypatch.setenv(sessions.SHARED_ENV, "1")  # the owner shares builds: nobody's, for everyone
    assert visitor.space(request, "nemo", write=True).session is None
    assert visitor.space(None, "nemo", write=True).session is None


def test_the_quota_counts_every_session_of_one_person(monkeypatch):
    """Sessions are free to make: a hundred sessions of one person share one quota, and another
    person's files do not count against it."""
    monkeypatch.setenv(sessions.QUOTA_ENV, "1kB")
    for i in range(100):
        sessions.Space(f"p{i}", "features", "ada").make()
    (sessions.Space("p0", "features", "ada").make() / "a.bin").write_bytes(b"x" * 400)
    (sessions.Space("p1", "features", "ada").make() / "b.bin").write_bytes(b"x" * 400)
    (sessions.Space("q0", "features", "bob").make() / "c.bin").write_bytes(b"x" * 900)
    sessions.Space("p99", "features", "ada").room(150)
    with pytest.raises(sessions.QuotaExceeded, match="all your sessions"):
        sessions.Space("p99", "features", "ada").room(250)
    sessions.Space("q1", "features", "bob").room(50)  # bob's own 900 bytes, not ada's
    assert sessions.person_of("p42") == "ada" and len(sessions.sessions_of("ada")) == 100
