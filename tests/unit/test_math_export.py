"""Math's export holds what was computed and computes no model call: the first export of a session
took 20.7 s because it ran the method comparison (4 evaluations) and the scale sweep (9) that nobody
had asked for. It now takes them from the cache when their buttons have run, and says so otherwise."""

from __future__ import annotations

import json

from backend.mathneuro import service
from components.math_neurons import handlers as H


def test_the_first_export_runs_no_model_and_says_what_it_leaves_out(monkeypatch):
    args = ("zoo", "MathNeuro", 7, 0.0, 8)  # a setting of this test alone: nothing of it is cached yet
    H.live(*args)  # the view on screen
    scored = []
    real = service.Bench.score
    monkeypatch.setattr(service.Bench, "score", lambda self, *a, **k: scored.append(a[0]) or real(self, *a, **k))
    answered = service.Bench.answers
    monkeypatch.setattr(
        service.Bench, "answers", lambda self, *a, **k: scored.append("answers") or answered(self, *a, **k)
    )
    files = H.export(*args)
    assert scored == []  # no evaluation and no sample answers ran for the export: the view's are reused
    state = json.loads(open(next(f for f in files if f.endswith(".json"))).read())
    assert state["figure2"] is None and state["scale_curve"] is None
    assert "'Compare methods' and 'Sweep the scale factor'" in state["not_computed"]
    assert state["modified"]["math"] <= state["baseline"]["math"]
    # after 'Compare methods' and 'Sweep' the export carries both: tests/api/test_math_neurons.py
