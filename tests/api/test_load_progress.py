"""The first request of a tab shows its model loading on the event's progress bar, through the same
Gradio channel the browser reads (the messages themselves: tests/unit/test_load_progress.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

pytestmark = pytest.mark.timeout(300)


def progress_messages(job) -> list[str]:
    """Every progress text the client received for a finished job, in order."""
    out, updates = [], job.communicator.updates
    while True:
        try:
            update = updates.get_nowait()
        except asyncio.QueueEmpty:
            return out
        for unit in getattr(update, "progress_data", None) or []:
            if unit.desc:
                out.append(unit.desc)


def test_first_explain_reports_its_model_load(client, monkeypatch):
    from backend.core import store, weights
    from backend.lrp.models import text_preset
    from components.gradio_fixes.patches import PROGRESS_POLL_S

    model_id = weights.key(text_preset("zoo"))  # the shared weights entry every tab uses
    store.evict(model_id)  # the first request after start, whatever ran before in this session
    # The queue sends a running event's latest progress every PROGRESS_POLL_S: the zoo model loads
    # faster than that on a quick machine, and its messages are then replaced by the next before one
    # is sent. A checkpoint's load takes seconds; this one is made to take five polls.
    load = store._load

    def slow_load(model_id, loader, *rest):
        def slower():
            time.sleep(5 * PROGRESS_POLL_S)
            return loader()

        return load(model_id, slower, *rest)

    monkeypatch.setattr(store, "_load", slow_load)
    assert model_id not in store.loaded()
    job = client.submit(
        "the plot was dull but the cast was brilliant",
        ["mambalrp"],
        ["norm", "silu", "ssm", "gate"],
        "",
        True,
        api_name="/explain_text",
    )
    job.result(timeout=240)
    seen = progress_messages(job)
    assert model_id in store.loaded()
    name = store.display_name(model_id)
    assert name == "mamba-sentiment", name  # as a person reads it, without the entry's class suffix
    # the load's messages reach the client: its start or shard (what the queue sent while the load
    # ran, it sends the latest pending one) and its end
    assert any(m.startswith(f"loading {name}") for m in seen) or any(m.startswith(f"loaded {name} in") for m in seen), (
        seen
    )
