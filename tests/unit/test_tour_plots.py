"""The tours' figures keep their words inside the figure at its narrowest (presenter view at 1000 px):
plotly never wraps a title, so components.tour.plots does."""

import html
import re

from components.tour import plots as P


def _shown(line: str) -> int:
    return len(html.unescape(re.sub(r"<[^>]*>", "", line)))


def test_wrap_breaks_at_spaces_counting_what_is_shown():
    text = "Prompt: “a purple cross &amp; a <b>yellow circle</b> and a blue triangle on a green background”"
    out = P.wrap(text, 40)
    lines = out.split("<br>")
    assert len(lines) == 3 and all(_shown(x) <= 40 for x in lines), lines
    assert " ".join(lines) == text  # nothing lost or reordered
    assert P.wrap("already<br>two lines of a title that is long enough to wrap", 10).count("<br>") == 1
    assert P.wrap("short", 40) == "short"


def test_finish_makes_room_for_wrapped_titles():
    long_title = "Similarity to the training image (SSIM, 0–1): all neurons on (top), NeMo's off, random ones off"
    fig = P.figure()
    fig.update_xaxes(title="memorization score (agreement of the first denoising step across 5 start noises)")
    P.finish(fig, long_title)
    assert fig.layout.title.text.count("<br>") == 1
    assert fig.layout.xaxis.title.text.count("<br>") == 1
    assert (fig.layout.margin.t, fig.layout.margin.b) == (56 + P.LINE_PX, 50 + P.LINE_PX)

    plain = P.finish(P.figure(), "a short title")
    assert (plain.layout.margin.t, plain.layout.margin.b) == (56, 50)


def test_an_axis_title_over_a_narrow_plot_wraps_sooner():
    title = "quantisation error removed (% of QLoRA's error), all layers"  # 59 characters
    wide = P.figure()
    wide.update_xaxes(title=title)
    P.finish(wide)
    narrow = P.figure()
    narrow.update_xaxes(title=title)
    P.finish(narrow, margin=dict(l=200))  # long tick labels on the left
    assert "<br>" not in wide.layout.xaxis.title.text
    assert max(_shown(x) for x in narrow.layout.xaxis.title.text.split("<br>")) <= P.AXIS_CHARS - 20


def test_panel_titles_are_small_enough_to_sit_side_by_side():
    fig = P.figure(1, 5, subplot_titles=[f"top image {j}" for j in range(1, 6)])
    assert {a.font.size for a in fig.layout.annotations} == {P.PANEL_TITLE_SIZE}
