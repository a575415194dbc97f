"""Each tab's default first view, kept (components.serving.first_views): computed once in the background,
served when the inputs are the defaults, read back after a restart, never served for other inputs,
other code, or after its files went missing; a view being computed is waited for, not computed twice."""

import threading

import pytest

from components.serving import first_views as FV


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv(FV.ENV, str(tmp_path / "views"))
    monkeypatch.setattr(FV, "_VIEWS", {})
    monkeypatch.setattr(FV, "_KEY", ["code-a"])
    return tmp_path / "views"


def _fn(calls, export):
    def first_view(text, n):
        calls.append((text, n))
        export.write_text(f"{text} × {n}")
        return f"<b>{text}</b>", {"n": n, "file": str(export)}, [str(export), None]

    return first_view


def test_a_kept_view_is_served_for_the_defaults_only_and_after_a_restart(store, tmp_path, monkeypatch):
    calls, export = [], tmp_path / "export.json"
    FV.register("relevance", _fn(calls, export), ["good film", 5.0])
    FV.warm().join(30)
    assert calls == [("good film", 5)]  # the defaults, as Gradio hands them (5.0 → 5)
    handed = []
    monkeypatch.setattr("components.serving.exports.served", lambda p: handed.append(p) or f"/served/{len(handed)}")
    (step,) = FV.served("relevance", ("good film", 5))
    assert step[0] == "<b>good film</b>" and step[1]["n"] == 5
    assert step[1]["file"].startswith("/served/") and step[2][0].startswith("/served/") and step[2][1] is None
    assert all(str(store) in p for p in handed)  # the visitor gets a copy of the kept file, not the original
    assert FV.served("relevance", ("another film", 5)) is None  # a changed input computes live
    export.unlink()
    # a restart: read back from the store, not computed again
    monkeypatch.setattr(FV, "_VIEWS", {})
    FV.register("relevance", _fn(calls, export), ["good film", 5])
    FV.warm().join(30)
    assert len(calls) == 1 and FV.served("relevance", ("good film", 5))[0][0] == "<b>good film</b>"
    # other code: another view
    monkeypatch.setattr(FV, "_VIEWS", {})
    monkeypatch.setattr(FV, "_KEY", ["code-b"])
    FV.register("relevance", _fn(calls, export), ["good film", 5])
    FV.warm().join(30)
    assert len(calls) == 2


def test_a_view_in_steps_is_kept_step_by_step(store):
    def first_view(x):
        yield "checking", None
        yield "checked", x * 2

    FV.register("memorization", first_view, [3])
    FV.warm().join(30)
    assert FV.served("memorization", (3,)) == [("checking", None), ("checked", 6)]


def test_a_tab_opened_while_its_view_is_computed_waits_for_it(store):
    go, calls = threading.Event(), []

    def slow(x):
        calls.append(x)
        go.wait(10)
        return x + 1

    FV.register("math_neurons", slow, [1])
    t = FV.warm()
    while not calls:
        pass
    got = []
    reader = threading.Thread(target=lambda: got.append(FV.served("math_neurons", (1,))))
    reader.start()
    go.set()
    reader.join(10)
    t.join(10)
    assert got == [[2]] and calls == [1]  # served the one computation


def test_a_view_that_fails_is_computed_live_and_off_means_off(store, monkeypatch):
    def broken(x):
        raise RuntimeError("no model")

    FV.register("adapters", broken, [1])
    FV.warm().join(30)
    assert FV.served("adapters", (1,)) is None
    monkeypatch.setenv(FV.ENV, "off")
    assert FV.warm() is None and FV.served("adapters", (1,)) is None


def test_the_store_reads_back_figures_tables_arrays_and_pictures_without_pickle(store, tmp_path):
    """JSON and .npy files only: what a tab returns comes back with its type (a tuple stays a tuple,
    Gradio reads a handler's outputs by it); an output with no safe format keeps the view in memory."""
    import numpy as np
    import pandas as pd
    import plotly.graph_objects as go
    from PIL import Image

    fig = go.Figure(go.Bar(x=[1, 2], y=[3.5, -1]))
    frame = pd.DataFrame({"layer": ["fc1", "fc2"], "ratio": [0.5, 1.25]})
    img = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    out = (
        "<b>x</b>",
        fig,
        frame,
        [(img, "caption")],
        {"__type__": "update", "visible": True},
        None,
        3,
        Image.fromarray(img),
    )
    FV.register("adapters", lambda: out, [])
    FV.warm().join(30)
    FV._VIEWS["adapters"].steps = None
    assert FV._load(FV._VIEWS["adapters"])
    (got,) = FV._VIEWS["adapters"].steps
    assert isinstance(got, tuple) and got[0] == "<b>x</b>" and got[5] is None and got[6] == 3
    assert got[1].to_dict()["data"] == fig.to_dict()["data"]
    assert got[2].equals(frame)
    assert np.array_equal(got[3][0][0], img) and got[3][0][1] == "caption" and isinstance(got[3][0], tuple)
    assert got[4] == {"__type__": "update", "visible": True}
    assert np.array_equal(np.asarray(got[7]), img)
    assert not list(store.rglob("*.pkl"))

    class Component:  # e.g. a gr.Button(...) update object
        pass

    FV.register("tour", lambda: (Component(),), [])
    FV.warm(["tour"]).join(30)
    assert FV.served("tour", ()) is not None and not list(store.glob("*/tour/view.json"))


def test_a_view_its_first_visitor_computes_is_kept_and_the_start_waits_for_visitors(store, tmp_path, monkeypatch):
    """Opened in the first seconds after a start, before the start-up reached it, a tab's view is the
    visitor's own computation, kept for the next visitor; meanwhile the start-up computes no other
    view, and a failed computation leaves the view to be computed again."""
    calls, export = [], tmp_path / "export.json"
    FV.register("relevance", _fn(calls, export), ["good film", 5])
    FV.register("math_neurons", lambda k: calls.append(("math", k)) or f"k={k}", [3])
    monkeypatch.setattr("components.serving.exports.served", lambda p: p)
    with pytest.raises(RuntimeError):
        with FV.live("math_neurons", (3,)):
            raise RuntimeError("the visitor's computation failed")
    assert not FV._VIEWS["math_neurons"].computing.is_set()  # unclaimed: computed again later
    started = threading.Event()
    with FV.live("relevance", ("good film", 5)) as keep:
        thread = FV.warm()
        started.wait(0.5)
        assert calls == []  # the start-up waits while a visitor's first view is computed
        keep([_fn(calls, export)("good film", 5)])
    thread.join(30)
    # relevance's view is the visitor's (computed once), math's is the start-up's
    assert calls == [("good film", 5), ("math", 3)]
    assert FV.served("relevance", ("good film", 5))[0][0] == "<b>good film</b>"
    assert FV.served("math_neurons", (3,)) == ["k=3"]
    with FV.live("relevance", ("another film", 5)) as keep:  # other inputs: computed, never kept
        keep(["other"])
    assert FV.served("relevance", ("good film", 5))[0][0] == "<b>good film</b>"


def test_the_key_is_made_of_the_apps_own_code_and_manifests(tmp_path, monkeypatch):
    """The key hashes the repository's components/, backend/ and the zoo's manifests: a key of no
    files (a wrong root) would serve the views of any earlier code for ever."""
    import hashlib

    assert (FV.ROOT / "app.py").is_file() and (FV.ROOT / "components" / "serving" / "first_views.py").is_file()
    key = FV.code_key()
    assert key != hashlib.sha256().hexdigest()[:16]
    copy = tmp_path / "repo"
    for folder in ("components", "backend"):
        (copy / folder).mkdir(parents=True)
        (copy / folder / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(FV, "ROOT", copy)
    before = FV.code_key()
    (copy / "backend" / "a.py").write_text("x = 2\n")
    assert FV.code_key() != before  # a changed file is another key
