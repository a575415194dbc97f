"""The shared colormaps exist in matplotlib and plotly and run the right way round."""

import matplotlib
import numpy as np
import plotly.colors as pc
import plotly.graph_objects as go

from backend.core import colors


def test_matplotlib_maps_exist_and_signed_is_red_for_positive():
    signed = matplotlib.colormaps[colors.SIGNED_CMAP]
    act = matplotlib.colormaps[colors.ACTIVATION_CMAP]
    hi, lo, mid = signed(1.0), signed(0.0), signed(0.5)
    assert hi[0] > hi[2] and lo[2] > lo[0]  # red top, blue bottom
    assert min(mid[:3]) > 0.9  # white-ish at zero
    lum = [0.2126 * r + 0.7152 * g + 0.0722 * b for r, g, b, _ in act(np.linspace(0, 1, 5))]
    assert all(np.diff(lum) > 0)  # sequential: brighter with the value


def test_plotly_scales_accepted():
    for name in (colors.SIGNED_PLOTLY, colors.ACTIVATION_PLOTLY):
        fig = go.Figure(go.Heatmap(z=[[-1, 0, 1]], colorscale=name))
        assert fig.data[0].colorscale  # validated and expanded by plotly
    scale = pc.get_colorscale(colors.SIGNED_PLOTLY)
    top = pc.unlabel_rgb(pc.convert_colors_to_same_type(scale[-1][1], "rgb")[0][0])
    assert top[0] > top[2]  # red at the positive end


def test_helpers():
    assert colors.signed_limits([-3, 1, np.nan]) == 3.0
    assert colors.signed_limits([]) > 0
    assert colors.signed_colors([1, -1, 0]) == [colors.POSITIVE, colors.NEGATIVE, colors.POSITIVE]


# ----------------------------------------------------------------------------- the shared plotly look
import ast  # noqa: E402
import inspect  # noqa: E402

import pytest  # noqa: E402


def test_qualitative_palette_is_distinct_and_not_black():
    pal = colors.QUALITATIVE
    assert len(set(pal)) == len(pal) >= 6
    for c in pal:  # every colour reads on white and on a dark page: neither black nor white
        r, g, b = (int(c[i : i + 2], 16) for i in (1, 3, 5))
        lum = 0.2126 * r + 0.7152 * g + 0.0722 * b
        assert 40 < lum < 235, c
    assert colors.qualitative(len(pal)) == pal[0]


def test_themed_figure_is_transparent_and_uses_the_palette():
    fig = colors.themed(go.Figure(go.Bar(y=[1, 2])))
    assert colors.is_themed(fig)
    assert fig.layout.paper_bgcolor == fig.layout.plot_bgcolor == "rgba(0,0,0,0)"
    assert list(fig.layout.template.layout.colorway) == list(colors.QUALITATIVE)
    # it survives the JSON the browser gets
    import json

    out = json.loads(fig.to_json())
    assert out["layout"]["paper_bgcolor"] == "rgba(0,0,0,0)"
    assert out["layout"]["template"]["layout"]["font"]["color"] == colors.TEXT
    assert not colors.is_themed(go.Figure(layout=dict(template="plotly")))


def test_cmap_helpers_follow_the_shared_maps():
    assert tuple(colors.cmap_rgb(0.5, colors.SIGNED_CMAP)) >= (230, 230, 230)  # white at zero
    hi, lo = colors.cmap_rgb(1.0, colors.SIGNED_CMAP), colors.cmap_rgb(0.0, colors.SIGNED_CMAP)
    assert hi[0] > hi[2] and lo[2] > lo[0]
    assert colors.cmap_rgb(np.zeros((2, 3)), colors.ACTIVATION_CMAP).shape == (2, 3, 3)
    assert colors.css_gradient(colors.ACTIVATION_CMAP).startswith("linear-gradient(")


def _figures():
    """Every plotly figure builder of the tabs, on small inputs of the shape the backends return."""
    from backend.mathneuro.service import Setting
    from components.adapters import errors as adapter_errors
    from components.adapters import race as adapter_race
    from components.adapters import spectrum as adapter_spectrum
    from components.features import contrast as feature_contrast
    from components.features import figures as feature_figures
    from components.math_neurons import figures as math_figures
    from components.memorization import figures as memorization_figures
    from components.memorization import table as memorization_table
    from components.relevance import figures as relevance_figures
    from components.relevance import heldout as relevance_heldout

    toks = ["<bos>", "good", "film", "label:"]
    res = {
        "tokens": toks,
        "methods": ["mambalrp", "gi"],
        "relevance": {"mambalrp": [0.1, 1.0, -0.2, 0.0], "gi": [0.0, 0.3, 0.1, -0.1]},
    }
    curve = {"grid": [0, 0.5, 1], "morf": [2, 1, 0], "lerf": [2, 2, 0], "sum_r": [1, 2], "logit": [1, 2]}
    hres = {"methods": ["mambalrp", "gi"], "results": {"mambalrp": curve, "gi": curve}, "n": 2}
    top = [
        {"distance": 40, "relevance": 2.0, "token": "key", "position": 1},
        {"distance": 3, "relevance": 0.5, "token": "x", "position": 38},
    ]
    long_res = {"methods": ["mambalrp"], "top_tokens": {"mambalrp": top}, "target": "v"}
    page = {
        "hist_counts": [0, 3, 5, 0],
        "hist_edges": [0.1, 0.2, 0.4, 0.8, 1.6],
        "density": 0.01,
        "concept_scores": {"red": 0.8, "circle": 0.1},
    }
    z = {"layers": ["down0.attn0", "mid.attn0"], "z": {"down0.attn0": [0.5, 4.0], "mid.attn0": [1.0, 0.2]}}
    s = Setting("mathneuro", 0.05, 4, 0.0)
    base = {"math": 0.7, "nonmath": 1.0}
    a = {
        "singular_values": [4.0, 2.0, 1.0, 0.5],
        "residual_singular_values": [1.0, 0.5, 1e-9, 1e-9],
        "rank": 2,
        "layer": "fc2",
        "shape": [4, 4],
        "w_sample": [0.1, -0.2, 0.3],
        "w_res_sample": [0.05, -0.1],
        "w_std": 0.2,
        "w_res_std": 0.1,
    }
    err = {
        "heatmap": {
            "values": [[0.1, None], [0.3, 0.4]],
            "ranks": [2, 4],
            "layers": ["fc1", "fc2"],
            "method": "qpissa-1",
        },
        "rows": [{"layer": "fc1", "loftq-1": 0.1, "loftq-5": 0.2, "qpissa-1": 0.3, "qpissa-5": None}],
        "rank": 4,
    }
    race = {
        ("lora", 0): {"step": [1, 2], "loss": [1.0, 0.5], "grad_norm": [1.0, 0.7]},
        ("pissa", 0): {"step": [1, 2], "loss": [0.9, 0.3], "grad_norm": [1.1, 0.6]},
    }
    contrast_rows = [
        {
            "feature": f,
            "label": lab,
            "mean_a": 1.0,
            "mean_b": 0.1,
            "rate_a": 1.0,
            "rate_b": 0.2,
            "effect": e,
            "p": 1e-6,
            "q": q,
            "significant": q < 0.05,
            "tested": True,
        }
        for f, lab, e, q in ((3, "red", 0.9, 1e-5), (22, "blue", -0.8, 1e-4), (7, "", 0.1, 0.6))
    ]
    return {
        "features.contrast.volcano": lambda: feature_contrast.volcano({"rows": contrast_rows, "alpha": 0.05}),
        "relevance.figures.position_plot": lambda: relevance_figures.position_plot(res, True),
        "relevance.heldout.curves_plot": lambda: relevance_heldout.curves_plot(hres),
        "relevance.heldout.scatter_plot": lambda: relevance_heldout.scatter_plot(hres),
        "relevance.figures.longrange_plot": lambda: relevance_figures.longrange_plot(long_res),
        "relevance.figures.image_plot": lambda: relevance_figures.image_plot(
            {
                "methods": ["mambalrp"],
                "maps": {"mambalrp": [[0.5, -1.0], [0.0, 2.0]]},
                "image": [[0, 1], [1, 0]],
                "pred": "ring",
                "mask": [[True, False], [False, False]],
                "share_in_region": {"mambalrp": 0.2},
            }
        ),
        "features.figures.hist_plot": lambda: feature_figures.hist_plot(page),
        "features.figures.patch_figure": lambda: feature_figures.patch_figure(
            [np.zeros((8, 8, 3), np.uint8)], [np.array([[0.0, 1.0], [2.0, 0.5]])], ["feature 3"]
        ),
        "features.figures.concept_plot": lambda: feature_figures.concept_plot(page),
        "memorization.figures.z_plot": lambda: memorization_figures.z_plot(z, ["down0.attn0:1"]),
        "memorization.table.hist_plot": lambda: memorization_table.hist_plot([{"n_neurons": 2}, {"n_neurons": 3}]),
        "math_neurons.figures.figure2_plot": lambda: math_figures.figure2_plot(base, {"mathneuro": base}, 0.05),
        "math_neurons.figures.curve_plot": lambda: math_figures.curve_plot(
            [{"factor": 0.0, **base}, {"factor": 1.0, **base}], base, s
        ),
        "math_neurons.figures.accuracy_plot": lambda: math_figures.accuracy_plot(
            {
                "method": "mathneuro",
                "k": 3,
                "factor": 0.0,
                "n": 64,
                "math": 0.1,
                "nonmath": 0.9,
                "base_math": 0.7,
                "base_nonmath": 1.0,
            },
            {
                "method": "random",
                "k": 3,
                "factor": 0.0,
                "n": 64,
                "math": 0.7,
                "nonmath": 1.0,
                "base_math": 0.7,
                "base_nonmath": 1.0,
            },
        ),
        "math_neurons.figures.layers_plot": lambda: math_figures.layers_plot({"0": {"fraction": 0.03, "count": 5}}, s),
        "math_neurons.figures.consistency_plot": lambda: math_figures.consistency_plot(
            {"1": {"mean": 0.5, "min": 0.4}, "4": {"mean": 0.9, "min": 0.8}}, s
        ),
        "adapters.spectrum.spectrum_figure": lambda: adapter_spectrum.spectrum_figure(a),
        "adapters.spectrum.histogram_figure": lambda: adapter_spectrum.histogram_figure(a),
        "adapters.errors.heatmap_figure": lambda: adapter_errors.heatmap_figure(err),
        "adapters.errors.bars_figure": lambda: adapter_errors.bars_figure(err),
        "adapters.race.race_figure": lambda: adapter_race.race_figure(race),
    }


def _tab_modules() -> list[str]:
    """Every module of every paper's tab but its guided tour (tested in tests/api/test_tour.py), as
    "<tab>.<module>"."""
    import pkgutil

    from components import tabs
    from tests.conftest import ROOT

    return [
        f"{t.id}.{m.name}"
        for t in tabs()
        if t.paper
        for m in pkgutil.iter_modules([str(ROOT / "components" / t.id)])
        if m.name != "tour"
    ]


def _figure_builders() -> set[str]:
    """'module.function' of every top-level function of the tabs that creates a plotly figure; a
    figure made inside a nested function (an event handler) fails the test: it could skip the look."""
    import importlib

    found = set()
    for name in _tab_modules():
        tree = ast.parse(inspect.getsource(importlib.import_module(f"components.{name}")))
        for top in tree.body:
            for node in ast.walk(top):
                if isinstance(node, ast.Call):
                    f = node.func
                    called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                    if (
                        called in ("Figure", "make_subplots")
                        and getattr(f, "value", None) is not None
                        and getattr(f.value, "id", "") in ("go", "plotly")
                        or called == "make_subplots"
                    ):
                        assert isinstance(top, ast.FunctionDef), f"{name}: a figure outside a function"
                        nested = [
                            n
                            for n in ast.walk(top)
                            if isinstance(n, (ast.FunctionDef, ast.Lambda))
                            and n is not top
                            and node in list(ast.walk(n))
                        ]
                        assert not nested, f"{name}.{top.name}: figure built in a nested handler"
                        found.add(f"{name}.{top.name}")
    return found


def test_every_tab_figure_builder_is_checked():
    assert _figure_builders() == set(_figures())


@pytest.mark.parametrize("name", sorted(_figures()))
def test_every_tab_figure_carries_the_shared_look(name):
    fig = _figures()[name]()
    assert isinstance(fig, go.Figure)
    assert colors.is_themed(fig), name
    # categorical traces use the shared palette (or its neutral / signed ends), never ad-hoc colours
    allowed = {
        c.lower()
        for c in (
            *colors.QUALITATIVE,
            *colors.PAIR,
            colors.NEUTRAL,
            colors.POSITIVE,
            colors.NEGATIVE,
            "#bbbbbb",
            "#ffffff",
        )
    }
    for tr in fig.data:
        for c in (
            getattr(getattr(tr, "marker", None), "color", None),
            getattr(getattr(tr, "line", None), "color", None),
        ):
            cs = c if isinstance(c, (list, tuple)) else [c]
            for x in cs:
                if isinstance(x, str):
                    assert x.lower() in allowed, (name, tr.name, x)
    for tr in fig.data:
        if tr.type == "heatmap":
            assert tr.colorbar is not None and tr.showscale is not False, name
