"""The Adapters tab's pin and unpin as plain functions: the pin keeps the shown analysis's numbers
and draws them dotted beside the next one; unpin drops them; nothing to pin is refused."""

from __future__ import annotations

import gradio as gr
import pytest

from components.adapters import spectrum


def _shown(rank: int) -> dict:
    return {
        "model": "pissa-toy",
        "layer": "fc2",
        "shape": [16, 32],
        "rank": rank,
        "init": "pissa",
        "singular_values": [4.0, 2.0, 1.0, 0.5],
        "residual_singular_values": [1.0, 0.5],
    }


def test_pin_keeps_the_numbers_and_unpin_drops_them():
    kept, fig, label = spectrum.pin(_shown(8))
    assert kept == _shown(8) and label == "pinned: pissa-toy · fc2 · r 8 · pissa (dotted in the spectrum)"
    dotted = [t for t in fig.data if getattr(t.line, "dash", None) == "dot"]
    assert dotted and all("pinned" in t.name for t in dotted)
    none, fig, label = spectrum.unpin(_shown(3))
    assert none is None and label == "" and not [t for t in fig.data if getattr(t.line, "dash", None) == "dot"]
    assert spectrum.unpin(None)[1] == gr.skip()
    with pytest.raises(gr.Error, match="Nothing to pin yet"):
        spectrum.pin(None)
