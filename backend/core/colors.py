"""One look for every figure: a diverging, colour-blind-safe map for signed values (red = positive,
blue = negative, white = zero) and a sequential map for non-negative activations.

Matplotlib names and the equivalent plotly colorscales, so matplotlib PNGs and plotly figures agree:

    from backend.core.colors import SIGNED_CMAP, ACTIVATION_CMAP, signed_limits
    ax.imshow(r, cmap=SIGNED_CMAP, vmin=-m, vmax=m)          # m = signed_limits(r)
    go.Heatmap(z=r, colorscale=SIGNED_PLOTLY, zmid=0)

RdBu (ColorBrewer) stays readable for the common colour-vision deficiencies; reversed so that red
means "pushes the output up". viridis is perceptually uniform and colour-blind safe.
"""
from __future__ import annotations

import numpy as np

SIGNED_CMAP = "RdBu_r"          # matplotlib: red = positive, blue = negative
ACTIVATION_CMAP = "viridis"     # matplotlib: sequential, for values >= 0
SIGNED_PLOTLY = "RdBu_r"        # plotly names accept the `_r` suffix as well
ACTIVATION_PLOTLY = "Viridis"

# Two categorical colours for "method A vs method B" lines (Okabe–Ito orange / blue) and a neutral.
PAIR = ("#E69F00", "#0072B2")
NEUTRAL = "#7f7f7f"
POSITIVE = "#b2182b"   # the RdBu_r end colours, for bars of signed values
NEGATIVE = "#2166ac"


def signed_limits(values, floor: float = 1e-12) -> float:
    """The symmetric colour limit for signed values: max |v| (so zero sits on white)."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    return float(max(np.abs(a).max() if a.size else 0.0, floor))


def signed_colors(values) -> list[str]:
    """Bar colours for signed values: POSITIVE for >= 0, NEGATIVE below."""
    return [POSITIVE if float(v) >= 0 else NEGATIVE for v in np.asarray(values, dtype=float).ravel()]


__all__ = ["SIGNED_CMAP", "ACTIVATION_CMAP", "SIGNED_PLOTLY", "ACTIVATION_PLOTLY", "PAIR", "NEUTRAL",
           "POSITIVE", "NEGATIVE", "signed_limits", "signed_colors"]
