"""NeMo's tab rendering (components.memorization.figures): the export figure, the image grid, hover values."""

import numpy as np

from tests.unit.test_nemo import PROMPT


def fake_compare(n_seeds=3, neurons=("mid.attn0:1", "down0.attn0:2"), size=16, seed=0):
    """What service.compare returns, with random images (the tab's rendering needs nothing else)."""
    rng = np.random.default_rng(seed)
    on = rng.random((n_seeds, size, size, 3)).astype(np.float32)
    off = on if not neurons else rng.random((n_seeds, size, size, 3)).astype(np.float32)
    ss_on, ss_off = rng.random(n_seeds).tolist(), rng.random(n_seeds).tolist()
    return {
        "prompt": PROMPT,
        "seeds": list(range(n_seeds)),
        "neurons": list(neurons),
        "n_neurons": len(neurons),
        "theta_mem": 0.5,
        "images_on": on,
        "images_off": off,
        "ssim_on": ss_on,
        "ssim_off": ss_off if neurons else ss_on,
        "diversity_on": 0.2,
        "diversity_off": 0.6 if neurons else 0.2,
        "alignment_on": 1.0,
        "alignment_off": 0.5,
        "score_on": 0.7,
        "score_off": 0.3 if neurons else 0.7,
        "train_image": rng.random((size, size, 3)).astype(np.float32),
        "reference_kind": "training image",
    }


def test_export_draws_an_off_row_only_when_neurons_are_off():
    import matplotlib.pyplot as plt

    from components.memorization import figures as tab

    def titles(c):
        fig = tab.export_figure(c, None, None)
        out = [ax.get_title() for ax in fig.axes] + [t.get_text() for t in fig.texts]
        plt.close(fig)
        return out

    with_off = titles(fake_compare(neurons=("mid.attn0:1",)))
    heads = [t.split("\n")[0] for t in with_off if t.startswith("seed")]
    assert sum(h.endswith(" off") for h in heads) == 3 and sum(h.endswith(" on") for h in heads) == 3
    none_off = titles(fake_compare(neurons=()))
    assert not any(t.startswith("seed") and "off" in t for t in none_off)
    assert sum(t.startswith("seed") for t in none_off) == 3 and tab.NO_NEURONS_OFF in none_off


def test_grid_rows_are_on_and_off_columns_are_seeds():
    from components.memorization import figures as tab

    c = fake_compare(n_seeds=3, neurons=("mid.attn0:1",))
    h = tab.grid_html(c)
    assert h.count("data-row='on' data-seed=") == 3 and h.count("data-row='off' data-seed=") == 3
    assert h.index("data-row='on' data-seed='2'") < h.index("data-row='off' data-seed='0'")
    assert "class='memo-ref'" in h and "grid-row:1 / span 3" in h
    # exact values on hover
    assert f"SSIM to the training image {c['ssim_off'][1]:.4f}" in h
    none = tab.grid_html(fake_compare(n_seeds=2, neurons=()))
    assert "data-row='off' data-seed" not in none and tab.NO_NEURONS_OFF in none
    assert "no neurons off" in none
    # a hub-sized image is shrunk for the grid
    big = fake_compare(n_seeds=1, size=512)
    uri = tab._data_uri(big["images_on"][0])
    import base64
    import io

    from PIL import Image

    assert Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).size == (256, 256)


def test_figures_give_exact_values_on_hover():
    from components.memorization import figures as tab
    from components.memorization import table

    r = {
        "layers": ["down0.attn0", "mid.attn0"],
        "z": {"down0.attn0": [0.5, 4.25], "mid.attn0": [1.125]},
        "activation": {"down0.attn0": [0.01, 0.2], "mid.attn0": [0.03]},
        "score": 0.61234,
        "theta_mem": 0.5,
        "memorized": True,
        "max_z": 4.25,
    }
    fig = tab.z_plot(r, found=["down0.attn0:1"])
    tips = [t for tr in fig.data for t in (tr.hovertext or [])]
    assert "down0.attn0:1<br>z = 4.250<br>mean |activation| 0.2" in tips
    assert "down0.attn0:1 (found by NeMo) z = 4.250" in tips
    assert "score 0.6123 · θ_mem 0.5000" in tab.score_html(r)
    hist = table.hist_plot([{"n_neurons": 3}, {"n_neurons": 3}])
    assert "%{y}" in hist.data[0].hovertemplate and "%{x}" in hist.data[0].hovertemplate
