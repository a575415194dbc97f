"""A plotly figure as an endpoint answers it ({"type": "plotly", "plot": "<json>"}), read back."""

from __future__ import annotations

import json


def traces(fig) -> list[dict]:
    """The figure's traces; fails the test on anything that is not a plotly figure."""
    assert isinstance(fig, dict) and fig.get("type") == "plotly", repr(fig)[:200]
    return json.loads(fig["plot"])["data"]


def title(fig) -> str:
    t = json.loads(fig["plot"])["layout"].get("title") or {}
    return t.get("text", "") if isinstance(t, dict) else str(t)


def names(fig) -> list:
    return [t.get("name") for t in traces(fig)]
