"""The Adapters tab's figures as the page receives them."""

import numpy as np

from components.adapters import spectrum as ui


def test_histograms_are_counted_on_the_server_in_shared_bins():
    """The page gets 80 counts per matrix, not the sampled entries: Gradio's front end copies every
    shown figure's value on each status message of any event, and 40,000 entries cost each click."""
    rng = np.random.default_rng(0)
    w, res = rng.normal(0, 1, 20000), rng.normal(0, 0.3, 20000)
    fig = ui.histogram_figure({"w_sample": w, "w_res_sample": res, "w_std": 1.0, "w_res_std": 0.3})
    assert [t.type for t in fig.data] == ["bar", "bar"]
    assert all(len(t.x) == ui.HIST_BINS for t in fig.data)
    assert list(fig.data[0].x) == list(fig.data[1].x)  # the same bins: the two shapes compare
    assert int(sum(fig.data[0].y)) == 20000 and int(sum(fig.data[1].y)) == 20000
    # W_res is the narrower: its entries sit in fewer, taller bins
    assert max(fig.data[1].y) > 2 * max(fig.data[0].y)
    assert len(fig.to_json()) < 20_000
