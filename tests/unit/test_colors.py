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
    assert hi[0] > hi[2] and lo[2] > lo[0]          # red top, blue bottom
    assert min(mid[:3]) > 0.9                       # white-ish at zero
    lum = [0.2126 * r + 0.7152 * g + 0.0722 * b for r, g, b, _ in act(np.linspace(0, 1, 5))]
    assert all(np.diff(lum) > 0)                    # sequential: brighter with the value


def test_plotly_scales_accepted():
    for name in (colors.SIGNED_PLOTLY, colors.ACTIVATION_PLOTLY):
        fig = go.Figure(go.Heatmap(z=[[-1, 0, 1]], colorscale=name))
        assert fig.data[0].colorscale  # validated and expanded by plotly
    scale = pc.get_colorscale(colors.SIGNED_PLOTLY)
    top = pc.unlabel_rgb(pc.convert_colors_to_same_type(scale[-1][1], "rgb")[0][0])
    assert top[0] > top[2]                          # red at the positive end


def test_helpers():
    assert colors.signed_limits([-3, 1, np.nan]) == 3.0
    assert colors.signed_limits([]) > 0
    assert colors.signed_colors([1, -1, 0]) == [colors.POSITIVE, colors.NEGATIVE, colors.POSITIVE]
