"""The zoo's prompt format ("<bos> … sentiment:") is marked as template in Relevance's heatmap and
left out of its colour scale by default (it would set the scale: "sentiment:" carries the largest
|R| for MambaLRP), with a toggle that puts it back, and words on the page that say so."""

from __future__ import annotations

import re

import numpy as np
import pytest

from components.relevance.figures import heatmap_html, max_abs


@pytest.fixture(scope="module")
def res():
    from backend.lrp import service as svc

    m = svc.load_text("zoo")
    return svc.explain_text(
        m, "the plot was dull but the cast was brilliant and the music was lovely", ["mambalrp", "mambaattr"]
    )


def _backgrounds(page: str, method_label: str) -> list[str]:
    row = page.split(f">{method_label}<", 1)[1].split("</div></div>", 1)[0]
    return re.findall(r"style='background:([^;]+);", row)


def test_template_tokens_are_marked_and_left_out_of_the_scale(res):
    n = len(res["tokens"])
    assert res["template_positions"] == [0, n - 1] and res["tokens"][-1] == "sentiment:"
    rel = np.abs(np.asarray(res["relevance"]["mambalrp"]))
    assert rel.argmax() in (0, n - 1)  # what made the template dominate the picture
    page = heatmap_html(res, True)
    assert page.count("wb-token wb-template") == 2 * len(res["methods"])
    assert "left out of the colour scale" in page and "Template tokens in the colour scale" in page
    bgs = _backgrounds(page, "MambaLRP")
    assert bgs[0] == bgs[-1] == "var(--background-fill-secondary)"
    # the typed words now use the whole scale: the strongest word reaches the end of the colour map
    words = rel[1:-1]
    assert max_abs(res) == pytest.approx(
        max(float(np.abs(np.asarray(v)[1:-1]).max()) for v in res["relevance"].values())
    )
    from components.relevance.figures import _rgb

    assert bgs[1 + int(words.argmax())] in (_rgb(1.0), _rgb(-1.0))


def test_the_toggle_puts_the_template_back_in_the_scale(res):
    page = heatmap_html(res, True, template=True)
    bgs = _backgrounds(page, "MambaLRP")
    assert bgs[-1].startswith("rgb(") and "included in the colour scale" in page
    assert max_abs(res, template=True) >= max_abs(res)
